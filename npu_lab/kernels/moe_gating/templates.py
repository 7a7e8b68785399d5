"""Template selection by shape, as CANN's MoeGatingTopKSoftmaxV2 tiling does (issue 20 §2).

CANN registers several tiling templates for one operator, each with a priority, and the tiling
framework takes the first (lowest priority number) whose ``IsCapable()`` holds
(hicann/ops-transformer ``moe/moe_gating_top_k_softmax_v2/op_host/``):

==============  ========  ===========================================================  ==============
template        priority  IsCapable (CANN)                                             npu_lab kernel
==============  ========  ===========================================================  ==============
Perf            1000      E <= 1024 and E % 8 == 0 and K <= 8, or E < 8                ``v4``
                          (``..._tiling_perf.cpp``)
EKFullLoad      10000     E <= 8160 and a row with its K outputs fits the UB           ``grouped``
                          (``..._tiling_ek_fullload.cpp``)
KFullLoad       20000     renorm == 0; E split into UB-sized chunks, running top-K     ``large_e``
                          (``..._tiling_k_fullload.cpp``)
==============  ========  ===========================================================  ==============

:func:`choose_moe_template` applies the same rule with npu_lab's kernels: **Perf** is v4 (its
own limits: K <= 8, E <= 1024; it does not need CANN's E % 8 == 0), **EKFullLoad** is the grouped
kernel run with the default options (every K <= E, a padded row of at most 2048 columns in UB).
**KFullLoad** is :mod:`.large_e` (E in chunks, a running top-K; renorm = 1 semantics, where CANN's
serves renorm = 0). On the 910B2 EKFullLoad holds every 1 <= K <= E <= 2048, so KFullLoad is chosen
only on a chip whose UB does not hold a row (tests use a 64 KB UB).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...presets import get_preset
from .reference import _check_k

__all__ = ["TEMPLATES", "TemplateChoice", "choose_moe_template", "moe_gating_topk_auto", "template_sweep",
           "template_sweep_figure"]

#: (name, CANN priority, npu_lab version) in the order the tiling framework tries them
TEMPLATES = (("Perf", 1000, "v4"), ("EKFullLoad", 10000, "grouped"), ("KFullLoad", 20000, "large_e"))


@dataclass(frozen=True)
class TemplateChoice:
    """The chosen template, the npu_lab version that runs it, why, and every template's verdict
    (``tried``: (name, capable, reason), in priority order)."""

    template: str
    version: str
    reason: str
    tried: tuple

    def __str__(self) -> str:
        return f"{self.template} ({self.version}): {self.reason}"


def _perf(B, S, E, K, hw, dtype):
    from .sorted_topk import calculate_moe_gating_v4_tiling

    try:
        t = calculate_moe_gating_v4_tiling(B, S, E, K, hw, dtype=dtype)
    except ValueError as exc:                    # UbBudgetError is a ValueError too
        return False, str(exc).split(". Use")[0]
    return True, f"K = {K} <= 8 and E = {E} <= 1024: {t.ubFormer} rows per UB loop, Sort32 + 8-pair merges"


def _ek_full_load(B, S, E, K, hw, dtype):
    from .grouped import calculate_grouped_tiling

    try:
        t = calculate_grouped_tiling(B * S, E, K, hw, dtype=dtype)
    except ValueError as exc:
        return False, str(exc)
    return True, (f"a whole row of E = {E} ({t.colAlign} padded columns) and its K = {K} outputs fit the UB "
                  f"({t.ubFormer} rows per loop); every pair kept through the merges, so any K <= E is exact")


def _k_full_load(B, S, E, K, hw, dtype):
    from .large_e import calculate_large_e_tiling

    try:
        t = calculate_large_e_tiling(B * S, E, K, hw, dtype=dtype)
    except ValueError as exc:
        return False, str(exc)
    return True, (f"the row does not fit whole: E = {E} in {t.chunks} chunks of {t.chunk} columns, a running "
                  f"top-{t.kRun} list merged with each chunk (large_e.py)")


def choose_moe_template(B: int, S: int, E: int, K: int, hw="ascend-910b2", *, dtype=np.float32) -> TemplateChoice:
    """The first capable template in CANN's priority order, with the reason for every one."""
    hw = get_preset(hw)
    for name, v in (("B", B), ("S", S), ("E", E)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {v!r}")
    K = _check_k(K, E)
    tried = []
    for name, _, version in TEMPLATES:
        if version == "v4":
            ok, why = _perf(B, S, E, K, hw, dtype)
        elif version == "grouped":
            ok, why = _ek_full_load(B, S, E, K, hw, dtype)
        else:
            ok, why = _k_full_load(B, S, E, K, hw, dtype)
        tried.append((name, ok, why))
        if ok:
            return TemplateChoice(name, version, why, tuple(tried))
    raise ValueError(f"no template takes B={B}, S={S}, E={E}, K={K} on {hw.name}: "
                     + "; ".join(f"{n}: {w}" for n, _, w in tried))


def moe_gating_topk_auto(gate_logits, k: int, *, hw="ascend-910b2"):
    """Run the template :func:`choose_moe_template` picks for this shape; returns
    ``(MoeGatingResult, TemplateChoice)``. Indices equal the reference's for every 1 <= K <= E <= 2048."""
    from .reference import as_logits_array
    from .run import moe_gating_topk

    x = as_logits_array(gate_logits)
    if x.ndim not in (2, 3):
        raise ValueError(f"gate_logits must have rank 2 [N, E] or 3 [B, S, E]; got shape {x.shape}")
    if x.dtype not in (np.float32, np.float16) or 0 in x.shape:
        raise TypeError(f"gate_logits must be float32 or float16 with no empty dimension; got {x.dtype} {x.shape}. "
                        "Cast with .astype(np.float32)")
    B, S = (1, x.shape[0]) if x.ndim == 2 else x.shape[:2]
    choice = choose_moe_template(int(B), int(S), int(x.shape[-1]), k, hw, dtype=x.dtype)
    if choice.version == "large_e":
        from .large_e import run_large_e
        from .run import MoeGatingResult
        idx, w, tl, t = run_large_e(x, k, hw=hw)
        return MoeGatingResult(idx, w, tl, t, "large_e", t.blockNum), choice
    return moe_gating_topk(x, k, version=choice.version, hw=hw), choice


def template_sweep(E_values=(8, 16, 32, 64, 128, 256, 512, 768, 1024, 1536, 2048), K: int = 8, *, N: int = 4096,
                   hw="ascend-910b2", dtype=np.float32, chunk: int | None = None) -> pd.DataFrame:
    """Timing-only runs over E: per E the chosen template and the latency of every template that
    can run (``latency_<version>_us``; NaN where it cannot). Columns: E, K, N, template, version,
    latency_us (the chosen one's), latency_v4_us, latency_grouped_us, latency_large_e_us (the
    chunked kernel: when it is chosen, or with ``chunk`` columns per chunk where E > chunk — its
    cost next to the whole-row templates), chunks, ub_rows_v4, ub_rows_grouped."""
    from .run import simulate_moe_gating

    hw = get_preset(hw)
    for name, v in (("K", K), ("N", N)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"template_sweep: {name} must be a whole number >= 1, got {v!r}")
    try:
        E_values = [int(e) if isinstance(e, (int, np.integer)) and not isinstance(e, bool) else None for e in E_values]
    except TypeError:
        raise TypeError(f"template_sweep: E_values must be a list of expert counts, got {type(E_values).__name__}") from None
    if not E_values or None in E_values or min(E_values) < 1 or max(E_values) < K:
        raise ValueError(f"template_sweep: E_values must be whole numbers >= 1, at least one >= K = {K}; got {E_values}")
    rows = []
    for E in E_values:
        if K > E:
            continue
        choice = choose_moe_template(1, N, E, K, hw, dtype=dtype)
        row = {"E": E, "K": K, "N": N, "template": choice.template, "version": choice.version}
        for name, ok, _ in choice.tried:
            version = dict((n, v) for n, _, v in TEMPLATES)[name]
            if version == "large_e":                # timed below, with its chunking
                continue
            if ok or name != choice.template and _capable(name, N, E, K, hw, dtype):
                res = simulate_moe_gating(1, N, E, K, version=version, hw=hw, dtype=dtype)
                row[f"latency_{version}_us"] = round(res.timeline.total_us, 3)
                row[f"ub_rows_{version}"] = res.tiling.ubFormer
        if choice.template == "Perf" and _capable("EKFullLoad", N, E, K, hw, dtype):
            res = simulate_moe_gating(1, N, E, K, version="grouped", hw=hw, dtype=dtype)
            row["latency_grouped_us"] = round(res.timeline.total_us, 3)
            row["ub_rows_grouped"] = res.tiling.ubFormer
        if choice.version == "large_e":
            from .large_e import simulate_large_e
            tl, t = simulate_large_e(N, E, K, hw=hw, dtype=dtype)
            row["latency_large_e_us"], row["chunks"] = round(tl.total_us, 3), t.chunks
        elif chunk is not None and E > chunk:
            from .large_e import simulate_large_e
            tl, t = simulate_large_e(N, E, K, hw=hw, dtype=dtype, chunk=chunk)
            row["latency_large_e_us"], row["chunks"] = round(tl.total_us, 3), t.chunks
        row["latency_us"] = row[f"latency_{choice.version}_us"]
        rows.append(row)
    cols = ["E", "K", "N", "template", "version", "latency_us", "latency_v4_us", "latency_grouped_us",
            "latency_large_e_us", "chunks", "ub_rows_v4", "ub_rows_grouped"]
    return pd.DataFrame(rows).reindex(columns=cols)


def _capable(name, N, E, K, hw, dtype) -> bool:
    return (_perf if name == "Perf" else _ek_full_load)(1, N, E, K, hw, dtype)[0]


def template_sweep_figure(df: pd.DataFrame):
    """Latency over E of each template (lines), the chosen one marked: a plotly Figure."""
    import plotly.graph_objects as go

    need = {"E", "template", "latency_us", "latency_v4_us", "latency_grouped_us", "latency_large_e_us"}
    if not isinstance(df, pd.DataFrame) or not need <= set(df.columns):
        raise ValueError(f"template_sweep_figure takes the DataFrame of template_sweep (columns {sorted(need)})")
    fig = go.Figure()
    for col, label in (("latency_v4_us", "Perf (v4)"), ("latency_grouped_us", "EKFullLoad (grouped)"),
                       ("latency_large_e_us", "KFullLoad (large_e, chunked)")):
        fig.add_trace(go.Scatter(x=df["E"], y=df[col], mode="lines+markers", name=label))
    fig.add_trace(go.Scatter(x=df["E"], y=df["latency_us"], mode="markers", name="chosen",
                             marker=dict(size=12, symbol="circle-open", color="black"),
                             text=df["template"], hovertemplate="E=%{x}: %{text} %{y:.2f} µs"))
    fig.update_layout(title=f"MoeGatingTopK templates over E (K = {int(df['K'].iloc[0])}, N = {int(df['N'].iloc[0])})",
                      xaxis_title="experts E", yaxis_title="latency (µs)", xaxis_type="log")
    return fig
