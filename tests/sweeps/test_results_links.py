"""Rows that link: every trials.parquet row carries its Ray trial id and its TensorBoard folder
relative to the experiment (where sweeps/trainable.py writes the model's event files)."""

from types import SimpleNamespace

from analysis.storage import ResultsStore, read_results
from sweeps.outcome import TrialOutcome
from sweeps.packing import dirname, tune_config
from sweeps.results import ResultsWriter, member_rows
from sweeps.trials import TrialConfig


def member(beta, seed):
    return TrialConfig.complete({"dataset": "dsprites", "split": "leave1out", "objective": "beta_vae",
                                 "beta": beta, "seed": seed, "n_images": 100, "data_seed": 0,
                                 "report_every": 5, "n_nll": 10, "n_metric": 10})


def test_a_trial_and_a_packs_members_carry_trial_id_and_tensorboard_folder(tmp_path):
    writer = ResultsWriter(ResultsStore(str(tmp_path)))
    one = member(1.0, 0)
    result = {"done": True, "members": [{"config": one.to_dict(), "train_nll": 1.0}]}
    writer.completed(SimpleNamespace(trial_id="abc_00000", config=tune_config([one]),
                                                    last_result=result, checkpoint=None))
    pack = [member(2.0, 0), member(4.0, 1)]
    result = {"done": True, "members": [{"config": m.to_dict(), "train_nll": 2.0} for m in pack]}
    writer.completed(SimpleNamespace(trial_id="abc_00001", config=tune_config(pack),
                                                    last_result=result, checkpoint=None))
    trials = read_results(tmp_path).set_index("trial_key")
    assert trials.loc[one.trial_key, "trial_id"] == "abc_00000"
    assert trials.loc[one.trial_key, "tensorboard_dir"] == one.dirname
    for m in pack:  # locally, each member writes to its own folder under the experiment
        assert trials.loc[m.trial_key, "trial_id"] == "abc_00001"
        assert trials.loc[m.trial_key, "tensorboard_dir"] == m.dirname


def test_on_remote_storage_a_packs_members_sit_in_the_packs_folder():
    pack = [member(2.0, 0), member(4.0, 1)]
    result = {"trial_id": "x", "members": [{"config": m.to_dict(), "train_nll": 2.0} for m in pack]}
    rows = member_rows("exp", TrialOutcome.from_report(result), remote=True)
    assert [r["tensorboard_dir"] for r in rows] == [f"{dirname(pack)}/{m.dirname}" for m in pack]
    assert {r["trial_id"] for r in rows} == {"x"}
    alone = TrialOutcome.from_report({**result, "members": result["members"][:1]})
    rows = member_rows("exp", alone, remote=True)
    assert rows[0]["tensorboard_dir"] == pack[0].dirname
