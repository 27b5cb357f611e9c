"""Nothing a resume unpickles can be written by a worker: the worker's IAM policy denies it writes
and deletes on the driver's keys (cluster/iam/worker-policy.json, evaluated here as IAM does:
an explicit Deny wins, else an Allow, else denied), and the driver's record of its Tune state
files' hashes (``sweeps.tune_state``) refuses a resume whose files something else wrote, before
Tune unpickles any of them."""

from __future__ import annotations

import json
import os
import pickle
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from ray.air.constants import EXPR_ERROR_PICKLE_FILE, EXPR_PARAM_PICKLE_FILE
from ray.tune.execution.tune_controller import TuneController
from ray.tune.impl.tuner_internal import _TUNER_PKL

from analysis.loading import ERRORS_FILE, ERRORS_PARTS
from analysis.storage import COMPACTED, HISTORY_FILE, PARTS_DIR, TRIALS_FILE
from sweeps import tune_state
from sweeps.errors import UsageError
from sweeps.lock import LOCK_FILE
from sweeps.plan_record import PLAN_FILE

IAM = Path(__file__).resolve().parents[2] / "cluster" / "iam"
BUCKET = "my-lab-disgen"
EXPERIMENT = "disgen/dittadi2021-full"


def _matches(pattern: str, value: str) -> bool:
    """IAM's wildcards: ``*`` any run of characters (``/`` included), ``?`` one character."""
    return re.fullmatch("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern),
                        value) is not None


def allowed(action: str, key: str, policy: str = "worker-policy.json") -> bool:
    """IAM's evaluation of one identity policy for an S3 object action on ``key`` of the bucket."""
    document = json.loads((IAM / policy).read_text().replace("DISGEN_BUCKET", BUCKET))
    arn = f"arn:aws:s3:::{BUCKET}/{key}"
    effects = set()
    for statement in document["Statement"]:
        actions, resources = ([v] if isinstance(v, str) else v
                              for v in (statement["Action"], statement["Resource"]))
        if any(_matches(a, action) for a in actions) and any(_matches(r, arn) for r in resources):
            effects.add(statement["Effect"])
    return "Deny" not in effects and "Allow" in effects


def test_the_matcher_reads_iams_wildcards():
    assert _matches("arn:aws:s3:::b/*/plan.json", "arn:aws:s3:::b/x/y/plan.json")
    assert not _matches("arn:aws:s3:::b/*/plan.json", "arn:aws:s3:::b/x/plan.json.bak")
    assert _matches("s3:Get?bject", "s3:GetObject") and not _matches("s3:Put*", "s3:GetObject")


DRIVERS_KEYS = [
    _TUNER_PKL,
    TuneController.CKPT_FILE_TMPL.format("2026-11-27_21-55-24"),
    "basic-variant-state-2026-11-27_21-55-24.json",
    "searcher-state-2026-11-27_21-55-24.pkl",
    f"blank_side-b1-s0-0a1b2c/{EXPR_ERROR_PICKLE_FILE}",
    f"blank_side-b1-s0-0a1b2c/{EXPR_PARAM_PICKLE_FILE}",
    "blank_side-b1-s0-0a1b2c/result.json",
    tune_state.RECORD,
    LOCK_FILE,
    PLAN_FILE,
    TRIALS_FILE,
    HISTORY_FILE,
    ERRORS_FILE,
    f"{ERRORS_PARTS}/20261127T215524000000Z-0a1b2c3d.jsonl",
    f"{PARTS_DIR}/20261127T215524000000Z-0a1b2c3d.{TRIALS_FILE}",
    f"{PARTS_DIR}/{COMPACTED}20261127T215524000000Z-0a1b2c3d.{HISTORY_FILE}",
]

WORKERS_KEYS = [  # what a worker writes: checkpoints, TensorBoard files, history parts
    f"checkpoints/{EXPERIMENT}/blank_side-b1-s0-0a1b2c3d4e/training_checkpoint_0000000010/member_0000.pt",
    f"checkpoints/{EXPERIMENT}/blank_side-b1-s0-0a1b2c3d4e/training_checkpoint_0000000010/disgen_checkpoint.json",
    f"{EXPERIMENT}/blank_side-b1-s0-0a1b2c/checkpoint_000000/trainer.pt",
    f"{EXPERIMENT}/blank_side-b1-s0-0a1b2c/checkpoint_000000/disgen_checkpoint.json",
    f"{EXPERIMENT}/blank_side-b1-s0-0a1b2c/events.out.tfevents.1764280524.node.1.0",
    f"{EXPERIMENT}/{PARTS_DIR}/20261127T215524000000Z-0a1b2c3d.{HISTORY_FILE}",
]


@pytest.mark.parametrize("name", DRIVERS_KEYS)
def test_a_worker_may_neither_write_nor_delete_a_key_of_the_driver(name):
    key = f"{EXPERIMENT}/{name}"
    assert allowed("s3:GetObject", key)  # read, as the analysis does
    assert not allowed("s3:PutObject", key) and not allowed("s3:DeleteObject", key)
    assert allowed("s3:PutObject", key, "head-policy.json")  # the driver's, on the head


@pytest.mark.parametrize("key", WORKERS_KEYS)
def test_a_worker_may_write_what_it_writes(key):
    assert allowed("s3:PutObject", key) and allowed("s3:GetObject", key)


def test_a_worker_deletes_its_checkpoints_but_never_a_results_part():
    assert allowed("s3:DeleteObject", WORKERS_KEYS[0])
    assert not allowed("s3:DeleteObject", WORKERS_KEYS[-1])


# -- the driver's record ------------------------------------------------------------------------


class Payload:
    """A pickle that runs code when it is loaded: it leaves a file behind."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def experiment(tmp_path):
    """An experiment as its driver left it: tuner.pkl, one state save, one trial's error."""
    folder, staging = tmp_path / "exp", tmp_path / "staging"
    folder.mkdir()
    (staging / "trial").mkdir(parents=True)
    record = tune_state.StateRecord(str(folder))
    (folder / _TUNER_PKL).write_bytes(pickle.dumps({"tuner": 1}))
    record.record_stored(_TUNER_PKL)
    storage = SimpleNamespace(experiment_driver_staging_path=str(staging), trial_dir_name="trial")
    trials = [SimpleNamespace(storage=storage, local_path=str(staging / "trial"))]
    state = TuneController.CKPT_FILE_TMPL.format("one")
    (staging / state).write_text('{"trials": 1}')  # Tune's save into its staging folder, then its upload
    record.on_step_end(iteration=1, trials=trials)
    (folder / state).write_bytes((staging / state).read_bytes())
    (staging / "trial" / EXPR_ERROR_PICKLE_FILE).write_bytes(pickle.dumps(ValueError("lost")))
    record.on_trial_error(iteration=2, trials=trials, trial=trials[0])
    (folder / "trial").mkdir()
    error = (staging / "trial" / EXPR_ERROR_PICKLE_FILE).read_bytes()
    (folder / "trial" / EXPR_ERROR_PICKLE_FILE).write_bytes(error)
    (folder / PLAN_FILE).write_text("{}")  # disgen's own: data, not in the record
    # the next save: storage may still hold the previous one (an upload in flight) or the new one
    (staging / state).write_text('{"trials": 2}')
    os.utime(staging / state, ns=(1, 1))
    record.on_experiment_end(trials=trials)
    return folder, staging, state


def test_a_resume_of_the_state_the_driver_saved_goes_ahead(experiment):
    folder, staging, state = experiment
    tune_state.check(str(folder))  # the previous save still on storage
    (folder / state).write_bytes((staging / state).read_bytes())
    tune_state.check(str(folder))  # or the newest


@pytest.mark.parametrize("name", [_TUNER_PKL, "state", f"trial/{EXPR_ERROR_PICKLE_FILE}"])
def test_a_resume_whose_tune_state_something_else_wrote_is_refused_before_it_is_unpickled(experiment, name):
    folder, _, state = experiment
    path = folder / (state if name == "state" else name)
    path.write_bytes(pickle.dumps(Payload(str(folder.parent / "ran"))))
    with pytest.raises(UsageError, match=rf"{re.escape(path.name)} is not the file this experiment's driver "
                                         rf"saved .*refused before Tune unpickles it"):
        tune_state.check(str(folder))
    assert not (folder.parent / "ran").exists()


def test_a_pickle_the_driver_never_wrote_is_refused(experiment):
    folder, _, _ = experiment
    (folder / "searcher-state-x.pkl").write_bytes(pickle.dumps(1))
    with pytest.raises(UsageError, match="searcher-state-x.pkl is not the file"):
        tune_state.check(str(folder))


def test_the_resume_command_checks_tuner_pkl_before_tune_reads_it(experiment):
    from sweeps.tuner import _resumed_tuner

    folder, _, _ = experiment
    (folder / _TUNER_PKL).write_bytes(pickle.dumps(Payload(str(folder.parent / "ran"))))
    with pytest.raises(UsageError, match="tuner.pkl is not the file this experiment's driver saved"):
        _resumed_tuner(SimpleNamespace(experiment_dir=str(folder)), trainable=None, console=None, stop=None)
    assert not (folder.parent / "ran").exists()
