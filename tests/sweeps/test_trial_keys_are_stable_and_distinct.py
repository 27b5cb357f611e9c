"""A trial's key (sweeps/trials.py): the same settings give the same key, distinct trials distinct
keys, and what does not change the model (the report interval) leaves it as it is."""

from sweeps.grid import get_spec, trial_configs
from sweeps.trials import trial_key


def test_trial_keys_are_stable_and_distinct():
    configs = trial_configs(get_spec("default"), "default", "tiny", [0, 1])
    assert len(configs) == 8 and len({c["trial_key"] for c in configs}) == 8
    assert trial_configs(get_spec("default"), "default", "tiny", [0, 1]) == configs
    assert trial_key({**configs[0], "report_every": 999}) == configs[0]["trial_key"]
