"""Models: architectures, objectives and the training engine. Plain torch; no Ray."""

from models.config import ARCHITECTURES, OBJECTIVES, ModelConfig
from models.engine import NonFiniteLossError, Trainer, select_device, train
from models.evaluation import encode_means, nll_per_image, reconstruct
from models.vae import VAE, build

__all__ = [
    "ARCHITECTURES",
    "OBJECTIVES",
    "ModelConfig",
    "NonFiniteLossError",
    "Trainer",
    "VAE",
    "build",
    "encode_means",
    "nll_per_image",
    "reconstruct",
    "select_device",
    "train",
]
