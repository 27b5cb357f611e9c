"""The report's trained-model part: for a few trials, find the checkpoint and the TensorBoard event
file, check both, and draw the model's figures. A model whose checkpoint or event file is missing,
truncated or corrupt is skipped with the reason; the others are drawn.

A trial's folders are found from its row: ``tensorboard_dir`` (relative to the experiment) for
the event files, and the trial folder named ``<split>-b<β>-s<seed>-<key[:6]>`` (or the pack folder
whose checkpoint holds the trial's key) for ``checkpoint_*/trainer.pt``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, field

import pandas as pd
import pyarrow.fs as pafs

from analysis.event_files import EVENT_FILE_PREFIX, EventFileError, check_event_file
from analysis.storage import experiment_name, is_remote, join, read_bytes, resolve

CHECKPOINT_FILE = "trainer.pt"


@dataclass
class DrawnModel:
    trial_key: str
    label: str
    tensorboard_dir: str | None
    figures: dict = field(default_factory=dict)  # kind → png path
    events: dict = field(default_factory=dict)  # check_event_file's summary


@dataclass
class SkippedModel:
    trial_key: str
    label: str
    reason: str


class _Experiment:
    """One experiment's folder listing, and its pack checkpoints' members, read once."""

    def __init__(self, location: str, local_copies: str):
        self.location, self.local_copies = location, local_copies
        fs, inner = resolve(location)
        infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
        self.folders = sorted(os.path.basename(i.path) for i in infos if i.type == pafs.FileType.Directory)
        self._packs: dict[str, list] | None = None

    def trial_folder(self, key: str) -> str | None:
        return next((f for f in self.folders if f.endswith("-" + key[:6])), None)

    def last_checkpoint(self, folder: str) -> str | None:
        fs, inner = resolve(join(self.location, folder))
        infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
        names = sorted(os.path.basename(i.path) for i in infos if i.type == pafs.FileType.Directory)
        names = [n for n in names if n.startswith("checkpoint_")]
        return join(self.location, folder, names[-1], CHECKPOINT_FILE) if names else None

    def local(self, location: str) -> str:
        """A local path for ``location``: itself, or a downloaded copy of a remote file."""
        if not is_remote(location):
            return location
        data = read_bytes(location)
        fd, path = tempfile.mkstemp(dir=self.local_copies, suffix=".pt")
        with os.fdopen(fd, "wb") as f:
            f.write(data or b"")
        return path

    def in_pack(self, key: str) -> tuple[str, int] | None:
        from analysis.checkpoints import CheckpointError, member_keys

        if self._packs is None:
            self._packs = {}
            for folder in (f for f in self.folders if f.startswith("pack")):
                checkpoint = self.last_checkpoint(folder)
                if checkpoint is None:
                    continue
                path = self.local(checkpoint)
                try:
                    self._packs[path] = member_keys(path)
                except CheckpointError:
                    continue
        for path, keys in self._packs.items():
            if key in keys:
                return path, keys.index(key)
        return None


def label_of(row) -> str:
    parts = [str(row.get(c)) for c in ("split", "objective") if pd.notna(row.get(c))]
    if pd.notna(row.get("beta")):
        parts.append(f"β={row['beta']:g}")
    if pd.notna(row.get("seed")):
        parts.append(f"seed {row['seed']}")
    return " · ".join(parts)


def check_events(experiment: _Experiment, folder: str | None) -> dict:
    """The event files' summary of a trial's TensorBoard folder, or an EventFileError."""
    if folder is None:
        raise EventFileError("missing: no TensorBoard folder for this trial")
    fs, inner = resolve(join(experiment.location, folder))
    infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
    files = sorted(i.path for i in infos if os.path.basename(i.path).startswith(EVENT_FILE_PREFIX))
    if not files:
        raise EventFileError(f"missing: no TensorBoard event file in {folder}/")
    summary = {"events": 0, "last_step": None, "tags": []}
    for path in files:
        with fs.open_input_stream(path) as stream:
            found = check_event_file(stream.read(), f"{folder}/{os.path.basename(path)}")
        summary["events"] += found["events"]
        summary["last_step"] = found["last_step"] if found["last_step"] is not None else summary["last_step"]
        summary["tags"] = sorted(set(summary["tags"]) | set(found["tags"]))
    return summary


def draw_models(df: pd.DataFrame, experiments, figures_dir: str, *, max_models: int,
                progress=None) -> tuple[list[DrawnModel], list[SkippedModel]]:
    """Figures of up to ``max_models`` trained models (the first rows of ``df``), and the models
    skipped with their reasons. ``progress(done, total)`` is called after each model."""
    from analysis.checkpoints import CheckpointError, count_models, model_figures

    by_name, drawn, skipped = {}, [], []
    copies = tempfile.mkdtemp(prefix="disgen-checkpoints-")
    for location in experiments:
        by_name[experiment_name(location)] = _Experiment(location, copies)
    rows = df.head(max_models).to_dict("records")
    for done, row in enumerate(rows, start=1):
        key, label = str(row["trial_key"]), label_of(row)
        experiment = by_name.get(str(row.get("experiment")), next(iter(by_name.values())))
        try:
            folder = experiment.trial_folder(key)
            tensorboard = row.get("tensorboard_dir")
            tensorboard = folder if pd.isna(tensorboard) else str(tensorboard)
            checkpoint = experiment.last_checkpoint(folder) if folder else None
            member = 0
            if checkpoint is None:
                found = experiment.in_pack(key)
                if found is None:
                    raise CheckpointError(f"missing: no checkpoint_*/{CHECKPOINT_FILE} for trial {key}")
                checkpoint, member = found
            events = check_events(experiment, tensorboard)
            checkpoint = experiment.local(checkpoint)
            if count_models(checkpoint) == 0:
                raise CheckpointError("no encoder to draw (a ground-truth decoder or composition task)")
            figures = model_figures(checkpoint, figures_dir, member=member)
            drawn.append(DrawnModel(key, label, tensorboard, figures, events))
        except (CheckpointError, EventFileError) as error:
            skipped.append(SkippedModel(key, label, str(error)))
        except Exception as error:  # one broken model must not lose the whole report
            skipped.append(SkippedModel(key, label, f"could not draw: {error!r}"))
        if progress:
            progress(done, len(rows))
    return drawn, skipped


def text_progress(label: str, stream=sys.stderr):
    """Progress over the models, as ``show(done, total)``: a tqdm bar on a terminal; elsewhere (a log
    file, CI) one line when the last one is done, ``label: 4 of 4 done``."""
    state = {}

    def show(done: int, total: int) -> None:
        isatty = getattr(stream, "isatty", None)
        if isatty and isatty():
            if "bar" not in state:
                from tqdm import tqdm

                state["bar"] = tqdm(total=total, desc=label, unit="model", file=stream, dynamic_ncols=True)
            state["bar"].update(done - state["bar"].n)
            if done >= total:
                state["bar"].close()
        elif done >= total:
            stream.write(f"{label}: {done} of {total} done\n")
            stream.flush()

    return show
