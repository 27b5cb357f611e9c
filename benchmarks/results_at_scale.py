"""What storing results costs as a study grows: 1,080 trial completions of Dittadi et al.'s shape.

Each completion is one model of the dittadi2021 full grid (its real trial config), with 400 history
rows and a value in every trials column, stored through the sweep's own results path exactly as a
finished Tune trial is stored: the trial writes its history part (``sweeps.trainable``'s
``write_history``), then the driver's results callback commits its trials part, folding the parts
every ``COMPACT_EVERY`` commits (``sweeps.results``, ``analysis.storage``). It runs against a local
folder and against a real S3 server (moto, on loopback, started here) and prints one line per store:

    store=local completions=1080 total_s=… first100_ms=… last100_ms=… final_compact_s=…

``total_s`` is the wall time of the completions; ``first100_ms`` and ``last100_ms`` are the mean
milliseconds per completion over the first and the last 100; ``final_compact_s`` is the compaction
that ends a run (every part into trials.parquet and history.parquet), once, after the completions.
``--limit-s`` stops a store early (its line then says how many completions it reached).

    python benchmarks/results_at_scale.py [--completions 1080] [--stores local s3] [--limit-s 900]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

HISTORY_ROWS = 400


def _trials(n: int):
    from sweeps.grid import default_seeds, get_spec, trial_configs

    spec = get_spec("dittadi2021")
    trials = trial_configs(spec, "dittadi2021", "full", list(range(default_seeds(spec, "full"))))
    return (trials * (n // len(trials) + 1))[:n] if n > len(trials) else trials[:n]


def _metrics(index: int) -> dict:
    import pyarrow as pa

    from analysis.schema import METRIC_FIELDS

    values = {}
    for field in METRIC_FIELDS:
        if pa.types.is_floating(field.type):
            values[field.name] = 0.5 + index * 1e-4
        elif pa.types.is_integer(field.type):
            values[field.name] = 10_000
        elif pa.types.is_string(field.type):
            values[field.name] = "gbt" if field.name != "device" else "cuda"
    values.pop("finished_at", None)
    return values


def _history(index: int) -> list[dict]:
    return [{"step": 1000 * (r + 1), "loss": 100.0 - r * 0.1, "reconstruction": 90.0 - r * 0.1,
             "kl": 10.0, "images_per_second": 5000.0 + index} for r in range(HISTORY_ROWS)]


class _Trial:
    """What the results writer reads of a finished Tune trial (``sweeps.ray_edge.TrialView``)."""

    checkpoint = None  # no checkpoint left to remove
    status, error = "TERMINATED", None

    def __init__(self, trial_id: str, config: dict, result: dict):
        self.trial_id, self.config, self.last_result = trial_id, config, result


class _Log:
    """What the trial's history writer reads of a model's log: its trial and progress reports."""

    def __init__(self, trial, history: list[dict]):
        self.trial, self.history = trial, history


def _complete(writer, experiment_dir: str, trial, index: int) -> None:
    """One finished trial, stored as the sweep stores it: the trial writes its history part, then
    makes its final report (``sweeps.outcome.TrialOutcome``), which the driver's results writer commits."""
    from sweeps.outcome import ModelOutcome, TrialOutcome
    from sweeps.trainable import write_history

    member = ModelOutcome(trial, step=400_000, steps=400_000, metrics=_metrics(index))
    part = write_history(experiment_dir, [_Log(trial, _history(index))], [member])
    report = TrialOutcome([member], step=400_000, facts={"node_id": "n0"}, results_part=part).to_report()
    # the Tune config names its members by trial key; the writer finds them in the plan
    writer.completed(_Trial(f"t{index:05d}", {"members": [trial.trial_key]}, report))


def run_store(store: str, experiment_dir: str, n: int, limit_s: float) -> str:
    from analysis.storage import ResultsStore
    from sweeps.results import ResultsWriter

    trials = _trials(n)
    import sweeps.trainable  # noqa: F401  (imported before the clock starts, as on a worker)

    writer = ResultsWriter(ResultsStore(experiment_dir), trials)
    durations = []
    started = time.perf_counter()
    for index, trial in enumerate(trials):
        t0 = time.perf_counter()
        _complete(writer, experiment_dir, trial, index)
        durations.append(time.perf_counter() - t0)
        if time.perf_counter() - started > limit_s:
            break
    total = time.perf_counter() - started
    t0 = time.perf_counter()
    writer.store.compact()
    final = time.perf_counter() - t0
    first = 1000 * sum(durations[:100]) / len(durations[:100])
    last = 1000 * sum(durations[-100:]) / len(durations[-100:])
    stopped = "" if len(durations) == n else f" stopped_at_limit_s={limit_s:g}"
    return (f"store={store} completions={len(durations)} total_s={total:.1f} first100_ms={first:.0f} "
            f"last100_ms={last:.0f} final_compact_s={final:.1f}{stopped}")


def _moto() -> tuple[subprocess.Popen, str]:
    import moto_server

    server, endpoint = moto_server.start()
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test",
                       "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"})
    import boto3

    boto3.session.Session().client("s3", endpoint_url=endpoint).create_bucket(Bucket="disgen-bench")
    return server, "s3://disgen-bench/results/d21"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=1080)
    parser.add_argument("--stores", nargs="+", default=["local", "s3"], choices=["local", "s3"])
    parser.add_argument("--limit-s", type=float, default=900.0, help="stop a store after this long")
    args = parser.parse_args()
    import pyarrow
    import ray

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"pyarrow {pyarrow.__version__}, ray {ray.__version__}, load {os.getloadavg()[0]:.1f}", flush=True)
    for store in args.stores:
        if store == "local":
            folder = tempfile.mkdtemp(prefix="disgen-results-at-scale-")
            try:
                experiment = os.path.join(folder, "d21")
                os.makedirs(experiment)
                print(run_store("local", experiment, args.completions, args.limit_s), flush=True)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        else:
            server, uri = _moto()
            try:
                print(run_store("s3", uri, args.completions, args.limit_s), flush=True)
            finally:
                server.terminate()
                server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
