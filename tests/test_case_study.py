"""npu_lab.llm.case_study (the 8x910B decode-step roofline) and npu_lab.llm.claims (section 3's
claims table and its CSV in data/)."""

from __future__ import annotations

import pandas as pd
import pytest

from npu_lab import get_preset
from npu_lab.llm import (SECTION3_CLAIMS_CSV, case_study_assumptions, case_study_check, decode_step_roofline,
                         kv_cache_bytes, section3_claims, weights_bytes, write_section3_claims)


def test_batch_one_memory_time_by_hand():
    hw = get_preset("ascend-910b2")
    row = decode_step_roofline([1]).iloc[0]
    bytes_per_card = (weights_bytes("Llama-3-70B", "bf16") + kv_cache_bytes("Llama-3-70B", 8192)) / 8
    assert row.memory_us == pytest.approx(bytes_per_card / (hw.hbm_bandwidth_gbps * 1e3))
    assert row.bound == "memory" and row.fits_hbm
    assert row.tokens_per_s == pytest.approx(1e6 / row.step_us)
    # 10 us latency x 2 all-reduces x 80 layers, plus the bytes
    assert 1600 < row.allreduce_us < 1700


def test_roofline_invariants():
    df = decode_step_roofline(context_len=8192)
    assert (df.step_us.diff().dropna() > 0).all()             # more sequences, longer step
    assert (df.tokens_per_s.diff().dropna() > 0).all()        # but more tokens per second
    assert (df.step_us >= df[["memory_us", "compute_us"]].max(axis=1)).all()
    assert not df.set_index("batch").fits_hbm[256]            # 256 x 8K bf16 KV does not fit 8 x 64 GB
    int8 = decode_step_roofline(kv_dtype="int8", weights_dtype="int8")
    assert (int8.step_us < df.step_us).all()
    faster = decode_step_roofline(hw=get_preset("ascend-910b2").replace(hbm_bandwidth_gbps=3200.0))
    assert faster.memory_us.to_numpy() * 2 == pytest.approx(df.memory_us.to_numpy())   # HBM from the preset


@pytest.mark.parametrize("kwargs, words", [
    (dict(batches=[0]), "batch must be a whole number"),
    (dict(context_len=0), "context_len must be"),
    (dict(tp=3), "does not divide"),
    (dict(interconnect_gbps=-1), "interconnect_gbps must be a positive number"),
    (dict(allreduce_latency_us=float("nan")), "allreduce_latency_us"),
    (dict(kv_dtype="fp7"), "unknown dtype"),
    (dict(model="GPT-5"), "known models"),
])
def test_bad_input(kwargs, words):
    with pytest.raises((ValueError, TypeError), match=words):
        decode_step_roofline(**kwargs)


def test_article_service_verdicts():
    df = case_study_check()
    before, after = df[df.claim == "before"], df[df.claim == "after"]
    assert (before.verdict == "consistent").all()               # 1,200 tokens/s at 45 ms is possible
    # 3,850 tokens/s at a 15 ms P99 is not possible with 16-bit weights at 8K ...
    bf16 = after[(after.weights_dtype == "bf16") & (after.kv_dtype == "bf16") & (after.context_len == 8192)]
    assert (bf16.verdict == "wrong").all() and (bf16.best_tokens_per_s < 3850).all()
    # ... and only the int8-everything reading (the article's "INT8 storage") allows it
    assert (after[after.weights_dtype == "int8"].verdict == "consistent").all()
    assert (df.implied_max_batch == df.article_tokens_per_s * df.article_p99_ms / 1e3).all()


def test_assumptions_name_their_source():
    a = case_study_assumptions().set_index("name")
    assert a.loc["hbm_bandwidth_gbps", "value"] == get_preset("ascend-910b2").hbm_bandwidth_gbps
    assert a.loc["interconnect_gbps", "kind"] == "assumed"
    assert (a.source.str.len() > 10).all()


def test_claims_table():
    df = section3_claims()
    assert list(df.columns) == ["claim_id", "section", "claim", "article", "model", "verdict", "reason", "source"]
    assert set(df.verdict) <= {"consistent", "wrong", "unverifiable", "pending"}
    by = df.set_index("claim_id")
    assert by.loc["kv_both", "verdict"] == "wrong" and by.loc["kv_1_8x_weights", "verdict"] == "wrong"
    assert by.loc["overlap_60_92", "model"] == "to be measured by the decode kernel"
    assert "software-managed" in by.loc["ub_hit_rate", "model"]
    assert f"{get_preset('ascend-910b2').ub_bytes // 1024} KB" in by.loc["ub_capacity", "model"]
    assert df.claim_id.is_unique


def test_committed_claims_csv_is_fresh(tmp_path):
    committed = pd.read_csv(SECTION3_CLAIMS_CSV, dtype=str, keep_default_na=False)
    fresh = section3_claims()
    pd.testing.assert_frame_equal(committed, fresh, obj="data/article_kv_claims.csv is stale: run "
                                  "python -m npu_lab.llm.claims")
    out = write_section3_claims(tmp_path / "c.csv")
    assert out.read_text(encoding="utf-8") == SECTION3_CLAIMS_CSV.read_text(encoding="utf-8")


def test_claims_rows_are_computed_not_typed():
    """The model column follows the library: a different chip's UB, a different verdict row text."""
    b2 = section3_claims("ascend-910b2").set_index("claim_id")
    p3 = section3_claims("ascend-310p3").set_index("claim_id")
    assert "256 KB" in p3.loc["ub_capacity", "model"] and "192 KB" in b2.loc["ub_capacity", "model"]
    assert b2.loc["balance_by_length", "model"] != p3.loc["balance_by_length", "model"]   # 48 vs 8 cores
    assert by_verdicts(b2) == {"consistent", "wrong", "unverifiable", "pending"}


def by_verdicts(df):
    return set(df.verdict)
