"""The sweep side's edge with Ray (``sweeps/ray_edge.py``): every private Ray name it uses, and Ray
Data's prepare's, is importable from the Ray version it was read from; a newer Ray fails here first,
naming the names to read again. Its helpers answer as the rest of ``sweeps/`` expects; its output
filter says Tune's messages in disgen's words; its signal bridge stops a Tune run on a SIGTERM as on
a Ctrl-C."""

from __future__ import annotations

import importlib
import logging

import pytest

from data_pipeline import prepare
from sweeps import ray_edge


def test_every_private_ray_name_is_read_from_the_ray_installed():
    import ray

    names = sorted({**ray_edge.PRIVATE, **prepare.PRIVATE})
    assert ray.__version__.split(".")[:2] == ray_edge.READ_FROM.split("."), (
        f"Ray {ray.__version__} is not the {ray_edge.READ_FROM} these private names were read from: "
        f"read each again in its new source, then move READ_FROM: {names}")
    for name in names:
        module, _, attribute = name.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attribute, None)), name


def test_the_edges_private_helpers_answer():
    assert ray_edge.existing_local_cluster() in (True, False)
    cleaned = ray_edge.clean_for_wandb({"beta": 4.0, "split": "blank_side", "metrics": {"d_score"}})
    assert cleaned == {"beta": 4.0, "split": "blank_side", "metrics": ["d_score"]}  # a set is no config value


@pytest.mark.slow
def test_an_actor_placed_on_this_node_runs_there(ray_session):
    ray = ray_session

    @ray.remote(num_cpus=0, **ray_edge.on_this_node())
    def where() -> str:
        return ray.get_runtime_context().get_node_id()

    assert ray.get(where.remote()) == ray.get_runtime_context().get_node_id()


def test_tunes_restore_hint_is_dropped_and_its_stop_message_said_in_disgens_words():
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("ray.tune.tune")
    handler = Keep()
    logger.addHandler(handler)
    try:
        with ray_edge.TuneOutput(verbose=False):
            logger.warning("Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run.")
            logger.warning("Experiment has been interrupted, but the most recent state was saved.\n"
                           "Resume experiment with: Tuner.restore(path=\"/x\", trainable=...)")
            logger.error("Trials did not complete: [a, b]")
            logger.info("Wrote the latest version of all result files")
        with ray_edge.TuneOutput(verbose=True):
            logger.warning("Resume experiment with: Tuner.restore(path=\"/x\")")
            logger.error("Trials did not complete: [a]")
    finally:
        logger.removeHandler(handler)
    assert records == ["Ctrl-C: stopping the sweep (finished models are stored; Ctrl-C again stops at once)",
                       "Trials did not complete: [a]"]


def test_a_sigterm_stops_a_tune_run_as_ctrl_c_does_and_a_second_one_stops_at_once():
    import signal

    from sweeps.errors import StopSignal, Terminated

    interrupts = []
    # Python's own Ctrl-C handler, whatever an earlier test in this process left (Ray installs its
    # own on ray.init): the test's "raises KeyboardInterrupt" is that handler's; put back after
    found = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _stops_as_ctrl_c_does(StopSignal, Terminated, interrupts)
    finally:
        signal.signal(signal.SIGINT, found)


def _stops_as_ctrl_c_does(StopSignal, Terminated, interrupts):  # noqa: N803
    import signal

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)

    def tune_handler(signum, frame):  # as Tune's (ray.tune.tune._setup_signal_catching): once
        interrupts.append(signum)
        signal.signal(signal.SIGINT, before[0])

    with StopSignal() as stop:
        with pytest.raises(Terminated):  # before Tune's run: at once, as Ctrl-C raises KeyboardInterrupt
            signal.raise_signal(signal.SIGTERM)
        signal.signal(signal.SIGINT, tune_handler)  # Tune's run starts
        ray_edge.bridge_signals(stop)
        signal.raise_signal(signal.SIGTERM)  # `ray job stop`: Tune ends its run, as on Ctrl-C
        assert interrupts == [signal.SIGINT] and stop.received.is_set() and stop.signum == signal.SIGTERM
        with pytest.raises(Terminated):  # a second SIGTERM stops at once, as a second Ctrl-C does
            signal.raise_signal(signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        assert interrupts == [signal.SIGINT]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


@pytest.mark.parametrize("signum, said", [(2, "Ctrl-C: stopping the sweep"),
                                          (15, "SIGTERM (e.g. `ray job stop`): stopping the sweep")])
def test_tunes_stop_message_names_the_signal(signum, said):
    from sweeps.errors import StopSignal

    stop = StopSignal()
    stop.signum = signum
    message = "Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run."
    record = logging.LogRecord("ray.tune.tune", logging.WARNING, "", 0, message, (), None)
    assert ray_edge.TuneOutput(False, stop).filter.filter(record)
    assert record.getMessage().startswith(said)
