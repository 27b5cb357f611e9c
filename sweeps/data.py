"""A sweep's datasets, built once on the driver before Ray starts and shared by every trial.

A trial's ``data.data_source`` says where its images come from: ``procedural`` (the default) renders
them with disgen's generators; ``real`` loads the dataset's real file (dSprites, 3DShapes, MPI3D,
Circles…) from ``--data-dir`` or ``$DISGEN_DATA``. With ``n_images`` set, both draw the same
seeded grid points (``load_procedural``'s draw); a real file that holds the whole factor grid
also gets an ``observe`` function, so the metrics that sample their own grid points (BetaVAE,
FactorVAE scores) work on it.
"""

from __future__ import annotations

from collections.abc import Sequence

from data_pipeline import GroundTruthDataset, load_procedural
from data_pipeline.splits import get_split
from data_pipeline.subsets import subsample
from sweeps.errors import UsageError
from sweeps.trials import TrialConfig


def load_real_file(dataset: str, data_dir: str | None) -> GroundTruthDataset:
    """A dataset's real file, or a one-line UsageError saying what is wrong with it."""
    from data_pipeline.loaders import load_real
    from data_pipeline.sources import download_hint

    try:
        return load_real(dataset, data_dir)
    except Exception as error:  # a user's file: any failure to read it is bad input
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        where = f"--data-dir {data_dir}" if data_dir else "$DISGEN_DATA"
        hint = download_hint(dataset, data_dir) if isinstance(error, FileNotFoundError) else None
        raise UsageError(f"data_source real: cannot load {dataset} ({reason}); "
                         + (f"{hint} (or pass --data-dir with the folder holding it)" if hint else
                            f"pass --data-dir with the folder holding the real file (checked: {where}; "
                            "docs/data.md names the files)")) from None


def check_fits(data: GroundTruthDataset, trial: TrialConfig) -> None:
    """A real dataset must suit the trials that use it: image size, channels, and a split that
    leaves training images."""
    if data.image_size != trial.model.image_size:
        raise UsageError(f"the real {data.name} file has {data.image_size} px images but the trials "
                         f"use image_size {trial.model.image_size}; set image_size: {data.image_size} in "
                         "the grid")
    if data.channels != trial.model.channels:
        raise UsageError(f"the real {data.name} file has {data.channels}-channel images but disgen's "
                         f"{data.name} has {trial.model.channels}; check that the file is {data.name}")
    train_rows, _ = get_split(trial.data.dataset, trial.data.split).train_test_indices(
        data.classes, data.factor_space)
    if not len(train_rows):
        raise UsageError(f"split {trial.data.split!r} leaves no training images in the real "
                         f"{data.name} data ({len(data):,} images); use more images or another split")


def load_datasets(trials: Sequence[TrialConfig], data_dir: str | None = None) -> dict:
    """``DataConfig.key`` → dataset for every trial, each built once; every real file is loaded
    once and checked against the trials that use it."""
    datasets: dict = {}
    real_files: dict = {}
    checked: set = set()
    for trial in trials:
        data = trial.data
        if data.key not in datasets:
            if data.data_source == "procedural":
                print(f"Rendering {data.dataset} ({data.n_images or 'full grid'} images)…", flush=True)
                datasets[data.key] = load_procedural(data.dataset, data.n_images, seed=data.data_seed)
            else:
                if data.dataset not in real_files:
                    print(f"Loading the real {data.dataset} file…", flush=True)
                    real_files[data.dataset] = load_real_file(data.dataset, data_dir)
                try:
                    datasets[data.key] = subsample(real_files[data.dataset], data.n_images, data.data_seed)
                except ValueError as error:
                    raise UsageError(str(error)) from None
        if data.data_source == "real" and (data.key, data.split) not in checked:
            check_fits(datasets[data.key], trial)
            checked.add((data.key, data.split))
    return datasets
