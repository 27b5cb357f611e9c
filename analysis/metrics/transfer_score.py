"""Transfer scores (Dittadi et al., 2021): how well a readout trained on codes predicts the factors
under a distribution shift.

Factors are normalised to [0, 1] (by ``factor_ranges`` or by their range over all given samples).
One regressor per factor predicts the factor from the codes; the score is its mean absolute error
on the shifted test set, averaged over the factors *except* the OOD factor. Lower is better. The
regressors, as in the paper: ``"gbt"`` (``GradientBoostingRegressor`` defaults) and ``"mlp"``
(``MLPRegressor(hidden_layer_sizes=(256, 256))`` on codes standardised with the statistics of all
the in-distribution codes, one BLAS thread); docs/analysis.md, "Metrics", says why.

The scenarios (D21 §5), for an OOD factor with ordered values v_0 < … < v_{m−1}: OOD1 (all codes
from the encoder's training images, regressors trained and tested on disjoint values of the OOD
factor): ``ood1_a`` trains on v_0 and tests on the rest, ``ood1_b`` trains on the upper half and
tests on the lower half, ``ood1_c`` trains on v_0, v_2, … and tests on v_1, v_3, …; OOD2: trained
on codes of the encoder's training images, tested on codes of images it never saw (``codes_ood2``,
``factors_ood2``; in disgen the held-out condition's test images). D21's own OOD2 scenarios test the
same regressors on other datasets (``ood2_sets``): ``ood2_a`` simulated images of colours the
encoder never saw (``finger_heldout_colors``), ``ood2_b`` real images (``finger_real``: sim to
real); their average leaves out the OOD factor, whose classes are another set's.

The OOD factor's values are ordered by ``ood1_values`` where given (each sample's key: the HSV hue
of D21's robot-finger colours, whose class numbers are not in hue order), else by its classes.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPRegressor
from threadpoolctl import threadpool_limits

from analysis.metrics._checks import check_pair, check_test_pair
from data_pipeline.splits.rules import RandomCombinations

__all__ = ["transfer_score", "readout_mae", "readout_maes", "ood1_scenarios", "REGRESSORS", "OOD2_SETS"]

REGRESSORS = ("gbt", "mlp")
# D21's two OOD2 scenarios on datasets of their own (the trial's settings ood2_a_dataset, ood2_b_dataset)
OOD2_SETS = ("ood2_a", "ood2_b")


def ood1_scenarios(ood_values):
    """Boolean (train, test) masks over samples for OOD1-A/B/C, given each sample's value of the
    OOD factor; a scenario that would leave a side empty is omitted."""
    ood_values = np.asarray(ood_values)
    values = np.unique(ood_values)
    m = values.size
    chosen = {"ood1_a": (values[:1], values[1:]), "ood1_b": (values[m // 2 :], values[: m // 2]),
              "ood1_c": (values[0::2], values[1::2])}
    scenarios = {}
    for name, (train_values, test_values) in chosen.items():
        if train_values.size and test_values.size:
            scenarios[name] = (np.isin(ood_values, train_values), np.isin(ood_values, test_values))
    return scenarios


def _regressor(kind, seed):
    if kind == "gbt":
        return GradientBoostingRegressor(random_state=seed)
    return MLPRegressor(hidden_layer_sizes=(256, 256), random_state=seed)


def readout_mae(codes, factors, codes_test, factors_test, *, regressor="gbt", random_state=0,
                standardise_by=None):
    """MAE per factor of one regressor per factor, trained on (codes, factors) and scored on the
    test arrays. Factors must already be normalised. Returns an array of shape (n_factors,). A factor
    that is constant on the training set is predicted as that constant. The MLP's codes are
    standardised with the statistics of ``standardise_by`` (default: ``codes``)."""
    return readout_maes(codes, factors, [(codes_test, factors_test)], regressor=regressor,
                        random_state=random_state, standardise_by=standardise_by)[0]


def readout_maes(codes, factors, tests, *, regressor="gbt", random_state=0, standardise_by=None):
    """:func:`readout_mae` on several test sets ``tests`` [(codes_test, factors_test), …] from one fit
    of the regressors: one array of MAEs per factor for each test set."""
    if regressor not in REGRESSORS:
        raise ValueError(f"regressor must be one of {REGRESSORS}; got {regressor!r}.")
    tests = list(tests)
    if regressor == "mlp":
        reference = codes if standardise_by is None else standardise_by
        mean, scale = reference.mean(axis=0), reference.std(axis=0)
        scale[scale == 0] = 1.0
        codes = (codes - mean) / scale
        tests = [((codes_test - mean) / scale, factors_test) for codes_test, factors_test in tests]
    seeds = np.random.default_rng(random_state).integers(0, 2**31 - 1, factors.shape[1])
    errors = [np.zeros(factors.shape[1]) for _ in tests]
    for j in range(factors.shape[1]):
        model = None
        if np.ptp(factors[:, j]) != 0:
            model = _regressor(regressor, int(seeds[j]))
            # One BLAS thread: a sweep's trial holds one core, and the MLP's matrix products on
            # small batches only lose time to threads that compete for busy cores.
            with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="blas"):
                warnings.simplefilter("ignore", category=ConvergenceWarning)
                model.fit(codes, factors[:, j])
        for k, (codes_test, factors_test) in enumerate(tests):
            prediction = (np.full(codes_test.shape[0], factors[0, j]) if model is None
                          else model.predict(codes_test))
            errors[k][j] = np.mean(np.abs(prediction - factors_test[:, j]))
    return errors


def transfer_score(codes, factors, *, ood_factor=None, codes_ood2=None, factors_ood2=None,
                   regressors=REGRESSORS, factor_ranges=None, ood2_excluded=None, min_train=10,
                   random_state=0, ood1_values=None, ood2_sets=None):
    """D21's transfer scores of ``codes`` (n_samples, n_codes), the encoder's training images, with
    ``factors`` (n_samples, n_factors) as numbers. ``ood_factor`` (a column) defines OOD1-A/B/C
    (None: no OOD1), its values ordered by ``ood1_values`` (n_samples,) where given; ``codes_ood2``,
    ``factors_ood2`` (images the encoder never saw) give OOD2, whose average leaves out
    ``ood2_excluded`` (default: ``ood_factor``). ``ood2_sets`` {scenario: (codes, factors)}: more
    sets the encoder never saw (D21's ``ood2_a``, ``ood2_b``), tested with the same regressors (one
    fit for all), each average leaving out ``ood_factor``. ``factor_ranges`` (n_factors, 2)
    normalises the factors (default: their range over all samples); constant factors are left out.
    Returns ``"transfer_<regressor>_<scenario>"`` (mean MAE, lower is better) and
    ``"n_factors_scored"``."""
    codes, factors = check_pair(codes, factors, discrete=False)
    codes_ood2, factors_ood2 = check_test_pair(codes, factors, codes_ood2, factors_ood2, discrete=False)
    ood2_sets = {name: check_test_pair(codes, factors, *pair, discrete=False)
                 for name, pair in (ood2_sets or {}).items()}
    unknown = set(regressors) - set(REGRESSORS)
    if unknown or not regressors:
        raise ValueError(f"regressors must be a non-empty subset of {REGRESSORS}; got {regressors!r}.")
    n_factors = factors.shape[1]
    column = isinstance(ood_factor, (int, np.integer)) and 0 <= ood_factor < n_factors
    if ood_factor is not None and not column:
        raise ValueError(f"ood_factor must be a column index of factors (0..{n_factors - 1}); "
                         f"got {ood_factor!r}.")
    if ood_factor is None and codes_ood2 is None and not ood2_sets:
        raise ValueError("Give ood_factor (for OOD1), or codes_ood2 and factors_ood2 (for OOD2), or both.")

    everything = np.vstack([factors, *([] if factors_ood2 is None else [factors_ood2]),
                            *(f for _, f in ood2_sets.values())])
    if factor_ranges is None:
        low, high = everything.min(axis=0), everything.max(axis=0)
    else:
        ranges = np.asarray(factor_ranges, dtype=float)
        if ranges.shape != (n_factors, 2):
            raise ValueError(f"factor_ranges must have shape ({n_factors}, 2); got {ranges.shape}.")
        low, high = ranges[:, 0], ranges[:, 1]
    width = high - low
    varying = width > 0
    if not varying.any():
        raise ValueError(f"every factor in factors (shape {factors.shape}) takes a single value.")
    width[~varying] = 1.0

    def normalise(f):
        return (f - low) / width

    out = {}
    scored = varying.copy()
    if ood_factor is not None:
        scored[ood_factor] = False
    out["n_factors_scored"] = float(scored.sum())
    scenarios = {}
    if ood_factor is not None:
        keys = factors[:, ood_factor] if ood1_values is None else np.asarray(ood1_values, dtype=float)
        if keys.shape != (len(factors),):
            raise ValueError(f"ood1_values must have shape ({len(factors)},); got {keys.shape}.")
        for name, (train, test) in ood1_scenarios(keys).items():
            scenarios[name] = (codes[train], factors[train], codes[test], factors[test], scored)
    if codes_ood2 is not None:
        keep = varying.copy()
        excluded = [ood_factor] if ood2_excluded is None and ood_factor is not None else (ood2_excluded or [])
        keep[list(excluded)] = False
        scenarios["ood2"] = (codes, factors, codes_ood2, factors_ood2, keep)
    for name, (x_train, y_train, x_test, y_test, keep) in scenarios.items():
        for kind in regressors:
            key = f"transfer_{kind}_{name}"
            if x_train.shape[0] < min_train or not keep.any():
                out[key] = float("nan")
                continue
            errors = readout_mae(x_train, normalise(y_train)[:, keep], x_test, normalise(y_test)[:, keep],
                                 regressor=kind, random_state=random_state, standardise_by=codes)
            out[key] = float(errors.mean())
    if ood2_sets:  # one fit of the regressors, tested on each set
        keep = varying.copy()
        if ood_factor is not None:
            keep[ood_factor] = False
        names = list(ood2_sets)
        for kind in regressors:
            if codes.shape[0] < min_train or not keep.any():
                out.update({f"transfer_{kind}_{name}": float("nan") for name in names})
                continue
            errors = readout_maes(codes, normalise(factors)[:, keep],
                                  [(c, normalise(f)[:, keep]) for c, f in ood2_sets.values()],
                                  regressor=kind, random_state=random_state, standardise_by=codes)
            out.update({f"transfer_{kind}_{name}": float(e.mean()) for name, e in zip(names, errors)})
    return out


# The OOD1 factor by default: a colour factor where the dataset has one (D21 varies colour), in
# this order of preference; otherwise the factor with the fewest classes, at least 4.
COLOUR_FACTORS = ("object_hue", "object_color", "hue", "color", "colour")


def rule_factors(split, factor_space) -> tuple[str, ...]:
    """The factors a split's rule holds out classes of: none for a random-combinations split, which
    holds out combinations, not any factor's classes."""
    if split is None or isinstance(split.test_when, RandomCombinations):
        return ()
    return split.factor_names(factor_space)


def transfer_factor_of(factor_space, split=None) -> int:
    """The default OOD factor for OOD1: a colour factor (:data:`COLOUR_FACTORS`, D21 varies
    colour) with at least 4 classes that the split does not hold out; otherwise the factor with
    the fewest classes, at least 4, that the split does not hold out (on dSprites, scale)."""
    held = set(rule_factors(split, factor_space))
    for name in COLOUR_FACTORS:
        if name in factor_space.names and name not in held and \
                factor_space.sizes[factor_space.names.index(name)] >= 4:
            return factor_space.names.index(name)
    candidates = [(size, i) for i, (name, size) in enumerate(zip(factor_space.names, factor_space.sizes))
                  if size >= 4 and name not in held]
    if not candidates:
        candidates = [(size, i) for i, size in enumerate(factor_space.sizes) if size >= 2]
    return min(candidates)[1]


def transfer_factor_position(factor_space, name: str | None, split=None) -> int:
    """The column of the OOD1 factor ``name`` (None: :func:`transfer_factor_of`); a clear error
    naming the dataset's factors if it has no such factor."""
    if name is None:
        return transfer_factor_of(factor_space, split)
    if name not in factor_space.names:
        raise ValueError(f"transfer_factor: the dataset has no factor {name!r}; its factors are "
                         f"{', '.join(factor_space.names)}")
    return factor_space.names.index(name)


def check_transfer(config, dataset, split) -> None:
    """The registry's check, before anything is encoded: the config's OOD1 factor is the dataset's."""
    transfer_factor_position(dataset.factor_space, config.transfer_factor, split)


def check_ood2_set(space, name: str, other) -> None:
    """An OOD2 set (``other``: its factor space) must have the training set's factors, and the same
    classes of each but the OOD1 factor (another set's colours); a ValueError says what differs."""
    if tuple(other.names) != tuple(space.names):
        raise ValueError(f"{name}: its factors ({', '.join(other.names)}) are not the trial's "
                         f"({', '.join(space.names)})")


def score_transfer(sample) -> dict:
    """The registry's transfer scores: OOD1 on the training draws only (their values of the OOD
    factor are those the encoder trained on; D21: OOD1-A/B/C are defined on the encoder's training
    hues, ordered by :func:`data_pipeline.spaces.class_order` where their class numbers are not),
    OOD2 tested on the held-out sample and on each of the trial's OOD2 sets (``ood2_a``, ``ood2_b``);
    and the OOD1 factor used (``transfer_factor``)."""
    from data_pipeline.spaces import class_order

    space, split = sample.space, sample.split
    ood = transfer_factor_position(space, sample.config.transfer_factor, split)
    held = [space.position(name) for name in rule_factors(split, space)]
    order = class_order(split.dataset, space.names[ood])
    sets = sample.ood2_sets
    for name, (_, _, other) in sets.items():
        check_ood2_set(space, name, other)
    result = transfer_score(sample.codes, sample.factors, ood_factor=ood, codes_ood2=sample.held_out_codes,
                            factors_ood2=sample.held_out_factors,
                            regressors=tuple(sample.config.transfer_regressors),
                            factor_ranges=sample.factor_ranges, ood2_excluded=held if len(held) == 1 else [],
                            random_state=sample.seed,
                            ood1_values=None if order is None else order[sample.factors[:, ood]],
                            ood2_sets={name: (codes, factors) for name, (codes, factors, _) in sets.items()})
    scores = {k: v for k, v in result.items() if k.startswith("transfer_")}
    return {**scores, "transfer_factor": space.names[ood]}
