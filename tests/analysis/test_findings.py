"""The papers' findings (analysis.findings) on planted results tables: for each finding, one table
where it holds, one where it fails and one where it is inconclusive; for each, a table where its
precondition fails (the models had not learned a factor the split recombines: "?", naming the
factor) beside ones where the precondition holds and the finding fails (✗) or holds (✓); older
results without readout accuracies ("?": the precondition cannot be checked); and the report shows
the findings first, each with its precondition."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import findings as F

M21_SPLITS = [("blank_side", "extrapolation"), ("shape2tx", "recombination_to_range"),
              ("leave1out", "recombination_to_element")]
BETAS = [1.0, 2.0, 4.0, 8.0, 12.0, 16.0]
DSPRITES = {"shape": 3, "scale": 6, "orientation": 40, "posX": 32, "posY": 32}
# the D21 preset's encoder trains on 8 of 3DShapes' 10 object hues
SHAPES3D = {"floor_hue": 10, "wall_hue": 10, "object_hue": 8, "scale": 8, "shape": 4, "orientation": 15}


def with_readout(df, accuracy=0.95, *, sizes=DSPRITES, unlearned=None, spread=0.02, seed=0):
    """``df`` with the readout accuracy per factor that evaluation records: ``accuracy`` ± ``spread``
    for every factor of ``sizes`` (chance 1 / its number of values), except ``unlearned``:
    {factor: accuracy} or {(split, factor): accuracy}."""
    rng = np.random.default_rng(seed)
    unlearned = unlearned or {}
    df = df.copy()
    for factor, size in sizes.items():
        wanted = [unlearned.get((split, factor), unlearned.get(factor, accuracy)) for split in df["split"]]
        df[f"accuracy_{factor}"] = np.clip(np.asarray(wanted) + spread * rng.standard_normal(len(df)), 0, 1)
        df[f"chance_{factor}"] = 1.0 / size
    return df


def m21_table(ratios, *, rho_sign=+1, n_models=6, noise=0.0, seed=0, readout=0.95, unlearned=None):
    """M21 trials: per split, ``n_models`` β-VAEs whose test/train NLL ratio is ``ratios[split]``
    (± ``noise``, and within ±25% as D-score rises with β); test NLL rises with D-score when
    ``rho_sign`` is +1 (M21: no help) and falls when -1. Every factor is learned (readout accuracy
    ``readout``) except ``unlearned`` (see :func:`with_readout`); ``readout=None``: no readout
    columns, as in results written before they were recorded."""
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
    df = pd.DataFrame(rows)
    return df if readout is None else with_readout(df, readout, unlearned=unlearned)


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


RATIOS = {"blank_side": 8.0, "shape2tx": 3.0, "leave1out": 1.1}


def test_a_factor_is_learned_when_the_intervals_low_end_clears_halfway_from_chance():
    assert F.learned_bar(1 / 3) == pytest.approx(2 / 3) and F.learned_bar(0.0) == 0.5
    part = pd.DataFrame({"accuracy_shape": [2 / 3] * 4, "chance_shape": [1 / 3] * 4})
    assert F.factor_learning(part, "shape")["learned"] == F.LEARNED  # exactly on the bar: learned
    below = part.assign(accuracy_shape=2 / 3 - 1e-9)
    assert F.factor_learning(below, "shape")["learned"] == F.NOT_LEARNED
    # mean 0.70 above the bar 0.667, but the interval's low end is below it: not shown
    straddles = pd.DataFrame({"accuracy_shape": [0.55, 0.85, 0.6, 0.8], "chance_shape": 1 / 3})
    row = F.factor_learning(straddles, "shape")
    assert row["low"] < row["bar"] < row["accuracy"] and row["learned"] == F.UNCLEAR_LEARNING
    one_model = F.factor_learning(part.iloc[:1], "shape")
    assert one_model["learned"] == F.UNCLEAR_LEARNING  # one model: no interval
    assert F.factor_learning(part, "posX")["learned"] == F.NOT_RECORDED
    # a dataset whose factor has no column of its own (a labelled dataset's): from the JSON column
    labelled = pd.DataFrame({"factor_readout": ['{"hue": {"accuracy": 0.9, "chance": 0.25}}'] * 3})
    assert F.factor_learning(labelled, "hue")["learned"] == F.LEARNED


def test_a_splits_factors_come_from_the_split_registry():
    assert F.rule_factors("dsprites", "shape2tx") == ("shape", "posX")
    assert F.rule_factors("dsprites", "sqr2tx") == ("shape", "posX")  # the authors' alias
    assert F.rule_factors("dsprites", "blank_side") == ("posX",)
    assert F.rule_factors("dsprites", "leave1out") == ("shape", "scale", "orientation", "posX", "posY")
    assert F.rule_factors("dsprites", "ellipse_to_posX_sides") == ("shape", "posX")  # two clauses
    assert F.rule_factors("shapes3d", "shape2ohue", "recombination_to_element") == ("shape", "object_hue")
    assert F.rule_factors("dsprites", "shape2tx+sparse_posX") == ("shape", "posX")  # a modifier filters only
    assert F.rule_factors("simple", "random_combinations") == ("posX", "posY", "shape")  # every factor
    with pytest.raises(KeyError, match="no split"):
        F.rule_factors("dsprites", "nope")
    part = pd.DataFrame({"condition": ["extrapolation"]})
    state, reason, _ = F.split_precondition(part, "dsprites", "nope")
    assert state == F.UNCHECKABLE and "factors are unknown" in reason


def test_m21_held_out_is_untested_where_the_models_had_not_learned_the_splits_factors():
    # shape2tx stays close to training, which would contradict the paper (✗) ...
    contradicting = {"blank_side": 8.0, "shape2tx": 1.05, "leave1out": 1.1}
    assert F.m21_held_out(m21_table(contradicting)).status == F.NOT_REPRODUCED
    # ... but its models cannot tell the shapes apart on their training images: not tested, ?
    found = F.m21_held_out(m21_table(contradicting, unlearned={("shape2tx", "shape"): 0.41}))
    assert found.status == F.INCONCLUSIVE and found.symbol == "?"
    row = found.table.set_index("split").loc["shape2tx"]
    assert row["verdict"] == "unclear" and row["precondition"] == F.NOT_MET
    assert "the models had not learned shape: readout accuracy 0.41 [" in found.result
    assert "chance 0.33, bar 0.67" in found.result
    assert "shape2tx: not met (the models had not learned shape" in found.precondition_result
    readout = found.readout.set_index(["split", "factor"])
    assert readout.loc[("shape2tx", "shape"), "learned"] == F.NOT_LEARNED
    assert readout.loc[("shape2tx", "posX"), "learned"] == F.LEARNED
    assert "halfway from chance to 1" in found.precondition and "low end" in found.precondition
    # a precondition that fails on a split that agrees takes it out of the contrast: ✓ becomes ?
    found = F.m21_held_out(m21_table(RATIOS, unlearned={("leave1out", "posY"): 0.2}))
    assert found.status == F.INCONCLUSIVE and "Both kinds" in found.result
    assert "the models had not learned posY" in found.result


def test_m21_held_out_asks_only_for_the_factors_each_rule_names():
    # posY is in no rule but leave1out's, and orientation likewise: unlearned on the other splits,
    # they change nothing there
    learned_elsewhere = {("blank_side", "posY"): 0.1, ("shape2tx", "orientation"): 0.1,
                         ("blank_side", "shape"): 0.1}
    assert F.m21_held_out(m21_table(RATIOS, unlearned=learned_elsewhere)).status == F.REPRODUCED
    found = F.m21_held_out(m21_table(RATIOS, unlearned={"orientation": 0.1}))  # only leave1out has it
    preconditions = found.table.set_index("split")["precondition"]
    assert list(preconditions) == [F.MET, F.NOT_MET, F.MET]  # blank_side, leave1out, shape2tx
    assert found.status == F.INCONCLUSIVE and "learned orientation" in found.result


def test_m21_held_out_when_learning_is_not_shown():
    # shape's readout straddles the bar on shape2tx: the precondition is not shown, so ?, not ✗
    found = F.m21_held_out(m21_table({"blank_side": 8.0, "shape2tx": 1.05, "leave1out": 1.1},
                                     unlearned={("shape2tx", "shape"): 0.66}))
    assert found.status == F.INCONCLUSIVE
    assert found.table.set_index("split").loc["shape2tx", "precondition"] == F.UNCLEAR_PRECONDITION
    assert "not shown that the models learned shape" in found.result


def test_m21_disentanglement_is_untested_where_the_factors_were_not_learned():
    assert F.m21_disentanglement(m21_table(RATIOS, rho_sign=-1)).status == F.NOT_REPRODUCED
    found = F.m21_disentanglement(m21_table(RATIOS, rho_sign=-1, unlearned={"posX": 0.3}))  # in every rule
    assert found.status == F.INCONCLUSIVE
    assert (found.table["verdict"] == "unclear").all() and (found.table["precondition"] == F.NOT_MET).all()
    assert "the models had not learned posX: readout accuracy 0.30" in found.result
    assert "chance 0.03" in found.result
    # one split untested: the others still decide, and ✓ needs every split
    found = F.m21_disentanglement(m21_table(RATIOS, rho_sign=+1, unlearned={("leave1out", "scale"): 0.2}))
    assert found.status == F.INCONCLUSIVE
    assert list(found.table.set_index("split")["verdict"]) == ["agrees", "unclear", "agrees"]
    assert F.m21_disentanglement(m21_table(RATIOS, rho_sign=+1)).status == F.REPRODUCED


def m22_table(encoder_test, decoder_test, ratio, n=6, seed=0, readout=0.95, unlearned=None):
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
    df = pd.DataFrame(rows)
    return df if readout is None else with_readout(df, readout, unlearned=unlearned)


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


def test_m22_is_untested_where_the_models_had_not_learned_shape():
    failing = {"sqr2scl": 3.0, "shape2tx": 2.5}
    decoder_only = ({"sqr2scl": 0.06, "shape2tx": 0.4}, {"sqr2scl": 400.0, "shape2tx": 400.0}, failing)
    assert F.m22_diagnosis(m22_table(*decoder_only)).status == F.NOT_REPRODUCED
    found = F.m22_diagnosis(m22_table(*decoder_only, unlearned={"shape": 0.35}))
    assert found.status == F.INCONCLUSIVE
    assert (found.table["verdict"] == "unclear").all() and (found.table["precondition"] == F.NOT_MET).all()
    assert "the models had not learned shape: readout accuracy 0.35" in found.result
    assert "0 of them with the precondition met" in found.result
    # scale is in sqr2scl's rule, not shape2tx's: shape2tx is still tested, and it agrees, but one
    # tested failing split is not enough for ✓
    encoder_fails = ({"sqr2scl": 0.4, "shape2tx": 0.3}, {"sqr2scl": 120.0, "shape2tx": 400.0}, failing)
    assert F.m22_diagnosis(m22_table(*encoder_fails)).status == F.REPRODUCED
    found = F.m22_diagnosis(m22_table(*encoder_fails, unlearned={("sqr2scl", "scale"): 0.2}))
    assert found.status == F.INCONCLUSIVE and "1 of them with the precondition met" in found.result
    assert list(found.table.set_index("split")["verdict"]) == ["agrees", "unclear"]  # shape2tx, sqr2scl


def d21_table(slope, n=18, noise=0.02, seed=0, readout=0.95, unlearned=None):
    """D21 models: DCI spread over [0, 1]; OOD1 transfer errors = 0.3 + slope·DCI + noise; the OOD1
    factor object_hue; readout as in :func:`m21_table`."""
    rng = np.random.default_rng(seed)
    dci = np.linspace(0.05, 0.9, n)
    rows = {"preset": "dittadi2021", "dataset": "shapes3d", "split": "d21_ood2a", "dci_disentanglement": dci,
            "transfer_factor": "object_hue"}
    for scenario in ("ood1_a", "ood1_b", "ood1_c"):
        rows[f"transfer_gbt_{scenario}"] = 0.3 + slope * dci + noise * rng.standard_normal(n)
    df = pd.DataFrame(rows)
    return df if readout is None else with_readout(df, readout, sizes=SHAPES3D, unlearned=unlearned)


def test_d21_reproduced_not_reproduced_and_inconclusive():
    holds = F.d21_transfer(d21_table(-0.2))
    assert holds.status == F.REPRODUCED and "18 models" in holds.result
    assert (holds.table["high"] < 0).all()
    fails = F.d21_transfer(d21_table(+0.2))
    assert fails.status == F.NOT_REPRODUCED
    unrelated = F.d21_transfer(d21_table(0.0, n=8, noise=0.1, seed=2))
    assert unrelated.status == F.INCONCLUSIVE
    assert "too wide" in unrelated.result and "8 models" in unrelated.result


def test_d21_is_untested_where_the_models_had_not_learned_the_ood1_factor():
    assert F.d21_transfer(d21_table(+0.2)).status == F.NOT_REPRODUCED
    found = F.d21_transfer(d21_table(-0.2, unlearned={"object_hue": 0.3}))  # would be ✓
    assert found.status == F.INCONCLUSIVE and (found.table["verdict"] == "unclear").all()
    assert "the models had not learned object_hue: readout accuracy 0.3" in found.result
    assert "chance 0.12, bar 0.56" in found.result
    assert found.precondition_result.startswith("OOD1 factor object_hue: not met")
    # the other factors do not matter to this finding
    assert F.d21_transfer(d21_table(-0.2, unlearned={"shape": 0.1})).status == F.REPRODUCED
    unnamed = F.d21_transfer(d21_table(-0.2).drop(columns=["transfer_factor"]))
    assert unnamed.status == F.INCONCLUSIVE and "do not name the OOD1 factor" in unnamed.result


def test_results_without_readout_accuracies_are_never_reproduced_or_not():
    contradicting = {"blank_side": 8.0, "shape2tx": 1.05, "leave1out": 1.1}
    m22 = m22_table({"sqr2scl": 0.06, "shape2tx": 0.4}, {"sqr2scl": 400.0, "shape2tx": 400.0},
                    {"sqr2scl": 3.0, "shape2tx": 2.5}, readout=None)
    tables = [(F.m21_held_out, m21_table(RATIOS, readout=None)),
              (F.m21_held_out, m21_table(contradicting, readout=None)),
              (F.m21_disentanglement, m21_table(RATIOS, rho_sign=-1, readout=None)),
              (F.m22_diagnosis, m22),
              (F.d21_transfer, d21_table(-0.2, readout=None))]
    for check, df in tables:
        found = check(df)
        assert found.status == F.INCONCLUSIVE, check.__name__
        assert "the precondition cannot be checked" in found.result, check.__name__
        assert F.UNCHECKABLE in found.precondition_result, check.__name__


def test_older_result_files_load_and_their_findings_say_the_precondition_cannot_be_checked(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from analysis import load_trials
    from analysis.schema import TRIALS_FILE

    # a trials.parquet written before the readout columns existed: only the columns it had then
    df = m21_table({"blank_side": 8.0, "shape2tx": 1.05, "leave1out": 1.1}, readout=None)
    df = df.assign(experiment="m21", trial_key=[f"t{i}" for i in range(len(df))])
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / TRIALS_FILE)
    loaded = load_trials(tmp_path)
    assert loaded["accuracy_shape"].isna().all() and loaded["chance_shape"].dtype == np.float64
    found = F.findings(loaded)
    assert [f.symbol for f in found] == ["?", "?"]
    assert "no readout accuracy of shape" in found[0].result


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
    assert "precondition: A split tests generalisation only if" in out
    assert "did it hold? dsprites/blank_side: met (learned: posX 0.9" in out
    page = (tmp_path / "report.html").read_text()
    assert page.index("<h2>Findings</h2>") < page.index("<h2>Summary</h2>")
    assert "✗ Montero et al. 2021, §2.1, Fig. 3: not reproduced" in page and "shape2tx" in page
    assert "<b>Precondition</b>" in page and "<b>Did it hold?</b>" in page
    assert "readout accuracy per factor" in page


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
