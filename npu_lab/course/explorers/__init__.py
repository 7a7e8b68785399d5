"""ipywidgets explorers: what a copy costs (notebook 01) and MoeGatingTopK (notebooks 02 to 07).

Each explorer is a small class: its controls are attributes (``.S``, ``.E``, ``.tile_s``,
``.chip`` ...), ``.figure`` is a plotly ``go.FigureWidget`` (an
:class:`~npu_lab.course.figure_widget.ExplorerFigureWidget`, which does not merge the browser's
reports back: see its module) built once with its full layout (its axes let tick labels overflow, which spares plotly.js a
measurement per label on every redraw) and updated in place inside one
``fig.batch_update()``, ``.status`` is an HTML line, ``.widget`` is
the box to display (the explorer displays itself too), and ``update()`` recomputes from the
current control values. Setting a control's ``.value`` from code drives it exactly as a slider
move does; ``set(**values)`` changes several controls and redraws once.

Every number comes from timing-only simulations (:func:`~npu_lab.kernels.moe_gating.sweep`,
:func:`~npu_lab.kernels.moe_gating.simulate_moe_gating`), cached per configuration so moving
the tileS slider over values already seen costs well under a millisecond of simulation. While the
kernel is idle, an explorer precomputes the configurations its controls' next steps need, one
timing-only run per event-loop turn (``_base.warm_when_idle``), so a key press finds its run
cached; the TuningExplorer, DecodeExplorer and GemmExplorer read their runs from committed, checked
files (``data/``), because one of their runs can take longer than a press may wait. A move from the
browser sends only the traces that changed (one ``batch_update``); the full figure state, for
pages built later (Voila), is copied once the moves pause (``viz.sync_after_move``).
Configurations the library refuses (K > E, a tile that overflows the Unified Buffer, a row too
wide for one core) show the library's error message in ``.status`` instead of raising; the
message is also kept in ``.error`` (None after a successful update).

* :class:`CopyCostExplorer` -- effective DMA bandwidth against burst size and GM alignment, from
  the simulator's cost functions (:func:`copy_cost`, notebook 01);
* :class:`TileSweepExplorer` -- latency against tileS, the current tileS highlighted, the
  article's measured points overlaid, a per-tileS table (notebook 04);
* :class:`UbBudgetExplorer` -- the Unified Buffer budget as a stacked bar, the tiling struct and
  its packed bytes, the article's estimate against the honest budget (notebook 03);
* :class:`DiscreteChainExplorer` -- the three launches of the discrete chain: launch overhead
  against work, HBM bytes moved against the minimum (notebook 02);
* :class:`DoubleBufferExplorer` -- v1 / v2 / v2_bad_sync / v2c: the simulated timeline beside the
  hand-made pipeline of one core (notebook 05);
* :class:`FastExpExplorer` -- the polynomial exp's speed-up against the exact Exp's cost (published on the 910B2)
  (notebook 06);
* :class:`TuningExplorer` -- the tileS sweep for (E, K, chip, version) with the autotuner's choice
  circled (notebook 07); :func:`tile_latency_grid` and :func:`sweet_spot_heat_map`, the heat maps of
  the sweet spot over (S or E, tileS) (notebook 07);
* :class:`GemmExplorer` -- the GEMM on the cube: M, N, K, base tile, version, K-split; the roofline
  with the current run (notebook 09);
* :class:`RoutingExplorer` -- a model's router on a few tokens: chosen experts, load, capacity drops;
  :class:`MoeLayerExplorer` -- the MoE layer's stage times against the number of tokens (notebook 14).
* :class:`DecodeExplorer` -- one decode step: batch, context length, GQA group, the FlashDecode
  split; v2 and the chosen version against the HBM roofline (notebook 11).

No library module imports this one: dependencies point from the course to the library.
"""

from ._base import ARTICLE_UB_BYTES, FUSED_VERSIONS, MOE_CHIPS, minimum_hbm_bytes
from .decode import DecodeExplorer
from .copy_cost import CopyCost, CopyCostExplorer, copy_cost, copy_cost_curve
from .discrete_chain import DiscreteChainExplorer
from .double_buffer import DoubleBufferExplorer
from .fast_exp import FastExpExplorer
from .gemm import GemmExplorer
from .moe_layer import MoeLayerExplorer
from .routing import RoutingExplorer
from .tuning import TuningExplorer, sweet_spot_heat_map, tile_latency_grid
from .tile_sweep import TileSweepExplorer
from .ub_budget import UbBudgetExplorer, ub_breakdown

__all__ = ["CopyCost", "CopyCostExplorer", "copy_cost", "copy_cost_curve", "MOE_CHIPS", "FUSED_VERSIONS", "ARTICLE_UB_BYTES", "TileSweepExplorer", "UbBudgetExplorer",
           "DiscreteChainExplorer", "DoubleBufferExplorer", "FastExpExplorer", "TuningExplorer", "minimum_hbm_bytes", "ub_breakdown",
           "tile_latency_grid", "sweet_spot_heat_map", "GemmExplorer",
           "MoeLayerExplorer", "RoutingExplorer", "DecodeExplorer"]

# notebook 12 (issue 19): sparse KV compression
from .sparse import SparseKvExplorer  # noqa: E402

__all__ += ["SparseKvExplorer"]

# notebook 11 (issue 18): the KV-cache calculator's model picker
from .kv_calculator import KvCalculatorExplorer  # noqa: E402

__all__ += ["KvCalculatorExplorer"]
