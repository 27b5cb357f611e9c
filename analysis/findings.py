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

import functools
import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from analysis.aggregate import add_derived_columns, finished_only
from analysis.metrics.encoder_decoder_diagnosis import RATIO
from analysis.metrics.factor_readout import READOUT_SCORES
from analysis.tables import numeric

# Reconstruction is judged against its in-distribution control: held-out NLL / in-distribution NLL
# (NLL on images of training combinations the model never trained on), its interval on the log scale.
# A split fails when that interval lies above FAIL_RATIO and reconstructs like in-distribution images
# when it lies below. M21 calls a failure what shows in the renderings (the wrong shape drawn), not a
# small shift in NLL ("even though this model achieved a lower NLL score, examining the image
# reconstructions showed that it failed", §2.1), so a significant but small excess (1.1×) is not
# called a failure; the rendering judge catches the failures the NLL misses. 1.5 is the diagnosis
# rule's ratio (M22's encoder-versus-decoder rule in this repository), fixed before any run.
FAIL_RATIO = RATIO
# The rendering judge (a classifier fitted on ground-truth images) must read the split's factors on
# held-out ground truth at least this often, or the finding that uses it says ?.
JUDGE_MIN_ACCURACY = 0.95
# A split's renderings read "as in-distribution" only where the judge gap's interval (held-out minus
# in-distribution accuracy) lies above −RENDER_MARGIN: equivalence within a stated margin, never an
# interval that merely includes 0 (a wide one would "hold" for a decoder that renders held-out
# combinations far worse); and "below in-distribution" (a failure) only where it lies below
# −RENDER_MARGIN, a deficit larger than the margin, not merely one below 0. Between: unclear.
# Fixed before any run it judges.
RENDER_MARGIN = 0.1
AS_IN_DISTRIBUTION = "as in-distribution"  # the rendering state of such a split (_rendering)
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
NULL_ALPHA = 0.05  # M21's null: a split contradicts only where ρ ≠ 0 survives Holm's correction at this level
# D21, within supervision groups: the stratified ρ must detect a within-group ρ of D21_EFFECT at least
# D21_POWER of the time (two-sided 95%), else ? with the power it had. The power is Fisher z's, with
# Bonett and Wright's variance at D21_EFFECT; D21_GROUP_MODELS is the smallest group size at which
# two supervision groups (β-VAE and Ada-GVAE) reach it (simulated: about 0.80, see
# tests/analysis/test_findings.py); a preset sizes its D21 demo from it.
D21_EFFECT = -0.6
D21_POWER = 0.75
D21_GROUP_MODELS = 12  # models per supervision group (two groups) the D21 rule needs: power 0.77 by formula
D21_MIN_GROUP = 4  # a group with fewer models has no within-group ρ
# D21 is contradicted only where the stratified interval excludes the paper's effect: the whole of it
# above D21_NO_EFFECT, no within-group correlation as negative as that (an interval that merely
# excludes 0 from above is one case of it). Fixed before any run it judges.
D21_NO_EFFECT = -0.3
# M22's own models: the finding's evidence. VAE, β-VAE and WAE rows are context only.
M22_TASKS = ("composition",)  # CompositionNet (models.config.TASKS)
M22_OBJECTIVES = ("cascade_vae", "lie_group_vae")  # CascadeVAE, LieGroupVAE (models.registry)
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
    points: pd.DataFrame = field(default_factory=pd.DataFrame)  # per model, what a figure plots (D21)
    name: str = ""  # the check that made it (m21_held_out, ...): names its figures in the report

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


def geometric_interval(ratios) -> tuple[float, float, float]:
    """The geometric mean of positive ``ratios`` (finite ones) and its 95% interval: Student's t on
    their logarithms, exponentiated (a ratio of 50× and one of 2× average to 10×, not 26×)."""
    x = np.asarray(ratios, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    mean, low, high = mean_interval(np.log(x))
    return float(np.exp(mean)), float(np.exp(low)), float(np.exp(high))


def wilson_interval(k: float, n: float) -> tuple[float, float, float]:
    """The share ``k / n`` and its Wilson 95% score interval (NaN for n = 0)."""
    if not n or n <= 0 or not np.isfinite(n):
        return np.nan, np.nan, np.nan
    z, p = 1.959964, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(p), float(max(0.0, centre - half)), float(min(1.0, centre + half))


def holm(p_values) -> list[bool]:
    """Holm's step-down correction: which of ``p_values`` are rejected at level :data:`NULL_ALPHA`
    (NaN is never rejected and does not count as a test)."""
    p = np.asarray(p_values, dtype=float)
    tested = np.flatnonzero(np.isfinite(p))
    rejected = np.zeros(len(p), dtype=bool)
    for rank, i in enumerate(tested[np.argsort(p[tested], kind="stable")]):
        if p[i] > NULL_ALPHA / (len(tested) - rank):
            break
        rejected[i] = True
    return rejected.tolist()


# At most this many pairs, a rank correlation's p-value is exact: the share of all n! pairings of
# the two columns whose |ρ| is at least the one seen. Fisher's z is far from its normal limit there:
# at n = 5 and ρ = 1 it gives p ≈ 1e-8, where the exact p is 2/120 ≈ 0.017.
EXACT_MAX_N = 10


@functools.cache
def _pairings(n: int) -> np.ndarray:
    """Every permutation of 0..n−1, one per row (n! rows), as small integers; built by inserting
    each next number at every position of the permutations of the ones before."""
    perms = np.zeros((1, 1), dtype=np.int8)
    for k in range(1, n):
        rows = len(perms)
        grown = np.empty((rows * (k + 1), k + 1), dtype=np.int8)
        for at in range(k + 1):
            block = grown[at * rows:(at + 1) * rows]
            block[:, :at], block[:, at], block[:, at + 1:] = perms[:, :at], k, perms[:, at:]
        perms = grown
    return perms


def exact_rank_p(a, b) -> float:
    """The two-sided exact permutation p-value of Spearman's ρ between ``a`` and ``b`` (n ≤
    :data:`EXACT_MAX_N`): the share of the n! pairings of ``b``'s ranks with ``a``'s whose ρ is at
    least as far from 0 as the observed one (ties keep their average ranks, as ρ's own do). ρ over
    a pairing is Σ (rank_a − mean)(rank_b − mean) over a constant, so that sum is compared."""
    ra = stats.rankdata(a) - (len(a) + 1) / 2
    rb = stats.rankdata(b) - (len(b) + 1) / 2
    observed, slack = abs(float(ra @ rb)), 1e-9 * float(np.abs(ra).sum() * np.abs(rb).sum() + 1)
    perms, extreme = _pairings(len(a)), 0
    for start in range(0, len(perms), 1 << 18):  # in blocks: n = 10 has 3.6 million pairings
        sums = rb[perms[start:start + (1 << 18)]] @ ra
        extreme += int(np.count_nonzero(np.abs(sums) >= observed - slack))
    return extreme / len(perms)


def rank_correlation(df: pd.DataFrame, x: str, y: str) -> dict:
    """Spearman ρ of columns ``x`` and ``y`` over the rows where both are finite, with the 95%
    interval of Fisher's z with Bonett & Wright's (2000) standard error for Spearman's ρ,
    √((1 + ρ²/2) / (n − 3)), and the two-sided p-value of ρ ≠ 0: exact up to :data:`EXACT_MAX_N`
    rows (:func:`exact_rank_p`), Fisher's z beyond. NaN with fewer than 4 rows or a constant
    column."""
    pairs = df[[x, y]].apply(numeric).replace([np.inf, -np.inf], np.nan).dropna().to_numpy() \
        if {x, y} <= set(df.columns) else np.zeros((0, 2))
    n = len(pairs)
    out = {"x": x, "y": y, "n": n, "rho": np.nan, "low": np.nan, "high": np.nan}
    if n < 4 or np.ptp(pairs[:, 0]) == 0 or np.ptp(pairs[:, 1]) == 0:
        return out
    rho = float(stats.spearmanr(pairs[:, 0], pairs[:, 1]).statistic)
    z = np.arctanh(np.clip(rho, -0.9999, 0.9999))
    se = np.sqrt((1 + rho ** 2 / 2) / (n - 3))
    p = exact_rank_p(pairs[:, 0], pairs[:, 1]) if n <= EXACT_MAX_N else float(2 * stats.norm.sf(abs(z) / se))
    return {**out, "rho": rho, "low": float(np.tanh(z - 1.959964 * se)),
            "high": float(np.tanh(z + 1.959964 * se)), "p": p}


def stratified_rank_correlation(df: pd.DataFrame, x: str, y: str, by: str) -> dict:
    """Spearman ρ of ``x`` and ``y`` within each group of column ``by`` (groups of at least
    :data:`D21_MIN_GROUP` rows with both columns varying), combined by Fisher z weighted by n − 3,
    with the 95% interval of that weighted mean (each group's variance Bonett and Wright's,
    (1 + ρ²/2) / (n − 3)). ``sizes``: the groups' n; ``power``: :func:`stratified_power` at them."""
    out = {"x": x, "y": y, "n": 0, "rho": np.nan, "low": np.nan, "high": np.nan, "sizes": {},
           "power": 0.0}
    if by not in df.columns:
        return out
    weights, zs, variances, sizes = [], [], [], {}
    for group, part in df.groupby(by, observed=True, sort=True):
        row = rank_correlation(part, x, y)
        if row["n"] < D21_MIN_GROUP or np.isnan(row["rho"]):
            continue
        sizes[str(group)] = row["n"]
        weights.append(row["n"] - 3)
        zs.append(np.arctanh(np.clip(row["rho"], -0.9999, 0.9999)))
        variances.append((1 + row["rho"] ** 2 / 2) / (row["n"] - 3))
    out.update(sizes=sizes, n=int(sum(sizes.values())), power=stratified_power(list(sizes.values())))
    if not weights:
        return out
    w = np.asarray(weights, float)
    z = float(np.sum(w * np.asarray(zs)) / w.sum())
    se = float(np.sqrt(np.sum(w ** 2 * np.asarray(variances))) / w.sum())
    return {**out, "rho": float(np.tanh(z)), "low": float(np.tanh(z - 1.959964 * se)),
            "high": float(np.tanh(z + 1.959964 * se))}


def stratified_power(sizes, effect: float = D21_EFFECT) -> float:
    """The power of :func:`stratified_rank_correlation`'s 95% interval to exclude 0 (on the side of
    ``effect``) when every group's true ρ is ``effect``, groups of ``sizes`` (Fisher z, Bonett and
    Wright's variance): Φ(|atanh ρ| · √Σ(n − 3) / √(1 + ρ²/2) − 1.96)."""
    weight = sum(n - 3 for n in sizes if n >= D21_MIN_GROUP)
    if weight <= 0:
        return 0.0
    return float(stats.norm.cdf(abs(np.arctanh(effect)) * np.sqrt(weight / (1 + effect ** 2 / 2)) - 1.959964))


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
    """Per dataset and split, over the given trials: n, mean train, in-distribution and test NLL,
    the geometric mean of held-out NLL / in-distribution NLL with its 95% interval (t on the logs),
    whether reconstruction fails (interval above :data:`FAIL_RATIO`), stays close to in-distribution
    (below), is unclear or has no control, the test/train ratio as context, the rendering judge's
    numbers and the fewest held-out images a test NLL used."""
    rows = []
    for (dataset, split), part in _splits(df):
        rows.append({"dataset": dataset, "split": split, "condition": _condition(part),
                     **_ratio_row(part)})
    return pd.DataFrame(rows)


NO_CONTROL = "no control"
CLOSE = "close to in-distribution"


def _ratio_row(part: pd.DataFrame) -> dict:
    train, test = _numeric(part, "train_nll"), _numeric(part, "test_nll")
    control = _numeric(part, "in_distribution_nll")
    ratio, low, high = geometric_interval(test / control)
    context, context_low, context_high = geometric_interval(test / train)
    n = int(((test / control) > 0).sum())
    if n == 0:
        reconstruction = NO_CONTROL
    else:
        side = _side(low, high, FAIL_RATIO)
        reconstruction = {"above": "fails", "below": CLOSE}.get(side, "unclear")
    used = _numeric(part, "test_nll_images")
    control_images = _numeric(part, "in_distribution_nll_images")
    return {"n": n, "train_nll": train.mean(), "in_distribution_nll": control.mean(), "test_nll": test.mean(),
            "ratio": ratio, "low": low, "high": high, "reconstruction": reconstruction,
            "train_ratio": context, "train_low": context_low, "train_high": context_high,
            "test_images": float(used.min()) if used.notna().any() else np.nan,
            "control_images": float(control_images.min()) if control_images.notna().any() else np.nan,
            **_rendering(part)}


def _rendering(part: pd.DataFrame, judged: str = "judge_accuracy") -> dict:
    """The rendering judge's numbers over ``part``'s models: its accuracy on ground truth (the
    lowest), on held-out and on in-distribution renderings, the substitution share, and the
    per-model gap held-out − in-distribution with its t interval; ``rendering``: "below
    in-distribution" (gap interval below −:data:`RENDER_MARGIN`: a deficit larger than the margin),
    "as in-distribution" (above it: equivalent within the margin), "unclear" (one model, or an
    interval across the margin), "no judge" or "judge unreliable" (ground-truth accuracy under
    :data:`JUDGE_MIN_ACCURACY`). ``judged`` names the
    renderings: ``judge_accuracy``, the model's reconstructions (a ground-truth decoder's are its
    renderings of the true factor values); ``judge_decoder_accuracy``, the decoder of an end-to-end
    model fed the code each image should have (M22's decoder side)."""
    truth = _numeric(part, "judge_accuracy_ground_truth")
    held, inside = _numeric(part, f"{judged}_test"), _numeric(part, f"{judged}_in_distribution")
    gap, gap_low, gap_high = mean_interval(held - inside)
    judged = _numeric(part, "judge_images")
    if truth.notna().sum() == 0 or (held - inside).notna().sum() == 0:
        state = "no judge"
    elif truth.min() < JUDGE_MIN_ACCURACY - _ROUNDING:
        state = "judge unreliable"
    else:
        state = {"below": "below in-distribution", "above": AS_IN_DISTRIBUTION}.get(
            _side(gap_low, gap_high, -RENDER_MARGIN), "unclear")
    return {"judge_ground_truth": truth.min() if truth.notna().any() else np.nan,
            "judge_test": held.mean(), "judge_in_distribution": inside.mean(),
            "substitution": _numeric(part, "judge_substitution_share").mean(),
            "render_gap": gap, "render_low": gap_low, "render_high": gap_high, "rendering": state,
            "judge_images": float(judged.min()) if judged.notna().any() else np.nan}


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


TRUE_CODE = "renderings of the true code"


def _judge_text(row: dict, prefix: str = "", what: str = "reconstructions") -> str:
    """The rendering judge's numbers, as a clause: of the reconstructions, or with ``prefix``
    "decoder_", of the decoder fed the true code (:func:`_rendering`'s ``judged``)."""
    value = lambda key: row[prefix + key]  # noqa: E731
    if value("rendering") == "no judge":
        return "no rendering judge"
    return (f"rendering judge: ground truth read right {row['judge_ground_truth']:.2f}"
            + (f" (under {JUDGE_MIN_ACCURACY:g}: unreliable)" if value("rendering") == "judge unreliable"
               else "")
            + f", held-out {what} {value('judge_test'):.2f}, in-distribution "
              f"{value('judge_in_distribution'):.2f} (gap "
            + _interval(value("render_gap"), value("render_low"), value("render_high"), 2)
            + f": {value('rendering')}), substituted a seen value "
            + ("n/a" if np.isnan(value("substitution")) else f"{value('substitution'):.2f}"))


def _ratio_text(row: dict, expected: str) -> str:
    observed = row["reconstruction"]
    few = "" if np.isnan(row["test_images"]) else f", {int(row['test_images'])} held-out images"
    if observed == NO_CONTROL:
        ratio = "no in-distribution NLL"
    else:
        ratio = _interval(row["ratio"], row["low"], row["high"], 2, "×")
    return (f"{ratio} under {CONDITION_NAMES.get(row['condition'], row['condition'])} "
            f"({row['dataset']}/{row['split']}, n = {row['n']} of {row['models']}{few}: {observed}"
            + ("" if observed == expected else f"; the paper: {expected}")
            + f"; context, held-out / training NLL {_context(row)}"
            + f"; {_judge_text(row)}"
            + ("" if row["precondition"] == MET else f"; ? {_untested(row)}") + ")")


def _context(row: dict) -> str:
    return _interval(row["train_ratio"], row["train_low"], row["train_high"], 2, "×")


def _unjudgeable(row: dict) -> str:
    """Why a split's reconstruction cannot be judged ("" when it can)."""
    if row["precondition"] != MET:
        return "precondition"
    if row["reconstruction"] == NO_CONTROL:
        return "no in-distribution control (in_distribution_nll): the bare training ratio decides nothing"
    if row["rendering"] == "judge unreliable":
        return (f"the rendering judge reads ground truth right only {row['judge_ground_truth']:.2f} of the "
                f"time (under {JUDGE_MIN_ACCURACY:g})")
    return ""


def _ratio_verdict(row: dict, expected: str) -> str:
    if _unjudgeable(row):
        return "unclear"  # the split did not test the claim: never ✓ or ✗
    observed = row["reconstruction"]
    return "agrees" if observed == expected else "unclear" if observed == "unclear" else "contradicts"


def _finish(study, source, paper, status, result, checked, extra, precondition_text=PRECONDITION_RULE,
            note="") -> Finding:
    readout = [r for row in checked for r in row.pop("readout", [])]
    return Finding(study, source, paper, status, result, _shown(pd.DataFrame(checked), extra),
                   precondition_text, _precondition_summary(checked), _readout_table(readout), note)


def _why_not(rows: list[dict]) -> str:
    """The reasons, other than the precondition, that splits were not judged, as a sentence."""
    reasons = [f"{r['dataset']}/{r['split']}: {_unjudgeable(r)}" for r in rows
               if _unjudgeable(r) not in ("", "precondition")]
    return (" ? " + "; ".join(reasons) + ".") if reasons else ""


RATIO_RULE = (f"held-out NLL / in-distribution NLL (NLL on unseen images of training combinations), "
              f"geometric mean over the models that learned the split's factors with its 95% t interval "
              f"on the logs; a split fails when the interval lies above {FAIL_RATIO:g}× and reconstructs "
              f"like in-distribution images when it lies below")


@finished_only
def m21_held_out(df: pd.DataFrame) -> Finding:
    splits = _tested_splits(_task_trials(df, "vae"), (*FAILING_CONDITIONS, "recombination_to_element"))
    verdicts, parts, checked = [], [], []
    for row, _ in splits:
        expected = "fails" if row["condition"] in FAILING_CONDITIONS else CLOSE
        row["paper"], row["verdict"] = expected, _ratio_verdict(row, expected)
        verdicts.append(row["verdict"])
        parts.append(_ratio_text(row, expected))
        checked.append(row)
    if not parts:
        status = INCONCLUSIVE
        result = "No trials on an extrapolation, recombination-to-range or recombination-to-element split."
    else:
        conditions = {r["condition"] for r in checked if not _unjudgeable(r)}
        both = bool(conditions & set(FAILING_CONDITIONS)) and "recombination_to_element" in conditions
        status = _overall(verdicts)
        if status == REPRODUCED and not both:
            status = INCONCLUSIVE
        result = ("End-to-end models, " + RATIO_RULE + ": " + "; ".join(parts) + "."
                  + ("" if both else " Both kinds of split, each with its precondition met and its control, "
                                     "are needed to show the contrast.") + _why_not(checked))
    return _finish("Montero et al. 2021", "§2.1, Fig. 3",
                   "End-to-end models reconstruct held-out combinations under recombination-to-element, but "
                   "fail under recombination-to-range and extrapolation: their held-out NLL is far above "
                   "what they reach on unseen images of the combinations they trained on.", status, result,
                   checked, ["paper", "verdict", "precondition"])


DECODER_PRECONDITION = (
    "A ground-truth decoder tests a split only if it learned to render, on its training images, every "
    "factor the split's rule names: decoding a training image with each value of the factor (the others "
    "kept), the value that best explains the image is read out, and scored as an encoder's readout is "
    f"(a categorical factor's accuracy at least halfway from chance to 1; an ordinal or circular factor's "
    f"R² at least {R2_BAR:g}). A split's numbers are over the decoders that learned its factors; with "
    f"fewer than {MIN_TESTED} it gets ?, never ✓ or ✗.")


def _decoder_state(row: dict) -> str:
    """A ground-truth decoder split: "fails" when its ratio interval lies above the bar or the judge
    reads the rule's factors on held-out renderings below in-distribution (gap interval below 0);
    "holds" when the ratio lies below the bar and the rendering reads as in-distribution (its gap
    interval above −:data:`RENDER_MARGIN`); "unclear" otherwise
    (without a judge, a ratio below the bar cannot rule out the substitution the NLL misses)."""
    if _unjudgeable(row):
        return "unclear"
    if row["reconstruction"] == "fails" or row["rendering"] == "below in-distribution":
        return "fails"
    if row["reconstruction"] == CLOSE and row["rendering"] == AS_IN_DISTRIBUTION:
        return "holds"
    return "unclear"


@finished_only
def m21_ground_truth_decoder(df: pd.DataFrame) -> Finding:
    splits = _tested_splits(_task_trials(df, "ground_truth_decoder"),
                            (*FAILING_CONDITIONS, "recombination_to_element"))
    verdicts, parts, checked, controls = [], [], [], []
    for row, _ in splits:
        failing = row["condition"] in FAILING_CONDITIONS
        row["decoder"] = _decoder_state(row)
        row["paper"] = "fails" if failing else "holds (the control)"
        if failing:
            row["verdict"] = {"fails": "agrees", "holds": "contradicts"}.get(row["decoder"], "unclear")
            verdicts.append(row["verdict"])
        else:
            row["verdict"] = {"holds": "control holds", "fails": "control fails"}.get(row["decoder"],
                                                                                       "control unclear")
            controls.append(row["verdict"])
        parts.append(_ratio_text(row, "fails" if failing else CLOSE) + f" → {row['decoder']}")
        checked.append(row)
    tested = {r["condition"] for r in checked if r["verdict"] == "agrees"}
    if not verdicts:
        status = INCONCLUSIVE
        result = "No ground-truth decoder trials on an extrapolation or recombination-to-range split."
    else:
        status = _overall(verdicts)
        both = set(FAILING_CONDITIONS) <= tested
        control = bool(controls) and all(c == "control holds" for c in controls)
        if status == REPRODUCED and not (both and control):
            status = INCONCLUSIVE
        why = []
        if not both:
            why.append("an extrapolation and a recombination-to-range split, each failing with its "
                       "precondition met, are needed for ✓")
        if not controls:
            why.append("no recombination-to-element control split in these results: a failure on the others "
                       "cannot be told from a decoder that fails everywhere")
        elif not control:
            why.append("the recombination-to-element control does not hold ("
                       + ", ".join(sorted(set(controls))) + "): the failure is not shown to be the held-out "
                       "combinations'")
        result = ("Ground-truth decoders, " + RATIO_RULE + "; a failing split also fails when the rendering "
                  "judge reads the rule's factors on held-out renderings below in-distribution (per-decoder "
                  "gap, 95% t interval below 0), and the control holds when its ratio lies below the bar and "
                  f"its rendering reads as in-distribution (gap interval above −{RENDER_MARGIN:g}): "
                  + "; ".join(parts) + "."
                  + "".join(f" ? {w}." for w in why) + _why_not(checked))
    return _finish("Montero et al. 2021", "§2.1, Fig. 2 to 4, appendix B",
                   "Perfectly disentangled codes do not rescue generalisation: the ground-truth decoder, fed "
                   "the true factor values, still fails to render held-out combinations under "
                   "recombination-to-range and extrapolation (often drawing a shape seen in training "
                   "instead), while recombination-to-element is solved.", status, result, checked,
                   ["paper", "decoder", "verdict", "precondition"], DECODER_PRECONDITION)


def _configuration_means(tested: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One row per configuration (every setting but the seed, as
    :func:`analysis.aggregate.configurations` groups them): the mean ``metric`` over its seeds and
    the geometric mean of its generalisation gap, held-out NLL / in-distribution NLL (a mean of logs;
    rank correlation is blind to the log)."""
    from analysis.aggregate import configuration_columns

    gap = np.log(_numeric(tested, "test_nll") / _numeric(tested, "in_distribution_nll"))
    frame = pd.DataFrame({metric: _numeric(tested, metric), "log_gap": gap.where(np.isfinite(gap))},
                         index=tested.index)
    codes = np.zeros(len(tested), dtype=np.int64)
    for column in configuration_columns(tested):  # one integer per configuration
        values, _ = pd.factorize(tested[column].astype(object), use_na_sentinel=False)
        codes = np.unique(codes * (int(values.max()) + 1 if len(values) else 1) + values,
                          return_inverse=True)[1].astype(np.int64)  # renumbered: never overflows
    group = codes
    count = np.bincount(group, minlength=group.max() + 1 if len(group) else 0)

    def mean(values):  # the mean over each configuration's seeds, NaN where none is finite
        finite = np.isfinite(values)
        total = np.bincount(group, np.where(finite, values, 0.0), minlength=len(count))
        n = np.bincount(group, finite.astype(float), minlength=len(count))
        return np.divide(total, n, out=np.full(len(count), np.nan), where=n > 0)

    return pd.DataFrame({metric: mean(frame[metric].to_numpy(float)),
                         "generalisation_gap": np.exp(mean(frame["log_gap"].to_numpy(float))),
                         "seeds": count})


@finished_only
def m21_disentanglement(df: pd.DataFrame) -> Finding:
    df = _task_trials(df, "vae")
    metric = next((m for m in ("d_score", "dci_disentanglement") if _numeric(df, m).notna().any()), None)
    rows = []
    for (dataset, split), part in _splits(df) if metric else ():
        check = split_precondition(part, dataset, split)
        tested = part[check.tested]
        means = _configuration_means(tested, metric)
        control = bool(_numeric(tested, "in_distribution_nll").notna().any())
        row = {"dataset": dataset, "split": split, "condition": _condition(part), "models": len(part),
               "configurations": len(means), **rank_correlation(means, metric, "generalisation_gap")}
        row.setdefault("p", np.nan)
        row.update(control=control, precondition=check.state, precondition_reason=check.reason,
                   readout=[{"dataset": dataset, "split": split, **r} for r in check.rows])
        row["eligible"] = (check.state == MET and control and row["n"] >= MIN_MODELS
                           and not np.isnan(row["low"]))
        rows.append(row)
    # Holm's correction across the splits that can give a verdict: one split in six crossing 0 by
    # chance is no contradiction
    rejected = holm([r["p"] if r["eligible"] else np.nan for r in rows])
    verdicts = []
    for row, reject in zip(rows, rejected):
        row["holm_rejects"] = reject
        if not row["eligible"]:
            verdict = "unclear"  # untested, no control, or too few configurations for any verdict
        elif reject:
            verdict = "contradicts"
        elif row["n"] >= NULL_MIN_MODELS and row["low"] > -NULL_BOUND and row["high"] < NULL_BOUND:
            verdict = "agrees"
        else:
            verdict = "unclear"
        row["verdict"] = verdict
        verdicts.append(verdict)
    if not rows:
        status, result = INCONCLUSIVE, "No disentanglement score (d_score or dci) in the results."
    else:
        status = _overall(verdicts)
        tests = sum(r["eligible"] for r in rows)
        result = (f"Spearman ρ of {metric} against the generalisation gap (held-out NLL / in-distribution "
                  "NLL), over configurations (each the mean over its seeds of the models that learned the "
                  "split's factors; n = configurations), 95% interval (Fisher z): "
                  + "; ".join(f"{r['dataset']}/{r['split']} {_rho(r)}"
                              + ("" if np.isnan(r["p"]) else f", p = {r['p']:.3f}")
                              + ("" if r["precondition"] == MET else f" (? {_untested(r)})")
                              + ("" if r["control"] or r["precondition"] != MET
                                 else " (? no in-distribution control)")
                              + (f" (fewer than the {NULL_MIN_MODELS} configurations the null needs)"
                                 if r["eligible"] and r["verdict"] == "unclear"
                                 and r["n"] < NULL_MIN_MODELS else "") for r in rows)
                  + f". Reproduced where the interval lies inside (−{NULL_BOUND:g}, +{NULL_BOUND:g}) with "
                  f"at least {NULL_MIN_MODELS} configurations (no strong dependence either way); not "
                  f"reproduced where ρ ≠ 0 survives Holm's correction across the {tests} split(s) tested "
                  f"(family-wise {NULL_ALPHA:g}); inconclusive otherwise.")
    return _finish("Montero et al. 2021", "§2.1, Fig. 3",
                   "How well a model generalises does not depend on how disentangled it is: the "
                   "generalisation gap does not follow the D-score.", status, result, rows,
                   ["configurations", "p", "holm_rejects", "verdict", "precondition"])


def m22_models(df: pd.DataFrame) -> pd.Series:
    """True for the rows of M22's own models: CompositionNets (task ``composition``), CascadeVAE and
    LieGroupVAE (objectives ``cascade_vae``, ``lie_group_vae``). VAE, β-VAE and WAE rows are not."""
    task = df["task"].astype(object) if "task" in df.columns else pd.Series(None, index=df.index)
    objective = (df["objective"].astype(object) if "objective" in df.columns
                 else pd.Series(None, index=df.index))
    return task.isin(M22_TASKS) | (objective.isin(M22_OBJECTIVES) & (task.isna() | (task == "vae")))


def _m22_label(part: pd.DataFrame) -> pd.Series:
    task = part["task"].astype(object) if "task" in part.columns else pd.Series(None, index=part.index)
    objective = part["objective"].astype(object) if "objective" in part.columns else task
    return task.where(task.isin(M22_TASKS), objective).fillna("model").astype(str)


def _share_side(low: float) -> bool:
    return not np.isnan(low) and low > 0.5


def encoder_snap_test(part: pd.DataFrame) -> dict:
    """M22's encoder on held-out images, pooled over ``part``'s models: the share of held-out images
    whose readout of every rule factor lies nearer the true value than the snap (the nearest value
    seen in training, the other factors fixed), the share nearer the snap, each with its Wilson 95%
    interval. "holds" when the nearer-truth interval lies above 0.5, "fails" when the nearer-snap
    interval does, "unclear" otherwise, and also when two models' own intervals point opposite ways
    (pooling would hide that the models disagree); "not measured" without counts."""
    truth, snap = _numeric(part, "encoder_nearer_truth"), _numeric(part, "encoder_nearer_snap")
    images = _numeric(part, "encoder_snap_images")
    measured = images.notna() & (images > 0) & truth.notna() & snap.notna()
    k_truth, k_snap = float(truth[measured].sum()), float(snap[measured].sum())
    n = float(images[measured].sum())
    share, low, high = wilson_interval(k_truth, n)
    snap_share, snap_low, snap_high = wilson_interval(k_snap, n)
    out = {"encoder_images": int(n), "nearer_truth": share, "truth_low": low, "truth_high": high,
           "nearer_snap": snap_share, "snap_low": snap_low, "snap_high": snap_high,
           "encoder_models": int(measured.sum())}
    if not measured.any():
        return {**out, "encoder": "not measured"}
    own = {("holds" if _share_side(wilson_interval(t, m)[1])
            else "fails" if _share_side(wilson_interval(s, m)[1]) else "unclear")
           for t, s, m in zip(truth[measured], snap[measured], images[measured])}
    state = "holds" if _share_side(low) else "fails" if _share_side(snap_low) else "unclear"
    if {"holds", "fails"} <= own:
        state = "unclear"  # the models disagree
    return {**out, "encoder": state}


def _decoder_side(rendering: str) -> str:
    return {"below in-distribution": "fails", AS_IN_DISTRIBUTION: "holds"}.get(rendering, "unclear")


def _m22_row(dataset: str, split: str, part: pd.DataFrame, evidence: bool) -> tuple[dict, pd.DataFrame]:
    check = split_precondition(part, dataset, split)
    tested = part[check.tested]
    row = {"dataset": dataset, "split": split, "condition": _condition(part), "models": len(part),
           "evidence": "M22 models" if evidence else "context",
           "kinds": ", ".join(sorted(set(_m22_label(part)))), **_ratio_row(tested),
           **encoder_snap_test(tested),
           "precondition": check.state, "precondition_reason": check.reason,
           "readout": [{"dataset": dataset, "split": split, **r} for r in check.rows] if evidence else []}
    # the decoder fed the true code, not the reconstructions (which carry the encoder's error too)
    decoder = _rendering(tested, "judge_decoder_accuracy")
    row.update({f"decoder_{k}": v for k, v in decoder.items() if k != "judge_ground_truth"})
    row["decoder"] = _decoder_side(decoder["rendering"])
    enc, dec = row["encoder"], row["decoder"]
    row["diagnosis"] = ("both" if enc == dec == "fails" else "encoder" if enc == "fails" and dec == "holds"
                        else "decoder" if dec == "fails" and enc == "holds"
                        else "neither fails" if enc == dec == "holds" else "unclear")
    row["verdict"] = "context" if not evidence else ""
    if evidence and row["reconstruction"] == "fails" and not _unjudgeable(row):
        # the encoder fails: the paper's finding; the encoder holds while the decoder fails: against it;
        # neither fails (or either side unclear): no verdict
        row["verdict"] = ("agrees" if enc == "fails" else "contradicts" if enc == "holds" and dec == "fails"
                          else "unclear")
    return row, tested


def _nll_levels(r: dict) -> str:
    """The mean NLLs the ratios divide (nats an image): a ratio near 1 between NLLs that are all
    high says the models reconstruct nothing, not that they generalise."""
    levels = [(name, r.get(key)) for name, key in (("held-out", "test_nll"), ("in-distribution",
                                                   "in_distribution_nll"), ("training", "train_nll"))]
    shown = [f"{value:.0f} {name}" for name, value in levels if value is not None and np.isfinite(value)]
    return "mean NLL " + ", ".join(shown) + " nats" if shown else "no NLL recorded"


def _m22_text(r: dict) -> str:
    encoder = ("encoder not measured" if r["encoder"] == "not measured" else
               f"encoder {r['encoder']} (nearer the truth in "
               f"{_interval(r['nearer_truth'], r['truth_low'], r['truth_high'], 2)}, nearer the snap in "
               f"{_interval(r['nearer_snap'], r['snap_low'], r['snap_high'], 2)} of {r['encoder_images']} "
               f"held-out images, {r['encoder_models']} model(s))")
    return (f"{r['dataset']}/{r['split']} [{r['kinds']}]: reconstruction {r['reconstruction']} ("
            + (_interval(r["ratio"], r["low"], r["high"], 2, "×") if r["reconstruction"] != NO_CONTROL
               else "no in-distribution NLL")
            + f" of in-distribution; context, of training {_context(r)}; {_nll_levels(r)})"
            + f", {encoder}, decoder {r['decoder']} ({_judge_text(r, 'decoder_', TRUE_CODE)}), "
              f"diagnosis {r['diagnosis']}, n = {r['n']} of {r['models']}"
            + ("" if r["precondition"] == MET else f"; ? {_untested(r)}"))


@finished_only
def m22_diagnosis(df: pd.DataFrame) -> Finding:
    own = m22_models(df)
    rows, context_rows = [], []
    for (dataset, split), part in _splits(df[own]):
        if _condition(part) in CONDITION_NAMES:
            rows.append(_m22_row(dataset, split, part, True)[0])
    for (dataset, split), part in _splits(_task_trials(df[~own], "vae")):
        if _condition(part) in CONDITION_NAMES:
            context_rows.append(_m22_row(dataset, split, part, False)[0])
    verdicts = [r["verdict"] for r in rows if r["verdict"]]
    tested = len(verdicts)
    measured = bool(_numeric(df[own], "encoder_snap_images").notna().any())
    if not rows:
        status = INCONCLUSIVE
        result = ("No trials of M22's own models (CompositionNet, CascadeVAE, LieGroupVAE) in the results: "
                  "VAE, β-VAE and WAE rows are context, never the finding's evidence.")
    elif not measured:
        status = INCONCLUSIVE
        result = ("No encoder snap counts in the results (encoder_nearer_truth, encoder_nearer_snap, "
                  "encoder_snap_images): the encoder is not tested.")
    else:
        status = _overall(verdicts)
        if status == REPRODUCED and tested < 2:
            status = INCONCLUSIVE
        learned = [r for r in rows if r["precondition"] == MET]
        result = ("M22's models, per split: " + "; ".join(_m22_text(r) for r in rows)
                  + f". {tested} split(s) fail to reconstruct with the precondition met and a control"
                  + ("" if tested >= 2 else "; at least two are needed for ✓")
                  + (f". ? No M22 model learned the factors of any split: {_precondition_summary(rows)}"
                     if not learned else "")
                  + ". Reconstruction: " + RATIO_RULE + ". The encoder holds when it is nearer the true "
                  "value than the snap in significantly more than half of the held-out images (Wilson 95% "
                  "interval above 0.5, pooled over the M22 models of the split), fails when nearer the snap "
                  "in significantly more than half; the decoder, fed the true code, fails when the rendering "
                  "judge reads held-out renderings below in-distribution. A split agrees when its encoder "
                  "fails, contradicts only when the encoder holds and the decoder fails; neither failing "
                  "is ?."
                  + _why_not(rows))
    if context_rows:
        result += (" Context, not evidence (models M22 did not use): "
                   + "; ".join(_m22_text(r) for r in context_rows) + ".")
    return _finish("Montero et al. 2022", "abstract, finding (i)",
                   "When models fail to reconstruct unseen combinations, their encoders also fail: they do "
                   "not map the unseen combinations to the right region of the latent space.",
                   status, result, rows + context_rows,
                   ["evidence", "kinds", "nearer_truth", "truth_low", "truth_high", "nearer_snap", "snap_low",
                    "snap_high", "encoder_images", "encoder", "rendering", "decoder", "diagnosis", "verdict",
                    "precondition"],
                   PRECONDITION_RULE + " Here it decides, on M22's own models, every split that fails to "
                                       "reconstruct.")


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


def _stratified_verdict(row: dict) -> str:
    if row["power"] < D21_POWER - _ROUNDING or np.isnan(row["low"]):
        return "unclear"
    return "agrees" if row["high"] < 0 else "contradicts" if row["low"] > D21_NO_EFFECT else "unclear"


def _sizes(sizes: dict) -> str:
    return ", ".join(f"{g} n = {n}" for g, n in sizes.items()) or "no group of 4 or more models"


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
    if "supervision" not in tested.columns:
        tested = tested.assign(supervision="none")
    readout = [{"dataset": "all", "split": "all", **r} for r in check.rows]
    rows, verdicts = [], []
    for score in scores:
        label = {"readout": score.split("_")[1], "scenario": score.split("_", 2)[2].upper().replace("_", "-")}
        stratified = stratified_rank_correlation(tested, "dci_disentanglement", score, "supervision")
        row = {**label, "group": "within groups", **{k: v for k, v in stratified.items() if k != "sizes"},
               "groups": _sizes(stratified["sizes"])}
        judged = label["readout"] == "gbt"
        row["verdict"] = (_stratified_verdict(row) if check.state == MET else "unclear") if judged else ""
        pooled = {**label, "group": "pooled", "verdict": "", **rank_correlation(tested, "dci_disentanglement",
                                                                                  score)}
        rows += [row, pooled]
        if judged:
            verdicts.append(row["verdict"])
        for group, part in tested.groupby("supervision", observed=True, sort=True):
            rows.append({**label, "group": str(group), "verdict": "",
                         **rank_correlation(part, "dci_disentanglement", score)})
    table = pd.DataFrame(rows)
    held = (f"OOD1 factor {factor}: {check.state} ({check.reason})" if factor
            else f"OOD1 factor: {check.state}")
    gbt = [r for r in rows if r["readout"] == "gbt" and r["group"] == "within groups"]
    pooled = {r["scenario"]: r for r in rows if r["readout"] == "gbt" and r["group"] == "pooled"}
    note = ""
    gap_only = [r["scenario"] for r in gbt if pooled[r["scenario"]]["high"] < 0 and r["verdict"] != "agrees"]
    if gap_only:
        note = (f"Under {_join(gap_only)} the pooled ρ lies below 0 but the within-group ρ does not "
                "decide: the pooled correlation may come from the difference between the supervision "
                "groups (Ada-GVAE more disentangled and better at transfer) rather than from "
                "disentanglement within either.")
    if not verdicts:
        status = INCONCLUSIVE
        result = "No DCI and GBT OOD1 transfer scores in the results (metrics dci, transfer)."
    else:
        status = _overall(verdicts)
        strat = lambda r: (f"{r['scenario']} within groups {_rho(r)} ({r['groups']}; power "  # noqa: E731
                           f"{r['power']:.2f}), pooled {_rho(pooled[r['scenario']])}")
        result = ("Spearman ρ of DCI disentanglement against OOD1 transfer error (GBT readout) within each "
                  "supervision group, combined by Fisher z weighted by n − 3, over the "
                  f"{len(tested)} models that learned the OOD1 factor (of {len(models)}), 95% interval; the "
                  "pooled ρ beside it: " + "; ".join(strat(r) for r in gbt))
        mlp = [r for r in rows if r["readout"] == "mlp" and r["group"] == "within groups"]
        mlp_pooled = {r["scenario"]: r for r in rows if r["readout"] == "mlp" and r["group"] == "pooled"}
        result += ("; MLP readout (D21: milder; shown, not judged): "
                   + "; ".join(f"{r['scenario']} within groups {_rho(r)}, "
                               f"pooled {_rho(mlp_pooled[r['scenario']])}" for r in mlp)
                   if mlp else "; no MLP readout in these results")
        result += (". The verdict is the GBT readout's: reproduced where the within-group interval lies "
                   f"below 0, not reproduced where it lies above {D21_NO_EFFECT:g} (no correlation as "
                   "negative as that).")
        power = min(r["power"] for r in gbt)
        if check.state != MET:
            result += f" ? Not tested: {check.reason}."
        elif power < D21_POWER - _ROUNDING:
            result += (f" ? The supervision groups ({gbt[0]['groups']}) give the within-group rule a "
                       f"power of {power:.2f} to detect a within-group ρ of {D21_EFFECT:g} (it needs "
                       f"{D21_POWER:g}: about {D21_GROUP_MODELS} models in each of two groups).")
    return Finding("Dittadi et al. 2021", "§5, Fig. 4",
                   "More disentangled representations transfer better out of distribution when the encoder "
                   "stays in distribution (OOD1): DCI correlates negatively with the transfer error, "
                   "strongly for GBT readouts and mildly for MLPs.", status, result,
                   _shown(table, ["group", "groups", "power", "verdict"]), D21_PRECONDITION, held + ".",
                   _readout_table(readout), note,
                   points=tested[[c for c in ("supervision", "objective", "dci_disentanglement", *scores)
                                  if c in tested.columns]].reset_index(drop=True))


def _shown(table: pd.DataFrame, extra: list[str]) -> pd.DataFrame:
    """The table as the report shows it: numbers rounded, the columns that matter first."""
    if table.empty:
        return table
    order = [c for c in ("dataset", "split", "condition", "readout", "scenario", "group", "models", "n",
                         "train_nll", "in_distribution_nll", "test_nll", "ratio", "low", "high",
                         "reconstruction",
                         "train_ratio", "train_low", "train_high", "test_images", "control_images",
                         "judge_ground_truth", "judge_test", "judge_in_distribution", "substitution",
                         "render_gap", "render_low", "render_high", "rendering", "judge_images",
                         "x", "y", "rho") if c in table.columns]
    shown = table[order + [c for c in extra if c in table.columns and c not in order]].copy()
    for column in shown.columns:
        if column in ("models", "n", "test_images", "control_images", "judge_images", "encoder_images"):
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
            for check in checks:
                found = check(part)
                found.name = check.__name__
                out.append(found)
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
