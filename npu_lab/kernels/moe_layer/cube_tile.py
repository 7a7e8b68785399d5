"""One C tile on the cube core, shared by the two fused MoE kernels (fused_router.py, fused_gather.py).

``C[vm, vn] (L0C, fp32) = A[vm, K] · B[K, vn]`` for fp16 A and B: K in L1 panels of ``k_l1``
columns (MTE2, ``DataCopy`` with ``Nd2NzParams``: ND rows in GM -> NZ fractals in L1), each panel in
``bk``-column base tiles (MTE1 ``LoadData`` L1 -> L0A / L0B, B transposed per fractal as the
GEMM's half path does, npu_lab/kernels/gemm/kernels.py), ``Mmad`` accumulating in L0C (pipe M).
The caller fills the A panel (``fill_a``): the router copies a block of consecutive rows of
``hidden``; the gather GEMM copies each run of gathered rows by index. All queues hold two
buffers, so MTE2 fills the next panel while M works (the GEMM v3 overlap).

Pages: DataCopy（GM->L1 随路ND2NZ）, LoadData (2D), Mmad.md (the PIPE_M barrier between small
accumulating Mmads), Fixpipe（L0C到GM数据搬运）.md under asc-devkit docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/.
"""

from __future__ import annotations

import numpy as np

from ...lang import FixpipeParamsV220, MmadParams, QuantMode_t, TPosition, TQue
from ..gemm.kernels import ceil_div, copy_b_l1, load_a_l0a, load_b_l0b, round16

__all__ = ["CubeTiling", "cube_queues", "cube_tile", "fixpipe_out", "pick_cube_tiling"]

_FE, _K0 = 256, 16            # fp16: elements per 512-B fractal, columns per fractal row


class CubeTiling:
    """Base tile sizes of one fused kernel's cube side: ``bm`` rows (multiple of 16), ``bn``
    columns, ``bk`` base K, ``k_l1`` L1 panel K (a multiple of ``bk``), ``c_buffers`` L0C tiles
    (2: Fixpipe of tile i overlaps Mmad of tile i + 1; 1 when two do not fit)."""

    def __init__(self, bm: int, bn: int, bk: int, k_l1: int, c_buffers: int = 2, k_a: int | None = None,
                 a_buffers: int = 2):
        self.bm, self.bn, self.bk, self.k_l1, self.c_buffers = int(bm), int(bn), int(bk), int(k_l1), int(c_buffers)
        self.k_a = self.k_l1 if k_a is None else int(k_a)      # A panel K: a multiple of k_l1 (the B panel's)
        self.a_buffers = int(a_buffers)

    def __repr__(self):
        return (f"CubeTiling(bm={self.bm}, bn={self.bn}, bk={self.bk}, k_l1={self.k_l1}, k_a={self.k_a}, "
                f"c_buffers={self.c_buffers})")


def pick_cube_tiling(bm: int, bn: int, K: int, hw, *, long_a: bool = False) -> CubeTiling:
    """Base K and L1 panel K for a [bm, bn] tile (bm a multiple of 16, bm·round16(bn)·4 B within
    L0C): the largest ``bk`` (<= 128, multiple of 16) with two A2 / B2 buffers in L0A / L0B, and an
    L1 panel of up to 4·bk with two A1 and two B1 panels in L1; L0C double-buffered when two
    tiles fit. ``long_a``: the A panel spans as many B panels as two A panels and two B panels
    let L1 hold (up to all of K) -- fewer, longer A copies (the gather's per-row copies gain most).
    Raises ValueError when one tile does not fit L0C."""
    n16 = round16(bn)
    if bm % 16 or bm < 16 or bm * n16 * 4 > hw.l0c_bytes:
        raise ValueError(f"a [{bm}, {bn}] fp32 tile needs {bm * n16 * 4} B of L0C; {hw.name} has {hw.l0c_bytes}")
    c_buffers = 2 if 2 * bm * n16 * 4 <= hw.l0c_bytes else 1
    bk = min(round16(K), 128)
    while bk > 16 and (2 * bm * bk * 2 > hw.l0a_bytes or 2 * bk * n16 * 2 > hw.l0b_bytes):
        bk -= 16
    k_l1 = bk
    while k_l1 + bk <= round16(K) and k_l1 < 4 * bk and 2 * (bm + n16) * (k_l1 + bk) * 2 <= hw.l1_bytes:
        k_l1 += bk
    k_a = k_l1
    if long_a:
        while k_a < K and 2 * bm * (k_a + k_l1) * 2 + 2 * k_l1 * n16 * 2 <= hw.l1_bytes:
            k_a += k_l1
    return CubeTiling(bm, bn, bk, k_l1, c_buffers, k_a)


def cube_queues(ctx, t: CubeTiling):
    """InitBuffer the five cube queues (A1, B1, A2, B2, CO1): two buffers each, CO1 ``t.c_buffers``."""
    qs = (TQue(TPosition.A1, t.a_buffers), TQue(TPosition.B1, 2), TQue(TPosition.A2, 2), TQue(TPosition.B2, 2),
          TQue(TPosition.CO1, 2))
    n16 = round16(t.bn)
    sizes = (t.bm * t.k_a * 2, t.k_l1 * n16 * 2, t.bm * t.bk * 2, t.bk * n16 * 2, t.bm * n16 * 4)
    for q, nbytes, name, copies in zip(qs, sizes, ("a1", "b1", "a2", "b2", "c"), (t.a_buffers, 2, 2, 2, t.c_buffers)):
        ctx.pipe.init_buffer(q, copies, nbytes, name=name)
    return qs


def cube_tile(ctx, t: CubeTiling, qs, fill_a, b_gm, col: int, vm: int, vn: int, K: int, N: int, a1=None):
    """L0C tile [round16(vm), vn] = A · B[:, col:col + vn] (B [K, N] fp16 row-major in ``b_gm``);
    ``fill_a(a1, kc, vkc, m16)`` copies the A panel's columns [kc, kc + vkc) into L1 ``a1``.
    ``a1``: an A panel already in L1 holding all of K (``t.k_a >= K``; the caller filled it and
    frees it): no A copy here. Returns the dequeued CO1 tensor (the caller Fixpipes it out and frees it)."""
    qa1, qb1, qa2, qb2, qc = qs
    dt = np.dtype(np.float16)
    m16 = round16(vm)
    c = qc.alloc_tensor(np.float32)
    resident = a1 is not None
    for kc in range(0, K, t.k_l1):
        vkc = min(t.k_l1, K - kc)
        ka = kc % t.k_a                              # this B panel's columns inside the A panel
        if ka == 0 and not resident:                 # a new A panel: columns [kc, kc + k_a)
            a1 = qa1.alloc_tensor(dt)
            fill_a(a1, kc, min(t.k_a, K - kc), m16)
            qa1.enque(a1)
            a1 = qa1.deque(dt)
        b1 = qb1.alloc_tensor(dt)
        copy_b_l1(ctx, b1, b_gm, True, kc, col, vkc, vn, K, N)
        qb1.enque(b1)
        b1 = qb1.deque(dt)
        for kb in range(0, vkc, t.bk):
            vk = min(t.bk, vkc - kb)
            a2, b2 = qa2.alloc_tensor(dt), qb2.alloc_tensor(dt)
            load_a_l0a(ctx, a2, a1, m16 // 16, ka + kb, vk, _K0, _FE)
            load_b_l0b(ctx, b2, b1, True, kb, vk, vkc, ceil_div(vn, 16), _K0, _FE)
            qa2.enque(a2)
            qb2.enque(b2)
            a2, b2 = qa2.deque(dt), qb2.deque(dt)
            first = kc == 0 and kb == 0
            if not first and (m16 // 16) * (vn // 16) < 10:
                ctx.pipe_barrier("PIPE_M")          # Mmad.md: small accumulating Mmads need it
            ctx.mmad(c, a2, b2, MmadParams(m16, vn, vk, 0, False, first))
            qa2.free_tensor(a2)
            qb2.free_tensor(b2)
        qb1.free_tensor(b1)
        if not resident and (ka + vkc >= t.k_a or kc + vkc >= K):   # the A panel's last B panel
            qa1.free_tensor(a1)
    qc.enque(c)
    return qc.deque(np.float32)


def fixpipe_out(ctx, qc, dst_gm, c, vm: int, vn: int, dst_stride: int) -> None:
    """Fixpipe the fp32 L0C tile (``vm`` valid rows, ``vn`` columns) to GM, NoQuant (fp32 out),
    rows ``dst_stride`` elements apart; free the CO1 buffer."""
    ctx.fixpipe(dst_gm, c, FixpipeParamsV220(vn, vm, round16(vm), dst_stride, False, QuantMode_t.NoQuant,
                                             1.0, 1, 0, 0, 0))
    qc.free_tensor(c)
