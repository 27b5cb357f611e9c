"""The paper presets: the exact grids of the papers (docs/presets.md), valid at every scale. One runs
whole in tests/end_to_end/test_studies.py."""

import pandas as pd
import pytest

from sweeps.grid import default_seeds, get_spec, trial_configs
from sweeps.presets import PRESETS, SCALES


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_validates_at_every_scale(preset):
    spec = get_spec(preset)
    # the papers' presets have every scale; the default study has no demo (its smoke scale is one)
    assert set(spec["scales"]) == set(SCALES) - ({"demo"} if preset == "default" else set())
    for scale in spec["scales"]:
        configs = trial_configs(spec, preset, scale, list(range(default_seeds(spec, scale))))
        assert configs and len({c["trial_key"] for c in configs}) == len(configs)


def test_dittadi2021_full_is_1080_models_over_the_papers_axes():
    configs = trial_configs(get_spec("dittadi2021"), "dittadi2021", "full", list(range(10)))
    assert len(configs) == 1080
    frame = pd.DataFrame(configs)
    assert set(frame["objective"]) == {"beta_vae", "ada_gvae"}
    assert set(frame["beta"]) == {1.0, 2.0, 4.0}
    assert set(frame["kl_warmup_steps"]) == {0, 10000, 50000}
    assert set(frame["latent_dim"]) == {10, 25, 50}
    assert set(frame["input_noise_subpixel_std"]) == {0.0, 0.03}
    assert (frame["steps"] == 400_000).all() and (frame["lr"] == 1e-4).all()
    assert all(tuple(m) == (150_000, 300_000) for m in frame["lr_milestones"])


def test_montero2021_full_follows_the_paper():
    configs = pd.DataFrame(trial_configs(get_spec("montero2021"), "montero2021", "full", [0, 1, 2]))
    assert len(configs) == 8 * 6 * 3  # 6 VAEs, the ground-truth decoder, composition; 6 splits; 3 seeds
    tasks = configs.get("task", pd.Series(index=configs.index, dtype=object)).fillna("vae")
    assert tasks.value_counts().to_dict() == {"vae": 6 * 18, "ground_truth_decoder": 18, "composition": 18}
    # the VAEs run M21's networks (burgess_v2 on dSprites, kim on 3DShapes, kim for every FactorVAE);
    # the GT decoder its MLP
    vaes = configs[(tasks == "vae") & (configs["objective"] != "factor_vae")]
    assert vaes.groupby("dataset")["architecture"].unique().map(list).to_dict() == {
        "dsprites": ["burgess_v2"], "shapes3d": ["kim"]}
    assert set(configs.loc[tasks == "ground_truth_decoder", "architecture"]) == {"higgins"}
    vae_epochs = configs[tasks != "ground_truth_decoder"].groupby("dataset")["epochs"]
    epochs = vae_epochs.unique().map(list).to_dict()
    assert epochs == {"dsprites": [100], "shapes3d": [65]}
    factor = configs[configs["objective"] == "factor_vae"]
    assert set(factor["gamma"]) == {20.0, 50.0, 100.0} and (factor["batch_size"] == 128).all()
    assert set(configs.loc[configs["objective"] == "beta_vae", "beta"]) == {8.0, 12.0}
    conditions = {"extrapolation", "recombination_to_range", "recombination_to_element"}
    assert set(configs["condition"]) == conditions
