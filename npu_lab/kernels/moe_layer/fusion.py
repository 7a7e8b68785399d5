"""The first article's second fusion, simulated against the unfused chain (issue 20 §4b).

* **router MatMul + gating**: unfused = the cube GEMM launch (logits [N, E] fp32 to GM) then the
  v4 gating launch (reads them back). Fused = :mod:`.fused_router`, one mixed AIC + 2 AIV kernel:
  the AIC's Fixpipe hands each logits tile to its AIVs through a ping-pong GM workspace (the 910B2
  has no L0C -> UB path) with cross-core flags both ways; the AIVs gate tile i while the AIC
  computes tile i + 1.
* **Gather + MatMul**: unfused = the gather launch (gather.py) writing ``expanded_x`` [M, H], then
  the grouped up-projection (:func:`~.fused_gather.gather_matmul` with ``gathered=False``: the same
  cube kernel reading ``expanded_x`` rows in place). Fused = the same kernel reading each row of
  ``hidden`` by index, either per N tile (``"per tile"``) or once per M tile kept in L1 for every N
  tile (``"resident"``, when [bm, H] fits L1 beside the B panels).

Every row of both tables is a simulated launch (timing-only; the kernels' numbers are tested
equal to numpy). The model bounds this module gave before the kernels existed (composites of the
measured unfused bodies) are kept as labelled rows ``kind = "model bound"``.
"""

from __future__ import annotations

import numpy as np

from ...hardware import HardwareSpec
from ...presets import get_preset
from ..moe_gating.run import simulate_moe_gating
from .fused_gather import gather_matmul, gather_matmul_plan
from .fused_router import fused_router_gating
from .gather import gather_rows

__all__ = ["FUSIONS", "best_gather_matmul", "fusion_table", "gather_matmul_fusion", "router_gating_fusion"]

FUSIONS = ("router", "gather")


def _pos_int(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    return int(v)


def _frame(rows):
    import pandas as pd

    df = pd.DataFrame([{"variant": a, "us": tl_us, "hbm_mb": mb, "launches": nl, "kind": kind}
                       for a, tl_us, mb, nl, kind in rows]).set_index("variant")
    df["speedup"] = df["us"].iloc[0] / df["us"]
    return df


def router_gating_fusion(num_tokens: int, hidden_dim: int, num_experts: int, top_k: int, *,
                         hw: HardwareSpec | str = "ascend-910b2", gemm_version: str = "v3",
                         bounds: bool = True):
    """DataFrame indexed by variant: us, hbm_mb (HBM bytes / 1e6), launches, kind, speedup over the
    unfused chain. Rows: the unfused chain (GEMM launch + v4 gating launch, simulated), the fused
    mixed kernel (simulated) and, with ``bounds``, the two old model bounds (serial: both bodies +
    one overhead; pipelined: the longer body + one overhead). ``.attrs["timelines"]``: the
    unfused and fused Timelines."""
    from ...sim.timeline import Timeline
    from ..gemm import gemm

    hw = get_preset(hw) if isinstance(hw, str) else hw
    n, h, e, k = (_pos_int(a, b) for a, b in (("num_tokens", num_tokens), ("hidden_dim", hidden_dim),
                                              ("num_experts", num_experts), ("top_k", top_k)))
    _, g = gemm((n, h), (h, e), version=gemm_version, hw=hw, timing_only=True, dtype=np.float16,
                out_dtype=np.float32)
    v = simulate_moe_gating(1, n, e, k, version="v4", hw=hw).timeline
    unfused = Timeline.concat([g, v])
    _, _, fused = fused_router_gating((n, h), (h, e), k, hw=hw, timing_only=True)
    rows = [("unfused: GEMM launch + gating launch", unfused.total_us, unfused.hbm_bytes / 1e6, 2, "simulated"),
            ("fused: mixed AIC + AIV kernel", fused.total_us, fused.hbm_bytes / 1e6, 1, "simulated")]
    if bounds:
        g_body, v_body = g.total_us - g.launch_overhead_us, v.total_us - v.launch_overhead_us
        over = max(g.launch_overhead_us, v.launch_overhead_us)
        rows += [("model bound: serial", g_body + v_body + over, float("nan"), 1, "model bound"),
                 ("model bound: pipelined", max(g_body, v_body) + over, float("nan"), 1, "model bound")]
    df = _frame(rows)
    df.attrs["timelines"] = {"unfused": unfused, "fused": fused}
    return df


def best_gather_matmul(expert_rows, hidden_dim: int, ffn_dim: int, top_k: int, num_tokens: int, *,
                       hw: HardwareSpec | str = "ascend-910b2"):
    """The faster fused variant for these shapes, simulated: ``(variant, timeline)`` with variant
    "per tile" or "resident" (resident only when its tiling exists)."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    rows = [int(r) for r in expert_rows]
    E, n, h, f = len(rows), int(num_tokens), int(hidden_dim), int(ffn_dim)
    _, tl = gather_matmul((n, h), None, rows, (E, h, f), top_k, hw=hw, timing_only=True)
    best = ("per tile", tl)
    if gather_matmul_plan(rows, h, f, top_k, n, hw=hw, resident=True).resident:
        _, rt = gather_matmul((n, h), None, rows, (E, h, f), top_k, hw=hw, timing_only=True, resident=True)
        if rt.total_us < tl.total_us:
            best = ("resident", rt)
    return best


def gather_matmul_fusion(expert_rows, hidden_dim: int, ffn_dim: int, top_k: int, *, num_tokens: int | None = None,
                         hw: HardwareSpec | str = "ascend-910b2", gemm_version: str = "v3", bounds: bool = True):
    """DataFrame indexed by variant (columns as :func:`router_gating_fusion`): the unfused chain
    (gather launch + the grouped GEMM reading ``expanded_x``), the fused kernel per N tile and with
    the gathered rows resident in L1 (when that tiling fits), and with ``bounds`` the old model
    bound (the layer's GEMM ``gemm_version`` composite alone). ``num_tokens``: N (default
    ceil(M / K)). ``.attrs``: ``expanded_x_bytes_saved`` (written once and read once, fp16) and
    ``timelines``."""
    from ...sim.timeline import Timeline
    from .layer import _grouped_gemm_us

    hw = get_preset(hw) if isinstance(hw, str) else hw
    h, f, k = _pos_int("hidden_dim", hidden_dim), _pos_int("ffn_dim", ffn_dim), _pos_int("top_k", top_k)
    rows = [int(r) for r in expert_rows]
    if not rows or min(rows) < 0 or sum(rows) < 1:
        raise ValueError("expert_rows must be counts >= 0 per expert with at least one token")
    m, E = sum(rows), len(rows)
    n = -(-m // k) if num_tokens is None else _pos_int("num_tokens", num_tokens)
    if m > n * k:
        raise ValueError(f"expert_rows sum to {m} rows, more than the N·K = {n * k} slots")
    gather_tl = gather_rows((n, h), m, k, hw=hw, timing_only=True)[1]
    _, gemm_tl = gather_matmul((m, h), None, rows, (E, h, f), k, gathered=False, hw=hw, timing_only=True)
    unfused = Timeline.concat([gather_tl, gemm_tl])
    _, per_tile = gather_matmul((n, h), None, rows, (E, h, f), k, hw=hw, timing_only=True)
    out = [("unfused: gather launch + grouped GEMM", unfused.total_us, unfused.hbm_bytes / 1e6, 2, "simulated"),
           ("fused: rows gathered per N tile", per_tile.total_us, per_tile.hbm_bytes / 1e6, 1, "simulated")]
    tls = {"unfused": unfused, "fused per tile": per_tile}
    if gather_matmul_plan(rows, h, f, k, n, hw=hw, resident=True).resident:
        _, res = gather_matmul((n, h), None, rows, (E, h, f), k, hw=hw, timing_only=True, resident=True)
        out.append(("fused: gathered rows resident in L1", res.total_us, res.hbm_bytes / 1e6, 1, "simulated"))
        tls["fused resident"] = res
    if bounds:
        out.append((f"model bound: GEMM {gemm_version} composite alone", _grouped_gemm_us(rows, h, f, gemm_version, hw),
                    float("nan"), 1, "model bound"))
    df = _frame(out)
    df.attrs["expanded_x_bytes_saved"] = 2 * m * h * 2      # written once, read once (fp16)
    df.attrs["timelines"] = tls
    return df


def fusion_table(presets=("Mixtral-like", "Qwen-MoE-like", "DeepSeek-V3-like"), tokens=(16, 4096), *,
                 hw: HardwareSpec | str = "ascend-910b2"):
    """Both fusions per layer preset and token count, simulated (experts loaded evenly): a DataFrame
    with preset, tokens, fusion, unfused_us, fused_us (the faster fused variant for gather),
    speedup, unfused_hbm_mb, fused_hbm_mb, variant. The router fusion times the softmax top-K path
    of the preset's E and K (the fused kernel's gating: the DeepSeek-V3-like grouped sigmoid is
    not fused)."""
    import pandas as pd

    from .presets import ROUTER_PRESETS

    hw = get_preset(hw) if isinstance(hw, str) else hw
    out = []
    for name in presets:
        if name not in ROUTER_PRESETS:
            raise ValueError(f"preset must be one of {', '.join(ROUTER_PRESETS)}; got {name!r}")
        p = ROUTER_PRESETS[name]
        for n in tokens:
            n = _pos_int("tokens", n)
            rg = router_gating_fusion(n, p.hidden_dim, p.num_experts, p.top_k, hw=hw, bounds=False)
            base, extra = divmod(n * p.top_k, p.num_experts)
            rows = [base + (e < extra) for e in range(p.num_experts)]
            gm = gather_matmul_fusion(rows, p.hidden_dim, p.ffn_dim, p.top_k, num_tokens=n, hw=hw, bounds=False)
            fused_g = gm.iloc[1:]["us"].idxmin()
            for fusion, df, best in (("router+gating", rg, rg.index[1]), ("gather+matmul", gm, fused_g)):
                out.append({"preset": name, "tokens": n, "fusion": fusion,
                            "unfused_us": df["us"].iloc[0], "fused_us": df.loc[best, "us"],
                            "speedup": df["us"].iloc[0] / df.loc[best, "us"],
                            "unfused_hbm_mb": df["hbm_mb"].iloc[0], "fused_hbm_mb": df.loc[best, "hbm_mb"],
                            "variant": best.split(": ", 1)[1]})
    return pd.DataFrame(out)
