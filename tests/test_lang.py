"""Tests of the kernel API (npu_lab.lang; DESIGN.md §4.1 UB rules and §5).

A kernel sees ``ctx``: ``get_block_idx()``, ``ctx.pipe`` (UB through TQue / TBuf / plain local
tensors), ``data_copy``, scalar and vector instructions. Each instruction computes with numpy in a
full run and always charges its cost; bad use raises a clear error. The timing side of queues,
flags and races is in test_sim_core.py; this file covers the API's contract and the UB allocator.
"""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab import (GlobalTensor, KernelContext, LocalTensor, SimulationError, UbOverflowError, get_preset,
                     launch, npu_kernel)
from npu_lab.sim.core import PIPE_CODE

HW = get_preset("ascend-910b2")


def ctx_on(hw=HW, **kwargs) -> KernelContext:
    return KernelContext(hw, 0, 1, **kwargs)


def loaded(ctx, values, name="a") -> LocalTensor:
    """UB tensor holding ``values`` (copied in on MTE2, then synced to V and S)."""
    values = np.asarray(values)
    t = ctx.pipe.alloc_local(values.dtype, values.size, name)
    ctx.data_copy(t, GlobalTensor.from_array(values, name + "_gm"))
    ctx.set_flag("MTE2", "V")
    ctx.wait_flag("MTE2", "V")
    return t


# ---- GlobalTensor / LocalTensor ----------------------------------------------------------------


def test_global_tensor_slices_are_views():
    """x[a:b] is a view with element offsets; writing through it writes the original."""
    g = GlobalTensor.from_array(np.arange(10, dtype=np.float32), "x")
    view = g[2:5]
    assert (view.size, view.nbytes) == (3, 12)
    view.data[:] = -1
    assert g.data[:6].tolist() == [0, 1, -1, -1, -1, 5]
    assert g[8:].size == 2


def test_global_tensor_rejects_strides_and_running_past_the_end():
    """GM views are contiguous [start:stop] slices inside the tensor; anything else says so."""
    g = GlobalTensor.from_array(np.zeros(10, np.float32), "x")
    with pytest.raises(TypeError, match="contiguous"):
        g[::2]
    with pytest.raises(TypeError, match="contiguous"):
        g[3]
    with pytest.raises(IndexError, match="past its end"):
        g[5:11]


def test_unsupported_dtype_is_refused_with_the_list():
    """float64 does not exist on the device; the error lists the supported dtypes."""
    with pytest.raises(TypeError, match="float32"):
        GlobalTensor.from_array(np.zeros(4), "x")


def test_timing_only_tensors_have_no_data():
    """In a timing-only run tensors carry shape and dtype but no numpy storage."""
    g = GlobalTensor.empty(100, np.float32, "x", timing_only=True)
    assert g.data is None and g.size == 100
    ctx = ctx_on(timing_only=True)
    t = ctx.pipe.alloc_local(np.float32, 8, "t")
    assert t.data is None


def test_local_tensor_views_and_reinterpret():
    """Slicing a LocalTensor views the same UB bytes; reinterpret sees them as another dtype."""
    ctx = ctx_on()
    t = ctx.pipe.alloc_local(np.float32, 16, "t")
    t.data[:] = np.arange(16)
    part = t[4:8]
    assert part.count == 4 and part.data.tolist() == [4, 5, 6, 7]
    as_int = t.reinterpret(np.int32)
    assert as_int.count == 16 and as_int.data[1] == np.float32(1).view(np.int32)
    assert t.reinterpret(np.uint8).count == 64
    with pytest.raises(IndexError, match="runs past"):
        t[10:20]
    with pytest.raises(IndexError, match="exceeds"):
        LocalTensor(t.region, np.float32, 10, 10)


# ---- the UB allocator ------------------------------------------------------------------------------


def test_ub_allocations_round_up_to_32_bytes():
    """A 4-byte buffer takes 32 bytes; every buffer starts on a 32-byte boundary."""
    ctx = ctx_on()
    a = ctx.pipe.alloc_local(np.float32, 1, "a")
    b = ctx.pipe.alloc_local(np.uint8, 33, "b")
    c = ctx.pipe.init_tbuf(100, "c").get(np.float32)
    assert (a.region.nbytes, b.region.nbytes, c.region.nbytes) == (32, 64, 128)
    assert [r.offset_bytes for r in (a.region, b.region, c.region)] == [0, 32, 96]
    assert ctx.ub.used_bytes == 224
    assert ctx.ub.free_bytes == HW.ub_bytes - 224


def test_queue_slots_are_each_rounded():
    """init_queue(…, num_buffers=2, nbytes=100) carves two 128-byte slots."""
    ctx = ctx_on()
    q = ctx.pipe.init_queue("VECIN", 2, 100, "x_in")
    assert q.num_buffers == 2
    assert [r.name for r in ctx.ub.held] == ["x_in[0]", "x_in[1]"]
    assert ctx.ub.used_bytes == 256


def test_ub_can_be_filled_exactly():
    """Buffers summing to exactly the UB size fit."""
    ctx = ctx_on()
    ctx.pipe.alloc_local(np.uint8, HW.ub_bytes - 64, "big")
    ctx.pipe.alloc_local(np.uint8, 64, "last")
    assert ctx.ub.free_bytes == 0


def test_ub_overflow_names_size_left_and_held_buffers():
    """Allocating past the UB raises UbOverflowError naming the size asked (rounded), the bytes
    left and the buffers already held."""
    ctx = ctx_on()
    ctx.pipe.init_queue("VECIN", 2, 65536, "x_in")
    ctx.pipe.alloc_local(np.float32, 1000, "scratch")  # 4000 B -> 4000 (already a multiple of 32)
    left = HW.ub_bytes - 2 * 65536 - 4000
    with pytest.raises(UbOverflowError) as info:
        ctx.pipe.alloc_local(np.float32, 20000, "y_in")  # 80000 B
    msg = str(info.value)
    assert "y_in" in msg and "80000" in msg
    assert f"only {left}" in msg and str(HW.ub_bytes) in msg
    assert "x_in[0]=65536 B" in msg and "x_in[1]=65536 B" in msg and "scratch=4000 B" in msg


def test_ub_overflow_reports_the_rounded_size():
    """The size named is the rounded one (33 bytes ask for 64)."""
    ctx = ctx_on()
    ctx.pipe.alloc_local(np.uint8, HW.ub_bytes - 32, "most")
    with pytest.raises(UbOverflowError, match="needs 64 bytes.*only 32"):
        ctx.pipe.alloc_local(np.uint8, 33, "odd")


def test_ub_overflow_is_a_memory_error_and_propagates_from_launch():
    """UbOverflowError is a MemoryError and stops a launch."""
    assert issubclass(UbOverflowError, MemoryError)

    @npu_kernel
    def greedy(ctx):
        ctx.pipe.alloc_local(np.float32, HW.ub_bytes // 4 + 1, "too_big")

    with pytest.raises(UbOverflowError, match="too_big"):
        launch(greedy, 1, hw=HW)
    with pytest.raises(UbOverflowError, match="too_big"):
        launch(greedy, 1, hw=HW, timing_only=True)  # the UB is accounted in timing-only runs too


def test_ub_size_comes_from_the_chip():
    """200 KB fits the 310P3's 256 KB UB but not the 910B2's 192 KB (the article's 256 KB
    assumption is a teaching point)."""
    ctx_on(get_preset("ascend-310p3")).pipe.alloc_local(np.uint8, 200 * 1024, "tile")
    with pytest.raises(UbOverflowError):
        ctx_on(HW).pipe.alloc_local(np.uint8, 200 * 1024, "tile")


@pytest.mark.parametrize("nbytes", [0, -32, 3.5])
def test_ub_buffer_size_must_be_positive_whole(nbytes):
    """A UB buffer has a positive whole number of bytes."""
    ctx = ctx_on()
    with pytest.raises(ValueError, match="positive whole number"):
        ctx.pipe.init_tbuf(nbytes, "bad")


def test_queue_arguments_are_checked():
    """init_queue takes a known position (VECIN / VECOUT) and 1..8 buffers."""
    ctx = ctx_on()
    with pytest.raises(ValueError, match="VECIN"):
        ctx.pipe.init_queue("A1", 1, 64, "q")
    with pytest.raises(ValueError, match="num_buffers"):
        ctx.pipe.init_queue("VECIN", 0, 64, "q")


def test_queue_pipes_follow_the_position():
    """VECIN: MTE2 produces, V consumes; VECOUT: V produces, MTE3 consumes; the scalar unit may
    take the vector unit's place."""
    ctx = ctx_on()
    vin = ctx.pipe.init_queue("VECIN", 1, 64, "in")
    vout = ctx.pipe.init_queue("VECOUT", 1, 64, "out")
    s_in = ctx.pipe.init_queue("VECIN", 1, 64, "s_in", consumer="S")
    assert (vin.producer, vin.consumer) == ("MTE2", "V")
    assert (vout.producer, vout.consumer) == ("V", "MTE3")
    assert s_in.consumer == "S"


# ---- data_copy -------------------------------------------------------------------------------------


def test_data_copy_moves_data_both_ways_and_counts_hbm_bytes():
    """GM->UB on MTE2, UB->GM on MTE3; the core counts HBM bytes read and written."""
    ctx = ctx_on()
    src = np.arange(40, dtype=np.float32)
    t = loaded(ctx, src)
    out = GlobalTensor.empty(40, np.float32, "out")
    ctx.set_flag("MTE2", "MTE3")
    ctx.wait_flag("MTE2", "MTE3")
    ctx.data_copy(out, t)
    np.testing.assert_array_equal(out.data, src)
    assert (ctx.core.hbm_read_bytes, ctx.core.hbm_write_bytes) == (160, 160)
    pipes = [ev[0] for ev in ctx.core.events]
    assert pipes == [PIPE_CODE["MTE2"], PIPE_CODE["MTE3"]]


def test_data_copy_partial_count():
    """data_copy(dst, src, count) moves only the first count elements."""
    ctx = ctx_on()
    t = ctx.pipe.alloc_local(np.float32, 16, "t")
    t.data[:] = 0
    ctx.data_copy(t, GlobalTensor.from_array(np.ones(16, np.float32)), 5)
    assert t.data.tolist() == [1] * 5 + [0] * 11


def test_data_copy_errors():
    """Only GM<->UB, same dtype, 1..min(sizes) elements: anything else says what is allowed."""
    ctx = ctx_on()
    t = ctx.pipe.alloc_local(np.float32, 8, "t")
    g = GlobalTensor.from_array(np.zeros(8, np.float32), "g")
    with pytest.raises(TypeError, match="GlobalTensor -> LocalTensor"):
        ctx.data_copy(g, g)
    with pytest.raises(TypeError, match="does not convert"):
        ctx.data_copy(t, GlobalTensor.from_array(np.zeros(8, np.float16), "h"))
    with pytest.raises(ValueError, match="1..8"):
        ctx.data_copy(t, g, 9)
    with pytest.raises(ValueError, match="1..8"):
        ctx.data_copy(t, g, 0)


# ---- scalar ----------------------------------------------------------------------------------------


def test_get_and_set_value():
    """GetValue / SetValue are scalar UB accesses; get_value returns 0 in a timing-only run."""
    ctx = ctx_on()
    t = ctx.pipe.alloc_local(np.int32, 8, "t")
    ctx.set_value(t, 3, 42)
    assert ctx.get_value(t, 3) == 42
    with pytest.raises(IndexError, match="outside 't'"):
        ctx.get_value(t, 8)
    ghost = ctx_on(timing_only=True)
    g = ghost.pipe.alloc_local(np.int32, 8, "t")
    ghost.set_value(g, 3, 42)
    assert ghost.get_value(g, 3) == 0


def test_scalar_compute_runs_only_in_full_runs():
    """ctx.scalar(..., compute=f) charges the ops and calls f only when numbers are wanted."""
    calls = []
    ctx_on().scalar("heap update", ops=5, compute=lambda: calls.append(1))
    ctx_on(timing_only=True).scalar("heap update", ops=5, compute=lambda: calls.append(2))
    assert calls == [1]
    with pytest.raises(ValueError, match="ops"):
        ctx_on().scalar("bad", ops=-1)


# ---- vector instructions ---------------------------------------------------------------------------


@pytest.mark.parametrize("op, ref", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                                     ("div", np.divide), ("max", np.maximum), ("min", np.minimum)])
def test_binary_vector_ops_match_numpy(op, ref):
    """Add/Sub/Mul/Div/Max/Min compute exactly what numpy computes in float32."""
    rng = np.random.default_rng(3)
    a_np = rng.standard_normal(300).astype(np.float32)
    b_np = rng.standard_normal(300).astype(np.float32) + 3
    ctx = ctx_on()
    a, b = loaded(ctx, a_np, "a"), loaded(ctx, b_np, "b")
    out = ctx.pipe.alloc_local(np.float32, 300, "out")
    getattr(ctx, op)(out, a, b)
    np.testing.assert_array_equal(out.data, ref(a_np, b_np))


def test_scalar_operand_ops_and_exp():
    """Muls/Adds/Maxs (tensor op scalar) and Exp compute what numpy computes in float32."""
    x = np.linspace(-3, 3, 100, dtype=np.float32)
    ctx = ctx_on()
    a = loaded(ctx, x)
    out = ctx.pipe.alloc_local(np.float32, 100, "out")
    ctx.muls(out, a, 1.5)
    np.testing.assert_array_equal(out.data, x * np.float32(1.5))
    ctx.adds(out, a, -2.0)
    np.testing.assert_array_equal(out.data, x - np.float32(2))
    ctx.maxs(out, a, 0.0)
    np.testing.assert_array_equal(out.data, np.maximum(x, 0))
    ctx.exp(out, a)
    np.testing.assert_array_equal(out.data, np.exp(x))


def test_count_limits_the_elements_touched():
    """count=n touches the first n elements only and is charged for n."""
    ctx = ctx_on()
    a = loaded(ctx, np.ones(128, np.float32))
    out = ctx.pipe.alloc_local(np.float32, 128, "out")
    ctx.duplicate(out, 0.0)
    ctx.add(out, a, a, 10)
    assert out.data[:10].tolist() == [2] * 10 and out.data[10:].sum() == 0
    assert ctx.core.events[-1][1] == "Add x1"  # 40 bytes = one repeat


def test_broadcast_forms():
    """rows=R with broadcast='tile' reuses src1 for each row; 'row' holds one value per row."""
    ctx = ctx_on()
    a = loaded(ctx, np.arange(6, dtype=np.float32), "a")
    per_col = loaded(ctx, np.array([10, 20, 30], np.float32), "c")
    per_row = loaded(ctx, np.array([100, 200], np.float32), "r")
    out = ctx.pipe.alloc_local(np.float32, 6, "out")
    ctx.add(out, a, per_col, rows=2, broadcast="tile")
    assert out.data.tolist() == [10, 21, 32, 13, 24, 35]
    ctx.add(out, a, per_row, rows=2, broadcast="row")
    assert out.data.tolist() == [100, 101, 102, 203, 204, 205]
    with pytest.raises(ValueError, match="broadcast"):
        ctx.add(out, a, per_row, rows=4, broadcast="row")


def test_reductions_compare_select():
    """ReduceMax/ReduceSum, CompareScalar (uint8 0/1 mask) and Select agree with numpy."""
    x = np.array([3, -1, 7, 7, 2], np.float32)
    ctx = ctx_on()
    a = loaded(ctx, x)
    r = ctx.pipe.alloc_local(np.float32, 8, "r")
    ctx.reduce_max(r, a)
    assert r.data[0] == 7
    ctx.reduce_sum(r, a)
    assert r.data[0] == 18
    mask = ctx.pipe.alloc_local(np.uint8, 5, "mask")
    ctx.compare_scalar(mask, a, 2.5, "GT")
    assert mask.data.tolist() == [1, 0, 1, 1, 0]
    out = ctx.pipe.alloc_local(np.float32, 5, "out")
    ctx.select(out, mask, a, 0.0)
    assert out.data.tolist() == [3, 0, 7, 7, 0]
    with pytest.raises(ValueError, match="LT"):
        ctx.compare_scalar(mask, a, 0.0, "BIGGER")


def test_vector_errors_say_what_would_be_right():
    """Vector ops take UB tensors only, counts within every operand, count >= 1."""
    ctx = ctx_on()
    a = ctx.pipe.alloc_local(np.float32, 8, "a")
    small = ctx.pipe.alloc_local(np.float32, 4, "small")
    g = GlobalTensor.from_array(np.zeros(8, np.float32), "g")
    with pytest.raises(TypeError, match="data_copy"):
        ctx.add(a, g, a)
    with pytest.raises(ValueError, match="'small'"):
        ctx.add(a, a, small)
    with pytest.raises(ValueError, match=">= 1"):
        ctx.add(a, a, a, 0)


def test_vector_ops_in_timing_only_runs_cost_the_same_and_compute_nothing():
    """Timing-only: the same trace as a full run, and no UB storage at all."""
    def run(timing_only):
        ctx = ctx_on(timing_only=timing_only)
        a = ctx.pipe.alloc_local(np.float32, 1000, "a")
        ctx.duplicate(a, 1.0)
        ctx.exp(a, a)
        ctx.reduce_sum(a, a)
        return ctx

    full, fast = run(False), run(True)
    assert full.core.finish().same_work_as(fast.core.finish())
    assert fast.pipe.allocator.held[0].storage is None


# ---- kernels and launch ----------------------------------------------------------------------------


def test_every_block_sees_its_index_and_the_block_count():
    """get_block_idx() is 0..block_dim-1, get_block_num() is block_dim."""
    seen = []

    @npu_kernel
    def who_am_i(ctx):
        seen.append((ctx.get_block_idx(), ctx.get_block_num()))

    launch(who_am_i, 5, hw=HW)
    assert seen == [(i, 5) for i in range(5)]


def test_npu_kernel_marks_functions():
    """@npu_kernel records core_type and block_classes on the function."""
    @npu_kernel(core_type="cube")
    def k(ctx):
        pass

    assert k.is_npu_kernel and k.core_type == "cube" and k.block_classes is None


def test_cube_kernels_run_on_cube_cores_with_cube_pipes():
    """A cube kernel gets the cube pipes (MTE2, MTE1, M, FIX) and is placed on cube cores."""
    @npu_kernel(core_type="cube")
    def k(ctx):
        assert "M" in ctx.core.pipes and "V" not in ctx.core.pipes
        ctx.core.issue("M", "Mmad", 10)

    (rec,) = launch(k, 30, hw=HW, timing_only=True).launches
    assert rec.block_core.max() == HW.cube_cores - 1


def test_plain_functions_can_be_launched():
    """Any callable kernel(ctx, ...) works; keyword arguments are passed through."""
    got = []

    def k(ctx, a, *, b):
        got.append((a, b))

    launch(k, 2, 1, b=2, hw=HW)
    assert got == [(1, 2), (1, 2)]


def test_simulation_errors_from_a_kernel_propagate():
    """A kernel that would hang (wait without set) stops the launch with SimulationError."""
    @npu_kernel
    def hang(ctx):
        ctx.wait_flag("V", "MTE3")

    with pytest.raises(SimulationError, match="set_flag"):
        launch(hang, 1, hw=HW)
