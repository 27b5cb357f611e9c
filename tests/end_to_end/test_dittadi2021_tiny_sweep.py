"""The dittadi2021 preset's tiny scale, a whole sweep on the tests' Ray: Ada-GVAE trains on pairs
beside the β-VAE on 3DShapes, and the readout per factor reaches trials.parquet."""

import pandas as pd
import pytest

from sweeps.paper_grid import main


@pytest.mark.slow
def test_dittadi2021_tiny_runs_ada_gvae_on_pairs(ray_session, tmp_path, capsys):
    assert main(["--preset", "dittadi2021", "--scale", "tiny", "--storage-path", str(tmp_path)]) == 0
    trials = pd.read_parquet(tmp_path / "dittadi2021-tiny" / "trials.parquet")
    assert len(trials) == 4 and set(trials["objective"]) == {"beta_vae", "ada_gvae"}
    assert trials["dataset"].eq("shapes3d").all() and trials["test_nll"].gt(0).all()
    # the readout accuracy per factor comes through Ray into trials.parquet (tiny skips DCI: the forest)
    assert trials["readout_estimator"].eq("random_forest").all() and trials["readout_n_test"].gt(0).all()
    assert trials["accuracy_object_hue"].between(0, 1).all() and trials["chance_object_hue"].eq(1 / 8).all()
    assert trials["r2_posX"].isna().all() and trials["r2_scale"].notna().all()  # posX: not a 3DShapes factor
