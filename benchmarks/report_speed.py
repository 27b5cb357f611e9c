"""Time the analysis report on results the size of Dittadi et al. 2021's grid (1,080 models),
without checkpoint figures: the tables, the correlations and the figures, each timed, then the
whole ``write_html_report`` as ``python -m analysis.report`` runs it (``--max-models 0``).

The results are synthetic but shaped by the schema like the dittadi2021 full preset: supervision
{β-VAE, Ada-GVAE} × β {1, 2, 4} × warm-up {0, 10k, 50k} × latent size {10, 25, 50} × noise
{off, on} × 10 seeds, with the D-score, DCI, MIG, NLLs, the eight transfer scores and a
history of 20 reports per model.

    python benchmarks/report_speed.py                    # 1,080 rows, 1,000 bootstrap resamples
    python benchmarks/report_speed.py --seeds 1 --n-bootstrap 20   # a quick check (108 rows)

Target: ≤ 60 s on 2 cores for the 1,080 rows.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import tempfile
import time

import numpy as np

from analysis.storage import compact, write_results

SCENARIOS = [f"transfer_{r}_{s}" for r in ("gbt", "mlp") for s in ("ood1_a", "ood1_b", "ood1_c", "ood2")]


def d21_results(folder: str, seeds: int = 10, reports: int = 20) -> int:
    rng = np.random.default_rng(0)
    rows, history = [], []
    grid = itertools.product(["beta_vae", "ada_gvae"], [1.0, 2.0, 4.0], [0, 10000, 50000], [10, 25, 50],
                             [0.0, 0.03], range(seeds))
    for i, (objective, beta, warmup, latent, noise, seed) in enumerate(grid):
        d = rng.uniform()
        row = {"experiment": "d21", "trial_key": f"t{i:05d}", "trial_id": f"id_{i:05d}",
               "tensorboard_dir": f"d21_ood2a-b{beta:g}-s{seed}-t{i:05d}", "preset": "dittadi2021",
               "scale": "full", "dataset": "shapes3d", "split": "d21_ood2a", "condition": "ood2a",
               "architecture": "dittadi", "objective": objective, "beta": beta, "kl_warmup_steps": warmup,
               "latent_dim": latent, "input_noise_subpixel_std": noise, "seed": seed, "steps": 400_000,
               "train_nll": 3000 - 300 * d + rng.normal(0, 20),
               "test_nll": 3200 - 250 * d + rng.normal(0, 30), "d_score": d,
               "dci_disentanglement": d + rng.normal(0, 0.1), "mig": d / 2 + rng.normal(0, 0.05)}
        row.update({s: 0.3 - 0.2 * d + rng.normal(0, 0.05) for s in SCENARIOS})
        rows.append(row)
        steps = np.linspace(20_000, 400_000, reports).astype(int)
        history.extend({"experiment": "d21", "trial_key": row["trial_key"], "step": int(s),
                        "loss": 3000 + 1e6 / s + rng.normal(), "reconstruction": 2900 + 1e6 / s,
                        "kl": 40.0 + rng.normal()} for s in steps)
    write_results(folder, rows, history)
    compact(folder)
    return len(rows)


def timed(label: str, function, *args, **kwargs):
    start, cpu = time.perf_counter(), time.process_time()
    value = function(*args, **kwargs)
    print(f"  {label:<44} {time.perf_counter() - start:7.1f} s wall, {time.process_time() - cpu:7.1f} s CPU",
          flush=True)
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10, help="seeds per configuration (10: 1,080 rows)")
    parser.add_argument("--n-bootstrap", type=int, default=1000, help="bootstrap resamples per correlation")
    parser.add_argument("--keep", help="write the results and the report here")
    args = parser.parse_args()

    from analysis import figures as plots
    from analysis import html_report, tables
    from analysis.aggregate import correlation_table

    folder = args.keep or tempfile.mkdtemp(prefix="disgen-report-bench-")
    n = d21_results(folder, seeds=args.seeds)
    print(f"{n} rows; {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}; n_bootstrap {args.n_bootstrap}")
    out = os.path.join(folder, "report")
    figures = os.path.join(out, "figures")
    os.makedirs(figures, exist_ok=True)

    print("parts:")
    results = timed("read the results", html_report.read_results, [folder])
    df, values = results.trials, results.metrics + results.scores
    timed("tables (trials, seeds, M21 NLL)", lambda: (tables.trials_frame(df, values),
                                                      tables.seed_table(df, values), tables.nll_table(df)))
    table = timed("correlations (analysis.aggregate)", correlation_table, results.trials,
                  metrics=results.metrics, scores=results.scores, n_bootstrap=args.n_bootstrap)
    timed("M21 bars (mean ± sd, best seed)", lambda: [plots.nll_bars(
        tables.nll_table(df), os.path.join(figures, f"b{b}.png"), best_seed=b) for b in (False, True)])
    timed("M21 Fig. 3 scatter", plots.disentanglement_vs_nll, df, os.path.join(figures, "s.png"))
    timed("training curves", html_report.training_curves_section, df, results.history, figures)
    timed("D21 heat-maps and DCI scatter", html_report.d21_transfer_section, df, table, figures)

    print("whole report (python -m analysis.report ... --max-models 0):")
    start = time.perf_counter()
    timed("write_html_report", html_report.write_html_report, [folder], out, max_models=0,
          n_bootstrap=args.n_bootstrap)
    print(f"total {time.perf_counter() - start:.1f} s for {n} rows (target ≤ 60 s on 2 cores); "
          f"page {os.path.getsize(os.path.join(out, 'report.html')) / 1e6:.1f} MB; "
          f"{len(os.listdir(figures))} figures in {figures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
