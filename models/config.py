"""The model-and-training configuration, validated on construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

ARCHITECTURES = ("burgess",)
OBJECTIVES = ("vae", "beta_vae")


@dataclass(frozen=True)
class ModelConfig:
    """Everything that decides one model and how it trains.

    Defaults follow Montero et al. 2021 where the papers fix a value (Adam, lr 1e-4, batch 64,
    latent size 10); ``kl_warmup_steps`` and ``grad_clip_norm`` follow Dittadi et al. 2021 and are
    off by default.
    """

    architecture: str = "burgess"
    objective: str = "beta_vae"
    beta: float = 1.0
    latent_dim: int = 10
    channels: int = 1
    image_size: int = 64
    lr: float = 1e-4
    batch_size: int = 64
    steps: int = 1000
    seed: int = 0
    kl_warmup_steps: int = 0
    grad_clip_norm: float | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.architecture not in ARCHITECTURES:
            problems.append(
                f"architecture: unknown {self.architecture!r}; choose one of {', '.join(ARCHITECTURES)}"
            )
        if self.objective not in OBJECTIVES:
            problems.append(f"objective: unknown {self.objective!r}; choose one of {', '.join(OBJECTIVES)}")
        if not self.beta >= 0:
            problems.append(f"beta: must be >= 0; got {self.beta}")
        if self.latent_dim < 1:
            problems.append(f"latent_dim: must be at least 1; got {self.latent_dim}")
        if self.channels not in (1, 3):
            problems.append(f"channels: must be 1 or 3; got {self.channels}")
        if self.image_size != 64:
            problems.append(f"image_size: burgess takes 64 px images; got {self.image_size}")
        if not self.lr > 0:
            problems.append(f"lr: must be > 0; got {self.lr}")
        if self.batch_size < 1:
            problems.append(f"batch_size: must be at least 1; got {self.batch_size}")
        if self.steps < 0:
            problems.append(f"steps: must be >= 0; got {self.steps}")
        if self.kl_warmup_steps < 0:
            problems.append(f"kl_warmup_steps: must be >= 0; got {self.kl_warmup_steps}")
        if self.grad_clip_norm is not None and not self.grad_clip_norm > 0:
            problems.append(f"grad_clip_norm: must be > 0 or None; got {self.grad_clip_norm}")
        if problems:
            raise ValueError("invalid model config: " + "; ".join(problems))

    @classmethod
    def from_dict(cls, values: dict) -> ModelConfig:
        """Build from a dict that may hold other keys (a trial config); unknown keys are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    def to_dict(self) -> dict:
        return asdict(self)
