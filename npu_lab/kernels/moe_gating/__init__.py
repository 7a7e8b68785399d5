"""MoeGatingTopK: the fused MoE gating operator (top-K experts per token + softmax weights).

In teaching order:

* :mod:`.reference` -- the independent numpy reference every kernel version is checked against, with the
  production routers' options (sigmoid, bias, grouped top-k, renorm, scaling, finished rows);
* :mod:`.dispatch` -- host-side token dispatch with capacity (MoeInitRouting's outputs) and the combine;
* :mod:`.tiling` -- the host-side tiling struct and the tileS rule;
* :mod:`.ub_budget` -- the Unified Buffer layout of every kernel version (what kernels allocate);
* :mod:`.discrete` -- the framework chain Softmax → TopK → Renormalise (three launches);
* :mod:`.fused` -- v1 (the article's kernel), v2 (double-buffered, and its sync pitfall), v2c (coalesced DMA);
* :mod:`.vectorized` -- v3 (vector top-K and softmax) and the polynomial exp;
* :mod:`.sorted_topk` -- v4, built like CANN's perf template (Sort32 + MrgSort + GatherMask);
* :mod:`.grouped` -- the full routing semantics (sigmoid, bias, grouped top-k, renorm, scaling, finished
  rows, extra outputs), built like CANN's MoeGatingTopK; :mod:`.grouped_host` its host side;
* :mod:`.templates` -- the template choice by shape and renorm (Perf / EKFullLoad / KFullLoad / KRenorm,
  CANN's priority order);
* :mod:`.large_e` -- E in UB-sized chunks, a running top-K (KRenorm) and the online max / sum (KFullLoad);
* :mod:`.run` -- the host API: ``moe_gating_topk`` (numbers + time), ``simulate_moe_gating`` (time);
* :mod:`.sweep` -- tileS sweeps, the autotuner, the shape-bucket tables;
* :mod:`.buckets` -- the committed bucket tables: every fused version's default tileS;
* :mod:`.article` -- fitting the model to the article's table and checking its claims.
"""

from .reference import (GATING_OPTION_DEFAULTS, GROUP_SELECT_MODES, NONFINITE_MODES, SCORE_FUNCTIONS, GatingOutputs,
                        moe_gating_topk_reference, softmax_topk_renormalise_reference)
from .dispatch import DROP_POLICIES, MoeDispatch, moe_combine, moe_dispatch
from .tiling import (
    MOE_UB_VERSIONS,
    MoeGatingTiling,
    UbBudgetError,
    UbBuffer,
    article_calculate_tiling,
    article_ub_estimate_bytes,
    calculate_moe_gating_tiling,
    moe_ub_budget,
    moe_ub_bytes,
    moe_ub_capacity,
)
from .run import VERSIONS, MoeGatingResult, default_tile_s, unsupported_reason, moe_gating_topk, plan_moe_gating, simulate_moe_gating, ub_used_bytes
from .sweep import ARTICLE_TILE_S, TuneResult, autotune, bucket_table, lookup_tile_s, sweep
from .sorted_topk import MoeGatingV4Tiling, calculate_moe_gating_v4_tiling, moe_gating_v4_ub_bytes
from .vectorized import fast_exp_max_rel_error, fast_exp_numpy
from .templates import TemplateChoice, choose_moe_template, moe_gating_topk_auto, template_sweep, template_sweep_figure
from .article import (FitResult, exp_speedup, fit_article_preset, fit_hardware,
                      reproduce_article_claims)

__all__ = [
    "MOE_UB_VERSIONS", "MoeGatingTiling", "UbBudgetError", "NONFINITE_MODES", "UbBuffer", "article_calculate_tiling",
    "article_ub_estimate_bytes", "calculate_moe_gating_tiling", "moe_gating_topk_reference",
    "moe_ub_budget", "moe_ub_bytes", "moe_ub_capacity", "softmax_topk_renormalise_reference",
    "VERSIONS", "MoeGatingResult", "default_tile_s", "unsupported_reason", "moe_gating_topk", "plan_moe_gating", "simulate_moe_gating",
    "ub_used_bytes", "ARTICLE_TILE_S", "TuneResult", "autotune", "bucket_table", "lookup_tile_s",
    "sweep", "fast_exp_max_rel_error", "fast_exp_numpy", "FitResult", "exp_speedup",
    "fit_article_preset", "fit_hardware", "reproduce_article_claims", "MoeGatingV4Tiling",
    "calculate_moe_gating_v4_tiling", "moe_gating_v4_ub_bytes", "GATING_OPTION_DEFAULTS", "GROUP_SELECT_MODES",
    "SCORE_FUNCTIONS", "GatingOutputs", "DROP_POLICIES", "MoeDispatch", "moe_combine", "moe_dispatch",
    "TemplateChoice", "choose_moe_template", "moe_gating_topk_auto", "template_sweep", "template_sweep_figure",
]
