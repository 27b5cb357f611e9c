"""Print an experiment's trials table and correlations, draw the M21 Figure 3 scatter, and write a
self-contained HTML report.

    python -m analysis.report ./disgen_results/default [MORE_EXPERIMENT_DIRS...] --out ./report

The report (``DIR/report.html``) embeds every figure as a PNG data URI and uses no network, so it
opens offline and can be mailed as one file. It holds the trials table, the Spearman correlations
with bootstrap intervals (overall and by supervision, architecture, dataset and condition), the
Spearman heat-maps, violins of every metric by supervision and by condition, the disentanglement-
vs-NLL scatters, and, for up to ``--max-models`` trained models with checkpoints, reconstruction
grids of training and held-out images, latent traversals and a Hinton diagram. Last comes the
configuration: every trial's configuration columns and the experiment's own spec files.
"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd

from analysis.aggregate import cell_label, correlations, load_trials, seed_summary
from analysis.figures import disentanglement_vs_nll
from analysis.html_report import write_html_report

TABLE_COLUMNS = ["trial_key", "split", "condition", "objective", "beta", "seed", "steps",
                 "train_nll", "test_nll", "d_score", "dci_disentanglement",
                 "dci_completeness", "dci_informativeness"]


def trials_table(df: pd.DataFrame) -> str:
    columns = [c for c in TABLE_COLUMNS if c in df.columns]
    ordered = df[columns].sort_values([c for c in ("split", "beta", "seed") if c in columns])
    with pd.option_context("display.width", 200, "display.max_columns", None,
                           "display.float_format", "{:.3f}".format):
        return ordered.to_string(index=False)


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


def seed_text(df: pd.DataFrame, best_seed_by: str = "d_score") -> str:
    """M21's table: per configuration, the seed with the highest ``best_seed_by`` (what M21
    reports) next to the mean ± sd over seeds; says which one is shown."""
    if "seed" not in df.columns or df["seed"].nunique() < 2 or best_seed_by not in df.columns:
        return ""
    metrics = [m for m in ("train_nll", "test_nll", best_seed_by) if m in df.columns]
    summary = seed_summary(df, metrics, best_seed_by=best_seed_by)
    summary = summary.assign(**{"mean ± sd": [f"{m:.3f} ± {s:.3f}" for m, s in zip(summary["mean"],
                                                                                    summary["sd"])]})
    keep = [c for c in ("dataset", "split", "objective", "beta", "gamma") if c in summary.columns]
    shown = summary[keep + ["metric", "best_seed", "best", "mean ± sd", "n_seeds"]]
    with pd.option_context("display.width", 200, "display.max_columns", None,
                           "display.float_format", "{:.3f}".format):
        return (f"Per configuration: 'best' is the value at the seed with the highest {best_seed_by} "
                f"(shown, as Montero et al. 2021 report), next to the mean ± sd over seeds:\n"
                + shown.to_string(index=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m analysis.report",
        description="Print the trials table and Spearman correlations of one or more disgen "
                    "experiments, and write the disentanglement-vs-NLL scatter (M21 Fig. 3).")
    parser.add_argument("experiment_dirs", nargs="+", metavar="EXPERIMENT_DIR",
                        help="folder(s) holding trials.parquet, e.g. ./disgen_results/default")
    parser.add_argument("--out",
                        help="folder for report.html and the figures (default: the first EXPERIMENT_DIR)")
    parser.add_argument("--max-models", type=int, default=4,
                        help="trained models (checkpoints) to draw reconstructions and traversals for "
                             "(default 4)")
    parser.add_argument("--n-bootstrap", type=int, default=1000,
                        help="bootstrap resamples for the correlation intervals (default 1000)")
    parser.add_argument("--no-html", action="store_true", help="print and draw the scatter only")
    parser.add_argument("--metric", default="d_score", choices=["d_score", "dci_disentanglement"],
                        help="disentanglement metric on the x axis (default: d_score)")
    args = parser.parse_args(argv)
    try:
        df = load_trials(*args.experiment_dirs)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if df.empty:
        print(f"error: no finished trials in {', '.join(args.experiment_dirs)}", file=sys.stderr)
        return 2
    print(f"{len(df)} trials\n")
    print(trials_table(df))
    print()
    print(correlation_text(df))
    seeds = seed_text(df)
    if seeds:
        print()
        print(seeds)
    out = args.out or args.experiment_dirs[0]
    os.makedirs(out, exist_ok=True)
    path = disentanglement_vs_nll(df, os.path.join(out, "disentanglement_vs_nll.png"), args.metric)
    print(f"\nfigure: {path}")
    if not args.no_html:
        command = ["python", "-m", "analysis.report", *(argv if argv is not None else sys.argv[1:])]
        html = write_html_report(args.experiment_dirs, out, df=df, max_models=args.max_models,
                                 n_bootstrap=args.n_bootstrap, command=command)
        print(f"report: {html}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
