"""A whole MoE layer on the simulator (issue 20 §4, §4b).

* :mod:`.gather` -- the gather kernel after dispatch (``expanded_x = x[sorted_row_idx // K]``);
* :mod:`.layer` -- ``moe_layer`` (router MatMul → gating → dispatch → gather → expert FFNs → combine),
  its stage table, the timing-only ``moe_layer_timing`` and the plain numpy ``moe_layer_reference``.
"""

from .gather import gather_rows
from .layer import (ACTIVATIONS, STAGES, MoeLayerConfig, MoeLayerResult, moe_layer, moe_layer_reference,
                    moe_layer_timing, run_gating, stage_table)

__all__ = ["ACTIVATIONS", "STAGES", "MoeLayerConfig", "MoeLayerResult", "gather_rows", "moe_layer",
           "moe_layer_reference", "moe_layer_timing", "run_gating", "stage_table"]
