"""Grouping a sweep's trials into packs, and choosing the pack size."""

from __future__ import annotations

import pickle

import pytest

from sweeps.errors import UsageError
from sweeps.grid import default_seeds, trial_configs
from sweeps.packing import (
    PlannedTrials,
    dirname,
    make_packs,
    members_of,
    outcome_of,
    pack_id,
    resolve_pack_size,
    tune_config,
)
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


def test_trials_of_different_splits_share_a_pack_and_different_shapes_do_not():
    configs = trial_configs(PRESETS["default"], "default", "tiny", [0, 1])
    packs = make_packs(configs, 8)
    assert [len(p) for p in packs] == [8]  # two splits × (2 β × 2 seeds): each member has its own rows
    assert len({m.data.split for m in packs[0]}) == 2
    assert dirname(packs[0]).startswith("pack8-dsprites-")  # named by the dataset, not one split
    assert pack_id(packs[0]) == pack_id(list(reversed(packs[0])))
    other = trial_configs(PRESETS["default"], "default", "tiny", [0])[0].replace("search", latent_dim=4)
    assert len(make_packs([*configs, other], 64)) == 2


@pytest.mark.slow
def test_paper_grids_pack_wide():
    """At --pack-size 64: montero2021 full in at most 12 packs, montero2022 full in at most 36."""
    for name, most in (("montero2021", 12), ("montero2022", 36)):
        spec = PRESETS[name]
        trials = trial_configs(spec, name, "full", list(range(default_seeds(spec, "full"))))
        packs = make_packs(trials, 64)
        assert len(packs) <= most
        assert sorted(m.trial_key for p in packs for m in p) == sorted(t.trial_key for t in trials)
        for pack in packs:  # what one process and one vmap share
            assert len({(m.data.dataset, m.model.architecture, m.model.objective, m.model.task,
                         m.model.latent_dim, m.model.batch_size, m.model.epochs, m.model.epoch_length)
                        for m in pack}) == 1


def test_trials_of_different_run_lengths_do_not_share_a_pack():
    """A pack's members share one run length: steps, epochs and what an epoch lasts (epoch_length)."""
    base = trial_configs(PRESETS["default"], "default", "tiny", [0])[0].replace("search", epochs=2.0)
    ten, five = base.replace("search", epoch_length=10), base.replace("search", epoch_length=5)
    assert [len(p) for p in make_packs([base, ten, five, ten.replace("search", seed=1)], 8)] == [1, 2, 1]


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


def test_gpu_pack_size_counts_the_dataset_each_process_uploads():
    """A quarter of a 24 GiB GPU per trial on the full dSprites grid (2.8 GiB uploaded by every
    process): what is left for models is the share less the process and the dataset."""
    from models.packed import CUDA_PROCESS_BYTES, member_memory_bytes

    configs = trial_configs(PRESETS["default"], "default", "full", [0])
    share = 6 * 2**30
    dsprites = 737_280 * 64 * 64
    expected = int((0.8 * share - CUDA_PROCESS_BYTES - dsprites) // member_memory_bytes(configs[0].model))
    assert resolve_pack_size("auto", configs, 0.25, 24 * 2**30) == expected
    with pytest.raises(UsageError, match="with their process and data"):
        resolve_pack_size(expected + 1, configs, 0.25, 24 * 2**30)


def test_a_pack_size_beyond_memory_names_the_largest_that_fits():
    configs = trial_configs(PRESETS["default"], "default", "tiny", [0])
    fits = resolve_pack_size("auto", configs, 1.0, 4 * 2**30)
    assert resolve_pack_size(fits, configs, 1.0, 4 * 2**30) == fits
    refused = f"at most {fits} fit in .*; use --pack-size {fits} or --pack-size auto"
    with pytest.raises(UsageError, match=refused):
        resolve_pack_size(fits + 1, configs, 1.0, 4 * 2**30)
    with pytest.raises(UsageError, match="whole number >= 1"):
        resolve_pack_size(0, configs, 0, None)


def test_a_tune_config_names_its_members_by_key_and_the_plan_resolves_them():
    configs = trial_configs(PRESETS["default"], "default", "tiny", [0, 1])
    plan = PlannedTrials(configs)
    pack = configs[2:6]
    config = tune_config(pack)
    assert config == {"members": [m.trial_key for m in pack]}  # no settings: Tune writes it into each result
    assert members_of(config, plan) == pack and members_of(config, configs) == pack
    # the plan travels (to the trainable, in Tune's state) as plain settings, and resolves the same
    assert members_of(config, pickle.loads(pickle.dumps(plan))) == pack
    # an experiment started by an older disgen holds whole settings: they are read as they are
    assert members_of({"members": [m.to_dict() for m in pack]}) == pack
    # a key the plan does not hold: which one, and what to do
    with pytest.raises(UsageError, match=f"trial {pack[0].trial_key} .*not in this run's plan.*resume with"):
        members_of(config, PlannedTrials(configs[3:]))
    # a final report names its members by key; the driver takes their settings from the plan
    result = {"done": True, "members": [{"trial_key": m.trial_key, "test_nll": 1.0} for m in pack]}
    outcome = outcome_of(result, config, plan)
    assert outcome.trials == pack and [m.metrics for m in outcome.members] == [{"test_nll": 1.0}] * len(pack)
    assert all(a is b for a, b in zip(outcome.trials, members_of(config, plan)))  # the plan's own, not copies
    # an older disgen's result, whose members carry their settings, is read as it is
    older = {"done": True, "members": [{"config": m.to_dict(), "test_nll": 1.0} for m in pack]}
    assert outcome_of(older, {"members": [m.to_dict() for m in pack]}).trials == pack
    assert outcome_of({"step": 5, "loss": 1.0}, config, plan) is None  # a progress report
    swapped = {**result, "members": result["members"][::-1]}
    with pytest.raises(ValueError, match="not its config's member there"):
        outcome_of(swapped, config, plan)


class _NoGpus:
    """What ``sweeps.driver.ready`` asks of the cluster here: no GPUs."""

    def gpus(self) -> float:
        return 0.0


def _packs_after_resume(tmp_path, seeds: str, last_run, statuses: dict, first_seeds: str | None = None
                        ) -> list[list[str]]:
    """The packs a ``--resume`` (with ``seeds``) trains, by their members' keys: plan.json written as
    the last run (with ``first_seeds``, else the same) left it, with its packs (``last_run``), then
    read back by the driver (``ready``), then the grid's work for the stored ``statuses``."""
    from sweeps import driver, plan_record
    from sweeps.paper_grid import parse_options, plan

    def argv(seeds):
        return ["--scale", "tiny", "--pack-size", "2", "--seeds", seeds, "--storage-path", str(tmp_path),
                "--name", "packs"]

    first = plan(parse_options(argv(first_seeds or seeds)))
    record = {**first.record, "pack_size": 2, "packs": driver.packs_of(last_run)}
    plan_record.write(first.experiment_dir, record)
    sweep = driver.ready(plan(parse_options([*argv(seeds), "--resume"])), _NoGpus())
    return [config["members"] for config in sweep.search.work(sweep, statuses).configs]


def test_a_resume_after_a_members_failure_keeps_the_other_packs_so_their_checkpoints_are_found(tmp_path):
    """Packs resume from a checkpoint in a folder named by their members (issue 51): one failed member
    of the first pack must not shift every later pack by one, which would start them all from step 0."""
    from sweeps.search import Grid

    trials = plan_trials_keys(tmp_path, "2")
    last_run = Grid([{"members": trials[i:i + 2]} for i in range(0, 8, 2)])
    statuses = {trials[0]: "finished", trials[1]: "failed"}  # the first pack ended; its second model failed
    packs = _packs_after_resume(tmp_path, "2", last_run, statuses)
    assert packs[:3] == [trials[2:4], trials[4:6], trials[6:8]]  # as they were: their checkpoints match
    assert packs[3:] == [[trials[1]]]  # the failed model trains again, from the start


def test_an_extension_keeps_the_packs_of_the_trials_it_had(tmp_path):
    """More seeds interleave new trials with the old ones; the old packs stay as they were."""
    from sweeps.search import Grid

    old, new = plan_trials_keys(tmp_path, "1"), plan_trials_keys(tmp_path, "2")
    last_run = Grid([{"members": old[0:2]}, {"members": old[2:4]}])
    packs = _packs_after_resume(tmp_path, "2", last_run, {}, first_seeds="1")
    assert packs[:2] == [old[0:2], old[2:4]]
    assert sorted(k for pack in packs[2:] for k in pack) == sorted(set(new) - set(old))


def plan_trials_keys(tmp_path, seeds: str) -> list[str]:
    from sweeps.paper_grid import parse_options, plan_trials

    argv = ["--scale", "tiny", "--seeds", seeds, "--storage-path", str(tmp_path), "--name", "packs"]
    return [t.trial_key for t in plan_trials(parse_options(argv)).trials]
