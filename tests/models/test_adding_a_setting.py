"""docs/design.md's "Adding a hyperparameter", followed literally: declare its setting in a copy of
models/, add its test, rewrite the docs table as the page says, and check that everything the page
says follows from the one declaration does: the part, the check, the type, the packs' list, the
results column and its unit, the docs table, a grid's keys and the trial key."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest
from design_page import after_declaration, steps

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_following_the_page_adds_a_setting_everywhere_it_goes(tmp_path):
    page = steps("Adding a hyperparameter")
    assert set(page) == {"ModelConfig, after beta", "its test", "the docs table"}, set(page)
    shutil.copytree(ROOT / "models", tmp_path / "models", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "models.md", tmp_path / "docs" / "models.md")
    config = tmp_path / "models" / "config.py"
    lines = config.read_text().splitlines(keepends=True)
    assert "free_bits" not in "".join(lines) + (tmp_path / "docs" / "models.md").read_text()
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": f"{pathlib.Path(sys.executable).parent}:/usr/bin:/bin"}

    # step 1: the declaration, after beta's
    at = after_declaration(lines, "beta")
    config.write_text("".join(lines[:at]) + page["ModelConfig, after beta"] + "".join(lines[at:]))
    # step 3: the docs table, rewritten by the page's command
    done = subprocess.run(["bash", "-c", page["the docs table"]], capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]

    from sweeps.grid import get_spec, trial_configs

    key = trial_configs(get_spec("default"), "default", "tiny", [0])[0].trial_key
    script = """
import dataclasses
import pyarrow as pa
import pytest
import models
from models import ModelConfig
assert models.__file__.startswith(MODELS), models.__file__

# step 2: its test, as the page writes it
exec(TEST)
test_free_bits_is_a_loss_setting_of_at_least_zero()

# what follows from the declaration
from models.config import PARTS, with_settings_table
parts = [p for p, part in PARTS.items() if "free_bits" in {f.name for f in dataclasses.fields(part)}]
assert parts == ["loss"], parts
from models.packed import SCALAR_FIELDS, vmap_group_key
assert "free_bits" in SCALAR_FIELDS
assert vmap_group_key(ModelConfig(free_bits=0.5)) == vmap_group_key(ModelConfig())
from analysis.schema import MODEL_SETTINGS, TRIALS_SCHEMA
column = TRIALS_SCHEMA.field("free_bits")
assert MODEL_SETTINGS["free_bits"] == "float" and column.type == pa.float64(), column
assert column.metadata[b"unit"] == b"nats" and b"null" not in column.metadata, column.metadata
docs = open("docs/models.md").read()
assert with_settings_table(docs) == docs
assert "| `free_bits` | loss | `float` | `0.0` | ≥ 0 | nats | free bits: " in docs
from sweeps.grid import get_spec, trial_configs
trial = trial_configs(get_spec("default"), "default", "tiny", [0])[0]
assert trial.trial_key == KEY  # a trial that does not set it keeps its key
changed = trial.replace(free_bits=0.5)
assert changed.model.loss.free_bits == 0.5 and changed.effective_settings()["free_bits"] == 0.5
assert trial.effective_settings()["free_bits"] == 0.0
print("ok")
""".replace("MODELS", repr(str(tmp_path / "models"))).replace("TEST", repr(page["its test"])).replace(
        "KEY", repr(key))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
