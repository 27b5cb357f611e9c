"""Print an experiment's trials table and correlations, draw the M21 Figure 3 scatter, and write a
self-contained HTML report.

    python -m analysis.report ./disgen_results/default [MORE_EXPERIMENTS...] --out ./report
    python -m analysis.report s3://bucket/disgen/dittadi2021-full --out ./d21-report

Experiments are folders or URIs (``s3://…`` or any pyarrow file system's); the report is written
locally. The report (``DIR/report.html``) embeds every figure as a PNG data URI and uses no
network, so it opens offline and can be mailed as one file; ``analysis/html_report.py`` builds it.
"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd

from analysis.aggregate import best_seed_metric, cell_label, correlations, finished_models, finished_only
from analysis.figures import disentanglement_vs_nll
from analysis.findings import findings, findings_text
from analysis.html_report import write_html_report
from analysis.loading import load_trials
from analysis.storage import experiment_name, is_remote
from analysis.tables import seed_table, trials_text
from data_pipeline.cli import HelpFormatter


@finished_only
def correlation_text(df: pd.DataFrame) -> str:
    """Spearman ρ (bootstrap 95% interval) of D-score against the NLLs within each dataset and
    split (correlations never pool them; see analysis.aggregate)."""
    lines = ["Spearman ρ, disentanglement vs NLL (bootstrap 95% interval), per dataset and split:"]
    table = correlations(df, metrics=["d_score"], scores=["test_nll", "train_nll"])
    for row in table.to_dict("records"):
        scope = cell_label(row) or "all trials"
        rho = "n/a (needs ≥ 3 trials that differ)" if pd.isna(row["rho"]) else (
            f"{row['rho']:+.2f} [{row['low']:+.2f}, {row['high']:+.2f}]")
        lines.append(f"  {scope:<34} {row['x']} vs {row['y']:<9} n={row['n']:<3} ρ = {rho}")
    return "\n".join(lines)


@finished_only
def seed_text(df: pd.DataFrame) -> str:
    """The report's seed table (``analysis.tables.seed_table``) as text, where seeds vary."""
    metric = best_seed_metric(df)
    if "seed" not in df.columns or df["seed"].nunique() < 2 or metric is None:
        return ""
    values = [m for m in ("train_nll", "test_nll", metric) if m in df.columns]
    table = seed_table(df, values, best_seed_by=metric)
    return (f"Per configuration: the value at the seed with the highest {metric} (as Montero et al. 2021 "
            f"report), then the mean ± sd over seeds:\n" + table.to_string(index=False))


def text_progress(label: str, stream=sys.stderr):
    """Progress over the models, as ``show(done, total)``: a tqdm bar on a terminal; elsewhere (a log
    file, CI) one line when the last one is done, ``label: 4 of 4 done``."""
    state = {}

    def show(done: int, total: int) -> None:
        isatty = getattr(stream, "isatty", None)
        if isatty and isatty():
            if "bar" not in state:
                from tqdm import tqdm

                state["bar"] = tqdm(total=total, desc=label, unit="model", file=stream, dynamic_ncols=True)
            state["bar"].update(done - state["bar"].n)
            if done >= total:
                state["bar"].close()
        elif done >= total:
            stream.write(f"{label}: {done} of {total} done\n")
            stream.flush()

    return show


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m analysis.report",
        formatter_class=HelpFormatter,
        description="Print the trials table and Spearman correlations of one or more disgen "
                    "experiments, draw the disentanglement-vs-NLL scatter (M21 Fig. 3) and write a "
                    "self-contained HTML report.")
    p.add_argument("experiment_dirs", nargs="+", metavar="EXPERIMENT",
                   help="experiment folder(s) or URI(s) holding trials.parquet, e.g. "
                        "./disgen_results/default or s3://bucket/disgen/dittadi2021-full")
    p.add_argument("--out", default=argparse.SUPPRESS,
                   help="local folder for report.html and the figures (default: the first "
                        "EXPERIMENT if it is a folder, else ./report-<name>)")
    p.add_argument("--max-models", type=int, default=4,
                   help="trained models (checkpoints) to draw reconstructions and traversals for")
    p.add_argument("--with-checkpoints", action="store_true",
                   help="for remote experiments, download checkpoints and draw the models' figures")
    p.add_argument("--n-bootstrap", type=int, default=1000,
                   help="bootstrap resamples for the correlation intervals")
    p.add_argument("--no-html", action="store_true", help="print and draw the scatter only")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--metric", default="d_score", choices=["d_score", "dci_disentanglement"],
                   help="disentanglement metric on the scatter's x axis")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        df = load_trials(*args.experiment_dirs)
    except (FileNotFoundError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if finished_models(df).empty:
        print(f"error: no finished trials in {', '.join(args.experiment_dirs)}", file=sys.stderr)
        return 2
    if args.max_models < 0 or args.n_bootstrap < 0:
        print("error: --max-models and --n-bootstrap must be 0 or more", file=sys.stderr)
        return 2
    found = findings(df)
    if found:
        print(findings_text(found) + "\n")
    unfinished = len(df) - len(finished_models(df))
    print(f"{len(df) - unfinished} trials" + (f" ({unfinished} more did not finish: failed or stopped)"
                                              if unfinished else "") + "\n")
    print(trials_text(df) + "\n")
    print(correlation_text(df))
    seeds = seed_text(df)
    if seeds:
        print("\n" + seeds)
    first = args.experiment_dirs[0]
    out = getattr(args, "out", None) or (f"report-{experiment_name(first)}" if is_remote(first) else first)
    os.makedirs(out, exist_ok=True)
    path = disentanglement_vs_nll(df, os.path.join(out, "disentanglement_vs_nll.png"), args.metric)
    print(f"\nfigure: {path}")
    if not args.no_html:
        command = ["python", "-m", "analysis.report", *(argv if argv is not None else sys.argv[1:])]
        html = write_html_report(args.experiment_dirs, out, df=df, max_models=args.max_models,
                                 n_bootstrap=args.n_bootstrap, command=command,
                                 with_checkpoints=args.with_checkpoints, found=found,
                                 progress=None if args.no_progress else text_progress("models"))
        print(f"report: {html}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
