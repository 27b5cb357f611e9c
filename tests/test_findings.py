"""The papers' findings (analysis.findings) on planted results tables: for each finding, one table
where it holds, one where it fails and one where it is inconclusive; and the report shows them
first."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import findings as F

M21_SPLITS = [("blank_side", "extrapolation"), ("shape2tx", "recombination_to_range"),
              ("leave1out", "recombination_to_element")]
BETAS = [1.0, 2.0, 4.0, 8.0, 12.0, 16.0]


def m21_table(ratios, *, rho_sign=+1, n_models=6, noise=0.0, seed=0):
    """M21 trials: per split, ``n_models`` β-VAEs whose test/train NLL ratio is ``ratios[split]``
    (± ``noise``, and within ±25% as D-score rises with β); test NLL rises with D-score when
    ``rho_sign`` is +1 (M21: no help) and falls when -1."""
    rng = np.random.default_rng(seed)
    rows = []
    for split, condition in M21_SPLITS:
        for i, beta in enumerate(BETAS[:n_models]):
            train = 100.0 + 5 * i
            ratio = ratios[split] * (1 + noise * rng.standard_normal())
            d_score = 0.1 + 0.1 * i
            test = train * ratio * (1 + rho_sign * 0.05 * i)
            rows.append({"preset": "montero2021", "dataset": "dsprites", "split": split,
                         "condition": condition,
                         "task": "vae", "objective": "beta_vae", "beta": beta, "seed": 0,
                         "train_nll": train, "test_nll": test, "d_score": d_score})
    return pd.DataFrame(rows)


def test_mean_interval_closed_form():
    mean, low, high = F.mean_interval([2.0, 2.0, 2.0])
    assert (mean, low, high) == (2.0, 2.0, 2.0)
    x = np.random.default_rng(1).normal(5.0, 1.0, 400)
    mean, low, high = F.mean_interval(x)
    half = 1.96 * x.std() / np.sqrt(len(x))  # the normal interval the bootstrap approaches
    assert mean == pytest.approx(x.mean())
    assert low == pytest.approx(x.mean() - half, abs=0.03)
    assert high == pytest.approx(x.mean() + half, abs=0.03)
    assert np.isnan(F.mean_interval([3.0])[1])


def test_m21_held_out_reproduced_not_reproduced_and_inconclusive():
    holds = F.m21_held_out(m21_table({"blank_side": 8.0, "shape2tx": 3.0, "leave1out": 1.1}))
    assert holds.status == F.REPRODUCED and holds.symbol == "✓"
    # 8 × the mean of (1 + 0.05·i)
    assert "9.00×" in holds.result and "recombination-to-element" in holds.result
    # recombination-to-range reconstructed as well as training: the paper's failure is not there
    fails = F.m21_held_out(m21_table({"blank_side": 8.0, "shape2tx": 1.05, "leave1out": 1.1}))
    assert fails.status == F.NOT_REPRODUCED
    verdicts = fails.table.set_index("split")["verdict"]
    assert verdicts["shape2tx"] == "contradicts" and verdicts["blank_side"] == "agrees"
    # a ratio around 1.5 whose interval straddles the threshold, on 3 models: undecided
    unclear = F.m21_held_out(m21_table({"blank_side": 8.0, "shape2tx": 1.5, "leave1out": 1.1}, n_models=3,
                                       noise=0.3, seed=3))
    assert unclear.status == F.INCONCLUSIVE
    assert unclear.table.set_index("split")["verdict"]["shape2tx"] == "unclear"


def test_m21_held_out_needs_both_kinds_of_split():
    df = m21_table({"blank_side": 8.0, "shape2tx": 3.0, "leave1out": 1.1})
    only_failing = F.m21_held_out(df[df["split"] != "leave1out"])
    assert only_failing.status == F.INCONCLUSIVE and "Both kinds" in only_failing.result


def test_m21_ignores_the_ground_truth_decoder():
    df = m21_table({"blank_side": 8.0, "shape2tx": 3.0, "leave1out": 1.1})
    decoder = df.assign(task="ground_truth_decoder", test_nll=df["train_nll"])  # generalises perfectly
    assert F.m21_held_out(pd.concat([df, decoder])).status == F.REPRODUCED


def test_m21_disentanglement_reproduced_not_reproduced_and_inconclusive():
    ratios = {"blank_side": 8.0, "shape2tx": 3.0, "leave1out": 1.1}
    holds = F.m21_disentanglement(m21_table(ratios, rho_sign=+1))
    assert holds.status == F.REPRODUCED
    assert (holds.table["rho"] > 0.9).all() and "d_score" in holds.result
    fails = F.m21_disentanglement(m21_table(ratios, rho_sign=-1))  # more disentangled, lower test NLL
    assert fails.status == F.NOT_REPRODUCED
    assert (fails.table["verdict"] == "contradicts").all()
    few = F.m21_disentanglement(m21_table(ratios, rho_sign=+1, n_models=4))  # under MIN_MODELS
    assert few.status == F.INCONCLUSIVE
    # D-score unrelated to the NLL on 6 models: ρ near 0, but the interval cannot rule out a strong
    # negative ρ, so the null is not shown
    unrelated = m21_table(ratios, rho_sign=+1)
    unrelated["d_score"] = np.tile([0.3, 0.6, 0.1, 0.5, 0.2, 0.4], 3)
    found = F.m21_disentanglement(unrelated)
    assert found.status == F.INCONCLUSIVE
    assert (found.table["low"] < F.NO_HELP_RHO).all() and (found.table["high"] > 0).all()


def m22_table(encoder_test, decoder_test, ratio, n=6, seed=0):
    """M22 trials on two dSprites splits: training errors fixed, held-out errors given per split."""
    rng = np.random.default_rng(seed)
    rows = []
    for split in ("sqr2scl", "shape2tx"):
        for i in range(n):
            jitter = 1 + 0.02 * rng.standard_normal()
            rows.append({"preset": "montero2022", "dataset": "dsprites", "split": split,
                         "condition": "recombination_to_range", "objective": "vae", "seed": i,
                         "train_nll": 100.0, "test_nll": 100.0 * ratio[split] * jitter,
                         "encoder_error_train": 0.05, "encoder_error_test": encoder_test[split] * jitter,
                         "decoder_nll_train": 100.0, "decoder_nll_test": decoder_test[split] * jitter,
                         "diagnosis_ratio": 1.5, "diagnosis_encoder_margin": 0.05,
                         "diagnosis_decoder_margin": 0.0})
    return pd.DataFrame(rows)


def test_m22_reproduced_not_reproduced_and_inconclusive():
    failing = {"sqr2scl": 3.0, "shape2tx": 2.5}
    holds = F.m22_diagnosis(m22_table({"sqr2scl": 0.4, "shape2tx": 0.3},
                                      {"sqr2scl": 120.0, "shape2tx": 400.0},
                                      failing))
    assert holds.status == F.REPRODUCED
    diagnosis = holds.table.set_index("split")["diagnosis"]
    assert diagnosis["sqr2scl"] == "encoder" and diagnosis["shape2tx"] == "both"
    # the encoder maps the unseen combinations well (0.06 < 1.5·0.05 + 0.05) and only the decoder fails
    fails = F.m22_diagnosis(m22_table({"sqr2scl": 0.06, "shape2tx": 0.4},
                                      {"sqr2scl": 400.0, "shape2tx": 400.0},
                                      failing))
    assert fails.status == F.NOT_REPRODUCED
    assert fails.table.set_index("split")["diagnosis"]["sqr2scl"] == "decoder"
    # only one split fails to reconstruct: the claim needs two
    one = F.m22_diagnosis(m22_table({"sqr2scl": 0.4, "shape2tx": 0.06}, {"sqr2scl": 400.0, "shape2tx": 100.0},
                                    {"sqr2scl": 3.0, "shape2tx": 1.0}))
    assert one.status == F.INCONCLUSIVE and "at least two" in one.result


def test_m22_without_the_diagnosis_is_inconclusive():
    df = m22_table({"sqr2scl": 0.4, "shape2tx": 0.3}, {"sqr2scl": 400.0, "shape2tx": 400.0},
                   {"sqr2scl": 3.0, "shape2tx": 2.5})
    df = df.drop(columns=["encoder_error_train", "encoder_error_test"])
    assert F.m22_diagnosis(df).status == F.INCONCLUSIVE


def d21_table(slope, n=18, noise=0.02, seed=0):
    """D21 models: DCI spread over [0, 1]; OOD1 transfer errors = 0.3 + slope·DCI + noise."""
    rng = np.random.default_rng(seed)
    dci = np.linspace(0.05, 0.9, n)
    rows = {"preset": "dittadi2021", "dataset": "shapes3d", "split": "d21_ood2a", "dci_disentanglement": dci}
    for scenario in ("ood1_a", "ood1_b", "ood1_c"):
        rows[f"transfer_gbt_{scenario}"] = 0.3 + slope * dci + noise * rng.standard_normal(n)
    return pd.DataFrame(rows)


def test_d21_reproduced_not_reproduced_and_inconclusive():
    holds = F.d21_transfer(d21_table(-0.2))
    assert holds.status == F.REPRODUCED and "18 models" in holds.result
    assert (holds.table["high"] < 0).all()
    fails = F.d21_transfer(d21_table(+0.2))
    assert fails.status == F.NOT_REPRODUCED
    unrelated = F.d21_transfer(d21_table(0.0, n=8, noise=0.1, seed=2))
    assert unrelated.status == F.INCONCLUSIVE
    assert "too wide" in unrelated.result and "8 models" in unrelated.result


def test_findings_pick_each_study_by_preset():
    df = pd.concat([m21_table({"blank_side": 8.0, "shape2tx": 3.0, "leave1out": 1.1}), d21_table(-0.2),
                    pd.DataFrame([{"preset": "default", "dataset": "dsprites", "split": "leave1out"}])])
    found = F.findings(df)
    assert [f.study for f in found] == ["Montero et al. 2021", "Montero et al. 2021", "Dittadi et al. 2021"]
    assert all(f.status == F.REPRODUCED for f in found)
    text = F.findings_text(found)
    assert text.startswith("Findings") and text.count("✓") >= 3 and "§2.1, Fig. 3" in text
    assert F.findings(df.drop(columns=["preset"])) == []


@pytest.mark.slow  # writes a report: about 5 s
def test_report_puts_the_findings_first(tmp_path, capsys):
    from analysis.report import main as report_main
    from analysis.storage import write_results

    df = m21_table({"blank_side": 8.0, "shape2tx": 1.05, "leave1out": 1.1})  # recombination-to-range: ✗
    rows = [{**row, "experiment": "m21", "trial_key": f"t{i}"} for i, row in enumerate(df.to_dict("records"))]
    write_results(tmp_path, rows)
    assert report_main([str(tmp_path), "--max-models", "0", "--no-progress", "--n-bootstrap", "50"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Findings") and "✗ Montero et al. 2021 (§2.1, Fig. 3)" in out
    assert out.index("Findings") < out.index("18 trials")
    page = (tmp_path / "report.html").read_text()
    assert page.index("<h2>Findings</h2>") < page.index("<h2>Summary</h2>")
    assert "✗ Montero et al. 2021, §2.1, Fig. 3: not reproduced" in page and "shape2tx" in page


@pytest.mark.slow  # writes a report: about 5 s
def test_demo_report_only_writes_the_findings_report(tmp_path, capsys):
    from analysis.storage import write_results
    from sweeps import demo

    df = m21_table({"blank_side": 8.0, "shape2tx": 3.0, "leave1out": 1.1})
    rows = [{**row, "experiment": "montero2021-demo", "trial_key": f"t{i}"}
            for i, row in enumerate(df.to_dict("records"))]
    (tmp_path / "montero2021-demo").mkdir()
    write_results(tmp_path / "montero2021-demo", rows)
    assert demo.main(["--storage-path", str(tmp_path), "--report-only", "--no-open"]) == 0
    page = (tmp_path / "demo-report" / "report.html").read_text()
    assert page.count("✓ Montero et al. 2021") == 2
    with pytest.raises(SystemExit, match="unknown"):
        demo.main(["--studies", "montero2023", "--report-only", "--no-open"])
    assert demo.main(["--storage-path", str(tmp_path / "empty"), "--report-only", "--no-open"]) == 2
