"""Exercise checks for notebook 10 (mixed precision done right).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult` (print it).
Every truth is computed from the library (:mod:`npu_lab.kernels.gemm.precision`, the gemm kernels'
timelines), never typed in; :func:`expected_answers` gives each check's truth.

Kernel exercise (``check_kernel(fn, "10.int8tile")``): the int8 x int8 -> int32 GEMM tile with its
dequantisation in Fixpipe — LoadData of int8 fractals (16 x 32: B kept transposed in GM, since
LoadData transposes b16 only), Mmad into an int32 L0C tile, and Fixpipe with ``DEQF16`` (int32 ->
half times ``deqScalar``). The scale is one per tensor (sx · sw), which keeps the exercise to its
three pieces; the per-channel form (``VDEQF16``: one uint64 quant word per column in L1, passed as
Fixpipe's ``cbufWorkspace``) is what the library's ``gemm(..., deq_scale=array)`` runs and
:func:`~npu_lab.kernels.gemm.precision.int8_weight_error_cost` measures.
"""

from __future__ import annotations

import numpy as np

from ..kernels.gemm import GemmTiling, block_tasks, gemm, gemm_tiling
from ..kernels.gemm.kernels import ceil_div, gemm_block_classes, load_a_l0a, load_b_l0b, round16
from ..kernels.gemm.precision import article_fp32_correction, int8_weight_error_cost
from ..lang import FixpipeParamsV220, GlobalTensor, MmadParams, Nd2NzParams, QuantMode_t, TPosition, TQue, \
    deq_scale_float, deq_scale_uint64, launch, npu_kernel
from ..presets import get_preset
from .checks import FACTOR, CheckResult, missing as _missing, parse_number as _number, right as _right, wrong as _wrong
from .kernel_check import KernelExercise, register_exercise, sentinel_array

__all__ = ["check_int8_speedup", "check_correction_change", "expected_answers", "int8_speedup_truth",
           "correction_change_truth", "INT8_CASE", "int8_tile_solution", "INT8_TILE_SCALE"]

#: Exercise 10.1: the int8 GEMM (per-channel VDEQF16 in Fixpipe) against the half one at this shape (modelled).
INT8_CASE = dict(M=32, N=256, K=4096)


def expected_answers() -> dict[str, object]:
    """The truth of every check of notebook 10, by check name."""
    return {"check_int8_speedup": int8_speedup_truth(), "check_correction_change": correction_change_truth()}


def int8_speedup_truth() -> float:
    """fp16 latency / the int8 GEMM's, dequantised per channel in its Fixpipe, at :data:`INT8_CASE`
    (910B2; both simulated runs of the gemm kernel v3)."""
    c = INT8_CASE
    row = int8_weight_error_cost((c["K"],), M=c["M"], N=c["N"]).iloc[0]
    return float(row.fp16_us / row.int8_channel_us)


def check_int8_speedup(answer) -> CheckResult:
    """How many times faster is the int8 GEMM (dequantised per channel in its Fixpipe) than the half
    GEMM at M = 32, N = 256, K = 4096 on the 910B2 model? Answer: a factor (within 3 %)."""
    if answer is None:
        return _missing("a factor such as 1.5")
    value = _number(answer, FACTOR)
    if value is None:
        return _wrong(f"{answer!r} is not a number.")
    c = INT8_CASE
    row = int8_weight_error_cost((c["K"],), M=c["M"], N=c["N"]).iloc[0]
    truth = float(row.fp16_us / row.int8_channel_us)
    if abs(value - truth) <= 0.03 * truth:
        return _right(f"{truth:.2f}x: {row.fp16_us:.1f} µs (half) against {row.int8_channel_us:.1f} µs (int8, "
                      "dequantised by VDEQF16 on its way out of L0C: no pass of its own). int8 halves the bytes of "
                      "both operands (the MTE2 loads take half the time) and doubles the cube rate, but the launch "
                      "overhead, about half of the half GEMM's time at this size (timeline.bottleneck()), does not "
                      f"shrink, so the gain is not 2x; the price is the error: {row.int8_channel_err:.1e} against "
                      f"{row.fp16_err:.1e} (worst column).")
    return _wrong(f"{value:g}x is not it. Hint: int8_weight_error_cost(({INT8_CASE['K']},), M={INT8_CASE['M']}, "
                  f"N={INT8_CASE['N']}) gives fp16_us and int8_channel_us.")


def correction_change_truth() -> float:
    """The largest change the article's correction (defaults alpha = 1, beta = 0) makes to a float32 C."""
    C = np.random.default_rng(10).standard_normal((16, 16)).astype(np.float32)
    return float(np.abs(article_fp32_correction(C) - C).max())


def check_correction_change(answer) -> CheckResult:
    """Run the article's ``apply_fp32_correction`` with its defaults (alpha = 1, beta = 0) on a float32
    C: what is the largest absolute change it makes to any element? Answer: a number."""
    if answer is None:
        return _missing("a number")
    value = _number(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a number.")
    truth = correction_change_truth()
    if abs(value - truth) <= 1e-12:
        return _right(f"{truth:g}: with beta = 0 every step computes y = C[i] - comp, t = y, comp = (t - 0) - y = 0. "
                      "The 'compensation' is always zero, and C comes back bit for bit. Even with other alpha, "
                      "beta it only carries one element's rounding error into the next element.")
    return _wrong(f"{value:g} is not it. Hint: write out the loop by hand for beta = 0: what is `compensation` "
                  "after the first element?")


# ---- kernel exercise 10.int8tile ----------------------------------------------------------------
#: the dequantisation scale of the exercise (sx · sw of a per-tensor W8A8: activations and weights
#: quantised to [-127, 127]); a power of two keeps the example's numbers readable, any float works
INT8_TILE_SCALE = 2.0 ** -12


@npu_kernel(core_type="cube", block_classes=gemm_block_classes)
def int8_tile_solution(ctx, a_gm: GlobalTensor, bt_gm: GlobalTensor, c_gm: GlobalTensor, deq_scale: float,
                       tiling_bytes: bytes):
    """C [M, N] half = (A [M, K] int8 · B [K, N] int8, accumulated in int32) x ``deq_scale``, one base
    tile at a time (v1's loop, int8 fractals). ``bt_gm`` holds Bᵀ [N, K]: LoadData transposes b16
    only (LoadData_2D.md), and a transposed weight's NZ fractals already are L0B's ZN ones. Pipes:
    MTE2 (Nd2Nz) -> MTE1 (LoadData) -> M (Mmad int8 -> int32) -> FIX (Fixpipe DEQF16 -> half)."""
    t = GemmTiling.unpack(tiling_bytes)
    dt, acc = np.dtype(np.int8), np.dtype(np.int32)
    k0 = 32                                           # an int8 fractal is 16 x 32 (32 bytes a row)
    fe = 512                                          # elements of one fractal
    N, K = t.N, t.Ka
    bm, bn, bk = t.baseM, t.baseN, t.baseK
    qa1, qb1 = TQue(TPosition.A1, 1), TQue(TPosition.B1, 1)
    qa2, qb2, qc = TQue(TPosition.A2, 1), TQue(TPosition.B2, 1), TQue(TPosition.CO1, 1)
    ctx.pipe.init_buffer(qa1, 1, bm * bk, name="a1")
    ctx.pipe.init_buffer(qb1, 1, bk * bn, name="b1")
    ctx.pipe.init_buffer(qa2, 1, bm * bk, name="a2")
    ctx.pipe.init_buffer(qb2, 1, bk * bn, name="b2")
    ctx.pipe.init_buffer(qc, 1, bm * bn * 4, name="c")
    for task in block_tasks(t, ctx.get_block_idx()):
        mi, ni, _ = t.task_coords(task)
        tm, tn, _ = t.task_shape(task)
        for mb in range(0, tm, bm):
            vm = min(bm, tm - mb)
            m16 = round16(vm)
            row = mi * t.singleCoreM + mb
            for nb in range(0, tn, bn):
                vn = min(bn, tn - nb)
                col = ni * t.singleCoreN + nb
                c = qc.alloc_tensor(acc)
                for kb in range(0, K, bk):
                    vk = min(bk, K - kb)
                    a1, b1 = qa1.alloc_tensor(dt), qb1.alloc_tensor(dt)
                    ctx.data_copy(a1, a_gm[row * K + kb], Nd2NzParams(1, vm, vk, 0, K, m16, 1, 0))
                    ctx.data_copy(b1, bt_gm[col * K + kb], Nd2NzParams(1, vn, vk, 0, K, round16(vn), 1, 0))
                    qa1.enque(a1)
                    qb1.enque(b1)
                    a1, b1 = qa1.deque(dt), qb1.deque(dt)
                    a2, b2 = qa2.alloc_tensor(dt), qb2.alloc_tensor(dt)
                    # YOUR CODE (10.int8tile): fill L0A and L0B from the L1 tiles — A with
                    # load_a_l0a(ctx, a2, a1, m16 // 16, 0, vk, k0, fe); B (Bᵀ's NZ fractals are L0B's ZN:
                    # no transpose, and int8 could not be transposed) with
                    # load_b_l0b(ctx, b2, b1, False, 0, vk, vk, ceil_div(vn, 16), k0, fe).
                    ### BEGIN SOLUTION [10.int8tile]
                    load_a_l0a(ctx, a2, a1, m16 // 16, 0, vk, k0, fe)
                    load_b_l0b(ctx, b2, b1, False, 0, vk, vk, ceil_div(vn, 16), k0, fe)
                    ### END SOLUTION [10.int8tile]
                    qa1.free_tensor(a1)
                    qb1.free_tensor(b1)
                    qa2.enque(a2)
                    qb2.enque(b2)
                    a2, b2 = qa2.deque(dt), qb2.deque(dt)
                    if kb and (m16 // 16) * (vn // 16) < 10:
                        ctx.pipe_barrier("PIPE_M")          # Mmad.md: small accumulating Mmads need it
                    # YOUR CODE (10.int8tile): Mmad the tiles into the int32 L0C tile c: m rounded up to
                    # 16 (m16), n = vn, k = vk, cmatrixInitVal True only on the first K step.
                    ### BEGIN SOLUTION [10.int8tile]
                    ctx.mmad(c, a2, b2, MmadParams(m16, vn, vk, 0, False, kb == 0))
                    ### END SOLUTION [10.int8tile]
                    qa2.free_tensor(a2)
                    qb2.free_tensor(b2)
                qc.enque(c)
                c = qc.deque(acc)
                # YOUR CODE (10.int8tile): Fixpipe the vm x vn tile to C at row, col (dstStride N), converting
                # int32 -> half times deq_scale: quantPre QuantMode_t.DEQF16, deqScalar deq_scale.
                ### BEGIN SOLUTION [10.int8tile]
                ctx.fixpipe(c_gm[row * N + col], c,
                            FixpipeParamsV220(vn, vm, m16, N, False, QuantMode_t.DEQF16, deq_scale, 1, 0, 0, 0))
                ### END SOLUTION [10.int8tile]
                qc.free_tensor(c)


_INT8_IMPORTS = ("import numpy as np\nfrom npu_lab import npu_kernel\n"
                 "from npu_lab.lang import FixpipeParamsV220, GlobalTensor, MmadParams, Nd2NzParams, QuantMode_t, TPosition, TQue\n"
                 "from npu_lab.kernels.gemm import GemmTiling, block_tasks\n"
                 "from npu_lab.kernels.gemm.kernels import ceil_div, gemm_block_classes, load_a_l0a, load_b_l0b, round16")


def _int8_cases(rng) -> list[dict]:
    """int8 shapes: one fractal, tails in M, N and K (K not a multiple of 32), several base tiles, two random."""
    fixed = [(16, 16, 32), (37, 50, 70), (128, 256, 512), (200, 130, 1000), (1, 300, 96)]
    for _ in range(2):
        fixed.append((int(rng.integers(1, 300)), int(rng.integers(1, 300)), int(rng.integers(16, 700))))
    return [{"M": M, "N": N, "K": K, "label": f"M={M}, N={N}, K={K}, int8 -> half"} for M, N, K in fixed]


def _int8_inputs(case):
    rng = np.random.default_rng([case["M"], case["N"], case["K"], 8])
    return (rng.integers(-127, 128, (case["M"], case["K"])).astype(np.int8),
            rng.integers(-127, 128, (case["K"], case["N"])).astype(np.int8))


def _int8_launch(fn, case, hw, timing_only):
    """Host code: v1's tiling for int8, A [M, K] and Bᵀ [N, K] in GM, C [M, N] half (NaN until written)."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    M, N, K = case["M"], case["N"], case["K"]
    t = gemm_tiling(M, N, K, np.int8, hw, version="v1")
    if timing_only:
        a = GlobalTensor.empty(M * K, np.int8, "A", timing_only=True)
        bt = GlobalTensor.empty(N * K, np.int8, "B_T", timing_only=True)
        c = GlobalTensor.empty(M * N, np.float16, "C", timing_only=True)
    else:
        A, B = _int8_inputs(case)
        a, bt = GlobalTensor.from_array(A, "A"), GlobalTensor.from_array(np.ascontiguousarray(B.T), "B_T")
        c = GlobalTensor.from_array(sentinel_array(M * N, np.float16), "C")
    tl = launch(fn, t.usedCoreNum, a, bt, c, INT8_TILE_SCALE, t.pack(), hw=hw, timing_only=timing_only)
    return (None if timing_only else {"C": c.data.copy()}), tl


def _int8_reference(case) -> dict:
    """Exact int32 products, then what Fixpipe DEQF16 does (随路量化.md 表1): int32 -> float32, times
    the scale cut to (1, 8, 10) (exact here: a power of two), saturated, rounded once to half."""
    A, B = _int8_inputs(case)
    acc = A.astype(np.int64) @ B.astype(np.int64)
    m1 = deq_scale_float(deq_scale_uint64(np.array([INT8_TILE_SCALE])))
    out = np.clip(acc.astype(np.float32) * m1, -65504, 65504).astype(np.float16)
    return {"C": out.reshape(-1)}


def _int8_locate(case, name, i) -> str:
    t = gemm_tiling(case["M"], case["N"], case["K"], np.int8, "ascend-910b2", version="v1")
    row, col = divmod(i, case["N"])
    task = (row // t.singleCoreM) * t.n_tiles + col // t.singleCoreN
    return f"C[{row}, {col}]: task {task} on block {task % t.usedCoreNum}, base K tiles of {t.baseK}"


_INT8_TIMED = {"M": 256, "N": 256, "K": 1024, "label": "M=N=256, K=1024, int8 -> half"}


def _int8_target(hw):
    c = _INT8_TIMED
    _, tl = gemm((c["M"], c["K"]), (c["K"], c["N"]), version="v1", hw=hw, timing_only=True, dtype=np.int8,
                 out_dtype=np.float16)
    return tl.total_us, "the library's v1 int8 GEMM with its DEQF16 Fixpipe at this shape"


register_exercise(KernelExercise(
    id="10.int8tile", notebook="ex10", title="The int8 GEMM tile, dequantised in Fixpipe",
    teaches="int8 fractals are 16 x 32; LoadData transposes b16 only, so the int8 weight is kept transposed "
            "in GM and its NZ fractals are loaded into L0B as they are; Mmad accumulates int8 x int8 in int32 "
            "(exact, at twice half's MAC rate); Fixpipe's DEQF16 multiplies by deqScalar while it converts "
            "to half — the one rounding of the whole tile",
    solution=int8_tile_solution, cell_name="my_int8_tile", imports=_INT8_IMPORTS,
    place_after="## int8 weights with per-channel scales (after the error and cost table)",
    cases=_int8_cases, launch=_int8_launch, reference=_int8_reference, locate=_int8_locate,
    target=_int8_target, target_case=_INT8_TIMED, tolerance=(0.0, 0.0),
    slow_hint="compare the timeline with the library's v1: does every K step wait for the last?"))
