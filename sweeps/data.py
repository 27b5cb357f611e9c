"""A sweep's datasets, planned on the driver by reference (``plan_data``: a ``DatasetReference`` per trial's
data, which each node caches once), from labels, headers and manifests, never images: a missing or bad file,
or a split that leaves no training images, is a one-line ``UsageError`` before Ray starts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from data_pipeline.factors import FactorSpace
from data_pipeline.node_cache import (
    DatasetReference,
    file_reference,
    open_reference,
    prepared_reference,
    procedural_reference,
)
from data_pipeline.splits import get_split
from data_pipeline.subsets import subset_rows
from sweeps.errors import UsageError
from sweeps.trials import TrialConfig


@dataclass
class Labels:
    """A stored dataset as the driver sees it: its factor classes and image shape."""
    name: str
    classes: np.ndarray
    factor_space: FactorSpace
    image_shape: tuple
    what: str  # how errors name it: "the real circles file", "the prepared dsprites data at …"

    def __len__(self) -> int:
        return len(self.classes)

    @property
    def channels(self) -> int:
        return int(self.image_shape[0])

    @property
    def image_size(self) -> int:
        return int(self.image_shape[1])


def _first_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


class MissingData(UsageError):
    """A real file or prepared folder that is not there, with the ``command`` that puts it there (or None)."""

    def __init__(self, message: str, problem: str, command: str | None):
        super().__init__(message)
        self.problem, self.command, self.then = problem, command, ""


_THEN_DATA_DIR = " and pass --data-dir data"  # download_hint's ending where no folder was given


def real_file(dataset: str, data_dir: str | None) -> tuple[DatasetReference, Labels]:
    """A dataset's real file, checked from its headers and labels, or a UsageError (``MissingData``)."""
    from data_pipeline.conversion import RealFile, real_file_path
    from data_pipeline.sources import download_hint
    try:
        path = real_file_path(dataset, data_dir)
        source = RealFile(path, dataset)
    except Exception as error:  # a user's file: any failure to read it is bad input
        where = f"--data-dir {data_dir}" if data_dir else "$DISGEN_DATA"
        hint = download_hint(dataset, data_dir) if isinstance(error, FileNotFoundError) else None
        message = (f"data_source real: cannot load {dataset} ({_first_line(error)}); "
                   + (f"{hint} (or pass --data-dir with the folder holding it)" if hint else
                      f"pass --data-dir with the folder holding the real file (checked: {where}; "
                      "docs/data.md names the files)"))
        if isinstance(error, FileNotFoundError):
            command = hint.removeprefix("download it with: ") if hint else None
            missing = MissingData(message, f"{dataset} ({_first_line(error)})", command)
            if command and command.endswith(_THEN_DATA_DIR):  # no folder given: the download's default
                missing.command, missing.then = command.removesuffix(_THEN_DATA_DIR), _THEN_DATA_DIR
            raise missing from None
        raise UsageError(message) from None
    labels = Labels(source.name, source.classes, source.factor_space, source.image_shape,
                    f"the real {source.name} file")
    return file_reference(source.name, path, source.identity), labels


def prepared_data(dataset: str, data_dir: str | None) -> tuple[DatasetReference, Labels]:
    """``<data_dir>/<dataset>/`` as ``data_pipeline.prepare`` wrote it, checked, or a one-line UsageError."""
    from data_pipeline import prepared
    if not data_dir:
        raise UsageError("data_source prepared: no folder of prepared datasets; pass --data-dir DIR (or set "
                         "$DISGEN_DATA), where DIR/<dataset>/ was written by python -m data_pipeline.prepare")
    uri = prepared.join(prepared.normalise(data_dir), dataset)
    try:
        manifest = prepared.read_manifest(uri)
        classes = prepared.read_classes(uri, manifest)
    except Exception as error:  # missing, unreadable or damaged: bad input either way
        command = f"python -m data_pipeline.prepare {dataset} --out {uri}"
        raise MissingData(f"data_source prepared: no prepared {dataset} at {uri} ({_first_line(error)}); "
                          f"prepare it with: {command}", f"{dataset} at {uri} ({_first_line(error)})",
                          command) from None
    if manifest["dataset"] != dataset:
        raise UsageError(f"data_source prepared: {uri} holds {manifest['dataset']}, not {dataset}; prepare "
                         f"{dataset} with: python -m data_pipeline.prepare {dataset} --out {uri}")
    labels = Labels(dataset, classes, prepared.space_of(manifest), tuple(manifest["image_shape"]),
                    f"the prepared {dataset} data at {uri}")
    return prepared_reference(uri, manifest), labels


def check_fits(data: Labels, trial: TrialConfig) -> None:
    """A stored dataset must suit its trials: image size, channels, a split that leaves training images."""
    if data.image_size != trial.model.image_size:
        raise UsageError(f"{data.what} has {data.image_size} px images but the trials use image_size "
                         f"{trial.model.image_size}; set image_size: {data.image_size} in the grid")
    if data.channels != trial.model.channels:
        raise UsageError(f"{data.what} has {data.channels}-channel images but disgen's {data.name} has "
                         f"{trial.model.channels}; check that it is {data.name}")
    try:
        rows = subset_rows(data.name, data.classes, data.factor_space, trial.data.n_images,
                           trial.data.data_seed)
    except ValueError as error:
        raise UsageError(f"{data.what}: {error}") from None
    classes = data.classes if rows is None else data.classes[rows]
    split = get_split(trial.data.dataset, trial.data.split)
    train_rows, _ = split.train_test_indices(classes, data.factor_space)
    if not len(train_rows):
        raise UsageError(f"split {trial.data.split!r} leaves no training images in {data.what} "
                         f"({len(classes):,} images); use more images or another split")


def ood2_key(trial: TrialConfig, dataset: str) -> tuple:
    """The key of ``trial``'s OOD2 set ``dataset`` among ``plan_data``'s references (the whole set)."""
    return (trial.data.data_source, dataset, None, 0)


def open_trial_data(members: Sequence[TrialConfig], references: dict) -> tuple:
    """On a trial's node: its dataset and every member's OOD2 sets, each materialised once in this
    node's cache and memory-mapped (the dataset's ``n_images`` rows chosen by index). Returns (the
    dataset's reference, its images, {trial key: {scenario: (reference, OOD2 set)}})."""
    first = members[0]
    wanted = {first.data.key: ((first.data.n_images, first.data.data_seed),
                               f"{first.data.data_source} {first.data.dataset} data")}
    sets = {}
    for member in members:
        for scenario, dataset in member.evaluation.ood2_datasets.items():
            sets[member.trial_key, scenario] = key = ood2_key(member, dataset)
            wanted.setdefault(key, ((), f"the {scenario} set {dataset}"))
    for key, (_, what) in wanted.items():
        if key not in references:
            raise RuntimeError(f"trial {first.trial_key} needs {what}, which the driver did not plan; "
                               "resume with the --data-source and --data-dir the experiment started with")
    opened = {key: (references[key], open_reference(references[key], *args))
              for key, (args, _) in wanted.items()}
    ood2: dict = {member.trial_key: {} for member in members}
    for (trial_key, scenario), key in sets.items():
        ood2[trial_key][scenario] = opened[key]
    return *opened[first.data.key], ood2


def check_ood2_fits(data: Labels, own: Labels | None, trial: TrialConfig, scenario: str) -> None:
    """An OOD2 set must suit the trial's model (image size, channels) and have its dataset's factors."""
    if (data.image_size, data.channels) != (trial.model.image_size, trial.model.channels):
        raise UsageError(f"{scenario}_dataset: {data.what} has {data.channels}-channel {data.image_size} px "
                         f"images but the trials use {trial.model.channels}-channel "
                         f"{trial.model.image_size} px")
    if own is not None and tuple(data.factor_space.names) != tuple(own.factor_space.names):
        raise UsageError(f"{scenario}_dataset: {data.what} has the factors "
                         f"{', '.join(data.factor_space.names)}, not those of {own.what} "
                         f"({', '.join(own.factor_space.names)})")


def plan_data(trials: Sequence[TrialConfig], data_dir: str | None = None) -> dict:
    """``DataConfig.key`` → ``DatasetReference`` for every trial's data and OOD2 sets (``ood2_key``), each
    stored one read once (labels only) and checked; one UsageError names every missing one."""
    stored = _read_stored(trials, data_dir)
    references: dict = {}
    checked: set = set()
    for trial in trials:
        data = trial.data
        if data.data_source == "procedural":
            if data.key not in references:
                references[data.key] = procedural_reference(data.dataset, data.n_images, data.data_seed)
            continue
        reference, labels = stored[data.data_source, data.dataset]
        references[data.key] = reference
        if (data.key, data.split) not in checked:
            check_fits(labels, trial)
            checked.add((data.key, data.split))
        for scenario, dataset in trial.evaluation.ood2_datasets.items():
            reference_ood2, labels_ood2 = stored[data.data_source, dataset]
            references[ood2_key(trial, dataset)] = reference_ood2
            if (data.key, scenario, dataset) not in checked:
                check_ood2_fits(labels_ood2, labels, trial, scenario)
                checked.add((data.key, scenario, dataset))
    return references


def _read_stored(trials: Sequence[TrialConfig], data_dir: str | None) -> dict:
    """(source, dataset) → (reference, labels) of every stored dataset the trials read, each once."""
    wanted = [(t.data.data_source, t.data.dataset) for t in trials]
    for trial in trials:
        for scenario, dataset in trial.evaluation.ood2_datasets.items():
            if trial.data.data_source == "procedural":
                raise UsageError(f"{scenario}_dataset {dataset}: an OOD2 set is read from stored data; set "
                                 "data_source: prepared (--data-source prepared --data-dir DIR)")
            wanted.append((trial.data.data_source, dataset))
    stored: dict = {}
    missing: list[MissingData] = []
    for source, dataset in dict.fromkeys(wanted):
        if source == "procedural":
            continue
        read = real_file if source == "real" else prepared_data
        print(f"Reading the {source} {dataset} labels…", flush=True)
        try:
            stored[source, dataset] = read(dataset, data_dir)
        except MissingData as error:
            missing.append(error)
    if len(missing) == 1:
        raise missing[0]
    if missing:
        commands = [error.command for error in missing if error.command]
        then = next((error.then for error in missing if error.then), "")
        fix = (f"run: {' && '.join(commands)}{then}" if len(commands) == len(missing)
               else "pass --data-dir with the folder holding them (docs/data.md names the files)")
        raise UsageError(f"{len(missing)} datasets this study reads are missing: "
                         f"{'; '.join(error.problem for error in missing)}; {fix}")
    return stored


def share_procedural(references: dict, shared_dir: str) -> dict:
    """The references, each procedural dataset rendered once to ``shared_dir`` (Ray Data) and named by it."""
    from data_pipeline import prepared
    from data_pipeline.prepare import prepare
    shared: dict = {}
    out = {}
    for key, reference in references.items():
        if reference.kind != "procedural":
            out[key] = reference
            continue
        if reference.entry not in shared:
            uri = prepared.join(prepared.normalise(shared_dir), reference.entry)
            try:
                manifest = prepared.read_manifest(uri)
                print(f"Using {reference.dataset} rendered earlier at {uri}", flush=True)
            except (FileNotFoundError, ValueError):
                print(f"Rendering {reference.dataset} ({reference.n_images or 'full grid'} images) once, to "
                      f"{uri} (Ray Data)…", flush=True)
                manifest = prepare(reference.dataset, uri, n_images=reference.n_images, seed=reference.seed)
            shared[reference.entry] = prepared_reference(uri, manifest)
        out[key] = shared[reference.entry]
    return out
