"""The driver's peak memory for a two-trial sweep on the full dSprites grid (737,280 images).

Runs ``python -m sweeps.paper_grid --grid benchmarks/grids/full_dsprites.yaml --scale tiny`` in a
fresh process and samples that process's resident set size (RSS, psutil) every 50 ms until it
exits. Only the driver process is counted: Ray's own processes (raylet, object store, workers) are
not. Extra arguments go to the sweep, e.g. ``-- --data-source prepared --data-dir DIR``.

``--prepare DIR`` first writes the full dSprites grid to ``DIR/dsprites`` in the prepared layout
(``python -m data_pipeline.prepare``, one process; skipped if a finished one is there) and then runs
the sweep from it (``--data-source prepared --data-dir DIR``). The trials' node cache is a fresh
temporary folder (``$DISGEN_CACHE``) unless ``--cache`` names one, so each run materialises the data
once, as a new node would. ``--real DIR`` writes the full grid as a dSprites npz in the real
file's layout (``imgs`` 0/1, ``latents_classes``; rendered, since nothing is downloaded) under
``DIR`` (once) and runs the sweep from it (``--data-dir DIR``).

    python benchmarks/driver_memory.py [--label procedural] [-- sweep arguments...]
    python benchmarks/driver_memory.py --label prepared --prepare /tmp/disgen-prepared
    python benchmarks/driver_memory.py --label real --real /tmp/disgen-real
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GRID = os.path.join(HERE, "grids", "full_dsprites.yaml")


def prepare(folder: str, env: dict) -> None:
    """The full dSprites grid in the prepared layout under ``folder/dsprites``, unless it is there."""
    sys.path.insert(0, ROOT)
    from data_pipeline import prepared

    out = prepared.join(folder, "dsprites")
    try:
        manifest = prepared.read_manifest(out)
        if manifest["n_images"] == 737_280:
            print(f"prepared: {out} is there ({manifest['content_id'][:16]})", flush=True)
            return
    except (FileNotFoundError, ValueError):
        pass
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "data_pipeline.prepare", "dsprites", "--out", out,
                    "--single-process"], env=env, check=True)
    print(f"prepared: {out} in {time.perf_counter() - started:.0f} s", flush=True)


def write_real_npz(folder: str) -> None:
    """The full dSprites grid as the real npz holds it, rendered, under ``folder`` (unless there)."""
    sys.path.insert(0, ROOT)
    import numpy as np

    from data_pipeline import factor_space, render
    from data_pipeline.loaders import DSPRITES_NPZ

    path = os.path.join(folder, DSPRITES_NPZ)
    if os.path.isfile(path):
        print(f"real file: {path} is there", flush=True)
        return
    os.makedirs(folder, exist_ok=True)
    started = time.perf_counter()
    space = factor_space("dsprites")
    classes = space.all_classes()
    imgs = np.concatenate([render("dsprites", classes[i:i + 65536]) for i in range(0, len(classes), 65536)])
    latents = np.concatenate([np.zeros((len(classes), 1), np.int64), classes], axis=1)
    np.savez(path + ".tmp.npz", imgs=imgs, latents_classes=latents)
    os.replace(path + ".tmp.npz", path)
    print(f"real file: {path} written in {time.perf_counter() - started:.0f} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="procedural", help="a name for this measurement's line")
    parser.add_argument("--prepare", metavar="DIR", default=None,
                        help="prepare the full grid under DIR/dsprites (once) and sweep from it")
    parser.add_argument("--real", metavar="DIR", default=None,
                        help="write the full grid as a dSprites npz under DIR (once) and sweep from it")
    parser.add_argument("--cache", metavar="DIR", default=None,
                        help="the trials' node cache ($DISGEN_CACHE; default: a fresh temporary folder)")
    parser.add_argument("sweep_args", nargs="*", help="more arguments for the sweep (after --)")
    args = parser.parse_args()
    storage = tempfile.mkdtemp(prefix="disgen-driver-memory-")
    cache = args.cache or os.path.join(storage, "node-cache")
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"), "DISGEN_CACHE": cache,
           "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    sweep_args = list(args.sweep_args)
    if args.prepare:
        prepare(args.prepare, env)
        sweep_args = ["--data-source", "prepared", "--data-dir", args.prepare, *sweep_args]
    if args.real:
        write_real_npz(args.real)
        sweep_args = ["--data-dir", args.real, *sweep_args]
    command = [sys.executable, "-m", "sweeps.paper_grid", "--grid", GRID, "--scale", "tiny",
               "--storage-path", storage, "--name", "bench", *sweep_args]
    started = time.perf_counter()
    log = open(os.path.join(storage, "sweep.log"), "w")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    watched = psutil.Process(process.pid)
    peak = 0
    while process.poll() is None:
        try:
            peak = max(peak, watched.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.05)
    process.wait()
    wall = time.perf_counter() - started
    log.close()
    if process.returncode != 0:
        print(open(os.path.join(storage, "sweep.log")).read()[-4000:])
        print(f"sweep failed with exit code {process.returncode}")
        return process.returncode
    memory = psutil.virtual_memory().total / 2**30
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {memory:.0f} GiB, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"label={args.label} driver_peak_rss_gib={peak / 2**30:.2f} wall_s={wall:.0f} "
          f"command={' '.join(command[1:])}")
    if not args.cache:
        shutil.rmtree(storage, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
