"""What the ground-truth decoder and the composition network are scored by (Montero et al. 2021):
the Bernoulli NLL per image of the decoder's rendering of the factor values, the composition
network's NLL per triplet, and the decoder's likelihood readout per factor.

Plain functions of a trained model and rows; :func:`analysis.evaluation.evaluate` draws the rows
and makes them a results row (its module docstring says which rows, and why).
"""

from __future__ import annotations

import numpy as np
import torch

from analysis.metrics.factor_readout import readout_score
from models.composition import CompositionNet
from models.engine import to_float
from models.ground_truth import GroundTruthDecoder
from models.inference import evaluating
from models.objectives import bernoulli_nll


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


def ground_truth_renderings(decoder: GroundTruthDecoder, values: np.ndarray,
                            batch_size: int = 512) -> np.ndarray:
    """The decoder's pixel probabilities (N, C, H, W) of factor values ``values`` (N, F)."""
    device = decoder.low.device
    out = []
    with evaluating(decoder):
        for start in range(0, len(values), batch_size):
            factors = torch.as_tensor(np.asarray(values[start:start + batch_size], dtype=np.float32),
                                      device=device)
            out.append(torch.sigmoid(decoder(factors)).cpu())
    return torch.cat(out).numpy() if out else np.zeros((0, 1, 1, 1), np.float32)


def decoder_readout_scores(decoder: GroundTruthDecoder, dataset, train: np.ndarray, rows: np.ndarray) -> dict:
    """Whether the decoder learned to render each factor on its training images: each image of
    the training ``rows`` is decoded, for each factor, with every value the factor takes on the
    training images ``train``, the others kept, and the value whose decoding gives the image the
    lowest NLL is the readout's prediction. Scored as an encoder's readout is
    (:func:`analysis.metrics.factor_readout.readout_score`: accuracy against chance for a
    categorical factor, R² for the others): ``{factor: {"kind", "score", "chance"}}``, as
    :func:`~analysis.metrics.factor_readout.factor_readout_scores` returns for an encoder."""
    space = dataset.factor_space
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
    return scores


def composition_predictions(net: CompositionNet, images: np.ndarray, reference: np.ndarray,
                            transform: np.ndarray, action: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """The network's predicted targets (pixel probabilities) of triplets (row arrays of
    ``images``), composing the posterior means."""
    out = [torch.sigmoid(logits).cpu()
           for _, logits in _composed_logits(net, images, reference, transform, action, batch_size)]
    return torch.cat(out).numpy() if out else np.zeros((0, *images.shape[1:]), np.float32)


def composition_nll(net: CompositionNet, images: np.ndarray, reference: np.ndarray, transform: np.ndarray,
                    target: np.ndarray, action: np.ndarray, batch_size: int = 256, *,
                    targets=None) -> np.ndarray:
    """Bernoulli NLL per triplet of the target given reference, transform and action (row arrays),
    composing the posterior means. ``target`` indexes ``targets`` where given (the held-out
    sample's images), else ``images``."""
    targets = images if targets is None else targets
    out = [bernoulli_nll(logits, to_float(targets[target[part]], logits.device)).cpu()
           for part, logits in _composed_logits(net, images, reference, transform, action, batch_size)]
    return torch.cat(out).numpy() if out else np.zeros(0, np.float32)


def _composed_logits(net: CompositionNet, images: np.ndarray, reference: np.ndarray, transform: np.ndarray,
                     action: np.ndarray, batch_size: int):
    """(slice, logits of the composed images) per batch of triplets (row arrays of ``images``),
    composing the posterior means, the network in evaluation mode."""
    device = next(net.parameters()).device
    with evaluating(net):
        for start in range(0, len(action), batch_size):
            part = slice(start, start + batch_size)
            one_hot = torch.nn.functional.one_hot(torch.as_tensor(action[part]), net.n_actions).to(device)
            logits, _, _ = net(to_float(images[reference[part]], device),
                               to_float(images[transform[part]], device), one_hot)
            yield part, logits
