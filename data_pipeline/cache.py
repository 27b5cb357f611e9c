"""On-disk cache of generated images, keyed by generator version and verified by checksum.

A cached set lives in ``<cache_dir>/<dataset>-v<version>-<key>.npy`` with a JSON sidecar holding
its sha256. ``key`` is a hash of the grid points rendered. On reload the checksum is recomputed;
a mismatch (a truncated or edited file) warns and re-renders. Bumping a generator's
``GENERATOR_VERSION`` changes every key, so stale images are never reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np


def cache_dir_from_env(cache_dir=None) -> Path | None:
    """``cache_dir`` if given, else ``$DISGEN_CACHE`` if set, else None (no caching)."""
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("DISGEN_CACHE")
    return Path(env) if env else None


def sha256_of_array(array: np.ndarray) -> str:
    """sha256 of an array's bytes, shape and dtype."""
    digest = hashlib.sha256(f"{array.shape}|{array.dtype}|".encode())
    digest.update(np.ascontiguousarray(array).data)
    return digest.hexdigest()


def cache_path(dataset: str, version: int, classes: np.ndarray, cache_dir) -> Path:
    """Where the images of ``classes`` rendered by generator ``version`` would be cached."""
    key = sha256_of_array(np.asarray(classes, dtype=np.int64))[:16]
    return Path(cache_dir) / f"{dataset}-v{version}-{key}.npy"


def cached_images(dataset: str, version: int, classes: np.ndarray, render, cache_dir=None) -> np.ndarray:
    """``render()``'s images (generator ``version``), from the cache when a verified copy is there."""
    folder = cache_dir_from_env(cache_dir)
    if folder is None:
        return render()
    path = cache_path(dataset, version, classes, folder)
    sidecar = path.with_suffix(".json")
    if path.is_file() and sidecar.is_file():
        images = np.load(path)
        expected = json.loads(sidecar.read_text()).get("sha256")
        if sha256_of_array(images) == expected:
            return images
        warnings.warn(f"cached images {path} fail their checksum; rendering again", stacklevel=2)
    images = render()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, images)
    os.replace(tmp, path)
    sidecar.write_text(json.dumps({"dataset": dataset, "sha256": sha256_of_array(images),
                                   "shape": list(images.shape)}))
    return images
