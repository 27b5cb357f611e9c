"""A Tune trial's work is plain Python (``sweeps.trainable.train_trial``), run here with a context of
the test's own instead of Ray Tune's: it reports its progress and its final outcome with its final
checkpoint; a trial cut off mid-training goes on from its newest checkpoint on storage, with no
step trained twice; a trial run again after its training finished trains nothing and reports the
same models; a pack's members report under their own keys."""

from __future__ import annotations

import dataclasses
import os
import shutil

import pytest

from sweeps.checkpoints import checkpoint_folder
from sweeps.data import plan_data
from sweeps.grid import trial_configs
from sweeps.options import TrialRun
from sweeps.packing import PlannedTrials, tune_config
from sweeps.trainable import train_trial

GRID = {"fixed": {"dataset": "dsprites", "architecture": "burgess", "objective": "beta_vae", "n_images": 400,
                  "data_seed": 0, "batch_size": 8, "report_every": 2, "n_nll": 20, "n_metric": 40,
                  "metrics": ["d_score"], "dci_estimator": "none", "split": "blank_side", "lr": 0.001},
        "axes": {"beta": [1.0, 4.0]}, "scales": {"tiny": {"steps": 8}}}


class Cut(Exception):
    """The worker dies (a lost node, a killed process)."""


class Context:
    """What a trial is handed instead of Ray Tune's (``sweeps.trainable.TrialContext``): its
    reports, kept; its final checkpoint copied into ``tune_folder``, as Tune copies it into the
    trial's folder; and, with ``cut_after``, the worker dies after that many progress reports."""

    node_id = "node-1"

    def __init__(self, working_dir: str, tune_folder: str, cut_after: int | None = None):
        self.working_dir, self.tune_folder, self.cut_after = working_dir, tune_folder, cut_after
        self.reports: list[dict] = []

    def report(self, metrics: dict, checkpoint_dir: str | None = None) -> None:
        self.reports.append(metrics)
        if checkpoint_dir is not None:
            shutil.copytree(checkpoint_dir, os.path.join(self.tune_folder, "checkpoint_000000"),
                            dirs_exist_ok=True)
        if self.cut_after is not None and len(self.reports) == self.cut_after:
            raise Cut()


@pytest.fixture
def run(tmp_path):
    trials = trial_configs(GRID, "grid", "tiny", [0])
    info = TrialRun(experiment_dir=str(tmp_path / "exp"), tensorboard_root=str(tmp_path / "exp"),
                    cpus_per_trial=1, gpus_per_trial=0, checkpoint_every=4, checkpoint_seconds=0,
                    verbose=False, base_trials=PlannedTrials(trials), datasets=plan_data(trials),
                    deferred_evaluation=False)
    return trials, info


def progress(context: Context) -> list[int]:
    return [r["step"] for r in context.reports if not r.get("done")]


@pytest.mark.usefixtures("one_torch_thread")
def test_a_cut_off_trial_goes_on_from_its_checkpoint_and_a_finished_one_trains_nothing(run, tmp_path):
    trials, info = run
    config, tune_folder = tune_config(trials[:1]), os.path.join(info.experiment_dir, trials[0].dirname)
    cut = Context(str(tmp_path / "work"), tune_folder, cut_after=3)  # reports at 2, 4 (a checkpoint), 6
    with pytest.raises(Cut):
        train_trial(config, info, cut)
    assert progress(cut) == [2, 4, 6]
    again = Context(str(tmp_path / "work"), tune_folder)
    train_trial(config, info, again)  # Tune's retry, or a resumed driver's new run
    assert progress(again) == [6, 8] and again.reports[0]["resumed_at"] == 4  # from step 4, nothing lost
    final = again.reports[-1]
    assert final["done"] and [m["trial_key"] for m in final["members"]] == [trials[0].trial_key]
    assert final["test_nll"] > 0 and final["results_part"]
    assert "disgen_checkpoint.json" in os.listdir(os.path.join(tune_folder, "checkpoint_000000"))
    # the in-training checkpoints are the trial's own, by its whole key
    _, folder = checkpoint_folder(info.experiment_dir, trials[:1])
    assert os.listdir(folder) == ["training_checkpoint_0000000004"]

    # run again (its row never landed): it finds its final checkpoint and trains nothing
    rerun = Context(str(tmp_path / "work"), tune_folder)
    train_trial(config, dataclasses.replace(info, deferred_evaluation=True), rerun)
    assert progress(rerun) == []
    (member,) = rerun.reports[-1]["members"]
    assert rerun.reports[-1]["evaluated"] is False and member["step"] == 8


@pytest.mark.usefixtures("one_torch_thread")
def test_a_packs_members_report_under_their_own_keys(run, tmp_path):
    trials, info = run
    context = Context(str(tmp_path / "work"), str(tmp_path / "tune"))
    train_trial(tune_config(trials), info, context)
    final = context.reports[-1]
    assert [m["trial_key"] for m in final["members"]] == [t.trial_key for t in trials]
    assert all("config" not in m and m["test_nll"] > 0 for m in final["members"])
    assert {r["step"] for r in context.reports if not r.get("done")} == {2, 4, 6, 8}
