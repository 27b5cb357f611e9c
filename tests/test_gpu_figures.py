"""benchmarks/gpu.sh, which cannot run here without a GPU: it refuses clearly without CUDA, and its
JSON collector reads every figure from lines in the formats its three scripts print."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: gpu.sh would run")
def test_gpu_sh_without_cuda_exits_2_and_says_why(tmp_path):
    done = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu.sh"), str(tmp_path / "out.json")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no CUDA device" in done.stderr
    assert not (tmp_path / "out.json").exists()


def write_logs(folder: Path, ks=(1, 8, 32, 128)) -> None:
    """Lines built with the very f-strings of packed_throughput.py, default_study.py, dci_speed.py."""
    packed = ["# NVIDIA H100 80GB HBM3; torch 2.13.0; 16 CPU threads; load 0.1; burgess β-VAE, batch 64, "
              "64 px, 30 timed steps per model"]
    for k in ks:
        mode, rate, base = "vmap", 1000.0 * k, 900.0
        packed.append(f"K={k:<4} separate{'(1 model)'}: {base:8.0f} img/s (rounds: 900, 901, 899)")
        packed.append(f"K={k:<4} packed-{mode:<5}: {rate:8.0f} img/s   ratio {rate / base:5.2f} "
                      f"(rounds: {rate:.0f})"
                      + f"   {0.5 * k:6.1f} TFLOP/s, MFU {0.0075 * k:.1%} of fp32 peak, "
                      f"{0.0005 * k:.1%} of tensor-core peak")
    (folder / "packed_throughput.txt").write_text("\n".join(packed) + "\n")
    (folder / "default_study.txt").write_text(
        "machine: x86_64, 16 cores, 3.11.7, torch 2.13.0, ray 2.60.0\ncommand: -m sweeps.paper_grid\n"
        f"wall time, Ray start-up included: {97.25:.1f} s for 4 trials\ntrial_key  split\nab  blank_side\n")
    n_jobs = None
    (folder / "dci_speed.txt").write_text(
        "DCI on 10000 train / 5000 test points, 10 codes\n"
        f"gbt      n_jobs={1!s:<8}  {120.0:8.1f} s   D=0.1000  (CPU time 119.0 s)\n"
        f"gbt      n_jobs={n_jobs!s:<8}  {12.0:8.1f} s   D=0.1000  (load average now 1.0)\n"
        f"hist_gbt n_jobs={n_jobs!s:<8}  {3.0:8.1f} s   D=0.1010  |dD|=0.0010\n")


def collect(folder: Path, out: Path):
    script = REPO / "benchmarks" / "gpu_figures.py"
    return subprocess.run([sys.executable, str(script), str(folder), str(out)], capture_output=True,
                          text=True, timeout=60)


def test_gpu_figures_reads_every_figure_into_one_json(tmp_path):
    write_logs(tmp_path)
    assert collect(tmp_path, tmp_path / "figures.json").returncode == 0
    figures = json.loads((tmp_path / "figures.json").read_text())
    k32 = figures["packed_throughput"]["k"]["32"]
    assert k32 == {"one_model_images_per_second": 900.0, "packed_images_per_second": 32000.0,
                   "ratio_over_one_model": 35.56, "tflops": 16.0, "mfu_of_fp32_peak": 0.24,
                   "mfu_of_tensor_core_peak": 0.016}
    assert sorted(figures["packed_throughput"]["k"], key=int) == ["1", "8", "32", "128"]
    assert figures["default_study"]["wall_seconds"] == 97.2 and figures["default_study"]["trials"] == 4
    assert figures["dci"] == {"setup": "DCI on 10000 train / 5000 test points, 10 codes",
                              "gbt_serial_seconds": 120.0, "gbt_parallel_seconds": 12.0,
                              "hist_gbt_seconds": 3.0}


def test_gpu_figures_names_a_missing_figure(tmp_path):
    write_logs(tmp_path, ks=(1, 8, 32))
    done = collect(tmp_path, tmp_path / "figures.json")
    assert done.returncode != 0 and "K = ['128']" in done.stderr
