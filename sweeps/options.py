"""A sweep's options, each declared once, as a field of ``SweepOptions`` (``option(...)``), from which the
command line's flags, ``sweeps.run``'s keywords and signature, the checks and docs/sweeps.md's options table
are derived; and the records a planned sweep travels in (``Sweep``, and ``TrialRun`` for each Tune trial)."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import inspect
import math
import numbers
import os
import pathlib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from data_pipeline.config import DATA_SOURCES
from sweeps.errors import UsageError
from sweeps.presets import PRESETS, SCALES

if typing.TYPE_CHECKING:
    from data_pipeline.node_cache import DatasetReference
    from sweeps.packing import PlannedTrials
    from sweeps.trials import TrialConfig

DEFAULT_STORAGE = "./disgen_results"
SEARCHES = ("grid", "optuna")
SCHEDULERS = ("none", "asha")


# -- checks: what an option's value must be --------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """A rule for an option's value (the docs table's "allowed"); ``problem``: its one-line error, or None."""
    rule: str
    problem: Callable[[str, typing.Any], str | None]


def at_least(least: int) -> Check:
    return Check(f"≥ {least}", lambda flag, value: None if value >= least else
                 f"{flag} must be at least {least}; got {value}")


def finite_at_least(least: float, note: str = "") -> Check:
    return Check(f"finite, ≥ {least:g}", lambda flag, value: None if math.isfinite(value) and value >= least
                 else f"{flag} must be a finite number >= {least:g}{note}; got {value}")


def _cpu_share(flag: str, value: float) -> str | None:
    if problem := finite_at_least(0.0).problem(flag, value):
        return problem
    return None if value > 0 else (f"{flag} must be > 0 (a trial needs a CPU share, e.g. 0.5 or 1); "
                                   f"got {value:g}")


CPU_SHARE = Check("finite, > 0", _cpu_share)


def positive(note: str, unit: str = "", rule: str = "finite, > 0") -> Check:
    return Check(rule, lambda flag, value: None if math.isfinite(value) and value > 0 else
                 f"{flag} must be a finite number {unit}> 0 ({note}); got {value}")


def _pack_size(flag: str, value) -> str | None:
    """--pack-size alone; its tie to --search and --scheduler is in ``SweepOptions.__post_init__``."""
    from sweeps.packing import check_pack_size
    try:
        check_pack_size(value)
    except UsageError as error:
        return str(error)
    return None


def _folder_name(flag: str, name: str) -> str | None:
    if name and name not in (".", "..") and "/" not in name and "\\" not in name and not os.path.isabs(name):
        return None
    return (f"{flag} {name!r}: an experiment name is one folder name (no '/', not '..'); "
            "use --storage-path to choose where it goes")


def _mlflow_uri(flag: str, uri: str) -> str | None:
    """--mlflow needs the optional mlflow package and a tracking URI."""
    if not uri.strip():
        return f"{flag}: give a tracking URI, e.g. sqlite:///mlflow.db or http://host:5000"
    if importlib.util.find_spec("mlflow") is None:
        return (f"{flag} needs MLflow, an optional extra: pip install -e '.[mlflow]' "
                "(or pip install mlflow-skinny)")
    return None


def _wandb_project(flag: str, project: str) -> str | None:
    """--wandb needs the optional wandb package and a project name (ENTITY/PROJECT, or PROJECT)."""
    entity, _, name = project.strip().rpartition("/")
    if not name or "/" in entity or any(c in name for c in "\\#?%:"):
        return f"{flag} {project!r}: give a W&B project, e.g. disgen or my-team/disgen"
    if importlib.util.find_spec("wandb") is None:
        return (f"{flag} needs Weights & Biases, an optional extra: pip install -e '.[wandb]' "
                "(or pip install wandb)")
    return None


# -- the declaration -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    """One option's declaration (``option``); name, type, hint and default are filled from its field."""
    help: str
    check: Check | None = None
    choices: tuple | None = None
    metavar: str | None = None
    run_as: str | None = "keyword"
    name: str = ""
    type: str = ""
    hint: typing.Any = None
    default: typing.Any = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def number(self) -> type | None:
        """int or float where the option is a number (the command line converts it), else None."""
        arms = [arm for arm in _arms(self.hint) if arm is not type(None)]
        return arms[0] if len(arms) == 1 and arms[0] in (int, float) else None

    def argparse(self) -> dict:
        if self.hint is bool:
            return {"action": "store_true", "help": self.help}
        given = {"default": self.default, "help": self.help, "type": self.number, "choices": self.choices,
                 "metavar": self.metavar}
        return {key: value for key, value in given.items() if value is not None or key == "default"}

    def problem(self, value) -> str | None:
        """What is wrong with ``value`` for this option, naming its flag; None if nothing."""
        if value is None:
            return None
        if (kind := self.number) is not None:
            whole = kind is int
            if isinstance(value, bool) or not isinstance(value, numbers.Integral if whole else numbers.Real):
                return f"{self.flag} must be a {'whole number' if whole else 'number'}; got {value!r}"
        if self.choices is not None and value not in self.choices:
            return f"{self.flag}: unknown {value!r}; choose one of {', '.join(self.choices)}"
        return self.check.problem(self.flag, value) if self.check else None


def option(default, help: str, check: Check | None = None, *, choices: tuple | None = None,
           metavar: str | None = None, run_as: str | None = "keyword"):
    """Declare an option of ``SweepOptions`` (its annotation is its type). ``run_as``: how ``sweeps.run``
    takes it: as a keyword, as its first argument (``grid_or_trials``), or not at all (None)."""
    declared = Option(help, check, choices, metavar, run_as)
    return dataclasses.field(default=default, metadata={"option": declared})


def _arms(hint) -> tuple:
    """The types a hint allows: ``int | None`` → (int, NoneType)."""
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    return typing.get_args(hint) if union else (hint,)


@dataclass(frozen=True)
class SweepOptions:
    """The options of one sweep, checked on construction: a bad value is refused naming its flag."""
    # the preset's and scale's names are listed here and refused by the plan, which knows a grid's scales
    preset: str = option("default", "the study to run (each is described below)",
        metavar="{" + ",".join(PRESETS) + "}", run_as="first argument")
    grid: str | Mapping | None = option(None, "run your own grid instead of a preset: a YAML file (or a "
        ".py file defining GRID) with keys description, fixed, axes, scales",
        metavar="FILE", run_as="first argument")
    list: bool = option(False, "print every preset and scale with its trial count and cost, and exit",
        run_as=None)
    dry_run: bool = option(False, "print the plan and exit, without starting Ray or writing anything: the "
        "trials and their packs, the resources per trial, the pack size and why, and the estimated GPU- "
        "and CPU-hours", run_as=None)
    scale: str = option("smoke", "how big to run it (tiny: seconds, for CI; smoke: minutes on a laptop; "
        "demo: a verdict on each paper, the three in under an hour; small: hours on one GPU; full: the "
        "paper)", metavar="{" + ",".join(SCALES) + "}")
    budget: float = option(1.0, "multiply every model's training budget by this factor: its steps (or "
        "epochs) and the schedules counted in steps (KL warm-up, lr milestones, CascadeVAE's releases); "
        "0.5 halves them, to see whether a result depends on the budget",
        positive("0.5 halves every training budget"))
    storage_path: str = option(DEFAULT_STORAGE, "folder that receives the experiment folder")
    name: str | None = option(None, "experiment name, the folder under --storage-path (default: the "
        "preset's name, plus the scale unless it is smoke)", Check("one folder name", _folder_name))
    seeds: str | int | Sequence[int] | None = option(None, "seeds per configuration: a count (3 → 0,1,2) "
        "or a list (0,5,7); default: 1, or the paper's count at --scale full (M21: 3, D21: 10)")
    resume: bool = option(False, "continue an interrupted experiment of the same name: finished trials are "
        "kept, unfinished ones resume from their last checkpoint. With a grid that only adds trials (more "
        "seeds, more axis values) it extends the experiment: the new trials run, finished ones do not. A "
        "grid that drops or changes trials is refused, with the difference (the experiment's plan.json "
        "holds its planned trials)")
    address: str | None = option(None, "join this Ray cluster (host:port, or 'auto') instead of starting a "
        "local one ('local': always a fresh private one); defaults to $RAY_ADDRESS")
    cpus_per_trial: float = option(1.0, "CPUs reserved per trial", CPU_SHARE)
    gpus_per_trial: float | None = option(None, "GPUs reserved per trial, fractions allowed (default: 1 if "
        "the cluster has GPUs, else 0)", finite_at_least(0.0))
    max_concurrent_trials: int | None = option(None, "at most this many trials at once (default: as "
        "resources allow)", at_least(1))
    num_cpus: int | None = option(None, "CPUs for the local Ray (default: all); ignored with --address",
        at_least(1))
    checkpoint_every: int | None = option(None, "checkpoint every N steps so failed trials resume "
        "(default: about 5 checkpoints per trial; 0: none by steps)", at_least(0))
    checkpoint_minutes: float = option(5.0, "also checkpoint when this many minutes have passed since a "
        "trial's last checkpoint, so a lost node costs minutes of training (0: by steps only)",
        finite_at_least(0.0, " (0: by steps only)"))
    search: str = option("grid", "grid: every point of the axes; optuna: OptunaSearch (TPE) over the "
        "grid's 'search' space for --num-samples trials", choices=SEARCHES)
    num_samples: int = option(8, "trials to sample with --search optuna", at_least(1))
    scheduler: str = option("none", "asha: stop poorly training trials early (ASHA on the training loss); "
        "a stopped trial's row has status 'stopped' and no metrics", choices=SCHEDULERS)
    dataset: str | None = option(None, "run the preset on another dataset it offers (dittadi2021: finger, "
        "D21's robot-finger sets, prepared under --data-dir as DIR/finger, DIR/finger_heldout_colors and "
        "DIR/finger_real; docs/datasets.md); default: the preset's own (dittadi2021: its 3DShapes stand-in). "
        "--list says which dataset each preset will use")
    data_source: str | None = option(None, "procedural: images rendered by disgen's generators; real: the "
        "datasets' real files from --data-dir; prepared: DIR/<dataset>/ as python -m data_pipeline.prepare "
        "wrote it, DIR a folder or URI (s3://…) (default: the grid's data_source setting, else procedural; "
        "real when --data-dir is given). Each node caches a dataset once ($DISGEN_CACHE) and its trials "
        "memory-map it", choices=DATA_SOURCES)
    data_dir: str | None = option(None, "folder holding the real files (dsprites_ndarray_…npz, "
        "3dshapes.h5, mpi3d_toy.npz, circles.npz…); with --data-source prepared, the folder or URI holding "
        "DIR/<dataset>/; with --data-source procedural, shared storage (a folder every node sees, or a "
        "URI) where each dataset is rendered once, by Ray Data, for the nodes to cache; default: "
        "$DISGEN_DATA", metavar="DIR")
    max_failures: int = option(2, "retries of a failed trial, from its last checkpoint", at_least(0))
    verbose: bool = option(False, "Ray Tune's own full output (its trial tables and a result box per "
        "trial) instead of disgen's progress table and one line per finished model")
    mlflow: str | None = option(None, "also log each model to MLflow, one run per model, at this tracking "
        "URI (sqlite:///path/mlflow.db, file:///path/mlruns, http://host:5000); needs pip install -e "
        "'.[mlflow]'", Check("a tracking URI", _mlflow_uri), metavar="URI")
    wandb: str | None = option(None, "also log each model to Weights & Biases, one run per model, in this "
        "project (ENTITY/PROJECT for a team's), grouped by the experiment's name; W&B's own settings apply "
        "(wandb login or WANDB_API_KEY; WANDB_MODE=offline: no network). Needs pip install -e '.[wandb]'",
        Check("[ENTITY/]PROJECT", _wandb_project), metavar="PROJECT")
    gpu_memory: float | None = option(None, "with --dry-run and --gpus-per-trial: plan the packs for GPUs "
        "of this many GiB, the cluster's card (80 for an H100 or A100 80 GB; cluster.yaml's A10G: 24), "
        "instead of the 24 GiB card assumed; the plan prints which it assumed. A run measures the GPU "
        "it gets", positive("e.g. 80 for an H100", "of GiB ", "finite, > 0; with --dry-run"),
        metavar="GIB", run_as=None)
    pack_size: int | str = option("auto", "train up to N models that share data, split and shape in one "
        "trial (models.packed: vmapped on a GPU). auto: 1 on CPUs; on GPUs as many as fit in the GPU "
        "share's memory, up to 64. Each model still gets its own row, TensorBoard folder and metrics",
        Check("≥ 1, or auto", _pack_size), metavar="N|auto")

    def __post_init__(self) -> None:
        for declared in OPTIONS.values():
            if problem := declared.problem(getattr(self, declared.name)):
                raise UsageError(problem)
        from sweeps.packing import check_pack_size
        from sweeps.search import search_of
        check_pack_size(self.pack_size, search_of(self.search).decides_one_by_one or self.scheduler == "asha")
        if self.gpu_memory is not None and not self.dry_run:
            raise UsageError("--gpu-memory plans a --dry-run for a card the planner cannot see; a run "
                             "measures the GPU it gets (drop --gpu-memory, or add --dry-run)")
        if self.address is None:  # the one place --address / address=None becomes $RAY_ADDRESS
            object.__setattr__(self, "address", os.environ.get("RAY_ADDRESS"))

    @property
    def pinned_data_source(self) -> str | None:
        """``--data-source``, else real with ``--data-dir``, else None (each trial's own setting)."""
        return self.data_source or ("real" if self.data_dir else None)


def declarations(cls: type = SweepOptions) -> dict[str, Option]:
    """The ``option`` declarations of a dataclass, by name in field order, their fields' facts filled in."""
    hints = typing.get_type_hints(cls)
    return {f.name: dataclasses.replace(f.metadata["option"], name=f.name, type=f.type, hint=hints[f.name],
                                        default=f.default) for f in dataclasses.fields(cls)}


# every option's declaration, by name, in SweepOptions' order (set before any SweepOptions is made)
OPTIONS: dict[str, Option] = declarations()
# the keyword arguments of sweeps.run, after its grid_or_trials
KEYWORDS = tuple(name for name, declared in OPTIONS.items() if declared.run_as == "keyword")


def run_signature(first: inspect.Parameter) -> inspect.Signature:
    """``sweeps.run``'s signature: ``first``, then every keyword option with its default and type."""
    keywords = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=OPTIONS[name].default,
                                  annotation=OPTIONS[name].type) for name in KEYWORDS]
    return inspect.Signature([first, *keywords])


# -- the planned sweep, and what a trial reads of it -----------------------------------------------
@dataclass(frozen=True)
class Sweep:
    """A planned sweep: its options, its frozen trials, their data by reference and where the experiment
    goes; the driver adds what only a running Ray tells (pack size, GPUs, shared data)."""
    options: SweepOptions
    name: str
    preset: str
    spec: dict
    seeds: list[int] | None
    trials: tuple[TrialConfig, ...]
    data: dict[tuple, DatasetReference]
    storage: str | None = None
    experiment_dir: str | None = None
    record: dict | None = None  # plan.json's content (sweeps.plan_record)
    added: tuple = ()  # the trials a resume adds to the experiment
    pack_size: int | None = None  # known once Ray has measured the GPU share (sweeps.driver.ready)
    gpus: float | None = None  # the GPUs each trial reserves, known once Ray runs (sweeps.driver.ready)
    kept_packs: tuple = ()  # a resume's packs of the last run, by members' keys (sweeps.packing.make_packs)

    @property
    def search(self):
        """How the sweep picks its trials (``sweeps.search``): ``GridSearch`` or ``OptunaSearch``."""
        from sweeps.search import search_of
        return search_of(self.options.search)

    @property
    def shared_dir(self) -> str | None:
        """With ``--data-source procedural --data-dir``: where each procedural dataset is rendered once."""
        return self.options.data_dir if self.options.pinned_data_source == "procedural" else None

    @functools.cached_property
    def base_trials(self) -> PlannedTrials:
        """The trials indexed by key (``sweeps.packing.PlannedTrials``), built once per record."""
        from sweeps.packing import PlannedTrials
        return PlannedTrials(self.trials)

    @property
    def planned(self) -> int:
        """The models the sweep runs: its trials, or ``--num-samples`` with ``--search optuna``."""
        return self.search.count(self.options, self.trials)


@dataclass(frozen=True)
class TrialRun:
    """What every Tune trial reads besides its config, sent once with the trainable: a few hundred bytes."""
    experiment_dir: str
    tensorboard_root: str | None  # local storage: the experiment folder; remote: the trial's working folder
    cpus_per_trial: float
    gpus_per_trial: float
    checkpoint_every: int  # steps between checkpoints (0: none by steps)
    checkpoint_seconds: float  # and at least this often (0: by steps only)
    verbose: bool
    base_trials: PlannedTrials  # what the Tune trials' configs name (their members' keys, Optuna's index)
    datasets: dict[tuple, DatasetReference]  # by DataConfig.key
    deferred_evaluation: bool  # the driver evaluates the trained models in CPU-only tasks


# -- the docs' options table -----------------------------------------------------------------------
TABLE_START = "<!-- the options table: made by sweeps.options.write_options_table() -->"
TABLE_END = "<!-- end of the options table -->"


def options_table() -> str:
    """The markdown table of every option, as docs/sweeps.md shows it."""
    def cell(text) -> str:
        return str(text).replace("|", "\\|")

    rows = ["| option | `sweeps.run` | type | default | allowed | what it is |", "|---" * 6 + "|"]
    for o in OPTIONS.values():
        flag = f"`{o.flag}{' ' + cell(o.metavar) if o.metavar else ''}`"
        keyword = f"`{o.name}`" if o.run_as == "keyword" else (o.run_as or "")
        allowed = ", ".join(o.choices) if o.choices else (o.check.rule if o.check else "")
        rows.append(f"| {flag} | {keyword} | `{cell(o.type)}` | `{o.default!r}` | {cell(allowed)} | "
                    f"{cell(o.help)} |")
    return "\n".join(rows) + "\n"


def write_options_table(page: str = "docs/sweeps.md") -> None:
    """Rewrite the options table of ``page`` from the declarations."""
    path = pathlib.Path(page)
    path.write_text(with_options_table(path.read_text()))


def with_options_table(page: str) -> str:
    """``page``'s text with its options table replaced by ``options_table()``."""
    from models.config import with_marked_table  # imports torch: not for --help or a bad option
    return with_marked_table(page, TABLE_START, TABLE_END, options_table(), "options")
