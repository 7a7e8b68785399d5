"""int8 KV with per-channel antiquant (v5): the host quantises the cache once, the kernel
dequantises each chunk on load.

IFA's formula (ops-transformer attention/incre_flash_attention/docs/IFA算子设计介绍.md, "AntiQuant":
C = A * (B + offset) × scale): the offset is *added* to the int8 value, then the sum is scaled —
per channel here: one (scale, offset) per (KV head, d), shared by every sequence and position.

Quantisation (host side, asymmetric per channel over all cached positions): scale = (hi − lo) / 254,
offset = (hi + lo) / (2 · scale), k_int8 = clip(round(k / scale − offset), −127, 127), so that
(k_int8 + offset) · scale ≈ k with an error of at most scale / 2 per element.
"""

from __future__ import annotations

import numpy as np


def quantize_kv_int8(cache, seq_lens=None):
    """``cache`` [B, max_len, N2, D] (float) → ``(int8 cache, scale [N2, D], offset [N2, D])``
    (float32). ``seq_lens``: only the cached positions set the range (default: all)."""
    c = np.asarray(cache, np.float64)
    if c.ndim != 4:
        raise ValueError(f"cache must be [num_seqs, max_len, kv_heads, head_dim], got shape {c.shape}")
    if seq_lens is None:
        valid = c.reshape(-1, *c.shape[2:])
    else:
        valid = np.concatenate([c[b, :int(n)] for b, n in enumerate(seq_lens)], axis=0)
    lo, hi = valid.min(axis=0), valid.max(axis=0)
    scale = np.maximum(hi - lo, 1e-12) / 254.0
    offset = (hi + lo) / (2.0 * scale)         # the channel mid-range maps to int8 0
    q = np.clip(np.rint(c / scale - offset), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32), offset.astype(np.float32)


def dequantize_kv(cache_int8, scale, offset):
    """(int8 + offset) · scale in float64, broadcast per channel over [B, max_len]."""
    return (np.asarray(cache_int8, np.float64) + np.asarray(offset, np.float64)) * np.asarray(scale, np.float64)


def check_antiquant(antiquant, kv_heads: int, head_dim: int):
    """``antiquant`` = (k_scale, k_offset, v_scale, v_offset), each [kv_heads, head_dim] float32.
    Returns them as one float32 array [4, kv_heads, head_dim]."""
    if not isinstance(antiquant, (tuple, list)) or len(antiquant) != 4:
        raise TypeError("antiquant must be (k_scale, k_offset, v_scale, v_offset), each [kv_heads, head_dim] float32 "
                        "(quantize_kv_int8 returns a cache's scale and offset)")
    arrs = [np.asarray(a) for a in antiquant]
    for name, a in zip(("k_scale", "k_offset", "v_scale", "v_offset"), arrs):
        if a.shape != (kv_heads, head_dim):
            raise ValueError(f"{name} must be [kv_heads, head_dim] = [{kv_heads}, {head_dim}] (per channel), got {a.shape}")
        if not np.isfinite(a).all():
            raise ValueError(f"{name} has non-finite values")
    return np.stack(arrs).astype(np.float32)
