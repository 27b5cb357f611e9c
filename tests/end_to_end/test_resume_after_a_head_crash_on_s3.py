"""The head crash of tests/end_to_end/test_resume.py on an object store (moto S3 on loopback): the
driver is killed (SIGKILL, its own Ray with it, as a lost head machine) while the trial's worker
waits right after its second in-training checkpoint (step 20, in the gap before the next); the
resume, by a new driver with no manual step, goes on from that checkpoint on S3: no training step
is done again beyond that checkpoint's interval, and the final loss is the uninterrupted run's."""

import os
import subprocess
import sys

import pyarrow.fs as pafs
import pytest
from sweep_runs import ONE_TRIAL_GRID, first_loss_steps, results, run_to_the_end, sweep_argv

from analysis.storage import read_results
from sweeps.checkpoints import CHECKPOINTS, TRAINING_PREFIX

STORAGE = "s3://disgen-test/runs"
GRID = ONE_TRIAL_GRID.replace("steps: 60", "steps: 40")  # checkpoints at steps 10, 20 and 30


def s3_argv(grid, *extra):
    return [sys.executable, "-m", "sweeps.paper_grid", "--grid", str(grid), "--scale", "tiny",
            "--storage-path", STORAGE, "--name", "exp", "--address", "local", *extra]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_head_crash_on_s3_resumes_from_the_checkpoint_on_s3(ray_session, s3_server, tmp_path,
                                                              checkpoint_signals):
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
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
