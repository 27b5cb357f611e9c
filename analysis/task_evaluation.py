"""Evaluation of the tasks other than the VAE: the ground-truth decoder and the composition network.

:func:`evaluate_task` returns the keys :func:`analysis.evaluation.evaluate` returns for a VAE, so a
sweep stores every task in the same table: ``train_nll`` / ``test_nll`` (mean Bernoulli NLL per
image, nats) on training and held-out images, ``n_train_images`` / ``n_test_images``, and NaN for
every disentanglement, transfer and diagnosis metric: the ground-truth decoder has no encoder (its
code *is* the factor values), and Montero et al. report only the composition network's NLLs (score
its encoder with ``evaluate`` if needed).

**Ground-truth decoder.** The NLL of each row's image decoded from that row's factor values; at
most ``n_nll`` rows of each side, drawn as ``evaluate`` draws them (same seed, same rows). Its
readout per factor asks whether it learned to *render* each factor on its training images
(:func:`decoder_readout`, ``readout_estimator`` "decoder_likelihood"), the evidence the findings'
precondition reads, as an encoder's readout is for a VAE. The composition network has no readout
(``readout_estimator`` "none").

**Composition network.** The NLL of the predicted target (posterior means of reference and
transform, no sampling) on ``n_nll`` triplets per side:

- train: triplets among training images, drawn as in training (``TripletSampler.sample`` on the
  training rows);
- test: one triplet for each of at most ``n_nll`` held-out images as the *target*; the action is
  uniform over the factors, the reference is the target with that factor's class taken from a
  random image, and the transform a random image with the target's class in that factor. Reference
  and transform may be training or held-out images (extrapolation needs held-out ones: an unseen
  posX can only come from an image that has it).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from analysis.evaluation import evaluate, no_readout, readout_columns, sample_without_replacement
from analysis.metrics.factor_readout import readout_score
from analysis.metrics.registry import EvaluationConfig, nan_results
from models.composition import CompositionNet, TripletSampler
from models.engine import Trainer, to_float
from models.evaluation import evaluating
from models.ground_truth import GroundTruthDecoder
from models.objectives import bernoulli_nll

_log = logging.getLogger(__name__)


def ground_truth_nll(decoder: GroundTruthDecoder, images: np.ndarray, values: np.ndarray, rows: np.ndarray,
                     batch_size: int = 512) -> np.ndarray:
    """Bernoulli NLL per image of each row's image decoded from its factor values ``values[row]``."""
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
                    target: np.ndarray, action: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """Bernoulli NLL per triplet of the target given reference, transform and action (row arrays),
    composing the posterior means."""
    device = next(net.parameters()).device
    out = []
    with evaluating(net):
        for start in range(0, len(target), batch_size):
            part = slice(start, start + batch_size)
            one_hot = torch.nn.functional.one_hot(torch.as_tensor(action[part]), net.n_actions).to(device)
            logits, _, _ = net(to_float(images[reference[part]], device),
                               to_float(images[transform[part]], device), one_hot)
            out.append(bernoulli_nll(logits, to_float(images[target[part]], device)).cpu())
    return torch.cat(out).numpy() if out else np.zeros(0, np.float32)


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else float("nan")


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
    train, test = split.train_test_indices(dataset.classes, dataset.factor_space)
    rng = np.random.default_rng(seed)
    # both tasks train with the Bernoulli likelihood, and are scored with it
    out: dict[str, float] = {"n_train_images": int(len(train)), "n_test_images": int(len(test)),
                             "nll_likelihood": "bernoulli"}
    if isinstance(model, GroundTruthDecoder):
        values = dataset.factor_space.raw_values(dataset.classes)
        for side, rows in (("train_nll", train), ("test_nll", test)):
            out[side] = _mean(ground_truth_nll(model, dataset.images, values,
                                               sample_without_replacement(rows, n_nll, rng)))
    else:
        train_triplets = TripletSampler(dataset.classes, train).sample(rng, n_nll)
        everything = np.union1d(train, test)
        targets = sample_without_replacement(test, n_nll, rng)
        test_triplets = TripletSampler(dataset.classes, everything).sample_onto(targets, rng)
        if len(test_triplets[0]) == 0:
            _log.info("test_nll is NaN: no held-out image of split %s could be composed from the dataset's "
                      "images (the composition task needs a full factor grid)", split.name)
        out["train_nll"] = _mean(composition_nll(model, dataset.images, *train_triplets))
        out["test_nll"] = _mean(composition_nll(model, dataset.images, *test_triplets))
    out.update(nan_results())
    # the same keys as a VAE's row: the decoder's own readout, or none for the composition network
    out.update(decoder_readout(model, dataset, train, seed=seed) if isinstance(model, GroundTruthDecoder)
               else no_readout(dataset.factor_space))
    return out
