"""The driver's results writer under a failing store: a write that fails is tried again with
backoff (a burst of 503s on S3: stored once, the sweep goes on); one that keeps failing, in any
event, stops the sweep as a Ctrl-C does, raises nothing into Tune's run, and writes nothing more.
The trials are the plain views the writer is handed (``sweeps.ray_edge.TrialView``'s fields)."""

import random
from types import SimpleNamespace

import pytest
from s3_faults import is_put

from analysis import storage
from analysis.loading import load_errors
from analysis.schema import HISTORY_FILE, TRIALS_FILE
from analysis.storage import ResultsStore, read_results
from sweeps import results
from sweeps.errors import StopSignal
from sweeps.packing import outcome_of, tune_config
from sweeps.results import ResultsWriter, StorageFailed, history_rows
from sweeps.trials import TrialConfig

# After this many 503s in a row (about 7 s), a write to S3 raises (one PutObject through boto3,
# data_pipeline.prepared.S3_ATTEMPTS = 4; five PUTs reach the proxy below, measured with botocore
# 1.42): shorter bursts the SDK's own retries absorb.
SDK_TRIES = 5
SLOW_DOWN = "AWS Error SLOW_DOWN during PutObject operation: Please reduce your request rate."


def config(seed):
    return TrialConfig.complete({"dataset": "dsprites", "split": "blank_side", "n_images": 100,
                                 "data_seed": 0, "report_every": 5, "n_nll": 10, "n_metric": 10,
                                 "architecture": "burgess", "objective": "beta_vae", "steps": 10, "beta": 1.0,
                                 "seed": seed})


# The planned trials, as the driver gives them to its results writer: a Tune trial's config names
# its members by trial key (sweeps.packing.tune_config)
PLANNED = [config(seed) for seed in (*range(4), *range(10, 14), 100)]


def trial(experiment, seed, outcome="finished"):
    """A Tune trial as the driver's listeners see it (``sweeps.ray_edge.TrialView``): ``finished``
    (its history part written, as the trial writes it, and its final result naming it; a pack
    member that diverged in ``finished-with-error``), ``stopped`` by a scheduler (no final report)
    or ``errored``."""
    member = config(seed)
    view = SimpleNamespace(trial_id=f"t{seed}", config=tune_config([member]), last_result={"step": 5},
                           status="TERMINATED", error=None, checkpoint=None)
    if outcome.startswith("finished"):
        part = storage.new_part()
        storage.write_history_part(experiment, part, history_rows(
            "exp", member.trial_key, [{"step": s, "loss": random.random()} for s in (5, 10)]))
        done = {"config": member.to_dict(), "test_nll": 100.0 + seed}
        if outcome == "finished-with-error":
            done["error"] = "diverged"
        view.last_result = {"done": True, "members": [done], "results_part": part, "step": 10}
    elif outcome == "errored":
        view.status, view.error = "ERROR", "RuntimeError: boom"
    return view


class Faults:
    """Every results file the driver writes (trials parts, error parts) fails, ``times`` times
    (None: always), as S3 fails a burst of requests."""

    def __init__(self, monkeypatch, times=None):
        self.times, self.raised = times, 0
        write_part, put = storage._write_part, ResultsWriter._put

        def failing(real):
            def write(*args, **kwargs):
                if self.times is None or self.raised < self.times:
                    self.raised += 1
                    raise OSError(SLOW_DOWN)
                return real(*args, **kwargs)
            return write

        monkeypatch.setattr(storage, "_write_part", failing(write_part))
        monkeypatch.setattr(ResultsWriter, "_put", staticmethod(failing(put)))


@pytest.fixture
def stop():
    """A StopSignal as a Tune run sets it up, with the run's interrupt replaced by a recorder."""
    signal = StopSignal()
    signal.interrupts = []
    signal.interrupt = lambda: signal.interrupts.append(2)  # as Tune's SIGINT handler (SIGINT is 2)
    return signal


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(results, "WRITE_ATTEMPTS", 3)
    monkeypatch.setattr(results, "WRITE_BACKOFF_S", 0.01)


def test_a_burst_of_failures_is_retried_and_stores_each_row_once(tmp_path, monkeypatch, stop, capsys):
    experiment = str(tmp_path / "exp")
    writer = ResultsWriter(ResultsStore(experiment), PLANNED, stop=stop)
    finished = trial(experiment, 0)
    faults = Faults(monkeypatch, times=2)
    writer.completed(finished)
    assert faults.raised == 2 and not stop.received.is_set() and writer.failure is None
    assert capsys.readouterr().out.count("trying again") == 2
    trials = read_results(experiment, TRIALS_FILE)
    assert list(trials["trial_key"]) == [config(0).trial_key]
    assert len(read_results(experiment, HISTORY_FILE)) == 2


CALLBACKS = ["completed", "completed, with a member that failed", "completed, stopped by the scheduler",
             "failed", "step, a deferred evaluation ended"]


def callbacks(experiment, writer, seed):
    """Each event of the results writer that writes results, with its trial ready."""
    finished, failed = trial(experiment, seed), trial(experiment, seed + 1, "finished-with-error")
    stopped, errored = trial(experiment, seed + 2, "stopped"), trial(experiment, seed + 3, "errored")
    return dict(zip(CALLBACKS, [
        lambda: writer.completed(finished),
        lambda: writer.completed(failed),
        lambda: writer.completed(stopped),
        lambda: writer.failed(errored),
        lambda: writer.step([]),
    ]))


@pytest.mark.parametrize("callback", CALLBACKS)
def test_a_store_that_keeps_failing_in_any_callback_stops_the_sweep_and_raises_nothing(
        callback, tmp_path, monkeypatch, stop, capsys):
    experiment = str(tmp_path / "exp")
    ended = trial(experiment, 100)  # a trial whose deferred evaluation ended
    evaluations = SimpleNamespace(finished=lambda wait=False: [
        outcome_of({"trial_id": ended.trial_id, **ended.last_result}, ended.config)])
    writer = ResultsWriter(ResultsStore(experiment), PLANNED, stop=stop, evaluations=evaluations)
    first, later = callbacks(experiment, writer, 0), callbacks(experiment, writer, 10)
    faults = Faults(monkeypatch)
    first[callback]()  # raises nothing into Tune's run
    assert faults.raised == 3  # tried WRITE_ATTEMPTS times, then stopped
    assert stop.received.is_set() and stop.interrupts == [2]  # Tune's Ctrl-C handler, once (SIGINT is 2)
    assert "could not be written" in stop.reason and "SLOW_DOWN" in stop.reason
    assert "Stopping the sweep as Ctrl-C does" in capsys.readouterr().out
    for again in later.values():  # stopping: nothing more is tried
        again()
    assert faults.raised == 3 and stop.interrupts == [2]
    assert read_results(experiment, TRIALS_FILE).empty


def test_without_a_stop_signal_the_failure_is_raised(tmp_path, monkeypatch):
    experiment = str(tmp_path / "exp")
    writer = ResultsWriter(ResultsStore(experiment), PLANNED)
    finished = trial(experiment, 0)
    Faults(monkeypatch)
    with pytest.raises(StorageFailed, match="failed 3 times.*SLOW_DOWN"):
        writer.completed(finished)


@pytest.mark.slow
def test_on_s3_a_burst_of_503s_longer_than_the_sdks_own_retries_is_retried(faulty_s3, stop):
    experiment = "s3://disgen-test/runs/exp"
    writer = ResultsWriter(ResultsStore(experiment), PLANNED, stop=stop)
    finished, failed = trial(experiment, 0), trial(experiment, 1, "finished-with-error")
    faulty_s3.fail(is_put, times=SDK_TRIES)  # more than the SDK absorbs: the driver retries
    writer.completed(finished)
    faulty_s3.fail(is_put, times=3)  # a short burst, which the SDK absorbs
    writer.completed(failed)  # its row, then errors.jsonl
    assert faulty_s3.failed() == SDK_TRIES + 3 and not stop.received.is_set()
    trials = read_results(experiment, TRIALS_FILE)
    assert sorted(trials["trial_key"]) == sorted([config(0).trial_key, config(1).trial_key])
    assert sorted(trials["status"]) == ["failed", "finished"]
    history = read_results(experiment, HISTORY_FILE)
    assert len(history) == 4 and not history.duplicated(["trial_key", "step"]).any()
    assert load_errors(experiment)["error"].tolist() == ["diverged"]
