"""The command line: bad input before Ray starts, and one real tiny sweep end to end."""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from tensorboard.backend.event_processing import event_accumulator

from analysis.storage import PARTS_DIR
from sweeps.grid import get_spec, trial_configs
from sweeps.paper_grid import main
from sweeps.trials import trial_key

BAD_INPUT = {
    "unknown_preset": (["--preset", "nope"], "unknown preset 'nope'; choose one of: default"),
    "unknown_scale": (["--scale", "huge"], "unknown scale 'huge' for preset 'default'; choose one of"),
    "unwritable_storage": (["--storage-path", "{file}/sub"], "cannot write to storage path"),
    "unreachable_address": (["--address", "127.0.0.1:1"], "cannot reach Ray at 127.0.0.1:1"),
}


@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2_before_ray_starts(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    script = (
        "import json, sys\n"
        "from sweeps.paper_grid import main\n"
        f"cases = {json.dumps({k: v[0] for k, v in BAD_INPUT.items()})}\n"
        "codes = {k: main([a.replace('{file}', sys.argv[1]) for a in argv]) for k, argv in cases.items()}\n"
        "print(json.dumps({'codes': codes, 'ray_imported': 'ray' in sys.modules}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(a_file)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"codes": dict.fromkeys(BAD_INPUT, 2), "ray_imported": False}
    errors = done.stderr.strip().splitlines()
    assert len(errors) == len(BAD_INPUT)
    for line, (_, expected) in zip(errors, BAD_INPUT.values()):
        assert line.startswith("error: ") and expected in line


def test_help_documents_every_option():
    done = subprocess.run([sys.executable, "-m", "sweeps.paper_grid", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    for option in ["--preset", "--scale", "--storage-path", "--name", "--seeds", "--resume",
                   "--address", "--cpus-per-trial", "--gpus-per-trial", "--max-concurrent-trials",
                   "--pack-size", "--data-dir", "--data-source", "--search", "--scheduler", "--list",
                   "--dry-run"]:
        assert option in done.stdout
    # every choice is listed, every preset described, and no option says "(default: None)" or False
    assert "--preset {default,montero2021,montero2022,dittadi2021}" in done.stdout
    assert "--scale {tiny,smoke,demo,small,full}" in done.stdout
    assert all(f"\n  {name}: " in done.stdout for name in ("default", "montero2021", "dittadi2021"))
    assert "(default: None)" not in done.stdout and "(default: False)" not in done.stdout
    assert "(default: smoke)" in done.stdout and "(default: 2)" in done.stdout  # real defaults stay
    assert max(len(line) for line in done.stdout.splitlines()) <= 100


def test_the_other_command_lines_show_no_empty_defaults_either():
    from analysis.report import parser as report_parser
    from sweeps.demo import build_parser as demo_parser

    for text in (report_parser().format_help(), demo_parser().format_help()):
        assert "(default: None)" not in text and "(default: False)" not in text and "(default: " in text


def test_trial_keys_are_stable_and_distinct():
    configs = trial_configs(get_spec("default"), "default", "tiny", [0, 1])
    assert len(configs) == 8 and len({c["trial_key"] for c in configs}) == 8
    assert trial_configs(get_spec("default"), "default", "tiny", [0, 1]) == configs
    assert trial_key({**configs[0], "report_every": 999}) == configs[0]["trial_key"]


def event_files(folder):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs if "tfevents" in f)


@pytest.mark.slow
def test_tiny_sweep_writes_parquet_and_tensorboard_and_resume_reruns_nothing(ray_session, tmp_path, capsys):
    argv = ["--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp"]
    # As a user runs it, joining a running cluster (the tests' own) through $RAY_ADDRESS.
    address = ray_session.get_runtime_context().gcs_address
    done = subprocess.run([sys.executable, "-m", "sweeps.paper_grid", *argv], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "RAY_ADDRESS": address})
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Connecting to existing Ray cluster at address: {address}" in done.stderr
    assert "4 of 4 trials finished" in done.stdout
    for expected in ["Spearman", "tensorboard --logdir", "--resume", "pd.read_parquet"]:
        assert expected in done.stdout
    experiment = tmp_path / "exp"

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
