"""The second article's KV figure checked (issue 18 §3).

Section 3.1 of ``shared/seeds/003_*.txt`` says, for Llama 3 70B at an 8K context: "KV Cache占用达
48.7GB，是模型权重的1.8倍" (the KV cache reaches 48.7 GB, 1.8 times the model weights). It gives no
batch, no dtype and no unit convention. :func:`article_kv_check` lists what each figure implies
under each reading and shows that no standard weight format makes both true at once.
"""

from __future__ import annotations

import pandas as pd

from .kv_memory import kv_cache_bytes, weights_bytes
from .model_configs import ModelConfig, get_model_config

ARTICLE_KV_GB = 48.7
ARTICLE_KV_OVER_WEIGHTS = 1.8
ARTICLE_CONTEXT = 8192
ARTICLE_QUOTE = "以Llama 3 70B模型为例，8K上下文长度下，KV Cache占用达48.7GB，是模型权重的1.8倍 (section 3.1)"


def _whole_batch(batch: float) -> bool:
    """True when ``batch`` is within 0.05 of a whole number >= 1: a figure a real batch could give."""
    return bool(batch >= 0.95 and abs(batch - round(batch)) <= 0.05)


def _mha(cfg: ModelConfig) -> ModelConfig:
    """The same model without GQA (one KV head per query head): what a reader who forgets GQA computes."""
    from dataclasses import replace
    return replace(cfg, name=cfg.name + " (MHA, no GQA)", num_key_value_heads=cfg.num_attention_heads)


def article_kv_check(model="Llama-3-70B", context_len: int = ARTICLE_CONTEXT) -> pd.DataFrame:
    """What the article's "48.7 GB" and "1.8x the weights" each imply, and why both cannot hold.

    Rows with ``figure == "48.7 GB"``: for each reading of the cache (``kv_heads``: the published 8
    KV heads = GQA, or all 64 query heads = MHA; ``kv_dtype`` fp16/bf16, int8/fp8, fp32; ``unit`` GB =
    1e9 B or GiB = 2**30 B) the cache of one sequence at ``context_len`` (``kv_per_seq_gb``) and the
    batch the 48.7 figure implies (``implied_batch``; ``whole_batch`` True when it is within 0.05 of a
    whole number, i.e. the reading could be exactly true). Rows with ``figure == "1.8x weights"``: for
    each weight format (``weights_dtype`` bf16, int8, int4) the cache 1.8x the weights would be
    (``kv_gb_implied``) and the batch that needs. The row ``figure == "both"``: the bits per weight
    that would make 48.7 GB equal 1.8x the weights (``note``). Every row also has ``ratio_if_48_7``:
    48.7 GB over the weights in that row's format (NaN where no format applies).
    """
    cfg = get_model_config(model)
    rows = []
    readings = (("8 kv heads (GQA, published)", cfg), ("64 kv heads (MHA, no GQA)", _mha(cfg)))
    kv_types = (("fp16", "fp16/bf16"), ("int8", "int8/fp8"), ("fp32", "fp32"))
    nan = float("nan")
    for heads_name, c in readings:
        for kv_dt, kv_name in kv_types:
            per_seq = kv_cache_bytes(c, context_len, 1, kv_dt)
            for unit, scale in (("GB", 1e9), ("GiB", 2**30)):
                batch = ARTICLE_KV_GB * scale / per_seq
                rows.append(dict(figure="48.7 GB", kv_heads=heads_name, kv_dtype=kv_name, weights_dtype="",
                                 unit=unit, kv_per_seq_gb=per_seq / 1e9, kv_gb_implied=ARTICLE_KV_GB * scale / 1e9,
                                 weights_gb=nan, implied_batch=batch,
                                 whole_batch=_whole_batch(batch),
                                 ratio_if_48_7=nan, note=""))
    for heads_name, c in readings:
        for kv_dt, kv_name in kv_types:
            per_seq = kv_cache_bytes(c, context_len, 1, kv_dt)
            for w_dt in ("bf16", "int8", "int4"):
                weights = weights_bytes(cfg, w_dt)
                batch = ARTICLE_KV_OVER_WEIGHTS * weights / per_seq
                rows.append(dict(figure="1.8x weights", kv_heads=heads_name, kv_dtype=kv_name, weights_dtype=w_dt,
                                 unit="GB", kv_per_seq_gb=per_seq / 1e9,
                                 kv_gb_implied=ARTICLE_KV_OVER_WEIGHTS * weights / 1e9, weights_gb=weights / 1e9,
                                 implied_batch=batch,
                                 whole_batch=_whole_batch(batch),
                                 ratio_if_48_7=ARTICLE_KV_GB * 1e9 / weights, note=""))
    implied = ARTICLE_KV_GB * 1e9 / ARTICLE_KV_OVER_WEIGHTS
    bits = implied * 8 / cfg.param_count()
    rows.append(dict(figure="both", kv_heads="any", kv_dtype="any", weights_dtype=f"{bits:.2f} bit", unit="GB",
                     kv_per_seq_gb=nan, kv_gb_implied=ARTICLE_KV_GB, weights_gb=implied / 1e9, implied_batch=nan,
                     whole_batch=False, ratio_if_48_7=ARTICLE_KV_OVER_WEIGHTS,
                     note=(f"48.7 GB / 1.8 = {implied / 1e9:.1f} GB of weights = {bits:.2f} bits per weight for "
                           f"{cfg.param_count() / 1e9:.1f} B parameters: not bf16 (16), int8 (8) or int4 (4); "
                           "both figures hold together only with an unusual ~3-bit weight format the article "
                           "never mentions")))
    df = pd.DataFrame(rows)
    df.attrs.update(quote=ARTICLE_QUOTE, model=cfg.name, context_len=context_len)
    return df


def article_kv_summary(model="Llama-3-70B", context_len: int = ARTICLE_CONTEXT) -> dict:
    """The headline numbers of the check as a dict (floats): kv_per_seq_gb (fp16, GQA), weights_gb
    (bf16), batch_for_48_7 (fp16, GQA, GB), batch_for_1_8x (fp16 KV, bf16 weights), ratio_if_48_7
    (48.7 GB against bf16 weights), bits_per_weight_for_both."""
    cfg = get_model_config(model)
    per_seq = kv_cache_bytes(cfg, context_len, 1, "fp16")
    weights = weights_bytes(cfg, "bf16")
    return dict(kv_per_seq_gb=per_seq / 1e9, weights_gb=weights / 1e9,
                batch_for_48_7=ARTICLE_KV_GB * 1e9 / per_seq,
                batch_for_1_8x=ARTICLE_KV_OVER_WEIGHTS * weights / per_seq,
                ratio_if_48_7=ARTICLE_KV_GB * 1e9 / weights,
                bits_per_weight_for_both=ARTICLE_KV_GB * 1e9 / ARTICLE_KV_OVER_WEIGHTS * 8 / cfg.param_count())
