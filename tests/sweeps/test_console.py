"""The live view's console (sweeps/console.py) fed trial events by hand, without Ray: the table names
each model as disgen does, shows a pack's seeds and β as ranges, the ETA follows the measured rate,
and each finished model gets one line. A real run's console is checked in
tests/end_to_end/test_command.py."""

import io
from types import SimpleNamespace

import pytest

from sweeps.console import Console, duration
from sweeps.grid import get_spec, trial_configs
from sweeps.packing import dirname, tune_config


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def trial(members, trial_id, status="RUNNING", last_result=None):
    """A trial as the console is handed it (``sweeps.ray_edge.TrialView``'s fields)."""
    return SimpleNamespace(config=tune_config(members), trial_id=trial_id, status=status,
                           last_result=last_result or {}, error=None, checkpoint=None)


@pytest.mark.slow  # 16 trial configs and their FLOPs, counted once: 2-3 s
def test_the_table_names_models_and_packs_and_the_eta_follows_the_measured_rate():
    planned = trial_configs(get_spec("default"), "default", "tiny", [0, 1, 2, 3])  # 16 models, 20 steps
    stream, clock = io.StringIO(), Clock()
    console = Console("default-tiny", planned, finished_keys={planned[-1].trial_key}, stream=stream,
                      clock=clock)
    console.announce()
    console.announce()  # once per experiment run
    one = trial(planned[:1], "t1")
    pack = trial(planned[1:4], "t2")  # three models: seeds and β of its members as ranges
    waiting = trial(planned[4:5], "t3", status="PENDING")
    trials = [one, pack, waiting]
    clock.now += 2
    console.trial_started()  # the first trial starts: the rate's origin
    clock.now += 8
    console.trials = trials
    console.result(one, {"step": 5, "total_steps": 20, "loss": 812.25, "images_per_second": 333.3})  # a table
    console.result(pack, {"step": 10, "total_steps": 20, "loss": 0.5, "images_per_second": 900.0})
    clock.now += 5
    console.step(trials)  # before the interval: nothing
    clock.now += 30
    console.step(trials)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("default-tiny: 16 models (1 done before), about ")
    assert "CPU-core-minutes of training left (sweeps/costs.py)" in lines[0]
    assert sum(line.startswith("default-tiny:") for line in lines) == 1
    # the pack has not reported yet: it is not in the table
    assert lines[1].startswith("[   0:10] 1 of 16 models done, 1 running, 14 waiting; ETA ")
    header = lines[2].split()
    assert header == ["model", "dataset", "split", "objective", "β", "seed", "step", "loss", "img/s"]
    assert lines[3].split() == [planned[0].dirname, "dsprites", planned[0].data.split, "beta_vae",
                                f"{planned[0].model.beta:g}", "0", "5/20", "812.2", "333"]
    # 45 s after the start: 4 models training, the ETA from the work done in the 43 s since the
    # first trial started
    status, _, first_row, pack_row = lines[4:8]
    assert status.startswith("[   0:45] 1 of 16 models done, 4 running, 11 waiting; ETA ")
    work = [console.work[t.trial_key] for t in planned]
    done = work[0] * 5 / 20 + sum(work[1:4]) * 10 / 20
    left = sum(work) - work[-1] - done
    assert status.endswith(f"ETA {duration(left / (done / 43))}")
    assert first_row.split()[0] == planned[0].dirname
    betas = sorted({f"{m.model.beta:g}" for m in planned[1:4]})
    seeds = sorted({m.model.seed for m in planned[1:4]})
    cells = pack_row.split()
    assert cells[0] == dirname(planned[1:4]) and cells[0].startswith("pack3-")
    assert cells[4] == ",".join(betas) and cells[5] == f"{seeds[0]}–{seeds[-1]}"
    assert cells[6:] == ["10/20", "0.500", "900"]
    text = stream.getvalue()
    assert "members" not in text and "train_trial" not in text
    clock.now += 30  # the same models training: their rows, without the header again
    console.step(trials)
    assert [line.split()[0] for line in stream.getvalue().splitlines()[8:]] == [
        "[", planned[0].dirname, dirname(planned[1:4])]
    clock.now += 30  # a wider cell (the loss): the header again, so that the columns line up
    console.result(one, {"step": 15, "total_steps": 20, "loss": 12345.6, "images_per_second": 333.3})
    console.step(trials)
    assert [line.split()[0] for line in stream.getvalue().splitlines()[11:]] == [
        "[", "model", planned[0].dirname, dirname(planned[1:4])]
    console.result(one, {"step": 5, "total_steps": 20, "loss": 812.25, "images_per_second": 333.3})

    # a finished model: one line with its headline metrics, counted
    member = {"config": planned[0].to_dict(), "train_nll": 145.25, "test_nll": 1430.0, "d_score": 0.8412,
              "dci_disentanglement": float("nan"), "mig": 0.05, "train_seconds": 50.2, "eval_seconds": 30.0}
    one.last_result = {"done": True, "members": [member], "step": 20}
    console.complete(one)
    assert stream.getvalue().splitlines()[-1] == (
        f"[   1:45] done {planned[0].dirname}: train_nll 145.2, test_nll 1430.0, d_score 0.841, mig 0.050 "
        "(train 50 s, eval 30 s) [2 of 16]")
    # the ETA, now that a model has finished, counts a running model's evaluation as work left
    console.trials = [pack, waiting]
    console.table(force=True)
    trained = 1 - 30.0 / (50.2 + 30.0)
    since = work[0] + sum(work[1:4]) * 10 / 20 * trained
    left = sum(work) - work[-1] - since
    assert stream.getvalue().splitlines()[-3].endswith(f"ETA {duration(left / (since / 103))}")
    # a pack member that diverged, and a failed trial
    pack.last_result = {"done": True, "members": [
        {"config": planned[1].to_dict(), "error": "loss became nan at step 7\nmore"},
        *({"config": m.to_dict(), "train_nll": 1.0} for m in planned[2:4])]}
    console.complete(pack)
    console.error(waiting)
    tail = stream.getvalue().splitlines()[-4:]
    assert tail[0] == f"[   1:45] FAILED {planned[1].dirname}: loss became nan at step 7"
    assert tail[1].startswith(f"[   1:45] done {planned[2].dirname}: train_nll 1.000")
    assert tail[3].startswith(f"[   1:45] FAILED {planned[4].dirname}")
    clock.now += 60
    console.step([])
    assert stream.getvalue().splitlines()[-1].startswith(
        "[   2:45] 4 of 16 models done, 2 failed or stopped, 0 running, 10 waiting; ETA ")
