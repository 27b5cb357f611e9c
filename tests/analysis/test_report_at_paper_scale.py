"""The report at the papers' sizes, built from the results schema: D21's 1,080 models, M22's 11
splits × 8 models, and an Optuna run's 60 β values. Each renders, and opens in headless Chromium
with every image decoded and no console message."""

import itertools
import re

import numpy as np
import pandas as pd
import pytest
from _chromium import CHROMIUM, dump_dom, open_page

from analysis.figures import disentanglement_vs_nll
from analysis.html_report import write_html_report
from analysis.schema import TRIALS_SCHEMA
from analysis.storage import compact, write_results

pytestmark = pytest.mark.slow  # paper-size results rendered three ways, and in Chromium: about a minute


def _row(rng, i, **settings):
    row = {"experiment": "e", "trial_key": f"t{i:05d}", "trial_id": f"id_{i}", "tensorboard_dir": f"run-{i}",
           "dataset": "shapes3d", "architecture": "dittadi", "steps": 100, "seed": 0, **settings}
    d = rng.uniform(0, 1)
    row.update(train_nll=60 - 10 * d + rng.normal(), test_nll=90 - 20 * d + rng.normal(), d_score=d,
               dci_disentanglement=d + rng.normal(0, 0.1), mig=d / 2 + rng.normal(0, 0.05))
    assert set(row) <= set(TRIALS_SCHEMA.names)
    return row


def d21_rows():
    """D21's grid: supervision × β × warm-up × latent size × noise × 10 seeds = 1,080 models."""
    rng, rows = np.random.default_rng(0), []
    grid = itertools.product(["beta_vae", "ada_gvae"], [1.0, 2.0, 4.0], [0, 10000, 50000], [10, 25, 50],
                             [0.0, 0.03], range(10))
    for i, (objective, beta, warmup, latent, noise, seed) in enumerate(grid):
        row = _row(rng, i, split="d21_ood2a", condition="ood2a", objective=objective, beta=beta,
                   kl_warmup_steps=warmup, latent_dim=latent, input_noise_subpixel_std=noise, seed=seed)
        for regressor, scenario in itertools.product(("gbt", "mlp"), ("ood1_a", "ood1_b", "ood1_c", "ood2")):
            row[f"transfer_{regressor}_{scenario}"] = 0.3 - 0.2 * row["d_score"] + rng.normal(0, 0.05)
        rows.append(row)
    return rows


def m22_rows():
    """M22's shape: 11 splits over 5 datasets × 8 models × 3 seeds."""
    rng, rows = np.random.default_rng(1), []
    splits = [("dsprites", s) for s in ("sqr2scl", "shape2tx", "ell2tx")] + [
        ("shapes3d", s) for s in ("shape2ohue", "fhue2whue", "odd_ohue")] + [
        ("mpi3d", s) for s in ("cyl2horz", "objc2horz", "horz_gt20")] + [
        ("circles", "midpos"), ("simple", "shape2px")]
    models = [{"objective": "vae", "beta": 1.0}, {"objective": "beta_vae", "beta": 4.0},
              {"objective": "wae_mmd", "mmd_weight": 10.0}, {"objective": "wae_mmd", "mmd_weight": 20.0},
              {"objective": "wae_mmd", "mmd_weight": 30.0}, {"objective": "cascade_vae", "beta": 1.0},
              {"objective": "lie_group_vae", "beta": 1.0},
              {"task": "composition", "objective": "vae", "beta": 1.0}]
    for i, ((dataset, split), model, seed) in enumerate(itertools.product(splits, models, range(3))):
        row = _row(rng, i, dataset=dataset, split=split, seed=seed, architecture="montero", **model)
        row.update(encoder_error_train=0.1, encoder_error_test=0.1 + rng.uniform(0, 0.3),
                   decoder_nll_train=50.0, decoder_nll_test=50 + rng.uniform(0, 60))
        rows.append(row)
    assert len({r["split"] for r in rows}) == 11 and len(rows) == 11 * 8 * 3
    return rows


def optuna_rows():
    """An Optuna run: 60 distinct β values on one split."""
    rng = np.random.default_rng(2)
    betas = np.exp(rng.uniform(np.log(0.5), np.log(30), 60))
    return [_row(rng, i, split="leave1out", objective="beta_vae", beta=float(b)) for i, b in enumerate(betas)]


def history_rows(rows, steps=(10, 20, 30)):
    rng = np.random.default_rng(3)
    return [{"experiment": "e", "trial_key": r["trial_key"], "step": s, "loss": 100 / s + rng.normal(),
             "reconstruction": 90 / s, "kl": 5.0} for r in rows for s in steps]


@pytest.fixture(scope="module", params=["dittadi2021", "montero2022", "optuna_60_betas"])
def rendered(request, tmp_path_factory):
    rows = {"dittadi2021": d21_rows, "montero2022": m22_rows, "optuna_60_betas": optuna_rows}[request.param]()
    experiment = tmp_path_factory.mktemp(request.param)
    write_results(experiment, rows, history_rows(rows[:60]))
    compact(experiment)
    out = experiment / "report"
    write_html_report([str(experiment)], str(out), max_models=0, n_bootstrap=20)
    return request.param, rows, out


def test_each_paper_shaped_result_renders_its_views(rendered):
    name, rows, out = rendered
    page = (out / "report.html").read_text()
    assert f"<h2>Trials ({len(rows)})</h2>" in page and "<h2>Summary</h2>" in page
    assert page.count("<h2>Seeds") == 1 and "The mean ± sd is over the seeds" in page  # one seed table
    assert "Training curves" in page
    expected = {"dittadi2021": ["Transfer (D21)", "d21_heatmap_gbt.png", "dci_vs_transfer_gbt_ood1_a.png"],
                "montero2022": ["Encoder versus decoder (M22)", "m22_diagnosis.png",
                                "nll_bars_best_seed.png"],
                "optuna_60_betas": ["nll_bars_mean_sd.png", "d_score_vs_nll.png"]}[name]
    for text in expected:
        assert text in page
    # every row links to its TensorBoard folder, relative to the report
    assert page.count('href="../run-') == len(rows)


def test_seed_table_of_d21_has_108_configurations_of_10_seeds(rendered):
    name, rows, out = rendered
    if name != "dittadi2021":
        pytest.skip("D21 only")
    from analysis.loading import load_trials
    from analysis.tables import seed_table

    table = seed_table(load_trials(str(out.parent)), ["d_score", "test_nll"])
    assert len(table) == 108 and (table["n"] == 10).all()
    frame = pd.DataFrame(rows)
    first = frame[(frame.objective == "beta_vae") & (frame.beta == 1.0) & (frame.kl_warmup_steps == 0)
                  & (frame.latent_dim == 10) & (frame.input_noise_subpixel_std == 0.0)]["d_score"]
    (shown,) = table[(table.objective == "beta_vae") & (table.beta == "1") & (table.kl_warmup_steps == "0")
                     & (table.latent_dim == "10") & (table.input_noise_subpixel_std == "0")]["d_score"]
    assert shown == f"{first.mean():.3f} ± {first.std():.3f}"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_each_opens_in_headless_chromium_without_console_errors(rendered, tmp_path):
    _, _, out = rendered
    seen = open_page(out / "report.html", tmp_path / "profile")
    assert seen["images_total"] >= 6 and seen["images_ok"] == seen["images_total"]
    assert seen["script_errors"] == 0 and seen["console"] == []


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_tables_scroll_in_their_box_and_sort_on_a_click(rendered, tmp_path):
    name, rows, out = rendered
    if name != "optuna_60_betas":
        pytest.skip("one page is enough")
    page = (out / "report.html").read_text()
    assert page.count('<div class="scroll"><table class="dataframe sortable">') >= 4
    trials = page[page.index("<h2>Trials"):]
    headers = re.findall(r"<th>([^<]*)</th>", trials[:trials.index("</thead>")])
    assert headers[:3] == ["experiment", "trial_key", "split"]  # the key columns first
    column = headers.index("d_score") + 1  # the table comes sorted by split, β and seed
    click = (f'<script>window.addEventListener("load", function () {{ document.querySelector('
             f'"table.sortable th:nth-child({column})").click(); }});</script></body>')
    clicked = out / "clicked.html"
    clicked.write_text(page.replace("</body>", click))
    dom = dump_dom(clicked, tmp_path / "profile")
    body = dom[dom.index("<h2>Trials"):]
    body = body[body.index("<tbody>"):body.index("</tbody>")]
    rows_shown = re.findall(r"<tr>(.*?)</tr>", body, re.S)
    values = [float(re.findall(r"<td>(.*?)</td>", row)[column - 1]) for row in rows_shown]
    before = [float(f"{r['d_score']:.3f}") for r in sorted(rows, key=lambda r: r["beta"])]
    assert len(values) == 60 and values == sorted(values) and before != sorted(before)


def test_summary_names_what_ran_what_failed_and_the_strongest_correlations(rendered):
    name, rows, out = rendered
    page = (out / "report.html").read_text()
    summary = page[page.index("<h2>Summary</h2>"):page.index("<h2>Trials")]
    assert f"{len(rows)} trained models" in summary and "<b>Failed:</b> 0 trial(s)" in summary
    strongest = re.findall(r"ρ = ([+-]\d\.\d\d) \[([+-]\d\.\d\d), ([+-]\d\.\d\d)\], n = (\d+)", summary)
    assert strongest and all(float(low) <= float(rho) <= float(high) for rho, low, high, _ in strongest)


def test_scatter_takes_any_number_of_conditions_and_betas(tmp_path):
    # 11 splits and 60 β values: the old figure had 10 colours and 10 markers and raised KeyError
    rng = np.random.default_rng(4)
    df = pd.DataFrame({"split": [f"s{i % 11}" for i in range(120)],
                       "beta": np.repeat(np.linspace(1, 60, 60), 2),
                       "d_score": rng.uniform(size=120), "train_nll": rng.normal(size=120),
                       "test_nll": rng.normal(size=120)})
    assert disentanglement_vs_nll(df, str(tmp_path / "a.png"))
    assert (tmp_path / "a.png").stat().st_size > 1000


def test_correlations_that_cannot_be_computed_are_folded_and_said_once(tmp_path):
    rng = np.random.default_rng(5)
    rows = [_row(rng, i, split="a", objective=["beta_vae", "ada_gvae"][i // 2 % 2])
            for i in range(4)]
    write_results(tmp_path, rows)
    write_html_report([str(tmp_path)], str(tmp_path / "r"), max_models=0, n_bootstrap=5)
    page = (tmp_path / "r" / "report.html").read_text()
    assert "rows are left out: they need at least 3 trials" in page
    correlation_table = page[page.index("<h2>Spearman correlations"):page.index("<h2>NLL on training")]
    assert not re.search(r"<td>–</td>\s*<td>–</td>\s*</tr>", correlation_table)  # no row of dashes
