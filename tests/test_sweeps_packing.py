"""Grouping a sweep's trials into packs, and choosing the pack size."""

from __future__ import annotations

import pytest

from sweeps.errors import UsageError
from sweeps.grid import trial_configs
from sweeps.packing import make_packs, pack_key, resolve_pack_size
from sweeps.presets import PRESETS


def test_the_dittadi_grid_packs_by_shape_and_keeps_every_trial_once():
    configs = trial_configs(PRESETS["dittadi2021"], "dittadi2021", "full", list(range(10)))
    packs = make_packs(configs, 32)
    keys = [m.trial_key for pack in packs for m in pack]
    assert sorted(keys) == sorted(c.trial_key for c in configs)  # all, once
    assert max(len(p) for p in packs) == 32
    for pack in packs:  # a pack shares supervision and latent size; β, warm-up, noise and seed vary
        assert len({(m.model.objective, m.model.latent_dim) for m in pack}) == 1
    # 2 supervisions × 3 latent sizes = 6 shapes of 180 trials: 5 packs of 32 and one of 20 each
    assert len(packs) == 36


def test_trials_that_differ_in_shape_or_data_never_share_a_pack():
    configs = trial_configs(PRESETS["default"], "default", "tiny", [0, 1])
    packs = make_packs(configs, 8)
    for pack in packs:
        assert len({m.data.split for m in pack}) == 1
    assert sorted(len(p) for p in packs) == [4, 4]  # two splits × (2 β × 2 seeds)
    assert pack_key(packs[0]) == pack_key(list(reversed(packs[0])))


def test_a_trials_model_takes_the_datasets_channels():
    configs = trial_configs(PRESETS["dittadi2021"], "dittadi2021", "tiny", [0])
    assert configs[0].model.channels == 3  # 3DShapes is RGB
    configs = trial_configs(PRESETS["default"], "default", "tiny", [0])
    assert configs[0].model.channels == 1  # dSprites is greyscale


def test_auto_pack_size_is_one_on_cpu_and_fills_a_gpu():
    configs = trial_configs(PRESETS["default"], "default", "tiny", [0])
    assert resolve_pack_size("auto", configs, 0, None) == 1
    assert resolve_pack_size("auto", configs, 1.0, 80 * 2**30) == 64  # capped
    assert 1 <= resolve_pack_size("auto", configs, 1.0, 2**30) < 64


def test_a_pack_size_beyond_memory_names_the_largest_that_fits():
    configs = trial_configs(PRESETS["default"], "default", "tiny", [0])
    fits = resolve_pack_size("auto", configs, 1.0, 2**30)
    assert resolve_pack_size(fits, configs, 1.0, 2**30) == fits
    with pytest.raises(UsageError, match=f"the largest pack that fits is {fits}"):
        resolve_pack_size(fits + 1, configs, 1.0, 2**30)
    with pytest.raises(UsageError, match="at least 1"):
        resolve_pack_size(0, configs, 0, None)
