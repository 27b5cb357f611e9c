"""The checkpoint format: what a trial's checkpoint folder holds, written and read here only.

A checkpoint is a folder: one file per model (``member_0000.pt``, ``member_0001.pt``, …; one for
a lone model, one per member of a pack) and a small index, ``trainer.pt``, written last. So a task
that needs one member of a pack reads that member's file and the index, never the whole pack
(``load_member``), and a checkpoint writer can hand each file to storage as soon as it is written.
Every value is plain data (tensors, numbers, strings, lists, dicts), so ``torch.load(...,
weights_only=True)`` reads it and no code in a checkpoint can run. Checkpoints are always read that
way: one from a colleague or a bucket is data, never a program. Two layouts:

- **in training** (``save_training``): each member file ``{"format", "member": its
  ``state_dict()``, "history": its progress reports}``; the index ``{"format", "members": count,
  "errors": {member: message}}``. Enough to resume exactly;
- **final** (``save_final``): each member file ``{"format", "weights", "step", "history"}``; the
  index ``{"format", "final": True, "members", "steps", "errors", "config": the Tune trial's config
  as JSON}``. The trained weights only (a third of the size with Adam's state): a trial restored
  from it is evaluated again, not retrained.

``load`` gives either layout back as one dict (``"trainer": {"members", "errors"}`` and
``"histories"``; or ``"models"``, ``"steps"``, ``"errors"``, ``"histories"``, ``"config"``). It also
reads the single-file ``trainer.pt`` of format 2 (every model in one file), which disgen wrote before
this layout. A file that needs pickle (written by disgen before format 2) is refused with a message
that says how to convert it: ``python -m models.checkpoint --convert PATH``. Converting reads the
old file with ``weights_only=True`` too, allowing only numpy's scalar and number dtypes (what older
disgen stored beside the tensors), so converting runs no code either.
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

CHECKPOINT_FILE = "trainer.pt"  # the index
FORMAT = 3
ONE_FILE_FORMAT = 2  # every model in trainer.pt itself: read, never written


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read as this format: the message says why and what to do."""


def member_file(position: int) -> str:
    """The file name of member ``position``'s part of a checkpoint."""
    return f"member_{position:04d}.pt"


def _save(folder: str, members: list[dict], index: dict) -> str:
    """Write each member's file, then the index (last: an index names files already written)."""
    for position, member in enumerate(members):
        torch.save({"format": FORMAT, **member}, os.path.join(folder, member_file(position)))
    path = os.path.join(folder, CHECKPOINT_FILE)
    torch.save({"format": FORMAT, "members": len(members), **index}, path)
    return path


def save_training(folder: str, trainer_state: dict, histories: list[list[dict]]) -> str:
    """Write an in-training checkpoint into ``folder`` (``trainer_state``: a pack's
    ``state_dict()``, ``{"members": [...], "errors": {...}}``); returns the index's path."""
    members = [{"member": state, "history": history}
               for state, history in zip(trainer_state["members"], histories, strict=True)]
    errors = {int(k): str(v) for k, v in trainer_state.get("errors", {}).items()}
    return _save(folder, members, {"errors": errors})


def save_final(folder: str, models: list[dict], steps: list[int], errors: dict[int, str],
               histories: list[list[dict]], config: dict) -> str:
    """Write a final checkpoint (trained weights only) into ``folder``; returns the index's path."""
    members = [{"weights": weights, "step": int(step), "history": history}
               for weights, step, history in zip(models, steps, histories, strict=True)]
    return _save(folder, members, {"final": True, "steps": [int(s) for s in steps],
                                   "errors": {int(k): str(v) for k, v in errors.items()},
                                   "config": json.dumps(config, sort_keys=True, default=str)})


def _read(path: str, map_location="cpu", mmap: bool = False) -> dict:
    """One checkpoint file, read with ``weights_only=True``; a ``CheckpointError`` saying why if
    it is missing, truncated, not a checkpoint, or needs pickle."""
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
    if not isinstance(state, dict) or state.get("format") not in (FORMAT, ONE_FILE_FORMAT):
        raise CheckpointError(f"{path}: not a disgen checkpoint of format {FORMAT}; if an older disgen "
                              "wrote it, convert it: "
                              f"python -m models.checkpoint --convert {path}")
    return state


def _index(path: str) -> tuple[str, dict]:
    """(the checkpoint's folder, its index) of a checkpoint folder or its ``trainer.pt``."""
    if os.path.isdir(path):
        path = os.path.join(path, CHECKPOINT_FILE)
    state = _read(path)
    if state["format"] == FORMAT and not isinstance(state.get("members"), int):
        raise CheckpointError(f"{path}: not a checkpoint index (it names no members)")
    if isinstance(state.get("config"), str):
        state["config"] = json.loads(state["config"])
    return os.path.dirname(path) or ".", state


def _member(folder: str, position: int, map_location="cpu", mmap: bool = False) -> dict:
    member = _read(os.path.join(folder, member_file(position)), map_location, mmap)
    if member.get("format") != FORMAT:
        raise CheckpointError(f"{folder}/{member_file(position)}: not a member file of format {FORMAT}")
    return member


def load(path: str, map_location="cpu", mmap: bool = False) -> dict:
    """A checkpoint (its folder, or its ``trainer.pt``) as one dict, every member read (the
    layouts in the module docstring; ``config`` decoded from JSON); a ``CheckpointError`` saying
    why if a file is missing, truncated, not a checkpoint, or needs pickle. ``mmap``: the tensors
    are memory-mapped, read from the files only when used."""
    folder, index = _index(path)
    if index["format"] == ONE_FILE_FORMAT:
        return index
    members = [_member(folder, k, map_location, mmap) for k in range(index["members"])]
    state = {"format": FORMAT, "histories": [m["history"] for m in members]}
    if index.get("final"):
        return {**state, "final": True, "models": [m["weights"] for m in members], "steps": index["steps"],
                "errors": index["errors"], "config": index["config"]}
    return {**state, "trainer": {"members": [m["member"] for m in members], "errors": index["errors"]}}


def load_member(path: str, position: int, mmap: bool = False) -> dict:
    """Member ``position`` of a final checkpoint (its folder, or its ``trainer.pt``):
    ``{"weights", "step", "history", "config"}`` (``config``: the member's settings), reading the
    index and that member's file only. ``mmap``: its tensors are read from the file when used."""
    folder, index = _index(path)
    if not index.get("final"):
        raise CheckpointError(f"{path}: not a final trial checkpoint (the trial had not finished)")
    if not 0 <= position < len(index["steps"]):
        raise CheckpointError(f"{path}: holds {len(index['steps'])} model(s), not member {position}")
    config = index["config"]["members"][position] if "members" in index.get("config", {}) else {}
    if index["format"] == ONE_FILE_FORMAT:
        return {"weights": index["models"][position], "step": int(index["steps"][position]),
                "history": index["histories"][position], "config": config}
    member = _member(folder, position, mmap=mmap)
    return {"weights": member["weights"], "step": member["step"], "history": member["history"],
            "config": config}


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
