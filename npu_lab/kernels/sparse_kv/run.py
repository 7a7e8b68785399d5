"""Host side of the sparse-KV kernel: validate, score, tile, launch, and build the fresh mask.

The kernel's results equal the reference exactly (a selection and a copy: no arithmetic on K/V):
``indices == select_tokens(importance(...), n_keep, sinks)`` and ``k == k[h, indices]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...hardware import HardwareSpec
from ...lang import GlobalTensor, launch
from ...presets import get_preset
from ...sim.timeline import Timeline
from .kernel import SparseKvTiling, sparse_kv_kernel, sparse_kv_tiling
from .reference import _kv, importance, kv_bytes, n_keep_of


@dataclass
class SparseKvRun:
    """``k``, ``v`` [H, n_keep, D] and ``indices`` [H, n_keep] int32 in the kernel's order (sinks,
    then descending score; None in a timing-only run); ``mask`` [H, S] bool (fresh);
    ``scores`` [H, S] float32 (the kernel's input); ``timeline``; ``tiling``; the bytes."""

    k: np.ndarray | None
    v: np.ndarray | None
    indices: np.ndarray | None
    mask: np.ndarray | None
    scores: np.ndarray
    n_keep: int
    timeline: Timeline
    tiling: SparseKvTiling
    bytes_full: int
    bytes_kept: int

    @property
    def bytes_saved(self) -> int:
        return self.bytes_full - self.bytes_kept


def compress_kv_npu(k, v, keep_ratio, sinks: int = 4, score: str = "key_norm", *, queries=None,
                    hw: HardwareSpec | str = "ascend-910b2", rows_per_tile: int | None = None,
                    timing_only: bool = False) -> SparseKvRun:
    """:func:`~.reference.compress_kv` on the simulator: k, v [H, S, D] float16/float32 (D·itemsize
    a multiple of 32 B, S ≤ 4096). The host computes the importance scores (``score``,
    ``queries`` as for the reference); the kernel does the per-head top-k and the gather."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    if not isinstance(hw, HardwareSpec):
        raise TypeError(f"hw must be a HardwareSpec or a preset name, got {type(hw).__name__}")
    k, v = _kv(k, v)
    H, S, D = k.shape
    n_keep = n_keep_of(S, keep_ratio, sinks)
    scores = importance(k, score, queries)
    t = sparse_kv_tiling(H, S, D, n_keep, int(sinks), k.itemsize, hw, rows_per_tile)
    gm = lambda a, name: GlobalTensor.from_array(np.ascontiguousarray(a).ravel(), name, timing_only=timing_only)
    k_out = GlobalTensor.empty(H * n_keep * D, k.dtype, "k_out", timing_only=timing_only)
    v_out = GlobalTensor.empty(H * n_keep * D, k.dtype, "v_out", timing_only=timing_only)
    idx = GlobalTensor.empty(H * n_keep, np.int32, "indices", timing_only=timing_only)
    tl = launch(sparse_kv_kernel, H, gm(scores, "scores"), gm(k, "k"), gm(v, "v"), k_out, v_out, idx, t.pack(),
                hw=hw, timing_only=timing_only, name="sparse_kv_compress")
    full, kept = kv_bytes(H, S, D, k.itemsize), kv_bytes(H, n_keep, D, k.itemsize, positions=n_keep < S)
    if timing_only:
        return SparseKvRun(None, None, None, None, scores, n_keep, tl, t, full, kept)
    indices = idx.data.reshape(H, n_keep).copy()
    mask = np.zeros((H, S), dtype=bool)                  # fresh every call, from the kernel's indices
    np.put_along_axis(mask, indices.astype(np.int64), True, axis=1)
    return SparseKvRun(k_out.data.reshape(H, n_keep, D).copy(), v_out.data.reshape(H, n_keep, D).copy(), indices,
                       mask, scores, n_keep, tl, t, full, kept)
