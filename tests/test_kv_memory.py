"""npu_lab.llm: the published model configurations, the KV-cache calculator, the article's 48.7 GB check."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from npu_lab.llm import (MODEL_CONFIGS, article_kv_check, article_kv_summary, dtype_bytes, get_model_config,
                         kv_bytes_per_token_per_layer, kv_cache_bytes, kv_memory_table, weights_bytes)


def test_llama3_8b_fp16_per_token_by_hand():
    # 2 (K, V) x 32 layers x 8 kv heads x 128 x 2 B
    assert kv_cache_bytes("Llama-3-8B", 1) == 2 * 32 * 8 * 128 * 2 == 131072
    assert kv_bytes_per_token_per_layer("Llama-3-8B", "fp16") == 2 * 8 * 128 * 2


def test_llama3_70b_at_8k_by_hand():
    per_seq = 2 * 80 * 8 * 128 * 2 * 8192
    assert kv_cache_bytes("Llama-3-70B", 8192) == per_seq == 2_684_354_560
    assert kv_cache_bytes("Llama-3-70B", 8192, batch=4, dtype="int8") == per_seq * 4 // 2
    assert kv_cache_bytes("llama-3-70b", 8192, dtype="bf16") == per_seq      # names are case-insensitive


def test_deepseek_v3_mla_caches_the_latent_not_k_and_v():
    # kv_lora_rank 512 + qk_rope_head_dim 64 per token per layer, 61 layers
    assert kv_cache_bytes("DeepSeek-V3", 1, dtype="bf16") == (512 + 64) * 61 * 2
    mha = replace(MODEL_CONFIGS["DeepSeek-V3"], kv_lora_rank=0)   # the same heads cached as plain K and V
    assert kv_cache_bytes(mha, 1) == 2 * 128 * 128 * 61 * 2
    assert kv_cache_bytes(mha, 1) / kv_cache_bytes("DeepSeek-V3", 1) > 50


@pytest.mark.parametrize("name", list(MODEL_CONFIGS))
def test_parameter_count_from_the_config_matches_the_publisher(name):
    cfg = MODEL_CONFIGS[name]
    assert cfg.source.startswith("https://huggingface.co/") and cfg.published_params > 0
    assert cfg.param_count() == pytest.approx(cfg.published_params, rel=0.01)
    assert cfg.num_attention_heads % cfg.num_key_value_heads == 0


def test_active_parameters_of_the_moe_models():
    assert MODEL_CONFIGS["Mixtral-8x7B"].param_count(active=True) == pytest.approx(12.9e9, rel=0.01)
    assert MODEL_CONFIGS["DeepSeek-V3"].param_count(active=True) == pytest.approx(37e9, rel=0.03)
    assert MODEL_CONFIGS["Llama-3-8B"].param_count(active=True) == MODEL_CONFIGS["Llama-3-8B"].param_count()


def test_kv_scales_linearly_and_dtypes_halve():
    for name in MODEL_CONFIGS:
        one = kv_cache_bytes(name, 1000)
        assert kv_cache_bytes(name, 3000, batch=5) == 15 * one
        assert kv_cache_bytes(name, 1000, dtype="int8") * 2 == one == kv_cache_bytes(name, 1000, dtype="bf16")
        assert kv_cache_bytes(name, 1000, dtype="fp8") == kv_cache_bytes(name, 1000, dtype="int8")


def test_weights_bytes():
    n = MODEL_CONFIGS["Llama-3-70B"].param_count()
    assert weights_bytes("Llama-3-70B", "bf16") == 2 * n
    assert weights_bytes("Llama-3-70B", "int4") == -(-n // 2)
    assert dtype_bytes("float16") == 2 and dtype_bytes("bfloat16") == 2


@pytest.mark.parametrize("args, err, words", [
    (("GPT-5", 10), ValueError, "known models: Llama-3-8B"),
    (("Llama-3-8B", 0), ValueError, "context_len must be >= 1"),
    (("Llama-3-8B", 10, 0), ValueError, "batch must be >= 1"),
    (("Llama-3-8B", 10, 1, "fp12"), ValueError, "known: fp32"),
    (("Llama-3-8B", 10.5), TypeError, "context_len must be a whole number"),
    (("Llama-3-8B", True), TypeError, "context_len"),
    ((42, 10), TypeError, "model must be a name"),
])
def test_bad_input_is_named(args, err, words):
    with pytest.raises(err, match=words):
        kv_cache_bytes(*args)


def test_memory_table():
    df = kv_memory_table(["Llama-3-8B", "DeepSeek-V3"], context_len=4096, batch=2)
    assert list(df.model.unique()) == ["Llama-3-8B", "DeepSeek-V3"] and len(df) == 8
    row = df[(df.model == "Llama-3-8B") & (df.dtype == "fp16")].iloc[0]
    assert row.bytes_per_token == 131072 and row.batch_bytes == 131072 * 4096 * 2
    assert row.bytes_per_sequence == 131072 * 4096
    assert row.kv_over_weights == pytest.approx(row.batch_bytes / weights_bytes("Llama-3-8B", "bf16"))
    with pytest.raises(ValueError, match="dtypes must be"):
        kv_memory_table("Llama-3-8B", dtypes="fp16")
    with pytest.raises(ValueError, match="unknown dtype"):
        kv_memory_table("Llama-3-8B", weights_dtype="fp7")


def test_article_figures_cannot_both_hold():
    s = article_kv_summary()
    assert s["kv_per_seq_gb"] == pytest.approx(2.684, abs=1e-3)
    assert s["ratio_if_48_7"] < 0.5                        # 48.7 GB is a third of bf16 weights, not 1.8x
    assert 2.5 < s["bits_per_weight_for_both"] < 3.5       # only a ~3-bit weight format makes both true
    df = article_kv_check()
    assert set(df.figure) == {"48.7 GB", "1.8x weights", "both"}
    # no reading of the 48.7 GB with fp16/bf16 weights' 1.8x: the two implied batches never agree
    kv = df[df.figure == "48.7 GB"]
    ratio = df[df.figure == "1.8x weights"]
    for _, r in ratio.iterrows():
        same = kv[(kv.kv_heads == r.kv_heads) & (kv.kv_dtype == r.kv_dtype) & (kv.unit == "GB")].iloc[0]
        assert abs(same.implied_batch - r.implied_batch) / r.implied_batch > 0.2
    # the GQA fp16 reading of 48.7 GB is 18.14 sequences: no whole batch
    gqa = kv[(kv.kv_dtype == "fp16/bf16") & kv.kv_heads.str.startswith("8 ") & (kv.unit == "GB")].iloc[0]
    assert gqa.implied_batch == pytest.approx(48.7e9 / 2_684_354_560) and not gqa.whole_batch
