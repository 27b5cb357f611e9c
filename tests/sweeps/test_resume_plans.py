"""What a run, a resume or an extension runs, planned from disgen's own records without Ray
(``sweeps.search``): the planned trials whose models have no finished row (nor a stopped one), in
the same packs; for Optuna, the samples not yet taken, the interrupted ones asked again first, with
the study read back from its journal (JSON lines) and going on. Nothing of Tune's is read."""

from __future__ import annotations

import dataclasses
import json

import optuna
import pytest

from sweeps.options import SweepOptions
from sweeps.packing import members_of
from sweeps.paper_grid import plan_trials
from sweeps.search import JOURNAL, STUDY, GridSearch, OptunaSearch, open_journal, sampled_key

GRID = {"fixed": {"dataset": "dsprites", "architecture": "burgess", "objective": "beta_vae", "n_images": 400,
                  "data_seed": 0, "batch_size": 8, "report_every": 2, "n_nll": 20, "n_metric": 40,
                  "metrics": ["d_score"], "split": "blank_side"},
        "axes": {"beta": [1.0, 2.0, 4.0]}, "scales": {"tiny": {"steps": 8}},
        "search": {"metric": "test_nll", "mode": "min", "space": {"lr": {"loguniform": [1e-4, 1e-2]}}}}


def planned(tmp_path, search="grid", seeds=2, pack_size=1):
    sweep = plan_trials(SweepOptions(grid=GRID, name="exp", scale="tiny", seeds=seeds, search=search,
                                     num_samples=5))
    return dataclasses.replace(sweep, experiment_dir=str(tmp_path / "exp"), pack_size=pack_size)


def keys(work, sweep) -> list[list[str]]:
    return [[m.trial_key for m in members_of(config, sweep.base_trials)] for config in work.configs]


def test_a_resume_runs_the_trials_without_a_finished_or_stopped_row_in_their_packs(tmp_path):
    sweep = planned(tmp_path, pack_size=2)
    every = keys(GridSearch().work(sweep, {}), sweep)
    assert [len(pack) for pack in every] == [2, 2, 2]  # a new run: all six, in packs of two
    first, second, third = every
    statuses = {first[0]: "finished", first[1]: "finished", second[0]: "failed", third[1]: "stopped"}
    left = keys(GridSearch().work(sweep, statuses), sweep)
    # the failed model runs again; a stopped one (ASHA decided it) does not; the packs stay whole
    assert left == [second, [third[0]]]
    done = dict.fromkeys([k for pack in every for k in pack], "finished")
    assert GridSearch().work(sweep, done) is None  # nothing left: nothing runs


def test_an_extension_runs_only_the_trials_it_adds(tmp_path):
    sweep = planned(tmp_path, seeds=1)
    done = dict.fromkeys([t.trial_key for t in sweep.trials], "finished")
    grown = planned(tmp_path, seeds=2)
    new = [k for pack in keys(GridSearch().work(grown, done), grown) for k in pack]
    assert sorted(new) == sorted({t.trial_key for t in grown.trials} - set(done)) and len(new) == 3


def study(journal):
    return optuna.load_study(study_name=STUDY, storage=journal)


def test_a_resumed_optuna_search_goes_on_with_its_study_and_asks_the_interrupted_trials_again(tmp_path):
    sweep = planned(tmp_path, search="optuna")
    (tmp_path / "exp").mkdir()
    fresh = OptunaSearch().work(sweep, {})
    assert fresh.samples == 5 and fresh.points == [] and fresh.seed == 0
    # a first run, as Ray's OptunaSearch records it in the journal: two told, two left running
    first = optuna.create_study(study_name=STUDY, storage=fresh.journal, direction="minimize")
    distributions = {"base": optuna.distributions.CategoricalDistribution([0, 1, 2]),
                     "sampled/lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}
    asked = [first.ask(distributions) for _ in range(4)]
    first.tell(asked[0], 310.0)
    first.tell(asked[1], 320.0)
    key = lambda trial: sampled_key(trial.params, sweep.base_trials)  # noqa: E731
    # the models' rows: the two told, and one of the running ones (stored before its trial ended)
    statuses = {key(asked[0]): "finished", key(asked[1]): "finished", key(asked[2]): "finished"}
    lines = (tmp_path / "exp" / JOURNAL).read_text().splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)  # JSON lines, not a pickle

    resumed = OptunaSearch().work(sweep, statuses)
    assert resumed.samples == 5 - 3  # the interrupted one, asked again first, and one new sample
    assert resumed.points == [asked[3].params]  # the one without a row: it goes on from its checkpoint
    after = study(resumed.journal)
    assert [t.number for t in after.trials] == [0, 1, 2, 3]  # the trials Optuna saw are in the study
    assert [t.state.name for t in after.trials] == ["COMPLETE", "COMPLETE", "FAIL", "FAIL"]
    assert [t.value for t in after.trials[:2]] == [310.0, 320.0] and resumed.seed == 4


@pytest.mark.slow  # a moto server
def test_on_remote_storage_the_journal_is_read_back_from_the_experiment_as_text(s3_server, tmp_path):
    from analysis import storage

    experiment = "s3://disgen-test/runs/exp"
    local = planned(tmp_path, search="optuna")
    (tmp_path / "exp").mkdir()
    journal = open_journal(local.experiment_dir)
    optuna.create_study(study_name=STUDY, storage=journal).enqueue_trial({"base": 1})
    content = (tmp_path / "exp" / JOURNAL).read_bytes()
    fs, inner = storage.resolve(storage.join(experiment, JOURNAL))
    storage.write_whole(fs, inner, content)
    remote = dataclasses.replace(local, experiment_dir=experiment)
    assert len(study(OptunaSearch().work(remote, {}).journal).trials) == 1


@pytest.mark.parametrize("search", [GridSearch(), OptunaSearch()])
def test_each_search_says_whether_its_trials_pack_and_defer_their_evaluation(search):
    grid = search.name == "grid"
    assert search.defers_evaluation(1.0) is grid and not search.defers_evaluation(0.0)
    assert search.decides_one_by_one is not grid and search.extendable is grid
