"""Host-side token dispatch with capacity (npu_lab.kernels.moe_gating.dispatch) and its combine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_gating import MoeDispatch, moe_combine, moe_dispatch, moe_gating_topk_reference

F32 = np.float32


def _experts(rows: np.ndarray, expert_of_row: np.ndarray) -> np.ndarray:
    """A different affine map per expert, applied row-wise: f_e(v) = (e + 1) * v + e."""
    e = expert_of_row.astype(F32)[:, None]
    return (e + 1) * rows + e


def _run_experts(d: MoeDispatch, x: np.ndarray) -> np.ndarray:
    """Apply expert e's map to its rows of expanded_x, in either layout."""
    xe = d.gather(x)
    if d.capacity is None:
        return _experts(xe, d.sorted_expert_idx)
    E, C, H = xe.shape
    return _experts(xe.reshape(E * C, H), np.repeat(np.arange(E), C)).reshape(E, C, H)


def _direct(x, idx, w, E):
    """sum_k w[n, k] f_{idx[n, k]}(x[n]) over the slots with an expert, in float64."""
    out = np.zeros(x.shape, dtype=np.float64)
    for n in range(x.shape[0]):
        for k in range(idx.shape[1]):
            e = int(idx[n, k])
            if e < E:
                out[n] += float(w[n, k]) * ((e + 1) * x[n].astype(np.float64) + e)
    return out


# ----------------------------------------------------------------------------------------------
# Worked examples
# ----------------------------------------------------------------------------------------------

IDX = np.array([[1, 0], [1, 2], [0, 1], [1, 3]], np.int32)    # N = 4 tokens, K = 2, E = 4
W = np.array([[0.6, 0.4], [0.7, 0.3], [0.5, 0.5], [0.9, 0.1]], F32)


def test_dropless_sorts_stably_by_expert_like_moe_init_routing_v2():
    d = moe_dispatch(IDX, W, num_experts=4)
    # flat positions n*K + k: expert 0 at 1, 4; expert 1 at 0, 2, 5, 6; expert 2 at 3; expert 3 at 7
    assert d.sorted_row_idx.tolist() == [1, 4, 0, 2, 5, 6, 3, 7]
    assert d.sorted_expert_idx.tolist() == [0, 0, 1, 1, 1, 1, 2, 3]
    # the inverse permutation: expanded_row_idx[sorted_row_idx[i]] = i
    assert d.expanded_row_idx.tolist() == [2, 0, 3, 6, 1, 4, 5, 7]
    assert d.expert_tokens_count.tolist() == [2, 4, 1, 1]
    assert d.expert_tokens_cumsum.tolist() == [2, 6, 7, 8]
    assert [t.tolist() for t in d.expert_token_lists] == [[0, 2], [0, 1, 2, 3], [1], [3]]
    assert d.capacity is None and d.tokens_dropped == 0 and d.tokens_rerouted == 0
    x = np.arange(8, dtype=F32).reshape(4, 2)
    np.testing.assert_array_equal(d.gather(x), x[[0, 2, 0, 1, 2, 3, 1, 3]])


def test_capacity_drops_by_position_and_pads_with_zeros():
    d = moe_dispatch(IDX, W, num_experts=4, capacity=2)
    # expert 1 has 4 slots (positions 0, 2, 5, 6): it keeps the first two
    assert d.dropped.tolist() == [[False, False], [False, False], [False, True], [True, False]]
    assert d.tokens_dropped == 2
    assert d.expert_tokens_count.tolist() == [2, 2, 1, 1]
    assert d.expert_tokens_before_capacity.tolist() == [2, 4, 1, 1]
    assert d.expert_indices.tolist() == [[1, 0], [1, 2], [0, 4], [4, 3]]
    assert d.weights[2, 1] == 0 and d.weights[3, 0] == 0
    # expert * capacity + j, or -1
    assert d.expanded_row_idx.tolist() == [2, 0, 3, 4, 1, -1, -1, 6]
    x = np.arange(1, 9, dtype=F32).reshape(4, 2)
    xe = d.gather(x)
    assert xe.shape == (4, 2, 2)
    np.testing.assert_array_equal(xe[0], x[[0, 2]])
    np.testing.assert_array_equal(xe[1], x[[0, 1]])
    np.testing.assert_array_equal(xe[2], [x[1], [0, 0]])     # padded with zeros
    np.testing.assert_array_equal(xe[3], [x[3], [0, 0]])


def test_weight_policy_keeps_the_heaviest_slots():
    d = moe_dispatch(IDX, W, num_experts=4, capacity=2, drop_policy="weight")
    # expert 1's weights at positions 0, 2, 5, 6: 0.6, 0.7, 0.5, 0.9 -> keeps 6 and 2
    assert d.dropped.tolist() == [[True, False], [False, False], [False, True], [False, False]]
    assert [t.tolist() for t in d.expert_token_lists][1] == [1, 3]     # kept slots stay in position order


def test_capacity_aware_selection_falls_to_the_next_choice():
    ranking = np.array([[1, 0, 2, 3], [1, 2, 0, 3], [0, 1, 3, 2], [1, 3, 2, 0]], np.int32)
    ranking_w = np.array([[0.6, 0.4, 0.2, 0.1], [0.7, 0.3, 0.2, 0.1], [0.5, 0.5, 0.3, 0.1],
                          [0.9, 0.1, 0.05, 0.01]], F32)
    d = moe_dispatch(IDX, W, num_experts=4, capacity=2, ranking=ranking, ranking_weights=ranking_w)
    # dropped in pass 1: (2, 1) expert 1 and (3, 0) expert 1. Position 5 (token 2) tries 0 (its own, and
    # full), 1 (full), 3 (room) -> 3. Position 6 (token 3) tries 3 (its own), 2 (room) -> 2.
    assert d.expert_indices.tolist() == [[1, 0], [1, 2], [0, 3], [2, 3]]
    np.testing.assert_allclose(d.weights, [[0.6, 0.4], [0.7, 0.3], [0.5, 0.3], [0.05, 0.1]])
    assert d.tokens_rerouted == 2 and d.tokens_dropped == 0
    assert d.rerouted.tolist() == [[False, False], [False, False], [False, True], [True, False]]
    assert d.expert_tokens_count.tolist() == [2, 2, 2, 2]
    # and it still round-trips
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(F32)
    np.testing.assert_allclose(moe_combine(_run_experts(d, x), d), _direct(x, d.expert_indices, d.weights, 4),
                               rtol=1e-5, atol=1e-6)


def test_reroute_reports_what_stays_dropped():
    idx = np.zeros((3, 1), np.int32)                        # every token wants expert 0
    w = np.ones((3, 1), F32)
    ranking = np.array([[0, 1], [0, 1], [0, 1]], np.int32)
    d = moe_dispatch(idx, w, num_experts=2, capacity=1, ranking=ranking, ranking_weights=np.ones((3, 2), F32))
    assert d.expert_indices[:, 0].tolist() == [0, 1, 2]    # token 2: both experts full -> E
    assert d.tokens_rerouted == 1 and d.tokens_dropped == 1


# ----------------------------------------------------------------------------------------------
# Edge cases of the capacity
# ----------------------------------------------------------------------------------------------


def test_capacity_zero_drops_everything_and_combine_gives_zeros():
    d = moe_dispatch(IDX, W, num_experts=4, capacity=0)
    assert d.tokens_dropped == 8 and d.sorted_row_idx.size == 0
    assert np.all(d.expanded_row_idx == -1) and np.all(d.expert_indices == 4)
    x = np.ones((4, 3), F32)
    xe = d.gather(x)
    assert xe.shape == (4, 0, 3)
    np.testing.assert_array_equal(moe_combine(xe, d), np.zeros((4, 3)))


def test_exactly_full_drops_nothing():
    d = moe_dispatch(IDX, W, num_experts=4, capacity=4)    # expert 1 has exactly 4 slots
    assert d.tokens_dropped == 0
    assert d.expert_tokens_count.tolist() == [2, 4, 1, 1]
    d3 = moe_dispatch(IDX, W, num_experts=4, capacity=3)
    assert d3.tokens_dropped == 1 and d3.dropped[3, 0]


def test_a_large_factor_is_clamped_to_the_slots():
    d = moe_dispatch(IDX, W, num_experts=4, capacity_factor=100.0)
    assert d.capacity == 8 and d.tokens_dropped == 0


def test_every_token_to_one_expert():
    idx = np.full((5, 1), 2, np.int32)
    w = np.ones((5, 1), F32)
    d = moe_dispatch(idx, w, num_experts=3, capacity_factor=1.0)   # ceil(1.0 * 5 / 3) = 2
    assert d.capacity == 2
    assert d.expert_tokens_count.tolist() == [0, 0, 2] and d.tokens_dropped == 3
    assert d.expanded_row_idx.tolist() == [4, 5, -1, -1, -1]
    dl = moe_dispatch(idx, w, num_experts=3)
    assert dl.sorted_row_idx.tolist() == [0, 1, 2, 3, 4]


def test_finished_rows_go_to_no_expert():
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(F32)
    finished = np.array([False, True, False, True])
    idx, w = moe_gating_topk_reference(x, 2, finished=finished)
    d = moe_dispatch(idx, w, num_experts=8, capacity=8)
    assert d.tokens_dropped == 0 and d.sorted_row_idx.size == 4
    assert np.all(d.expanded_row_idx.reshape(4, 2)[finished] == -1)
    assert d.expert_tokens_before_capacity.sum() == 4
    out = moe_combine(_run_experts(d, x), d)
    np.testing.assert_array_equal(out[finished], 0)


# ----------------------------------------------------------------------------------------------
# Round trip and stability over random routings
# ----------------------------------------------------------------------------------------------


@st.composite
def routings(draw):
    n = draw(st.integers(1, 40))
    E = draw(st.integers(1, 12))
    k = draw(st.integers(1, E))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    logits = rng.standard_normal((n, E)).astype(F32)
    idx, w = moe_gating_topk_reference(logits, k)
    mode = draw(st.sampled_from(["dropless", "capacity", "factor"]))
    kw = {}
    if mode == "capacity":
        kw["capacity"] = draw(st.integers(0, n * k))
    elif mode == "factor":
        kw["capacity_factor"] = draw(st.sampled_from([0.25, 1.0, 1.25, 2.0]))
    kw["drop_policy"] = draw(st.sampled_from(["position", "weight"]))
    if mode != "dropless" and draw(st.booleans()):
        r_idx, r_w = moe_gating_topk_reference(logits, E)
        kw.update(ranking=r_idx, ranking_weights=r_w)
    h = draw(st.integers(1, 5))
    return logits, idx, w, E, kw, rng.standard_normal((n, h)).astype(F32)


@settings(max_examples=80, deadline=None)
@given(routings())
def test_round_trip_stability_and_capacity(case):
    _, idx, w, E, kw, x = case
    d = moe_dispatch(idx, w, num_experts=E, **kw)
    n, k = idx.shape
    # the weighted sum comes back through dispatch -> experts -> combine
    np.testing.assert_allclose(moe_combine(_run_experts(d, x), d), _direct(x, d.expert_indices, d.weights, E),
                               rtol=1e-5, atol=1e-5)
    # stable: within an expert, positions increase; experts are non-decreasing
    assert np.all(np.diff(d.sorted_expert_idx) >= 0)
    for e in range(E):
        pos = d.sorted_row_idx[d.sorted_expert_idx == e]
        assert np.all(np.diff(pos) > 0)
    # permutation and inverse
    kept = d.expanded_row_idx >= 0
    assert kept.sum() == d.sorted_row_idx.size == d.expert_tokens_count.sum()
    if d.capacity is None:
        np.testing.assert_array_equal(d.expanded_row_idx[d.sorted_row_idx], np.arange(d.sorted_row_idx.size))
    else:
        assert np.all(d.expert_tokens_count <= d.capacity)
        dest = d.expanded_row_idx[d.sorted_row_idx]
        assert len(set(dest.tolist())) == dest.size
        np.testing.assert_array_equal(dest // max(d.capacity, 1), d.sorted_expert_idx)
    # bookkeeping: every slot with an expert is kept, rerouted or dropped, exactly once
    assert d.expert_tokens_before_capacity.sum() == n * k
    assert d.tokens_dropped + d.sorted_row_idx.size == n * k
    assert not np.any(d.dropped & d.rerouted)
    if "ranking" not in kw:
        assert d.tokens_rerouted == 0
        np.testing.assert_array_equal(d.expert_indices[~d.dropped], idx[~d.dropped])
    for row in d.expert_indices.tolist():
        chosen = [e for e in row if e < E]
        assert len(chosen) == len(set(chosen)), "a token never gets the same expert twice"


def test_position_policy_drops_the_latest_slots():
    rng = np.random.default_rng(4)
    idx, w = moe_gating_topk_reference(rng.standard_normal((30, 4)).astype(F32), 2)
    d = moe_dispatch(idx, w, num_experts=4, capacity=5)
    flat = idx.reshape(-1)
    for e in range(4):
        pos = np.flatnonzero(flat == e)
        kept = ~d.dropped.reshape(-1)[pos]
        assert kept.tolist() == [True] * min(5, pos.size) + [False] * max(0, pos.size - 5)


# ----------------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, kw, exc, pattern", [
    ((IDX, W[:, :1]), dict(num_experts=4), ValueError, r"weights must have the shape of its indices \(4, 2\)"),
    ((IDX[0], W[0]), dict(num_experts=4), ValueError, r"expert_indices must have shape \[N, K\]"),
    ((IDX.astype(F32), W), dict(num_experts=4), TypeError, r"expert_indices must be an integer array"),
    ((IDX, W), dict(num_experts=4, capacity_factor=0.0), ValueError, r"capacity_factor must be a finite number > 0"),
    ((IDX, W), dict(num_experts=4, capacity_factor=-1.0), ValueError, r"capacity_factor must be"),
    ((IDX, W), dict(num_experts=4, capacity=2, capacity_factor=1.0), ValueError, r"capacity or capacity_factor, not both"),
    ((IDX, W), dict(num_experts=4, capacity=-1), ValueError, r"capacity must be >= 0"),
    ((IDX, W), dict(num_experts=4, capacity=1.5), TypeError, r"capacity must be an int"),
    ((IDX, np.where(np.eye(4, 2, dtype=bool), np.nan, W).astype(F32)), dict(num_experts=4), ValueError,
     r"weights must be finite; weights\[0, 0\] = nan"),
    ((IDX + 2, W), dict(num_experts=4), ValueError, r"expert_indices\[3, 1\] = 5 is not an expert"),
    ((IDX - 1, W), dict(num_experts=4), ValueError, r"expert_indices\[0, 1\] = -1 is not an expert"),
    ((IDX, W), dict(num_experts=0), ValueError, r"num_experts must be >= 1"),
    ((IDX, W), dict(num_experts=2**20), ValueError, r"num_experts = 1048576 is more than the 65536"),
    ((IDX, W), dict(num_experts=4, capacity=9), ValueError, r"capacity = 9 is more than the N \* K = 8 slots"),
    ((IDX, W), dict(num_experts=4, drop_policy="random"), ValueError, r"drop_policy must be one of"),
    ((IDX, W), dict(num_experts=4, ranking=IDX), ValueError, r"ranking and ranking_weights go together"),
    ((IDX, W), dict(num_experts=4, ranking=IDX, ranking_weights=W), ValueError, r"give capacity or capacity_factor"),
    ((IDX, W), dict(num_experts=4, capacity=1, ranking=IDX[:2], ranking_weights=W[:2]), ValueError,
     r"ranking must have one row per token"),
])
def test_bad_input_raises_saying_what_is_wrong(args, kw, exc, pattern):
    with pytest.raises(exc, match=pattern):
        moe_dispatch(*args, **kw)


def test_index_e_is_no_expert_but_e_plus_one_is_an_error():
    idx = np.array([[4, 0]], np.int32)
    d = moe_dispatch(idx, np.ones((1, 2), F32), num_experts=4)
    assert d.expanded_row_idx.tolist() == [-1, 0] and d.tokens_dropped == 0
    with pytest.raises(ValueError, match=r"expert_indices\[0, 0\] = 5 is not an expert"):
        moe_dispatch(idx + 1, np.ones((1, 2), F32), num_experts=4)


def test_combine_checks_its_layout():
    d = moe_dispatch(IDX, W, num_experts=4, capacity=2)
    with pytest.raises(ValueError, match=r"layout of dispatch.gather\(x\), \[E, capacity, H'\]"):
        moe_combine(np.zeros((8, 3), F32), d)
    with pytest.raises(TypeError, match=r"dispatch must be the MoeDispatch"):
        moe_combine(np.zeros((4, 2, 3), F32), "plan")
    with pytest.raises(ValueError, match=r"x must have shape \[N, H\] with N = 4"):
        d.gather(np.zeros((3, 2), F32))


# ----------------------------------------------------------------------------------------------
# Fuzz: any argument value works or raises the library's own error naming it
# ----------------------------------------------------------------------------------------------

from tests.test_fuzz_public_api import MALFORMED, _check_outcome  # noqa: E402

ARG_VALUES = st.one_of(MALFORMED, st.just(IDX), st.just(W), st.just(IDX.astype(np.int64) + 9),
                       st.just(np.full((4, 2), np.nan, F32)), st.sampled_from(["position", "weight", "x"]))


@settings(max_examples=120, deadline=None)
@given(name=st.sampled_from(["expert_indices", "weights", "num_experts", "capacity", "capacity_factor",
                             "drop_policy", "ranking", "ranking_weights"]), value=ARG_VALUES)
def test_any_dispatch_argument_works_or_names_it(name, value):
    kw = dict(expert_indices=IDX, weights=W, num_experts=4, capacity=2)
    if name == "capacity_factor":
        kw.pop("capacity")
    if name in ("ranking", "ranking_weights"):
        kw.update(ranking=IDX, ranking_weights=W)
    kw[name] = value
    _check_outcome(lambda: moe_dispatch(**kw), [name, "capacity", "ranking"], f"{name}={value!r}")
