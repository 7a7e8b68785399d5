"""Sparse KV compression, the reference (npu_lab/kernels/sparse_kv/reference.py, synthetic.py):
the selection rule, the fresh mask, the memory figures, the error against full attention, the
scores choosing differently, and the refusals of bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from npu_lab.kernels.sparse_kv import (SCORES, attention, compress_kv, error_figure, error_vs_memory, importance,
                                       n_keep_of, select_tokens, selection_overlap, synthetic_kv)


@pytest.fixture(scope="module")
def data():
    return synthetic_kv(heads=3, tokens=256, head_dim=32, seed=1)


def _brute_force_keep(scores, n_keep, sinks):
    """An independent statement of the rule: sinks, then the best others (ties: lower position)."""
    out = []
    for row in scores:
        others = sorted(range(sinks, len(row)), key=lambda i: (-float(row[i]), i))
        out.append(list(range(sinks)) + others[:n_keep - sinks])
    return np.array(out)


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("ratio, sinks", [(0.3, 4), (0.05, 0), (1.0, 2), (0.01, 6)])
def test_keeps_sinks_plus_top_scores(data, score, ratio, sinks):
    c = compress_kv(data.k, data.v, ratio, sinks, score, queries=data.queries)
    S = data.k.shape[1]
    assert c.n_keep == min(S, max(sinks, int(ratio * S), 1))
    s = importance(data.k, score, data.queries)
    want = np.sort(_brute_force_keep(s, c.n_keep, sinks), axis=1)
    np.testing.assert_array_equal(c.indices, want)
    assert c.mask.sum(axis=1).tolist() == [c.n_keep] * data.k.shape[0]
    assert c.mask[:, :sinks].all()
    np.testing.assert_array_equal(c.k, np.take_along_axis(data.k, want[:, :, None], axis=1))
    np.testing.assert_array_equal(c.v, np.take_along_axis(data.v, want[:, :, None], axis=1))


def test_ties_go_to_the_lower_position():
    s = np.array([[1.0, 2.0, 2.0, 1.0, 2.0, 0.0]], np.float32)
    np.testing.assert_array_equal(select_tokens(s, 4, 1), [[0, 1, 2, 4]])
    np.testing.assert_array_equal(select_tokens(s, 2, 0), [[1, 2]])


def test_mask_is_fresh_every_call(data):
    a = compress_kv(data.k, data.v, 0.5, 4)
    a.mask[:] = True                                   # a caller scribbling on the result
    b = compress_kv(data.k, data.v, 0.1, 4)
    assert b.mask is not a.mask and b.mask.sum() == 3 * b.n_keep


def test_memory_figures(data):
    H, S, D = data.k.shape
    c = compress_kv(data.k, data.v, 0.25, 4)
    assert c.bytes_full == H * S * 2 * D * 4
    assert c.bytes_kept == H * c.n_keep * (2 * D * 4 + 4)     # K, V and an int32 position per kept token
    assert c.bytes_saved == c.bytes_full - c.bytes_kept
    full = compress_kv(data.k, data.v, 1.0, 4)
    assert full.bytes_saved == 0 and full.memory_fraction == 1.0


def test_error_is_zero_keeping_all_and_matches_a_direct_computation(data):
    full = compress_kv(data.k, data.v, 1.0, 0, eval_queries=data.eval_queries)
    assert full.error == pytest.approx(0.0, abs=1e-12)
    c = compress_kv(data.k, data.v, 0.2, 4, "window", queries=data.queries, eval_queries=data.eval_queries)
    ref = attention(data.eval_queries, data.k, data.v)
    kept = attention(data.eval_queries, c.k, c.v)               # attention over the kept tokens only
    assert c.error == pytest.approx(np.linalg.norm(kept - ref) / np.linalg.norm(ref), rel=1e-9)
    assert c.error > 0


def test_scores_choose_differently_and_window_errs_less(data):
    ov = selection_overlap(data, 0.3, 4)
    assert (ov.jaccard < 0.8).all()                           # they keep different tokens
    # key-norm keeps the long, unattended outlier keys; the window score keeps the heavy hitters
    assert ov["outliers kept (key_norm)"].sum() > ov["outliers kept (window)"].sum()
    assert ov["heavy kept (window)"].sum() > ov["heavy kept (key_norm)"].sum()
    df = error_vs_memory(data, (0.1, 0.3, 0.5))
    e = df.pivot(index="keep_ratio", columns="score", values="error")
    assert (e["window"] < e["key_norm"]).all()


def test_error_falls_as_memory_grows(data):
    df = error_vs_memory(data, (0.05, 0.2, 0.5, 1.0), scores=("window",))
    assert df.error.is_monotonic_decreasing and df.error.iloc[-1] == pytest.approx(0, abs=1e-12)
    assert df.memory_fraction.is_monotonic_increasing
    fig = error_figure(df)
    assert len(fig.data) == 1 and len(fig.data[0].x) == 3         # keep-all (error 0) is off the log axis


def test_synthetic_is_seeded():
    a, b = synthetic_kv(seed=3, tokens=64, heads=1), synthetic_kv(seed=3, tokens=64, heads=1)
    np.testing.assert_array_equal(a.k, b.k)
    assert not np.array_equal(a.k, synthetic_kv(seed=4, tokens=64, heads=1).k)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(keep_ratio=0.0), ValueError, r"keep_ratio must be a number in \(0, 1\]"),
    (dict(keep_ratio=1.5), ValueError, r"keep_ratio"),
    (dict(keep_ratio=-0.1), ValueError, r"keep_ratio"),
    (dict(keep_ratio=True), ValueError, r"keep_ratio"),
    (dict(keep_ratio="0.3"), ValueError, r"keep_ratio"),
    (dict(sinks=300), ValueError, r"more sinks than tokens"),
    (dict(sinks=-1), ValueError, r"sinks must be a whole number"),
    (dict(sinks=1.5), ValueError, r"sinks must be a whole number"),
    (dict(score="h2o"), ValueError, r"score must be one of"),
    (dict(score="window"), ValueError, r"pass queries"),
])
def test_bad_arguments_refused(data, kwargs, error, match):
    args = dict(keep_ratio=0.3, sinks=4, score="key_norm") | kwargs
    with pytest.raises(error, match=match):
        compress_kv(data.k[:, :64], data.v[:, :64], args.pop("keep_ratio"), **args)


def test_bad_arrays_refused(data):
    k, v = data.k, data.v
    with pytest.raises(ValueError, match=r"\[heads, tokens, head_dim\]"):
        compress_kv(k[0], v[0], 0.3)
    with pytest.raises(ValueError, match="of one shape"):
        compress_kv(k, v[:, :10], 0.3)
    with pytest.raises(TypeError, match="float16 or float32"):
        compress_kv(k.astype(np.float64), v.astype(np.float64), 0.3)
    with pytest.raises(TypeError, match="one dtype"):
        compress_kv(k, v.astype(np.float16), 0.3)
    with pytest.raises(TypeError, match="float16 or float32"):
        compress_kv(k.astype(np.int32), v.astype(np.int32), 0.3)
    bad = k.copy(); bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        compress_kv(bad, v, 0.3)
    with pytest.raises(ValueError, match="queries must be"):
        compress_kv(k, v, 0.3, score="window", queries=data.queries[:, :, :5])
    with pytest.raises(ValueError, match="eval_queries must be"):
        compress_kv(k, v, 0.3, eval_queries=data.eval_queries[:1])
    with pytest.raises(ValueError, match="n_keep"):
        select_tokens(np.zeros((1, 5), np.float32), 2, 3)
    with pytest.raises(TypeError, match="SyntheticKV"):
        error_vs_memory(pd.DataFrame())


def test_n_keep_rule():
    assert n_keep_of(100, 0.3, 2) == 30
    assert n_keep_of(100, 0.01, 4) == 4          # only the sinks
    assert n_keep_of(100, 0.001, 0) == 1         # never nothing
    assert n_keep_of(7, 1.0, 0) == 7


def test_claims_table_and_committed_csv(tmp_path):
    from npu_lab.kernels.sparse_kv import SPARSE_KV_CLAIMS_CSV, sparse_kv_claims, write_sparse_kv_claims
    df = sparse_kv_claims()
    by = df.set_index("claim_id")
    assert df.claim_id.is_unique and set(df.verdict) <= {"consistent", "wrong", "unverifiable"}
    assert by.loc["sparse_2_4_fp16", "verdict"] == "wrong" and "int8" in by.loc["sparse_2_4_fp16", "model"]
    assert by.loc["mem_22_3_to_15_2", "verdict"] == "wrong"
    assert by.loc["mem_31_8_percent", "verdict"] == "consistent"
    assert by.loc["accuracy_0_5", "verdict"] == "unverifiable"
    committed = pd.read_csv(SPARSE_KV_CLAIMS_CSV, dtype=str, keep_default_na=False)
    pd.testing.assert_frame_equal(committed, df, obj="data/sparse_kv_claims.csv is stale: run "
                                  "python -m npu_lab.kernels.sparse_kv.claims")
    out = write_sparse_kv_claims(tmp_path / "c.csv")
    assert out.read_text(encoding="utf-8") == SPARSE_KV_CLAIMS_CSV.read_text(encoding="utf-8")


def test_claims_memory_model_follows_the_bytes():
    from npu_lab.kernels.sparse_kv.claims import _memory_model
    from npu_lab.llm import kv_cache_bytes
    m = _memory_model()
    assert m["per_token"] == 80 * 8 * 128 * 2 * 2 == kv_cache_bytes("Llama-3-70B", 1)
    assert m["kept_gb"] == pytest.approx(22.3 * 0.3 * (1 + 4 / 512))
    assert m["ratio"] * (1 + 4 / 512) == pytest.approx(15.2 / 22.3)


def test_sweep_rows_equal_compress_kv(data):
    df = error_vs_memory(data, (0.07, 0.3, 1.0), sinks=3)
    for row in df.itertuples():
        c = compress_kv(data.k, data.v, row.keep_ratio, 3, row.score, queries=data.queries,
                        eval_queries=data.eval_queries)
        assert (row.n_keep, row.bytes_saved) == (c.n_keep, c.bytes_saved)
        assert row.error == pytest.approx(c.error, rel=1e-12, abs=1e-15)
