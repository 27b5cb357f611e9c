"""When a report carries a checkpoint (``checkpoint_due``): every ``checkpoint_every`` steps or once
``checkpoint_seconds`` have passed since the last one, 0 turning either off, and never at the end
(the final report carries the trained model). Checkpoints in real runs are checked in
tests/end_to_end/."""

from sweeps.checkpoints import checkpoint_due


def test_checkpoints_come_every_n_steps():
    assert checkpoint_due(40, 100, every_steps=20, every_seconds=0, seconds_since=0)
    assert not checkpoint_due(30, 100, every_steps=20, every_seconds=0, seconds_since=1e9)


def test_checkpoints_come_once_the_seconds_have_passed():
    assert checkpoint_due(30, 100, every_steps=20, every_seconds=300, seconds_since=300)
    assert not checkpoint_due(30, 100, every_steps=20, every_seconds=300, seconds_since=299)
    assert checkpoint_due(5, 100, every_steps=0, every_seconds=0.01, seconds_since=0.02)


def test_no_checkpoint_at_the_end_or_when_both_are_off():
    assert not checkpoint_due(100, 100, every_steps=20, every_seconds=0.01, seconds_since=1e9)
    assert not checkpoint_due(7, 100, every_steps=0, every_seconds=0, seconds_since=1e9)
