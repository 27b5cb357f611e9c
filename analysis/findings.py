"""The papers' headline findings, checked on a study's own results: ✓ reproduced, ✗ not
reproduced, ? inconclusive at this scale.

Each finding puts the paper's statement (in our words, with its section and figure) beside what
the results show, with the numbers and their 95% intervals. Every rule, the precondition that a
model learned the factors a split recombines included, was fixed and tested on planted tables
before any run it judges; docs/analysis.md, "Findings", states them. Only the trials of the presets
``montero2021``, ``montero2022`` and ``dittadi2021`` are checked (the ``preset`` column); each
study's checks see that study's trials only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from analysis.aggregate import add_derived_columns, finished_only
from analysis.metrics.encoder_decoder_diagnosis import DECODER_MARGIN, ENCODER_MARGIN, RATIO
from analysis.metrics.factor_readout import READOUT_SCORES
from analysis.tables import numeric

FAIL_RATIO = RATIO  # held-out error above 1.5x training error: a failure (the diagnosis rule's ratio)
# A model learned a factor (on its training images) when its readout reaches the bar of the
# factor's kind: a categorical factor's accuracy at least halfway from chance to 1; an ordinal or
# circular factor's R² at least 0.75, what knowing which half of its range the factor lies in gives
# (the best two-level code of a uniform factor explains 3/4 of its variance).
LEARNED_SHARE = 0.5
R2_BAR = 0.75
MIN_TESTED = 3  # models with the precondition met that a split's mean needs (t interval, 2 df)
MIN_MODELS = 5  # models a correlation needs before it can say ✓ or ✗
# M21's null ("generalisation does not depend on disentanglement"): agrees when the 95% interval of
# ρ lies inside (−NULL_BOUND, +NULL_BOUND), with at least NULL_MIN_MODELS models: with that many, a
# true ρ of 0 agrees in about 6 draws of 10 and a true |ρ| of 0.8 in under 1 of 100
# (tests/analysis/test_findings.py simulates the rule).
NULL_BOUND = 0.7
NULL_MIN_MODELS = 14
WIDE_INTERVAL = 0.8  # a ρ interval wider than this is called too wide for the models run
_ROUNDING = 1e-9  # float noise never decides against a bar
MET, NOT_MET, UNCHECKABLE = "met", "not met", "cannot be checked"
PRECONDITION_RULE = (
    "A model tests a split only if it learned, on its training images, every factor the split's rule "
    "names (the split registry's rule), each read in the score of its kind: a categorical factor "
    f"(a shape, a colour) when its readout accuracy is at least halfway from chance to 1 (bar = chance + "
    f"{LEARNED_SHARE:g} × (1 − chance)); an ordinal factor (a position, a scale) or a circular one "
    f"(dSprites orientation, modulo each shape's symmetry) when its readout R² is at least {R2_BAR:g}. "
    "Each model is judged on its own; a split's numbers are over the models that learned its factors, "
    f"and a split with fewer than {MIN_TESTED} such models gets ?, never ✓ or ✗.")

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
    readout: pd.DataFrame = field(default_factory=pd.DataFrame)  # the readout per split and factor
    note: str = ""  # what a reader should weigh beside the verdict (D21: within each supervision group)

    @property
    def symbol(self) -> str:
        return SYMBOL[self.status]


# -- intervals ---------------------------------------------------------------------------------------


def mean_interval(values) -> tuple[float, float, float]:
    """The mean of ``values`` (finite ones) and its Student-t 95% interval (exact for normal values;
    with a handful of models a bootstrap interval is too narrow); NaN bounds with fewer than 2."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return np.nan, np.nan, np.nan
    if len(x) < 2:
        return float(x.mean()), np.nan, np.nan
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def rank_correlation(df: pd.DataFrame, x: str, y: str) -> dict:
    """Spearman ρ of columns ``x`` and ``y`` over the rows where both are finite, with the 95%
    interval of Fisher's z with Bonett & Wright's (2000) standard error for Spearman's ρ,
    √((1 + ρ²/2) / (n − 3)). NaN with fewer than 4 rows or a constant column."""
    pairs = df[[x, y]].apply(numeric).replace([np.inf, -np.inf], np.nan).dropna().to_numpy() \
        if {x, y} <= set(df.columns) else np.zeros((0, 2))
    n = len(pairs)
    out = {"x": x, "y": y, "n": n, "rho": np.nan, "low": np.nan, "high": np.nan}
    if n < 4 or np.ptp(pairs[:, 0]) == 0 or np.ptp(pairs[:, 1]) == 0:
        return out
    rho = float(stats.spearmanr(pairs[:, 0], pairs[:, 1]).statistic)
    z = np.arctanh(np.clip(rho, -0.9999, 0.9999))
    half = 1.959964 * np.sqrt((1 + rho ** 2 / 2) / (n - 3))
    return {**out, "rho": rho, "low": float(np.tanh(z - half)), "high": float(np.tanh(z + half))}


def _side(low: float, high: float, threshold: float) -> str:
    """'above' when the interval lies wholly above ``threshold``, 'below' wholly below, else 'unclear'."""
    if np.isnan(low) or np.isnan(high):
        return "unclear"
    return "above" if low > threshold else "below" if high < threshold else "unclear"


def _interval(mean: float, low: float, high: float, digits: int = 2, suffix: str = "") -> str:
    if np.isnan(mean):
        return "n/a"
    if np.isnan(low):
        return f"{mean:.{digits}f}{suffix} (one model: no interval)"
    return f"{mean:.{digits}f}{suffix} [{low:.{digits}f}, {high:.{digits}f}]"


def _rho(row) -> str:
    if np.isnan(row["rho"]):
        return f"ρ n/a (n = {row['n']})"
    return f"ρ = {row['rho']:+.2f} [{row['low']:+.2f}, {row['high']:+.2f}] (n = {row['n']})"


# -- the trials a finding reads ------------------------------------------------------------------


def _numeric(df: pd.DataFrame, column: str) -> pd.Series:
    return numeric(df[column]) if column in df.columns else pd.Series(np.nan, index=df.index, dtype=float)


def _task_trials(df: pd.DataFrame, task: str) -> pd.DataFrame:
    """The trials of one task: "vae" (the end-to-end models; also rows without a task column) or
    "ground_truth_decoder"."""
    if "task" not in df.columns:
        return df if task == "vae" else df.iloc[0:0]
    column = df["task"].astype(object)
    return df[(column.isna() | (column == "vae")) if task == "vae" else column == task]


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


# -- the precondition, model by model -------------------------------------------------------------


def learned_bar(kind: str, chance: float = np.nan) -> float:
    """The readout score a factor of ``kind`` must reach to count as learned: a categorical
    factor's accuracy halfway from ``chance`` to 1, an ordinal or circular factor's R² of
    :data:`R2_BAR`."""
    return chance + LEARNED_SHARE * (1.0 - chance) if kind == "categorical" else R2_BAR


def rule_factors(dataset: str, split: str, condition: str | None = None) -> tuple[str, ...]:
    """The factors the held-out rule of ``split`` names, from the split registry
    (``Split.factor_names``). A KeyError, saying so, when the registry has no such split."""
    from data_pipeline.spaces import factor_space
    from data_pipeline.splits import get_split

    known = condition if condition in CONDITION_NAMES else None
    return get_split(dataset, split, known).factor_names(factor_space(dataset))


def _readout_json(part: pd.DataFrame) -> list[dict]:
    if "factor_readout" not in part.columns:
        return [{} for _ in range(len(part))]
    return [json.loads(v) if isinstance(v, str) and v else {} for v in part["factor_readout"]]


def factor_kind(dataset: str, factor: str, part: pd.DataFrame | None = None) -> str:
    """The kind of ``factor``: from the dataset's factor space where disgen knows it, else from
    the rows' ``factor_readout`` JSON (a user's labelled dataset), else categorical."""
    from data_pipeline.spaces import factor_space

    try:
        return factor_space(dataset).kind(factor)
    except (KeyError, ValueError):
        pass
    for entry in _readout_json(part) if part is not None else ():
        if isinstance(entry.get(factor), dict) and entry[factor].get("kind"):
            return entry[factor]["kind"]
    return "categorical"


def readout_values(part: pd.DataFrame, dataset: str, factor: str) -> tuple[str, pd.Series, pd.Series]:
    """(kind, score per model, chance per model) of ``factor``'s readout: the ``accuracy_`` and
    ``chance_`` columns of a categorical factor, the ``r2_`` column of another (chance 0), else
    the ``factor_readout`` JSON (a factor without columns of its own). NaN where not recorded."""
    kind = factor_kind(dataset, factor, part)
    score = _numeric(part, f"{READOUT_SCORES[kind]}_{factor}")
    chance = _numeric(part, f"chance_{factor}") if kind == "categorical" \
        else pd.Series(0.0, index=part.index)
    if score.notna().any():
        return kind, score, chance
    entries = [e.get(factor) if isinstance(e.get(factor), dict) else {} for e in _readout_json(part)]
    value = lambda entry, key: np.nan if entry.get(key) is None or entry.get("kind") != kind \
        else float(entry[key])  # noqa: E731
    score = pd.Series([value(e, "score") for e in entries], index=part.index, dtype=float)
    if kind == "categorical":
        chance = pd.Series([value(e, "chance") for e in entries], index=part.index, dtype=float)
    return kind, score, chance


def _model_label(row) -> str:
    """A model's short name in a sentence: its objective and β or γ, and its seed."""
    bits = [str(row.get("objective") or row.get("task") or "model")]
    for name, symbol in (("beta", "β"), ("gamma", "γ"), ("mmd_weight", "λ1")):
        value = row.get(name)
        weighs = {"beta": not bits[0].startswith("wae"), "gamma": bits[0] == "factor_vae",
                  "mmd_weight": bits[0] == "wae_mmd"}[name]
        if value is not None and not pd.isna(value) and weighs:
            bits.append(f"{symbol}={float(value):g}")
    if row.get("seed") is not None and not pd.isna(row.get("seed")):
        bits.append(f"seed {int(row['seed'])}")
    return " ".join(bits)


@dataclass
class Precondition:
    """Whether the models of a part learned the factors a finding needs: ``state`` (met, not met,
    cannot be checked), the sentence saying why, the readout table's rows (one per factor), and
    ``tested``: per model, True where it learned every factor (the models the finding reads)."""

    state: str
    reason: str
    rows: list[dict]
    tested: pd.Series


def precondition(part: pd.DataFrame, dataset: str, factors, *, minimum: int = MIN_TESTED) -> Precondition:
    """The precondition (docs/analysis.md, "Preconditions") that models of ``part`` learned every
    factor in ``factors``, judged model by model. Met when at least ``minimum`` models learned them
    all; a model whose readout of one of them is not recorded is not counted."""
    factors = tuple(factors)
    learned = pd.DataFrame(index=part.index)
    recorded = pd.Series(True, index=part.index)
    rows, short = [], {}
    for factor in factors:
        kind, score, chance = readout_values(part, dataset, factor)
        bars = pd.Series([learned_bar(kind, c) for c in chance], index=part.index, dtype=float)
        known = score.notna() & bars.notna()
        recorded &= known
        learned[factor] = known & (score >= bars - _ROUNDING)
        values = score[known]
        rows.append({"factor": factor, "kind": kind, "score": READOUT_SCORES[kind], "n": int(known.sum()),
                     "learned": int(learned[factor].sum()), "mean": values.mean() if len(values) else np.nan,
                     "min": values.min() if len(values) else np.nan,
                     "max": values.max() if len(values) else np.nan,
                     "chance": float(chance[known].mean()) if known.any() else np.nan,
                     "bar": float(bars[known].mean()) if known.any() else np.nan})
        short[factor] = (score, bars, kind)
    tested = recorded & learned.all(axis=1) if factors else recorded
    n_models, n_recorded, n_tested = len(part), int(recorded.sum()), int(tested.sum())
    names = _join(f"{f} ({'accuracy' if short[f][2] == 'categorical' else 'R²'} ≥ {r['bar']:.2f})"
                  for f, r in zip(factors, rows))
    if not factors:
        return Precondition(UNCHECKABLE, "the split names no factor", rows, tested)
    if n_recorded == 0:
        missing = [r["factor"] for r in rows if r["n"] == 0]
        return Precondition(UNCHECKABLE, f"the results have no readout of {_join(missing)} (written before "
                            "the readout per factor was recorded, the readout did not run, or the factor "
                            "takes one value on the training images): the precondition cannot be checked",
                            rows, tested)
    left_out = [f"{_model_label(part.loc[i])} ("
                + ", ".join(f"{f} {short[f][0][i]:.2f}" for f in factors
                            if not (short[f][0][i] >= short[f][1][i] - _ROUNDING)) + ")"
                for i in part.index[recorded & ~tested]]
    counted = f"{n_tested} of {n_models} models learned {names}"
    if n_recorded < n_models:
        counted += f" ({n_models - n_recorded} without a readout)"
    if left_out:
        counted += "; left out: " + "; ".join(left_out[:6]) + (f" and {len(left_out) - 6} more"
                                                               if len(left_out) > 6 else "")
    if n_tested >= minimum:
        return Precondition(MET, counted, rows, tested)
    return Precondition(NOT_MET, f"{counted}: fewer than the {minimum} needed", rows, tested)


def _join(items) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    return "".join(items) if len(items) < 2 else ", ".join(items[:-1]) + " and " + items[-1]


def split_precondition(part: pd.DataFrame, dataset: str, split: str, *,
                       minimum: int = MIN_TESTED) -> Precondition:
    """:func:`precondition` for a split's models, on the factors its registered rule names."""
    try:
        factors = rule_factors(dataset, split, _condition(part))
    except (KeyError, ValueError) as error:
        reason = str(error.args[0]) if error.args else str(error)
        return Precondition(UNCHECKABLE, f"the split's factors are unknown ({reason})", [],
                            pd.Series(False, index=part.index))
    return precondition(part, dataset, factors, minimum=minimum)


def _readout_table(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    if not table.empty:
        columns = ["mean", "min", "max", "chance", "bar"]
        table[columns] = table[columns].astype(float).round(3)
    return table


def _precondition_summary(checked: list[dict]) -> str:
    """One sentence over the splits' preconditions: which held, which did not and why."""
    if not checked:
        return "No split to check."
    return "; ".join(f"{r['dataset']}/{r['split']}: {r['precondition']} ({r['precondition_reason']})"
                     for r in checked) + "."


def _untested(row: dict) -> str:
    return f"not tested: {row['precondition_reason']}"


# -- the findings ---------------------------------------------------------------------------------


@finished_only
def reconstruction_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Per dataset and split, over the given trials: n, mean train and test NLL, the mean test/train
    NLL ratio with its 95% interval, whether reconstruction fails (interval above 1.5), stays close
    to training (below) or is unclear, and the fewest held-out images a test NLL used."""
    rows = []
    for (dataset, split), part in _splits(df):
        rows.append({"dataset": dataset, "split": split, "condition": _condition(part),
                     **_ratio_row(part)})
    return pd.DataFrame(rows)


def _ratio_row(part: pd.DataFrame) -> dict:
    train, test = _numeric(part, "train_nll"), _numeric(part, "test_nll")
    ratio, low, high = mean_interval(test / train)
    side = _side(low, high, FAIL_RATIO)
    used = _numeric(part, "test_nll_images")
    return {"n": int((test / train).notna().sum()), "train_nll": train.mean(), "test_nll": test.mean(),
            "ratio": ratio, "low": low, "high": high,
            "reconstruction": {"above": "fails", "below": "close to training"}.get(side, "unclear"),
            "test_images": float(used.min()) if used.notna().any() else np.nan}


def _tested_splits(df: pd.DataFrame, conditions) -> list[tuple[dict, pd.DataFrame]]:
    """For each split of ``conditions``: its row (dataset, split, condition, precondition and the
    ratio over the models that met it) and those models."""
    out = []
    for (dataset, split), part in _splits(df):
        condition = _condition(part)
        if condition not in conditions:
            continue
        check = split_precondition(part, dataset, split)
        tested = part[check.tested]
        row = {"dataset": dataset, "split": split, "condition": condition, "models": len(part),
               **_ratio_row(tested), "precondition": check.state, "precondition_reason": check.reason,
               "readout": [{"dataset": dataset, "split": split, **r} for r in check.rows]}
        out.append((row, tested))
    return out


def _ratio_text(row: dict, expected: str) -> str:
    observed = row["reconstruction"]
    few = "" if np.isnan(row["test_images"]) else f", {int(row['test_images'])} held-out images"
    return (f"{_interval(row['ratio'], row['low'], row['high'], 2, '×')} under "
            f"{CONDITION_NAMES.get(row['condition'], row['condition'])} "
            f"({row['dataset']}/{row['split']}, n = {row['n']} of {row['models']}{few}: {observed}"
            + ("" if observed == expected else f"; the paper: {expected}")
            + ("" if row["precondition"] == MET else f"; ? {_untested(row)}") + ")")


def _ratio_verdict(row: dict, expected: str) -> str:
    if row["precondition"] != MET:
        return "unclear"  # the split did not test the claim: never ✓ or ✗
    observed = row["reconstruction"]
    return "agrees" if observed == expected else "unclear" if observed == "unclear" else "contradicts"


def _finish(study, source, paper, status, result, checked, extra, precondition_text=PRECONDITION_RULE,
            note="") -> Finding:
    readout = [r for row in checked for r in row.pop("readout", [])]
    return Finding(study, source, paper, status, result, _shown(pd.DataFrame(checked), extra),
                   precondition_text, _precondition_summary(checked), _readout_table(readout), note)


@finished_only
def m21_held_out(df: pd.DataFrame) -> Finding:
    splits = _tested_splits(_task_trials(df, "vae"), (*FAILING_CONDITIONS, "recombination_to_element"))
    verdicts, parts, checked = [], [], []
    for row, _ in splits:
        expected = "fails" if row["condition"] in FAILING_CONDITIONS else "close to training"
        row["paper"], row["verdict"] = expected, _ratio_verdict(row, expected)
        verdicts.append(row["verdict"])
        parts.append(_ratio_text(row, expected))
        checked.append(row)
    if not parts:
        status = INCONCLUSIVE
        result = "No trials on an extrapolation, recombination-to-range or recombination-to-element split."
    else:
        conditions = {r["condition"] for r in checked if r["precondition"] == MET}
        both = bool(conditions & set(FAILING_CONDITIONS)) and "recombination_to_element" in conditions
        status = _overall(verdicts)
        if status == REPRODUCED and not both:
            status = INCONCLUSIVE
        result = ("Held-out NLL / training NLL (mean over the models that learned the split's factors, 95% t "
                  "interval): " + "; ".join(parts)
                  + f". A split fails when the interval lies above {FAIL_RATIO:g}× and stays close when it "
                  "lies below." + ("" if both else " Both kinds of split, each with its precondition met, "
                                                   "are needed to show the contrast."))
    return _finish("Montero et al. 2021", "§2.1, Fig. 3",
                   "End-to-end models reconstruct held-out combinations under recombination-to-element, but "
                   "fail under recombination-to-range and extrapolation: their held-out NLL is far above "
                   "their training NLL.", status, result, checked, ["paper", "verdict", "precondition"])


DECODER_PRECONDITION = (
    "A ground-truth decoder tests a split only if it learned to render, on its training images, every "
    "factor the split's rule names: decoding a training image with each value of the factor (the others "
    "kept), the value that best explains the image is read out, and scored as an encoder's readout is "
    f"(a categorical factor's accuracy at least halfway from chance to 1; an ordinal or circular factor's "
    f"R² at least {R2_BAR:g}). A split's numbers are over the decoders that learned its factors; with "
    f"fewer than {MIN_TESTED} it gets ?, never ✓ or ✗.")


@finished_only
def m21_ground_truth_decoder(df: pd.DataFrame) -> Finding:
    splits = _tested_splits(_task_trials(df, "ground_truth_decoder"),
                            (*FAILING_CONDITIONS, "recombination_to_element"))
    verdicts, parts, checked = [], [], []
    for row, _ in splits:
        failing = row["condition"] in FAILING_CONDITIONS
        row["paper"] = "fails" if failing else "(not part of the claim)"
        row["verdict"] = _ratio_verdict(row, "fails") if failing else ""
        if failing:
            verdicts.append(row["verdict"])
        parts.append(_ratio_text(row, "fails") if failing else
                     _ratio_text(row, row["reconstruction"]) + " (context, not judged)")
        checked.append(row)
    tested = {r["condition"] for r in checked if r["precondition"] == MET and r["verdict"]}
    if not verdicts:
        status = INCONCLUSIVE
        result = "No ground-truth decoder trials on an extrapolation or recombination-to-range split."
    else:
        status = _overall(verdicts)
        both = set(FAILING_CONDITIONS) <= tested
        if status == REPRODUCED and not both:
            status = INCONCLUSIVE
        result = ("Ground-truth decoders, held-out NLL / training NLL (mean over the decoders that learned "
                  "to render the split's factors, 95% t interval): " + "; ".join(parts)
                  + f". A split fails when the interval lies above {FAIL_RATIO:g}×."
                  + ("" if both else " An extrapolation and a recombination-to-range split, each with its "
                                     "precondition met, are needed for ✓."))
    return _finish("Montero et al. 2021", "§2.1, Fig. 3 and 4",
                   "Perfectly disentangled codes do not rescue generalisation: the ground-truth decoder, fed "
                   "the true factor values, still fails to reconstruct held-out combinations under "
                   "recombination-to-range and extrapolation.", status, result, checked,
                   ["paper", "verdict", "precondition"], DECODER_PRECONDITION)


@finished_only
def m21_disentanglement(df: pd.DataFrame) -> Finding:
    df = _task_trials(df, "vae")
    metric = next((m for m in ("d_score", "dci_disentanglement") if _numeric(df, m).notna().any()), None)
    rows, verdicts = [], []
    for (dataset, split), part in _splits(df) if metric else ():
        check = split_precondition(part, dataset, split)
        tested = part[check.tested].assign(generalisation_gap=lambda t: _numeric(t, "test_nll")
                                           / _numeric(t, "train_nll"))
        row = {"dataset": dataset, "split": split, "condition": _condition(part), "models": len(part),
               **rank_correlation(tested, metric, "generalisation_gap")}
        if check.state != MET or row["n"] < MIN_MODELS or np.isnan(row["low"]):
            verdict = "unclear"  # untested, or too few models for any verdict
        elif row["low"] > 0 or row["high"] < 0:
            verdict = "contradicts"
        elif row["n"] >= NULL_MIN_MODELS and row["low"] > -NULL_BOUND and row["high"] < NULL_BOUND:
            verdict = "agrees"
        else:
            verdict = "unclear"
        row.update(verdict=verdict, precondition=check.state, precondition_reason=check.reason,
                   readout=[{"dataset": dataset, "split": split, **r} for r in check.rows])
        verdicts.append(verdict)
        rows.append(row)
    if not rows:
        status, result = INCONCLUSIVE, "No disentanglement score (d_score or dci) in the results."
    else:
        status = _overall(verdicts)
        result = (f"Spearman ρ of {metric} against the generalisation gap (held-out NLL / training NLL) "
                  "over the models that learned the split's factors, 95% interval (Fisher z): "
                  + "; ".join(f"{r['dataset']}/{r['split']} {_rho(r)}"
                              + ("" if r["precondition"] == MET else f" (? {_untested(r)})")
                              + (f" (fewer than the {NULL_MIN_MODELS} models the null needs)"
                                 if r["precondition"] == MET and r["verdict"] == "unclear"
                                 and r["n"] < NULL_MIN_MODELS else "") for r in rows)
                  + f". Reproduced where the interval lies inside (−{NULL_BOUND:g}, +{NULL_BOUND:g}) with "
                  f"at least {NULL_MIN_MODELS} models (no strong dependence either way); not reproduced "
                  "where it excludes 0; inconclusive otherwise.")
    return _finish("Montero et al. 2021", "§2.1, Fig. 3",
                   "How well a model generalises does not depend on how disentangled it is: the "
                   "generalisation gap does not follow the D-score.", status, result, rows,
                   ["verdict", "precondition"])


def _excess(part: pd.DataFrame, side: str) -> pd.Series:
    """Per trial: held-out error minus the diagnosis threshold (ratio · training error + margin)."""
    train_col, test_col, default = (("encoder_error_train", "encoder_error_test", ENCODER_MARGIN)
                                    if side == "encoder" else
                                    ("decoder_nll_train", "decoder_nll_test", DECODER_MARGIN))
    ratio = _numeric(part, "diagnosis_ratio").fillna(RATIO)
    margin = _numeric(part, f"diagnosis_{side}_margin").fillna(default)
    return _numeric(part, test_col) - (ratio * _numeric(part, train_col) + margin)


@finished_only
def m22_diagnosis(df: pd.DataFrame) -> Finding:
    splits = _tested_splits(_task_trials(df, "vae"), tuple(CONDITION_NAMES))
    rows = []
    for row, tested in splits:
        for side in ("encoder", "decoder"):
            mean, low, high = mean_interval(_excess(tested, side))
            row[f"{side}_excess"], row[f"{side}_low"], row[f"{side}_high"] = mean, low, high
            row[side] = {"above": "fails", "below": "holds"}.get(_side(low, high, 0.0), "unclear")
        enc, dec = row["encoder"], row["decoder"]
        row["diagnosis"] = ("both" if enc == dec == "fails"
                            else "encoder" if enc == "fails" and dec == "holds"
                            else "decoder" if dec == "fails" and enc == "holds"
                            else "neither" if enc == dec == "holds" else "unclear")
        rows.append(row)
    has_diagnosis = _numeric(df, "encoder_error_test").notna().any()
    verdicts = []
    for row in rows:
        row["verdict"] = ""
        if row["reconstruction"] == "fails" and row["precondition"] == MET:
            row["verdict"] = ("agrees" if row["encoder"] == "fails" else
                              "contradicts" if row["encoder"] == "holds" else "unclear")
            verdicts.append(row["verdict"])
    tested = len(verdicts)
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
                 f"nats), n = {r['n']} of {r['models']}"
                 + ("" if r["precondition"] == MET else f"; ? {_untested(r)}") for r in rows]
        result = ("; ".join(parts) + f". {tested} split(s) fail to reconstruct with the precondition met"
                  + ("" if tested >= 2 else "; at least two are needed for ✓")
                  + ". A side fails when its held-out error exceeds 1.5× its training error plus the margin "
                  "across the whole 95% interval (over the models that learned the split's factors).")
    return _finish("Montero et al. 2022", "abstract, finding (i)",
                   "When models fail to reconstruct unseen combinations, their encoders also fail: they do "
                   "not map the unseen combinations to the right region of the latent space.",
                   status, result, rows,
                   ["encoder_excess", "encoder_low", "encoder_high", "encoder", "decoder_excess",
                    "decoder_low", "decoder_high", "decoder", "diagnosis", "verdict", "precondition"],
                   PRECONDITION_RULE + " Here it decides every split that fails to reconstruct.")


D21_PRECONDITION = (
    "The transfer scores test disentanglement only for models that learned the OOD1 factor (the "
    "transfer_factor column) on their training images: a model whose codes ignore it sees no shift "
    "when it changes. Judged model by model, as for the splits (a categorical factor's readout accuracy "
    f"at least halfway from chance to 1; an ordinal one's R² at least {R2_BAR:g}); the correlation is over "
    f"the models that learned it, and needs at least {MIN_MODELS}.")


def _transfer_factor(df: pd.DataFrame) -> str | None:
    if "transfer_factor" not in df.columns:
        return None
    names = df["transfer_factor"].dropna().astype(str)
    return names.mode().iloc[0] if len(names) else None


def _correlation_verdict(row: dict) -> str:
    if row["n"] < MIN_MODELS or np.isnan(row["low"]):
        return "unclear"
    return "agrees" if row["high"] < 0 else "contradicts" if row["low"] > 0 else "unclear"


@finished_only
def d21_transfer(df: pd.DataFrame) -> Finding:
    scores = [f"transfer_{r}_{s}" for r in ("gbt", "mlp") for s in ("ood1_a", "ood1_b", "ood1_c")]
    scores = [s for s in scores if _numeric(df, s).notna().any()]
    if "dci_disentanglement" not in df.columns:
        scores = []
    factor = _transfer_factor(df)
    models = add_derived_columns(_task_trials(df, "vae"))
    dataset = str(models["dataset"].dropna().iloc[0]) if "dataset" in models.columns and \
        models["dataset"].notna().any() else ""
    if factor is None:
        check = Precondition(UNCHECKABLE, "the results do not name the OOD1 factor (transfer_factor)", [],
                             pd.Series(False, index=models.index))
    else:
        check = precondition(models, dataset, [factor], minimum=MIN_MODELS)
    tested = models[check.tested]
    readout = [{"dataset": "all", "split": "all", **r} for r in check.rows]
    rows, verdicts, within = [], [], []
    for score in scores:
        label = {"readout": score.split("_")[1], "scenario": score.split("_", 2)[2].upper().replace("_", "-")}
        row = {**label, "group": "all", **rank_correlation(tested, "dci_disentanglement", score)}
        row["verdict"] = _correlation_verdict(row) if check.state == MET else "unclear"
        rows.append(row)
        if row["readout"] == "gbt":
            verdicts.append(row["verdict"])
            groups = tested.groupby("supervision", observed=True) if "supervision" in tested else ()
            for group, part in groups:
                inner = {**label, "group": str(group), "verdict": "",
                         **rank_correlation(part, "dci_disentanglement", score)}
                rows.append(inner)
                within.append(inner)
    table = pd.DataFrame(rows)
    held = (f"OOD1 factor {factor}: {check.state} ({check.reason})" if factor
            else f"OOD1 factor: {check.state}")
    note = ""
    if within and any(not (r["high"] < 0 or r["low"] > 0) for r in within):
        note = ("Within each supervision group the intervals straddle 0 or cannot be computed ("
                + "; ".join(f"{r['scenario']} {r['group']}: {_rho(r)}" for r in within)
                + "): the pooled correlation may come from the difference between the groups rather than "
                  "from disentanglement within either.")
    if not verdicts:
        status = INCONCLUSIVE
        result = "No DCI and GBT OOD1 transfer scores in the results (metrics dci, transfer)."
    else:
        status = _overall(verdicts)
        gbt = [r for r in rows if r["readout"] == "gbt" and r["group"] == "all"]
        result = ("Spearman ρ of DCI disentanglement against OOD1 transfer error (GBT readout), over the "
                  f"{gbt[0]['n']} models that learned the OOD1 factor (of {len(models)}), 95% interval "
                  "(Fisher z): " + "; ".join(f"{r['scenario']} {_rho(r)}" for r in gbt))
        mlp = [r for r in rows if r["readout"] == "mlp"]
        if mlp:
            result += "; MLP readout (D21: milder): " + "; ".join(f"{r['scenario']} {_rho(r)}" for r in mlp)
        widths = [r["high"] - r["low"] for r in gbt if not np.isnan(r["low"])]
        result += ". Reproduced where the interval lies below 0 (the paper pools every model, as here)."
        if check.state != MET:
            result += f" ? Not tested: {check.reason}."
        elif status == INCONCLUSIVE and (not widths or max(widths) > WIDE_INTERVAL):
            widest = max(widths) if widths else float("nan")
            result += (f" The intervals are too wide to decide (widest {widest:.2f}): "
                       f"{gbt[0]['n']} models are too few at this budget; more seeds narrow them.")
    return Finding("Dittadi et al. 2021", "§5, Fig. 4",
                   "More disentangled representations transfer better out of distribution when the encoder "
                   "stays in distribution (OOD1): DCI correlates negatively with the transfer error, "
                   "strongly for GBT readouts and mildly for MLPs.", status, result,
                   _shown(table, ["group", "verdict"]), D21_PRECONDITION, held + ".", _readout_table(readout),
                   note)


def _shown(table: pd.DataFrame, extra: list[str]) -> pd.DataFrame:
    """The table as the report shows it: numbers rounded, the columns that matter first."""
    if table.empty:
        return table
    order = [c for c in ("dataset", "split", "condition", "readout", "scenario", "group", "models", "n",
                         "train_nll", "test_nll", "ratio", "low", "high", "reconstruction", "test_images",
                         "x", "y", "rho") if c in table.columns]
    shown = table[order + [c for c in extra if c in table.columns and c not in order]].copy()
    for column in shown.columns:
        if column in ("models", "n", "test_images"):
            shown[column] = shown[column].astype("Int64")  # counts, with a null where not recorded
        elif pd.api.types.is_float_dtype(shown[column]):
            shown[column] = shown[column].round(3)
    return shown


STUDIES = {"montero2021": (m21_held_out, m21_ground_truth_decoder, m21_disentanglement),
           "montero2022": (m22_diagnosis,), "dittadi2021": (d21_transfer,)}


@finished_only
def findings(df: pd.DataFrame) -> list[Finding]:
    """Every finding of the studies whose presets the results hold, each on that study's trials."""
    if "preset" not in df.columns:
        return []
    out = []
    for preset, checks in STUDIES.items():
        part = df[df["preset"].astype(object) == preset]
        if not part.empty:
            out += [check(part) for check in checks]
    return out


def findings_text(found: list[Finding]) -> str:
    """The findings as plain text, for the terminal."""
    if not found:
        return ""
    lines = ["Findings (✓ reproduced, ✗ not reproduced, ? inconclusive at this scale):"]
    for f in found:
        lines += [f"  {f.symbol} {f.study} ({f.source}): {f.paper}", f"      {f.status}: {f.result}"]
        if f.note:
            lines.append(f"      note: {f.note}")
        if f.precondition:
            lines += [f"      precondition: {f.precondition}", f"      did it hold? {f.precondition_result}"]
    return "\n".join(lines)
