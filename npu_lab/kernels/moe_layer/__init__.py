"""A whole MoE layer on the simulator (issue 20 §4, §4b).

* :mod:`.gather` -- the gather kernel after dispatch (``expanded_x = x[sorted_row_idx // K]``);
* :mod:`.layer` -- ``moe_layer`` (router MatMul → gating → dispatch → gather → expert FFNs → combine),
  its stage table, the timing-only ``moe_layer_timing`` and the plain numpy ``moe_layer_reference``;
* :mod:`.fusion` -- router MatMul + gating, Gather + MatMul: fused against the unfused chain;
* :mod:`.partition` -- which dimension to split (B, S, tileB > 1, E) and the address arithmetic of each;
* :mod:`.presets` -- router and layer configurations of Mixtral-, Qwen-MoE- and DeepSeek-V3-like models.
"""

from .fusion import gather_matmul_fusion, router_gating_fusion
from .gather import gather_rows
from .partition import SPLITS, block_segments, copy_params, coverage, naive_segments, num_blocks, split_table
from .presets import ROUTER_PRESETS, RouterPreset, gating_share_table, route_preset
from .layer import (ACTIVATIONS, STAGES, MoeLayerConfig, MoeLayerResult, moe_layer, moe_layer_reference,
                    moe_layer_timing, run_gating, stage_table)

__all__ = ["ACTIVATIONS", "STAGES", "MoeLayerConfig", "MoeLayerResult", "gather_rows", "moe_layer",
           "moe_layer_reference", "moe_layer_timing", "run_gating", "stage_table", "gather_matmul_fusion",
           "router_gating_fusion", "SPLITS", "block_segments", "copy_params", "coverage", "naive_segments",
           "num_blocks", "split_table", "ROUTER_PRESETS", "RouterPreset", "gating_share_table", "route_preset"]
