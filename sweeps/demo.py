"""The papers' findings on a laptop: the ``demo`` scale of montero2021, montero2022 and dittadi2021 (under
an hour on 2 cores), then one report whose Findings section says, for each paper's headline statements,
whether the demo reproduces them (✓, ✗ or ?). An interrupted study is resumed; docs/presets.md says what the
demo scale shrinks."""

from __future__ import annotations

import argparse
import os
import sys
import time
import webbrowser

import sweeps
from analysis import storage
from data_pipeline.cli import HelpFormatter
from sweeps import paper_grid
from sweeps.errors import UsageError, exit_code, sigterm_as_interrupt, stop_signal
from sweeps.options import DEFAULT_STORAGE, OPTIONS
from sweeps.plan_record import PLAN_FILE

STUDIES = ("montero2021", "montero2022", "dittadi2021")
REPORT_FOLDER = "demo-report"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sweeps.demo",
        formatter_class=HelpFormatter,
        description="Run the demo scale of the three papers' studies on a local Ray (the three in "
                    "under an hour on 2 CPU cores) and write a report whose Findings section says, for "
                    "each paper's headline statements, whether the demo reproduces them.")
    parser.add_argument("--studies", default=",".join(STUDIES),
                        help="comma-separated presets to run, from: " + ", ".join(STUDIES))
    parser.add_argument("--storage-path", default=DEFAULT_STORAGE,
                        help="folder that receives the experiments and the report (<path>/demo-report)")
    parser.add_argument("--budget", type=float, default=1.0,
                        help="multiply every model's training budget (steps, epochs and the schedules "
                             "counted in steps) by this factor; 0.5 halves them. Its experiments and "
                             "report are kept apart (<study>-demo-budget0.5, demo-report-budget0.5)")
    parser.add_argument("--no-open", action="store_true", help="do not open the report in a browser")
    parser.add_argument("--report-only", action="store_true",
                        help="write the report from the experiments already there; run nothing")
    return parser


def _studies(text: str) -> list[str]:
    chosen = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in STUDIES]
    if unknown or not chosen:
        raise SystemExit(f"error: --studies: unknown {unknown or text!r}; choose from {', '.join(STUDIES)}")
    return chosen


def experiment(preset: str, storage_path: str, budget: float = 1.0) -> str:
    """Where a study's demo runs: ``<storage path>/<preset>-demo`` (``-budget0.5`` for a budget factor)."""
    return storage.join(storage_path, paper_grid.default_experiment_name(preset, "demo", budget))


def report_folder(budget: float = 1.0) -> str:
    return REPORT_FOLDER if budget == 1 else f"{REPORT_FOLDER}-budget{budget:g}"


def run_study(preset: str, storage_path: str, budget: float = 1.0) -> tuple[int, float]:
    """One study at demo scale, resumed if its experiment exists: (the command's exit code, wall seconds)."""
    resume = PLAN_FILE in storage.list_names(experiment(preset, storage_path, budget))
    started = time.perf_counter()
    command = (f"python -m sweeps.paper_grid --preset {preset} --scale demo --storage-path {storage_path}"
               + (f" --budget {budget:g}" if budget != 1 else "") + (" --resume" if resume else ""))
    print(f"\n=== {preset}, demo scale: {command}", flush=True)
    try:
        trials = sweeps.run(preset, scale="demo", storage_path=storage_path, resume=resume, budget=budget)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2, time.perf_counter() - started
    except KeyboardInterrupt as stop:  # paper_grid.SweepInterrupted, or a Ctrl-C (SIGTERM) before it started
        signum = getattr(stop, "signum", None) or stop_signal(stop)
        what = stop or "before the study started; nothing ran"
        print(f"\n{paper_grid.stopped_by(signum)}: {what}", flush=True)
        return exit_code(signum), time.perf_counter() - started
    seconds = time.perf_counter() - started
    finished = int((trials["status"] == "finished").sum())
    print(f"{preset}: {finished} of {len(trials)} models finished in {seconds:.0f} s", flush=True)
    return (0 if finished == len(trials) else 1), seconds


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    studies = _studies(args.studies)
    if problem := OPTIONS["budget"].problem(args.budget):  # the sweep's own rule, before any study runs
        raise SystemExit(f"error: {problem}")
    times, failed = {}, []
    if not args.report_only:
        for preset in studies:
            with sigterm_as_interrupt():  # a SIGTERM stops the study as Ctrl-C does
                code, seconds = run_study(preset, args.storage_path, args.budget)
            times[preset] = seconds
            if code in (paper_grid.INTERRUPTED, paper_grid.TERMINATED):  # stop here; the same command goes on
                print("The demo resumes where it stopped: run the same python -m sweeps.demo command again",
                      flush=True)
                return code
            if code != 0:
                failed.append(preset)
    experiments = [experiment(p, args.storage_path, args.budget) for p in studies]
    present = [e for e in experiments if storage.has_results(e)]
    if not present:
        print("error: no demo results to report; run without --report-only first", file=sys.stderr)
        return 2
    out = os.path.join(args.storage_path, report_folder(args.budget))
    from analysis.report import main as report_main
    # five pictures: a model of each split the reconstruction findings read (analysis.trained_models.spread)
    code = report_main([*present, "--out", out, "--max-models", "5", "--no-progress"])
    for preset, seconds in times.items():
        print(f"{preset}: {seconds / 60:.1f} min" + (" (some trials failed; rerun to resume them)"
                                                      if preset in failed else ""))
    page = os.path.abspath(os.path.join(out, "report.html"))
    if code == 0 and not args.no_open:
        webbrowser.open("file://" + page)
    return 1 if failed or code else 0


if __name__ == "__main__":
    sys.exit(main())
