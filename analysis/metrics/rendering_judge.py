"""The rendering judge: Montero et al. (2021)'s evidence as a number. What does a model *render* for a
held-out combination: the combination, or one it saw in training (an ellipse where the squares
on the right were held out, M21 §2.1 and appendix B)?

The judge reads, from each image, the factors the split's held-out rule names
(``Split.factor_names``), as the ground-truth image of the whole factor grid it is nearest to
(squared error over pixels in [0, 1]): a nearest-neighbour classifier whose training set is the
ground truth of every combination of the rule factors' values with the image's other factors
as they truly are, rendered or indexed by ``dataset.observe``, never a model's output. It has
nothing to fit, so nothing to cache: its templates are the grid's images. Reading the rule
factors jointly (every combination of their values) where at most :data:`JOINT_LIMIT`
combinations exist, else one factor at a time with the others at their true values.

**Tolerance.** A categorical factor (a shape) is read right only as its own class. An ordinal or
circular factor (a position, an orientation) is read right within :data:`TOLERANCE` = 1 class
of the truth (circularly for a circular one): a blurred reconstruction of a 32-position grid,
whose positions lie 1.5 px apart at 64 px, may sit nearest the neighbouring position without
drawing anything else, while two classes off is another place. The question is whether a
held-out combination is rendered as a *seen* one, which one class of slack does not decide.

Per model (:func:`rendering_judge`): accuracy (every rule factor read right, jointly) on the
ground truth of the held-out images (the judge's own check: below 0.95 it cannot tell the rule
factors' values apart in the images), on the model's reconstructions of held-out images and on
its reconstructions of in-distribution images (training combinations it never trained on,
:mod:`data_pipeline.in_distribution`), and the **substitution share**: held-out reconstructions
read wrong *and* read as a combination of the split's training part (the other factors as they
truly are). Per rule factor, the same, the substitution being that factor read wrong and, with
that factor's reading in place of the truth, a training combination.

**M22's decoder side** (a model with an encoder: a VAE, the composition network): the judge also
reads the decoder fed the codes the held-out and in-distribution images *should* have (the linear
map factors → codes fitted on training images' codes, :func:`true_codes`), so that a decoder that
cannot render a held-out combination from its right code is told from an encoder that gives it a
wrong one: ``judge_decoder_accuracy_test`` and ``judge_decoder_accuracy_in_distribution`` (NaN for
the ground-truth decoder, whose reconstruction already is its rendering of the true code).
"""

from __future__ import annotations

import itertools
import json

import numpy as np

__all__ = ["JOINT_LIMIT", "JUDGE_IMAGES", "TOLERANCE", "judge_readings", "read_right", "rendering_judge",
           "score_rendering_judge", "true_codes"]

# held-out (and in-distribution) reconstructions judged per model, at most
JUDGE_IMAGES = 200
# the rule factors are read jointly where their values combine in at most this many ways
JOINT_LIMIT = 4096
# classes of slack for an ordinal or circular factor (see the module docstring)
TOLERANCE = 1
_CHUNK = 256  # templates compared at once


def _as_unit(images) -> np.ndarray:
    array = np.asarray(images)
    if array.dtype == np.uint8:
        return array.astype(np.float32) / 255.0
    return array.astype(np.float32)


_MEMO_BYTES = 64 << 20  # templates one judge keeps for its next image set, at most


def _nearest(image_sets: list[np.ndarray], candidates: np.ndarray, observe, memo=None) -> list[np.ndarray]:
    """For each image (n, D) of each set, the row of ``candidates`` (classes) whose ground-truth
    image is nearest (squared error); each template rendered once for every set (and kept in
    ``memo``, a dict of one judge's call, while it holds under :data:`_MEMO_BYTES`)."""
    best = [np.full(len(images), np.inf) for images in image_sets]
    choice = [np.zeros(len(images), np.int64) for images in image_sets]
    for start in range(0, len(candidates), _CHUNK):
        part = candidates[start:start + _CHUNK]
        key = part.tobytes()
        templates = None if memo is None else memo.get(key)
        if templates is None:
            templates = _as_unit(observe(part)).reshape(len(part), -1)
            if memo is not None and sum(t.nbytes for t in memo.values()) + templates.nbytes <= _MEMO_BYTES:
                memo[key] = templates
        for images, low, chosen in zip(image_sets, best, choice):
            if not len(images):
                continue
            # |x − t|² without the images' own |x|², which no choice changes
            distance = (templates ** 2).sum(1)[None] - 2 * images @ templates.T
            closest = distance.argmin(axis=1)
            value = distance[np.arange(len(images)), closest]
            better = value < low
            low[better], chosen[better] = value[better], closest[better] + start
    return choice


def judge_readings(space, factors, observe, classes: np.ndarray, *image_sets, memo=None) -> list[np.ndarray]:
    """The judge's readings (n, F) of the classes of the rule ``factors`` (names) from each of
    ``image_sets`` (each (n, C, H, W), uint8 or floats in [0, 1], in the rows of ``classes``),
    the other factors as ``classes`` has them (see the module docstring). ``observe`` gives the
    ground-truth images of any classes of the grid. Templates are rendered once per set of other
    factors, shared by every image set (and by later calls given the same ``memo`` dict)."""
    classes = space.check_classes(classes)
    columns = [space.position(name) for name in factors]
    sizes = [space.sizes[j] for j in columns]
    sets = [_as_unit(images).reshape(len(classes), -1) for images in image_sets]
    readings = [np.zeros((len(classes), len(columns)), np.int64) for _ in sets]
    if int(np.prod(sizes)) <= JOINT_LIMIT:
        combinations = np.array(list(itertools.product(*(range(s) for s in sizes))), np.int64)
        others = classes.copy()
        others[:, columns] = 0
        groups, group_of = np.unique(others, axis=0, return_inverse=True)
        group_of = np.asarray(group_of).reshape(-1)
        for g, base in enumerate(groups):
            rows = np.flatnonzero(group_of == g)
            candidates = np.repeat(base[None], len(combinations), axis=0)
            candidates[:, columns] = combinations
            for reading, chosen in zip(readings, _nearest([images[rows] for images in sets], candidates,
                                                          observe, memo)):
                reading[rows] = combinations[chosen]
        return readings
    for i in range(len(classes)):  # one factor at a time, the others at their true values
        for k, (j, size) in enumerate(zip(columns, sizes)):
            candidates = np.repeat(classes[i][None], size, axis=0)
            candidates[:, j] = np.arange(size)
            for reading, chosen in zip(readings, _nearest([images[[i]] for images in sets], candidates,
                                                          observe)):
                reading[i, k] = chosen[0]
    return readings


def read_right(space, factors, truth: np.ndarray, read: np.ndarray) -> np.ndarray:
    """(n, F) booleans: each rule factor read right, within the tolerance of its kind."""
    right = np.zeros(read.shape, bool)
    for k, name in enumerate(factors):
        j, kind, size = space.position(name), space.kind(name), space.sizes[space.position(name)]
        gap = np.abs(read[:, k] - truth[:, j])
        if kind == "categorical":
            right[:, k] = gap == 0
        elif kind == "circular":
            right[:, k] = np.minimum(gap, size - gap) <= TOLERANCE
        else:
            right[:, k] = gap <= TOLERANCE
    return right


def _substituted(space, split, factors, truth, read, right) -> tuple[np.ndarray, np.ndarray]:
    """(per image, per factor) substitutions: read wrong and read as a training combination."""
    columns = [space.position(name) for name in factors]
    whole = truth.copy()
    whole[:, columns] = read
    per_image = ~right.all(axis=1) & split.train_mask(whole, space)
    per_factor = np.zeros(read.shape, bool)
    for k, j in enumerate(columns):
        one = truth.copy()
        one[:, j] = read[:, k]
        per_factor[:, k] = ~right[:, k] & split.train_mask(one, space)
    return per_image, per_factor


def _mean(values) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def true_codes(space, train_classes: np.ndarray, train_codes: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """The codes images of ``classes`` *should* have (M22's decoder test): the linear map factors →
    codes fitted on training images' classes and codes (a categorical factor one-hot, the others
    normalised to [0, 1]), as ``encoder_decoder_diagnosis`` inverts the encoder."""
    from sklearn.linear_model import LinearRegression

    def inputs(c):
        c = space.check_classes(c)
        normalised = space.normalised(c)
        columns = [np.eye(space.sizes[j])[c[:, j]] if space.kinds[j] == "categorical" else normalised[:, [j]]
                   for j in range(space.n_factors)]
        return np.hstack(columns)

    inverse = LinearRegression().fit(inputs(train_classes), np.asarray(train_codes, dtype=np.float64))
    return inverse.predict(inputs(classes)) if len(classes) else np.zeros((0, np.shape(train_codes)[1]))


def rendering_judge(space, split, observe, test_classes, test_truth, test_reconstructions,
                    in_classes=None, in_reconstructions=None, decoded_test=None, decoded_in=None) -> dict:
    """The judge's columns (see the module docstring) from the held-out images' classes, ground
    truth and reconstructions and, where given, the in-distribution images' classes and
    reconstructions (else their accuracy is NaN). ``decoded_test`` / ``decoded_in``, where given:
    the model's decoder fed the true codes of the same images (:func:`true_codes`), read for
    ``judge_decoder_accuracy_test`` / ``_in_distribution`` (M22's decoder side). ``observe``: the
    dataset's."""
    factors = tuple(name for name in split.factor_names(space) if name in space.names)
    test_classes = space.check_classes(test_classes)
    memo: dict = {}  # the templates of this call, for the in-distribution images' too
    test_sets = [test_truth, test_reconstructions] + ([] if decoded_test is None else [decoded_test])
    readings = judge_readings(space, factors, observe, test_classes, *test_sets, memo=memo)
    truth_read, test_read, *decoder_test_read = readings
    truth_right = read_right(space, factors, test_classes, truth_read)
    test_right = read_right(space, factors, test_classes, test_read)
    substituted, substituted_factor = _substituted(space, split, factors, test_classes, test_read, test_right)
    in_right = np.zeros((0, len(factors)), bool)
    decoder_in_right = np.zeros(0, bool)
    if in_classes is not None and len(in_classes):
        in_classes = space.check_classes(in_classes)
        in_sets = [in_reconstructions] + ([] if decoded_in is None else [decoded_in])
        in_read, *decoder_in_read = judge_readings(space, factors, observe, in_classes, *in_sets, memo=memo)
        in_right = read_right(space, factors, in_classes, in_read)
        if decoder_in_read:
            decoder_in_right = read_right(space, factors, in_classes, decoder_in_read[0]).all(axis=1)
    decoder_test_right = (read_right(space, factors, test_classes, decoder_test_read[0]).all(axis=1)
                          if decoder_test_read else np.zeros(0, bool))
    decoder = {"judge_decoder_accuracy_test": _mean(decoder_test_right),
               "judge_decoder_accuracy_in_distribution": _mean(decoder_in_right)}
    finite = lambda value: None if np.isnan(value) else value  # noqa: E731
    per_factor = {name: {"kind": space.kind(name), "ground_truth": finite(_mean(truth_right[:, k])),
                         "test": finite(_mean(test_right[:, k])),
                         "in_distribution": finite(_mean(in_right[:, k])),
                         "substitution": finite(_mean(substituted_factor[:, k]))}
                  for k, name in enumerate(factors)}
    return {"judge_accuracy_ground_truth": _mean(truth_right.all(axis=1)),
            "judge_accuracy_test": _mean(test_right.all(axis=1)),
            "judge_accuracy_in_distribution": _mean(in_right.all(axis=1)),
            "judge_substitution_share": _mean(substituted),
            "judge_images": int(len(test_classes)),
            "rendering_judge": json.dumps(per_factor), **decoder}


def score_rendering_judge(sample) -> dict:
    """The registry's judge: the first :data:`JUDGE_IMAGES` held-out and in-distribution images
    of the evaluation and the model's reconstructions of them (``sample.judged``: a VAE's from
    its posterior means, the ground-truth decoder's from the true factor values, the composition
    network's prediction of the target); nothing (NaN) where the dataset cannot render or index
    grid points (no ``observe``: a user's labelled data) or no held-out image was judged."""
    observe = sample.dataset.observe
    if observe is None:
        return {}
    judged = sample.judged
    if judged is None or not len(judged["test_classes"]):
        return {}
    return rendering_judge(sample.space, sample.split, observe, **judged)
