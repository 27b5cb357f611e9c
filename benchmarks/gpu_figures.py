"""Every GPU figure the project claims, measured in one run into one JSON file (``benchmarks/gpu.sh``).

    python benchmarks/gpu_figures.py OUT.json               # on a CUDA machine, under 10 minutes
    python benchmarks/gpu_figures.py --cpu-smoke OUT.json   # every step at tiny sizes on CPU (CI)

Steps, in this order, each recorded under its name in the JSON (the file is rewritten after every
step, so a run cut short keeps what it measured; a step that fails records its error and the run
exits 1, as does a step left no time by the budget: 570 s on a GPU, 600 s for the smoke):

- ``matmul``: the device's measured dense matmul rate in bf16 and TF32 (8192², cuda events), the
  ceiling next to the datasheet peak;
- ``plain``: one burgess β-VAE at batch 64 on the plain path (``Trainer``, K = 1), in float32
  (TF32 off), TF32 and bf16 autocast, images/s and MFU;
- ``packed``: packs of K = 8, 32, 64 and 128 burgess β-VAEs (vmap, bf16, the defaults) and K = 32
  in TF32: aggregate images/s, its ratio to the plain path in the same precision, MFU, and the
  peak memory against the sizing estimate (``models.packed.pack_memory_bytes``);
- ``dittadi``: Dittadi et al.'s network at 128 px (64 in the smoke), 3 channels, K = 1; the pack
  size the sizing gives on this GPU, and a pack of that size (at most 32) stepped to check its
  memory;
- ``pytest_gpu``: ``python -m pytest -m gpu`` over the test files that hold ``gpu`` tests (counts
  and the summary);
- ``evaluation``: seconds per model of ``analysis.evaluation.evaluate`` at ``n_metric`` 10,000
  (every metric, DCI with gbt; the smoke: hist_gbt), several models in parallel on the CPU cores,
  as CPU-only evaluation tasks would run them while the GPU trains;
- ``default_study``: ``benchmarks/default_study.py`` (the default study end to end, Ray included).

MFU is the model FLOPs rate (forward and backward FLOPs of the encoder and decoder per image,
counted by ``sweeps.costs.training_flops_per_image``, times images/s) over the device's dense
peak for the precision the run used: bf16 runs against the bf16 peak, TF32 runs against the TF32
peak, float32 runs against the float32 (no tensor core) peak. ``PEAK_TFLOPS`` holds NVIDIA's
datasheet figures (dense, no sparsity).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from packed_throughput import measure_pack, measure_plain, pack_configs, synthetic_images  # noqa: E402

from models import GPUSettings  # noqa: E402
from models.packed import dataset_bytes, max_pack_size, member_memory_bytes  # noqa: E402

# Dense peak TFLOP/s, NVIDIA's datasheets (without sparsity), by a fragment of the device's name
# (the first that matches). Measured on this workplace's H100 SXM (2026-11): bf16 matmul about
# 790-800 TFLOP/s, i.e. ~80% of the datasheet peak; ``matmul`` measures it again on every run.
PEAK_TFLOPS = [
    ("H100 PCIe", {"bf16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    ("H100 NVL", {"bf16": 835.0, "tf32": 418.0, "fp32": 60.0}),
    ("H100", {"bf16": 989.0, "tf32": 494.0, "fp32": 67.0}),  # SXM5
    ("H200", {"bf16": 989.0, "tf32": 494.0, "fp32": 67.0}),
    ("A100", {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L4", {"bf16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("A10", {"bf16": 125.0, "tf32": 62.5, "fp32": 31.2}),
]

# Sizes of the two modes: the GPU run's, and the CPU smoke's (every step, tiny)
SIZES = {
    "gpu": dict(batch=64, images=20_000, steps=50, rounds=3, warmup=10, ks=(8, 32, 64, 128), precision_k=32,
                dittadi_images=2_000, dittadi_steps=10, dittadi_pack_steps=3, dittadi_pack_most=32,
                dittadi_warmup=2,
                eval_models=4, eval_images=60_000, n_metric=10_000, n_nll=10_000, eval_train_steps=200,
                dci_estimator="gbt", dittadi_size=128, dittadi_batch=64, budget_seconds=570,
                study_scale="smoke"),
    "cpu-smoke": dict(batch=8, images=256, steps=2, rounds=1, warmup=1, ks=(2,), precision_k=2,
                      dittadi_images=8, dittadi_steps=1, dittadi_pack_steps=1, dittadi_pack_most=2,
                      dittadi_warmup=0,
                      eval_models=2, eval_images=2_000, n_metric=200, n_nll=100, eval_train_steps=2,
                      dci_estimator="hist_gbt", dittadi_size=64, dittadi_batch=2, budget_seconds=600,
                      study_scale="tiny"),
}


def peak_of(name: str) -> dict | None:
    return next((peak for fragment, peak in PEAK_TFLOPS if fragment in name), None)


def flops_per_image(architecture: str, image_size: int, channels: int, latent_dim: int = 10) -> float:
    from sweeps.costs import training_flops_per_image

    return training_flops_per_image(architecture, image_size, channels, latent_dim)


def with_mfu(result: dict, flops: float, precision: str, peak: dict | None, measured: dict | None) -> dict:
    """``result`` with its model TFLOP/s and MFU against the datasheet peak and the measured
    matmul rate of ``precision``."""
    achieved = flops * result["images_per_second"] / 1e12
    result.update(precision=precision, model_tflops=achieved)
    if peak:
        result["mfu"] = achieved / peak[precision]
        result["peak_tflops"] = peak[precision]
    if measured and precision in measured:
        result["fraction_of_measured_matmul"] = achieved / measured[precision]
    return result


# -- the steps ----------------------------------------------------------------------------------


def step_matmul(device: torch.device, sizes: dict) -> dict:
    if device.type != "cuda":
        return {"skipped": "no CUDA device"}
    out = {}
    n = 8192
    for precision, dtype in (("bf16", torch.bfloat16), ("tf32", torch.float32)):
        torch.backends.cuda.matmul.allow_tf32 = True
        a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
        for _ in range(3):
            a @ b
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(10):
            start.record()
            a @ b
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        out[precision] = 2 * n**3 / float(np.median(times)) / 1e12
        del a, b
    torch.cuda.empty_cache()
    return out


# precision → (the config's bf16, the GPU settings): float32 without and with TF32, bf16 autocast
PRECISIONS = {"fp32": (False, GPUSettings(tf32=False)), "tf32": (False, GPUSettings()),
              "bf16": (None, GPUSettings())}


def step_plain(device, sizes, peak, measured, images) -> dict:
    flops = flops_per_image("burgess", 64, 1)
    out = {"flops_per_image": flops}
    total = sizes["warmup"] + sizes["steps"] * sizes["rounds"] + 1
    for precision, (bf16, settings) in PRECISIONS.items():
        config = pack_configs(1, batch_size=sizes["batch"], steps=total, bf16=bf16)[0]
        result = measure_plain(config, images, device, sizes["steps"], sizes["rounds"], sizes["warmup"],
                               settings)
        used = precision if device.type == "cuda" else "fp32"
        out[precision] = with_mfu(result, flops, used, peak, measured)
    return out


def step_packed(device, sizes, peak, measured, images, plain: dict) -> dict:
    flops = flops_per_image("burgess", 64, 1)
    out = {}
    total = sizes["warmup"] + sizes["steps"] * sizes["rounds"] + 1
    runs = [(k, "bf16") for k in sizes["ks"]] + [(sizes["precision_k"], "tf32")]
    for k, precision in runs:
        bf16, settings = PRECISIONS[precision]
        configs = pack_configs(k, batch_size=sizes["batch"], steps=total, bf16=bf16)
        result = measure_pack(configs, images, device, sizes["steps"], sizes["rounds"], sizes["warmup"],
                              settings=settings)
        result = with_mfu(result, flops, precision if device.type == "cuda" else "fp32", peak, measured)
        one = plain.get(precision, {}).get("images_per_second")
        if one:
            result["over_plain_same_precision"] = result["images_per_second"] / one
        out[f"{k}_{precision}"] = result
        print(f"  K={k} {precision}: {result['images_per_second']:.0f} img/s, "
              f"{result.get('over_plain_same_precision', float('nan')):.1f}× the plain path", file=sys.stderr)
    return out


def step_dittadi(device, sizes, peak, measured) -> dict:
    size = sizes["dittadi_size"]
    shape = dict(architecture="dittadi", image_size=size, channels=3, batch_size=sizes["dittadi_batch"])
    images = synthetic_images(sizes["dittadi_images"], 3, size)
    flops = flops_per_image("dittadi", size, 3)
    warmup = sizes["dittadi_warmup"]
    total = warmup + sizes["dittadi_steps"] * sizes["rounds"] + 1
    config = pack_configs(1, steps=total, **shape)[0]
    plain = measure_plain(config, images, device, sizes["dittadi_steps"], sizes["rounds"], warmup)
    out = {"flops_per_image": flops, "member_estimate_bytes": member_memory_bytes(config),
           "plain": with_mfu(plain, flops, "bf16" if plain["bf16"] else "fp32", peak, measured)}
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
    # D21's training set at 128 px: 3DShapes-sized (480,000 RGB images), 23.6 GB, counted when it
    # fits in half the free memory (as a trial would upload it)
    d21 = dataset_bytes(480_000, 3, size)
    fits = max_pack_size(config, device, free_bytes=free or 8 * 2**30, dataset=d21)
    out.update(pack_size_estimate=fits, pack_size_free_bytes=free, d21_dataset_bytes=d21)
    k = max(2, min(fits, sizes["dittadi_pack_most"]))
    configs = pack_configs(k, steps=warmup + sizes["dittadi_pack_steps"] + 1, **shape)
    pack = measure_pack(configs, images, device, sizes["dittadi_pack_steps"], 1, warmup)
    out["pack"] = with_mfu(pack, flops, "bf16" if pack["bf16"] else "fp32", peak, measured)
    return out


def _evaluate_one(job: dict, results) -> None:
    """One model's evaluation in its own process (the CPU-only task of a sweep), its timings put
    on ``results``. A process of its own, not a daemonic pool worker, so DCI's joblib may use
    processes of its own as in a trial."""
    began = time.time()
    torch.set_num_threads(1)
    from analysis.evaluation import EvaluationConfig, evaluate
    from data_pipeline import get_split, load_procedural
    from models import ModelConfig, build

    data = load_procedural("dsprites", job["images"], seed=0)
    split = get_split("dsprites", "blank_side")
    model = build(ModelConfig(**job["config"]))
    model.load_state_dict(job["weights"])
    config = EvaluationConfig(n_nll=job["n_nll"], n_metric=job["n_metric"],
                              dci_estimator=job["dci_estimator"])
    started = time.perf_counter()
    metrics = evaluate(model, data, split, config, seed=job["seed"], n_jobs=job["n_jobs"])
    seconds = time.perf_counter() - started
    # joblib's process workers (DCI's parallel fits) would otherwise keep this process alive until
    # their idle timeout (300 s), and the pool's shutdown with it
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)
    results.put({"seed": job["seed"], "seconds": seconds, "began": began, "ended": time.time(),
                 "dci_disentanglement": metrics.get("dci_disentanglement")})


def step_evaluation(device, sizes, seconds_left: float) -> dict:
    from data_pipeline import get_split, load_procedural
    from models import ModelConfig, Trainer, build

    data = load_procedural("dsprites", sizes["eval_images"], seed=0)
    train, _ = get_split("dsprites", "blank_side").train_test_indices(data.classes, data.factor_space)
    cores = os.cpu_count() or 1
    models, jobs = sizes["eval_models"], []
    for seed in range(models):
        fields = dict(steps=sizes["eval_train_steps"], batch_size=sizes["batch"], seed=seed)
        config = ModelConfig(**fields)
        trainer = Trainer(build(config), data.images, train, config, device)
        trainer.advance(config.steps)
        weights = {k: v.detach().cpu().contiguous() for k, v in trainer.model.state_dict().items()}
        jobs.append({"config": fields, "weights": weights, "images": sizes["eval_images"], "seed": seed,
                     "n_nll": sizes["n_nll"], "n_metric": sizes["n_metric"],
                     "n_jobs": max(1, cores // models), "dci_estimator": sizes["dci_estimator"]})
    started, began = time.perf_counter(), time.time()
    spawn = multiprocessing.get_context("spawn")
    queue = spawn.Queue()
    workers = [spawn.Process(target=_evaluate_one, args=(job, queue)) for job in jobs]
    for worker in workers:
        worker.start()
    results = []
    try:
        for _ in workers:
            results.append(queue.get(timeout=max(1.0, seconds_left - (time.perf_counter() - started))))
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.terminate()
    wall = time.perf_counter() - started
    results.sort(key=lambda r: r["seed"])
    return {"models": models, "cores": cores, "n_jobs_each": max(1, cores // models),
            "n_metric": sizes["n_metric"], "n_nll": sizes["n_nll"], "dataset_images": sizes["eval_images"],
            "wall_seconds": wall,
            "wall_seconds_per_model": wall / models, "dci_estimator": sizes["dci_estimator"],
            "seconds_each": [r["seconds"] for r in results],
            # when each worker process began (imports, data) and ended, from the pool's start
            "worker_began_ended": [(r["began"] - began, r["ended"] - began) for r in results]}


def gpu_test_files() -> list[str]:
    """The test files that hold ``gpu``-marked tests: pytest collects only these (every test of the
    others would be deselected by ``-m gpu``, after importing them all)."""
    return sorted(str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("test_*.py")
                  if "mark.gpu" in path.read_text())


def step_pytest_gpu(device, sizes, seconds_left: float) -> dict:
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider",
               *gpu_test_files()]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=max(1.0, seconds_left))
    tail = (done.stdout + done.stderr).strip().splitlines()
    counts = {name: int(n) for n, name in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)",
                                                      tail[-1] if tail else "")}
    result = {"returncode": done.returncode, "seconds": time.perf_counter() - started, **counts,
              "summary": tail[-1] if tail else "", "tail": "\n".join(tail[-40:])}
    if done.returncode not in (0, 5) or counts.get("failed") or counts.get("error") or counts.get("errors"):
        raise RuntimeError(f"pytest -m gpu: {result['summary']}\n{result['tail']}")
    return result


def step_default_study(device, sizes, seconds_left: float) -> dict:
    command = [sys.executable, str(REPO / "benchmarks" / "default_study.py"), "--scale", sizes["study_scale"]]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=max(1.0, seconds_left))
    text = done.stdout + done.stderr
    found = re.search(r"wall time, Ray start-up included: ([0-9.]+) s for (\d+) trials", text)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"default_study.py exited {done.returncode}:\n{text[-3000:]}")
    return {"scale": sizes["study_scale"], "wall_seconds": float(found.group(1)),
            "trials": int(found.group(2)), "table": text.split("trials\n", 1)[-1].strip()}


# -- the run ------------------------------------------------------------------------------------


def machine(device: torch.device) -> dict:
    out = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
           "torch": torch.__version__, "device": str(device)}
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        out.update(name=properties.name, memory_bytes=properties.total_memory, cuda=torch.version.cuda,
                   capability=f"{properties.major}.{properties.minor}",
                   multiprocessors=properties.multi_processor_count)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the JSON file to write")
    parser.add_argument("--cpu-smoke", action="store_true", help="every step at tiny sizes on the CPU")
    parser.add_argument("--skip", nargs="*", default=[], help="steps to leave out")
    args = parser.parse_args(argv)
    mode = "cpu-smoke" if args.cpu_smoke else "gpu"
    if mode == "gpu" and not torch.cuda.is_available():
        print("gpu_figures: no CUDA device (torch.cuda.is_available() is False); --cpu-smoke runs every step "
              "at tiny sizes on the CPU", file=sys.stderr)
        return 2
    device = torch.device("cuda" if mode == "gpu" else "cpu")
    sizes = SIZES[mode]
    if mode == "cpu-smoke":
        torch.set_num_threads(1)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = peak_of(name) if device.type == "cuda" else None
    figures: dict = {"mode": mode, "machine": machine(device), "sizes": sizes, "peak_tflops": peak,
                     "peak_source": "NVIDIA datasheets, dense (benchmarks/gpu_figures.py PEAK_TFLOPS)",
                     "seconds": {}, "errors": {}}
    out = Path(args.out)

    total_started = time.perf_counter()

    def seconds_left() -> float:
        return sizes["budget_seconds"] - (time.perf_counter() - total_started)

    def run(step: str, function, *arguments):
        if step in args.skip:
            figures[step] = {"skipped": "--skip"}
            return figures[step]
        if seconds_left() <= 0:
            figures[step] = None
            figures["errors"][step] = f"not run: the run's {sizes['budget_seconds']} s were spent"
            return None
        print(f"{step} …", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            figures[step] = function(*arguments)
        except Exception as error:  # recorded, and the run goes on to the next step
            figures[step] = None
            figures["errors"][step] = f"{type(error).__name__}: {error}\n{traceback.format_exc()[-3000:]}"
            print(figures["errors"][step], file=sys.stderr)
        figures["seconds"][step] = time.perf_counter() - started
        out.write_text(json.dumps(figures, indent=2, default=str) + "\n")
        return figures[step]

    measured = run("matmul", step_matmul, device, sizes)
    measured = measured if measured and "skipped" not in measured else None
    images = synthetic_images(sizes["images"])
    plain = run("plain", step_plain, device, sizes, peak, measured, images) or {}
    packed = run("packed", step_packed, device, sizes, peak, measured, images, plain) or {}
    del images
    run("dittadi", step_dittadi, device, sizes, peak, measured)
    run("pytest_gpu", lambda: step_pytest_gpu(device, sizes, seconds_left()))
    run("evaluation", lambda: step_evaluation(device, sizes, seconds_left()))
    run("default_study", lambda: step_default_study(device, sizes, seconds_left()))
    k32 = packed.get(f"{sizes['precision_k']}_bf16", {})
    figures["headline"] = {
        "plain_bf16_images_per_second": plain.get("bf16", {}).get("images_per_second"),
        "packed_k32_bf16_over_plain": k32.get("over_plain_same_precision"),
        "goal_k32_over_plain": 10.0}
    figures["seconds"]["total"] = time.perf_counter() - total_started
    out.write_text(json.dumps(figures, indent=2, default=str) + "\n")
    print(f"wrote {out} in {figures['seconds']['total']:.0f} s"
          + (f"; errors in {', '.join(figures['errors'])}" if figures["errors"] else ""), file=sys.stderr)
    return 1 if figures["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
