"""User grids (--grid FILE) and the checks that run before any trial starts."""

import os
import subprocess
import sys
import textwrap

import pytest

from sweeps.errors import UsageError
from sweeps.grid import load_grid_file, trial_configs
from sweeps.paper_grid import main

GOOD = """
description: my study
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 2000, data_seed: 0,
        batch_size: 16, report_every: 5, n_nll: 100, n_metric: 200}
axes:
  beta: [1.0, 2.0, 8.0]
  split: [blank_side, shape2tx]
scales:
  tiny: {steps: 10, lr: 0.001}
"""


def write(tmp_path, text, name="grid.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_a_yaml_grid_gives_the_cartesian_product_with_seeds(tmp_path):
    spec = load_grid_file(write(tmp_path, GOOD))
    configs = trial_configs(spec, "grid", "tiny", [0, 1])
    assert len(configs) == 3 * 2 * 2
    assert {c["beta"] for c in configs} == {1.0, 2.0, 8.0} and {c["seed"] for c in configs} == {0, 1}
    assert {c["condition"] for c in configs} == {"extrapolation", "recombination_to_range"}


def test_a_python_grid_file_works_the_same(tmp_path):
    path = write(tmp_path, "import yaml\nGRID = yaml.safe_load('''" + GOOD + "''')\n", "grid.py")
    assert len(trial_configs(load_grid_file(path), "grid", "tiny", [0])) == 6


@pytest.mark.parametrize("change, message", [
    (("objective: beta_vae", "objective: gan"), "objective: unknown 'gan'; choose one of vae, beta_vae"),
    (("architecture: burgess", "architecture: resnet"), "architecture: unknown 'resnet'"),
    (("beta: [1.0, 2.0, 8.0]", "beta: [1.0, -2.0]"), "beta: must be >= 0; got -2.0"),
    (("objective: beta_vae", "objective: factor_vae, gamma: -5.0"), "gamma: must be >= 0 or None; got -5.0"),
    (("split: [blank_side, shape2tx]", "split: [blank_side, nope]"),
     "no split 'nope' for dataset 'dsprites'; known: blank_side, "),
    (("split: [blank_side, shape2tx]", "split: [fhue_gt50]"), "no split 'fhue_gt50' for dataset 'dsprites'"),
    (("data_seed: 0", "data_seed: 0, data_source: disk"),
     "data_source: unknown 'disk'; choose one of procedural, real, prepared"),
    (("beta: [1.0, 2.0, 8.0]", "beta: []"), "axis 'beta' is empty, so the grid has zero trials"),
    (("n_images: 2000", "n_imgs: 2000"), "unknown setting 'n_imgs'"),
    (("scales:", "scalez:"), "unknown key 'scalez'"),
])
def test_bad_grids_are_refused_naming_the_field(tmp_path, change, message):
    spec = load_grid_file(write(tmp_path, GOOD.replace(*change)))
    with pytest.raises(UsageError, match=message):
        trial_configs(spec, "grid", "tiny", [0])


def test_the_command_line_reports_a_bad_grid_in_one_line(tmp_path, capsys):
    path = write(tmp_path, GOOD.replace("beta: [1.0, 2.0, 8.0]", "beta: [-1.0]"))
    assert main(["--grid", path, "--scale", "tiny", "--storage-path", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "beta: must be >= 0" in err[0]
    assert main(["--grid", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["--grid", write(tmp_path, GOOD), "--scale", "tiny", "--seeds", "0"]) == 2  # zero trials
    assert "--seeds '0': need at least one seed" in capsys.readouterr().err


@pytest.mark.slow
def test_gpus_on_a_machine_without_gpus_is_refused_before_any_trial(tmp_path):
    # A machine without GPUs, on any machine: a fresh private Ray that sees none (CUDA_VISIBLE_DEVICES
    # empty), not the tests' shared Ray, which has the GPUs of a GPU machine.
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    argv = [sys.executable, "-m", "sweeps.paper_grid", "--scale", "tiny", "--storage-path", str(tmp_path),
            "--gpus-per-trial", "1", "--num-cpus", "1"]
    done = subprocess.run(argv, env={**env, "CUDA_VISIBLE_DEVICES": ""}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "has no GPUs" in done.stderr
    assert not list(tmp_path.glob("*/trials.parquet"))


def test_list_prints_every_preset_and_scale_with_trial_counts(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "default" in out and all(scale in out for scale in ("tiny", "smoke", "small", "full"))


def test_a_search_space_with_a_negative_beta_is_refused(tmp_path, capsys):
    search = "search: {metric: test_nll, mode: min, space: {beta: {uniform: [-1, 2]}}}\n"
    path = write(tmp_path, GOOD + search)
    argv = ["--grid", path, "--scale", "tiny", "--search", "optuna", "--storage-path", str(tmp_path)]
    assert main(argv) == 2
    assert "beta: must be >= 0; got -1" in capsys.readouterr().err
