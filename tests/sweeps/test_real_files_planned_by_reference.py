"""Real data files planned on the driver (sweeps/data.py) and opened on a node
(data_pipeline/node_cache.py), without Ray: a whole grid observes any grid point, a partial file is
subsampled by rows, --data-dir makes every trial real with no image read by the driver, and a
missing or malformed file is a one-line error before Ray is imported. The sweep on them is
tests/end_to_end/test_studies.py."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from dataset_files import CIRCLES_GRID as GRID
from dataset_files import write_circles

from data_pipeline import render
from data_pipeline.node_cache import materialisations, open_reference
from sweeps.data import plan_data
from sweeps.errors import UsageError
from sweeps.paper_grid import parse_options, plan
from sweeps.trials import TrialConfig


def config(**settings):
    return TrialConfig.complete({"dataset": "circles", "n_images": None, "data_seed": 0, "split": "midpos",
                                 "data_source": "real", "report_every": 2, "n_nll": 16, "n_metric": 32,
                                 **settings})


def test_a_whole_real_grid_observes_any_grid_point_and_subsets_follow_the_seeded_draw(tmp_path):
    space, _ = write_circles(tmp_path)
    references = plan_data([config(), config(n_images=10, data_seed=3)], str(tmp_path))
    reference = references[("real", "circles", None, 0)]
    assert references[("real", "circles", 10, 3)] == reference  # one file, one reference
    cache = tmp_path / "cache"
    whole = open_reference(reference, None, 0, cache_dir=cache)
    asked = np.array([[5, 0], [0, 0], [2, 3], [2, 3]])
    assert np.array_equal(whole.observe(asked)[:, 0], render("circles", asked, space))
    subset = open_reference(reference, 10, 3, cache_dir=cache)
    drawn = space.classes_of(np.sort(np.random.default_rng(3).choice(36, 10, replace=False)))
    assert np.array_equal(subset.classes, drawn)  # the grid points load_procedural draws
    assert np.array_equal(subset.images[np.arange(10)][:, 0], render("circles", drawn, space))
    # the subset keeps the whole grid's observe (an index into the same memory map): its evaluation
    # draws held-out images from the whole grid, not only from the 10 rows it holds
    assert np.array_equal(subset.observe(asked)[:, 0], render("circles", asked, space))
    assert len(materialisations(cache)) == 1  # the file was converted once; the subset is an index set


def test_a_partial_real_file_is_subsampled_by_rows_and_too_many_images_is_refused(tmp_path):
    _, classes = write_circles(tmp_path)
    with np.load(tmp_path / "circles.npz") as data:
        kept = {key: data[key][:20] if key != "factor_sizes" else data[key] for key in data.files}
    np.savez(tmp_path / "circles.npz", **kept)
    reference = plan_data([config(n_images=5)], str(tmp_path))[("real", "circles", 5, 0)]
    data = open_reference(reference, 5, 0, cache_dir=tmp_path / "cache")
    rows = np.sort(np.random.default_rng(0).choice(20, 5, replace=False))
    assert np.array_equal(data.classes, classes[:20][rows])
    assert data.observe is None  # not the whole grid: nothing to index unseen points from
    with pytest.raises(UsageError, match="holds only 20 images"):
        plan_data([config(n_images=30)], str(tmp_path))


def test_data_dir_makes_every_trial_real_and_the_driver_reads_no_image(tmp_path, monkeypatch):
    from data_pipeline import conversion, prepared
    from data_pipeline.prepare import main as prepare

    write_circles(tmp_path)
    # one process: this test starts no Ray
    prepare(["circles", "--from-file", str(tmp_path / "circles.npz"), "--out", str(tmp_path / "circles"),
             "--single-process"])

    def no_images(*args, **kwargs):
        raise AssertionError("the driver read images")

    # the driver plans from headers, labels and manifests: every way to the pixels is closed
    monkeypatch.setattr(conversion.RealFile, "_raw", no_images)
    monkeypatch.setattr(prepared, "open_dataset", no_images)
    monkeypatch.setattr(prepared, "copy_verified", no_images)
    monkeypatch.setattr("data_pipeline.node_cache.materialise", no_images)
    grid = tmp_path / "grid.yaml"
    grid.write_text(textwrap.dedent(GRID))
    base = ["--grid", str(grid), "--scale", "tiny", "--storage-path", str(tmp_path / "out")]
    prepared_args = [*base, "--data-source", "prepared", "--data-dir", str(tmp_path)]
    prepared_plan = plan(parse_options(prepared_args))
    assert prepared_plan.data[("prepared", "circles", None, 0)].uri == str(tmp_path / "circles")
    run_plan = plan(parse_options([*base, "--data-dir", str(tmp_path)]))
    assert {c["data_source"] for c in run_plan.trials} == {"real"}
    assert list(run_plan.data) == [("real", "circles", None, 0)]
    assert run_plan.data[("real", "circles", None, 0)].uri == str(tmp_path / "circles.npz")


@pytest.mark.slow
def test_missing_or_malformed_real_files_are_one_line_errors_before_ray_starts(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad").mkdir()
    np.savez(tmp_path / "bad" / "circles.npz", imgs=np.zeros((4, 64, 64), np.uint8))
    grid = tmp_path / "grid.yaml"
    grid.write_text(textwrap.dedent(GRID))
    cases = {
        "no such folder": ["--data-dir", str(tmp_path / "nope")],
        "circles.npz not found": ["--data-dir", str(tmp_path / "empty")],
        "expected key 'images'": ["--data-dir", str(tmp_path / "bad")],
        "no data directory": ["--data-source", "real"],
    }
    script = (
        "import json, sys\n"
        "from sweeps.paper_grid import main\n"
        f"cases = {json.dumps(cases)}\n"
        f"base = ['--grid', {str(grid)!r}, '--scale', 'tiny', '--storage-path', {str(tmp_path / 'out')!r}]\n"
        "codes = [main(base + argv) for argv in cases.values()]\n"
        "print(json.dumps({'codes': codes, 'ray_imported': 'ray' in sys.modules}))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "DISGEN_DATA"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=env)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"codes": [2] * len(cases), "ray_imported": False}
    errors = done.stderr.strip().splitlines()
    assert len(errors) == len(cases)
    for line, expected in zip(errors, cases):
        assert line.startswith("error: ") and expected in line, line
