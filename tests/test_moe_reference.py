"""Tests of the MoeGatingTopK numpy reference (npu_lab.kernels.moe_gating.reference)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_gating import (
    moe_gating_topk_reference,
    softmax_topk_renormalise_reference,
)
from tests.strategies import gate_cases

F32 = np.float32
NAN, INF = np.nan, np.inf


# ----------------------------------------------------------------------------------------------
# Worked examples (answers computed by hand)
# ----------------------------------------------------------------------------------------------


def test_ties_go_to_lower_index_and_weights_are_softmax_over_k():
    idx, w = moe_gating_topk_reference(np.array([[1.0, 3.0, 2.0, 3.0]], F32), 3)
    assert idx.tolist() == [[1, 3, 2]]
    e1 = np.exp(-1.0)  # softmax([3, 3, 2]) = [1, 1, e^-1] / (2 + e^-1)
    np.testing.assert_allclose(w, [[1 / (2 + e1), 1 / (2 + e1), e1 / (2 + e1)]], rtol=1e-6)


def test_k_equals_one_gives_weight_one_and_k_equals_e_sorts_whole_row():
    x = np.array([[0.5, -1.0, 7.0, 7.0, 2.0]], F32)
    idx, w = moe_gating_topk_reference(x, 1)
    assert idx.tolist() == [[2]] and w.tolist() == [[1.0]]
    idx, w = moe_gating_topk_reference(x, 5)
    assert idx.tolist() == [[2, 3, 4, 0, 1]]
    np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-6)


def test_output_shapes_dtypes_and_rank2_equals_rank3():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 9)).astype(np.float16)
    idx3, w3 = moe_gating_topk_reference(x, 4)
    assert idx3.shape == w3.shape == (2, 5, 4)
    assert idx3.dtype == np.int32 and w3.dtype == np.float32
    idx2, w2 = moe_gating_topk_reference(x.reshape(10, 9), 4)
    assert idx2.shape == (10, 4)
    np.testing.assert_array_equal(idx2, idx3.reshape(10, 4))
    np.testing.assert_array_equal(w2, w3.reshape(10, 4))


def test_float16_is_computed_as_its_exact_float32_value():
    x16 = np.random.default_rng(1).standard_normal((3, 4, 33)).astype(np.float16)
    a = moe_gating_topk_reference(x16, 5)
    b = moe_gating_topk_reference(x16.astype(F32), 5)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_large_logits_do_not_overflow():
    idx, w = moe_gating_topk_reference(np.array([[3e38, -3e38, 1e38]], F32), 2)
    assert idx.tolist() == [[0, 2]]
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(w, [[1.0, 0.0]])


# ----------------------------------------------------------------------------------------------
# Properties over random shapes, against independent computations
# ----------------------------------------------------------------------------------------------


def _lexsort_topk(rows: np.ndarray, k: int) -> np.ndarray:
    """Top-k by (value descending, index ascending), through lexsort rather than argsort."""
    index_key = np.broadcast_to(np.arange(rows.shape[1]), rows.shape)
    return np.lexsort((index_key, -rows), axis=-1)[:, :k]


@settings(max_examples=60, deadline=None)
@given(gate_cases(rank=None))
def test_matches_lexsort_selection_and_float64_softmax(case):
    logits, k = case
    idx, w = moe_gating_topk_reference(logits, k)
    assert idx.shape == w.shape == logits.shape[:-1] + (k,)
    e = logits.shape[-1]
    rows = logits.reshape(-1, e).astype(F32)
    idx2 = idx.reshape(-1, k)
    np.testing.assert_array_equal(idx2, _lexsort_topk(rows, k))

    sel = np.take_along_axis(rows, idx2, axis=-1).astype(np.float64)
    p = np.exp(sel - sel.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(w.reshape(-1, k), p, rtol=2e-5, atol=1e-37)
    assert np.all(np.diff(w, axis=-1) <= 0), "weights must be non-increasing along K"


def _scan_topk(row: list[float], k: int) -> list[int]:
    """Hardware-style: k passes of a strictly-greater max scan from expert 0 upwards."""
    taken: list[int] = []
    for _ in range(k):
        best = None
        for e, v in enumerate(row):
            if e not in taken and (best is None or v > row[best]):
                best = e
        taken.append(best)
    return taken


@settings(max_examples=40, deadline=None)
@given(gate_cases(max_b=2, max_s=6, max_e=24, ties=True))
def test_ties_match_a_plain_python_max_scan(case):
    logits, k = case
    idx, _ = moe_gating_topk_reference(logits, k)
    rows = logits.reshape(-1, logits.shape[-1]).astype(F32).tolist()
    expected = [_scan_topk(r, k) for r in rows]
    assert idx.reshape(len(rows), k).tolist() == expected


# ----------------------------------------------------------------------------------------------
# softmax over all E -> top-K -> renormalise  ==  softmax over the selected K
# ----------------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(gate_cases(rank=None, distributions=("grid", "ties")))
def test_renormalised_full_softmax_equals_reference_on_separated_logits(case):
    """Distinct logits at least 1/4 apart: identical indices, weights equal to float32 rounding."""
    logits, k = case
    idx_a, w_a = moe_gating_topk_reference(logits, k)
    idx_b, w_b = softmax_topk_renormalise_reference(logits, k)
    np.testing.assert_array_equal(idx_a, idx_b)
    np.testing.assert_allclose(w_a, w_b, rtol=2e-6, atol=1e-30)


@settings(max_examples=60, deadline=None)
@given(gate_cases(rank=None))
def test_renormalised_full_softmax_differs_only_where_probabilities_round_equal(case):
    logits, k = case
    idx_a, w_a = moe_gating_topk_reference(logits, k)
    idx_b, w_b = softmax_topk_renormalise_reference(logits, k)
    np.testing.assert_allclose(w_a, w_b, rtol=2e-5, atol=1e-30)
    rows = logits.reshape(-1, logits.shape[-1]).astype(F32)
    with np.errstate(under="ignore"):
        ex = np.exp(rows - rows.max(axis=-1, keepdims=True))
        probs = ex / ex.sum(axis=-1, keepdims=True, dtype=F32)
    a, b = idx_a.reshape(-1, k), idx_b.reshape(-1, k)
    # Wherever the chosen experts differ, their float32 probabilities must be exactly equal.
    np.testing.assert_array_equal(np.take_along_axis(probs, a, -1),
                                  np.take_along_axis(probs, b, -1))


def test_full_softmax_path_can_pick_a_different_expert_when_probabilities_underflow():
    x = np.array([[-300.0, 0.0, -200.0]], F32)
    idx_a, w_a = moe_gating_topk_reference(x, 3)
    idx_b, w_b = softmax_topk_renormalise_reference(x, 3)
    assert idx_a.tolist() == [[1, 2, 0]]  # by logit
    assert idx_b.tolist() == [[1, 0, 2]]  # both probabilities are 0.0: tie -> lower index
    np.testing.assert_array_equal(w_a, w_b)
    assert w_a.tolist() == [[1.0, 0.0, 0.0]]


# ----------------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "logits, k, exc, pattern",
    [
        (np.zeros(4, F32), 1, ValueError, r"rank 2 \[N, E\] or 3 \[B, S, E\]; got rank 1"),
        (np.zeros((1, 2, 3, 4), F32), 1, ValueError, r"got rank 4 with shape \(1, 2, 3, 4\)"),
        (np.zeros((2, 0, 4), F32), 1, ValueError, r"empty dimension: S = 0"),
        (np.zeros((3, 0), F32), 1, ValueError, r"empty dimension: E = 0"),
        (np.zeros((2, 4), np.int64), 1, TypeError, r"got int64; cast to float32"),
        (np.zeros((2, 4), bool), 1, TypeError, r"got bool; cast to float32"),
        (np.zeros((2, 4), np.complex64), 1, TypeError, r"float32 or float16; got complex64"),
        (np.zeros((2, 4), F32), 0, ValueError, r"1 <= k <= E = 4.*got k = 0"),
        (np.zeros((2, 4), F32), 5, ValueError, r"1 <= k <= E = 4.*got k = 5"),
        (np.zeros((2, 4), F32), 2.0, TypeError, r"k must be an int; got float"),
        (np.zeros((2, 4), F32), True, TypeError, r"k must be an int; got bool"),
    ],
)
def test_bad_input_raises_a_message_that_says_what_is_wrong(logits, k, exc, pattern):
    with pytest.raises(exc, match=pattern):
        moe_gating_topk_reference(logits, k)
    with pytest.raises(exc, match=pattern):
        softmax_topk_renormalise_reference(logits, k)


def test_numpy_integer_k_is_accepted():
    idx, _ = moe_gating_topk_reference(np.array([[1.0, 2.0]], F32), np.int64(1))
    assert idx.tolist() == [[1]]


def test_nan_raises_naming_first_bad_row_as_b_s_and_value():
    x = np.zeros((2, 3, 5), F32)
    x[1, 2, 4] = INF
    x[1, 0, 3] = NAN  # earlier in row-major order than (1, 2)
    with pytest.raises(ValueError, match=r"2 row\(s\); the first is row \(b, s\) = \(1, 0\), "
                                         r"which holds nan at expert 3.*nonfinite='hardware'"):
        moe_gating_topk_reference(x, 2)


def test_inf_raises_naming_row_n_for_rank2():
    x = np.zeros((4, 3), F32)
    x[2, 0] = -INF
    with pytest.raises(ValueError, match=r"row n = 2, which holds -inf at expert 0"):
        moe_gating_topk_reference(x, 1)
    with pytest.raises(ValueError, match=r"row n = 2"):
        softmax_topk_renormalise_reference(x, 1)


def test_unknown_nonfinite_mode():
    with pytest.raises(ValueError, match=r"nonfinite must be one of \('raise', 'hardware'\)"):
        moe_gating_topk_reference(np.zeros((1, 2), F32), 1, nonfinite="ignore")


# ----------------------------------------------------------------------------------------------
# nonfinite="hardware"
# ----------------------------------------------------------------------------------------------


def _hw(row, k):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the reference must not leak numpy RuntimeWarnings
        idx, w = moe_gating_topk_reference(np.array([row], F32), k, nonfinite="hardware")
    return idx[0].tolist(), w[0]


def test_hardware_mode_nan_is_never_preferred_to_a_finite_logit():
    idx, w = _hw([NAN, 1.0, 2.0, NAN], 2)
    assert idx == [2, 1]
    np.testing.assert_allclose(w, [1 / (1 + np.exp(-1.0)), np.exp(-1.0) / (1 + np.exp(-1.0))],
                               rtol=1e-6)


def test_hardware_mode_nan_ties_with_minus_inf_and_gets_weight_zero():
    idx, w = _hw([NAN, -INF, 0.0], 3)
    assert idx == [2, 0, 1]
    assert w.tolist() == [1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "row, k, expected_idx",
    [
        ([1.0, INF, 2.0], 2, [1, 2]),      # +inf max: inf - inf = nan
        ([INF, 0.0, INF], 2, [0, 2]),      # two +inf tie: lower index first
        ([-INF, NAN], 1, [0]),             # every selected logit is -inf
    ],
)
def test_hardware_mode_ieee_nan_weights(row, k, expected_idx):
    idx, w = _hw(row, k)
    assert idx == expected_idx
    assert np.isnan(w).all()


def test_hardware_mode_only_touches_rows_with_nonfinite_values():
    x = np.random.default_rng(3).standard_normal((2, 3, 8)).astype(F32)
    clean = moe_gating_topk_reference(x, 3)
    x[0, 1, 5] = NAN
    idx, w = moe_gating_topk_reference(x, 3, nonfinite="hardware")
    mask = np.ones((2, 3), bool)
    mask[0, 1] = False
    np.testing.assert_array_equal(idx[mask], clean[0][mask])
    np.testing.assert_array_equal(w[mask], clean[1][mask])
    assert 5 not in idx[0, 1].tolist()


@settings(max_examples=25, deadline=None)
@given(gate_cases(max_s=40, max_e=64), st.data())
def test_hardware_mode_equals_reference_with_nan_replaced_by_minus_inf(case, data):
    logits, k = case
    x = logits.astype(F32)
    n_bad = data.draw(st.integers(1, min(5, x.size)))
    flat = data.draw(st.lists(st.integers(0, x.size - 1), min_size=n_bad, max_size=n_bad))
    x.reshape(-1)[flat] = NAN
    idx, w = moe_gating_topk_reference(x, k, nonfinite="hardware")
    cleaned = np.where(np.isnan(x), F32(-INF), x)
    idx_ref = _lexsort_topk(cleaned.reshape(-1, x.shape[-1]), k)
    np.testing.assert_array_equal(idx.reshape(-1, k), idx_ref)
    finite_rows = np.isfinite(cleaned.reshape(-1, x.shape[-1])).all(axis=1)
    if finite_rows.any():
        _, ref_w = moe_gating_topk_reference(x.reshape(-1, x.shape[-1])[finite_rows], k)
        np.testing.assert_array_equal(w.reshape(-1, k)[finite_rows], ref_w)
