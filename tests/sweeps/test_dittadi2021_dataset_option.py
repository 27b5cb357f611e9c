"""``--dataset finger`` for the dittadi2021 preset, planned without Ray: the trials run D21's own
settings on the prepared robot-finger sets (128 px, OOD1 on the colour, OOD2-A and OOD2-B on the
other two sets), the stand-in stays the default, and missing or unsuitable sets are refused."""

from __future__ import annotations

import pytest
from robot_finger_files import write_finger_datasets

from data_pipeline import conversion
from data_pipeline.robot_finger import SETS
from sweeps.errors import UsageError
from sweeps.options import SweepOptions
from sweeps.paper_grid import plan_trials


@pytest.fixture(scope="module")
def prepared_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("finger")
    root = write_finger_datasets(folder / "files", n=200, n_heldout=12, n_real=8)
    for name in SETS:  # the one-process conversion: the same folders as the Ray Data build
        conversion.convert(root, folder / "prepared" / name, dataset=name, progress=False)
    return folder / "prepared"


def test_dataset_finger_plans_d21s_settings_on_the_prepared_sets(prepared_dir):
    sweep = plan_trials(SweepOptions(preset="dittadi2021", scale="tiny", dataset="finger",
                                     data_dir=str(prepared_dir)))
    assert len(sweep.trials) == 4
    for trial in sweep.trials:
        assert (trial.data.dataset, trial.data.split, trial.data.data_source) == \
            ("finger", "random_combinations_2", "prepared")
        assert trial.data.n_images is None and trial.model.image_size == 128 and trial.model.channels == 3
        assert trial.evaluation.transfer_factor == "colour"
        assert trial.evaluation.ood2_datasets == {"ood2_a": "finger_heldout_colors", "ood2_b": "finger_real"}
    keys = {key[1] for key in sweep.data}
    assert keys == {"finger", "finger_heldout_colors", "finger_real"}
    assert {ref.dataset for ref in sweep.data.values()} == keys


def test_the_stand_in_stays_the_default():
    sweep = plan_trials(SweepOptions(preset="dittadi2021", scale="tiny"))
    assert {t.data.dataset for t in sweep.trials} == {"shapes3d"}
    assert all(t.evaluation.ood2_datasets == {} for t in sweep.trials)


def test_missing_sets_are_named_with_the_commands_that_prepare_them(tmp_path):
    with pytest.raises(UsageError, match="3 datasets this study reads are missing") as error:
        plan_trials(SweepOptions(preset="dittadi2021", scale="tiny", dataset="finger",
                                 data_dir=str(tmp_path)))
    for name in SETS:
        assert f"prepare {name} --out {tmp_path}/{name}" in str(error.value)


def test_dataset_is_refused_where_the_preset_offers_none_or_the_source_differs(prepared_dir):
    with pytest.raises(UsageError, match="default offers no other dataset"):
        plan_trials(SweepOptions(preset="default", scale="tiny", dataset="finger"))
    with pytest.raises(UsageError, match="dittadi2021 offers finger"):
        plan_trials(SweepOptions(preset="dittadi2021", scale="tiny", dataset="mpi3d"))
    with pytest.raises(UsageError, match="reads prepared data; drop --data-source real"):
        plan_trials(SweepOptions(preset="dittadi2021", scale="tiny", dataset="finger", data_source="real",
                                 data_dir=str(prepared_dir)))


def test_a_finger_trial_cannot_render_procedurally():
    from data_pipeline.config import DataConfig

    with pytest.raises(ValueError, match="no generator renders it"):
        DataConfig.parse({"dataset": "finger", "split": "random_combinations_2", "n_images": None,
                          "data_seed": 0})


@pytest.mark.slow
def test_a_deferred_evaluation_reads_the_ood2_sets_and_gives_the_in_trial_metrics(prepared_dir, tmp_path):
    """A trial on a GPU defers its evaluation to a CPU task (``evaluate_saved``): the OOD2 sets'
    references travel with its dataset's, and the task's metrics are the trial's own."""
    import torch

    from data_pipeline.node_cache import open_reference
    from models import build_trainer
    from models.checkpoint import save_final
    from sweeps.data import ood2_key
    from sweeps.evaluation import evaluate_model, evaluate_saved, split_rows

    sweep = plan_trials(SweepOptions(preset="dittadi2021", scale="tiny", dataset="finger",
                                     data_dir=str(prepared_dir)))
    trial = sweep.trials[0]
    reference = sweep.data[trial.data.key]
    data = open_reference(reference, trial.data.n_images, trial.data.data_seed)
    sets = {scenario: sweep.data[ood2_key(trial, name)]
            for scenario, name in trial.evaluation.ood2_datasets.items()}
    split, train_rows, _ = split_rows(trial, data)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer = build_trainer(trial.model, data.images, data.classes, data.factor_space, train_rows)
        history = list(trainer.run(report_every=3))
        in_trial = evaluate_model(trainer, trial, data, split, 1,
                                  {scenario: open_reference(ref) for scenario, ref in sets.items()})
        save_final(str(tmp_path), [trainer.model.state_dict()], [trainer.step], {}, [history],
                   {"members": [trial.to_dict()]})
        job_reference = {**reference.to_dict(),
                         "ood2": {trial.trial_key: {s: ref.to_dict() for s, ref in sets.items()}}}
        out = evaluate_saved({"config": trial.to_dict(), "position": 0, "checkpoint": str(tmp_path),
                              "reference": job_reference, "cpus": 1, "tensorboard": str(tmp_path / "tb")})
    finally:
        torch.set_num_threads(threads)
    for scenario in ("ood1_a", "ood1_b", "ood1_c", "ood2_a", "ood2_b"):
        value = in_trial[f"transfer_gbt_{scenario}"]
        assert 0 <= value <= 1 and out["metrics"][f"transfer_gbt_{scenario}"] == value, scenario
