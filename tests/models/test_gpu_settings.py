"""The device module: the GPU settings and their switches, and rows drawn ahead of the steps."""

import numpy as np
import pytest
import torch
from process_state import restore_torch_flags, torch_flags

from models.device import GPUSettings, Rows, fits_resident, resident_images


def test_gpu_settings_are_on_by_default_but_the_unmeasured_ones_and_each_has_a_switch():
    assert GPUSettings() == GPUSettings(tf32=True, cudnn_benchmark=True, channels_last=True, fused_adam=True,
                                        resident_data=True, compile=False, memory_share=1.0,
                                        device_sampling=False, cuda_graph=False)
    settings = GPUSettings.parse("tf32=off, cudnn-benchmark=off,channels_last=0,fused_adam=false,"
                                 "resident_data=off,compile=on,memory_share=0.25,device-sampling=on,"
                                 "cuda_graph=true")
    assert settings == GPUSettings(False, False, False, False, False, True, 0.25, True, True)
    assert GPUSettings.parse("") == GPUSettings.parse(None) == GPUSettings()


def test_the_environment_names_the_step_switches(monkeypatch):
    monkeypatch.setenv("DISGEN_GPU_SETTINGS", "device_sampling=on,cuda_graph=on")
    settings = GPUSettings.from_environment()
    assert settings.device_sampling and settings.cuda_graph and settings.tf32 and not settings.compile


@pytest.mark.parametrize("text, message", [
    ("tf33=off", "GPU setting 'tf33': unknown; choose from tf32, "),
    ("tf32=maybe", "GPU setting tf32: expected on or off; got 'maybe'"),
    ("memory_share=lots", "GPU setting memory_share: expected a number; got 'lots'"),
    ("memory_share=2", r"memory_share: must be in \(0, 1\]"),
])
def test_bad_gpu_settings_name_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        GPUSettings.parse(text)


def test_settings_leave_a_cpu_run_alone():
    before = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32)
    GPUSettings(tf32=True, cudnn_benchmark=True).apply(torch.device("cpu"))
    assert (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32) == before
    images = np.zeros((4, 1, 8, 8), np.uint8)
    assert resident_images(images, torch.device("cpu")) is images


def test_a_dataset_is_uploaded_when_it_takes_at_most_half_the_share():
    assert fits_resident(50, 100) and not fits_resident(51, 100)


def test_rows_are_the_same_on_the_host_and_the_device_and_slice_together():
    rows = Rows(np.arange(12).reshape(3, 4), torch.device("cpu"))
    assert len(rows) == 3 and rows.on_device.dtype == torch.int64
    step = rows[1]
    assert step.host.tolist() == step.on_device.tolist() == [4, 5, 6, 7]
    assert step[1:3].host.tolist() == step[1:3].on_device.tolist() == [5, 6]


@pytest.fixture
def cuda_calls(monkeypatch):
    """``apply`` on a CUDA device without one: the process-wide flags restored afterwards, the
    memory cap recorded instead of set.

    The flags are saved and set back by value, not with ``monkeypatch.setattr``: they are properties
    of torch's backend modules (``torch.backends.cuda.matmul`` is a ``cuBLASModule``), not entries of
    an instance's ``__dict__``, and pytest 9's monkeypatch undoes such an attribute with ``delattr``,
    which those modules refuse."""
    saved = torch_flags()
    calls = []
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                        lambda share, device=None: calls.append((share, device)))
    yield calls
    restore_torch_flags(saved)


def test_a_share_below_one_caps_the_processs_gpu_memory(cuda_calls):
    cuda = torch.device("cuda")
    GPUSettings(memory_share=0.25).apply(cuda)
    assert cuda_calls == [(0.25, cuda)]
    GPUSettings().apply(cuda)  # a whole GPU: no cap
    GPUSettings(memory_share=0.25).apply(torch.device("cpu"))
    assert cuda_calls == [(0.25, cuda)]


def test_every_trainer_applies_its_settings_on_its_device(monkeypatch):
    from types import SimpleNamespace

    from models import ModelConfig, build_trainer
    from models.packed import PackedTrainer
    from sweeps import trainable

    applied = []
    monkeypatch.setattr(GPUSettings, "apply", lambda self, device: applied.append((self, device)))
    images, rows = np.zeros((8, 1, 64, 64), np.uint8), np.arange(8)
    classes = np.zeros((8, 4), np.int64)
    config = ModelConfig(steps=1, batch_size=4)
    settings = GPUSettings(memory_share=0.5)
    build_trainer(config, images, classes, None, rows, "cpu", settings)
    assert applied == [(settings, torch.device("cpu"))]
    applied.clear()
    PackedTrainer([config, config], images, rows, device="cpu", settings=settings)
    assert applied and all(entry == (settings, torch.device("cpu")) for entry in applied)
    # a sweep's trial: one model (the plain path) or a pack, with the trial's settings
    data = SimpleNamespace(images=images, classes=classes, factor_space=None)
    for members in (1, 2):
        applied.clear()
        trainable._build([SimpleNamespace(model=config)] * members, data, [(None, rows)] * members, settings)
        assert applied and all(entry == (settings, torch.device("cpu")) for entry in applied)
