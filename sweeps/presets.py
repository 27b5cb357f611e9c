"""Study presets as data: the fixed settings, the grid axes, and the settings of each scale.

A preset names a study; a scale says how big to run it. ``tiny`` is for CI (seconds of training),
``smoke`` the laptop default (minutes), ``small`` one GPU (hours) and ``full`` the paper.
"""

from __future__ import annotations

SCALES = ("tiny", "smoke", "small", "full")

PRESETS: dict[str, dict] = {
    "default": {
        "description": (
            "β-VAE (burgess) on procedural dSprites, β ∈ {1, 4} × held-out conditions "
            "{leave1out (recombination-to-element), blank_side (extrapolation)}"
        ),
        "fixed": {
            "dataset": "dsprites",
            "architecture": "burgess",
            "objective": "beta_vae",
            "latent_dim": 10,
            "batch_size": 64,
            "kl_warmup_steps": 0,
            "data_seed": 0,
        },
        "axes": {"beta": [1.0, 4.0], "split": ["leave1out", "blank_side"]},
        # With --search optuna: β is sampled instead of taken from the axis.
        "search": {"metric": "test_nll", "mode": "min", "space": {"beta": {"loguniform": [0.25, 16.0]}}},
        "scales": {
            # n_images: grid points rendered (None = the whole 737,280-image grid);
            # n_nll / n_metric: evaluation sample budgets (see analysis.evaluate).
            "tiny": {"n_images": 3000, "steps": 20, "lr": 1e-3, "batch_size": 32,
                     "report_every": 5, "n_nll": 200, "n_metric": 300},
            "smoke": {"n_images": 20000, "steps": 500, "lr": 1e-3,
                      "report_every": 25, "n_nll": 1000, "n_metric": 600},
            "small": {"n_images": None, "steps": 30000, "lr": 5e-4,
                      "report_every": 250, "n_nll": 5000, "n_metric": 10000},
            # M21: Adam lr 1e-4, batch 64, 100 epochs of the (train part of the) full grid.
            "full": {"n_images": None, "steps": 1_100_000, "lr": 1e-4,
                     "report_every": 1000, "n_nll": 10000, "n_metric": 10000},
        },
    },
}
