"""Decode attention on the vector core, built like CANN's IncreFlashAttention all-vector template.

One query token per sequence: q [B, q_heads, D] (float32 in GM), caches [B, max_len, N2, D]
(float16 or float32), lengths per sequence in the tiling. Output [B, q_heads, D] float32. A task
is one (b, n2, S2 piece): its G query heads (heads n2·G .. n2·G+G-1) against positions of KV head
n2. Pipes: MTE2 (q, K and V chunks, through VECIN queues) → V (scores, softmax, P·V) ⇄ S (the
running max and sum: GetValue after a V_S flag, an S_V flag before V reuses the bytes) → MTE3
(the output through a VECOUT queue).

Per chunk of ``chunk`` positions and per query head g (D a multiple of 64; fp32 after a Cast):

* scores: for each 64-column slab, ``Mul`` K rows by q (level-0, q's repeat stride 0: the same
  64 values for every row), ``WholeReduceSum`` of each row's slab, ``Add`` of the slabs; ``Muls``
  by 1/sqrt(D);
* online softmax (docs/IFA算子设计介绍.md's S2 loop): m_new = max(m, ReduceMax(scores)),
  corr = exp(m - m_new), p = Exp(scores - m_new), l = l·corr + ReduceSum(p);
* P·V: ``Brcb`` spreads each p over a 32-byte block, ``Mul`` V rows by it (level-0, src1 block
  stride 0), a tree of ``Add``s sums the rows; acc = acc·corr + that; at the end out = acc / l.

v1 holds the whole S2 in one chunk (one buffer; the tiling refuses lengths past the UB);
v2 loops over chunks with double-buffered K/V queues; v5 is v2 over int8 K/V dequantised on load
(antiquant, per-channel scale and offset); v4 splits S2 over cores (FlashDecode) and
writes each piece's normalised output and log-sum-exp to a GM workspace, combined by a second
launch (:mod:`.combine`).

Simplified: the scalar max/exp/log run through ``ctx.scalar`` priced as scalar ops (the real
template keeps them in vectors of 8).

Paged KV (vLLM's block tables; IFA's PageAttention path reads K/V by ``blockTable``): the caches
are [num_pages, page_size, N2, D] and ``table_gm`` [B, max_pages] int32 holds each sequence's page
ids. Per task the block copies its sequence's table row into UB (DataCopyPad, then a MTE2_S flag
so the scalar unit may read it; S_MTE2 before the next task's row overwrites it); per chunk the
scalar unit reads the chunk's page id (GetValue) and the DataCopy starts at row
``page * page_size + p0 % page_size``. The tiling keeps every chunk inside one page.

bfloat16 K/V: numpy has no bfloat16, so the simulator keeps them as uint16 bits (lang.tensor) and
has no bfloat16 Cast. The kernel widens them by their bits instead (a bfloat16 is the upper half of
a float32): ShiftLeft 16 of each 32-bit word gives the even dims, a Duplicate of 0 under an
even-lane bit mask leaves the odd ones, Copy places both halves in a row ([even dims | odd dims]);
q is gathered into that order once per task and the output gathered back (Gather, byte offsets
from ArithProgression and a table the scalar unit writes once per block). Exact, and two or three
vector instructions where the device's ``Cast<float, bfloat16_t>`` (类型转换/Cast.md) is one — the
C++ listing's ``sizeof(T) == 2`` branch is that Cast.
"""

from __future__ import annotations

import math

import numpy as np

from ...lang import (BrcbRepeatParams, DataCopyExtParams, DataCopyPadExtParams, DataCopyParams, GlobalTensor, TBuf, TPosition, TQue,
                     npu_kernel)
from ...lang.vector import BinaryRepeatParams, CopyRepeatParams, UnaryRepeatParams
from .tiling import MAX_REPEAT, DecodeTiling, reduce_tmp_bytes, table_ub_bytes

NEG_BIG = -3.0e38
#: bit mask of the even 16-bit lanes (the low halves of 32-bit words, little-endian)
EVEN_LANES = 0x5555555555555555
#: rows per level-0 instruction: at most 255 repeats, and a multiple of 8 so each piece of the
#: score row starts on a 32-byte block
ROWS = MAX_REPEAT // 8 * 8      # the "−inf" of an empty piece, finite so exp(NEG_BIG − m) = 0 without NaN


def task_range(t: DecodeTiling, lens, task: int):
    """(b, n2, first position, positions) of ``task``."""
    bn, sp = divmod(task, t.splits)
    b, n2 = divmod(bn, t.kv_heads)
    lo = sp * t.split_len
    return b, n2, lo, max(0, min(int(lens[b]), lo + t.split_len) - lo)


def decode_block_classes(block_dim, q, k, v, anti, out, lse, tiling_bytes, sync=None, table_gm=None):
    """Blocks whose tasks cover the same numbers of positions run the same stream."""
    t, lens = DecodeTiling.unpack_with(tiling_bytes)
    labels = []
    for blk in range(block_dim):
        tasks = range(blk * t.tasks_per_block, min(t.tasks, (blk + 1) * t.tasks_per_block))
        labels.append(hash(tuple(task_range(t, lens, i)[3] for i in tasks)))
    _, inv = np.unique(np.array(labels), return_inverse=True)
    return inv


ALL_FLAGS = frozenset({"V_S", "S_V", "S_MTE3", "MTE3_S"})
#: the paged path's extra flags: the block-table row in UB (MTE2 → S), and S done with it (S → MTE2)
PAGED_FLAGS = frozenset({"MTE2_S", "S_MTE2"})


def _fold_into_acc(ctx, acc, prod, g, D, ci, corr):
    """acc_g = P·V of the first chunk, else acc_g · corr + P·V (the online-softmax update)."""
    if ci == 0:
        ctx.adds(acc[g * D], prod, 0.0, D)
    else:
        ctx.muls(acc[g * D], acc[g * D], float(corr or 0.0), D)
        ctx.add(acc[g * D], acc[g * D], prod, D)


def _kernel_body(ctx, q_gm, k_gm, v_gm, anti_gm, out_gm, lse_gm, tiling_bytes, sync, table_gm=None,
                 block_tasks=None):
    """``table_gm``: the block table (paged K/V) or None. ``block_tasks`` (optional): a function
    block index -> the task indices that block runs, in order (npu_lab/kernels/decode/scheduled.py);
    default: the contiguous ``tasks_per_block`` run."""
    sync = ALL_FLAGS | PAGED_FLAGS if sync is None else sync
    t, lens = DecodeTiling.unpack_with(tiling_bytes)
    G, D, c, N2 = t.group, t.head_dim, t.chunk, t.kv_heads
    kv_dtype = k_gm.dtype
    bf16 = kv_dtype == np.uint16                # bfloat16 K/V, stored as their bits (lang.tensor)
    slabs = D // 64
    pipe = ctx.pipe
    q_que, out_que = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
    k_que, v_que = TQue(TPosition.VECIN, 1), TQue(TPosition.VECIN, 1)
    pipe.init_buffer(q_que, 1, G * D * 4, name="q")
    pipe.init_buffer(out_que, 1, G * D * 4, name="out")
    pipe.init_buffer(k_que, t.num_buffers, c * D * t.kv_itemsize, name="k")
    pipe.init_buffer(v_que, t.num_buffers, c * D * t.kv_itemsize, name="v")
    bufs = {}
    for name, nbytes in (("acc", G * D * 4), ("prod", c * D * 4), ("scores", c * 4), ("part", c * 4),
                         ("pb", c * 32), ("red", 256), ("tmp", reduce_tmp_bytes(c)), ("lse", max(32, -(-G // 8) * 32))) \
            + ((("kf", c * D * 4), ("vf", c * D * 4)) if t.kv_itemsize != 4 else ()) \
            + ((("half", c * D * 2),) if t.kv_itemsize == 1 else ()) \
            + ((("q_perm", G * D * 4), ("perm", D * 4), ("unperm", D * 4)) if bf16 else ()):
        bufs[name] = TBuf(TPosition.VECCALC)
        pipe.init_buffer(bufs[name], nbytes, name=name)
    if t.kv_itemsize == 1:          # v5: per-channel scale and offset rows of this task's KV head
        anti_que = TQue(TPosition.VECIN, 1)
        pipe.init_buffer(anti_que, 1, 4 * D * 4, name="antiquant")
    paged = t.page_size > 0
    if paged:
        tbl_buf = TBuf(TPosition.VECCALC)
        pipe.init_buffer(tbl_buf, table_ub_bytes(t.max_pages), name="block_table")
        tbl = tbl_buf.get(np.int32)
    acc, prod, scores, part = (bufs[n].get(np.float32) for n in ("acc", "prod", "scores", "part"))
    pb, red, tmp, lse_ub = (bufs[n].get(np.float32) for n in ("pb", "red", "tmp", "lse"))
    if bf16:
        # the byte offsets that de-interleave q into [even dims | odd dims] (the order the widened
        # K/V rows come in), and the ones that put the output back
        perm = bufs["perm"].get(np.int32)
        ctx.arith_progression(perm, 0, 8, D // 2)
        ctx.arith_progression(perm[D // 2], 4, 8, D // 2)
        perm = perm.reinterpret_cast(np.uint32)
        unperm = bufs["unperm"].get(np.uint32)
        ctx.scalar("bf16 output order: unperm[i] = (i // 2 + (D / 2 if i odd)) * 4", ops=D)
        for i in range(D):
            unperm.set_value(i, (i // 2 + (D // 2 if i % 2 else 0)) * 4)
        if "S_V" in sync:
            ev = pipe.fetch_event_id("S_V")                       # the table is written: V may Gather
            ctx.set_flag("S_V", ev)
            ctx.wait_flag("S_V", ev)
        q_perm = bufs["q_perm"].get(np.float32)
    first = ctx.get_block_idx() * t.tasks_per_block
    mine = range(first, min(t.tasks, first + t.tasks_per_block)) if block_tasks is None \
        else block_tasks(ctx.get_block_idx())
    for j in ctx.tile_loop(len(mine), key=lambda j: (task_range(t, lens, mine[j])[3], j == 0)):
        task = mine[j]
        b, n2, lo, n_pos = task_range(t, lens, task)
        head0 = b * G * N2 + n2 * G
        if paged:                                  # this sequence's page ids, for the scalar unit
            if j and "S_MTE2" in sync:
                ev = pipe.fetch_event_id("S_MTE2")    # S is done reading the last task's row
                ctx.set_flag("S_MTE2", ev)
                ctx.wait_flag("S_MTE2", ev)
            ctx.data_copy_pad(tbl, table_gm[b * t.max_pages], DataCopyExtParams(1, t.max_pages * 4, 0, 0, 0),
                              DataCopyPadExtParams(False, 0, 0, 0))
            if "MTE2_S" in sync:
                ev = pipe.fetch_event_id("MTE2_S")
                ctx.set_flag("MTE2_S", ev)
                ctx.wait_flag("MTE2_S", ev)
        qt = q_que.alloc_tensor(np.float32)
        ctx.data_copy(qt, q_gm[head0 * D], G * D)
        q_que.enque(qt)
        qt = q_que.deque(np.float32)
        qs = qt
        if bf16:                                   # q in the widened K rows' order
            for g in range(G):
                ctx.gather(q_perm[g * D], qt, perm, g * D * 4, D)
            qs = q_perm
        ctx.duplicate(acc, 0.0, G * D)                         # an empty piece's output is 0
        if t.kv_itemsize == 1:
            anti = anti_que.alloc_tensor(np.float32)
            for i in range(4):                                 # k_scale, k_offset, v_scale, v_offset
                ctx.data_copy(anti[i * D], anti_gm[(i * N2 + n2) * D], D)
            anti_que.enque(anti)
            anti = anti_que.deque(np.float32)
        m = [NEG_BIG] * G
        l = [0.0] * G
        starts = range(lo, lo + n_pos, c)
        # tile_loop: a timing-only run jumps over the steady chunks (exact; npu_lab/lang/loop.py)
        for ci in ctx.tile_loop(len(starts), key=lambda i: (min(c, lo + n_pos - starts[i]), i == 0)):
            p0 = starts[ci]
            s = min(c, lo + n_pos - p0)
            if paged:                                         # (page, p0 % page_size, n2, 0)
                page = tbl.get_value(p0 // t.page_size)
                row = ((page * t.page_size + p0 % t.page_size) * N2 + n2) * D
            else:
                row = ((b * t.max_len + p0) * N2 + n2) * D      # element offset of (b, p0, n2, 0)
            gap = (N2 - 1) * D * t.kv_itemsize // 32           # 32-byte blocks between rows in GM
            params = DataCopyParams(s, D * t.kv_itemsize // 32, gap, 0)
            kt, vt = k_que.alloc_tensor(kv_dtype), v_que.alloc_tensor(kv_dtype)
            ctx.data_copy(kt, k_gm[row], params)
            ctx.data_copy(vt, v_gm[row], params)
            k_que.enque(kt)
            v_que.enque(vt)
            kt, vt = k_que.deque(kv_dtype), v_que.deque(kv_dtype)
            if t.kv_itemsize == 1:
                # antiquant (IFA算子设计介绍.md: C = A * (B + offset) x scale): int8 -> half -> float,
                # then + offset and x scale per channel (the row of this KV head, repeat stride 0)
                kf, vf, half = bufs["kf"].get(np.float32), bufs["vf"].get(np.float32), bufs["half"].get(np.float16)
                for src, dst, base in ((kt, kf, 0), (vt, vf, 2 * D)):
                    ctx.cast(half, src, "CAST_NONE", s * D)
                    ctx.cast(dst, half, "CAST_NONE", s * D)
                    for r0 in range(0, s, ROWS):
                        n = min(ROWS, s - r0)
                        for sl in range(slabs):
                            at = r0 * D + sl * 64
                            ctx.add(dst[at], dst[at], anti[base + D + sl * 64], 64, n,
                                    BinaryRepeatParams(1, 1, 1, D // 8, D // 8, 0))
                            ctx.mul(dst[at], dst[at], anti[base + sl * 64], 64, n,
                                    BinaryRepeatParams(1, 1, 1, D // 8, D // 8, 0))
            elif bf16:
                # bfloat16 -> float32 by bits (a bfloat16 is a float32's upper half): word w of a row
                # holds dims 2w (low half) and 2w+1 (high half); ShiftLeft 16 makes dim 2w a float32,
                # zeroing the low halves (Duplicate, bit mask on even lanes) leaves dim 2w+1 one.
                # Row r of kf / vf is then [dims 0, 2, 4, ... | dims 1, 3, 5, ...]
                kf, vf = bufs["kf"].get(np.float32), bufs["vf"].get(np.float32)
                h = D // 2
                for src, dst in ((kt, kf), (vt, vf)):
                    w, d32 = src.reinterpret_cast(np.uint32), dst.reinterpret_cast(np.uint32)
                    for r0 in range(0, s, ROWS):
                        n = min(ROWS, s - r0)
                        ctx.shift_left(d32[r0 * D], w[r0 * h], 16, h, n, UnaryRepeatParams(1, 1, D // 8, D // 16))
                    ctx.duplicate(src, 0, [EVEN_LANES, EVEN_LANES], -(-s * D // 128), 1, 8)
                    for r0 in range(0, s, ROWS):
                        n = min(ROWS, s - r0)
                        ctx.copy(d32[r0 * D + h], w[r0 * h], h, n, CopyRepeatParams(1, 1, D // 8, D // 16))
            elif t.kv_itemsize != 4:
                kf, vf = bufs["kf"].get(np.float32), bufs["vf"].get(np.float32)
                ctx.cast(kf, kt, "CAST_NONE", s * D)
                ctx.cast(vf, vt, "CAST_NONE", s * D)
            else:
                kf, vf = kt, vt
            s8 = -(-s // 8) * 8
            # head g-1's P·V waits in prod and is folded into acc at the start of head g (before
            # g's scores reuse prod): each head then ends writing prod, not its own acc row, so a
            # timing-only run sees the heads in a steady state and jumps over them (exact)
            corr_prev = None
            for g in ctx.tile_loop(G, key=lambda g: g == 0):
                if g:
                    _fold_into_acc(ctx, acc, prod, g - 1, D, ci, corr_prev)
                if s8 > s:      # Brcb reads whole groups of 8: the tail block's unused scores are 0
                    ctx.duplicate(scores[s8 - 8], 0.0, 8)
                # scores[r] = K[r]·q_g, 64 columns at a time, MAX_REPEAT rows per instruction
                for r0 in range(0, s, ROWS):
                    n = min(ROWS, s - r0)
                    for sl in range(slabs):
                        ctx.mul(prod[r0 * D + sl * 64], kf[r0 * D + sl * 64], qs[g * D + sl * 64], 64, n,
                                BinaryRepeatParams(1, 1, 1, D // 8, D // 8, 0))
                        ctx.whole_reduce_sum(scores[r0] if sl == 0 else part[r0], prod[r0 * D + sl * 64], 64,
                                             n, 1, 1, D // 8)
                        if sl:
                            ctx.add(scores[r0], scores[r0], part[r0], n)
                ctx.muls(scores, scores, 1.0 / math.sqrt(D), s)
                ctx.reduce_max(red, scores, tmp, s)
                if "V_S" in sync:
                    ev = pipe.fetch_event_id("V_S")
                    ctx.set_flag("V_S", ev)
                    ctx.wait_flag("V_S", ev)
                m_chunk = red.get_value(0)
                m_new, m_old = max(m[g], m_chunk), m[g]
                corr = ctx.scalar("online softmax: m_new, corr = exp(m_old - m_new)", ops=2, exps=1,
                                  compute=lambda: math.exp(m_old - m_new) if ci else 0.0)
                m[g] = m_new
                ctx.adds(scores, scores, -float(m_new), s)
                ctx.exp(scores, scores, s)
                ctx.reduce_sum(red[8], scores, tmp, s)
                if "V_S" in sync:
                    ev = pipe.fetch_event_id("V_S")
                    ctx.set_flag("V_S", ev)
                    ctx.wait_flag("V_S", ev)
                p_sum = red.get_value(8)
                if "S_V" in sync:
                    ev = pipe.fetch_event_id("S_V")                # V may overwrite red now
                    ctx.set_flag("S_V", ev)
                    ctx.wait_flag("S_V", ev)
                l_old = l[g]
                l[g] = ctx.scalar("online softmax: l = l * corr + sum", ops=2,
                                  compute=lambda: l_old * corr + p_sum) or 0.0
                # P·V: p spread over blocks, V rows scaled, rows summed by a tree of Adds
                for r0 in range(0, s8, 8 * MAX_REPEAT):
                    ctx.brcb(pb[r0 * 8], scores[r0], min(MAX_REPEAT, (s8 - r0) // 8), BrcbRepeatParams(1, 8))
                for r0 in range(0, s, ROWS):
                    n = min(ROWS, s - r0)
                    for sl in range(slabs):
                        ctx.mul(prod[r0 * D + sl * 64], vf[r0 * D + sl * 64], pb[r0 * 8], 64, n,
                                BinaryRepeatParams(1, 1, 0, D // 8, D // 8, 1))
                rows = s
                while rows > 1:
                    h = rows // 2
                    ctx.add(prod, prod, prod[(rows - h) * D], h * D)
                    rows -= h
                corr_prev = corr
            _fold_into_acc(ctx, acc, prod, G - 1, D, ci, corr_prev)
            k_que.free_tensor(kt)
            v_que.free_tensor(vt)
        q_que.free_tensor(qt)
        if t.kv_itemsize == 1:
            anti_que.free_tensor(anti)
        ot = out_que.alloc_tensor(np.float32)
        for g in range(G):
            inv = ctx.scalar("1 / l", ops=1, compute=lambda g=g: 1.0 / l[g] if l[g] > 0 else 0.0)
            if bf16:                                               # scale, then back to dims 0, 1, 2, ...
                ctx.muls(acc[g * D], acc[g * D], float(inv or 0.0), D)
                ctx.gather(ot[g * D], acc, unperm, g * D * 4, D)
            else:
                ctx.muls(ot[g * D], acc[g * D], float(inv or 0.0), D)  # 0 for an empty FlashDecode piece
        out_que.enque(ot)
        ot = out_que.deque(np.float32)
        ctx.data_copy(out_gm[task * G * D], ot, G * D)
        out_que.free_tensor(ot)
        if lse_gm is not None:                                 # v4: the piece's log-sum-exp
            for g in range(G):
                val = ctx.scalar("lse = m + ln(l)", ops=1, exps=1,
                                 compute=lambda g=g: m[g] + math.log(l[g]) if l[g] > 0 else NEG_BIG)
                lse_ub.set_value(g, float(val or 0.0))
            if "S_MTE3" in sync:
                ev = pipe.fetch_event_id("S_MTE3")
                ctx.set_flag("S_MTE3", ev)
                ctx.wait_flag("S_MTE3", ev)
            ctx.data_copy_pad(lse_gm[task * G], lse_ub, DataCopyExtParams(1, G * 4, 0, 0, 0))
            if "MTE3_S" in sync:
                ev = pipe.fetch_event_id("MTE3_S")             # the next task's SetValue waits
                ctx.set_flag("MTE3_S", ev)
                ctx.wait_flag("MTE3_S", ev)


@npu_kernel(block_classes=decode_block_classes)
def decode_attention_kernel(ctx, q_gm: GlobalTensor, k_gm: GlobalTensor, v_gm: GlobalTensor, anti_gm,
                            out_gm: GlobalTensor, lse_gm, tiling_bytes: bytes, sync=None, table_gm=None):
    """v1 / v2 / v4 step 1 / v5 (the tiling says which). ``anti_gm``: v5's float32
    [4, N2, D] (k_scale, k_offset, v_scale, v_offset) for int8 K/V, else None. ``out_gm``: [tasks, G, D] float32 — the final
    output when splits = 1 (task order is (b, n2) so it is [B, q_heads, D]), else the pieces'
    normalised outputs; ``lse_gm``: [tasks, G] float32 log-sum-exp (v4) or None; ``table_gm``:
    the block table [B, max_pages] int32 of a paged cache (tiling ``page_size`` > 0), else None.
    Listing: ``attention.cpp`` (its bfloat16 path would Cast bfloat16_t -> float; see the module docstring)."""
    _kernel_body(ctx, q_gm, k_gm, v_gm, anti_gm, out_gm, lse_gm, tiling_bytes, sync, table_gm)
