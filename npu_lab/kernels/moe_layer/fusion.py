"""The first article's second fusion, measured against the unfused chain (issue 20 §4b).

* **router MatMul + gating**: unfused = the cube GEMM launch (logits [N, E] fp32 to GM) then the
  gating launch (reads them back). Fused = one mixed AIC + AIV kernel: the cube's Fixpipe hands each
  logits tile to the vector cores (through GM / L2 with cross-core flags, as a mixed kernel does), so
  one launch overhead goes. Two model bounds: **serial** (the two bodies one after the other + one
  overhead) and **pipelined** (the vector gates tile i while the cube computes tile i + 1: the longer
  body + one overhead -- the best a pipelined fusion can do).
* **Gather + MatMul**: unfused = the gather launch writes ``expanded_x`` [M, H] and the grouped up-
  projection reads it back. Fused = the GEMM reads each A row by ``sorted_row_idx`` straight from x
  (the index-driven copy GroupedMatmul-style kernels do); modelled as the grouped GEMM alone -- the same
  A bytes, read in place -- so the gather launch, its M·H write and its read go.

Both fused variants are compositions of measured pieces (npu_lab has no mixed-kernel version of them):
the tables say which rows are measured and which are modelled.
"""

from __future__ import annotations

import numpy as np

from ...hardware import HardwareSpec
from ...presets import get_preset
from ..moe_gating.run import simulate_moe_gating
from .gather import gather_rows
from .layer import _gemm_us, _grouped_gemm_us

__all__ = ["gather_matmul_fusion", "router_gating_fusion"]


def _pos_int(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    return int(v)


def router_gating_fusion(num_tokens: int, hidden_dim: int, num_experts: int, top_k: int, *,
                         hw: HardwareSpec | str = "ascend-910b2", gating_version: str = "v4",
                         gemm_version: str = "v3"):
    """DataFrame: the unfused chain (measured) and the fused kernel's two bounds (modelled), in µs."""
    import pandas as pd

    hw = get_preset(hw) if isinstance(hw, str) else hw
    n, h, e, k = (_pos_int(a, b) for a, b in (("num_tokens", num_tokens), ("hidden_dim", hidden_dim),
                                              ("num_experts", num_experts), ("top_k", top_k)))
    g_total, g_over = _gemm_us(n, h, e, gemm_version, hw.name)
    gt = simulate_moe_gating(1, n, e, k, version=gating_version, hw=hw).timeline
    v_total, v_over = gt.total_us, gt.launch_overhead_us
    g_body, v_body = g_total - g_over, v_total - v_over
    over = max(g_over, v_over)
    rows = [("unfused: GEMM launch + gating launch", g_total + v_total, "measured"),
            ("fused, serial bound", g_body + v_body + over, "model"),
            ("fused, pipelined bound", max(g_body, v_body) + over, "model")]
    df = pd.DataFrame([{"variant": a, "us": b, "kind": c} for a, b, c in rows]).set_index("variant")
    df["speedup"] = df["us"].iloc[0] / df["us"]
    return df


def gather_matmul_fusion(expert_rows, hidden_dim: int, ffn_dim: int, top_k: int, *,
                         hw: HardwareSpec | str = "ascend-910b2", gemm_version: str = "v3"):
    """DataFrame: gather launch + grouped up-GEMM (measured) vs the GEMM reading rows in place (model)."""
    import pandas as pd

    hw = get_preset(hw) if isinstance(hw, str) else hw
    h, f, k = _pos_int("hidden_dim", hidden_dim), _pos_int("ffn_dim", ffn_dim), _pos_int("top_k", top_k)
    rows = [int(r) for r in expert_rows]
    if not rows or min(rows) < 0 or sum(rows) < 1:
        raise ValueError("expert_rows must be counts >= 0 per expert with at least one token")
    m = sum(rows)
    n = -(-m // k)
    gather_us = gather_rows((n, h), m, k, hw=hw, timing_only=True)[1].total_us
    gemm_us = _grouped_gemm_us(rows, h, f, gemm_version, hw)
    out = [("unfused: gather launch + grouped GEMM", gather_us + gemm_us, "measured"),
           ("fused: GEMM reads rows by index", gemm_us, "model")]
    df = pd.DataFrame([{"variant": a, "us": b, "kind": c} for a, b, c in out]).set_index("variant")
    df["speedup"] = df["us"].iloc[0] / df["us"]
    df.attrs["expanded_x_bytes_saved"] = 2 * m * h * 2      # written once, read once (fp16)
    return df
