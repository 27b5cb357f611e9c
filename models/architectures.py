"""Encoder and decoder architectures, by name.

Every encoder maps a float image batch (B, C, S, S) to the posterior mean and log-variance, each
(B, latent_dim); every decoder maps a code (B, latent_dim) to Bernoulli logits (B, C, S, S).
C is 1 or 3 and S is 64 or 128 (``models.config.IMAGE_SIZES_PX``, for every architecture).

- higgins (Higgins et al. 2017; Montero et al. 2021's MLP and GT decoder): encoder 1200-1200 ReLU;
  decoder three layers of 1200 with tanh.
- burgess (Burgess et al. 2018, Montero et al. 2021): four 4×4 stride-2 convolutions of 32
  channels, then fully connected 256, 256; the decoder is the transpose.
- burgess_v2 (what Montero et al. 2021's scripts ran on dSprites): convolutions 32, 32, 64, 64,
  then 256, 256.
- kim (Kim & Mnih 2018's FactorVAE network; Montero et al. 2021 on 3DShapes and MPI3D):
  convolutions 32, 32, 64, 64, then 256.
- mpcnn (Montero et al. 2021, appendix A: "a 3-layer CNN with 32×4×2×1 convolutions and max
  pooling, followed by a 2-layer MLP with 256 units"): three 4×4 stride-2 convolutions of 32
  channels, one 2×2 max pooling (64 px: 8×8 → 4×4, so the fully connected layers see the same
  32×4×4 features as burgess's), then 256, 256; the decoder is the transpose, with a ×2
  nearest-neighbour upsampling in place of the pooling. Where the pooling goes is our reading of
  the text (it names the pooling but not its place; pooling after every convolution would shrink a
  64 px image to 1×1 and discard position).
- montero, abdi (Montero et al. 2022): convolutions 64, 64, 128, 128, 256 / 32, 32, 64, 128, 256,
  then 256.
- sbd3, sbd4 (decoders only, Montero et al. 2022's spatial broadcast decoder, after Watters et al.
  2019; the ``decoder`` setting): the code is tiled over an S×S grid, two coordinate channels
  (x along the width and y along the height, each linspace(−1, 1, S)) are appended, then 5×5
  stride-1 'same' convolutions of 64 channels with ReLU (two for sbd3, three for sbd4) and a last
  5×5 convolution to the image's channels (mmrl/lost-in-latent-space scripts/configs/vaes.py,
  ``sbd3`` lines 192-203 and ``sbd4`` lines 206-220; src/models/sbd.py). M22's sbd3 ends in 3
  channels, its datasets' channel count; here the last layer has the dataset's.
- dittadi (Dittadi et al. 2021): a 5×5 stride-2 convolution to 64 channels, 10 residual blocks of
  two 3×3 convolutions with a ReZero gate (a learnable scalar that starts at 0, so each block
  starts as the identity), 1×1 convolutions 64 → 128 → 256 and average pooling down to 4×4, then
  a fully connected layer, LayerNorm, and the posterior heads. The decoder mirrors it with
  bilinear upsampling and ends in a 5×5 convolution. 23 convolutions in each half.

The convolutional networks of Montero et al. are defined at 64 px; at 128 px disgen adds one more
stride-2 layer of the first layer's width (ours, not the papers'). dittadi is D21's 128 px network;
its 64 px variant (ours) drops the first average pooling and the last upsampling, so it has the
same parameters.

Dittadi et al.'s table lost two numbers in our copy, so two choices are ours and documented:
the hidden fully connected width (512, which makes the total about 16.4M parameters, against the
paper's "approximately 16.3M") and the log-variance head's initialisation (weights at a tenth of
the usual standard deviation, bias -1, so the posterior starts with a standard deviation ≈ 0.6).

Weights start from He (Kaiming) normal initialisation for ReLU layers, biases from zero. PyTorch's
default initialisation is about three times smaller in variance; with it a burgess VAE on dSprites
sits for hundreds of steps on the "mean image" plateau (reconstruction ≈ 485 nats, KL ≈ 0) before
the encoder starts to carry information. With He initialisation it leaves the plateau within about
100 steps (measured; see README).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# ----------------------------------------------------------------------------------------------
# Montero et al.'s networks: a stack of 4×4 stride-2 convolutions and fully connected layers


class ConvEncoder(nn.Module):
    """Stride-2 4×4 convolutions of ``conv_widths`` channels (then, with ``max_pool``, one 2×2 max
    pooling), then fully connected ``fc_widths``, then one layer giving the posterior mean and
    log-variance."""

    def __init__(self, channels: int, latent_dim: int, image_size: int, conv_widths, fc_widths,
                 max_pool: bool = False):
        super().__init__()
        self.latent_dim = latent_dim
        widths = list(conv_widths)
        if image_size == 128:
            widths = widths[:1] + widths
        layers, previous = [], channels
        for width in widths:
            layers += [nn.Conv2d(previous, width, 4, 2, 1), nn.ReLU()]
            previous = width
        if max_pool:
            layers.append(nn.MaxPool2d(2))
        self.conv = nn.Sequential(*layers)
        side = image_size // 2 ** (len(widths) + max_pool)
        fc, features = [nn.Flatten()], previous * side * side
        for width in fc_widths:
            fc += [nn.Linear(features, width), nn.ReLU()]
            features = width
        fc.append(nn.Linear(features, 2 * latent_dim))
        self.fc = nn.Sequential(*fc)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, logvar = self.fc(self.conv(x)).chunk(2, dim=1)
        return mean, logvar


class ConvDecoder(nn.Module):
    """The transpose of ``ConvEncoder``: fully connected layers, then (with ``max_pool``) a ×2
    nearest-neighbour upsampling where the encoder pooled, then 4×4 stride-2 transposed
    convolutions back to the image."""

    def __init__(self, channels: int, latent_dim: int, image_size: int, conv_widths, fc_widths,
                 max_pool: bool = False):
        super().__init__()
        widths = list(conv_widths)
        if image_size == 128:
            widths = widths[:1] + widths
        self.side = image_size // 2 ** (len(widths) + max_pool)
        self.top_width = widths[-1]
        fc, features = [], latent_dim
        for width in list(fc_widths)[::-1] + [self.top_width * self.side * self.side]:
            fc += [nn.Linear(features, width), nn.ReLU()]
            features = width
        self.fc = nn.Sequential(*fc)
        outputs = widths[::-1][1:] + [channels]
        layers, previous = ([nn.Upsample(scale_factor=2, mode="nearest")] if max_pool else []), self.top_width
        for i, width in enumerate(outputs):
            layers.append(nn.ConvTranspose2d(previous, width, 4, 2, 1))
            if i < len(outputs) - 1:
                layers.append(nn.ReLU())
            previous = width
        self.deconv = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.deconv(self.fc(z).view(-1, self.top_width, self.side, self.side))


def _conv_pair(conv_widths, fc_widths, max_pool: bool = False):
    def encoder(channels, latent_dim, image_size):
        return ConvEncoder(channels, latent_dim, image_size, conv_widths, fc_widths, max_pool)

    def decoder(channels, latent_dim, image_size):
        return ConvDecoder(channels, latent_dim, image_size, conv_widths, fc_widths, max_pool)

    return encoder, decoder


# ----------------------------------------------------------------------------------------------
# Higgins et al.'s MLP


class HigginsEncoder(nn.Module):
    """Flattened image → 1200 → 1200 (ReLU) → posterior mean and log-variance."""

    def __init__(self, channels: int, latent_dim: int, image_size: int, hidden: int = 1200):
        super().__init__()
        self.latent_dim = latent_dim
        self.fc = nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * image_size * image_size, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, 2 * latent_dim),
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, logvar = self.fc(x).chunk(2, dim=1)
        return mean, logvar


class HigginsDecoder(nn.Module):
    """Code → 1200 → 1200 → 1200 (tanh) → pixel logits."""

    def __init__(self, channels: int, latent_dim: int, image_size: int, hidden: int = 1200):
        super().__init__()
        self.shape = (channels, image_size, image_size)
        self.fc = nn.Sequential(
            nn.Linear(latent_dim, hidden), nn.Tanh(),
            nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, channels * image_size * image_size),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.fc(z).view(-1, *self.shape)


# ----------------------------------------------------------------------------------------------
# Dittadi et al.'s residual network


class ResidualBlock(nn.Module):
    """Two 3×3 convolutions (leaky ReLU before each), scaled by a learnable scalar gate that starts
    at 0 (ReZero), added to the input."""

    def __init__(self, width: int):
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.gate = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.leaky_relu(x))
        h = self.conv2(F.leaky_relu(h))
        return x + self.gate * h


def _residual_pair(width: int) -> list[nn.Module]:
    return [ResidualBlock(width), ResidualBlock(width)]


class DittadiEncoder(nn.Module):
    HIDDEN = 512

    def __init__(self, channels: int, latent_dim: int, image_size: int):
        super().__init__()
        self.latent_dim = latent_dim
        first_pool = [nn.AvgPool2d(2)] if image_size == 128 else []
        self.conv = nn.Sequential(
            nn.Conv2d(channels, 64, 5, stride=2, padding=2),  # S/2
            *_residual_pair(64), *first_pool,  # 128 px: 32
            nn.Conv2d(64, 128, 1),
            *_residual_pair(128), nn.AvgPool2d(2),  # 16
            *_residual_pair(128), nn.AvgPool2d(2),  # 8
            nn.Conv2d(128, 256, 1),
            *_residual_pair(256), nn.AvgPool2d(2),  # 4
            *_residual_pair(256),
            nn.LeakyReLU(),
            nn.Flatten(),
        )
        self.fc = nn.Sequential(nn.Linear(256 * 4 * 4, self.HIDDEN), nn.LeakyReLU())
        self.norm = nn.LayerNorm(self.HIDDEN)
        self.mean = nn.Linear(self.HIDDEN, latent_dim)
        self.logvar = nn.Linear(self.HIDDEN, latent_dim)

    def special_initialisation(self) -> None:
        """The log-variance head starts small: weights at 1/10 of the He std, bias -1."""
        with torch.no_grad():
            self.logvar.weight.mul_(0.1)
            self.logvar.bias.fill_(-1.0)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.norm(self.fc(self.conv(x)))
        return self.mean(h), self.logvar(h)


class DittadiDecoder(nn.Module):
    def __init__(self, channels: int, latent_dim: int, image_size: int):
        super().__init__()
        hidden = DittadiEncoder.HIDDEN
        self.fc = nn.Sequential(
            nn.Linear(latent_dim, hidden), nn.LeakyReLU(),
            nn.Linear(hidden, 256 * 4 * 4),
        )
        up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        last_up = [nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)] if image_size == 128 else []
        self.conv = nn.Sequential(
            *_residual_pair(256), up,  # 8
            *_residual_pair(256),
            nn.Conv2d(256, 128, 1), nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),  # 16
            *_residual_pair(128), nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),  # 32
            *_residual_pair(128),
            nn.Conv2d(128, 64, 1), *last_up,  # 128 px: 64
            *_residual_pair(64), nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),  # S
            nn.LeakyReLU(),
            nn.Conv2d(64, channels, 5, padding=2),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.conv(self.fc(z).view(-1, 256, 4, 4))


# ----------------------------------------------------------------------------------------------
# Montero et al. 2022's spatial broadcast decoder


class SpatialBroadcastDecoder(nn.Module):
    """Code (B, K) → tiled (B, K, S, S) with x and y coordinate channels appended (B, K + 2, S, S)
    → ``hidden_layers`` 5×5 'same' convolutions of ``width`` channels with ReLU → a 5×5 'same'
    convolution to ``channels`` logits."""

    def __init__(self, channels: int, latent_dim: int, image_size: int, hidden_layers: int = 2,
                 width: int = 64):
        super().__init__()
        self.image_size = image_size
        layers, previous = [], latent_dim + 2
        for _ in range(hidden_layers):
            layers += [nn.Conv2d(previous, width, 5, 1, 2), nn.ReLU()]
            previous = width
        layers.append(nn.Conv2d(previous, channels, 5, 1, 2))
        self.conv = nn.Sequential(*layers)

    def broadcast(self, z: torch.Tensor) -> torch.Tensor:
        """The decoder's input: each code tiled over the grid, then the x (varies along the width)
        and y (along the height) coordinate channels, each linspace(−1, 1, S)."""
        side = self.image_size
        tiled = z[:, :, None, None].expand(-1, -1, side, side)
        line = torch.linspace(-1, 1, side, device=z.device, dtype=z.dtype)
        x = line.view(1, 1, 1, side).expand(len(z), 1, side, side)
        y = line.view(1, 1, side, 1).expand(len(z), 1, side, side)
        return torch.cat([tiled, x, y], dim=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.conv(self.broadcast(z))


def _spatial_broadcast(hidden_layers: int):
    def decoder(channels, latent_dim, image_size):
        return SpatialBroadcastDecoder(channels, latent_dim, image_size, hidden_layers)

    return decoder


# the ``decoder`` setting: "mirror" is the architecture's own decoder (the encoder's transpose);
# the others replace it whatever the encoder
DECODERS = {"sbd3": _spatial_broadcast(2), "sbd4": _spatial_broadcast(3)}
DECODER_NAMES = ("mirror", *DECODERS)


def decoder_factory(architecture: str, decoder: str = "mirror"):
    """The decoder factory (channels, input size, image size) of ``architecture`` with ``decoder``
    in its place unless that is "mirror"."""
    return ARCHITECTURES[architecture][1] if decoder == "mirror" else DECODERS[decoder]


# ----------------------------------------------------------------------------------------------


def initialise(module: nn.Module) -> None:
    """He-normal weights (for ReLU) and zero biases in every convolution and linear layer; then
    any layer's own ``special_initialisation`` (dittadi's log-variance head). A module on PyTorch's
    meta device holds no values, so there is nothing to draw: it is left as it is (the memory and
    FLOP counts build their models there, ``models.packed.step_memory`` and
    ``sweeps.costs.training_flops_per_image``; drawing on the meta device goes through PyTorch's
    Python decompositions, and took most of a dry run's seconds)."""
    first = next(module.parameters(), None)
    if first is not None and first.is_meta:
        return
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
    for layer in module.modules():
        if hasattr(layer, "special_initialisation"):
            layer.special_initialisation()


# name → (encoder factory, decoder factory); each factory takes (channels, latent_dim, image_size)
ARCHITECTURES = {
    "higgins": (HigginsEncoder, HigginsDecoder),
    "burgess": _conv_pair((32, 32, 32, 32), (256, 256)),
    "burgess_v2": _conv_pair((32, 32, 64, 64), (256, 256)),
    "kim": _conv_pair((32, 32, 64, 64), (256,)),
    "mpcnn": _conv_pair((32, 32, 32), (256, 256), max_pool=True),
    "montero": _conv_pair((64, 64, 128, 128, 256), (256,)),
    "abdi": _conv_pair((32, 32, 64, 128, 256), (256,)),
    "dittadi": (DittadiEncoder, DittadiDecoder),
}


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
