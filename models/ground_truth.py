"""The ground-truth decoder (Montero et al. 2021): a decoder fed the true factor values.

It drops the encoder and decodes each image from its factor values, a perfectly disentangled
code. Montero et al. used Higgins et al.'s MLP decoder. Both authors' codebases feed raw values;
disgen offers raw values and values normalised to [0, 1] by the training rows' range.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

from models.architectures import ARCHITECTURES, initialise
from models.config import IMAGE_SIZES_PX, ModelConfig
from models.device import Rows, to_float
from models.engine import TaskTrainer
from models.objectives import bernoulli_nll


class GroundTruthDecoder(nn.Module):
    """Factor values (B, F) → Bernoulli logits (B, C, S, S) through ``architecture``'s decoder.

    With ``normalise``, each factor is mapped to [0, 1] by ``low`` and ``high`` (from
    ``from_factors``, the training rows' range); otherwise raw values go in.
    """

    def __init__(self, n_factors: int, architecture: str = "higgins", channels: int = 1, image_size: int = 64,
                 normalise: bool = False, low=None, high=None, seed: int = 0):
        super().__init__()
        if architecture not in ARCHITECTURES:
            raise ValueError(f"architecture: unknown {architecture!r}; "
                             f"choose one of {', '.join(ARCHITECTURES)}")
        if image_size not in IMAGE_SIZES_PX:
            sizes = " or ".join(map(str, IMAGE_SIZES_PX))
            raise ValueError(f"image_size: must be {sizes} (px); got {image_size}")
        if n_factors < 1:
            raise ValueError(f"n_factors: must be at least 1; got {n_factors}")
        self.normalise = normalise
        low = torch.zeros(n_factors) if low is None else torch.as_tensor(low, dtype=torch.float32)
        high = torch.ones(n_factors) if high is None else torch.as_tensor(high, dtype=torch.float32)
        self.register_buffer("low", low)
        self.register_buffer("span", torch.where(high > low, high - low, torch.ones_like(high)))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.decoder = ARCHITECTURES[architecture][1](channels, n_factors, image_size)
            initialise(self.decoder)

    @classmethod
    def from_factors(cls, factors: np.ndarray, train_indices: np.ndarray, **options) -> GroundTruthDecoder:
        """A decoder for ``factors`` (N, F); with ``normalise=True`` the range comes from the
        training rows."""
        values = np.asarray(factors, dtype=np.float64)[np.asarray(train_indices)]
        return cls(values.shape[1], low=values.min(0), high=values.max(0), **options)

    def inputs(self, factors: torch.Tensor) -> torch.Tensor:
        factors = factors.float()
        return (factors - self.low) / self.span if self.normalise else factors

    def forward(self, factors: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.inputs(factors))

    def loss_terms(self, factors: torch.Tensor, x: torch.Tensor) -> dict:
        reconstruction = bernoulli_nll(self(factors), x).mean()
        return {"loss": reconstruction, "reconstruction": reconstruction}

    @torch.no_grad()
    def nll_per_image(self, images: np.ndarray, factors: np.ndarray, indices: np.ndarray,
                      batch_size: int = 512) -> np.ndarray:
        """Bernoulli NLL (nats, summed over pixels) of each row's image given its factors."""
        self.eval()
        device = self.low.device
        out = []
        for start in range(0, len(indices), batch_size):
            rows = indices[start:start + batch_size]
            f = torch.as_tensor(np.asarray(factors[rows], dtype=np.float32), device=device)
            out.append(bernoulli_nll(self(f), to_float(images[rows], device)).cpu())
        return torch.cat(out).numpy() if out else np.zeros(0, np.float32)


class GroundTruthDecoderTrainer(TaskTrainer):
    """Trains a :class:`GroundTruthDecoder` on the rows ``train_indices``: each step draws a seeded
    batch of rows (with replacement, as ``Trainer`` does), feeds their factor values and takes one
    Adam step on the images' Bernoulli NLL. ``Trainer``'s interface (see ``models.engine``).

    ``classes`` (N, F) are the images' factor classes and ``factor_space`` turns them into raw
    values (``raw_values``); with ``factor_space=None``, ``classes`` already holds each image's
    factor values. The decoder normalises them itself if it was built with ``normalise=True``.
    """

    def __init__(self, model: GroundTruthDecoder, images: np.ndarray, classes: np.ndarray, factor_space,
                 train_indices: np.ndarray, config: ModelConfig, device=None, settings=None):
        super().__init__(model, images, train_indices, config, device, settings)
        values = np.asarray(classes if factor_space is None else factor_space.raw_values(classes))
        if values.ndim != 2 or len(values) != len(images):
            raise ValueError(f"classes: expected one row of factors per image, ({len(images)}, F); "
                             f"got shape {values.shape}")
        if values.shape[1] != model.low.shape[0]:
            raise ValueError(f"classes: the decoder reads {model.low.shape[0]} factors; "
                             f"got {values.shape[1]}")
        # every row's factor values, on the device
        self.values = torch.as_tensor(values, dtype=torch.float32).to(self.device)

    def draw_inputs(self, rows: Rows | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of training rows (``draw_rows``' sorted batch): their factor values and images."""
        rows = self.rows_ahead(1)[0] if rows is None else rows
        return self.values[rows.on_device], self.batch_images(rows)

    def loss_terms(self, inputs) -> dict[str, torch.Tensor]:
        return self.model.loss_terms(*inputs)


def train_ground_truth_decoder(decoder: GroundTruthDecoder, images: np.ndarray, factors: np.ndarray,
                               train_indices: np.ndarray, *, steps: int, batch_size: int = 64,
                               lr: float = 1e-3, seed: int = 0, report_every: int = 50,
                               device=None) -> Iterator[dict]:
    """Adam on the Bernoulli NLL of the images given their factor values ``factors`` (N, F),
    yielding {step, loss, reconstruction, images_per_second} every ``report_every`` steps
    (M21's code: lr 1e-3). :class:`GroundTruthDecoderTrainer` with a config of these values."""
    config = ModelConfig(task="ground_truth_decoder", steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                         channels=images.shape[1], image_size=images.shape[2], architecture="higgins")
    device = device if device is not None else decoder.low.device
    trainer = GroundTruthDecoderTrainer(decoder, images, factors, None, train_indices, config, device)
    yield from trainer.run(report_every=report_every)
