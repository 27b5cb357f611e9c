"""A Ctrl-C or SIGTERM outside Tune's run (``sweeps.driver.run`` replaced by one that raises
it) or while the sweep is planned: exit code 130 or 143, what to run next, the folder's lock freed,
no traceback."""

import pytest

from sweeps.errors import Terminated
from sweeps.paper_grid import main


@pytest.mark.parametrize("stop, code, said", [
    (KeyboardInterrupt, 130, "Interrupted (Ctrl-C)"),
    (Terminated, 143, "Stopped (SIGTERM, e.g. `ray job stop`)"),
], ids=["ctrl-c", "sigterm"])
def test_a_ctrl_c_or_sigterm_outside_tunes_run_exits_130_or_143_with_the_resume_command_and_frees_the_folder(
        tmp_path, capsys, monkeypatch, stop, code, said):
    import sweeps.driver

    # a second Ctrl-C or SIGTERM: Tune's handler is gone, Python raises
    def interrupted(sweep, signal=None, fence=None):
        raise stop

    monkeypatch.setattr(sweeps.driver, "run", interrupted)
    argv = ["--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp"]
    assert main(argv) == code
    out = capsys.readouterr().out
    assert f"{said}: the finished models are stored in {tmp_path / 'exp'}" in out
    assert f"Resume with:  python -m sweeps.paper_grid {' '.join(argv)} --resume\n" in out
    assert not (tmp_path / "exp" / "driver.lock").exists()  # the next driver may take the folder


def test_a_sigterm_before_the_sweep_started_exits_143_in_one_line(tmp_path, capsys, monkeypatch):
    import signal

    import sweeps.paper_grid

    def terminated(options, given=None):  # SIGTERM (`ray job stop`) while the sweep is planned: nothing ran
        signal.raise_signal(signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the command")

    monkeypatch.setattr(sweeps.paper_grid, "plan", terminated)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp"]) == 143
    captured = capsys.readouterr()
    assert captured.out.strip() == ("Stopped (SIGTERM, e.g. `ray job stop`) before the sweep started; "
                                    "nothing ran. Run the same command again to start it.")
    assert captured.err == ""  # no traceback
    assert signal.getsignal(signal.SIGTERM) == before  # the command's handler is gone with it
