"""Tests of the kernel API's foundations (npu_lab.lang; docs/cost_model.md UB rules, §5, §5.1):
tensors without slices, the UB allocator, ``TPipe`` / ``TQue`` / ``TBuf``, ``HardEvent`` flags,
scalar ``GetValue`` / ``SetValue``, launching, and timing-only == full.

Instructions are tested against numpy in test_lang_dma.py and test_lang_vector.py; programs that
break a rule are catalogued in test_illegal_programs.py; the timing side of queues, flags and races
is in test_sim_core.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab import GlobalTensor, KernelContext, SimulationError, UbOverflowError, get_preset, launch, npu_kernel
from npu_lab.lang import (AscendCRuleError, DataCopyExtParams, DataCopyPadExtParams, HardEvent, LocalTensor,
                          QueueError, TBuf, TPosition, TQue)
from npu_lab.sim.core import PIPE_CODE

HW = get_preset("ascend-910b2")


def ctx_on(hw=HW, **kwargs) -> KernelContext:
    return KernelContext(hw, 0, 1, **kwargs)


def tbuf(ctx, nbytes, name="t") -> TBuf:
    b = TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(b, nbytes, name=name)
    return b


def que(ctx, position, num, nbytes, name, depth=1) -> TQue:
    q = TQue(position, depth)
    ctx.pipe.init_buffer(q, num, nbytes, name=name)
    return q


# ---- GlobalTensor / LocalTensor: offsets, no slices -----------------------------------------------


def test_global_tensor_offset_is_a_view_to_the_end():
    """gm[2] is the tensor starting 2 elements on (operator[]); writing through it writes the
    original, and it runs to the end of the buffer (GetSize)."""
    g = GlobalTensor.from_array(np.arange(10, dtype=np.float32), "x")
    view = g[2]
    assert (view.size, view.get_size(), view.nbytes, view.address_bytes) == (8, 8, 32, 8)
    view.data[:3] = -1
    assert g.data[:6].tolist() == [0, 1, -1, -1, -1, 5]
    assert g[2][3].data[0] == 5 and g[10].size == 0


def test_tensors_have_no_slices_and_offsets_stay_inside():
    """Slicing raises a TypeError that says to use t[offset] and a count; offsets are whole
    numbers inside the tensor."""
    g = GlobalTensor.from_array(np.zeros(10, np.float32), "x")
    with pytest.raises(TypeError, match=r"no slices.*x\[offset\].*count"):
        g[2:5]
    with pytest.raises(TypeError, match="whole number"):
        g[1.5]
    with pytest.raises(IndexError, match="outside"):
        g[11]
    ctx = ctx_on()
    t = tbuf(ctx, 64).get(np.float32)
    with pytest.raises(TypeError, match="no slices"):
        t[::2]
    with pytest.raises(IndexError, match="outside"):
        t[17]


def test_unsupported_dtype_is_refused_with_the_list():
    """float64 does not exist on the device; the error lists the supported dtypes."""
    with pytest.raises(TypeError, match="float32"):
        GlobalTensor.from_array(np.zeros(4), "x")


def test_timing_only_tensors_have_no_data():
    """In a timing-only run tensors carry size and dtype but no numpy storage."""
    g = GlobalTensor.empty(100, np.float32, "x", timing_only=True)
    assert g.data is None and g.size == 100
    t = tbuf(ctx_on(timing_only=True), 32).get(np.float32)
    assert t.data is None and t.count == 8


def test_local_tensor_offsets_and_reinterpret_cast():
    """t[4] views the same UB bytes from element 4 on; reinterpret_cast sees them as another
    dtype (ReinterpretCast<T>), with the element count scaled by the size ratio."""
    ctx = ctx_on()
    t = tbuf(ctx, 64).get(np.float32)
    t.data[:] = np.arange(16)
    part = t[4]
    assert (part.count, part.byte_offset, part.ub_address) == (12, 16, 16)
    assert part.data[:4].tolist() == [4, 5, 6, 7]
    as_int = t.reinterpret_cast(np.int32)
    assert as_int.count == 16 and as_int.data[1] == np.float32(1).view(np.int32)
    assert t.reinterpret_cast(np.uint8).count == 64
    assert t[4].reinterpret_cast(np.uint16).offset == 8
    with pytest.raises(ValueError, match="multiple of 4"):
        t.reinterpret_cast(np.uint8)[2].reinterpret_cast(np.float32)
    with pytest.raises(IndexError, match="exceeds"):
        LocalTensor(t.region, np.float32, 10, 10)


def test_fresh_ub_is_garbage_not_zeros():
    """Fresh UB holds 0xFF bytes: NaN as float, -1 as int, like leftovers on a device."""
    ctx = ctx_on()
    b = tbuf(ctx, 64)
    assert np.isnan(b.get(np.float32).data).all()
    assert (b.get(np.int32).data == -1).all()
    q = que(ctx, TPosition.VECIN, 1, 64, "q")
    assert np.isnan(q.alloc_tensor(np.float32).data).all()


# ---- the UB allocator ------------------------------------------------------------------------------


def test_ub_allocations_round_up_to_32_bytes():
    """A 4-byte buffer takes 32 bytes; every buffer starts on a 32-byte boundary."""
    ctx = ctx_on()
    a, b, c = tbuf(ctx, 4, "a"), tbuf(ctx, 33, "b"), tbuf(ctx, 100, "c")
    assert [x.region.nbytes for x in (a, b, c)] == [32, 64, 128]
    assert [x.region.offset_bytes for x in (a, b, c)] == [0, 32, 96]
    assert ctx.ub.used_bytes == 224 and ctx.ub.free_bytes == HW.ub_usable_bytes - 224


def test_queue_slots_are_each_rounded_and_named():
    """init_buffer(que, 2, 100) carves two 128-byte slots."""
    ctx = ctx_on()
    q = que(ctx, TPosition.VECIN, 2, 100, "x_in")
    assert q.num_buffers == 2
    assert [r.name for r in ctx.ub.held] == ["x_in[0]", "x_in[1]"]
    assert ctx.ub.used_bytes == 256


def test_ub_can_be_filled_exactly():
    ctx = ctx_on()
    tbuf(ctx, HW.ub_usable_bytes - 64, "big")
    tbuf(ctx, 64, "last")
    assert ctx.ub.free_bytes == 0


def test_ub_overflow_names_size_left_and_held_buffers():
    """Allocating past the UB raises UbOverflowError naming the size asked (rounded), the bytes
    left and the buffers already held."""
    ctx = ctx_on()
    que(ctx, TPosition.VECIN, 2, 65536, "x_in")
    tbuf(ctx, 4000, "scratch")                   # rounds to 4000 (a multiple of 32)
    left = HW.ub_usable_bytes - 2 * 65536 - 4000
    with pytest.raises(UbOverflowError) as info:
        tbuf(ctx, 80000, "y_in")
    msg = str(info.value)
    assert "y_in" in msg and "80000" in msg
    assert f"only {left}" in msg and str(HW.ub_usable_bytes) in msg
    assert "x_in[0]=65536 B" in msg and "x_in[1]=65536 B" in msg and "scratch=4000 B" in msg


def test_ub_overflow_reports_the_rounded_size():
    ctx = ctx_on()
    tbuf(ctx, HW.ub_usable_bytes - 32, "most")
    with pytest.raises(UbOverflowError, match="needs 64 bytes.*only 32"):
        tbuf(ctx, 33, "odd")


def test_ub_overflow_is_a_memory_error_and_propagates_from_launch():
    """UbOverflowError is a MemoryError and stops a launch, in timing-only runs too."""
    assert issubclass(UbOverflowError, MemoryError)

    @npu_kernel
    def greedy(ctx):
        tbuf(ctx, HW.ub_usable_bytes + 4, "too_big")

    for timing_only in (False, True):
        with pytest.raises(UbOverflowError, match="too_big"):
            launch(greedy, 1, hw=HW, timing_only=timing_only)


def test_ub_size_comes_from_the_chip():
    """200 KB fits the 310P3's 256 KB UB but not the 910B2's 192 KB."""
    tbuf(ctx_on(get_preset("ascend-310p3")), 200 * 1024)
    with pytest.raises(UbOverflowError):
        tbuf(ctx_on(HW), 200 * 1024)


@pytest.mark.parametrize("nbytes", [0, -32, 3.5, True])
def test_ub_buffer_size_must_be_positive_whole(nbytes):
    with pytest.raises(ValueError, match="whole number"):
        tbuf(ctx_on(), nbytes)


# ---- TPipe / TQue / TBuf ---------------------------------------------------------------------------


def test_queue_arguments_are_checked():
    """TQue takes VECIN / VECOUT or a cube position (VECCALC scratch is a TBuf) and a depth of
    1..8; init_buffer takes (que, num, len) with 1..8 buffers, once per queue."""
    with pytest.raises(ValueError, match="TBuf"):
        TQue(TPosition.VECCALC, 1)
    with pytest.raises(ValueError, match="VECIN"):
        TQue("C2", 1)                     # the bias table: not modelled
    with pytest.raises(ValueError, match="depth"):
        TQue(TPosition.VECIN, 0)
    ctx = ctx_on()
    q = TQue(TPosition.VECIN, 1)
    with pytest.raises(ValueError, match="num"):
        ctx.pipe.init_buffer(q, 0, 64)
    with pytest.raises(TypeError, match="que, num, len"):
        ctx.pipe.init_buffer(q, 64)
    ctx.pipe.init_buffer(q, 1, 64)
    with pytest.raises(QueueError, match="once"):
        ctx.pipe.init_buffer(q, 1, 64)
    with pytest.raises(TypeError, match="TQue or a TBuf"):
        ctx.pipe.init_buffer("queue", 1, 64)


def test_queue_before_init_buffer_says_so():
    q = TQue(TPosition.VECIN, 1)
    for call in (lambda: q.alloc_tensor(np.float32), lambda: q.deque(np.float32)):
        with pytest.raises(QueueError, match="init_buffer"):
            call()


def test_queue_pipes_follow_the_position():
    """VECIN: MTE2 produces, V consumes; VECOUT: V produces, MTE3 consumes."""
    vin, vout = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
    assert (vin.producer, vin.consumer) == ("MTE2", "V")
    assert (vout.producer, vout.consumer) == ("V", "MTE3")


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_queue_depth_is_how_many_enque_before_a_deque(depth):
    """TQue<VECIN, depth>: depth enques in a row are fine, one more raises naming the depth
    to declare; a deque makes room again."""
    ctx = ctx_on()
    q = que(ctx, TPosition.VECIN, depth + 1, 64, "x_in", depth=depth)
    tensors = [q.alloc_tensor(np.float32) for _ in range(depth + 1)]
    for t in tensors[:depth]:
        q.enque(t)
    with pytest.raises(QueueError, match=rf"depth {depth}.*TQue<VECIN, {depth + 1}>"):
        q.enque(tensors[depth])
    first = q.deque(np.float32)
    assert first.region is tensors[0].region           # first in, first out
    q.enque(tensors[depth])


def test_deque_reinterprets_as_the_dtype_asked():
    ctx = ctx_on()
    q = que(ctx, TPosition.VECIN, 1, 64, "q")
    q.enque(q.alloc_tensor(np.float32))
    t = q.deque(np.int32)
    assert t.dtype == np.int32 and t.count == 16


def test_alloc_tensor_cycles_through_the_slots():
    """AllocTensor hands out slot 0, 1, 0, ... as slots are freed."""
    ctx = ctx_on()
    q = que(ctx, TPosition.VECOUT, 2, 64, "out")
    a = q.alloc_tensor(np.float32)
    b = q.alloc_tensor(np.float32)
    assert a.region is not b.region
    q.enque(a)
    q.free_tensor(q.deque())
    assert q.alloc_tensor(np.float32).region is a.region


def test_tbuf_get_whole_or_first_len_elements():
    """TBuf::Get<T>() is the whole buffer, Get<T>(len) its first len elements (len in elements,
    within the buffer)."""
    ctx = ctx_on()
    b = tbuf(ctx, 100)                       # 128 bytes after rounding
    assert b.get(np.float32).count == 32 and b.get(np.float16).count == 64
    assert b.get(np.float32, 10).count == 10
    with pytest.raises(ValueError, match="len"):
        b.get(np.float32, 33)
    with pytest.raises(QueueError, match="init_buffer"):
        TBuf().get(np.float32)
    with pytest.raises(QueueError, match="once"):
        ctx.pipe.init_buffer(b, 64)
    with pytest.raises(ValueError, match="position"):
        TBuf("GM")


# ---- flags and barriers ------------------------------------------------------------------------------


def test_hard_events_are_source_underscore_destination():
    """HardEvent names the source pipe then the destination pipe: the AIV's and the AIC's
    (MTE2 -> MTE1 -> M -> FIX and back)."""
    assert {"MTE2_V", "V_MTE2", "V_MTE3", "MTE3_V", "MTE2_MTE3", "MTE3_MTE2", "MTE2_S", "S_MTE2", "MTE3_S",
            "S_MTE3", "V_S", "S_V", "MTE2_MTE1", "MTE1_M", "M_FIX", "FIX_M", "M_MTE1", "MTE1_MTE2"} <= set(HardEvent.ALL)
    for event in HardEvent.ALL:
        src, dst = event.split("_")
        assert src != dst and {src, dst} <= {"S", "MTE1", "MTE2", "MTE3", "V", "M", "FIX"}
    ctx = ctx_on()
    ctx.set_flag(HardEvent.MTE2_V, 7)
    ctx.wait_flag(HardEvent.MTE2_V, 7)
    assert not any(ctx.core.flags.values())


@pytest.mark.parametrize("event, event_id, match", [("MTE2_FIXP", 0, "unknown HardEvent"),
                                                     (("MTE2", "V"), 0, "unknown HardEvent"),
                                                     ("MTE2_V", 8, "0..7"), ("MTE2_V", -1, "0..7"),
                                                     ("MTE2_V", 1.0, "0..7")])
def test_flag_arguments_are_checked(event, event_id, match):
    with pytest.raises(AscendCRuleError, match=match):
        ctx_on().set_flag(event, event_id)


def test_pipe_barrier_takes_pipe_names():
    """PipeBarrier<PIPE_V>() etc.; PIPE_ALL makes every pipe wait for everything issued."""
    ctx = ctx_on()
    x = tbuf(ctx, 4096).get(np.float32)
    ctx.exp(x, x, 1024)
    ctx.pipe_barrier("PIPE_ALL")
    ctx.scalar("after", ops=1)
    v, s = ctx.core.events[0], ctx.core.events[1]
    assert s[2] >= v[3]                                 # S starts after V ended
    with pytest.raises(AscendCRuleError, match="PIPE_V"):
        ctx.pipe_barrier("V")


# ---- scalar UB access ---------------------------------------------------------------------------------


def test_get_and_set_value_are_scalar_ub_accesses():
    """GetValue / SetValue run on pipe S; get_value returns 0 in a timing-only run; indices are
    checked."""
    ctx = ctx_on()
    t = tbuf(ctx, 32).get(np.int32)
    t.set_value(3, 42)
    assert t.get_value(3) == 42 and t[3].get_value(0) == 42
    assert [ev[0] for ev in ctx.core.events] == [PIPE_CODE["S"]] * 3
    with pytest.raises(IndexError, match="outside 't'"):
        t.get_value(8)
    with pytest.raises(IndexError, match="outside"):
        t.set_value(-1, 0)
    ghost = tbuf(ctx_on(timing_only=True), 32).get(np.int32)
    ghost.set_value(3, 42)
    assert ghost.get_value(3) == 0


def test_scalar_compute_runs_only_in_full_runs():
    """ctx.scalar(..., compute=f) charges the ops and calls f only when numbers are wanted."""
    calls = []
    ctx_on().scalar("heap update", ops=5, compute=lambda: calls.append(1))
    ctx_on(timing_only=True).scalar("heap update", ops=5, compute=lambda: calls.append(2))
    assert calls == [1]
    with pytest.raises(ValueError, match="ops"):
        ctx_on().scalar("bad", ops=-1)


# ---- kernels and launch ----------------------------------------------------------------------------


def test_every_block_sees_its_index_and_the_block_count():
    seen = []

    @npu_kernel
    def who_am_i(ctx):
        seen.append((ctx.get_block_idx(), ctx.get_block_num()))

    launch(who_am_i, 5, hw=HW)
    assert seen == [(i, 5) for i in range(5)]


def test_npu_kernel_marks_functions():
    @npu_kernel(core_type="cube")
    def k(ctx):
        pass

    assert k.is_npu_kernel and k.core_type == "cube" and k.block_classes is None


def test_cube_kernels_run_on_cube_cores_with_cube_pipes():
    @npu_kernel(core_type="cube")
    def k(ctx):
        assert "M" in ctx.core.pipes and "V" not in ctx.core.pipes
        ctx.core.issue("M", "Mmad", 10)

    (rec,) = launch(k, 30, hw=HW, timing_only=True).launches
    assert rec.block_core.max() == HW.cube_cores - 1


def test_plain_functions_can_be_launched():
    got = []

    def k(ctx, a, *, b):
        got.append((a, b))

    launch(k, 2, 1, b=2, hw=HW)
    assert got == [(1, 2), (1, 2)]


def test_simulation_errors_from_a_kernel_propagate():
    """A kernel that would hang (wait without set) stops the launch with SimulationError."""
    @npu_kernel
    def hang(ctx):
        ctx.wait_flag("V_MTE3", 0)

    with pytest.raises(SimulationError, match="set_flag"):
        launch(hang, 1, hw=HW)


# ---- timing-only == full ---------------------------------------------------------------------------


@npu_kernel
def softmax_rows_kernel(ctx, x_gm, y_gm, rows, cols):
    """Per row (cols floats, not a whole number of blocks): DataCopyPad in, exp, sum, scale,
    DataCopyPad out; two slots per queue with depth 2 so the next row is prefetched."""
    padded = -(-cols // 8) * 8
    q_in, q_out = TQue(TPosition.VECIN, 2), TQue(TPosition.VECOUT, 1)
    ctx.pipe.init_buffer(q_in, 2, padded * 4, name="x_in")
    ctx.pipe.init_buffer(q_out, 2, padded * 4, name="y_out")
    tmp = TBuf()
    ctx.pipe.init_buffer(tmp, 256, name="tmp")
    pad = DataCopyPadExtParams(True, 0, padded - cols, 0.0)
    copy = DataCopyExtParams(1, cols * 4, 0, 0, 0)

    def load(r):
        x = q_in.alloc_tensor(np.float32)
        ctx.data_copy_pad(x, x_gm[r * cols], copy, pad)
        q_in.enque(x)

    load(0)
    for r in ctx.tile_loop(rows, key=lambda r: r + 1 < rows):
        if r + 1 < rows:
            load(r + 1)
        x = q_in.deque(np.float32)
        y = q_out.alloc_tensor(np.float32)
        s = tmp.get(np.float32)
        ctx.exp(y, x, cols)
        ctx.reduce_sum(s, y, s[8], cols)
        ctx.set_flag("V_S", 0)
        ctx.wait_flag("V_S", 0)
        total = s.get_value(0)
        ctx.set_flag("S_V", 0)
        ctx.wait_flag("S_V", 0)
        ctx.muls(y, y, 1.0 / total if total else 1.0, cols)
        q_out.enque(y)
        q_in.free_tensor(x)
        y = q_out.deque(np.float32)
        ctx.data_copy_pad(y_gm[r * cols], y, DataCopyExtParams(1, cols * 4, 0, 0, 0))
        q_out.free_tensor(y)


def test_timing_only_gives_the_same_timeline_as_a_full_run():
    """A small kernel with queues, padded copies, vector and scalar work: the full run computes
    the numbers (checked against numpy) and the timing-only run reproduces its events exactly."""
    rows, cols = 9, 13
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    y = GlobalTensor.empty(rows * cols, np.float32, "y")
    full = launch(softmax_rows_kernel, 1, GlobalTensor.from_array(x, "x"), y, rows, cols, hw=HW)
    ref = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(y.data.reshape(rows, cols), ref, rtol=1e-5)
    fast = launch(softmax_rows_kernel, 1, GlobalTensor.empty(rows * cols, np.float32, "x", timing_only=True),
                  GlobalTensor.empty(rows * cols, np.float32, "y", timing_only=True), rows, cols,
                  hw=HW, timing_only=True)
    cols_ = ["pipe", "name", "start_us", "end_us", "bytes", "elements"]
    assert fast.total_us == full.total_us
    assert full.events()[cols_].equals(fast.events()[cols_])
    names = full.events()["name"]
    assert len(names) == 1 + 6 * rows                   # the launch row + 6 instructions per row
    assert names.str.startswith("GetValue").sum() == rows
