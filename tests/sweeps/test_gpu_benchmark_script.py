"""benchmarks/gpu.sh and its driver, benchmarks/gpu_figures.py: without CUDA it refuses clearly
(unless --cpu-smoke, whose every part CI runs: .ci/gpu_smoke); its measurements record what they
claim, a measurement that fails is recorded and fails the part, and the deadline's watchdog marks
what it cut as not run."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import check_gpu_figures  # noqa: E402
import gpu_figures  # noqa: E402

# gpu.sh runs `python3`, as on the lent machine: this test's interpreter first on the PATH, so that it
# is the one with torch whether or not its virtual environment was activated
WITH_THIS_PYTHON = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable),
                                                            os.environ.get("PATH", "")])}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: gpu.sh would run")
def test_gpu_sh_without_cuda_exits_2_and_says_why(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu.sh"), str(out), "--part", "1"],
                          capture_output=True, text=True, timeout=120, env=WITH_THIS_PYTHON)
    assert done.returncode == 2 and "no CUDA device" in done.stdout and "--cpu-smoke" in done.stdout
    assert not (out / "gpu_figures_part1.json").exists()
    # what it printed is in the log under OUT, which the lent machine brings back; versions first
    log = (out / "gpu.log").read_text()
    assert "no CUDA device" in log and "torch " in log and log.index("torch ") < log.index("no CUDA device")


def test_gpu_sh_refuses_a_run_without_an_output_folder_or_with_an_unknown_part(tmp_path):
    script = str(REPO / "benchmarks" / "gpu.sh")
    for arguments in ([], [str(tmp_path), "--part", "5"]):
        done = subprocess.run(["bash", script, *arguments], capture_output=True, text=True, timeout=60,
                              env=WITH_THIS_PYTHON)
        assert done.returncode == 2 and "gpu.sh" in done.stderr


def test_the_peak_table_knows_each_h100_and_the_precisions():
    assert gpu_figures.peak_of("NVIDIA H100 80GB HBM3") == {"bf16": 989.0, "tf32": 494.0, "fp32": 67.0}
    assert gpu_figures.peak_of("NVIDIA H100 PCIe")["bf16"] == 756.0
    assert gpu_figures.peak_of("NVIDIA H200")["tf32"] == 494.0
    assert gpu_figures.peak_of("NVIDIA A100-SXM4-80GB")["bf16"] == 312.0
    assert gpu_figures.peak_of("Some Future GPU") is None
    result = gpu_figures.with_mfu({"images_per_second": 1e6}, 2e8, "bf16", {"bf16": 1000.0}, {"bf16": 800.0})
    assert result["model_tflops"] == pytest.approx(200.0) and result["mfu"] == pytest.approx(0.2)
    assert result["fraction_of_measured_matmul"] == pytest.approx(0.25)
    peaks = {"bf16": 1000.0, "tf32": 500.0}
    tf32 = gpu_figures.with_mfu({"images_per_second": 1e6}, 2e8, "tf32", peaks, None)
    assert tf32["mfu"] == pytest.approx(0.4) and tf32["mfu_of_bf16_peak"] == pytest.approx(0.2)
    unknown = gpu_figures.with_mfu({"images_per_second": 1e6}, 2e8, "bf16", {}, {"bf16": 800.0})
    assert unknown["mfu"] == gpu_figures.UNKNOWN_PEAK and unknown["fraction_of_measured_matmul"] == 0.25


def test_bytes_per_member_is_the_least_squares_slope_over_k():
    points = [(8, 8 * 3e6 + 5e8 + 1), (16, 16 * 3e6 + 5e8 - 1), (32, 32 * 3e6 + 5e8)]
    per_member, fixed = gpu_figures.slope(points)
    assert per_member == pytest.approx(3e6, rel=1e-6) and fixed == pytest.approx(5e8, rel=1e-6)


def test_the_throughput_measurement_runs_the_plain_path_and_a_pack_against_it():
    sizes = gpu_figures.SIZES["cpu-smoke"]
    data = gpu_figures.Data(sizes["images"])
    cpu = torch.device("cpu")
    threads = torch.get_num_threads()
    try:
        burgess = gpu_figures.NETWORKS["burgess"]
        plain = gpu_figures.throughput(cpu, sizes, burgess, 1, "bf16", data, None, None)
        packed = gpu_figures.throughput(cpu, sizes, burgess, 2, "bf16", data, None, None)
    finally:
        torch.set_num_threads(threads)
    assert plain["members"] == 1 and plain["images_per_second"] > 0 and plain["bf16"] is False  # CPU: float32
    assert plain["mfu"] == gpu_figures.NOT_ON_CPU and plain["host_enqueue_ms_per_step"] > 0
    assert packed["members"] == 2 and packed["mode"] == "vmap" and packed["vmapped_group_sizes"] == [2]
    assert packed["flops_per_image"] == plain["flops_per_image"] > 0


def _part(tmp_path, *arguments, env=None) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_figures.py"), str(tmp_path),
                           "--cpu-smoke", *arguments], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})
    part = arguments[arguments.index("--part") + 1]
    return done.returncode, json.loads((tmp_path / f"gpu_figures_part{part}.json").read_text())


def test_a_failing_measurement_is_recorded_and_fails_the_part(tmp_path, monkeypatch):
    def broken(*_arguments, **_keywords):
        raise RuntimeError("a measurement that rotted")

    monkeypatch.setattr(gpu_figures, "throughput", broken)
    # The part's deadline counts from the module's import, the start of gpu.sh's own process; here
    # that was this session's collection, and a deadline already past would end this process
    # (os._exit) with its pytest worker: the part's clock starts now, as in a fresh process.
    monkeypatch.setattr(gpu_figures, "STARTED", time.time())
    threads = torch.get_num_threads()
    # another test file in this process may have imported Ray already: the part must add none
    already = set(gpu_figures.missing_packages_imported())
    try:
        assert gpu_figures.main([str(tmp_path), "--part", "3", "--cpu-smoke"]) == 1
    finally:
        torch.set_num_threads(threads)  # the smoke runs on one thread
    figures = json.loads((tmp_path / "gpu_figures_part3.json").read_text())
    assert "a measurement that rotted" in figures["errors"]["switches.compile.off"]
    assert figures["switches"]["compile"]["off"] == {"error": "RuntimeError: a measurement that rotted"}
    assert figures["mode"] == "cpu-smoke" and set(figures["imported_missing_packages"]) <= already
    assert "part 3: switches.compile.off: error: RuntimeError: a measurement that rotted" \
        in check_gpu_figures.check(tmp_path, [3])


def test_the_deadline_counts_from_the_start_and_marks_every_figure_not_reached(tmp_path):
    """A part whose start (gpu.sh's, passed on) is already past its deadline: the watchdog writes
    every expected figure as "not run: deadline" and exits 3; the checker fails it."""
    started = {"DISGEN_GPU_FIGURES_STARTED": str(time.time() - 100)}
    rc, figures = _part(tmp_path, "--part", "3", "--deadline", "50", env=started)
    assert rc == 3 and figures["stopped"].startswith("deadline")
    expected = gpu_figures.expected_keys(3, gpu_figures.SIZES["cpu-smoke"])
    values = [check_gpu_figures._found(figures, key)[0] for key in expected]
    assert all(isinstance(v, str) for v in values)
    assert any(v.startswith(gpu_figures.DEADLINE) for v in values)
    assert check_gpu_figures.check(tmp_path, [3])
