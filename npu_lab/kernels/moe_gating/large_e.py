"""Large E (issue 20 §2): when a row does not fit the UB with its buffers, split E into chunks and
keep a running top-K — CANN's chunked MoeGatingTopKSoftmaxV2 templates
(``moe/moe_gating_top_k_softmax_v2/op_host/moe_gating_top_k_softmax_v2_tiling_k_fullload.cpp`` and
``..._tiling_k_renorm.cpp``: ``ubOuter`` chunks of ``ubFormer`` columns, grown until one fits half
the UB). Two semantics, chosen by the tiling's ``renorm`` (CANN's attribute):

* **renorm = 1** (CANN's KRenorm, priority 20001; the article's semantics): top-K of the logits,
  softmax over the K. The running state is the sorted top-K list alone: its first element *is* the
  running maximum, and the softmax needs only the K winners. Exact: indices and weights equal
  ``moe_gating_topk_reference(x, k)`` bit for bit.
* **renorm = 0** (CANN's KFullLoad, priority 20000; also MoeGatingTopKSoftmax V1's semantics): the
  chosen experts keep their full-softmax value ``exp(x_j − m) / s`` over all E. Beside the running
  list, an **online max / sum** per row (what CANN's kernel gets from ``SoftmaxFlashV2`` in update
  mode, ``op_kernel/moe_gating_top_k_softmax_v2_k_fullload.h``; here with the basic instructions):
  per chunk ``m' = max(m, max_chunk x)``, ``s' = s · exp(m − m') + Σ_chunk exp(x − m')``; at the end
  ``w_j = exp(x_j − m) · (1 / s)`` (the reference's ``e * (1 / sum)``). ``k <= 1024`` (MAX_K, as the
  reference).

  Exactness, stated: the max is exact and the exponentials are the reference's, but ``s`` is summed
  in chunk order with a rescale per chunk where the reference sums the whole row at once, so the
  weights agree within ``rtol = 2e-6`` (measured: 3.8e-7 relative at most over 2000 hypothesis
  configs, tests/test_moe_large_e.py ``KFL_RTOL``), not bit for bit. The indices are the top-K of
  the logits (lower expert on equal logits); the reference ranks by probability, so where two
  experts' probabilities are the same float32 while their logits differ (exp underflowed to 0, or
  logits an ulp apart) the reference takes the lower expert and this kernel the larger logit; the
  chosen experts' probabilities are then the same values in the same order (tested element for
  element), and every row without such a tie has equal indices. CANN's kernel ranks the softmax
  values, rescaled per chunk, so its ties round yet another way.

Per loop of ``r`` rows (pipes MTE2 → V → MTE3), for every chunk of ``Ec`` columns:

* ``DataCopyPad`` r blocks of the chunk's ``ec`` elements (GM stride: the rest of the row), each at
  an ``Ec`` stride in UB; masked ``Duplicate`` of −inf over its pad columns;
* ``Adds`` the chunk's first column to the position row (0..Ec-1 → c·Ec ..), ``Sort32``, ``MrgSort``
  rounds: the chunk sorted;
* renorm = 0, once the Sort32 has read the logits, in place on them: ``WholeReduceMax`` (Ec <= 64)
  or a ``ReduceMax`` per row, ``Max`` with the running max, ``Sub`` + ``Exp`` (the rescale factor),
  ``Brcb`` + ``Sub`` + ``Exp`` over the chunk, ``Mul`` + ``WholeReduceSum`` / ``ReduceSum`` + ``Add``
  into the running sum (the running max lives in two buffers swapped every chunk); the input slot is
  freed after this step, so the next chunk's prefetch waits for it;
* per row ``MrgSort`` (running list of ``Kr = ceil32(K)`` pairs, the chunk's list) and ``Copy`` of
  the first Kr pairs back (equal logits: the running list first, i.e. the lower expert);

then ``Gather`` the K scores and positions; renorm = 1: ``WholeReduceMax`` / ``ReduceMax``,
``Sub``, ``Exp``, sum, ``Div``; renorm = 0: ``Brcb`` of the running max, ``Sub``, ``Exp``, ``Div``
for ``1 / s``, ``Brcb``, ``Mul``; ``DataCopyPad`` out. Listing: ``large_e.cpp``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...lang import (BinaryRepeatParams, BrcbRepeatParams, CopyRepeatParams, DataCopyExtParams, DataCopyPadExtParams,
                     GlobalTensor, MrgSort4Info, MrgSortSrcList, ReduceOrder, TBuf, TPosition, TQue, launch,
                     npu_kernel)
from ...lang.reduce import reduce_max_tmp_elements
from ...lang.tiling_struct import Int32Struct
from ...presets import get_preset
from .reference import CANN_SOFTMAX_MAX_K, KERNEL_NONFINITE_HINT, _check_k, _raise_on_nonfinite, as_logits_array
from .tiling import UbBudgetError

__all__ = ["LargeETiling", "calculate_large_e_tiling", "large_e_ub_bytes", "moe_gating_large_e_kernel",
           "run_large_e", "simulate_large_e"]

SORT_UNIT = 32
MAX_REPEAT = 255
NEG_INF = float("-inf")


def _cdiv(a, b):
    return -(-a // b)


def _up(a, b):
    return _cdiv(a, b) * b


@dataclass(frozen=True)
class LargeETiling(Int32Struct):
    """row N, col E, k, kRun (ceil32(K): pairs kept between chunks), kAlign (ceil8(K)), chunk (Ec,
    columns per chunk, a multiple of 32), chunks (ceil(E / Ec)), blockFormer / blockNum /
    blockTail, ubFormer (rows per loop), ubLoop/ubTail of a former and the last block, renorm (1:
    softmax over the K winners; 0: the full softmax, an online max / sum kept across chunks)."""

    row: int
    col: int
    k: int
    kRun: int
    kAlign: int
    chunk: int
    chunks: int
    blockFormer: int
    blockNum: int
    blockTail: int
    ubFormer: int
    ubLoopOfFormerBlock: int
    ubTailOfFormerBlock: int
    ubLoopOfTailBlock: int
    ubTailOfTailBlock: int
    renorm: int = 1


def large_e_layout(rows: int, chunk: int, k_run: int, k_align: int, itemsize: int, renorm: bool = True):
    """(name, copies, bytes) of every UB buffer, each a whole number of 256 B. renorm = 0 adds the
    running max (two, swapped every chunk) and the running sum, r floats each, and a ``tmp`` large
    enough for ReduceMax / ReduceSum over a chunk row (ReduceMax.md's sharedTmpBuffer formula)."""
    r, Ec = rows, chunk
    tmp = max(64, k_align) if renorm else max(64, k_align, reduce_max_tmp_elements(Ec, 4, False))
    lay = [("pairs_a", 1, 8 * r * Ec), ("pairs_b", 1, 8 * r * Ec), ("x", 2, r * Ec * itemsize)]
    if itemsize == 2:
        lay.append(("xf", 1, 4 * r * Ec))
    lay += [("index0", 1, 4 * r * Ec), ("index", 1, 4 * r * Ec), ("run", 1, 8 * r * k_run),
            ("merged", 1, 8 * (k_run + Ec)), ("offs", 1, 2 * 4 * r * k_align), ("stat", 1, 4 * _up(r, 8)),
            ("bcast", 1, 32 * _up(r, 8)), ("tmp", 1, 4 * tmp), ("out", 1, 2 * 4 * r * k_align)]
    if not renorm:
        lay += [("mx0", 1, 4 * _up(r, 8)), ("mx1", 1, 4 * _up(r, 8)), ("ssum", 1, 4 * _up(r, 8))]
    return [(n, c, _up(b, 256)) for n, c, b in lay]


def large_e_ub_bytes(rows, chunk, k_run, k_align, itemsize=4, renorm=True) -> int:
    return sum(c * b for _, c, b in large_e_layout(rows, chunk, k_run, k_align, itemsize, renorm))


def calculate_large_e_tiling(N: int, E: int, K: int, hw="ascend-910b2", *, dtype=np.float32,
                             chunk: int | None = None, renorm: bool = True) -> LargeETiling:
    """Rows per core as v4; the chunk: the widest multiple of 32 (<= ceil32(E)) whose one-row
    buffers fit the UB (CANN grows ubOuter until a chunk fits), or ``chunk`` if given (a multiple of
    32 >= 32, e.g. to show the chunked path on a row that would fit whole); then the balanced rows
    per loop that fit with it. ``renorm=False``: the KFullLoad variant (module docstring)."""
    hw = get_preset(hw)
    renorm = _check_renorm(renorm, K)
    size = np.dtype(dtype).itemsize
    kr, ka = _up(K, SORT_UNIT), _up(K, 8)
    if chunk is None:
        chunk = _up(E, SORT_UNIT)
        while chunk > SORT_UNIT and large_e_ub_bytes(1, chunk, kr, ka, size, renorm) > hw.ub_usable_bytes:
            chunk = _up(_cdiv(chunk, 2), SORT_UNIT)
    elif isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < SORT_UNIT or chunk % SORT_UNIT:
        raise ValueError(f"chunk must be a multiple of 32 columns (the Sort32 unit), >= 32; got {chunk!r}")
    chunk = int(min(chunk, _up(E, SORT_UNIT)))
    if large_e_ub_bytes(1, chunk, kr, ka, size, renorm) > hw.ub_usable_bytes:
        raise UbBudgetError(f"large-E kernel: K = {K} with a {chunk}-column chunk does not fit {hw.name}'s UB")
    cores = hw.vector_cores
    bf = _cdiv(N, cores)
    bn = _cdiv(N, bf)
    bt = N - (bn - 1) * bf
    ubf = 1
    for outer in range(1, bf + 1):
        r = _cdiv(bf, outer)
        if r <= MAX_REPEAT and r * chunk // SORT_UNIT <= MAX_REPEAT and \
                large_e_ub_bytes(r, chunk, kr, ka, size, renorm) <= hw.ub_usable_bytes:
            ubf = r
            break
    lf, lt = _cdiv(bf, ubf), _cdiv(bt, ubf)
    return LargeETiling(row=N, col=E, k=K, kRun=kr, kAlign=ka, chunk=chunk, chunks=_cdiv(E, chunk), blockFormer=bf,
                        blockNum=bn, blockTail=bt, ubFormer=ubf, ubLoopOfFormerBlock=lf,
                        ubTailOfFormerBlock=bf - (lf - 1) * ubf, ubLoopOfTailBlock=lt,
                        ubTailOfTailBlock=bt - (lt - 1) * ubf, renorm=int(bool(renorm)))


def _block_classes(block_dim, *args, **kwargs):
    t = LargeETiling.unpack(args[-1])
    labels = np.zeros(block_dim, dtype=np.int64)
    if t.blockTail != t.blockFormer:
        labels[-1] = 1
    return labels


def _merge_chunk(ctx, a, b, r, Ec):
    """Each of r rows holds Ec/32 sorted runs of 32 pairs: merge them into one list per row (4 runs
    per MrgSort, all pairs kept). Returns the buffer holding the result."""
    runs = [(j * SORT_UNIT, SORT_UNIT) for j in range(Ec // SORT_UNIT)]
    src, dst = a, b
    while len(runs) > 1:
        sets = [runs[s:s + 4] for s in range(0, len(runs), 4)]
        if len(runs) % 4 == 0 and len({ln for _, ln in runs}) == 1:
            ln, total = runs[0][1], r * len(sets)
            for s0 in range(0, total, MAX_REPEAT):
                base = s0 * 8 * ln
                ctx.mrg_sort(dst[base], MrgSortSrcList(src[base], src[base + 2 * ln], src[base + 4 * ln], src[base + 6 * ln]),
                             MrgSort4Info((ln,) * 4, False, 0b1111, min(MAX_REPEAT, total - s0)))
        else:
            for q in range(r):
                for st in sets:
                    at = q * Ec + st[0][0]
                    if len(st) == 1:
                        ctx.copy(dst[2 * at], src[2 * at], 64, 2 * st[0][1] // 64, CopyRepeatParams(1, 1, 8, 8))
                        continue
                    tens = [src[2 * (q * Ec + s)] for s, _ in st] + [src[2 * at]] * (4 - len(st))
                    ctx.mrg_sort(dst[2 * at], MrgSortSrcList(*tens),
                                 MrgSort4Info(tuple(ln for _, ln in st) + (0,) * (4 - len(st)), False,
                                              (1 << len(st)) - 1, 1))
        ctx.pipe_barrier("PIPE_V")
        runs = [(st[0][0], sum(ln for _, ln in st)) for st in sets]
        src, dst = dst, src
    return src


def _row_stat(ctx, dst, src, tmp, r, Ec, op):
    """dst[q] = max / sum of row q's Ec columns: one WholeReduce over r repeats when a row is one
    repeat (Ec <= 64), else a ReduceMax / ReduceSum per row (the row is longer than a repeat)."""
    if Ec <= 64:
        if op == "max":
            ctx.whole_reduce_max(dst, src, Ec, r, 1, 1, Ec // 8, ReduceOrder.ORDER_ONLY_VALUE)
        else:
            ctx.whole_reduce_sum(dst, src, Ec, r, 1, 1, Ec // 8)
        return
    for q in range(r):
        (ctx.reduce_max if op == "max" else ctx.reduce_sum)(dst[q], src[q * Ec], tmp, Ec)


def _sub_row_scalar(ctx, x, bcast, r, Ec):
    """x[q, :] -= bcast[q] (bcast: one 32-byte block per row, from Brcb)."""
    if Ec <= 64:                                         # one repeat a row, the row's block as src1
        ctx.sub(x, x, bcast, Ec, r, BinaryRepeatParams(1, 1, 0, Ec // 8, Ec // 8, 1))
        return
    for q in range(r):                                   # repeats along the row, src1 the same block
        if Ec // 64:
            ctx.sub(x[q * Ec], x[q * Ec], bcast[q * 8], 64, Ec // 64, BinaryRepeatParams(1, 1, 0, 8, 8, 0))
        if Ec % 64:
            at = q * Ec + Ec // 64 * 64
            ctx.sub(x[at], x[at], bcast[q * 8], 32, 1, BinaryRepeatParams(1, 1, 0, 8, 8, 0))


def _online_softmax_step(ctx, xf, mo, mn, ssum, stat, bcast, tmp, r, Ec):
    """One chunk of the online softmax (KFullLoad): mn = max(mo, chunk max), ssum = ssum ·
    exp(mo − mn) + Σ exp(x − mn). xf [r, Ec] float32 (pads −inf: exp gives 0) is overwritten."""
    _row_stat(ctx, stat, xf, tmp, r, Ec, "max")
    ctx.pipe_barrier("PIPE_V")
    ctx.max(mn, mo, stat, r)
    ctx.pipe_barrier("PIPE_V")
    ctx.sub(mo, mo, mn, r)                               # chunk 0: −inf − m = −inf, exp → 0
    ctx.brcb(bcast, mn, _cdiv(r, 8), BrcbRepeatParams(1, 8))
    ctx.pipe_barrier("PIPE_V")
    ctx.exp(mo, mo, r)                                   # the rescale factor of the old sum
    _sub_row_scalar(ctx, xf, bcast, r, Ec)
    ctx.pipe_barrier("PIPE_V")
    ctx.mul(ssum, ssum, mo, r)
    ctx.exp(xf, xf, r * Ec)
    ctx.pipe_barrier("PIPE_V")
    _row_stat(ctx, stat, xf, tmp, r, Ec, "sum")
    ctx.pipe_barrier("PIPE_V")
    ctx.add(ssum, ssum, stat, r)
    ctx.pipe_barrier("PIPE_V")


def _full_softmax_weights(ctx, w, m, ssum, stat, bcast, r, Kp):
    """w [r, Kp] (the winners' logits) := exp(w − m) · (1 / ssum), per row: the reference's
    ``e * (1 / sum)`` (one reciprocal, then a product), with the sum taken in chunk order."""
    ctx.brcb(bcast, m, _cdiv(r, 8), BrcbRepeatParams(1, 8))
    ctx.duplicate(stat, 1.0, r)
    ctx.pipe_barrier("PIPE_V")
    for c0 in range(0, Kp, 64):
        ctx.sub(w[c0], w[c0], bcast, min(64, Kp - c0), r, BinaryRepeatParams(1, 1, 0, Kp // 8, Kp // 8, 1))
    ctx.div(stat, stat, ssum, r)
    ctx.pipe_barrier("PIPE_V")
    ctx.exp(w, w, r * Kp)
    ctx.brcb(bcast, stat, _cdiv(r, 8), BrcbRepeatParams(1, 8))
    ctx.pipe_barrier("PIPE_V")
    for c0 in range(0, Kp, 64):
        ctx.mul(w[c0], w[c0], bcast, min(64, Kp - c0), r, BinaryRepeatParams(1, 1, 0, Kp // 8, Kp // 8, 1))
    ctx.pipe_barrier("PIPE_V")


def _renorm_weights(ctx, w, stat, bcast, tmp, r, K, Kp):
    """w [r, Kp] (the winners' logits) := softmax over each row's first K (renorm = 1)."""
    if Kp <= 64:
        ctx.whole_reduce_max(stat, w, K, r, 1, 1, Kp // 8, ReduceOrder.ORDER_ONLY_VALUE)
    else:
        for q in range(r):
            ctx.reduce_max(stat[q], w[q * Kp], tmp, K)
    ctx.pipe_barrier("PIPE_V")
    ctx.brcb(bcast, stat, _cdiv(r, 8), BrcbRepeatParams(1, 8))
    ctx.pipe_barrier("PIPE_V")
    for c0 in range(0, Kp, 64):
        ctx.sub(w[c0], w[c0], bcast, min(64, Kp - c0), r, BinaryRepeatParams(1, 1, 0, Kp // 8, Kp // 8, 1))
    ctx.pipe_barrier("PIPE_V")
    ctx.exp(w, w, r * Kp)
    ctx.pipe_barrier("PIPE_V")
    if Kp <= 64:
        ctx.whole_reduce_sum(stat, w, K, r, 1, 1, Kp // 8)
    else:
        for q in range(r):
            ctx.reduce_sum(stat[q], w[q * Kp], tmp, K)
    ctx.pipe_barrier("PIPE_V")
    ctx.brcb(bcast, stat, _cdiv(r, 8), BrcbRepeatParams(1, 8))
    ctx.pipe_barrier("PIPE_V")
    for c0 in range(0, Kp, 64):
        ctx.div(w[c0], w[c0], bcast, min(64, Kp - c0), r, BinaryRepeatParams(1, 1, 0, Kp // 8, Kp // 8, 1))
    ctx.pipe_barrier("PIPE_V")


@npu_kernel(block_classes=_block_classes)
def moe_gating_large_e_kernel(ctx, gate_gm, idx_gm, w_gm, tiling_bytes):
    """Chunked-E MoeGatingTopK (module docstring). gate_gm [N*E] float32 / float16, idx_gm [N*K]
    int32, w_gm [N*K] float32."""
    t = LargeETiling.unpack(tiling_bytes)
    if ctx.get_block_num() != t.blockNum:
        raise ValueError(f"the large-E kernel must be launched with blockDim = tiling.blockNum = {t.blockNum}")
    dt = gate_gm.dtype
    E, K, Kr, Kp, Ec, R = t.col, t.k, t.kRun, t.kAlign, t.chunk, t.ubFormer
    b = ctx.get_block_idx()
    last = b == t.blockNum - 1
    loops = t.ubLoopOfTailBlock if last else t.ubLoopOfFormerBlock
    rows = [R] * (loops - 1) + [t.ubTailOfTailBlock if last else t.ubTailOfFormerBlock]
    row0 = t.blockFormer * b
    x_q, out_q = TQue(TPosition.VECIN, 2), TQue(TPosition.VECOUT, 1)
    bufs = {}
    online = not t.renorm                                # KFullLoad: the full softmax, online max / sum
    for name, copies, nbytes in large_e_layout(R, Ec, Kr, Kp, dt.itemsize, bool(t.renorm)):
        if name == "x":
            ctx.pipe.init_buffer(x_q, copies, nbytes, name=name)
        elif name == "out":
            ctx.pipe.init_buffer(out_q, copies, nbytes, name=name)
        else:
            bufs[name] = TBuf(TPosition.VECCALC)
            ctx.pipe.init_buffer(bufs[name], nbytes, name=name)
    get = lambda n, d=np.float32: bufs[n].get(d)
    index0, offs = get("index0", np.int32), get("offs", np.uint32)
    for i in range(R):                                   # positions 0..Ec-1 of every row
        ctx.create_vec_index(index0[i * Ec], 0, Ec)
    for i in range(R):                                   # the first K pairs of every running list
        for j in range(Kp):
            offs.set_value(i * Kp + j, (i * Kr + min(j, K - 1)) * 8)
    ev = ctx.pipe.fetch_event_id("S_V")
    ctx.set_flag("S_V", ev)
    ctx.wait_flag("S_V", ev)
    steps = [(i, c) for i in range(loops) for c in range(t.chunks)]

    def copy_in(i, c):
        r, ec = rows[i], min(Ec, E - c * Ec)
        x = x_q.alloc_tensor(dt)
        gap = (Ec * dt.itemsize - _up(ec * dt.itemsize, 32)) // 32
        ctx.data_copy_pad(x, gate_gm[(row0 + i * R) * E + c * Ec], DataCopyExtParams(r, ec * dt.itemsize,
                          (E - ec) * dt.itemsize, gap, 0), DataCopyPadExtParams(False, 0, 0, 0))
        x_q.enque(x)

    copy_in(*steps[0])
    run, merged, index = get("run"), get("merged"), get("index", np.int32)
    for s in ctx.tile_loop(len(steps), key=lambda s: (rows[steps[s][0]], steps[s][1], s + 1 < len(steps),
                                                       steps[s][1] == t.chunks - 1, s >= 2, s + 2 < len(steps))):
        i, c = steps[s]
        r, ec = rows[i], min(Ec, E - c * Ec)
        if online:                                       # running max: mo before this chunk, mn after
            mo, mn = (get("mx0"), get("mx1")) if c % 2 == 0 else (get("mx1"), get("mx0"))
        if c == 0:                                       # a fresh running list of -inf
            ctx.duplicate(run, NEG_INF, r * Kr * 2)
            if online:                                   # running max -inf, running sum 0
                ctx.duplicate(mo, NEG_INF, r)
                ctx.duplicate(get("ssum"), 0.0, r)
        x = x_q.deque(dt)
        xf = x
        if dt == np.float16:
            xf = get("xf")
            ctx.cast(xf, x, "CAST_NONE", r * Ec)
            ctx.pipe_barrier("PIPE_V")
        if ec < Ec:                                      # -inf over the chunk's pad columns
            for q in range(r):
                lo = q * Ec + _up(ec, 32) - 32 if ec % 32 else q * Ec + ec
                if ec % 32:
                    pad = 32 - ec % 32
                    ctx.duplicate(xf[lo], NEG_INF, [((1 << pad) - 1) << (32 - pad), 0], 1, 1, 8)
                full = Ec - _up(ec, 32)
                if full:
                    ctx.duplicate(xf[q * Ec + _up(ec, 32)], NEG_INF, full)
            ctx.pipe_barrier("PIPE_V")
        ctx.adds(index, index0, c * Ec, r * Ec)          # this chunk's expert indices
        ctx.pipe_barrier("PIPE_V")
        a, bb = get("pairs_a"), get("pairs_b")
        ctx.sort32(a, xf, index.reinterpret_cast(np.uint32), r * Ec // SORT_UNIT)
        ctx.pipe_barrier("PIPE_V")
        if online:                                       # the sort has read the logits: xf is free
            _online_softmax_step(ctx, xf, mo, mn, get("ssum"), get("stat"), get("bcast"), get("tmp"), r, Ec)
        x_q.free_tensor(x)
        if s + 1 < len(steps):
            copy_in(*steps[s + 1])                       # prefetch the next chunk
        sorted_buf = _merge_chunk(ctx, a, bb, r, Ec)
        for q in range(r):                               # running top-Kr := top-Kr(run ∪ chunk)
            ctx.mrg_sort(merged, MrgSortSrcList(run[q * Kr * 2], sorted_buf[q * Ec * 2], run[q * Kr * 2],
                                                run[q * Kr * 2]), MrgSort4Info((Kr, Ec, 0, 0), False, 0b11, 1))
            ctx.pipe_barrier("PIPE_V")
            ctx.copy(run[q * Kr * 2], merged, 64, 2 * Kr // 64, CopyRepeatParams(1, 1, 8, 8))
            ctx.pipe_barrier("PIPE_V")
        if c < t.chunks - 1:
            continue
        # the K winners of r rows: scores and indices [r, Kp], softmax over the first K
        out = out_q.alloc_tensor(np.float32)
        w, idx = out, out[R * Kp].reinterpret_cast(np.int32)
        ctx.gather(w, run, offs, 0, r * Kp)
        ctx.gather(idx, run.reinterpret_cast(np.int32), offs, 4, r * Kp)        # the index lanes
        ctx.pipe_barrier("PIPE_V")
        stat, bcast, tmp = get("stat"), get("bcast"), get("tmp")
        if online:                                       # w = exp(x - m) * (1 / s), m and s of the whole row
            _full_softmax_weights(ctx, w, mn, get("ssum"), stat, bcast, r, Kp)
        else:                                            # softmax over the K winners
            _renorm_weights(ctx, w, stat, bcast, tmp, r, K, Kp)
        out_q.enque(out)
        out = out_q.deque(np.float32)
        base = (row0 + i * R) * K
        ctx.data_copy_pad(idx_gm[base], out[R * Kp].reinterpret_cast(np.int32), DataCopyExtParams(r, K * 4, 0, 0, 0))
        ctx.data_copy_pad(w_gm[base], out, DataCopyExtParams(r, K * 4, 0, 0, 0))
        out_q.free_tensor(out)


def _check_renorm(renorm, K):
    if not isinstance(renorm, (bool, np.bool_)):
        raise TypeError(f"renorm must be True (softmax over the K winners) or False (the full softmax); got {renorm!r}")
    if not renorm and K > CANN_SOFTMAX_MAX_K:
        raise ValueError(f"k = {K} > {CANN_SOFTMAX_MAX_K}: MoeGatingTopKSoftmaxV2 with renorm = 0 takes k <= "
                         f"{CANN_SOFTMAX_MAX_K} (MAX_K, moe/moe_gating_top_k_softmax_v2/README.md), as "
                         "moe_gating_topk_reference does; use renorm=True or a smaller k")
    return bool(renorm)


def _launch(gate, N, E, K, hw, timing_only, chunk, renorm):
    t = calculate_large_e_tiling(N, E, K, hw, dtype=gate.dtype, chunk=chunk, renorm=renorm)
    idx = GlobalTensor.empty(N * K, np.int32, "expert_indices", timing_only=timing_only)
    w = GlobalTensor.empty(N * K, np.float32, "routing_weights", timing_only=timing_only)
    name = "MoeGatingTopK large-E" if renorm else "MoeGatingTopK large-E KFullLoad"
    tl = launch(moe_gating_large_e_kernel, t.blockNum, gate, idx, w, t.pack(), hw=hw, timing_only=timing_only,
                name=name)
    return idx, w, tl, t


def run_large_e(gate_logits, k, *, hw="ascend-910b2", chunk: int | None = None, renorm: bool = True):
    """The chunked kernel on [N, E] / [B, S, E] float32 / float16 logits. ``renorm=True``: the
    article's semantics (CANN's KRenorm), indices and weights bit-equal to
    ``moe_gating_topk_reference(x, k)``; ``renorm=False``: the full softmax (CANN's KFullLoad; V1's
    semantics too), see the module docstring for its exactness. Returns
    ``(indices, weights, timeline, tiling)``."""
    hw = get_preset(hw)
    x = as_logits_array(gate_logits)
    if x.ndim not in (2, 3) or x.dtype not in (np.float32, np.float16) or 0 in x.shape:
        raise ValueError(f"gate_logits must be float32 / float16 [N, E] or [B, S, E], non-empty; got {x.dtype} {x.shape}")
    E = x.shape[-1]
    K = _check_k(k, E)
    renorm = _check_renorm(renorm, K)
    _raise_on_nonfinite(x.reshape(-1, E).astype(np.float32), x.shape, KERNEL_NONFINITE_HINT)
    N = int(np.prod(x.shape[:-1]))
    idx, w, tl, t = _launch(GlobalTensor.from_array(x.reshape(-1), "gate_logits"), N, E, K, hw, False, chunk, renorm)
    lead = x.shape[:-1]
    return idx.data.reshape(*lead, K).copy(), w.data.reshape(*lead, K).copy(), tl, t


def simulate_large_e(N, E, K, *, hw="ascend-910b2", dtype=np.float32, chunk: int | None = None,
                     renorm: bool = True):
    """Timing-only run: ``(timeline, tiling)``, the same timeline :func:`run_large_e` gives."""
    hw = get_preset(hw)
    for name, v in (("N", N), ("E", E)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {v!r}")
    K = _check_k(K, E)
    renorm = _check_renorm(renorm, K)
    gate = GlobalTensor.empty(N * E, dtype, "gate_logits", timing_only=True)
    _, _, tl, t = _launch(gate, N, E, K, hw, True, chunk, renorm)
    return tl, t
