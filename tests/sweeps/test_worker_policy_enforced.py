"""What a worker writes to S3 passes under the worker policy as shipped, enforced by a moto server
(tests/enforced_s3.py): a trial's history part, its checkpoint files and seal, its TensorBoard
files; and what only the driver may write is denied to a worker's credentials: the plan, the
results tables and the trials parts that commit rows, the driver's lock."""

from __future__ import annotations

import pytest
from enforced_s3 import BUCKET

from analysis import storage
from analysis.schema import HISTORY_FILE, TRIALS_FILE
from sweeps.checkpoints import CHECKPOINTS, SEAL

EXPERIMENT = f"s3://{BUCKET}/disgen/exp"


def as_role(enforced_s3, monkeypatch, role):
    for name, value in enforced_s3.env(role).items():
        monkeypatch.setenv(name, value)


@pytest.mark.slow  # a moto server of its own
def test_a_workers_own_writes_pass_and_the_drivers_files_are_denied_to_it(enforced_s3, monkeypatch):
    as_role(enforced_s3, monkeypatch, "worker")
    part = storage.new_part()
    storage.write_history_part(EXPERIMENT, part, [{"trial_key": "a", "step": 5, "loss": 1.0}])
    fs, inner = storage.resolve(EXPERIMENT)
    checkpoint = f"{BUCKET}/{CHECKPOINTS}/disgen/exp/a"
    tensorboard = f"{inner}/exp-a1b2c3/events.out.tfevents.1.node"
    for path in [tensorboard, f"{checkpoint}/m0.pt", f"{checkpoint}/{SEAL}"]:
        storage.write_whole(fs, path, b"written by the trial")
    for denied in ["plan.json", TRIALS_FILE, HISTORY_FILE, f"{storage.PARTS_DIR}/{part}.{TRIALS_FILE}",
                   "driver.lock"]:
        with pytest.raises(OSError, match="AccessDenied"):
            storage.write_whole(fs, f"{inner}/{denied}", b"written by a worker")

    as_role(enforced_s3, monkeypatch, "head")  # the driver commits the trial's rows and reads them back
    storage.write_trials_part(EXPERIMENT, part, [{"trial_key": "a", "status": "finished"}])
    history = storage.read_results(EXPERIMENT, HISTORY_FILE)
    assert history["trial_key"].tolist() == ["a"] and history["loss"].tolist() == [1.0]
    assert storage.compact(EXPERIMENT) == 2
    assert storage.read_results(EXPERIMENT, TRIALS_FILE)["trial_key"].tolist() == ["a"]
