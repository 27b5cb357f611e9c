"""The dittadi2021 preset on D21's own data, end to end: a small copy in the authors' robot-finger
layout (tests/robot_finger_files.py) → ``data_pipeline.prepare`` (Ray Data) → ``--preset
dittadi2021 --scale tiny --dataset finger`` on the prepared sets → rows with D21's OOD1 (on the 8
training colours), OOD2-A (``finger_heldout_colors``) and OOD2-B (``finger_real``) transfer errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from robot_finger_files import write_finger_datasets

from data_pipeline.prepare import prepare
from data_pipeline.robot_finger import SETS
from sweeps.paper_grid import main

SCENARIOS = ("ood1_a", "ood1_b", "ood1_c", "ood2", "ood2_a", "ood2_b")


@pytest.mark.slow
def test_tiny_dittadi2021_on_prepared_finger_sets_scores_ood1_and_both_ood2(ray_session, tmp_path, capsys):
    root = write_finger_datasets(tmp_path / "files", n=400, n_heldout=60, n_real=40)
    for name in SETS:  # the Ray Data build, on the tests' Ray
        manifest = prepare(name, tmp_path / "prepared" / name, rows_per_block=100, from_file=root)
        assert manifest["built_by"] == "ray.data"

    assert main(["--list", "--dataset", "finger", "--data-dir", str(tmp_path / "prepared")]) == 0
    listed = capsys.readouterr().out
    assert f"finger (prepared at {tmp_path / 'prepared' / 'finger'})" in listed
    assert "OOD2-B finger_real (prepared at" in listed

    argv = ["--preset", "dittadi2021", "--scale", "tiny", "--dataset", "finger",
            "--data-dir", str(tmp_path / "prepared"), "--storage-path", str(tmp_path / "runs")]
    assert main(argv) == 0
    trials = pd.read_parquet(tmp_path / "runs" / "dittadi2021-tiny" / "trials.parquet")
    assert len(trials) == 4 and trials["status"].eq("finished").all()
    assert trials["dataset"].eq("finger").all() and trials["image_size"].eq(128).all()
    assert trials["data_source"].eq("prepared").all() and trials["transfer_factor"].eq("colour").all()
    assert trials["ood2_a_dataset"].eq("finger_heldout_colors").all()
    assert trials["ood2_b_dataset"].eq("finger_real").all()
    for scenario in SCENARIOS:  # GBT readout at tiny scale; each a finite mean error in [0, 1]
        errors = trials[f"transfer_gbt_{scenario}"].to_numpy(dtype=float)
        assert np.isfinite(errors).all() and ((errors >= 0) & (errors <= 1)).all(), scenario
    # the real images are another distribution than the simulated ones the regressors fitted on
    assert not np.allclose(trials["transfer_gbt_ood2_b"], trials["transfer_gbt_ood2_a"])
