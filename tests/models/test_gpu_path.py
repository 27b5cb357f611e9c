"""On a CUDA device: what the GPU path promises. Skipped, with the reason, on a machine without
CUDA (the rest of the suite runs on whatever device is present; these need one).

- A pack trained with vmap on the GPU follows the trajectories of its members trained alone on
  the same GPU: the same batches (numpy's generators) and the same noise (each member's CUDA
  generator, seeded as alone). A CPU run would draw other noise, so it is not the reference.
- Steps, plain and packed, of every objective but CascadeVAE (whose category assignment runs on
  the CPU by design) and of both other tasks, never wait for the GPU (``torch.cuda.
  set_sync_debug_mode("error")`` raises at any synchronising call).
- bf16 autocast is on by default, on both paths, and off when the config says ``bf16=False``.
- The sizing estimate covers what a pack allocates.
"""

import numpy as np
import pytest
import torch

from models import GPUSettings, ModelConfig, Trainer, build, build_trainer
from models.packed import PackedTrainer, dataset_bytes, member_memory_bytes

pytestmark = pytest.mark.gpu
FP32 = GPUSettings(tf32=False)  # exact float32 arithmetic, to compare trajectories closely


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    images = ((rng.random((256, 1, 64, 64)) > 0.7) * 255).astype(np.uint8)
    classes = np.stack(np.unravel_index(np.arange(256), (4, 4, 4, 4)), axis=1)
    return images, classes


def small(**fields) -> ModelConfig:
    return ModelConfig(**{"steps": 5, "batch_size": 16, "lr": 1e-3, "bf16": False, **fields})


PACK = [small(beta=1.0, seed=0),
        small(beta=4.0, seed=1, lr=3e-4, grad_clip_norm=0.5, kl_warmup_steps=3),
        small(beta=2.0, seed=2, input_noise_subpixel_std=0.1, lr_milestones=(2,))]


def test_a_pack_on_cuda_follows_its_members_alone_on_cuda(data):
    images, _ = data
    pack = PackedTrainer(PACK, images, np.arange(len(images)), device="cuda", mode="vmap", settings=FP32)
    assert pack.vmapped_groups() == [[0, 1, 2]]
    losses = {k: [] for k in range(len(PACK))}
    for reports in pack.run(report_every=1):
        for k, report in reports.items():
            losses[k].append(report["loss"])
    for k, config in enumerate(PACK):
        alone = Trainer(build(config), images, np.arange(len(images)), config, "cuda", settings=FP32)
        expected = [r["loss"] for r in alone.run(report_every=1)]
        np.testing.assert_allclose(losses[k], expected, rtol=1e-4)  # grouped convolutions: rounding only
        assert all(p.device.type == "cuda" for p in pack.members[k].model.parameters())


def test_the_plain_trainer_holds_its_data_and_optimiser_on_the_gpu(data):
    images, _ = data
    trainer = Trainer(build(small()), images, np.arange(len(images)), small(), "cuda")
    assert isinstance(trainer.images, torch.Tensor) and trainer.images.device.type == "cuda"
    assert trainer.optimizer.defaults["fused"] and trainer.bf16 is False  # small() asks for float32
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.benchmark
    conv = next(m for m in trainer.model.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


def no_waiting(run_steps) -> None:
    """``run_steps()`` once to warm up (cuDNN's autotuning, allocations), then again with every
    synchronising call an error."""
    run_steps()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        run_steps()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@pytest.mark.parametrize("objective", ["beta_vae", "annealed_vae", "factor_vae", "beta_tcvae", "wae_mmd",
                                       "ada_gvae", "wae_gan", "dip_vae", "lie_group_vae"])
def test_steps_never_wait_for_the_gpu(data, objective):
    images, classes = data
    extra = {"kl_warmup_steps": 10, "grad_clip_norm": 1.0, "input_noise_subpixel_std": 0.05,
             "input_noise_greyscale_std": 0.05, "lr_milestones": (3,), "steps": 20}
    configs = [ModelConfig(objective=objective, batch_size=16, seed=s, beta=1.0 + s, **extra)
               for s in range(3)]
    plain = Trainer(build(configs[0]), images, np.arange(len(images)), configs[0], "cuda", factors=classes)
    no_waiting(lambda: plain.advance(3))
    pack = PackedTrainer(configs, images, np.arange(len(images)), device="cuda", mode="vmap", factors=classes)
    no_waiting(lambda: pack.advance(3))
    assert pack.members[0].step == 6


@pytest.mark.parametrize("task", ["ground_truth_decoder", "composition"])
def test_task_steps_never_wait_for_the_gpu(data, task):
    images, classes = data

    class Space:  # the classes are their own raw values
        n_factors = classes.shape[1]

        @staticmethod
        def raw_values(values):
            return values

    config = ModelConfig(task=task, objective="beta_vae", batch_size=16, steps=20, kl_warmup_steps=5,
                         architecture="higgins" if task == "ground_truth_decoder" else "burgess")
    trainer = build_trainer(config, images, classes, Space(), np.arange(len(images)), "cuda")
    no_waiting(lambda: trainer.advance(3))


def conv_output_dtypes(model: torch.nn.Module, seen: list) -> list:
    first = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    return [first.register_forward_hook(lambda _m, _i, output: seen.append(output.dtype))]


@pytest.mark.parametrize("bf16, dtype", [(None, torch.bfloat16), (True, torch.bfloat16),
                                         (False, torch.float32)])
def test_bf16_autocast_on_both_paths(data, bf16, dtype):
    images, _ = data
    configs = [ModelConfig(batch_size=16, steps=4, bf16=bf16, seed=s) for s in range(2)]
    plain = Trainer(build(configs[0]), images, np.arange(len(images)), configs[0], "cuda")
    seen: list = []
    hooks = conv_output_dtypes(plain.model, seen)
    losses = plain.advance(2).values[:, 0].cpu()
    assert plain.bf16 == (dtype == torch.bfloat16) and set(seen) == {dtype} and torch.isfinite(losses).all()
    pack = PackedTrainer(configs, images, np.arange(len(images)), device="cuda", mode="vmap")
    seen.clear()
    hooks += conv_output_dtypes(pack.members[0].model, seen)  # the module every vmapped member runs
    blocks = pack.advance(2)
    assert set(seen) == {dtype} and all(torch.isfinite(b.values).all() for b in blocks.values())
    for hook in hooks:
        hook.remove()


def test_bf16_stays_close_to_float32(data):
    images, _ = data
    results = {}
    for bf16 in (False, True):
        config = ModelConfig(batch_size=32, steps=30, bf16=bf16, lr=1e-3)
        trainer = Trainer(build(config), images, np.arange(len(images)), config, "cuda", settings=FP32)
        results[bf16] = [r["loss"] for r in trainer.run(report_every=10)]
    np.testing.assert_allclose(results[True], results[False], rtol=0.05)


@pytest.mark.slow
def test_compile_is_an_option_that_gives_the_same_numbers(data):
    images, _ = data
    configs, rows = [small(seed=s, beta=1.0 + s) for s in range(2)], np.arange(len(images))
    losses = []
    for settings in (FP32, GPUSettings(tf32=False, compile=True)):
        pack = PackedTrainer(configs, images, rows, device="cuda", mode="vmap", settings=settings)
        plain = Trainer(build(configs[0]), images, rows, configs[0], "cuda", settings=settings)
        losses.append((pack.advance(5)[0].values[:, 0].cpu(), plain.advance(5).values[:, 0].cpu()))
    (eager_pack, eager_plain), (compiled_pack, compiled_plain) = losses
    torch.testing.assert_close(compiled_pack, eager_pack, rtol=1e-3, atol=0)
    torch.testing.assert_close(compiled_plain, eager_plain, rtol=1e-3, atol=0)


def test_a_packs_memory_stays_within_its_estimate(data):
    images, _ = data
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    configs = [ModelConfig(batch_size=64, steps=3, seed=s, bf16=False) for s in range(8)]
    pack = PackedTrainer(configs, images, np.arange(len(images)), device="cuda", mode="vmap")
    pack.advance(3)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - start
    estimate = 8 * member_memory_bytes(configs[0]) + dataset_bytes(len(images), 1, 64)
    assert peak <= estimate, f"peak {peak / 2**20:.0f} MiB above the estimate {estimate / 2**20:.0f} MiB"


def test_cuda_is_what_the_suite_sees():
    assert torch.cuda.device_count() >= 1
