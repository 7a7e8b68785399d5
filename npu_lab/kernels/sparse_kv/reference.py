"""Sparse KV compression, the numpy reference (issue 19 §1): keep the first ``sinks`` tokens
(attention sinks, StreamingLLM) plus the most important other tokens, per head, up to
``keep_ratio`` of the sequence; measure the memory saved and the attention-output error.

Shapes: k, v [H, S, D] (one layer's cache, H kv heads, S tokens, D head dim; float16 or float32);
queries [H, W, D] (the observation window: the last W queries, SnapKV); eval_queries [H, F, D]
(the queries that will read the compressed cache, e.g. the next F decode steps).

Importance scores (higher = keep), :data:`SCORES`:

* ``"key_norm"`` — the article's: mean of k² over the head dim (‖k‖² / D) per token. It needs no
  query, and it is what the article's kernel computes; nothing says a long key is an attended one.
* ``"window"`` — accumulated attention over the observation window (SnapKV, Li et al. 2024; the
  heavy-hitter idea of H2O, Zhang et al. 2023, restricted to the last W queries):
  ``Σ_w softmax(q_w · Kᵀ / √D)`` per token. No pooling (SnapKV also max-pools over positions).
* ``"recent"`` — the token's position (StreamingLLM: sinks + the most recent tokens), a baseline.

Selection rule (the kernel's, so the two agree exactly): ``n_keep = max(sinks, floor(keep_ratio ·
S))`` tokens per head (at least 1); the sinks first, then the rest by descending score, ties to the
lower position (Sort32 / MrgSort keep the earlier element of a tie:
asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/排序组合（ISASI）/Sort32.md, MrgSort.md).

Memory model: a kept token costs 2·D·itemsize bytes per head (K and V) plus a 4-byte int32
position (the compressed cache must know where each token was, for RoPE'd queries or a causal
mask); the dropped tokens cost nothing. The article's kernel writes a [seq_len, num_heads] uint32
mask instead, which it never clears — here the mask is a fresh array every call.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

SCORES = ("key_norm", "window", "recent")
KV_DTYPES = (np.dtype(np.float16), np.dtype(np.float32))
INDEX_BYTES = 4            # one int32 position per kept token per head


# ------------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------------


def _kv(k, v):
    k, v = np.asarray(k), np.asarray(v)
    if k.ndim != 3 or k.shape != v.shape:
        raise ValueError(f"k and v must both be [heads, tokens, head_dim] of one shape; got {k.shape} and {v.shape}")
    if k.dtype not in KV_DTYPES or v.dtype != k.dtype:
        raise TypeError(f"k and v must be float16 or float32 of one dtype; got {k.dtype} and {v.dtype}")
    if min(k.shape) < 1:
        raise ValueError(f"k and v must not be empty; got shape {k.shape}")
    if not (np.isfinite(k).all() and np.isfinite(v).all()):
        raise ValueError("k and v must be finite (a NaN or inf key makes every score undefined)")
    return k, v


def check_keep_ratio(keep_ratio) -> float:
    """``keep_ratio`` must be a real number in (0, 1] (1 keeps every token)."""
    if isinstance(keep_ratio, (bool, np.bool_)) or not isinstance(keep_ratio, numbers.Real) \
            or not 0.0 < float(keep_ratio) <= 1.0:
        raise ValueError(f"keep_ratio must be a number in (0, 1] (the fraction of tokens kept; 1 keeps all), "
                         f"got {keep_ratio!r}")
    return float(keep_ratio)


def check_sinks(sinks, tokens: int) -> int:
    """``sinks`` must be a whole number 0..tokens."""
    if isinstance(sinks, (bool, np.bool_)) or not isinstance(sinks, numbers.Integral) or sinks < 0:
        raise ValueError(f"sinks must be a whole number >= 0 (the first tokens always kept), got {sinks!r}")
    if sinks > tokens:
        raise ValueError(f"sinks={sinks} is more sinks than tokens: the cache holds {tokens} tokens per head; "
                         f"use sinks <= {tokens}")
    return int(sinks)


def n_keep_of(tokens: int, keep_ratio, sinks: int) -> int:
    """Tokens kept per head: ``max(sinks, floor(keep_ratio · tokens), 1)`` (the article's
    ``static_cast<uint32_t>(seq_len * keep_ratio)``, but never fewer than the sinks)."""
    r = check_keep_ratio(keep_ratio)
    s = check_sinks(sinks, tokens)
    return min(tokens, max(s, int(np.floor(r * tokens + 1e-9)), 1))


def _queries(name, q, k):
    q = np.asarray(q)
    if q.ndim != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2] or q.shape[1] < 1:
        raise ValueError(f"{name} must be [heads, n, head_dim] = [{k.shape[0]}, n >= 1, {k.shape[2]}] to match k; "
                         f"got {q.shape}")
    if not np.issubdtype(q.dtype, np.floating) or not np.isfinite(q).all():
        raise TypeError(f"{name} must be finite floats, got {q.dtype}")
    return q.astype(np.float64)


# ------------------------------------------------------------------------------------------------
# scores, selection, attention
# ------------------------------------------------------------------------------------------------


def _softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def importance(k, score: str = "key_norm", queries=None) -> np.ndarray:
    """Importance of every token, [H, S] float32 (see the module docstring). ``"window"`` needs
    ``queries`` [H, W, D]."""
    k = np.asarray(k)
    if k.ndim != 3:
        raise ValueError(f"k must be [heads, tokens, head_dim], got shape {k.shape}")
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    k64 = k.astype(np.float64)
    if score == "key_norm":
        s = (k64 * k64).mean(axis=2)
    elif score == "recent":
        s = np.broadcast_to(np.arange(k.shape[1], dtype=np.float64), k.shape[:2])
    else:
        if queries is None:
            raise ValueError("score='window' accumulates the attention of the observation window: pass "
                             "queries [heads, W, head_dim] (the last W queries)")
        q = _queries("queries", queries, k)
        p = _softmax(q @ k64.transpose(0, 2, 1) / np.sqrt(k.shape[2]))     # [H, W, S]
        s = p.sum(axis=1)
    return np.ascontiguousarray(s, dtype=np.float32)


def select_tokens(scores, n_keep: int, sinks: int) -> np.ndarray:
    """Kept positions [H, n_keep] int32, in the kernel's order: the sinks 0..sinks−1, then the
    other tokens by descending float32 score, ties to the lower position."""
    s = np.asarray(scores, dtype=np.float32)
    if s.ndim != 2:
        raise ValueError(f"scores must be [heads, tokens], got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite (the kernel marks sinks with +inf and padding with -inf)")
    S = s.shape[1]
    sinks = check_sinks(sinks, S)
    if isinstance(n_keep, bool) or not isinstance(n_keep, numbers.Integral) or not max(sinks, 1) <= n_keep <= S:
        raise ValueError(f"n_keep must be a whole number in max(sinks, 1)..tokens = {max(sinks, 1)}..{S}, got {n_keep!r}")
    key = s.copy()
    key[:, :sinks] = np.inf
    order = np.argsort(-key, axis=1, kind="stable")
    return order[:, :n_keep].astype(np.int32)


def attention(q, k, v) -> np.ndarray:
    """softmax(q · Kᵀ / √D) · V per head: q [H, F, D], k / v [H, S, D] -> [H, F, D] float64."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    return _softmax(q @ k.transpose(0, 2, 1) / np.sqrt(k.shape[2])) @ v


class AttentionError:
    """The attention-output error of many masks against one full attention: the logits
    q · Kᵀ / √D [H, F, S] and the full output are computed once, each :meth:`of` is one masked
    softmax (what a slider needs). ``eval_queries`` [H, F, D], ``k``, ``v`` [H, S, D]."""

    def __init__(self, eval_queries, k, v):
        q = np.asarray(eval_queries, np.float64)
        self.v = np.asarray(v, np.float64)
        self.logits = q @ np.asarray(k, np.float64).transpose(0, 2, 1) / np.sqrt(np.shape(k)[2])
        self.full = _softmax(self.logits) @ self.v
        self.full_norm = float(np.linalg.norm(self.full))

    def of(self, mask) -> float:
        """‖o_kept − o_full‖ / ‖o_full‖ (Frobenius, all heads and queries) for ``mask`` [H, S] bool."""
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != self.logits[:, 0, :].shape:
            raise ValueError(f"mask must be [heads, tokens] = {self.logits[:, 0, :].shape} bool, got shape {mask.shape}")
        return float(self.of_many(mask[None])[0])

    def of_many(self, masks) -> np.ndarray:
        """:meth:`of` for M masks [M, H, S] at once (one batched softmax): [M] float64."""
        masks = np.asarray(masks, dtype=bool)
        if masks.ndim != 3 or masks.shape[1:] != self.logits[:, 0, :].shape or not masks.any(axis=2).all():
            raise ValueError(f"masks must be [M, heads, tokens] = [M, *{self.logits[:, 0, :].shape}] bool with at "
                             f"least one kept token per head, got shape {masks.shape}")
        x = np.where(masks[:, :, None, :], self.logits[None], -np.inf)
        x = np.exp(x - x.max(axis=3, keepdims=True))
        kept = (x / x.sum(axis=3, keepdims=True)) @ self.v[None]
        return np.sqrt(((kept - self.full[None]) ** 2).sum(axis=(1, 2, 3))) / self.full_norm


def attention_error(eval_queries, k, v, mask) -> float:
    """Relative error of the attention output over the kept tokens against full attention:
    ‖o_kept − o_full‖ / ‖o_full‖ over all heads and queries (Frobenius norms)."""
    return AttentionError(eval_queries, k, v).of(mask)


# ------------------------------------------------------------------------------------------------
# compress_kv
# ------------------------------------------------------------------------------------------------


@dataclass
class CompressedKV:
    """``k``, ``v`` [H, n_keep, D] (kept tokens in position order); ``indices`` [H, n_keep] int32
    (their positions, ascending); ``mask`` [H, S] bool (True = kept; a new array every call);
    ``bytes_full`` / ``bytes_kept`` (K + V + int32 positions) / ``bytes_saved``; ``error``: the
    relative attention-output error for ``eval_queries`` (None when none were given)."""

    k: np.ndarray
    v: np.ndarray
    indices: np.ndarray
    mask: np.ndarray
    n_keep: int
    sinks: int
    score: str
    bytes_full: int
    bytes_kept: int
    error: float | None

    @property
    def bytes_saved(self) -> int:
        return self.bytes_full - self.bytes_kept

    @property
    def memory_fraction(self) -> float:
        """bytes_kept / bytes_full."""
        return self.bytes_kept / self.bytes_full


def kv_bytes(heads: int, tokens: int, head_dim: int, itemsize: int, *, positions: bool = False) -> int:
    """Bytes of one layer's K and V for ``tokens`` tokens per head (+ int32 positions if asked)."""
    return heads * tokens * (2 * head_dim * itemsize + (INDEX_BYTES if positions else 0))


def compress_kv(k, v, keep_ratio, sinks: int = 4, score: str = "key_norm", *, queries=None,
                eval_queries=None) -> CompressedKV:
    """Keep the first ``sinks`` tokens plus the top tokens by ``score`` up to ``keep_ratio`` of
    the S tokens, per head. k, v [H, S, D] float16/float32; ``queries`` [H, W, D] for
    ``score="window"``; ``eval_queries`` [H, F, D] to measure the attention-output error.
    Returns :class:`CompressedKV`. Bad input raises before anything is computed."""
    k, v = _kv(k, v)
    H, S, D = k.shape
    n_keep = n_keep_of(S, keep_ratio, sinks)
    if eval_queries is not None:
        eval_queries = _queries("eval_queries", eval_queries, k)
    scores = importance(k, score, queries)
    order = select_tokens(scores, n_keep, sinks)
    idx = np.sort(order, axis=1)
    mask = np.zeros((H, S), dtype=bool)                  # fresh every call (the article's never is)
    np.put_along_axis(mask, idx.astype(np.int64), True, axis=1)
    gather = idx[:, :, None].astype(np.int64)
    kc = np.take_along_axis(k, gather, axis=1)
    vc = np.take_along_axis(v, gather, axis=1)
    err = None if eval_queries is None else attention_error(eval_queries, k, v, mask)
    return CompressedKV(kc, vc, idx, mask, n_keep, int(sinks), score, kv_bytes(H, S, D, k.itemsize),
                        kv_bytes(H, n_keep, D, k.itemsize, positions=n_keep < S), err)
