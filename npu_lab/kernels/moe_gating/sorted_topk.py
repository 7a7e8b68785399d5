"""Fused MoeGatingTopK v4 — built the way CANN's ``MoeGatingTopKSoftmaxV2`` "Perf" template is
(issue 8 §3; README.md, 'The notebooks, in order'), with renorm = 1 semantics: top-K of the logits, softmax over the K.

The real kernel, whose structure this follows (hicann/ops-transformer @ c29bc106):
``moe/moe_gating_top_k_softmax_v2/op_kernel/moe_gating_top_k_softmax_v2_perf.h`` (PERF_H) and
``op_host/moe_gating_top_k_softmax_v2_tiling_perf.cpp`` (TIL_CPP); notes in
/work/notes/cann_moe_perf.md. The Ascend C listing of *this* kernel is ``sorted_topk.cpp``
beside this file (same calls, same order).

Host (``calculate_moe_gating_v4_tiling``): N = B·S rows; ``blockFormer = ceil(N / cores)`` rows
per core, ``blockNum = ceil(N / blockFormer)`` blocks (≤ cores); ``ubFormer`` rows per UB loop is
CANN's *balanced* choice: the smallest ``ubOuter`` = 1, 2, … for which
``ceil(blockFormer / ubOuter)`` rows fit, so the loops of a core are equally long (TIL_CPP:176-223).
"Fit" is :func:`moe_gating_v4_ub_bytes` — exactly what the kernel allocates — plus the 255-repeat
limit of the instructions that take one repeat per row (or per 32-column chunk, Sort32).

Device, per block (pipes MTE2 → V → MTE3; ``r`` rows this loop, ``C = ceil32(E)``):

====================  =========================================================================
CopyIn (MTE2)         one ``DataCopyPad`` GM→UB, blockCount = r, blockLen = E·sizeof(T); its UB
                      dst stride lands each row at a C-element stride (32-B padded blocks)
Cast (fp16 only)      ``Cast`` to float32, r·C elements (all compute is float32)
pad                   masked ``Duplicate`` of −inf over columns E..C−1 of every row (one repeat
                      per row, a bit mask aimed at the row's last 32 columns; CANN's DuplicatePad)
Sort32                r·C/32 repeats: every 32-column chunk → 32 (score, index) pairs, descending
merge                 while a row has n > 1 sorted lists: ``Copy`` the first 8 pairs of each list
                      into groups of 4 (missing lists −inf), ``MrgSort`` 4 × 8 → 32 per group
K = 1, E ≤ 64         instead of pad/Sort32/merge: ``WholeReduceMax`` ORDER_VALUE_INDEX, one
                      repeat per row, its (max, argmax) pair lands where the sort would put it
extract               ``GatherMask`` (user patterns): 8 scores per row → [r, 8], K indices → [r, K]
                      (dense), and each row's first score (its max, the row is sorted) → [r]
softmax over K        ``Brcb`` the max to one 32-B block per row, ``Sub``, ``Exp``,
                      ``WholeReduceSum`` (mask = K lanes per row), ``Brcb``, ``Div``,
                      ``GatherMask`` the first K of every 8 → [r, K] weights
CopyOut (MTE3)        two ``DataCopyPad`` UB→GM (indices int32, weights float32), one burst each
====================  =========================================================================

Where v4 differs from CANN's kernel (and why):

* Rows land at the 32-element Sort32 stride directly (DataCopyPad's UB dst stride) instead of
  CANN's 8-aligned load + UB→UB ``DataCopy`` "Rearrange": npu_lab has no UB→UB DataCopy, and the
  softmax here runs on the K sorted values, not on the E columns (renorm = 1), so no 8-aligned
  copy is needed. With this, any E in 1..1024 works (CANN's perf template needs E % 8 == 0 or
  E < 8, because its single-burst copy relies on it).
* The top-8-of-each-chunk merge uses the vector ``Copy`` with repeat strides (CANN: UB→UB
  DataCopy) and merges in rounds of 4 lists for every E (CANN: a special 2-way MrgSort for
  E > 512). It keeps **only the first 8 pairs of every sorted list, as CANN does — valid because
  K ≤ 8**, which is why v4 (like the template) supports K ≤ 8 only.
* The index tensor (0..C−1 per row, ``CreateVecIndex`` + ``Copy`` to the other rows) is built
  once per block in a buffer of its own; CANN rebuilds it every loop because it shares the buffer.
* GatherMask runs in normal mode (one 256-B repeat per row, ``src1RepeatStride = 0`` reusing the
  pattern) — the same selection as CANN's counter mode with mask = 64; npu_lab's counter mode
  does not reuse a user pattern across repeats.
* The row max comes from a third GatherMask (the first score of each sorted row) instead of
  CANN's BlockReduceMax (not in npu_lab): the rows are sorted, so the first score is the max.
* Outputs: weights are float32 for both input dtypes (the course's semantics; CANN casts y back
  to T). No ``finished`` input, no ``softmax_result`` output (renorm = 1 never writes it).

Supported range (like the perf template): 1 ≤ K ≤ 8, K ≤ E ≤ 1024, float32 / float16.
Outside it :func:`calculate_moe_gating_v4_tiling` raises ``ValueError`` naming the limit (use
v3 for larger K or E). The 310P3 has neither DataCopyPad nor Sort32: the kernel raises the
lang layer's ``CapabilityError`` at its first DataCopyPad.

Sources for the rules used: asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/
数据搬运/DataCopyPad（GMToUB非对齐数据搬运）.md, 排序组合（ISASI）/Sort32.md, MrgSort.md,
比较与选择/GatherMask.md, 数据填充/Brcb.md, Duplicate.md, CreateVecIndex.md, 数据搬运/Copy.md;
docs/api/SIMD-API/基础API/Memory矢量计算/归约计算/WholeReduceMax.md, WholeReduceSum.md.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, fields

import numpy as np

from ...hardware import HardwareSpec
from ...lang import (BrcbRepeatParams, CopyRepeatParams, DataCopyExtParams, DataCopyPadExtParams,
                     GatherMaskParams, MrgSort4Info, MrgSortSrcList, ReduceOrder, RoundMode, TBuf,
                     TPosition, TQue, npu_kernel)
from ...lang.tiling_struct import Int32Struct
from ...presets import get_preset
from .tiling import UbBudgetError

__all__ = ["MAX_E", "MAX_K", "MoeGatingV4Tiling", "calculate_moe_gating_v4_tiling", "moe_gating_v4_kernel",
           "moe_gating_v4_ub_bytes", "moe_gating_v4_ub_layout", "v4_block_dim"]

#: the perf template's limits (TIL_CPP:89-98: col <= MAX_COL = 1024, k <= 8)
MAX_E = 1024
MAX_K = 8
#: rows per loop are also bounded by the 255-repeat limit (one repeat per row, or per chunk)
MAX_REPEAT = 255
SORT_UNIT = 32          # Sort32 sorts 32 scores per repeat
MERGE_KEEP = 8          # pairs kept from every sorted list (K <= 8)
K_ALIGN = 8             # values per row after extraction (kAlign: one 32-B block)
PATTERN_WORDS = 32      # 4 GatherMask patterns, one 32-B slot (8 uint32) each
NEG_INF = float("-inf")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


def _whole(name: str, value, lo: int, hi: int | None = None) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < lo \
            or (hi is not None and value > hi):
        span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be a whole number {span}, got {value!r}")
    return int(value)


def _input_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float16):
        raise TypeError(f"v4 takes float32 or float16 gate logits, got {dt.name}")
    return dt


def _k1_fast_path(E: int, K: int) -> bool:
    """CANN's K = 1 special case (PERF_H TopKFP32Perf: k == 1 && colBytesAlign <= 64): one
    WholeReduceMax per row instead of Sort32, when the row fits one 256-B repeat."""
    return K == 1 and E <= 64


# ------------------------------------------------------------------------------------------------
# UB layout: the single source of truth for the kernel's InitBuffer calls and the budget
# ------------------------------------------------------------------------------------------------


def moe_gating_v4_ub_layout(rows: int, E: int, K: int, dtype=np.float32) -> list[tuple[str, int, int]]:
    """The kernel's UB buffers for ``rows`` rows per loop, in allocation order:
    ``(name, copies, bytes per copy)`` (every size a whole number of 32-B blocks).

    * ``pairs`` (TBuf, first so it starts on a 256-B boundary, as Sort32's dst must):
      rows·C (score, index) pairs = 8·rows·C B; Sort32 / MrgSort / WholeReduceMax output;
    * ``gating`` (TQue VECIN, 2 slots): rows·C elements of T, the padded input rows;
    * ``cast`` (TBuf, float16 input, or merge scratch when a row has several chunks): rows·C
      float32 — the widened scores, then (reused) the "top 8 of each list" groups of the merge;
    * ``index`` (TBuf, not on the K = 1 path): rows·C int32, 0..C−1 per row (Sort32's indices);
    * ``topk_out`` (TQue VECOUT, 1 slot): weights [rows, K] float32 then indices [rows, K] int32,
      each padded to 8 elements;
    * ``pattern`` (TBuf): 4 GatherMask patterns × 8 uint32;
    * ``softmax`` (TBuf): [rows, 8] values then the [ceil8(rows), 8] broadcast blocks (float32);
    * ``row_stat`` (TBuf): ceil8(rows) float32 — row max, then row sum (Brcb's src).
    """
    rows = _whole("rows", rows, 1)
    E = _whole("E", E, 1)
    K = _whole("K", K, 1, E)
    dt = _input_dtype(dtype)
    C = _round_up(E, SORT_UNIT)
    chunks = C // SORT_UNIT
    fast = _k1_fast_path(E, K)
    rows8 = _round_up(rows, 8)
    out_half = _round_up(rows * K, 8)
    layout = [("pairs", 1, 8 * rows * C), ("gating", 2, rows * C * dt.itemsize)]
    if dt == np.float16 or (chunks > 1 and not fast):
        layout.append(("cast", 1, 4 * rows * C))
    if not fast:
        layout.append(("index", 1, 4 * rows * C))
    layout += [("topk_out", 1, 2 * 4 * out_half), ("pattern", 1, 4 * PATTERN_WORDS),
               ("softmax", 1, 4 * (K_ALIGN * rows + 8 * rows8)), ("row_stat", 1, 4 * rows8)]
    return layout


def moe_gating_v4_ub_bytes(rows: int, E: int, K: int, dtype=np.float32) -> int:
    """Bytes of UB the v4 kernel allocates for ``rows`` rows per loop: exactly the sum of its
    InitBuffer calls (:func:`moe_gating_v4_ub_layout`). float16 input never needs more than
    float32 (its input slots are half as big; the cast buffer takes the difference)."""
    return sum(copies * nbytes for _, copies, nbytes in moe_gating_v4_ub_layout(rows, E, K, dtype))


# ------------------------------------------------------------------------------------------------
# The tiling struct and the host tiling function
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MoeGatingV4Tiling(Int32Struct):
    """Mirror of CANN's ``MoeGatingTopKSoftmaxV2PerfTilingData`` (TIL_H:95-114), same field names
    and order, int32 here (uint32 there; every value fits).

    row: N = B·S rows; col: E; colBytesAlign: ceil8(E) (CANN's softmax stride, kept for the
    mirror); colAlign: ceil32(E), the Sort32 row stride; k: K; kAlign: ceil8(K) = 8 values per
    row after extraction; blockFormer: rows per core; blockNum: blocks (= blockDim); blockTail:
    rows of the last block; ubFormer: rows per UB loop; ubLoopOf{Former,Tail}Block: loops of a
    former / the last block; ubTailOf{Former,Tail}Block: rows in their last loop;
    topKValuesMask: GatherMask bits picking kAlign scores from (score, index) pairs (0b0101…);
    topKIndicesMask: bits picking K indices (0b1010…); bufferElemSize: max(ubFormer·colAlign, 64);
    softmaxFlag: 0 (renorm = 1 writes no softmax_result)."""

    row: int
    col: int
    colBytesAlign: int
    colAlign: int
    k: int
    kAlign: int
    blockFormer: int
    blockNum: int
    blockTail: int
    ubFormer: int
    ubLoopOfFormerBlock: int
    ubTailOfFormerBlock: int
    ubLoopOfTailBlock: int
    ubTailOfTailBlock: int
    topKValuesMask: int
    topKIndicesMask: int
    bufferElemSize: int
    softmaxFlag: int

    def __post_init__(self):
        for f in fields(self):
            _whole(f"MoeGatingV4Tiling.{f.name}", getattr(self, f.name), 0, 2**31 - 1)
        if not 1 <= self.k <= min(self.col, MAX_K) or not 1 <= self.col <= MAX_E:
            raise ValueError(f"MoeGatingV4Tiling: need 1 <= k <= min(col, {MAX_K}) and col <= {MAX_E}; "
                             f"got k={self.k}, col={self.col}")
        if self.colAlign != _round_up(self.col, SORT_UNIT) or self.colBytesAlign != _round_up(self.col, 8):
            raise ValueError("MoeGatingV4Tiling: colAlign must be ceil32(col) and colBytesAlign ceil8(col)")
        if self.row < 1 or self.blockFormer < 1 or self.ubFormer < 1 or self.blockNum < 1:
            raise ValueError("MoeGatingV4Tiling: row, blockFormer, blockNum and ubFormer must be >= 1")
        if (self.blockNum - 1) * self.blockFormer + self.blockTail != self.row or not 1 <= self.blockTail <= self.blockFormer:
            raise ValueError(f"MoeGatingV4Tiling: blockNum={self.blockNum} blocks of blockFormer={self.blockFormer} "
                             f"rows with a last block of blockTail={self.blockTail} must cover row={self.row}")
        for rows, loops, tail, what in ((self.blockFormer, self.ubLoopOfFormerBlock, self.ubTailOfFormerBlock, "Former"),
                                        (self.blockTail, self.ubLoopOfTailBlock, self.ubTailOfTailBlock, "Tail")):
            if loops != _ceil_div(rows, self.ubFormer) or tail != rows - (loops - 1) * self.ubFormer:
                raise ValueError(f"MoeGatingV4Tiling: ubLoopOf{what}Block / ubTailOf{what}Block do not split "
                                 f"{rows} rows into loops of ubFormer={self.ubFormer}")


def _gather_bits(pairs: int, odd: bool) -> int:
    """GenValuesMask / GenIndicesMask (TIL_CPP:40-56): bit 2i (score) or 2i+1 (index) of each pair."""
    return sum(1 << (2 * i + int(odd)) for i in range(pairs))


def _rows_fit(rows: int, E: int, K: int, ub_bytes: int, dtype) -> bool:
    C = _round_up(E, SORT_UNIT)
    if rows > MAX_REPEAT:                                   # one repeat per row
        return False
    if not _k1_fast_path(E, K) and rows * (C // SORT_UNIT) > MAX_REPEAT:   # Sort32's repeats
        return False
    return moe_gating_v4_ub_bytes(rows, E, K, dtype) <= ub_bytes


def calculate_moe_gating_v4_tiling(B: int, S: int, E: int, K: int, hw: HardwareSpec | str = "ascend-910b2",
                                   *, dtype=np.float32) -> MoeGatingV4Tiling:
    """CANN's perf tiling (TIL_CPP:100-135, 176-223) for gate logits [B, S, E] and top-K.

    ``blockFormer = ceil(N / vector cores)``, ``blockNum = ceil(N / blockFormer)``; ``ubFormer =
    ceil(blockFormer / ubOuter)`` for the smallest ``ubOuter`` whose rows fit
    (:func:`moe_gating_v4_ub_bytes` ≤ the chip's UB, ≤ 255 repeats). ``dtype`` is the logits'
    dtype (float16 needs no more UB than float32, so a float32 tiling also fits float16).

    Raises ``ValueError`` outside the perf template's range (K > 8, E > 1024, K > E) and
    :class:`~npu_lab.kernels.moe_gating.tiling.UbBudgetError` if not even one row fits."""
    B, S, E, K = (_whole(n, v, 1) for n, v in zip("BSEK", (B, S, E, K)))
    if K > E:
        raise ValueError(f"K must be <= E (cannot pick {K} of {E} experts); got K={K}, E={E}")
    if K > MAX_K:
        raise ValueError(f"v4 (CANN's MoeGatingTopKSoftmax perf template) supports K <= {MAX_K}: it keeps only "
                         f"the first 8 pairs of every sorted 32-chunk; got K={K}. Use v3 for larger K")
    if E > MAX_E:
        raise ValueError(f"v4 (CANN's perf template) supports E <= {MAX_E} experts (at most 32 Sort32 chunks "
                         f"per row); got E={E}. Use v3 for larger E")
    hw = get_preset(hw) if isinstance(hw, str) else hw
    if not isinstance(hw, HardwareSpec):
        raise TypeError(f"hw must be a HardwareSpec or a preset name, got {type(hw).__name__}")
    dt = _input_dtype(dtype)
    N = B * S
    if N * E > 2**31 - 1:
        raise ValueError(f"N·E = {N * E} elements do not fit the int32 fields of the tiling struct")
    cores = hw.vector_cores
    block_former = _ceil_div(N, cores)
    block_num = _ceil_div(N, block_former)
    block_tail = N - (block_num - 1) * block_former
    ub_former = 0
    for ub_outer in range(1, block_former + 1):
        rows = _ceil_div(block_former, ub_outer)
        if _rows_fit(rows, E, K, hw.ub_usable_bytes, dt):
            ub_former = rows
            break
    if ub_former == 0:
        raise UbBudgetError(f"v4: not even one row of E={E} fits {hw.name}'s UB of {hw.ub_usable_bytes} B "
                            f"(one row needs {moe_gating_v4_ub_bytes(1, E, K, dt)} B)")
    loops_f = _ceil_div(block_former, ub_former)
    loops_t = _ceil_div(block_tail, ub_former)
    C = _round_up(E, SORT_UNIT)
    return MoeGatingV4Tiling(
        row=N, col=E, colBytesAlign=_round_up(E, 8), colAlign=C, k=K, kAlign=_round_up(K, K_ALIGN),
        blockFormer=block_former, blockNum=block_num, blockTail=block_tail, ubFormer=ub_former,
        ubLoopOfFormerBlock=loops_f, ubTailOfFormerBlock=block_former - (loops_f - 1) * ub_former,
        ubLoopOfTailBlock=loops_t, ubTailOfTailBlock=block_tail - (loops_t - 1) * ub_former,
        topKValuesMask=_gather_bits(K_ALIGN, False), topKIndicesMask=_gather_bits(K, True),
        bufferElemSize=max(ub_former * C, 64), softmaxFlag=0)


def v4_block_dim(tiling: MoeGatingV4Tiling) -> int:
    """The launch's blockDim: ``tiling.blockNum`` (≤ the chip's vector cores)."""
    if not isinstance(tiling, MoeGatingV4Tiling):
        raise TypeError(f"v4_block_dim takes a MoeGatingV4Tiling, got {type(tiling).__name__}")
    return tiling.blockNum


def _v4_block_classes(block_dim, gate_gm, indices_gm, weights_gm, tiling_bytes, *args, **kwargs):
    """Former blocks do identical work; the last one differs when it has fewer rows."""
    t = MoeGatingV4Tiling.unpack(tiling_bytes)
    labels = np.zeros(block_dim, dtype=np.int64)
    if t.blockTail != t.blockFormer:
        labels[-1] = 1
    return labels


# ------------------------------------------------------------------------------------------------
# The kernel (class MoeGatingTopKV4 in sorted_topk.cpp)
# ------------------------------------------------------------------------------------------------


class _V4:
    """One block's kernel object: ``init`` (InitBuffer), ``process`` (the software-pipelined
    loop), ``copy_in`` / ``compute`` / ``copy_out`` — the methods of the C++ class."""

    def __init__(self, ctx, gate_gm, indices_gm, weights_gm, t: MoeGatingV4Tiling):
        self.ctx, self.t = ctx, t
        self.E, self.K, self.C = t.col, t.k, t.colAlign
        self.chunks = self.C // SORT_UNIT
        self.fast = _k1_fast_path(self.E, self.K)
        self.dtype = gate_gm.dtype
        idx = ctx.get_block_idx()
        last = idx == t.blockNum - 1
        self.loops = t.ubLoopOfTailBlock if last else t.ubLoopOfFormerBlock
        self.tail_rows = t.ubTailOfTailBlock if last else t.ubTailOfFormerBlock
        # SetGlobalBuffer: this block's contiguous rows
        self.x_gm = gate_gm[t.blockFormer * t.col * idx]
        self.idx_gm = indices_gm[t.blockFormer * t.k * idx]
        self.w_gm = weights_gm[t.blockFormer * t.k * idx]

    # ---- Init ---------------------------------------------------------------------------------
    def init(self):
        """InitBuffer every queue / TBuf of :func:`moe_gating_v4_ub_layout`, in its order."""
        ctx, t = self.ctx, self.t
        self.gating_q = TQue(TPosition.VECIN, 2)            # TQue<TPosition::VECIN, 2>
        self.out_q = TQue(TPosition.VECOUT, 1)              # TQue<TPosition::VECOUT, 1>
        self.bufs = {}
        for name, copies, nbytes in moe_gating_v4_ub_layout(t.ubFormer, self.E, self.K, self.dtype):
            if name == "gating":
                ctx.pipe.init_buffer(self.gating_q, copies, nbytes, name=name)
            elif name == "topk_out":
                ctx.pipe.init_buffer(self.out_q, copies, nbytes, name=name)
            else:
                self.bufs[name] = TBuf(TPosition.VECCALC)
                ctx.pipe.init_buffer(self.bufs[name], nbytes, name=name)
        self.idx_off = _round_up(t.ubFormer * self.K, 8)     # indices after the weights in topk_out

    # ---- Process ------------------------------------------------------------------------------
    def process(self):
        ctx, t, n = self.ctx, self.t, self.loops
        rows = [t.ubFormer] * (n - 1) + [self.tail_rows]
        self.copy_in(0, rows[0])
        self.compute_phase0()
        nxt = rows[1:] + [0]
        key = lambda i: (rows[i], nxt[i], i >= 2, i + 2 < n)
        for i in ctx.tile_loop(n, key=key):
            self.compute(i, rows[i])
            if i + 1 < n:
                self.copy_in(i + 1, rows[i + 1])      # prefetch into the other VECIN slot
            self.copy_out(i, rows[i])

    def compute_phase0(self):
        """GatherMask patterns (scalar SetValue, then S→V), and the Sort32 index rows."""
        ctx, t, K = self.ctx, self.t, self.K
        pat = self.bufs["pattern"].get(np.uint32)
        for slot, bits in ((0, t.topKValuesMask), (8, t.topKIndicesMask), (16, 1), (24, (1 << K) - 1)):
            pat.set_value(slot, bits)          # [slot]: lanes 0..31 of a 64-lane repeat
            pat.set_value(slot + 1, 0)         # [slot+1]: lanes 32..63
        ev_s_v = ctx.pipe.fetch_event_id("S_V")          # waited at once: a fetched id
        ctx.set_flag("S_V", ev_s_v)
        ctx.wait_flag("S_V", ev_s_v)
        if self.fast:
            return
        C, rows = self.C, t.ubFormer
        index = self.bufs["index"].get(np.int32)
        ctx.create_vec_index(index, 0, C)                   # row 0: 0 .. C-1
        ctx.pipe_barrier("PIPE_V")
        if rows > 1:                                        # rows 1..: copies of row 0
            for off in range(0, C, 64):
                ctx.copy(index[C + off], index[off], min(64, C - off), rows - 1,
                         CopyRepeatParams(1, 1, C // 8, 0))
            ctx.pipe_barrier("PIPE_V")

    # ---- CopyIn -------------------------------------------------------------------------------
    def copy_in(self, i: int, r: int):
        ctx, E = self.ctx, self.E
        size = self.dtype.itemsize
        g = self.gating_q.alloc_tensor(self.dtype)
        row_bytes = _round_up(E * size, 32)                  # each block padded to 32 B in UB
        gap_blocks = (self.C * size - row_bytes) // 32       # then skip to the next C-element row
        ctx.data_copy_pad(g, self.x_gm[self.t.ubFormer * E * i],
                          DataCopyExtParams(r, E * size, 0, gap_blocks, 0),
                          DataCopyPadExtParams(False, 0, 0, 0))
        self.gating_q.enque(g)

    # ---- Compute ------------------------------------------------------------------------------
    def compute(self, i: int, r: int):
        ctx, C, E = self.ctx, self.C, self.E
        g = self.gating_q.deque(self.dtype)
        pairs = self.bufs["pairs"].get(np.float32)
        if self.dtype == np.float16:
            scores = self.bufs["cast"].get(np.float32)
            ctx.cast(scores, g, RoundMode.CAST_NONE, r * C)
            ctx.pipe_barrier("PIPE_V")
            self.gating_q.free_tensor(g)
        else:
            scores = g
        if self.fast:
            # (max, argmax) of every row, one repeat each; the pair lands at pairs[row * 64]
            ctx.whole_reduce_max(pairs, scores, E, r, 32, 1, C // 8, ReduceOrder.ORDER_VALUE_INDEX)
            ctx.pipe_barrier("PIPE_V")
        else:
            if C != E:                                       # -inf into columns E..C-1
                pad = C - E
                ctx.duplicate(scores[C - 32], NEG_INF, [((1 << pad) - 1) << (32 - pad), 0], r, 1, C // 8)
                ctx.pipe_barrier("PIPE_V")
            index = self.bufs["index"].get(np.int32)
            ctx.sort32(pairs, scores, index.reinterpret_cast(np.uint32), r * C // SORT_UNIT)
            ctx.pipe_barrier("PIPE_V")
        if self.dtype != np.float16:
            self.gating_q.free_tensor(g)
        if not self.fast and self.chunks > 1:
            self.merge_sort(pairs, self.bufs["cast"].get(np.float32), r)
        self.extract_softmax(pairs, r)

    def merge_sort(self, pairs, groups, r: int):
        """Rows hold n sorted lists of 32 pairs (64 floats) each. Per round: copy the first 8
        pairs of every list into groups of 4 (16 floats per list; lists a row lacks are −inf),
        then MrgSort every group of 4 × 8 into 32 sorted pairs, back into ``pairs``."""
        ctx, n = self.ctx, self.chunks
        while n > 1:
            g = _ceil_div(n, 4)
            slots = 4 * g                                    # lists per row after padding
            if slots != n:
                ctx.duplicate(groups, NEG_INF, r * slots * 2 * MERGE_KEEP)
                ctx.pipe_barrier("PIPE_V")
                for c in range(n):                           # list c of every row: 2 blocks
                    ctx.copy(groups[c * 16], pairs[c * 64], 16, r, CopyRepeatParams(1, 1, slots * 2, n * 8))
            else:                                            # rows are contiguous lists: one call
                ctx.copy(groups, pairs, 16, r * n, CopyRepeatParams(1, 1, 2, 8))
            ctx.pipe_barrier("PIPE_V")
            ctx.mrg_sort(pairs, MrgSortSrcList(groups[0], groups[16], groups[32], groups[48]),
                         MrgSort4Info((MERGE_KEEP,) * 4, False, 0b1111, r * g))
            ctx.pipe_barrier("PIPE_V")
            n = g

    def extract_softmax(self, pairs, r: int):
        """pairs: row i's sorted (score, index) pairs at pairs[i * 64]. Writes weights [r, K]
        (float32) at out[0] and indices [r, K] (int32) at out[idx_off] of a topk_out slot."""
        ctx, K = self.ctx, self.K
        out = self.out_q.alloc_tensor(np.float32)
        pat = self.bufs["pattern"].get(np.uint32)
        soft = self.bufs["softmax"].get(np.float32)
        vals, bcast = soft, soft[K_ALIGN * r]                # [r, 8] values, then [ceil8(r), 8]
        stat = self.bufs["row_stat"].get(np.float32)
        indices = out[self.idx_off].reinterpret_cast(np.int32)
        per_row = GatherMaskParams(1, r, 8, 0)               # one 64-float row per repeat, same pattern
        ctx.gather_mask(vals, pairs, pat[0], False, 0, per_row)                                  # 8 scores
        ctx.gather_mask(indices, pairs.reinterpret_cast(np.int32), pat[8], False, 0, per_row)   # K indices
        ctx.gather_mask(stat, pairs, pat[16], False, 0, per_row)                                # row max
        ctx.pipe_barrier("PIPE_V")
        blocks = _ceil_div(r, 8)
        ctx.brcb(bcast, stat, blocks, BrcbRepeatParams(1, 8))          # max -> one block per row
        ctx.pipe_barrier("PIPE_V")
        ctx.sub(vals, vals, bcast, K_ALIGN * r)
        ctx.pipe_barrier("PIPE_V")
        ctx.exp(vals, vals, K_ALIGN * r)
        ctx.pipe_barrier("PIPE_V")
        ctx.whole_reduce_sum(stat, vals, K, r, 1, 1, 1)                 # sum of the first K per row
        ctx.pipe_barrier("PIPE_V")
        ctx.brcb(bcast, stat, blocks, BrcbRepeatParams(1, 8))
        ctx.pipe_barrier("PIPE_V")
        ctx.div(vals, vals, bcast, K_ALIGN * r)
        ctx.pipe_barrier("PIPE_V")
        ctx.gather_mask(out, vals, pat[24], False, 0, GatherMaskParams(1, r, 1, 0))   # first K of 8
        ctx.pipe_barrier("PIPE_V")
        self.out_q.enque(out)

    # ---- CopyOut ------------------------------------------------------------------------------
    def copy_out(self, i: int, r: int):
        ctx, K = self.ctx, self.K
        out = self.out_q.deque(np.float32)
        base = self.t.ubFormer * K * i
        ctx.data_copy_pad(self.idx_gm[base], out[self.idx_off].reinterpret_cast(np.int32),
                          DataCopyExtParams(1, r * K * 4, 0, 0, 0))
        ctx.data_copy_pad(self.w_gm[base], out, DataCopyExtParams(1, r * K * 4, 0, 0, 0))
        self.out_q.free_tensor(out)


def _check_args(ctx, gate_gm, indices_gm, weights_gm, t: MoeGatingV4Tiling):
    if ctx.get_block_num() != t.blockNum:
        raise ValueError(f"v4 must be launched with blockDim = tiling.blockNum = {t.blockNum} "
                         f"(v4_block_dim(tiling)); got {ctx.get_block_num()}")
    _input_dtype(gate_gm.dtype)
    for gm, n, dt, what in ((gate_gm, t.row * t.col, None, "gate logits [N*E]"),
                            (indices_gm, t.row * t.k, np.int32, "indices [N*K] int32"),
                            (weights_gm, t.row * t.k, np.float32, "weights [N*K] float32")):
        if gm.size != n or (dt is not None and gm.dtype != dt):
            raise ValueError(f"v4: '{gm.name}' must be {what} = {n} elements; got {gm.size} x {gm.dtype.name}")


@npu_kernel(block_classes=_v4_block_classes)
def moe_gating_v4_kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """v4: CANN's perf template — DataCopyPad rows, Sort32 + MrgSort, GatherMask, softmax over K.
    Pipes MTE2 → V → MTE3, double-buffered input (see the module docstring). The Ascend C
    listing is ``sorted_topk.cpp`` beside this file."""
    t = MoeGatingV4Tiling.unpack(tiling_bytes)            # GET_TILING_DATA
    _check_args(ctx, gate_gm, indices_gm, weights_gm, t)
    op = _V4(ctx, gate_gm, indices_gm, weights_gm, t)
    op.init()
    op.process()
