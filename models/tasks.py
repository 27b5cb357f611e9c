"""The tasks a run may train, chosen by ``ModelConfig.task``, and one call that builds any of them.

- ``"vae"``: a VAE under ``config.objective`` (``models.engine.Trainer``);
- ``"ground_truth_decoder"``: Montero et al. 2021's decoder fed the true factor values
  (``models.ground_truth.GroundTruthDecoderTrainer``);
- ``"composition"``: the composition network (M21 §2.3, M22's CompositionNet;
  ``models.composition.CompositionTrainer``).

Every trainer has the ``Trainer`` interface a sweep drives: ``run(until_step, report_every)``
yields ``{step, loss, <terms>, images_per_second}``; ``step``, ``total_steps``, ``model``,
``device``; ``state_dict()`` / ``load_state_dict()`` resume exactly; a NaN or infinite loss term
raises ``NonFiniteLossError`` naming the step and the term. It also answers what a pack
(``models.packed.PackedTrainer``) answers, as a pack of one: ``members``, ``current_model(k)``,
``errors``, ``member_reports(report_every)`` and ``pack_state_dict()`` / ``load_pack_state_dict()``,
so that a sweep drives a lone model and a pack through the same calls.
"""

from __future__ import annotations

import numpy as np
import torch

from models.composition import CompositionNet, CompositionTrainer
from models.config import ModelConfig
from models.device import GPUSettings
from models.engine import Trainer
from models.ground_truth import GroundTruthDecoder, GroundTruthDecoderTrainer
from models.registry import build


def build_task_model(config: ModelConfig, classes: np.ndarray, factor_space, train_indices: np.ndarray):
    """The untrained model of ``config.task``, built from the config's ``network`` part and
    initialised from ``config.seed``.

    The ground-truth decoder has one input per factor of ``factor_space`` (its normalisation
    range, if ``normalise_factors``, comes from the training rows); the composition network has
    one action per factor and weighs its KL by ``beta``.
    """
    network = config.network
    if network.task == "ground_truth_decoder":
        values = factor_space.raw_values(classes)
        return GroundTruthDecoder.from_factors(
            values, train_indices, architecture=network.architecture, channels=network.channels,
            image_size=network.image_size, normalise=network.normalise_factors, seed=config.seed)
    if network.task == "composition":
        model = CompositionNet(network, n_actions=factor_space.n_factors, seed=config.seed, beta=config.beta,
                               loss=config.loss)
        model.config = config  # the record of what it was built from, as ``build`` keeps it
        return model
    return build(config)


def build_trainer(config: ModelConfig, images: np.ndarray, classes: np.ndarray, factor_space,
                  train_indices: np.ndarray, device: str | torch.device | None = None,
                  settings: GPUSettings | None = None) -> Trainer:
    """The trainer of ``config.task`` on the rows ``train_indices``, with a freshly built model.

    ``images`` (N, C, H, W) uint8; ``classes`` (N, F), each image's factor classes in
    ``factor_space`` (a ``data_pipeline`` ``FactorSpace``: names, sizes, raw values). The VAE
    task passes ``classes`` on for objectives that train on pairs (Ada-GVAE). ``settings``: the
    GPU settings (``models.device.GPUSettings``; defaults when None).

    This is the plain path, one model and one loop; ``models.packed.PackedTrainer`` trains
    several at once.
    """
    model = build_task_model(config, classes, factor_space, train_indices)
    if config.task == "ground_truth_decoder":
        return GroundTruthDecoderTrainer(model, images, classes, factor_space, train_indices, config, device,
                                         settings)
    if config.task == "composition":
        return CompositionTrainer(model, images, classes, factor_space, train_indices, config, device,
                                  settings)
    return Trainer(model, images, train_indices, config, device, factors=classes, settings=settings)
