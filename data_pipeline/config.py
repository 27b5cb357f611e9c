"""A trial's data settings: which dataset, which held-out split, which images.

``DataConfig`` is declared here, below ``sweeps`` (which completes a trial's settings with it) and
``analysis`` (whose results schema has a column for each of its fields), so that both read the one
declaration. Bad input raises a ``ValueError`` naming the setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from data_pipeline.splits import get_split

# where a trial's images come from: disgen's generators, the dataset's real file, or a prepared folder
DATA_SOURCES = ("procedural", "real", "prepared")
# a trial's data_source where neither its grid nor the command line sets one: decided here only
DEFAULT_DATA_SOURCE = "procedural"


def _stored_only(dataset) -> bool:
    """Whether ``dataset`` is known to disgen but has no generator (D21's robot finger)."""
    from data_pipeline.spaces import STORED_DATASETS

    return str(dataset).lower() in STORED_DATASETS


def whole_number(value, name: str, least: int) -> int:
    """``value`` as a whole number >= ``least``, or a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: expected a whole number >= {least}; got {value!r}")
    if value < least:
        raise ValueError(f"{name}: must be at least {least}; got {value}")
    return value


@dataclass(frozen=True)
class DataConfig:
    """Where a trial's images come from and which of them it trains on."""

    dataset: str
    split: str
    condition: str  # the split's condition type, derived from the split (never given)
    n_images: int | None  # grid points to render; None: the whole grid
    data_seed: int  # seeds the choice of the n_images grid points
    data_source: str = DEFAULT_DATA_SOURCE  # one of DATA_SOURCES

    @classmethod
    def parse(cls, settings: dict) -> DataConfig:
        """The data settings of a trial's flat settings, checked; the condition is the split's."""
        for key in ("dataset", "split", "n_images", "data_seed"):
            if key not in settings:
                hint = " (null for the whole grid)" if key == "n_images" else ""
                raise ValueError(f"{key}: not set; set it under 'fixed', 'axes' or a scale{hint}")
        try:
            condition = get_split(settings["dataset"], settings["split"]).condition
        except KeyError as error:
            raise ValueError(error.args[0]) from None
        n_images = settings["n_images"]
        if n_images is not None:
            whole_number(n_images, "n_images", 1)
        source = settings.get("data_source", DEFAULT_DATA_SOURCE)
        if source not in DATA_SOURCES:
            raise ValueError(f"data_source: unknown {source!r}; choose one of {', '.join(DATA_SOURCES)}")
        if source == "procedural" and _stored_only(settings["dataset"]):
            raise ValueError(f"dataset {settings['dataset']}: no generator renders it; set data_source: "
                             "prepared "
                             "(--data-source prepared --data-dir DIR, DIR/<dataset>/ written by python -m "
                             "data_pipeline.prepare; docs/datasets.md)")
        return cls(settings["dataset"], settings["split"], condition, n_images,
                   whole_number(settings["data_seed"], "data_seed", 0), source)

    @property
    def key(self) -> tuple:
        """Trials with equal keys share one dataset array."""
        return (self.data_source, self.dataset, self.n_images, self.data_seed)
