"""analysis.load_trials / load_history: dtypes, several experiments at once, and results on a
(loopback) S3 server read by URI; the report from s3 written locally."""

import tempfile

import numpy as np
import pandas as pd
import pyarrow.fs as pafs
import pytest
from report_rows import trial, write_checkpoint, write_events

import analysis
from analysis.report import main as report_main
from analysis.storage import write_results

BUCKET = "disgen-test"  # conftest's s3_server creates it


def rows(experiment, n=4, seed_missing=True):
    out = []
    for i in range(n):
        out.append({"experiment": experiment, "trial_key": f"{experiment}{i}", "trial_id": f"id{i}",
                    "tensorboard_dir": f"run-{i}", "dataset": "dsprites", "split": ["a", "b"][i % 2],
                    "objective": "beta_vae", "beta": float(i + 1),
                    "seed": None if seed_missing and i == 0 else i,
                    "latent_dim": 10, "train_nll": 50.0 + i, "test_nll": 60.0 + 2 * i, "d_score": 0.1 * i})
    return out


def test_dtypes_nullable_integers_and_categoricals(tmp_path):
    write_results(tmp_path, rows("e"), [{"experiment": "e", "trial_key": "e1", "step": 5, "loss": 1.0},
                                        {"experiment": "e", "trial_key": "e1", "step": None, "loss": 2.0}])
    df = analysis.load_trials(tmp_path)
    assert str(df["seed"].dtype) == "Int64" and df["seed"].isna().sum() == 1 and df["seed"].iloc[1] == 1
    # all null: still Int64
    assert str(df["latent_dim"].dtype) == "Int64" and str(df["steps"].dtype) == "Int64"
    for column in ("dataset", "split", "objective", "experiment", "architecture"):
        assert isinstance(df[column].dtype, pd.CategoricalDtype), column
    assert list(df["split"].cat.categories) == ["a", "b"]
    assert df["beta"].dtype == np.float64 and df["trial_id"].iloc[0] == "id0"
    assert isinstance(df["trial_key"].dtype, pd.StringDtype)
    history = analysis.load_history(tmp_path)
    assert str(history["step"].dtype) == "Int64" and history["step"].isna().sum() == 1


def test_several_experiments_at_once_keep_categoricals(tmp_path):
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        write_results(tmp_path / name, rows(name))
    df = analysis.load_trials(tmp_path / "one", str(tmp_path / "two"))
    assert len(df) == 8 and set(df["experiment"]) == {"one", "two"}
    assert isinstance(df["experiment"].dtype, pd.CategoricalDtype)


def test_a_folder_without_results_is_an_error_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trials.parquet"):
        analysis.load_trials(tmp_path)
    assert report_main([str(tmp_path / "nowhere")]) == 2


@pytest.mark.slow
def test_results_on_s3_read_by_uri_and_reported_locally(s3_server, tmp_path, capsys):
    local = tmp_path / "exp"
    local.mkdir()
    write_results(local, rows("exp"), [{"experiment": "exp", "trial_key": "exp1", "step": 5, "loss": 1.0}])
    (local / "errors.jsonl").write_text('{"trial_key": "gone", "trial_id": "x", "error": "NaN loss"}\n')
    s3 = pafs.S3FileSystem(endpoint_override=s3_server["AWS_ENDPOINT_URL"], region="us-east-1")
    pafs.copy_files(str(local), f"{BUCKET}/disgen/exp", source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=s3)
    uri = f"s3://{BUCKET}/disgen/exp"
    df = analysis.load_trials(uri)
    assert len(df) == 4 and str(df["seed"].dtype) == "Int64"
    assert len(analysis.load_history(uri)) == 1
    # an explicit pyarrow file system and a path inside it work as well
    assert len(analysis.load_trials(f"{BUCKET}/disgen/exp", filesystem=s3)) == 4
    errors = analysis.load_errors(uri)
    assert list(errors["trial_key"]) == ["gone"]

    out = tmp_path / "report"
    assert report_main([uri, "--out", str(out), "--n-bootstrap", "5", "--no-progress"]) == 0
    page = (out / "report.html").read_text()
    assert "<h2>Trials (4)</h2>" in page and "NaN loss" in page
    assert "unless asked (--with-checkpoints)" in page
    assert f'href="{uri}/run-1/"' in page  # a remote row links to its folder's URI


def test_a_report_drawing_models_on_s3_leaves_no_copies_behind(s3_server, tmp_path, monkeypatch):
    """A remote checkpoint is copied to a local folder to be drawn; the copies go once drawn, so a
    report run every hour on a month's sweep does not fill the driver's disk."""
    local = tmp_path / "exp"
    write_results(local, [trial("k0", "blank_side", "beta_vae", 0.1, 80)])
    write_checkpoint(local / "blank_side-k0", "k0")
    write_events(local / "blank_side-k0")
    s3 = pafs.S3FileSystem(endpoint_override=s3_server["AWS_ENDPOINT_URL"], region="us-east-1")
    pafs.copy_files(str(local), f"{BUCKET}/disgen/drawn", source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=s3)
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    out = tmp_path / "report"
    assert report_main([f"s3://{BUCKET}/disgen/drawn", "--out", str(out), "--n-bootstrap", "5",
                        "--no-progress", "--with-checkpoints"]) == 0
    assert "could not draw" not in (out / "report.html").read_text()
    assert list((out / "figures").glob("*k0*")), sorted(p.name for p in out.rglob("*"))  # drawn
    assert list(temp.iterdir()) == []
