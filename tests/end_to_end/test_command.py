"""The command line and ``sweeps.run`` end to end: one real tiny sweep and its resume, a failed and a
stopped model, a pack too big for the tests' Ray refused; ``sweeps.run`` returning the trials that
trials.parquet holds; a packed sweep storing each model as the unpacked one does (one Tune trial
per pack, one row per model, the same numbers, each member on its own split; a diverging model
fails alone); and small results: what a trial reports to Tune names its members by key and never
carries their settings. Bad input before Ray starts, --help and stops outside Tune's run are tested
in tests/sweeps/."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import TWO_TRIAL_GRID
from sweep_runs import TWO_SHORT_TRIALS
from tensorboard.backend.event_processing import event_accumulator

import sweeps
from analysis.schema import SETTING_FIELDS
from analysis.storage import PARTS_DIR
from sweeps.grid import get_spec, trial_configs
from sweeps.paper_grid import main, parse_options, plan_trials
from sweeps.trials import allowed_keys


def assert_rows_hold_every_setting(trials, experiment):
    """Issue 25's promises for finished models' rows, read with plain pd.read_parquet: no setting is
    null (but where the schema says what a null means), the group columns are categoricals, ints
    are Int64, flags booleans, provenance filled; load_trials gives the same dtypes."""
    from analysis import load_trials
    from analysis.schema import PROVENANCE_FIELDS, SETTING_FIELDS

    assert (trials["status"] == "finished").all() and trials["error"].isna().all()
    settings = [f.name for f in SETTING_FIELDS if b"null" not in (f.metadata or {})]
    empty = trials[settings].isna().sum()
    assert not empty.any(), empty[empty > 0]
    # the defaults the grid never names, which issue 25 found null, and the config JSON with them
    assert set(trials["task"]) == {"vae"} and set(trials["image_size"]) == {64}
    assert set(trials["lr_decay"]) == {0.5} and len(trials[trials["image_size"] == 64]) == len(trials)
    assert all(json.loads(c)["lr_decay"] == 0.5 and json.loads(c)["task"] == "vae" for c in trials["config"])
    for column in ["dataset", "split", "condition", "objective", "architecture", "task", "preset", "scale",
                   "data_source", "device", "status", "experiment"]:
        assert isinstance(trials[column].dtype, pd.CategoricalDtype), column
    for column in ["seed", "steps", "n_images", "batch_size", "n_test_images", "trained_steps"]:
        assert str(trials[column].dtype) == "Int64", column
    assert str(trials["encoder_fails"].dtype) == "boolean" and trials["encoder_fails"].notna().all()
    provenance = [f.name for f in PROVENANCE_FIELDS if b"null" not in (f.metadata or {})]
    assert trials[provenance].notna().all().all(), trials[provenance]
    assert set(trials["device"]) == {"cpu"} and trials["device_name"].isna().all()  # no CUDA here
    assert trials["git_commit"].notna().all()  # the tests run from a checkout
    import ray
    import torch

    assert set(trials["torch_version"]) == {torch.__version__}
    assert set(trials["ray_version"]) == {ray.__version__}
    loaded = load_trials(experiment)
    assert [str(d) for d in loaded.dtypes] == [str(d) for d in trials.dtypes]


def event_files(folder):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs if "tfevents" in f)


@pytest.mark.slow
def test_tiny_sweep_writes_parquet_and_tensorboard_and_resume_reruns_nothing(ray_session, tmp_path, capsys):
    argv = ["--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp"]
    # As a user runs it, joining a running cluster (the tests' own) through $RAY_ADDRESS.
    address = ray_session.get_runtime_context().gcs_address
    done = subprocess.run([sys.executable, "-m", "sweeps.paper_grid", *argv], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "RAY_ADDRESS": address})
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Connecting to existing Ray cluster at address: {address}" in done.stderr
    assert "4 of 4 trials finished" in done.stdout
    for expected in ["Spearman", "tensorboard --logdir", "--resume", "pd.read_parquet"]:
        assert expected in done.stdout
    experiment = tmp_path / "exp"
    # The live view (sweeps/console.py): short, each model named as disgen names it, one line per
    # finished model, a progress table with the sweep's ETA; none of Tune's own tables and boxes
    console = done.stdout + done.stderr
    lines = console.splitlines()
    assert len(lines) <= 80, console
    names = [c.dirname for c in trial_configs(get_spec("default"), "default", "tiny", [0])]
    for name in names:
        assert sum(f" done {name}: train_nll " in line for line in lines) == 1, console
    header = [i for i, line in enumerate(lines) if line.split() == [
        "model", "dataset", "split", "objective", "β", "seed", "step", "loss", "img/s"]]
    assert header and " models done, " in lines[header[0] - 1] and "; ETA " in lines[header[0] - 1]
    assert lines[header[0] + 1].split()[0] in names and lines[header[0] + 1].split()[1] == "dsprites"
    for tune_output in ["members", "train_trial", "Trial status", "completed after", "Tuner.restore", "╭"]:
        assert tune_output not in console, tune_output
    # Tune names its trials as disgen does too (its messages, --verbose): its saved state says so
    state = json.loads(next(experiment.glob("experiment_state-*.json")).read_text())
    assert sorted(json.loads(t[0])["custom_trial_name"] for t in state["trial_data"]) == sorted(names)

    trials = pd.read_parquet(experiment / "trials.parquet")
    assert len(trials) == 4 and trials["trial_key"].is_unique
    assert set(zip(trials["split"], trials["beta"])) == {
        (s, b) for s in ("leave1out", "blank_side") for b in (1.0, 4.0)}
    assert dict(zip(trials["split"], trials["condition"])) == {
        "leave1out": "recombination_to_element", "blank_side": "extrapolation"}
    for column in ["train_nll", "test_nll"]:
        assert (trials[column] > 0).all() and np.isfinite(trials[column]).all()
    for column in ["dci_disentanglement", "dci_completeness", "dci_informativeness", "d_score"]:
        assert trials[column].between(0, 1).all(), column
    assert (trials["n_test_images"] > 0).all() and (trials["steps"] == 20).all()
    assert_rows_hold_every_setting(trials, experiment)

    history = pd.read_parquet(experiment / "history.parquet")
    assert len(history) == 4 * 4  # 20 steps, a report every 5
    assert sorted(history["step"].unique()) == [5, 10, 15, 20]
    assert set(history["trial_key"]) == set(trials["trial_key"])
    assert np.isfinite(history[["loss", "reconstruction", "kl"]]).all().all()
    assert not (experiment / PARTS_DIR).exists()  # the run's parts, compacted into the two files
    # Tune saw scalars: its record of each trial's final report names the history part, and holds
    # no loss history
    finals = [json.loads((experiment / d / "result.json").read_text().splitlines()[-1])
              for d in trials["tensorboard_dir"]]
    assert all(f["done"] and f["results_part"] and "history" not in f["members"][0] for f in finals)

    files = event_files(experiment)
    trial_dirs = {os.path.dirname(f) for f in files}
    assert len(trial_dirs) == 4
    # rows that link: each row names its Ray trial and its TensorBoard folder, relative to the experiment
    assert trials["trial_id"].notna().all() and trials["trial_id"].is_unique
    assert {str(experiment / d) for d in trials["tensorboard_dir"]} == trial_dirs
    for folder in trial_dirs:
        events = event_accumulator.EventAccumulator(folder, size_guidance={"images": 0})
        events.Reload()
        tags = events.Tags()
        assert {"train/loss", "train/kl", "eval/test_nll", "eval/d_score"} <= set(tags["scalars"])
        assert [e.step for e in events.Scalars("train/loss")] == [5, 10, 15, 20]
        assert {"reconstructions/train", "reconstructions/test"} <= set(tags["images"])
        # reconstructions during training too, not only at the end
        assert [e.step for e in events.Images("reconstructions/train")] == [5, 10, 15, 20]

    # A second run with --resume finds everything finished and re-runs nothing.
    assert main([*argv, "--resume"]) == 0
    assert "4 of 4 trials finished" in capsys.readouterr().out
    again = pd.read_parquet(experiment / "trials.parquet")
    pd.testing.assert_frame_equal(again.sort_values("trial_key").reset_index(drop=True),
                                  trials.sort_values("trial_key").reset_index(drop=True))
    assert event_files(experiment) == files
    assert len(pd.read_parquet(experiment / "history.parquet")) == 16

    # Without --resume the same name is refused rather than overwritten.
    assert main(argv) == 2


ASHA_GRID = """
description: one model that trains, one whose learning rate is too small to learn (ASHA stops it at
  its first rung), one whose learning rate makes it diverge (it fails)
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 600, data_seed: 0,
        batch_size: 8, report_every: 5, n_nll: 40, n_metric: 60, metrics: [d_score], split: blank_side}
axes:
  lr: [0.001, 1.0e-9, 1.0e+9]
scales:
  tiny: {steps: 20}
"""


@pytest.mark.slow
def test_a_failed_and_a_stopped_model_get_rows_with_their_status(ray_session, tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(ASHA_GRID)
    argv = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp",
            "--scheduler", "asha", "--max-failures", "0", "--max-concurrent-trials", "1"]
    assert main(argv) == 1  # one trial failed
    out = capsys.readouterr().out
    assert "1 of 3 trials finished" in out
    trials = pd.read_parquet(tmp_path / "exp" / "trials.parquet").set_index("lr").sort_index()
    assert trials["trial_key"].is_unique and len(trials) == 3
    trained, stopped, failed = trials.loc[1e-3], trials.loc[1e-9], trials.loc[1e9]
    # the model that trained to its end: finished, with its metrics (ASHA let it reach its final report)
    assert trained["status"] == "finished" and np.isfinite(trained["test_nll"])
    assert trained["trained_steps"] == 20
    # stopped by ASHA at its first rung (step 5): its settings and where it was, no metrics
    assert stopped["status"] == "stopped" and stopped["trained_steps"] == 5 and pd.isna(stopped["test_nll"])
    assert stopped["device"] == "cpu" and pd.notna(stopped["node_id"]) and pd.isna(stopped["error"])
    # diverged: failed, with the error's last line
    assert failed["status"] == "failed" and pd.isna(failed["test_nll"])
    assert failed["error"].startswith("models.engine.NonFiniteLossError: step ")
    assert "not finite" in failed["error"]
    settings = [f.name for f in SETTING_FIELDS if b"null" not in (f.metadata or {})]
    assert trials.reset_index()[settings].notna().all().all()  # every setting, whatever became of the model
    assert trials[["torch_version", "ray_version", "disgen_version"]].notna().all().all()
    # analysis sees the finished model only; load_trials shows all three
    from analysis import finished_models, load_trials

    everything = load_trials(tmp_path / "exp")
    assert len(everything) == 3 and len(finished_models(everything)) == 1


@pytest.mark.slow
def test_a_run_refuses_a_pack_size_that_does_not_fit_in_one_line_before_anything_is_written(
        ray_session, tmp_path, capsys):
    argv = ["--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp", "--pack-size", "100000000"]
    assert main(argv) == 2  # on the tests' Ray (no GPU): far more than the host's memory holds
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: --pack-size 100000000 does not fit: ")
    assert err.endswith(" or --pack-size auto\n")  # after the size that fits
    # nothing of an experiment was written: the same command with a size that fits may start it
    from sweeps.paper_grid import parse_options, plan

    assert plan(parse_options(argv[:-2])).added == ()  # no "already exists; pass --resume"



def one_trial_grid() -> dict:
    """TWO_TRIAL_GRID as data, with one β: one trial of 20 steps."""
    grid = yaml.safe_load(TWO_TRIAL_GRID)
    grid["axes"]["beta"] = [4.0]
    return grid


@pytest.mark.slow  # one tiny trial on the tests' Ray
def test_run_returns_the_trials_that_trials_parquet_holds(ray_session, tmp_path, capsys):
    from analysis import load_trials

    trials = sweeps.run(one_trial_grid(), scale="tiny", storage_path=str(tmp_path), name="exp")
    assert isinstance(trials, pd.DataFrame)
    assert len(trials) == 1 and (trials["status"] == "finished").all()
    assert trials["beta"].tolist() == [4.0] and trials["preset"].astype(str).tolist() == ["exp"]
    pd.testing.assert_frame_equal(trials, load_trials(tmp_path / "exp"))
    pd.testing.assert_frame_equal(trials, pd.read_parquet(tmp_path / "exp" / "trials.parquet"))
    # the same experiment again is refused, as on the command line, and nothing runs twice
    with pytest.raises(sweeps.UsageError, match="already exists; pass --resume to continue it"):
        sweeps.run(one_trial_grid(), scale="tiny", storage_path=str(tmp_path), name="exp")
    capsys.readouterr()
    assert main(["--grid", str(tmp_path / "nowhere.yaml"), "--storage-path", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: --grid {tmp_path / 'nowhere.yaml'}: no such file\n"



PACKED_GRID = """\
description: three β-VAEs of two splits, one that diverges (learning rate 1e9), and a FactorVAE, small
  enough for a test
fixed: {dataset: dsprites, architecture: burgess, n_images: 600, data_seed: 0, batch_size: 8,
        report_every: 2, n_nll: 40, n_metric: 60, metrics: [d_score], lr: 0.001}
axes:
  model:
    - {objective: beta_vae, beta: 1.0, split: blank_side}
    - {objective: beta_vae, beta: 4.0, split: shape2tx}
    - {objective: beta_vae, beta: 2.0, lr: 1.0e+9, split: blank_side}
    - {objective: factor_vae, gamma: 10.0, discriminator_width: 16, discriminator_layers: 2,
       split: blank_side}
scales:
  tiny: {steps: 6}
"""

COMPARED = ["train_nll", "test_nll", "d_score", "n_train_images", "n_test_images"]


def tensorboard_folders(experiment):
    return sorted({d for d, _, files in os.walk(experiment) for f in files if "tfevents" in f})


@pytest.mark.slow
def test_a_packed_sweep_stores_each_model_as_the_unpacked_sweep_does(ray_session, tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(PACKED_GRID)
    common = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--max-failures", "0"]
    # the diverging model's trial failed
    assert main([*common, "--name", "alone", "--pack-size", "1", "--verbose"]) == 1
    verbose = capsys.readouterr().out
    assert main([*common, "--name", "packed", "--pack-size", "3"]) == 0  # in a pack, its member failed alone
    out = capsys.readouterr().out
    # --verbose: Ray Tune's own output, its trials named as disgen names them, instead of the live view
    alone_dir = tmp_path / "alone"
    alone_names = [d for d in os.listdir(alone_dir) if (alone_dir / d / "result.json").exists()
                   and '"done": true' in (alone_dir / d / "result.json").read_text()]
    assert len(alone_names) == 3
    assert "Trial status:" in verbose and "Trial name" in verbose and " done " not in verbose
    assert all(f"Trial {name} completed after" in verbose for name in alone_names), verbose[-3000:]
    assert " done " in out and "Trial status:" not in out
    # the β-VAEs share a pack; the FactorVAE (another objective) gets its own
    assert "Packing 4 trials into 2 packs of up to 3 models" in out
    assert "3 of 4 trials finished" in out and "3 of 4 trials finished" in verbose

    alone = pd.read_parquet(tmp_path / "alone" / "trials.parquet").set_index("trial_key").sort_index()
    packed = pd.read_parquet(tmp_path / "packed" / "trials.parquet").set_index("trial_key").sort_index()
    assert list(packed.index) == list(alone.index) and len(packed) == 4  # the same keys, once each
    assert (packed["objective"].sort_values().tolist() == ["beta_vae"] * 3 + ["factor_vae"])
    # the diverging model: a failed row, alone (its Tune trial errored) and in the pack (its member
    # stopped; the others went on), with its settings and the error, and no metrics
    for frame in (alone, packed):
        failed = frame[frame["lr"] == 1e9]
        assert failed["status"].tolist() == ["failed"] and failed["beta"].tolist() == [2.0]
        assert "not finite" in failed["error"].iloc[0] and failed["test_nll"].isna().all()
        assert failed["trial_id"].notna().all()
        assert (frame.loc[frame["lr"] != 1e9, "status"] == "finished").all()
    # the step it reached: the pack saw it fail at step 2; alone, it failed before its first report
    assert packed.loc[packed["lr"] == 1e9, "trained_steps"].tolist() == [2]
    assert alone.loc[alone["lr"] == 1e9, "trained_steps"].isna().all()
    alone, packed = (frame[frame["status"] == "finished"] for frame in (alone, packed))
    # the pack of β-VAEs mixes two splits: each member trains on its own split's rows and is
    # evaluated on its own split's held-out images, so on CPU, where a pack is a loop over its
    # members, it gets exactly the numbers it gets alone
    assert packed.groupby("split", observed=True)["n_test_images"].nunique().to_dict() == {
        "blank_side": 1, "shape2tx": 1}
    assert packed["n_test_images"].nunique() == 2
    for column in COMPARED:
        np.testing.assert_allclose(packed[column], alone[column], rtol=1e-6, err_msg=column)
    histories = [pd.read_parquet(tmp_path / name / "history.parquet").sort_values(["trial_key", "step"])
                 .reset_index(drop=True) for name in ("alone", "packed")]
    assert len(histories[1]) == 3 * 3  # the finished models' reports
    np.testing.assert_allclose(histories[1]["loss"], histories[0]["loss"], rtol=1e-6)

    # one TensorBoard folder per model, named as unpacked, with that model's own curves
    folders = tensorboard_folders(tmp_path / "packed")
    assert [os.path.basename(f) for f in folders] == [os.path.basename(f) for f in
                                                       tensorboard_folders(tmp_path / "alone")]
    for folder in [str(tmp_path / "packed" / d) for d in packed["tensorboard_dir"]]:  # the finished ones
        events = event_accumulator.EventAccumulator(folder)
        events.Reload()
        assert [e.step for e in events.Scalars("train/loss")] == [2, 4, 6]
        assert "eval/d_score" in events.Tags()["scalars"]
    # two Tune trials (the pack of two, and the FactorVAE alone under its own name), not three
    tune_trials = [d for d in os.listdir(tmp_path / "packed")
                   if os.path.exists(tmp_path / "packed" / d / "result.json")]
    assert sorted(d.split("-")[0] for d in tune_trials) == ["blank_side", "pack3"]

    # --resume runs the failed model again (alone now: it diverges again, exit 1) and nothing else
    capsys.readouterr()
    assert main([*common, "--name", "packed", "--pack-size", "3", "--resume"]) == 1
    assert "3 of 4 models stored; running the rest" in capsys.readouterr().out
    again = pd.read_parquet(tmp_path / "packed" / "trials.parquet").set_index("trial_key").sort_index()
    pd.testing.assert_frame_equal(again[again["status"] == "finished"], packed)
    assert len(again) == 4 and again.loc[again["lr"] == 1e9, "status"].tolist() == ["failed"]



# Six β-VAEs that share a pack (one dataset, one model shape); --pack-size 4 makes a pack of four
# and a pack of two.
SIX_BETAS = TWO_SHORT_TRIALS.replace("beta: [1.0, 4.0]", "beta: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]")
# A progress report's bound: its loss terms, Tune's own fields and the members' keys. A pack of 32
# whole configs took about 22 KB a report (benchmarks/README.md, "Small results").
PROGRESS_BYTES = 2048
# What a report grows by per member: its key, once in the config and once in the experiment tag.
PER_MEMBER_BYTES = 32


def lines(folder) -> list[dict]:
    with open(os.path.join(folder, "result.json")) as file:
        return [json.loads(line) for line in file if line.strip()]


def settings_in(value, path="") -> list[str]:
    """Where a result holds a trial setting as a key (a member's whole config, or part of one)."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key in SETTINGS:
                found.append(f"{path}/{key}")
            found += settings_in(item, f"{path}/{key}")
    elif isinstance(value, list):
        for k, item in enumerate(value):
            found += settings_in(item, f"{path}/{k}")
    return found


# Every trial setting, except those a report may carry as a result: the steps reached (``step`` is
# a progress field; ``steps``, ``n_images`` and ``bf16`` are settings the run resolves, reported
# per member for its row) and the key that names a member.
SETTINGS = allowed_keys() - {"steps", "n_images", "bf16"}


@pytest.mark.slow
def test_a_packs_reports_carry_its_members_keys_not_their_settings(ray_session, tmp_path, capsys):
    grid = tmp_path / "six.yaml"
    grid.write_text(SIX_BETAS)
    argv = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp",
            "--pack-size", "4", "--max-failures", "0"]
    assert main(argv) == 0
    assert "Packing 6 trials into 2 packs of up to 4 models" in capsys.readouterr().out
    planned = {t.trial_key: t for t in plan_trials(parse_options(argv)).trials}
    experiment = tmp_path / "exp"
    folders = [experiment / d for d in os.listdir(experiment) if (experiment / d / "result.json").exists()]
    packs = {len(lines(folder)[0]["config"]["members"]): folder for folder in folders}
    assert sorted(packs) == [2, 4]

    progress_bytes = {}
    for size, folder in packs.items():
        with open(folder / "result.json") as file:
            raw = [line for line in file.read().splitlines() if line.strip()]
        reports = [json.loads(line) for line in raw]
        keys = reports[0]["config"]["members"]
        # (a) the config names the members by key; no report holds a member's settings
        assert all(isinstance(key, str) for key in keys) and set(keys) <= set(planned)
        assert all(report["config"] == {"members": keys} for report in reports)
        for report in reports:
            assert settings_in(report) == [], settings_in(report)
        final = [r for r in reports if r.get("done")]
        assert len(final) == 1 and [m["trial_key"] for m in final[0]["members"]] == keys
        assert all("config" not in member for member in final[0]["members"])
        progress = [len(line.encode()) for line, r in zip(raw, reports) if not r.get("done")]
        assert progress and max(progress) < PROGRESS_BYTES, progress
        progress_bytes[size] = max(progress)
        # Tune's own record of the same reports: no settings there either
        csv = pd.read_csv(folder / "progress.csv")
        assert not [c for c in csv.columns if c.split("/")[-1] in SETTINGS]
    # a report does not grow with the members' settings: a pack of four's is a pack of two's and
    # two more keys
    assert progress_bytes[4] - progress_bytes[2] <= 2 * PER_MEMBER_BYTES, progress_bytes

    # (b) each model's row still holds its whole config, from the plan
    trials = pd.read_parquet(experiment / "trials.parquet").set_index("trial_key")
    assert sorted(trials.index) == sorted(planned) and (trials["status"] == "finished").all()
    for key, trial in planned.items():
        row = trials.loc[key]
        assert json.loads(row["config"]) == {**trial.effective_settings(), "bf16": False}  # CPU: float32
        assert row["beta"] == trial.model.beta and row["split"] == trial.data.split
