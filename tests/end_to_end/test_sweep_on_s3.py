"""Object storage: a whole sweep against a real S3-compatible server (moto) on loopback."""

import os
import subprocess
import sys

import pandas as pd
import pytest

pytest.importorskip("moto.server", reason="moto[server] is in the test extra")  # 5.2.1 breaks pyarrow uploads


@pytest.mark.slow
def test_a_sweep_writes_its_results_to_s3(s3_server, tmp_path, two_trial_grid):
    import pyarrow.fs as pafs

    argv = [sys.executable, "-m", "sweeps.paper_grid", "--grid", str(two_trial_grid), "--scale", "tiny",
            "--storage-path", "s3://disgen-test/runs", "--name", "exp", "--address", "local",
            "--max-concurrent-trials", "2"]
    done = subprocess.run(argv, env={**os.environ, **s3_server}, capture_output=True, text=True, timeout=400,
                          cwd=tmp_path)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert "2 of 2 trials finished" in done.stdout

    fs, _ = pafs.FileSystem.from_uri("s3://disgen-test/runs")
    trials = pd.read_parquet("disgen-test/runs/exp/trials.parquet", filesystem=fs)
    history = pd.read_parquet("disgen-test/runs/exp/history.parquet", filesystem=fs)
    assert len(trials) == 2 and len(history) == 8
    selector = pafs.FileSelector("disgen-test/runs/exp", recursive=True)
    files = [info.path for info in fs.get_file_info(selector)]
    assert sum("tfevents" in f for f in files) >= 2  # TensorBoard files synced as trial artifacts
    for folder in trials["tensorboard_dir"]:  # each row's TensorBoard folder, relative to the experiment
        assert any(f.startswith(f"disgen-test/runs/exp/{folder}/events.out.tfevents") for f in files), folder
    assert any("/checkpoint_" in f for f in files)
    assert not os.path.exists(tmp_path / "disgen_results")
