"""How many bytes a pack's Tune trial config adds to each of its reports (issue 32, item 3).

Tune writes a trial's config into every result it writes (each line of ``result.json``, each row of
``progress.csv``, what every callback is handed). Before issue 32 the config held each member's
whole settings (``{"members": [settings, ...]}``) and the final report repeated them (each member's
``"config"``); now it holds the members' trial keys (``sweeps.packing.tune_config``) and the final
report the keys again. This plans a preset dry (``sweeps.paper_grid.plan_trials``: what
``--dry-run`` plans; no Ray, no data rendered), packs its trials (``sweeps.packing.make_packs``)
and prints, for the largest pack, the JSON bytes of the config before and after, and what the
final report's members carried of their settings. Sizes only, no timings; the plan the trainable
now gets once (``TrialRun.base_trials``, pickled) is printed for scale.

    python benchmarks/result_size.py [--preset default] [--scale full] [--pack-size 32]
"""

from __future__ import annotations

import argparse
import json
import pickle

from sweeps.options import SweepOptions
from sweeps.packing import PlannedTrials, make_packs, tune_config
from sweeps.paper_grid import plan_trials


def size(value) -> int:
    """Bytes of ``value`` as Tune's JSON logger writes it (``json.dumps``, no indent)."""
    return len(json.dumps(value).encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="default")
    parser.add_argument("--scale", default="full")
    parser.add_argument("--pack-size", type=int, default=32)
    given = parser.parse_args()
    trials = plan_trials(SweepOptions(preset=given.preset, scale=given.scale)).trials
    pack = max(make_packs(trials, given.pack_size), key=len)
    old = {"members": [member.to_dict() for member in pack]}
    new = tune_config(pack)
    settings = sum(size({"config": member.to_dict()}) for member in pack)
    keys = sum(size({"trial_key": member.trial_key}) for member in pack)
    print(f"{given.preset} at scale {given.scale}: {len(trials)} trials; the largest pack of up to "
          f"{given.pack_size} has {len(pack)} members")
    print(f"config in every report, before (whole settings): {size(old):,} bytes "
          f"({size(old) / len(pack):,.0f} a member)")
    print(f"config in every report, now (trial keys):         {size(new):,} bytes "
          f"({size(new) / len(pack):,.0f} a member)")
    print(f"the final report's members, their settings before: {settings:,} bytes; their keys now: "
          f"{keys:,} bytes")
    print(f"the plan the trainable gets once (pickled PlannedTrials of {len(trials)} trials): "
          f"{len(pickle.dumps(PlannedTrials(trials))):,} bytes")


if __name__ == "__main__":
    main()
