"""Encoder and decoder architectures, by name.

burgess (Burgess et al. 2018, used by Montero et al. 2021): four 4×4 stride-2 convolutions of 32
channels, then two fully connected layers of 256; the decoder is the transpose.

Weights start from He (Kaiming) normal initialisation for ReLU layers, biases from zero. PyTorch's
default initialisation is about three times smaller in variance; with it a burgess VAE on dSprites
sits for hundreds of steps on the "mean image" plateau (reconstruction ≈ 485 nats, KL ≈ 0) before
the encoder starts to carry information. With He initialisation it leaves the plateau within about
100 steps (measured; see README).
"""

from __future__ import annotations

import torch
from torch import nn


class BurgessEncoder(nn.Module):
    """64×64×C image → (posterior mean, posterior log-variance), each (B, latent_dim)."""

    def __init__(self, channels: int, latent_dim: int):
        super().__init__()
        self.latent_dim = latent_dim
        self.conv = nn.Sequential(
            nn.Conv2d(channels, 32, 4, 2, 1), nn.ReLU(),  # 32×32
            nn.Conv2d(32, 32, 4, 2, 1), nn.ReLU(),  # 16×16
            nn.Conv2d(32, 32, 4, 2, 1), nn.ReLU(),  # 8×8
            nn.Conv2d(32, 32, 4, 2, 1), nn.ReLU(),  # 4×4
        )
        self.fc = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, 256), nn.ReLU(),
            nn.Linear(256, 256), nn.ReLU(),
            nn.Linear(256, 2 * latent_dim),
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, logvar = self.fc(self.conv(x)).chunk(2, dim=1)
        return mean, logvar


class BurgessDecoder(nn.Module):
    """(B, latent_dim) code → (B, C, 64, 64) Bernoulli logits."""

    def __init__(self, channels: int, latent_dim: int):
        super().__init__()
        self.fc = nn.Sequential(
            nn.Linear(latent_dim, 256), nn.ReLU(),
            nn.Linear(256, 256), nn.ReLU(),
            nn.Linear(256, 32 * 4 * 4), nn.ReLU(),
        )
        self.deconv = nn.Sequential(
            nn.ConvTranspose2d(32, 32, 4, 2, 1), nn.ReLU(),  # 8×8
            nn.ConvTranspose2d(32, 32, 4, 2, 1), nn.ReLU(),  # 16×16
            nn.ConvTranspose2d(32, 32, 4, 2, 1), nn.ReLU(),  # 32×32
            nn.ConvTranspose2d(32, channels, 4, 2, 1),  # 64×64
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.deconv(self.fc(z).view(-1, 32, 4, 4))


def initialise(module: nn.Module) -> None:
    """He-normal weights (for ReLU) and zero biases in every convolution and linear layer."""
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            nn.init.zeros_(layer.bias)


ARCHITECTURES = {"burgess": (BurgessEncoder, BurgessDecoder)}


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
