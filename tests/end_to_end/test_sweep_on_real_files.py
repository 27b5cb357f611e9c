"""A tiny sweep on a real data file, its prepared copy and the generator: the same numbers from the
file and its copy, each dataset materialised once on the node. Their loading, subsampling and bad
files, without Ray: tests/sweeps/test_real_files_planned_by_reference.py."""

import json
import textwrap
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from dataset_files import CIRCLES_GRID as GRID
from dataset_files import write_circles

from data_pipeline import get_split
from data_pipeline.datasets import factor_space
from data_pipeline.in_distribution import training_rows
from data_pipeline.node_cache import materialisations
from sweeps.paper_grid import main


@pytest.mark.slow
def test_a_sweep_trains_on_the_real_file_its_prepared_copy_and_the_generator(ray_session, tmp_path,
                                                                            monkeypatch, capsys):
    from data_pipeline.prepare import main as prepare

    space, _ = write_circles(tmp_path)
    prepare(["circles", "--from-file", str(tmp_path / "circles.npz"), "--out", str(tmp_path / "circles")])
    monkeypatch.setenv("DISGEN_DATA", str(tmp_path))  # the real file and DIR/circles/, prepared from it
    grid = tmp_path / "grid.yaml"
    axis = "axes:\n  data_source: [procedural, real, prepared]\n"
    grid.write_text(textwrap.dedent(GRID).replace("axes:\n", axis))
    argv = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path), "--name", "exp"]
    assert main(argv) == 0
    assert "3 of 3 trials finished" in capsys.readouterr().out
    trials = pd.read_parquet(tmp_path / "exp" / "trials.parquet").set_index("data_source")
    assert sorted(trials.index) == ["prepared", "procedural", "real"]
    # each trains on the whole training part of its grid, less the rows held back as the
    # in-distribution control (data_pipeline.in_distribution)
    midpos = get_split("circles", "midpos")
    train, _, test = training_rows(SimpleNamespace(classes=space.all_classes(), factor_space=space,
                                                   observe=None), midpos, 0)
    assert (trials.loc["real", "n_train_images"], trials.loc["real", "n_test_images"]) == (len(train), 4)
    generator = factor_space("circles")  # the generator's 32 × 32 grid: 924 training combinations
    trained, back, _ = training_rows(SimpleNamespace(classes=generator.all_classes(), factor_space=generator,
                                                     observe=None), midpos, 0)
    assert len(trained) + len(back) == 924 and trials.loc["procedural", "n_train_images"] == len(trained)
    assert (trials["in_distribution_source"] == "held back from training").all()
    assert np.isfinite(trials["in_distribution_nll"]).all()
    assert json.loads(trials.loc["real", "config"])["data_source"] == "real"
    assert np.isfinite(trials["test_nll"]).all() and trials["trial_key"].is_unique
    # the prepared copy holds the real file's bytes: the same numbers, to the last bit
    metrics = ["train_nll", "test_nll", "n_train_images", "n_test_images"]
    assert trials.loc["prepared", metrics].tolist() == trials.loc["real", metrics].tolist()
    # each row names the data it read: the file, the prepared folder or the generator, and a content id
    assert trials.loc["real", "data_uri"] == str(tmp_path / "circles.npz")
    assert trials.loc["prepared", "data_uri"] == str(tmp_path / "circles")
    assert trials.loc["prepared", "data_content_id"] == json.loads(
        (tmp_path / "circles" / "manifest.json").read_text())["content_id"]
    assert trials.loc["procedural", "data_uri"] == "generator:circles"
    assert trials["data_content_id"].str.len().eq(64).all() and trials["data_content_id"].is_unique
    built = lambda: sorted(r["kind"] for r in materialisations()  # noqa: E731
                           if r["content_id"] in set(trials["data_content_id"]))
    assert built() == ["file", "prepared", "procedural"]  # each materialised once on this node
    # extending the experiment (a second seed: three more trials) reads nothing the node already holds
    assert main([*argv, "--resume", "--seeds", "2"]) == 0
    assert "6 of 6 trials finished" in capsys.readouterr().out
    assert built() == ["file", "prepared", "procedural"]
