"""Token dispatch on the simulator: the kernel version of :func:`~.dispatch.moe_dispatch` (issue 20 §3).

Built like CANN's MoeInitRoutingV2 (hicann/ops-transformer ``moe/moe_init_routing_v2/op_kernel``):
``moe_v2_sort_one_core.h`` (Cast the int32 experts to float, ``ArithProgression`` the row indices,
``Sort32`` + ``MrgSort`` on (key, index) pairs), ``moe_v2_expert_token_out.h`` (a scalar loop over the
sorted experts counts each expert's tokens, then ``SetAtomicAdd<int32_t>`` + ``DataCopyPad`` add every
core's counts into the GM counters) and ``moe_v2_src_to_dst_op.h`` /
``moe_v2_src_to_dst_with_capacity.h`` (one 4-byte ``DataCopyPad`` per row to scatter each row's
destination, from a UB block of its own). The Ascend C listing is ``dispatch_kernel.cpp`` beside this file.

Two launches (CANN's phases are separated by ``SyncAll`` inside one kernel; npu_lab has no SyncAll,
so the phase boundary is a launch boundary -- it costs one more launch overhead, said in the timeline):

1. ``moe_dispatch_sort_kernel`` -- block b takes slots ``[b·C, b·C + L)`` of the flat [N·K] experts
   (``C = 32·4^r`` slots a block, the smallest such that ``ceil(N·K / C)`` blocks fit the vector cores;
   ``L = C`` except in the last block). MTE2: ``DataCopyPad`` in. V: ``Duplicate`` −inf over C keys,
   ``Cast`` int32 → float32 and ``Muls`` −1 on the L real ones (Sort32 sorts descending: −expert sorts
   ascending by expert, the −inf padding last), ``ArithProgression`` the global positions, ``Sort32``
   (ties keep the lower position: stable), ``r`` rounds of 4-way ``MrgSort`` (ties keep the earlier
   list: stable), ``GatherMask`` patterns 1 / 2 split keys and positions, ``Muls`` −1 + ``Cast`` back
   to int32. S: count the block's slots per expert (the scalar loop of ExpertTokenOut, L reads).
   MTE3: the block's counts to a workspace row [b, E], **and the same counts added into the GM
   counter ``expert_tokens_before_capacity`` under SetAtomicAdd<int32>** (the host zeroes it first, as
   CANN's operator does with InitGlobalMemory); the block's sorted experts and positions to workspace.
2. ``moe_dispatch_place_kernel`` -- every block reads all ``blockNum`` count rows (one DataCopyPad
   each, double-buffered) and ``Add`` s those of earlier blocks into its prefix, the others into a
   scratch row (branchless: every block does the same work), reads the GM counters, and on the scalar
   unit works out each of its slots' rank in its expert, whether it is kept (rank < capacity), its
   place in ``sorted_row_idx`` (the kept slots of lower experts before it, then its rank) and in
   ``expanded_x`` (that place dropless; ``expert·capacity + rank`` in drop/pad mode). MTE3: one
   4-byte ``DataCopyPad`` per slot into ``sorted_row_idx`` and one into ``sorted_expert_idx`` (a
   dropped or finished slot writes to a trash word instead: the branchless charge -- the real
   kernel branches, and its time then depends on the data), the block's ``expanded_row_idx`` range in
   one copy (a block's positions are contiguous), and block 0 the kept counts ``expert_tokens_count``.

Scope (what :func:`moe_dispatch_kernel_run` covers of :func:`~.dispatch.moe_dispatch`): dropless and
drop/pad with ``drop_policy="position"`` (CANN's only policy), finished rows (expert E); no
``drop_policy="weight"`` and no rerouting ``ranking`` (host-side only, as in CANN, which has neither).
At most ``MAX_CHUNK`` = 2048 slots a block, so N·K ≤ 2048 × the vector cores (98 304 on the 910B2);
E ≤ 2048. The 310P has neither DataCopyPad nor Sort32: the kernel raises the lang layer's
CapabilityError at the first DataCopyPad. The weights are not moved: CANN's MoeInitRouting takes no
weights either (MoeFinalizeRouting reads them by ``expanded_row_idx``).

Sources of the rules used: asc-devkit docs/zh/api/SIMD-API/基础API/原子操作/SetAtomicAdd.md,
Memory矢量计算/数据搬运/DataCopyPad（UBToGM非对齐数据搬运）.md, 排序组合（ISASI）/Sort32.md, MrgSort.md,
比较与选择/GatherMask.md, 类型转换/Cast.md, 数据填充/ArithProgression.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...hardware import HardwareSpec
from ...lang import (DataCopyExtParams, DataCopyPadExtParams, GatherMaskParams, GlobalTensor, MrgSort4Info,
                     MrgSortSrcList, RoundMode, TBuf, TPosition, TQue, launch, npu_kernel)
from ...lang.tiling_struct import Int32Struct
from ...presets import get_preset
from ...sim.timeline import Timeline
from .dispatch import MoeDispatch, moe_dispatch

__all__ = ["MAX_CHUNK", "MAX_DISPATCH_EXPERTS", "MoeDispatchTiling", "moe_dispatch_tiling",
           "moe_dispatch_kernel_run", "moe_dispatch_sort_kernel", "moe_dispatch_place_kernel"]

#: slots a block sorts in UB (32·4^r, r ≤ 3: one Sort32 and at most three 4-way MrgSort rounds)
MAX_CHUNK = 2048
#: slots staged for the per-slot scatter at a time (each word in a 32-B UB block of its own)
STAGE_SLOTS = 512
#: experts (CANN's gating stops at 2048; the count rows are E int32 in UB)
MAX_DISPATCH_EXPERTS = 2048
NEG_INF = float("-inf")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round8(n: int) -> int:
    return _ceil_div(n, 8) * 8


@dataclass(frozen=True)
class MoeDispatchTiling(Int32Struct):
    """The tiling struct of both launches (int32 fields, packed as the host copies them).

    numRows: N tokens; k: K slots a token; expertNum: E; totalSlots: N·K; dropPadMode: 0 dropless,
    1 drop/pad (CANN's name); expertCapacity: slots per expert (0 when dropless); chunk: C slots a
    block; mergeRounds: r (C = 32·4^r); blockNum; tailSlots: L of the last block."""

    numRows: int
    k: int
    expertNum: int
    totalSlots: int
    dropPadMode: int
    expertCapacity: int
    chunk: int
    mergeRounds: int
    blockNum: int
    tailSlots: int

    def __post_init__(self):
        if self.totalSlots != self.numRows * self.k or self.chunk != 32 * 4 ** self.mergeRounds:
            raise ValueError("MoeDispatchTiling: totalSlots must be numRows·k and chunk 32·4^mergeRounds")
        if (self.blockNum - 1) * self.chunk + self.tailSlots != self.totalSlots or not 1 <= self.tailSlots <= self.chunk:
            raise ValueError("MoeDispatchTiling: blockNum blocks of chunk slots, the last tailSlots, must cover totalSlots")

    def slots(self, block: int) -> int:
        return self.tailSlots if block == self.blockNum - 1 else self.chunk


def moe_dispatch_tiling(num_tokens: int, top_k: int, num_experts: int, capacity: int | None = None,
                        hw: HardwareSpec | str = "ascend-910b2") -> MoeDispatchTiling:
    """The host tiling: the smallest chunk C = 32·4^r (≤ :data:`MAX_CHUNK`) whose blocks fit the
    chip's vector cores. Raises ValueError naming the limit when N·K or E is too large."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    if not isinstance(hw, HardwareSpec):
        raise TypeError(f"hw must be a HardwareSpec or a preset name, got {type(hw).__name__}")
    for name, v in (("num_tokens", num_tokens), ("top_k", top_k), ("num_experts", num_experts)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    if num_experts > MAX_DISPATCH_EXPERTS:
        raise ValueError(f"the dispatch kernel takes E <= {MAX_DISPATCH_EXPERTS} experts (its count rows live in UB); "
                         f"got E = {num_experts}. Use moe_dispatch (host) for more")
    M = int(num_tokens) * int(top_k)
    cores = hw.vector_cores
    for r in range(4):
        chunk = 32 * 4 ** r
        if _ceil_div(M, chunk) <= cores:
            break
    else:
        raise ValueError(f"N·K = {M} slots need more than {cores} blocks of {MAX_CHUNK} (the most a block sorts in UB "
                         f"here); at most {cores * MAX_CHUNK} slots on {hw.name}. Split the tokens into several calls")
    blocks = _ceil_div(M, chunk)
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 0):
        raise ValueError(f"capacity must be an int >= 0 or None (dropless), got {capacity!r}")
    return MoeDispatchTiling(numRows=int(num_tokens), k=int(top_k), expertNum=int(num_experts), totalSlots=M,
                             dropPadMode=int(capacity is not None), expertCapacity=int(capacity or 0),
                             chunk=chunk, mergeRounds=r, blockNum=blocks, tailSlots=M - (blocks - 1) * chunk)


def _classes_sort(block_dim, *args, **kwargs):
    t = MoeDispatchTiling.unpack(args[-1])
    labels = np.zeros(block_dim, dtype=np.int64)
    labels[-1] = int(t.tailSlots != t.chunk)
    return labels


def _classes_place(block_dim, *args, **kwargs):
    t = MoeDispatchTiling.unpack(args[-1])
    labels = np.zeros(block_dim, dtype=np.int64)
    labels[0] = 2                                  # block 0 also writes expert_tokens_count
    if block_dim > 1:
        labels[-1] = int(t.tailSlots != t.chunk)
    return labels


def _v_to_s(ctx):
    ev = ctx.pipe.fetch_event_id("V_S")
    ctx.set_flag("V_S", ev)
    ctx.wait_flag("V_S", ev)


def _s_to_mte3(ctx):
    ev = ctx.pipe.fetch_event_id("S_MTE3")
    ctx.set_flag("S_MTE3", ev)
    ctx.wait_flag("S_MTE3", ev)


@npu_kernel(block_classes=_classes_sort)
def moe_dispatch_sort_kernel(ctx, experts_gm, ws_exp_gm, ws_pos_gm, ws_counts_gm, before_gm, tiling_bytes):
    """Launch 1: sort a chunk of slots by expert (stable) and count them; counts added into
    ``before_gm`` with SetAtomicAdd<int32>. See the module docstring; listing dispatch_kernel.cpp."""
    t = MoeDispatchTiling.unpack(tiling_bytes)
    b = ctx.get_block_idx()
    C, E, L, start = t.chunk, t.expertNum, t.slots(b), b * t.chunk
    pipe = ctx.pipe
    bufs = {}
    in_q = TQue(TPosition.VECIN, 1)
    # pairs first: Sort32's dst starts on 256 B, its sources on 128 B (Sort32.md)
    for name, nbytes in (("pairs_a", 8 * C), ("pairs_b", 8 * C), ("keys", 4 * C), ("pos", 4 * C),
                         ("experts_in", 4 * C), ("sorted_exp", 4 * C), ("counts", 4 * _round8(E))):
        if name == "experts_in":
            pipe.init_buffer(in_q, 1, nbytes, name=name)
            continue
        bufs[name] = TBuf(TPosition.VECCALC)
        pipe.init_buffer(bufs[name], nbytes, name=name)
    x = in_q.alloc_tensor(np.int32)
    ctx.data_copy_pad(x, experts_gm[start], DataCopyExtParams(1, 4 * L, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))
    in_q.enque(x)
    x = in_q.deque(np.int32)
    keys = bufs["keys"].get(np.float32)
    pos = bufs["pos"].get(np.int32)
    pairs, other = bufs["pairs_a"].get(np.float32), bufs["pairs_b"].get(np.float32)
    ctx.duplicate(keys, NEG_INF, C)                  # padding sorts last
    ctx.arith_progression(pos, start, 1, C)          # global slot positions n·K + k
    ctx.pipe_barrier("PIPE_V")
    ctx.cast(keys, x, RoundMode.CAST_NONE, L)        # int32 -> float32: exact below 2^24
    ctx.pipe_barrier("PIPE_V")
    ctx.muls(keys, keys, -1.0, L)                    # Sort32 is descending: -expert sorts by expert
    ctx.pipe_barrier("PIPE_V")
    in_q.free_tensor(x)
    ctx.sort32(pairs, keys, pos.reinterpret_cast(np.uint32), C // 32)
    ctx.pipe_barrier("PIPE_V")
    length = 32
    for _ in range(t.mergeRounds):                   # 4 sorted lists of `length` pairs -> one
        ctx.mrg_sort(other, MrgSortSrcList(pairs[0], pairs[2 * length], pairs[4 * length], pairs[6 * length]),
                     MrgSort4Info((length,) * 4, False, 15, C // (4 * length)))
        ctx.pipe_barrier("PIPE_V")
        pairs, other = other, pairs
        length *= 4
    ctx.gather_mask(keys, pairs, 1, False, 0, GatherMaskParams(1, C // 32, 8, 0))            # the keys
    ctx.gather_mask(pos, pairs.reinterpret_cast(np.int32), 2, False, 0, GatherMaskParams(1, C // 32, 8, 0))
    ctx.pipe_barrier("PIPE_V")
    ctx.muls(keys, keys, -1.0, L)
    ctx.pipe_barrier("PIPE_V")
    sorted_exp = bufs["sorted_exp"].get(np.int32)
    ctx.cast(sorted_exp, keys, RoundMode.CAST_RINT, L)
    counts = bufs["counts"].get(np.int32)
    ctx.duplicate(counts, 0, _round8(E))
    _v_to_s(ctx)

    def count():
        e = sorted_exp.data[:L].astype(np.int64)
        counts.data[:E] = np.bincount(e[e < E], minlength=E)[:E].astype(np.int32)

    # the ExpertTokenOut loop: read each sorted expert, bump its counter (branchless: every slot)
    ctx.scalar("ExpertTokenCount", ops=2 * L, ub_reads=2 * L, ub_writes=L, compute=count,
               reads=((sorted_exp, sorted_exp.byte_offset, sorted_exp.byte_offset + 4 * L),),
               writes=((counts, counts.byte_offset, counts.byte_offset + 4 * E),))
    _s_to_mte3(ctx)
    ctx.data_copy_pad(ws_exp_gm[start], sorted_exp, DataCopyExtParams(1, 4 * L, 0, 0, 0))
    ctx.data_copy_pad(ws_pos_gm[start], pos, DataCopyExtParams(1, 4 * L, 0, 0, 0))
    row = DataCopyExtParams(1, 4 * E, 0, 0, 0)
    ctx.data_copy_pad(ws_counts_gm[b * E], counts, row)
    ctx.set_atomic_add(np.int32)                     # every block's counts meet in GM
    ctx.data_copy_pad(before_gm, counts, row)
    ctx.set_atomic_none()


@npu_kernel(block_classes=_classes_place)
def moe_dispatch_place_kernel(ctx, ws_exp_gm, ws_pos_gm, ws_counts_gm, before_gm, sorted_row_gm, sorted_exp_gm,
                              expanded_gm, count_gm, trash_gm, tiling_bytes):
    """Launch 2: every slot's rank in its expert, capacity, its places in sorted_row_idx and
    expanded_x; per-slot 4-byte scatters (branchless). See the module docstring."""
    t = MoeDispatchTiling.unpack(tiling_bytes)
    b = ctx.get_block_idx()
    C, E, L, start = t.chunk, t.expertNum, t.slots(b), b * t.chunk
    E8 = _round8(E)
    pipe = ctx.pipe
    row_q = TQue(TPosition.VECIN, 2)
    pipe.init_buffer(row_q, 2, 4 * E8, name="count_rows")
    bufs = {}
    for name, nbytes in (("prefix", 4 * E8), ("scratch", 4 * E8), ("total", 4 * E8), ("kept", 4 * E8),
                         ("sorted_exp", 4 * C), ("pos", 4 * C), ("expanded", 4 * C), ("place", 4 * C),
                         ("stage_pos", 32 * min(C, STAGE_SLOTS)), ("stage_exp", 32 * min(C, STAGE_SLOTS))):
        bufs[name] = TBuf(TPosition.VECCALC)
        pipe.init_buffer(bufs[name], nbytes, name=name)
    prefix, scratch = bufs["prefix"].get(np.int32), bufs["scratch"].get(np.int32)
    ctx.duplicate(prefix, 0, E8)
    ctx.duplicate(scratch, 0, E8)
    ctx.pipe_barrier("PIPE_V")
    row = DataCopyExtParams(1, 4 * E, 0, 0, 0)
    nopad = DataCopyPadExtParams(False, 0, 0, 0)
    for j in ctx.tile_loop(t.blockNum, key=lambda j: 0):
        r = row_q.alloc_tensor(np.int32)
        ctx.data_copy_pad(r, ws_counts_gm[j * E], row, nopad)
        row_q.enque(r)
        r = row_q.deque(np.int32)
        acc = prefix if j < b else scratch           # the same Add either way: branchless
        ctx.add(acc, acc, r, E)
        row_q.free_tensor(r)
    total, sexp, pos = bufs["total"].get(np.int32), bufs["sorted_exp"].get(np.int32), bufs["pos"].get(np.int32)
    ctx.data_copy_pad(total, before_gm, row, nopad)
    ctx.data_copy_pad(sexp, ws_exp_gm[start], DataCopyExtParams(1, 4 * L, 0, 0, 0), nopad)
    ctx.data_copy_pad(pos, ws_pos_gm[start], DataCopyExtParams(1, 4 * L, 0, 0, 0), nopad)
    ev = pipe.fetch_event_id("MTE2_S")
    ctx.set_flag("MTE2_S", ev)
    ctx.wait_flag("MTE2_S", ev)
    _v_to_s(ctx)
    kept, expanded, place = bufs["kept"].get(np.int32), bufs["expanded"].get(np.int32), bufs["place"].get(np.int32)
    spos, sexp_st = bufs["stage_pos"].get(np.int32), bufs["stage_exp"].get(np.int32)
    cap, drop_pad = t.expertCapacity, bool(t.dropPadMode)
    def places():
        tot = total.data[:E].astype(np.int64)
        keep_n = np.minimum(tot, cap) if drop_pad else tot
        kept.data[:E] = keep_n
        base = np.concatenate(([0], np.cumsum(keep_n)[:-1]))
        e = sexp.data[:L].astype(np.int64)
        p = pos.data[:L].astype(np.int64)
        real = e < E
        ee = np.where(real, e, 0)
        first = np.searchsorted(e, e, side="left")   # the block's run of e starts here (sorted)
        rank = prefix.data[ee].astype(np.int64) + np.arange(L) - first
        keep = real & ((rank < cap) if drop_pad else True)
        dest = np.where(keep, base[ee] + rank, -1)      # the slot's place in sorted_row_idx, -1 if none
        place.data[:L] = dest
        expanded.data[p - start] = np.where(keep, ee * cap + rank if drop_pad else dest, -1)

    # per expert: kept count and its base (E); per slot: rank, keep, places (branchless)
    ctx.scalar("SrcToDst", ops=3 * E + 8 * L, ub_reads=3 * E + 3 * L, ub_writes=2 * E + 2 * L, compute=places,
               reads=((sexp, sexp.byte_offset, sexp.byte_offset + 4 * L), (pos, pos.byte_offset, pos.byte_offset + 4 * L),
                      (prefix, prefix.byte_offset, prefix.byte_offset + 4 * E),
                      (total, total.byte_offset, total.byte_offset + 4 * E)),
               writes=((kept, kept.byte_offset, kept.byte_offset + 4 * E),
                       (expanded, expanded.byte_offset, expanded.byte_offset + 4 * L),
                       (place, place.byte_offset, place.byte_offset + 4 * L)))
    word = DataCopyExtParams(1, 4, 0, 0, 0)
    for lo in range(0, L, STAGE_SLOTS):
        n = min(STAGE_SLOTS, L - lo)
        if lo:                                       # the previous scatters read the staging blocks
            ev = pipe.fetch_event_id("MTE3_S")
            ctx.set_flag("MTE3_S", ev)
            ctx.wait_flag("MTE3_S", ev)

        def stage(lo=lo, n=n):
            spos.data[0:8 * n:8] = pos.data[lo:lo + n]
            sexp_st.data[0:8 * n:8] = sexp.data[lo:lo + n]

        # each slot's two words into 32-B blocks of their own (CANN: outLocal[idx * INT32_ONE_BLOCK_NUM])
        ctx.scalar("stage rows", ops=2 * n, ub_reads=2 * n, ub_writes=2 * n, compute=stage,
                   reads=((sexp, sexp.byte_offset, sexp.byte_offset + 4 * L), (pos, pos.byte_offset, pos.byte_offset + 4 * L)),
                   writes=((spos, spos.byte_offset, spos.byte_offset + 32 * n),
                           (sexp_st, sexp_st.byte_offset, sexp_st.byte_offset + 32 * n)))
        _s_to_mte3(ctx)
        for i in ctx.tile_loop(n, key=lambda i: 0):
            d = place.get_value(lo + i)                 # GetValue: 0 in a timing-only run
            d = -1 if ctx.timing_only else int(d)
            # dropped / finished (and timing-only): the trash word -- the same copy either way
            row_dst, exp_dst = (trash_gm[b], trash_gm[b]) if d < 0 else (sorted_row_gm[d], sorted_exp_gm[d])
            ctx.data_copy_pad(row_dst, spos[8 * i], word)
            ctx.data_copy_pad(exp_dst, sexp_st[8 * i], word)
    ctx.data_copy_pad(expanded_gm[start], expanded, DataCopyExtParams(1, 4 * L, 0, 0, 0))
    if b == 0:
        ctx.data_copy_pad(count_gm, kept, row)


@dataclass(frozen=True)
class DispatchKernelResult:
    """Outputs of :func:`moe_dispatch_kernel_run` (None in a timing-only run) and the timeline."""

    sorted_row_idx: np.ndarray | None
    sorted_expert_idx: np.ndarray | None
    expanded_row_idx: np.ndarray | None
    expert_tokens_count: np.ndarray | None
    expert_tokens_before_capacity: np.ndarray | None
    timeline: Timeline
    tiling: MoeDispatchTiling


def moe_dispatch_kernel_run(expert_indices, *, num_experts: int, capacity: int | None = None,
                            capacity_factor: float | None = None, hw: HardwareSpec | str = "ascend-910b2",
                            timing_only: bool = False) -> DispatchKernelResult:
    """Run the two dispatch launches on ``expert_indices`` int [N, K] (E = ``num_experts`` marks a
    finished slot). ``capacity`` / ``capacity_factor`` as :func:`~.dispatch.moe_dispatch` (drop/pad
    mode, position order). Outputs equal ``moe_dispatch(...)``'s fields of the same names.

    In a timing-only run ``expert_indices`` may be a shape (N, K): no values are needed, costs
    depend on shapes only."""
    if timing_only and isinstance(expert_indices, tuple):
        n, k = expert_indices
        cap = capacity
        if capacity_factor is not None:
            ref_cap = moe_dispatch(np.zeros((n, k), np.int32), np.zeros((n, k), np.float32), num_experts=num_experts,
                                   capacity_factor=capacity_factor).capacity
            cap = ref_cap
        idx = None
    else:
        # validate exactly as the host reference does (same errors), and take its capacity
        ref = moe_dispatch(expert_indices, np.zeros(np.shape(expert_indices), np.float32), num_experts=num_experts,
                           capacity=capacity, capacity_factor=capacity_factor)
        n, k = ref.expert_indices.shape
        cap = ref.capacity
        idx = np.ascontiguousarray(np.asarray(expert_indices).astype(np.int32).reshape(-1))
    t = moe_dispatch_tiling(n, k, num_experts, cap, hw)
    M, E = t.totalSlots, t.expertNum
    tb = t.pack()
    mk = lambda size, name, fill=None: (GlobalTensor.empty(size, np.int32, name, timing_only=True) if timing_only
                                        else GlobalTensor.from_array(np.full(size, -1 if fill is None else fill,
                                                                             np.int32), name))
    experts = GlobalTensor.empty(M, np.int32, "expert_idx", timing_only=True) if timing_only \
        else GlobalTensor.from_array(idx, "expert_idx")
    ws_exp, ws_pos, ws_counts = mk(M, "ws_sorted_expert"), mk(M, "ws_sorted_pos"), mk(t.blockNum * E, "ws_counts", 0)
    before = mk(E, "expert_tokens_before_capacity", 0)        # zeroed: the atomic adds accumulate into it
    sorted_row, sorted_exp, expanded = mk(M, "sorted_row_idx"), mk(M, "sorted_expert_idx"), mk(M, "expanded_row_idx")
    count, trash = mk(E, "expert_tokens_count", 0), mk(t.blockNum, "trash", 0)
    tl1 = launch(moe_dispatch_sort_kernel, t.blockNum, experts, ws_exp, ws_pos, ws_counts, before, tb, hw=hw,
                 timing_only=timing_only, name="dispatch_sort_count")
    tl2 = launch(moe_dispatch_place_kernel, t.blockNum, ws_exp, ws_pos, ws_counts, before, sorted_row, sorted_exp,
                 expanded, count, trash, tb, hw=hw, timing_only=timing_only, name="dispatch_place")
    tl = Timeline.concat([tl1, tl2])
    if timing_only:
        return DispatchKernelResult(None, None, None, None, None, tl, t)
    counts = count.data.astype(np.int64)
    m = int(counts.sum())
    return DispatchKernelResult(sorted_row.data[:m].copy(), sorted_exp.data[:m].copy(), expanded.data.copy(),
                                counts, before.data.astype(np.int64), tl, t)


def check_against_reference(result: DispatchKernelResult, reference: MoeDispatch) -> None:
    """Raise AssertionError naming the first output where the kernel and the host reference differ."""
    for name in ("sorted_row_idx", "sorted_expert_idx", "expanded_row_idx", "expert_tokens_count",
                 "expert_tokens_before_capacity"):
        a, r = getattr(result, name), getattr(reference, name)
        if a is None or a.shape != r.shape or not np.array_equal(a, r):
            raise AssertionError(f"dispatch kernel: {name} differs from moe_dispatch's")
