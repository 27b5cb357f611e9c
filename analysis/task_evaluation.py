"""Evaluation of the tasks other than the VAE: the ground-truth decoder and the composition network.

:func:`evaluate_task` returns the keys :func:`analysis.evaluation.evaluate` returns for a VAE, so a
sweep stores every task in the same table: ``train_nll`` / ``test_nll`` (mean Bernoulli NLL per
image, nats) on training and held-out images, ``n_train_images`` / ``n_test_images`` /
``test_nll_images``, and NaN for every disentanglement, transfer and diagnosis metric: the
ground-truth decoder has no encoder (its code *is* the factor values), and Montero et al. report
only the composition network's NLLs (score its encoder with ``evaluate`` if needed).

The held-out images are ``evaluate``'s held-out sample
(:func:`analysis.evaluation.held_out_sample`, the same seed, the same images): at most ``n_nll``
drawn from the whole held-out part of the factor grid where the dataset can produce any grid point
(``dataset.observe``), else from the dataset's own held-out rows; ``n_test_images`` is the pool
they were drawn from and ``test_nll_images`` how many the test NLL scored.

**Ground-truth decoder.** The NLL of each image decoded from its factor values; at most ``n_nll``
training rows, drawn as ``evaluate`` draws them (same seed, same rows), and the held-out sample.
Its readout per factor asks whether it learned to *render* each factor on its training images
(:func:`decoder_readout`, ``readout_estimator`` "decoder_likelihood"), the evidence the findings'
precondition reads, as an encoder's readout is for a VAE. The composition network has no readout
(``readout_estimator`` "none").

**Composition network.** The NLL of the predicted target (posterior means of reference and
transform, no sampling) on ``n_nll`` triplets per side:

- train: triplets among training images, drawn as in training (``TripletSampler.sample`` on the
  training rows);
- test: one triplet for each image of the held-out sample as the *target* (rendered from the grid
  where the dataset can, so a target need not be one of the dataset's rows); the action is uniform
  over the factors, the reference is the target with that factor's class taken from a random
  image, and the transform a random image with the target's class in that factor. Reference and
  transform are the dataset's rows, training or held-out (extrapolation needs held-out ones: an
  unseen posX can only come from an image that has it); a target for which the dataset's rows
  hold no such reference or transform (a sparse subset of the grid) gets no triplet, and
  ``test_nll_images`` counts the targets scored.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from analysis.evaluation import (
    evaluate,
    held_out_sample,
    no_readout,
    readout_columns,
    sample_without_replacement,
)
from analysis.metrics._checks import mean_or_nan
from analysis.metrics.factor_readout import readout_score
from analysis.metrics.registry import EvaluationConfig, nan_results
from models.composition import CompositionNet, TripletSampler
from models.engine import Trainer, to_float
from models.evaluation import evaluating
from models.ground_truth import GroundTruthDecoder
from models.objectives import bernoulli_nll

_log = logging.getLogger(__name__)


def ground_truth_nll(decoder: GroundTruthDecoder, images, values: np.ndarray, rows: np.ndarray,
                     batch_size: int = 512) -> np.ndarray:
    """Bernoulli NLL per image of each row's image decoded from its factor values ``values[row]``
    (``images``: a dataset's images, or an :class:`analysis.evaluation.HeldOut` sample)."""
    device = decoder.low.device
    out = []
    with evaluating(decoder):
        for start in range(0, len(rows), batch_size):
            batch = rows[start:start + batch_size]
            factors = torch.as_tensor(np.asarray(values[batch], dtype=np.float32), device=device)
            out.append(bernoulli_nll(decoder(factors), to_float(images[batch], device)).cpu())
    return torch.cat(out).numpy() if out else np.zeros(0, np.float32)


# training images the ground-truth decoder's readout decodes each factor's values for
DECODER_READOUT_IMAGES = 200


def decoder_readout(decoder: GroundTruthDecoder, dataset, train: np.ndarray, *, seed: int = 0,
                    n_images: int = DECODER_READOUT_IMAGES) -> dict:
    """Whether the decoder learned to render each factor on its training images: for each of
    ``n_images`` training images (drawn with ``seed``) and each factor, the image is decoded with
    every value the factor takes on the training images, the others kept, and the value whose
    decoding gives the image the lowest NLL is the readout's prediction. Scored as an encoder's
    readout is (:func:`analysis.metrics.factor_readout.readout_score`: accuracy against chance for
    a categorical factor, R² for the others); :func:`analysis.evaluation.readout_columns`' keys."""
    space = dataset.factor_space
    rows = sample_without_replacement(train, n_images, np.random.default_rng([seed, 3]))
    classes = dataset.classes[rows]
    device = decoder.low.device
    scores = {}
    with evaluating(decoder):
        images = to_float(dataset.images[rows], device)
        for j, name in enumerate(space.names):
            values = np.unique(dataset.classes[train, j])
            kind = space.kinds[j]
            entry = {"kind": kind, "score": float("nan"), "chance": 1.0 / len(values) if kind == "categorical"
                     else 0.0}
            if len(values) >= 2 and len(rows):
                nll = np.empty((len(rows), len(values)))
                for k, value in enumerate(values):
                    other = classes.copy()
                    other[:, j] = value
                    codes = torch.as_tensor(space.raw_values(other), dtype=torch.float32, device=device)
                    nll[:, k] = bernoulli_nll(decoder(codes), images).cpu().numpy()
                predicted = classes.copy()
                predicted[:, j] = values[nll.argmin(axis=1)]
                entry["score"] = readout_score(space, name, space.readout_targets(predicted, name), classes)
            scores[name] = entry
    return readout_columns(scores, "decoder_likelihood", 0, len(rows))


def composition_nll(net: CompositionNet, images: np.ndarray, reference: np.ndarray, transform: np.ndarray,
                    target: np.ndarray, action: np.ndarray, batch_size: int = 256, *,
                    targets=None) -> np.ndarray:
    """Bernoulli NLL per triplet of the target given reference, transform and action (row arrays),
    composing the posterior means. ``target`` indexes ``targets`` where given (the held-out
    sample's images), else ``images``."""
    device = next(net.parameters()).device
    targets = images if targets is None else targets
    out = []
    with evaluating(net):
        for start in range(0, len(target), batch_size):
            part = slice(start, start + batch_size)
            one_hot = torch.nn.functional.one_hot(torch.as_tensor(action[part]), net.n_actions).to(device)
            logits, _, _ = net(to_float(images[reference[part]], device),
                               to_float(images[transform[part]], device), one_hot)
            out.append(bernoulli_nll(logits, to_float(targets[target[part]], device)).cpu())
    return torch.cat(out).numpy() if out else np.zeros(0, np.float32)


def evaluate_task(trainer_or_model, dataset, split, config: EvaluationConfig | None = None, *, seed: int = 0,
                  n_jobs: int | None = 1) -> dict[str, float]:
    """``evaluate``'s metrics for a trained ground-truth decoder or composition network (module
    docstring), or ``evaluate(...)`` itself for a VAE. ``trainer_or_model``: a trainer from
    ``models.build_trainer`` or its ``.model``; ``split``: the held-out split it was trained under.
    At most ``config.n_nll`` images (or triplets) per side, drawn with ``seed``."""
    model = trainer_or_model.model if isinstance(trainer_or_model, Trainer) else trainer_or_model
    config = EvaluationConfig() if config is None else config
    if not isinstance(model, (GroundTruthDecoder, CompositionNet)):
        return evaluate(model, dataset, split, config, seed=seed, n_jobs=n_jobs)
    n_nll = config.n_nll
    space = dataset.factor_space
    train, test = split.train_test_indices(dataset.classes, space)
    rng = np.random.default_rng(seed)
    held_out = held_out_sample(dataset, split, test, n_nll, seed, n_nll=n_nll)
    # both tasks train with the Bernoulli likelihood, and are scored with it
    out: dict[str, float] = {"n_train_images": int(len(train)), "n_test_images": held_out.pool,
                             "nll_likelihood": "bernoulli"}
    if isinstance(model, GroundTruthDecoder):
        values, train_rows = space.raw_values(dataset.classes), sample_without_replacement(train, n_nll, rng)
        out["train_nll"] = mean_or_nan(ground_truth_nll(model, dataset.images, values, train_rows))
        out["test_nll"] = mean_or_nan(ground_truth_nll(model, held_out, space.raw_values(held_out.classes),
                                                       np.arange(len(held_out))))
        out["test_nll_images"] = len(held_out)
    else:
        train_triplets = TripletSampler(dataset.classes, train).sample(rng, n_nll)
        everything = np.union1d(train, test)
        *sources, target, action = TripletSampler(dataset.classes, everything).sample_onto_classes(
            held_out.classes, rng)
        if len(target) == 0:
            _log.info("test_nll is NaN: no held-out image of split %s could be composed from the dataset's "
                      "images (the composition task needs a full factor grid)", split.name)
        out["train_nll"] = mean_or_nan(composition_nll(model, dataset.images, *train_triplets))
        out["test_nll"] = mean_or_nan(composition_nll(model, dataset.images, *sources, target, action,
                                                      targets=held_out))
        out["test_nll_images"] = int(len(target))
    out.update(nan_results())
    # the same keys as a VAE's row: the decoder's own readout, or none for the composition network
    out.update(decoder_readout(model, dataset, train, seed=seed) if isinstance(model, GroundTruthDecoder)
               else no_readout(dataset.factor_space))
    return out
