"""The device module: the GPU settings and their switches, and rows drawn ahead of the steps."""

import numpy as np
import pytest
import torch

from models.device import GPUSettings, Rows, fits_resident, resident_images


def test_gpu_settings_are_on_by_default_but_compile_and_each_has_a_switch():
    assert GPUSettings() == GPUSettings(tf32=True, cudnn_benchmark=True, channels_last=True, fused_adam=True,
                                        resident_data=True, compile=False, memory_share=1.0)
    settings = GPUSettings.parse("tf32=off, cudnn-benchmark=off,channels_last=0,fused_adam=false,"
                                 "resident_data=off,compile=on,memory_share=0.25")
    assert settings == GPUSettings(False, False, False, False, False, True, 0.25)
    assert GPUSettings.parse("") == GPUSettings.parse(None) == GPUSettings()


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
