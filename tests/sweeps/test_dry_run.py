"""``python -m sweeps.paper_grid ... --dry-run``: the plan, without Ray and without writing anything."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

# Both paper grids planned in one process, which must never import Ray
PLAN_BOTH = """
import sys
from sweeps.paper_grid import main
for preset in ("montero2021", "montero2022"):
    assert main(["--preset", preset, "--scale", "full", "--gpus-per-trial", "1",
                 "--dry-run", "--storage-path", sys.argv[1]]) == 0
print("ray modules:", sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.")))
"""


@pytest.mark.slow
def test_the_paper_grids_plan_into_wide_packs_without_ray(tmp_path):
    done = subprocess.run([sys.executable, "-c", PLAN_BOTH, str(tmp_path / "results")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "ray modules: []" in out
    assert not (tmp_path / "results").exists()  # nothing written
    plans = out.split("Plan of ")[1:]
    assert [p.split(" ", 1)[0] for p in plans] == ["montero2021", "montero2022"]
    # montero2022: M22's 32 runs (sweeps.presets.M22_RUNS) × 3 seeds
    for plan, trials, most in zip(plans, (144, 96), (16, 37)):
        total, packs = map(int, re.search(r"^(\d+) trials in (\d+) packs$", plan, re.M).groups())
        assert total == trials and packs <= most
        sizes = [int(n) for n in re.findall(r"^    pack +\d+: +(\d+) trials? ", plan, re.M)]
        assert len(sizes) == packs and sum(sizes) == trials and max(sizes) <= 64
        assert "per trial:   1 CPU and 1 GPU" in plan
        assert "evaluation:  in CPU-only Ray tasks" in plan
        assert re.search(r"cost: +[\d,]+ training images; [\d,.]+ GPU-hours .*; [\d,.]+ CPU-core-hours", plan)
        # no GPU was measured: as many as fit in the one assumed
        assert re.search(r"pack size:   \d+ \(auto: \d+ members of .* fit in 80% of 1 GPU \(24.0 GiB free, "
                         r"assumed: a 24 GiB GPU\)", plan)
        # each pack says how long its members train: one figure, or a range over their splits
        lengths = re.findall(r"^    pack .*batch_size=\d+ .*lr[= ][^,]*, [\d,]+( to [\d,]+)? steps; ", plan,
                             re.M)
        assert len(lengths) == packs
    # M21's ground-truth decoder: 1,000 epochs of 10 steps (M21's code's epoch) on every split, not
    # 1,000 passes over each split's training images
    decoders = re.findall(r"^    pack +\d+: +(\d+) trials? +(\w+) .*task=ground_truth_decoder "
                          r".*batch_size=64 lr=0.001, ([\d,]+(?: to [\d,]+)?) steps; ", plans[0], re.M)
    assert decoders == [("9", "dsprites", "10,000"), ("9", "shapes3d", "10,000")], decoders


@pytest.mark.slow
def test_a_dry_run_checks_its_input_and_plans_cpu_trials(tmp_path, capsys):
    from sweeps.paper_grid import main

    common = ["--scale", "tiny", "--storage-path", str(tmp_path), "--dry-run"]
    assert main([*common, "--pack-size", "0"]) == 2
    assert "--pack-size: must be a whole number >= 1" in capsys.readouterr().err
    assert main(common) == 0
    out = capsys.readouterr().out
    assert "pack size:   1 (auto: 1 on CPUs" in out and out.rstrip().endswith("4 trials in 4 packs")
    assert "evaluation:  in the trial on CPUs; with GPUs, in CPU-only tasks" in out
    assert main([*common, "--gpus-per-trial", "0.25"]) == 0  # auto fills a quarter of an assumed GPU
    out = capsys.readouterr().out
    size = re.search(r"pack size:   (\d+) \(auto: (\d+) members of burgess/beta_vae at batch 32 fit in "
                     r"80% of 0.25 GPU \(6.0 GiB free, assumed: a 24 GiB GPU\), at \d+ MiB each", out)
    assert size and int(size[1]) == min(int(size[2]), 64) >= 4  # the fit, or the cap when more fit
    assert ("capped at 64" in out) == (int(size[2]) > 64)
    assert out.rstrip().endswith("4 trials in 1 packs")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_pack_size_that_does_not_fit_is_refused_in_one_line_naming_the_size_that_fits(tmp_path, capsys):
    from sweeps.paper_grid import main

    # the cluster's line of issue 33, which planned packs of 32 with a warning and exited 0
    argv = ["--preset", "dittadi2021", "--scale", "full", "--gpus-per-trial", "1", "--storage-path",
            str(tmp_path), "--dry-run"]
    assert main([*argv, "--pack-size", "32"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    refused = re.fullmatch(r"error: --pack-size 32 does not fit: 32 members of dittadi/ada_gvae at batch 64 "
                           r"need about [\d.]+ GiB with their process and data, and at most (\d+) fit in 80% "
                           r"of 1 GPU \(24.0 GiB free, assumed: a 24 GiB GPU\); use --pack-size (\d+) or "
                           r"--pack-size auto\n", err)
    assert refused and refused[1] == refused[2], err
    fits = refused[1]
    assert main([*argv, "--pack-size", fits]) == 0  # the size it names is planned
    planned = capsys.readouterr().out
    assert f"pack size:   {fits} (as asked (--pack-size {fits}; up to {fits} members" in planned
    assert list(tmp_path.iterdir()) == []


def test_the_plan_names_each_split_that_holds_out_fewer_grid_combinations_than_n_nll():
    from sweeps.dry_run import held_out_shortfalls
    from sweeps.trials import TrialConfig

    def trial(split, n_nll, source="procedural", dataset="dsprites"):
        return TrialConfig.complete({"dataset": dataset, "split": split, "n_images": 20_000, "data_seed": 0,
                                     "data_source": source, "report_every": 5, "n_nll": n_nll,
                                     "n_metric": 100})

    # leave1out: 1 shape × 4 scales × 12 orientations × 11 × 11 positions of the 737,280-point grid
    lines = held_out_shortfalls([
        trial("leave1out", 10_000), trial("leave1out", 1_000), trial("leave1out", 6_000),
        trial("blank_side", 10_000), trial("leave1out", 10_000, "real"),
        trial("leave1out", 100, dataset="shapes3d")])
    assert lines == [
        "  held out:    dsprites leave1out: 5,808 held-out combinations of the 737,280-point grid, "
        "fewer than n_nll 6,000, 10,000: its test_nll uses all 5,808",
        "  held out:    shapes3d leave1out: 72 held-out combinations of the 480,000-point grid, "
        "fewer than n_nll 100: its test_nll uses all 72"]


@pytest.mark.slow
def test_the_plan_names_the_card_it_assumed_and_plans_for_the_one_gpu_memory_names(tmp_path, capsys):
    """Issue 42: the dry run cannot see the cluster's GPU. It assumes cluster.yaml's 24 GiB A10G and
    says so, and --gpu-memory GIB plans for another card: M21's full grid in packs of 64 fits an
    80 GiB card (its largest members, the ground-truth decoder's MLP, step one after another)."""
    from sweeps.paper_grid import main

    argv = ["--preset", "montero2021", "--scale", "full", "--pack-size", "64", "--gpus-per-trial", "1",
            "--storage-path", str(tmp_path), "--dry-run"]
    assert main(argv) == 2
    assert re.search(r"at most \d+ fit in 80% of 1 GPU \(24.0 GiB free, assumed: a 24 GiB GPU\)",
                     capsys.readouterr().err)
    assert main([*argv, "--gpu-memory", "80"]) == 0
    out = capsys.readouterr().out
    assert "  GPU:         a card of 80 GiB, as --gpu-memory says" in out
    assert re.search(r"pack size:   64 \(as asked \(--pack-size 64; up to \d+ members of higgins/vae .* "
                     r"fit in 1 GPU \(80.0 GiB free\)\)\)", out)
    assert main([*argv[:-1], "--gpu-memory", "80"]) == 2  # a run measures its GPU: not without --dry-run
    assert "--gpu-memory plans a --dry-run" in capsys.readouterr().err
    assert main([*argv, "--gpu-memory", "0"]) == 2
    assert "--gpu-memory must be a finite number of GiB > 0" in capsys.readouterr().err
    argv[argv.index("--pack-size") + 1] = "auto"  # without --gpu-memory: the card assumed is named
    assert main(argv) == 0
    assert "  GPU:         a card of 24 GiB assumed (cluster.yaml's A10G); --gpu-memory GIB plans" \
        in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
