"""A Tune trial's work, in plain Python: ``train_trial`` trains, evaluates and reports one model, or
one pack of models (``sweeps.packing``), through the ``TrialContext`` it is handed (Ray Tune's, from
``sweeps.ray_edge``; a test's own). Its data comes from
``data_pipeline`` (the trial is handed a dataset reference, which this node's cache materialises
once and memory-maps: ``data_pipeline.node_cache``), and each model trains on its own split's
training rows. One model takes the plain path, ``models.build_trainer``: one ``Trainer``, one
loop. A pack is the second path beside it: one ``models.packed.PackedTrainer`` (vmapped on a GPU,
a loop on a CPU) with one array of training rows per member. The trial drives either through the
same calls (a ``Trainer`` is a pack of one: its ``members``, ``current_model(k)``, ``errors``,
``member_reports`` and ``pack_state_dict``). Either way the trial reports loss
terms as it goes, writes each model's TensorBoard scalars and reconstruction grids (drawn from
the model's current weights), and checkpoints so a failed trial resumes where it stopped
(``sweeps/checkpoints.py``: written in the background, one file per model, straight to the trial's
folder on storage; a trial goes on from the newest complete one there).

Then the models are evaluated (``sweeps/evaluation.py``), each on its own split's held-out
images, in one of two ways:

- **in the trial** (no GPU reserved: the plain CPU path): the trial evaluates its models, writes
  their loss history itself, as one history part in the experiment's storage
  (``analysis/storage.py``), and makes one report of scalars: its ``TrialOutcome``
  (``sweeps/outcome.py``: each model's metrics, or its error, under ``members``) and the part's
  name (``results_part``), which the driver's results writer commits;
- **deferred** (a GPU reserved): the trial saves its trained models in its final checkpoint and
  reports them as trained (``"evaluated": False``, the training's timings, the dataset reference
  and its CPUs), then ends, which frees the GPU for the next trial; the driver evaluates the
  models from the checkpoint in CPU-only Ray tasks and commits them (``DeferredEvaluations``).

Loss histories never travel through Tune, nor do the trials' settings: the Tune trial's config
names its members by trial key (``sweeps.packing``), the planned trials reach the trainable once
(``run_info``), and a report names each member by its key; the driver takes each member's settings
from its plan. Tune writes the config into every result, so a progress report holds its loss terms
and a 10-character key per member, never the members' settings
(``tests/end_to_end/test_command.py``).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

from analysis import storage
from data_pipeline.node_cache import NodeCacheFull
from models import GPUSettings, build_trainer
from models import checkpoint as trainer_file
from models.packed import PackedTrainer
from sweeps.checkpoints import CheckpointWriter, checkpoint_due, resume, seal
from sweeps.data import open_trial_data
from sweeps.evaluation import ModelLog, evaluate_model, model_logs, split_rows, write_final
from sweeps.options import TrialRun
from sweeps.outcome import ModelOutcome, TrialOutcome
from sweeps.packing import members_of
from sweeps.provenance import provenance
from sweeps.results import history_rows
from sweeps.trials import TrialConfig


class TrialContext(Protocol):
    """What a trial needs of whatever runs it (``sweeps.ray_edge.RayTrialContext`` for Ray Tune):
    the node it runs on, its working folder (where, on remote storage, its TensorBoard files go
    for Tune to sync), and ``report``: a progress or final report, the final one with the folder
    of its final checkpoint."""

    node_id: str
    working_dir: str

    def report(self, metrics: dict, checkpoint_dir: str | None = None) -> None: ...


def _pack_progress(reports: dict[int, dict], members: int) -> dict:
    """One progress report for Tune: the model's own, or for a pack the least advanced member's
    step and the members' mean of each term."""
    if members == 1:
        return next(iter(reports.values()))
    fine = [r for r in reports.values() if "error" not in r]
    names = {n for r in fine for n in r if n not in ("step", "images_per_second")}
    out = {"step": min(r["step"] for r in reports.values()), "members_reporting": len(fine)}
    out.update({n: float(np.mean([r[n] for r in fine if n in r])) for n in names})
    out["images_per_second"] = float(sum(r.get("images_per_second", 0.0) for r in fine))
    return out


def _report_no_room(members: Sequence[TrialConfig], error: NodeCacheFull, context: TrialContext) -> None:
    """The trial's final report when its dataset cannot fit in this node's cache: each model failed
    with the error (one ``failed`` row each, naming the size needed, the limit and how to raise it).
    A report, not a raise: Tune would retry a raise up to --max-failures times, failing the same way."""
    message = f"{type(error).__name__}: {error}"
    context.report(TrialOutcome([ModelOutcome(m, step=0, error=message) for m in members], step=0,
                                facts={"node_id": context.node_id}).to_report())


def gpu_settings(gpus_per_trial: float) -> GPUSettings:
    """The GPU settings of a trial's training: ``DISGEN_GPU_SETTINGS`` (``models.device.GPUSettings.
    parse``), with the share of the GPU's memory its process may use set from ``--gpus-per-trial``
    (what Ray reserved for it; 1 for one GPU or more). A CPU run ignores them."""
    settings = GPUSettings.from_environment()
    if gpus_per_trial > 0:
        settings = dataclasses.replace(settings, memory_share=min(1.0, gpus_per_trial))
    return settings


def _build(members: Sequence[TrialConfig], data, rows: list[tuple], settings: GPUSettings):
    """The trainer: one model's ``Trainer`` (the plain path), or a ``PackedTrainer`` whose member k
    trains on its own split's rows ``rows[k][1]``. Either answers the same calls (its
    ``members``, ``current_model(k)``, ``errors``, ``member_reports``, ``pack_state_dict``)."""
    if len(members) == 1:
        return build_trainer(members[0].model, data.images, data.classes, data.factor_space, rows[0][1],
                             settings=settings)
    # Objectives on pairs (Ada-GVAE) draw them from the factor classes; the others ignore them.
    return PackedTrainer([m.model for m in members], data.images, [r[1] for r in rows], factors=data.classes,
                         factor_space=data.factor_space, settings=settings)


def _train(trainer, logs: list[ModelLog], writer: CheckpointWriter, report_every: int,
           checkpoint_every: int, context: TrialContext, checkpoint_seconds: float = 0.0) -> None:
    """Train, reporting progress (``context``) and checkpointing (through ``writer``, in the background)
    every ``checkpoint_every`` steps or ``checkpoint_seconds`` (``checkpoint_due``). A lone model
    whose loss diverges fails its trial (Tune retries or records it); a pack member stops alone."""
    last_checkpoint = time.monotonic()
    # where it went on from a checkpoint, its reports say so (the console's ETA counts what is new)
    resumed = {"resumed_at": start} if (start := min(m.step for m in trainer.members)) else {}
    for reports in trainer.member_reports(report_every):
        for k, report in reports.items():
            if "error" not in report:
                logs[k].progress(report, lambda k=k: trainer.current_model(k))
        progress = {**_pack_progress(reports, len(trainer.members)), "node_id": context.node_id,
                    "device": trainer.device.type, "total_steps": trainer.total_steps, **resumed}
        step = progress["step"]
        context.report(progress)
        if checkpoint_due(step, trainer.total_steps, checkpoint_every, checkpoint_seconds,
                          time.monotonic() - last_checkpoint):
            for log in logs:  # TensorBoard holds every step up to the checkpoint a restore starts from
                log.flush()
            writer.save(trainer.pack_state_dict(), [log.history for log in logs])
            last_checkpoint = time.monotonic()
    writer.wait()  # the last in-training checkpoint is whole before the final one is reported


def _trained(trainer, members: Sequence[TrialConfig], training: dict, reference,
             n_images: int) -> list[ModelOutcome]:
    """What the trial knows of each model once trained: its trial, its step, the settings only the
    run resolves (its length in steps, its images, bf16), the training's timings (the members of
    a pack train together: each is credited an equal share of the pack's time) and the dataset it
    read (its location and content id); or its error and the step it reached."""
    out = []
    for k, (model, trial) in enumerate(zip(trainer.members, members)):
        if k in trainer.errors:
            out.append(ModelOutcome(trial, step=model.step, error=trainer.errors[k]))
            continue
        out.append(ModelOutcome(trial, step=model.step, steps=model.total_steps, n_images=n_images,
                                bf16=bool(model.bf16), train_seconds=training["seconds"] / len(members),
                                train_started_at=training["started_at"], train_ended_at=training["ended_at"],
                                data_uri=reference.uri, data_content_id=reference.content_id))
    return out


def _evaluate(trainer, logs: list[ModelLog], trained: list[ModelOutcome], data, rows: list[tuple],
              cpus: float, ood2: dict) -> list[ModelOutcome]:
    """Evaluate, in the trial, every model that trained to the end, each on its own split (and its
    OOD2 sets, ``ood2``: ``sweeps.data.open_trial_data``): the outcomes with their metrics."""
    results = []
    for model, log, member, (split, _, _) in zip(trainer.members, logs, trained, rows):
        if member.failed:
            results.append(member)
            continue
        sets = {scenario: data for scenario, (_, data) in ood2[log.trial.trial_key].items()}
        metrics = evaluate_model(model, log.trial, data, split, cpus, sets)
        write_final(log, model.model, model.step, metrics)
        results.append(dataclasses.replace(member, metrics=metrics))
    return results


def write_history(experiment_dir: str, logs: list[ModelLog], results: list[ModelOutcome]) -> str:
    """The finished members' loss histories as one new history part of the experiment; its name.
    Written before the final report, so the driver's commit always finds it."""
    experiment = storage.experiment_name(experiment_dir)
    rows = [row for log, result in zip(logs, results) if not result.failed
            for row in history_rows(experiment, log.trial.trial_key, log.history)]
    part = storage.new_part()
    storage.write_history_part(experiment_dir, part, rows)
    return part


def train_trial(config: dict, run_info: TrialRun, context: TrialContext) -> None:
    """Train, evaluate and report one Tune trial: a model, or a pack of models (``sweeps.packing``).
    ``run_info`` holds the dataset references (``DataConfig.key`` → ``DatasetReference``), the
    experiment's folder or URI (for the history part and the checkpoints), the TensorBoard root, the
    CPUs and GPUs per trial, whether evaluation is deferred to CPU-only tasks, the checkpoint
    intervals (steps and seconds) and the planned trials (``sweeps.packing.PlannedTrials``), through
    which ``config`` names its members: their trial keys, or for Optuna a planned trial and the
    values sampled for it. ``context`` reports (``TrialContext``). Every report carries the members'
    trial keys at most, never their settings: Tune writes the config into each result."""
    cpus = run_info.cpus_per_trial
    torch.set_num_threads(max(1, int(cpus)))
    members = members_of(config, run_info.base_trials)
    try:
        reference, data, ood2 = open_trial_data(members, run_info.datasets)
    except NodeCacheFull as error:
        return _report_no_room(members, error, context)
    by_split = {split: split_rows(m, data) for split, m in {m.data.split: m for m in members}.items()}
    rows = [by_split[m.data.split] for m in members]  # (split, training rows, held-out rows) of each
    trainer = _build(members, data, rows, gpu_settings(run_info.gpus_per_trial))
    logs = model_logs(members, data, rows, trainer, run_info.tensorboard_root or context.working_dir,
                 separate=bool(run_info.tensorboard_root))
    training = _training(trainer, logs, members, run_info, context)
    trained = _trained(trainer, members, training, reference, len(data))
    final = TrialOutcome(trained, step=max(m.step for m in trainer.members),
                         facts={"node_id": context.node_id, **provenance(trainer.device)})
    if run_info.deferred_evaluation:  # the GPU is freed for the next trial; the driver evaluates
        final = _deferred(final, logs, reference, ood2, cpus)
    else:  # a lone model's report holds its metrics too, for Optuna, ASHA and Tune's table (to_report)
        results = _evaluate(trainer, logs, trained, data, rows, cpus, ood2)
        final = dataclasses.replace(final, members=results,
                                    results_part=write_history(run_info.experiment_dir, logs, results))
    _report_final(final, trainer, members, logs, training, context)


def _training(trainer, logs: list[ModelLog], members: Sequence[TrialConfig], run_info: TrialRun,
              context: TrialContext) -> dict:
    """Train the models, from the trial's newest checkpoint if it has one, checkpointing as they go;
    the training's record (when it started and ended, its seconds). A final checkpoint found
    (training was over) gives its own record, and nothing trains."""
    began, started = time.time(), time.perf_counter()
    training, writer = resume(trainer, logs, members, run_info.experiment_dir)
    if writer is not None:
        try:
            _train(trainer, logs, writer, members[0].evaluation.report_every, run_info.checkpoint_every,
                   context, run_info.checkpoint_seconds)
        except BaseException:
            writer.close(raise_error=False)  # the trial fails with training's error, not a write's
            raise
        writer.close()
    # trained now (or restored from an older final checkpoint, without its timings)
    seconds = time.perf_counter() - started
    return training or {"started_at": began, "ended_at": time.time(), "seconds": seconds}


def _deferred(final: TrialOutcome, logs: list[ModelLog], reference, ood2: dict, cpus: float) -> TrialOutcome:
    """The outcome of trained models whose evaluation the driver does: their dataset and OOD2 sets
    by reference (``sweeps.evaluation.evaluate_saved``) and the CPUs an evaluation takes."""
    for log in logs:
        log.close()
    sets = {key: {scenario: ref.to_dict() for scenario, (ref, _) in by.items()} for key, by in ood2.items()}
    return dataclasses.replace(final, evaluated=False, cpus_per_trial=cpus,
                               data_reference={**reference.to_dict(), "ood2": sets})


def _report_final(final: TrialOutcome, trainer, members: Sequence[TrialConfig], logs: list[ModelLog],
                  training: dict, context: TrialContext) -> None:
    """The trial's final report, with its final checkpoint: the trained weights, one file per model."""
    with tempfile.TemporaryDirectory() as folder:
        trainer_file.save_final(folder, [m.model.state_dict() for m in trainer.members],
                                [m.step for m in trainer.members], trainer.errors,
                                [log.history for log in logs],
                                {"members": [m.to_dict() for m in members], "training": training})
        seal(folder, members, [log.history for log in logs], final=True)
        context.report(final.to_report(), checkpoint_dir=folder)
