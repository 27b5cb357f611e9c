"""The ``trainer.pt`` format: what a trial's checkpoint holds, written and read here only.

Every value is plain data (tensors, numbers, strings, lists, dicts), so ``torch.load(...,
weights_only=True)`` reads it and no code in a checkpoint can run. Checkpoints are always read that
way: one from a colleague or a bucket is data, never a program. Two layouts:

- **in training** (``save_training``): ``{"format", "trainer": PackedTrainer.state_dict(),
  "histories": [one list of progress reports per model]}``, enough to resume exactly;
- **final** (``save_final``): ``{"format", "final": True, "models": [weights per model], "steps",
  "errors": {member: message}, "histories", "config": the Tune trial's config as JSON}``; the
  trained weights only (a third of the size with Adam's state): a trial restored from it is
  evaluated again, not retrained.

A file that needs pickle (written by disgen before this format) is refused with a message that
says how to convert it: ``python -m models.checkpoint --convert PATH``. Converting reads the old file
with ``weights_only=True`` too, allowing only numpy's scalar and number dtypes (what older disgen
stored beside the tensors), so converting runs no code either.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import sys

import numpy as np
import torch

CHECKPOINT_FILE = "trainer.pt"
FORMAT = 2


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read as this format: the message says why and what to do."""


def save_training(folder: str, trainer_state: dict, histories: list[list[dict]]) -> str:
    """Write an in-training checkpoint into ``folder``; returns its path."""
    path = os.path.join(folder, CHECKPOINT_FILE)
    torch.save({"format": FORMAT, "trainer": trainer_state, "histories": histories}, path)
    return path


def save_final(folder: str, models: list[dict], steps: list[int], errors: dict[int, str],
               histories: list[list[dict]], config: dict) -> str:
    """Write a final checkpoint (trained weights only) into ``folder``; returns its path."""
    path = os.path.join(folder, CHECKPOINT_FILE)
    torch.save({"format": FORMAT, "final": True, "models": models, "steps": steps,
                "errors": {int(k): str(v) for k, v in errors.items()}, "histories": histories,
                "config": json.dumps(config, sort_keys=True, default=str)}, path)
    return path


def load(path: str, map_location="cpu", mmap: bool = False) -> dict:
    """A ``trainer.pt`` as a dict (``config`` decoded from JSON), read with ``weights_only=True``;
    a ``CheckpointError`` saying why if it is missing, truncated, not a checkpoint, or needs pickle.
    ``mmap``: the tensors are memory-mapped, read from the file only when used (one member of a
    large pack's final checkpoint, without reading the others)."""
    if os.path.isdir(path):
        path = os.path.join(path, CHECKPOINT_FILE)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint file") from None
    except pickle.UnpicklingError as error:
        if "global" in str(error):  # torch names the global a weights-only load refused
            raise CheckpointError(
                f"{path}: refused, it needs pickle to load ({_first_line(error, 'global')}). disgen reads "
                "checkpoints as data only. If the file was written by an older disgen, convert "
                f"it once: python -m models.checkpoint --convert {path}") from None
        raise CheckpointError(f"{path}: corrupt, not a readable checkpoint ({_first_line(error)})") from None
    except Exception as error:  # a truncated or foreign file: torch raises several kinds
        kind = "truncated" if isinstance(error, EOFError) or "central directory" in str(error) else "corrupt"
        raise CheckpointError(f"{path}: {kind}, not a readable checkpoint ({type(error).__name__}: "
                              f"{_first_line(error)})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a disgen trainer.pt of format {FORMAT}; if an older disgen "
                              "wrote it, convert it: "
                              f"python -m models.checkpoint --convert {path}")
    if isinstance(state.get("config"), str):
        state["config"] = json.loads(state["config"])
    return state


def _first_line(error: BaseException, containing: str = "") -> str:
    """An exception's first line (with ``containing``, if one has it), without terminal colour codes,
    at most 200 characters."""
    lines = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip().splitlines()
    if not lines:
        return type(error).__name__
    return next((line.strip() for line in lines if containing in line), lines[0])[:200]


def _plain(value):
    """Numpy scalars and tuples of an old checkpoint as plain Python values."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if hasattr(value, "item") and not isinstance(value, torch.Tensor):
        return value.item()
    return value


def _old_checkpoint(path: str) -> dict:
    """An older disgen's checkpoint, read as data: ``weights_only=True`` with numpy's scalars and
    number dtypes allowed (its configs and histories held numpy numbers), nothing else; a
    ``CheckpointError`` naming what else the file would need."""
    scalar = (getattr(np, "_core", None) or np.core).multiarray.scalar  # numpy 2, numpy 1
    # a file names the scalar by the numpy that wrote it: numpy._core (2.x) or numpy.core (1.x)
    scalars = [(scalar, f"{module}.multiarray.scalar") for module in ("numpy._core", "numpy.core")]
    number_dtypes = [type(np.dtype(code)) for code in "?bhilqBHILQefd"]
    try:
        with torch.serialization.safe_globals([*scalars, np.dtype, *number_dtypes]):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        needs = ", ".join(torch.serialization.get_unsafe_globals_in_checkpoint(path))
        raise CheckpointError(f"{path}: refused, not converted: it needs {needs} to load, which "
                              "could run code; an older disgen never wrote those") from None


def convert(path: str) -> str:
    """Rewrite an older (pickled) checkpoint in this format, in place, reading it as data only."""
    old = _old_checkpoint(path)
    folder = os.path.dirname(path) or "."
    config = _plain(old.get("config", {}))
    if "pack" in config:
        config = {"members": config["pack"]}
    elif config and "members" not in config:
        config = {"members": [config]}
    if old.get("final"):
        models = old.get("models") or [old["model"] if "model" in old else old["trainer"]["model"]]
        return save_final(folder, models, _plain(list(old.get("steps", [0] * len(models)))),
                          _plain(old.get("errors", {})),
                          _plain(old.get("histories", [[]] * len(models))), config)
    return save_training(folder, _plain(old["trainer"]), _plain(old.get("histories", [])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.checkpoint",
                                     description="Convert checkpoints written by an older disgen (which "
                                                 "need pickle) to the current data-only format.")
    parser.add_argument("--convert", nargs="+", metavar="PATH", required=True,
                        help="trainer.pt files to convert in place (read as data only: a file "
                             "that would need more than tensors and numpy numbers is refused)")
    args = parser.parse_args(argv)
    for path in args.convert:
        try:
            convert(path)
            load(path)
        except Exception as error:  # a command line: one line per file, exit 2 on the first failure
            print(f"error: {path}: cannot convert ({type(error).__name__}: {error})", file=sys.stderr)
            return 2
        print(f"converted {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
