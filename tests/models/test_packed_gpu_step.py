"""A vmapped pack's step as built for the GPU (issue 31), checked on the CPU where it can be.

- ``device_sampling``: every member's rows and noise drawn at once from one generator on the
  group's device; deterministic given the seeds, each member's rows its own, nothing read back to
  the host during the steps. Off by default (the lone-trajectory tests check that path).
- ``cuda_graph``: the step over static buffers (``_CapturedStep``) is the vmapped step (run
  eagerly here; captured and replayed on a GPU, ``gpu``-marked below); on a CPU the switch changes
  nothing.
- A capture that fails (a stand-in raises inside it) falls back to eager steps, says why (the
  first exception of the chain), and the steps after it are the eager steps; the capture leaves
  its stream even when ``capture_end`` raises.
- ``compile``: the vmapped loss is what ``torch.compile`` wraps.
- The Adam moments handed from the stack to a member's own optimiser (and those read from a
  checkpoint) are laid out like their parameters: strides, dtype, device, and the step count where
  a fused Adam keeps it.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from random_images import random_images
from torch.utils._python_dispatch import TorchDispatchMode

import models.packed as packed_module
from models import GPUSettings, ModelConfig, Trainer, build
from models.engine import lay_out_like_parameters
from models.packed import PackedTrainer

N_IMAGES = 48


@pytest.fixture(scope="module")
def data():
    return random_images(N_IMAGES)
SAMPLING = GPUSettings(device_sampling=True)


def small(**fields) -> ModelConfig:
    return ModelConfig(**{"steps": 4, "batch_size": 8, "lr": 1e-3, **fields})


def changed(config: ModelConfig, **fields) -> ModelConfig:
    return ModelConfig.from_dict({**config.to_dict(), **fields})


PACK = [small(beta=1.0, seed=0),
        small(beta=4.0, seed=1, lr=3e-4, grad_clip_norm=0.5, kl_warmup_steps=3),
        small(beta=2.0, seed=2, input_noise_subpixel_std=0.1, input_noise_greyscale_std=0.05)]
# members of different splits: their own training rows, of different counts
ROWS = [np.arange(0, N_IMAGES, 2), np.arange(5, 20), np.array([1, 30, 47])]


def pack(data, configs=PACK, settings=SAMPLING, rows=ROWS, device="cpu") -> PackedTrainer:
    images, factors = data
    return PackedTrainer(configs, images, rows, device=device, mode="vmap", factors=factors,
                         settings=settings)


def losses(trainer: PackedTrainer) -> list[list[float]]:
    return [[report["loss"] for _, report in sorted(reports.items())]
            for reports in trainer.run(report_every=1)]


def group_of(trainer: PackedTrainer):
    (stack,) = trainer._stacks.values()
    return stack


# -- device sampling ------------------------------------------------------------------------------

def test_device_sampling_is_deterministic_given_the_seeds_and_off_by_default(data):
    first, second = losses(pack(data)), losses(pack(data))
    assert first == second
    reseeded = losses(pack(data, [changed(c, seed=c.optimisation.seed + 10) for c in PACK]))
    assert reseeded != first
    # off: each member's own generators, as alone (other batches and noise, so other losses)
    assert losses(pack(data, settings=GPUSettings())) != first
    assert GPUSettings().device_sampling is False


def test_device_sampled_rows_are_each_members_own_and_cover_them(data):
    trainer = pack(data)
    trainer.advance(1)
    sampler = group_of(trainer).sampler
    drawn = torch.cat([sampler.rows() for _ in range(200)], dim=1)
    assert drawn.shape == (len(PACK), 200 * 8)
    for k, rows in enumerate(ROWS):
        assert set(drawn[k].tolist()) == set(rows.tolist())  # its own rows, every one of them


def test_device_sampling_resumed_at_a_report_draws_what_the_uninterrupted_run_drew(data):
    uninterrupted = losses(pack(data))
    trainer = pack(data)
    trainer.advance(2)
    state = trainer.pack_state_dict()
    resumed = pack(data)
    resumed.load_pack_state_dict(state)
    assert losses(resumed) == uninterrupted[2:]


def test_device_sampling_leaves_pairs_on_the_host(data):
    configs = [small(objective="ada_gvae", seed=0), small(objective="ada_gvae", seed=1)]
    trainer = pack(data, configs, rows=np.arange(N_IMAGES))
    trainer.advance(1)
    assert group_of(trainer).sampler is None


class NoHostReads(TorchDispatchMode):
    """Raises at any operator that reads a tensor's value back to the host (``item``, ``float``,
    ``bool``, ``nonzero``, masked selection, ``unique``)."""

    SYNCING = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique", "_unique2",
               "unique_consecutive", "unique_dim", "repeat_interleave"}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in self.SYNCING:
            raise AssertionError(f"{func} reads a device value back to the host during a step")
        return func(*args, **(kwargs or {}))


def forbid_host_reads(monkeypatch):
    def refuse(name):
        def method(*args, **kwargs):
            raise AssertionError(f"Tensor.{name} during a step")
        return method

    for name in ("item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, refuse(name))


@pytest.mark.parametrize("objective", ["beta_vae", "factor_vae", "lie_group_vae"])
def test_device_sampled_steps_read_nothing_back_to_the_host(data, monkeypatch, objective):
    configs = [changed(c, objective=objective) for c in PACK]
    trainer = pack(data, configs)
    trainer.advance(1)  # built
    stack = group_of(trainer)
    with monkeypatch.context() as patch:
        forbid_host_reads(patch)
        with NoHostReads():
            blocks = stack.advance([0, 1, 2], 2)
    assert blocks[0].values.shape[0] == 2


# -- the captured step ----------------------------------------------------------------------------

@pytest.mark.parametrize("objective", ["beta_vae", "factor_vae"])
def test_the_step_over_static_buffers_is_the_vmapped_step(data, monkeypatch, objective):
    # What a CUDA graph captures, run eagerly on the CPU: the same losses and parameters as the
    # plain vmapped step, to float rounding (Adam's count is a float64 device tensor there).
    configs = [changed(c, objective=objective) for c in PACK]
    plain = pack(data, configs)
    expected = losses(plain)
    monkeypatch.setattr(packed_module._CapturedStep, "step", packed_module._CapturedStep.run)
    buffered = pack(data, configs)
    original = packed_module._VmapGroup.__init__

    def with_buffers(self, members):
        original(self, members)
        self.graph_wanted = True

    monkeypatch.setattr(packed_module._VmapGroup, "__init__", with_buffers)
    got = losses(buffered)
    assert isinstance(group_of(buffered).captured, packed_module._CapturedStep)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    for k in range(len(configs)):
        for (name, p), q in zip(plain.members[k].model.named_parameters(),
                                buffered.members[k].model.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)


def test_cuda_graph_changes_nothing_on_a_cpu(data):
    trainer = pack(data, settings=GPUSettings(device_sampling=True, cuda_graph=True))
    assert losses(trainer) == losses(pack(data))
    assert group_of(trainer).graph_wanted is False and group_of(trainer).captured is None


def force_graph(monkeypatch) -> None:
    """Every vmapped group steps through ``_CapturedStep`` (on a CPU too)."""
    original = packed_module._VmapGroup.__init__

    def with_buffers(self, members):
        original(self, members)
        self.graph_wanted = True

    monkeypatch.setattr(packed_module._VmapGroup, "__init__", with_buffers)


class RefuseEveryOp(TorchDispatchMode):
    """What an operator that cannot be captured does inside a capture: it raises (here at the
    first operator, so nothing of the step runs, as nothing runs while a CUDA stream captures)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        raise RuntimeError("operation not permitted when stream is capturing")


CAPTURE_END = "CUDA error: operation failed due to a previous error during capture"


def test_a_failed_capture_falls_back_to_eager_steps_and_says_why(data, monkeypatch, capsys):
    configs = [changed(c, steps=6) for c in PACK]
    eager = pack(data, configs)
    expected = losses(eager)
    captures = []

    def failing_capture(function, device):
        """A capture whose step raises, then whose capture_end raises its generic error over it."""
        captures.append(device)
        try:
            with RefuseEveryOp():
                function()
        finally:
            raise RuntimeError(CAPTURE_END)

    monkeypatch.setattr(packed_module, "capture_graph", failing_capture)
    force_graph(monkeypatch)
    trainer = pack(data, configs)
    got = losses(trainer)
    assert len(captures) == 1  # tried once, after the warm-up steps; never again
    why = "fell back: RuntimeError: operation not permitted when stream is capturing"
    assert trainer.graph_outcomes() == {"members 0-2": why}
    stack = group_of(trainer)
    assert stack.captured.graph is None and stack.captured.steps_taken == 6
    assert CAPTURE_END in str(stack.captured.error)  # the whole chain is kept
    assert why in capsys.readouterr().err  # a trial's log says so
    # the step it was capturing and every one after it: the eager steps
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    for alone, graphed in zip(eager.members, trainer.members):
        for (name, p), q in zip(alone.model.named_parameters(), graphed.model.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
            for moment in ("exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(alone.optimizer.state[p][moment],
                                           graphed.optimizer.state[q][moment], rtol=1e-5, atol=1e-9,
                                           msg=f"{name} {moment}")


def test_the_first_exception_of_a_chain_is_the_real_one():
    try:
        try:
            raise ValueError("the real one")
        except ValueError as real:
            raise RuntimeError("wrapped") from real
    except RuntimeError as wrapped:
        try:
            raise RuntimeError(CAPTURE_END)
        except RuntimeError as generic:
            generic.__context__ = wrapped
            assert str(packed_module.first_exception(generic)) == "the real one"
    alone = KeyError("x")
    assert packed_module.first_exception(alone) is alone


def test_the_capture_leaves_its_stream_when_capture_end_raises(monkeypatch):
    events = []

    class Graph:
        def capture_begin(self):
            events.append("begin")

        def capture_end(self):
            events.append("end")
            raise RuntimeError(CAPTURE_END)

        def pool(self):
            return (0, 1)

    @contextlib.contextmanager
    def stream(_stream):
        events.append("enter stream")
        try:
            yield
        finally:
            events.append("leave stream")

    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: "side")
    monkeypatch.setattr(torch.cuda, "stream", stream)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))

    def step():
        raise RuntimeError("operation not permitted when stream is capturing")

    with pytest.raises(RuntimeError, match="previous error during capture") as raised:
        packed_module.capture_graph(step, torch.device("cuda"))
    first = packed_module.first_exception(raised.value)
    assert str(first) == "operation not permitted when stream is capturing"
    assert events == ["sync", "enter stream", "begin", "end", "leave stream", "sync"]


@pytest.mark.gpu
def test_the_captured_step_replays_on_cuda_as_the_eager_step(data):
    fp32 = dict(tf32=False, device_sampling=True)
    rows = np.arange(N_IMAGES)
    configs = [changed(c, steps=8) for c in PACK]
    eager = pack(data, configs, GPUSettings(**fp32), rows, "cuda")
    graphed = pack(data, configs, GPUSettings(cuda_graph=True, **fp32), rows, "cuda")
    expected, got = losses(eager), losses(graphed)
    stack = group_of(graphed)
    assert stack.captured is not None and stack.captured.graph is not None  # 3 warm-up steps, then replays
    assert graphed.graph_outcomes() == {"members 0-2": "captured"}
    np.testing.assert_allclose(got, expected, rtol=2e-3)


# -- compile --------------------------------------------------------------------------------------

def test_compile_wraps_the_vmapped_loss(data, monkeypatch):
    compiled = []

    def fake_compile(function):
        def wrapper(*args, **kwargs):
            return function(*args, **kwargs)

        compiled.append(wrapper)
        return wrapper

    monkeypatch.setattr(torch, "compile", fake_compile)
    trainer = pack(data, settings=GPUSettings(compile=True))
    trainer.advance(1)
    stack = group_of(trainer)
    assert stack.terms in compiled and stack.own_terms in compiled


# -- the optimiser state a member is handed -------------------------------------------------------

def assert_laid_out_like_parameters(optimizer: torch.optim.Optimizer) -> None:
    fused = bool(optimizer.param_groups[0].get("fused"))
    for p in optimizer.param_groups[0]["params"]:
        state = optimizer.state[p]
        for name in ("exp_avg", "exp_avg_sq"):
            moment = state[name]
            assert (moment.shape, moment.stride(), moment.dtype, moment.device) == (
                p.shape, p.stride(), p.dtype, p.device), name
        assert state["step"].dim() == 0 and state["step"].dtype == torch.float32
        assert state["step"].device == (p.device if fused else torch.device("cpu"))


def test_moments_written_back_from_the_stack_are_laid_out_like_their_parameters(data):
    trainer = pack(data, settings=GPUSettings())
    convs = [m for m in trainer.members[0].model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)  # as on CUDA
    assert not all(c.weight.is_contiguous() for c in convs)
    for member in trainer.members:  # a fused Adam, as the plain path's on CUDA
        member.optimizer = torch.optim.Adam(member.model.parameters(), lr=1e-3, fused=True)
    trainer.advance(2)
    trainer.sync()
    for member in trainer.members:
        assert_laid_out_like_parameters(member.optimizer)
        before = member.step
        member.advance(1)  # the member goes on alone: its fused Adam takes the moments
        assert member.step == before + 1


@pytest.mark.gpu
def test_moments_written_back_on_cuda_suit_the_members_fused_adam(data):
    # the case of issue 31: channels-last weights and a fused Adam whose step count is on the GPU
    trainer = pack(data, settings=GPUSettings(tf32=False), rows=np.arange(N_IMAGES), device="cuda")
    trainer.advance(2)
    trainer.sync()
    for member in trainer.members:
        assert member.optimizer.param_groups[0]["fused"]
        assert_laid_out_like_parameters(member.optimizer)
        member.advance(1)


def test_moments_read_from_a_checkpoint_are_laid_out_like_their_parameters(data):
    images, _ = data
    config = small()
    trainer = Trainer(build(config), images, np.arange(N_IMAGES), config, "cpu")
    trainer.advance(1)
    state = trainer.state_dict()
    for moments in state["optimizer"]["state"].values():  # as a slice of a stack would be saved
        for name in ("exp_avg", "exp_avg_sq"):
            moments[name] = moments[name].contiguous()
    resumed = Trainer(build(config), images, np.arange(N_IMAGES), config, "cpu")
    resumed.load_state_dict(state)
    assert_laid_out_like_parameters(resumed.optimizer)
    # and the function alone: values unchanged
    p = next(resumed.model.parameters())
    resumed.optimizer.state[p]["exp_avg"] = resumed.optimizer.state[p]["exp_avg"].double()
    lay_out_like_parameters(resumed.optimizer)
    assert resumed.optimizer.state[p]["exp_avg"].dtype == p.dtype
