"""Every bad input to a command line: exit code 2 and one line naming the argument, no traceback.

One row per input, run in-process (the module's ``main(argv)``, with ``SystemExit`` caught) and
with Ray made unimportable, so the whole table takes seconds and proves that each input is refused
before Ray starts. ``{tmp}`` in an argument is replaced by a folder holding the files that
:func:`write_workspace` writes.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
import yaml

PREPARE, SHOW, SPLITS = "data_pipeline.prepare", "data_pipeline.show", "data_pipeline.splits.__main__"
SWEEP = "sweeps.paper_grid"
RESULTS = ["--storage-path", "{tmp}/results"]


def grid(name: str) -> list[str]:
    """A sweep over the grid file ``name`` of :data:`GRIDS`."""
    return ["--grid", f"{{tmp}}/grids/{name}.yaml", "--scale", "tiny", *RESULTS]


# A good tiny grid, and one bad variant of it per row: (fixed settings changed, other spec keys).
GOOD = {"dataset": "dsprites", "split": "blank_side", "objective": "beta_vae", "n_images": 3000,
        "data_seed": 0, "report_every": 5, "n_nll": 200, "n_metric": 300, "steps": 20, "lr": 0.001}
GRIDS = {
    "good": ({}, {}),
    "steps_inf": ({"steps": float("inf")}, {}),
    "lr_nan": ({"lr": float("nan")}, {}),
    "beta_inf": ({"beta": float("inf")}, {}),
    "beta_negative": ({"beta": -1.0}, {}),
    "latent_fraction": ({"latent_dim": 2.5}, {}),
    "report_every_zero": ({"report_every": 0}, {}),
    "n_nll_negative": ({"n_nll": -1}, {}),
    "n_metric_zero": ({"n_metric": 0}, {}),
    "n_images_missing": ({"n_images": None}, {"drop": "n_images"}),
    "n_images_negative": ({"n_images": -5}, {}),
    "data_seed_negative": ({"data_seed": -1}, {}),
    "metrics_string": ({"metrics": "dci"}, {}),
    "metrics_unknown": ({"metrics": ["dci", "nosuch"]}, {}),
    "objective_unknown": ({"objective": "nosuch_vae"}, {}),
    "split_of_another_dataset": ({"split": "fhue_gt50"}, {}),
    "setting_unknown": ({"betta": 4.0}, {}),
    "steps_text": ({"steps": "20"}, {}),
    "seed_axis": ({}, {"axes": {"seed": [0, 1]}}),
    "search_metric_unknown": ({}, {"search": {"metric": "nosuch", "mode": "min",
                                              "space": {"beta": {"loguniform": [0.5, 4.0]}}}}),
}
OUT = ["--out", "{tmp}/shards"]
PNG = ["--out", "{tmp}/split.png"]

# (argv_module, argv, exit_code, word from the message)
ROWS = [
    # python -m data_pipeline.prepare
    (PREPARE, ["simple", *OUT, "--n-images", "0"], 2, "--n-images"),
    (PREPARE, ["simple", *OUT, "--n-images", "-5"], 2, "--n-images"),
    (PREPARE, ["simple", *OUT, "--n-images", "abc"], 2, "--n-images"),
    (PREPARE, ["simple", *OUT, "--n-images", "1e12"], 2, "--n-images"),
    (PREPARE, ["simple", *OUT, "--n-images", "2.5"], 2, "--n-images"),
    (PREPARE, ["simple", *OUT, "--n-images", "5000"], 2, "2,048"),  # more than the grid
    (PREPARE, ["simple", *OUT, "--rows-per-block", "0"], 2, "--rows-per-block"),
    (PREPARE, ["simple", *OUT, "--rows-per-block", "nan"], 2, "--rows-per-block"),
    (PREPARE, ["labelled", *OUT], 2, "--from-file"),
    (PREPARE, ["dsprites", *OUT, "--from-file", "{tmp}/bad/dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz"],
     2, "expected shape"),
    (PREPARE, ["simple", *OUT, "--seed", "-1"], 2, "--seed"),
    (PREPARE, ["simple", *OUT, "--num-cpus", "0"], 2, "--num-cpus"),
    (PREPARE, ["simple", *OUT, "--num-cpus", "-3"], 2, "--num-cpus"),
    (PREPARE, ["nosuch", *OUT], 2, "unknown dataset"),
    (PREPARE, ["simple"], 2, "--out"),
    (PREPARE, ["simple", "--out", ""], 2, "--out"),
    (PREPARE, ["simple", "--out", "{tmp}/afile.txt"], 2, "is a file"),
    (PREPARE, ["simple", "--out", "nosuchscheme://bucket/x"], 2, "--out"),
    (PREPARE, ["simple", *OUT, "--reduced"], 2, "--reduced"),
    (PREPARE, ["mpi3d", *OUT, "--reduced", "--n-images", "10"], 2, "--n-images"),
    (PREPARE, ["simple", *OUT, "--single-process", "--num-cpus", "2"], 2, "--single-process"),
    (PREPARE, ["simple", *OUT, "--nimages", "5"], 2, "unrecognized"),
    # python -m data_pipeline.show
    (SHOW, ["nosuch", "--split", "blank_side", *PNG], 2, "unknown dataset"),
    (SHOW, ["dsprites", "--split", "nosuch", *PNG], 2, "--split"),
    (SHOW, ["dsprites", "--split", "blank_side+nosuch", *PNG], 2, "modifier"),
    (SHOW, ["dsprites", *PNG], 2, "--split"),
    (SHOW, ["dsprites", "--split", "blank_side"], 2, "--out"),
    (SHOW, ["dsprites", "--split", "blank_side", *PNG, "--n", "0"], 2, "--n"),
    (SHOW, ["dsprites", "--split", "blank_side", *PNG, "--n", "1000"], 2, "--n"),
    (SHOW, ["dsprites", "--split", "blank_side", *PNG, "--n", "x"], 2, "--n"),
    (SHOW, ["dsprites", "--split", "blank_side", *PNG, "--n-images", "0"], 2, "--n-images"),
    (SHOW, ["dsprites", "--split", "blank_side", *PNG, "--seed", "-3"], 2, "--seed"),
    (SHOW, ["dsprites", "--split", "blank_side", "--out", "{tmp}/missing/split.png"], 2, "no folder"),
    (SHOW, ["dsprites", "--split", "blank_side", "--out", "{tmp}/split.xyz"], 2, ".png"),
    (SHOW, ["dsprites", "--split", "blank_side", "--out", "{tmp}"], 2, "is a folder"),
    (SHOW, ["dsprites", "--split", "blank_side", *PNG, "--data-dir", "{tmp}/nope"], 2, "--data-dir"),
    (SHOW, ["dsprites", "--split", "blank_side", *PNG, "--data-dir", "{tmp}/empty"], 2, "not found"),
    (SHOW, ["dsprites", "--split", "blank_side", *PNG, "--data-dir", "{tmp}/bad"], 2, "expected shape"),
    (SHOW, ["dsprites", "--split", "blank_side", *PNG, "--data-dir", "{tmp}/evil"], 2, "pickled"),
    (SHOW, ["labelled", "--split", "random_combinations", *PNG], 2, "--data-dir"),
    (SHOW, ["labelled", "--split", "nosuch", *PNG, "--data-dir", "{tmp}/labelled"], 2, "--split"),
    # python -m data_pipeline.splits
    (SPLITS, ["nosuch"], 2, "unknown dataset"),
    (SPLITS, ["dsprites", "nosuch"], 2, "unknown dataset"),
    (SPLITS, ["--bogus"], 2, "unrecognized"),
    # python -m sweeps.paper_grid: options
    (SWEEP, ["--cpus-per-trial", "0", *RESULTS], 2, "--cpus-per-trial"),
    (SWEEP, ["--cpus-per-trial", "nan", *RESULTS], 2, "--cpus-per-trial"),
    (SWEEP, ["--gpus-per-trial", "nan", *RESULTS], 2, "--gpus-per-trial"),
    (SWEEP, ["--gpus-per-trial", "inf", *RESULTS], 2, "--gpus-per-trial"),
    (SWEEP, ["--gpus-per-trial", "-1", *RESULTS], 2, "--gpus-per-trial"),
    (SWEEP, ["--max-failures", "-1", *RESULTS], 2, "--max-failures"),
    (SWEEP, ["--num-cpus", "-3", *RESULTS], 2, "--num-cpus"),
    (SWEEP, ["--checkpoint-every", "-1", *RESULTS], 2, "--checkpoint-every"),
    (SWEEP, ["--checkpoint-minutes", "-1", *RESULTS], 2, "--checkpoint-minutes"),
    (SWEEP, ["--checkpoint-minutes", "nan", *RESULTS], 2, "--checkpoint-minutes"),
    (SWEEP, ["--mlflow", "", *RESULTS], 2, "--mlflow: give a tracking URI"),
    (SWEEP, ["--max-concurrent-trials", "0", *RESULTS], 2, "--max-concurrent-trials"),
    (SWEEP, ["--num-samples", "0", *RESULTS], 2, "--num-samples"),
    (SWEEP, ["--pack-size", "0", *RESULTS], 2, "--pack-size"),
    (SWEEP, ["--seeds", "1e12", *RESULTS], 2, "--seeds"),
    (SWEEP, ["--seeds", "1000000000000", *RESULTS], 2, "--seeds"),
    (SWEEP, ["--seeds", "0,0", *RESULTS], 2, "twice"),
    (SWEEP, ["--seeds", "-1", *RESULTS], 2, "--seeds"),
    (SWEEP, ["--name", "../x", *RESULTS], 2, "--name"),
    (SWEEP, ["--name", "/tmp/x", *RESULTS], 2, "--name"),
    (SWEEP, ["--name", "a/b", *RESULTS], 2, "--name"),
    (SWEEP, ["--preset", "nosuch", *RESULTS], 2, "unknown preset"),
    (SWEEP, ["--scale", "huge", *RESULTS], 2, "unknown scale"),
    (SWEEP, ["--grid", "{tmp}/grids/missing.yaml", *RESULTS], 2, "no such file"),
    (SWEEP, ["--grid", "{tmp}/afile.txt", *RESULTS], 2, ".yaml"),
    (SWEEP, ["--data-dir", "{tmp}/nope", *RESULTS], 2, "--data-dir"),
    (SWEEP, ["--data-dir", "{tmp}/bad", "--scale", "tiny", *RESULTS], 2, "expected shape"),
    (SWEEP, ["--data-dir", "{tmp}/evil", "--scale", "tiny", *RESULTS], 2, "pickled"),
    (SWEEP, ["--data-dir", "s3://bucket/data", *RESULTS], 2, "local folder"),
    (SWEEP, ["--data-source", "prepared", "--data-dir", "{tmp}/empty", *RESULTS], 2,
     "python -m data_pipeline.prepare"),
    (SWEEP, ["--data-source", "prepared", "--data-dir", "{tmp}/nope", *RESULTS], 2, "--data-dir"),
    (SWEEP, ["--data-source", "prepared", "--data-dir", "{tmp}/notprepared", *RESULTS], 2,
     "not a disgen prepared"),
    (SWEEP, ["--cpus-per-trial", "abc", *RESULTS], 2, "--cpus-per-trial"),
    (SWEEP, ["--storage-path", "{tmp}/afile.txt/x"], 2, "storage path"),
    # python -m sweeps.paper_grid: grid files
    (SWEEP, grid("steps_inf"), 2, "steps"),
    (SWEEP, grid("lr_nan"), 2, "lr"),
    (SWEEP, grid("beta_inf"), 2, "beta"),
    (SWEEP, grid("beta_negative"), 2, "beta"),
    (SWEEP, grid("latent_fraction"), 2, "latent_dim"),
    (SWEEP, grid("report_every_zero"), 2, "report_every"),
    (SWEEP, grid("n_nll_negative"), 2, "n_nll"),
    (SWEEP, grid("n_metric_zero"), 2, "n_metric"),
    (SWEEP, grid("n_images_missing"), 2, "n_images"),
    (SWEEP, grid("n_images_negative"), 2, "n_images"),
    (SWEEP, grid("data_seed_negative"), 2, "data_seed"),
    (SWEEP, grid("metrics_string"), 2, "metrics"),
    (SWEEP, grid("metrics_unknown"), 2, "nosuch"),
    (SWEEP, grid("objective_unknown"), 2, "objective"),
    (SWEEP, grid("split_of_another_dataset"), 2, "fhue_gt50"),
    (SWEEP, grid("setting_unknown"), 2, "betta"),
    (SWEEP, grid("steps_text"), 2, "steps"),
    (SWEEP, grid("seed_axis"), 2, "--seeds"),
    (SWEEP, [*grid("search_metric_unknown"), "--search", "optuna"], 2, "search.metric"),
]


def write_workspace(tmp_path):
    """A folder with the files the rows name: a plain file, an empty data folder, a dSprites file
    of the wrong shape, one whose images are a pickle, and a small labelled dataset."""
    (tmp_path / "afile.txt").write_text("not a folder")
    (tmp_path / "empty").mkdir()
    npz = "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz"
    (tmp_path / "bad").mkdir()
    np.savez(tmp_path / "bad" / npz, imgs=np.zeros((2, 32, 32), np.uint8),
             latents_classes=np.zeros((2, 6), np.int64))
    (tmp_path / "evil").mkdir()
    np.savez(tmp_path / "evil" / npz, imgs=np.array({"a": 1}, dtype=object),
             latents_classes=np.zeros((2, 6), np.int64))
    (tmp_path / "grids").mkdir()
    for name, (fixed, other) in GRIDS.items():
        settings = {k: v for k, v in {**GOOD, **fixed}.items() if k != other.get("drop")}
        spec = {"fixed": settings, "axes": {"split": [settings.pop("split")], **other.get("axes", {})}}
        if "search" in other:
            spec["search"] = other["search"]
        (tmp_path / "grids" / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "notprepared" / "dsprites").mkdir(parents=True)
    (tmp_path / "notprepared" / "dsprites" / "manifest.json").write_text('{"shards": []}')
    (tmp_path / "labelled").mkdir()
    np.savez(tmp_path / "labelled" / "labelled.npz", images=np.zeros((6, 8, 8), np.uint8),
             factors=np.arange(12.0).reshape(6, 2))
    return tmp_path


@pytest.fixture
def workspace(tmp_path):
    return write_workspace(tmp_path)


def run_cli(module: str, argv: list[str]) -> int:
    """The exit code of ``module.main(argv)``: its SystemExit's code, or what it returned."""
    main = importlib.import_module(module).main
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    return 0 if code is None else code


@pytest.fixture
def no_ray(monkeypatch):
    """``import ray`` fails inside the test: an input refused only after Ray starts is a failure."""
    monkeypatch.setitem(sys.modules, "ray", None)


@pytest.mark.parametrize(("module", "argv", "exit_code", "word"), ROWS,
                         ids=[f"{m.split('.')[1]}:{' '.join(a)}" for m, a, _, _ in ROWS])
def test_bad_input_is_one_clear_line(module, argv, exit_code, word, workspace, capsys, no_ray):
    argv = [a.format(tmp=workspace) for a in argv]
    assert run_cli(module, argv) == exit_code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err  # one line, no usage block, no traceback
    assert word in lines[0]
    assert "error:" in lines[0] and "Traceback" not in captured.err
    assert not (workspace / "shards" / "manifest.json").exists()


def test_the_table_is_large_enough():
    assert len([r for r in ROWS if r[0] == SWEEP]) >= 40
    assert len(ROWS) >= 80 and len({(m, tuple(a)) for m, a, _, _ in ROWS}) == len(ROWS)


def test_good_inputs_still_work(workspace, capsys, no_ray):
    """The same command lines with good inputs succeed (so the rows fail for their bad input)."""
    out = str(workspace / "shards")
    assert run_cli(PREPARE, ["simple", "--out", out, "--n-images", "5", "--single-process"]) == 0
    assert "5 images in 1 blocks" in capsys.readouterr().out
    png = str(workspace / "split.png")
    assert run_cli(SHOW, ["dsprites", "--split", "blank_side", "--out", png, "--n", "2",
                          "--n-images", "200"]) == 0
    assert (workspace / "split.png").stat().st_size > 0
    assert run_cli(SHOW, ["labelled", "--split", "random_combinations", "--out", png, "--n", "1",
                          "--data-dir", str(workspace / "labelled")]) == 0
    assert run_cli(SPLITS, ["circles"]) == 0
    assert "circles" in capsys.readouterr().out
    from sweeps.paper_grid import parse_options, plan

    trials = plan(parse_options([a.format(tmp=workspace) for a in grid("good")])).trials  # stops before Ray
    assert len(trials) == 1 and trials[0].model.beta == 1.0

