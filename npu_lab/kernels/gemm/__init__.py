"""GEMM on the cube core (issue 17 §3): C = A · B through GM -> L1 -> L0A/L0B -> L0C -> GM.

* :func:`gemm_reference` — float64 accumulation, cast as the cube's dtype rules say;
* :func:`gemm_tiling` / :class:`GemmTiling` — the host-side tiling (Ascend C's TCubeTiling field
  names: singleCoreM/N/K, baseM/N/K, depthA1/B1, stepKa/Kb, dbL0A/B/C) within L1/L0 capacities,
  and the decomposition of the one-dimensional blockDim into (M-tile, N-tile, K-split) tasks;
* :func:`gemm` — run a version: ``"v1"`` naive (one base tile at a time, no reuse), ``"v2"``
  L1-tiled (A panel reused across N, K panels), ``"v3"`` v2 double-buffered (the queues give the
  overlap), ``"v4"`` v3 with a K-split whose partial sums meet in GM by ``SetAtomicAdd``;
* :mod:`.precision` — fp32 vs fp16 accumulation, int8 weights, Kahan, the article's "correction";
* :func:`cube_article_claims` — the second article's hardware claims checked (``data/``).
"""

from .article_claims import cube_article_claims
from .precision import accumulation_error, article_fp32_correction, int8_weight_error_cost, kahan_lesson, kahan_sum_fp32
from .reference import gemm_reference, gemm_out_dtype
from .run import GEMM_VERSIONS, gemm, gemm_ladder, gemm_roofline
from .tiling import GemmTiling, block_tasks, gemm_tiling

__all__ = ["gemm_reference", "gemm_out_dtype", "gemm", "gemm_ladder", "gemm_roofline", "GEMM_VERSIONS", "GemmTiling",
           "gemm_tiling", "block_tasks", "cube_article_claims", "accumulation_error", "int8_weight_error_cost",
           "kahan_lesson", "kahan_sum_fp32", "article_fp32_correction"]
