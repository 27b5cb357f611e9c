"""How a sweep picks its trials, chosen once from ``--search``: ``GridSearch`` runs every planned trial,
``OptunaSearch`` ``--num-samples`` that Optuna's TPE samples from the grid's ``search`` space; each owns
what differs, so no other module asks which runs. A resume plans from disgen's records, never Tune's."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Mapping, Sequence

from analysis import storage
from sweeps.errors import UsageError
from sweeps.trials import TrialConfig

JOURNAL = "optuna.jsonl"  # the Optuna study of a --search optuna experiment, in its folder
STUDY = "disgen"


@dataclasses.dataclass(frozen=True)
class Grid:
    """A run of these Tune trial configs, each once (``GridSearch``)."""
    configs: list[dict]


@dataclasses.dataclass(frozen=True)
class Sampled:
    """Optuna's run: ``samples`` planned trials with ``space`` sampled; the study in ``journal``."""
    planned: int
    space: dict
    metric: str
    mode: str
    samples: int
    journal: object
    study: str
    points: list[dict] = dataclasses.field(default_factory=list)
    seed: int = 0  # TPE's seed: the study's size, so that a resumed search does not repeat its draws


class GridSearch:
    """Every planned trial, each once, one by one or in packs."""
    name = "grid"
    extendable = True  # a resume may add trials (more seeds, more axis values)
    takes_trial_lists = True  # sweeps.run's list of trials
    decides_one_by_one = False  # trials may share a pack

    def prepare_spec(self, spec: dict, preset: str) -> dict:
        return spec

    def check(self, spec: dict, preset: str, first: TrialConfig) -> None:
        pass

    def count(self, options, trials: Sequence[TrialConfig]) -> int:
        return len(trials)

    def defers_evaluation(self, gpus: float) -> bool:
        """A trial that holds a GPU hands its models' evaluation to CPU-only tasks."""
        return gpus > 0

    def pack_size(self, requested, trials: Sequence[TrialConfig], gpus: float,
                  free_bytes: int | None) -> tuple[int, str]:
        from sweeps.packing import pack_size_and_reason
        return pack_size_and_reason(requested, trials, gpus, free_bytes)

    def work(self, sweep, statuses: Mapping[str, str]):
        """The planned trials with neither a finished nor a stopped (ASHA) row, in packs; None if none."""
        from sweeps.packing import make_packs, tune_config
        left = [t for t in sweep.trials if statuses.get(t.trial_key) not in ("finished", "stopped")]
        packs = make_packs(left, sweep.pack_size or 1, sweep.kept_packs)  # a resume's packs as they were
        return Grid([tune_config(pack) for pack in packs]) if left else None

    def listeners(self, sweep) -> list:
        return []

    def dry_run_lines(self, options, trials: Sequence[TrialConfig]) -> list[str]:
        return []


class OptunaSearch:
    """``--num-samples`` planned trials sampled by TPE; the study, in ``JOURNAL``, survives a resume."""
    name = "optuna"
    extendable = False  # the samples depend on the whole study
    takes_trial_lists = False
    decides_one_by_one = True  # a trial's metric is what Optuna learns from: never packed

    def prepare_spec(self, spec: dict, preset: str) -> dict:
        """The spec with the searched settings taken off its axes: they are sampled instead."""
        from sweeps.grid import search_space, unpin_axis
        for setting in search_space(spec, preset):
            spec = unpin_axis(spec, setting)
        return spec

    def check(self, spec: dict, preset: str, first: TrialConfig) -> None:
        from sweeps.grid import check_search_bounds
        check_search_bounds(spec, preset, first)

    def count(self, options, trials: Sequence[TrialConfig]) -> int:
        return options.num_samples

    def defers_evaluation(self, gpus: float) -> bool:
        return False  # Optuna learns from each trial's metrics, which it must then report itself

    def pack_size(self, requested, trials, gpus, free_bytes) -> tuple[int, str]:
        return 1, "1: --search optuna decides trial by trial"

    def work(self, sweep, statuses: Mapping[str, str]):
        """The samples left, the interrupted ones asked again first (from their checkpoints); None if none."""
        from sweeps.grid import search_space
        journal = open_journal(sweep.experiment_dir)
        points = settle_interrupted(journal, sweep, statuses)
        left = sweep.options.num_samples - len(statuses)
        if left <= 0:
            return None
        search = sweep.spec["search"]
        return Sampled(planned=len(sweep.trials), space=search_space(sweep.spec, sweep.preset),
                       metric=search["metric"], mode=search["mode"], samples=left, journal=journal,
                       study=STUDY, points=points, seed=study_size(journal))

    def listeners(self, sweep) -> list:
        """On remote storage, the journal copied beside the results as each trial ends."""
        return [JournalCopy(sweep.experiment_dir)] if storage.is_remote(sweep.experiment_dir) else []

    def dry_run_lines(self, options, trials: Sequence[TrialConfig]) -> list[str]:
        return [f"  search:      optuna, {options.num_samples} trials sampled from the {len(trials)} planned"]


SEARCHES = {search.name: search for search in (GridSearch(), OptunaSearch())}


def search_of(name: str):
    if name not in SEARCHES:
        raise UsageError(f"--search {name!r}: choose one of {', '.join(SEARCHES)}")
    return SEARCHES[name]


# -- Optuna's study, in its journal ------------------------------------------------------------------

def journal_path(experiment_dir: str) -> str:
    """The study's journal on the driver: in the experiment's folder, or a local file named after its URI."""
    if not storage.is_remote(experiment_dir):
        return os.path.join(storage.normalise(experiment_dir), JOURNAL)
    name = hashlib.sha256(storage.normalise(experiment_dir).encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"disgen-{name}-{JOURNAL}")


def open_journal(experiment_dir: str):
    """The study's ``JournalStorage`` (JSON lines, read as data); on remote storage, read back first."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    path = journal_path(experiment_dir)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if storage.is_remote(experiment_dir):
        content = storage.read_bytes(storage.join(experiment_dir, JOURNAL))
        with open(path, "wb") as file:
            file.write(content or b"")
    return JournalStorage(JournalFileBackend(path))


def study_size(journal) -> int:
    import optuna
    names = [s.study_name for s in journal.get_all_studies()]
    return len(optuna.load_study(study_name=STUDY, storage=journal).trials) if STUDY in names else 0


def sampled_key(params: Mapping, base: Sequence[TrialConfig]) -> str:
    """The trial key of the model an Optuna trial sampled (``params``: Tune's flat names)."""
    sampled = {name.split("/", 1)[1]: value for name, value in params.items() if name.startswith("sampled/")}
    return base[int(params["base"])].replace("search", **sampled).trial_key


def settle_interrupted(journal, sweep, statuses: Mapping[str, str]) -> list[dict]:
    """Tell the study's trials left running by a stopped run failed; those without a row, to ask first."""
    import optuna
    if STUDY not in [s.study_name for s in journal.get_all_studies()]:
        return []
    study = optuna.load_study(study_name=STUDY, storage=journal)
    points, again = [], set()
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        key = sampled_key(trial.params, sweep.base_trials)
        if key not in statuses and key not in again:
            points.append(dict(trial.params))
            again.add(key)
    return points


class JournalCopy:
    """A listener: the study's journal copied beside the results on remote storage as each trial ends."""

    def __init__(self, experiment_dir: str):
        self.local, self.remote = journal_path(experiment_dir), storage.join(experiment_dir, JOURNAL)

    def _copy(self, trial=None) -> None:
        if os.path.exists(self.local):
            storage.upload(self.local, self.remote)

    completed = failed = _copy
