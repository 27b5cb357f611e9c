"""The sweep's options, declared once (``sweeps/options.py``): the command line, ``sweeps.run``'s
keywords and signature, the checks and the docs table all come from the declarations."""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
import sys

import pytest

import sweeps
from sweeps.errors import UsageError
from sweeps.options import KEYWORDS, OPTIONS, SweepOptions, with_options_table
from sweeps.paper_grid import build_parser, parse_options, plan_trials

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def no_ray(monkeypatch):
    """``import ray`` fails inside the test: whatever it checks is checked before Ray starts."""
    monkeypatch.setitem(sys.modules, "ray", None)


def test_the_docs_options_table_is_the_declarations():
    page = (ROOT / "docs" / "sweeps.md").read_text()
    assert with_options_table(page) == page, (
        "docs/sweeps.md's options table differs from the declarations in sweeps/options.py; rewrite it: "
        'python -c "from sweeps.options import write_options_table; write_options_table()"')
    for declared in OPTIONS.values():
        assert f"| `{declared.flag}" in page


def test_the_command_line_has_one_flag_per_option_with_its_default():
    actions = {a.dest: a for a in build_parser()._actions if a.dest != "help"}
    assert list(actions) == list(OPTIONS)
    for name, declared in OPTIONS.items():
        assert actions[name].option_strings == [declared.flag]
        assert actions[name].default == declared.default
    assert parse_options([]) == SweepOptions()


def test_run_takes_every_option_but_the_grid_and_the_command_lines_actions_as_a_keyword():
    parameters = inspect.signature(sweeps.run).parameters
    assert list(parameters) == ["grid_or_trials", *KEYWORDS]
    assert set(OPTIONS) - set(KEYWORDS) == {"preset", "grid", "list", "dry_run", "gpu_memory"}
    for name in KEYWORDS:
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters[name].default == OPTIONS[name].default
    assert parameters["cpus_per_trial"].annotation == "float"
    assert "Run a study on Ray" in sweeps.run.__doc__


@pytest.mark.parametrize("keyword", ["nosuch", "dry_run", "preset"])
def test_an_unknown_keyword_is_a_type_error(keyword, no_ray):
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{keyword}'"):
        sweeps.run(**{keyword: True})


@pytest.mark.parametrize("values, message", [
    ({"cpus_per_trial": "2"}, "--cpus-per-trial must be a number; got '2'"),
    ({"cpus_per_trial": 0}, "--cpus-per-trial must be > 0 (a trial needs a CPU share, e.g. 0.5 or 1); got 0"),
    ({"cpus_per_trial": float("nan")}, "--cpus-per-trial must be a finite number >= 0; got nan"),
    ({"gpus_per_trial": -1.0}, "--gpus-per-trial must be a finite number >= 0; got -1.0"),
    ({"max_failures": 1.5}, "--max-failures must be a whole number; got 1.5"),
    ({"max_failures": True}, "--max-failures must be a whole number; got True"),
    ({"num_cpus": 0}, "--num-cpus must be at least 1; got 0"),
    ({"checkpoint_minutes": -1.0},
     "--checkpoint-minutes must be a finite number >= 0 (0: by steps only); got -1.0"),
    ({"search": "random"}, "--search: unknown 'random'; choose one of grid, optuna"),
    ({"data_source": "disk"}, "--data-source: unknown 'disk'; choose one of procedural, real, prepared"),
    ({"pack_size": 0}, "--pack-size: must be a whole number >= 1 or 'auto'; got 0"),
    ({"pack_size": 2, "scheduler": "asha"}, "--pack-size > 1 cannot be combined with --search optuna"),
    ({"name": "a/b"}, "--name 'a/b': an experiment name is one folder name"),
    ({"mlflow": " "}, "--mlflow: give a tracking URI"),
    ({"wandb": "a/b/c"}, "--wandb 'a/b/c': give a W&B project"),
])
def test_a_bad_value_is_refused_in_one_line_naming_its_flag(values, message, no_ray):
    with pytest.raises(UsageError) as refused:
        SweepOptions(**values)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(UsageError, match="^" + message.replace("(", r"\(").replace(")", r"\)")[:20]):
        sweeps.run(**values)  # the same check, from Python, before Ray


def test_a_good_option_set_passes_and_is_frozen():
    options = SweepOptions(cpus_per_trial=0.5, gpus_per_trial=0, pack_size="3", num_samples=1, name="x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.name = "y"


def test_address_none_is_ray_address_on_the_command_line_and_from_python(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert SweepOptions().address == parse_options([]).address == "10.0.0.5:6379"
    assert parse_options(["--address", "local"]).address == "local"
    monkeypatch.delenv("RAY_ADDRESS")
    assert SweepOptions().address is None


def test_the_data_source_the_options_pin_is_decided_once(tmp_path):
    assert SweepOptions().pinned_data_source is None  # each trial's own setting
    assert SweepOptions(data_dir=str(tmp_path)).pinned_data_source == "real"
    assert SweepOptions(data_dir=str(tmp_path), data_source="prepared").pinned_data_source == "prepared"
    assert SweepOptions(data_source="procedural").pinned_data_source == "procedural"


def test_the_planned_sweep_is_a_frozen_record_of_the_options_and_the_trials(no_ray):
    options = SweepOptions(scale="tiny", seeds="2", cpus_per_trial=2.0)
    sweep = plan_trials(options)
    assert sweep.options is options and sweep.name == "default-tiny" and sweep.seeds == [0, 1]
    assert isinstance(sweep.trials, tuple) and len(sweep.trials) == sweep.planned
    assert sweep.experiment_dir is None and sweep.shared_dir is None  # plan() sets the experiment's fields
    assert set(sweep.data) == {t.data.key for t in sweep.trials}
    with pytest.raises(dataclasses.FrozenInstanceError):
        sweep.trials = ()
    assert dataclasses.replace(sweep, pack_size=4).pack_size == 4
