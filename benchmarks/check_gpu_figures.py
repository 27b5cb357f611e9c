"""Check that each part of ``benchmarks/gpu.sh`` brought back every figure it must.

    python3 benchmarks/check_gpu_figures.py OUT_DIR [--parts 1 2 3 4]

reads ``OUT_DIR/gpu_figures_partN.json`` for each part and, against the keys that
``gpu_figures.expected_keys`` gives for the part and the file's mode (the GPU run's sizes, or the
CPU smoke's), fails (exit 1, each problem printed) when:

- the file is missing, not JSON, or of another part;
- an expected figure is missing, an error (``{"error": ...}``), skipped with ``--skip``, or "not
  run: deadline" (anywhere inside it too; in a GPU run "not measured: needs CUDA" too), or the
  part recorded errors or missing figures, or was stopped;
- a figure holds a reason that is not accepted in its mode: "not measured: needs CUDA" and the CPU
  smoke's own reasons count as present only in the CPU smoke, "not available in this checkout"
  (a wanted ``GPUSettings`` switch this checkout lacks) in both, "skipped: Ray is not installed"
  for part 4's ``default_study`` only;
- a part imported a package the GPU machine lacks (``gpu_figures.MISSING_ON_THE_GPU_MACHINE``:
  Ray, Optuna, boto3, moto, MLflow, W&B; part 4 asks a child process whether Ray imports);
- a check of part 1 (``checks.graph_against_eager``, ``checks.no_host_sync``) failed.

.ci/gpu_smoke runs it after the CPU smoke of every part; on the GPU machine it says which figures
a run still lacks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_figures  # noqa: E402

# reasons a figure may hold instead of a value, and where each counts as present
ANYWHERE = (gpu_figures.NOT_AVAILABLE,)
SMOKE_ONLY = (gpu_figures.NOT_ON_CPU, gpu_figures.SMOKE_COMPILE)
RAY_ONLY = {"default_study": gpu_figures.NO_RAY}


def _found(figures: dict, key: str):
    node = figures
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None, False
        node = node[part]
    return node, True


def _cut_inside(value, path: str, refused: tuple[str, ...]) -> list[str]:
    """Where inside a measured figure an error, or a string that starts with one of ``refused``
    (a deadline cut; on a GPU, "not measured: needs CUDA"), is recorded."""
    found = []
    if isinstance(value, dict):
        if "error" in value:
            found.append(f"{path}: error: {value['error']}")
        for name, inner in value.items():
            found += _cut_inside(inner, f"{path}.{name}", refused)
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found += _cut_inside(inner, f"{path}[{i}]", refused)
    elif isinstance(value, str) and value.startswith(refused):
        found.append(f"{path}: {value}")
    return found


def check_figures(figures: dict, part: int) -> list[str]:
    """The problems of one part's figures (none: every figure is there)."""
    mode = figures.get("mode")
    if mode not in gpu_figures.SIZES:
        return [f"part {part}: unknown mode {mode!r}"]
    if figures.get("part") != part:
        return [f"part {part}: the file is part {figures.get('part')!r}'s"]
    problems = []
    accepted = ANYWHERE + (SMOKE_ONLY if mode == "cpu-smoke" else ())
    refused = (gpu_figures.DEADLINE,) + ((gpu_figures.NOT_ON_CPU,) if mode != "cpu-smoke" else ())
    for key in gpu_figures.expected_keys(part, gpu_figures.SIZES[mode]):
        value, present = _found(figures, key)
        if not present or value is None:
            problems.append(f"part {part}: {key}: missing")
        elif isinstance(value, str):
            if not (value.startswith(accepted) or value == RAY_ONLY.get(key)):
                problems.append(f"part {part}: {key}: {value}")
        else:
            problems += [f"part {part}: {cut}" for cut in _cut_inside(value, key, refused)]
    for key in figures.get("errors") or {}:
        problems.append(f"part {part}: {key}: error recorded")
    for key in figures.get("missing") or []:
        problems.append(f"part {part}: {key}: recorded as missing")
    if "stopped" in figures:
        problems.append(f"part {part}: stopped: {figures['stopped']}")
    if "seconds" not in figures or "total" not in figures["seconds"]:
        problems.append(f"part {part}: the part did not finish (no seconds.total)")
    if figures.get("imported_missing_packages"):
        problems.append(f"part {part}: imported {', '.join(figures['imported_missing_packages'])}, which the "
                        "GPU machine lacks")
    for name, check in (figures.get("checks") or {}).items():
        if isinstance(check, dict) and check.get("passed") is False:
            problems.append(f"part {part}: checks.{name}: failed")
    return list(dict.fromkeys(problems))


def check(out: Path, parts=gpu_figures.PARTS) -> list[str]:
    problems = []
    for part in parts:
        path = out / f"gpu_figures_part{part}.json"
        try:
            figures = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            problems.append(f"part {part}: {path}: {error}")
            continue
        problems += check_figures(figures, part)
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder gpu.sh wrote gpu_figures_part<N>.json into")
    parser.add_argument("--parts", type=int, nargs="+", choices=gpu_figures.PARTS,
                        default=list(gpu_figures.PARTS))
    args = parser.parse_args(argv)
    problems = check(args.out, args.parts)
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"check_gpu_figures: parts {' '.join(map(str, args.parts))} in {args.out}: "
          + (f"{len(problems)} problem(s)" if problems else "every figure present"), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
