"""Helpers for the tests that run real sweeps and act while they run: short grids, and a wait."""

from __future__ import annotations

import time

# Two trials (β 1 and 4) of a few steps on 1,000 images, batch 8, one cheap metric: short enough to
# run one at a time in a test. Its steps are 10; a test that needs longer replaces "steps: 10".
TWO_SHORT_TRIALS = """
description: two short trials, run one at a time
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 1000, data_seed: 0,
        batch_size: 8, report_every: 5, n_nll: 50, n_metric: 50, dci_estimator: none, split: blank_side,
        metrics: [d_score], lr: 0.001}
axes:
  beta: [1.0, 4.0]
scales:
  tiny: {steps: 10}
"""


# Two β-VAEs that share a pack (with --pack-size 2) and a FactorVAE alone: both paths of the tracking
# callbacks (sweeps/tracking.py) in one sweep.
PACK_AND_LONE_MODEL = """\
description: a pack of two β-VAEs and a FactorVAE alone, small enough for a test
fixed: {dataset: dsprites, architecture: burgess, n_images: 600, data_seed: 0, batch_size: 8,
        report_every: 2, n_nll: 40, n_metric: 60, metrics: [d_score], lr: 0.001, split: blank_side}
axes:
  model:
    - {objective: beta_vae, beta: 1.0}
    - {objective: beta_vae, beta: 4.0}
    - {objective: factor_vae, gamma: 10.0, discriminator_width: 16, discriminator_layers: 2}
scales:
  tiny: {steps: 6}
"""


# Four one-model trials of 200 steps on 2,000 images with one cheap metric, for the tests of deferred
# evaluation (tests/end_to_end/test_deferred_evaluation.py runs them; a test of one evaluation
# shortens them with "steps: 200" replaced).
FOUR_ONE_MODEL_TRIALS = """
description: four one-model trials, each long enough to train while the one before is evaluated
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 2000, data_seed: 0,
        batch_size: 16, report_every: 25, n_nll: 1000, n_metric: 300, metrics: [d_score], lr: 0.001,
        split: blank_side}
axes:
  beta: [1.0, 2.0, 4.0, 8.0]
scales:
  tiny: {steps: 200}
"""


def wait_for(predicate, timeout: float, what) -> None:
    """Poll ``predicate`` until it is true; after ``timeout`` seconds fail, saying ``what`` (a
    string, or a function giving one, called only then: a driver's log, say)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
