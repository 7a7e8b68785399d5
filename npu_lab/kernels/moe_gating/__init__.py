"""MoeGatingTopK: the fused MoE gating operator (top-K experts per token + softmax weights).

* :mod:`.reference` -- the independent numpy reference every kernel version is checked against;
* :mod:`.tiling` -- the host-side tiling struct, the UB budget per kernel version, the tileS rule.
"""

from .reference import (
    NONFINITE_MODES,
    moe_gating_topk_reference,
    softmax_topk_renormalise_reference,
)
from .tiling import (
    MOE_UB_VERSIONS,
    MoeGatingTiling,
    UbBuffer,
    article_calculate_tiling,
    article_ub_estimate_bytes,
    calculate_moe_gating_tiling,
    moe_ub_budget,
    moe_ub_bytes,
    moe_ub_capacity,
)

__all__ = [
    "MOE_UB_VERSIONS",
    "MoeGatingTiling",
    "NONFINITE_MODES",
    "UbBuffer",
    "article_calculate_tiling",
    "article_ub_estimate_bytes",
    "calculate_moe_gating_tiling",
    "moe_gating_topk_reference",
    "moe_ub_budget",
    "moe_ub_bytes",
    "moe_ub_capacity",
    "softmax_topk_renormalise_reference",
]
