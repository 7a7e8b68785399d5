"""The article's 8x910B Llama-3-70B service, on paper (issue 19 §4).

Section 7.1 of ``shared/seeds/003_*.txt``: 8 x 910B, Llama 3 70B, context 8K; before 1,200 tokens/s at
P99 45 ms, after 3,850 tokens/s at P99 15 ms. A decode step (one token for each of ``batch``
sequences) with tensor parallelism over ``tp`` cards must at least

* read every card's share of the weights and of the batch's KV cache from its HBM:
  (weights + KV) / tp / hbm_bandwidth_gbps (the ascend-910b2 preset's HardwareSpec field, so the
  provenance is the preset's);
* do its share of the matmul work, 2 x active params x batch (+ attention 4 x layers x heads x
  head_dim x context x batch) FLOP / tp, at the preset's cube peak (cube_cores x 16^3 MAC x 2 FLOP
  per cube_fractal_cycles x clock_ghz);
* all-reduce the activations twice per layer (after attention, after the MLP; Megatron-style TP):
  ring all-reduce 2 (tp-1)/tp x batch x hidden x 2 B / interconnect bandwidth + a fixed latency each.

step_us = max(memory, compute) + all-reduce (the all-reduces are not overlapped: a stated
assumption, roughly what a decode step with its layer-by-layer dependence gets). tokens/s =
batch / step. A token's latency is at least one step, so a P99 per-token latency of L ms allows
step <= L ms, and then at most max(batch / step) tokens/s over the batches that fit.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..presets import get_preset
from .kv_memory import dtype_bytes, kv_cache_bytes, weights_bytes
from .model_configs import get_model_config

#: (value, kind, source) of every assumption the case study makes that no preset holds.
CASE_STUDY_ASSUMPTIONS = {
    "tp": (8, "article", "section 7.1: 昇腾910B × 8卡; tensor parallel over the 8 cards is our reading "
                         "(the article does not say how the model is split)"),
    "context_len": (8192, "article", "section 7.1: 上下文长度8K (every sequence at the full 8K: the worst case)"),
    "interconnect_gbps": (392.0, "assumed", "HCCS bandwidth per 910B card towards its 7 peers (the 392 GB/s "
                          "= 7 links x 56 GB/s often repeated for 8-card Atlas 800T A2 boards); no vendor page "
                          "with this figure was found by the search tool, so it is an assumption"),
    "allreduce_latency_us": (10.0, "assumed", "fixed cost of one small all-reduce over 8 cards (launch + "
                             "synchronisation); not published; 10 us is typical of intra-node collectives"),
    "allreduces_per_layer": (2, "convention", "Megatron-style tensor parallelism: one after attention, one after "
                             "the MLP"),
    "activation_dtype": ("bf16", "convention", "activations exchanged in 16-bit"),
    "hbm_capacity_gb": (64.0, "assumed", "HBM per 910B card as commonly quoted (64 GB HBM2e); not in the "
                        "presets and no datasheet in the sources"),
    "overlap": ("none", "convention", "all-reduce time added to max(memory, compute): no overlap of "
                "communication with the next layer"),
}


def case_study_assumptions(hw="ascend-910b2") -> pd.DataFrame:
    """Every number the case study uses: name, value, kind (article / preset provenance kind /
    assumed / convention) and its source. HBM bandwidth and the cube peak come from the preset."""
    spec = get_preset(hw)
    rows = [dict(name=k, value=v, kind=kind, source=src) for k, (v, kind, src) in CASE_STUDY_ASSUMPTIONS.items()]
    kind, note = spec.provenance.get("hbm_bandwidth_gbps", ("unspecified", ""))
    rows.append(dict(name="hbm_bandwidth_gbps", value=spec.hbm_bandwidth_gbps, kind=kind,
                     source=f"npu_lab preset {spec.name} (HardwareSpec.hbm_bandwidth_gbps): {note}"))
    rows.append(dict(name="cube_peak_tflops", value=round(_cube_peak_flops(spec) / 1e12, 1), kind="derived",
                     source=f"preset {spec.name}: cube_cores x 16x16x16 MAC x 2 FLOP / cube_fractal_cycles x "
                            "clock_ghz (fp16)"))
    rows.append(dict(name="model", value="Llama-3-70B", kind="vendor-config",
                     source=get_model_config("Llama-3-70B").source))
    return pd.DataFrame(rows)


def _cube_peak_flops(spec) -> float:
    return spec.cube_cores * 16 ** 3 * 2 / spec.cube_fractal_cycles * spec.clock_ghz * 1e9


def _positive(name, value, whole=False, maximum: float = 1e12):
    """``value`` as a finite number in (0, maximum] (a whole one if ``whole``), or a ValueError naming it."""
    ok = (not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))
          and math.isfinite(value) and 0 < value <= maximum and (not whole or float(value).is_integer()))
    if not ok:
        kind = "a whole number >= 1" if whole else "a positive number"
        raise ValueError(f"{name} must be {kind} (at most {maximum:g}), got {value!r}")
    return int(value) if whole else float(value)


def decode_step_roofline(batches=(1, 2, 4, 8, 16, 32, 64, 128, 256), context_len: int = 8192,
                         model="Llama-3-70B", tp: int = 8, kv_dtype: str = "bf16", weights_dtype: str = "bf16",
                         hw="ascend-910b2", interconnect_gbps: float | None = None,
                         allreduce_latency_us: float | None = None,
                         hbm_capacity_gb: float | None = None) -> pd.DataFrame:
    """The fastest decode step for each batch size: one row per batch.

    Columns: batch, context_len, weights_gb_per_card, kv_gb_per_card, memory_us, compute_us,
    allreduce_us, step_us, tokens_per_s (= batch / step), bound ("memory"/"compute" of the
    max, and "allreduce" if that is the largest part), fits_hbm (weights + KV per card within
    ``hbm_capacity_gb``). ``context_len`` is every sequence's cached length (tokens); ``tp`` cards
    split the weights and KV heads evenly (tp must divide the KV heads). Defaults of the interconnect,
    latency and capacity: :data:`CASE_STUDY_ASSUMPTIONS`."""
    cfg = get_model_config(model)
    spec = get_preset(hw)
    tp = _positive("tp", tp, whole=True, maximum=1024)
    if cfg.num_key_value_heads % tp and not cfg.is_mla:
        raise ValueError(f"tp={tp} does not divide {cfg.name}'s {cfg.num_key_value_heads} KV heads; use a divisor")
    context_len = _positive("context_len", context_len, whole=True, maximum=10**8)
    if isinstance(batches, (int, float, np.integer, np.floating)) and not isinstance(batches, bool):
        batches = [batches]
    if isinstance(batches, (str, bytes, dict)) or not hasattr(batches, "__iter__"):
        raise ValueError(f"batches must be a batch size or a list of them such as [1, 8, 64], got {batches!r}")
    batches = [_positive("batch", b, whole=True, maximum=10**6) for b in batches]
    if not batches:
        raise ValueError("batches must list at least one batch size")
    ic = _positive("interconnect_gbps", CASE_STUDY_ASSUMPTIONS["interconnect_gbps"][0]
                   if interconnect_gbps is None else interconnect_gbps)
    lat = CASE_STUDY_ASSUMPTIONS["allreduce_latency_us"][0] if allreduce_latency_us is None else allreduce_latency_us
    if isinstance(lat, (bool, np.bool_)) or not isinstance(lat, (int, float, np.integer, np.floating)) \
            or not math.isfinite(lat) or not 0 <= lat <= 1e6:
        raise ValueError(f"allreduce_latency_us must be a number in [0, 1e6] us, got {lat!r}")
    cap = _positive("hbm_capacity_gb", CASE_STUDY_ASSUMPTIONS["hbm_capacity_gb"][0]
                    if hbm_capacity_gb is None else hbm_capacity_gb)
    act_bytes = float(dtype_bytes(CASE_STUDY_ASSUMPTIONS["activation_dtype"][0]))
    w_card = weights_bytes(cfg, weights_dtype) / tp
    active = cfg.param_count(active=True)
    bw = spec.hbm_bandwidth_gbps * 1e3          # bytes per us
    peak = _cube_peak_flops(spec) / 1e6         # FLOP per us
    per_layer_ar = CASE_STUDY_ASSUMPTIONS["allreduces_per_layer"][0]
    attn_dim = cfg.num_attention_heads * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim if cfg.is_mla else cfg.head_dim)
    rows = []
    for b in batches:
        kv_card = kv_cache_bytes(cfg, context_len, b, kv_dtype) / tp
        memory_us = (w_card + kv_card) / bw
        flops = 2 * active * b + 4 * cfg.num_hidden_layers * attn_dim * context_len * b
        compute_us = flops / tp / peak
        msg = b * cfg.hidden_size * act_bytes
        ar_us = cfg.num_hidden_layers * per_layer_ar * (lat + 2 * (tp - 1) / tp * msg / (ic * 1e3))
        step = max(memory_us, compute_us) + ar_us
        parts = {"memory": memory_us, "compute": compute_us, "allreduce": ar_us}
        rows.append(dict(batch=b, context_len=context_len, kv_dtype=kv_dtype, weights_dtype=weights_dtype,
                         weights_gb_per_card=w_card / 1e9, kv_gb_per_card=kv_card / 1e9, memory_us=memory_us,
                         compute_us=compute_us, allreduce_us=ar_us, step_us=step, tokens_per_s=b / step * 1e6,
                         bound=max(parts, key=parts.get), fits_hbm=(w_card + kv_card) / 1e9 <= cap))
    df = pd.DataFrame(rows)
    df.attrs.update(model=cfg.name, tp=tp, hw=spec.name, interconnect_gbps=ic, allreduce_latency_us=lat,
                    hbm_capacity_gb=cap)
    return df


ARTICLE_SERVICE = (("before", 1200.0, 45.0), ("after", 3850.0, 15.0))


def _best_within(p99_ms: float, context_len: int, kv_dtype: str, weights_dtype: str, hw) -> tuple[int, float]:
    """The batch with the most tokens/s whose step fits ``p99_ms`` and the HBM (0, 0.0 if none)."""
    df = decode_step_roofline(range(1, 1025), context_len, kv_dtype=kv_dtype, weights_dtype=weights_dtype, hw=hw)
    ok = df[(df.step_us <= p99_ms * 1e3) & df.fits_hbm]
    if ok.empty:
        return 0, 0.0
    r = ok.loc[ok.tokens_per_s.idxmax()]
    return int(r.batch), float(r.tokens_per_s)


def case_study_check(hw="ascend-910b2") -> pd.DataFrame:
    """The article's before/after figures against the roofline, under stated storage formats and
    contexts (every sequence at 8K, or at 4K = the mean if contexts grow evenly from 0 to 8K).

    One row per (claim, storage, context): the article's tokens/s and P99 (ms), the batch its two
    figures imply (tokens/s x P99: a ceiling, since P99 >= step), the best physically possible
    tokens/s with a step <= P99 that fits the HBM, and the verdict (consistent if the article's
    tokens/s is at most that)."""
    rows = []
    for claim, tps, p99 in ARTICLE_SERVICE:
        for kv_dt, w_dt in (("bf16", "bf16"), ("int8", "bf16"), ("int8", "int8")):
            for ctx in (8192, 4096):
                batch, best = _best_within(p99, ctx, kv_dt, w_dt, hw)
                ok = tps <= best
                rows.append(dict(claim=claim, article_tokens_per_s=tps, article_p99_ms=p99,
                                 implied_max_batch=tps * p99 / 1e3, kv_dtype=kv_dt, weights_dtype=w_dt,
                                 context_len=ctx, best_batch=batch, best_tokens_per_s=best,
                                 verdict="consistent" if ok else "wrong",
                                 reason=(f"the roofline allows up to {best:,.0f} tokens/s with a step <= {p99:g} ms "
                                         f"(batch {batch}); the article claims {tps:,.0f}" if batch else
                                         f"no batch has a step <= {p99:g} ms that fits the HBM")))
    return pd.DataFrame(rows)


#: the storage formats the case study compares: (label, kv_dtype, weights_dtype)
STORAGE_FORMATS = (("bf16 weights, bf16 KV", "bf16", "bf16"), ("bf16 weights, int8 KV", "int8", "bf16"),
                   ("int8 weights, int8 KV", "int8", "int8"))
#: the largest batch the service curve scans (the slider goes to 256; the best batch may be beyond)
CURVE_MAX_BATCH = 1024


def service_curve(context_len: int = 8192, kv_dtype: str = "bf16", weights_dtype: str = "bf16",
                  hw="ascend-910b2", max_batch: int = CURVE_MAX_BATCH) -> pd.DataFrame:
    """:func:`decode_step_roofline` for every batch 1..``max_batch`` at one context and storage,
    plus ``step_ms``: the curve a latency / throughput plot draws."""
    max_batch = _positive("max_batch", max_batch, whole=True, maximum=4096)
    df = decode_step_roofline(range(1, max_batch + 1), context_len, kv_dtype=kv_dtype, weights_dtype=weights_dtype,
                              hw=hw)
    df["step_ms"] = df.step_us / 1e3
    return df


def case_study_point(batch: int, context_len: int = 8192, kv_dtype: str = "bf16", weights_dtype: str = "bf16",
                     hw="ascend-910b2", curve: pd.DataFrame | None = None) -> dict:
    """One point of the case study: the decode step at ``batch`` (1..1024) and ``context_len``
    (every sequence's cached tokens) with that storage, and for each of the article's two claims
    (:data:`ARTICLE_SERVICE`) the best tokens/s a step within its P99 allows at this context and
    storage (a P99 per-token latency of L ms needs step <= L) and the verdict. ``curve``: a
    :func:`service_curve` of the same arguments, to reuse. Returns a dict (``row``: the step's
    figures; ``claims``: one dict per claim)."""
    batch = _positive("batch", batch, whole=True, maximum=CURVE_MAX_BATCH)
    df = service_curve(context_len, kv_dtype, weights_dtype, hw) if curve is None else curve
    row = df.iloc[batch - 1].to_dict()
    claims = []
    for claim, tps, p99 in ARTICLE_SERVICE:
        ok = df[(df.step_ms <= p99) & df.fits_hbm]
        best = ok.loc[ok.tokens_per_s.idxmax()] if len(ok) else None
        best_tps = float(best.tokens_per_s) if best is not None else 0.0
        claims.append(dict(claim=claim, article_tokens_per_s=tps, article_p99_ms=p99, best_tokens_per_s=best_tps,
                           best_batch=int(best.batch) if best is not None else 0,
                           verdict="consistent" if tps <= best_tps else "wrong"))
    return dict(row=row, claims=claims)
