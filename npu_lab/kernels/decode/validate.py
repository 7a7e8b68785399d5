"""Host-side checks of the decode kernels' inputs: everything is checked before a launch, so a bad
call raises naming the rule and nothing is half-written (a device kernel does not check: an id out
of range or a page past the cache writes whatever memory lies there)."""

from __future__ import annotations

import numbers

import numpy as np

#: K/V dtypes the kernels take: float16, float32, and bfloat16 as its uint16 bits (numpy has no
#: bfloat16: npu_lab.lang.float_to_bfloat16 makes the bits, bfloat16_to_float reads them)
KV_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.uint16))
#: query dtypes
Q_DTYPES = (np.dtype(np.float16), np.dtype(np.float32))
_KV_NAMES = "float16, float32 or bfloat16 (uint16 bits from npu_lab.lang.float_to_bfloat16)"


class KvCacheFullError(ValueError):
    """Sequences already at max_len (or at the end of their pages) cannot take another token."""

    def __init__(self, message, full):
        super().__init__(message)
        self.full = list(full)


def _int_array(name, a, ndim):
    a = np.asarray(a)
    if a.ndim != ndim or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name} must be a {ndim}-D integer array, got shape {a.shape} dtype {a.dtype}")
    return a.astype(np.int64)


def _kv_pair(k_new, v_new, k_cache, v_cache):
    k_new, v_new = np.asarray(k_new), np.asarray(v_new)
    if k_new.ndim != 3 or k_new.shape != v_new.shape:
        raise ValueError(f"k_new and v_new must both be [num_rows, kv_heads, head_dim]; got {k_new.shape} and {v_new.shape}")
    if k_cache.shape != v_cache.shape or k_cache.ndim != 4:
        raise ValueError(f"k_cache and v_cache must both be 4-D of one shape; got {k_cache.shape} and {v_cache.shape}")
    for name, a in (("k_new", k_new), ("v_new", v_new), ("k_cache", k_cache), ("v_cache", v_cache)):
        if a.dtype not in KV_DTYPES:
            raise TypeError(f"{name} is {a.dtype}; the kernels take {_KV_NAMES} K/V")
    if len({k_new.dtype, v_new.dtype, k_cache.dtype, v_cache.dtype}) != 1:
        raise TypeError(f"dtype mismatch: k_new {k_new.dtype}, v_new {v_new.dtype}, k_cache {k_cache.dtype}, "
                        f"v_cache {v_cache.dtype}; DataCopy does not convert — cast on the host first")
    if k_new.shape[1:] != k_cache.shape[2:]:
        raise ValueError(f"k_new rows are [kv_heads, head_dim] = {k_new.shape[1:]} but the cache holds "
                         f"{k_cache.shape[2:]}")
    return k_new, v_new


def _ids_lens(seq_ids, seq_lens, num_seqs, rows):
    ids = _int_array("seq_ids", seq_ids, 1)
    lens = _int_array("seq_lens", seq_lens, 1)
    if ids.shape != (rows,):
        raise ValueError(f"seq_ids must have one entry per row of k_new ({rows}), got {ids.shape}")
    if lens.shape != (num_seqs,):
        raise ValueError(f"seq_lens must have one entry per cache sequence ({num_seqs}), got {lens.shape}")
    bad = [int(i) for i in ids if not 0 <= i < num_seqs]
    if bad:
        raise IndexError(f"seq_ids {bad} out of range: the cache holds sequences 0..{num_seqs - 1}")
    if len(set(ids.tolist())) != len(ids):
        raise ValueError("seq_ids must be distinct: two rows for one sequence in one step would write one slot twice")
    if (lens < 0).any():
        raise ValueError(f"seq_lens must be >= 0, got {lens.tolist()}")
    return ids, lens


def check_append(k_new, v_new, k_cache, v_cache, seq_ids, seq_lens, *, on_full="raise"):
    """Contiguous cache [num_seqs, max_len, kv_heads, head_dim]. Returns ``(ids, lens, full)``:
    ``full`` lists the sequence ids already at max_len (raised as :class:`KvCacheFullError` unless
    ``on_full="report"``, when the caller skips them and returns the list)."""
    k_new, v_new = _kv_pair(k_new, v_new, np.asarray(k_cache), np.asarray(v_cache))
    num_seqs, max_len = np.shape(k_cache)[:2]
    ids, lens = _ids_lens(seq_ids, seq_lens, num_seqs, k_new.shape[0])
    if (lens > max_len).any():
        raise ValueError(f"seq_lens {lens[lens > max_len].tolist()} are past max_len={max_len}: the cache "
                         "cannot hold more tokens than it has rows")
    full = [int(s) for s in ids if lens[s] >= max_len]
    if on_full not in ("raise", "report"):
        raise ValueError(f"on_full must be 'raise' or 'report', got {on_full!r}")
    if full and on_full == "raise":
        raise KvCacheFullError(f"sequences {full} are already at max_len={max_len}: no row left for this "
                               "step's K/V (evict or grow the cache; on_full='report' skips and returns them)", full)
    return ids, lens, full


def check_paged_append(k_new, v_new, k_pages, v_pages, seq_ids, seq_lens, block_table, *, on_full="raise"):
    """Paged cache [num_pages, page_size, kv_heads, head_dim] with block_table [num_seqs,
    max_pages] (-1 = no page). The page a new token lands in must be allocated and inside the
    cache. Returns ``(ids, lens, table, full)``."""
    k_new, v_new = _kv_pair(k_new, v_new, np.asarray(k_pages), np.asarray(v_pages))
    num_pages, page_size = np.shape(k_pages)[:2]
    table = _int_array("block_table", block_table, 2)
    ids, lens = _ids_lens(seq_ids, seq_lens, table.shape[0], k_new.shape[0])
    max_len = table.shape[1] * page_size
    if (lens > max_len).any():
        raise ValueError(f"seq_lens {lens[lens > max_len].tolist()} are past the block table's "
                         f"{table.shape[1]} pages x {page_size} = {max_len} positions")
    full = [int(s) for s in ids if lens[s] >= max_len]
    if on_full not in ("raise", "report"):
        raise ValueError(f"on_full must be 'raise' or 'report', got {on_full!r}")
    if full and on_full == "raise":
        raise KvCacheFullError(f"sequences {full} fill all {table.shape[1]} pages of their block-table row", full)
    for s in ids:
        if lens[s] >= max_len:
            continue
        page = table[s, lens[s] // page_size]
        if not 0 <= page < num_pages:
            why = "no page allocated (-1)" if page < 0 else f"page {page} is past the cache's {num_pages} pages"
            raise IndexError(f"block_table[{s}, {lens[s] // page_size}]: {why}; position {lens[s]} of sequence {s} "
                             "needs a page there (allocate it before the step, as vLLM's block manager does)")
    return ids, lens, table, full


def _whole(name, v, lo):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral) or v < lo:
        raise ValueError(f"{name} must be a whole number >= {lo}, got {v!r}")
    return int(v)


def check_block_table(block_table, batch: int, num_pages: int, page_size: int, lens):
    """A paged cache's block table [B, max_pages] (int page ids, -1 = none): every page a
    sequence's first ``lens[b]`` positions use must be allocated and inside the cache's
    ``num_pages`` (a device kernel would read whatever lies past the cache). Returns it as int32."""
    table = _int_array("block_table", block_table, 2)
    if table.shape[0] != batch or table.shape[1] < 1:
        raise ValueError(f"block_table must be [num_seqs={batch}, max_pages >= 1], got {table.shape}")
    max_len = table.shape[1] * page_size
    if (lens > max_len).any():
        raise ValueError(f"seq_lens {lens[lens > max_len].tolist()} are past the block table's {table.shape[1]} "
                         f"pages x page_size {page_size} = {max_len} positions")
    for b, n in enumerate(lens):
        used = table[b, :-(-int(n) // page_size)]
        bad = np.flatnonzero((used < 0) | (used >= num_pages))
        if bad.size:
            i = int(bad[0])
            why = "no page allocated (-1)" if used[i] < 0 else f"page {used[i]} is past the cache's {num_pages} pages"
            raise IndexError(f"block_table[{b}, {i}]: {why}, but sequence {b} has {int(n)} cached positions "
                             f"(pages 0..{len(used) - 1} of its row are read); fix the table or the length")
    return table.astype(np.int32)


def check_attention(q, k_cache, v_cache, seq_lens, *, int8=False, block_table=None):
    """q [B, q_heads, D] float32 (or float16); k_cache, v_cache [B, max_len, kv_heads, D] of one
    dtype (float16 / float32; int8 when ``int8``, v5); seq_lens [B] in 1..max_len. Paged (a
    ``block_table`` [B, max_pages]): the caches are [num_pages, page_size, kv_heads, D] and
    max_len = max_pages · page_size (:func:`check_block_table`). Returns ``(q, k, v, lens, G)``,
    and the int32 table as a sixth item when paged."""
    q = np.asarray(q)
    if q.ndim != 3:
        raise ValueError(f"q must be [num_seqs, q_heads, head_dim], got shape {q.shape}")
    if q.dtype not in Q_DTYPES:
        raise TypeError(f"q is {q.dtype}; pass float16 or float32")
    ks, vs = np.shape(k_cache), np.shape(v_cache)
    if len(ks) != 4 or ks != vs:
        raise ValueError(f"k_cache and v_cache must both be [num_seqs, max_len, kv_heads, head_dim]; got {ks} and {vs}")
    kd, vd = np.asarray(k_cache).dtype if not hasattr(k_cache, "dtype") else k_cache.dtype, v_cache.dtype
    if int8:
        if kd != np.int8 or vd != np.int8:
            raise TypeError(f"v5 (antiquant) takes int8 k_cache and v_cache, got {kd} and {vd}; "
                            "quantize_kv_int8 makes them")
    elif kd not in KV_DTYPES or kd != vd:
        raise TypeError(f"k_cache ({kd}) and v_cache ({vd}) must be one dtype, {_KV_NAMES}"
                        + ("; int8 K/V take version='v5' with antiquant=(...)" if kd == np.int8 else ""))
    B, nq, D = q.shape
    if block_table is not None:
        if ks[3] != D:
            raise ValueError(f"q is [{B}, {nq}, {D}] but the paged cache is {ks}: head_dim must match")
        if ks[1] % 8 or ks[1] < 8:
            raise ValueError(f"page_size={ks[1]} (the caches' second axis): a page must hold a multiple of 8 "
                             "positions so a chunk of whole 32-byte score blocks fits in one page (vLLM uses 16)")
    elif ks[0] != B or ks[3] != D:
        raise ValueError(f"q is [{B}, {nq}, {D}] but the cache is {ks}: num_seqs and head_dim must match")
    n2 = ks[2]
    if n2 < 1 or nq % n2:
        raise ValueError(f"GQA groups q_heads={nq} into kv_heads={n2}: q_heads must be a multiple of kv_heads "
                         "(G = q_heads / kv_heads query heads share one KV head)")
    lens = _int_array("seq_lens", seq_lens, 1)
    if lens.shape != (B,):
        raise ValueError(f"seq_lens must be [{B}], got {lens.shape}")
    if (lens < 1).any():
        raise ValueError(f"seq_lens must be in 1..max_len (attention needs at least one cached position), "
                         f"got {lens.tolist()}")
    if block_table is not None:
        table = check_block_table(block_table, B, ks[0], ks[1], lens)
        return q, k_cache, v_cache, lens, nq // n2, table
    if (lens > ks[1]).any():
        raise ValueError(f"seq_lens must be in 1..max_len={ks[1]} (attention needs at least one cached "
                         f"position), got {lens.tolist()}")
    return q, k_cache, v_cache, lens, nq // n2
