"""Metrics: plain functions over numpy arrays (codes N×K, factors N×F) returning dicts of floats.

One module per metric; import from the module (``from analysis.metrics.mig import mig``) or from
here. Nothing here imports torch. ``analysis.metrics.registry`` lists the metrics
``analysis.evaluate`` computes, with their results columns.
"""

from analysis.metrics._grid import GridPool, RowSampler, grid_pool
from analysis.metrics.beta_vae_score import beta_vae_score, sampled_beta_vae_score
from analysis.metrics.dci import dci
from analysis.metrics.encoder_decoder_diagnosis import encoder_decoder_diagnosis
from analysis.metrics.factor_readout import factor_readout_scores, readout_score
from analysis.metrics.factor_vae_score import factor_vae_score, sampled_factor_vae_score
from analysis.metrics.mig import mig
from analysis.metrics.modularity_explicitness import modularity_explicitness
from analysis.metrics.reconstruction_nll import reconstruction_nll
from analysis.metrics.sap import sap
from analysis.metrics.transfer_score import transfer_score

__all__ = ["GridPool", "RowSampler", "beta_vae_score", "dci", "encoder_decoder_diagnosis", "factor_vae_score",
           "factor_readout_scores", "grid_pool", "mig", "modularity_explicitness", "readout_score",
           "reconstruction_nll", "sampled_beta_vae_score", "sampled_factor_vae_score", "sap",
           "transfer_score"]
