"""Neighbouring cores sharing loads within one launch (issue 17 §5): the article's "clusters".

Ascend C on the 910B has no ``__shared__`` cluster memory, ``get_cluster_id`` or
``cluster_barrier``: what cores share is the L2 in front of HBM (asc-devkit docs/zh/guide/
算子实践参考/SIMD算子性能优化/内存访问/L2-Cache切分.md), and, inside one AI core, the AIC/AIV group of a
mixed kernel with its cross-core flags (:mod:`npu_lab.lang.cross_core`). So "cores in a cluster
read a B tile once" is, on this chip, "the second core's read of the tile hits L2".

:func:`shared_load_table` runs a GEMM version timing-only twice per shape — every read from HBM
(a cold L2, no reuse inside the launch: the model before issue 17 §5) and with
``L2Cache(share_within_launch=True)`` (a read of bytes the launch already touched is an L2 hit;
:mod:`npu_lab.sim.l2` says what that simplifies: first reader in block order misses, an upper
bound) — and reports HBM bytes, the fraction saved and the latency of both.
"""

from __future__ import annotations

import numpy as np

from ...hardware import HardwareSpec
from ...presets import get_preset
from ...sim.l2 import L2Cache
from .run import GEMM_VERSIONS, gemm

__all__ = ["shared_load_table", "SHARING_SHAPES"]

#: (M, N, K): square, square and a decode-like tall-skinny GEMM (small M: B dominates)
SHARING_SHAPES = ((256, 256, 256), (1024, 1024, 1024), (16, 2048, 2048))


def shared_load_table(shapes=SHARING_SHAPES, version: str = "v3", hw: HardwareSpec | str = "ascend-910b2"):
    """A DataFrame, one row per (M, N, K): HBM MB without and with within-launch L2 sharing, the
    fraction of HBM traffic sharing saves, L2-hit MB, and the latency (µs) of both runs."""
    import pandas as pd

    hw = get_preset(hw) if isinstance(hw, str) else hw
    if version not in GEMM_VERSIONS:
        raise ValueError(f"version must be one of {', '.join(GEMM_VERSIONS)}, got {version!r}")
    shapes = list(shapes)
    if not shapes or any(len(s) != 3 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1
                                            for v in s) for s in shapes):
        raise ValueError(f"shapes is a list of (M, N, K) whole numbers >= 1, got {shapes!r}")
    rows = []
    for M, N, K in shapes:
        _, cold = gemm((M, K), (K, N), version=version, hw=hw, timing_only=True)
        _, shared = gemm((M, K), (K, N), version=version, hw=hw, timing_only=True,
                         l2=L2Cache(hw, share_within_launch=True))
        rows.append({"M": M, "N": N, "K": K, "hbm_mb_each_core_reads": cold.hbm_bytes / 1e6,
                     "hbm_mb_shared": shared.hbm_bytes / 1e6,
                     "hbm_saved": 1.0 - shared.hbm_bytes / cold.hbm_bytes,
                     "l2_hit_mb": shared.l2_hit_bytes / 1e6,
                     "latency_us_each_core_reads": cold.total_us, "latency_us_shared": shared.total_us})
    return pd.DataFrame(rows).set_index(["M", "N", "K"])
