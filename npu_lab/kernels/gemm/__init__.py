"""GEMM on the cube core (issue 17 §3): C = A · B through GM -> L1 -> L0A/L0B -> L0C -> GM.

* :func:`gemm_reference` — float64 accumulation, cast as the cube's dtype rules say;
* :func:`gemm_tiling` / :class:`GemmTiling` — the host-side tiling (Ascend C's TCubeTiling field
  names: singleCoreM/N/K, baseM/N/K, depthA1/B1, stepKa/Kb, dbL0A/B/C) within L1/L0 capacities,
  and the decomposition of the one-dimensional blockDim into (M-tile, N-tile, K-split) tasks;
* :func:`gemm` — run a version: ``"v1"`` naive (one base tile at a time, no reuse), ``"v2"``
  L1-tiled (A panel reused across N, K panels), ``"v3"`` v2 double-buffered (the queues give the
  overlap), ``"v4"`` v3 with a K-split whose partial sums meet in GM by ``SetAtomicAdd``.
"""

from .reference import gemm_reference, gemm_out_dtype
from .run import GEMM_VERSIONS, gemm, gemm_ladder, gemm_roofline
from .tiling import GemmTiling, block_tasks, gemm_tiling

__all__ = ["gemm_reference", "gemm_out_dtype", "gemm", "gemm_ladder", "gemm_roofline", "GEMM_VERSIONS", "GemmTiling",
           "gemm_tiling", "block_tasks"]
