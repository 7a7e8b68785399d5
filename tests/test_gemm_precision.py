"""Tests of npu_lab.kernels.gemm.precision (issue 17 §4): accumulation, int8, Kahan, the article's correction."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab.kernels.gemm.precision import (accumulation_error, article_fp32_correction, correction_lesson,
                                            int8_weight_error_cost, kahan_error_bound, kahan_lesson,
                                            kahan_sum_fp32, relative_error, sequential_sum_fp32)


@pytest.fixture(scope="module")
def acc():
    return accumulation_error((256, 2048), M=16, N=32, k_step=128, seed=1)


def test_fp32_accumulation_beats_fp16_accumulation(acc):
    for K, row in acc.iterrows():
        assert row.fp32_acc_fp32_out < row.fp32_acc_fp16_out < row.fp16_acc, K
        assert row.fp32_acc_fp32_out < 1e-5  # only the fp32 rounding of the sums
    # fp16 accumulation error grows with the number of fp16 additions; one final rounding does not
    assert acc.fp16_acc.iloc[-1] > 1.5 * acc.fp16_acc.iloc[0]
    assert acc.fp32_acc_fp16_out.iloc[-1] < 2 * acc.fp32_acc_fp16_out.iloc[0]


def test_accumulation_error_is_deterministic(acc):
    again = accumulation_error((256, 2048), M=16, N=32, k_step=128, seed=1)
    assert acc.equals(again)


def test_int8_error_and_cost_come_from_the_kernels():
    """Every figure is a simulated run: per-channel VDEQF16 keeps each output channel within a few
    percent of its own size, per-tensor DEQF16 loses the small channels when their sizes differ;
    int8 beats half in time at large K (half the bytes, twice the cube rate); per-channel costs
    its quant-word copies on FIX (a little more than per-tensor); bfloat16 costs what half does
    and errs more (8 significant bits to 11)."""
    df = int8_weight_error_cost((512, 4096), M=16, N=256, seed=2)
    assert (df.int8_channel_err > df.fp16_err).all()              # int8 quantisation costs accuracy ...
    assert (df.int8_channel_err < 0.05).all()                     # ... per-channel scales keep it bounded
    assert (df.int8_tensor_err > 10 * df.int8_channel_err).all()  # one scale for unequal channels does not
    assert (df.bf16_err > 3 * df.fp16_err).all() and (df.bf16_us == df.fp16_us).all()
    assert df.int8_channel_us.iloc[-1] < df.fp16_us.iloc[-1]
    assert (df.int8_channel_us > df.int8_tensor_us).all()
    equal = int8_weight_error_cost((512,), M=16, N=64, seed=2, channel_spread=0.0)
    assert equal.int8_tensor_err.iloc[0] < 3 * equal.int8_channel_err.iloc[0]   # equal channels: no big gain
    # the per-channel figure is the kernel's own output: the same run by hand gives the same error
    from npu_lab.kernels.gemm import gemm
    from npu_lab.kernels.gemm.precision import _quantise_int8, column_relative_error
    rng = np.random.default_rng(2)
    col = np.exp(rng.standard_normal(256))
    X, W = rng.standard_normal((16, 512)), rng.standard_normal((512, 256)) * col
    (xq, sx), (wq, sw) = _quantise_int8(X, None), _quantise_int8(W, 0)
    C, _ = gemm(xq, wq, deq_scale=float(sx) * sw)
    assert column_relative_error(C, X @ W) == df.int8_channel_err.iloc[0]


def test_bf16_sits_next_to_fp16_in_the_accumulation_table(acc):
    assert (acc.bf16_fp32_acc_bf16_out > 3 * acc.fp32_acc_fp16_out).all()
    assert (acc.bf16_fp32_acc_bf16_out < 2 ** -6).all()
    assert (acc.bf16_us == acc.fp32_acc_us).all()


def test_kahan_within_bound_and_better_than_sequential():
    x = np.random.default_rng(3).random(20_000, dtype=np.float32)
    exact = float(np.sum(x.astype(np.float64)))
    k = float(kahan_sum_fp32(x))
    s = float(sequential_sum_fp32(x))
    assert abs(k - exact) <= kahan_error_bound(x)
    assert abs(k - exact) < abs(s - exact)
    df = kahan_lesson(20_000, seed=3)
    assert df.loc["Kahan fp32", "abs_error"] <= df.attrs["kahan_bound"]
    assert df.loc["sequential fp32", "abs_error"] > 10 * df.loc["Kahan fp32", "abs_error"]


def test_kahan_recovers_what_sequential_loses():
    x = np.array([1.0] + [2.0 ** -25] * 4096, dtype=np.float32)  # each small term alone rounds away
    assert float(sequential_sum_fp32(x)) == 1.0
    assert float(kahan_sum_fp32(x)) == pytest.approx(1.0 + 4096 * 2.0 ** -25, abs=2 ** -23)


def test_article_correction_is_the_identity_with_its_defaults():
    C = np.random.default_rng(4).standard_normal((8, 24)).astype(np.float32)
    assert np.array_equal(article_fp32_correction(C), C)
    # otherwise it is (alpha + beta) * C with the previous element's rounding error moved in
    out = article_fp32_correction(C, alpha=0.5, beta=0.25)
    np.testing.assert_allclose(out, 0.75 * C, rtol=1e-6, atol=1e-6)


def test_correction_lesson_after_the_fact_equals_none():
    df = correction_lesson(16, 16, 512, seed=5)
    assert df.loc["article correction", "relative_error"] == df.loc["no correction", "relative_error"]
    assert df.loc["fp32 output (no rounding to fp16)", "relative_error"] < df.loc["no correction", "relative_error"]


@pytest.mark.parametrize("call, match", [
    (lambda: accumulation_error((100,), k_step=128), "multiple of 128"),
    (lambda: accumulation_error((256,), k_step=24), "multiple of 16"),
    (lambda: accumulation_error(256), "sequence"),
    (lambda: accumulation_error(()), "empty"),
    (lambda: int8_weight_error_cost((256,), M=0), "M must be"),
    (lambda: int8_weight_error_cost((256,), channel_spread=-1), "channel_spread"),
    (lambda: kahan_sum_fp32(np.ones(4)), "float32"),
    (lambda: kahan_sum_fp32(np.ones((2, 2), np.float32)), "1-D"),
    (lambda: article_fp32_correction(np.ones(3)), "float32"),
    (lambda: article_fp32_correction(np.ones(3, np.float32), alpha=float("nan")), "alpha"),
    (lambda: relative_error(np.ones(2), np.ones(3)), "shapes differ"),
])
def test_bad_input(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
