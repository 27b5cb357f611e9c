"""The objectives a VAE can train with: one table, name → class.

Adding an objective is one new module (a subclass of ``models.objectives.Objective``), one line in
``OBJECTIVES`` below, and its tests; docs/adding_an_objective.md works through an example. The
objective modules import ``models.objectives`` (the base class and the shared loss functions) and
never this module, so there is no import circle. Everything else reads an objective's facts from
its class: the loss terms it reports, its default likelihood and γ, whether it trains on pairs,
and the model it trains.
"""

from __future__ import annotations

import torch
from torch import nn

from models.cascade_vae import CascadeVAEObjective
from models.dip_vae import DIPVAEObjective
from models.lie_group_vae import LieGroupVAEObjective
from models.objectives import (
    AdaGVAEObjective,
    AnnealedCapacityObjective,
    BetaTCVAEObjective,
    FactorVAEObjective,
    Objective,
    VAEObjective,
    WAEMMDObjective,
)
from models.wae_gan import WAEGANObjective

OBJECTIVES: dict[str, type[Objective]] = {
    "vae": VAEObjective,  # Kingma & Welling 2014: β fixed at 1
    "beta_vae": VAEObjective,  # Higgins et al. 2017
    "annealed_vae": AnnealedCapacityObjective,  # Burgess et al. 2018 (CCI-VAE)
    "factor_vae": FactorVAEObjective,  # Kim & Mnih 2018
    "beta_tcvae": BetaTCVAEObjective,  # Chen et al. 2018
    "wae_mmd": WAEMMDObjective,  # Tolstikhin et al. 2018
    "ada_gvae": AdaGVAEObjective,  # Locatello et al. 2020
    "wae_gan": WAEGANObjective,  # Tolstikhin et al. 2018
    "cascade_vae": CascadeVAEObjective,  # Jeong & Song 2019 (InfoCascade)
    "lie_group_vae": LieGroupVAEObjective,  # Zhu et al. 2021
    "dip_vae": DIPVAEObjective,  # Kumar et al. 2018 (DIP-VAE-I)
}

# Other spellings accepted in configs and grids.
ALIASES = {"cci_vae": "annealed_vae", "betavae": "beta_vae", "factorvae": "factor_vae",
           "wae": "wae_mmd", "adagvae": "ada_gvae", "waegan": "wae_gan",
           "infocascade": "cascade_vae", "info_cascade": "cascade_vae", "cascadevae": "cascade_vae",
           "lievae": "lie_group_vae", "lie_vae": "lie_group_vae", "liegroupvae": "lie_group_vae"}

# The loss terms each objective reports besides "loss" (the results schema has a column for each).
LOSS_TERMS = {name: list(objective.loss_terms) for name, objective in OBJECTIVES.items()}


def objective_class(name: str) -> type[Objective]:
    """The class of an objective (or of one of its aliases)."""
    name = ALIASES.get(name, name)
    if name not in OBJECTIVES:
        raise ValueError(f"objective: unknown {name!r}; choose one of {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]


def build_objective(config, dataset_size: int = 1) -> Objective:
    """A ``ModelConfig``'s objective, built from its ``loss`` part and latent size, its own
    parameters (FactorVAE's discriminator) seeded by the config."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed + 2)
        return objective_class(config.objective)(config.loss, config.latent_dim, dataset_size)


def build(config) -> nn.Module:
    """The model a ``ModelConfig`` names, freshly initialised (seeded by ``config.seed``): a
    ``VAE``, or the objective's own model (CascadeVAE, LieGroupVAE: the same encode/decode hooks),
    built from the config's ``network`` and ``loss`` parts. The model keeps the whole config as
    ``config``: the record of what it was built from (the analysis reads its likelihood there)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = objective_class(config.objective).model_class(config.network, config.loss)
    model.config = config
    return model
