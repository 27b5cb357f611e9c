"""The papers' headline findings, checked on a study's own results: ✓ reproduced, ✗ not
reproduced, ? inconclusive at this scale.

Each finding puts the paper's statement (in our words, with its section and figure) beside what
the results show, with the numbers and a 95% percentile-bootstrap interval over the trials. The
rules, and the precondition that a split's models learned the factors its rule names (issue 26),
were fixed before any result was seen; docs/analysis.md, "Findings", states them. Only the trials
of the presets ``montero2021``, ``montero2022`` and ``dittadi2021`` are checked (the ``preset``
column); each study's checks see that study's trials only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.aggregate import finished_only, spearman
from analysis.metrics.encoder_decoder_diagnosis import DECODER_MARGIN, ENCODER_MARGIN, RATIO
from analysis.tables import numeric

FAIL_RATIO = RATIO  # held-out error above 1.5x training error: a failure (the diagnosis rule's ratio)
NO_HELP_RHO = -0.5  # M21's null: reproduced when the interval rules out ρ below this
MIN_MODELS = 5  # fewer trials per correlation: inconclusive whatever the interval
WIDE_INTERVAL = 0.8  # a ρ interval wider than this is called too wide for the models run
N_BOOTSTRAP = 2000
# A factor is learned when its readout accuracy (mean over models, the 95% interval's low end) is at
# least this share of the way from chance to 1 (issue 26's rule: halfway)
LEARNED_SHARE = 0.5
_ROUNDING = 1e-9  # float noise in the mean of equal accuracies never decides against the bar
LEARNED, NOT_LEARNED, UNCLEAR_LEARNING, NOT_RECORDED = "learned", "not learned", "unclear", "not recorded"
MET, NOT_MET, UNCLEAR_PRECONDITION, UNCHECKABLE = "met", "not met", "unclear", "cannot be checked"
PRECONDITION_RULE = (
    "A split tests generalisation only if its models learned, on their training images, every factor "
    "its rule names (the split registry's rule): a factor is learned when the low end of the 95% "
    "bootstrap interval of its mean readout accuracy over the models is at least halfway from chance "
    f"to 1 (bar = chance + {LEARNED_SHARE:g} × (1 − chance)). A split where this does not hold gets ?, "
    "never ✓ or ✗.")

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
SYMBOL = {REPRODUCED: "✓", NOT_REPRODUCED: "✗", INCONCLUSIVE: "?"}
CONDITION_NAMES = {"extrapolation": "extrapolation", "recombination_to_range": "recombination-to-range",
                   "recombination_to_element": "recombination-to-element", "interpolation": "interpolation"}
FAILING_CONDITIONS = ("extrapolation", "recombination_to_range")


@dataclass
class Finding:
    """One paper statement beside what the results show."""

    study: str  # "Montero et al. 2021"
    source: str  # where the paper says it: section and figure
    paper: str  # the statement, in our words
    status: str  # REPRODUCED, NOT_REPRODUCED or INCONCLUSIVE
    result: str  # what the results show, as a sentence with its numbers
    table: pd.DataFrame = field(default_factory=pd.DataFrame)  # the numbers behind it
    precondition: str = ""  # the precondition, as fixed before any result
    precondition_result: str = ""  # whether it held, per split, with the numbers
    readout: pd.DataFrame = field(default_factory=pd.DataFrame)  # readout accuracy per split and factor

    @property
    def symbol(self) -> str:
        return SYMBOL[self.status]


def mean_interval(values, *, n_bootstrap: int = N_BOOTSTRAP, seed: int = 0) -> tuple[float, float, float]:
    """The mean of ``values`` (finite ones) and its percentile-bootstrap 95% interval; NaN bounds
    with fewer than 2 values."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return np.nan, np.nan, np.nan
    if len(x) < 2:
        return float(x.mean()), np.nan, np.nan
    draws = np.random.default_rng(seed).integers(0, len(x), (n_bootstrap, len(x)))
    means = x[draws].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(x.mean()), float(low), float(high)


def _side(low: float, high: float, threshold: float) -> str:
    """'above' when the interval lies wholly above ``threshold``, 'below' wholly below, else 'unclear'."""
    if np.isnan(low) or np.isnan(high):
        return "unclear"
    return "above" if low > threshold else "below" if high < threshold else "unclear"


def _interval(mean: float, low: float, high: float, digits: int = 2, suffix: str = "") -> str:
    if np.isnan(mean):
        return "n/a"
    if np.isnan(low):
        return f"{mean:.{digits}f}{suffix} (one trial: no interval)"
    return f"{mean:.{digits}f}{suffix} [{low:.{digits}f}, {high:.{digits}f}]"


def _rho(row) -> str:
    if np.isnan(row["rho"]):
        return f"ρ n/a (n = {row['n']})"
    if np.isnan(row["low"]):
        return f"ρ = {row['rho']:+.2f} (n = {row['n']}, no interval)"
    return f"ρ = {row['rho']:+.2f} [{row['low']:+.2f}, {row['high']:+.2f}] (n = {row['n']})"


def _numeric(df: pd.DataFrame, column: str) -> pd.Series:
    return numeric(df[column]) if column in df.columns else pd.Series(np.nan, index=df.index, dtype=float)


def _vae_trials(df: pd.DataFrame) -> pd.DataFrame:
    """The end-to-end models: the ground-truth decoder and composition tasks answer other questions."""
    if "task" not in df.columns:
        return df
    task = df["task"].astype(object)
    return df[task.isna() | (task == "vae")]


def _splits(df: pd.DataFrame):
    keys = [c for c in ("dataset", "split") if c in df.columns]
    if not keys:
        yield ("all", "all"), df
        return
    for key, part in df.groupby(keys, sort=True, observed=True):  # a list of keys: key is a tuple
        yield tuple(str(k) for k in key), part


def _condition(part: pd.DataFrame) -> str:
    if "condition" not in part.columns or part["condition"].isna().all():
        return "unknown"
    return str(part["condition"].dropna().iloc[0])


def _overall(verdicts: list[str]) -> str:
    """Not reproduced if any part contradicts the paper, reproduced if every part agrees."""
    if "contradicts" in verdicts:
        return NOT_REPRODUCED
    if verdicts and all(v == "agrees" for v in verdicts):
        return REPRODUCED
    return INCONCLUSIVE


def learned_bar(chance: float) -> float:
    """The readout accuracy a factor must reach to count as learned: halfway from chance to 1."""
    return chance + LEARNED_SHARE * (1.0 - chance)


def rule_factors(dataset: str, split: str, condition: str | None = None) -> tuple[str, ...]:
    """The factors the held-out rule of ``split`` names, from the split registry: the keys of its
    ``test_when`` clauses, in order (every factor of the dataset for a random-combinations rule).
    A KeyError, saying so, when the registry has no such split."""
    from data_pipeline.spaces import factor_space
    from data_pipeline.splits import RandomCombinations, get_split

    known = condition if condition in CONDITION_NAMES else None
    rule = get_split(dataset, split, known).test_when
    if isinstance(rule, RandomCombinations):
        return tuple(factor_space(dataset).names)
    clauses = rule if isinstance(rule, tuple) else (rule,)
    return tuple(dict.fromkeys(name for clause in clauses for name in clause))


def _readout_values(part: pd.DataFrame, factor: str) -> tuple[pd.Series, pd.Series]:
    """Per trial: the readout accuracy of ``factor`` and its chance, from the ``accuracy_<factor>``
    and ``chance_<factor>`` columns, else from the ``factor_readout`` JSON (any factor name)."""
    accuracy, chance = _numeric(part, f"accuracy_{factor}"), _numeric(part, f"chance_{factor}")
    if (accuracy.notna().any() or chance.notna().any()) or "factor_readout" not in part.columns:
        return accuracy, chance
    parsed = [json.loads(v).get(factor, {}) if isinstance(v, str) and v else {}
              for v in part["factor_readout"]]
    as_float = lambda value: np.nan if value is None else float(value)  # noqa: E731
    return (pd.Series([as_float(p.get("accuracy")) for p in parsed], index=part.index, dtype=float),
            pd.Series([as_float(p.get("chance")) for p in parsed], index=part.index, dtype=float))


def factor_learning(part: pd.DataFrame, factor: str, *, n_bootstrap: int = N_BOOTSTRAP) -> dict:
    """Whether the models of ``part`` learned ``factor`` on their training images (docs/analysis.md,
    "Preconditions"): the mean readout accuracy and its 95% interval, chance, the bar, and ``learned``:
    "learned" (low end ≥ bar), "not learned" (high end < bar), "unclear", or "not recorded"."""
    accuracy, chance = _readout_values(part, factor)
    mean, low, high = mean_interval(accuracy, n_bootstrap=n_bootstrap)
    recorded = accuracy.notna()
    level = float(chance[recorded].mean()) if recorded.any() else float(chance.mean()) \
        if chance.notna().any() else np.nan
    row = {"factor": factor, "n": int(recorded.sum()), "accuracy": mean, "low": low, "high": high,
           "chance": level, "bar": learned_bar(level) if np.isfinite(level) else np.nan}
    if not recorded.any() or not np.isfinite(level):
        row["learned"] = NOT_RECORDED
    elif not np.isnan(low) and low >= row["bar"] - _ROUNDING:
        row["learned"] = LEARNED
    elif not np.isnan(high) and high < row["bar"] - _ROUNDING:
        row["learned"] = NOT_LEARNED
    else:
        row["learned"] = UNCLEAR_LEARNING
    return row


def _accuracy_text(row: dict) -> str:
    return (f"readout accuracy {_interval(row['accuracy'], row['low'], row['high'])}, "
            f"chance {row['chance']:.2f}, bar {row['bar']:.2f}")


def _not_recorded_text(row: dict) -> str:
    if row["chance"] == 1.0:
        return f"{row['factor']} takes one value on the training images: nothing to read"
    return (f"the results have no readout accuracy of {row['factor']} (written before readout accuracies "
            "were recorded, or the readout did not run): the precondition cannot be checked")


def precondition(part: pd.DataFrame, factors, *,
                 n_bootstrap: int = N_BOOTSTRAP) -> tuple[str, str, list[dict]]:
    """(state, reason, readout rows) of the precondition that the models of ``part`` learned every
    factor in ``factors`` (docs/analysis.md). ``state``: "met", "not met" (a factor clearly not
    learned), "cannot be checked" (a factor's readout not recorded) or "unclear"; ``reason``
    names the factors with their numbers."""
    rows = [factor_learning(part, f, n_bootstrap=n_bootstrap) for f in factors]
    by_state = {state: [r for r in rows if r["learned"] == state]
                for state in (LEARNED, NOT_LEARNED, UNCLEAR_LEARNING, NOT_RECORDED)}
    if by_state[NOT_LEARNED]:
        return NOT_MET, "; ".join(f"the models had not learned {r['factor']}: {_accuracy_text(r)}"
                                  for r in by_state[NOT_LEARNED]), rows
    if by_state[NOT_RECORDED]:
        return UNCHECKABLE, "; ".join(_not_recorded_text(r) for r in by_state[NOT_RECORDED]), rows
    if by_state[UNCLEAR_LEARNING]:
        return UNCLEAR_PRECONDITION, "; ".join(
            f"not shown that the models learned {r['factor']}: {_accuracy_text(r)}"
            + (" (one model: no interval)" if r["n"] == 1 else " (the interval reaches below the bar)")
            for r in by_state[UNCLEAR_LEARNING]), rows
    return MET, "learned: " + "; ".join(
        f"{r['factor']} {_interval(r['accuracy'], r['low'], r['high'])} (chance {r['chance']:.2f}, bar "
        f"{r['bar']:.2f})" for r in rows), rows


def split_precondition(part: pd.DataFrame, dataset: str, split: str, *,
                       n_bootstrap: int = N_BOOTSTRAP) -> tuple[str, str, list[dict]]:
    """:func:`precondition` for a split's models, on the factors its registered rule names."""
    try:
        factors = rule_factors(dataset, split, _condition(part))
    except (KeyError, ValueError) as error:
        reason = str(error.args[0]) if error.args else str(error)
        return UNCHECKABLE, f"the split's factors are unknown ({reason})", []
    state, reason, rows = precondition(part, factors, n_bootstrap=n_bootstrap)
    return state, reason, [{"dataset": dataset, "split": split, **r} for r in rows]


def _precondition_summary(checked: list[dict]) -> str:
    """One sentence over the splits' preconditions: which held, which did not and why."""
    if not checked:
        return "No split to check."
    return "; ".join(f"{r['dataset']}/{r['split']}: {r['precondition']} ({r['precondition_reason']})"
                     for r in checked) + "."


def _readout_table(rows: list[dict]) -> pd.DataFrame:
    table, columns = pd.DataFrame(rows), ["accuracy", "low", "high", "chance", "bar"]
    if not table.empty:
        table[columns] = table[columns].astype(float).round(3)
    return table


@finished_only
def reconstruction_ratios(df: pd.DataFrame, *, n_bootstrap: int = N_BOOTSTRAP) -> pd.DataFrame:
    """Per dataset and split: trials, mean train and test NLL, and the mean test/train NLL ratio
    with its 95% interval, and whether reconstruction fails (interval ≥ 1.5), stays close to
    training (< 1.5) or is unclear."""
    rows = []
    for (dataset, split), part in _splits(df):
        train, test = _numeric(part, "train_nll"), _numeric(part, "test_nll")
        ratio, low, high = mean_interval(test / train, n_bootstrap=n_bootstrap)
        side = _side(low, high, FAIL_RATIO)
        rows.append({"dataset": dataset, "split": split, "condition": _condition(part),
                     "n": int((test / train).notna().sum()), "train_nll": train.mean(),
                     "test_nll": test.mean(),
                     "ratio": ratio, "low": low, "high": high,
                     "reconstruction": {"above": "fails", "below": "close to training"}.get(side, "unclear")})
    return pd.DataFrame(rows)


def _with_preconditions(df: pd.DataFrame, table: pd.DataFrame, *,
                        n_bootstrap: int) -> tuple[pd.DataFrame, list]:
    """``table`` (one row per dataset and split) with each split's precondition state and reason,
    and the readout rows behind them."""
    states, reasons, readout = {}, {}, []
    for (dataset, split), part in _splits(df):
        state, reason, rows = split_precondition(part, dataset, split, n_bootstrap=n_bootstrap)
        states[(dataset, split)], reasons[(dataset, split)] = state, reason
        readout += rows
    if table.empty:
        return table, readout
    keys = list(zip(table["dataset"], table["split"]))
    table = table.assign(precondition=[states.get(k, UNCHECKABLE) for k in keys],
                         precondition_reason=[reasons.get(k, "no trials") for k in keys])
    return table, readout


def _untested(row: dict) -> str:
    return f"not tested: {row['precondition_reason']}"


@finished_only
def m21_held_out(df: pd.DataFrame, *, n_bootstrap: int = N_BOOTSTRAP) -> Finding:
    df = _vae_trials(df)
    table = reconstruction_ratios(df, n_bootstrap=n_bootstrap)
    table, readout = _with_preconditions(df, table, n_bootstrap=n_bootstrap)
    verdicts, parts, checked = [], [], []
    for row in table.to_dict("records"):
        if row["condition"] not in (*FAILING_CONDITIONS, "recombination_to_element"):
            continue
        checked.append(row)
        expected = "fails" if row["condition"] in FAILING_CONDITIONS else "close to training"
        observed = row["reconstruction"]
        verdict = ("agrees" if observed == expected else "unclear" if observed == "unclear"
                   else "contradicts")
        if row["precondition"] != MET:
            verdict = "unclear"  # the split did not test the claim: never ✓ or ✗
        verdicts.append(verdict)
        row["paper"], row["verdict"] = expected, verdict
        parts.append(f"{_interval(row['ratio'], row['low'], row['high'], 2, '×')} under "
                     f"{CONDITION_NAMES.get(row['condition'], row['condition'])} "
                     f"({row['dataset']}/{row['split']}, n = {row['n']}: {observed}"
                     + ("" if observed == expected else f"; the paper: {expected}")
                     + ("" if row["precondition"] == MET else f"; ? {_untested(row)}") + ")")
    tested = [r for r in checked if r["precondition"] == MET]
    if not parts:
        status = INCONCLUSIVE
        result = "No trials on an extrapolation, recombination-to-range or recombination-to-element split."
    else:
        conditions = {r["condition"] for r in tested}
        both = bool(conditions & set(FAILING_CONDITIONS)) and "recombination_to_element" in conditions
        status = _overall(verdicts)
        if status == REPRODUCED and not both:
            status = INCONCLUSIVE
        result = ("Held-out NLL / training NLL (mean over models, 95% bootstrap interval): "
                  + "; ".join(parts)
                  + f". A split fails when the interval lies above {FAIL_RATIO:g}× and stays close when it "
                  "lies below." + ("" if both else " Both kinds of split, each with its precondition met, "
                                                   "are needed to show the contrast."))
    return Finding("Montero et al. 2021", "§2.1, Fig. 3",
                   "End-to-end models reconstruct held-out combinations under recombination-to-element, but "
                   "fail under recombination-to-range and extrapolation: their held-out NLL is far above "
                   "their training NLL.", status, result,
                   _shown(pd.DataFrame(checked), ["paper", "verdict", "precondition"]),
                   PRECONDITION_RULE, _precondition_summary(checked), _readout_table(readout))


@finished_only
def m21_disentanglement(df: pd.DataFrame, *, n_bootstrap: int = N_BOOTSTRAP) -> Finding:
    df = _vae_trials(df)
    metric = next((m for m in ("d_score", "dci_disentanglement") if _numeric(df, m).notna().any()), None)
    rows, verdicts, readout = [], [], []
    for (dataset, split), part in _splits(df) if metric else ():
        row = {"dataset": dataset, "split": split, "condition": _condition(part),
               **spearman(part, metric, "test_nll", n_bootstrap=n_bootstrap)}
        if row["n"] < MIN_MODELS or np.isnan(row["low"]):
            verdict = "unclear"
        elif row["high"] < 0:
            verdict = "contradicts"
        elif row["low"] > NO_HELP_RHO:
            verdict = "agrees"
        else:
            verdict = "unclear"
        state, reason, learning = split_precondition(part, dataset, split, n_bootstrap=n_bootstrap)
        readout += learning
        if state != MET:
            verdict = "unclear"  # the split did not test generalisation: never ✓ or ✗
        row.update(verdict=verdict, precondition=state, precondition_reason=reason)
        verdicts.append(verdict)
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        status, result = INCONCLUSIVE, "No disentanglement score (d_score or dci) in the results."
    else:
        status = _overall(verdicts)
        result = (f"Spearman ρ of {metric} against held-out NLL, per split: "
                  + "; ".join(f"{r['dataset']}/{r['split']} {_rho(r)}"
                              + ("" if r["precondition"] == MET else f" (? {_untested(r)})") for r in rows)
                  + f". Reproduced where the 95% interval rules out ρ < {NO_HELP_RHO:+g} (no strong "
                  f"'more disentangled, lower held-out NLL'); not reproduced where it lies below 0; "
                  f"inconclusive otherwise or with fewer than {MIN_MODELS} models.")
    return Finding("Montero et al. 2021", "§2.1, Fig. 3",
                   "How well a model generalises does not depend on how disentangled it is: "
                   "disentanglement does not lower the held-out NLL.", status, result,
                   _shown(table, ["verdict", "precondition"]), PRECONDITION_RULE,
                   _precondition_summary(rows), _readout_table(readout))


def _excess(part: pd.DataFrame, side: str) -> pd.Series:
    """Per trial: held-out error minus the diagnosis threshold (ratio · training error + margin)."""
    train_col, test_col, default = (("encoder_error_train", "encoder_error_test", ENCODER_MARGIN)
                                    if side == "encoder" else
                                    ("decoder_nll_train", "decoder_nll_test", DECODER_MARGIN))
    ratio = _numeric(part, "diagnosis_ratio").fillna(RATIO)
    margin = _numeric(part, f"diagnosis_{side}_margin").fillna(default)
    return _numeric(part, test_col) - (ratio * _numeric(part, train_col) + margin)


@finished_only
def m22_diagnosis(df: pd.DataFrame, *, n_bootstrap: int = N_BOOTSTRAP) -> Finding:
    df = _vae_trials(df)
    reconstruction = reconstruction_ratios(df, n_bootstrap=n_bootstrap).set_index(["dataset", "split"])
    rows, readout = [], []
    for (dataset, split), part in _splits(df):
        row = reconstruction.loc[(dataset, split)].to_dict()
        row.update(dataset=dataset, split=split)
        for side in ("encoder", "decoder"):
            mean, low, high = mean_interval(_excess(part, side), n_bootstrap=n_bootstrap)
            row[f"{side}_excess"], row[f"{side}_low"], row[f"{side}_high"] = mean, low, high
            row[side] = {"above": "fails", "below": "holds"}.get(_side(low, high, 0.0), "unclear")
        enc, dec = row["encoder"], row["decoder"]
        row["diagnosis"] = ("both" if enc == dec == "fails"
                            else "encoder" if enc == "fails" and dec == "holds"
                            else "decoder" if dec == "fails" and enc == "holds"
                            else "neither" if enc == dec == "holds" else "unclear")
        state, reason, learning = split_precondition(part, dataset, split, n_bootstrap=n_bootstrap)
        row.update(precondition=state, precondition_reason=reason)
        readout += learning
        rows.append(row)
    table = pd.DataFrame(rows)
    has_diagnosis = not table.empty and table["encoder_excess"].notna().any()
    failing = table[table["reconstruction"] == "fails"] if has_diagnosis else table.iloc[0:0]
    verdicts = []
    for r in failing.to_dict("records"):
        verdict = ("agrees" if r["encoder"] == "fails" else "contradicts" if r["encoder"] == "holds"
                   else "unclear")
        verdicts.append(verdict if r["precondition"] == MET else "unclear")  # untested: never ✓ or ✗
    if has_diagnosis:
        table["verdict"] = ""
        table.loc[failing.index, "verdict"] = verdicts
    tested = int((failing["precondition"] == MET).sum()) if len(failing) else 0
    if not has_diagnosis:
        status = INCONCLUSIVE
        result = "No encoder-versus-decoder diagnosis in the results (metric encoder_decoder)."
    else:
        status = _overall(verdicts)
        if status == REPRODUCED and tested < 2:
            status = INCONCLUSIVE
        parts = [f"{r['dataset']}/{r['split']}: reconstruction {r['reconstruction']} "
                 f"({_interval(r['ratio'], r['low'], r['high'], 2, '×')}), encoder {r['encoder']} "
                 f"(excess {_interval(r['encoder_excess'], r['encoder_low'], r['encoder_high'], 3)}), "
                 f"decoder {r['decoder']} "
                 f"(excess {_interval(r['decoder_excess'], r['decoder_low'], r['decoder_high'], 1)} "
                 f"nats), n = {r['n']}"
                 + ("" if r["reconstruction"] != "fails" or r["precondition"] == MET
                    else f"; ? {_untested(r)}")
                 for r in table.to_dict("records")]
        result = ("; ".join(parts) + f". {len(failing)} split(s) fail to reconstruct, {tested} of them with "
                  "the precondition met" + ("" if tested >= 2 else "; at least two are needed")
                  + ". A part fails when its held-out error exceeds 1.5× its training error plus the margin "
                  "across the whole 95% interval.")
    return Finding("Montero et al. 2022", "abstract, finding (i)",
                   "When models fail to reconstruct unseen combinations, their encoders also fail: they do "
                   "not map the unseen combinations to the right region of the latent space.",
                   status, result,
                   _shown(table, ["encoder_excess", "encoder_low", "encoder_high", "encoder",
                                  "decoder_excess", "decoder_low", "decoder_high", "decoder", "diagnosis",
                                  "verdict", "precondition"]),
                   PRECONDITION_RULE + " Here it is required of every split that fails to reconstruct.",
                   _precondition_summary(rows), _readout_table(readout))


D21_PRECONDITION = (
    "The transfer scores test disentanglement only if the models learned the OOD1 factor (the "
    "transfer_factor column) on their training images: the low end of the 95% bootstrap interval of its "
    "mean readout accuracy over all models is at least halfway from chance to 1 (bar = chance + "
    f"{LEARNED_SHARE:g} × (1 − chance)). Otherwise the finding is ?, never ✓ or ✗.")


def _transfer_factor(df: pd.DataFrame) -> str | None:
    if "transfer_factor" not in df.columns:
        return None
    names = df["transfer_factor"].dropna().astype(str)
    return names.mode().iloc[0] if len(names) else None


@finished_only
def d21_transfer(df: pd.DataFrame, *, n_bootstrap: int = N_BOOTSTRAP) -> Finding:
    scores = [f"transfer_{r}_{s}" for r in ("gbt", "mlp") for s in ("ood1_a", "ood1_b", "ood1_c")]
    scores = [s for s in scores if _numeric(df, s).notna().any()]
    if "dci_disentanglement" not in df.columns:
        scores = []
    factor = _transfer_factor(df)
    if factor is None:
        state, reason, learning = UNCHECKABLE, "the results do not name the OOD1 factor (transfer_factor)", []
    else:
        state, reason, learning = precondition(_vae_trials(df), [factor], n_bootstrap=n_bootstrap)
    readout = [{"dataset": "all", "split": "all", **r} for r in learning]
    rows, verdicts = [], []
    for score in scores:
        row = {"readout": score.split("_")[1], "scenario": score.split("_", 2)[2].upper().replace("_", "-"),
               **spearman(df, "dci_disentanglement", score, n_bootstrap=n_bootstrap)}
        verdict = ("unclear" if row["n"] < MIN_MODELS or np.isnan(row["low"]) else
                   "agrees" if row["high"] < 0 else "contradicts" if row["low"] > 0 else "unclear")
        row["verdict"] = verdict if state == MET else "unclear"  # untested: never ✓ or ✗
        rows.append(row)
        if row["readout"] == "gbt":
            verdicts.append(row["verdict"])
    table = pd.DataFrame(rows)
    held = f"OOD1 factor {factor}: {state}" if factor else f"OOD1 factor: {state}"
    held += "" if state == MET else f" ({reason})"
    if not verdicts:
        status = INCONCLUSIVE
        result = "No DCI and GBT OOD1 transfer scores in the results (metrics dci, transfer)."
    else:
        status = _overall(verdicts)
        gbt = [r for r in rows if r["readout"] == "gbt"]
        result = ("Spearman ρ of DCI disentanglement against OOD1 transfer error (GBT readout), over "
                  f"{gbt[0]['n']} models: " + "; ".join(f"{r['scenario']} {_rho(r)}" for r in gbt))
        mlp = [r for r in rows if r["readout"] == "mlp"]
        if mlp:
            result += "; MLP readout (D21: milder): " + "; ".join(f"{r['scenario']} {_rho(r)}" for r in mlp)
        widths = [r["high"] - r["low"] for r in gbt if not np.isnan(r["low"])]
        result += ". Reproduced where the interval lies below 0."
        if state != MET:
            result += f" ? Not tested: {reason}."
        elif status == INCONCLUSIVE and (not widths or max(widths) > WIDE_INTERVAL):
            widest = max(widths) if widths else float("nan")
            result += (f" The intervals are too wide to decide (widest {widest:.2f}): "
                       f"{gbt[0]['n']} models are too few at this budget; more seeds narrow them.")
    return Finding("Dittadi et al. 2021", "§5, Fig. 4",
                   "More disentangled representations transfer better out of distribution when the encoder "
                   "stays in distribution (OOD1): DCI correlates negatively with the transfer error, "
                   "strongly for GBT readouts and mildly for MLPs.", status, result,
                   _shown(table, ["verdict"]), D21_PRECONDITION,
                   (held if state != MET else f"{held}: {reason}") + ".", _readout_table(readout))


def _shown(table: pd.DataFrame, extra: list[str]) -> pd.DataFrame:
    """The table as the report shows it: numbers rounded, the columns that matter first."""
    if table.empty:
        return table
    order = [c for c in ("dataset", "split", "condition", "readout", "scenario", "n", "train_nll", "test_nll",
                         "ratio", "low", "high", "reconstruction", "x", "y", "rho") if c in table.columns]
    shown = table[order + [c for c in extra if c in table.columns and c not in order]].copy()
    for column in shown.columns:
        if pd.api.types.is_float_dtype(shown[column]):
            shown[column] = shown[column].round(3)
    return shown


STUDIES = {"montero2021": (m21_held_out, m21_disentanglement), "montero2022": (m22_diagnosis,),
           "dittadi2021": (d21_transfer,)}


@finished_only
def findings(df: pd.DataFrame, *, n_bootstrap: int = N_BOOTSTRAP) -> list[Finding]:
    """Every finding of the studies whose presets the results hold, each on that study's trials."""
    if "preset" not in df.columns:
        return []
    out = []
    for preset, checks in STUDIES.items():
        part = df[df["preset"].astype(object) == preset]
        if not part.empty:
            out += [check(part, n_bootstrap=n_bootstrap) for check in checks]
    return out


def findings_text(found: list[Finding]) -> str:
    """The findings as plain text, for the terminal."""
    if not found:
        return ""
    lines = ["Findings (✓ reproduced, ✗ not reproduced, ? inconclusive at this scale):"]
    for f in found:
        lines += [f"  {f.symbol} {f.study} ({f.source}): {f.paper}", f"      {f.status}: {f.result}"]
        if f.precondition:
            lines += [f"      precondition: {f.precondition}", f"      did it hold? {f.precondition_result}"]
    return "\n".join(lines)
