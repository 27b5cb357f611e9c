"""A sweep's datasets, built once on the driver before Ray starts and shared by every trial.

A trial's ``data_source`` says where its images come from: ``procedural`` (the default) renders
them with disgen's generators; ``real`` loads the dataset's real file (dSprites, 3DShapes, MPI3D,
Circles…) from ``--data-dir`` or ``$DISGEN_DATA``. With ``n_images`` set, both draw the same
seeded grid points (``load_procedural``'s draw); a real file that holds the whole factor grid
also gets an ``observe`` function, so the metrics that sample their own grid points (BetaVAE,
FactorVAE scores) work on it.
"""

from __future__ import annotations

import functools

import numpy as np

from data_pipeline import GroundTruthDataset, load_procedural
from data_pipeline.splits import get_split
from sweeps.errors import UsageError

DATA_SOURCES = ("procedural", "real")
DEFAULT_IMAGE_SIZE = 64  # models.ModelConfig's default


def data_source(config: dict) -> str:
    return config.get("data_source", "procedural")


def data_key(config: dict) -> tuple:
    """Trials that share this key share one dataset array."""
    return (data_source(config), config["dataset"], config["n_images"], config["data_seed"])


def observe_grid(images: np.ndarray, row_of_index: np.ndarray, space, classes: np.ndarray) -> np.ndarray:
    """The stored images of any grid points of a dataset that holds the whole grid: an index."""
    return images[row_of_index[space.index_of(space.check_classes(classes))]]


def grid_rows(data: GroundTruthDataset) -> np.ndarray | None:
    """For each flat grid index, the row of ``data`` that holds it; None unless ``data`` holds
    every grid point exactly once."""
    space = data.factor_space
    if len(data) != space.n_images:
        return None
    row_of_index = np.full(space.n_images, -1, dtype=np.int64)
    row_of_index[space.index_of(data.classes)] = np.arange(len(data))
    return row_of_index if (row_of_index >= 0).all() else None


def subsample_real(data: GroundTruthDataset, n_images: int | None, seed: int) -> GroundTruthDataset:
    """``n_images`` rows of a real dataset (all of them for None).

    On a file that holds the whole grid, the rows are the grid points ``load_procedural`` draws
    with the same seed, and a whole-grid result can observe any grid point; on a partial file,
    ``n_images`` rows drawn at random (seeded, in file order)."""
    rows_of_grid = grid_rows(data)
    if n_images is None or (rows_of_grid is not None and n_images >= len(data)):
        if rows_of_grid is None:
            return data
        return GroundTruthDataset(data.name, data.images, data.classes, data.factor_space,
                                  observe=functools.partial(observe_grid, data.images, rows_of_grid,
                                                            data.factor_space))
    if n_images < 1:
        raise UsageError(f"n_images must be at least 1 or null (the whole file); got {n_images}")
    rng = np.random.default_rng(seed)
    if rows_of_grid is not None:
        rows = rows_of_grid[np.sort(rng.choice(data.factor_space.n_images, size=n_images, replace=False))]
    elif n_images > len(data):
        raise UsageError(f"n_images {n_images:,} but the real {data.name} file holds only "
                         f"{len(data):,} images; set n_images to at most that, or null")
    else:
        rows = np.sort(rng.choice(len(data), size=n_images, replace=False))
    return GroundTruthDataset(data.name, data.images[rows], data.classes[rows], data.factor_space)


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


def check_fits(data: GroundTruthDataset, config: dict) -> None:
    """A real dataset must suit the trials that use it: image size, and a split that leaves
    training images."""
    image_size = config.get("image_size", DEFAULT_IMAGE_SIZE)
    if data.image_size != image_size:
        raise UsageError(f"the real {data.name} file has {data.image_size} px images but the trials "
                         f"use image_size {image_size}; set image_size: {data.image_size} in the grid")
    train_rows, _ = get_split(config["dataset"], config["split"]).train_test_indices(
        data.classes, data.factor_space)
    if not len(train_rows):
        raise UsageError(f"split {config['split']!r} leaves no training images in the real "
                         f"{data.name} data ({len(data):,} images); use more images or another split")


def load_datasets(configs: list[dict], data_dir: str | None = None) -> dict:
    """``data_key`` → dataset for every trial config, each built once; every real file is
    loaded once and checked against the trials that use it."""
    datasets: dict = {}
    real_files: dict = {}
    checked: set = set()
    for config in configs:
        key = data_key(config)
        source = data_source(config)
        if source not in DATA_SOURCES:
            raise UsageError(f"data_source: unknown {source!r}; choose one of {', '.join(DATA_SOURCES)}")
        if key not in datasets:
            if source == "procedural":
                print(f"Rendering {config['dataset']} ({config['n_images'] or 'full grid'} images)…",
                      flush=True)
                datasets[key] = load_procedural(config["dataset"], config["n_images"],
                                                seed=config["data_seed"])
            else:
                if config["dataset"] not in real_files:
                    print(f"Loading the real {config['dataset']} file…", flush=True)
                    real_files[config["dataset"]] = load_real_file(config["dataset"], data_dir)
                datasets[key] = subsample_real(real_files[config["dataset"]], config["n_images"],
                                               config["data_seed"])
        if source == "real" and (key, config["split"]) not in checked:
            check_fits(datasets[key], config)
            checked.add((key, config["split"]))
    return datasets
