"""Models: architectures, objectives and the training engine. Plain torch; no Ray.

Train one model from a Python session::

    import numpy as np
    from models import ModelConfig, build, train
    config = ModelConfig(architecture="burgess", objective="beta_vae", beta=4.0, steps=500)
    model = build(config)
    for progress in train(model, images, np.arange(len(images)), config):
        print(progress)
"""

from models.cascade_vae import CascadeVAE
from models.composition import CompositionNet
from models.config import ARCHITECTURES, OBJECTIVES, OBJECTIVES_ON_PAIRS, ModelConfig
from models.engine import NonFiniteLossError, Trainer, add_input_noise, select_device, train
from models.evaluation import encode_means, nll_per_image, reconstruct
from models.ground_truth import GroundTruthDecoder
from models.lie_group_vae import LieGroupVAE
from models.objectives import LOSS_TERMS, build_objective
from models.pairs import PairSampler
from models.vae import VAE, build

__all__ = [
    "ARCHITECTURES",
    "CascadeVAE",
    "CompositionNet",
    "GroundTruthDecoder",
    "LOSS_TERMS",
    "LieGroupVAE",
    "OBJECTIVES",
    "OBJECTIVES_ON_PAIRS",
    "ModelConfig",
    "NonFiniteLossError",
    "PairSampler",
    "Trainer",
    "VAE",
    "add_input_noise",
    "build",
    "build_objective",
    "encode_means",
    "nll_per_image",
    "reconstruct",
    "select_device",
    "train",
]
