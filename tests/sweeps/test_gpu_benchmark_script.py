"""benchmarks/gpu.sh and its driver, benchmarks/gpu_figures.py: without CUDA it refuses clearly
(unless --cpu-smoke, which CI runs whole: .ci/run); its steps measure and record what they claim,
and a step that fails is recorded and fails the run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_figures  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: gpu.sh would run")
def test_gpu_sh_without_cuda_exits_2_and_says_why(tmp_path):
    done = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu.sh"), str(tmp_path / "out.json")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no CUDA device" in done.stderr and "--cpu-smoke" in done.stderr
    assert not (tmp_path / "out.json").exists()


def test_the_peak_table_knows_each_h100_and_the_precisions():
    assert gpu_figures.peak_of("NVIDIA H100 80GB HBM3") == {"bf16": 989.0, "tf32": 494.0, "fp32": 67.0}
    assert gpu_figures.peak_of("NVIDIA H100 PCIe")["bf16"] == 756.0
    assert gpu_figures.peak_of("NVIDIA H200")["tf32"] == 494.0
    assert gpu_figures.peak_of("Some Future GPU") is None
    result = gpu_figures.with_mfu({"images_per_second": 1e6}, 2e8, "bf16", {"bf16": 1000.0}, {"bf16": 800.0})
    assert result["model_tflops"] == pytest.approx(200.0) and result["mfu"] == pytest.approx(0.2)
    assert result["fraction_of_measured_matmul"] == pytest.approx(0.25)


@pytest.mark.slow
def test_the_throughput_steps_measure_the_plain_path_and_packs_against_it():
    sizes = gpu_figures.SIZES["cpu-smoke"]
    images = gpu_figures.synthetic_images(sizes["images"])
    cpu = torch.device("cpu")
    plain = gpu_figures.step_plain(cpu, sizes, None, None, images)
    assert set(plain) == {"flops_per_image", "fp32", "tf32", "bf16"}
    assert plain["bf16"]["images_per_second"] > 0 and plain["bf16"]["bf16"] is False  # CPU: float32
    packed = gpu_figures.step_packed(cpu, sizes, None, None, images, plain)
    two = packed["2_bf16"]
    assert two["members"] == 2 and two["mode"] == "vmap" and two["vmapped_group_sizes"] == [2]
    assert two["over_plain_same_precision"] == pytest.approx(
        two["images_per_second"] / plain["bf16"]["images_per_second"])


def test_a_failing_step_is_recorded_and_fails_the_run(tmp_path, monkeypatch):
    def broken(*_arguments):
        raise RuntimeError("a step that rotted")

    monkeypatch.setattr(gpu_figures, "step_plain", broken)
    out = tmp_path / "figures.json"
    skip = ["packed", "dittadi", "pytest_gpu", "evaluation", "default_study"]
    threads = torch.get_num_threads()
    try:
        assert gpu_figures.main(["--cpu-smoke", str(out), "--skip", *skip]) == 1
    finally:
        torch.set_num_threads(threads)  # the smoke runs on one thread
    figures = json.loads(out.read_text())
    assert "a step that rotted" in figures["errors"]["plain"] and figures["plain"] is None
    assert figures["packed"] == {"skipped": "--skip"} and figures["mode"] == "cpu-smoke"
