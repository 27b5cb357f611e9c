"""What a trial's models report, from the trainable to their rows (``ModelOutcome``, ``TrialOutcome``). Tune
writes every report into result.json, so what crosses Tune is small plain data: models named by trial key,
never their settings (``to_report``), read back once on the driver from the plan (``from_report``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from analysis.schema import PROVENANCE_FIELDS
from sweeps.trials import TrialConfig

# What a trial's final report says about what ran its models, copied to each model's row.
RUN_FACTS = tuple(f.name for f in PROVENANCE_FIELDS)


@dataclasses.dataclass
class ModelOutcome:
    """One model's outcome: trained (``metrics``) or failed (``error``), and what its run resolved."""
    trial: TrialConfig
    step: int | None = None
    error: str | None = None
    steps: int | None = None
    n_images: int | None = None
    bf16: bool | None = None
    train_seconds: float | None = None
    train_started_at: float | None = None
    train_ended_at: float | None = None
    data_uri: str | None = None
    data_content_id: str | None = None
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    history: list[dict] | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def values(self) -> dict[str, Any]:
        """What the run resolved and timed (where known) and the metrics, flat, as a report names them."""
        facts = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name in _FACTS}
        return {**{k: v for k, v in facts.items() if v is not None}, **self.metrics}

    def to_report(self) -> dict:
        """Plain data for Tune: the trial key, never the settings."""
        report = {"trial_key": self.trial.trial_key}
        report.update({k: v for k, v in (("error", self.error), ("step", self.step)) if v is not None})
        report.update(self.values())
        if self.history is not None:
            report["history"] = self.history
        return report

    @classmethod
    def from_report(cls, report: dict, trial: TrialConfig) -> ModelOutcome:
        """A member of a final report, with its ``trial`` (from the plan)."""
        known = {k: report[k] for k in _FACTS if k in report}
        metrics = {k: v for k, v in report.items() if k not in _NOT_METRICS}
        return cls(trial, step=report.get("step"), error=report.get("error"), metrics=metrics,
                   history=report.get("history"), **known)


_FACTS = ("steps", "n_images", "bf16", "train_seconds", "train_started_at", "train_ended_at", "data_uri",
          "data_content_id")
_NOT_METRICS = {*_FACTS, "trial_key", "config", "step", "error", "history"}


@dataclasses.dataclass
class TrialOutcome:
    """A Tune trial's outcome: its models (in its config's order), its step and what ran it; a deferred one
    (``evaluated`` False) names its dataset and an evaluation's CPUs."""
    members: list[ModelOutcome]
    step: int | None = None
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    evaluated: bool = True
    results_part: str | None = None
    data_reference: dict | None = None
    cpus_per_trial: float | None = None
    trial_id: str | None = None

    @property
    def trials(self) -> list[TrialConfig]:
        return [member.trial for member in self.members]

    def to_report(self) -> dict:
        """The final report: plain data, models by trial key (a lone model's values also at the top)."""
        report = {"step": self.step, "done": True, **self.facts}
        if not self.evaluated:
            report.update(evaluated=False, members=[m.to_report() for m in self.members],
                          data_reference=self.data_reference, cpus_per_trial=self.cpus_per_trial)
            return report
        report["members"] = [m.to_report() for m in self.members]
        if self.results_part is not None:
            report["results_part"] = self.results_part
        if len(self.members) == 1 and not self.members[0].failed:
            report.update({k: v for k, v in report["members"][0].items() if k != "trial_key"})
        return report

    @classmethod
    def from_report(cls, result: dict, trials: Sequence[TrialConfig] = ()) -> TrialOutcome:
        """A final report read back, members' settings from ``trials`` (or their own, if they carry them)."""
        members = []
        for position, member in enumerate(result["members"]):
            if "config" in member:
                trial = TrialConfig(member["config"])
            elif position < len(trials) and trials[position].trial_key == member.get("trial_key"):
                trial = trials[position]
            else:
                keys = ", ".join(t.trial_key for t in trials)
                raise ValueError(f"member {position} of a Tune trial's result, trial "
                                 f"{member.get('trial_key')}, is not its config's member there ({keys})")
            members.append(ModelOutcome.from_report(member, trial))
        # the dataset read is each model's own (a lone model's report repeats it at the top)
        facts = {k: result[k] for k in RUN_FACTS if k in result and k not in _FACTS}
        return cls(members, step=result.get("step"), facts=facts,
                   evaluated=result.get("evaluated") is not False, results_part=result.get("results_part"),
                   data_reference=result.get("data_reference"), cpus_per_trial=result.get("cpus_per_trial"),
                   trial_id=result.get("trial_id"))


def is_final(result: dict | None) -> bool:
    """Whether a Tune result is a trial's final report (its models' outcomes), not a progress one."""
    return bool(result) and bool(result.get("done")) and "members" in result
