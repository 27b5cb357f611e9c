"""Run a study: ``python -m sweeps.paper_grid`` runs the default study on an embedded local Ray;
from Python, ``sweeps.run`` (``run`` here) runs one and returns its trials as a DataFrame.

With ``--address`` (or ``RAY_ADDRESS``) it joins an existing Ray cluster instead. Results go to
``<storage-path>/<name>/``: ``trials.parquet``, ``history.parquet`` and one TensorBoard folder
per trial. The command line and ``run`` share one path (``execute``): the options of one are the
keyword arguments of the other, and bad input is the same one-line ``UsageError``.
"""

from __future__ import annotations

import argparse
import math
import numbers
import os
import shlex
import signal
import socket
import sys
import textwrap
from collections.abc import Mapping, Sequence

from analysis import storage
from analysis.loading import ERRORS_FILE
from analysis.schema import TRIALS_FILE
from data_pipeline.cli import HelpFormatter, Parser
from data_pipeline.config import DATA_SOURCES
from sweeps import plan_record
from sweeps.errors import UsageError, exit_code, sigterm_as_interrupt, stop_signal
from sweeps.grid import (
    check_search_bounds,
    default_seeds,
    get_spec,
    load_grid_file,
    parse_seeds,
    pin_setting,
    search_space,
    trial_configs,
    unpin_axis,
)
from sweeps.lock import ExperimentLock
from sweeps.plan_record import PLAN_FILE
from sweeps.presets import PRESETS, SCALES
from sweeps.trials import TrialConfig

DEFAULT_STORAGE = "./disgen_results"
GRID_FILE_SUFFIXES = (".yaml", ".yml", ".py")


def default_experiment_name(preset: str, scale: str) -> str:
    """An experiment's folder name when none is given: the study's name, plus the scale unless it
    is smoke (``dittadi2021-demo``)."""
    return preset if scale == "smoke" else f"{preset}-{scale}"


def _presets_epilog() -> str:
    lines = ["presets (python -m sweeps.paper_grid --list gives each one's trials and cost per scale):"]
    for name, spec in PRESETS.items():
        lines += textwrap.wrap(f"{name}: {spec['description']}", width=100, initial_indent="  ",
                               subsequent_indent="      ")
    return "\n".join(lines)


# the choices of --search and --scheduler (run() checks its keywords against the same)
SEARCHES = ("grid", "optuna")
SCHEDULERS = ("none", "asha")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m sweeps.paper_grid",
        description=textwrap.fill(
            "Run a disentanglement-vs-generalisation study as a Ray Tune sweep. With no arguments: the "
            "default study at the 'smoke' scale on a local Ray (4 trials, about 4 minutes on 2 CPU cores).",
            width=100),
        epilog=_presets_epilog(),
        formatter_class=HelpFormatter,
    )
    # The choices are listed here; an unknown name is refused by the plan, in one line, like all bad input.
    parser.add_argument("--preset", default="default", metavar="{" + ",".join(PRESETS) + "}",
                        help="the study to run (each is described below)")
    parser.add_argument("--grid", metavar="FILE",
                        help="run your own grid instead of a preset: a YAML file (or a .py file "
                             "defining GRID) with keys description, fixed, axes, scales")
    parser.add_argument("--list", action="store_true",
                        help="print every preset and scale with its trial count and cost, and exit")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan and exit, without starting Ray or writing anything: the trials "
                             "and their packs, the resources per trial, the pack size and why, and the "
                             "estimated GPU- and CPU-hours")
    parser.add_argument("--scale", default="smoke", metavar="{" + ",".join(SCALES) + "}",
                        help="how big to run it (tiny: seconds, for CI; smoke: minutes on a laptop; "
                             "demo: a verdict on each paper, the three in under an hour; small: hours on one "
                             "GPU; full: the paper)")
    parser.add_argument("--storage-path", default=DEFAULT_STORAGE,
                        help="folder that receives the experiment folder")
    parser.add_argument("--name", default=None,
                        help="experiment name, the folder under --storage-path "
                             "(default: the preset's name, plus the scale unless it is smoke)")
    parser.add_argument("--seeds", default=None,
                        help="seeds per configuration: a count (3 → 0,1,2) or a list (0,5,7); default: "
                             "1, or the paper's count at --scale full (M21: 3, D21: 10)")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted experiment of the same name: finished "
                             "trials are kept, unfinished ones resume from their last checkpoint. "
                             "With a grid that only adds trials (more seeds, more axis values) it "
                             "extends the experiment: the new trials run, finished ones do not. "
                             "A grid that drops or changes trials is refused, with the difference "
                             "(the experiment's plan.json holds its planned trials)")
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS"),
                        help="join this Ray cluster (host:port, or 'auto') instead of starting a "
                             "local one ('local': always a fresh private one); defaults to $RAY_ADDRESS")
    parser.add_argument("--cpus-per-trial", type=float, default=1.0, help="CPUs reserved per trial")
    parser.add_argument("--gpus-per-trial", type=float, default=None,
                        help="GPUs reserved per trial, fractions allowed (default: 1 if the "
                             "cluster has GPUs, else 0)")
    parser.add_argument("--max-concurrent-trials", type=int, default=None,
                        help="at most this many trials at once (default: as resources allow)")
    parser.add_argument("--num-cpus", type=int, default=None,
                        help="CPUs for the local Ray (default: all); ignored with --address")
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help="checkpoint every N steps so failed trials resume (default: about "
                             "5 checkpoints per trial; 0: none by steps)")
    parser.add_argument("--checkpoint-minutes", type=float, default=5.0,
                        help="also checkpoint when this many minutes have passed since a trial's last "
                             "checkpoint, so a lost node costs minutes of training (0: by steps only)")
    parser.add_argument("--search", choices=SEARCHES, default="grid",
                        help="grid: every point of the axes; optuna: OptunaSearch (TPE) over the "
                             "grid's 'search' space for --num-samples trials")
    parser.add_argument("--num-samples", type=int, default=8, help="trials to sample with --search optuna")
    parser.add_argument("--scheduler", choices=SCHEDULERS, default="none",
                        help="asha: stop poorly training trials early (ASHA on the training loss); "
                             "a stopped trial's row has status 'stopped' and no metrics")
    parser.add_argument("--data-source", choices=DATA_SOURCES, default=None,
                        help="procedural: images rendered by disgen's generators; real: the datasets' "
                             "real files from --data-dir; prepared: DIR/<dataset>/ as python -m "
                             "data_pipeline.prepare wrote it, DIR a folder or URI (s3://…) (default: the "
                             "grid's data_source setting, else procedural; real when --data-dir is given). "
                             "Each node caches a dataset once ($DISGEN_CACHE) and its trials memory-map it")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="folder holding the real files (dsprites_ndarray_…npz, 3dshapes.h5, "
                             "mpi3d_toy.npz, circles.npz…); with --data-source prepared, the folder or "
                             "URI holding DIR/<dataset>/; with --data-source procedural, shared storage "
                             "(a folder every node sees, or a URI) where each dataset is rendered once, "
                             "by Ray Data, for the nodes to cache; default: $DISGEN_DATA")
    parser.add_argument("--max-failures", type=int, default=2,
                        help="retries of a failed trial, from its last checkpoint")
    parser.add_argument("--verbose", action="store_true",
                        help="Ray Tune's own full output (its trial tables and a result box per trial) "
                             "instead of disgen's progress table and one line per finished model")
    parser.add_argument("--mlflow", default=None, metavar="URI",
                        help="also log each model to MLflow, one run per model, at this tracking URI "
                             "(sqlite:///path/mlflow.db, file:///path/mlruns, http://host:5000); needs "
                             "pip install -e '.[mlflow]'")
    parser.add_argument("--wandb", default=None, metavar="PROJECT",
                        help="also log each model to Weights & Biases, one run per model, in this project "
                             "(ENTITY/PROJECT for a team's), grouped by the experiment's name; W&B's own "
                             "settings apply (wandb login or WANDB_API_KEY; WANDB_MODE=offline: no "
                             "network). Needs pip install -e '.[wandb]'")
    parser.add_argument("--pack-size", default="auto", metavar="N|auto",
                        help="train up to N models that share data, split and shape in one trial "
                             "(models.packed: vmapped on a GPU). auto: 1 on CPUs; on GPUs as many as "
                             "fit in the GPU share's memory, up to 64. Each model still gets its own "
                             "row, TensorBoard folder and metrics")
    return parser


def check_storage(path: str) -> str:
    """The storage folder (absolute, or a URI such as s3://bucket/prefix), created and proven
    writable, or a UsageError."""
    path = storage.normalise(path)
    try:
        storage.check_writable(path)
    except (OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or str(error).splitlines()[0]
        raise UsageError(
            f"cannot write to storage path {path} ({reason}); "
            "pass --storage-path with a folder (or s3:// prefix) you can write to"
        ) from None
    return path


def check_address(address: str | None) -> None:
    """Fail fast, before Ray starts, on a cluster address that cannot be reached."""
    if address == "auto":  # a cluster on this machine (its head node): one must run
        from data_pipeline.prepare import missing_cluster

        if problem := missing_cluster(address):
            raise UsageError(problem)
        return
    if not address or address.startswith("local"):
        return
    target = address.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--address {address!r} is not host:port; give e.g. 10.0.0.5:6379 or 'auto'")
    try:
        with socket.create_connection((host, int(port)), timeout=3):
            pass
    except OSError as error:
        raise UsageError(
            f"cannot reach Ray at {address} ({error.strerror or error}); check that the cluster "
            "is up (ray status) and the address, or omit --address for a local Ray"
        ) from None


def check_options(args) -> None:
    """The command line's numbers and names, each refused with the option's name and a fix."""
    for option, least in (("cpus_per_trial", 0.0), ("gpus_per_trial", 0.0)):
        value = getattr(args, option)
        flag = f"--{option.replace('_', '-')}"
        if value is not None and not (math.isfinite(value) and value >= least):
            raise UsageError(f"{flag} must be a finite number >= {least:g}; got {value}")
    if args.cpus_per_trial <= 0:
        raise UsageError(f"--cpus-per-trial must be > 0 (a trial needs a CPU share, e.g. 0.5 or 1); "
                         f"got {args.cpus_per_trial:g}")
    for option, least in (("max_failures", 0), ("num_cpus", 1), ("checkpoint_every", 0),
                          ("max_concurrent_trials", 1), ("num_samples", 1)):
        value = getattr(args, option)
        if value is not None and value < least:
            raise UsageError(f"--{option.replace('_', '-')} must be at least {least}; got {value}")
    minutes = args.checkpoint_minutes
    if not (math.isfinite(minutes) and minutes >= 0):
        raise UsageError(f"--checkpoint-minutes must be a finite number >= 0 (0: by steps only); "
                         f"got {minutes}")
    if args.mlflow is not None:
        check_mlflow(args.mlflow)
    if getattr(args, "wandb", None) is not None:
        check_wandb(args.wandb)
    if args.pack_size != "auto":
        if not str(args.pack_size).isdigit() or int(args.pack_size) < 1:
            raise UsageError(f"--pack-size: must be a whole number >= 1 or 'auto'; got {args.pack_size!r}")
        if int(args.pack_size) > 1 and (args.search == "optuna" or args.scheduler == "asha"):
            raise UsageError("--pack-size > 1 cannot be combined with --search optuna or --scheduler "
                             "asha, which decide trial by trial; use --pack-size 1")
    if args.name is not None and (not args.name or args.name in (".", "..") or "/" in args.name
                                  or "\\" in args.name or os.path.isabs(args.name)):
        raise UsageError(f"--name {args.name!r}: an experiment name is one folder name (no '/', not '..'); "
                         "use --storage-path to choose where it goes")


def check_data_dir(args) -> None:
    """``--data-dir``: an existing local folder, or (for prepared data only) a URI."""
    if not args.data_dir:
        return
    if "://" in args.data_dir:
        if args.data_source not in ("prepared", "procedural"):
            raise UsageError(f"--data-dir {args.data_dir}: real files are read from a local folder; for "
                             "data in an object store, prepare it there (python -m data_pipeline.prepare "
                             "DATASET --from-file FILE --out URI/DATASET) and pass --data-source prepared")
        return
    if not os.path.isdir(args.data_dir):
        what = {"prepared": "the prepared datasets (DIR/<dataset>/)",
                "procedural": "the rendered datasets (create it first: a folder every node sees)"}
        raise UsageError(f"--data-dir {args.data_dir}: no such folder; give the folder that holds "
                         f"{what.get(args.data_source, 'the real data files')}")


def check_mlflow(uri: str) -> None:
    """--mlflow needs the optional mlflow package and a tracking URI."""
    if not uri.strip():
        raise UsageError("--mlflow: give a tracking URI, e.g. sqlite:///mlflow.db or http://host:5000")
    import importlib.util

    if importlib.util.find_spec("mlflow") is None:
        raise UsageError("--mlflow needs MLflow, an optional extra: pip install -e '.[mlflow]' "
                         "(or pip install mlflow-skinny)")


def check_wandb(project: str) -> None:
    """--wandb needs the optional wandb package and a project name (ENTITY/PROJECT, or PROJECT)."""
    entity, _, name = project.strip().rpartition("/")
    if not name or "/" in entity or any(c in name for c in "\\#?%:"):
        raise UsageError(f"--wandb {project!r}: give a W&B project, e.g. disgen or my-team/disgen")
    import importlib.util

    if importlib.util.find_spec("wandb") is None:
        raise UsageError("--wandb needs Weights & Biases, an optional extra: pip install -e '.[wandb]' "
                         "(or pip install wandb)")


def load_spec(args) -> tuple[dict, str]:
    """The study's spec and name: a preset or a grid file, with the command line's data settings pinned
    and, for --search optuna, the searched settings taken off the axes."""
    if isinstance(args.grid, Mapping):  # a grid given as data (sweeps.run)
        spec, preset = dict(args.grid), args.name or "grid"
    elif args.grid:
        spec, preset = load_grid_file(args.grid), os.path.splitext(os.path.basename(args.grid))[0]
    else:
        spec, preset = get_spec(args.preset), args.preset
    data_source = args.data_source or ("real" if args.data_dir else None)
    if data_source:
        spec = pin_setting(spec, "data_source", data_source)
    if args.search == "optuna":
        for setting in search_space(spec, preset):
            spec = unpin_axis(spec, setting)
    return spec, preset


def seed_list(seeds) -> list[int]:
    """The seeds per configuration: a count (3 → 0, 1, 2) or a list, given as the command line's
    text (``"3"``, ``"0,5,7"``), a whole number or a sequence of them."""
    if isinstance(seeds, str):
        return parse_seeds(seeds)
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        return parse_seeds(str(seeds))
    if isinstance(seeds, Sequence) and all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                                           for s in seeds):
        return parse_seeds(",".join(str(s) for s in seeds) + ",")
    raise UsageError(f"--seeds {seeds!r}: give a count (3) or a list of seeds ([0, 5, 7])")


def given_trials(args) -> list[TrialConfig]:
    """The trials given one by one (``sweeps.run``'s list): each a ``TrialConfig`` or a mapping of
    its settings (completed and validated as a grid point is), none twice. They carry their own
    seeds and scale, so --seeds and --search optuna, which make trials from a grid, are refused."""
    given = args.trials
    if isinstance(given, (str, bytes, Mapping)) or not isinstance(given, Sequence) or not given:
        raise UsageError("trials: give a non-empty list of trial configs (TrialConfig, or mappings of "
                         "settings), or a grid instead")
    if args.seeds is not None:
        raise UsageError("--seeds makes trials from a grid; the trials given carry their own seed")
    if args.search != "grid":
        raise UsageError("--search optuna samples a grid's search space; pass a grid, not a list of trials")
    trials = []
    for index, trial in enumerate(given):
        if not isinstance(trial, Mapping):
            raise UsageError(f"trials[{index}]: expected a TrialConfig or a mapping of settings; "
                             f"got {type(trial).__name__}")
        settings = dict(trial)
        if args.data_source or args.data_dir:  # as for a grid, the options win over the settings
            settings["data_source"] = args.data_source or "real"
        trials.append(TrialConfig.complete(settings, f"trials[{index}]"))
    keys = [t.trial_key for t in trials]
    if len(set(keys)) < len(keys):
        twin = next(t for t in trials if keys.count(t.trial_key) > 1)
        raise UsageError(f"trials: {len(keys) - len(set(keys))} trial(s) repeat another "
                         f"(e.g. {twin.dirname}); give each trial once")
    return trials


def plan_trials(args) -> dict:
    """The study's trials (each complete, validated and frozen: ``sweeps.trials.TrialConfig``) and
    the data they read (by reference, validated from labels and manifests, never images), with
    nothing written: what ``--dry-run`` shows."""
    check_options(args)
    scale = args.scale
    if getattr(args, "trials", None) is not None:  # trials given one by one (sweeps.run)
        spec, seeds, trials = {}, None, given_trials(args)
        preset, scale = trials[0].get("preset") or "trials", trials[0].get("scale") or scale
    else:
        spec, preset = load_spec(args)
        seeds = seed_list(args.seeds) if args.seeds not in (None, "") else list(
            range(default_seeds(spec, args.scale)))
        trials = trial_configs(spec, preset, args.scale, seeds)
    check_data_dir(args)
    data_dir = args.data_dir or os.environ.get("DISGEN_DATA") or None
    if args.search == "optuna":
        check_search_bounds(spec, preset, trials[0])
    name = args.name or default_experiment_name(preset, scale)
    from sweeps.data import plan_data

    # Planned here, on the driver, from labels and manifests only (never images), so that a missing
    # or malformed real file or prepared folder stops the run before Ray starts.
    data = plan_data(trials, data_dir)
    return {"name": name, "spec": spec, "preset": preset, "seeds": seeds, "trials": trials, "data": data}


def plan(args) -> dict:
    """Everything that can be decided and validated without Ray: the study's trials and data
    (``plan_trials``), and the experiment folder, checked writable and free."""
    planned = plan_trials(args)
    name, trials = planned["name"], planned["trials"]
    storage_path = check_storage(args.storage_path)
    check_address(args.address)
    experiment_dir = storage.join(storage_path, name)
    ExperimentLock(experiment_dir).check_free()  # a second driver on the folder: refused
    exists = any(f.startswith("experiment_state") or f in (TRIALS_FILE, PLAN_FILE)
                 for f in storage.list_names(experiment_dir))
    if exists and not args.resume:
        raise UsageError(f"experiment {experiment_dir} already exists; pass --resume to continue "
                         "it, or --name NEW for a new experiment")
    if args.resume and not exists:
        raise UsageError(f"nothing to resume at {experiment_dir}; run without --resume to start it")
    record = plan_record.make_record(trials, args.search, args.scheduler)
    added = plan_record.check_resume(experiment_dir, record) if args.resume else []
    # --data-source procedural --data-dir: render each dataset once, there (once Ray is up)
    shared_dir = args.data_dir if args.data_source == "procedural" else None
    return {**planned, "storage": storage_path, "experiment_dir": experiment_dir, "shared_dir": shared_dir,
            "record": record, "added": added}


def resume_command(argv: list[str]) -> str:
    """The exact command that resumes this run: its own arguments, plus --resume."""
    resume = " ".join(["python -m sweeps.paper_grid", *map(shlex.quote, argv)])
    return resume if "--resume" in argv else resume + " --resume"


def print_commands(experiment_dir: str, argv: list[str]) -> None:
    resume = resume_command(argv)
    trials = storage.join(experiment_dir, TRIALS_FILE)
    print("\nNext:")
    print(f"  resume or extend:  {resume}   (extend: the same with more --seeds or axis values)")
    if storage.is_remote(experiment_dir):
        local = storage.experiment_name(experiment_dir)
        print(f"  TensorBoard:       aws s3 sync {experiment_dir} ./{local} && "
              f"tensorboard --logdir ./{local}")
        print(f"  report + figure:   python -m analysis.report ./{local}   (after the sync)")
        print(f"  in pandas:         import pyarrow.parquet as pq; "
              f"df = pq.read_table({trials!r}).to_pandas()")
        return
    print(f"  TensorBoard:       tensorboard --logdir {shlex.quote(experiment_dir)}")
    print(f"  report + figure:   python -m analysis.report {shlex.quote(experiment_dir)}")
    print(f"  in pandas:         import pandas as pd; df = pd.read_parquet({trials!r})")


# The exit codes of a run stopped by Ctrl-C (SIGINT) or by SIGTERM (``ray job stop``), as a shell
# reports a process that signal killed (128 + the signal).
INTERRUPTED = exit_code(signal.SIGINT)  # 130
TERMINATED = exit_code(signal.SIGTERM)  # 143


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by Ctrl-C (or SIGTERM: ``signum``) once it had started: the finished models
    are stored in ``experiment_dir`` (``finished`` of ``planned``, where known); the same call with
    ``resume=True`` (``--resume``) goes on from there. A Ctrl-C before the sweep starts, when
    nothing ran, is a plain ``KeyboardInterrupt`` (a SIGTERM, ``sweeps.errors.Terminated``). A
    sweep that stopped because its results store kept failing (``sweeps/results.py``) ends the same
    way, with the ``reason``."""

    def __init__(self, experiment_dir: str, planned: int, finished: int | None, reason: str | None = None,
                 signum: int = signal.SIGINT):
        self.experiment_dir, self.planned, self.finished = experiment_dir, planned, finished
        self.reason = reason  # why it stopped, where not a signal: the results store kept failing
        self.signum = signum  # the signal that stopped it: SIGINT (Ctrl-C) or SIGTERM
        super().__init__(f"{self.kept()} in {experiment_dir}; run it again with resume=True to go on")

    def kept(self) -> str:
        return (f"{self.finished} of {self.planned} models finished and stored" if self.finished is not None
                else "the finished models are stored")

    def exit_code(self) -> int:
        """The command line's exit code: 130 after a Ctrl-C, 143 after a SIGTERM, 1 where the
        results store kept failing."""
        return exit_code(self.signum) if self.reason is None else 1


def stopped_by(signum: int) -> str:
    """How the command line names a signal that stopped a sweep."""
    return "Stopped (SIGTERM, e.g. `ray job stop`)" if signum == signal.SIGTERM else "Interrupted (Ctrl-C)"


def print_interrupted(stop: SweepInterrupted, argv: list[str]) -> None:
    """What a Ctrl-C or SIGTERM (or a results store that kept failing) left, and the command that
    goes on."""
    why = stopped_by(stop.signum) if stop.reason is None else f"Stopped: {stop.reason}"
    print(f"\n{why}: {stop.kept()} in {stop.experiment_dir}; the others stopped at "
          "their last checkpoint, or had not started.", flush=True)
    print(f"Resume with:  {resume_command(argv)}", flush=True)


def execute(args) -> tuple[dict, dict]:
    """Plan, lock and run the sweep that ``args`` describe (the command line's options, or
    ``run``'s keyword arguments): (its plan, ``sweeps.tuner.run_sweep``'s summary, with the
    ``planned`` count). Bad input raises a ``UsageError`` before Ray starts; a Ctrl-C raises
    ``KeyboardInterrupt`` before the sweep starts (nothing ran), ``SweepInterrupted`` after."""
    run_plan = plan(args)
    lock = ExperimentLock(run_plan["experiment_dir"])
    lock.acquire()
    planned = args.num_samples if args.search == "optuna" else len(run_plan["trials"])
    try:
        from sweeps.tuner import run_sweep  # imports Ray: only once the input is known to be good

        summary = run_sweep(args, run_plan)
    except KeyboardInterrupt as stop:  # a second Ctrl-C or SIGTERM, or one outside Tune's run
        raise SweepInterrupted(run_plan["experiment_dir"], planned, None, signum=stop_signal(stop)) from None
    finally:
        lock.release()
    if summary.get("interrupted"):
        raise SweepInterrupted(run_plan["experiment_dir"], planned, summary["finished"],
                               summary.get("stopped_by"), summary.get("signal") or signal.SIGINT)
    return run_plan, {**summary, "planned": planned}


def options(**values) -> argparse.Namespace:
    """The command line's options as a namespace: its defaults (``--address``: ``$RAY_ADDRESS``),
    with ``values`` (option names with underscores) in their place."""
    args = build_parser().parse_args([])
    unknown = sorted(set(values) - set(vars(args)) - {"trials"})
    if unknown:
        raise TypeError(f"unknown option {unknown[0]!r}")
    for name, value in values.items():
        setattr(args, name, value)
    return args


# run()'s keyword arguments that are numbers, and the choices of those that are names.
_NUMBERS = ("cpus_per_trial", "gpus_per_trial", "max_concurrent_trials", "num_cpus", "checkpoint_every",
            "checkpoint_minutes", "num_samples", "max_failures")
_WHOLE = ("max_concurrent_trials", "num_cpus", "checkpoint_every", "num_samples", "max_failures")
_CHOICES = {"search": SEARCHES, "scheduler": SCHEDULERS, "data_source": (None, *DATA_SOURCES)}


def run(grid_or_trials="default", *, scale: str = "smoke", storage_path: str = DEFAULT_STORAGE,
        name: str | None = None, seeds=None, resume: bool = False, address: str | None = None,
        cpus_per_trial: float = 1.0, gpus_per_trial: float | None = None,
        max_concurrent_trials: int | None = None, num_cpus: int | None = None,
        checkpoint_every: int | None = None, checkpoint_minutes: float = 5.0, search: str = "grid",
        num_samples: int = 8, scheduler: str = "none", data_source: str | None = None,
        data_dir: str | None = None, max_failures: int = 2, verbose: bool = False,
        mlflow: str | None = None, wandb: str | None = None, pack_size: int | str = "auto"):
    """Run a study on Ray, as ``python -m sweeps.paper_grid`` does, and return its trials: every
    model's row of ``trials.parquet``, finished or not (its ``status`` says which), as
    ``analysis.load_trials`` gives them.

    ``grid_or_trials``: a preset's name (``"montero2021"``); a grid file's path (``.yaml``,
    ``.yml`` or a ``.py`` defining ``GRID``); a grid as a dict (keys ``description``, ``fixed``,
    ``axes``, ``scales``, ``search``; named ``name``, else ``grid``); or a list of trials
    (``sweeps.trials.TrialConfig``, or mappings of their settings), run as they are (``scale``
    and ``seeds`` do not apply). Every keyword is the command-line option of the same name
    (``storage_path`` is ``--storage-path``) with the same default, but ``address``: None joins
    the Ray this process has already started, else ``$RAY_ADDRESS``, else starts a local one.

    Bad input raises ``sweeps.errors.UsageError`` (the command line's one-line message) before
    Ray starts; an experiment that exists needs ``resume=True``. A Ctrl-C once the sweep started
    raises ``SweepInterrupted``: the finished models are stored, and ``resume=True`` goes on."""
    values = {k: v for k, v in locals().items() if k != "grid_or_trials"}
    if address is None:
        values["address"] = os.environ.get("RAY_ADDRESS")
    for option in _NUMBERS:
        value = values[option]
        whole = option in _WHOLE
        kind = numbers.Integral if whole else numbers.Real
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            what = "whole number" if whole else "number"
            raise UsageError(f"--{option.replace('_', '-')} must be a {what}; got {value!r}")
    for option, choices in _CHOICES.items():
        if values[option] not in choices:
            raise UsageError(f"--{option.replace('_', '-')}: unknown {values[option]!r}; choose one of "
                             f"{', '.join(c for c in choices if c)}")
    source = grid_or_trials
    if isinstance(source, (str, os.PathLike)) and not isinstance(source, Mapping):
        path = os.fspath(source)
        if isinstance(source, os.PathLike) or path.endswith(GRID_FILE_SUFFIXES) or os.path.isfile(path):
            values["grid"] = path
        else:
            values["preset"] = path
    elif isinstance(source, Mapping):
        values["grid"] = source
    else:
        values["trials"] = source
    return execute(options(**values))[1]["trials"]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.list:
        from sweeps.costs import presets_table

        print(presets_table())
        return 0
    if args.dry_run:  # the plan, without Ray
        from sweeps.dry_run import plan_text

        try:
            print(plan_text(args, plan_trials(args)))
        except UsageError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        return 0
    try:
        with sigterm_as_interrupt():  # a SIGTERM stops the sweep as Ctrl-C does (exit code 143)
            run_plan, summary = execute(args)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except SweepInterrupted as stop:
        print_interrupted(stop, argv)
        return stop.exit_code()
    except KeyboardInterrupt as stop:  # Ctrl-C, or a SIGTERM (Terminated), before the sweep started
        print(f"\n{stopped_by(stop_signal(stop))} before the sweep started; nothing ran. Run the same "
              "command again to start it.", flush=True)
        return exit_code(stop_signal(stop))
    from analysis.report import correlation_text, seed_text
    from analysis.tables import trials_text

    planned = summary["planned"]
    print(f"\n{summary['finished']} of {planned} trials finished "
          f"in {summary['seconds']:.0f} s; results in {run_plan['experiment_dir']}")
    if summary["failed"]:
        print(f"{summary['failed']} trials failed; see {run_plan['experiment_dir']}/{ERRORS_FILE} "
              "and rerun with --resume")
    if summary["trials"] is not None and len(summary["trials"]):
        print()
        print(trials_text(summary["trials"]))
        print()
        print(correlation_text(summary["trials"]))
        seeds = seed_text(summary["trials"])
        if seeds:
            print()
            print(seeds)
    print_commands(run_plan["experiment_dir"], argv)
    return 0 if not summary["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
