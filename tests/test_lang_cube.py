"""The cube core's instructions one by one (npu_lab.lang.cube): the layouts they write are the
real ones (NZ in L1, ZZ in L0A, ZN in L0B, NZ in L0C), Fixpipe's conversions, the atomic add, the
queue syncs on cube positions, the costs' published rates, and the 310P's differences."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab import GlobalTensor, get_preset, launch
from npu_lab.lang import (FixpipeParamsV220, KernelContext, LoadData2DParams, MmadParams, Nd2NzParams, QuantMode_t,
                          TBuf, TQue, npu_kernel)
from npu_lab.lang.memory import TPosition, buffer_of
from npu_lab.sim.core import PIPE_CODE
from npu_lab.sim.cube_costs import load_data_cycles, mmad_cycles

HW = get_preset("ascend-910b2")
P310 = get_preset("ascend-310p3")


def cube_ctx(hw=HW, **kw) -> KernelContext:
    return KernelContext(hw, 0, 1, core_type="cube", **kw)


def buf(ctx, pos, nbytes, dtype):
    b = TBuf(pos)
    ctx.pipe.init_buffer(b, nbytes)
    return b.get(dtype)


def test_a_cube_core_has_its_four_buffers_with_the_spec_capacities():
    ctx = cube_ctx()
    caps = {name: a.capacity_bytes for name, a in ctx.pipe.allocators.items()}
    assert caps == {"L1": HW.l1_bytes, "L0A": HW.l0a_bytes, "L0B": HW.l0b_bytes, "L0C": HW.l0c_bytes}
    assert (HW.l1_bytes, HW.l0a_bytes, HW.l0c_bytes) == (512 * 1024, 64 * 1024, 128 * 1024)
    assert (P310.l1_bytes, P310.l0c_bytes) == (1024 * 1024, 256 * 1024)
    t = buf(ctx, TPosition.B2, 512, np.float16)
    assert buffer_of(t) == "L0B" and t.ub_address == 0
    assert "UB" in cube_ctx(P310).pipe.allocators          # the 310P's AI core holds the vector unit too


def test_nd2nz_writes_the_nz_layout_and_pads_with_zeros():
    ctx = cube_ctx()
    a = (np.arange(20 * 20) % 251).astype(np.float16).reshape(20, 20)
    l1 = buf(ctx, TPosition.A1, 32 * 32 * 2, np.float16)
    ctx.data_copy(l1, GlobalTensor.from_array(a, "a"), Nd2NzParams(1, 20, 20, 0, 20, 32, 1, 0))
    data = l1.data
    for r, c in ((0, 0), (5, 3), (19, 19), (7, 16)):
        assert data[(c // 16) * 32 * 16 + r * 16 + c % 16] == a[r, c]
    # columns 20..31 of the second block are the 32-byte padding: zeros
    assert (data[32 * 16 + np.arange(20)[:, None] * 16 + np.arange(4, 16)] == 0).all()


def test_load_data_transposes_each_fractal_for_zn():
    ctx = cube_ctx()
    l1 = buf(ctx, TPosition.B1, 1024, np.float16)
    l0b = buf(ctx, TPosition.B2, 1024, np.float16)
    l1.data[:512] = np.arange(512).astype(np.float16)
    ctx.pipe_barrier("PIPE_ALL")
    ctx.load_data(l0b, l1, LoadData2DParams(0, 2, 1, 0, 0, True, 0))
    for f in range(2):
        np.testing.assert_array_equal(l0b.data[f * 256:(f + 1) * 256].reshape(16, 16),
                                      l1.data[f * 256:(f + 1) * 256].reshape(16, 16).T)


def _matmul_kernel(m, k, n, *, quant, relu=False, out=np.float16, dtype=np.float16, deq=1.0, atomic_times=0):
    @npu_kernel(core_type="cube")
    def kernel(ctx, a_gm, b_gm, c_gm):
        a1, b1 = buf(ctx, TPosition.A1, m * k * 2 * 2, dtype), buf(ctx, TPosition.B1, k * n * 2 * 2, dtype)
        a2, b2 = buf(ctx, TPosition.A2, 8192, dtype), buf(ctx, TPosition.B2, 8192, dtype)
        acc = np.int32 if dtype == np.int8 else np.float32
        c = buf(ctx, TPosition.CO1, m * n * 4, acc)
        k0 = 32 // np.dtype(dtype).itemsize
        ctx.data_copy(a1, a_gm, Nd2NzParams(1, m, k, 0, k, m, 1, 0))
        ctx.data_copy(b1, b_gm, Nd2NzParams(1, n, k, 0, k, n, 1, 0))      # Bᵀ [n, k]
        ctx.set_flag("MTE2_MTE1", 0)
        ctx.wait_flag("MTE2_MTE1", 0)
        k1 = k // k0
        for j in range(k1):
            ctx.load_data(a2[j * 512 // np.dtype(dtype).itemsize], a1, LoadData2DParams(j * (m // 16), m // 16, 1, 0, k1 - 1, False, 0))
        ctx.load_data(b2, b1, LoadData2DParams(0, k1 * (n // 16), 1, 0, 0, False, 0))
        ctx.set_flag("MTE1_M", 0)
        ctx.wait_flag("MTE1_M", 0)
        ctx.mmad(c, a2, b2, MmadParams(m, n, k, 0, False, True))
        ctx.set_flag("M_FIX", 0)
        ctx.wait_flag("M_FIX", 0)
        if atomic_times:
            ctx.set_atomic_add(out)
        for _ in range(max(1, atomic_times)):
            ctx.fixpipe(c_gm, c, FixpipeParamsV220(n, m, m, n, relu, quant, deq, 1, 0, 0, 0))
        if atomic_times:
            ctx.disable_dma_atomic()
    return kernel


@pytest.mark.parametrize("dtype, acc, quant, out", [(np.float16, np.float32, QuantMode_t.F322F16, np.float16),
                                                    (np.float16, np.float32, QuantMode_t.NoQuant, np.float32),
                                                    (np.float32, np.float32, QuantMode_t.NoQuant, np.float32),
                                                    (np.int8, np.int32, QuantMode_t.NoQuant, np.int32),
                                                    (np.int8, np.int32, QuantMode_t.DEQF16, np.float16)])
def test_fixpipe_conversions_and_relu(dtype, acc, quant, out):
    """Bᵀ loaded without transpose (its NZ fractals are ZN already), Mmad, Fixpipe with reluEn."""
    m = n = 32
    k = 64
    rng = np.random.default_rng(2)
    if dtype == np.int8:
        a, bt = rng.integers(-20, 20, (m, k)).astype(np.int8), rng.integers(-20, 20, (n, k)).astype(np.int8)
    else:
        a, bt = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype)
    c = GlobalTensor.empty(m * n, out, "c")
    deq = 0.5 if quant == QuantMode_t.DEQF16 else 1.0
    launch(_matmul_kernel(m, k, n, quant=quant, relu=True, out=out, dtype=dtype, deq=deq), 1,
           GlobalTensor.from_array(a, "a"), GlobalTensor.from_array(bt, "bt"), c, hw=HW)
    want = np.maximum(a.astype(np.float64) @ bt.T.astype(np.float64), 0) * deq
    got = c.data.reshape(m, n).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())
    assert (got >= 0).all()


def test_atomic_add_accumulates_into_gm():
    m = n = 16
    k = 32
    rng = np.random.default_rng(3)
    a, bt = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((n, k)).astype(np.float16)
    c = GlobalTensor.from_array(np.full(m * n, 1.0, np.float32), "c")
    launch(_matmul_kernel(m, k, n, quant=QuantMode_t.NoQuant, out=np.float32, atomic_times=3), 1,
           GlobalTensor.from_array(a, "a"), GlobalTensor.from_array(bt, "bt"), c, hw=HW)
    want = 1.0 + 3 * (a.astype(np.float64) @ bt.T.astype(np.float64))
    np.testing.assert_allclose(c.data.reshape(m, n), want, rtol=1e-5, atol=1e-4)


def test_cube_queues_sync_their_pipes():
    """TQue<A1>: MTE2 -> MTE1; TQue<A2>: MTE1 -> M; TQue<CO1>: M -> FIX (the DeQue makes the consumer
    wait for the producer's completion, so no RaceError and the consumer starts after it)."""
    ctx = cube_ctx(timing_only=True)
    q1, q2 = TQue(TPosition.A1, 1), TQue(TPosition.A2, 1)
    ctx.pipe.init_buffer(q1, 1, 1024)
    ctx.pipe.init_buffer(q2, 1, 1024)
    t1 = q1.alloc_tensor(np.float16)
    ctx.data_copy(t1, GlobalTensor.empty(512, np.float16, "a", timing_only=True), Nd2NzParams(1, 16, 32, 0, 32, 16, 1, 0))
    loaded = ctx.core.done["MTE2"]
    q1.enque(t1)
    t1 = q1.deque(np.float16)
    t2 = q2.alloc_tensor(np.float16)
    ctx.load_data(t2, t1, LoadData2DParams(0, 2, 1, 0, 0, False, 0))
    trace = ctx.core.finish()
    mte1_start = trace.start_cycles[list(trace.pipe).index(PIPE_CODE["MTE1"])]
    assert mte1_start >= loaded > 0


def test_mmad_costs_follow_the_published_rates():
    h = HW.cube_mmad_head_cycles
    assert mmad_cycles(HW, 16, 16, 16, np.float16) == (h + 1, 1)
    assert mmad_cycles(HW, 30, 40, 70, np.float16)[0] == h + 2 * 3 * 5          # M, N, K rounded to fractals
    assert mmad_cycles(HW, 16, 16, 64, np.int8)[0] == h + 2                      # 16x16x32 per cycle
    assert mmad_cycles(HW, 16, 16, 16, np.float32)[0] == h + 4                   # 16x16x4 per cycle
    assert load_data_cycles(HW, 4096, "L0A") == HW.mte1_head_cycles + 16         # 256 B/cycle
    assert load_data_cycles(HW, 4096, "L0B") == HW.mte1_head_cycles + 32         # 128 B/cycle
    for field in ("cube_fractal_cycles", "mte1_l0a_bytes_per_cycle", "mte1_l0b_bytes_per_cycle"):
        kind, note = HW.provenance[field]
        assert kind == "vendor-doc" and "Cube指令理论性能汇总.md" in note
        assert P310.provenance[field][0] == "assumed"


def test_the_310p_mmad_has_half_output_and_no_float():
    ctx = cube_ctx(P310)
    a2, b2 = buf(ctx, TPosition.A2, 512, np.float16), buf(ctx, TPosition.B2, 512, np.float16)
    c = buf(ctx, TPosition.CO1, 1024, np.float16)
    a2.data[:] = 1
    b2.data[:] = 1
    ctx.mmad(c, a2, b2, MmadParams(16, 16, 16, 0, False, True))
    assert (c.data[:256] == 16).all()
