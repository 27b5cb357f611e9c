"""Trained models: their checkpoints and TensorBoard event files, checked, and their figures
(reconstructions, latent traversals, the Hinton diagram of the importance matrix).

Checkpoints are read through ``models.checkpoint.load`` only (data, never code). A model whose
checkpoint or event file is missing, truncated, corrupt or needs pickle is skipped with the reason,
and the report draws the rest. matplotlib is imported by :func:`model_figures` only, so that a
training worker draws its :func:`reconstruction_grid` tiles without it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import struct
import tempfile
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow.fs as pafs

from analysis.storage import experiment_name, is_remote, join, read_bytes, resolve
from models.checkpoint import CHECKPOINT_FILE, CheckpointError, load

EVENT_FILE_PREFIX = "events.out.tfevents."


class EventFileError(Exception):
    """An event file that cannot be read; ``str(error)`` says why."""


def reconstruction_grid(originals: np.ndarray, reconstructions: np.ndarray) -> np.ndarray:
    """Originals (top row) above their reconstructions (bottom row), as one (C, H, W) float image
    in [0, 1] with a 2-pixel grey border between tiles. Inputs: (N, C, H, W), uint8 or float."""
    def as_float(a):
        a = np.asarray(a)
        return a.astype(np.float32) / 255.0 if a.dtype == np.uint8 else a.astype(np.float32)

    rows = [as_float(originals), as_float(reconstructions)]
    n, c, h, w = rows[0].shape
    pad = 2
    grid = np.full((c, 2 * h + 3 * pad, n * w + (n + 1) * pad), 0.5, np.float32)
    for r, images in enumerate(rows):
        for i, image in enumerate(images):
            top, left = pad + r * (h + pad), pad + i * (w + pad)
            grid[:, top:top + h, left:left + w] = image
    return grid


def check_event_file(data: bytes, name: str = "event file") -> dict:
    """Read every TFRecord of an event file's bytes (length, its masked CRC-32C, an ``Event``
    protocol buffer, its masked CRC-32C); {"events": n, "last_step": s, "tags": [...]} of its
    scalars, or an :class:`EventFileError` that says where and why it is truncated or corrupt."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    if not data:
        raise EventFileError(f"truncated: {name} is empty")
    offset, events, last_step, tags = 0, 0, None, set()
    while offset < len(data):
        if offset + 12 > len(data):
            raise EventFileError(f"truncated: {name} ends inside a record header at byte {offset}")
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        if masked_crc32c(header) != length_crc:
            raise EventFileError(f"corrupt: {name}: bad length checksum at byte {offset}")
        end = offset + 12 + length + 4
        if end > len(data):
            raise EventFileError(
                f"truncated: {name} ends inside record {events + 1} (byte {len(data)} of {end})")
        payload = data[offset + 12:offset + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[end - 4:end])
        if masked_crc32c(payload) != payload_crc:
            raise EventFileError(f"corrupt: {name}: bad data checksum in record {events + 1}")
        event = Event()
        try:
            event.ParseFromString(payload)
        except Exception as error:  # google.protobuf's DecodeError
            raise EventFileError(f"corrupt: {name}: record {events + 1} is not an event ({error})") from error
        events += 1
        if event.HasField("summary"):
            last_step = event.step
            tags.update(value.tag for value in event.summary.value)
        offset = end
    return {"events": events, "last_step": last_step, "tags": sorted(tags)}


def _trained_weights(path: str, tasks=("vae",)) -> list[tuple[dict, dict]]:
    """(member config, weights) of each model of ``tasks`` in a final checkpoint: failed members
    and the other tasks are left out (by default, every model with an encoder)."""
    state = load(path)
    if not state.get("final"):
        raise CheckpointError(f"{path}: not a final trial checkpoint (the trial had not finished)")
    errors = {int(k) for k in state.get("errors", {})}
    return [(c, w) for k, (c, w) in enumerate(zip(state["config"]["members"], state["models"]))
            if k not in errors and c.get("task", "vae") in tasks]


def count_models(path: str, tasks=("vae",)) -> int:
    """How many trained models of ``tasks`` a ``trainer.pt`` holds (0 if it is not a final
    checkpoint)."""
    try:
        return len(_trained_weights(path, tasks))
    except CheckpointError as error:
        if "not a final trial checkpoint" in str(error):
            return 0
        raise


@dataclass(frozen=True)
class GridView:
    """A procedural dataset without its images: its factor grid's ``classes`` (the trial's rows),
    its space and ``observe`` (renders any grid point). What a judged strip and a ground-truth
    decoder's rebuild read, without rendering the whole grid."""

    name: str
    classes: np.ndarray
    factor_space: object
    observe: object


def grid_view(config: dict) -> GridView:
    """The trial's procedural dataset as a :class:`GridView` (dataset, n_images, data_seed)."""
    from data_pipeline import factor_space
    from data_pipeline.datasets import grid_draw, render_stored
    from data_pipeline.spaces import canonical_name

    name = canonical_name(config["dataset"])
    space = factor_space(name)
    classes = space.classes_of(grid_draw(space, config.get("n_images"), config.get("data_seed", 0)))
    return GridView(name, classes, space, functools.partial(render_stored, name))


def load_task_model(path: str, task: str, key: str | None = None, member: int = 0):
    """(model, config, data) of one model of ``task`` in a ``trainer.pt``: the one whose trial key
    is ``key``, else the ``member``-th of that task's models. A ground-truth decoder or a composition
    net, rebuilt from its config and loaded with its weights; its data a :class:`GridView` for the
    decoder (no image rendered) and the dataset rendered for the net (its triplets read images)."""
    from data_pipeline import get_split, load_procedural
    from data_pipeline.datasets import dataset_channels
    from models import ModelConfig, build_task_model

    found = _trained_weights(path, (task,))
    keys = [c.get("trial_key") for c, _ in found]
    position = keys.index(key) if key in keys else member
    if not 0 <= position < len(found):
        raise CheckpointError(f"missing: {path} holds {len(found)} {task} model(s), not member {position}")
    config, weights = found[position]
    data = load_procedural(config["dataset"], config.get("n_images"), seed=config.get("data_seed", 0)) \
        if task == "composition" else grid_view(config)
    split = get_split(config["dataset"], config["split"])
    train = split.train_test_indices(data.classes, data.factor_space)[0]
    model_config = ModelConfig.from_dict({**config, "channels": dataset_channels(data.name)})
    model = build_task_model(model_config, data.classes, data.factor_space, train)
    try:
        model.load_state_dict(weights)  # a decoder's input range (low, high) included
    except (RuntimeError, TypeError, AttributeError) as error:
        raise CheckpointError(f"{path}: corrupt, the weights do not fit the {task} model its config "
                              f"describes ({str(error).splitlines()[0]})") from error
    return model.eval(), config, data


def load_checkpoints(path: str) -> list[tuple]:
    """[(model, config, dataset)] of every trained model in a ``trainer.pt`` (one, or one per member
    of a pack); the dataset is rebuilt procedurally from the config (dataset, n_images, data_seed)."""
    from data_pipeline import load_procedural
    from models import ModelConfig, build

    loaded, datasets = [], {}
    for config, weights in _trained_weights(path):
        key = (config["dataset"], config.get("n_images"), config.get("data_seed", 0))
        if key not in datasets:
            datasets[key] = load_procedural(key[0], key[1], seed=key[2])
        data = datasets[key]
        model = build(ModelConfig.from_dict({**config, "channels": data.channels}))
        try:
            model.load_state_dict(weights)
        except (RuntimeError, TypeError, AttributeError) as error:
            raise CheckpointError(f"{path}: corrupt, the weights do not fit the model its config "
                                  f"describes ({str(error).splitlines()[0]})") from error
        model.eval()
        loaded.append((model, config, data))
    return loaded


def load_checkpoint(path: str, member: int = 0):
    """(model, config, dataset) of one model of a ``trainer.pt`` (``member``: which, in a pack)."""
    loaded = load_checkpoints(path)
    if not 0 <= member < len(loaded):
        raise CheckpointError(f"missing: {path} holds {len(loaded)} trained model(s), not member {member}")
    return loaded[member]


def _reading(space, factors, classes: np.ndarray) -> str:
    """A judge's reading as a caption: each rule factor's value (its name for a categorical one)."""
    values = space.raw_values(classes[None])[0]
    parts = []
    for name in factors:
        j = space.position(name)
        categorical = space.kinds[j] == "categorical"
        parts.append(f"{name}={int(classes[j])}" if categorical else f"{name}={values[j]:.2f}")
    return " ".join(parts)


def judged_reconstructions(model, config: dict, data, path: str, *, n_images: int = 8, seed: int = 0,
                           title: str = "") -> str | None:
    """Draw M21's picture of a trained model (``analysis.figures.judged_strip``): ``n_images``
    held-out images of its split, drawn from the whole held-out part of the grid where the data can
    render it, above the model's reconstructions, each captioned with what the rendering judge
    (``analysis.metrics.rendering_judge``) reads from the reconstruction and, after "seen", where
    that reading is a combination of the training part (a substitution). None where the data
    cannot render the judge's templates (no ``observe``)."""
    from models import reconstruct

    return judged_strip_of(lambda truth, classes: reconstruct(model, truth), config, data, path,
                           n_images=n_images, seed=seed, title=title)


def judged_renderings(decoder, config: dict, data, path: str, *, n_images: int = 8, seed: int = 0,
                      title: str = "") -> str | None:
    """M21's Fig. 2 for a ground-truth decoder: held-out images above the decoder's renderings of
    their true factor values, captioned with the judge's reading (:func:`judged_strip_of`)."""
    from analysis.task_nll import ground_truth_renderings

    space = data.factor_space
    return judged_strip_of(lambda truth, classes: ground_truth_renderings(decoder, space.raw_values(classes)),
                           config, data, path, n_images=n_images, seed=seed, title=title)


def judged_strip_of(render, config: dict, data, path: str, *, n_images: int = 8, seed: int = 0,
                    title: str = "") -> str | None:
    """The judged strip of a model's outputs ``render(truth images, their classes)`` for held-out
    images of its split (:func:`judged_reconstructions`); None where the data cannot render the
    judge's templates (no ``observe``)."""
    from analysis.evaluation import held_out_sample
    from analysis.figures import judged_strip
    from analysis.metrics.rendering_judge import judge_readings, read_right
    from data_pipeline import get_split

    if data.observe is None:
        return None
    split = get_split(config["dataset"], config["split"])
    space = data.factor_space
    test = split.train_test_indices(data.classes, space)[1]
    sample = held_out_sample(data, split, test, n_images, seed, n_nll=0)
    truth = sample[np.arange(len(sample))]
    reconstructions = render(truth, sample.classes)
    factors = tuple(name for name in split.factor_names(space) if name in space.names)
    (read,) = judge_readings(space, factors, data.observe, sample.classes, reconstructions)
    right = read_right(space, factors, sample.classes, read).all(axis=1)
    captions = []
    for classes, reading, ok in zip(sample.classes, read, right):
        whole = classes.copy()
        whole[[space.position(name) for name in factors]] = reading
        seen = not ok and bool(split.train_mask(whole[None], space)[0])
        captions.append(_reading(space, factors, whole) + (" (seen)" if seen else ""))
    return judged_strip(truth, reconstructions, captions, list(right), path, title=title)


def model_figures(path: str, out_dir: str, *, n_images: int = 8, n_steps: int = 9, span: float = 2.0,
                  n_codes: int = 1000, seed: int = 0, member: int = 0) -> dict[str, str]:
    """Write ``<trial_key>_reconstructions.png`` (training and held-out images above their
    reconstructions), ``<trial_key>_traversal.png`` (each code swept over ±``span`` around one
    training image's code), ``<trial_key>_judged.png`` (held-out images above their reconstructions,
    captioned with the rendering judge's reading: :func:`judged_reconstructions`) and
    ``<trial_key>_hinton.png`` (the Lasso D-score's importance matrix on
    at most ``n_codes`` training images: a second, where the GBT takes ten). Returns {kind: path}."""
    from analysis.figures import hinton, reconstruction_figure, traversal_figure
    from analysis.metrics.dci import dci
    from data_pipeline import get_split
    from models import encode_means, reconstruct
    from models.inference import decode_probabilities

    model, config, data = load_checkpoint(path, member)
    from data_pipeline.in_distribution import training_rows

    train, _, test = training_rows(data, get_split(config["dataset"], config["split"]),
                                   config.get("data_seed", 0))
    rng = np.random.default_rng(seed)
    panels = {}
    for name, rows in (("train", train), ("held out", test)):
        originals = data.images[np.sort(rng.choice(rows, min(n_images, len(rows)), replace=False))]
        panels[f"{name} images (top) and reconstructions (bottom)"] = reconstruction_grid(
            originals, reconstruct(model, originals))
    key = config.get("trial_key", os.path.basename(os.path.dirname(os.path.dirname(path))))
    os.makedirs(out_dir, exist_ok=True)
    label = (f"{config.get('split')} · {config.get('objective')} β={config.get('beta')} "
             f"· seed {config.get('seed')}")
    out = {"reconstructions": reconstruction_figure(
        panels, os.path.join(out_dir, f"{key}_reconstructions.png"), title=label)}
    judged = judged_reconstructions(model, config, data, os.path.join(out_dir, f"{key}_judged.png"),
                                    n_images=n_images, seed=seed, title=f"What the judge reads, {label}")
    if judged is not None:
        out["judged"] = judged

    code = encode_means(model, data.images, train[:1])[0]
    values = np.linspace(-span, span, n_steps)
    latents = np.repeat(code[None, None, :], code.size, axis=0).repeat(n_steps, axis=1)
    for i in range(code.size):
        latents[i, :, i] = code[i] + values
    decoded = decode_probabilities(model, latents.reshape(-1, code.size))
    images = decoded.reshape(code.size, n_steps, *decoded.shape[1:])
    out["traversal"] = traversal_figure(images, os.path.join(out_dir, f"{key}_traversal.png"), values=values,
                                        title=f"Latent traversal, {label}")
    rows = np.sort(rng.choice(train, min(n_codes, len(train)), replace=False))
    result = dci(encode_means(model, data.images, rows), data.classes[rows], estimator="lasso_m21",
                 random_state=seed)
    out["hinton"] = hinton(result["importance_matrix"], os.path.join(out_dir, f"{key}_hinton.png"),
                           column_labels=list(data.factor_space.names),
                           title=f"Lasso importance (D = {result['disentanglement']:.2f})\n{label}")
    return out


def judged_compositions(net, config: dict, data, path: str, *, n_images: int = 8, seed: int = 0,
                        title: str = "") -> str | None:
    """A composition net's judged strip: held-out images above the net's predictions of them as
    targets, each composed (as its evaluation composes them) from a reference and a transform of the
    dataset's images and the action that tells them apart (:func:`judged_strip_of`). ``data`` needs
    its images (the whole grid: the composition task's)."""
    from analysis.task_nll import composition_predictions
    from models.composition import TripletSampler

    sampler = TripletSampler(data.classes, np.arange(len(data.classes)))

    def render(truth, classes):
        reference, transform, served, action = sampler.sample_onto_classes(
            classes, np.random.default_rng([seed, 7]))
        if len(served) != len(classes):  # a held-out image no triplet of the grid composes
            raise CheckpointError("no picture: some held-out images cannot be composed from the "
                                  "dataset's images (the composition task needs the whole grid)")
        return composition_predictions(net, data.images, reference, transform, action)

    return judged_strip_of(render, config, data, path, n_images=n_images, seed=seed, title=title)


# each task model's judged strip
_JUDGED = {"ground_truth_decoder": judged_renderings, "composition": judged_compositions}


def task_figures(path: str, out_dir: str, task: str, *, key: str | None = None, member: int = 0,
                 n_images: int = 8, seed: int = 0) -> dict:
    """A ground-truth decoder's or a composition net's picture, ``<trial_key>_judged.png``: the
    decoder's renderings of held-out factor values (:func:`judged_renderings`), the net's
    predictions of held-out targets (:func:`judged_compositions`), on its dataset (Circles' whole
    grid: 1,024 images). The model is the checkpoint's of trial ``key`` (else its ``member``-th)."""
    model, config, data = load_task_model(path, task, key, member)
    key = config.get("trial_key", os.path.basename(os.path.dirname(os.path.dirname(path))))
    os.makedirs(out_dir, exist_ok=True)
    name = ("ground-truth decoder" if task == "ground_truth_decoder"
            else f"composition {config.get('latent_op')}")
    label = f"{config.get('split')} · {name} · seed {config.get('seed')}"
    judged = _JUDGED[task](model, config, data, os.path.join(out_dir, f"{key}_judged.png"),
                           n_images=n_images, seed=seed, title=f"What the judge reads, {label}")
    return {} if judged is None else {"judged": judged}


@dataclass
class DrawnModel:
    trial_key: str
    label: str
    tensorboard_dir: str | None
    figures: dict = field(default_factory=dict)  # kind → png path
    events: dict = field(default_factory=dict)  # check_event_file's summary
    dataset: str = ""
    split: str = ""
    task: str = "vae"


@dataclass
class SkippedModel:
    trial_key: str
    label: str
    reason: str


def _folders(location: str) -> list[str]:
    fs, inner = resolve(location)
    infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
    return sorted(os.path.basename(i.path) for i in infos if i.type == pafs.FileType.Directory)


class _Experiment:
    """One experiment's folder listing, and its pack checkpoints' members, read once. A trial's
    checkpoint is the last ``checkpoint_*/trainer.pt`` of the folder ``<split>-b<β>-s<seed>-<key[:6]>``
    (or of Tune's ``..._<hex>`` beside it: ``trial_folders``), or of the pack folder whose checkpoint
    holds the trial's key."""

    def __init__(self, location: str, local_copies: str):
        self.location, self.local_copies = location, local_copies
        self.folders = _folders(location)
        self._packs: dict[str, list] | None = None

    def trial_folders(self, key: str) -> list[str]:
        """The trial's folders: disgen's (``...-<key[:6]>``, its TensorBoard files and in-training
        checkpoints), then any Tune named ``...-<key[:6]>_<hex>`` because disgen's was taken (a trial
        Tune ran again as a new Tune trial keeps its final checkpoint there)."""
        named = re.compile(rf".*-{re.escape(key[:6])}(_[0-9a-f]+)?")
        return [f for f in self.folders if named.fullmatch(f)]

    def checkpoint_of(self, key: str, folders: list[str], task: str = "vae") -> tuple[str, int]:
        """(local path, position among its ``task`` models) of the final checkpoint holding trial
        ``key``: the last checkpoint of one of its ``folders`` whose members name it (another
        trial's folder can end in the same six characters of its key: about 3% of 1,080-trial grids
        have such a pair), else a pack's. A checkpoint from before members named their keys counts
        where it is the only one found; one not final, or holding no trained ``task`` model, is
        handed on where nothing else holds the trial, for the drawing to say what is wrong."""
        found = [c for c in map(self.last_checkpoint, folders) if c is not None]
        unreadable = None
        for checkpoint in found:
            path = self.local(checkpoint)
            try:
                keys = [c.get("trial_key") for c, _ in _trained_weights(path, (task,))]
            except CheckpointError:  # not final, or corrupt
                keys = []
            if not keys:
                unreadable = unreadable or path
                continue
            if key in keys:
                return path, keys.index(key)
            if len(found) == 1 and keys and not any(keys):  # unnamed members: the folder's name decides
                return path, 0
        packed = self.in_pack(key)
        if packed is not None:
            return packed
        if unreadable is not None:
            return unreadable, 0
        raise CheckpointError(f"missing: no checkpoint_*/{CHECKPOINT_FILE} for trial {key}"
                              + (" (the folders ending in its key's first six characters hold other trials)"
                                 if found else ""))

    def last_checkpoint(self, folder: str) -> str | None:
        names = [n for n in _folders(join(self.location, folder)) if n.startswith("checkpoint_")]
        return join(self.location, folder, names[-1], CHECKPOINT_FILE) if names else None

    def local(self, location: str) -> str:
        """A local path for the checkpoint file ``location``: itself, or the copy of a remote one
        downloaded with the other files of its folder (a checkpoint's index names its members'
        files beside it)."""
        if not is_remote(location):
            return location
        folder = tempfile.mkdtemp(dir=self.local_copies)
        fs, inner = resolve(location.rsplit("/", 1)[0])
        for info in fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True)):
            if info.type == pafs.FileType.File:
                with open(os.path.join(folder, info.base_name), "wb") as f:
                    f.write(read_bytes(join(location.rsplit("/", 1)[0], info.base_name)) or b"")
        return os.path.join(folder, os.path.basename(location))

    def in_pack(self, key: str) -> tuple[str, int] | None:
        if self._packs is None:
            self._packs = {}
            for folder in (f for f in self.folders if f.startswith("pack")):
                checkpoint = self.last_checkpoint(folder)
                if checkpoint is not None:
                    path = self.local(checkpoint)
                    try:
                        self._packs[path] = [c.get("trial_key") for c, _ in _trained_weights(path)]
                    except CheckpointError:
                        continue
        return next(((path, keys.index(key)) for path, keys in self._packs.items() if key in keys), None)

    def check_events(self, folder: str | None) -> dict:
        """The summary of a trial's TensorBoard event files, or an :class:`EventFileError`."""
        if folder is None:
            raise EventFileError("missing: no TensorBoard folder for this trial")
        fs, inner = resolve(join(self.location, folder))
        infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
        files = sorted(i.path for i in infos if os.path.basename(i.path).startswith(EVENT_FILE_PREFIX))
        if not files:
            raise EventFileError(f"missing: no TensorBoard event file in {folder}/")
        summary = {"events": 0, "last_step": None, "tags": []}
        for path in files:
            with fs.open_input_stream(path) as stream:
                found = check_event_file(stream.read(), f"{folder}/{os.path.basename(path)}")
            summary["events"] += found["events"]
            summary["last_step"] = summary["last_step"] if found["last_step"] is None else found["last_step"]
            summary["tags"] = sorted(set(summary["tags"]) | set(found["tags"]))
        return summary


def label_of(row) -> str:
    parts = [str(row.get(c)) for c in ("split", "objective") if pd.notna(row.get(c))]
    if pd.notna(row.get("beta")):
        parts.append(f"β={row['beta']:g}")
    if pd.notna(row.get("seed")):
        parts.append(f"seed {row['seed']}")
    return " · ".join(parts)


def draw_models(df: pd.DataFrame, experiments, figures_dir: str, *, max_models: int,
                progress=None) -> tuple[list[DrawnModel], list[SkippedModel]]:
    """Figures of up to ``max_models`` trained models (the first rows of ``df``), and the models
    skipped with their reasons. ``progress(done, total)`` is called after each model."""
    copies = tempfile.mkdtemp(prefix="disgen-checkpoints-")  # remote checkpoints' local copies
    try:
        return _draw(df, experiments, figures_dir, max_models, progress, copies)
    finally:
        shutil.rmtree(copies, ignore_errors=True)  # the figures are drawn: the copies can go


def _draw(df, experiments, figures_dir, max_models, progress, copies):
    by_name = {experiment_name(location): _Experiment(location, copies) for location in experiments}
    drawn, skipped = [], []
    rows = spread(df, max_models).to_dict("records")
    for done, row in enumerate(rows, start=1):
        key, label = str(row["trial_key"]), label_of(row)
        experiment = by_name.get(str(row.get("experiment")), next(iter(by_name.values())))
        try:
            folders = experiment.trial_folders(key)
            tensorboard = row.get("tensorboard_dir")
            tensorboard = (folders[0] if folders else None) if pd.isna(tensorboard) else str(tensorboard)
            task = row.get("task")
            task = "vae" if task is None or pd.isna(task) else str(task)
            checkpoint, member = experiment.checkpoint_of(key, folders, task)
            events = experiment.check_events(tensorboard)
            if task in _JUDGED:
                pictures = task_figures(checkpoint, figures_dir, task, key=key, member=member)
            elif task == "vae" and count_models(checkpoint):
                pictures = model_figures(checkpoint, figures_dir, member=member)
            else:
                raise CheckpointError(f"no trained {task} in its checkpoint (the trial had not finished)")
            drawn.append(DrawnModel(key, label, tensorboard, pictures, events, str(row.get("dataset", "")),
                                    str(row.get("split", "")), task))
        except (CheckpointError, EventFileError) as error:
            skipped.append(SkippedModel(key, label, str(error)))
        except Exception as error:  # one broken model must not lose the whole report
            skipped.append(SkippedModel(key, label, f"could not draw: {error!r}"))
        if progress:
            progress(done, len(rows))
    return drawn, skipped


def spread(df: pd.DataFrame, n: int) -> pd.DataFrame:
    """At most ``n`` rows of ``df``, one per (dataset, split, task) first, in the order they first
    appear, then the next of each, and so on: a report's few pictures cover every split it has."""
    if df.empty or n <= 0:
        return df.head(0)
    keys = [c for c in ("dataset", "split", "task") if c in df.columns]
    if not keys:
        return df.head(n)
    rank = df.groupby(keys, sort=False, dropna=False).cumcount()
    first_seen = df.groupby(keys, sort=False, dropna=False).ngroup()
    order = pd.DataFrame({"rank": rank, "group": first_seen, "row": range(len(df))}, index=df.index)
    return df.loc[order.sort_values(["rank", "group", "row"]).index[:n]]

