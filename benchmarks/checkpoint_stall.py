"""The training stall per in-training checkpoint of a pack, before and after issue 32's change.

    python benchmarks/checkpoint_stall.py                 # 32 members of Dittadi et al.'s 64-px network
    python benchmarks/checkpoint_stall.py --k 4 --repeats 2 --architecture burgess   # a quick look

One CPU ``PackedTrainer`` of K members (trained a few steps, so each holds its Adam moments), then
for each path, ``--repeats`` checkpoints of its state, each into a fresh "storage" folder on this
machine's disk (``--storage``; a cluster's is S3, where the upload takes longer):

- ``before``: what the trainable did inside ``tune.report`` until this change, while training
  waited: the whole state written as one ``trainer.pt`` (format 2) into a temporary folder, sealed,
  then copied into the storage folder (Tune's ``persist_current_checkpoint`` is a pyarrow
  ``copy_files`` of the folder);
- ``after``: ``sweeps.checkpoints.CheckpointWriter.save``: the state copied into host memory of its
  own; the files (one per member), the seal and the copy to storage are written by a background
  thread. The stall is ``save``'s time; ``write`` is how long the background thread then took;
  ``step while writing`` is a training step's time while a write is in flight, beside ``step``
  alone (the background thread shares the CPU and the disk).

Prints one line per figure and a JSON summary at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow.fs
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models.packed import PackedTrainer  # noqa: E402
from sweeps.checkpoints import CheckpointWriter, seal  # noqa: E402
from sweeps.trials import TrialConfig  # noqa: E402


def members(k: int, architecture: str) -> list[TrialConfig]:
    return [TrialConfig.complete({"dataset": "shapes3d", "split": "d21_ood1a", "n_images": 256,
                                  "data_seed": 0, "report_every": 1, "n_nll": 10, "n_metric": 10,
                                  "architecture": architecture, "objective": "beta_vae", "steps": 1000,
                                  "batch_size": 4, "beta": float(b + 1), "seed": b}) for b in range(k)]


def before(trainer: PackedTrainer, histories, trials, storage: str) -> float:
    """The old path's stall: write one file, seal, copy to storage; seconds."""
    started = time.perf_counter()
    state = trainer.pack_state_dict()
    with tempfile.TemporaryDirectory(dir=os.path.dirname(storage)) as folder:
        whole = {"format": 2, "trainer": state, "histories": histories}
        torch.save(whole, os.path.join(folder, "trainer.pt"))
        seal(folder, trials, histories, final=False)
        os.makedirs(storage)
        pyarrow.fs.copy_files(folder, storage, source_filesystem=pyarrow.fs.LocalFileSystem(),
                              destination_filesystem=pyarrow.fs.LocalFileSystem())
    return time.perf_counter() - started


def step_seconds(trainer: PackedTrainer) -> float:
    started = time.perf_counter()
    next(trainer.run(report_every=1))
    return time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=32, help="members in the pack (default 32)")
    parser.add_argument("--architecture", default="dittadi",
                        help="default: dittadi (64 px, 16.4M parameters)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--storage", default=None, help="a folder on the disk to checkpoint into "
                        "(default: a temporary folder, removed at the end)")
    args = parser.parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    root = args.storage or tempfile.mkdtemp(prefix="disgen-stall-")
    os.makedirs(root, exist_ok=True)
    trials = members(args.k, args.architecture)
    rng = np.random.default_rng(0)
    images = rng.random((256, 3, 64, 64), dtype=np.float32)
    rows = [np.arange(256) for _ in trials]
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, torch "
          f"{torch.__version__}; {args.k} x {args.architecture} members; storage {root}", flush=True)
    built = time.perf_counter()
    trainer = PackedTrainer([t.model for t in trials], images, rows, device="cpu")
    for _ in range(2):  # Adam's moments exist from the first step on
        step_seconds(trainer)
    state_bytes = sum(t.numel() * t.element_size() for m in trainer.pack_state_dict()["members"]
                      for t in _tensors(m))
    print(f"pack built and stepped in {time.perf_counter() - built:.0f} s; "
          f"state {state_bytes / 2**30:.2f} GiB", flush=True)
    histories = [[{"step": trainer.members[0].step, "loss": 1.0}] for _ in trials]
    figures = {"k": args.k, "architecture": args.architecture, "state_gib": state_bytes / 2**30,
               "before_s": [], "after_s": [], "write_s": [], "step_s": [], "step_while_writing_s": []}
    try:
        for repeat in range(args.repeats):
            figures["step_s"].append(step_seconds(trainer))
            seconds = before(trainer, histories, trials, os.path.join(root, f"before-{repeat}"))
            figures["before_s"].append(seconds)
            print(f"before: stall {seconds:.2f} s", flush=True)
            shutil.rmtree(os.path.join(root, f"before-{repeat}"))

            folder = os.path.join(root, f"after-{repeat}")
            writer = CheckpointWriter(pyarrow.fs.LocalFileSystem(), folder, trials)
            started = time.perf_counter()
            writer.save(trainer.pack_state_dict(), histories)
            stall = time.perf_counter() - started
            figures["step_while_writing_s"].append(step_seconds(trainer))
            writer.close()
            write = time.perf_counter() - started
            figures["after_s"].append(stall)
            figures["write_s"].append(write)
            print(f"after:  stall {stall:.2f} s (the background write took {write:.2f} s; a step meanwhile "
                  f"{figures['step_while_writing_s'][-1]:.2f} s, alone {figures['step_s'][-1]:.2f} s)",
                  flush=True)
            shutil.rmtree(folder)
    finally:
        if args.storage is None:
            shutil.rmtree(root, ignore_errors=True)
    summary = {k: (statistics.median(v) if isinstance(v, list) else v) for k, v in figures.items()}
    print(json.dumps({"median": summary, "all": figures}, indent=1))
    return 0


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


if __name__ == "__main__":
    sys.exit(main())
