"""CompositionNet (Montero et al. 2021 §2.3 and appendix A; Montero et al. 2022).

The composition task: given a reference image, a transform image and a one-hot action naming a
factor, produce the reference image with that factor taken from the transform. The network
encodes both images with one VAE encoder, combines the two posterior samples and the action with
a latent operation, and decodes the result.

Latent operations:
- "linear" (M21's choice): h = W_r[z_r; a] + W_t[z_t; a];
- "interpolation": h = (1 − c(a))·z_r + c(a)·z_t, element-wise, with coefficients
  c(a) = sigmoid(W a + b) set by the action;
- "mlp": a 3-layer MLP with 100 hidden units on [z_r; z_t; a].
"""

from __future__ import annotations

import torch
from torch import nn

from models.architectures import ARCHITECTURES, initialise
from models.config import ModelConfig
from models.objectives import bernoulli_nll, gaussian_kl, posterior_sample

LATENT_OPS = ("linear", "interpolation", "mlp")


class LinearOp(nn.Module):
    def __init__(self, latent_dim: int, n_actions: int):
        super().__init__()
        self.reference = nn.Linear(latent_dim + n_actions, latent_dim, bias=False)
        self.transform = nn.Linear(latent_dim + n_actions, latent_dim, bias=False)

    def forward(self, z_reference, z_transform, action):
        return (self.reference(torch.cat([z_reference, action], 1))
                + self.transform(torch.cat([z_transform, action], 1)))


class InterpolationOp(nn.Module):
    def __init__(self, latent_dim: int, n_actions: int):
        super().__init__()
        self.coefficients = nn.Linear(n_actions, latent_dim)

    def forward(self, z_reference, z_transform, action):
        c = torch.sigmoid(self.coefficients(action))
        return (1 - c) * z_reference + c * z_transform


class MLPOp(nn.Sequential):
    def __init__(self, latent_dim: int, n_actions: int, hidden: int = 100):
        super().__init__(
            nn.Linear(2 * latent_dim + n_actions, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, latent_dim),
        )

    def forward(self, z_reference, z_transform, action):
        return super().forward(torch.cat([z_reference, z_transform, action], 1))


class CompositionNet(nn.Module):
    """Encoder and decoder of ``config.architecture`` (M21: burgess) around a latent operation."""

    def __init__(self, config: ModelConfig, n_actions: int, latent_op: str = "linear"):
        super().__init__()
        if latent_op not in LATENT_OPS:
            raise ValueError(f"latent_op: unknown {latent_op!r}; choose one of {', '.join(LATENT_OPS)}")
        if n_actions < 1:
            raise ValueError(f"n_actions: must be at least 1; got {n_actions}")
        self.config, self.n_actions, self.latent_op = config, n_actions, latent_op
        encoder, decoder = ARCHITECTURES[config.architecture]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.encoder = encoder(config.channels, config.latent_dim, config.image_size)
            self.decoder = decoder(config.channels, config.latent_dim, config.image_size)
            self.op = {"linear": LinearOp, "interpolation": InterpolationOp, "mlp": MLPOp}[latent_op](
                config.latent_dim, n_actions)
            initialise(self)

    def encode(self, x):
        return self.encoder(x)

    def decode(self, z):
        return self.decoder(z)

    def forward(self, reference, transform, action, generator: torch.Generator | None = None):
        """Logits of the composed image, and the posteriors (mean, logvar) of both inputs. With a
        ``generator`` the codes are posterior samples; without, the means."""
        mean, logvar = self.encoder(torch.cat([reference, transform]))
        z = posterior_sample(mean, logvar, generator) if generator is not None else mean
        z_reference, z_transform = z.chunk(2)
        action = action.float()
        return self.decoder(self.op(z_reference, z_transform, action)), mean, logvar

    def loss_terms(self, reference, transform, action, target, generator: torch.Generator,
                   beta: float | None = None) -> dict:
        """Bernoulli NLL of the target + β·KL (the KL of both inputs' posteriors, averaged)."""
        beta = self.config.beta if beta is None else beta
        logits, mean, logvar = self(reference, transform, action, generator)
        reconstruction = bernoulli_nll(logits, target).mean()
        kl = gaussian_kl(mean, logvar).sum(1).mean()
        return {"loss": reconstruction + beta * kl, "reconstruction": reconstruction, "kl": kl}
