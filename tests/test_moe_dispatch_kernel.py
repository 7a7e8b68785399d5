"""The dispatch kernel (npu_lab/kernels/moe_gating/dispatch_kernel.py) against the host reference
moe_dispatch, over hypothesis-drawn routings; its timeline's invariants; its bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab.lang.errors import CapabilityError
from npu_lab.kernels.moe_gating import moe_dispatch
from npu_lab.kernels.moe_gating.dispatch_kernel import (MAX_CHUNK, check_against_reference, moe_dispatch_kernel_run,
                                                        moe_dispatch_tiling)


@st.composite
def routings(draw):
    n = draw(st.integers(1, 260))
    k = draw(st.integers(1, 8))
    e = draw(st.integers(1, 80))
    seed = draw(st.integers(0, 2**16))
    skew = draw(st.sampled_from(["uniform", "hot", "one"]))
    finished = draw(st.sampled_from([0.0, 0.0, 0.2]))
    rng = np.random.default_rng(seed)
    if skew == "uniform":
        idx = rng.integers(0, e, size=(n, k))
    elif skew == "hot":                       # most slots on a few experts: capacity drops
        idx = np.minimum(rng.geometric(0.5, size=(n, k)) - 1, e - 1)
    else:
        idx = np.full((n, k), rng.integers(0, e))
    idx[rng.random(n) < finished] = e         # finished rows: expert E
    mode = draw(st.sampled_from(["dropless", "capacity", "factor"]))
    kw = {}
    if mode == "capacity":
        kw["capacity"] = draw(st.integers(0, n * k))
    elif mode == "factor":
        kw["capacity_factor"] = draw(st.sampled_from([0.5, 1.0, 1.25, 2.0]))
    return idx.astype(np.int32), e, kw


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(routings())
def test_kernel_equals_moe_dispatch(case):
    idx, e, kw = case
    ref = moe_dispatch(idx, np.ones(idx.shape, np.float32), num_experts=e, **kw)
    got = moe_dispatch_kernel_run(idx, num_experts=e, **kw)
    check_against_reference(got, ref)
    assert got.tiling.dropPadMode == int(ref.capacity is not None)


def test_worked_example_and_a_tie_heavy_multi_block_case():
    idx = np.array([[1, 0], [1, 2], [0, 1], [1, 3]], np.int32)
    got = moe_dispatch_kernel_run(idx, num_experts=4)
    assert got.sorted_row_idx.tolist() == [1, 4, 0, 2, 5, 6, 3, 7]
    assert got.expanded_row_idx.tolist() == [2, 0, 3, 6, 1, 4, 5, 7]
    # 40 blocks of 32 slots all on two experts: the order across blocks must stay stable
    idx = (np.arange(640 * 2).reshape(640, 2) % 3 == 0).astype(np.int32)
    got = moe_dispatch_kernel_run(idx, num_experts=2, capacity=300)
    assert got.tiling.blockNum == 40
    check_against_reference(got, moe_dispatch(idx, np.ones(idx.shape, np.float32), num_experts=2, capacity=300))


@pytest.mark.parametrize("shape,e,cap", [((37, 2), 8, None), ((300, 4), 16, 50), ((1000, 8), 64, 100)])
def test_timing_only_gives_the_full_runs_timeline(shape, e, cap):
    rng = np.random.default_rng(1)
    idx = rng.integers(0, e, size=shape).astype(np.int32)
    full = moe_dispatch_kernel_run(idx, num_experts=e, capacity=cap).timeline
    fast = moe_dispatch_kernel_run(shape, num_experts=e, capacity=cap, timing_only=True).timeline
    assert fast.total_cycles == full.total_cycles
    assert fast.events().equals(full.events())


def test_costs_do_not_depend_on_the_routing():
    a = np.zeros((200, 2), np.int32)                            # every slot on expert 0
    b = np.random.default_rng(2).integers(0, 32, size=(200, 2)).astype(np.int32)
    ta = moe_dispatch_kernel_run(a, num_experts=32, capacity=10).timeline
    tb = moe_dispatch_kernel_run(b, num_experts=32, capacity=10).timeline
    assert ta.total_cycles == tb.total_cycles


def test_counters_are_atomic_adds_one_per_block_and_two_launches():
    got = moe_dispatch_kernel_run((300, 4), num_experts=16, timing_only=True)
    ev = got.timeline.events()
    names = ev["name"].astype(str)
    blocks = got.tiling.blockNum
    assert (names == "SetAtomicAdd").sum() == blocks          # one accumulating copy per block
    assert ev["launch"].nunique() == 2                         # sort+count, then place
    place = ev[ev["launch"] == ev["launch"].unique()[1]]
    words = place[(place["pipe"] == "MTE3") & (place["bytes"] == 4)]
    # the place launch scatters 2 words per slot (branchless), in every block
    assert len(words) == 2 * 300 * 4


def test_tiling_picks_the_smallest_chunk_that_fits_the_cores():
    assert moe_dispatch_tiling(10, 2, 8).chunk == 32
    t = moe_dispatch_tiling(4096, 8, 256)                     # 32768 slots on 48 cores
    assert t.chunk == 2048 and t.blockNum == 16
    assert moe_dispatch_tiling(48 * 32, 1, 8).chunk == 32 and moe_dispatch_tiling(48 * 32 + 1, 1, 8).chunk == 128


@pytest.mark.parametrize("call,match", [
    (lambda: moe_dispatch_tiling(48 * MAX_CHUNK + 1, 1, 8), "blocks of 2048"),
    (lambda: moe_dispatch_tiling(4, 2, 4096), "E <= 2048"),
    (lambda: moe_dispatch_kernel_run(np.array([[0, 9]]), num_experts=4), "not an expert"),
    (lambda: moe_dispatch_kernel_run(np.zeros((3, 2), np.int32), num_experts=4, capacity=7), "more than"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_310p_has_no_datacopypad():
    with pytest.raises(CapabilityError):
        moe_dispatch_kernel_run(np.zeros((4, 2), np.int32), num_experts=4, hw="ascend-310p3")


def test_a_full_chunk_of_2048_slots_with_2048_experts_fits_the_ub():
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 2048, size=(12500, 2)).astype(np.int32)       # > 48 x 512 slots: chunks of 2048
    got = moe_dispatch_kernel_run(idx, num_experts=2048, capacity=2)
    assert got.tiling.chunk == 2048
    check_against_reference(got, moe_dispatch(idx, np.ones(idx.shape, np.float32), num_experts=2048, capacity=2))
    assert got.tiling.blockNum == 13 and got.tiling.tailSlots == 25000 - 12 * 2048


def test_timing_only_jumps_over_the_per_slot_scatter():
    """The scatter loop (GetValue + two DataCopyPad a slot) runs S ahead of MTE3 at a period of its
    own: the timing-only run fast-forwards it (per-event periods in the stored segment) instead of
    simulating 2048 slots a block."""
    tl = moe_dispatch_kernel_run((4096, 8), num_experts=64, timing_only=True).timeline
    place = tl.launches[1]
    segs = [seg for trace in place.traces for seg in trace.segments]
    jumped = [(copies, period) for _, copies, period in segs if np.ndim(period)]
    assert jumped and max(c for c, _ in jumped) >= 400
    assert sum(len(cols[0]) for trace in place.traces for cols, _, _ in trace.segments) < 2000
