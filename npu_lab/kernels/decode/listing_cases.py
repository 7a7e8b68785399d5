"""The small timing-only runs npu_lab.kernels.listings traces to compare the decode kernels with
their C++ listings (append.cpp, attention.cpp)."""

from __future__ import annotations

import numpy as np


def run_case(spec_version: str, hw, **case):
    """Run one registry case of ``spec_version`` ("decode_append", "decode_attention", "flash_decode")
    timing-only on ``hw``; returns the Timeline."""
    from .append import kv_cache_append
    from .run import decode_attention
    dtype = np.dtype(case.pop("dtype", "float32"))
    if spec_version == "decode_append":
        rows, heads, dim = case.pop("rows"), case.pop("kv_heads"), case.pop("head_dim")
        new = np.zeros((rows, heads, dim), dtype)
        cache = np.zeros((rows, 4, heads, dim), dtype)
        return kv_cache_append(new, new, cache, cache, np.arange(rows), np.zeros(rows, np.int64), hw=hw,
                               timing_only=True, block_dim=1, **case).timeline
    lens = np.asarray(case.pop("lens"))
    n2, g, d = case.pop("kv_heads"), case.pop("group"), case.pop("head_dim")
    B = len(lens)
    page_size = case.pop("page_size", 0)
    if page_size:                       # paged: each sequence's pages in order, one after another
        per = -(-int(lens.max()) // page_size)
        case["block_table"] = np.arange(B * per).reshape(B, per)
        shape = (B * per, page_size, n2, d)
    else:
        shape = (B, int(lens.max()), n2, d)
    return decode_attention((B, n2 * g, d), (shape, dtype), None, lens, hw=hw,
                            antiquant=(tuple(np.ones((n2, d), np.float32) for _ in range(4)) if dtype == np.int8
                                       else None),
                            timing_only=True, block_dim=1, **case).timeline
