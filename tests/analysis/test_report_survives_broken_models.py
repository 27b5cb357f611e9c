"""One broken model never costs the whole report: a missing, truncated or corrupt checkpoint, one
that needs pickle, and a missing, truncated or corrupt TensorBoard event file each get their model
skipped and listed under "skipped, and why", and the rest renders."""

import glob

import pytest
import torch
from report_rows import trial, write_checkpoint, write_events

from analysis.html_report import write_html_report
from analysis.storage import write_results

pytestmark = pytest.mark.slow  # trains the models it reports in a module fixture: about 5 s

CASES = {  # trial key → what is wrong with it
    "k0": None,
    "k1": "truncated checkpoint",
    "k2": "corrupt checkpoint",
    "k3": "missing checkpoint",
    "k4": "truncated event file",
    "k5": "corrupt event file",
    "k6": "missing event file",
    "k7": "checkpoint that needs pickle",
    "k8": "final checkpoint in the folder Tune suffixed",  # a trial Tune ran again as a new Tune trial
}


class NotWeights:  # an object a weights-only load refuses
    pass


def good_checkpoint(folder, key, extra=None):
    write_checkpoint(folder, key)
    if extra:  # an object a weights-only load refuses, added to the file
        state = torch.load(folder / "checkpoint_000000" / "trainer.pt", weights_only=True)
        torch.save({**state, **extra}, folder / "checkpoint_000000" / "trainer.pt")
    return folder / "checkpoint_000000" / "trainer.pt"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    experiment = tmp_path_factory.mktemp("broken")
    write_results(experiment, [trial(k, "blank_side", "beta_vae", 0.1 * i, 80 + i)
                               for i, k in enumerate(CASES)])
    for key, problem in CASES.items():
        folder = experiment / f"blank_side-{key}"
        folder.mkdir()
        if problem != "missing event file":
            write_events(folder)
        if problem != "missing checkpoint":
            extra = {"note": NotWeights()} if problem == "checkpoint that needs pickle" else None
            suffixed = experiment / f"blank_side-{key}_1a9c"  # Tune's name when disgen's was taken
            path = good_checkpoint(suffixed if problem == CASES["k8"] else folder, key, extra)
            data = path.read_bytes()
            if problem == "truncated checkpoint":
                path.write_bytes(data[: len(data) // 2])
            elif problem == "corrupt checkpoint":
                path.write_bytes(b"\x00garbage" * 100)
        (event,) = glob.glob(str(folder / "events.out.tfevents.*")) or [None]
        if problem == "truncated event file":
            data = open(event, "rb").read()
            open(event, "wb").write(data[:-7])
        elif problem == "corrupt event file":
            data = bytearray(open(event, "rb").read())
            data[-6] ^= 0x01  # a bit of the last scalar's value: the event still parses, its checksum fails
            open(event, "wb").write(bytes(data))
    out = experiment / "report"
    write_html_report([str(experiment)], str(out), max_models=len(CASES), n_bootstrap=5)
    return out / "report.html"


@pytest.mark.parametrize("key", ["k0", "k8"])
def test_the_good_model_is_drawn(report, key):
    page = report.read_text()
    assert f"<h3>{key} · " in page and f"{key}_reconstructions.png" in page and f"{key}_hinton.png" in page
    assert f"{key}_judged.png" in page and "what the rendering judge reads" in page  # M21's picture


@pytest.mark.parametrize("key,reason", [
    ("k1", "trainer.pt: truncated, "), ("k2", "trainer.pt: corrupt, "),
    ("k3", "missing: no checkpoint_*/trainer.pt for trial k3"),
    ("k4", "truncated: blank_side-k4/events.out.tfevents"),
    ("k5", "corrupt: blank_side-k5/events.out.tfevents"),
    ("k6", "missing: no TensorBoard event file in blank_side-k6/"),
    ("k7", "needs pickle to load (WeightsUnpickler error: Unsupported global"),
])
def test_each_broken_model_is_skipped_with_its_reason(report, key, reason):
    page = report.read_text()
    skipped = page[page.index("Skipped, and why (7)"):]
    row = skipped[skipped.index(f"<td>{key}</td>"):]
    row = row[:row.index("</tr>")]
    assert reason in row, row
    assert f"{key}_reconstructions.png" not in page


def test_a_trial_whose_folder_ends_as_anothers_draws_its_own_checkpoint(tmp_path):
    """Two trials whose keys begin with the same six characters (the folder names' suffix): each
    is drawn from the checkpoint that holds its own key, and a trial whose checkpoint is missing
    is skipped, never drawn from the other's."""
    from analysis.trained_models import _Experiment, _trained_weights

    experiment = tmp_path / "exp"
    first, second, third = "abcdef1111", "abcdef2222", "abcdef3333"
    for beta, key in ((1, first), (4, second)):
        good_checkpoint(experiment / f"blank_side-b{beta}-s0-{key[:6]}", key)
    found = _Experiment(str(experiment), str(tmp_path / "copies"))
    for key in (first, second):
        path, member = found.checkpoint_of(key, found.trial_folders(key))
        assert _trained_weights(path)[member][0]["trial_key"] == key
    with pytest.raises(Exception, match="missing: .* hold other trials"):
        found.checkpoint_of(third, found.trial_folders(third))
