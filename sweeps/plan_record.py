"""An experiment's planned trials, kept in its folder as ``plan.json``, and what ``--resume`` may do with a
grid that differs: the same trials resume, the same plus new ones extend the experiment, anything else is
refused with the difference (one experiment never mixes two grids)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from analysis import storage
from sweeps.errors import UsageError
from sweeps.search import search_of
from sweeps.trials import NOT_IN_KEY, TrialConfig

PLAN_FILE = "plan.json"
VERSION = 1


def plain(trial: TrialConfig) -> dict:
    """A trial's settings as plan.json stores them, less those that only label it (``NOT_IN_KEY``): a copy
    of the grid under a new file name extends the experiment."""
    settings = {k: v for k, v in trial.to_dict().items() if k not in NOT_IN_KEY}
    return json.loads(json.dumps(settings, sort_keys=True, default=str))


def make_record(trials: Sequence[TrialConfig], search: str, scheduler: str) -> dict:
    return {"version": VERSION, "search": search, "scheduler": scheduler,
            "trials": {t.trial_key: plain(t) for t in trials}}


def write(experiment_dir: str, record: dict) -> None:
    """Write plan.json whole (``analysis.storage.write_whole``)."""
    fs, inner = storage.resolve(storage.join(experiment_dir, PLAN_FILE))
    fs.create_dir(inner.rsplit("/", 1)[0], recursive=True)
    storage.write_whole(fs, inner, json.dumps(record, sort_keys=True, indent=1).encode())


def read(experiment_dir: str) -> dict | None:
    fs, inner = storage.resolve(storage.join(experiment_dir, PLAN_FILE))
    try:
        with fs.open_input_stream(inner) as stream:
            return json.loads(stream.read())
    except FileNotFoundError:
        return None


def _values(trials: dict, name: str) -> list:
    return sorted({json.dumps(t.get(name), sort_keys=True) for t in trials.values()})


def differences(old: dict, new: dict) -> dict:
    """What changed between two plan records: trial keys added, removed, changed, setting values, modes."""
    old_trials, new_trials = old["trials"], new["trials"]
    names = sorted({n for t in [*old_trials.values(), *new_trials.values()] for n in t} - {"trial_key"})
    settings = {n: (_values(old_trials, n), _values(new_trials, n)) for n in names
                if _values(old_trials, n) != _values(new_trials, n)}
    same_key_changed = sorted(k for k in set(old_trials) & set(new_trials) if old_trials[k] != new_trials[k])
    modes = {f: (old.get(f), new.get(f)) for f in ("search", "scheduler") if old.get(f) != new.get(f)}
    return {"added": sorted(set(new_trials) - set(old_trials)),
            "removed": sorted(set(old_trials) - set(new_trials)),
            "changed": same_key_changed, "settings": settings, "modes": modes}


def describe(diff: dict, limit: int = 8) -> str:
    def keys(found):
        return ", ".join(found[:limit]) + (f" … ({len(found)} in all)" if len(found) > limit else "")

    lines = []
    if diff["added"]:
        lines.append(f"  trials added ({len(diff['added'])}): {keys(diff['added'])}")
    if diff["removed"]:
        lines.append(f"  trials removed ({len(diff['removed'])}): {keys(diff['removed'])}")
    if diff["changed"]:
        lines.append(f"  trials with changed settings ({len(diff['changed'])}): {keys(diff['changed'])}")
    for name, (before, after) in diff["settings"].items():
        lines.append(f"  {name}: {', '.join(before)} -> {', '.join(after)}")
    for name, (before, after) in diff["modes"].items():
        lines.append(f"  --{name}: {before} -> {after}")
    return "\n".join(lines)


def check_resume(experiment_dir: str, record: dict) -> list[str]:
    """The trial keys a ``--resume`` adds, or a UsageError with the difference if it cannot extend."""
    stored = read(experiment_dir)
    if stored is None:
        raise UsageError(f"{experiment_dir} has no {PLAN_FILE} (it was started by an older disgen), so the "
                         "grid cannot be checked against it; start a new experiment with --name NEW")
    diff = differences(stored, record)
    if not (diff["added"] or diff["removed"] or diff["changed"] or diff["settings"] or diff["modes"]):
        return []
    why = None
    if diff["removed"] or diff["changed"]:
        why = "an extension may only add trials; this grid drops or changes trials the experiment has"
    elif diff["modes"] or not search_of(record["search"]).extendable or record["scheduler"] != "none":
        why = "only a plain grid search (--search grid, --scheduler none) can be extended"
    if why:
        raise UsageError(f"--resume: the grid differs from the one {experiment_dir} was started with, and "
                         f"{why}:\n{describe(diff)}\nresume with the original grid and options, or start "
                         "a new experiment with --name NEW")
    return diff["added"]
