"""Matmul with a vector epilogue (issue 17 §2): C = LeakyRelu(A · B), fp16 in and out.

Two ways, as in asc-devkit's examples/01_simd_cpp_api/00_introduction/03_fusion_operation/
matmul_leakyrelu_basic_api (a ``__mix__(1, 2)`` kernel: the AIC's Fixpipe writes the tile to GM,
``CrossCoreSetFlag<0x2, PIPE_FIX>(0)``, each AIV ``CrossCoreWaitFlag(0)``, then DataCopyPad in,
LeakyRelu, DataCopyPad out of half the tile's rows):

* ``"mixed"``: one launch of :func:`matmul_leakyrelu_mix_kernel`. Each block is an AI core group;
  its AIC runs the block's GEMM tasks (:func:`~npu_lab.kernels.gemm.tiling.block_tasks`) one C tile
  after another into a GM workspace and sets flag 0 (mode 2) per tile; its AIVs wait, each takes
  half the tile's rows. So the AIVs' epilogue of tile i overlaps the AIC's tile i+1. Back-pressure:
  the AIVs set flag 1 (mode 2: the AIC is released when both set) when a tile is done, and the
  AIC waits for it before running more than two tiles ahead — a flag counter holds at most 15
  (CrossCoreSetFlag(ISASI).md), and a real kernel reusing a workspace slot needs the same.
  Listing: ``epilogue_mix.cpp``.
* ``"separate"``: a cube launch (``gemm`` v1, fp16 out) and then a vector launch of
  :func:`leakyrelu_kernel` over C: two launch overheads, C written to HBM and read back (from L2
  when it fits: the two launches share an :class:`~npu_lab.sim.l2.L2Cache`).

LeakyRelu(x) = x for x >= 0, alpha·x otherwise; for 0 <= alpha <= 1 that is max(x, alpha·x), which
is how the kernels compute it (``Muls`` then ``Max``: the same result as Ascend C's ``LeakyRelu``,
docs/zh/api/SIMD-API/基础API/矢量计算/.../LeakyRelu.md, in two instructions; the model prices the
two). The AIC side is the naive GEMM's loop (one base tile at a time), single-buffered.
"""

from __future__ import annotations

import numpy as np

from ...hardware import HardwareSpec
from ...lang import (DataCopyExtParams, DataCopyPadExtParams, FixpipeParamsV220, GlobalTensor, MmadParams,
                     Nd2NzParams, QuantMode_t, TPosition, TQue, launch, npu_kernel)
from ...presets import get_preset
from ...sim.l2 import L2Cache
from .kernels import ceil_div, copy_b_l1, gemm_block_classes, load_a_l0a, load_b_l0b, round16
from .reference import _check
from .tiling import GemmTiling, block_tasks, gemm_tiling

__all__ = ["matmul_leakyrelu", "matmul_leakyrelu_reference", "matmul_leakyrelu_mix_kernel", "leakyrelu_kernel",
           "EPILOGUE_WAYS"]

EPILOGUE_WAYS = ("mixed", "separate")
#: UB bytes one AIV gives each of its two epilogue buffers (rows per chunk follow from it)
EPILOGUE_UB_BYTES = 32 * 1024
#: tiles the AIC may run ahead of its AIVs (flag 1's back-pressure window)
AHEAD = 2


def matmul_leakyrelu_reference(A, B, alpha: float = 0.01) -> np.ndarray:
    """LeakyRelu(A · B) as the kernels compute it: fp32 accumulation, rounded to fp16 (Fixpipe
    F322F16), then max(c, fp16(alpha · c)) in fp16."""
    A, B = _check(A, B)
    c = (A.astype(np.float32) @ B.astype(np.float32)).astype(np.float16)
    return np.maximum(c, (c * np.float16(alpha)).astype(np.float16))


def _aic_tile(ctx, t: GemmTiling, task: int, a_gm, b_gm, ws_gm, qs) -> None:
    """The AIC's work for one task: C tile = A rows · B columns, base tile by base tile, each
    Fixpiped (F322F16) into the workspace at its place in C (the naive GEMM's loop)."""
    qa1, qb1, qa2, qb2, qc = qs
    dt = np.dtype(np.float16)
    fe, k0 = 256, 16
    N, K = t.N, t.Ka
    bm, bn, bk = t.baseM, t.baseN, t.baseK
    mi, ni, _ = t.task_coords(task)
    tm, tn, _ = t.task_shape(task)
    for mb in range(0, tm, bm):
        vm = min(bm, tm - mb)
        m16 = round16(vm)
        row = mi * t.singleCoreM + mb
        for nb in range(0, tn, bn):
            vn = min(bn, tn - nb)
            col = ni * t.singleCoreN + nb
            c = qc.alloc_tensor(np.float32)
            for kb in range(0, K, bk):
                vk = min(bk, K - kb)
                a1, b1 = qa1.alloc_tensor(dt), qb1.alloc_tensor(dt)
                ctx.data_copy(a1, a_gm[row * K + kb], Nd2NzParams(1, vm, vk, 0, K, m16, 1, 0))
                copy_b_l1(ctx, b1, b_gm, True, kb, col, vk, vn, K, N)
                qa1.enque(a1)
                qb1.enque(b1)
                a1, b1 = qa1.deque(dt), qb1.deque(dt)
                a2, b2 = qa2.alloc_tensor(dt), qb2.alloc_tensor(dt)
                load_a_l0a(ctx, a2, a1, m16 // 16, 0, vk, k0, fe)
                load_b_l0b(ctx, b2, b1, True, 0, vk, vk, ceil_div(vn, 16), k0, fe)
                qa1.free_tensor(a1)
                qb1.free_tensor(b1)
                qa2.enque(a2)
                qb2.enque(b2)
                a2, b2 = qa2.deque(dt), qb2.deque(dt)
                if kb and (m16 // 16) * (vn // 16) < 10:
                    ctx.pipe_barrier("PIPE_M")          # Mmad.md: small accumulating Mmads need it
                ctx.mmad(c, a2, b2, MmadParams(m16, vn, vk, 0, False, kb == 0))
                qa2.free_tensor(a2)
                qb2.free_tensor(b2)
            qc.enque(c)
            c = qc.deque(np.float32)
            ctx.fixpipe(ws_gm[row * N + col], c, FixpipeParamsV220(vn, vm, m16, N, False, QuantMode_t.F322F16,
                                                                   1.0, 1, 0, 0, 0))
            qc.free_tensor(c)


def _leaky_rows(ctx, src_gm, dst_gm, row0: int, rows: int, col0: int, cols: int, N: int, alpha: float,
                q_in, q_out) -> None:
    """LeakyRelu of ``rows`` x ``cols`` of a row-major [*, N] fp16 matrix at (row0, col0), in row
    chunks that fit the UB: DataCopyPad in (rows padded to 32 B in UB), Muls, Max, DataCopyPad out."""
    if rows <= 0:
        return
    ub_row = -(-cols * 2 // 32) * 32 // 2                # elements per UB row (32-B padded)
    chunk = max(1, min(rows, EPILOGUE_UB_BYTES // (ub_row * 2)))
    gap = (N - cols) * 2
    for r in range(0, rows, chunk):
        n = min(chunk, rows - r)
        at = (row0 + r) * N + col0
        x = q_in.alloc_tensor(np.float16)
        ctx.data_copy_pad(x, src_gm[at], DataCopyExtParams(n, cols * 2, gap, 0, 0),
                          DataCopyPadExtParams(False, 0, 0, 0))
        q_in.enque(x)
        x = q_in.deque(np.float16)
        y = q_out.alloc_tensor(np.float16)
        ctx.muls(y, x, np.float16(alpha), n * ub_row)    # alpha·x
        ctx.max(y, x, y, n * ub_row)                     # max(x, alpha·x) = LeakyRelu for 0 <= alpha <= 1
        q_in.free_tensor(x)
        q_out.enque(y)
        y = q_out.deque(np.float16)
        ctx.data_copy_pad(dst_gm[at], y, DataCopyExtParams(n, cols * 2, 0, gap, 0))
        q_out.free_tensor(y)


def _vector_queues(ctx, cols_max: int):
    ub_row = -(-cols_max * 2 // 32) * 32 // 2
    q_in, q_out = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
    nbytes = max(EPILOGUE_UB_BYTES, ub_row * 2)       # a chunk of rows of any tile width up to cols_max fits
    ctx.pipe.init_buffer(q_in, 2, nbytes, name="x_in")
    ctx.pipe.init_buffer(q_out, 2, nbytes, name="y_out")
    return q_in, q_out


def epilogue_block_classes(block_dim, a_gm, b_gm, ws_gm, c_gm, alpha, tiling_bytes):
    """AI core groups whose tasks have the same shapes, in order, do identical work on all three
    cores (as :func:`~npu_lab.kernels.gemm.kernels.gemm_block_classes` for the cube kernels)."""
    return gemm_block_classes(block_dim, a_gm, b_gm, c_gm, False, tiling_bytes)


@npu_kernel(mix=(1, 2), block_classes=epilogue_block_classes)
def matmul_leakyrelu_mix_kernel(ctx, a_gm: GlobalTensor, b_gm: GlobalTensor, ws_gm: GlobalTensor,
                                c_gm: GlobalTensor, alpha: float, tiling_bytes: bytes):
    """``__mix__(1, 2)``: the AIC computes the block's C tiles into ``ws_gm`` (fp16 [M, N]) and
    sets flag 0 per tile; the AIVs wait, apply LeakyRelu to their half of the tile's rows into
    ``c_gm`` and set flag 1 (module docstring). Listing: epilogue_mix.cpp."""
    t = GemmTiling.unpack(tiling_bytes)
    tasks = list(block_tasks(t, ctx.get_block_idx() if ctx.is_aic() else ctx.get_block_idx() // 2))
    if ctx.is_aic():
        size, bm, bn, bk = 2, t.baseM, t.baseN, t.baseK
        qs = (TQue(TPosition.A1, 1), TQue(TPosition.B1, 1), TQue(TPosition.A2, 1), TQue(TPosition.B2, 1),
              TQue(TPosition.CO1, 1))
        for q, nbytes, name in zip(qs, (bm * bk * size, bk * bn * size, bm * bk * size, bk * bn * size, bm * bn * 4),
                                   ("a1", "b1", "a2", "b2", "c")):
            ctx.pipe.init_buffer(q, 1, nbytes, name=name)
        for i, task in enumerate(tasks):
            if i >= AHEAD:
                ctx.cross_core_wait_flag(1)                 # both AIVs finished tile i - AHEAD
            _aic_tile(ctx, t, task, a_gm, b_gm, ws_gm, qs)
            ctx.cross_core_set_flag(2, "PIPE_FIX", 0)       # tile i is in GM: release both AIVs
        for _ in range(min(AHEAD, len(tasks))):
            ctx.cross_core_wait_flag(1)                     # pair the last sets
    else:
        q_in, q_out = _vector_queues(ctx, t.singleCoreN)
        sub = ctx.get_sub_block_idx()
        for task in tasks:
            ctx.cross_core_wait_flag(0)
            mi, ni, _ = t.task_coords(task)
            tm, tn, _ = t.task_shape(task)
            half = -(-tm // 2)
            rows = min(half, tm - sub * half)
            _leaky_rows(ctx, ws_gm, c_gm, mi * t.singleCoreM + sub * half, rows, ni * t.singleCoreN, tn, t.N,
                        alpha, q_in, q_out)
            ctx.cross_core_set_flag(2, "PIPE_MTE3", 1)      # this AIV's half is out: the AIC may reuse


@npu_kernel
def leakyrelu_kernel(ctx, x_gm: GlobalTensor, y_gm: GlobalTensor, M: int, N: int, alpha: float):
    """The separate vector kernel: block b of ``get_block_num()`` takes rows b, b + blocks, ... in
    slabs; LeakyRelu by Muls + Max (module docstring)."""
    blocks, b = ctx.get_block_num(), ctx.get_block_idx()
    per = -(-M // blocks)
    row0 = b * per
    rows = max(0, min(per, M - row0))
    q_in, q_out = _vector_queues(ctx, N)
    _leaky_rows(ctx, x_gm, y_gm, row0, rows, 0, N, N, alpha, q_in, q_out)


def matmul_leakyrelu(A, B, alpha: float = 0.01, *, way: str = "mixed", hw: HardwareSpec | str = "ascend-910b2",
                     timing_only: bool = False, base=None):
    """LeakyRelu(A · B) for fp16 ``A`` [M, K], ``B`` [K, N]; returns ``(C fp16 [M, N] or None, timeline)``.

    ``way``: ``"mixed"`` (one cube + vector launch) or ``"separate"`` (cube launch, then vector
    launch; module docstring). ``alpha`` in [0, 1]. In a timing-only run ``A`` and ``B`` may be the
    shapes ``(M, K)``, ``(K, N)``. ``base``: (baseM, baseN, baseK) for the GEMM tiling."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    if way not in EPILOGUE_WAYS:
        raise ValueError(f"way must be one of {EPILOGUE_WAYS}, got {way!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"alpha must be a number in [0, 1] (LeakyRelu = max(x, alpha·x) there), got {alpha!r}")
    if timing_only and isinstance(A, tuple):
        (M, K), (K2, N) = A, B
        if K != K2:
            raise ValueError(f"inner dimensions differ: A {A}, B {B}")
        a = GlobalTensor.empty(M * K, np.float16, "A", timing_only=True)
        b = GlobalTensor.empty(K * N, np.float16, "B", timing_only=True)
    else:
        A, B = _check(A, B)
        if A.dtype != np.float16:
            raise TypeError(f"matmul_leakyrelu takes float16 A and B (the example's half GEMM), got {A.dtype}")
        (M, K), N = A.shape, B.shape[1]
        a, b = GlobalTensor.from_array(np.ascontiguousarray(A), "A"), GlobalTensor.from_array(np.ascontiguousarray(B), "B")
    kw = {} if base is None else {"base": base}
    t = gemm_tiling(M, N, K, np.float16, hw, version="v1", **kw)
    c = GlobalTensor.empty(M * N, np.float16, "C", timing_only=timing_only)
    if way == "mixed":
        ws = GlobalTensor.empty(M * N, np.float16, "workspace", timing_only=timing_only)
        tl = launch(matmul_leakyrelu_mix_kernel, t.usedCoreNum, a, b, ws, c, float(alpha), t.pack(), hw=hw,
                    timing_only=timing_only, name="matmul_leakyrelu_mix")
    else:
        from ...sim.timeline import Timeline
        from .kernels import gemm_naive_kernel
        l2 = L2Cache(hw)
        ws = GlobalTensor.empty(M * N, np.float16, "C_pre", timing_only=timing_only)
        t1 = launch(gemm_naive_kernel, t.usedCoreNum, a, b, ws, False, t.pack(), hw=hw, timing_only=timing_only,
                    name="gemm_v1", l2=l2)
        blocks = min(hw.vector_cores, M)
        t2 = launch(leakyrelu_kernel, blocks, ws, c, M, N, float(alpha), hw=hw, timing_only=timing_only,
                    name="leakyrelu", l2=l2)
        tl = Timeline.concat([t1, t2])
    return (None if timing_only else c.data.reshape(M, N).copy()), tl
