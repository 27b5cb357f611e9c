"""Reconstruction: the negative log-likelihood of images under a decoder's output, in nats per image.

Bernoulli: ``−Σ_pixels [x log p + (1 − x) log(1 − p)]`` with x the image in [0, 1] (uint8 ÷ 255)
and p the pixel probabilities clipped to [1e-7, 1 − 1e-7], or exact from ``logits``. A model
trained with the squared error (``likelihood="mse"``) is scored under the Gaussian of mean p and
variance ½ per pixel, whose NLL is ``Σ (x − p)² + (D/2)·log π`` (:func:`gaussian_nll_per_image`).
:func:`nll_per_image` picks one by name: "bernoulli" or "gaussian".
"""

from __future__ import annotations

import numpy as np

__all__ = ["reconstruction_nll", "bernoulli_nll_per_image", "gaussian_nll_per_image", "nll_per_image",
           "LIKELIHOODS", "likelihood_of"]

LIKELIHOODS = ("bernoulli", "gaussian")
# a model's training reconstruction term (models.config.LIKELIHOODS) → the likelihood it scores with
_OF_TRAINING = {"bernoulli": "bernoulli", "mse": "gaussian"}


def likelihood_of(training_likelihood: str) -> str:
    """The likelihood that scores a model trained with ``training_likelihood`` ("bernoulli" or "mse")."""
    if training_likelihood not in _OF_TRAINING:
        raise ValueError(f"likelihood: unknown {training_likelihood!r}; choose one of "
                         f"{', '.join(_OF_TRAINING)}")
    return _OF_TRAINING[training_likelihood]

_CLIP = 1e-7


def _check_images(images, name):
    array = np.asarray(images)
    if array.ndim < 2 or array.shape[0] == 0:
        raise ValueError(f"{name} must have shape (n_images, ...pixels) with n_images >= 1; "
                         f"got {array.shape}.")
    if array.dtype == np.uint8:
        return array.astype(np.float64) / 255.0
    array = array.astype(np.float64)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values; shape {array.shape}.")
    return array


def bernoulli_nll_per_image(images, probabilities=None, *, logits=None):
    """NLL (nats, summed over pixels) of each image; an array of shape (n_images,)."""
    if (probabilities is None) == (logits is None):
        raise ValueError("Give exactly one of probabilities and logits.")
    x = _check_images(images, "images")
    if x.min() < 0 or x.max() > 1:
        raise ValueError("images must be uint8 (0..255) or floats in [0, 1].")
    name, output = ("probabilities", probabilities) if logits is None else ("logits", logits)
    uint8 = np.asarray(output).dtype == np.uint8
    output = np.asarray(output, float) if uint8 else _check_images(output, name)
    if output.shape != x.shape:
        raise ValueError(f"{name} must have the shape of images, {x.shape}; got {output.shape}.")
    if logits is None:
        if output.min() < 0 or output.max() > 1:
            raise ValueError("probabilities must lie in [0, 1].")
        p = np.clip(output, _CLIP, 1 - _CLIP)
        per_pixel = -(x * np.log(p) + (1 - x) * np.log1p(-p))
    else:
        # −[x log σ(l) + (1 − x) log(1 − σ(l))] = softplus(l) − x l
        per_pixel = np.logaddexp(0.0, output) - x * output
    return per_pixel.reshape(x.shape[0], -1).sum(axis=1)


def gaussian_nll_per_image(images, probabilities):
    """NLL (nats) of each image under N(p, ½) per pixel: Σ (x − p)² + (D/2)·log π; shape (n_images,)."""
    x = _check_images(images, "images")
    p = _check_images(probabilities, "probabilities")
    if p.shape != x.shape:
        raise ValueError(f"probabilities must have the shape of images, {x.shape}; got {p.shape}.")
    squared = ((x - p) ** 2).reshape(x.shape[0], -1)
    return squared.sum(axis=1) + 0.5 * squared.shape[1] * np.log(np.pi)


def nll_per_image(images, probabilities, *, likelihood="bernoulli"):
    """Per-image NLL of ``images`` under decoded pixel values ``probabilities`` and ``likelihood``
    ("bernoulli" or "gaussian", see the module docstring)."""
    if likelihood == "bernoulli":
        return bernoulli_nll_per_image(images, probabilities)
    if likelihood == "gaussian":
        return gaussian_nll_per_image(images, probabilities)
    raise ValueError(f"likelihood: unknown {likelihood!r}; choose one of {', '.join(LIKELIHOODS)}")


def reconstruction_nll(images, probabilities=None, *, logits=None):
    """Mean, standard deviation and count of the per-image Bernoulli NLL.

    ``images`` (n_images, C, H, W) uint8 or floats in [0, 1]; ``probabilities`` or ``logits`` of
    the same shape. Returns ``"nll"`` (mean, nats per image), ``"nll_std"`` and ``"n_images"``.
    """
    nll = bernoulli_nll_per_image(images, probabilities, logits=logits)
    return {"nll": float(nll.mean()), "nll_std": float(nll.std()), "n_images": float(nll.size)}
