"""On a CUDA device: a pack trained with vmap follows the trajectories of the same members on the
CPU, and a Trainer puts its model there. Skipped, with the reason, on a machine without CUDA (the
rest of the suite runs on whatever device is present; these need one)."""

import numpy as np
import pytest
import torch

from models import ModelConfig
from models.packed import PackedTrainer

pytestmark = pytest.mark.gpu


def losses(configs, images, device):
    trainer = PackedTrainer(configs, images, np.arange(len(images)), device=device, mode="vmap")
    found = {k: [] for k in range(len(configs))}
    for reports in trainer.run(report_every=1):
        for k, report in reports.items():
            found[k].append(report["loss"])
    return found, trainer


def test_a_pack_on_cuda_follows_its_cpu_trajectories():
    rng = np.random.default_rng(0)
    images = ((rng.random((64, 1, 64, 64)) > 0.7) * 255).astype(np.uint8)
    configs = [ModelConfig(steps=5, batch_size=16, lr=1e-3, beta=b, seed=s) for b, s in [(1.0, 0), (4.0, 1)]]
    on_gpu, trainer = losses(configs, images, "cuda")
    assert all(p.device.type == "cuda" for m in trainer.members for p in m.model.parameters())
    on_cpu, _ = losses(configs, images, "cpu")
    for k in on_cpu:  # TF32 convolutions on the GPU: agreement to a few parts in a thousand
        np.testing.assert_allclose(on_gpu[k], on_cpu[k], rtol=5e-3)


def test_cuda_is_what_the_suite_sees():
    assert torch.cuda.device_count() >= 1
