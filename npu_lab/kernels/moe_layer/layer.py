"""A whole MoE layer on the simulator (issue 20 §4): router MatMul → gating → dispatch → gather →
expert FFNs → combine, with one table of every stage's time and share.

Stages, what runs them, and where the numbers come from:

=============  ==============================================================  ===================
stage          how it is timed                                                 numbers
=============  ==============================================================  ===================
router         cube GEMM ``gemm`` (npu_lab/kernels/gemm), [N, H]·[H, E], fp16  GEMM (fp16 in, fp32
               in, fp32 out                                                    accumulate and out)
gating         ``moe_gating_topk`` ``config.gating_version``: v4 (softmax      the kernel
               path) or, with ``gating_options``, the grouped kernel
dispatch       the dispatch kernel (moe_gating/dispatch_kernel.py, 2 launches) ``moe_dispatch``
gather         the gather kernel (gather.py): ``expanded_x = x[row // K]``      the kernel
experts_up     cube GEMM per expert [n_e, H]·[H, F], one grouped launch        GEMM precision
activation     **stand-in**: HBM roofline of reading and writing [M, F] fp16   numpy
               plus one launch overhead (no vector kernel for it yet)
experts_down   cube GEMM per expert [n_e, F]·[F, H], one grouped launch        GEMM precision
combine        **stand-in**: HBM roofline of reading [M, H] fp32 and writing   ``moe_combine``
               [N, H] plus one launch overhead (CANN: MoeFinalizeRouting)
=============  ==============================================================  ===================

The grouped expert GEMMs (CANN's GroupedMatmul launches once for all experts) are modelled as each
non-empty expert's GEMM run back to back on the cube cores with a single launch overhead: the sum of
the experts' GEMM bodies (their timelines minus their launch overhead) plus one overhead. Experts with
no token cost nothing. Every other stage is a real launch (or a sequence of them) of the simulator.

Numbers: with ``full_kernels=True`` every simulated stage computes its outputs on the simulator
(small shapes; tests use it); by default the numbers come from what those kernels are tested equal
to (numpy GEMMs at the cube's precision, ``moe_gating_topk``'s own kernel for gating — it is exact —,
the host ``moe_dispatch``) and the times from timing-only runs of the same kernels, which give exactly
the full runs' timelines. The gating call is in one place, :func:`run_gating`: with routing options
(``MoeLayerConfig.gating_options``: sigmoid, bias, groups, ...) it runs the grouped kernel
(moe_gating/grouped.py), and :func:`moe_layer_reference` routes with the reference and the same options.

Fusions (``fused=``, issue 20 §4b; :mod:`.fusion`): ``"router"`` times router + gating as the
mixed AIC + AIV kernel (fused_router.py; the "router" row holds the fused kernel, "gating" 0),
``"gather"`` times gather + up-projection as the cube kernel reading rows by index
(fused_gather.py, the faster of its two variants; "experts_up" holds it, "gather" 0); ``True``:
both. The router fusion computes the article's softmax top-K (v4's range, K <= 8, E <= 1024): a
config with routing options or another gating version is refused. With ``full_kernels=True`` the
fused kernels compute the indices / weights and the up-projection on the simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ...hardware import HardwareSpec
from ...presets import get_preset
from ...sim.launch_cost import launch_overhead_us
from ..gemm import gemm
from ..moe_gating import moe_combine, moe_dispatch
from ..moe_gating.dispatch import MoeDispatch
from ..moe_gating.dispatch_kernel import check_against_reference, moe_dispatch_kernel_run
from ..moe_gating.grouped_host import _options as _grouped_options
from ..moe_gating.reference import _check_options, _is_default, moe_gating_topk_reference
from ..moe_gating.run import (ROUTING_VERSION, VERSIONS as GATING_VERSIONS, moe_gating_topk,
                              simulate_moe_gating)
from .gather import gather_rows

__all__ = ["ACTIVATIONS", "STAGES", "MoeLayerConfig", "MoeLayerResult", "moe_layer", "moe_layer_reference",
           "moe_layer_timing", "run_gating", "stage_table"]

ACTIVATIONS = ("relu", "silu")
STAGES = ("router", "gating", "dispatch", "gather", "experts_up", "activation", "experts_down", "combine")
#: stages whose time is a labelled stand-in, not a simulated kernel
STAND_INS = ("activation", "combine")


#: routing options a layer config may not hold: ``finished`` flags rows of one batch (not a property of
#: the layer) and the layer does not read the extra outputs
_PER_CALL_OPTIONS = ("finished", "extras")


@dataclass(frozen=True, eq=False)
class MoeLayerConfig:
    """An MoE layer: E experts, top-K routing, expert FFN width F, capacity (None: dropless).

    ``gating_options``: the routing options of ``moe_gating_topk_reference`` (score, bias, num_groups,
    topk_groups, group_select, renorm, routed_scaling_factor, eps; ``bias`` an array [E]), checked by
    the reference's own checks (same errors); stored are the options not at their default, ``bias``
    as a read-only float32 array. ``gating_version``: the moe_gating_topk version that routes;
    None (default) picks ``"v4"`` (the article's softmax path) when every option is at its default
    and ``"grouped"`` (the full routing semantics, moe_gating/grouped.py) otherwise; a version of
    the article's ladder with a non-default option is refused (it would ignore the option).
    ``gemm_version``: the cube GEMM version of the router and experts."""

    num_experts: int
    top_k: int
    ffn_dim: int
    capacity_factor: float | None = None
    activation: str = "silu"
    gating_version: str | None = None
    gemm_version: str = "v3"
    gating_options: dict | None = None

    def __post_init__(self):
        for name in ("num_experts", "top_k", "ffn_dim"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"MoeLayerConfig.{name} must be an int >= 1, got {v!r}")
        if self.top_k > self.num_experts:
            raise ValueError(f"MoeLayerConfig: top_k = {self.top_k} > num_experts = {self.num_experts}: "
                             "a token cannot pick more experts than there are")
        if self.capacity_factor is not None and not (isinstance(self.capacity_factor, (int, float))
                                                     and math.isfinite(self.capacity_factor) and self.capacity_factor > 0):
            raise ValueError(f"MoeLayerConfig.capacity_factor must be a finite number > 0 or None (dropless); "
                             f"got {self.capacity_factor!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"MoeLayerConfig.activation must be one of {ACTIVATIONS}; got {self.activation!r}")
        options = _layer_gating_options(self.gating_options, self.num_experts, self.top_k)
        object.__setattr__(self, "gating_options", options)
        version = self.gating_version
        if version is None:
            version = ROUTING_VERSION if options else "v4"
        if not isinstance(version, str) or (version not in GATING_VERSIONS and version != ROUTING_VERSION):
            raise ValueError(f"MoeLayerConfig.gating_version must be a moe_gating_topk version "
                             f"({', '.join(GATING_VERSIONS)}; 'discrete' is the framework's unfused chain; "
                             f"{ROUTING_VERSION!r} the full routing semantics) or None; got {self.gating_version!r}")
        if options and version != ROUTING_VERSION:
            raise ValueError(f"MoeLayerConfig: gating_version {version!r} computes the article's softmax path only; "
                             f"the routing option(s) {', '.join(options)} need the {ROUTING_VERSION!r} kernel: "
                             f"leave gating_version out (None picks it) or pass {ROUTING_VERSION!r}")
        object.__setattr__(self, "gating_version", version)

    def _key(self) -> tuple:
        opts = tuple(sorted((n, v.tobytes() if isinstance(v, np.ndarray) else v)
                            for n, v in (self.gating_options or {}).items()))
        return (self.num_experts, self.top_k, self.ffn_dim, self.capacity_factor, self.activation,
                self.gating_version, self.gemm_version, opts)

    def __eq__(self, other):
        return self._key() == other._key() if isinstance(other, MoeLayerConfig) else NotImplemented

    def __hash__(self):
        return hash(self._key())

    def gating_kwargs(self, *, timing_only: bool = False) -> dict:
        """The routing options as ``moe_gating_topk`` keywords (``bias=True`` timing-only: present,
        its values do not move the timeline)."""
        kw = dict(self.gating_options or {})
        if timing_only and "bias" in kw:
            kw["bias"] = True
        return kw


def _layer_gating_options(options, num_experts: int, top_k: int) -> dict:
    """Check a layer's routing options with the reference's checks (grouped_host._options: the names;
    reference._check_options: the values against E and K); keep the non-default ones."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"MoeLayerConfig.gating_options must be a dict of moe_gating_topk_reference options or "
                        f"None; got {type(options).__name__}")
    merged = _grouped_options(options)
    per_call = [n for n in _PER_CALL_OPTIONS if not _is_default(n, merged[n])]
    if per_call:
        raise ValueError(f"MoeLayerConfig.gating_options: {', '.join(per_call)} cannot be a layer option "
                         "(finished flags the rows of one batch; the layer reads no extra outputs); "
                         "call moe_gating_topk with it instead")
    o = _check_options(merged, (1,), num_experts, top_k)
    kept = {n: v for n, v in merged.items() if not _is_default(n, v)}
    if "bias" in kept:
        bias = o.bias.copy()
        bias.setflags(write=False)
        kept["bias"] = bias
    return kept


@dataclass(frozen=True)
class MoeLayerResult:
    """``output`` float32 [N, H] (None timing-only); ``stages``: a DataFrame, one row per stage (us,
    share of the total, kind "kernel" or "stand-in", what it is); ``timelines``: each simulated
    stage's Timeline; ``dispatch``: the MoeDispatch (None timing-only)."""

    output: np.ndarray | None
    stages: object
    timelines: dict
    dispatch: MoeDispatch | None
    expert_indices: np.ndarray | None = None
    routing_weights: np.ndarray | None = None
    tokens: int = 0
    extras: dict = field(default_factory=dict)

    @property
    def total_us(self) -> float:
        return float(self.stages["us"].sum())

    @property
    def gating_share(self) -> float:
        """Gating's fraction of the layer's time."""
        return float(self.stages.loc["gating", "us"] / self.total_us)


def _act(config: MoeLayerConfig, h: np.ndarray) -> np.ndarray:
    if config.activation == "relu":
        return np.maximum(h, np.float32(0))
    return (h / (np.float32(1) + np.exp(-h))).astype(np.float32)     # SiLU


def _check(hidden, router_weight, experts, config):
    if not isinstance(config, MoeLayerConfig):
        raise TypeError(f"config must be a MoeLayerConfig, got {type(config).__name__}")
    x = np.asarray(hidden)
    if x.ndim != 2 or 0 in x.shape or x.dtype.kind != "f":
        raise ValueError(f"hidden must be a float array [N, H] with N, H >= 1; got {x.shape} {x.dtype}")
    if not np.isfinite(x).all():
        raise ValueError("hidden must be finite")
    n, h = x.shape
    r = np.asarray(router_weight)
    if r.shape != (h, config.num_experts) or r.dtype.kind != "f":
        raise ValueError(f"router_weight must be float [H, E] = [{h}, {config.num_experts}]; got {r.shape} {r.dtype}")
    if not (isinstance(experts, (tuple, list)) and len(experts) == 2):
        raise TypeError("experts must be (w_up [E, H, F], w_down [E, F, H])")
    up, down = (np.asarray(w) for w in experts)
    E, F = config.num_experts, config.ffn_dim
    if up.shape != (E, h, F) or down.shape != (E, F, h) or up.dtype.kind != "f" or down.dtype.kind != "f":
        raise ValueError(f"experts must be (w_up [E, H, F] = {(E, h, F)}, w_down [E, F, H] = {(E, F, h)}) floats; "
                         f"got {up.shape} and {down.shape}")
    f16 = lambda a: a.astype(np.float16)
    return f16(x), f16(r), f16(up), f16(down)


def _mm(a16: np.ndarray, b16: np.ndarray) -> np.ndarray:
    """A GEMM at the cube's precision: fp16 operands, fp32 products and sums, fp32 out."""
    return a16.astype(np.float32) @ b16.astype(np.float32)


def _capacity(config: MoeLayerConfig, n: int) -> int | None:
    if config.capacity_factor is None:
        return None
    return min(n * config.top_k, math.ceil(config.capacity_factor * n * config.top_k / config.num_experts))


def run_gating(logits: np.ndarray | None, n: int, config: MoeLayerConfig, hw, *, timing_only: bool):
    """The layer's one gating call: ``moe_gating_topk`` ``config.gating_version`` on logits [N, E]
    float32 — the softmax path (v4 by default) or, with ``config.gating_options``, the grouped
    kernel with those options. Returns (indices, weights, timeline); indices / weights None
    timing-only (``simulate_moe_gating``, the same timeline)."""
    if timing_only:
        return None, None, simulate_moe_gating(1, n, config.num_experts, config.top_k,
                                               version=config.gating_version, hw=hw,
                                               **config.gating_kwargs(timing_only=True)).timeline
    r = moe_gating_topk(logits, config.top_k, version=config.gating_version, hw=hw, **config.gating_kwargs())
    return r.indices, r.weights, r.timeline


def _gating_note(config: MoeLayerConfig) -> str:
    o = config.gating_options
    if not o:
        return f"moe_gating_topk {config.gating_version}, K = {config.top_k}"
    parts = [f"{n}={'[E]' if n == 'bias' else v}" for n, v in o.items()]
    return f"moe_gating_topk {config.gating_version}, K = {config.top_k} ({', '.join(parts)})"


@lru_cache(maxsize=4096)
def _gemm_us(m: int, k: int, n: int, version: str, hw_name: str) -> tuple[float, float]:
    """(total, launch overhead) of one cube GEMM [m, k]·[k, n], fp16 in, fp32 out (timing-only)."""
    _, tl = gemm((m, k), (k, n), version=version, hw=hw_name, timing_only=True, dtype=np.float16,
                 out_dtype=np.float32)
    return tl.total_us, tl.launch_overhead_us


def _grouped_gemm_us(rows, k: int, n: int, version: str, hw: HardwareSpec) -> float:
    """Experts' GEMMs [rows_e, k]·[k, n] back to back, one launch overhead (see the module doc)."""
    body, overhead = 0.0, 0.0
    for m in rows:
        if m > 0:
            total, over = _gemm_us(int(m), k, n, version, hw.name)
            body += total - over
            overhead = max(overhead, over)
    return body + overhead if body else 0.0


def _roofline_stand_in_us(hw: HardwareSpec, nbytes: float) -> float:
    return nbytes / (hw.hbm_bandwidth_gbps * 1e3) + launch_overhead_us(hw, "vector", hw.vector_cores)


def stage_table(times_us: dict, notes: dict):
    """A DataFrame indexed by stage: us, share, kind, what."""
    import pandas as pd

    total = sum(times_us.values())
    rows = [{"stage": s, "us": times_us[s], "share": times_us[s] / total if total else 0.0,
             "kind": "stand-in" if s in STAND_INS else "kernel", "what": notes[s]} for s in STAGES]
    return pd.DataFrame(rows).set_index("stage")


def _fused_set(fused, config: MoeLayerConfig) -> frozenset:
    """``fused`` (None / False, True, "router", "gather" or a tuple of them) as a set, checked."""
    if fused is None or fused is False:
        return frozenset()
    if fused is True:
        out = frozenset(("router", "gather"))
    else:
        items = (fused,) if isinstance(fused, str) else fused
        if not isinstance(items, (tuple, list, set, frozenset)) or not all(isinstance(f, str) for f in items):
            raise TypeError(f"fused must be None, True, 'router', 'gather' or a tuple of them; got {fused!r}")
        out = frozenset(items)
        bad = sorted(out - {"router", "gather"})
        if bad:
            raise ValueError(f"fused: unknown fusion(s) {bad}; the fusions are 'router' (router MatMul + gating) and "
                             "'gather' (gather + expert up-projection)")
    if "router" in out and (config.gating_options or config.gating_version != "v4"):
        raise ValueError(f"fused='router' fuses the article's softmax top-K (the v4 gating) with the router MatMul; "
                         f"this config routes with {config.gating_version!r}"
                         f"{' and options ' + ', '.join(config.gating_options) if config.gating_options else ''}: "
                         "fuse only the gather (fused='gather') or use gating_version='v4' without options")
    return out


def _timings(n: int, h: int, config: MoeLayerConfig, hw: HardwareSpec, kept_rows, timelines: dict,
             gating_tl, dispatch_tl, gather_tl, fused: frozenset = frozenset(), router_tl=None,
             up_tl=None) -> tuple[dict, dict]:
    E, K, F = config.num_experts, config.top_k, config.ffn_dim
    m = int(sum(kept_rows))
    router_us, _ = _gemm_us(n, h, E, config.gemm_version, hw.name)
    up_us = _grouped_gemm_us(kept_rows, h, F, config.gemm_version, hw)
    down_us = _grouped_gemm_us(kept_rows, F, h, config.gemm_version, hw)
    times = {"router": router_us, "gating": gating_tl.total_us, "dispatch": dispatch_tl.total_us,
             "gather": gather_tl.total_us if gather_tl is not None else 0.0, "experts_up": up_us,
             "activation": _roofline_stand_in_us(hw, 2 * m * F * 2) if m else 0.0,
             "experts_down": down_us,
             "combine": _roofline_stand_in_us(hw, m * h * 4 + n * K * 8 + n * h * 4)}
    notes = {"router": f"cube GEMM [{n}, {h}]·[{h}, {E}]",
             "gating": _gating_note(config),
             "dispatch": "dispatch kernel: sort+count (atomic counters), place",
             "gather": f"gather kernel, {m} rows of {h}",
             "experts_up": f"grouped cube GEMM, {sum(1 for r in kept_rows if r)} experts, [n_e, {h}]·[{h}, {F}]",
             "activation": f"stand-in: HBM roofline of [{m}, {F}] fp16 in+out + one launch",
             "experts_down": f"grouped cube GEMM [n_e, {F}]·[{F}, {h}]",
             "combine": f"stand-in: HBM roofline of [{m}, {h}] fp32 in, [{n}, {h}] out + one launch"}
    timelines.update({"gating": gating_tl, "dispatch": dispatch_tl})
    if gather_tl is not None:
        timelines["gather"] = gather_tl
    if "router" in fused:
        times["router"], times["gating"] = router_tl.total_us, 0.0
        notes["router"] = f"fused router MatMul + gating (mixed AIC + 2 AIV), [{n}, {h}]·[{h}, {E}] + top-{K}"
        notes["gating"] = "in the fused router kernel"
        timelines["router"] = router_tl
        timelines.pop("gating", None)
    if "gather" in fused and m:
        variant, tl = up_tl
        times["gather"], times["experts_up"] = 0.0, tl.total_us
        notes["gather"] = "in the fused gather + up-projection kernel"
        notes["experts_up"] = f"fused gather + grouped up-GEMM ({variant}), [n_e, {h}]·[{h}, {F}] rows by index"
        timelines["experts_up"] = tl
        timelines.pop("gather", None)
    return times, notes


def _fused_timelines(fused: frozenset, n: int, h: int, config: MoeLayerConfig, hw, kept_rows):
    """Timing-only runs of the fused kernels the layer uses: (router Timeline or None, (variant,
    Timeline) of the gather + up-projection or None)."""
    from .fusion import best_gather_matmul
    from .fused_router import fused_router_gating

    router_tl = up = None
    if "router" in fused:
        router_tl = fused_router_gating((n, h), (h, config.num_experts), config.top_k, hw=hw, timing_only=True)[2]
    if "gather" in fused and sum(kept_rows):
        up = best_gather_matmul(kept_rows, h, config.ffn_dim, config.top_k, n, hw=hw)
    return router_tl, up


def moe_layer(hidden, router_weight, experts, config: MoeLayerConfig, *, hw: HardwareSpec | str = "ascend-910b2",
              full_kernels: bool = False, fused=None) -> MoeLayerResult:
    """Run one MoE layer: ``hidden`` [N, H], ``router_weight`` [H, E], ``experts`` = (w_up [E, H, F],
    w_down [E, F, H]); everything is cast to float16 (the cube's input type). Returns the output
    float32 [N, H] (tokens all of whose slots were dropped get 0; no residual is added), the stage
    table and the timelines. ``full_kernels``: compute every simulated stage's numbers on the
    simulator too (slow; see the module doc). ``fused``: None, True, "router", "gather" or a tuple
    (the module doc's Fusions)."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    x, r, up, down = _check(hidden, router_weight, experts, config)
    fused = _fused_set(fused, config)
    n, h = x.shape
    E, K = config.num_experts, config.top_k
    timelines = {}
    if full_kernels:
        logits, tl = gemm(x, r, version=config.gemm_version, hw=hw, out_dtype=np.float32)
        timelines["router"] = tl
    else:
        logits = _mm(x, r)
    idx, w, gating_tl = run_gating(logits, n, config, hw, timing_only=False)
    if full_kernels and "router" in fused:       # the fused kernel's own indices and weights route the layer
        from .fused_router import fused_router_gating
        idx, w, _ = fused_router_gating(x, r, K, hw=hw)
    cap = _capacity(config, n)
    d = moe_dispatch(idx, w, num_experts=E, capacity=cap)
    if full_kernels:
        kr = moe_dispatch_kernel_run(idx, num_experts=E, capacity=cap, hw=hw)
        check_against_reference(kr, d)
        dispatch_tl = kr.timeline
    else:
        dispatch_tl = moe_dispatch_kernel_run((n, K), num_experts=E, capacity=cap, hw=hw, timing_only=True).timeline
    m = d.sorted_row_idx.size
    gather_tl = None
    if m:
        rows, gather_tl = gather_rows(x, d.sorted_row_idx, K, hw=hw, timing_only=not full_kernels)
        if rows is None:
            rows = x[d.sorted_row_idx.astype(np.int64) // K]
    if full_kernels and "gather" in fused and m:   # the up-projection by the fused kernel, rows read by index
        from .fused_gather import gather_matmul
        up_rows, _ = gather_matmul(x, d.sorted_row_idx, d.expert_tokens_count, up, K, hw=hw)
    # expert FFNs, expert by expert over the dropless layout [M, H] (rows of expert e contiguous)
    y = np.zeros((m, h), np.float32)
    start = 0
    for e, cnt in enumerate(d.expert_tokens_count.tolist()):
        if cnt:
            block = rows[start:start + cnt]
            if full_kernels and "gather" in fused:
                a = up_rows[start:start + cnt]
                a16 = _act(config, a).astype(np.float16)
                y[start:start + cnt], tl_dn = gemm(a16, down[e], version=config.gemm_version, hw=hw,
                                                   out_dtype=np.float32)
            elif full_kernels:
                a, tl_up = gemm(block, up[e], version=config.gemm_version, hw=hw, out_dtype=np.float32)
                a16 = _act(config, a).astype(np.float16)
                y[start:start + cnt], tl_dn = gemm(a16, down[e], version=config.gemm_version, hw=hw,
                                                   out_dtype=np.float32)
            else:
                a16 = _act(config, _mm(block, up[e])).astype(np.float16)
                y[start:start + cnt] = _mm(a16, down[e])
        start += cnt
    # combine works on the dispatch's layout: dropless [M, H], or [E, capacity, H] in drop/pad mode
    if cap is None:
        out = moe_combine(y, d)
    else:
        padded = np.zeros((E * cap, h), np.float32)
        padded[d.expanded_row_idx[d.sorted_row_idx]] = y
        out = moe_combine(padded.reshape(E, cap, h), d)
    kept = d.expert_tokens_count.tolist()
    router_tl, up_tl = _fused_timelines(fused, n, h, config, hw, kept)
    times, notes = _timings(n, h, config, hw, kept, timelines, gating_tl, dispatch_tl, gather_tl, fused, router_tl,
                            up_tl)
    return MoeLayerResult(out, stage_table(times, notes), timelines, d, idx, w, n)


def moe_layer_timing(num_tokens: int, hidden_dim: int, config: MoeLayerConfig, *,
                     hw: HardwareSpec | str = "ascend-910b2", expert_rows=None, fused=None) -> MoeLayerResult:
    """Timing-only: the same stage table from the shapes alone. ``expert_rows``: tokens each expert
    receives (default: the N·K slots spread evenly, capped at the capacity) — the expert GEMMs are
    the only stage whose time depends on how the tokens route. ``fused``: as :func:`moe_layer`."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    for name, v in (("num_tokens", num_tokens), ("hidden_dim", hidden_dim)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    if not isinstance(config, MoeLayerConfig):
        raise TypeError(f"config must be a MoeLayerConfig, got {type(config).__name__}")
    n, E, K = int(num_tokens), config.num_experts, config.top_k
    cap = _capacity(config, n)
    if expert_rows is None:
        base, extra = divmod(n * K, E)
        expert_rows = [base + (e < extra) for e in range(E)]
    expert_rows = [int(v) for v in expert_rows]
    if len(expert_rows) != E or min(expert_rows) < 0 or sum(expert_rows) > n * K:
        raise ValueError(f"expert_rows must be E = {E} counts >= 0 summing to at most N·K = {n * K}")
    if cap is not None:
        expert_rows = [min(v, cap) for v in expert_rows]
    _, _, gating_tl = run_gating(None, n, config, hw, timing_only=True)
    dispatch_tl = moe_dispatch_kernel_run((n, K), num_experts=E, capacity=cap, hw=hw, timing_only=True).timeline
    m = sum(expert_rows)
    gather_tl = gather_rows((n, int(hidden_dim)), m, K, hw=hw, timing_only=True)[1] if m else None
    fused = _fused_set(fused, config)
    router_tl, up_tl = _fused_timelines(fused, n, int(hidden_dim), config, hw, expert_rows)
    timelines = {}
    times, notes = _timings(n, int(hidden_dim), config, hw, expert_rows, timelines, gating_tl, dispatch_tl, gather_tl,
                            fused, router_tl, up_tl)
    return MoeLayerResult(None, stage_table(times, notes), timelines, None, tokens=n)


def moe_layer_reference(hidden, router_weight, experts, config: MoeLayerConfig) -> np.ndarray:
    """A plain numpy MoE layer, token by token: logits, the gating reference (with the config's
    routing options), the capacity (first
    slots in position order n·K + k kept), each kept expert's FFN on the token, weighted sum. Same
    precision as the cube (fp16 operands, fp32 accumulation; the FFN's hidden activation rounded to
    fp16 before the down projection)."""
    x, r, up, down = _check(hidden, router_weight, experts, config)
    n, h = x.shape
    E, K = config.num_experts, config.top_k
    logits = x.astype(np.float32) @ r.astype(np.float32)
    idx, w = moe_gating_topk_reference(logits, K, **config.gating_kwargs())
    cap = _capacity(config, n)
    load = [0] * E
    out = np.zeros((n, h), np.float32)
    for t in range(n):
        for j in range(K):
            e = int(idx[t, j])
            if cap is not None:
                if load[e] >= cap:
                    continue
                load[e] += 1
            a = x[t].astype(np.float32) @ up[e].astype(np.float32)
            a16 = _act(config, a[None])[0].astype(np.float16)
            out[t] += w[t, j] * (a16.astype(np.float32) @ down[e].astype(np.float32))
    return out
