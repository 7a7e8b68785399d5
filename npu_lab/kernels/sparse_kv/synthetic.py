"""Seeded synthetic K/V with the structure token selection relies on, and the error-vs-memory sweep.

The generative model (per head; a stand-in for a real model's cache, stated so every figure it
gives can be traced to it). Dimensions split into "content" channels (the first 3/4) and "outlier"
channels (the last 1/4, where queries are near zero). In logit units (q·k/√D):

* queries are ``√D·u + r_t + noise`` with ``u`` a unit content direction: a key with ``+p·u`` gets
  a logit of +p from every query;
* the first ``sinks`` tokens get ``+sink_pull·u`` (attention sinks, StreamingLLM) and ``heavy``
  random positions ``+heavy_pull·u`` (heavy hitters, H2O);
* a smooth positional signal ``r_t`` (an AR(1) process with correlation length ``recency``
  tokens and norm ``recency_norm``) is added to the query *and* the key at position t: a query
  resembles the keys near it — the recency bias;
* keys are N(0, 1) noise in the content channels; ``outliers`` random positions get a large key
  (norm ``outlier_norm``) in the outlier channels: long keys that no query attends to (the case
  the key-norm score gets wrong; real LLM keys have such outlier channels);
* values are N(0, 1).

The observation window is the last ``window`` queries at positions S−window..S−1; the evaluation
queries are the next ``future`` queries (positions S..S+future−1), which were not used to choose.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .reference import (SCORES, AttentionError, check_keep_ratio, check_sinks, compress_kv, importance, kv_bytes,
                        n_keep_of, select_tokens)


@dataclass
class SyntheticKV:
    """k, v [H, S, D]; queries [H, window, D] (observation window); eval_queries [H, future, D];
    ``heavy`` [H, n] and ``outliers`` [H, n]: the positions the model planted."""

    k: np.ndarray
    v: np.ndarray
    queries: np.ndarray
    eval_queries: np.ndarray
    heavy: np.ndarray
    outliers: np.ndarray


def _whole(name, x, lo):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral) or x < lo:
        raise ValueError(f"{name} must be a whole number >= {lo}, got {x!r}")
    return int(x)


def synthetic_kv(heads: int = 4, tokens: int = 512, head_dim: int = 64, *, sinks: int = 4, heavy: int = 8,
                 outliers: int = 16, window: int = 16, future: int = 8, sink_pull: float = 6.0,
                 heavy_pull: float = 5.0, outlier_norm: float = 12.0, recency: float = 32.0,
                 recency_norm: float = 6.0, seed: int = 0, dtype=np.float32) -> SyntheticKV:
    """Seeded K/V and queries from the model in the module docstring (float16 or float32)."""
    H, S, D = (_whole(n, x, 1) for n, x in (("heads", heads), ("tokens", tokens), ("head_dim", head_dim)))
    W, F = _whole("window", window, 1), _whole("future", future, 1)
    sinks, heavy, outliers = (_whole(n, x, 0) for n, x in (("sinks", sinks), ("heavy", heavy), ("outliers", outliers)))
    if W > S:
        raise ValueError(f"window={W} queries cannot be the last of {S} tokens")
    if sinks + heavy + outliers > S:
        raise ValueError(f"sinks + heavy + outliers = {sinks + heavy + outliers} special tokens do not fit {S} tokens")
    if D < 4:
        raise ValueError("head_dim must be >= 4 (a quarter of the channels are the outlier channels)")
    dt = np.dtype(dtype)
    if dt not in (np.float16, np.float32):
        raise TypeError(f"dtype must be float16 or float32, got {dt}")
    rng = np.random.default_rng(seed)
    C = D - D // 4                                         # content channels; the rest are outlier channels
    rho = np.exp(-1.0 / float(recency))
    k = np.zeros((H, S, D)); v = rng.standard_normal((H, S, D))
    q_win = np.empty((H, W, D)); q_fut = np.empty((H, F, D))
    heavy_pos = np.empty((H, heavy), np.int64); out_pos = np.empty((H, outliers), np.int64)
    for h in range(H):
        u = np.zeros(D); u[:C] = rng.standard_normal(C); u /= np.linalg.norm(u)
        r = np.zeros((S + F, D))
        eps = rng.standard_normal((S + F, C)) / np.sqrt(C)
        r[0, :C] = eps[0]
        for t in range(1, S + F):                          # AR(1): unit norm, correlation rho**lag
            r[t, :C] = rho * r[t - 1, :C] + np.sqrt(1 - rho * rho) * eps[t]
        r *= recency_norm
        k[h, :, :C] = rng.standard_normal((S, C))
        k[h] += r[:S]
        k[h, :sinks] += sink_pull * u
        free = rng.permutation(np.arange(sinks, S))
        heavy_pos[h] = np.sort(free[:heavy]); out_pos[h] = np.sort(free[heavy:heavy + outliers])
        k[h, heavy_pos[h]] += heavy_pull * u
        w = rng.standard_normal((outliers, D - C))
        k[h, out_pos[h], C:] += outlier_norm * w / np.linalg.norm(w, axis=1, keepdims=True)
        q = np.sqrt(D) * u + r
        q[:, :C] += 0.5 * rng.standard_normal((S + F, C))
        q[:, C:] += 0.1 * rng.standard_normal((S + F, D - C))
        q_win[h], q_fut[h] = q[S - W:S], q[S:S + F]
    return SyntheticKV(k.astype(dt), v.astype(dt), q_win.astype(np.float32), q_fut.astype(np.float32),
                       heavy_pos, out_pos)


def error_vs_memory(data: SyntheticKV, keep_ratios=(0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0), *,
                    scores=SCORES, sinks: int = 4) -> pd.DataFrame:
    """One row per (score, keep_ratio): n_keep, memory_fraction (kept bytes ÷ full, positions
    included), bytes_saved, error (relative attention-output error on the evaluation queries)."""
    if not isinstance(data, SyntheticKV):
        raise TypeError(f"data must be a SyntheticKV (synthetic_kv(...)), got {type(data).__name__}")
    ratios = [check_keep_ratio(r) for r in keep_ratios]
    if not ratios:
        raise ValueError("keep_ratios must not be empty")
    H, S, D = data.k.shape
    err = AttentionError(data.eval_queries, data.k, data.v)       # the logits once, one masked softmax per row
    full = kv_bytes(H, S, D, data.k.itemsize)
    rows, masks = [], []
    for score in scores:
        order = select_tokens(importance(data.k, score, data.queries), S, check_sinks(sinks, S))
        for r in ratios:
            n = n_keep_of(S, r, sinks)
            mask = np.zeros((H, S), dtype=bool)
            np.put_along_axis(mask, order[:, :n].astype(np.int64), True, axis=1)
            masks.append(mask)
            kept = kv_bytes(H, n, D, data.k.itemsize, positions=n < S)
            rows.append(dict(score=score, keep_ratio=r, n_keep=n, memory_fraction=kept / full, bytes_saved=full - kept))
    df = pd.DataFrame(rows)
    df["error"] = err.of_many(np.stack(masks))
    return df


def selection_overlap(data: SyntheticKV, keep_ratio: float = 0.3, sinks: int = 4, a: str = "key_norm",
                      b: str = "window") -> pd.DataFrame:
    """Per head: how many kept tokens scores ``a`` and ``b`` share (Jaccard), and how many of the
    planted heavy hitters / norm outliers each keeps — they choose differently."""
    ca = compress_kv(data.k, data.v, keep_ratio, sinks, a, queries=data.queries)
    cb = compress_kv(data.k, data.v, keep_ratio, sinks, b, queries=data.queries)
    rows = []
    for h in range(data.k.shape[0]):
        ma, mb = ca.mask[h], cb.mask[h]
        rows.append({"head": h, "jaccard": float((ma & mb).sum() / (ma | mb).sum()),
                     f"heavy kept ({a})": int(ma[data.heavy[h]].sum()),
                     f"heavy kept ({b})": int(mb[data.heavy[h]].sum()),
                     f"outliers kept ({a})": int(ma[data.outliers[h]].sum()),
                     f"outliers kept ({b})": int(mb[data.outliers[h]].sum()),
                     "heavy planted": len(data.heavy[h]), "outliers planted": len(data.outliers[h])})
    return pd.DataFrame(rows)


def error_figure(df: pd.DataFrame):
    """Plotly figure: attention-output error (log) against memory kept, one line per score."""
    import plotly.graph_objects as go
    need = {"score", "memory_fraction", "error"}
    if not isinstance(df, pd.DataFrame) or not need <= set(df.columns):
        raise ValueError(f"error_figure takes error_vs_memory(...)'s DataFrame (columns {sorted(need)})")
    fig = go.Figure()
    for score, g in df.groupby("score", sort=False):
        g = g[g.error > 0]
        fig.add_trace(go.Scatter(x=(100 * g.memory_fraction).round(2), y=g.error.round(6), mode="lines+markers",
                                 name=score))
    fig.update_layout(xaxis_title="memory kept (% of the full K/V, positions included)",
                      yaxis_title="relative attention-output error", yaxis_type="log", height=380,
                      margin=dict(l=60, r=20, t=30, b=50))
    return fig
