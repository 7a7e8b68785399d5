"""The cube core's illegal programs (issue 17 §1), in the style of tests/test_illegal_programs.py:
each kernel breaks one rule of Ascend C or of the device, cites the page the rule comes from, and
the launch must stop with an error naming the rule (and the page). A first kernel, the legal
matmul the cases derive from, must run and give numpy's product: so each case fails for its one
illegal line, not for something else.

Pages are relative to ``docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/`` (``X/``) or to the
asc-devkit root when they start with ``docs/``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import pytest

from npu_lab import GlobalTensor, SimulationError, UbOverflowError, launch
from npu_lab.lang import (AscendCRuleError, CapabilityError, FixpipeParamsV220, LoadData2DParams, MmadParams,
                          Nd2NzParams, QuantMode_t, QueueError, RaceError, TBuf, TQue, deq_scale_float, deq_scale_uint64,
                          float_to_bfloat16, npu_kernel)
from npu_lab.lang.memory import TPosition

B910, P310 = "ascend-910b2", "ascend-310p3"
X = "docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/"
MIRROR = Path("/work/.mirror/mirror-cann+asc-devkit/repo")
M = K = N = 32
RNG = np.random.default_rng(7)
A_HOST = RNG.standard_normal((M, K)).astype(np.float16)
B_HOST = RNG.standard_normal((K, N)).astype(np.float16)
DONE: dict = {}


def gm_a():
    return GlobalTensor.from_array(A_HOST, "a_gm")


def gm_b():
    return GlobalTensor.from_array(B_HOST, "b_gm")


def que(ctx, pos, nbytes, num=1, name=None):
    q = TQue(pos, 1)
    ctx.pipe.init_buffer(q, num, nbytes, name=name or pos.lower())
    return q


def matmul(ctx, *, nd2nz=True, transpose_b=True, flags=("MTE2_MTE1", "MTE1_M", "M_FIX"), m=M, k=K,
           l0c_bytes=M * N * 4, a2_offset=0, c_out=None, quant=QuantMode_t.F322F16, l1_pos=TPosition.A1,
           a_kind="half", src_stride=M):
    """The basic-API matmul of the asc-devkit example (matmul_basic_api.asc), 32 x 32 x 32, with
    TBuf buffers and hand-written flags; each keyword breaks one thing."""
    dt = np.float16
    a1b, b1b, a2b, b2b, cb = TBuf(l1_pos), TBuf(TPosition.B1), TBuf(TPosition.A2), TBuf(TPosition.B2), TBuf(TPosition.CO1)
    for b, n in ((a1b, M * K * 2), (b1b, K * N * 2), (a2b, M * K * 2 + 512), (b2b, K * N * 2), (cb, l0c_bytes)):
        ctx.pipe.init_buffer(b, n)
    a1, b1, a2, b2, c = a1b.get(dt), b1b.get(dt), a2b.get(dt)[a2_offset], b2b.get(dt), cb.get(np.float32)
    if nd2nz:
        ctx.data_copy(a1, gm_a(), Nd2NzParams(1, M, K, 0, K, M, 1, 0))
    else:
        ctx.data_copy(a1, gm_a(), M * K)                  # ND, row after row
    ctx.data_copy(b1, gm_b(), Nd2NzParams(1, K, N, 0, N, K, 1, 0))
    if "MTE2_MTE1" in flags:
        ctx.set_flag("MTE2_MTE1", 0)
        ctx.wait_flag("MTE2_MTE1", 0)
    for i in range(M // 16):
        ctx.load_data(a2[i * K * 16], a1[i * 256], LoadData2DParams(0, K // 16, M // 16, 0, 0, False, 0))
    for i in range(K // 16):
        ctx.load_data(b2[i * N * 16], b1[i * 256], LoadData2DParams(0, N // 16, K // 16, 0, 0, transpose_b, 0))
    if "MTE1_M" in flags:
        ctx.set_flag("MTE1_M", 0)
        ctx.wait_flag("MTE1_M", 0)
    ctx.mmad(c, a2, b2, MmadParams(m, N, k, 0, False, True))
    if "M_FIX" in flags:
        ctx.set_flag("M_FIX", 0)
        ctx.wait_flag("M_FIX", 0)
    out = c_out if c_out is not None else GlobalTensor.empty(M * N, np.float16, "c_gm")
    ctx.fixpipe(out, c, FixpipeParamsV220(N, M, src_stride, N, False, quant, 0, 1, 0, 0, 0))
    DONE["c"] = out


def cube(fn):
    return npu_kernel(fn, core_type="cube")


class Illegal(NamedTuple):
    id: str
    rule: str
    page: str
    kernel: Callable
    hw: str
    error: type
    match: str


# ---- the kernels ----------------------------------------------------------------------------------------

@cube
def k_legal(ctx):
    matmul(ctx)


@cube
def k_nd_into_l0a(ctx):
    matmul(ctx, nd2nz=False)                       # A copied ND into L1, then LoadData as fractals


@cube
def k_no_mte2_mte1(ctx):
    matmul(ctx, flags=("MTE1_M", "M_FIX"))


@cube
def k_no_mte1_m(ctx):
    matmul(ctx, flags=("MTE2_MTE1", "M_FIX"))


@cube
def k_no_m_fix(ctx):
    matmul(ctx, flags=("MTE2_MTE1", "MTE1_M"))


@cube
def k_l0c_overflow(ctx):
    c = TQue(TPosition.CO1, 1)
    ctx.pipe.init_buffer(c, 2, 128 * 256 * 4)      # two 128 x 256 fp32 tiles: 256 KB > 128 KB


@cube
def k_l0a_overflow(ctx):
    a = TBuf(TPosition.A2)
    ctx.pipe.init_buffer(a, 64 * 1024 + 32)


@cube
def k_mmad_reads_past_l0c(ctx):
    matmul(ctx, l0c_bytes=16 * 32 * 4)             # room for one 16-row block of C, Mmad needs two


@cube
def k_a2_not_512_aligned(ctx):
    matmul(ctx, a2_offset=16)                      # 32 B into L0A


@cube
def k_transpose_float(ctx):
    b1, b2 = TBuf(TPosition.B1), TBuf(TPosition.B2)
    ctx.pipe.init_buffer(b1, 4096)
    ctx.pipe.init_buffer(b2, 4096)
    ctx.load_data(b2.get(np.float32), b1.get(np.float32), LoadData2DParams(0, 1, 1, 0, 0, True, 0))


@cube
def k_gemv_m1(ctx):
    matmul(ctx, m=1)


@cube
def k_wrong_quant(ctx):
    matmul(ctx, quant=QuantMode_t.NoQuant)         # fp32 L0C into a half GM tensor without F322F16


@cube
def k_src_stride_short(ctx):
    matmul(ctx, src_stride=16)                     # L0C column blocks are 32 rows apart


@cube
def k_mmad_on_ub(ctx):
    ub = TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(ub, 8192)
    a2, b2, c = TBuf(TPosition.A2), TBuf(TPosition.B2), TBuf(TPosition.CO1)
    for b in (a2, b2, c):
        ctx.pipe.init_buffer(b, 2048)
    ctx.mmad(c.get(np.float32), ub.get(np.float16), b2.get(np.float16), MmadParams(16, 16, 16, 0, False, True))


@cube
def k_fixpipe_on_310p(ctx):
    matmul(ctx)


@npu_kernel
def k_mmad_on_vector_core(ctx):
    ctx.mmad(None, None, None, MmadParams(16, 16, 16, 0, False, True))


@cube
def k_vecin_on_aic(ctx):
    que(ctx, TPosition.VECIN, 1024)


@cube
def k_float_mmad_on_310p(ctx):
    a2, b2, c = TBuf(TPosition.A2), TBuf(TPosition.B2), TBuf(TPosition.CO1)
    for b in (a2, b2, c):
        ctx.pipe.init_buffer(b, 4096)
    ctx.mmad(c.get(np.float32), a2.get(np.float32), b2.get(np.float32), MmadParams(16, 16, 8, 0, False, True))


@cube
def k_nd2nz_int8_on_310p(ctx):
    a1 = TBuf(TPosition.A1)
    ctx.pipe.init_buffer(a1, 1024)
    ctx.data_copy(a1.get(np.int8), GlobalTensor.from_array(np.zeros(512, np.int8), "w"),
                  Nd2NzParams(1, 16, 32, 0, 32, 16, 1, 0))


@cube
def k_nd2nz_overlap(ctx):
    a1 = TBuf(TPosition.A1)
    ctx.pipe.init_buffer(a1, M * K * 2)
    ctx.data_copy(a1.get(np.float16), gm_a(), Nd2NzParams(1, M, K, 0, K, 16, 1, 0))   # blocks 16 rows apart, 32 rows


@cube
def k_small_accumulate_without_barrier(ctx):
    a2, b2, c = TBuf(TPosition.A2), TBuf(TPosition.B2), TBuf(TPosition.CO1)
    for b in (a2, b2, c):
        ctx.pipe.init_buffer(b, 2048)
    fm, flt, acc = a2.get(np.float16), b2.get(np.float16), c.get(np.float32)
    ctx.mmad(acc, fm, flt, MmadParams(16, 16, 16, 0, False, True))
    ctx.mmad(acc, fm, flt, MmadParams(16, 16, 16, 0, False, False))   # (16/16)*(16/16) < 10: needs PIPE_M


@cube
def k_atomic_type_mismatch(ctx):
    ctx.set_atomic_add(np.float32)
    matmul(ctx)                                    # Fixpipe writes half under SetAtomicAdd<float>


@cube
def k_nd2nz_into_l0a(ctx):
    a2 = TBuf(TPosition.A2)
    ctx.pipe.init_buffer(a2, M * K * 2)
    ctx.data_copy(a2.get(np.float16), gm_a(), Nd2NzParams(1, M, K, 0, K, M, 1, 0))


@npu_kernel
def k_cube_event_on_aiv(ctx):
    ctx.set_flag("MTE2_MTE1", 0)                   # an AIV has no MTE1


# ---- int8 x int8 -> int32, dequantised per channel in Fixpipe (VDEQF16), and bfloat16 -----------------
I8_A = RNG.integers(-127, 128, (M, K)).astype(np.int8)
I8_BT = RNG.integers(-127, 128, (N, K)).astype(np.int8)           # Bᵀ [N, K]: int8 has no LoadData transpose
I8_SCALES = RNG.uniform(1e-3, 1e-2, N)


def int8_matmul(ctx, *, quant=QuantMode_t.VDEQF16, ws="ok", words=N, ws_dtype=np.uint64, ws_pos=TPosition.C1,
                fill=True, l0c_dtype=np.int32):
    """32 x 32 x 32 int8 matmul whose int32 L0C leaves by Fixpipe(dst, src, cbufWorkspace, params)
    with one quant word per column (随路量化.md: tensor quantisation); each keyword breaks one thing."""
    a1b, b1b, a2b, b2b, cb, qb = (TBuf(TPosition.A1), TBuf(TPosition.B1), TBuf(TPosition.A2), TBuf(TPosition.B2),
                                  TBuf(TPosition.CO1), TBuf(ws_pos))
    for b, n in ((a1b, M * K), (b1b, N * K), (a2b, M * K), (b2b, N * K), (cb, M * N * 4), (qb, max(words, 4) * 8)):
        ctx.pipe.init_buffer(b, n)
    a1, b1, a2, b2 = a1b.get(np.int8), b1b.get(np.int8), a2b.get(np.int8), b2b.get(np.int8)
    c = cb.get(l0c_dtype)
    ctx.data_copy(a1, GlobalTensor.from_array(I8_A, "a_gm"), Nd2NzParams(1, M, K, 0, K, M, 1, 0))
    ctx.data_copy(b1, GlobalTensor.from_array(I8_BT, "bt_gm"), Nd2NzParams(1, N, K, 0, K, N, 1, 0))
    if fill:
        w = np.zeros(max(words, 4), np.uint64)
        w[:min(words, N)] = deq_scale_uint64(I8_SCALES)[:words]
        if ws_dtype != np.uint64:
            w = w.astype(ws_dtype)
        ctx.data_copy(qb.get(ws_dtype), GlobalTensor.from_array(w, "deq_gm"), w.size)
    ctx.set_flag("MTE2_MTE1", 0)
    ctx.wait_flag("MTE2_MTE1", 0)
    ctx.set_flag("MTE2_FIX", 0)
    ctx.wait_flag("MTE2_FIX", 0)
    ctx.load_data(a2, a1, LoadData2DParams(0, M // 16, 1, 0, 0, False, 0))
    ctx.load_data(b2, b1, LoadData2DParams(0, N // 16, 1, 0, 0, False, 0))
    ctx.set_flag("MTE1_M", 0)
    ctx.wait_flag("MTE1_M", 0)
    if l0c_dtype == np.int32:
        ctx.mmad(c, a2, b2, MmadParams(M, N, K, 0, False, True))
    ctx.set_flag("M_FIX", 0)
    ctx.wait_flag("M_FIX", 0)
    out = GlobalTensor.empty(M * N, np.float16, "c_gm")
    params = FixpipeParamsV220(N, M, M, N, False, quant, 0, 1, 0, 0, 0)
    if ws is None:
        ctx.fixpipe(out, c, params)
    else:
        ctx.fixpipe(out, c, qb.get(ws_dtype), params)
    DONE["c8"] = out


@cube
def k_legal_vdeqf16(ctx):
    int8_matmul(ctx)


@cube
def k_vdeqf16_without_workspace(ctx):
    int8_matmul(ctx, ws=None)                      # VDEQF16 through the three-argument Fixpipe


@cube
def k_vdeqf16_short_workspace(ctx):
    int8_matmul(ctx, words=16)                     # 16 words for 32 columns


@cube
def k_vdeqf16_float_workspace(ctx):
    int8_matmul(ctx, ws_dtype=np.float32)          # the scales as float, not uint64 words


@cube
def k_vdeqf16_workspace_in_l0b(ctx):
    int8_matmul(ctx, ws_pos=TPosition.B2, fill=False)


@cube
def k_vdeqf16_workspace_never_filled(ctx):
    int8_matmul(ctx, fill=False)                   # L1 holds leftovers: not a normal float


@cube
def k_vdeqf16_on_float_l0c(ctx):
    int8_matmul(ctx, l0c_dtype=np.float32)         # a float L0C: (V)DEQF16 dequantises int32


@cube
def k_workspace_with_f322f16(ctx):
    matmul_ws = TBuf(TPosition.C1)
    ctx.pipe.init_buffer(matmul_ws, 256)
    cb = TBuf(TPosition.CO1)
    ctx.pipe.init_buffer(cb, 16 * 16 * 4)
    ctx.fixpipe(GlobalTensor.empty(256, np.float16, "c_gm"), cb.get(np.float32), matmul_ws.get(np.uint64),
                FixpipeParamsV220(16, 16, 16, 16, False, QuantMode_t.F322F16, 0, 1, 0, 0, 0))


def _bf16_mmad(ctx, b_dtype=np.uint16):
    a2, b2, c = TBuf(TPosition.A2), TBuf(TPosition.B2), TBuf(TPosition.CO1)
    for b in (a2, b2, c):
        ctx.pipe.init_buffer(b, 2048)
    ctx.mmad(c.get(np.float32), a2.get(np.uint16), b2.get(b_dtype), MmadParams(16, 16, 16, 0, False, True))


@cube
def k_bf16_mmad_on_310p(ctx):
    _bf16_mmad(ctx)


@cube
def k_bf16_times_half(ctx):
    _bf16_mmad(ctx, np.float16)


@cube
def k_bf16_out_with_f322f16(ctx):
    cb = TBuf(TPosition.CO1)
    ctx.pipe.init_buffer(cb, 16 * 16 * 4)
    ctx.fixpipe(GlobalTensor.empty(256, np.uint16, "c_bf16"), cb.get(np.float32),
                FixpipeParamsV220(16, 16, 16, 16, False, QuantMode_t.F322F16, 0, 1, 0, 0, 0))


CATALOGUE = [
    Illegal("cube-event-on-aiv", "a HardEvent names two pipes of this core",
            "docs/zh/api/SIMD-API/基础API/同步控制/核内同步/SetFlag-WaitFlag(ISASI).md", k_cube_event_on_aiv, B910,
            AscendCRuleError, r"HardEvent MTE2_MTE1 names pipe MTE1, which this vector core \(AIV\) does not have.*MTE2_V"),
    Illegal("nd-tile-into-l0a", "LoadData moves NZ fractals: an ND tile needs DataCopy + Nd2NzParams",
            X + "矩阵计算的搬入/DataCopy（GMToL1随路转换-ND2NZ搬运）.md", k_nd_into_l0a, B910, AscendCRuleError,
            r"plain DataCopy.*\(ND\).*would take 16 x 32 B.*Nd2NzParams"),
    Illegal("missing-mte2-mte1", "LoadData waits for the GM -> L1 copy (HardEvent::MTE2_MTE1)",
            "docs/zh/api/SIMD-API/基础API/同步控制/核内同步/SetFlag-WaitFlag(ISASI).md", k_no_mte2_mte1, B910,
            RaceError, r"race on L1 buffer '\w+' \(read after write\): LoadData L1->L0A .* on pipe MTE1 .*reads bytes .* that "
            r"DataCopy GM->L1 .* on pipe MTE2 .*wrote, and nothing orders the two: no MTE2_MTE1 flag between"),
    Illegal("missing-mte1-m", "Mmad waits for LoadData (HardEvent::MTE1_M)",
            "docs/zh/api/SIMD-API/基础API/同步控制/核内同步/SetFlag-WaitFlag(ISASI).md", k_no_mte1_m, B910,
            RaceError, r"race on L0A buffer '\w+' \(read after write\): Mmad .* on pipe M .*reads bytes .* that "
            r"LoadData L1->L0A .* on pipe MTE1 .*wrote, and nothing orders the two: no MTE1_M flag between"),
    Illegal("missing-m-fix", "Fixpipe waits for Mmad (HardEvent::M_FIX)",
            "docs/zh/api/SIMD-API/基础API/同步控制/核内同步/SetFlag-WaitFlag(ISASI).md", k_no_m_fix, B910,
            RaceError, r"race on L0C buffer '\w+' \(read after write\): Fixpipe L0C->GM .* on pipe FIX .*reads bytes .* that "
            r"Mmad .* on pipe M .*wrote, and nothing orders the two: no M_FIX flag between"),
    Illegal("l0c-overflow", "L0C is 128 KB on the 910B2",
            "docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md", k_l0c_overflow, B910,
            UbOverflowError, r"L0C overflow.*131072 bytes"),
    Illegal("l0a-overflow", "L0A is 64 KB",
            "docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md", k_l0a_overflow, B910,
            UbOverflowError, r"L0A overflow.*65536"),
    Illegal("mmad-past-l0c-tensor", "Mmad's C spans ceil(m/16) x ceil(n/16) fractals of L0C",
            X + "Mmad计算/Mmad.md", k_mmad_reads_past_l0c, B910, AscendCRuleError,
            r"needs 4096 B of .*2 x 2 16x16 fractals of C.*Mmad.md"),
    Illegal("l0a-address-512", "LoadData into L0A/L0B starts 512-byte aligned",
            X + "矩阵计算的搬入/LoadData_2D.md", k_a2_not_512_aligned, B910, AscendCRuleError,
            r"not 512-byte aligned.*256 float16 elements.*LoadData_2D.md"),
    Illegal("transpose-b32", "LoadData ifTranspose supports b16 only",
            X + "矩阵计算的搬入/LoadData_2D.md", k_transpose_float, B910, AscendCRuleError,
            r"ifTranspose=true on float32.*b16.*keep B transposed in GM"),
    Illegal("gemv-m1", "Mmad with m = 1 is GEMV mode (L0A read as ND)",
            X + "Mmad计算/Mmad.md", k_gemv_m1, B910, AscendCRuleError, r"m = 1 runs in GEMV mode.*rounded up to 16"),
    Illegal("fixpipe-quant-missing", "float L0C -> half GM needs quantPre F322F16",
            X + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md", k_wrong_quant, B910, AscendCRuleError,
            r"quantPre=NoQuant converts.*not float32 -> float16.*use quantPre=F322F16"),
    Illegal("fixpipe-src-stride", "Fixpipe srcStride = mSize rounded up to 16",
            X + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md", k_src_stride_short, B910, AscendCRuleError,
            r"srcStride=16 is below mSize=32 rounded up to 16"),
    Illegal("mmad-on-ub", "Mmad's A is in L0A (A2), not UB",
            X + "Mmad计算/Mmad.md", k_mmad_on_ub, P310, AscendCRuleError, r"fm \(A\) must be in L0A.*is in UB"),
    Illegal("fixpipe-on-310p", "Fixpipe L0C -> GM: 'Atlas 推理系列产品AI Core：不支持'",
            X + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md", k_fixpipe_on_310p, P310, CapabilityError,
            r"ascend-310p3: Fixpipe L0C -> GM does not exist.*以Vector计算单元作为中转"),
    Illegal("mmad-on-aiv", "the 910B's vector core (AIV) has no cube",
            "docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md", k_mmad_on_vector_core, B910,
            CapabilityError, r"Mmad runs on the cube core \(AIC\).*core_type='cube'"),
    Illegal("vecin-on-aic", "the 910B's cube core (AIC) has no UB",
            "docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md", k_vecin_on_aic, B910,
            QueueError, r"TPosition::VECIN lives in UB, which this core does not have"),
    Illegal("float-mmad-310p", "the 310P AI Core's Mmad has no float x float",
            X + "Mmad计算/Mmad.md", k_float_mmad_on_310p, P310, CapabilityError,
            r"Mmad has no float32 x float32 -> float32 form.*float16 x float16"),
    Illegal("nd2nz-int8-310p", "ND2NZ on the 310P AI Core: no int8",
            X + "矩阵计算的搬入/DataCopy（GMToL1随路转换-ND2NZ搬运）.md", k_nd2nz_int8_on_310p, P310, CapabilityError,
            r"DataCopy \(GM -> L1, ND2NZ\) has no int8 form"),
    Illegal("nd2nz-overlap", "搬运至L1 Buffer的数据不能重叠",
            X + "矩阵计算的搬入/DataCopy（GMToL1随路转换-ND2NZ搬运）.md", k_nd2nz_overlap, B910, AscendCRuleError,
            r"land on the same 32-B unit.*不能重叠"),
    Illegal("small-accumulate-barrier", "accumulating Mmads with (m/16)*(n/16) < 10 need PipeBarrier<PIPE_M>",
            X + "Mmad计算/Mmad.md", k_small_accumulate_without_barrier, B910, AscendCRuleError,
            r"no PipeBarrier<PIPE_M>.*\(m/16\)\*\(n/16\) < 10"),
    Illegal("atomic-type", "SetAtomicAdd<T>: T is the type written to GM",
            "docs/zh/api/SIMD-API/基础API/原子操作/SetAtomicAdd.md", k_atomic_type_mismatch, B910, AscendCRuleError,
            r"SetAtomicAdd<float32> is on but Fixpipe writes float16"),
    Illegal("nd2nz-into-l0a", "DataCopy Nd2Nz lands in L1 (A1/B1)",
            X + "矩阵计算的搬入/DataCopy（GMToL1随路转换-ND2NZ搬运）.md", k_nd2nz_into_l0a, B910, AscendCRuleError,
            r"destination must be in L1.*is in L0A"),
    Illegal("vdeqf16-no-workspace", "VDEQF16 is tensor quantisation: its scales come from cbufWorkspace",
            X + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md", k_vdeqf16_without_workspace, B910, AscendCRuleError,
            r"quantPre=VDEQF16 is tensor \(per-channel\) quantisation.*Fixpipe\(dst, src, cbufWorkspace, params\)"),
    Illegal("vdeqf16-short-workspace", "tensor quantisation: one quant word per output column (shape [n])",
            X + "矩阵搬出关键特性说明/随路量化.md", k_vdeqf16_short_workspace, B910, AscendCRuleError,
            r"nSize=32 with a cbufWorkspace of 16 words.*量化参数的shape为\[n\]"),
    Illegal("vdeqf16-workspace-dtype", "cbufWorkspace is LocalTensor<uint64_t> (模板参数S必须为uint64_t类型)",
            X + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md", k_vdeqf16_float_workspace, B910, AscendCRuleError,
            r"cbufWorkspace '\w+' is float32: the quant words are uint64_t.*deq_scale_uint64"),
    Illegal("vdeqf16-workspace-not-l1", "cbufWorkspace lives in L1 (TPosition C1)",
            X + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md", k_vdeqf16_workspace_in_l0b, B910, AscendCRuleError,
            r"cbufWorkspace '\w+' is in L0B: the quant tensor lives in L1"),
    Illegal("vdeqf16-garbage-scales", "quant parameters must not be inf/nan or subnormal",
            X + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md", k_vdeqf16_workspace_never_filled, B910,
            AscendCRuleError, r"word 0 holds nan: quant scales must not be inf/nan or subnormal"),
    Illegal("vdeqf16-on-float-l0c", "(V)DEQF16 dequantises an int32 L0C (int32_t量化成half)",
            X + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md", k_vdeqf16_on_float_l0c, B910, AscendCRuleError,
            r"quantPre=VDEQF16 converts int32->float16, not float32 -> float16.*use quantPre=F322F16"),
    Illegal("workspace-scalar-mode", "the cbufWorkspace overload is for VDEQF16 / VQF322B8_PRE / VREQ8",
            X + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md", k_workspace_with_f322f16, B910, AscendCRuleError,
            r"cbufWorkspace and quantPre=F322F16.*use the three-argument Fixpipe"),
    Illegal("bf16-mmad-310p", "the 310P AI Core's Mmad has no bfloat16 (Mmad.md 表9)",
            X + "Mmad计算/Mmad.md", k_bf16_mmad_on_310p, P310, CapabilityError,
            r"no bfloat16 \(uint16 bits\) x bfloat16 \(uint16 bits\) -> float32 form.*no bfloat16 Mmad"),
    Illegal("bf16-times-half", "Mmad multiplies bfloat16 by bfloat16 only (Mmad.md 表7)",
            X + "Mmad计算/Mmad.md", k_bf16_times_half, B910, CapabilityError,
            r"no bfloat16 \(uint16 bits\) x float16 -> float32 form.*bfloat16 only"),
    Illegal("bf16-out-needs-f322bf16", "float L0C -> bfloat16 GM needs quantPre F322BF16",
            X + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md", k_bf16_out_with_f322f16, B910, AscendCRuleError,
            r"quantPre=F322F16 converts float32->float16, not float32 -> bfloat16 \(uint16 bits\).*use quantPre=F322BF16"),
]


def test_the_legal_per_channel_dequant_matches_the_hardwares_arithmetic():
    """VDEQF16: C_int32 exact, then half(float32(C) * M1[n]), M1 the scale cut to (1, 8, 10)
    (随路量化.md 表1); against float64 dequantisation the only errors are the scale's cut and the
    half rounding."""
    launch(k_legal_vdeqf16, 1, hw=B910)
    got = DONE["c8"].data.reshape(M, N)
    acc = I8_A.astype(np.int64) @ I8_BT.T.astype(np.int64)
    m1 = deq_scale_float(deq_scale_uint64(I8_SCALES))
    np.testing.assert_array_equal(got, (acc.astype(np.float32) * m1).astype(np.float16))
    exact = acc * I8_SCALES
    assert np.all(np.abs(got - exact) <= np.abs(exact) * (2.0 ** -10 + 2.0 ** -11) + 1e-7)
    assert not np.array_equal(m1, I8_SCALES.astype(np.float32))        # the cut is real


def test_the_legal_matmul_runs_and_matches_numpy():
    launch(k_legal, 1, hw=B910)
    got = DONE["c"].data.reshape(M, N).astype(np.float64)
    want = A_HOST.astype(np.float64) @ B_HOST.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)


def test_catalogue_is_big_and_ids_are_unique():
    assert len(CATALOGUE) >= 15
    assert len({c.id for c in CATALOGUE}) == len(CATALOGUE)


@pytest.mark.parametrize("case", CATALOGUE, ids=[c.id for c in CATALOGUE])
def test_illegal_cube_program_is_caught_with_a_lesson(case: Illegal):
    """The launch stops with the expected exception; its message names the rule (and, where the
    rule comes from an API page, that page)."""
    with pytest.raises(case.error) as info:
        launch(case.kernel, 1, hw=case.hw)
    msg = str(info.value)
    assert re.search(case.match, msg, re.S), f"{case.id}: message does not match {case.match!r}:\n{msg}"
    if case.error is not RaceError and case.error is not UbOverflowError and case.error is not QueueError:
        assert case.page.rsplit("/", 1)[-1].removesuffix(".md") in msg or "NPU架构版本" in msg, (case.id, msg)


def test_a_b_tile_loaded_without_transpose_gives_wrong_numbers():
    """ifTranspose=false for a half B: legal, and silently wrong (each fractal is B's, not Bᵀ's):
    the model computes what the chip would, a different product."""
    launch(cube(lambda ctx: matmul(ctx, transpose_b=False)), 1, hw=B910)
    got = DONE["c"].data.reshape(M, N).astype(np.float64)
    want = A_HOST.astype(np.float64) @ B_HOST.astype(np.float64)
    assert np.abs(got - want).max() > 1.0


@pytest.mark.skipif(not MIRROR.exists(), reason="asc-devkit mirror not present (CI has none)")
def test_every_rule_cites_a_real_page():
    for case in CATALOGUE:
        done = subprocess.run(["git", "-C", str(MIRROR), "cat-file", "-e", f"HEAD:{case.page}"], capture_output=True)
        assert done.returncode == 0, f"{case.id}: {case.page}"


def test_simulation_errors_are_the_base():
    """Every cube rule error is a SimulationError (launch callers catch one kind)."""
    assert issubclass(AscendCRuleError, SimulationError) and issubclass(RaceError, SimulationError)
