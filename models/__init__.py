"""Models: architectures, objectives and the training engine. Plain torch; no Ray.

Train one model from a Python session::

    import numpy as np
    from models import ModelConfig, build, train
    config = ModelConfig(architecture="burgess", objective="beta_vae", beta=4.0, steps=500)
    model = build(config)
    for progress in train(model, images, np.arange(len(images)), config):
        print(progress)

``ModelConfig.task`` picks what is trained ("vae", "ground_truth_decoder" or "composition");
``build_trainer(config, images, classes, factor_space, train_indices)`` returns its trainer.
"""

from models.cascade_vae import CascadeVAE
from models.composition import CompositionNet, CompositionTrainer, TripletSampler
from models.config import (
    ARCHITECTURES,
    LATENT_OPS,
    OBJECTIVES_ON_PAIRS,
    TASKS,
    LossConfig,
    ModelConfig,
    NetworkConfig,
    OptimisationConfig,
)
from models.device import GPUSettings, select_device
from models.engine import NonFiniteLossError, TaskTrainer, Trainer, add_input_noise, train
from models.ground_truth import GroundTruthDecoder, GroundTruthDecoderTrainer
from models.inference import encode_means, nll_per_image, reconstruct
from models.lie_group_vae import LieGroupVAE
from models.pairs import PairSampler
from models.registry import LOSS_TERMS, OBJECTIVES, build, build_objective
from models.tasks import build_task_model, build_trainer
from models.vae import VAE

__all__ = [
    "ARCHITECTURES",
    "CascadeVAE",
    "CompositionNet",
    "CompositionTrainer",
    "GPUSettings",
    "GroundTruthDecoder",
    "GroundTruthDecoderTrainer",
    "LATENT_OPS",
    "LOSS_TERMS",
    "LieGroupVAE",
    "LossConfig",
    "OBJECTIVES",
    "OBJECTIVES_ON_PAIRS",
    "OptimisationConfig",
    "ModelConfig",
    "NetworkConfig",
    "NonFiniteLossError",
    "PairSampler",
    "TASKS",
    "TaskTrainer",
    "Trainer",
    "TripletSampler",
    "VAE",
    "add_input_noise",
    "build",
    "build_objective",
    "build_task_model",
    "build_trainer",
    "encode_means",
    "nll_per_image",
    "reconstruct",
    "select_device",
    "train",
]
