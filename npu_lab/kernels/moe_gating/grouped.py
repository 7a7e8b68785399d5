"""The fused kernel for the full gating semantics (issue 20 §2): sigmoid or softmax scores, a
selection-only bias, grouped top-k (group max or top-2 sum), renorm on / off, routed scaling,
finished rows and the extra outputs — structured like CANN's MoeGatingTopK.

The real kernel this follows (hicann/ops-transformer): ``moe/moe_gating_top_k/op_kernel/
moe_gating_top_k_generalized.h`` and ``moe_gating_top_k_e_k_fullload.h`` (per-group Sort32, the
two best scores of every group, group selection, MrgSort of the chosen groups, the gather of the
K winners), its tiling ``op_host/moe_gating_top_k_tiling.cpp`` (CheckAttr, groups padded to 32).
The Ascend C listing of *this* kernel is ``grouped.cpp`` beside this file.

Layout: E experts form ``groups`` groups of ``G = E / groups`` consecutive experts; in UB each
group is padded to ``Gp = ceil32(G)`` columns (the Sort32 unit), a row to ``C = groups · Gp``.

Device, per loop of ``r`` rows (pipes MTE2 → V (S for the group choice) → MTE3):

=====================  ========================================================================
CopyIn (MTE2)          ``DataCopyPad`` of ``r · groups`` blocks of G elements, each landing at a
                       Gp stride (UB dst gap); the finished flags of the r rows
Cast (fp16 only)       to float32, ``r · C`` elements
pad                    masked ``Duplicate`` of −inf over the pad columns of every group
score                  softmax: ``ReduceMax`` / ``ReduceSum`` per row (over the E real columns),
                       ``Brcb`` + ``Sub``, ``Exp``, ``Div`` (1 / sum), ``Mul``; sigmoid:
                       ``Muls`` −1, ``Exp``, ``Adds`` 1, ``Reciprocal``
key                    ``Add`` of the bias row (selection only), pad columns −inf again
Sort32 + MrgSort       every 32-column chunk sorted with its padded position, then every group
                       merged into one sorted list (4 lists per MrgSort, all pairs kept)
group choice           ``Gather`` of every group's best (and second) key, ``Add`` (top2_sum); the
                       scalar unit reads the group scores and ranks them (stable: lower group
                       first); ``MrgSort`` of the chosen groups' lists, in group order
top-K                  ``Gather`` (byte offsets) of the first K pairs of every row: positions,
                       then the weights' source (norm, or the logits for softmax + renorm) and
                       the expert indices (a position → expert table when G ≠ Gp)
weights                softmax + renorm: max, ``Sub``, ``Exp``, sum + eps, ``Div``; sigmoid +
                       renorm: sum + eps, ``Div``; renorm off: as gathered; ``Muls`` scaling
finished               flags → float, ``w · (1 − f)``, ``idx · (1 − f) + E · f`` (branch-free)
CopyOut (MTE3)         ``DataCopyPad`` of indices, weights (and row_idx, norm_out with extras)
=====================  ========================================================================

Where this differs from CANN's kernel (and why):

* The group ranking runs on the scalar unit (``GetValue`` of the group scores, a stable sort of
  ``groups`` values, priced as scalar work) instead of CANN's vector Sort32 of the group scores;
  the MrgSort of the chosen groups then takes their lists in group order, so equal keys go to the
  lower expert index, as the reference orders them.
* Every list keeps all its pairs through the merges (CANN keeps the first K), so any K the CANN
  rules admit (k <= kGroup · E / groupCount) is exact.
* The finished flags travel as int32 (CANN: bool, one byte): npu_lab's DataCopyPad and Cast model
  16- and 32-bit elements. Finished rows get index E and weight 0 (the reference's semantics).
* ``expert_counts`` is counted by the host from the kernel's indices (the per-expert atomic
  counters in GM belong to the dispatch kernel).
* Weights are float32 for both input dtypes (the course's semantics).

Supported range: every config :func:`~.reference.moe_gating_topk_reference` accepts with
``C = groups · ceil32(E / groups) <= 2048``; float32 / float16 logits. The chip needs
DataCopyPad, Sort32, MrgSort and Gather (the 310P3 lacks DataCopyPad and Sort32: refused by
:func:`grouped_unsupported_reason` before a launch).

Sources for the rules used: asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/数据搬运/
DataCopyPad（GMToUB非对齐数据搬运）.md, 排序组合（ISASI）/Sort32.md, MrgSort.md, 离散与聚合/Gather.md,
数据填充/Brcb.md, Duplicate.md, CreateVecIndex.md, 归约计算/ReduceMax.md, ReduceSum.md,
WholeReduceSum.md, 基础算术/Reciprocal.md, 类型转换/Cast.md.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, fields

import numpy as np

from ...hardware import HardwareSpec
from ...lang import (BinaryRepeatParams, BrcbRepeatParams, CopyRepeatParams, DataCopyExtParams,
                     DataCopyPadExtParams, MrgSort4Info, MrgSortSrcList, ReduceOrder, RoundMode, TBuf,
                     TPosition, TQue, npu_kernel)
from ...lang.tiling_struct import Int32Struct
from ...presets import get_preset
from .tiling import UbBudgetError

__all__ = ["grouped_block_classes", "GROUPED_NEEDS", "MAX_COLS", "MoeGatingGroupedTiling", "calculate_grouped_tiling",
           "grouped_ub_bytes", "grouped_ub_layout", "grouped_unsupported_reason", "moe_gating_grouped_kernel"]

#: CANN's MAX_EXPERT_COUNT: the padded row (groups · ceil32(E / groups)) must fit it
MAX_COLS = 2048
MAX_REPEAT = 255
SORT_UNIT = 32
NEG_INF = float("-inf")
#: instructions the kernel issues at every shape (checked against the chip before a launch)
GROUPED_NEEDS = ("DataCopyPad", "Sort32", "MrgSort", "Copy")


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


def grouped_unsupported_reason(hw) -> str | None:
    """Why the grouped kernel cannot run on chip ``hw`` (None when it can)."""
    from ...capabilities import check_supported

    hw = get_preset(hw) if isinstance(hw, str) else hw
    for instruction in GROUPED_NEEDS:
        why = check_supported(hw.isa, instruction)
        if why:
            return f"the grouped routing kernel cannot run on {hw.name}: {why}"
    return None


# ------------------------------------------------------------------------------------------------
# The tiling struct
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MoeGatingGroupedTiling(Int32Struct):
    """The grouped kernel's tiling (after CANN's ``MoeGatingTopKTilingData``: row / expertCount /
    groupCount / kGroup / k / normType / groupSelectMode / renorm / outFlag / routedScalingFactor /
    eps, plus the rows-per-core split of the perf templates).

    row: N rows; col: E; groups, groupSize: G = E / groups, groupAlign: Gp = ceil32(G), colAlign:
    C = groups · Gp; k, kAlign: ceil8(K); kGroup: groups kept; grouped: 1 when the groups restrict
    the choice (groups > 1 and kGroup < groups); normType 0 softmax / 1 sigmoid; groupSelectMode 0
    max / 1 top-2 sum; renorm 0 / 1; hasBias, hasFinished, outFlag (extra outputs) 0 / 1;
    selectOnLogits 1 when the key is the logits (softmax, renorm, no bias, not grouped: V2's
    ``TopK(x)``); blockFormer, blockNum, blockTail, ubFormer, ubLoop/ubTail of a former and the
    last block: the split of v4; routedScalingFactor, eps: float32 members."""

    row: int
    col: int
    groups: int
    groupSize: int
    groupAlign: int
    colAlign: int
    k: int
    kAlign: int
    kGroup: int
    grouped: int
    normType: int
    groupSelectMode: int
    renorm: int
    hasBias: int
    hasFinished: int
    outFlag: int
    selectOnLogits: int
    blockFormer: int
    blockNum: int
    blockTail: int
    ubFormer: int
    ubLoopOfFormerBlock: int
    ubTailOfFormerBlock: int
    ubLoopOfTailBlock: int
    ubTailOfTailBlock: int
    routedScalingFactor: float
    eps: float

    def __post_init__(self):
        for f in fields(self):
            if f.type not in (float, "float"):
                _whole(f"MoeGatingGroupedTiling.{f.name}", getattr(self, f.name), 0, 2**31 - 1)
        if self.groups < 1 or self.col != self.groups * self.groupSize:
            raise ValueError("MoeGatingGroupedTiling: col must be groups * groupSize")
        if self.groupAlign != _round_up(self.groupSize, SORT_UNIT) or self.colAlign != self.groups * self.groupAlign:
            raise ValueError("MoeGatingGroupedTiling: groupAlign must be ceil32(groupSize), colAlign groups * groupAlign")
        if self.colAlign > MAX_COLS:
            raise ValueError(f"MoeGatingGroupedTiling: colAlign {self.colAlign} > {MAX_COLS}")
        if not 1 <= self.k <= self.col or self.kAlign != _round_up(self.k, 8):
            raise ValueError("MoeGatingGroupedTiling: need 1 <= k <= col and kAlign = ceil8(k)")
        if (self.blockNum - 1) * self.blockFormer + self.blockTail != self.row:
            raise ValueError("MoeGatingGroupedTiling: blocks must cover the rows")

    @property
    def final_len(self) -> int:
        """Pairs per row of the list the K winners are gathered from."""
        return self.kGroup * self.groupAlign if self.grouped else self.colAlign


# ------------------------------------------------------------------------------------------------
# UB layout (the single source of truth for InitBuffer and the budget)
# ------------------------------------------------------------------------------------------------


def grouped_ub_layout(rows: int, t_or_shape, dtype=np.float32) -> list[tuple[str, int, int]]:
    """``(name, copies, bytes per copy)`` of every UB buffer for ``rows`` rows per loop, in
    allocation order. ``t_or_shape``: a :class:`MoeGatingGroupedTiling` or a dict with the keys
    colAlign, groupAlign, groups, col, kAlign, kGroup, grouped, hasBias, hasFinished, outFlag,
    normType.

    pairs_a / pairs_b (ping-pong sort buffers, 8·r·C B each); x (VECIN, 2 slots, r·C of T);
    xf (float16 only: r·C float32); norm (r·C float32; in the out slot with extras); key (bias
    only); index (r·C int32 positions); final (grouped: r·kGroup·Gp pairs), merge scratch (2 rows of
    it); table (position → expert, when G ≠ Gp); bias (VECIN, 1 slot); flags (VECIN, 2 slots);
    gscore (grouped: 2 · r·groups float32); sel / pos / offs / rowbase ([r, Kp] each); dense (one
    row of E, softmax with padded groups); stat + bcast + tmp; out (VECOUT, 1 slot: weights,
    indices, row_idx [r, Kp] each, then norm_out r·C with extras)."""
    t = t_or_shape if isinstance(t_or_shape, dict) else {f.name: getattr(t_or_shape, f.name) for f in fields(t_or_shape)}
    dt = np.dtype(dtype)
    C, Gp, groups, E, Kp = t["colAlign"], t["groupAlign"], t["groups"], t["col"], t["kAlign"]
    r = rows
    r8 = _round_up(r, 8)
    rk = r * Kp
    blk = lambda n_bytes: _round_up(n_bytes, 32)
    lay = [("pairs_a", 1, 8 * r * C), ("pairs_b", 1, 8 * r * C), ("x", 2, blk(r * C * dt.itemsize))]
    if dt == np.float16:
        lay.append(("xf", 1, 4 * r * C))
    if not t["outFlag"]:
        lay.append(("norm", 1, 4 * r * C))
    if t["hasBias"]:
        lay.append(("key", 1, 4 * r * C))
    lay.append(("index", 1, 4 * r * C))
    if t["grouped"]:
        fl = t["kGroup"] * Gp
        half = _round_up(r * groups, 8)
        # two merge scratch rows in buffers of their own (MrgSort's src and dst must not overlap)
        lay += [("final", 1, 8 * r * fl), ("scratch_a", 1, 8 * fl), ("scratch_b", 1, 8 * fl), ("gscore", 1, 2 * 4 * half),
                ("goffs", 1, 2 * 4 * half)]
    if Gp != t["groupSize"]:
        lay.append(("table", 1, 4 * C))
    if t["hasBias"]:
        lay.append(("bias", 1, 4 * C))
    if t["hasFinished"]:
        lay.append(("flags", 2, blk(4 * r)))
    lay += [("sel", 1, 4 * rk), ("pos", 1, 4 * rk), ("offs", 1, 2 * 4 * rk), ("rowbase", 1, 4 * rk)]
    if t["normType"] == 0 and groups > 1 and Gp != t["groupSize"]:
        lay += [("dense", 1, blk(4 * E)), ("doffs", 1, blk(4 * E))]
    if t["outFlag"]:
        lay.append(("ribase", 1, 4 * rk))
    lay += [("stat", 1, 4 * 2 * r8), ("bcast", 1, 4 * 8 * 2 * r8), ("tmp", 1, blk(4 * max(C, Kp)))]
    out = 4 * norm_offset(rk) + (4 * r * C if t["outFlag"] else 0)
    lay.append(("out", 1, out))
    # every buffer a whole number of 256-B units: each starts where Sort32 / MrgSort want it
    return [(name, c, _round_up(b, 256)) for name, c, b in lay]


def norm_offset(rk: int) -> int:
    """Where norm_out starts in the out slot (floats): after weights, indices and row_idx
    ([rows, kAlign] each), on a 256-B boundary (it is Sort32's source when there is no bias)."""
    return _round_up(3 * rk, 64)


def grouped_ub_bytes(rows: int, t_or_shape, dtype=np.float32) -> int:
    """Bytes of UB the grouped kernel allocates for ``rows`` rows per loop."""
    return sum(c * b for _, c, b in grouped_ub_layout(rows, t_or_shape, dtype))


def _rows_fit(r: int, shape: dict, ub: int, dtype) -> bool:
    C, groups = shape["colAlign"], shape["groups"]
    if r > MAX_REPEAT or r * C // SORT_UNIT > MAX_REPEAT or r * groups > MAX_REPEAT:
        return False
    return grouped_ub_bytes(r, shape, dtype) <= ub


def calculate_grouped_tiling(N: int, E: int, K: int, hw: HardwareSpec | str = "ascend-910b2", *,
                             score="softmax", has_bias=False, num_groups=1, topk_groups=1,
                             group_select="max", renorm=True, routed_scaling_factor=1.0, eps=1e-20,
                             has_finished=False, extras=False, dtype=np.float32) -> MoeGatingGroupedTiling:
    """The host tiling for N rows of E experts, top-K, with validated routing options
    (:func:`~.reference._check_options` has checked them). Rows per core and per loop as v4:
    ``blockFormer = ceil(N / cores)``, ``ubFormer`` the balanced choice that fits the UB and the
    255-repeat limits. Raises ``ValueError`` when the padded row exceeds 2048 columns and
    :class:`UbBudgetError` when not even one row fits."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    N, E, K = _whole("N", N, 1), _whole("E", E, 1), _whole("K", K, 1, E)
    groups, kgroups = _whole("num_groups", num_groups, 1, E), _whole("topk_groups", topk_groups, 1)
    G = E // groups
    Gp = _round_up(G, SORT_UNIT)
    C = groups * Gp
    if C > MAX_COLS:
        raise ValueError(f"the grouped kernel pads every group to a multiple of 32 experts: {groups} groups of "
                         f"{G} -> {C} columns, more than CANN's {MAX_COLS} (MAX_EXPERT_COUNT, "
                         "moe/moe_gating_top_k/op_host/moe_gating_top_k_tiling.cpp)")
    grouped = int(groups > 1 and kgroups < groups)
    softmax = score == "softmax"
    shape = dict(colAlign=C, groupAlign=Gp, groups=groups, groupSize=G, col=E, kAlign=_round_up(K, 8),
                 kGroup=kgroups, grouped=grouped, hasBias=int(has_bias), hasFinished=int(has_finished),
                 outFlag=int(extras), normType=0 if softmax else 1)
    if N * C > 2**31 - 1:
        raise ValueError(f"N·C = {N * C} elements do not fit the int32 fields of the tiling struct")
    cores = hw.vector_cores
    bf = _ceil_div(N, cores)
    bn = _ceil_div(N, bf)
    bt = N - (bn - 1) * bf
    ubf = 0
    for outer in range(1, bf + 1):
        rows = _ceil_div(bf, outer)
        if _rows_fit(rows, shape, hw.ub_usable_bytes, dtype):
            ubf = rows
            break
    if ubf == 0:
        raise UbBudgetError(f"grouped kernel: not even one row of E={E} ({C} padded columns) fits {hw.name}'s UB "
                            f"of {hw.ub_usable_bytes} B (one row needs {grouped_ub_bytes(1, shape, dtype)} B)")
    lf, lt = _ceil_div(bf, ubf), _ceil_div(bt, ubf)
    select_on_logits = int(softmax and renorm and not has_bias and not grouped)
    return MoeGatingGroupedTiling(
        row=N, col=E, groups=groups, groupSize=G, groupAlign=Gp, colAlign=C, k=K, kAlign=_round_up(K, 8),
        kGroup=kgroups, grouped=grouped, normType=shape["normType"],
        groupSelectMode=0 if group_select == "max" else 1, renorm=int(renorm), hasBias=int(has_bias),
        hasFinished=int(has_finished), outFlag=int(extras), selectOnLogits=select_on_logits,
        blockFormer=bf, blockNum=bn, blockTail=bt, ubFormer=ubf, ubLoopOfFormerBlock=lf,
        ubTailOfFormerBlock=bf - (lf - 1) * ubf, ubLoopOfTailBlock=lt, ubTailOfTailBlock=bt - (lt - 1) * ubf,
        routedScalingFactor=float(np.float32(routed_scaling_factor)), eps=float(np.float32(eps)))


def grouped_block_classes(block_dim, *args, **kwargs):
    """Block classes of a grouped-routing launch (its tiling struct is the last argument): every
    block runs ``blockFormer`` rows but the last, which runs ``blockTail``."""
    t = MoeGatingGroupedTiling.unpack(args[-1])
    labels = np.zeros(block_dim, dtype=np.int64)
    if t.blockTail != t.blockFormer:
        labels[-1] = 1
    return labels


# ------------------------------------------------------------------------------------------------
# The kernel (class MoeGatingTopKGrouped in grouped.cpp)
# ------------------------------------------------------------------------------------------------


class _Grouped:
    def __init__(self, ctx, gms, t: MoeGatingGroupedTiling):
        self.ctx, self.t = ctx, t
        gate, bias, finished, idx, w, row_idx, norm = gms
        self.dtype = gate.dtype
        self.E, self.K, self.Kp, self.C = t.col, t.k, t.kAlign, t.colAlign
        self.G, self.Gp, self.groups = t.groupSize, t.groupAlign, t.groups
        b = ctx.get_block_idx()
        last = b == t.blockNum - 1
        self.loops = t.ubLoopOfTailBlock if last else t.ubLoopOfFormerBlock
        self.tail_rows = t.ubTailOfTailBlock if last else t.ubTailOfFormerBlock
        self.row0 = t.blockFormer * b
        self.x_gm = gate[self.row0 * t.col]
        self.bias_gm, self.fin_gm = bias, finished[self.row0] if t.hasFinished else None
        self.idx_gm, self.w_gm = idx[self.row0 * t.k], w[self.row0 * t.k]
        self.ri_gm = row_idx[self.row0 * t.k] if t.outFlag else None
        self.norm_gm = norm[self.row0 * t.col] if t.outFlag else None

    # ---- Init ---------------------------------------------------------------------------------
    def init(self):
        ctx, t = self.ctx, self.t
        self.x_q, self.out_q = TQue(TPosition.VECIN, 2), TQue(TPosition.VECOUT, 1)
        self.bias_q, self.flag_q = TQue(TPosition.VECIN, 1), TQue(TPosition.VECIN, 2)
        queues = {"x": self.x_q, "out": self.out_q, "bias": self.bias_q, "flags": self.flag_q}
        self.b = {}
        for name, copies, nbytes in grouped_ub_layout(t.ubFormer, t, self.dtype):
            if name in queues:
                ctx.pipe.init_buffer(queues[name], copies, nbytes, name=name)
            else:
                self.b[name] = TBuf(TPosition.VECCALC)
                ctx.pipe.init_buffer(self.b[name], nbytes, name=name)

    def _buf(self, name, dtype=np.float32):
        return self.b[name].get(dtype)

    def prepare(self):
        """Once per block: the bias row, the position tables, the Gather offset tables."""
        ctx, t, C, Gp, G = self.ctx, self.t, self.C, self.Gp, self.G
        r = t.ubFormer
        if t.hasBias:
            bias = self.bias_q.alloc_tensor(np.float32)
            self._copy_groups_in(bias, self.bias_gm, 1, 4)
            self.bias_q.enque(bias)
            self.bias = self.bias_q.deque(np.float32)
        # positions 0..C-1 in every row (Sort32's indices), and the position -> expert table
        index = self._buf("index", np.int32)
        ctx.create_vec_index(index, 0, C)
        if Gp != G:
            table = self._buf("table", np.int32)
            for g in range(self.groups):
                ctx.create_vec_index(table[g * Gp], g * G, Gp)
        ctx.pipe_barrier("PIPE_V")
        if r > 1:
            if C // 8 <= 255:
                for off in range(0, C, 64):
                    ctx.copy(index[C + off], index[off], min(64, C - off), r - 1, CopyRepeatParams(1, 1, C // 8, 0))
            else:
                for i in range(1, r):
                    ctx.copy(index[i * C], index, 64, C // 64, CopyRepeatParams(1, 1, 8, 8))
            ctx.pipe_barrier("PIPE_V")
        # scalar-built offset tables (SetValue): the first K pairs of every row's final list,
        # each row's base in the C-column buffers, and the group heads
        offs, rowbase = self._buf("offs", np.uint32), self._buf("rowbase", np.int32)
        L = t.final_len
        Kp, K = self.Kp, self.K
        for i in range(r):
            for j in range(Kp):
                jj = min(j, K - 1)
                offs.set_value(i * Kp + j, (i * L + jj) * 8 + 4)          # the index lane of pair jj
                rowbase.set_value(i * Kp + j, i * C * 4)
        if t.grouped:
            goffs = self._buf("goffs", np.uint32)
            n = _round_up(r * self.groups, 8)
            for i in range(r):
                for g in range(self.groups):
                    head = (i * C + g * Gp) * 8
                    goffs.set_value(i * self.groups + g, head)
                    goffs.set_value(n + i * self.groups + g, head + 8)
        if "doffs" in self.b:
            doffs = self._buf("doffs", np.uint32)
            for e in range(self.E):
                doffs.set_value(e, ((e // G) * Gp + e % G) * 4)
        if t.outFlag:
            ribase = self._buf("ribase", np.int32)
            for i in range(r):
                for j in range(Kp):
                    ribase.set_value(i * Kp + j, min(j, K - 1) * t.row + i)
        ev = ctx.pipe.fetch_event_id("S_V")
        ctx.set_flag("S_V", ev)
        ctx.wait_flag("S_V", ev)

    def _copy_groups_in(self, dst, src_gm, rows, size):
        """rows·groups blocks of G elements from GM, each at a Gp stride in UB."""
        G, Gp = self.G, self.Gp
        gap = (Gp * size - _round_up(G * size, 32)) // 32
        self.ctx.data_copy_pad(dst, src_gm, DataCopyExtParams(rows * self.groups, G * size, 0, gap, 0),
                               DataCopyPadExtParams(False, 0, 0, 0))

    # ---- Process ------------------------------------------------------------------------------
    def process(self):
        ctx, t, n = self.ctx, self.t, self.loops
        rows = [t.ubFormer] * (n - 1) + [self.tail_rows]
        self.copy_in(0, rows[0])
        nxt = rows[1:] + [0]
        key = lambda i: (rows[i], nxt[i], i >= 2, i + 2 < n)
        for i in ctx.tile_loop(n, key=key):
            self.compute(i, rows[i])
            if i + 1 < n:
                self.copy_in(i + 1, rows[i + 1])
            self.copy_out(i, rows[i])

    def copy_in(self, i, r):
        t = self.t
        x = self.x_q.alloc_tensor(self.dtype)
        self._copy_groups_in(x, self.x_gm[t.ubFormer * t.col * i], r, self.dtype.itemsize)
        self.x_q.enque(x)
        if t.hasFinished:
            f = self.flag_q.alloc_tensor(np.int32)
            self.ctx.data_copy_pad(f, self.fin_gm[t.ubFormer * i], DataCopyExtParams(1, r * 4, 0, 0, 0),
                                   DataCopyPadExtParams(False, 0, 0, 0))
            self.flag_q.enque(f)

    # ---- helpers ------------------------------------------------------------------------------
    def _pad_neg_inf(self, buf, r):
        """−inf into the pad columns G..Gp-1 of every group of r rows."""
        ctx, G, Gp = self.ctx, self.G, self.Gp
        if G == Gp:
            return
        pad = Gp - G
        mask = [((1 << pad) - 1) << (32 - pad), 0]
        if Gp // 8 <= 255:
            ctx.duplicate(buf[Gp - 32], NEG_INF, mask, r * self.groups, 1, Gp // 8)
        else:
            for q in range(r * self.groups):
                ctx.duplicate(buf[q * Gp + Gp - 32], NEG_INF, mask, 1, 1, 8)
        ctx.pipe_barrier("PIPE_V")

    def _row_op(self, op, dst, src, bcast, r, width):
        """dst[i, :] = op(src[i, :], bcast[i]) over r rows of ``width`` (a multiple of 8) elements;
        ``bcast`` holds one 32-B block per row (Brcb's output)."""
        ctx = self.ctx
        if width // 8 <= 255:
            for c in range(0, width, 64):
                op(dst[c], src[c], bcast, min(64, width - c), r, BinaryRepeatParams(1, 1, 0, width // 8, width // 8, 1))
        else:
            for i in range(r):
                op(dst[i * width], src[i * width], bcast[i * 8], 64, width // 64, BinaryRepeatParams(1, 1, 0, 8, 8, 0))

    def _brcb(self, dst, stat, r):
        self.ctx.brcb(dst, stat, _ceil_div(r, 8), BrcbRepeatParams(1, 8))
        self.ctx.pipe_barrier("PIPE_V")

    def _row_reduce(self, kind, dst, src, r, width, count):
        """dst[i] = max / sum of the first ``count`` of row i (rows ``width`` apart)."""
        ctx = self.ctx
        if width <= 64 and count <= 64:
            if kind == "max":
                ctx.whole_reduce_max(dst, src, count, r, 1, 1, width // 8, ReduceOrder.ORDER_ONLY_VALUE)
            else:
                ctx.whole_reduce_sum(dst, src, count, r, 1, 1, width // 8)
        else:
            tmp = self._buf("tmp")
            for i in range(r):
                (ctx.reduce_max if kind == "max" else ctx.reduce_sum)(dst[i], src[i * width], tmp, count)
        ctx.pipe_barrier("PIPE_V")

    # ---- Compute ------------------------------------------------------------------------------
    def compute(self, i, r):
        ctx, t, C = self.ctx, self.t, self.C
        x = self.x_q.deque(self.dtype)
        if self.dtype == np.float16:
            xf = self._buf("xf")
            ctx.cast(xf, x, RoundMode.CAST_NONE, r * C)
            ctx.pipe_barrier("PIPE_V")
        else:
            xf = x
        out = self.out_q.alloc_tensor(np.float32)
        rk = r * self.Kp
        rk_all = t.ubFormer * self.Kp
        norm = out[norm_offset(rk_all)] if t.outFlag else self._buf("norm")
        self._pad_neg_inf(xf, r)
        stat, bcast = self._buf("stat"), self._buf("bcast")
        r8 = _round_up(r, 8)
        if t.selectOnLogits and not t.outFlag:
            pass                                  # V2 renorm = 1: the weights come from the logits alone
        elif t.normType == 0:
            self._softmax(xf, norm, r, stat, bcast)
        else:
            ctx.muls(norm, xf, -1.0, r * C)
            ctx.pipe_barrier("PIPE_V")
            ctx.exp(norm, norm, r * C)
            ctx.pipe_barrier("PIPE_V")
            ctx.adds(norm, norm, 1.0, r * C)
            ctx.pipe_barrier("PIPE_V")
            ctx.reciprocal(norm, norm, r * C)
            ctx.pipe_barrier("PIPE_V")
        if t.selectOnLogits:
            key = xf
        elif t.hasBias:
            key = self._buf("key")
            if C // 8 <= 255:
                for c in range(0, C, 64):
                    ctx.add(key[c], norm[c], self.bias[c], min(64, C - c), r,
                            BinaryRepeatParams(1, 1, 1, C // 8, C // 8, 0))
            else:
                for q in range(r):
                    ctx.add(key[q * C], norm[q * C], self.bias, C)
            ctx.pipe_barrier("PIPE_V")
            self._pad_neg_inf(key, r)
        else:
            key = norm
            self._pad_neg_inf(key, r)
        # Sort32 every chunk, then merge every group (or the whole row) into one sorted list
        a, b = self._buf("pairs_a"), self._buf("pairs_b")
        index = self._buf("index", np.int32).reinterpret_cast(np.uint32)
        ctx.sort32(a, key, index, r * C // SORT_UNIT)
        ctx.pipe_barrier("PIPE_V")
        span = self.Gp if t.grouped else C
        sorted_buf = self._merge_rounds(a, b, r * (C // span), span)
        if t.grouped:
            final = self._choose_groups(sorted_buf, r)
        else:
            final = sorted_buf
        self._topk(i, final, xf, norm, out, r, stat, bcast, rk, rk_all, r8)
        self.x_q.free_tensor(x)
        self.out_q.enque(out)

    def _softmax(self, xf, norm, r, stat, bcast):
        """norm = exp(x - max) * (1 / sum), max and sum over the E real columns of every row."""
        ctx, t, C, E = self.ctx, self.t, self.C, self.E
        tmp = self._buf("tmp")
        dense_layout = self.groups == 1 or self.G == self.Gp
        for q in range(r):
            ctx.reduce_max(stat[q], xf[q * C], tmp, C)          # the pad columns are −inf
        ctx.pipe_barrier("PIPE_V")
        self._brcb(bcast, stat, r)
        self._row_op(ctx.sub, norm, xf, bcast, r, C)
        ctx.pipe_barrier("PIPE_V")
        ctx.exp(norm, norm, r * C)
        ctx.pipe_barrier("PIPE_V")
        sums = stat[_round_up(r, 8)]
        if dense_layout:
            for q in range(r):
                ctx.reduce_sum(sums[q], norm[q * C], tmp, E)
        else:
            # pack the E real columns of a row first: the sum runs over them in order, as numpy's
            dense, doffs = self._buf("dense"), self._buf("doffs", np.uint32)
            for q in range(r):
                ctx.gather(dense, norm, doffs, q * C * 4, E)
                ctx.pipe_barrier("PIPE_V")
                ctx.reduce_sum(sums[q], dense, tmp, E)
                ctx.pipe_barrier("PIPE_V")
        ctx.pipe_barrier("PIPE_V")
        ctx.duplicate(bcast, 1.0, _round_up(r, 8))
        ctx.pipe_barrier("PIPE_V")
        ctx.div(sums, bcast, sums, _round_up(r, 8))            # 1 / sum
        ctx.pipe_barrier("PIPE_V")
        self._brcb(bcast, sums, r)
        self._row_op(ctx.mul, norm, norm, bcast, r, C)
        ctx.pipe_barrier("PIPE_V")

    def _merge_rounds(self, a, b, lists_total, span):
        """``lists_total`` regions of ``span`` pairs, each made of span/32 sorted chunks: merge every
        region into one sorted list (4 lists per MrgSort, every pair kept). Returns the buffer
        holding the result."""
        ctx = self.ctx
        n = span // SORT_UNIT
        runs = [(j * SORT_UNIT, SORT_UNIT) for j in range(n)]     # (start pair, length) in a region
        src, dst = a, b
        while len(runs) > 1:
            sets = [runs[s:s + 4] for s in range(0, len(runs), 4)]
            uniform = len(runs) % 4 == 0 and len({ln for _, ln in runs}) == 1
            if uniform:
                ln = runs[0][1]
                total = lists_total * len(sets)
                for start in range(0, total, MAX_REPEAT):
                    rep = min(MAX_REPEAT, total - start)
                    base = start * 4 * ln * 2
                    ctx.mrg_sort(dst[base], MrgSortSrcList(src[base], src[base + 2 * ln], src[base + 4 * ln],
                                                           src[base + 6 * ln]),
                                 MrgSort4Info((ln,) * 4, False, 0b1111, rep))
            else:
                for reg in range(lists_total):
                    for st in sets:
                        self._merge_set(dst, src, reg * span, st)
            ctx.pipe_barrier("PIPE_V")
            runs = [(st[0][0], sum(ln for _, ln in st)) for st in sets]
            src, dst = dst, src
        return src

    def _merge_set(self, dst, src, region, runs, dst_at=None):
        """Merge up to 4 sorted runs of ``src`` (pair offsets from ``region``) into dst (at the first
        run's place, or ``dst_at`` pairs); one run is copied."""
        ctx = self.ctx
        at = region + runs[0][0] if dst_at is None else dst_at
        if len(runs) == 1:
            ln = runs[0][1]
            ctx.copy(dst[2 * at], src[2 * (region + runs[0][0])], 64, 2 * ln // 64, CopyRepeatParams(1, 1, 8, 8))
            return
        tens = [src[2 * (region + s)] for s, _ in runs]
        lengths = [ln for _, ln in runs] + [0] * (4 - len(runs))
        tens += [tens[0]] * (4 - len(tens))
        ctx.mrg_sort(dst[2 * at], MrgSortSrcList(*tens), MrgSort4Info(tuple(lengths), False,
                                                                         (1 << len(runs)) - 1, 1))

    def _choose_groups(self, sorted_buf, r):
        """Group scores (the best key, or the best two summed), ranked on the scalar unit; the kept
        groups' lists merged in group order into ``final`` [r, kGroup·Gp pairs]."""
        ctx, t, groups, Gp = self.ctx, self.t, self.groups, self.Gp
        n = r * groups
        gs, goffs = self._buf("gscore"), self._buf("goffs", np.uint32)
        nall = _round_up(t.ubFormer * groups, 8)
        ctx.gather(gs, sorted_buf, goffs, 0, n)
        if t.groupSelectMode == 1:
            ctx.gather(gs[nall], sorted_buf, goffs[nall], 0, n)
            ctx.pipe_barrier("PIPE_V")
            ctx.add(gs, gs, gs[nall], n)
        ctx.pipe_barrier("PIPE_V")
        ev = ctx.pipe.fetch_event_id("V_S")
        ctx.set_flag("V_S", ev)
        ctx.wait_flag("V_S", ev)
        final, scratch = self._buf("final"), (self._buf("scratch_a"), self._buf("scratch_b"))
        fl = t.kGroup * Gp
        for q in range(r):
            scores = [gs.get_value(q * groups + g) for g in range(groups)]
            chosen = ctx.scalar("rank groups", ops=groups * t.kGroup + groups,
                                compute=lambda s=scores: sorted(np.argsort(-np.asarray(s, dtype=np.float32),
                                                                           kind="stable")[:t.kGroup].tolist()))
            if chosen is None:            # a timing-only run reads zeros: the cost does not depend on the choice
                chosen = list(range(t.kGroup))
            if q and t.kGroup > 4:
                ctx.pipe_barrier("PIPE_V")        # the scratch rows are reused
            self._merge_chosen(final, scratch, sorted_buf, q, chosen, fl)
        ev = ctx.pipe.fetch_event_id("S_V")               # the next loop's Gather overwrites gscore
        ctx.set_flag("S_V", ev)
        ctx.wait_flag("S_V", ev)
        ctx.pipe_barrier("PIPE_V")
        return final

    def _merge_chosen(self, final, scratch, src, q, chosen, fl):
        """Merge the chosen groups' lists of row q (ascending group order) into final[q]."""
        C, Gp = self.C, self.Gp
        runs = [(q * C + g * Gp, Gp) for g in chosen]
        bufs = list(scratch)
        cur, side = src, 0
        while True:
            sets = [runs[s:s + 4] for s in range(0, len(runs), 4)]
            last = len(sets) == 1
            dst = final if last else bufs[side]
            base = q * fl if last else 0
            new, at = [], base
            for st in sets:
                self._merge_set(dst, cur, 0, st, dst_at=at)
                ln = sum(l for _, l in st)
                new.append((at, ln))
                at += ln
            if last:
                return
            self.ctx.pipe_barrier("PIPE_V")
            runs, cur, side = new, dst, 1 - side

    def _topk(self, loop, final, xf, norm, out, r, stat, bcast, rk, rk_all, r8):
        ctx, t, K, Kp = self.ctx, self.t, self.K, self.Kp
        offs, rowbase = self._buf("offs", np.uint32), self._buf("rowbase", np.int32)
        pos, sel = self._buf("pos", np.int32), self._buf("sel")
        pos_off = offs[rk_all].reinterpret_cast(np.int32)
        # positions of the first K pairs (the index lanes of the final lists)
        ctx.gather(pos, final.reinterpret_cast(np.int32), offs, 0, rk)
        ctx.pipe_barrier("PIPE_V")
        ctx.muls(pos_off, pos, 4, rk)                              # position -> byte offset in a row
        ctx.pipe_barrier("PIPE_V")
        indices = out[rk_all].reinterpret_cast(np.int32)
        if self.Gp != self.G:                                      # position -> expert
            ctx.gather(indices, self._buf("table", np.int32), pos_off.reinterpret_cast(np.uint32), 0, rk)
        else:
            ctx.adds(indices, pos, 0, rk)
        ctx.pipe_barrier("PIPE_V")
        ctx.add(pos_off, pos_off, rowbase, rk)                     # + the row's base
        ctx.pipe_barrier("PIPE_V")
        source = xf if (t.normType == 0 and t.renorm) else norm
        w = out
        ctx.gather(w, source, pos_off.reinterpret_cast(np.uint32), 0, rk)
        ctx.pipe_barrier("PIPE_V")
        if t.renorm:
            if t.normType == 0:
                self._row_reduce("max", stat, w, r, Kp, K)
                self._brcb(bcast, stat, r)
                self._row_op(ctx.sub, w, w, bcast, r, Kp)
                ctx.pipe_barrier("PIPE_V")
                ctx.exp(w, w, rk)
                ctx.pipe_barrier("PIPE_V")
            self._row_reduce("sum", stat, w, r, Kp, K)
            ctx.adds(stat, stat, t.eps, r8)
            ctx.pipe_barrier("PIPE_V")
            self._brcb(bcast, stat, r)
            self._row_op(ctx.div, w, w, bcast, r, Kp)
            ctx.pipe_barrier("PIPE_V")
        if t.routedScalingFactor != 1.0:
            ctx.muls(w, w, t.routedScalingFactor, rk)
            ctx.pipe_barrier("PIPE_V")
        if t.hasFinished:
            self._finish(w, indices, r, rk, r8, stat, bcast)
        if t.outFlag:            # row_idx[i, j] = j·N + i: the block's table + this loop's first row
            ctx.adds(out[2 * rk_all].reinterpret_cast(np.int32), self._buf("ribase", np.int32),
                     self.row0 + loop * t.ubFormer, rk)
            ctx.pipe_barrier("PIPE_V")

    def _finish(self, w, indices, r, rk, r8, stat, bcast):
        """Finished rows: weight 0, index E, without a branch (w·(1−f), idx·(1−f) + E·f)."""
        ctx = self.ctx
        flags = self.flag_q.deque(np.int32)
        f = stat
        ctx.cast(f, flags, RoundMode.CAST_NONE, r8)
        ctx.pipe_barrier("PIPE_V")
        keep = stat[r8]
        ctx.muls(keep, f, -1.0, r8)
        ctx.pipe_barrier("PIPE_V")
        ctx.adds(keep, keep, 1.0, r8)
        ctx.pipe_barrier("PIPE_V")
        kb, fb = bcast, bcast[8 * r8]
        self._brcb(kb, keep, r)
        self._brcb(fb, f, r)
        self._row_op(ctx.mul, w, w, kb, r, self.Kp)
        idxf = self._buf("sel")
        ctx.cast(idxf, indices, RoundMode.CAST_NONE, rk)
        ctx.pipe_barrier("PIPE_V")
        self._row_op(ctx.mul, idxf, idxf, kb, r, self.Kp)
        ctx.muls(fb, fb, float(self.E), 8 * r8)
        ctx.pipe_barrier("PIPE_V")
        self._row_op(ctx.add, idxf, idxf, fb, r, self.Kp)
        ctx.pipe_barrier("PIPE_V")
        ctx.cast(indices, idxf, RoundMode.CAST_RINT, rk)
        ctx.pipe_barrier("PIPE_V")
        self.flag_q.free_tensor(flags)

    # ---- CopyOut ------------------------------------------------------------------------------
    def copy_out(self, i, r):
        ctx, t, K, Kp = self.ctx, self.t, self.K, self.Kp
        out = self.out_q.deque(np.float32)
        rk_all = t.ubFormer * Kp
        base = t.ubFormer * K * i
        params = DataCopyExtParams(r, K * 4, 0, 0, 0)
        ctx.data_copy_pad(self.idx_gm[base], out[rk_all].reinterpret_cast(np.int32), params)
        ctx.data_copy_pad(self.w_gm[base], out, params)
        if t.outFlag:
            ctx.data_copy_pad(self.ri_gm[base], out[2 * rk_all].reinterpret_cast(np.int32), params)
            G, Gp = self.G, self.Gp
            gap = (Gp * 4 - _round_up(G * 4, 32)) // 32
            ctx.data_copy_pad(self.norm_gm[t.ubFormer * t.col * i], out[norm_offset(rk_all)],
                              DataCopyExtParams(r * self.groups, G * 4, gap, 0, 0))
        self.out_q.free_tensor(out)


def _check_args(ctx, gms, t):
    if ctx.get_block_num() != t.blockNum:
        raise ValueError(f"the grouped kernel must be launched with blockDim = tiling.blockNum = {t.blockNum}; "
                         f"got {ctx.get_block_num()}")
    gate, bias, finished, idx, w, row_idx, norm = gms
    want = [(gate, t.row * t.col, None, "gate logits [N*E]"), (idx, t.row * t.k, np.int32, "indices [N*K] int32"),
            (w, t.row * t.k, np.float32, "weights [N*K] float32")]
    if t.hasBias:
        want.append((bias, t.col, np.float32, "bias [E] float32"))
    if t.hasFinished:
        want.append((finished, t.row, np.int32, "finished [N] int32 (0 / 1)"))
    if t.outFlag:
        want += [(norm, t.row * t.col, np.float32, "norm_out [N*E] float32")]
    for gm, n, dt, what in want:
        if gm.size != n or (dt is not None and gm.dtype != dt):
            raise ValueError(f"grouped kernel: '{gm.name}' must be {what} = {n} elements; got {gm.size} x {gm.dtype.name}")


@npu_kernel(block_classes=grouped_block_classes)
def moe_gating_grouped_kernel(ctx, gate_gm, bias_gm, finished_gm, indices_gm, weights_gm, row_idx_gm,
                              norm_gm, tiling_bytes):
    """The full routing semantics, CANN MoeGatingTopK's structure (module docstring). Pipes MTE2 →
    V (+ S for the group ranking) → MTE3, double-buffered input. Listing: ``grouped.cpp``."""
    t = MoeGatingGroupedTiling.unpack(tiling_bytes)
    gms = (gate_gm, bias_gm, finished_gm, indices_gm, weights_gm, row_idx_gm, norm_gm)
    _check_args(ctx, gms, t)
    op = _Grouped(ctx, gms, t)
    op.init()
    op.prepare()
    op.process()
