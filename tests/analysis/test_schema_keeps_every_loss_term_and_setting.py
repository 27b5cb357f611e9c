"""The history schema has a column for every loss term a model reports, and no other loss column.
The terms are not taken from the objectives' declared lists (the schema is built from those): each
registered objective and each task takes one real training step on a tiny batch, and the terms
it returns are the list. Every trial setting's column is checked in
tests/sweeps/test_results_rows.py."""

import numpy as np
import pyarrow as pa
import pytest
from dataset_files import OBJECTIVE_SETTINGS

from analysis.schema import HISTORY_SCHEMA
from data_pipeline.datasets import as_channels_first
from data_pipeline.spaces import SIMPLE_NAMES, sprite_space
from data_pipeline.sprites import render_simple
from models import TASKS, ModelConfig, build_trainer
from models.registry import OBJECTIVES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# the history's columns that are not loss terms
NOT_TERMS = {"experiment", "trial_key", "step", "images_per_second"}


def reported_terms() -> dict[str, set[str]]:
    """{objective or task: the names of the terms its first training step returns}."""
    space = sprite_space(SIMPLE_NAMES, (6, 6, 3))  # a full grid: the tasks draw triplets from it
    classes = space.all_classes()
    images = as_channels_first(render_simple(classes, space))
    rows = np.arange(len(classes))
    configs = {objective: ModelConfig(objective=objective, **OBJECTIVE_SETTINGS[objective])
               for objective in OBJECTIVES}
    configs.update({task: ModelConfig(task=task, latent_dim=6) for task in TASKS if task != "vae"})
    terms = {}
    for name, config in configs.items():
        config = ModelConfig(**{**config.to_dict(), "steps": 1, "batch_size": 4, "lr": 1e-3})
        trainer = build_trainer(config, images, classes, space, rows, device="cpu")
        terms[name] = set(trainer.train_step())
    return terms


def test_every_loss_term_a_model_reports_has_a_history_column_and_no_column_is_spare():
    assert set(OBJECTIVE_SETTINGS) == set(OBJECTIVES), "tests/dataset_files.py: settings for each objective"
    reported = reported_terms()
    columns = {field.name: field.type for field in HISTORY_SCHEMA}
    missing = {name: sorted(terms - set(columns)) for name, terms in reported.items() if terms - set(columns)}
    assert missing == {}, f"loss terms without a history column: {missing}"
    assert all(columns[term] == pa.float64() for terms in reported.values() for term in terms)
    spare = set(columns) - NOT_TERMS - set().union(*reported.values())
    assert spare == set(), f"history columns no model reports: {sorted(spare)}"
