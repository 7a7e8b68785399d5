"""The GEMM kernels on the cube core (pipes MTE2 -> MTE1 -> M -> FIX), beside their C++ listings
(``gemm_naive.cpp``, ``gemm_tiled.cpp``).

Shapes: A [M, K] and C [M, N] row-major (ND) in GM; B [K, N] for half inputs (loaded with
``ifTranspose``), Bᵀ [N, K] for int8 / float (LoadData transposes b16 only, LoadData_2D.md: a
transposed weight's NZ fractals already are L0B's ZN fractals). Each block runs the tasks
:func:`~npu_lab.kernels.gemm.tiling.block_tasks` gives it; a task is (M-tile, N-tile, K-split) of
the 3D task grid. Tails (M, N, K not multiples of 16) are handled by the instructions' own
rules: Nd2Nz pads a row to 32 B with zeros, Mmad reads only its k valid columns, Fixpipe writes
only mSize x nSize values. Mmad gets m rounded up to 16 (the padding rows are never copied out;
m = 1 would switch on GEMV mode).
"""

from __future__ import annotations

import functools

import numpy as np

from ...lang import (FixpipeParamsV220, GlobalTensor, HardEvent, LoadData2DParams, MmadParams, Nd2NzParams, QuantMode_t,
                     TBuf, TQue, npu_kernel)
from ...lang.memory import TPosition
from .tiling import GemmTiling, a1_buffers, b1_buffers, block_tasks

__all__ = ["gemm_naive_kernel", "gemm_tiled_kernel", "gemm_block_classes", "round16", "ceil_div", "fixpipe_quant",
           "load_a_l0a", "load_b_l0b", "copy_b_l1"]


def round16(x: int) -> int:
    """``x`` rounded up to a multiple of 16 (one fractal edge)."""
    return -(-x // 16) * 16


def round_up4(x: int) -> int:
    """``x`` rounded up to a multiple of 4 (uint64 quant words in whole 32-B units)."""
    return -(-x // 4) * 4


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for whole numbers."""
    return -(-a // b)


def block_work(t: GemmTiling, block_idx: int) -> list[tuple[int, int, int]]:
    """(task, mb, j) of every C base tile block ``block_idx`` computes, in order: its tasks
    (:func:`~npu_lab.kernels.gemm.tiling.block_tasks`), each task's base rows ``mb`` (0, baseM, ...)
    and N tiles ``j``. The kernels loop over this list with one ``ctx.tile_loop``, so a timing-only
    run fast-forwards across task boundaries too (the next task's tiles cost what this task's do:
    costs depend on sizes, never on addresses)."""
    work = []
    for task in block_tasks(t, block_idx):
        tm, tn, _ = t.task_shape(task)
        n_tiles = ceil_div(tn, t.baseN)
        for mb in range(0, tm, t.baseM):
            work.extend((task, mb, j) for j in range(n_tiles))
    return work


def gemm_block_classes(block_dim, a_gm, b_gm, c_gm, atomic, tiling_bytes, deq=None):
    """Blocks whose tasks have the same shapes do identical work (costs depend on shapes only)."""
    t = GemmTiling.unpack(tiling_bytes)
    seen: dict = {}
    return np.array([seen.setdefault(tuple(t.task_shape(x) for x in block_tasks(t, b)), len(seen))
                     for b in range(block_dim)])


def fixpipe_quant(acc_dtype: np.dtype, out_dtype: np.dtype) -> str:
    """Fixpipe's quantPre for an L0C ``acc_dtype`` written to GM as ``out_dtype``."""
    if acc_dtype == out_dtype:
        return QuantMode_t.NoQuant
    if acc_dtype == np.float32:      # uint16 out = bfloat16 bits
        return QuantMode_t.F322BF16 if out_dtype == np.uint16 else QuantMode_t.F322F16
    return QuantMode_t.DEQF16


def load_a_l0a(ctx, a2, a1, m1: int, kb: int, vk: int, k0: int, fe: int) -> None:
    """L1 NZ panel -> L0A ZZ, one LoadData per K fractal column j of this base K tile: the column's
    m1 fractals are adjacent in L1 (the panel's fractal (i, j) is number j*m1 + i) and land k1
    fractals apart in L0A (ZZ: row block i holds fractals i*k1 .. i*k1 + k1 - 1), so dstGap = k1 - 1."""
    for offset, params in _a_loads(m1, kb, vk, k0, fe):
        ctx.load_data(a2[offset], a1, params)


@functools.lru_cache(maxsize=4096)
def _a_loads(m1: int, kb: int, vk: int, k0: int, fe: int) -> tuple:
    """(L0A element offset, LoadData2DParams) of each LoadData of :func:`load_a_l0a` (shapes only:
    built once, not per tile)."""
    k1 = ceil_div(vk, k0)
    return tuple((j * fe, LoadData2DParams((kb // k0 + j) * m1, m1, 1, 0, k1 - 1, False, 0)) for j in range(k1))


def load_b_l0b(ctx, b2, b1, b16: bool, kb: int, vk: int, vk_panel: int, n1: int, k0: int, fe: int) -> None:
    """L1 NZ panel -> L0B ZN. Half: B [k, n] panel, each 16x16 fractal transposed; int8 / float: the
    Bᵀ [n, k] panel's fractals are ZN already."""
    for offset, params in _b_loads(b16, kb, vk, vk_panel, n1, k0, fe):
        ctx.load_data(b2[offset], b1, params)


@functools.lru_cache(maxsize=4096)
def _b_loads(b16: bool, kb: int, vk: int, vk_panel: int, n1: int, k0: int, fe: int) -> tuple:
    """(L0B element offset, LoadData2DParams) of each LoadData of :func:`load_b_l0b`."""
    if b16:
        kp1 = ceil_div(vk_panel, 16)
        return tuple((i * n1 * fe, LoadData2DParams(kb // 16 + i, n1, kp1, 0, 0, True, 0))
                     for i in range(ceil_div(vk, 16)))
    return tuple((i * n1 * fe, LoadData2DParams((kb // k0 + i) * n1, n1, 1, 0, 0, False, 0))
                 for i in range(ceil_div(vk, k0)))


def copy_b_l1(ctx, b1, b_gm: GlobalTensor, b16: bool, k_at: int, n_at: int, vk: int, vn: int, K: int, N: int) -> None:
    """GM -> L1 (MTE2, Nd2Nz) of the B panel of K rows [k_at, k_at + vk) and N columns [n_at, n_at + vn)."""
    if b16:      # B [K, N]: the panel's K rows, N columns
        ctx.data_copy(b1, b_gm[k_at * N + n_at], Nd2NzParams(1, vk, vn, 0, N, round16(vk), 1, 0))
    else:        # Bᵀ [N, K]: the panel's N rows, K columns
        ctx.data_copy(b1, b_gm[n_at * K + k_at], Nd2NzParams(1, vn, vk, 0, K, round16(vn), 1, 0))


@npu_kernel(core_type="cube", block_classes=gemm_block_classes)
def gemm_naive_kernel(ctx, a_gm: GlobalTensor, b_gm: GlobalTensor, c_gm: GlobalTensor, atomic: bool,
                      tiling_bytes: bytes):
    """v1: one base tile at a time. For every (C base tile, base K step): copy the A and B base
    tiles GM -> L1, load them into L0A / L0B, Mmad into L0C; Fixpipe the tile out. One buffer per
    queue, so each step waits for the last; every A tile is read again for each N tile, every B
    tile for each M tile. Listing: gemm_naive.cpp."""
    t = GemmTiling.unpack(tiling_bytes)
    dt = a_gm.dtype
    acc = np.dtype(np.int32) if dt == np.int8 else np.dtype(np.float32)
    size, k0 = dt.itemsize, 32 // dt.itemsize
    fe, b16 = 512 // size, size == 2
    M, N, K = t.M, t.N, t.Ka
    bm, bn, bk = t.baseM, t.baseN, t.baseK
    qa1, qb1 = TQue(TPosition.A1, 1), TQue(TPosition.B1, 1)
    qa2, qb2, qc = TQue(TPosition.A2, 1), TQue(TPosition.B2, 1), TQue(TPosition.CO1, 1)
    ctx.pipe.init_buffer(qa1, 1, bm * bk * size, name="a1")
    ctx.pipe.init_buffer(qb1, 1, bk * bn * size, name="b1")
    ctx.pipe.init_buffer(qa2, 1, bm * bk * size, name="a2")
    ctx.pipe.init_buffer(qb2, 1, bk * bn * size, name="b2")
    ctx.pipe.init_buffer(qc, 1, bm * bn * 4, name="c")
    quant = fixpipe_quant(acc, c_gm.dtype)
    work = block_work(t, ctx.get_block_idx())

    def key(i):          # iterations with equal keys issue the same instructions (sizes only)
        task, mb, j = work[i]
        tm, tn, _ = t.task_shape(task)
        return min(bm, tm - mb), min(bn, tn - j * bn)

    # for task in my tasks: for mb in 0..tm step bm: for nb in 0..tn step bn — as one tile_loop
    # (fast-forwarded when timing only)
    for i in ctx.tile_loop(len(work), key=key):
        task, mb, j = work[i]
        mi, ni, _ = t.task_coords(task)
        tm, tn, _ = t.task_shape(task)
        vm = min(bm, tm - mb)
        m16 = round16(vm)
        row = mi * t.singleCoreM + mb
        nb = j * bn
        vn = min(bn, tn - nb)
        col = ni * t.singleCoreN + nb
        c = qc.alloc_tensor(acc)
        for kb in range(0, K, bk):
            vk = min(bk, K - kb)
            a1, b1 = qa1.alloc_tensor(dt), qb1.alloc_tensor(dt)
            ctx.data_copy(a1, a_gm[row * K + kb], Nd2NzParams(1, vm, vk, 0, K, m16, 1, 0))
            copy_b_l1(ctx, b1, b_gm, b16, kb, col, vk, vn, K, N)
            qa1.enque(a1)
            qb1.enque(b1)
            a1, b1 = qa1.deque(dt), qb1.deque(dt)
            a2, b2 = qa2.alloc_tensor(dt), qb2.alloc_tensor(dt)
            load_a_l0a(ctx, a2, a1, m16 // 16, 0, vk, k0, fe)
            load_b_l0b(ctx, b2, b1, b16, 0, vk, vk, ceil_div(vn, 16), k0, fe)
            qa1.free_tensor(a1)
            qb1.free_tensor(b1)
            qa2.enque(a2)
            qb2.enque(b2)
            a2, b2 = qa2.deque(dt), qb2.deque(dt)
            if kb and (m16 // 16) * (vn // 16) < 10:
                ctx.pipe_barrier("PIPE_M")      # Mmad.md: small accumulating Mmads need it
            ctx.mmad(c, a2, b2, MmadParams(m16, vn, vk, 0, False, kb == 0))
            qa2.free_tensor(a2)
            qb2.free_tensor(b2)
        qc.enque(c)
        c = qc.deque(acc)
        ctx.fixpipe(c_gm[row * N + col], c, FixpipeParamsV220(vn, vm, m16, N, False, quant, 1.0, 1, 0, 0, 0))
        qc.free_tensor(c)


@npu_kernel(core_type="cube", block_classes=gemm_block_classes)
def gemm_tiled_kernel(ctx, a_gm: GlobalTensor, b_gm: GlobalTensor, c_gm: GlobalTensor, atomic: bool,
                      tiling_bytes: bytes, deq=None):
    """v2 / v3 / v4: L1 panels of ``stepKa`` base K tiles (one Nd2Nz copy feeds several Mmads); the
    A panel stays in L1 across the N tiles when it covers the task's K (``isReuseA``). The tiling's
    buffer counts decide the overlap (v3: two of everything, so MTE2 fills the next panel and MTE1
    the next L0 tile while M works, and FIX drains one L0C tile while M fills the other). With a
    K-split (v4) each task adds its partial sum into C in GM: ``atomic`` switches on
    ``SetAtomicAdd`` (without it the tasks overwrite each other). Listing: gemm_tiled.cpp.

    int8 -> half dequantised in Fixpipe (``deq``; listing: gemm_tiled.cpp ``gemm_int8_deq``): a
    float is the per-tensor scale (quantPre DEQF16, ``deqScalar``); a uint64 GlobalTensor holds one
    quant word per column of C (N rounded up to 4 words, :func:`~npu_lab.lang.deq_scale_uint64`);
    each task copies its singleCoreN words GM -> L1 (TPosition C1) and hands them to its Fixpipes
    as their ``cbufWorkspace`` (quantPre VDEQF16). Fixpipe reads them on FIX, so the order is set by
    hand: MTE2 -> FIX before the task's first Fixpipe, FIX -> MTE2 before the next task's copy
    overwrites them."""
    t = GemmTiling.unpack(tiling_bytes)
    dt = a_gm.dtype
    acc = np.dtype(np.int32) if dt == np.int8 else np.dtype(np.float32)
    size, k0 = dt.itemsize, 32 // dt.itemsize
    fe, b16 = 512 // size, size == 2
    M, N, K = t.M, t.N, t.Ka
    bm, bn, bk = t.baseM, t.baseN, t.baseK
    k_l1 = min(t.stepKa * bk, -(-t.singleCoreK // bk) * bk)
    qa1, qb1 = TQue(TPosition.A1, 1), TQue(TPosition.B1, 1)
    qa2, qb2, qc = TQue(TPosition.A2, 1), TQue(TPosition.B2, 1), TQue(TPosition.CO1, 1)
    ctx.pipe.init_buffer(qa1, a1_buffers(t), round16(bm) * k_l1 * size, name="a1")      # depthA1 / stepKa panels
    ctx.pipe.init_buffer(qb1, b1_buffers(t), k_l1 * round16(bn) * size, name="b1")
    ctx.pipe.init_buffer(qa2, t.dbL0A, bm * bk * size, name="a2")
    ctx.pipe.init_buffer(qb2, t.dbL0B, bk * bn * size, name="b2")
    ctx.pipe.init_buffer(qc, t.dbL0C, bm * bn * 4, name="c")
    quant, scalar, deq_l1 = fixpipe_quant(acc, c_gm.dtype), 1.0, None
    if isinstance(deq, GlobalTensor):          # per-channel: a task's quant words in L1 (C1), read by FIX
        quant = QuantMode_t.VDEQF16
        qd = TBuf(TPosition.C1)
        ctx.pipe.init_buffer(qd, round_up4(t.singleCoreN) * 8, name="deq")
        deq_l1 = qd.get(np.uint64)
    elif deq is not None:                      # per-tensor: one scale, deqScalar
        scalar = float(deq)
    if atomic:
        ctx.set_atomic_add(c_gm.dtype)         # Fixpipe adds into C: the K-split's partial sums meet in GM
    work = block_work(t, ctx.get_block_idx())
    reuse = bool(t.isReuseA)

    def key(i):          # iterations with equal keys issue the same instructions (sizes only)
        task, mb, j = work[i]
        tm, tn, tk = t.task_shape(task)
        last = i + 1 == len(work) or work[i + 1][:2] != (task, mb)
        deq_at = deq_l1 is not None and (mb, j) == (0, 0), deq_l1 is not None and i and (mb, j) == (0, 0)
        task_end = deq_l1 is not None and i + 1 < len(work) and work[i + 1][0] != task
        return min(bm, tm - mb), min(bn, tn - j * bn), tk, reuse and j == 0, reuse and last, deq_at, task_end

    a1 = None
    # for task in my tasks: for mb in 0..tm step bm: for nb in 0..tn step bn — as one tile_loop
    # (fast-forwarded when timing only; the key tells which iterations issue the same work: tail
    # tiles, and with isReuseA the first N tile of a row, which loads the A panel, and the last,
    # which frees it)
    for i in ctx.tile_loop(len(work), key=key):
        task, mb, j = work[i]
        mi, ni, ki = t.task_coords(task)
        tm, tn, tk = t.task_shape(task)
        k_at = ki * t.singleCoreK
        vm = min(bm, tm - mb)
        m16 = round16(vm)
        row = mi * t.singleCoreM + mb
        nb = j * bn
        vn = min(bn, tn - nb)
        col = ni * t.singleCoreN + nb
        if deq_l1 is not None and (mb, j) == (0, 0):     # the task's quant words GM -> L1
            if i:
                ctx.wait_flag(HardEvent.FIX_MTE2, 0)      # the previous task's Fixpipes have read theirs
            ctx.data_copy(deq_l1, deq[ni * t.singleCoreN], round_up4(tn))
            ctx.set_flag(HardEvent.MTE2_FIX, 0)
            ctx.wait_flag(HardEvent.MTE2_FIX, 0)
        c = qc.alloc_tensor(acc)
        # the K panels: a nested tile_loop (a long K jumps too); equal keys = equal panel size and
        # both past the first (which may load the reused A panel and starts the accumulation)
        for kci in ctx.tile_loop(ceil_div(tk, k_l1), key=lambda q: (min(k_l1, tk - q * k_l1), q == 0)):
            kc = kci * k_l1
            vkc = min(k_l1, tk - kc)
            if a1 is None:                   # the A panel (with isReuseA: once per base row)
                a1 = qa1.alloc_tensor(dt)
                ctx.data_copy(a1, a_gm[row * K + k_at + kc], Nd2NzParams(1, vm, vkc, 0, K, m16, 1, 0))
                qa1.enque(a1)
                a1 = qa1.deque(dt)
            b1 = qb1.alloc_tensor(dt)
            copy_b_l1(ctx, b1, b_gm, b16, k_at + kc, col, vkc, vn, K, N)
            qb1.enque(b1)
            b1 = qb1.deque(dt)
            for kb in range(0, vkc, bk):
                vk = min(bk, vkc - kb)
                a2, b2 = qa2.alloc_tensor(dt), qb2.alloc_tensor(dt)
                load_a_l0a(ctx, a2, a1, m16 // 16, kb, vk, k0, fe)
                load_b_l0b(ctx, b2, b1, b16, kb, vk, vkc, ceil_div(vn, 16), k0, fe)
                qa2.enque(a2)
                qb2.enque(b2)
                a2, b2 = qa2.deque(dt), qb2.deque(dt)
                first = kc == 0 and kb == 0
                if not first and (m16 // 16) * (vn // 16) < 10:
                    ctx.pipe_barrier("PIPE_M")  # Mmad.md: small accumulating Mmads need it
                ctx.mmad(c, a2, b2, MmadParams(m16, vn, vk, 0, False, first))
                qa2.free_tensor(a2)
                qb2.free_tensor(b2)
            qb1.free_tensor(b1)
            if not reuse:                    # a fresh A panel for the next K panel
                qa1.free_tensor(a1)
                a1 = None
        qc.enque(c)
        c = qc.deque(acc)
        params = FixpipeParamsV220(vn, vm, m16, N, False, quant, scalar, 1, 0, 0, 0)
        if deq_l1 is None:
            ctx.fixpipe(c_gm[row * N + col], c, params)
        else:
            ctx.fixpipe(c_gm[row * N + col], c, deq_l1[nb], params)
        qc.free_tensor(c)
        if reuse and (i + 1 == len(work) or work[i + 1][:2] != (task, mb)):
            qa1.free_tensor(a1)                      # the row's last N tile: its A panel is done
            a1 = None
        if deq_l1 is not None and i + 1 < len(work) and work[i + 1][0] != task:
            ctx.set_flag(HardEvent.FIX_MTE2, 0)      # the task's Fixpipes are issued: the next task may refill
    if atomic:
        ctx.disable_dma_atomic()
