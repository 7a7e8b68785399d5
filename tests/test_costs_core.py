"""The per-core cost model of issue 9 §1-2 as invariants (docs/cost_model.md): outstanding DMA
requests, burst efficiency, one latency per multi-block copy, GM alignment (A2 only), the
pipelined vector unit with automatic read-after-write waits, priced barriers and flags, and the
scalar unit's V->S drains. Each test states the rule it checks; none pins a figure."""

from __future__ import annotations

import numpy as np

from npu_lab import GlobalTensor, KernelContext, get_preset, launch, npu_kernel
from npu_lab.lang import DataCopyParams, TBuf, TPosition, TQue
from npu_lab.sim.core import PIPE_CODE, VECTOR_PIPES, CoreState
from npu_lab.sim.costs import burst_efficiency, dma_occupancy_cycles, gm_aligned

HW = get_preset("ascend-910b2")
HW310 = get_preset("ascend-310p3")


def ctx_on(hw=HW, **kwargs) -> KernelContext:
    return KernelContext(hw, 0, 1, **kwargs)


def ub(ctx, dtype, count, name):
    buf = TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(buf, count * np.dtype(dtype).itemsize, name=name)
    return buf.get(dtype)


def gm(n, dtype=np.float32, name="gm"):
    return GlobalTensor.from_array(np.arange(n).astype(dtype), name)


def pipe_events(ctx, pipe):
    """(start, end, ready) of every instruction on ``pipe``, in issue order."""
    code = PIPE_CODE[pipe]
    return [(ev[2], ev[3], ev[7]) for ev in ctx.core.events if ev[0] == code]


# ---- §1 DMA: outstanding requests, one latency per request ---------------------------------------


def test_copies_overlap_their_latencies_up_to_the_outstanding_limit():
    """Small copies issued back to back hold MTE2 only for issue + transfer; their latencies
    overlap, so N of them complete long before N x latency. Copy N+1 cannot start before copy 1
    completed."""
    hw = HW.replace(dma_latency_cycles=8000.0)     # long enough that N copies fit inside it
    n = hw.dma_outstanding_requests
    ctx = ctx_on(hw)
    a = ub(ctx, np.float32, 8 * (n + 1), "a")
    src = gm(8 * (n + 1))
    for i in range(n + 1):
        ctx.data_copy(a[8 * i], src[8 * i], 8)
    ev = pipe_events(ctx, "MTE2")
    assert all(ready - end == hw.dma_latency_cycles for _, end, ready in ev)
    assert ev[n - 1][2] < n * hw.dma_latency_cycles / 4          # the first N overlapped
    assert ev[n][0] >= ev[0][2]                                    # copy N+1 waits for copy 1
    assert ev[n - 1][0] < ev[0][2]                                 # copy N did not


def test_many_small_copies_are_issue_bound_not_latency_bound():
    """200 small copies take about 200 x their pipe occupancy, not 200 x the latency."""
    ctx = ctx_on()
    a = ub(ctx, np.float32, 8, "a")
    src = gm(8)
    for _ in range(200):
        ctx.data_copy(a, src, 8)
    ev = pipe_events(ctx, "MTE2")
    occupancy = ev[0][1] - ev[0][0]
    assert ev[-1][2] < 200 * max(occupancy, HW.dma_latency_cycles / HW.dma_outstanding_requests) \
        + 2 * HW.dma_latency_cycles
    assert ev[-1][2] < 200 * HW.dma_latency_cycles / 4


def test_a_multi_block_copy_pays_one_latency():
    """DataCopyParams with 8 blocks is one request: one latency, complete long before 8 single
    copies of the same blocks issued one after another with a wait between them."""
    ctx = ctx_on()
    a = ub(ctx, np.float32, 8 * 64, "a")
    ctx.data_copy(a, gm(16 * 64), DataCopyParams(8, 8, 8, 0))      # 8 blocks of 256 B, gaps of 256 B
    ((start, end, ready),) = pipe_events(ctx, "MTE2")
    assert ready - end == HW.dma_latency_cycles
    assert ready - start < 2 * HW.dma_latency_cycles


# ---- §2 burst efficiency and alignment ----------------------------------------------------------------


def test_burst_efficiency_rises_with_the_burst_and_is_full_from_16_kb():
    sizes = [32, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536]
    eff = [burst_efficiency(HW, s) for s in sizes]
    assert eff == sorted(eff) and eff[0] < eff[-1]
    assert burst_efficiency(HW, HW.dma_burst_full_bytes) == 1.0
    assert burst_efficiency(HW, HW.dma_burst_full_bytes // 2) < 1.0
    assert 0 < eff[0] <= 1


def test_one_big_copy_beats_many_small_ones_per_byte():
    """尽量一次搬运较大的数据块: 16 KB in one copy holds the pipe for less time than in 64 copies
    of 256 B."""
    bpc = HW.bytes_per_cycle(HW.core_dma_bandwidth_gbps)
    one = dma_occupancy_cycles(HW, 16384, bpc, 16384)
    many = 64 * dma_occupancy_cycles(HW, 256, bpc, 256)
    assert one < many / 2


def test_gm_alignment_costs_on_the_910b2_only():
    """A copy that keeps GM 512-B aligned is faster than one drifting onto 32-B boundaries on the
    A2 chip; the 310P has no such penalty (GM地址尽量512B对齐)."""
    assert gm_aligned(HW, 4096) and not gm_aligned(HW, 4096 + 32)
    assert not gm_aligned(HW, 512, block_count=4, gm_step_bytes=544)
    for hw, slower in ((HW, True), (HW310, False)):
        bpc = hw.bytes_per_cycle(hw.core_dma_bandwidth_gbps)
        aligned = dma_occupancy_cycles(hw, 8192, bpc, 8192, aligned=True)
        drifting = dma_occupancy_cycles(hw, 8192, bpc, 8192, aligned=False)
        assert (drifting > aligned) == slower


def test_timing_depends_on_sizes_not_data():
    """Same copies and instructions on different data: the same timeline."""
    def run(values):
        ctx = ctx_on()
        a = ub(ctx, np.float32, 512, "a")
        ctx.data_copy(a, GlobalTensor.from_array(values, "x"), 512)
        return [ev[2:4] + (ev[7],) for ev in ctx.core.events]
    assert run(np.zeros(512, np.float32)) == run(np.arange(512, dtype=np.float32))


# ---- §3 the vector pipe --------------------------------------------------------------------------------


def _chain(dependent: bool) -> float:
    """10 adds of 256 floats; dependent: each reads the previous one's result."""
    ctx = ctx_on(timing_only=True)
    src = ub(ctx, np.float32, 256, "src")
    outs = [ub(ctx, np.float32, 256, f"o{i}") for i in range(10)]
    prev = src
    for o in outs:
        ctx.adds(o, prev if dependent else src, 1.0, 256)
        prev = o
    return ctx.core.done["V"]


def test_a_dependent_chain_costs_more_than_independent_instructions():
    """Independent V instructions overlap their latency; each dependent one waits for its
    producer to complete (what Ascend C's auto-sync inserts)."""
    dep, ind = _chain(True), _chain(False)
    assert dep > ind
    assert dep - ind == 9 * HW.vector_latency_cycles


def test_vector_busy_counts_occupancy_not_latency():
    ctx = ctx_on(timing_only=True)
    a, b = ub(ctx, np.float32, 64, "a"), ub(ctx, np.float32, 64, "b")
    ctx.adds(b, a, 1.0, 64)
    trace = ctx.core.finish()
    (start, end, ready), = [(s, e, r) for s, e, r in zip(trace.start_cycles, trace.end_cycles,
                                                         trace.ready_cycles)]
    assert trace.busy_cycles_by_pipe()["V"] == end - start
    assert ready == end + HW.vector_latency_cycles


def test_pipe_barrier_v_waits_for_completion_plus_its_cost():
    """PipeBarrier<PIPE_V>: the next V instruction waits until every issued V instruction
    completed, plus pipe_barrier_cycles — even when independent."""
    def second_start(barrier):
        ctx = ctx_on(timing_only=True)
        a, b, c = (ub(ctx, np.float32, 64, n) for n in "abc")
        ctx.adds(b, a, 1.0, 64)
        if barrier:
            ctx.pipe_barrier("PIPE_V")
        ctx.adds(c, a, 2.0, 64)
        first, second = pipe_events(ctx, "V")
        return first, second
    (s0, e0, r0), (s1, _, _) = second_start(False)
    assert s1 == e0                                   # independent: back to back
    (s0, e0, r0), (s1, _, _) = second_start(True)
    assert s1 == r0 + HW.pipe_barrier_cycles


# ---- §4 flags and the scalar unit ---------------------------------------------------------------------


def test_get_value_after_vector_work_drains_the_vector_pipe_and_is_counted():
    """V -> S: the scalar unit waits until the vector result completed, plus the flag; the round
    trip is counted in the trace."""
    ctx = ctx_on()
    a, b = ub(ctx, np.float32, 64, "a"), ub(ctx, np.float32, 64, "b")
    ctx.duplicate(a, 1.0, 64)
    ctx.adds(b, a, 1.0, 64)
    ctx.set_flag("V_S", 0)
    ctx.wait_flag("V_S", 0)
    assert b.get_value(0) == 2.0
    (_, _, v_ready) = pipe_events(ctx, "V")[-1]
    (s_start, _, _) = pipe_events(ctx, "S")[-1]
    assert s_start == v_ready + HW.sync_flag_cycles
    trace = ctx.core.finish()
    assert trace.scalar_drains == 1 and trace.scalar_drain_cycles > 0


def test_pipe_barrier_all_drains_everything_and_is_counted():
    ctx = ctx_on()
    a = ub(ctx, np.float32, 64, "a")
    ctx.data_copy(a, gm(64), 64)
    ctx.pipe_barrier("PIPE_ALL")
    ctx.scalar("after", ops=1)
    (_, _, load_ready), = pipe_events(ctx, "MTE2")
    (s_start, _, _), = pipe_events(ctx, "S")
    assert s_start == load_ready + HW.pipe_barrier_cycles
    assert ctx.core.scalar_drains == 1


def test_a_flag_costs_sync_flag_cycles_after_the_source_completed():
    ctx = ctx_on()
    a, b = ub(ctx, np.float32, 64, "a"), ub(ctx, np.float32, 64, "b")
    ctx.data_copy(a, gm(64), 64)
    ctx.set_flag("MTE2_V", 0)
    ctx.wait_flag("MTE2_V", 0)
    ctx.adds(b, a, 1.0, 64)
    (_, _, load_ready), = pipe_events(ctx, "MTE2")
    (v_start, _, _), = pipe_events(ctx, "V")
    assert v_start == load_ready + HW.sync_flag_cycles


def test_core_state_without_latencies_is_the_bare_in_order_model():
    """CoreState's defaults: no latency, free flags — the model of docs/cost_model.md alone."""
    cs = CoreState(VECTOR_PIPES, 2)
    _, end = cs.issue("MTE2", "load", 100)
    assert cs.done["MTE2"] == end


# ---- timing-only == full, with a loop carrying a vector dependency ----------------------------------


@npu_kernel(block_classes=lambda bd, *a: np.zeros(bd, int))
def _carried(ctx, x_gm, y_gm, tiles):
    """acc += tile, tile by tile: each iteration's first V instruction reads the previous one's
    result (a vector write in flight across the loop edge)."""
    q = TQue(TPosition.VECIN, 2)
    ctx.pipe.init_buffer(q, 2, 256 * 4, name="x")
    acc = ub(ctx, np.float32, 256, "acc")
    tmp = ub(ctx, np.float32, 256, "tmp")
    ctx.duplicate(acc, 0.0, 256)
    for j in ctx.tile_loop(tiles):
        x = q.alloc_tensor(np.float32)
        ctx.data_copy(x, x_gm[256 * j], 256)
        q.enque(x)
        x = q.deque(np.float32)
        ctx.add(tmp, acc, x, 256)
        ctx.adds(acc, tmp, 0.0, 256)
        q.free_tensor(x)
    ctx.set_flag("V_MTE3", 0)
    ctx.wait_flag("V_MTE3", 0)
    ctx.data_copy(y_gm, acc, 256)


def test_fast_forwarded_loop_with_latencies_equals_the_slow_run():
    tiles = 40
    x = np.ones(256 * tiles, np.float32)
    y = GlobalTensor.empty(256, np.float32, "y")
    full = launch(_carried, 1, GlobalTensor.from_array(x, "x"), y, tiles)
    fast = launch(_carried, 1, GlobalTensor.from_array(x, "x", timing_only=True),
                  GlobalTensor.empty(256, np.float32, "y", timing_only=True), tiles, timing_only=True)
    assert np.allclose(y.data, tiles)
    a, b = full.launches[0].traces[0], fast.launches[0].traces[0]
    assert a.same_work_as(b)
    assert any(copies > 1 for _, copies, _ in b.segments)          # the timing-only run jumped


# ---- §3a the published per-instruction rates (asc-devkit docs/zh/api/附录/Vector指令理论性能汇总.md) ----


def _v_occupancy(op, dtype=np.float32, elements=4096) -> float:
    """V-pipe occupancy of one ``op(ctx, dst, a, b, n)`` over ``n`` elements."""
    ctx = ctx_on(timing_only=True)
    dst, a, b = (ub(ctx, dtype, elements, n) for n in ("dst", "a", "b"))
    op(ctx, dst, a, b, elements)
    (start, end, _), = pipe_events(ctx, "V")
    return end - start


def _per_repeat(op, dtype=np.float32) -> float:
    """Cycles one more 256-B repeat adds (twice the elements minus once, over the repeats added)."""
    per_repeat = 256 // np.dtype(dtype).itemsize
    small, big = _v_occupancy(op, dtype, 8 * per_repeat), _v_occupancy(op, dtype, 16 * per_repeat)
    return (big - small) / 8


def test_exp_and_div_cost_what_the_vendor_table_publishes_per_element():
    """Table 6: Exp and Div take 32 elements a cycle in half *and* float, so a 256-B repeat takes
    2 cycles in float (64 elements) and 4 in half (128); Add takes 1 cycle a repeat in both
    (128 half or 64 float a cycle)."""
    from npu_lab.presets import PUBLISHED_VECTOR_RATES

    exp = lambda ctx, d, a, b, n: ctx.exp(d, a, n)          # noqa: E731
    div = lambda ctx, d, a, b, n: ctx.div(d, a, b, n)       # noqa: E731
    add = lambda ctx, d, a, b, n: ctx.add(d, a, b, n)       # noqa: E731
    for name, op in (("Exp", exp), ("Div", div), ("Add", add)):
        rates = PUBLISHED_VECTOR_RATES[name][1]
        assert _per_repeat(op, np.float32) == 64 / rates["float"], name
        assert _per_repeat(op, np.float16) == 128 / rates["half"], name
    assert _per_repeat(exp, np.float16) == 2 * _per_repeat(exp, np.float32) == 4


def test_reduce_sort_and_gather_mask_cost_the_published_rates():
    """Table 11: ReduceRepeat (WholeReduceSum) 64/7 float a cycle = 7 a repeat; table 14: Sort32
    2 elements a cycle = 16 per 32-element repeat; table 9: GatherMask float 32 a cycle = 2 a
    256-B repeat. Measured as the V occupancy the simulator charges."""
    from npu_lab.lang import GatherMaskParams

    def occupancy(repeats, which):
        ctx = ctx_on(timing_only=True)
        a = ub(ctx, np.float32, 64 * 16, "a")
        d = ub(ctx, np.float32, 64 * 32, "d")
        idx = ub(ctx, np.uint32, 64 * 16, "idx")
        if which == "reduce":
            ctx.whole_reduce_sum(d, a, 64, repeats, 1, 1, 8)
        elif which == "sort":
            ctx.sort32(d, a, idx, repeats)
        else:
            ctx.gather_mask(d, a, 1, False, 0, GatherMaskParams(1, repeats, 8, 0))
        (start, end, _), = pipe_events(ctx, "V")
        return end - start

    for which, expected in (("reduce", 7), ("sort", 16), ("gather", 2)):
        assert (occupancy(16, which) - occupancy(8, which)) / 8 == expected, which
