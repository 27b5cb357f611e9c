"""docs/adding_an_objective.md, followed literally: remove its objective from a copy of models/,
apply the page's steps as written there, and train the result."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "adding_an_objective.md"


def blocks() -> dict[str, str]:
    """The page's code blocks that follow an ``<!-- label -->`` comment, by label."""
    return {label: code for label, code in
            re.findall(r"<!-- ([^>]+?) -->\n```[a-z]*\n(.*?)```", PAGE.read_text(), re.S)}


def test_the_page_shows_the_shipped_module():
    assert blocks()["file: models/dip_vae.py"] == (ROOT / "models" / "dip_vae.py").read_text()


@pytest.mark.slow
def test_following_the_page_adds_a_working_objective(tmp_path):
    steps = blocks()
    models = tmp_path / "models"
    shutil.copytree(ROOT / "models", models, ignore=shutil.ignore_patterns("__pycache__"))
    # before the page: no dip_vae module, no import, no table line
    (models / "dip_vae.py").unlink()
    registry = models / "registry.py"
    lines = [line for line in registry.read_text().splitlines(keepends=True)
             if line not in (steps["registry: import"], steps["registry: table"])]
    assert "dip_vae" not in "".join(lines)

    # step 1: the module, as the page writes it
    (models / "dip_vae.py").write_text(steps["file: models/dip_vae.py"])
    # step 2: the import with the others, and one line in OBJECTIVES
    first_import = next(i for i, line in enumerate(lines) if line.startswith("from models."))
    lines.insert(first_import, steps["registry: import"])
    table_end = next(i for i in range(lines.index("OBJECTIVES: dict[str, type[Objective]] = {\n"), len(lines))
                     if lines[i] == "}\n")
    lines.insert(table_end, steps["registry: table"])
    registry.write_text("".join(lines))

    script = """
import numpy as np
import models
from models import ModelConfig, build_trainer
from data_pipeline import factor_space
assert models.__file__.startswith(MODELS), models.__file__
space = factor_space("dsprites")
images = (np.random.default_rng(0).random((32, 1, 64, 64)) > 0.8).astype(np.uint8) * 255
classes = space.classes_of(np.arange(32))
config = ModelConfig(objective="dip_vae", gamma=5.0, steps=4, batch_size=8, lr=1e-3)
reports = list(build_trainer(config, images, classes, space, np.arange(32), "cpu").run(report_every=2))
assert [r["step"] for r in reports] == [2, 4], reports
assert {"dip_off_diagonal", "dip_diagonal"} <= set(reports[-1]), reports[-1]
assert models.LOSS_TERMS["dip_vae"] == ["reconstruction", "kl", "dip_off_diagonal", "dip_diagonal"]
print("ok")
""".replace("MODELS", repr(str(models)))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                          env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
