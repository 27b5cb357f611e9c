"""Object storage, against a real S3-compatible server (moto's server mode) on loopback: a whole
sweep writes its results there; data prepared there by ``python -m data_pipeline.prepare --out
s3://…`` (Ray Data blocks) feeds a sweep that caches it once per node, each row naming the prepared
dataset it read; a head that crashes right after a checkpoint resumes from that checkpoint on S3,
with no manual step and no training redone; and a results store that keeps failing stops the sweep
as a Ctrl-C does, saying why, and the resume, with the store healthy again, stores every model's
row and history exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.fs as pafs
import pytest
from sweep_runs import ONE_TRIAL_GRID, TWO_SHORT_TRIALS, first_loss_steps, results, run_to_the_end, sweep_argv

from analysis import storage
from analysis.schema import HISTORY_FILE, TRIALS_FILE
from analysis.storage import PARTS_DIR, read_results
from sweeps import results as results_writer
from sweeps.checkpoints import CHECKPOINTS, TRAINING_PREFIX
from sweeps.paper_grid import main

pytest.importorskip("moto.server", reason="moto[server] is in the test extra")  # 5.2.1 breaks pyarrow uploads


@pytest.mark.slow
def test_a_sweep_writes_its_results_to_s3(s3_server, tmp_path, two_trial_grid):
    import pyarrow.fs as pafs

    argv = [sys.executable, "-m", "sweeps.paper_grid", "--grid", str(two_trial_grid), "--scale", "tiny",
            "--storage-path", "s3://disgen-test/runs", "--name", "exp", "--address", "local",
            "--max-concurrent-trials", "2"]
    done = subprocess.run(argv, env={**os.environ, **s3_server}, capture_output=True, text=True, timeout=600,
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




from data_pipeline import load_procedural, prepared  # noqa: E402
from data_pipeline.node_cache import materialisations, open_reference, prepared_reference  # noqa: E402

BUCKET = "disgen-test"  # conftest's s3_server creates it
CHECKOUT = str(Path(__file__).resolve().parents[2])
ONE_TRIAL = """
description: one tiny dSprites trial
fixed: {dataset: dsprites, architecture: burgess, objective: beta_vae, n_images: 2000, data_seed: 0,
        batch_size: 32, report_every: 5, n_nll: 100, n_metric: 200, metrics: [d_score], lr: 0.001,
        split: blank_side}
axes:
  beta: [1.0]
scales:
  tiny: {steps: 10}
"""


def _run(argv, environment, cwd):
    done = subprocess.run([sys.executable, "-m", *argv], env=environment, capture_output=True, text=True,
                          timeout=600, cwd=cwd)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_prepared_on_s3_feeds_a_sweep_that_caches_it_once_per_node(s3_server, tmp_path):
    import boto3

    data_dir = f"s3://{BUCKET}/prepared"
    cache = tmp_path / "node-cache"
    environment = {**os.environ, **s3_server, "DISGEN_CACHE": str(cache),
                   "PYTHONPATH": os.pathsep.join(filter(None, [CHECKOUT, os.environ.get("PYTHONPATH")]))}
    out = _run(["data_pipeline.prepare", "dsprites", "--out", f"{data_dir}/dsprites", "--n-images", "2000",
                "--rows-per-block", "700", "--num-cpus", "2", "--address", "local"], environment, tmp_path)
    assert "2,000 images in 3 blocks" in out
    s3 = boto3.session.Session().client("s3")
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="prepared/dsprites/")["Contents"]
    # every file whole, no temporary left (data_pipeline.prepared.write_whole); pyarrow's S3 move
    # leaves an empty folder marker (the key ending in "/"), which nothing reads
    keys = sorted(item["Key"].rsplit("/", 1)[1] for item in listed if not item["Key"].endswith("/"))
    assert keys == ["classes.npy", "images-000000000.npy", "images-000000700.npy", "images-000001400.npy",
                    "manifest.json"]
    manifest = prepared.read_manifest(f"{data_dir}/dsprites")
    assert manifest["built_by"] == "ray.data"
    # the generator's own draw of 2,000 points: a trial with n_images 2000, data_seed 0 reads every
    # row, the same images the procedural trial renders
    data = open_reference(prepared_reference(f"{data_dir}/dsprites"), 2000, 0, cache_dir=tmp_path / "mine")
    expected = load_procedural("dsprites", n_images=2000, seed=0)
    assert np.array_equal(np.asarray(data.images), expected.images)
    assert np.array_equal(data.classes, expected.classes)

    grid = tmp_path / "one.yaml"
    grid.write_text(ONE_TRIAL)
    sweep = ["sweeps.paper_grid", "--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path),
             "--name", "exp", "--data-source", "prepared", "--data-dir", data_dir, "--num-cpus", "1"]
    assert "1 of 1 trials finished" in _run(sweep, environment, tmp_path)
    (record,) = materialisations(cache)  # the node copied it from S3 once
    assert record["kind"] == "prepared" and record["uri"] == f"{data_dir}/dsprites"
    (row,) = pd.read_parquet(tmp_path / "exp" / "trials.parquet").to_dict("records")
    assert row["data_source"] == "prepared" and json.loads(row["config"])["data_source"] == "prepared"
    assert row["data_uri"] == f"{data_dir}/dsprites"  # the row names the prepared dataset
    assert row["data_content_id"] == manifest["content_id"] and np.isfinite(row["test_nll"])

    # a real file converted straight to S3 (prepare --from-file) reads back the same
    from data_pipeline import factor_space, render
    from data_pipeline.prepare import main as prepare

    space = factor_space("circles")
    np.savez(tmp_path / "circles.npz", images=render("circles", space.all_classes()),
             factor_values=space.raw_values(space.all_classes()), factor_sizes=np.array(space.sizes))
    prepare(["circles", "--from-file", str(tmp_path / "circles.npz"), "--out", f"{data_dir}/circles",
             "--rows-per-block", "300", "--single-process"])  # one process: this test process starts no Ray
    circles = open_reference(prepared_reference(f"{data_dir}/circles"), cache_dir=tmp_path / "mine")
    assert len(circles.images.blocks) == 4 and np.array_equal(circles.classes, space.all_classes())
    assert np.array_equal(circles.images[np.arange(1024)][:, 0], render("circles", space.all_classes()))

    # a block altered on the server is refused by a node that has not cached it yet
    s3 = boto3.session.Session().client("s3")
    body = s3.get_object(Bucket=BUCKET, Key="prepared/dsprites/images-000000700.npy")["Body"].read()
    s3.put_object(Bucket=BUCKET, Key="prepared/dsprites/images-000000700.npy", Body=body[:-4] + b"\1\1\1\1")
    with pytest.raises(ValueError, match="images-000000700.npy: sha256 differs"):
        open_reference(prepared_reference(f"{data_dir}/dsprites"), cache_dir=tmp_path / "fresh")



STORAGE = "s3://disgen-test/runs"
HEAD_CRASH_GRID = ONE_TRIAL_GRID.replace("steps: 60", "steps: 40")  # checkpoints at steps 10, 20 and 30


def s3_argv(grid, *extra):
    return [sys.executable, "-m", "sweeps.paper_grid", "--grid", str(grid), "--scale", "tiny",
            "--storage-path", STORAGE, "--name", "exp", "--address", "local", *extra]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_head_crash_on_s3_resumes_from_the_checkpoint_on_s3(ray_session, s3_server, tmp_path,
                                                              checkpoint_signals):
    grid = tmp_path / "grid.yaml"
    grid.write_text(HEAD_CRASH_GRID)
    options = ["--checkpoint-every", "10", "--checkpoint-minutes", "0"]
    with checkpoint_signals.releasing():
        run_to_the_end(sweep_argv(grid, tmp_path, "reference", *options))
    reference = results(tmp_path / "reference")

    env = {**os.environ, **s3_server}
    with open(tmp_path / "driver.log", "w") as log:  # a driver of its own Ray: killed, it takes Ray along
        driver = subprocess.Popen(s3_argv(grid, *options), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        checkpoint_signals.hold(lambda name: name.endswith("-20"), 400, alive=lambda: driver.poll() is None)
    finally:
        driver.kill()
        driver.wait()
    checkpoint_signals.release_all()
    fs = pafs.S3FileSystem(endpoint_override=s3_server["AWS_ENDPOINT_URL"], region="us-east-1")
    kept = [info.base_name for info in fs.get_file_info(pafs.FileSelector(
        f"disgen-test/{CHECKPOINTS}/runs/exp", recursive=True)) if info.base_name.startswith(TRAINING_PREFIX)]
    assert sorted(kept) == [f"{TRAINING_PREFIX}{step:010d}" for step in (10, 20)]

    with checkpoint_signals.releasing():
        done = subprocess.run(s3_argv(grid, *options, "--resume"), env=env, capture_output=True, text=True,
                              timeout=600)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    trials = read_results(f"{STORAGE}/exp")
    history = read_results(f"{STORAGE}/exp", "history.parquet").sort_values("step")
    assert len(trials) == 1 and (trials["status"] == "finished").all()
    assert history["step"].tolist() == list(range(5, 41, 5))  # each report once, none lost
    assert abs(history["loss"].iloc[-1] - reference[1]["loss"].iloc[-1]) <= 1e-6
    # the second worker's TensorBoard file starts right after the checkpoint of step 20
    folder = trials["tensorboard_dir"].iloc[0]
    local = tmp_path / "tensorboard"
    local.mkdir()
    for info in fs.get_file_info(pafs.FileSelector(f"disgen-test/runs/exp/{folder}")):
        if "tfevents" in info.base_name:
            with fs.open_input_stream(info.path) as stream:
                (local / info.base_name).write_bytes(stream.read())
    assert first_loss_steps(local) == [5, 25]
    # and the in-training checkpoints are gone once the final one is on storage
    assert not [info for info in fs.get_file_info(pafs.FileSelector(
        f"disgen-test/{CHECKPOINTS}/runs/exp", recursive=True, allow_not_found=True))
        if info.base_name.startswith(TRAINING_PREFIX)]



@pytest.mark.slow
def test_a_store_that_keeps_failing_stops_the_sweep_and_the_resume_stores_every_row_once(
        ray_session, tmp_path, monkeypatch, capsys):
    grid = tmp_path / "two.yaml"
    grid.write_text(TWO_SHORT_TRIALS)
    args = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp",
            "--max-concurrent-trials", "1"]
    experiment = tmp_path / "exp"
    monkeypatch.setattr(results_writer, "WRITE_ATTEMPTS", 3)
    monkeypatch.setattr(results_writer, "WRITE_BACKOFF_S", 0.05)
    tries = []

    def failing(*args, **kwargs):
        tries.append(args)
        raise OSError("AWS Error SLOW_DOWN during PutObject operation: Please reduce your request rate.")

    # the driver's writes fail (the trials write their history in processes of their own)
    with monkeypatch.context() as patch:
        patch.setattr(storage, "_write_part", failing)
        code = main(args)
    out = capsys.readouterr().out
    assert code == 1, out[-3000:]
    assert len(tries) == 3  # the first commit, tried three times; then nothing more is written
    assert out.count("trying again in") == 2
    assert f"Stopped: the results could not be written to {experiment}" in out
    assert f"Resume with:  python -m sweeps.paper_grid {' '.join(args)} --resume" in out
    assert read_results(str(experiment), TRIALS_FILE).empty
    assert list((experiment / PARTS_DIR).glob("*." + HISTORY_FILE))  # kept for the resume: no compaction

    # a resume while the store still fails: it stops again at its first write, and says no model is done
    with monkeypatch.context() as patch:
        patch.setattr(storage, "_write_part", failing)
        code = main([*args, "--resume"])
    out = capsys.readouterr().out
    assert code == 1 and len(tries) == 6 and "Resume with:" in out, out[-3000:]
    assert "done " not in out and read_results(str(experiment), TRIALS_FILE).empty

    assert main([*args, "--resume"]) == 0
    trials = read_results(str(experiment), TRIALS_FILE)
    assert len(trials) == 2 and trials["trial_key"].is_unique and set(trials["status"]) == {"finished"}
    history = pd.read_parquet(experiment / HISTORY_FILE)
    assert not history.duplicated(["trial_key", "step"]).any()
    assert history.groupby("trial_key").size().to_dict() == dict.fromkeys(trials["trial_key"], 2)
    assert not (experiment / PARTS_DIR).exists()
