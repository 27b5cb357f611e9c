"""The training engine: a step loop one can read top to bottom, with exact checkpoints.

The data is one uint8 array (N, C, H, W) shared by every consumer and a vector of the rows to
train on. Each step draws a batch of row indices from a seeded generator, converts just that batch
to floats on the device, and takes one Adam step. All randomness (batch order, reparameterisation
noise) comes from generators whose state is in the checkpoint, so a resumed run follows the same
trajectory as an uninterrupted one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import torch

from models.config import ModelConfig
from models.objectives import loss_terms


def select_device(preferred: str | None = None) -> torch.device:
    """``preferred`` if given, else cuda, then mps, then cpu."""
    if preferred:
        return torch.device(preferred)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def to_float(batch: np.ndarray, device: torch.device) -> torch.Tensor:
    """uint8 images (0..255) → float in [0, 1] on ``device``."""
    return torch.from_numpy(batch).to(device, non_blocking=True).float().div_(255.0)


class NonFiniteLossError(FloatingPointError):
    """A loss term became NaN or infinite; the message names the step and the term."""


class Trainer:
    """Trains one model on the rows ``train_indices`` of ``images``."""

    def __init__(self, model, images: np.ndarray, train_indices: np.ndarray, config: ModelConfig,
                 device: str | torch.device | None = None):
        if len(train_indices) == 0:
            raise ValueError("train_indices: the training set is empty")
        self.config = config
        self.device = select_device(device) if not isinstance(device, torch.device) else device
        self.model = model.to(self.device)
        self.images = images
        self.train_indices = np.asarray(train_indices, dtype=np.int64)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.step = 0
        self.batch_rng = np.random.default_rng(config.seed)
        self.noise_rng = torch.Generator(device=self.device).manual_seed(config.seed + 1)

    def kl_weight(self) -> float:
        """Linear KL warm-up: 0 → 1 over ``kl_warmup_steps`` (always 1 without warm-up)."""
        warmup = self.config.kl_warmup_steps
        return 1.0 if warmup == 0 else min(1.0, self.step / warmup)

    def train_step(self) -> dict[str, torch.Tensor]:
        rows = self.batch_rng.choice(self.train_indices, size=self.config.batch_size)
        x = to_float(self.images[np.sort(rows)], self.device)

        mean, logvar = self.model.encode(x)
        noise = torch.randn(mean.shape, generator=self.noise_rng, device=self.device)
        logits = self.model.decode(mean + noise * torch.exp(0.5 * logvar))
        terms = loss_terms(self.config, logits, x, mean, logvar, kl_weight=self.kl_weight())

        self.optimizer.zero_grad(set_to_none=True)
        terms["loss"].backward()
        if self.config.grad_clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip_norm)
        self.optimizer.step()
        self.step += 1
        return {name: value.detach() for name, value in terms.items()}

    def run(self, until_step: int | None = None, report_every: int = 50) -> Iterator[dict]:
        """Train to ``until_step`` (default: the config's steps), yielding a progress dict every
        ``report_every`` steps and at the end: the step, the mean of each loss term since the last
        report, and images per second."""
        until_step = self.config.steps if until_step is None else until_step
        self.model.train()
        sums: dict[str, torch.Tensor] = {}
        count, started = 0, time.perf_counter()
        while self.step < until_step:
            terms = self.train_step()
            for name, value in terms.items():
                sums[name] = sums.get(name, 0.0) + value
            count += 1
            if self.step % report_every == 0 or self.step == until_step:
                means = {name: float(total) / count for name, total in sums.items()}
                bad = [name for name, value in means.items() if not np.isfinite(value)]
                if bad:
                    raise NonFiniteLossError(
                        f"step {self.step}: loss term {', '.join(bad)} is not finite "
                        f"({', '.join(f'{n}={means[n]}' for n in bad)}); lower the learning rate "
                        "or set grad_clip_norm"
                    )
                elapsed = time.perf_counter() - started
                yield {"step": self.step, **means,
                       "images_per_second": count * self.config.batch_size / max(elapsed, 1e-9)}
                sums, count, started = {}, 0, time.perf_counter()
        self.model.eval()

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


def train(model, images: np.ndarray, train_indices: np.ndarray, config: ModelConfig,
          report_every: int = 50, device=None) -> Iterator[dict]:
    """Train ``model`` for ``config.steps`` steps, yielding progress dicts (see ``Trainer.run``)."""
    yield from Trainer(model, images, train_indices, config, device).run(report_every=report_every)
