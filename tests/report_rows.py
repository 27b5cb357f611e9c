"""Rows and TensorBoard files the report tests build their experiments from, and the files a stored
experiment holds."""


def trial(key, split, objective, d, nll):
    """One finished model's row, its metrics a function of its D-score ``d``."""
    return {
        "experiment": "e",
        "trial_key": key,
        "dataset": "dsprites",
        "split": split,
        "condition": "extrapolation" if split == "blank_side" else "recombination_to_element",
        "architecture": "burgess",
        "objective": objective,
        "beta": 1.0 + d,
        "seed": 0,
        "steps": 2,
        "train_nll": 50.0 + d,
        "test_nll": nll,
        "d_score": d,
        "dci_disentanglement": d / 2,
        "mig": d / 3,
        "transfer_gbt_ood2": 1 - d,
    }


def write_events(folder):
    """A TensorBoard event file with two scalars, as the trainable writes them."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step in (1, 2):
        writer.add_scalar("train/loss", 10.0 / step, step)
    writer.close()


def experiment_files(experiment) -> dict[str, tuple[int, object]]:
    """Every file under a stored experiment (a local folder or an ``s3://`` URI), by its path
    inside the experiment: (size, modification time)."""
    import pyarrow.fs as pafs

    from analysis.storage import resolve

    fs, inner = resolve(experiment)
    return {info.path[len(inner) + 1:]: (info.size, info.mtime)
            for info in fs.get_file_info(pafs.FileSelector(inner, recursive=True))}


def write_checkpoint(folder, key):
    """A final checkpoint of trial ``key`` in sweeps/trainable.py's layout, in
    ``folder/checkpoint_000000``, for a model trained for no steps; returns the model."""
    from models import ModelConfig, build
    from models.checkpoint import save_final

    config = {"dataset": "dsprites", "n_images": 400, "data_seed": 0, "split": "blank_side", "seed": 0,
              "architecture": "burgess", "objective": "beta_vae", "beta": 1.0, "latent_dim": 4,
              "trial_key": key}
    model = build(ModelConfig.from_dict({**config, "channels": 1}))
    (folder / "checkpoint_000000").mkdir(parents=True)
    save_final(str(folder / "checkpoint_000000"), [model.state_dict()], [0], {}, [[]], {"members": [config]})
    return model
