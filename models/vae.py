"""The variational auto-encoder: a diagonal-Gaussian posterior and a Bernoulli likelihood."""

from __future__ import annotations

import torch
from torch import nn

from models.architectures import ARCHITECTURES, decoder_factory, initialise


class VAE(nn.Module):
    """Encoder and decoder of ``network.architecture``; the objective lives in the engine."""

    def __init__(self, network, loss=None):
        """``network``: a ``models.config.NetworkConfig`` (a ``ModelConfig``'s ``network``:
        architecture, channels, latent size, image size). ``loss`` is not read: it is there so every
        objective's ``model_class`` is built alike (CascadeVAE and LieGroupVAE read theirs)."""
        super().__init__()
        encoder, decoder = ARCHITECTURES[network.architecture][0], decoder_factory(network.architecture,
                                                                                   network.decoder)
        self.network = network
        self.encoder = encoder(network.channels, network.latent_dim, network.image_size)
        self.decoder = decoder(network.channels, network.latent_dim, network.image_size)
        initialise(self)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and log-variance of a float batch in [0, 1]."""
        return self.encoder(x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Bernoulli logits of the images a batch of codes decodes to."""
        return self.decoder(z)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mean, logvar = self.encode(x)
        z = mean + torch.randn_like(mean) * torch.exp(0.5 * logvar) if self.training else mean
        return self.decode(z), mean, logvar
