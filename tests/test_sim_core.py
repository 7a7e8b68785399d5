"""Tests of one core's timing model and the instruction costs (npu_lab.sim.core, npu_lab.sim.costs;
docs/cost_model.md-§4.2).

The rules under test, in the words of the model:

* the scalar unit S issues every instruction in program order; each pipe runs its queue in order;
  pipes run in parallel;
* an instruction on pipe P starts at max(P's free time, the time S issued it, the flags P waits on)
  and ends after its cost;
* set_flag(src, dst) records the end of src's last instruction; wait_flag(src, dst) makes dst's next
  instruction wait for it (S itself stalls when dst is S); pipe_barrier("ALL") drains every pipe;
* TQue: alloc waits until the slot's previous user freed it, enque/deque are a producer->consumer
  flag, so double buffering *emerges* from these rules;
* every cost is a whole number of cycles (rounded up);
* DMA costs latency + bytes/bandwidth with bytes rounded up to 32-B blocks; a core's bandwidth is
  min(its own DMA peak, HBM bandwidth / active cores); a vector instruction costs issue +
  repeats x cycles-per-repeat, repeats = ceil(bytes / 256), split into instructions of <= 255.
"""

from __future__ import annotations

import linecache
import math

import numpy as np
import pytest

from npu_lab import GlobalTensor, KernelContext, RaceError, SimulationError, get_preset, launch, npu_kernel
from npu_lab.lang import DataCopyExtParams, DataCopyPadExtParams, QueueError, TBuf, TPosition, TQue
from npu_lab.sim.core import ALL_PIPES, CUBE_PIPES, PIPE_CODE, VECTOR_PIPES, CoreState
from npu_lab.sim.costs import dma_cycles, mmad_cycles, round_up, scalar_cycles, vector_cycles

HW = get_preset("ascend-910b2")
ISSUE = HW.scalar_issue_cycles  # 2 cycles for S to push one instruction into a pipe queue


def core() -> CoreState:
    return CoreState(VECTOR_PIPES, ISSUE)


def ctx_on(hw=HW, **kwargs) -> KernelContext:
    """A single block's context (block 0 of 1), as launch() would create it."""
    return KernelContext(hw, 0, 1, **kwargs)


def events_of(ctx_or_core):
    """The issued instructions as dicts: pipe, name, start, end, bytes (cycles)."""
    cs = ctx_or_core.core if isinstance(ctx_or_core, KernelContext) else ctx_or_core
    return [{"pipe": ALL_PIPES[p], "name": n, "start": s, "end": e, "bytes": b, "ready": r}
            for p, n, s, e, b, _el, _src, r in cs.events]


def gm(n, dtype=np.float32, name="gm"):
    return GlobalTensor.from_array(np.arange(n).astype(dtype), name)


def ub(ctx, dtype, count, name):
    """A scratch UB tensor of ``count`` elements (a TBuf, as a kernel would get one)."""
    buf = TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(buf, count * np.dtype(dtype).itemsize, name=name)
    return buf.get(dtype)


def queue(ctx, position, num, nbytes, name, depth=1):
    """``TQue<position, depth>`` with ``num`` slots of ``nbytes``."""
    q = TQue(position, depth)
    ctx.pipe.init_buffer(q, num, nbytes, name=name)
    return q


# ---- per-pipe order, parallel pipes, the scalar unit -------------------------------------------


def test_each_pipe_runs_its_queue_in_order():
    """A second V instruction starts when the first V instruction ends, not when it was issued."""
    cs = core()
    _, end_a = cs.issue("V", "a", 100)
    start_b, end_b = cs.issue("V", "b", 10)
    assert start_b == end_a and end_b == end_a + 10


def test_pipes_run_in_parallel():
    """Instructions on different pipes overlap: V does not wait for a long MTE2 transfer."""
    cs = core()
    load_start, load_end = cs.issue("MTE2", "load", 1000)
    vec_start, _ = cs.issue("V", "compute", 10)
    assert load_start == ISSUE
    assert vec_start == 2 * ISSUE < load_end


def test_an_instruction_never_starts_before_the_scalar_unit_issued_it():
    """S pays scalar_issue_cycles per issued instruction and its own scalar work first, so a V
    instruction issued after 500 cycles of scalar code starts at 500 + issue."""
    cs = core()
    cs.issue("S", "loop bookkeeping", 500)
    start, _ = cs.issue("V", "add", 4)
    assert start == 500 + ISSUE
    start2, _ = cs.issue("MTE3", "store", 4)
    assert start2 == 500 + 2 * ISSUE  # S issues one instruction at a time


def test_scalar_instructions_run_on_the_scalar_clock_without_issue_cost():
    """Scalar work starts when S is free and advances S's clock by its cost."""
    cs = core()
    assert cs.issue("S", "a", 7) == (0.0, 7.0)
    assert cs.issue("S", "b", 3) == (7.0, 10.0)


def test_unknown_pipe_raises():
    """A cube pipe does not exist on a vector core."""
    cs = core()
    with pytest.raises(SimulationError, match="'M'"):
        cs.issue("M", "mmad", 1)
    with pytest.raises(SimulationError, match="does not exist"):
        cs.set_flag("MTE2", "FIX")
    assert "M" in CUBE_PIPES and "V" not in CUBE_PIPES


# ---- flags and barriers --------------------------------------------------------------------------


def test_set_and_wait_flag_order_v_after_mte2():
    """wait_flag(MTE2, V) makes the next V instruction start at the end of the MTE2 load."""
    cs = core()
    _, load_end = cs.issue("MTE2", "load", 1000)
    cs.set_flag("MTE2", "V")
    cs.wait_flag("MTE2", "V")
    start, _ = cs.issue("V", "compute", 10)
    assert start == load_end


def test_set_flag_records_the_end_of_the_last_instruction_at_that_point():
    """A flag covers the MTE2 instructions issued before set_flag, not those issued after it."""
    cs = core()
    _, first_end = cs.issue("MTE2", "first", 100)
    cs.set_flag("MTE2", "V")
    cs.issue("MTE2", "second", 1000)
    cs.wait_flag("MTE2", "V")
    start, _ = cs.issue("V", "compute", 10)
    assert start == first_end


def test_flags_are_matched_first_in_first_out():
    """Two set_flags are consumed by two wait_flags in order; a third wait has nothing to match."""
    cs = core()
    _, end1 = cs.issue("MTE2", "tile0", 100)
    cs.set_flag("MTE2", "V")
    _, end2 = cs.issue("MTE2", "tile1", 100)
    cs.set_flag("MTE2", "V")
    cs.wait_flag("MTE2", "V")
    s1, _ = cs.issue("V", "c0", 1)
    cs.wait_flag("MTE2", "V")
    s2, _ = cs.issue("V", "c1", 1)
    assert (s1, s2) == (end1, end2)
    with pytest.raises(SimulationError):
        cs.wait_flag("MTE2", "V")


def test_wait_flag_without_set_flag_raises():
    """Waiting for a flag nobody set would hang the device: SimulationError says what to do."""
    cs = core()
    with pytest.raises(SimulationError) as info:
        cs.wait_flag("MTE2", "V")
    assert "MTE2_V" in str(info.value) and "set_flag" in str(info.value)
    ctx = ctx_on()                       # through the kernel API: event and id are named
    with pytest.raises(SimulationError, match="V_MTE3, event 5.*set_flag"):
        ctx.wait_flag("V_MTE3", 5)


def test_flags_with_different_event_ids_are_separate():
    """set_flag("MTE2_V", 0) is not matched by wait_flag("MTE2_V", 1): ids are separate flags."""
    ctx = ctx_on()
    ctx.set_flag("MTE2_V", 0)
    with pytest.raises(SimulationError, match="event 1"):
        ctx.wait_flag("MTE2_V", 1)
    ctx.wait_flag("MTE2_V", 0)


def test_wait_on_s_stalls_the_scalar_unit():
    """wait_flag(MTE2, S): S stops until the load ends, so scalar work and everything S issues
    afterwards (on any pipe) start after the load."""
    cs = core()
    _, load_end = cs.issue("MTE2", "load", 1000)
    cs.set_flag("MTE2", "S")
    cs.wait_flag("MTE2", "S")
    s_start, _ = cs.issue("S", "read scalar", 1)
    v_start, _ = cs.issue("V", "compute", 1)
    assert s_start == load_end
    assert v_start == load_end + 1 + ISSUE


def test_pipe_barrier_all_drains_every_pipe():
    """After pipe_barrier('ALL') no instruction, on any pipe, starts before all pipes drained."""
    cs = core()
    cs.issue("MTE2", "load", 1000)
    _, v_end = cs.issue("V", "compute", 5000)
    cs.pipe_barrier("ALL")
    later = [cs.issue(p, f"after on {p}", 1)[0] for p in ("MTE2", "MTE3", "S")]
    assert all(t >= v_end for t in later)


def test_pipe_barrier_on_one_pipe_is_free_and_checks_the_name():
    """Each pipe is already in order, so pipe_barrier('V') costs nothing; a bad name raises."""
    cs = core()
    cs.issue("MTE2", "load", 1000)
    cs.pipe_barrier("V")
    start, _ = cs.issue("V", "compute", 1)
    assert start == 2 * ISSUE
    with pytest.raises(SimulationError):
        cs.pipe_barrier("VECTOR")


def test_block_trace_duration_and_busy_time():
    """finish(): duration = when the last pipe drained; busy = sum of durations per pipe."""
    cs = core()
    cs.issue("MTE2", "load", 100)
    cs.issue("V", "a", 30)
    cs.issue("V", "b", 20)
    trace = cs.finish()
    assert trace.duration_cycles == 102
    busy = trace.busy_cycles_by_pipe()
    assert busy["MTE2"] == 100 and busy["V"] == 50 and busy["MTE3"] == 0
    assert list(trace.pipe) == [PIPE_CODE["MTE2"], PIPE_CODE["V"], PIPE_CODE["V"]]


def test_event_source_is_the_line_that_issued_the_instruction():
    """Each event remembers the kernel source line (file, line) that issued it."""
    ctx = ctx_on()
    buf = ub(ctx, np.float32, 64, "buf")
    ctx.duplicate(buf, 1.0, 64)  # the issuing line
    (filename, line), = [ev[6] for ev in ctx.core.events]
    assert filename == __file__
    assert "ctx.duplicate(buf, 1.0, 64)  # the issuing line" in linecache.getline(filename, line)


# ---- TQue: buffers, enque/deque, double buffering ------------------------------------------------


def _pipeline(num_buffers: int, tiles: int = 3, tile=2048, compute_reps=8):
    """A copy-in -> compute -> copy-out loop through a VECIN queue of ``num_buffers`` slots.
    Returns per tile (load_start, load_end, compute_start, compute_end)."""
    ctx = ctx_on()
    src = GlobalTensor.from_array(np.linspace(-1, 1, tiles * tile, dtype=np.float32), "src")
    dst = GlobalTensor.empty(tiles * tile, np.float32, "out")
    q_in = queue(ctx, TPosition.VECIN, num_buffers, tile * 4, "in")
    q_out = queue(ctx, TPosition.VECOUT, num_buffers, tile * 4, "out")
    for i in range(tiles):
        x = q_in.alloc_tensor(np.float32)
        ctx.data_copy(x, src[i * tile], tile)
        q_in.enque(x)
        x = q_in.deque(np.float32)
        y = q_out.alloc_tensor(np.float32)
        for _ in range(compute_reps):
            ctx.exp(y, x, tile)
        q_out.enque(y)
        q_in.free_tensor(x)
        y = q_out.deque(np.float32)
        ctx.data_copy(dst[i * tile], y, tile)
        q_out.free_tensor(y)
    ev = events_of(ctx)
    loads = [e for e in ev if e["pipe"] == "MTE2"]
    computes = [e for e in ev if e["pipe"] == "V"]
    out = []
    for i in range(tiles):
        c = computes[i * compute_reps:(i + 1) * compute_reps]
        out.append((loads[i]["start"], loads[i]["end"], c[0]["start"], c[-1]["end"]))
    np.testing.assert_array_equal(dst.data, np.exp(src.data))
    return out


def test_deque_waits_for_the_producer():
    """Compute on tile i starts after tile i's load ended (enque/deque is a MTE2->V flag)."""
    for nb in (1, 2):
        for load_start, load_end, comp_start, _ in _pipeline(nb):
            assert comp_start >= load_end


def test_single_buffer_next_load_waits_for_previous_compute():
    """1 slot: alloc for tile i+1 waits until tile i's compute freed the slot, so MTE2 and V
    take turns."""
    tiles = _pipeline(1)
    for (_, _, _, comp_end), (next_load_start, *_rest) in zip(tiles, tiles[1:]):
        assert next_load_start >= comp_end


def test_double_buffer_next_load_overlaps_compute():
    """2 slots: the load of tile i+1 goes into the other slot while V computes tile i."""
    tiles = _pipeline(2)
    for (_, _, comp_start, comp_end), (next_load_start, *_rest) in zip(tiles, tiles[1:]):
        assert next_load_start < comp_end
    # ...and the third tile reuses slot 0, so it must wait for tile 0's compute
    assert tiles[2][0] >= tiles[0][3]


def test_double_buffering_is_faster_than_single():
    """Same instructions, same costs; only the queue depth differs, and the block ends sooner."""
    assert _pipeline(2)[-1][3] < _pipeline(1)[-1][3]


def test_alloc_with_all_buffers_in_use_raises():
    """A second alloc from a 1-slot queue before free_tensor would hang the device."""
    ctx = ctx_on()
    q = queue(ctx, TPosition.VECIN, 1, 256, "x_in")
    q.alloc_tensor(np.float32)
    with pytest.raises(QueueError, match="x_in.*in use"):
        q.alloc_tensor(np.float32)


def test_deque_with_nothing_enqueued_raises():
    """deque() on an empty queue would wait forever on the device: SimulationError."""
    ctx = ctx_on()
    q = queue(ctx, TPosition.VECIN, 2, 256, "x_in")
    with pytest.raises(QueueError, match="nothing enqueued"):
        q.deque(np.float32)


def test_free_of_a_foreign_or_freed_tensor_raises():
    """free_tensor / enque only accept tensors allocated from this queue and not yet freed."""
    ctx = ctx_on()
    q = queue(ctx, TPosition.VECIN, 1, 256, "a")
    other = queue(ctx, TPosition.VECIN, 1, 256, "b")
    t = q.alloc_tensor(np.float32)
    with pytest.raises(QueueError, match="not allocated"):
        other.free_tensor(t)
    q.free_tensor(t)
    with pytest.raises(QueueError, match="already freed"):
        q.free_tensor(t)
    with pytest.raises(QueueError):
        q.enque(t)


# ---- races -----------------------------------------------------------------------------------------


def test_missing_sync_is_a_race_error_naming_the_buffer():
    """V reading a UB buffer MTE2 is still writing (no set_flag/wait_flag between them) raises
    RaceError naming the buffer and the pipes."""
    ctx = ctx_on()
    a = ub(ctx, np.float32, 64, "tile_a")
    b = ub(ctx, np.float32, 64, "tile_b")
    ctx.data_copy(a, gm(64), 64)
    with pytest.raises(RaceError) as info:
        ctx.add(b, a, a, 64)
    msg = str(info.value)
    assert "tile_a" in msg and "MTE2" in msg and "V" in msg
    assert "set_flag" in msg or "enque" in msg


def test_the_same_code_with_the_flag_is_fine():
    """With set_flag(MTE2, V) / wait_flag(MTE2, V) the add waits and computes the right numbers."""
    ctx = ctx_on()
    a = ub(ctx, np.float32, 64, "tile_a")
    b = ub(ctx, np.float32, 64, "tile_b")
    ctx.data_copy(a, gm(64), 64)
    ctx.set_flag("MTE2_V", 0)
    ctx.wait_flag("MTE2_V", 0)
    ctx.add(b, a, a, 64)
    np.testing.assert_array_equal(b.data, 2 * np.arange(64, dtype=np.float32))


def test_overwriting_a_buffer_still_being_read_is_a_race():
    """Write-after-read: MTE2 reloading a buffer V is still reading raises RaceError."""
    ctx = ctx_on()
    a = ub(ctx, np.float32, 2048, "a")
    b = ub(ctx, np.float32, 2048, "b")
    ctx.data_copy(a, gm(2048), 2048)
    ctx.set_flag("MTE2_V", 0)
    ctx.wait_flag("MTE2_V", 0)
    for _ in range(20):
        ctx.exp(b, a, 2048)
    with pytest.raises(RaceError, match="'a' \\(write after read\\).*no V_MTE2 flag"):
        ctx.data_copy(a, gm(2048), 2048)


def test_disjoint_halves_of_one_buffer_do_not_race():
    """Loading the upper half of a buffer while V reads the (synced) lower half is not a race."""
    ctx = ctx_on()
    buf = ub(ctx, np.float32, 4096, "pingpong")
    out = ub(ctx, np.float32, 2048, "out")
    src = gm(4096)
    lo, hi = buf, buf[2048]
    ctx.data_copy(lo, src, 2048)
    ctx.set_flag("MTE2_V", 0)
    ctx.wait_flag("MTE2_V", 0)
    ctx.data_copy(hi, src[2048], 2048)
    ctx.muls(out, lo, 2.0, 2048)  # reads only bytes the first (finished) copy wrote
    np.testing.assert_array_equal(out.data, 2 * np.arange(2048, dtype=np.float32))


def test_scalar_read_of_loaded_data_needs_a_flag():
    """GetValue on data MTE2 is still loading races; after wait_flag(MTE2, S) S waits for it."""
    ctx = ctx_on()
    a = ub(ctx, np.float32, 64, "a")
    ctx.data_copy(a, gm(64), 64)
    with pytest.raises(RaceError, match="'a'"):
        a.get_value(3)
    ctx = ctx_on()
    a = ub(ctx, np.float32, 64, "a")
    ctx.data_copy(a, gm(64), 64)
    ctx.set_flag("MTE2_S", 0)
    ctx.wait_flag("MTE2_S", 0)
    assert a.get_value(3) == 3.0
    load, read = events_of(ctx)
    # the load's data is complete dma_latency_cycles after its transfer; the flag adds its cost
    assert load["ready"] == load["end"] + HW.dma_latency_cycles
    assert read["start"] == load["ready"] + HW.sync_flag_cycles


# ---- costs: DMA --------------------------------------------------------------------------------------


def test_dma_cost_is_latency_plus_bytes_over_bandwidth():
    """dma_cycles = dma_latency_cycles + round_up(bytes, 32) / bytes_per_cycle, in whole cycles
    (rounded up, like every cost)."""
    assert dma_cycles(HW, 4096, 64.0) == HW.dma_latency_cycles + 4096 / 64.0
    assert dma_cycles(HW, 4096, 30.0) == math.ceil(HW.dma_latency_cycles + 4096 / 30.0)
    assert round_up(1, 32) == 32 and round_up(32, 32) == 32 and round_up(33, 32) == 64


@pytest.mark.parametrize("small, rounded", [(1, 32), (31, 32), (33, 64), (63, 64), (65, 96)])
def test_dma_moves_whole_32_byte_blocks(small, rounded):
    """1 byte costs as much as 32, 33 as much as 64: UB transfers move whole 32-byte blocks."""
    assert dma_cycles(HW, small, 1.0) == dma_cycles(HW, rounded, 1.0)
    assert dma_cycles(HW, rounded + 1, 1.0) > dma_cycles(HW, rounded, 1.0)


@pytest.mark.parametrize("small, rounded", [(1, 32), (33, 64)])
def test_data_copy_pad_charges_whole_blocks(small, rounded):
    """The same rule through ctx.data_copy_pad of uint8 data (DataCopy itself only takes whole
    blocks): the MTE2 event lasts as long; it reports the GM bytes asked for."""
    def duration(count):
        ctx = ctx_on()
        buf = ub(ctx, np.uint8, 64, "buf")
        ctx.data_copy_pad(buf, gm(64, np.uint8), DataCopyExtParams(1, count, 0, 0, 0),
                          DataCopyPadExtParams(False, 0, 0, 0))
        (e,) = events_of(ctx)
        return e["end"] - e["start"], e["bytes"]

    (d_small, b_small), (d_rounded, _) = duration(small), duration(rounded)
    assert d_small == d_rounded
    assert b_small == small


def _single_copy_duration(block_dim: int, hw=HW, nbytes=65536) -> float:
    """Cycles of one MTE2 transfer in a launch of ``block_dim`` identical blocks."""
    @npu_kernel(block_classes=lambda bd, src: np.zeros(bd, int))
    def copy_in(ctx, src):
        buf = ub(ctx, np.uint8, nbytes, "buf")
        ctx.data_copy(buf, src, nbytes)

    tl = launch(copy_in, block_dim, GlobalTensor.empty(nbytes, np.uint8, "src", timing_only=True),
                hw=hw, timing_only=True)
    (trace,) = tl.launches[0].traces
    return float(trace.end_cycles[0] - trace.start_cycles[0])


@pytest.mark.parametrize("block_dim", [1, 2, 13, 14, 24, 48, 96])
def test_per_core_bandwidth_is_min_of_core_peak_and_hbm_share(block_dim):
    """Each core streams at min(core DMA peak, HBM bandwidth / active cores), where active =
    min(block_dim, cores). 910B2: peak 115.2 GB/s per core; 1600/14 < 115.2 < 1600/13."""
    nbytes = 65536
    active = min(block_dim, HW.vector_cores)
    gbps = min(HW.core_dma_bandwidth_gbps, HW.hbm_bandwidth_gbps / active)
    # 64 KB is past the full-bandwidth burst (16 KB) and 512-B aligned: efficiency 1; the pipe
    # is held for the request's issue + the transfer (the latency comes after, overlapping)
    expected = HW.dma_issue_cycles + nbytes / HW.bytes_per_cycle(gbps)
    assert _single_copy_duration(block_dim, nbytes=nbytes) == math.ceil(expected)


def test_few_cores_get_their_own_peak_many_cores_share_hbm():
    """Below 14 active cores the core's own peak binds; from 14 on the HBM share does."""
    assert _single_copy_duration(1) == _single_copy_duration(13)
    assert _single_copy_duration(14) > _single_copy_duration(13)
    assert _single_copy_duration(48) == _single_copy_duration(96)  # only 48 cores are active


# ---- costs: vector, scalar, cube -----------------------------------------------------------------


@pytest.mark.parametrize("nbytes", [1, 4, 256, 257, 1024, 4000, 255 * 256])
def test_vector_cost_is_issue_plus_repeats(nbytes):
    """cycles = vector_issue_cycles + ceil(bytes / 256) x cycles_per_repeat (one instruction
    while repeats <= 255)."""
    cycles, repeats = vector_cycles(HW, "simple", nbytes)
    assert repeats == math.ceil(nbytes / 256)
    assert cycles == HW.vector_issue_cycles + repeats * HW.vector_cycles_per_repeat


@pytest.mark.parametrize("repeats, instructions", [(255, 1), (256, 2), (510, 2), (511, 3), (1000, 4)])
def test_more_than_255_repeats_split_into_several_issues(repeats, instructions):
    """Repeat counts above max_repeat (255) are split; each piece pays the issue cost again."""
    cycles, got = vector_cycles(HW, "simple", repeats * 256)
    assert got == repeats
    assert cycles == instructions * HW.vector_issue_cycles + repeats * HW.vector_cycles_per_repeat


@pytest.mark.parametrize("kind, field", [("simple", "vector_cycles_per_repeat"),
                                         ("div", "vector_div_cycles_per_repeat"),
                                         ("exp", "vector_exp_cycles_per_repeat"),
                                         ("reduce", "vector_reduce_cycles_per_repeat"),
                                         ("sort", "vector_sort_cycles_per_repeat")])
def test_each_vector_kind_is_priced_by_its_own_field(kind, field):
    """exp, div, reductions and sorts have their own per-repeat cycles in the spec."""
    hw = HW.replace(**{field: 100.0})
    cycles, repeats = vector_cycles(hw, kind, 10 * 256)
    assert cycles == hw.vector_issue_cycles + 10 * 100.0


def test_unknown_vector_kind_raises():
    """A vector cost kind without a spec field is refused, listing the known kinds."""
    with pytest.raises(ValueError, match="exp"):
        vector_cycles(HW, "sqrt", 256)


def test_vector_instruction_through_the_api():
    """ctx.add on 16384 float32 (64 KB = 256 repeats) is two hardware instructions:
    2 x issue + 256 x 1 cycles; the event name shows the repeat count."""
    ctx = ctx_on()
    a = ub(ctx, np.float32, 16384, "a")
    b = ub(ctx, np.float32, 16384, "b")
    ctx.add(b, a, a, 16384)
    (e,) = events_of(ctx)
    assert e["end"] - e["start"] == 2 * HW.vector_issue_cycles + 256 * HW.vector_cycles_per_repeat
    assert e["name"] == "Add x256"
    assert ctx.core.vector_repeats == 256


def test_scalar_costs():
    """A scalar UB access costs more than a register op; get_value is one UB read."""
    assert HW.scalar_ub_access_cycles > HW.scalar_op_cycles
    assert scalar_cycles(HW, ops=3, ub_accesses=2) == 3 * HW.scalar_op_cycles + 2 * HW.scalar_ub_access_cycles
    ctx = ctx_on()
    ctx.scalar("loop", ops=40, ub_reads=2)
    (e,) = events_of(ctx)
    assert (e["pipe"], e["end"] - e["start"]) == ("S", 40 * HW.scalar_op_cycles + 2 * HW.scalar_ub_access_cycles)


def test_mmad_cost_counts_16x16x16_fractals():
    """[m,k]x[k,n] costs ceil(m/16) ceil(n/16) ceil(k/16) fractals x cube_fractal_cycles; fp32 4x."""
    assert mmad_cycles(HW, 16, 16, 16) == (HW.cube_fractal_cycles, 1)
    assert mmad_cycles(HW, 17, 16, 33) == (6 * HW.cube_fractal_cycles, 6)
    assert mmad_cycles(HW, 32, 32, 32, dtype_scale=4)[0] == 8 * 4 * HW.cube_fractal_cycles


def test_every_cost_is_a_whole_number_of_cycles():
    """Costs are rounded up to whole cycles, so every event of a block starts and ends on a
    cycle boundary (even with bandwidths that do not divide the transfer size)."""
    ctx = ctx_on(dma_bytes_per_cycle=HW.bytes_per_cycle(1600 / 48))
    a = ub(ctx, np.float32, 1000, "a")
    ctx.data_copy(a, gm(1000), 1000)
    ctx.set_flag("MTE2_V", 0)
    ctx.wait_flag("MTE2_V", 0)
    ctx.exp(a, a, 999)
    ctx.scalar("bookkeeping", ops=3, ub_reads=1)
    trace = ctx.core.finish()
    assert np.all(trace.start_cycles == np.round(trace.start_cycles))
    assert np.all(trace.end_cycles == np.round(trace.end_cycles))


def test_costs_do_not_depend_on_data_values():
    """The same instructions on different data give the same block trace."""
    def run(values):
        ctx = ctx_on()
        a = ub(ctx, np.float32, 512, "a")
        b = ub(ctx, np.float32, 512, "b")
        ctx.data_copy(a, GlobalTensor.from_array(values), 512)
        ctx.set_flag("MTE2_V", 0)
        ctx.wait_flag("MTE2_V", 0)
        ctx.exp(b, a, 512)
        return ctx.core.finish()

    rng = np.random.default_rng(0)
    t1 = run(np.zeros(512, np.float32))
    t2 = run(rng.standard_normal(512).astype(np.float32) * 100)
    assert t1.same_work_as(t2)
