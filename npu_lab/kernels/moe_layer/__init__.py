"""A whole MoE layer on the simulator (issue 20 §4, §4b).

* :mod:`.gather` -- the gather kernel after dispatch (``expanded_x = x[sorted_row_idx // K]``);
* :mod:`.layer` -- ``moe_layer`` (router MatMul → gating → dispatch → gather → expert FFNs → combine),
  its stage table, the timing-only ``moe_layer_timing`` and the plain numpy ``moe_layer_reference``;
* :mod:`.fusion` -- router MatMul + gating, Gather + MatMul: the fused kernels against the unfused chain;
* :mod:`.fused_router` -- router MatMul + gating as one mixed AIC + AIV kernel;
* :mod:`.fused_gather` -- gather + expert up-GEMM as one cube kernel reading rows by index;
* :mod:`.cube_tile` -- the C tile loop both fused kernels share;
* :mod:`.partition` -- which dimension to split (B, S, tileB > 1, E) and the address arithmetic of each;
* :mod:`.presets` -- router and layer configurations of Mixtral-, Qwen-MoE- and DeepSeek-V3-like models.
"""

from .fused_gather import gather_matmul, gather_matmul_reference
from .fused_router import fused_router_gating, fused_router_reference
from .fusion import FUSIONS, best_gather_matmul, fusion_table, gather_matmul_fusion, router_gating_fusion
from .gather import gather_rows
from .partition import SPLITS, block_segments, copy_params, coverage, naive_segments, num_blocks, split_table
from .presets import ROUTER_PRESETS, RouterPreset, gating_share_table, route_preset
from .layer import (ACTIVATIONS, STAGES, MoeLayerConfig, MoeLayerResult, moe_layer, moe_layer_reference,
                    moe_layer_timing, run_gating, stage_table)

__all__ = ["ACTIVATIONS", "STAGES", "MoeLayerConfig", "MoeLayerResult", "gather_rows", "moe_layer",
           "moe_layer_reference", "moe_layer_timing", "run_gating", "stage_table", "gather_matmul_fusion",
           "router_gating_fusion", "FUSIONS", "best_gather_matmul", "fusion_table", "fused_router_gating",
           "fused_router_reference", "gather_matmul", "gather_matmul_reference", "SPLITS", "block_segments", "copy_params", "coverage", "naive_segments",
           "num_blocks", "split_table", "ROUTER_PRESETS", "RouterPreset", "gating_share_table", "route_preset"]
