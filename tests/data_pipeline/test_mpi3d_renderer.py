"""The MPI3D-like generator: its images are pinned by checksums taken from the first (per-image
loop) renderer, so a faster renderer must draw the same bytes."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from data_pipeline import mpi3d
from data_pipeline.spaces import mpi3d_space

# sha256 of the uint8 bytes rendered by GENERATOR_VERSION 1's per-image loop (before vectorising).
REDUCED_SHA256 = "644e9943427f08dee4653b514431babda3b89047f1a66c888b8cdea3bba1c484"
SAMPLE_SHA256 = "23ad18880ce34ebfca39ecb63c0965ad937b4f0cfad913483d54c24b2b690356"  # 3,000 points, seed 16
# grid rows 500,000..509,999
SLICE_SHA256 = "320ea22fda8f44fc6c7be67f860a6a3d48d9e80a09031177a38307258c7405c4"


def _sha(images: np.ndarray) -> str:
    assert images.dtype == np.uint8 and images.shape[1:] == (64, 64, 3)
    return hashlib.sha256(np.ascontiguousarray(images).tobytes()).hexdigest()


def test_reduced_grid_matches_the_first_renderer():
    assert _sha(mpi3d.render(mpi3d.reduced_classes())) == REDUCED_SHA256


def test_random_sample_of_the_full_grid_matches_the_first_renderer():
    space = mpi3d_space()
    index = np.sort(np.random.default_rng(16).choice(space.n_images, 3000, replace=False))
    assert _sha(mpi3d.render(space.classes_of(index))) == SAMPLE_SHA256


def test_contiguous_slice_matches_the_first_renderer():
    space = mpi3d_space()
    assert _sha(mpi3d.render(space.classes_of(np.arange(500_000, 510_000)))) == SLICE_SHA256


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_chunk_size_and_order_do_not_change_the_images(chunk):
    space = mpi3d_space()
    index = np.random.default_rng(3).choice(space.n_images, 300, replace=False)  # unsorted
    classes = space.classes_of(index)
    whole = mpi3d.render(classes)
    assert np.array_equal(mpi3d.render(classes, chunk=chunk), whole)
    assert np.array_equal(mpi3d.render(classes[::-1])[::-1], whole)
    assert np.array_equal(mpi3d.render(classes[5:6])[0], whole[5])
