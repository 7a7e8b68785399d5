"""numpy references of the decode kernels (float64 where arithmetic happens).

* :func:`kv_cache_append_reference` — this step's K/V [num_rows, kv_heads, head_dim] written at
  each sequence's current length into a contiguous cache [num_seqs, max_len, kv_heads, head_dim];
* :func:`paged_kv_cache_append_reference` — the same into a paged cache
  [num_pages, page_size, kv_heads, head_dim] through a block table [num_seqs, max_pages];
* :func:`decode_attention_reference` — one query token per sequence over its cached positions,
  GQA, softmax with scale 1/sqrt(head_dim) in float64; output [num_seqs, q_heads, head_dim].
"""

from __future__ import annotations

import numpy as np

from ...lang import bfloat16_to_float
from .quant import check_antiquant, dequantize_kv
from .validate import check_append, check_attention, check_paged_append


def kv_cache_append_reference(k_new, v_new, k_cache, v_cache, seq_ids, seq_lens):
    """Returns ``(k_cache_out, v_cache_out, new_seq_lens)``; inputs are not modified. Row i of
    k_new / v_new goes to sequence ``seq_ids[i]`` at position ``seq_lens[seq_ids[i]]``."""
    seq_ids, seq_lens = check_append(k_new, v_new, k_cache, v_cache, seq_ids, seq_lens, on_full="raise")[:2]
    k_out, v_out, lens = np.array(k_cache), np.array(v_cache), np.array(seq_lens)
    for i, s in enumerate(seq_ids):
        k_out[s, lens[s]] = k_new[i]
        v_out[s, lens[s]] = v_new[i]
    lens[seq_ids] += 1
    return k_out, v_out, lens


def paged_kv_cache_append_reference(k_new, v_new, k_pages, v_pages, seq_ids, seq_lens, block_table):
    """Paged: position p of sequence s lives in page ``block_table[s, p // page_size]`` at row
    ``p % page_size``. Returns ``(k_pages_out, v_pages_out, new_seq_lens)``."""
    seq_ids, seq_lens, table = check_paged_append(k_new, v_new, k_pages, v_pages, seq_ids, seq_lens, block_table)[:3]
    page_size = k_pages.shape[1]
    k_out, v_out, lens = np.array(k_pages), np.array(v_pages), np.array(seq_lens)
    for i, s in enumerate(seq_ids):
        p = lens[s]
        page = table[s, p // page_size]
        k_out[page, p % page_size] = k_new[i]
        v_out[page, p % page_size] = v_new[i]
    lens[seq_ids] += 1
    return k_out, v_out, lens


def paged_to_contiguous(pages, block_table, seq_lens):
    """[num_pages, page_size, N2, D] through block_table [B, max_pages] → [B, max_pages·page_size,
    N2, D] (positions past each length, and unallocated pages, are 0)."""
    pages, table = np.asarray(pages), np.asarray(block_table)
    ps = pages.shape[1]
    out = np.zeros((table.shape[0], table.shape[1] * ps) + pages.shape[2:], pages.dtype)
    for b, n in enumerate(seq_lens):
        for i in range(-(-int(n) // ps)):
            out[b, i * ps:(i + 1) * ps] = pages[table[b, i]]
    return out


def decode_attention_reference(q, k_cache, v_cache, seq_lens, *, antiquant=None, block_table=None, **_ignored):
    """float64 softmax(q·Kᵀ / sqrt(D)) · V per sequence and query head over the first
    ``seq_lens[b]`` cached positions; q head h reads KV head h // G (G = q_heads / kv_heads).
    Extra keyword arguments (``version``, ``hw``, ...) are accepted and ignored so the call
    matches :func:`~npu_lab.kernels.decode.decode_attention`. ``antiquant`` (v5): int8 caches
    dequantised as (k + offset) · scale per channel first. ``block_table``: paged caches
    [num_pages, page_size, N2, D], gathered page by page first. Returns float64 [B, q_heads, D]."""
    if block_table is not None:
        check_attention(q, k_cache, v_cache, seq_lens, int8=antiquant is not None, block_table=block_table)
        k_cache, v_cache = (paged_to_contiguous(c, block_table, seq_lens) for c in (k_cache, v_cache))
    q, k_cache, v_cache, lens, g = check_attention(q, k_cache, v_cache, seq_lens, int8=antiquant is not None)
    if np.asarray(k_cache).dtype == np.uint16:           # bfloat16 bits: the exact float values
        k_cache, v_cache = bfloat16_to_float(k_cache), bfloat16_to_float(v_cache)
    if antiquant is not None:
        a = check_antiquant(antiquant, k_cache.shape[2], k_cache.shape[3])
        k_cache, v_cache = dequantize_kv(k_cache, a[0], a[1]), dequantize_kv(v_cache, a[2], a[3])
    B, nq, D = q.shape
    out = np.empty((B, nq, D))
    for b in range(B):
        L = lens[b]
        k = np.asarray(k_cache[b, :L], np.float64)            # [L, N2, D]
        v = np.asarray(v_cache[b, :L], np.float64)
        for h in range(nq):
            s = k[:, h // g] @ np.asarray(q[b, h], np.float64) / np.sqrt(D)
            p = np.exp(s - s.max())
            out[b, h] = (p / p.sum()) @ v[:, h // g]
    return out
