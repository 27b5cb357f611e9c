"""Nothing a worker can write is unpickled, and a worker cannot write the driver's files: a resume
reads none of Tune's saved state (it plans from plan.json and the results; tests/end_to_end/
test_resume.py plants pickles that would leave a file behind, and none is opened), and the
worker's IAM policy denies it writes and deletes on the driver's keys
(cluster/iam/worker-policy.json, evaluated here as IAM does: an explicit Deny wins, else an
Allow, else denied)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ray.air.constants import EXPR_ERROR_PICKLE_FILE, EXPR_PARAM_PICKLE_FILE
from ray.tune.execution.tune_controller import TuneController
from ray.tune.impl.tuner_internal import _TUNER_PKL

from analysis.loading import ERRORS_FILE, ERRORS_PARTS
from analysis.storage import COMPACTED, HISTORY_FILE, PARTS_DIR, TRIALS_FILE
from sweeps.lock import LOCK_FILE
from sweeps.plan_record import PLAN_FILE
from sweeps.search import JOURNAL

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
    JOURNAL,
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
