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
import warnings

import numpy as np
import torch

from models.config import ModelConfig
from models.engine import Trainer, select_device, to_float


class TaskTrainer(Trainer):
    """``Trainer``'s loop, schedules (learning-rate milestones, KL warm-up), gradient clipping,
    bf16 autocast and progress reports, for a model that is not trained through an objective of
    ``models.objectives``. A subclass draws its step's inputs from ``batch_rng`` / ``noise_rng``
    and returns the loss terms in ``loss_terms``."""

    def __init__(self, model, images: np.ndarray, train_indices: np.ndarray, config: ModelConfig,
                 device: str | torch.device | None = None):
        if len(train_indices) == 0:
            raise ValueError("train_indices: the training set is empty")
        self.config = config
        self.device = select_device(device) if not isinstance(device, torch.device) else device
        self.model = model.to(self.device)
        self.images = images
        self.train_indices = np.asarray(train_indices, dtype=np.int64)
        self.total_steps = config.total_steps(len(self.train_indices))
        self.pairs = None
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr, foreach=True)
        self.step = 0
        self.batch_rng = np.random.default_rng(config.seed)
        self.noise_rng = torch.Generator(device=self.device).manual_seed(config.seed + 1)
        self.bf16 = config.bf16 and self.device.type == "cuda"
        if config.bf16 and not self.bf16:
            warnings.warn(f"bf16: autocast is used on CUDA only; training in float32 on {self.device}",
                          stacklevel=3)

    def batch_images(self, rows: np.ndarray) -> torch.Tensor:
        """Rows of the image array as floats in [0, 1] on the device."""
        if isinstance(self.images, torch.Tensor):  # resident on the device: only the indices cross
            index = torch.from_numpy(np.asarray(rows)).to(self.images.device, non_blocking=True)
            return self.images[index].to(self.device).float().div_(255.0)
        return to_float(self.images[rows], self.device)

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

    def state_dict(self) -> dict:
        """Everything needed to resume exactly."""
        return {
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "batch_rng": self.batch_rng.bit_generator.state,
            "noise_rng": self.noise_rng.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.batch_rng.bit_generator.state = state["batch_rng"]
        self.noise_rng.set_state(state["noise_rng"])


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
