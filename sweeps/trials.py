"""One trial's configuration: complete, validated and frozen. ``TrialConfig.complete`` is the one place a
trial's settings are completed and checked; everything downstream reads the record: a read-only mapping of
its flat settings with typed parts ``model`` (``ModelConfig``), ``data`` (``DataConfig``) and ``evaluation``
(``EvaluationConfig``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, fields

from analysis.metrics.registry import SETTING_DOCS, EvaluationConfig
from data_pipeline import dataset_channels
from data_pipeline.config import DEFAULT_DATA_SOURCE, DataConfig
from sweeps.errors import UsageError

# Settings that change how a trial is logged, not what it computes; left out of the trial key.
NOT_IN_KEY = ("report_every", "preset", "scale")
# Settings that follow from the others: never given, always derived.
DERIVED = ("condition", "trial_key", "channels")
RUN_KEYS = {"preset": "the study's name", "scale": "tiny, smoke, small or full"}
DATA_KEYS = {
    "dataset": "dataset name",
    "split": "held-out split name",
    "n_images": "grid points to render (null: the full grid)",
    "data_seed": "seed of the image subset",
    "data_source": "procedural (rendered by disgen's generators, the default), real (the dataset's "
                   "real file from --data-dir or $DISGEN_DATA) or prepared (DIR/<dataset>/ as "
                   "python -m data_pipeline.prepare wrote it)",
}
EVALUATION_KEYS = SETTING_DOCS  # EvaluationConfig's trial settings (analysis.metrics.registry)


def flatten(config: dict) -> dict:
    """A raw trial config as flat settings: its variants (mappings) merged in, then ``by_dataset``'s."""
    flat: dict = {}
    variants: list[dict] = []
    for key, value in config.items():
        if isinstance(value, dict) and key != "by_dataset":
            variants.append(value)
        else:
            flat[key] = value
    for variant in variants:
        flat.update(variant)
    by_dataset = flat.pop("by_dataset", None) or {}
    if not isinstance(by_dataset, dict):
        raise UsageError(f"by_dataset: expected a mapping of dataset → settings; got {by_dataset!r}")
    flat.update(by_dataset.get(flat.get("dataset"), {}))
    return flat


def trial_key(settings: Mapping) -> str:
    """A short, stable identifier: a hash of everything that decides the trial's results."""
    content = {k: v for k, v in sorted(settings.items())
               if k not in NOT_IN_KEY and k not in ("trial_key", "channels")}
    if content.get("data_source") == DEFAULT_DATA_SOURCE:  # the default: keys from before the setting stay
        del content["data_source"]
    digest = hashlib.sha1(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:10]


def _model_keys() -> set[str]:
    from models import ModelConfig
    return {f.name for f in fields(ModelConfig)}


def allowed_keys() -> set[str]:
    return _model_keys() | set(DATA_KEYS) | set(EVALUATION_KEYS) | set(RUN_KEYS)


class TrialConfig(Mapping):
    """A complete, validated, read-only trial config (see the module docstring)."""
    __slots__ = ("_settings", "model", "data", "evaluation")

    def __init__(self, settings: Mapping):
        """Read a complete config (from ``complete`` or ``to_dict``); completes nothing."""
        from models import ModelConfig
        if missing := [k for k in ("trial_key", "condition", "channels") if k not in settings]:
            raise ValueError(f"not a complete trial config (no {', '.join(missing)}); build it with "
                             "TrialConfig.complete")
        settings = dict(settings)
        object.__setattr__(self, "_settings", settings)
        object.__setattr__(self, "data", DataConfig.parse(settings))
        object.__setattr__(self, "evaluation", EvaluationConfig.parse(settings))
        object.__setattr__(self, "model", ModelConfig.from_dict(settings))

    def __setattr__(self, name, value):
        raise AttributeError("a TrialConfig is frozen; use replace() for a changed copy")

    def __reduce__(self):
        return TrialConfig, (self._settings,)

    @classmethod
    def complete(cls, raw: Mapping, source: str = "trial") -> TrialConfig:
        """The one completion: raw grid-point settings → a validated TrialConfig; errors start ``source:``."""
        try:
            settings = {k: v for k, v in flatten(dict(raw)).items() if k not in DERIVED}
            if unknown := sorted(set(settings) - allowed_keys()):
                raise UsageError(f"unknown setting {unknown[0]!r}; allowed: "
                                 f"{', '.join(sorted(allowed_keys()))}")
            settings.setdefault("data_source", DEFAULT_DATA_SOURCE)
            try:
                data = DataConfig.parse(settings)
                EvaluationConfig.parse(settings)
            except ValueError as error:
                raise UsageError(str(error)) from None
            settings["condition"] = data.condition
            settings["trial_key"] = trial_key(settings)
            settings["channels"] = dataset_channels(data.dataset)
            try:
                return cls(settings)
            except (ValueError, TypeError) as error:
                raise UsageError(str(error)) from None
        except UsageError as error:
            raise UsageError(f"{source}: {error}") from None

    def replace(self, source: str = "trial", **values) -> TrialConfig:
        """A changed copy, completed and validated again (an Optuna trial's sampled values)."""
        base = {k: v for k, v in self._settings.items() if k not in DERIVED}
        return TrialConfig.complete({**base, **values}, source)

    # -- the read-only mapping ------------------------------------------------------------------
    def __getitem__(self, key: str):
        return self._settings[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._settings)

    def __len__(self) -> int:
        return len(self._settings)

    def __repr__(self) -> str:
        return f"TrialConfig({self._settings!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    __hash__ = None

    def to_dict(self) -> dict:
        """The flat settings, as plain data (for Tune, checkpoints and result rows)."""
        return dict(self._settings)

    def effective_settings(self) -> dict:
        """Every setting the model runs with, defaults included, as its trials row holds them: a None that
        stands for a default resolved (γ, the likelihood, the metrics); None kept where the run resolves it
        or None has a meaning."""
        from models.registry import objective_class
        model = self.model.to_dict()
        has_gamma = (self.model.task == "vae"
                     and objective_class(self.model.objective).default_gamma is not None)
        model["gamma"] = self.model.resolved_gamma if has_gamma else None
        model["likelihood"] = self.model.resolved_likelihood
        evaluation = self.evaluation.settings()
        settings = {**{key: self._settings.get(key) for key in RUN_KEYS}, **asdict(self.data), **model,
                    **evaluation, "trial_key": self.trial_key}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()}

    @property
    def trial_key(self) -> str:
        return self._settings["trial_key"]

    @property
    def dirname(self) -> str:
        """A short folder name (its Tune and TensorBoard folder) ending in 6 characters of its key."""
        return self._name(self.trial_key[:6])

    @property
    def full_name(self) -> str:
        """The name with the whole key: its in-training checkpoints' folder, which no other trial shares."""
        return self._name(self.trial_key)

    def _name(self, key: str) -> str:
        beta = f"{self._settings['beta']:g}" if "beta" in self._settings else "na"
        return f"{self.data.split}-b{beta}-s{self.model.seed}-{key}"
