"""The Ray side of sharing a dataset: how trials on one node read one copy of its images.

A sweep renders or loads each dataset once, on the driver, and hands it to Ray Tune with
``tune.with_parameters`` (sweeps/tuner.py). That puts the :class:`GroundTruthDataset` into the
object store once; every trial process on a node then maps the node's object store and gets numpy
arrays that are views of the same shared-memory bytes: zero-copy, and read-only (writing to them
raises). Splits are index arrays into those images; a trial converts to float per batch.

:class:`DatasetHolder` is a small actor that receives a dataset the same way and reports where its
images live, so a test can show the mechanism on a real Ray. Like the rest of the Ray wiring,
it lives in ``sweeps``, the one package that imports Ray.
"""

from __future__ import annotations

import os

import numpy as np
import ray


def memory_mapping(array: np.ndarray) -> dict:
    """Where ``array``'s bytes live in this process: the mapped file from ``/proc/self/maps`` (the
    object store's shared memory for a zero-copy array) and the byte offset within that file.
    Linux only."""
    address = array.__array_interface__["data"][0]
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, stop = (int(a, 16) for a in fields[0].split("-"))
            if start <= address < stop:
                return {"file": fields[5].strip() if len(fields) > 5 else "",
                        "offset": int(fields[2], 16) + address - start}
    return {"file": "", "offset": -1}


@ray.remote(num_cpus=0)
class DatasetHolder:
    """Holds the datasets it was given, as a Tune trial holds ``tune.with_parameters``' values."""

    def __init__(self, datasets: dict):
        self.datasets = datasets

    def describe(self, key) -> dict:
        """Process, node, writeability and memory location of dataset ``key``'s images."""
        images = self.datasets[key].images
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "writeable": bool(images.flags.writeable), "dtype": str(images.dtype),
                "checksum": int(images.sum(dtype=np.int64)), **memory_mapping(images)}
