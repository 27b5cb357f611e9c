"""Run a study: ``python -m sweeps.paper_grid`` (a local Ray, or ``--address``'s cluster), or
``sweeps.run`` (``run`` here) from Python. Both take one path (``execute``) with the same options and
the same one-line ``UsageError``; results go to ``<storage-path>/<name>/``."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import numbers
import os
import shlex
import signal
import socket
import sys
import textwrap
from collections.abc import Mapping, Sequence

from analysis import storage
from analysis.loading import ERRORS_PARTS
from analysis.schema import TRIALS_FILE
from data_pipeline.cli import HelpFormatter, Parser
from models.config import scaled_budget
from sweeps import plan_record
from sweeps.checkpoints import CHECKPOINTS
from sweeps.errors import UsageError, exit_code, sigterm_as_interrupt, stop_signal
from sweeps.grid import (
    default_seeds,
    get_spec,
    load_grid_file,
    parse_seeds,
    pin_setting,
    trial_configs,
    with_dataset,
)
from sweeps.lock import ExperimentLock
from sweeps.options import KEYWORDS, OPTIONS, Sweep, SweepOptions, run_signature
from sweeps.plan_record import PLAN_FILE
from sweeps.presets import PRESETS
from sweeps.search import search_of
from sweeps.trials import TrialConfig

GRID_FILE_SUFFIXES = (".yaml", ".yml", ".py")


def default_experiment_name(preset: str, scale: str, budget: float = 1.0) -> str:
    """The study's name, plus the scale unless smoke and the budget unless 1: a scaled run is kept apart."""
    name = preset if scale == "smoke" else f"{preset}-{scale}"
    return name if budget == 1 else f"{name}-budget{budget:g}"


def _presets_epilog() -> str:
    lines = ["presets (python -m sweeps.paper_grid --list gives each one's trials and cost per scale):"]
    for name, spec in PRESETS.items():
        lines += textwrap.wrap(f"{name}: {spec['description']}", width=100, initial_indent="  ",
                               subsequent_indent="      ")
    return "\n".join(lines)


def _prepared_state(data_dir: str | None, dataset: str) -> str:
    """Where a prepared dataset is, or that it is not there."""
    from data_pipeline import prepared
    if not data_dir:
        return "no --data-dir or $DISGEN_DATA"
    uri = prepared.join(prepared.normalise(data_dir), dataset)
    try:
        prepared.read_manifest(uri)
    except Exception:  # not there, or damaged: the run would refuse it
        return f"not prepared at {uri}"
    return f"prepared at {uri}"


def datasets_text(options: SweepOptions) -> str:
    """What ``--list`` adds: each preset's other datasets, the one used and whether it is prepared."""
    data_dir = options.data_dir or os.environ.get("DISGEN_DATA") or None
    lines = []
    for name, spec in PRESETS.items():
        offered = spec.get("datasets") or {}
        if not offered:
            continue
        own = spec.get("fixed", {}).get("dataset")
        if options.dataset in offered:
            fixed = offered[options.dataset]["fixed"]
            sets = [("", fixed["dataset"])] + [
                (f"{key[:6].upper().replace('_', '-')} ", fixed[key])
                for key in ("ood2_a_dataset", "ood2_b_dataset") if key in fixed]
            lines.append(f"{name} will use --dataset {options.dataset}: "
                         + "; ".join(f"{label}{dataset} ({_prepared_state(data_dir, dataset)})"
                                     for label, dataset in sets))
        else:
            lines.append(f"{name} will use {own}, its stand-in (default); --dataset "
                         f"{' or '.join(offered)}: its own data (docs/datasets.md)")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The command line: one flag per option that ``sweeps.options.SweepOptions`` declares."""
    description = textwrap.fill("Run a disentanglement-vs-generalisation study as a Ray Tune sweep. With no "
                                "arguments: the default study at the 'smoke' scale on a local Ray (4 trials, "
                                "about 4 minutes on 2 CPU cores).", width=100)
    parser = Parser(prog="python -m sweeps.paper_grid", description=description, epilog=_presets_epilog(),
                    formatter_class=HelpFormatter)
    for declared in OPTIONS.values():
        parser.add_argument(declared.flag, **declared.argparse())
    return parser


def parse_options(argv: list[str]) -> SweepOptions:
    """The command line's options, checked (a bad value: ``UsageError``; a bad flag: exit 2)."""
    return SweepOptions(**vars(build_parser().parse_args(argv)))


def check_storage(path: str) -> str:
    """The storage folder (absolute, or a URI), created and proven writable, or a UsageError."""
    path = storage.normalise(path)
    try:
        storage.check_writable(path)
    except (OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or str(error).splitlines()[0]
        raise UsageError(f"cannot write to storage path {path} ({reason}); "
                         "pass --storage-path with a folder (or s3:// prefix) you can write to") from None
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
        raise UsageError(f"cannot reach Ray at {address} ({error.strerror or error}); check that the cluster "
                         "is up (ray status) and the address, or omit --address for a local Ray") from None


def check_data_dir(options: SweepOptions) -> None:
    """``--data-dir``: an existing local folder, or (for prepared data only) a URI."""
    folder, source = options.data_dir, options.pinned_data_source
    if options.dataset and not options.data_source and not options.grid:
        # the dataset's own source where it names one (dittadi2021's finger: prepared)
        variant = (PRESETS.get(options.preset, {}).get("datasets") or {}).get(options.dataset, {})
        source = variant.get("fixed", {}).get("data_source", source)
    if not folder:
        return
    if "://" in folder:
        if source not in ("prepared", "procedural"):
            raise UsageError(f"--data-dir {folder}: real files are read from a local folder; for "
                             "data in an object store, prepare it there (python -m data_pipeline.prepare "
                             "DATASET --from-file FILE --out URI/DATASET) and pass --data-source prepared")
        return
    if not os.path.isdir(folder):
        what = {"prepared": "the prepared datasets (DIR/<dataset>/)",
                "procedural": "the rendered datasets (create it first: a folder every node sees)"}
        raise UsageError(f"--data-dir {folder}: no such folder; give the folder that holds "
                         f"{what.get(source, 'the real data files')}")


def load_spec(options: SweepOptions) -> tuple[dict, str]:
    """The study's spec and name (preset or grid file), data options pinned, searched settings off the axes.
    """
    if isinstance(options.grid, Mapping):  # a grid given as data (sweeps.run)
        spec, preset = dict(options.grid), options.name or "grid"
    elif options.grid:
        spec, preset = load_grid_file(options.grid), os.path.splitext(os.path.basename(options.grid))[0]
    else:
        spec, preset = get_spec(options.preset), options.preset
    spec = with_dataset(spec, preset, options.dataset)
    if options.dataset and spec.get("fixed", {}).get("data_source"):
        source = spec["fixed"]["data_source"]  # the dataset's own: --data-dir alone does not make it real
        if options.data_source not in (None, source):
            raise UsageError(f"--dataset {options.dataset} reads {source} data; drop --data-source "
                             f"{options.data_source} (or pass --data-source {source})")
    elif options.pinned_data_source:
        spec = pin_setting(spec, "data_source", options.pinned_data_source)
    return search_of(options.search).prepare_spec(spec, preset), preset


def seed_list(seeds) -> list[int]:
    """The seeds per configuration from a count or a list: text (``"3"``, ``"0,5,7"``), int or sequence."""
    if isinstance(seeds, str):
        return parse_seeds(seeds)
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        return parse_seeds(str(seeds))
    if isinstance(seeds, Sequence) and all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                                           for s in seeds):
        return parse_seeds(",".join(str(s) for s in seeds) + ",")
    raise UsageError(f"--seeds {seeds!r}: give a count (3) or a list of seeds ([0, 5, 7])")


def given_trials(options: SweepOptions, given) -> list[TrialConfig]:
    """``sweeps.run``'s list of trials, completed as grid points, none twice (no --seeds, no optuna)."""
    if isinstance(given, (str, bytes, Mapping)) or not isinstance(given, Sequence) or not given:
        raise UsageError("trials: give a non-empty list of trial configs (TrialConfig, or mappings of "
                         "settings), or a grid instead")
    if options.seeds is not None:
        raise UsageError("--seeds makes trials from a grid; the trials given carry their own seed")
    if not search_of(options.search).takes_trial_lists:
        raise UsageError(f"--search {options.search} samples a grid's search space; pass a grid, not a list "
                         "of trials")
    trials = []
    for index, trial in enumerate(given):
        if not isinstance(trial, Mapping):
            raise UsageError(f"trials[{index}]: expected a TrialConfig or a mapping of settings; "
                             f"got {type(trial).__name__}")
        settings = dict(trial)
        if options.pinned_data_source:  # as for a grid, the options win over the settings
            settings["data_source"] = options.pinned_data_source
        trials.append(TrialConfig.complete(settings, f"trials[{index}]"))
    keys = [t.trial_key for t in trials]
    if len(set(keys)) < len(keys):
        twin = next(t for t in trials if keys.count(t.trial_key) > 1)
        raise UsageError(f"trials: {len(keys) - len(set(keys))} trial(s) repeat another "
                         f"(e.g. {twin.dirname}); give each trial once")
    return trials


def plan_trials(options: SweepOptions, given=None) -> Sweep:
    """The study's frozen trials and their data by reference, nothing written: what ``--dry-run`` shows."""
    scale = options.scale
    if given is not None:  # trials given one by one (sweeps.run)
        spec, seeds, trials = {}, None, given_trials(options, given)
        preset, scale = trials[0].get("preset") or "trials", trials[0].get("scale") or scale
    else:
        spec, preset = load_spec(options)
        seeds = seed_list(options.seeds) if options.seeds not in (None, "") else list(
            range(default_seeds(spec, options.scale)))
        trials = trial_configs(spec, preset, options.scale, seeds)
    if options.budget != 1:
        trials = [t.replace(preset, **scaled_budget(t.model, options.budget)) for t in trials]
    check_data_dir(options)
    data_dir = options.data_dir or os.environ.get("DISGEN_DATA") or None
    search_of(options.search).check(spec, preset, trials[0])
    from sweeps.data import plan_data  # labels and manifests only: a bad data file stops it before Ray starts
    name = options.name or default_experiment_name(preset, scale, options.budget)
    return Sweep(options, name=name, preset=preset, spec=spec, seeds=seeds, trials=tuple(trials),
                 data=plan_data(trials, data_dir))


def plan(options: SweepOptions, given=None) -> Sweep:
    """All that can be decided without Ray: ``plan_trials``, and the experiment folder, writable and free."""
    planned = plan_trials(options, given)
    storage_path = check_storage(options.storage_path)
    check_address(options.address)
    experiment_dir = storage.join(storage_path, planned.name)
    ExperimentLock(experiment_dir).check_free()  # a second driver on the folder: refused
    exists = any(f.startswith("experiment_state") or f in (TRIALS_FILE, PLAN_FILE)
                 for f in storage.list_names(experiment_dir))
    if exists and not options.resume:
        raise UsageError(f"experiment {experiment_dir} already exists; pass --resume to continue "
                         "it, or --name NEW for a new experiment")
    if options.resume and not exists:
        raise UsageError(f"nothing to resume at {experiment_dir}; run without --resume to start it")
    record = plan_record.make_record(planned.trials, options.search, options.scheduler)
    added = plan_record.check_resume(experiment_dir, record) if options.resume else []
    return dataclasses.replace(planned, storage=storage_path, experiment_dir=experiment_dir, record=record,
                               added=tuple(added))


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


# The exit codes of a run stopped by Ctrl-C or SIGTERM (``ray job stop``), as a shell reports them
INTERRUPTED = exit_code(signal.SIGINT)  # 130
TERMINATED = exit_code(signal.SIGTERM)  # 143


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped once started (``signum``, or a failing store: ``reason``); ``resume=True`` goes on."""

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
        """130 after a Ctrl-C, 143 after a SIGTERM, 1 where the results store kept failing."""
        return exit_code(self.signum) if self.reason is None else 1


def stopped_by(signum: int) -> str:
    return "Stopped (SIGTERM, e.g. `ray job stop`)" if signum == signal.SIGTERM else "Interrupted (Ctrl-C)"


def print_interrupted(stop: SweepInterrupted, argv: list[str]) -> None:
    """What a stopped sweep left, and the command that goes on."""
    why = stopped_by(stop.signum) if stop.reason is None else f"Stopped: {stop.reason}"
    print(f"\n{why}: {stop.kept()} in {stop.experiment_dir}; the others stopped at "
          "their last checkpoint, or had not started.", flush=True)
    print(f"Resume with:  {resume_command(argv)}", flush=True)


def execute(options: SweepOptions, given=None):
    """Plan, lock and run the sweep: (its plan, its ``SweepSummary``). Bad input raises ``UsageError``
    before Ray starts; a Ctrl-C once the sweep started, ``SweepInterrupted``."""
    sweep = plan(options, given)
    from sweeps import driver  # imports Ray: only once the input is known to be good
    from sweeps.errors import StopSignal
    stop = StopSignal()  # a lease of the lock that another driver took stops the sweep as a Ctrl-C does
    lock = ExperimentLock(sweep.experiment_dir, on_lost=stop.request)
    lock.acquire()
    if warning := storage.retention_warning(sweep.experiment_dir, CHECKPOINTS + "/"):
        print(f"warning: {warning}", flush=True)
    try:
        summary = driver.run(sweep, stop, lock.fence)
    except KeyboardInterrupt as stop:  # a second Ctrl-C or SIGTERM, or one outside Tune's run
        raise SweepInterrupted(sweep.experiment_dir, sweep.planned, None, signum=stop_signal(stop)) from None
    finally:
        lock.release()
    if summary.interrupted:
        raise SweepInterrupted(sweep.experiment_dir, sweep.planned, summary.finished, summary.stop.reason,
                               summary.stop.signum or signal.SIGINT)
    return sweep, summary


def run(grid_or_trials="default", **options):
    """Run a study on Ray, as ``python -m sweeps.paper_grid`` does, and return its trials: every model's
    row of ``trials.parquet``, finished or not, as ``analysis.load_trials`` gives them. ``grid_or_trials``:
    a preset's name, a grid file (``.yaml``, ``.yml``, or ``.py`` defining ``GRID``), a grid as a dict, or
    a list of trials (``TrialConfig``s or mappings of settings), run as they are. Every keyword is the
    command-line option of the same name, but ``address``: None joins the Ray this process started, else
    ``$RAY_ADDRESS``, else starts a local one. Bad input raises ``UsageError`` before Ray starts; a Ctrl-C
    once the sweep started, ``SweepInterrupted``: the finished models are stored; ``resume=True`` goes on."""
    if unknown := sorted(set(options) - set(KEYWORDS)):
        raise TypeError(f"run() got an unexpected keyword argument {unknown[0]!r}")
    given = None
    if isinstance(grid_or_trials, (str, os.PathLike)):
        path = os.fspath(grid_or_trials)
        is_file = (isinstance(grid_or_trials, os.PathLike) or path.endswith(GRID_FILE_SUFFIXES)
                   or os.path.isfile(path))
        options["grid" if is_file else "preset"] = path
    elif isinstance(grid_or_trials, Mapping):
        options["grid"] = grid_or_trials
    else:
        given = grid_or_trials
    return execute(SweepOptions(**options), given)[1].trials


# the signature IDEs and help() show: every keyword with its default and type (sweeps.options)
run.__signature__ = run_signature(inspect.Parameter("grid_or_trials", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                    default="default"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        options = parse_options(argv)
        if options.list:
            from sweeps.costs import presets_table
            print(presets_table())
            print(datasets_text(options))
            return 0
        if options.dry_run:  # the plan, without Ray
            from sweeps.dry_run import plan_text
            print(plan_text(plan_trials(options)))
            return 0
        with sigterm_as_interrupt():  # a SIGTERM stops the sweep as Ctrl-C does (exit code 143)
            sweep, summary = execute(options)
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
    return print_summary(sweep, summary, argv)


def print_summary(sweep: Sweep, summary, argv: list[str]) -> int:
    """A finished sweep's summary, results and next commands; the exit code (1 if a trial failed)."""
    from analysis.report import correlation_text, seed_text
    from analysis.tables import trials_text
    print(f"\n{summary.finished} of {sweep.planned} trials finished "
          f"in {summary.seconds:.0f} s; results in {sweep.experiment_dir}")
    if summary.failed:
        print(f"{summary.failed} trials failed; see {sweep.experiment_dir}/{ERRORS_PARTS}/ "
              "(analysis.load_errors) and rerun with --resume")
    if summary.trials is not None and len(summary.trials):
        print(f"\n{trials_text(summary.trials)}")
        print(f"\n{correlation_text(summary.trials)}")
        if seeds := seed_text(summary.trials):
            print(f"\n{seeds}")
    print_commands(sweep.experiment_dir, argv)
    return 0 if not summary.failed else 1


if __name__ == "__main__":
    sys.exit(main())
