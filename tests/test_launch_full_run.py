"""A full run times one block per class and checks the others by their instruction stream
(npu_lab/lang/launch.py): it must give exactly the timeline of timing every block, and refuse
or raise everything the all-blocks run refuses or raises."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from npu_lab import GlobalTensor, SimulationError, get_preset, launch, npu_kernel
from npu_lab.kernels.moe_gating import moe_gating_topk
from npu_lab.kernels.scaled_add import scaled_add
from npu_lab.lang import RaceError, TBuf, TPosition, TQue, UbOverflowError
from npu_lab.lang.launch import full_timing_every_block

HW = get_preset("ascend-910b2")
COLUMNS = ["launch", "core", "block", "pipe", "name", "start_us", "end_us", "bytes", "elements", "source"]
_launch_module = sys.modules["npu_lab.lang.launch"]


def _assert_same_timeline(fast, full):
    assert fast.total_us == full.total_us
    assert fast.hbm_bytes == full.hbm_bytes
    assert fast.busy_us_by_pipe() == full.busy_us_by_pipe()
    a, b = full.events()[COLUMNS], fast.events()[COLUMNS]
    assert len(a) == len(b) and a.equals(b)


@pytest.mark.parametrize("version", ["v1", "v2", "v2c", "v3", "v4", "discrete"])
@pytest.mark.parametrize("shape", [(1, 40, 16, 2), (2, 33, 64, 4), (1, 96, 256, 8)])
def test_full_run_timeline_equals_timing_every_block(version, shape):
    B, S, E, K = shape
    x = np.random.default_rng(B * S + E).standard_normal((B, S, E)).astype(np.float32)
    fast = moe_gating_topk(x, K, version=version)
    with full_timing_every_block():
        full = moe_gating_topk(x, K, version=version)
    np.testing.assert_array_equal(fast.indices, full.indices)
    np.testing.assert_array_equal(fast.weights, full.weights)
    _assert_same_timeline(fast.timeline, full.timeline)


@pytest.mark.parametrize("n, block_dim", [(1 << 14, 8), (5000, 3), (64 * 48 + 8, 48)])
def test_scaled_add_full_run_equals_timing_every_block(n, block_dim):
    x, y = (np.random.default_rng(n).standard_normal(n).astype(np.float32) for _ in range(2))
    z, fast = scaled_add(x, y, 3.0, block_dim=block_dim, tile_len=1024)
    with full_timing_every_block():
        z_full, full = scaled_add(x, y, 3.0, block_dim=block_dim, tile_len=1024)
    np.testing.assert_array_equal(z, z_full)
    _assert_same_timeline(fast, full)


def _count_modes(monkeypatch):
    """Record the ``stream`` mode of every KernelContext the launch creates."""
    modes = []
    real = _launch_module.KernelContext

    def spy(*args, stream=None, **kwargs):
        modes.append(stream)
        return real(*args, stream=stream, **kwargs)

    monkeypatch.setattr(_launch_module, "KernelContext", spy)
    return modes


def _scratch(ctx, count, name="buf"):
    buf = TBuf()
    ctx.pipe.init_buffer(buf, 4 * count, name=name)
    return buf.get("float32")


def _all_same(block_dim, *args):
    return np.zeros(block_dim, dtype=int)


@npu_kernel(block_classes=_all_same)
def identical_kernel(ctx):
    buf = _scratch(ctx, 64)
    ctx.duplicate(buf, float(ctx.get_block_idx()), 64)


@npu_kernel
def unclassified_kernel(ctx):
    buf = _scratch(ctx, 64)
    ctx.duplicate(buf, 1.0, 64)


def test_one_block_per_class_is_timed_the_others_run_numerics(monkeypatch):
    modes = _count_modes(monkeypatch)
    launch(identical_kernel, 5, hw=HW)
    assert modes == ["record"] + ["numerics"] * 4
    modes.clear()
    with full_timing_every_block():
        launch(identical_kernel, 5, hw=HW)
    assert modes == [None] * 5
    modes.clear()
    launch(identical_kernel, 5, hw=HW, timing_only=True)        # timing-only: unchanged
    assert modes == [None]


def test_without_block_classes_every_block_gets_full_timing(monkeypatch):
    modes = _count_modes(monkeypatch)
    tl = launch(unclassified_kernel, 4, hw=HW)
    assert modes == [None] * 4
    assert len(tl.launches[0].traces) == 4


@npu_kernel(block_classes=_all_same)
def uneven_kernel(ctx):
    buf = _scratch(ctx, 64)
    for _ in range(ctx.get_block_idx() + 1):  # block b does b + 1 instructions
        ctx.duplicate(buf, 0.0, 64)


@npu_kernel(block_classes=_all_same)
def moved_vector_kernel(ctx):
    buf = _scratch(ctx, 192)
    ctx.duplicate(buf, 0.0, 64)
    src = buf[64 * (ctx.get_block_idx() % 2)]     # block 0 waits for the duplicate, block 1 need not
    ctx.add(buf[128], src, src, 64)


def test_a_different_stream_raises_naming_the_first_difference():
    with pytest.raises(SimulationError, match=r"blocks 0 and 1 do identical work.*first differ at entry \d+"):
        launch(uneven_kernel, 3, hw=HW)
    with pytest.raises(SimulationError, match="block_classes"):
        launch(moved_vector_kernel, 2, hw=HW)
    with full_timing_every_block(), pytest.raises(SimulationError, match="block_classes"):
        launch(uneven_kernel, 3, hw=HW)


@npu_kernel(block_classes=_all_same)
def scalar_address_kernel(ctx):
    buf = _scratch(ctx, 64)
    buf.set_value(ctx.get_block_idx(), 1.0)     # another address, the same timeline


def test_a_different_stream_with_the_same_timeline_is_accepted():
    """A scalar SetValue at a block-dependent address moves no clock: the old trace check decides."""
    tl = launch(scalar_address_kernel, 4, hw=HW)
    with full_timing_every_block():
        full = launch(scalar_address_kernel, 4, hw=HW)
    _assert_same_timeline(tl, full)


@npu_kernel(block_classes=_all_same)
def racy_kernel(ctx, gm):
    q = TQue(TPosition.VECIN, 1)
    ctx.pipe.init_buffer(q, 1, 256)
    t = q.alloc_tensor(np.float32)
    ctx.data_copy(t, gm, 64)
    t.get_value(0)                 # no MTE2_S flag: the scalar unit reads before the copy landed


def test_a_race_in_the_representative_is_raised():
    gm = GlobalTensor.from_array(np.ones(64, np.float32))
    with pytest.raises(RaceError):
        launch(racy_kernel, 3, gm, hw=HW)


@npu_kernel(block_classes=_all_same)
def greedy_kernel(ctx):
    _scratch(ctx, 64 if ctx.get_block_idx() == 0 else HW.ub_bytes)   # block 1 overflows UB


@npu_kernel(block_classes=_all_same)
def deep_enque_kernel(ctx):
    q = TQue(TPosition.VECIN, 1)
    ctx.pipe.init_buffer(q, 2, 256)
    for _ in range(1 + (ctx.get_block_idx() > 0)):   # block 1 enques twice into depth 1
        q.enque(q.alloc_tensor(np.float32))


@npu_kernel(block_classes=_all_same)
def use_after_free_kernel(ctx, gm):
    q = TQue(TPosition.VECIN, 1)
    ctx.pipe.init_buffer(q, 1, 256)
    t = q.alloc_tensor(np.float32)
    if ctx.get_block_idx() > 0:
        q.free_tensor(t)                      # block 1 uses the slot after giving it back
    ctx.data_copy(t, gm, 64)


@pytest.mark.parametrize("kernel, args, error", [
    (greedy_kernel, (), UbOverflowError),
    (deep_enque_kernel, (), SimulationError),   # QueueError is a SimulationError
    (use_after_free_kernel, (GlobalTensor.from_array(np.zeros(64, np.float32)),), Exception),
])
def test_errors_that_do_not_depend_on_timing_are_raised_in_every_block(kernel, args, error):
    with pytest.raises(error) as info:
        launch(kernel, 2, *args, hw=HW)
    assert "block_classes" not in str(info.value)     # raised by the rule, not by the stream check


@npu_kernel(block_classes=_all_same)
def atomic_scalar_address_kernel(ctx, gm):
    buf = _scratch(ctx, 64)
    ctx.duplicate(buf, 1.0, 64)
    ctx.set_flag("V_S", 0)
    ctx.wait_flag("V_S", 0)
    buf.set_value(ctx.get_block_idx(), 1.0)     # a block-dependent address: streams differ, timelines do not
    ctx.set_flag("S_MTE3", 0)
    ctx.wait_flag("S_MTE3", 0)
    ctx.set_atomic_add(np.float32)
    ctx.data_copy(gm, buf, 64)
    ctx.set_atomic_none()


def test_a_block_timed_again_does_not_add_its_atomic_copy_twice():
    """A block whose stream differs from its representative's is run a second time for its
    timeline; under SetAtomicAdd that second run must not accumulate into GM again."""
    gm = GlobalTensor.from_array(np.zeros(64, np.float32))
    tl = launch(atomic_scalar_address_kernel, 4, gm, hw=HW)
    np.testing.assert_array_equal(gm.data, np.full(64, 4.0, np.float32))
    gm_full = GlobalTensor.from_array(np.zeros(64, np.float32))
    with full_timing_every_block():
        full = launch(atomic_scalar_address_kernel, 4, gm_full, hw=HW)
    np.testing.assert_array_equal(gm_full.data, gm.data)
    _assert_same_timeline(tl, full)
