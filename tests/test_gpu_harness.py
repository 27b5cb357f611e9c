"""What .ci/gpu_smoke rests on: the import blocker really makes every package the GPU machine
lacks unimportable (in the process and in its children), a part that imports one fails, and
benchmarks/check_gpu_figures.py fails a part whose JSON lacks a figure, holds an error, a deadline
cut or a failed check, or holds a CPU-only reason in a GPU run."""

import ast
import copy
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BLOCKER = REPO / ".ci" / "block_missing_packages"
sys.path.insert(0, str(REPO / "benchmarks"))

import check_gpu_figures  # noqa: E402
import gpu_figures  # noqa: E402


def _python(code: str, blocked: bool) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(BLOCKER) if blocked else ""}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)


TRY_IMPORTS = """
import importlib, subprocess, sys
for name in ("ray", "optuna", "ray.tune", "optuna.samplers", "boto3", "moto", "mlflow", "wandb"):
    try:
        importlib.import_module(name)
        print("imported", name)
    except ModuleNotFoundError as error:
        print("blocked", name, error.name)
import numpy  # everything else still imports
# a child process inherits the blocker through PYTHONPATH
child = subprocess.run([sys.executable, "-c", "import ray"], capture_output=True)
print("child", "blocked" if child.returncode else "imported")
"""


def test_the_import_blocker_makes_ray_and_optuna_unimportable_in_the_process_and_its_children():
    done = _python(TRY_IMPORTS, blocked=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:9] == [
        "blocked ray ray", "blocked optuna optuna", "blocked ray.tune ray", "blocked optuna.samplers optuna",
        "blocked boto3 boto3", "blocked moto moto", "blocked mlflow mlflow", "blocked wandb wandb",
        "child blocked"]


def test_the_blocker_blocks_what_the_figures_call_missing_on_the_gpu_machine():
    tree = ast.parse((BLOCKER / "sitecustomize.py").read_text())
    default = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                   and getattr(node.targets[0], "id", "") == "DEFAULT")
    assert tuple(default.split(",")) == gpu_figures.MISSING_ON_THE_GPU_MACHINE


PART_THAT_IMPORTS = """
import sys
sys.path.insert(0, {benchmarks!r})
import gpu_figures
def measure_part(run, part, *rest):  # part 1, made to import a package the GPU machine lacks
    run.measure("matmul.bf16", lambda: __import__({name!r}) and 1.0)
gpu_figures.measure_part = measure_part
sys.exit(gpu_figures.main([{out!r}, "--part", "1", "--cpu-smoke"]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("blocked", [True, False])
def test_a_part_that_imports_a_package_the_gpu_machine_lacks_fails(tmp_path, blocked):
    """Under the blocker (as in .ci/gpu_smoke) the import fails the measurement; without it (here,
    where boto3 is installed) the part records the import, and the checker fails it either way."""
    name = "wandb" if blocked else "boto3"
    if not blocked and importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed here")
    code = PART_THAT_IMPORTS.format(benchmarks=str(REPO / "benchmarks"), name=name, out=str(tmp_path))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{BLOCKER}:{REPO}" if blocked else str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    problems = "\n".join(check_gpu_figures.check(tmp_path, [1]))
    assert done.returncode == 1, done.stderr  # (its other figures are missing too)
    if blocked:
        assert f"part 1: matmul.bf16: error: ModuleNotFoundError: No module named '{name}'" in problems
    else:
        assert f"part 1: imported {name}" in problems


@pytest.mark.skipif(importlib.util.find_spec("ray") is None or importlib.util.find_spec("optuna") is None,
                    reason="Ray or Optuna is not installed here")
def test_without_the_blocker_ray_and_optuna_import_here():
    """The check above could fail: in this environment both are installed (the project's
    dependencies), so only the blocker stops them."""
    done = _python(TRY_IMPORTS, blocked=False)
    assert done.returncode == 0, done.stderr
    assert "imported ray" in done.stdout and "imported optuna" in done.stdout
    assert "child imported" in done.stdout


def _complete(part: int, mode: str) -> dict:
    """A part's JSON with every expected figure measured (a number), as the part writes it."""
    figures = {"part": part, "mode": mode, "errors": {}, "not_run": [], "missing": [],
               "imported_missing_packages": [], "seconds": {"total": 1.0}}
    for key in gpu_figures.expected_keys(part, gpu_figures.SIZES[mode]):
        node = figures
        *parents, last = key.split(".")
        for name in parents:
            node = node.setdefault(name, {})
        mfu = 0.1 if mode == "gpu" else gpu_figures.NOT_ON_CPU
        node[last] = {"images_per_second": 1.0, "inner": {"mfu": mfu}}
    return figures


def _set(figures: dict, key: str, value) -> dict:
    node = figures
    *parents, last = key.split(".")
    for name in parents:
        node = node[name]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return figures


@pytest.mark.parametrize("part", [1, 2, 3, 4])
@pytest.mark.parametrize("mode", ["cpu-smoke", "gpu"])
def test_the_checker_passes_a_complete_part_and_fails_one_without_a_figure(part, mode):
    complete = _complete(part, mode)
    assert check_gpu_figures.check_figures(complete, part) == []
    for key in gpu_figures.expected_keys(part, gpu_figures.SIZES[mode]):
        problems = check_gpu_figures.check_figures(_set(copy.deepcopy(complete), key, None), part)
        assert problems == [f"part {part}: {key}: missing"]


def test_the_checker_fails_errors_deadline_cuts_and_reasons_out_of_place():
    key = "throughput.kim.k1_bf16"
    smoke = _complete(1, "cpu-smoke")
    check = check_gpu_figures.check_figures
    assert check(_set(copy.deepcopy(smoke), key, gpu_figures.NOT_ON_CPU), 1) == []
    assert check(_set(copy.deepcopy(smoke), key, {"error": "RuntimeError: rotted"}), 1) \
        == [f"part 1: {key}: error: RuntimeError: rotted"]
    assert check(_set(copy.deepcopy(smoke), key, gpu_figures.DEADLINE), 1) \
        == [f"part 1: {key}: not run: deadline"]
    rounds = {"images_per_second": 1.0, "rounds": [1.0, gpu_figures.DEADLINE]}
    inside = _set(copy.deepcopy(smoke), key, rounds)
    assert check(inside, 1) == [f"part 1: {key}.rounds[1]: not run: deadline"]
    assert check(_set(copy.deepcopy(smoke), key, "skipped: --skip"), 1) == [f"part 1: {key}: skipped: --skip"]
    # a GPU run must measure what the CPU smoke may leave to CUDA
    gpu = _complete(1, "gpu")
    assert check(_set(copy.deepcopy(gpu), "matmul.bf16", gpu_figures.NOT_ON_CPU), 1) \
        == ["part 1: matmul.bf16: not measured: needs CUDA"]
    assert check(_set(copy.deepcopy(gpu), key, {"mfu": gpu_figures.NOT_ON_CPU}), 1) \
        == [f"part 1: {key}.mfu: not measured: needs CUDA"]
    # "skipped: Ray is not installed" stands in for part 4's study only
    assert check(_set(_complete(4, "gpu"), "default_study", gpu_figures.NO_RAY), 4) == []
    assert check(_set(copy.deepcopy(smoke), key, gpu_figures.NO_RAY), 1) \
        == [f"part 1: {key}: {gpu_figures.NO_RAY}"]
    imported = dict(copy.deepcopy(smoke), imported_missing_packages=["ray"])
    assert check(imported, 1) == ["part 1: imported ray, which the GPU machine lacks"]
    assert check(dict(copy.deepcopy(smoke), errors={"x": "boom"}), 1) == ["part 1: x: error recorded"]
    assert check(dict(copy.deepcopy(smoke), part=2), 1) == ["part 1: the file is part 2's"]


def test_the_checker_script_exits_1_on_a_missing_figure_and_0_on_complete_parts(tmp_path):
    for part in (1, 2, 3, 4):
        (tmp_path / f"gpu_figures_part{part}.json").write_text(json.dumps(_complete(part, "cpu-smoke")))
    assert check_gpu_figures.main([str(tmp_path)]) == 0
    figures = _complete(2, "cpu-smoke")
    del figures["pytest_gpu"]
    (tmp_path / "gpu_figures_part2.json").write_text(json.dumps(figures))
    assert check_gpu_figures.main([str(tmp_path)]) == 1
    assert check_gpu_figures.check(tmp_path) == ["part 2: pytest_gpu: missing"]
    (tmp_path / "gpu_figures_part3.json").unlink()
    assert len(check_gpu_figures.check(tmp_path, [3])) == 1


def _kind(key: str) -> str:
    """A figure's key with its pack size and Dittadi image size left out."""
    return re.sub(r"\bk\d+", "kN", key)


@pytest.mark.parametrize("part", [1, 2, 3, 4])
def test_the_cpu_smoke_expects_every_kind_of_figure_the_gpu_run_does(part):
    gpu = {_kind(k) for k in gpu_figures.expected_keys(part, gpu_figures.SIZES["gpu"])}
    smoke = {_kind(k) for k in gpu_figures.expected_keys(part, gpu_figures.SIZES["cpu-smoke"])}
    assert gpu == smoke


def test_the_gpu_run_expects_the_issues_figures():
    """Issue 31's list: images/s at K = 1, 8, 32, 64 in bf16 and TF32 for burgess and Montero
    et al.'s networks (the ground-truth decoder's included); the measured matmul peak; bytes per
    member; resident against streamed; both projections; training beside evaluation; every switch."""
    keys = [k for part in (1, 2, 3) for k in gpu_figures.expected_keys(part, gpu_figures.SIZES["gpu"])]
    for name in ("burgess", "burgess_v2", "kim", "higgins_decoder"):
        for precision in ("bf16", "tf32"):
            assert {f"throughput.{name}.k{k}_{precision}" for k in (1, 8, 32, 64)} <= set(keys)
        assert f"memory.{name}.bytes_per_member" in keys
    assert gpu_figures.NETWORKS["higgins_decoder"]["task"] == "ground_truth_decoder"
    for key in ("matmul.bf16", "matmul.tf32", "resident_vs_streamed.resident",
                "resident_vs_streamed.streamed", "projection.montero2021", "projection.dittadi2021",
                "evaluation_beside_training", "switches.gpu_step"):
        assert key in keys
    for name in gpu_figures.WANTED_SWITCHES:
        assert f"switches.{name}" in keys or {f"switches.{name}.on", f"switches.{name}.off"} <= set(keys)


class ReplayingGraph:
    """A stand-in for a captured CUDA graph on the CPU: capturing runs nothing (as a capture runs no
    kernel); each replay runs the captured step again into the same output dict."""

    def __init__(self, function):
        self.function, self.outputs = function, {}

    def replay(self):
        self.outputs.update({name: value.detach() for name, value in self.function().items()})


def graph_on_the_cpu(monkeypatch):
    import models.packed as packed

    original = packed._VmapGroup.__init__

    def init(self, members):
        original(self, members)
        self.graph_wanted = members[0].settings.cuda_graph

    def capture(function, device):
        graph = ReplayingGraph(function)
        return graph, graph.outputs

    monkeypatch.setattr(packed._VmapGroup, "__init__", init)
    monkeypatch.setattr(packed, "capture_graph", capture)
    return packed


@pytest.mark.slow
def test_the_graph_check_compares_parameters_and_moments_and_catches_a_stale_replay(monkeypatch):
    """Part 1's check (checks.graph_against_eager), run on the CPU with a stand-in graph: the graph's
    steps are the eager steps, so it passes; a replay that reads stale inputs (the buffers never
    reloaded after the capture) fails it."""
    import torch

    packed = graph_on_the_cpu(monkeypatch)
    sizes = dict(gpu_figures.SIZES["cpu-smoke"], check_steps=3)
    data = gpu_figures.Data(64)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = gpu_figures.compare_graph_and_eager(torch.device("cpu"), sizes, data)
        assert result["passed"], result
        assert result["cuda_graph"] == {"members 0-1": "captured"}
        assert set(result["worst"]) == {"parameters", "exp_avg", "exp_avg_sq"}
        assert all(w["difference_over_change"] < 1e-4 for w in result["worst"].values())
        loaded = packed._CapturedStep.load

        def stale(self, *arguments):
            if self.outcome is None:  # up to the capture; replays then read the captured step's inputs
                loaded(self, *arguments)

        monkeypatch.setattr(packed._CapturedStep, "load", stale)
        broken = gpu_figures.compare_graph_and_eager(torch.device("cpu"), sizes, data)
    finally:
        torch.set_num_threads(threads)
    assert not broken["passed"]
    assert broken["worst"]["parameters"]["difference_over_change"] > gpu_figures.GRAPH_TOLERANCE


def test_difference_over_change_is_0_for_the_same_tensor_and_1_for_no_update():
    import torch

    start, end = torch.zeros(4), torch.tensor([3.0, 4.0, 0.0, 0.0])
    assert gpu_figures.difference_over_change(start, end, end) == 0.0
    assert gpu_figures.difference_over_change(start, end, start) == 1.0
    assert gpu_figures.difference_over_change(start, end, end + torch.tensor([0.05, 0, 0, 0])) == \
        pytest.approx(0.01)


def test_the_headline_divides_the_gpu_steps_rate_by_one_models_and_says_why_where_it_cannot(tmp_path):
    import torch

    sizes = gpu_figures.SIZES["gpu"]
    run = gpu_figures.Run(tmp_path / "part1.json", {}, 1e12, [], torch.device("cpu"))
    rates = {"k1_plain": 1000.0, "kN_default": 2500.0, "kN_device_sampling": 4000.0,
             "kN_device_sampling_graph": 12000.0}
    for name, rate in rates.items():
        run.set(gpu_figures.gpu_step_key(name, sizes), {"images_per_second": rate, "mfu": 0.05,
                                                        "fraction_of_measured_matmul": 0.06})
    run.get("gpu_step.k32_device_sampling_graph")["cuda_graph"] = {"members 0-31": "captured"}
    headline = gpu_figures.gpu_step_headline(run, sizes)
    assert headline["gpu_step_over_plain"] == 12.0 and headline["default_over_plain"] == 2.5
    assert headline["device_sampling_over_plain"] == 4.0 and headline["pack_k"] == 32
    assert headline["mfu"] == 0.05 and headline["mfu_of_measured_matmul"] == 0.06
    assert headline["cuda_graph"] == {"members 0-31": "captured"}
    run.set("gpu_step.k32_device_sampling_graph", {"error": "RuntimeError: boom"})
    failed = gpu_figures.gpu_step_headline(run, sizes)
    assert failed["gpu_step_over_plain"] == {
        "error": "gpu_step.k32_device_sampling_graph failed (its error is under errors)"}
    assert check_gpu_figures._cut_inside(failed, "headline", ()) != []  # the checker fails it
    run.set("gpu_step.k1_plain", gpu_figures.DEADLINE)
    assert gpu_figures.gpu_step_headline(run, sizes)["default_over_plain"] == gpu_figures.DEADLINE


def test_a_failed_measurement_keeps_the_head_and_the_tail_of_the_whole_chain(tmp_path):
    """A capture's real error is the first of the chain, under the generic one capture_end raises:
    the record keeps the traceback's head (where the first is) and tail, and names the first."""
    import torch

    def deep(n):  # two functions in turn: a traceback prints each frame (it folds only repeats)
        if n == 0:
            raise RuntimeError("operation not permitted when stream is capturing")
        deeper(n - 1)

    def deeper(n):
        deep(n)

    def measurement():
        try:
            deep(200)  # a traceback far longer than the record keeps
        finally:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    run = gpu_figures.Run(tmp_path / "part1.json", {}, 1e12, [], torch.device("cpu"))
    value = run.measure("matmul.bf16", measurement)
    assert value == {
        "error": "RuntimeError: CUDA error: operation failed due to a previous error during capture",
        "first": "RuntimeError: operation not permitted when stream is capturing"}
    record = run.figures["errors"]["matmul.bf16"]
    assert record.splitlines()[1:4] == [
        "the chain, first to last:", "  1. RuntimeError: operation not permitted when stream is capturing",
        "  2. RuntimeError: CUDA error: operation failed due to a previous error during capture"]
    assert 'line 321, in measurement\n    deep(200)' in record[:gpu_figures.ERROR_HEAD + 400]  # the head
    assert record.rstrip().endswith("previous error during capture")
    assert "characters of the traceback left out" in record
    assert len(record) < gpu_figures.ERROR_HEAD + gpu_figures.ERROR_TAIL + 500  # of over 30,000
