"""Encoder or decoder? Montero et al. (2022)'s question about a failure on held-out combinations.

- The **encoder** is judged on the factors the split's held-out rule names
  (``Split.factor_names``; every factor where it names none of the space's), one factor at a time.
  Each factor is read from the codes by a *linear* readout of its kind, fitted on training codes
  (linear, because it can extrapolate and compose: a tree readout could not name a new
  combination whatever the encoder did), and its error on training images it was not fitted on
  is set against its error on held-out images:

  - **ordinal** (a position, a scale): a linear regression of the factor normalised to [0, 1];
    error: the mean absolute error (in [0, 1]);
  - **categorical** (a shape, a colour): a multinomial logistic regression of the class; error:
    the misclassification rate, 1 − accuracy (in [0, 1]). A class number is no quantity, so it is
    not regressed. A classifier cannot name a class it never saw: held-out images of a class absent
    from the fitted training images are left out of the factor's error (none left: NaN, the factor
    is not judged; so on splits that hold a class out altogether, such as an unseen hue, the
    categorical factor gets no verdict);
  - **circular** (dSprites orientation): a linear regression of (cos kθ, sin kθ), with k the
    angle's rotational symmetry on the image (``FactorSpace.readout_targets``); error: the mean
    absolute angle between the predicted and the true (cos kθ, sin kθ), divided by π, so in
    [0, 1] like the others (0.5: off by a quarter of the angle's period 2π/k on average, what a
    guess uniform on the circle makes).

  Each factor gets its own verdict (:func:`fails`), and the encoder fails when **any** of them
  fails: the most-failing factor, the one with the largest excess
  ``error_test − (ratio · error_train + margin)``, decides, and the encoder's errors are that
  factor's. Averaging over every factor, as disgen did before, let factors the split does not
  touch dilute the error, so an encoder that read a held-out square as an ellipse could pass.
- The **decoder** fails when decoding the codes the held-out images *should* have (the inverse
  linear map, factors → codes, fitted on training codes, with ordinal and circular factors
  normalised to [0, 1] and categorical factors one-hot) scores clearly worse against the true
  images (NLL per image) than the same on training images.

**M22's snap test** (:func:`snap_counts`) asks the same readouts, image by image, whether each is
nearer the true value or the *snap*, the nearest value the split's training part has with the
image's other factors fixed: the failure M22 describes (an encoder that maps a held-out image to
the nearest combination it saw) against generalisation, without a threshold on the error.

**The verdict** is one rule for both sides (:func:`fails`): a side fails when

    error_test > ratio · error_train + margin,

with ``ratio`` = 1.5, ``margin`` = 0.05 for the encoder (errors in [0, 1]) and 0 nats for the
decoder. M22 states no threshold: these numbers are disgen's, they are parameters, and
``evaluate`` writes them into every row (``diagnosis_ratio``, ``diagnosis_encoder_margin``,
``diagnosis_decoder_margin``).
"""

from __future__ import annotations

import json

import numpy as np
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.model_selection import train_test_split

from analysis.metrics._checks import check_pair, check_test_pair, mean_or_nan
from analysis.metrics.reconstruction_nll import nll_per_image

__all__ = ["encoder_decoder_diagnosis", "fails", "snap_counts", "score_encoder_decoder", "judged_factors",
           "RATIO", "ENCODER_MARGIN", "DECODER_MARGIN"]

# disgen's thresholds (M22 gives none); see the module docstring
RATIO = 1.5
ENCODER_MARGIN = 0.05
DECODER_MARGIN = 0.0
# the logistic regression's iteration budget (sklearn's default 100 stops short on some codes)
CLASSIFIER_MAX_ITER = 1000


def fails(error_train, error_test, ratio=RATIO, margin=0.0):
    """The verdict's one formula: ``error_test > ratio * error_train + margin`` (NaN errors: NaN)."""
    if np.isnan(error_train) or np.isnan(error_test):
        return float("nan")
    return float(error_test > ratio * error_train + margin)


def _angle_error(predicted: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """|angle between predicted and true (cos, sin)| / π, per row, in [0, 1]."""
    difference = (np.arctan2(predicted[:, 1], predicted[:, 0]) - np.arctan2(truth[:, 1], truth[:, 0]))
    return np.abs((difference + np.pi) % (2 * np.pi) - np.pi) / np.pi


def _factor_errors(kind, codes, target, codes_test, target_test, fit_rows, check_rows, random_state):
    """(error on the training rows ``check_rows``, error on the held-out rows, held-out rows
    scored, the readout's predictions on every held-out row) of one factor's linear readout of its
    ``kind`` fitted on ``fit_rows``."""
    if kind == "categorical":
        known = np.unique(target[fit_rows])
        if known.size < 2:  # one class fitted: the readout can only say that class
            predict = lambda c: np.full(len(c), known[0])
        else:
            predict = LogisticRegression(max_iter=CLASSIFIER_MAX_ITER, random_state=random_state).fit(
                codes[fit_rows], target[fit_rows]).predict
        check = check_rows[np.isin(target[check_rows], known)]
        seen = np.isin(target_test, known)
        predicted = predict(codes_test) if len(codes_test) else np.zeros(0, target.dtype)
        train = mean_or_nan(predict(codes[check]) != target[check]) if len(check) else float("nan")
        test = mean_or_nan(predicted[seen] != target_test[seen]) if seen.any() else float("nan")
        return train, test, int(seen.sum()), predicted
    readout = LinearRegression().fit(codes[fit_rows], target[fit_rows])
    if kind == "circular":
        error = _angle_error
    else:
        error = lambda predicted, truth: np.abs(predicted - truth)
    predicted = readout.predict(codes_test)
    train = mean_or_nan(error(readout.predict(codes[check_rows]), target[check_rows]))
    test = mean_or_nan(error(predicted, target_test))
    return train, test, len(codes_test), predicted


def _readout_target(space, j: int, classes: np.ndarray, low, width) -> np.ndarray:
    """Factor ``j``'s readout target of ``classes``: (cos kθ, sin kθ) if circular, else normalised."""
    if space.kinds[j] == "circular":
        return space.readout_targets(classes, space.names[j])
    return (classes[:, j] - low[j]) / width[j]


def _readout_distance(kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _angle_error(a, b) if kind == "circular" else np.abs(a - b)


def _nearer(space, j, predicted, factors_test, seen_values, low, width) -> tuple[np.ndarray, np.ndarray]:
    """(strictly nearer the truth, strictly nearer the snap) per held-out row, for an ordinal or
    circular factor ``j`` (see :func:`snap_counts`)."""
    n, size, kind = len(factors_test), space.sizes[j], space.kinds[j]
    gap = np.abs(np.arange(size)[None, :] - factors_test[:, [j]])
    if kind == "circular":
        gap = np.minimum(gap, size - gap)
    gap = np.where(seen_values, gap, np.iinfo(np.int64).max)
    nearest = seen_values & (gap == gap.min(axis=1, keepdims=True))
    snap, best = factors_test.copy(), np.full(n, np.inf)
    for v in range(size):  # of the nearest seen values, the one nearer the readout
        moved = factors_test.copy()
        moved[:, j] = v
        d = _readout_distance(kind, predicted, _readout_target(space, j, moved, low, width))
        take = nearest[:, v] & (d < best)
        best[take], snap[take, j] = d[take], v
    to_truth = _readout_distance(kind, predicted, _readout_target(space, j, factors_test, low, width))
    to_snap = _readout_distance(kind, predicted, _readout_target(space, j, snap, low, width))
    return to_truth < to_snap, to_snap < to_truth


def snap_counts(space, seen, factors_test, judged, predictions, low, width) -> dict:
    """M22's two hypotheses for the encoder, image by image: is each judged factor's readout
    nearer the true value or the *snap*, the value nearest the truth that the training part has
    with the image's other factors fixed (``seen(classes)``: True for the split's training
    combinations; of two snaps equally near the truth, the one nearer the readout)? A factor
    without a seen value (nothing to snap to) is left out of its image. An image is nearer the
    truth when every factor left is strictly nearer the truth, nearer the snap when any is
    strictly nearer the snap (ties: neither). ``predictions``: {column: the readout's predictions
    on the held-out rows, in its target's units}. Returns ``encoder_nearer_truth``,
    ``encoder_nearer_snap`` and ``encoder_snap_images`` (images with a factor left)."""
    n = len(factors_test)
    truth_side = np.ones(n, bool)
    snap_side = np.zeros(n, bool)
    tested = np.zeros(n, bool)
    for j in judged:
        if j not in predictions:
            continue
        size, kind, predicted = space.sizes[j], space.kinds[j], np.asarray(predictions[j])
        seen_values = np.zeros((n, size), bool)
        for v in range(size):
            moved = factors_test.copy()
            moved[:, j] = v
            seen_values[:, v] = seen(moved)
        has = seen_values.any(axis=1)
        if kind == "categorical":
            truth_near = predicted == factors_test[:, j]
            snap_near = ~truth_near & seen_values[np.arange(n), np.clip(predicted, 0, size - 1).astype(int)]
        else:
            truth_near, snap_near = _nearer(space, j, predicted, factors_test, seen_values, low, width)
        truth_side &= ~has | truth_near
        snap_side |= has & snap_near
        tested |= has
    return {"encoder_nearer_truth": int((tested & truth_side).sum()),
            "encoder_nearer_snap": int((tested & snap_side).sum()), "encoder_snap_images": int(tested.sum())}


def _column(factor, names: tuple[str, ...]) -> int:
    """The column of a judged factor given by name or column."""
    if isinstance(factor, str) and factor in names:
        return names.index(factor)
    if isinstance(factor, (int, np.integer)) and not isinstance(factor, bool) and 0 <= factor < len(names):
        return int(factor)
    raise ValueError(f"factors_judged: expected names among {', '.join(names)} or columns "
                     f"0..{len(names) - 1}; got {factor!r}")


def _diagnosis(encoder_fails: float, decoder_fails: float | None) -> str:
    if decoder_fails is None:
        return ("encoder not judged (decoder not tested)" if np.isnan(encoder_fails) else
                "encoder fails (decoder not tested)" if encoder_fails
                else "encoder generalises (decoder not tested)")
    if np.isnan(encoder_fails) or np.isnan(decoder_fails):
        known = [f"{side} {'fails' if verdict else 'holds'}"
                 for side, verdict in (("encoder", encoder_fails), ("decoder", decoder_fails))
                 if not np.isnan(verdict)]
        return "; ".join(known + ["the other side not judged"]) if known else "neither side judged"
    return {(True, True): "both", (True, False): "encoder", (False, True): "decoder",
            (False, False): "neither"}[(bool(encoder_fails), bool(decoder_fails))]


def encoder_decoder_diagnosis(codes, factors, codes_test, factors_test, *, space=None, factors_judged=None,
                              decode=None, images=None, images_test=None, factor_ranges=None, ratio=RATIO,
                              encoder_margin=ENCODER_MARGIN, decoder_margin=DECODER_MARGIN,
                              likelihood="bernoulli", holdout_fraction=0.25, random_state=0, seen=None):
    """Diagnose a failure on held-out combinations. ``codes`` (n_train, n_codes), ``factors``
    (n_train, n_factors): training images' codes and factor values; ``codes_test``,
    ``factors_test``: the held-out images'. For the decoder side give ``decode`` (codes (n, n_codes)
    → pixel probabilities of the images' shape) and ``images``, ``images_test`` (uint8 or [0, 1]) in
    the codes' row order.

    ``space`` (a ``data_pipeline.factors.FactorSpace``) gives the factors' names and kinds; the
    factors are then the space's integer classes. Without it every factor is ordinal and named
    ``factor_<column>``. ``factors_judged``: the factors the encoder is judged on, names or
    columns (a split's ``factor_names``; None: every factor). A factor with one value over the
    training and held-out images has nothing to read and is not judged. Ordinal (and, on the
    decoder side, circular) factors are normalised by ``factor_ranges`` ((n_factors, 2) low and
    high), else by the space's class range, else by the values' range.

    The encoder side reads each judged factor by the linear readout of its kind (see the module
    docstring), fitted on ``1 − holdout_fraction`` of the training codes, its train error on the
    rest. Returns ``encoder_errors`` {factor: {"kind", "train", "test", "n_test", "fails"}}
    (``n_test``: held-out images scored), ``encoder_factor`` (the judged factor with the largest
    excess ``test − (ratio · train + margin)``; None where no judged factor has both errors),
    ``encoder_error_train`` / ``encoder_error_test`` (that factor's errors, in [0, 1]) and
    ``encoder_fails`` (1.0 where any judged factor fails, that is where the decisive one does);
    ``decoder_nll_train`` / ``decoder_nll_test`` (NLL of decoding the expected codes; NaN without
    ``decode``) and ``decoder_fails``. Verdicts are 1.0 or 0.0, NaN when unknown, by :func:`fails`
    with ``ratio`` and the side's margin. ``"diagnosis"`` says which side fails in words:
    "encoder", "decoder", "both" or "neither" where both are judged. ``likelihood`` scores the
    decoded images: "bernoulli" (NLL of pixel probabilities) or "gaussian" (see
    ``analysis.metrics.reconstruction_nll``). ``seen`` (with ``space``; classes → True for the
    split's training combinations) adds M22's snap test of the same readouts (:func:`snap_counts`).
    """
    discrete = space is not None
    codes, factors = check_pair(codes, factors, min_samples=8, discrete=discrete)
    codes_test, factors_test = check_test_pair(codes, factors, codes_test, factors_test, discrete=discrete)
    if codes_test is None:
        raise ValueError("codes_test and factors_test are required: the held-out images' codes and factors.")
    if (decode is None) != (images is None) or (images is None) != (images_test is None):
        raise ValueError("For the decoder side give decode, images and images_test together.")
    if images is not None:
        for name, array, n in (("images", images, codes.shape[0]),
                               ("images_test", images_test, codes_test.shape[0])):
            if np.shape(array)[0] != n:
                raise ValueError(f"{name} must have shape ({n}, ...) to match the codes; "
                                 f"got {np.shape(array)}.")
    n_factors = factors.shape[1]
    if space is None:
        names, kinds = tuple(f"factor_{j}" for j in range(n_factors)), ("ordinal",) * n_factors
    else:
        factors, factors_test = space.check_classes(factors), space.check_classes(factors_test)
        names, kinds = space.names, space.kinds

    everything = np.vstack([factors, factors_test])
    if factor_ranges is not None:
        ranges = np.asarray(factor_ranges, dtype=float)
        low, high = ranges[:, 0], ranges[:, 1]
    elif space is not None:
        low, high = np.zeros(n_factors), np.asarray(space.sizes, dtype=float) - 1
    else:
        low, high = everything.min(axis=0), everything.max(axis=0)
    width = np.where(high > low, high - low, 1.0)
    y, y_test = (factors - low) / width, (factors_test - low) / width
    varying = everything.min(axis=0) < everything.max(axis=0)

    judged = list(range(n_factors)) if factors_judged is None else \
        list(dict.fromkeys(_column(f, names) for f in factors_judged))

    rows = np.arange(codes.shape[0])
    fit_rows, check_rows = train_test_split(rows, test_size=holdout_fraction, random_state=random_state)
    errors, predictions = {}, {}
    for j in judged:
        if not varying[j]:
            continue
        kind = kinds[j]
        if kind == "categorical":
            target, target_test = factors[:, j], factors_test[:, j]
        elif kind == "circular":
            target, target_test = (space.readout_targets(factors, names[j]),
                                   space.readout_targets(factors_test, names[j]))
        else:
            target, target_test = y[:, j], y_test[:, j]
        train, test, n_test, predictions[j] = _factor_errors(kind, codes, target, codes_test, target_test,
                                                             fit_rows, check_rows, random_state)
        errors[names[j]] = {"kind": kind, "train": train, "test": test, "n_test": n_test,
                            "fails": fails(train, test, ratio, encoder_margin)}
    excess = {name: e["test"] - (ratio * e["train"] + encoder_margin) for name, e in errors.items()
              if not (np.isnan(e["train"]) or np.isnan(e["test"]))}
    decisive = max(excess, key=excess.get) if excess else None  # the first of a tie, in judged order
    encoder_train = errors[decisive]["train"] if decisive else float("nan")
    encoder_test = errors[decisive]["test"] if decisive else float("nan")
    encoder_fails = fails(encoder_train, encoder_test, ratio, encoder_margin)

    out = {"encoder_error_train": encoder_train, "encoder_error_test": encoder_test,
           "encoder_fails": encoder_fails, "encoder_factor": decisive, "encoder_errors": errors}
    if seen is not None and space is not None:
        out.update(snap_counts(space, seen, factors_test, judged, predictions, low, width))
    if decode is None:
        out.update(decoder_nll_train=float("nan"), decoder_nll_test=float("nan"), decoder_fails=float("nan"))
        out["diagnosis"] = _diagnosis(encoder_fails, None)
        return out

    # the inverse map's inputs: categorical factors one-hot (a class number is no quantity), the
    # others normalised
    def inputs(classes, normalised):
        columns = [np.eye(space.sizes[j])[classes[:, j]] if kinds[j] == "categorical"
                   else normalised[:, [j]] for j in range(n_factors) if varying[j]]
        return np.hstack(columns) if columns else np.zeros((len(classes), 0))

    x, x_test = inputs(factors, y), inputs(factors_test, y_test)
    inverse = LinearRegression().fit(x[fit_rows], codes[fit_rows])
    images = np.asarray(images)
    expected_train = inverse.predict(x[check_rows])
    expected_test = inverse.predict(x_test)
    decoder_train = float(nll_per_image(images[check_rows], np.asarray(decode(expected_train)),
                                        likelihood=likelihood).mean())
    decoder_test = float(nll_per_image(images_test, np.asarray(decode(expected_test)),
                                       likelihood=likelihood).mean())
    decoder_fails = fails(decoder_train, decoder_test, ratio, decoder_margin)
    out.update(decoder_nll_train=decoder_train, decoder_nll_test=decoder_test, decoder_fails=decoder_fails)
    out["diagnosis"] = _diagnosis(encoder_fails, decoder_fails)
    return out


SNAP_KEYS = ("encoder_nearer_truth", "encoder_nearer_snap", "encoder_snap_images")
DIAGNOSIS_KEYS = ("encoder_error_train", "encoder_error_test", "decoder_nll_train", "decoder_nll_test",
                  "encoder_fails", "decoder_fails", "encoder_factor")


def judged_factors(split, space) -> tuple[str, ...] | None:
    """The factors of ``space`` the encoder is judged on under ``split``: those its held-out rule
    names (``split.factor_names(space)``), or None (every factor) where it names none of the
    space's or has no ``factor_names``."""
    names = getattr(split, "factor_names", None)
    if names is None:
        return None
    named = tuple(name for name in names(space) if name in space.names)
    return named or None


def _json_errors(errors: dict) -> str:
    """``encoder_errors`` as a results cell: JSON, NaN as null."""
    finite = lambda value: None if np.isnan(value) else float(value)
    return json.dumps({name: {"kind": e["kind"], "train": finite(e["train"]), "test": finite(e["test"]),
                              "n_test": e["n_test"], "fails": finite(e["fails"])}
                       for name, e in errors.items()})


def score_encoder_decoder(sample) -> dict:
    """The registry's diagnosis: the distinct training draws (two halves, no row on both sides)
    against the held-out sample, under the model's own likelihood, with the rule's parameters, the
    encoder judged on the factors the split names (:func:`judged_factors`); nothing (NaN) where
    fewer than 8 training draws are distinct."""
    unique = np.unique(sample.rows)
    if len(unique) < 8:
        return {}
    config, dataset = sample.config, sample.dataset
    result = encoder_decoder_diagnosis(
        sample.encode(unique), dataset.classes[unique], sample.held_out_codes, sample.held_out_factors,
        space=sample.space, factors_judged=judged_factors(sample.split, sample.space),
        decode=sample.decode, images=dataset.images[unique], images_test=sample.held_out_images,
        factor_ranges=sample.factor_ranges, ratio=config.diagnosis_ratio,
        encoder_margin=config.diagnosis_encoder_margin, decoder_margin=config.diagnosis_decoder_margin,
        likelihood=sample.likelihood, random_state=sample.seed,
        seen=lambda classes: sample.split.train_mask(classes, sample.space))
    return {**{key: result[key] for key in (*DIAGNOSIS_KEYS, *SNAP_KEYS)},
            "encoder_errors": _json_errors(result["encoder_errors"]),
            "diagnosis_ratio": float(config.diagnosis_ratio),
            "diagnosis_encoder_margin": float(config.diagnosis_encoder_margin),
            "diagnosis_decoder_margin": float(config.diagnosis_decoder_margin)}
