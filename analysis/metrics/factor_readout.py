"""The readout per factor: how well each generative factor can be read from the codes.

The evidence ``analysis.findings`` needs before a held-out split counts: one readout per factor,
fitted on codes of training images and scored on codes of *other* training images, in the score
of the factor's kind (``FactorSpace.kinds``; docs/analysis.md, "Readout per factor"):

- **categorical** (a shape, a colour): a random-forest classifier, scored by its **accuracy**
  beside chance, 1 / the number of values the factor takes on the training images;
- **ordinal** (a position, a scale): a random-forest regressor of the factor's value, scored by
  **R²** on the scored samples (chance 0). R² does not depend on how finely the factor is
  gridded, so a 32-position and a 6-scale factor read equally well score alike, where an
  exact-class accuracy would ask 32 positions about one pixel apart to be told apart;
- **circular** (dSprites orientation): the same regressor of (cos kθ, sin kθ), with k the
  factor's rotational symmetry on each image (a square's 4, an ellipse's 2, a heart's 1), fitted
  and centred per class of the factor that sets k: the orientation modulo what the image shows.
  Scored by R², chance 0.

Every readout is :data:`FOREST_TREES` trees that consider every code at each split (seeded).
A factor with one value on the training images has nothing to read: NaN.
"""

from __future__ import annotations

import numpy as np
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
from threadpoolctl import threadpool_limits

from analysis.metrics._checks import check_codes

__all__ = ["FOREST_TREES", "READOUT_SCORES", "factor_readout_scores", "readout_score"]

# the readout's ensemble size (about 1 s of CPU for 5 factors on 1,000 codes)
FOREST_TREES = 20
# the score each kind of factor is read with (a results column's prefix: accuracy_shape, r2_posX)
READOUT_SCORES = {"categorical": "accuracy", "ordinal": "r2", "circular": "r2"}


def _groups(space, name: str, classes: np.ndarray) -> np.ndarray:
    """Each row's readout group: the class of the factor that sets a circular factor's symmetry,
    else 0 (one group)."""
    for circular, by, _ in space.symmetry:
        if circular == name:
            return classes[:, space.position(by)]
    return np.zeros(len(classes), dtype=np.int64)


def readout_score(space, name: str, predicted, classes_test) -> float:
    """The score of predicted readout targets (``space.readout_targets``' form) of factor ``name``
    against the truth of ``classes_test``: accuracy for a categorical factor, else R² =
    1 − Σ squared error / Σ squared deviation from the mean (per symmetry group for a circular
    factor, the two components summed). NaN with no rows, or where the truth does not vary."""
    classes_test = np.asarray(classes_test)
    if len(classes_test) == 0:
        return float("nan")
    truth = space.readout_targets(classes_test, name)
    predicted = np.asarray(predicted, dtype=float).reshape(truth.shape)
    if space.kind(name) == "categorical":
        return float((predicted == truth).mean())
    groups = _groups(space, name, classes_test)
    error = deviation = 0.0
    for group in np.unique(groups):
        rows = groups == group
        error += float(((predicted[rows] - truth[rows]) ** 2).sum())
        deviation += float(((truth[rows] - truth[rows].mean(axis=0)) ** 2).sum())
    return 1.0 - error / deviation if deviation > 0 else float("nan")


def _forest_predictions(space, name: str, codes, classes, codes_test, classes_test, seed: int) -> np.ndarray:
    """A forest's predicted readout targets of ``name`` for ``codes_test`` (one forest per
    symmetry group for a circular factor)."""
    targets = space.readout_targets(classes, name)
    categorical = space.kind(name) == "categorical"
    Forest = RandomForestClassifier if categorical else RandomForestRegressor
    predicted = np.zeros((len(codes_test), *targets.shape[1:]), dtype=float)
    groups, groups_test = _groups(space, name, classes), _groups(space, name, classes_test)
    for group in np.unique(groups_test):
        fit, wanted = groups == group, groups_test == group
        if not fit.any():  # no fitted image of this group: predict the overall mean (or first class)
            predicted[wanted] = targets[0] if categorical else targets.mean(axis=0)
            continue
        if categorical and np.unique(targets[fit]).size < 2:
            predicted[wanted] = targets[fit][0]
            continue
        forest = Forest(n_estimators=FOREST_TREES, max_features=None, random_state=seed, n_jobs=1)
        predicted[wanted] = forest.fit(codes[fit], targets[fit]).predict(codes_test[wanted]) \
            .reshape(predicted[wanted].shape)
    return predicted


def factor_readout_scores(space, codes, classes, codes_test, classes_test, training_classes, *,
                          random_state: int = 0) -> dict[str, dict]:
    """Per factor of ``space``: ``{"kind", "score", "chance"}`` of a forest readout fitted on
    ``codes`` → ``classes`` and scored on ``codes_test`` / ``classes_test`` (the caller leaves out
    test rows of fitted images). ``chance``: 1 / the number of values on ``training_classes``
    (all the training images') for a categorical factor, 0 for the others. ``score`` is NaN for a
    factor with one value on the training images, and where no test row is left."""
    codes = check_codes(codes, "codes", min_samples=2)
    codes_test = check_codes(codes_test, "codes_test", min_samples=0)
    if codes_test.shape[1] != codes.shape[1]:
        raise ValueError(f"codes_test must have the {codes.shape[1]} codes of codes; "
                         f"got shape {codes_test.shape}")
    classes, classes_test = space.check_classes(classes), space.check_classes(classes_test)
    seeds = np.random.default_rng(random_state).integers(0, np.iinfo(np.int32).max, space.n_factors)
    out = {}
    with threadpool_limits(limits=1):
        for j, name in enumerate(space.names):
            kind = space.kinds[j]
            n_values = np.unique(np.asarray(training_classes)[:, j]).size
            chance = 1.0 / n_values if kind == "categorical" else 0.0
            score = float("nan")
            if n_values >= 2 and len(codes_test):
                predicted = _forest_predictions(space, name, codes, classes, codes_test, classes_test,
                                                int(seeds[j]))
                score = readout_score(space, name, predicted, classes_test)
            out[name] = {"kind": kind, "score": score, "chance": chance}
    return out
