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


#: Extra C++ builds of the decode listings, beside the float / half ones every listing whose input
#: dtype is a ``DTYPE_<INPUT>`` macro gets (npu_lab.cpp.compile_check.DTYPES): listing -> (the
#: dtype macro, the C++ type it stands for, the chips, why). bfloat16 K/V: the Python kernel widens
#: them by their bits (attention.py: ShiftLeft, a masked Duplicate, Copy, Gather — the simulator has
#: no bfloat16 Cast), while the listing's ``sizeof(T) == 2`` branch is the device's
#: ``Cast<float, bfloat16_t>`` with CAST_NONE (asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/
#: 类型转换/Cast.md; impl/basic_api/dav_c220/kernel_operator_vec_vconv_impl.h has the bfloat16_t ->
#: float overload, CAST_NONE only). So this build is compiled, not traced against the Python calls.
CPP_BUILDS = {
    "decode/attention.cpp": (("DTYPE_K", "bfloat16_t", ("ascend-910b2",),
                              "bfloat16 K/V: Cast<float, bfloat16_t> (CAST_NONE) in the sizeof(T) == 2 branch"),),
}


def cpp_build_text(listing: str, macro: str, cpp_type: str) -> str:
    """The listing's text with its dtype ``macro`` replaced by ``cpp_type`` (what the operator
    build's ``-DDTYPE_K=bfloat16_t`` does), for :func:`npu_lab.cpp.compile_check.compile_listing`."""
    from pathlib import Path

    import re

    if listing not in CPP_BUILDS:
        raise ValueError(f"no extra C++ build registered for {listing!r}; registered: {', '.join(CPP_BUILDS)}")
    builds = [b for b in CPP_BUILDS[listing] if b[:2] == (macro, cpp_type)]
    if not builds:
        raise ValueError(f"{listing} registers the builds {[b[:2] for b in CPP_BUILDS[listing]]}, not {(macro, cpp_type)}")
    text = (Path(__file__).resolve().parents[1] / listing).read_text(encoding="utf-8")
    if not re.search(rf"\b{macro}\b", text):
        raise ValueError(f"{listing} no longer uses {macro}: update CPP_BUILDS")
    return re.sub(rf"\b{macro}\b", cpp_type, text)
