"""Host side of decode attention: validate, tile, launch (one launch, or two for FlashDecode), and
the memory-bound roofline of a decode step.

Tolerances against :func:`~.reference.decode_attention_reference` (float64): float32 K/V
``atol = rtol = 1e-5``; float16 K/V ``atol = rtol = 2e-3`` — the float16 inputs are exact in both,
the kernel accumulates in float32; bfloat16 K/V (uint16 bits) the same ``2e-3`` — widened to
float32 exactly by their bits, so only the float32 arithmetic differs; int8 K/V (v5) ``1e-4`` against the reference of the *dequantised*
cache (the error antiquant itself brings, against the float cache, is measured by
:func:`antiquant_error`, not bounded here) (:data:`TOLERANCE`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...hardware import HardwareSpec
from ...lang import GlobalTensor, launch
from ...presets import get_preset
from ...sim.timeline import Timeline
from .attention import decode_attention_kernel
from .combine import CombineTiling, flash_decode_combine_kernel
from .tiling import decode_tiling
from .quant import check_antiquant
from .validate import _whole, check_attention

#: (rtol, atol) of the kernels against the float64 reference, per K/V dtype
TOLERANCE = {np.dtype(np.float32): (1e-5, 1e-5), np.dtype(np.float16): (2e-3, 2e-3),
             np.dtype(np.uint16): (2e-3, 2e-3), np.dtype(np.int8): (1e-4, 1e-4)}   # uint16 = bfloat16 bits
VERSIONS = ("v1", "v2", "v3", "v4", "v5")


@dataclass
class DecodeResult:
    """``out`` [B, q_heads, D] float32 (None when timing-only), ``timeline``, ``tiling``, and the
    roofline: ``kv_bytes`` read, ``roofline_us`` (kv_bytes ÷ HBM bandwidth) and ``achieved``
    (roofline_us ÷ the run's time)."""

    out: np.ndarray | None
    timeline: Timeline
    tiling: object
    kv_bytes: int
    roofline_us: float

    @property
    def achieved(self) -> float:
        return self.roofline_us / self.timeline.total_us


class _Shape:
    """A stand-in for a cache in a timing-only run: shape and dtype, no data."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.ndim = tuple(shape), np.dtype(dtype), len(shape)


def kv_bytes_read(seq_lens, kv_heads: int, head_dim: int, itemsize: int) -> int:
    """Bytes of K and V a decode step must read: Σ_b seq_lens[b] · N2 · D · 2 (K and V) · itemsize."""
    return int(np.sum(seq_lens)) * kv_heads * head_dim * 2 * itemsize


def decode_roofline_us(seq_lens, kv_heads, head_dim, itemsize, hw: HardwareSpec | str = "ascend-910b2") -> float:
    """The memory-bound floor of a step: KV bytes ÷ the spec's HBM bandwidth (GB/s = 1e3 B/µs)."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    return kv_bytes_read(seq_lens, kv_heads, head_dim, itemsize) / (hw.hbm_bandwidth_gbps * 1e3)


def decode_attention(q, k_cache, v_cache, seq_lens, *, version: str = "v2", hw: HardwareSpec | str = "ascend-910b2",
                     chunk: int | None = None, splits: int | None = None, block_dim: int | None = None,
                     antiquant=None, block_table=None, timing_only: bool = False, _sync=None) -> DecodeResult:
    """One decode step: q [B, q_heads, D], k_cache / v_cache [B, max_len, kv_heads, D] (float16
    or float32, one dtype), seq_lens [B] (1..max_len). ``version``: "v1" whole S2 in the UB,
    "v2" S2 in chunks with online softmax, "v4" FlashDecode (S2 split over cores when
    B·N2 < 0.4 × cores, then a combine launch), "v5" v2 over int8 K/V with ``antiquant`` =
    (k_scale, k_offset, v_scale, v_offset) per channel [kv_heads, D] (:func:`.quant.quantize_kv_int8`),
    dequantised on load as (k + offset) · scale. ``block_dim``: blocks to spread the tasks over
    (default: the vector cores). In a timing-only run q, k_cache, v_cache may be
    shape tuples (with the K/V dtype given as ``(shape, dtype)``). ``block_table`` [B, max_pages]
    (int page ids): paged K/V as vLLM and IFA's PageAttention keep them — the caches are
    [num_pages, page_size, kv_heads, D], position p of sequence b in page ``block_table[b, p //
    page_size]``; every page a length reaches must be in the cache (checked before the launch).
    Returns :class:`DecodeResult`."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    for name, value in (("chunk", chunk), ("splits", splits), ("block_dim", block_dim)):
        if value is not None:
            _whole(name, value, 1)          # 1.5 or "8" would be truncated or fail deep inside
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}, got {version!r}")
    if version == "v3":
        return _decode_attention_v3(q, k_cache, v_cache, seq_lens, hw=hw, timing_only=timing_only,
                                    chunk=chunk, splits=splits, block_dim=block_dim, antiquant=antiquant,
                                    block_table=block_table, sync=_sync)
    if timing_only and isinstance(k_cache, tuple):
        (kshape, kdtype), q_shape = k_cache, tuple(q)
        kc = vc = _Shape(kshape, kdtype)
        # the checks of a full run, on shapes: a zero-strided q of the right shape costs nothing
        qa = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), q_shape, (0,) * len(q_shape))
        checked = check_attention(qa, kc, vc, seq_lens, int8=version == "v5" or kc.dtype == np.int8,
                                  block_table=block_table)
    else:
        int8 = version == "v5" or np.asarray(k_cache).dtype == np.int8
        checked = check_attention(q, k_cache, v_cache, seq_lens, int8=int8, block_table=block_table)
        q_shape = checked[0].shape
        qa, kc, vc = checked[:3]
    lens, G = checked[3], checked[4]
    table = checked[5] if block_table is not None else None
    B, nq, D = q_shape
    _, max_len, N2, _ = kc.shape
    page_size = max_pages = 0
    if table is not None:
        page_size, max_pages = max_len, table.shape[1]
        max_len = page_size * max_pages
    if D % 64:
        raise ValueError(f"head_dim={D}: the vector kernels work in 64-float slabs (one repeat); use 64 or 128")
    itemsize = kc.dtype.itemsize
    anti = None
    if itemsize == 1:                   # int8 K/V: v5, or v4's FlashDecode over int8 (v1 refuses)
        if version == "v1":
            raise ValueError("int8 K/V take version='v5' (or 'v4' for FlashDecode); v1 reads float K/V")
        if antiquant is None and not timing_only:
            raise ValueError("int8 K/V need antiquant=(k_scale, k_offset, v_scale, v_offset); quantize_kv_int8 makes them")
        anti = (check_antiquant(antiquant, N2, D) if antiquant is not None
                else np.ones((4, N2, D), np.float32))
    elif antiquant is not None:
        raise ValueError(f"antiquant is for int8 K/V (version='v5'); {version} reads {kc.dtype} K/V as they are")
    t = decode_tiling(B, N2, G, D, max_len, lens, itemsize, hw, version=version, chunk=chunk, splits=splits,
                      block_dim=block_dim, page_size=page_size, max_pages=max_pages, bf16=kc.dtype == np.uint16)
    tb = t.pack_with(lens)
    gm = (lambda a, n: GlobalTensor.from_array(a, n, timing_only=True)) if timing_only else \
        (lambda a, n: GlobalTensor.from_array(np.ascontiguousarray(a), n))
    if timing_only:
        q_gm = GlobalTensor.empty(B * nq * D, np.float32, "q", timing_only=True)
        k_gm = GlobalTensor.empty(int(np.prod(kc.shape)), kc.dtype, "k_cache", timing_only=True)
        v_gm = GlobalTensor.empty(int(np.prod(kc.shape)), kc.dtype, "v_cache", timing_only=True)
    else:
        q_gm, k_gm, v_gm = gm(qa.astype(np.float32), "q"), gm(kc, "k_cache"), gm(vc, "v_cache")
    o_gm = GlobalTensor.empty(t.tasks * G * D, np.float32, "out" if t.splits == 1 else "o_pieces",
                              timing_only=timing_only)
    lse_gm = None if t.splits == 1 else GlobalTensor.empty(t.tasks * G, np.float32, "lse", timing_only=timing_only)
    anti_gm = None if anti is None else gm(anti, "antiquant")
    table_gm = None if table is None else gm(table, "block_table")
    tl = launch(decode_attention_kernel, t.block_dim, q_gm, k_gm, v_gm, anti_gm, o_gm, lse_gm, tb, _sync, hw=hw,
                timing_only=timing_only, name=f"decode_attention {version}" + (" paged" if table is not None else ""),
                table_gm=table_gm)
    out_gm = o_gm
    if t.splits > 1:
        groups = B * N2
        cores = hw.vector_cores if block_dim is None else int(block_dim)
        ct = CombineTiling(groups, t.splits, G, D, -(-groups // min(cores, groups)))
        out_gm = GlobalTensor.empty(B * nq * D, np.float32, "out", timing_only=timing_only)
        tl2 = launch(flash_decode_combine_kernel, ct.block_dim, o_gm, lse_gm, out_gm, ct.pack(), hw=hw,
                     timing_only=timing_only, name="flash_decode_combine")
        tl = Timeline.concat([tl, tl2])
    out = None if timing_only else out_gm.data.reshape(B, nq, D).copy()
    kvb = kv_bytes_read(lens, N2, D, itemsize)
    return DecodeResult(out, tl, t, kvb, kvb / (hw.hbm_bandwidth_gbps * 1e3))


def _decode_attention_v3(q, k_cache, v_cache, seq_lens, *, hw, timing_only, chunk, splits, block_dim,
                         antiquant, block_table, sync) -> DecodeResult:
    """v3: Q·Kᵀ and P·V on the cube, the softmax on the vector cores, one mixed launch
    (:mod:`.attention_cv`). fp16 q and K/V only (the cube's half inputs; a float32 q is rounded to
    fp16 first, as a real C+V kernel's host would); its own fixed tiling (no chunk, splits,
    block_dim, paging or antiquant: each is refused by name rather than ignored)."""
    from .attention_cv import decode_attention_cv

    given = [n for n, v in (("chunk", chunk), ("splits", splits), ("block_dim", block_dim),
                            ("antiquant", antiquant), ("block_table", block_table), ("_sync", sync)) if v is not None]
    if given:
        raise ValueError(f"v3 (cube + vector) has its own fixed tiling and reads contiguous fp16 K/V: "
                         f"{', '.join(given)} is for v1/v2/v4/v5")
    hw = get_preset(hw) if isinstance(hw, str) else hw
    if timing_only and isinstance(k_cache, tuple):
        (kshape, kdtype) = k_cache
        if np.dtype(kdtype) != np.float16:
            raise ValueError(f"v3 reads fp16 K/V (the cube's half inputs), got {np.dtype(kdtype)}; use v5 for int8")
        q_shape = tuple(q)
        out, tl = decode_attention_cv(q_shape, tuple(kshape), tuple(kshape), seq_lens, hw=hw, timing_only=True)
        n2, d = kshape[2], kshape[3]
    else:
        kc, vc = np.asarray(k_cache), np.asarray(v_cache)
        if kc.dtype != np.float16 or vc.dtype != np.float16:
            raise ValueError(f"v3 reads fp16 K/V (the cube's half inputs), got {kc.dtype} / {vc.dtype}; "
                             "use v2 or v4 for float32 or bfloat16, v5 for int8")
        qa = np.asarray(q)
        if qa.dtype not in (np.float16, np.float32):
            raise TypeError(f"q must be float16 or float32, got {qa.dtype}")
        out, tl = decode_attention_cv(qa.astype(np.float16), kc, vc, seq_lens, hw=hw, timing_only=timing_only)
        n2, d = kc.shape[2], kc.shape[3]
    lens = np.asarray(seq_lens).reshape(-1)
    kvb = kv_bytes_read(lens, n2, d, 2)
    return DecodeResult(out, tl, None, kvb, kvb / (hw.hbm_bandwidth_gbps * 1e3))


def decode_ladder(batch: int = 4, context_len: int = 1024, q_heads: int = 32, kv_heads: int = 8, head_dim: int = 128,
                  dtype=np.float16, hw: HardwareSpec | str = "ascend-910b2", versions=VERSIONS) -> pd.DataFrame:
    """A timing-only run of each version at one shape (every sequence at ``context_len``; v5
    reads int8 K/V, the others ``dtype``): one row per version with its time, the KV bytes, the HBM roofline and the achieved fraction. A
    version that refuses the shape (v1 past the UB) gets its reason in ``note``."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    rows = []
    lens = np.full(batch, context_len)
    for v in versions:
        kv_dtype = np.int8 if v == "v5" else dtype
        try:
            r = decode_attention((batch, q_heads, head_dim), ((batch, context_len, kv_heads, head_dim), kv_dtype), None,
                                 lens, version=v, hw=hw, timing_only=True)
        except ValueError as e:
            rows.append(dict(version=v, time_us=np.nan, kv_bytes=kv_bytes_read(lens, kv_heads, head_dim,
                                                                               np.dtype(dtype).itemsize),
                             roofline_us=decode_roofline_us(lens, kv_heads, head_dim, np.dtype(dtype).itemsize, hw),
                             achieved=np.nan, splits=np.nan, launches=0, note=str(e).split(";")[0]))
            continue
        rows.append(dict(version=v, time_us=r.timeline.total_us, kv_bytes=r.kv_bytes, roofline_us=r.roofline_us,
                         achieved=r.achieved, splits=1 if r.tiling is None else r.tiling.splits, launches=len(r.timeline.launches), note=""))
    return pd.DataFrame(rows)


def antiquant_error(q, k_cache, v_cache, seq_lens, *, hw: HardwareSpec | str = "ascend-910b2") -> dict:
    """What int8 KV costs in accuracy and buys in bytes: quantise float K/V per channel, run v5,
    compare with the float64 reference of the *original* cache. Returns max / mean absolute error,
    the KV bytes of v2 (the given dtype) and v5 (int8), and both timelines' µs."""
    from .quant import quantize_kv_int8
    from .reference import decode_attention_reference
    kq, ks, ko = quantize_kv_int8(k_cache, seq_lens)
    vq, vs, vo = quantize_kv_int8(v_cache, seq_lens)
    r5 = decode_attention(q, kq, vq, seq_lens, version="v5", antiquant=(ks, ko, vs, vo), hw=hw)
    r2 = decode_attention(q, k_cache, v_cache, seq_lens, version="v2", hw=hw)
    ref = decode_attention_reference(q, k_cache, v_cache, seq_lens)
    err = np.abs(r5.out - ref)
    return dict(max_abs_error=float(err.max()), mean_abs_error=float(err.mean()),
                kv_bytes_v2=r2.kv_bytes, kv_bytes_v5=r5.kv_bytes,
                time_us_v2=r2.timeline.total_us, time_us_v5=r5.timeline.total_us)


def flash_decode_sweep(batches=(1, 2, 4, 8, 16, 32), context_len: int = 4096, q_heads: int = 64, kv_heads: int = 8,
                       head_dim: int = 128, dtype=np.float16, hw: HardwareSpec | str = "ascend-910b2") -> pd.DataFrame:
    """Where splitting S2 pays: timing-only v2 and v4 at each batch (every sequence at
    ``context_len``). Columns: batch, bn (B·N2), splits (v4's tiling: > 1 only when
    B·N2 < 0.4 × cores), v2_us, v4_us, speedup (v2 / v4), roofline_us."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    rows = []
    for b in batches:
        lens = np.full(int(b), context_len)
        shape = ((int(b), context_len, kv_heads, head_dim), dtype)
        r2 = decode_attention((int(b), q_heads, head_dim), shape, None, lens, version="v2", hw=hw, timing_only=True)
        r4 = decode_attention((int(b), q_heads, head_dim), shape, None, lens, version="v4", hw=hw, timing_only=True)
        rows.append(dict(batch=int(b), bn=int(b) * kv_heads, splits=r4.tiling.splits, v2_us=r2.timeline.total_us,
                         v4_us=r4.timeline.total_us, speedup=r2.timeline.total_us / r4.timeline.total_us,
                         roofline_us=r2.roofline_us))
    return pd.DataFrame(rows)
