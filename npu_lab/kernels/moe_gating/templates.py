"""Template selection by shape, as CANN's MoeGatingTopKSoftmaxV2 tiling does (issue 20 §2).

CANN registers several tiling templates for one operator, each with a priority, and the tiling
framework takes the first (lowest priority number) whose ``IsCapable()`` holds
(hicann/ops-transformer ``moe/moe_gating_top_k_softmax_v2/op_host/``, ``REGISTER_TILING_TEMPLATE``
at the end of each file):

==============  ========  ===========================================================  ==============
template        priority  IsCapable (CANN)                                             npu_lab kernel
==============  ========  ===========================================================  ==============
Perf            1000      E <= 1024 and E % 8 == 0 and K <= 8, or E < 8                ``v4``
                          (``..._tiling_perf.cpp``)
EKFullLoad      10000     E <= 8160 and a row with its K outputs fits the UB           ``grouped``
                          (``..._tiling_ek_fullload.cpp``)
KFullLoad       20000     ``renorm == 0`` (``..._tiling_k_fullload.cpp``): E in        ``large_e``,
                          chunks, running top-K, online max / sum (SoftmaxFlashV2)     renorm=False
KRenorm         20001     ``renorm == 1`` (``..._tiling_k_renorm.cpp``): E in chunks,  ``large_e``,
                          running top-K of the logits, softmax over the K at the end   renorm=True
==============  ========  ===========================================================  ==============

:func:`choose_moe_template` applies the same rule with npu_lab's kernels: **Perf** is v4 (its
own limits: K <= 8, E <= 1024; it does not need CANN's E % 8 == 0; and it computes renorm = 1 only,
so a renorm = 0 call, which CANN's Perf also serves, goes on to EKFullLoad here). **EKFullLoad** is
the grouped kernel (every K <= E, a padded row of at most 2048 columns in UB; ``renorm=False`` keeps
the winners' full-softmax values). **KFullLoad** (renorm = 0) and **KRenorm** (renorm = 1) are
:mod:`.large_e`, E in chunks: CANN's two chunked templates differ only in the renorm each serves
(their ``IsCapable`` is ``renorm == 0`` / ``renorm == 1``), so for a shape whose row does not fit
the renorm attribute alone picks between them. On the 910B2 EKFullLoad holds every
1 <= K <= E <= 2048, so the chunked templates are chosen only on a chip whose UB does not hold a row
(tests use a 64 KB UB: from E = 1536).
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
TEMPLATES = (("Perf", 1000, "v4"), ("EKFullLoad", 10000, "grouped"), ("KFullLoad", 20000, "large_e"),
             ("KRenorm", 20001, "large_e"))
_CHUNKED = {"KFullLoad": False, "KRenorm": True}      # the renorm each chunked template serves


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


def _perf(B, S, E, K, hw, dtype, renorm=True):
    from .sorted_topk import calculate_moe_gating_v4_tiling

    if not renorm:
        return False, ("renorm = 0: CANN's Perf serves it, npu_lab's v4 (the article's kernel) computes renorm = 1 "
                       "only, so the next template takes it")
    try:
        t = calculate_moe_gating_v4_tiling(B, S, E, K, hw, dtype=dtype)
    except ValueError as exc:                    # UbBudgetError is a ValueError too
        return False, str(exc).split(". Use")[0]
    return True, f"K = {K} <= 8 and E = {E} <= 1024: {t.ubFormer} rows per UB loop, Sort32 + 8-pair merges"


def _ek_full_load(B, S, E, K, hw, dtype, renorm=True):
    from .grouped import calculate_grouped_tiling

    try:
        t = calculate_grouped_tiling(B * S, E, K, hw, dtype=dtype, renorm=renorm)
    except ValueError as exc:
        return False, str(exc)
    return True, (f"a whole row of E = {E} ({t.colAlign} padded columns) and its K = {K} outputs fit the UB "
                  f"({t.ubFormer} rows per loop); every pair kept through the merges, so any K <= E is exact")


def _chunked(name, B, S, E, K, hw, dtype, renorm=True):
    from .large_e import calculate_large_e_tiling

    serves = _CHUNKED[name]
    if renorm != serves:
        src = "k_fullload" if name == "KFullLoad" else "k_renorm"
        return False, f"IsCapable: renorm == {int(serves)} (..._tiling_{src}.cpp); this call has renorm = {int(renorm)}"
    try:
        t = calculate_large_e_tiling(B * S, E, K, hw, dtype=dtype, renorm=renorm)
    except ValueError as exc:
        return False, str(exc)
    what = ("an online max / sum of the whole row rescaled chunk by chunk, the winners' full-softmax values "
            "at the end" if not renorm else "the softmax over the K winners at the end")
    where = "the row does not fit whole" if t.chunks > 1 else "the whole-row templates refuse this row"
    return True, (f"renorm = {int(renorm)} and {where}: E = {E} in {t.chunks} chunk(s) of {t.chunk} "
                  f"columns, a running top-{t.kRun} list merged with each chunk, {what} (large_e.py)")


def choose_moe_template(B: int, S: int, E: int, K: int, hw="ascend-910b2", *, dtype=np.float32,
                        renorm: bool = True) -> TemplateChoice:
    """The first capable template in CANN's priority order, with the reason for every one.
    ``renorm``: MoeGatingTopKSoftmaxV2's attribute (True: softmax over the K winners; False: the
    full softmax, k <= 1024) — it decides between the chunked KFullLoad and KRenorm."""
    from .large_e import _check_renorm

    hw = get_preset(hw)
    for name, v in (("B", B), ("S", S), ("E", E)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {v!r}")
    K = _check_k(K, E)
    renorm = _check_renorm(renorm, K)
    tried = []
    for name, _, version in TEMPLATES:
        if version == "v4":
            ok, why = _perf(B, S, E, K, hw, dtype, renorm)
        elif version == "grouped":
            ok, why = _ek_full_load(B, S, E, K, hw, dtype, renorm)
        else:
            ok, why = _chunked(name, B, S, E, K, hw, dtype, renorm)
        tried.append((name, ok, why))
        if ok:
            return TemplateChoice(name, version, why, tuple(tried))
    raise ValueError(f"no template takes B={B}, S={S}, E={E}, K={K}, renorm={int(renorm)} on {hw.name}: "
                     + "; ".join(f"{n}: {w}" for n, _, w in tried))


def _logits_shape(gate_logits):
    """(x, B, S) of valid [N, E] / [B, S, E] float32 / float16 logits; raises saying what is wrong."""
    from .reference import as_logits_array

    x = as_logits_array(gate_logits)
    if x.ndim not in (2, 3):
        raise ValueError(f"gate_logits must have rank 2 [N, E] or 3 [B, S, E]; got shape {x.shape}")
    if x.dtype not in (np.float32, np.float16) or 0 in x.shape:
        raise TypeError(f"gate_logits must be float32 or float16 with no empty dimension; got {x.dtype} {x.shape}. "
                        "Cast with .astype(np.float32)")
    B, S = (1, x.shape[0]) if x.ndim == 2 else x.shape[:2]
    return x, int(B), int(S)


def _run_chunked(x, k, hw, renorm):
    from .large_e import run_large_e
    from .run import MoeGatingResult

    idx, w, tl, t = run_large_e(x, k, hw=hw, renorm=renorm)
    return MoeGatingResult(idx, w, tl, t, "large_e", t.blockNum)


def moe_gating_topk_auto(gate_logits, k: int, *, hw="ascend-910b2", renorm: bool = True):
    """Run the template :func:`choose_moe_template` picks for this shape and ``renorm``; returns
    ``(MoeGatingResult, TemplateChoice)``. renorm = 1: indices and weights equal the reference's for
    every 1 <= K <= E <= 2048. renorm = 0 (K <= 1024): EKFullLoad equals the reference; KFullLoad's
    indices equal it (up to experts whose full-softmax values round to the same float32) and its
    weights agree within the tolerance :mod:`.large_e` states."""
    from .run import moe_gating_topk

    x, B, S = _logits_shape(gate_logits)
    choice = choose_moe_template(B, S, int(x.shape[-1]), k, hw, dtype=x.dtype, renorm=renorm)
    if choice.version == "large_e":
        return _run_chunked(x, k, hw, renorm), choice
    if not renorm:
        return moe_gating_topk(x, k, version=choice.version, hw=hw, renorm=False), choice
    return moe_gating_topk(x, k, version=choice.version, hw=hw), choice


def _run_if_k_full_load(gate_logits, k, hw):
    """``moe_gating_topk(x, k, renorm=False)``'s template step: the KFullLoad result when
    :func:`choose_moe_template` picks it for this shape (the row does not fit the UB), else None
    (the caller runs the grouped kernel, which also gives every error for a bad input)."""
    try:
        x, B, S = _logits_shape(gate_logits)
        choice = choose_moe_template(B, S, int(x.shape[-1]), k, hw, dtype=x.dtype, renorm=False)
    except (TypeError, ValueError):
        return None
    return _run_chunked(x, k, hw, False) if choice.template == "KFullLoad" else None


def template_sweep(E_values=(8, 16, 32, 64, 128, 256, 512, 768, 1024, 1536, 2048), K: int = 8, *, N: int = 4096,
                   hw="ascend-910b2", dtype=np.float32, chunk: int | None = None,
                   renorm: bool = True) -> pd.DataFrame:
    """Timing-only runs over E: per E the chosen template and the latency of every template that
    can run (``latency_<version>_us``; NaN where it cannot). Columns: E, K, N, renorm, template,
    version, latency_us (the chosen one's), latency_v4_us, latency_grouped_us, latency_large_e_us
    (the chunked kernel — KFullLoad for ``renorm=False``, KRenorm for True — when it is chosen, or
    with ``chunk`` columns per chunk where E > chunk: its cost next to the whole-row templates),
    chunks, ub_rows_v4, ub_rows_grouped. ``renorm=False`` sweeps the full-softmax path (v4 does
    not compute it: no Perf column); concatenate two sweeps to show both."""
    from .large_e import _check_renorm, simulate_large_e
    from .run import simulate_moe_gating

    hw = get_preset(hw)
    for name, v in (("K", K), ("N", N)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"template_sweep: {name} must be a whole number >= 1, got {v!r}")
    renorm = _check_renorm(renorm, K)
    try:
        E_values = [int(e) if isinstance(e, (int, np.integer)) and not isinstance(e, bool) else None for e in E_values]
    except TypeError:
        raise TypeError(f"template_sweep: E_values must be a list of expert counts, got {type(E_values).__name__}") from None
    if not E_values or None in E_values or min(E_values) < 1 or max(E_values) < K:
        raise ValueError(f"template_sweep: E_values must be whole numbers >= 1, at least one >= K = {K}; got {E_values}")
    grouped_opts = {} if renorm else {"renorm": False}
    rows = []
    for E in E_values:
        if K > E:
            continue
        choice = choose_moe_template(1, N, E, K, hw, dtype=dtype, renorm=renorm)
        row = {"E": E, "K": K, "N": N, "renorm": renorm, "template": choice.template, "version": choice.version}
        for name, version in (("Perf", "v4"), ("EKFullLoad", "grouped")):   # every whole-row template that can run
            if _capable(name, N, E, K, hw, dtype, renorm):
                opts = grouped_opts if version == "grouped" else {}
                res = simulate_moe_gating(1, N, E, K, version=version, hw=hw, dtype=dtype, **opts)
                row[f"latency_{version}_us"] = round(res.timeline.total_us, 3)
                row[f"ub_rows_{version}"] = res.tiling.ubFormer
        if choice.version == "large_e" or (chunk is not None and E > chunk):
            tl, t = simulate_large_e(N, E, K, hw=hw, dtype=dtype, renorm=renorm,
                                     chunk=None if choice.version == "large_e" else chunk)
            row["latency_large_e_us"], row["chunks"] = round(tl.total_us, 3), t.chunks
        row["latency_us"] = row[f"latency_{choice.version}_us"]
        rows.append(row)
    cols = ["E", "K", "N", "renorm", "template", "version", "latency_us", "latency_v4_us", "latency_grouped_us",
            "latency_large_e_us", "chunks", "ub_rows_v4", "ub_rows_grouped"]
    return pd.DataFrame(rows).reindex(columns=cols)


def _capable(name, N, E, K, hw, dtype, renorm=True) -> bool:
    return (_perf if name == "Perf" else _ek_full_load)(1, N, E, K, hw, dtype, renorm)[0]


def template_sweep_figure(df: pd.DataFrame):
    """Latency over E of each template (lines; renorm = 0 dashed when the frame holds both
    renorm values, e.g. ``pd.concat`` of two sweeps), the chosen one marked: a plotly Figure."""
    import plotly.graph_objects as go

    need = {"E", "template", "latency_us", "latency_v4_us", "latency_grouped_us", "latency_large_e_us"}
    if not isinstance(df, pd.DataFrame) or not need <= set(df.columns) or df.empty:
        raise ValueError(f"template_sweep_figure takes the non-empty DataFrame of template_sweep (columns {sorted(need)})")
    renorms = df["renorm"].astype(bool) if "renorm" in df.columns else pd.Series(True, index=df.index)
    fig = go.Figure()
    for rn in (True, False):
        part = df[renorms == rn]
        if part.empty:
            continue
        tag = "" if renorms.all() else (" renorm 1" if rn else " renorm 0")
        lines = ((("latency_v4_us", "Perf (v4)"),) if rn else ()) + (
            ("latency_grouped_us", "EKFullLoad (grouped)"),
            ("latency_large_e_us", "KRenorm (large_e, chunked)" if rn else "KFullLoad (large_e, chunked, online softmax)"))
        for col, label in lines:
            fig.add_trace(go.Scatter(x=part["E"], y=part[col], mode="lines+markers", name=label + tag,
                                     line=dict(dash="solid" if rn else "dash")))
    fig.add_trace(go.Scatter(x=df["E"], y=df["latency_us"], mode="markers", name="chosen",
                             marker=dict(size=12, symbol="circle-open", color="black"),
                             text=df["template"], hovertemplate="E=%{x}: %{text} %{y:.2f} µs"))
    fig.update_layout(title=f"MoeGatingTopK templates over E (K = {int(df['K'].iloc[0])}, N = {int(df['N'].iloc[0])})",
                      xaxis_title="experts E", yaxis_title="latency (µs)", xaxis_type="log")
    return fig
