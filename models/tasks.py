"""The tasks a run may train, chosen by ``ModelConfig.task``, and one call that builds any of them.

- ``"vae"``: a VAE under ``config.objective`` (``models.engine.Trainer``);
- ``"ground_truth_decoder"``: Montero et al. 2021's decoder fed the true factor values
  (``models.ground_truth.GroundTruthDecoderTrainer``);
- ``"composition"``: the composition network (M21 §2.3, M22's CompositionNet;
  ``models.composition.CompositionTrainer``).

Every trainer has the ``Trainer`` interface a sweep drives: ``run(until_step, report_every)``
yields ``{step, loss, <terms>, images_per_second}``; ``step``, ``total_steps``, ``model``,
``device``; ``state_dict()`` / ``load_state_dict()`` resume exactly; a NaN or infinite loss term
raises ``NonFiniteLossError`` naming the step and the term.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from models.config import ModelConfig
from models.engine import Trainer


class TaskTrainer(Trainer):
    """``Trainer``'s loop, schedules (learning-rate milestones, KL warm-up), gradient clipping,
    bf16 autocast and progress reports, for a model that is not trained through an objective of
    ``models.objectives``. A subclass draws its step's inputs from ``batch_rng`` / ``noise_rng``
    and returns the loss terms in ``loss_terms``."""

    def __init__(self, model, images: np.ndarray, train_indices: np.ndarray, config: ModelConfig,
                 device: str | torch.device | None = None):
        self.set_up(model, images, train_indices, config, device)

    def loss_terms(self) -> dict[str, torch.Tensor]:
        """The next step's loss terms ("loss" is minimised); the subclass draws its own inputs."""
        raise NotImplementedError

    def train_step(self) -> dict[str, torch.Tensor]:
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate()
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
        with autocast:
            terms = self.loss_terms()
        self.optimizer.zero_grad(set_to_none=True)
        terms["loss"].backward()
        if self.config.grad_clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip_norm)
        self.optimizer.step()
        self.step += 1
        return {name: value.detach() for name, value in terms.items()}


def build_task_model(config: ModelConfig, classes: np.ndarray, factor_space, train_indices: np.ndarray):
    """The untrained model of ``config.task``, initialised from ``config.seed``.

    The ground-truth decoder has one input per factor of ``factor_space`` (its normalisation
    range, if ``config.normalise_factors``, comes from the training rows); the composition
    network has one action per factor.
    """
    if config.task == "ground_truth_decoder":
        from models.ground_truth import GroundTruthDecoder

        values = factor_space.raw_values(classes)
        return GroundTruthDecoder.from_factors(
            values, train_indices, architecture=config.architecture, channels=config.channels,
            image_size=config.image_size, normalise=config.normalise_factors, seed=config.seed)
    if config.task == "composition":
        from models.composition import CompositionNet

        return CompositionNet(config, n_actions=factor_space.n_factors, latent_op=config.latent_op)
    from models.vae import build

    return build(config)


def build_trainer(config: ModelConfig, images: np.ndarray, classes: np.ndarray, factor_space,
                  train_indices: np.ndarray, device: str | torch.device | None = None) -> Trainer:
    """The trainer of ``config.task`` on the rows ``train_indices``, with a freshly built model.

    ``images`` (N, C, H, W) uint8; ``classes`` (N, F), each image's factor classes in
    ``factor_space`` (a ``data_pipeline`` ``FactorSpace``: names, sizes, raw values). The VAE
    task passes ``classes`` on for objectives that train on pairs (Ada-GVAE).
    """
    model = build_task_model(config, classes, factor_space, train_indices)
    if config.task == "ground_truth_decoder":
        from models.ground_truth import GroundTruthDecoderTrainer

        return GroundTruthDecoderTrainer(model, images, classes, factor_space, train_indices, config, device)
    if config.task == "composition":
        from models.composition import CompositionTrainer

        return CompositionTrainer(model, images, classes, factor_space, train_indices, config, device)
    return Trainer(model, images, train_indices, config, device, factors=classes)
