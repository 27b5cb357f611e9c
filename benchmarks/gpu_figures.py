"""Every GPU figure the project claims, measured in parts, each part into its own JSON file
(``benchmarks/gpu.sh`` runs it; benchmarks/README.md, "Every GPU figure (`gpu.sh`)", says how).

    python3 benchmarks/gpu_figures.py OUT_DIR --part 1               # on a CUDA machine
    python3 benchmarks/gpu_figures.py OUT_DIR --part 1 --cpu-smoke   # tiny sizes on the CPU (CI)

writes ``OUT_DIR/gpu_figures_part1.json``. The parts:

1. ``matmul`` (the device's measured bf16 and TF32 matmul rate); ``throughput``: aggregate
   images/s of K = 1 (the plain path, ``Trainer``) and packs of K = 8, 32, 64 (``PackedTrainer``,
   vmap) in bf16 and TF32, for burgess, burgess_v2 (dSprites), kim at 3 channels (3DShapes) and the
   ground-truth decoder's higgins MLP (its packs loop: ``PackedTrainer`` does not vmap that task),
   plus burgess K = 1 in float32 and kim FactorVAE at batch 128 (Montero et al.'s FactorVAE runs),
   each with its MFU and its host dispatch time against its GPU time per step; ``projection.
   montero2021``: the hours of Montero et al. 2021's full grid at the measured rates.
2. ``memory``: bytes per member, the slope of a pack's peak memory over K, beside
   ``models.packed.member_memory_bytes``; ``resident_vs_streamed``; ``dittadi`` (Dittadi et al.'s
   network at 128 px and at the preset's 64 px) and ``projection.dittadi2021``; ``pytest_gpu``;
   ``evaluation_beside_training`` (a K = 32 pack's images/s alone and while CPU processes run
   ``analysis.evaluation.evaluate``; last, as it runs until done or the deadline is near).
3. ``switches``: a K = 32 burgess pack in bf16 with each on/off switch of ``GPUSettings`` on and
   off (``tf32`` in float32): both of ``device_sampling`` and ``cuda_graph`` on together
   (``gpu_step``) first, then each of them, the others, ``compile`` last; a wanted switch this
   checkout's ``GPUSettings`` lacks is recorded as "not available in this checkout", and on a
   CPU those that act on CUDA only as "not measured: needs CUDA".
4. ``default_study`` (Ray): only where ``import ray`` works, else "skipped: Ray is not installed".

Parts 1-3 import no package the lent machine lacks (``MISSING_ON_THE_GPU_MACHINE``: Ray, Optuna,
boto3, moto, MLflow, W&B; CI runs them with those made unimportable: .ci/gpu_smoke).

Each figure is written to the JSON as soon as it is measured (the file is replaced whole each time,
so a run killed at any moment leaves a valid file with everything measured so far). Each part has a
deadline counted from the process's start (``--deadline``; 510 s on a GPU, so a part ends before 9
minutes; ``gpu.sh`` passes its own start in ``DISGEN_GPU_FIGURES_STARTED``): a measurement that the
time left cannot hold is recorded as "not run: deadline", and at the deadline (or on SIGTERM) a
watchdog records the measurement under way and every one not reached as "not run: deadline", stops
the part's child processes and exits 3. A measurement that fails records its error (under
``errors`` too) and the part goes on; it exits 1. On a CPU, what only a GPU measures is recorded as
"not measured: needs CUDA".

MFU is the model FLOPs rate (forward and backward FLOPs per image, ``sweeps.costs.
training_flops_per_image``, times images/s) over the device's dense datasheet peak of the
precision the run used (``PEAK_TFLOPS``).
"""

from __future__ import annotations

import time

STARTED = time.time()  # the part's clock starts before its imports (torch's take seconds)

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import queue as queues  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from packed_throughput import (  # noqa: E402
    NOT_ON_CPU,
    _timed,
    images_per_step,
    measure_pack,
    measure_plain,
    pack_configs,
    release,
    synthetic_classes,
    synthetic_images,
)

from models import GPUSettings  # noqa: E402
from models.packed import (  # noqa: E402
    PackedTrainer,
    dataset_bytes,
    first_exception,
    max_pack_size,
    member_memory_bytes,
)

PARTS = (1, 2, 3, 4)
# What a figure holds when it was not measured, and why (check_gpu_figures.py reads these)
DEADLINE = "not run: deadline"
NOT_AVAILABLE = "not available in this checkout"
NO_RAY = "skipped: Ray is not installed"
UNKNOWN_PEAK = "no datasheet peak for this GPU in PEAK_TFLOPS: see fraction_of_measured_matmul"

# Dense peak TFLOP/s, NVIDIA's datasheets (without sparsity), by a fragment of the device's name
# (the first that matches). ``matmul`` measures the device's own rate on every run.
PEAK_TFLOPS = [
    ("H100 PCIe", {"bf16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    ("H100 NVL", {"bf16": 835.0, "tf32": 418.0, "fp32": 60.0}),
    ("H100", {"bf16": 989.0, "tf32": 494.0, "fp32": 67.0}),  # SXM5
    ("H200", {"bf16": 989.0, "tf32": 494.0, "fp32": 67.0}),
    ("A100", {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L4", {"bf16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("A10", {"bf16": 125.0, "tf32": 62.5, "fp32": 31.2}),
]

# The networks whose throughput part 1 measures at every K and precision: burgess (the reference),
# and what Montero et al. 2021's grid trains: burgess_v2 on dSprites, kim on 3DShapes (3 channels),
# the ground-truth decoder's higgins MLP (task ground_truth_decoder; its packs loop)
NETWORKS = {
    "burgess": dict(architecture="burgess", channels=1),
    "burgess_v2": dict(architecture="burgess_v2", channels=1),
    "kim": dict(architecture="kim", channels=3),
    "higgins_decoder": dict(architecture="higgins", channels=1, task="ground_truth_decoder"),
}
# Measured at K = 1 and the pack size in bf16 only: M21's FactorVAE runs (kim, batch 128, the
# 7 × 1,000 discriminator), a third of its grid, for the projection
EXTRA_NETWORKS = {
    "kim_factor_vae": dict(architecture="kim", channels=1, objective="factor_vae", gamma=20.0, batch_size=128,
                           discriminator_layers=7, discriminator_width=1000),
}
# Part 3 measures every on/off switch of ``GPUSettings`` (``switch_names``); these it must report on
# even where this checkout's GPUSettings lacks them (as NOT_AVAILABLE), and measures first
WANTED_SWITCHES = ("device_sampling", "cuda_graph", "compile")
# the step built for the GPU: these on together (``switches.gpu_step``)
GPU_STEP_SWITCHES = ("device_sampling", "cuda_graph")
# switches that do nothing without another: measured off and on with that one on in both
SWITCH_NEEDS = {"cuda_graph": {"device_sampling": True}}
# switches that a pack's step ignores: measured where they act, on the plain path (K = 1)
PLAIN_PATH_ONLY = {"fused_adam": "K = 1, the plain path: a pack's stacked Adam (models.packed._StackedAdam) "
                                 "is torch._foreach_* ops whatever this switch says: it does not apply to "
                                 "packs"}
# the switches that act on a CPU too (models/device.py: the others are ignored there)
ANY_DEVICE_SWITCHES = frozenset({"compile", "device_sampling"})
SMOKE_COMPILE = "not run in the cpu smoke: torch.compile compiles for minutes on a CPU"

# Sizes of the two modes: the GPU run's, and the CPU smoke's (every measurement, tiny). ``need``:
# the seconds a measurement of each kind is given at least (else "not run: deadline"), and
# ``pytest_limit`` the most that ``pytest -m gpu`` may take.
SIZES = {
    "gpu": dict(batch=64, images=20_000, steps=50, rounds=3, warmup=10, timing_repeats=5, timing_steps=10,
                check_k=4, check_steps=8, sync_steps=10,
                ks=(1, 8, 32, 64), precisions=("bf16", "tf32"), pack_k=32, memory_ks=(8, 16, 32, 64),
                memory_steps=3, dittadi_size=128, dittadi_batch=64, dittadi_images=2_000, dittadi_steps=10,
                dittadi_pack_most=32, dittadi_warmup=2, d21_size=64, d21_ks=(1, 8, 16),
                eval_models=4, eval_images=60_000, n_metric=10_000, n_nll=10_000, eval_train_steps=200,
                dci_estimator="gbt", study_scale="smoke", deadline_seconds=510,
                need=dict(matmul=10, throughput=15, check=20, memory=10, resident=20, dittadi=30,
                          projection=3, evaluation=150, pytest=60, pytest_limit=150, switch=20, compile=150,
                          default_study=240)),
    "cpu-smoke": dict(batch=8, images=256, steps=2, rounds=1, warmup=1, timing_repeats=2, timing_steps=2,
                      check_k=2, check_steps=2, sync_steps=2,
                      ks=(1, 2), precisions=("bf16", "tf32"), pack_k=2, memory_ks=(2, 3),
                      memory_steps=1, dittadi_size=64, dittadi_batch=2, dittadi_images=8, dittadi_steps=1,
                      dittadi_pack_most=2, dittadi_warmup=0, d21_size=64, d21_ks=(1, 2),
                      eval_models=2, eval_images=2_000, n_metric=200, n_nll=100, eval_train_steps=2,
                      # no DCI: its boosted trees were a third of the smoke's time (DCI: tests/analysis)
                      dci_estimator="none", study_scale="tiny", deadline_seconds=600, need={}),
}
RUN_LENGTH = 10**6  # the configs' steps: longer than any measurement takes


class Stopped(Exception):
    """The part's deadline came while a measurement waited on something (a child process)."""


def peak_of(name: str) -> dict | None:
    return next((peak for fragment, peak in PEAK_TFLOPS if fragment in name), None)


def flops_per_image(architecture: str, image_size: int, channels: int, latent_dim: int = 10,
                    decoder_only: bool = False) -> float:
    from sweeps.costs import training_flops_per_image  # no Ray: sweeps.costs needs grid and presets only

    return training_flops_per_image(architecture, image_size, channels, latent_dim, decoder_only)


def network_flops(network: dict, image_size: int = 64) -> float:
    return flops_per_image(network["architecture"], image_size, network["channels"],
                           decoder_only=network.get("task") == "ground_truth_decoder")


def with_mfu(result: dict, flops: float, precision: str, peak: dict | None, measured: dict | None) -> dict:
    """``result`` with its model TFLOP/s, its MFU against the datasheet peak of ``precision`` and
    against the bf16 peak, and its fraction of the measured matmul rate. ``peak``: None on a CPU
    (not measured), empty for a GPU that ``PEAK_TFLOPS`` does not know."""
    achieved = flops * result["images_per_second"] / 1e12
    result.update(precision=precision, flops_per_image=flops, model_tflops=achieved)
    if peak is None:
        result["mfu"] = result["mfu_of_bf16_peak"] = NOT_ON_CPU
    elif precision in peak:
        result.update(mfu=achieved / peak[precision], peak_tflops=peak[precision],
                      mfu_of_bf16_peak=achieved / peak["bf16"])
    else:
        result["mfu"] = result["mfu_of_bf16_peak"] = UNKNOWN_PEAK
    if measured and isinstance(measured.get(precision), float):
        result["fraction_of_measured_matmul"] = achieved / measured[precision]
    return result


# precision → (the config's bf16, the GPU settings): float32 without and with TF32, bf16 autocast
PRECISIONS = {"fp32": (False, GPUSettings(tf32=False)), "tf32": (False, GPUSettings()),
              "bf16": (None, GPUSettings())}


# -- the record ---------------------------------------------------------------------------------


class Run:
    """One part's figures, its JSON file, its deadline and its watchdog.

    ``measure(key, function)`` runs one measurement unless the time left is below ``need``, and
    writes the JSON at once (the file replaced whole, so it is valid at every moment). Keys are
    dotted paths (``throughput.kim.k32_bf16``). ``expected`` are the keys this part must fill:
    the watchdog marks those it did not reach as "not run: deadline"."""

    def __init__(self, path: Path, figures: dict, deadline_at: float, expected: list[str],
                 device: torch.device, needs: dict | None = None, skip=()):
        self.path, self.figures, self.deadline_at = path, figures, deadline_at
        self.expected, self.device, self.needs, self.skip = expected, device, needs or {}, set(skip)
        self.lock = threading.RLock()
        self.current: tuple[str, float] | None = None
        self.figures.setdefault("errors", {})
        self.figures.setdefault("not_run", [])
        self.figures.setdefault("seconds", {})
        self.stopping = False

    def seconds_left(self) -> float:
        return self.deadline_at - time.time()

    def need(self, kind: str) -> float:
        """The seconds a measurement of ``kind`` is given at least (``SIZES[mode]["need"]``)."""
        return self.needs.get(kind, 0.0)

    def get(self, key: str, default=None):
        node = self.figures
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def set(self, key: str, value) -> None:
        with self.lock:
            self._place(key, value)
            if value == DEADLINE or (isinstance(value, str) and value.startswith(DEADLINE)):
                self.figures["not_run"].append(key)
            self.write()

    def _place(self, key: str, value) -> None:
        """Put ``value`` at the dotted ``key``, making the dicts on the way (the caller holds the lock)."""
        node = self.figures
        *parents, last = key.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[last] = value

    def write(self) -> None:
        with self.lock:
            temporary = self.path.with_name(f".{self.path.name}.{threading.get_ident()}.tmp")
            temporary.write_text(json.dumps(self.figures, indent=2, default=str) + "\n")
            os.replace(temporary, self.path)

    def measure(self, key: str, function, need: float = 0.0):
        """``function()``'s figure under ``key`` (its error, or "not run: deadline" when fewer than
        ``need`` seconds are left); the GPU's memory freed after it."""
        if key in self.skip or key.split(".")[0] in self.skip:
            self.set(key, "skipped: --skip")
            return None
        if self.seconds_left() < need:
            self.set(key, DEADLINE)
            return None
        print(f"{key} …", file=sys.stderr, flush=True)
        self.current = (key, time.time())
        started = time.perf_counter()
        try:
            value = function()
        except Stopped as stopped:
            value = str(stopped) or f"{DEADLINE} (stopped after {time.perf_counter() - started:.0f} s)"
        except Exception as error:  # recorded, and the part goes on to the next measurement
            message = error_record(error)
            print(message, file=sys.stderr, flush=True)
            value = {"error": message.splitlines()[0]}
            first = first_exception(error)
            if first is not error:
                value["first"] = one_line(first)
            self.figures["errors"][key] = message
        finally:
            self.current = None
        self.figures["seconds"][key] = time.perf_counter() - started
        self.set(key, value)
        release(self.device)
        return value

    def stop(self, why: str) -> None:
        """The deadline (or SIGTERM): record the measurement under way and every expected figure
        not reached as not run, write, stop the child processes, exit 3."""
        if self.stopping:
            return
        self.stopping = True
        locked = self.lock.acquire(timeout=10)
        try:
            if self.current:
                key, began = self.current
                self.figures.setdefault("seconds", {})[key] = time.time() - began
                node_value = f"{DEADLINE} ({why} after {time.time() - began:.0f} s of it)"
                self._set_quietly(key, node_value)
            for key in self.expected:
                if self.get(key) is None:
                    self._set_quietly(key, DEADLINE)
            self.figures["stopped"] = f"{why} at {time.time() - STARTED:.0f} s"
            self.figures["imported_missing_packages"] = missing_packages_imported()
            self.figures["seconds"]["total"] = time.time() - STARTED
            self.write()
        finally:
            if locked:
                self.lock.release()
        print(f"gpu_figures: {why}: stopped at {time.time() - STARTED:.0f} s; wrote {self.path}",
              file=sys.stderr, flush=True)
        stop_children()
        os._exit(3)

    def _set_quietly(self, key: str, value) -> None:
        self._place(key, value)
        self.figures["not_run"].append(key)

    def start_watchdog(self):
        """Call ``stop`` at the deadline (a timer thread) and on SIGTERM; returns the function that
        undoes both."""
        timer = threading.Timer(max(0.0, self.seconds_left()), self.stop, args=("deadline",))
        timer.daemon = True
        timer.start()
        before = signal.signal(signal.SIGTERM, lambda *_: self.stop("SIGTERM"))

        def undo() -> None:
            timer.cancel()
            signal.signal(signal.SIGTERM, before)

        return undo


ERROR_HEAD = ERROR_TAIL = 3000  # characters of a traceback a failed measurement keeps at each end


def one_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def error_record(error: BaseException) -> str:
    """A failed measurement's record: its error's line, each exception of its chain in one line
    (the first first: where a CUDA-graph capture's real error is, under the generic one
    ``capture_end`` raises), then the whole traceback, the chain included, cut in the middle to
    its first ``ERROR_HEAD`` and last ``ERROR_TAIL`` characters."""
    chain, seen, link = [], set(), error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        chain.append(one_line(link))
        link = link.__cause__ or link.__context__
    text = "".join(traceback.format_exception(error))
    if len(text) > ERROR_HEAD + ERROR_TAIL:
        cut = len(text) - ERROR_HEAD - ERROR_TAIL
        text = f"{text[:ERROR_HEAD]}\n[… {cut} characters of the traceback left out …]\n{text[-ERROR_TAIL:]}"
    lines = "".join(f"  {i}. {line}\n" for i, line in enumerate(reversed(chain), 1)) if len(chain) > 1 else ""
    return f"{one_line(error)}\n" + (f"the chain, first to last:\n{lines}" if lines else "") + text


# The project's dependencies (optional and test ones too) that the lent GPU machine's image lacks
# (its package list: the device tool's KINDS.md); .ci/block_missing_packages blocks the same
MISSING_ON_THE_GPU_MACHINE = ("ray", "optuna", "boto3", "moto", "mlflow", "wandb")


def missing_packages_imported() -> list[str]:
    """The modules of ``MISSING_ON_THE_GPU_MACHINE`` this process imported (parts 1-3 must import
    none: there they would fail)."""
    return sorted(name for name in sys.modules if name.split(".")[0] in MISSING_ON_THE_GPU_MACHINE)


def imported_packages() -> list[str]:
    """The top-level packages outside the standard library and this project that this process
    imported: what the lent machine's image must hold for the part to run."""
    own = {"models", "analysis", "data_pipeline", "sweeps", "packed_throughput", "gpu_figures", "__main__"}
    tops = {name.partition(".")[0] for name in list(sys.modules)} - set(sys.stdlib_module_names) - own
    return sorted(name for name in tops if not name.startswith("_") and "__" not in name
                  and name not in ("sitecustomize", "usercustomize", "cython_runtime"))


def descendants(pid: int | None = None) -> list[int]:
    """The ids of every process below ``pid`` (this one), children before grandchildren: psutil's
    answer where it is installed, else read from /proc (Linux; the lent machine's image may lack
    psutil)."""
    pid = os.getpid() if pid is None else pid
    try:
        import psutil

        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except ImportError:
        pass
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    # "pid (name) state ppid ...": the name may hold spaces and parentheses
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier and child not in found]
        found += children
        frontier = children
    return found


def stop_children() -> None:
    """Kill every process this one started (evaluation workers and their joblib workers, pytest,
    the default study), so nothing outlives the part and holds its output open."""
    children = descendants()
    for child in children:
        try:
            os.kill(child, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.time() + 5
    for child in children:
        try:  # reap those that are this process's own children (the rest are their parents' to reap)
            while time.time() < deadline and os.waitpid(child, os.WNOHANG) == (0, 0):
                time.sleep(0.05)
        except ChildProcessError:
            pass


def wait_for(process: subprocess.Popen, run: Run, margin: float = 5.0,
             limit: float | None = None) -> tuple[str, str]:
    """A child's output, waiting at most until ``margin`` seconds before the deadline, and at most
    ``limit`` seconds (then it is killed and ``Stopped`` raised)."""
    left = run.seconds_left() - margin
    try:
        return process.communicate(timeout=max(1.0, left if limit is None else min(left, limit)))
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        if limit is not None and limit < left:
            raise Stopped(f"not run: stopped at its limit of {limit:.0f} s") from None
        raise Stopped from None


# -- part 1: throughput -------------------------------------------------------------------------


def step_matmul(run: Run, device: torch.device) -> dict:
    for precision, dtype in (("bf16", torch.bfloat16), ("tf32", torch.float32)):
        run.measure(f"matmul.{precision}", lambda dtype=dtype: matmul_tflops(device, dtype),
                    need=run.need("matmul"))
    return {p: run.get(f"matmul.{p}") for p in ("bf16", "tf32")}


def matmul_tflops(device: torch.device, dtype) -> float | str:
    if device.type != "cuda":
        return NOT_ON_CPU
    n = 8192
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
    return 2 * n**3 / float(np.median(times)) / 1e12


class Data:
    """The synthetic training data of each channel count (and factor classes for the decoder),
    made once per part."""

    def __init__(self, n: int, size: int = 64):
        from data_pipeline import factor_space

        self.n, self.size = n, size
        self.space = factor_space("dsprites")
        self.classes = synthetic_classes(n, self.space)
        self._images: dict[int, np.ndarray] = {}

    def images(self, channels: int) -> np.ndarray:
        if channels not in self._images:
            self._images[channels] = synthetic_images(self.n, channels, self.size)
        return self._images[channels]


def throughput(device, sizes, network: dict, k: int, precision: str, data: Data, peak, matmul,
               settings: GPUSettings | None = None, steps: int | None = None) -> dict:
    """Aggregate images/s of K models of ``network`` in ``precision`` (K = 1: the plain path), its
    MFU, its host and GPU time per step and its memory."""
    bf16, default_settings = PRECISIONS[precision]
    shape = {"batch_size": sizes["batch"], **network}
    configs = pack_configs(k, steps=RUN_LENGTH, bf16=bf16, **shape)
    task = network.get("task", "vae") != "vae"
    extra = dict(classes=data.classes, space=data.space) if task else {}
    images = data.images(network["channels"])
    arguments = (images, device, steps or sizes["steps"], sizes["rounds"], sizes["warmup"])
    settings = settings or default_settings
    if k == 1:
        result = measure_plain(configs[0], *arguments, settings=settings,
                               timing_repeats=sizes["timing_repeats"], timing_steps=sizes["timing_steps"],
                               **extra)
    else:
        # a looped pack (the decoder) takes K plain steps a step: about 8 members' rounds of them
        result = measure_pack(configs, *arguments, settings=settings, timing_repeats=sizes["timing_repeats"],
                              timing_steps=sizes["timing_steps"],
                              loop_member_steps=8 * (steps or sizes["steps"]), **extra)
        result["member_memory_estimate_bytes"] = member_memory_bytes(configs[0])
    used = precision if device.type == "cuda" else "fp32"
    result["batch_size"] = configs[0].batch_size
    return with_mfu(result, network_flops(network), used, peak, matmul)


# -- part 1, first: the GPU step against one model ----------------------------------------------

# part 1's first runs, burgess at batch 64 in bf16, each ``GPUSettings`` (the K = 1 run is the plain
# path, whatever the settings): K = 1, then K = pack_k on the default path, with device sampling,
# and with device sampling and the CUDA graph (the step built for the GPU)
GPU_STEP_RUNS = {
    "k1_plain": (1, {}),
    "kN_default": (None, {}),
    "kN_device_sampling": (None, {"device_sampling": True}),
    "kN_device_sampling_graph": (None, {"device_sampling": True, "cuda_graph": True}),
}
GRAPH_TOLERANCE = 1e-2  # checks.graph_against_eager: a tensor's difference over its change in the steps


def gpu_step_key(name: str, sizes: dict) -> str:
    return f"gpu_step.{name.replace('kN', 'k' + str(sizes['pack_k']))}"


def step_gpu_step(run: Run, device, sizes, peak, matmul, data: Data) -> None:
    """What part 1 exists for, first: the K = pack_k burgess pack's aggregate images/s on each
    path over one model's on the plain path (``headline``), then the checks that the graph's
    steps are the eager steps and that a step does not wait on the host (``checks``)."""
    burgess = NETWORKS["burgess"]
    for name, (k, settings) in GPU_STEP_RUNS.items():
        key = gpu_step_key(name, sizes)
        if settings.get("cuda_graph") and device.type != "cuda":
            run.set(key, NOT_ON_CPU)
            continue
        run.measure(key, lambda k=k, settings=settings: throughput(
            device, sizes, burgess, k or sizes["pack_k"], "bf16", data, peak, matmul,
            GPUSettings(**settings)), need=run.need("throughput"))
    run.set("headline", gpu_step_headline(run, sizes))
    run.measure("checks.graph_against_eager", lambda: graph_against_eager(device, sizes, data),
                need=run.need("check"))
    run.measure("checks.no_host_sync", lambda: no_host_sync(device, sizes, data), need=run.need("check"))
    # the same runs are part 1's burgess K = 1 and K = pack_k in bf16: not measured twice
    for name, target in (("k1_plain", "k1"), ("kN_default", f"k{sizes['pack_k']}")):
        value = run.get(gpu_step_key(name, sizes))
        if isinstance(value, dict):
            run.set(f"throughput.burgess.{target}_bf16", dict(value, measured_as=gpu_step_key(name, sizes)))


def _rate(value) -> float | None:
    return value["images_per_second"] if isinstance(value, dict) and "images_per_second" in value else None


def gpu_step_headline(run: Run, sizes: dict) -> dict:
    """``gpu_step_over_plain``: the K = pack_k pack's aggregate images/s with device sampling and
    the CUDA graph over one model's on the plain path (K = 1), the goal 10; beside it each other
    path's ratio, the GPU step's MFU (against the datasheet's bf16 peak and against the measured
    matmul rate) and its capture."""
    k = sizes["pack_k"]
    runs = {name: run.get(gpu_step_key(name, sizes)) for name in GPU_STEP_RUNS}
    plain = _rate(runs["k1_plain"])
    out = {"network": "burgess", "batch_size": sizes["batch"], "precision": "bf16", "pack_k": k,
           "plain_images_per_second": plain if plain else runs["k1_plain"], "goal_gpu_step_over_plain": 10.0}
    for name, label in (("kN_device_sampling_graph", "gpu_step_over_plain"),
                        ("kN_default", "default_over_plain"),
                        ("kN_device_sampling", "device_sampling_over_plain")):
        rate = _rate(runs[name])
        if rate and plain:
            out[label] = rate / plain
        elif isinstance(runs[name], str) or isinstance(runs["k1_plain"], str):  # not measured, and why
            out[label] = runs[name] if isinstance(runs[name], str) else runs["k1_plain"]
        else:
            failed = gpu_step_key(name if plain else "k1_plain", sizes)
            out[label] = {"error": f"{failed} failed (its error is under errors)"}
    step = runs["kN_device_sampling_graph"]
    if isinstance(step, dict):
        out.update(gpu_step_images_per_second=step.get("images_per_second"), mfu=step.get("mfu"),
                   mfu_of_measured_matmul=step.get("fraction_of_measured_matmul",
                                                   "the matmul peak was not measured"),
                   cuda_graph=step.get("cuda_graph", "no vmapped group"))
    else:
        out.update(mfu=step, mfu_of_measured_matmul=step, cuda_graph=step)
    return out


def member_tensors(pack: PackedTrainer) -> dict[str, dict[str, torch.Tensor]]:
    """Every member's parameters and Adam moments, by kind, copied (``PackedTrainer.sync`` first)."""
    pack.sync()
    out: dict[str, dict[str, torch.Tensor]] = {"parameters": {}, "exp_avg": {}, "exp_avg_sq": {}}
    for k, member in enumerate(pack.members):
        for name, p in member.model.named_parameters():
            out["parameters"][f"{k}.{name}"] = p.detach().clone()
            state = member.optimizer.state.get(p, {})
            for moment in ("exp_avg", "exp_avg_sq"):
                value = state[moment] if moment in state else torch.zeros_like(p)
                out[moment][f"{k}.{name}"] = value.clone()
    return out


def graph_against_eager(device, sizes, data: Data) -> dict | str:
    """``check_steps`` steps of a K = check_k burgess pack in float32 (no TF32) with device sampling,
    through the CUDA graph and eagerly, from the same state (the same seeds, and the graph's
    ``WARM_UP`` eager steps taken by both first): every member's parameters and Adam moments must
    agree. A tensor passes when the norm of its difference is within ``GRAPH_TOLERANCE`` of the norm
    of its change over the steps (rounding and cuDNN's choice of algorithms differ; a replay that
    read stale inputs or skipped the update differs by about the change itself)."""
    return NOT_ON_CPU if device.type != "cuda" else compare_graph_and_eager(device, sizes, data)


def difference_over_change(start: torch.Tensor, expected: torch.Tensor, got: torch.Tensor) -> float:
    """norm(got - expected) / norm(expected - start): 0 when ``got`` is ``expected``, 1 when it
    never moved from ``start`` (an update that did not happen)."""
    change = (expected.double() - start.double()).norm().item()
    difference = (got.double() - expected.double()).norm().item()
    return difference / change if change > 0 else (0.0 if difference == 0 else math.inf)


def compare_graph_and_eager(device, sizes, data: Data) -> dict:
    """``graph_against_eager``'s comparison, on any device (on a CPU nothing is captured, so it
    fails there: the test runs it with the captured step made eager)."""
    from models.packed import _CapturedStep

    configs = pack_configs(sizes["check_k"], batch_size=sizes["batch"], steps=RUN_LENGTH, bf16=False)
    images = data.images(1)
    steps, warm_up = sizes["check_steps"], _CapturedStep.WARM_UP
    states, losses, outcomes = {}, {}, {}
    for label, graph in (("eager", False), ("graph", True)):
        settings = GPUSettings(tf32=False, device_sampling=True, cuda_graph=graph)
        pack = PackedTrainer(configs, images, np.arange(len(images)), device=device, mode="vmap",
                             settings=settings)
        pack.advance(warm_up)
        before = member_tensors(pack)
        blocks = pack.advance(steps)
        states[label] = (before, member_tensors(pack))
        losses[label] = torch.stack([blocks[k].values for k in sorted(blocks)]).double().cpu()
        outcomes[label] = pack.graph_outcomes()
        del pack
        release(device)
    (start, eager), (_, graphed) = states["eager"], states["graph"]
    worst: dict[str, dict] = {}
    for kind in eager:
        ratios = {name: difference_over_change(start[kind][name], expected, graphed[kind][name])
                  for name, expected in eager[kind].items()}
        name = max(ratios, key=ratios.get)
        worst[kind] = {"tensor": name, "difference_over_change": ratios[name]}
    gap = (losses["graph"] - losses["eager"]).abs() / losses["eager"].abs().clamp_min(1e-12)
    captured = all(v == "captured" for v in outcomes["graph"].values()) and bool(outcomes["graph"])
    passed = captured and all(w["difference_over_change"] <= GRAPH_TOLERANCE for w in worst.values())
    return {"passed": passed, "members": sizes["check_k"], "steps_compared": steps,
            "eager_steps_first": warm_up, "precision": "fp32 (TF32 off)", "tolerance": GRAPH_TOLERANCE,
            "tolerance_means": "per tensor: norm(graph - eager) / norm(eager's change over the compared "
                               "steps)",
            "worst": worst, "loss_largest_relative_difference": gap.max().item(),
            "cuda_graph": outcomes["graph"]}


def no_host_sync(device, sizes, data: Data) -> dict | str:
    """``sync_steps`` steps of a K = check_k burgess pack in bf16 with device sampling and the CUDA
    graph (after its warm-up and capture) under ``torch.cuda.set_sync_debug_mode("error")``: any
    operation that makes the host wait on the GPU raises, and where it happened is recorded."""
    if device.type != "cuda":
        return NOT_ON_CPU
    from models.packed import _CapturedStep

    configs = pack_configs(sizes["check_k"], batch_size=sizes["batch"], steps=RUN_LENGTH)
    images = data.images(1)
    pack = PackedTrainer(configs, images, np.arange(len(images)), device=device, mode="vmap",
                         settings=GPUSettings(device_sampling=True, cuda_graph=True))
    pack.advance(_CapturedStep.WARM_UP + 1)
    torch.cuda.synchronize(device)
    out = {"steps": sizes["sync_steps"], "how": 'torch.cuda.set_sync_debug_mode("error") around advance'}
    torch.cuda.set_sync_debug_mode("error")
    try:
        pack.advance(sizes["sync_steps"])
    except RuntimeError as error:
        frames = [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}"
                  for f in traceback.extract_tb(error.__traceback__)][-4:]
        out.update(passed=False, synchronised=str(error).strip().splitlines()[0], where=frames)
    else:
        out["passed"] = True
    finally:
        torch.cuda.set_sync_debug_mode(0)
    out["cuda_graph"] = pack.graph_outcomes()
    return out


def step_throughput(run: Run, device, sizes, peak, matmul, data: Data) -> None:
    """bf16 first (every network, then the FactorVAE runs: what the projection reads), then TF32,
    then float32, so a deadline cuts the least wanted."""
    for precision in sizes["precisions"]:
        for name, network in NETWORKS.items():
            for k in sizes["ks"]:
                measure_throughput(run, device, sizes, name, network, k, precision, data, peak, matmul)
        if precision == "bf16":
            for name, network in EXTRA_NETWORKS.items():
                for k in (1, sizes["pack_k"]):
                    measure_throughput(run, device, sizes, name, network, k, "bf16", data, peak, matmul)
    measure_throughput(run, device, sizes, "burgess", NETWORKS["burgess"], 1, "fp32", data, peak, matmul)


def measure_throughput(run: Run, device, sizes, name, network, k, precision, data, peak, matmul) -> None:
    key = f"throughput.{name}.k{k}_{precision}"
    result = run.get(key)  # the GPU step's runs measured burgess at K = 1 and K = pack_k in bf16 already
    if not isinstance(result, dict):
        result = run.measure(key, lambda: throughput(device, sizes, network, k, precision, data, peak,
                                                     matmul), need=run.need("throughput"))
    one = run.get(f"throughput.{name}.k1_{precision}")
    if k > 1 and isinstance(result, dict) and "images_per_second" in result and isinstance(one, dict) \
            and "images_per_second" in one:
        result["over_k1_same_precision"] = result["images_per_second"] / one["images_per_second"]
        run.write()
        print(f"  {name} K={k} {precision}: {result['images_per_second']:.0f} img/s, "
              f"{result['over_k1_same_precision']:.1f}× K = 1", file=sys.stderr, flush=True)


def measured_rates(run: Run, prefix: str, networks: dict, image_size: int = 64) -> list[dict]:
    """Every bf16 throughput this part measured under ``prefix``, with what it was measured on."""
    rates = []
    for name, network in networks.items():
        for key, value in (run.get(f"{prefix}.{name}") or {}).items():
            if key.endswith("_bf16") and isinstance(value, dict) and "images_per_second" in value:
                rates.append({"label": f"{prefix}.{name}.{key}", "architecture": network["architecture"],
                              "task": network.get("task", "vae"), "channels": network["channels"],
                              "image_size": network.get("image_size", image_size),
                              "objective": network.get("objective", "beta_vae"),
                              "batch_size": value.get("batch_size"), "members": value.get("members"),
                              "images_per_second": value["images_per_second"]})
    return rates


# -- projections --------------------------------------------------------------------------------


def rate_for(group: dict, rates: list[dict]) -> tuple[float, str]:
    """The images/s a group of trials is projected to train at on one GPU, and why: the fastest
    measured pack of the same network (architecture, task, channels, image size; the FactorVAE runs
    apart from the others), else of the closest measured one (the same architecture and task, else
    the same architecture's VAE, else burgess) scaled by training FLOPs per image, counted as
    ``sweeps.costs.relative_flops`` counts them (a task's own extra work, e.g. the composition
    network's, is not counted)."""

    def family(entry):
        return "factor_vae" if entry["objective"] == "factor_vae" else "other"

    def shape(entry):
        return (entry["architecture"], entry["task"], entry["channels"], entry["image_size"])

    tiers = [
        lambda r: shape(r) == shape(group) and family(r) == family(group),
        lambda r: r["architecture"] == group["architecture"] and r["task"] == group["task"]
        and family(r) == family(group),
        lambda r: r["architecture"] == group["architecture"] and r["task"] == group["task"],
        # a task measured for no network (composition): its network's VAE
        lambda r: r["architecture"] == group["architecture"] and r["channels"] == group["channels"]
        and family(r) == "other",
        lambda r: r["architecture"] == group["architecture"] and family(r) == "other",
        lambda r: r["architecture"] == "burgess",
    ]
    exact = True
    for matches in tiers:
        candidates = [r for r in rates if matches(r)]
        if candidates:
            best = max(candidates, key=lambda r: r["images_per_second"])
            break
        exact = False
    else:
        raise ValueError("no throughput was measured to project from")
    described = (f"{best['label']} (K = {best['members']}, {best['task']}, {best['objective']}, batch "
                 f"{best['batch_size']}, {best['channels']} channel(s), {best['image_size']} px)")
    if exact:
        return best["images_per_second"], f"measured: {described}"
    decoder = group["task"] == "ground_truth_decoder"
    scale = (flops_per_image(best["architecture"], best["image_size"], best["channels"], 10,
                             best["task"] == "ground_truth_decoder")
             / flops_per_image(group["architecture"], group["image_size"], group["channels"], 10, decoder))
    return best["images_per_second"] * scale, (
        f"scaled by training FLOPs per image ({scale:.3g}×) from {described}")


def project(name: str, rates: list[dict]) -> dict:
    """Hours of the preset ``name``'s full grid on one GPU, each group of equal trials at the
    images/s ``rate_for`` gives it (packs of the measured size, one after another), beside the
    V100-equivalent estimate ``sweeps.costs`` makes without a measurement. No Ray: the trial
    list comes from ``sweeps.grid`` and ``sweeps.costs``, which do not import it."""
    from sweeps.costs import training_images, trials_cost
    from sweeps.grid import default_seeds, trial_configs
    from sweeps.presets import PRESETS

    spec = PRESETS[name]
    seeds = default_seeds(spec, "full")
    trials = trial_configs(spec, name, "full", list(range(seeds)))
    groups: dict[tuple, dict] = {}
    for trial in trials:
        m = trial.model
        key = (m.architecture, m.task, m.channels, m.image_size, m.objective, m.batch_size)
        fields = ("architecture", "task", "channels", "image_size", "objective", "batch_size")
        group = groups.setdefault(key, dict(zip(fields, key), trials=0, images=0))
        group["trials"] += 1
        group["images"] += training_images(trial)
    seconds = 0.0
    for group in groups.values():
        rate, basis = rate_for(group, rates)
        group.update(images_per_second=rate, basis=basis, hours=group["images"] / rate / 3600)
        seconds += group["images"] / rate
    return {"preset": name, "scale": "full", "seeds": seeds, "trials": len(trials),
            "images": sum(g["images"] for g in groups.values()), "hours_one_gpu": seconds / 3600,
            "v100_equivalent_hours_estimate": trials_cost(trials)["gpu_hours"],
            "how": "each group of equal trials at the fastest measured pack's aggregate images/s of its "
                   "network (bf16), packs one after another on one GPU; pair objectives at the rate "
                   "measured for β-VAE (their images counted as sweeps.costs counts them)",
            "groups": list(groups.values())}


# -- part 2: memory, data, dittadi, evaluation, pytest ------------------------------------------


def slope(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (slope, intercept) of (K, bytes) points."""
    k = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    a, b = np.polyfit(k, y, 1)
    return float(a), float(b)


def step_memory(run: Run, device, sizes, data: Data) -> None:
    """Peak allocated memory of packs of each K (after freeing everything before each, counted
    from what was still allocated): the slope over K is the bytes per member, the intercept the
    fixed cost (the uploaded dataset, workspaces), beside ``member_memory_bytes``'s estimate."""
    for name, network in NETWORKS.items():
        key = f"memory.{name}"
        configs = pack_configs(1, batch_size=sizes["batch"], steps=RUN_LENGTH, **network)
        record = {"precision": "bf16" if device.type == "cuda" else "fp32",
                  "member_memory_bytes_estimate": member_memory_bytes(configs[0]), "points": {}}
        for k in sizes["memory_ks"]:
            point = run.measure(f"{key}.points.k{k}",
                                lambda k=k, network=network: memory_point(device, sizes, network, k, data),
                                need=run.need("memory"))
            record["points"][f"k{k}"] = point
        points = [(int(k[1:]), p["peak_allocated_bytes"]) for k, p in record["points"].items()
                  if isinstance(p, dict) and isinstance(p.get("peak_allocated_bytes"), int)]
        if device.type != "cuda":
            record.update(bytes_per_member=NOT_ON_CPU, fixed_bytes=NOT_ON_CPU)
        elif len(points) >= 2:
            per_member, fixed = slope(points)
            record.update(bytes_per_member=per_member, fixed_bytes=fixed,
                          measured_over_estimate=per_member / record["member_memory_bytes_estimate"])
        else:
            record.update(bytes_per_member=DEADLINE if run.seconds_left() <= 0 else "fewer than 2 points",
                          fixed_bytes=None)
        for field in ("precision", "member_memory_bytes_estimate", "bytes_per_member", "fixed_bytes",
                      "measured_over_estimate"):
            if field in record:
                run.set(f"{key}.{field}", record[field])


def memory_point(device, sizes, network: dict, k: int, data: Data) -> dict:
    """A pack of ``k`` stepped ``memory_steps`` times: its peak allocated bytes over the baseline."""
    configs = pack_configs(k, batch_size=sizes["batch"], steps=RUN_LENGTH, **network)
    task = network.get("task", "vae") != "vae"
    extra = dict(classes=data.classes, space=data.space) if task else {}
    result = measure_pack(configs, data.images(network["channels"]), device, sizes["memory_steps"], 1, 1,
                          **extra)
    if device.type != "cuda":
        return {"peak_allocated_bytes": NOT_ON_CPU, "stepped": result["stepped"]}
    return {field: result[field] for field in ("peak_allocated_bytes", "baseline_allocated_bytes",
                                               "peak_reserved_bytes", "stepped", "halvings")}


def step_resident_vs_streamed(run: Run, device, sizes, data: Data, peak) -> None:
    """A K = pack_k bf16 burgess pack with the dataset resident on the GPU and streamed from host
    memory (``GPUSettings(resident_data=...)``): images/s, and the host-to-device traffic of a step."""
    k = sizes["pack_k"]
    for label, resident in (("resident", True), ("streamed", False)):
        def one(resident=resident):
            settings = GPUSettings(resident_data=resident)
            result = throughput(device, sizes, NETWORKS["burgess"], k, "bf16", data, peak, None, settings)
            result.update(batch_transfer(device, data.images(1), k * sizes["batch"], resident))
            return result

        run.measure(f"resident_vs_streamed.{label}", one, need=run.need("resident"))


def batch_transfer(device, images: np.ndarray, rows: int, resident: bool, repeats: int = 10) -> dict:
    """What moves from host to GPU for one step's batch of ``rows`` images: resident, only the row
    indices (int64); streamed, the images, gathered on the host into pinned memory (timed with
    ``perf_counter``) and copied (timed with CUDA events)."""
    index = np.sort(np.random.default_rng(0).choice(len(images), rows))
    if resident:
        return {"h2d_bytes_per_step": rows * 8, "h2d_ms_per_step": "rows only (the images are on the GPU)"}
    gather, copy = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        host = torch.from_numpy(images[index])
        if device.type == "cuda":
            host = host.pin_memory()
        gather.append(time.perf_counter() - started)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            host.to(device, non_blocking=True)
            end.record()
            end.synchronize()
            copy.append(start.elapsed_time(end) / 1e3)
    return {"h2d_bytes_per_step": int(images[index].nbytes),
            "host_gather_and_pin_ms_per_step": 1e3 * statistics.median(gather),
            "h2d_ms_per_step": 1e3 * statistics.median(copy) if copy else NOT_ON_CPU}


def step_dittadi(run: Run, device, sizes, peak, matmul) -> None:
    """Dittadi et al.'s network: at 128 px (K = 1, the pack size the sizing gives on this GPU with
    D21's 128 px dataset, and a pack of that size, at most dittadi_pack_most, stepped to check its
    memory), and at the preset's 64 px at K = d21_ks (the projection's rates)."""
    size = sizes["dittadi_size"]
    network = dict(architecture="dittadi", channels=3, image_size=size)
    images = synthetic_images(sizes["dittadi_images"], 3, size)
    data = Data(sizes["dittadi_images"], size)
    data._images[3] = images
    small = dict(sizes, batch=sizes["dittadi_batch"], warmup=sizes["dittadi_warmup"],
                 steps=sizes["dittadi_steps"])
    need = run.need("dittadi")
    run.measure("dittadi.k1_128px", lambda: throughput(device, small, network, 1, "bf16", data, peak, matmul),
                need=need)

    def sizing():
        config = pack_configs(1, steps=RUN_LENGTH, batch_size=sizes["dittadi_batch"], **network)[0]
        free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
        d21 = dataset_bytes(480_000, 3, size)  # a 3DShapes-sized training set at this size
        fits = max_pack_size(config, device, free_bytes=free or 8 * 2**30, dataset=d21)
        return {"pack_size": fits, "free_bytes": free if free is not None else NOT_ON_CPU,
                "dataset_bytes": d21, "member_memory_bytes_estimate": member_memory_bytes(config)}

    estimate = run.measure("dittadi.pack_size_estimate", sizing, need=need)
    fits = estimate["pack_size"] if isinstance(estimate, dict) else 2
    k = max(2, min(fits, sizes["dittadi_pack_most"]))
    once = dict(small, steps=max(1, sizes["dittadi_steps"] // 3), rounds=1)
    run.measure("dittadi.pack_128px",
                lambda: throughput(device, once, network, k, "bf16", data, peak, matmul), need=need)
    d21 = dict(architecture="dittadi", channels=3, image_size=sizes["d21_size"])
    data64 = Data(sizes["images"] if device.type == "cuda" else sizes["dittadi_images"], sizes["d21_size"])
    for k in sizes["d21_ks"]:
        run.measure(f"dittadi.d21_64px.k{k}_bf16",
                    lambda k=k: throughput(device, small, d21, k, "bf16", data64, peak, matmul), need=need)


def _evaluate_one(job: dict, results, evaluating) -> None:
    """One model's evaluation in its own process (the CPU-only task of a sweep), its timings put
    on ``results``; ``evaluating`` counts the processes inside ``evaluate``. A process of its own,
    not a daemonic pool worker, so DCI's joblib may use processes of its own as in a trial."""
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
    with evaluating.get_lock():
        evaluating.value += 1
    started = time.perf_counter()
    metrics = evaluate(model, data, split, config, seed=job["seed"], n_jobs=job["n_jobs"])
    seconds = time.perf_counter() - started
    with evaluating.get_lock():
        evaluating.value -= 1
    # joblib's process workers (DCI's parallel fits) would otherwise keep this process alive until
    # their idle timeout (300 s), and the pool's shutdown with it
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)
    results.put({"seed": job["seed"], "seconds": seconds, "began": began, "ended": time.time(),
                 "dci_disentanglement": metrics.get("dci_disentanglement")})


def evaluation_beside_training(run: Run, device, sizes) -> dict:
    """A K = pack_k bf16 burgess pack's images/s alone, then while ``eval_models`` processes run
    ``analysis.evaluation.evaluate`` (every metric at ``n_metric``) on the CPU cores, as a sweep's
    CPU-only evaluation tasks run beside its GPU trials; and the evaluations' seconds."""
    from data_pipeline import get_split, load_procedural
    from models import ModelConfig, Trainer, build

    data = load_procedural("dsprites", sizes["eval_images"], seed=0)
    train, _ = get_split("dsprites", "blank_side").train_test_indices(data.classes, data.factor_space)
    cores = os.cpu_count() or 1
    models, jobs = sizes["eval_models"], []
    n_jobs = max(1, cores // models)
    for seed in range(models):
        fields = dict(steps=sizes["eval_train_steps"], batch_size=sizes["batch"], seed=seed)
        config = ModelConfig(**fields)
        trainer = Trainer(build(config), data.images, train, config, device)
        trainer.advance(config.steps)
        weights = {k: v.detach().cpu().contiguous() for k, v in trainer.model.state_dict().items()}
        del trainer
        jobs.append({"config": fields, "weights": weights, "images": sizes["eval_images"], "seed": seed,
                     "n_nll": sizes["n_nll"], "n_metric": sizes["n_metric"], "n_jobs": n_jobs,
                     "dci_estimator": sizes["dci_estimator"]})
    release(device)
    k = sizes["pack_k"]
    configs = pack_configs(k, batch_size=sizes["batch"], steps=RUN_LENGTH)
    images = synthetic_images(sizes["images"])
    pack = PackedTrainer(configs, images, np.arange(len(images)), device=device, mode="vmap")
    per_round = k * sizes["steps"] * images_per_step(configs[0])
    seconds = _timed(pack.advance, device, sizes["steps"], sizes["rounds"], sizes["warmup"])
    alone = [per_round / s for s in seconds]
    spawn = multiprocessing.get_context("spawn")
    results, evaluating = spawn.Queue(), spawn.Value("i", 0)
    workers = [spawn.Process(target=_evaluate_one, args=(job, results, evaluating)) for job in jobs]
    started, began = time.perf_counter(), time.time()
    for worker in workers:
        worker.start()
    beside_all, beside_some, finished = [], [], []
    stopped = False
    try:
        while len(finished) < len(workers):
            if run.seconds_left() < 10:
                stopped = True
                break
            # one round of training, counted as beside every evaluation when all of them were
            # inside ``evaluate`` from its start to its end (not while they import or load data)
            during = evaluating.value
            rate = per_round / _timed(pack.advance, device, sizes["steps"], 1, 0)[0]
            after = evaluating.value
            if during == after == len(workers):
                beside_all.append(rate)
            elif during or after:
                beside_some.append(rate)
            while True:
                try:
                    finished.append(results.get_nowait())
                except queues.Empty:
                    break
            if len(finished) < len(workers) and not any(w.is_alive() for w in workers):
                try:
                    finished.append(results.get(timeout=5))  # the last result may be in transit
                except queues.Empty:
                    raise RuntimeError(f"{len(workers) - len(finished)} evaluation process(es) ended "
                                       "without a result") from None
    finally:
        for worker in workers:
            worker.join(timeout=1 if stopped or run.seconds_left() < 30 else 30)
            if worker.is_alive():
                worker.terminate()
    wall = time.perf_counter() - started
    del pack
    finished.sort(key=lambda r: r["seed"])
    out = {"pack_members": k, "evaluation_processes": models, "cores": cores, "n_jobs_each": n_jobs,
           "n_metric": sizes["n_metric"], "n_nll": sizes["n_nll"], "dataset_images": sizes["eval_images"],
           "dci_estimator": sizes["dci_estimator"],
           "images_per_second_alone": statistics.median(alone), "rounds_alone": alone,
           "images_per_second_beside_all": statistics.median(beside_all) if beside_all else None,
           "rounds_beside_all": summary(beside_all), "rounds_beside_some": summary(beside_some),
           "evaluation_wall_seconds": wall, "evaluation_seconds_each": [r["seconds"] for r in finished],
           # when each evaluation process began (imports, data) and ended, from the workers' start
           "worker_began_ended": [(r["began"] - began, r["ended"] - began) for r in finished]}
    if beside_all:
        out["beside_over_alone"] = out["images_per_second_beside_all"] / out["images_per_second_alone"]
    else:
        out["images_per_second_beside_all"] = "no training round fell while every evaluation ran"
    if stopped:
        unfinished = len(workers) - len(finished)
        out["unfinished_evaluations"] = f"{DEADLINE}: {unfinished} of {len(workers)} stopped"
    return out


def summary(values: list[float]) -> dict:
    """Count, median, least and most of some rounds' images/s."""
    if not values:
        return {"count": 0}
    return {"count": len(values), "median": statistics.median(values), "min": min(values), "max": max(values)}


def gpu_test_files() -> list[str]:
    """The test files that hold ``gpu``-marked tests: pytest collects only these (every test of the
    others would be deselected by ``-m gpu``, after importing them all)."""
    return sorted(str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("test_*.py")
                  if "mark.gpu" in path.read_text())


def pytest_gpu(run: Run) -> dict:
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider",
               *gpu_test_files()]
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text, _ = wait_for(process, run, limit=run.need("pytest_limit") or None)
    tail = text.strip().splitlines()
    counts = {name: int(n) for n, name in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)",
                                                      tail[-1] if tail else "")}
    result = {"returncode": process.returncode, "seconds": time.perf_counter() - started, **counts,
              "summary": tail[-1] if tail else "", "tail": "\n".join(tail[-40:])}
    failed = counts.get("failed") or counts.get("error") or counts.get("errors")
    if process.returncode not in (0, 5) or failed:
        raise RuntimeError(f"pytest -m gpu: {result['summary']}\n{result['tail']}")
    return result


# -- part 3: the GPUSettings switches -----------------------------------------------------------


def switch_names() -> list[str]:
    """Every on/off switch this checkout's ``GPUSettings`` has (its true-or-false fields), in the
    order measured: ``device_sampling`` and ``cuda_graph``, the others, ``compile``."""
    present = [field.name for field in dataclasses.fields(GPUSettings) if field.type in ("bool", bool)]
    first = [n for n in WANTED_SWITCHES if n in present and n != "compile"]
    # compile last: it compiles for minutes, so a deadline cuts it rather than the others
    last = [n for n in ("compile",) if n in present]
    return first + [n for n in present if n not in WANTED_SWITCHES] + last


def step_switches(run: Run, device, sizes, mode: str, data: Data, peak) -> None:
    """K = pack_k burgess in bf16 (float32 for ``tf32``) with each switch on and off, the others
    at their defaults, after the step built for the GPU (``device_sampling`` and ``cuda_graph`` on
    together). ``cuda_graph`` is measured with ``device_sampling`` on, off and on (it needs it:
    ``SWITCH_NEEDS``); ``fused_adam`` at K = 1, the plain path, the only one it acts on
    (``PLAIN_PATH_ONLY``; a pack's Adam ignores it). A wanted switch this checkout lacks is recorded
    as not available; on a CPU a switch that only acts on CUDA is recorded as "not measured: needs
    CUDA"."""
    present = switch_names()
    k = sizes["pack_k"]
    for name in WANTED_SWITCHES:
        if name not in present:
            run.set(f"switches.{name}", NOT_AVAILABLE)

    def measure(key: str, settings: dict, precision: str = "bf16", need: str = "switch", members: int = k):
        return run.measure(key, lambda: throughput(device, sizes, NETWORKS["burgess"], members, precision,
                                                   data, peak, None, GPUSettings(**settings)),
                           need=run.need(need))

    combined = [n for n in GPU_STEP_SWITCHES if n in present]
    key = "switches.gpu_step"
    if len(combined) < len(GPU_STEP_SWITCHES):
        run.set(key, f"{NOT_AVAILABLE}: {', '.join(n for n in GPU_STEP_SWITCHES if n not in present)}")
    elif device.type != "cuda":
        run.set(key, NOT_ON_CPU)
    else:
        measure(key, dict.fromkeys(GPU_STEP_SWITCHES, True))
    for name in present:
        for state in ("off", "on"):
            key = f"switches.{name}.{state}"
            if device.type != "cuda" and name not in ANY_DEVICE_SWITCHES:
                run.set(key, NOT_ON_CPU)
            elif name == "compile" and state == "on" and mode == "cpu-smoke":
                run.set(key, SMOKE_COMPILE)
            else:
                # a switch that needs another on is measured with it on in both (SWITCH_NEEDS), one
                # that a pack ignores on the plain path it acts on (PLAIN_PATH_ONLY)
                measure(key, {**SWITCH_NEEDS.get(name, {}), name: state == "on"},
                        "tf32" if name == "tf32" else "bf16",
                        "compile" if name == "compile" and state == "on" else "switch",
                        1 if name in PLAIN_PATH_ONLY else k)
        if name in SWITCH_NEEDS:
            run.set(f"switches.{name}.with", SWITCH_NEEDS[name])
        if name in PLAIN_PATH_ONLY:
            run.set(f"switches.{name}.measured_on", PLAIN_PATH_ONLY[name])
        on, off = run.get(f"switches.{name}.on"), run.get(f"switches.{name}.off")
        if all(isinstance(v, dict) and "images_per_second" in v for v in (on, off)):
            run.set(f"switches.{name}.on_over_off", on["images_per_second"] / off["images_per_second"])


# -- part 4: Ray --------------------------------------------------------------------------------


def ray_importable(run: Run) -> bool:
    """Whether ``import ray`` works, asked of a child process (this one never imports Ray), which
    is given until 5 s before the deadline."""
    process = subprocess.Popen([sys.executable, "-c", "import ray"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    wait_for(process, run)
    return process.returncode == 0


def parse_default_study(text: str) -> dict:
    found = re.search(r"wall time, Ray start-up included: ([0-9.]+) s for (\d+) trials", text)
    if not found:
        raise RuntimeError(f"default_study.py printed no wall time:\n{text[-3000:]}")
    return {"wall_seconds": float(found.group(1)), "trials": int(found.group(2)),
            "table": text.split("trials\n", 1)[-1].strip()}


def default_study(run: Run, sizes) -> dict | str:
    if not ray_importable(run):
        return NO_RAY
    command = [sys.executable, str(REPO / "benchmarks" / "default_study.py"), "--scale", sizes["study_scale"]]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text, _ = wait_for(process, run)
    if process.returncode != 0:
        raise RuntimeError(f"default_study.py exited {process.returncode}:\n{text[-3000:]}")
    return {"scale": sizes["study_scale"], **parse_default_study(text)}


# -- the part -----------------------------------------------------------------------------------


def expected_keys(part: int, sizes: dict) -> list[str]:
    """The figures part ``part`` writes (each measured, or a recorded reason it was not): what
    check_gpu_figures.py requires, and what the watchdog marks as not run."""
    if part == 1:
        keys = [f"matmul.{p}" for p in ("bf16", "tf32")]
        keys += [gpu_step_key(name, sizes) for name in GPU_STEP_RUNS]
        keys += ["headline.gpu_step_over_plain", "headline.cuda_graph", "checks.graph_against_eager",
                 "checks.no_host_sync"]
        keys += [f"throughput.{name}.k{k}_{p}"
                 for name in NETWORKS for p in sizes["precisions"] for k in sizes["ks"]]
        keys += [f"throughput.{name}.k{k}_bf16" for name in EXTRA_NETWORKS for k in (1, sizes["pack_k"])]
        return keys + ["throughput.burgess.k1_fp32", "projection.montero2021"]
    if part == 2:
        keys = []
        for name in NETWORKS:
            keys += [f"memory.{name}.points.k{k}" for k in sizes["memory_ks"]]
            keys += [f"memory.{name}.bytes_per_member", f"memory.{name}.member_memory_bytes_estimate"]
        keys += ["resident_vs_streamed.resident", "resident_vs_streamed.streamed", "dittadi.k1_128px",
                 "dittadi.pack_size_estimate", "dittadi.pack_128px"]
        keys += [f"dittadi.d21_64px.k{k}_bf16" for k in sizes["d21_ks"]]
        return keys + ["projection.dittadi2021", "evaluation_beside_training", "pytest_gpu"]
    if part == 3:
        present = switch_names()
        absent = [f"switches.{name}" for name in WANTED_SWITCHES if name not in present]
        both = [f"switches.{name}.{state}" for name in present for state in ("off", "on")]
        return ["switches.gpu_step"] + absent + both
    return ["default_study"]


def machine(device: torch.device) -> dict:
    out = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "device": str(device)}
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        out.update(name=properties.name, memory_bytes=properties.total_memory,
                   capability=f"{properties.major}.{properties.minor}",
                   multiprocessors=properties.multi_processor_count)
    return out


def started_at() -> float:
    """The part's start: gpu.sh's (``DISGEN_GPU_FIGURES_STARTED``, before Python started), else
    this module's first line."""
    given = os.environ.get("DISGEN_GPU_FIGURES_STARTED")
    try:
        return min(STARTED, float(given)) if given else STARTED
    except ValueError:
        return STARTED


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the folder to write gpu_figures_part<N>.json into")
    parser.add_argument("--part", type=int, choices=PARTS, required=True)
    parser.add_argument("--cpu-smoke", action="store_true", help="every measurement at tiny sizes on the CPU")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds from the process's start after which the part stops "
                             "(default: 510 on a GPU, 600 for the smoke)")
    parser.add_argument("--skip", nargs="*", default=[],
                        help="figures to leave out (dotted keys, or their first part)")
    args = parser.parse_args(argv)
    mode = "cpu-smoke" if args.cpu_smoke else "gpu"
    if mode == "gpu" and not torch.cuda.is_available():
        print("gpu_figures: no CUDA device (torch.cuda.is_available() is False); --cpu-smoke runs every "
              "measurement at tiny sizes on the CPU", file=sys.stderr)
        return 2
    device = torch.device("cuda" if mode == "gpu" else "cpu")
    sizes = SIZES[mode]
    if mode == "cpu-smoke":
        torch.set_num_threads(1)
    began = started_at()
    deadline = args.deadline if args.deadline is not None else sizes["deadline_seconds"]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = (peak_of(name) or {}) if device.type == "cuda" else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figures: dict = {"part": args.part, "mode": mode, "machine": machine(device), "sizes": sizes,
                     "deadline_seconds": deadline, "imports_seconds": time.time() - began,
                     "peak_tflops": NOT_ON_CPU if peak is None else peak or UNKNOWN_PEAK,
                     "peak_source": "NVIDIA datasheets, dense (benchmarks/gpu_figures.py PEAK_TFLOPS)"}
    run = Run(out / f"gpu_figures_part{args.part}.json", figures, began + deadline,
              expected_keys(args.part, sizes), device, sizes["need"], args.skip)
    run.write()
    undo_watchdog = run.start_watchdog()
    print(f"gpu_figures part {args.part} ({mode}): deadline {deadline:.0f} s from the start, "
          f"{run.seconds_left():.0f} s left after the imports; writing {run.path}",
          file=sys.stderr, flush=True)
    try:
        measure_part(run, args.part, device, mode, sizes, peak)
    finally:
        undo_watchdog()
    missing = [key for key in run.expected if run.get(key) is None]
    with run.lock:
        run.stopping = True  # a SIGTERM from here on leaves the record alone
        figures["missing"] = missing
        figures["imported_missing_packages"] = missing_packages_imported()
        figures["imported_packages"] = imported_packages()
        figures["seconds"]["total"] = time.time() - began
        run.write()
    cut = figures["not_run"]
    print(f"wrote {run.path} in {figures['seconds']['total']:.0f} s"
          + (f"; errors in {', '.join(figures['errors'])}" if figures["errors"] else "")
          + (f"; not run (deadline): {', '.join(cut)}" if cut else "")
          + (f"; missing: {', '.join(missing)}" if missing else ""), file=sys.stderr, flush=True)
    return 1 if figures["errors"] or missing else 3 if cut else 0


def measure_part(run: Run, part: int, device, mode: str, sizes: dict, peak) -> None:
    """Every measurement of ``part``, in order (the most wanted first within each)."""
    if part == 1:
        matmul = step_matmul(run, device)
        data = Data(sizes["images"])
        step_gpu_step(run, device, sizes, peak, matmul, data)
        step_throughput(run, device, sizes, peak, matmul, data)
        networks = {**NETWORKS, **EXTRA_NETWORKS}
        run.measure("projection.montero2021",
                    lambda: project("montero2021", measured_rates(run, "throughput", networks)),
                    need=run.need("projection"))
    elif part == 2:
        data = Data(sizes["images"])
        step_memory(run, device, sizes, data)
        step_resident_vs_streamed(run, device, sizes, data, peak)
        del data
        step_dittadi(run, device, sizes, peak, None)
        d21 = {"d21_64px": dict(architecture="dittadi", channels=3, image_size=sizes["d21_size"])}
        run.measure("projection.dittadi2021",
                    lambda: project("dittadi2021", measured_rates(run, "dittadi", d21)),
                    need=run.need("projection"))
        # pytest first: evaluation beside training runs until it is done or the deadline is near
        run.measure("pytest_gpu", lambda: pytest_gpu(run), need=run.need("pytest"))
        run.measure("evaluation_beside_training", lambda: evaluation_beside_training(run, device, sizes),
                    need=run.need("evaluation"))
    elif part == 3:
        step_switches(run, device, sizes, mode, Data(sizes["images"]), peak)
    else:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        run.measure("default_study", lambda: default_study(run, sizes), need=run.need("default_study"))

if __name__ == "__main__":
    sys.exit(main())
