"""The routing options of moe_gating_topk_reference (sigmoid, bias, groups, renorm, scaling, finished,
extras) and the kernel entry's refusal of them. Expected numbers are worked out by hand below or by the
independent float64 implementation ``_independent`` (plain Python loops), never by the reference."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_gating import (GATING_OPTION_DEFAULTS, GatingOutputs, moe_gating_topk,
                                        moe_gating_topk_reference)
from tests.strategies import gate_cases

F32 = np.float32
ROOT = Path(__file__).resolve().parents[1]


def _logit(p: float) -> float:
    """x with sigmoid(x) = p."""
    return math.log(p / (1 - p))


def _sig(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def _independent(x, k, *, score="softmax", bias=None, num_groups=1, topk_groups=1, group_select="max",
                 renorm=True, routed_scaling_factor=1.0, eps=1e-20):
    """The documented semantics, row by row in float64 Python: (indices, weights, chosen keys)."""
    rows = np.asarray(x, dtype=np.float64).reshape(-1, x.shape[-1])
    E = rows.shape[1]
    per = E // num_groups
    all_idx, all_w, all_keys = [], [], []
    for row in rows.tolist():
        if score == "softmax":
            m = max(row)
            ex = [math.exp(v - m) for v in row]
            z = sum(ex)
            norm = [v / z for v in ex]
        else:
            norm = [_sig(v) for v in row]
        on_logits = score == "softmax" and renorm and bias is None and not (1 < num_groups and topk_groups < num_groups)
        key = list(row) if on_logits else [n + (0.0 if bias is None else float(bias[i])) for i, n in enumerate(norm)]
        groups = list(range(num_groups))
        if num_groups > 1 and topk_groups < num_groups:
            def group_score(g):
                vals = sorted(key[g * per:(g + 1) * per], reverse=True)
                return vals[0] if group_select == "max" else vals[0] + vals[1]
            groups = sorted(groups, key=lambda g: (-group_score(g), g))[:topk_groups]
        candidates = [i for g in groups for i in range(g * per, (g + 1) * per)]
        picked = sorted(candidates, key=lambda i: (-key[i], i))[:k]
        if renorm and score == "softmax":
            m = max(row[i] for i in picked)
            vals = [math.exp(row[i] - m) for i in picked]
            s = sum(vals)
            vals = [v / (s + eps) for v in vals]
        elif renorm:
            s = sum(norm[i] for i in picked)
            vals = [norm[i] / (s + eps) for i in picked]
        else:
            vals = [norm[i] for i in picked]
        all_idx.append(picked)
        all_w.append([v * routed_scaling_factor for v in vals])
        all_keys.append([key[i] for i in picked])
    return np.array(all_idx), np.array(all_w), np.array(all_keys)


# ----------------------------------------------------------------------------------------------
# Worked by hand
# ----------------------------------------------------------------------------------------------

# sigmoid scores p, bias b, key p + b; 4 groups of 2 experts
P = [0.9, 0.1, 0.6, 0.5, 0.8, 0.05, 0.3, 0.7]
B = [0.0, 0.0, 0.2, 0.2, 0.0, 0.0, -0.1, 0.3]
#  keys:   0.9  0.1 | 0.8 0.7 | 0.8 0.05 | 0.2 1.0
X_SMALL = np.array([[_logit(p) for p in P]], F32)


def test_grouped_sigmoid_bias_top2_sum_by_hand():
    # top-2 sums: g0 1.0, g1 1.5, g2 0.85, g3 1.2 -> groups 1 and 3; their keys e2 0.8, e3 0.7, e6 0.2,
    # e7 1.0 -> e7, e2. Expert 0 (key 0.9) is better than e2 but its group lost.
    idx, w = moe_gating_topk_reference(X_SMALL, 2, score="sigmoid", bias=np.array(B, F32), num_groups=4,
                                       topk_groups=2, group_select="top2_sum", routed_scaling_factor=2.5)
    assert idx.tolist() == [[7, 2]]
    # weights from the un-biased scores 0.7 and 0.6: renormalised, then scaled
    np.testing.assert_allclose(w, [[0.7 / 1.3 * 2.5, 0.6 / 1.3 * 2.5]], rtol=2e-6)


def test_grouped_by_max_and_bias_can_order_weights_upwards():
    # group maxima: g0 0.9, g1 0.8, g2 0.8, g3 1.0 -> groups 3 and 0 -> e7 (key 1.0), e0 (key 0.9);
    # their un-biased scores 0.7 < 0.9: the weights rise along K, ordered by the biased key
    idx, w = moe_gating_topk_reference(X_SMALL, 2, score="sigmoid", bias=np.array(B, F32), num_groups=4,
                                       topk_groups=2, group_select="max", routed_scaling_factor=2.5)
    assert idx.tolist() == [[7, 0]]
    np.testing.assert_allclose(w, [[0.7 / 1.6 * 2.5, 0.9 / 1.6 * 2.5]], rtol=2e-6)
    # renorm off: the sigmoid values themselves, scaled
    _, w = moe_gating_topk_reference(X_SMALL, 2, score="sigmoid", bias=np.array(B, F32), num_groups=4,
                                     topk_groups=2, renorm=False, routed_scaling_factor=2.5)
    np.testing.assert_allclose(w, [[0.7 * 2.5, 0.9 * 2.5]], rtol=2e-6)


def _zero_masked_topk(keys: np.ndarray, allowed: np.ndarray, k: int) -> list[int]:
    """What a public reference does (masked_fill(~mask, 0.0), then topk): masked experts score 0.0."""
    masked = np.where(allowed, keys, 0.0)
    return sorted(range(keys.size), key=lambda i: (-masked[i], i))[:k]


def test_masking_excluded_groups_with_zero_would_pick_an_excluded_expert():
    p = [0.5, 0.5, 0.4, 0.1]
    b = [-0.6, -0.7, -0.9, -0.9]
    keys = np.array(p) + np.array(b)                 # -0.1 -0.2 | -0.5 -0.8: every key negative
    x = np.array([[_logit(v) for v in p]], F32)
    idx, w = moe_gating_topk_reference(x, 2, score="sigmoid", bias=np.array(b, F32), num_groups=2,
                                       topk_groups=1)
    assert idx.tolist() == [[0, 1]]                  # group 0 won (max -0.1 > -0.5): both its experts
    np.testing.assert_allclose(w, [[0.5, 0.5]], rtol=2e-6)
    allowed = np.array([True, True, False, False])
    # with 0.0 as the mask, the two excluded experts (0.0 > -0.1) win instead
    assert _zero_masked_topk(keys, allowed, 2) == [2, 3]


def test_mixtral_like_softmax_top2_renormalised_by_hand():
    x = np.array([[0.2, 1.5, -0.3, 0.9, 2.0, -1.0, 0.0, 1.5]], F32)
    idx, w = moe_gating_topk_reference(x, 2, score="softmax", renorm=True)
    assert idx.tolist() == [[4, 1]]                  # 2.0, then 1.5 (tie with expert 7: lower index)
    a = math.exp(-0.5)
    np.testing.assert_allclose(w, [[1 / (1 + a), a / (1 + a)]], rtol=2e-6)
    assert w.tolist() == moe_gating_topk_reference(x, 2)[1].tolist()


@pytest.mark.parametrize("E, K, seed", [(60, 4, 0), (64, 8, 1)])
def test_qwen_moe_like_softmax_without_renorm(E, K, seed):
    x = (np.random.default_rng(seed).standard_normal((7, E)) * 2).astype(F32)
    idx, w = moe_gating_topk_reference(x, K, renorm=False)
    want_idx, want_w, _ = _independent(x, K, renorm=False)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_allclose(w, want_w, rtol=3e-6)
    # the weights are full-softmax probabilities: they sum to less than one
    assert np.all(w.sum(axis=-1) < 1)


def _deepseek_row():
    """E = 256 in 8 groups of 32. Groups 1, 3, 5, 7 hold two strong experts (logits 4 and 3), every other
    logit is -4; expert 5 of group 0 has bias +2."""
    x = np.full(256, -4.0)
    for g in (1, 3, 5, 7):
        x[g * 32 + 10], x[g * 32 + 20] = 4.0, 3.0
    bias = np.zeros(256)
    bias[5] = 2.0
    return x.astype(F32)[None, :], bias.astype(F32)


DS_OPTS = dict(score="sigmoid", num_groups=8, topk_groups=4, group_select="top2_sum", renorm=True,
               routed_scaling_factor=2.5)


def test_deepseek_v3_like_by_hand():
    x, bias = _deepseek_row()
    idx, w = moe_gating_topk_reference(x, 8, bias=bias, **DS_OPTS)
    # top-2 sums: group 0: (s(-4) + 2) + s(-4) = 2.036; groups 1, 3, 5, 7: s(4) + s(3) = 1.935; the rest
    # 2 s(-4) = 0.036. Kept: group 0 and, of four equal groups, the lower indices 1, 3, 5.
    # keys: expert 5 (2.018), then s(4) at 42, 106, 170, then s(3) at 52, 116, 180, then s(-4): expert 0.
    assert idx.tolist() == [[5, 42, 106, 170, 52, 116, 180, 0]]
    s = [_sig(-4), _sig(4), _sig(4), _sig(4), _sig(3), _sig(3), _sig(3), _sig(-4)]
    np.testing.assert_allclose(w, [[v / sum(s) * 2.5 for v in s]], rtol=2e-6)
    # without the bias group 0 loses, and group 7 comes in
    idx, _ = moe_gating_topk_reference(x, 8, **DS_OPTS)
    assert idx.tolist() == [[42, 106, 170, 234, 52, 116, 180, 244]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_deepseek_v3_like_random_rows_match_float64(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, 256)).astype(F32)
    bias = (rng.standard_normal(256) * 0.1).astype(F32)
    idx, w = moe_gating_topk_reference(x, 8, bias=bias, **DS_OPTS)
    want_idx, want_w, _ = _independent(x, 8, bias=bias, **DS_OPTS)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_allclose(w, want_w, rtol=3e-6)
    np.testing.assert_allclose(w.sum(axis=-1), 2.5, rtol=3e-6)


def test_extras_row_idx_norm_out_and_counts():
    x = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 1.0]], F32)
    out = moe_gating_topk_reference(x, 2, extras=True, finished=np.array([False, True]))
    assert isinstance(out, GatingOutputs)
    assert out.indices.tolist() == [[2, 0], [3, 3]]       # finished row: index E = 3, weight 0
    assert out.weights[1].tolist() == [0.0, 0.0]
    assert out.row_idx.tolist() == [[0, 2], [1, 3]]        # j * N + i
    assert out.expert_counts.tolist() == [1, 0, 1]
    e = np.exp(np.array([1.0, 0.0, 2.0]) - 2.0)
    np.testing.assert_allclose(out.norm_out[0], e / e.sum(), rtol=2e-6)
    assert out.norm_out.shape == (2, 3) and out.norm_out.dtype == F32


def test_extras_keep_the_input_rank():
    x = np.random.default_rng(3).standard_normal((2, 3, 8)).astype(F32)
    out = moe_gating_topk_reference(x, 2, extras=True)
    assert out.indices.shape == out.weights.shape == out.row_idx.shape == (2, 3, 2)
    assert out.norm_out.shape == (2, 3, 8)
    assert out.row_idx.reshape(6, 2).tolist() == [[i, 6 + i] for i in range(6)]


# ----------------------------------------------------------------------------------------------
# Invariants over random configurations
# ----------------------------------------------------------------------------------------------


@st.composite
def routing_cases(draw):
    groups = draw(st.sampled_from([1, 2, 4, 8]))
    per = draw(st.integers(2, 12))
    E = groups * per
    n = draw(st.integers(1, 12))
    kgroups = draw(st.integers(1, groups))
    k = draw(st.integers(1, kgroups * per))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = (rng.integers(-24, 25, size=(n, E)) / 4).astype(F32)     # a grid: ties, no near-ties
    opts = dict(score=draw(st.sampled_from(["softmax", "sigmoid"])), num_groups=groups, topk_groups=kgroups,
                group_select=draw(st.sampled_from(["max", "top2_sum"])), renorm=draw(st.booleans()),
                routed_scaling_factor=draw(st.sampled_from([1.0, 2.5, 16.0])))
    if draw(st.booleans()):
        opts["bias"] = (rng.integers(-8, 9, size=E) / 8).astype(F32)
    return x, k, opts


@settings(max_examples=80, deadline=None)
@given(routing_cases())
def test_invariants_and_agreement_with_float64(case):
    x, k, opts = case
    out = moe_gating_topk_reference(x, k, extras=True, **opts)
    idx, w = out.indices, out.weights
    E = x.shape[1]
    per = E // opts["num_groups"]
    assert idx.dtype == np.int32 and w.dtype == F32 and idx.shape == w.shape == (x.shape[0], k)
    for row in idx.tolist():
        assert len(set(row)) == k and all(0 <= e < E for e in row)
        assert len({e // per for e in row}) <= opts["topk_groups"]
    # the bias moves the selection only: a weight is its expert's un-biased score (renormalised)
    sel = np.take_along_axis(out.norm_out, idx, axis=-1)
    if not opts["renorm"]:
        np.testing.assert_array_equal(w, sel * F32(opts["routed_scaling_factor"]))
    else:
        np.testing.assert_allclose(w.sum(axis=-1), opts["routed_scaling_factor"], rtol=1e-5)
    if "bias" not in opts:
        assert np.all(np.diff(w, axis=-1) <= 0), "without a bias the weights are non-increasing"
    # against the float64 implementation: the chosen keys agree (identities may differ only at ties)
    _, want_w, want_keys = _independent(x, k, **opts)
    if opts["score"] == "softmax" and opts["renorm"] and "bias" not in opts and not (
            1 < opts["num_groups"] and opts["topk_groups"] < opts["num_groups"]):
        got_keys = np.take_along_axis(x.astype(np.float64), idx, axis=-1)
    else:
        key64 = out.norm_out.astype(np.float64) + (opts["bias"].astype(np.float64) if "bias" in opts else 0)
        got_keys = np.take_along_axis(key64, idx, axis=-1)
    np.testing.assert_allclose(got_keys, want_keys, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w, want_w, rtol=1e-5, atol=1e-7)
    assert out.expert_counts.tolist() == np.bincount(idx.ravel(), minlength=E).tolist()


@settings(max_examples=60, deadline=None)
@given(gate_cases(rank=None), st.data())
def test_defaults_are_todays_behaviour_bit_for_bit(case, data):
    """The routing path (forced by an all-False finished mask, or extras) gives exactly the old code's
    numbers when the math options are at their defaults."""
    logits, k = case
    old_idx, old_w = moe_gating_topk_reference(logits, k)
    explicit = moe_gating_topk_reference(logits, k, **{n: v for n, v in GATING_OPTION_DEFAULTS.items()})
    assert isinstance(explicit, tuple)
    np.testing.assert_array_equal(explicit[0], old_idx)
    np.testing.assert_array_equal(explicit[1], old_w)
    if k <= 1024:
        idx, w = moe_gating_topk_reference(logits, k, finished=np.zeros(logits.shape[:-1], bool))
        np.testing.assert_array_equal(idx, old_idx)
        assert w.tobytes() == old_w.tobytes()
    out = moe_gating_topk_reference(logits, k, extras=True)
    np.testing.assert_array_equal(out.indices, old_idx)
    assert out.weights.tobytes() == old_w.tobytes()


@settings(max_examples=40, deadline=None)
@given(routing_cases(), st.data())
def test_finished_rows_get_expert_e_and_weight_zero_and_leave_the_others_alone(case, data):
    x, k, opts = case
    finished = np.array(data.draw(st.lists(st.booleans(), min_size=x.shape[0], max_size=x.shape[0])))
    idx0, w0 = moe_gating_topk_reference(x, k, **opts)
    idx, w = moe_gating_topk_reference(x, k, finished=finished, **opts)
    E = x.shape[1]
    assert np.all(idx[finished] == E) and np.all(w[finished] == 0)
    np.testing.assert_array_equal(idx[~finished], idx0[~finished])
    np.testing.assert_array_equal(w[~finished], w0[~finished])


def test_bias_changes_selection_but_not_the_weight_of_an_expert():
    x, bias = _deepseek_row()
    a = moe_gating_topk_reference(x, 8, extras=True, **{**DS_OPTS, "renorm": False})
    b = moe_gating_topk_reference(x, 8, extras=True, bias=bias, **{**DS_OPTS, "renorm": False})
    assert a.indices.tolist() != b.indices.tolist()
    np.testing.assert_array_equal(a.norm_out, b.norm_out)          # the scores ignore the bias
    for out in (a, b):
        np.testing.assert_array_equal(out.weights, np.take_along_axis(out.norm_out, out.indices, -1) * F32(2.5))


# ----------------------------------------------------------------------------------------------
# Bad options: a clear error, inputs untouched
# ----------------------------------------------------------------------------------------------

X8 = np.zeros((3, 8), F32)


@pytest.mark.parametrize("k, opts, exc, pattern", [
    (2, dict(bias=np.zeros(7, F32)), ValueError, r"bias must have shape \[E\] = \(8,\).*got shape \(7,\)"),
    (2, dict(bias=np.zeros((1, 8), F32)), ValueError, r"bias must have shape"),
    (2, dict(bias=np.array([0, 0, 0, np.nan, 0, 0, 0, 0], F32)), ValueError, r"bias must be finite; expert 3"),
    (2, dict(bias=np.zeros(8, np.int32)), TypeError, r"bias must be float32"),
    (2, dict(num_groups=3), ValueError, r"num_groups = 3 does not divide E = 8.*divisible by group_count"),
    (2, dict(num_groups=0), ValueError, r"num_groups must be >= 1"),
    (2, dict(num_groups=4, topk_groups=5), ValueError, r"1 <= topk_groups <= num_groups = 4.*kGroup"),
    (2, dict(num_groups=4, topk_groups=0), ValueError, r"1 <= topk_groups"),
    (5, dict(num_groups=4, topk_groups=2), ValueError, r"k = 5 is larger than the 4 experts in the selected groups"),
    (1, dict(num_groups=8, topk_groups=2, group_select="top2_sum"), ValueError, r"at least 2 experts per group"),
    (2, dict(finished=np.zeros(4, bool)), ValueError, r"finished must have the logits' leading shape \(3,\)"),
    (2, dict(finished=np.zeros(3, np.int8)), TypeError, r"finished must be a bool array"),
    (2, dict(score="tanh"), ValueError, r"score must be one of \('softmax', 'sigmoid'\)"),
    (2, dict(group_select="sum"), ValueError, r"group_select must be one of"),
    (2, dict(renorm=1), TypeError, r"renorm must be True or False"),
    (2, dict(extras="yes"), TypeError, r"extras must be True or False"),
    (2, dict(eps=-1e-9), ValueError, r"eps must be >= 0"),
    (2, dict(eps=float("nan")), ValueError, r"eps must be finite"),
    (2, dict(routed_scaling_factor=float("inf")), ValueError, r"routed_scaling_factor must be finite"),
    (2, dict(routed_scaling_factor="2"), TypeError, r"routed_scaling_factor must be a real number"),
    (2, dict(num_groups=2.0), TypeError, r"num_groups must be an int"),
])
def test_bad_option_raises_saying_what_is_wrong(k, opts, exc, pattern):
    snapshot = {n: (v.copy() if isinstance(v, np.ndarray) else v) for n, v in opts.items()}
    x = X8.copy()
    with pytest.raises(exc, match=pattern):
        moe_gating_topk_reference(x, k, **opts)
    np.testing.assert_array_equal(x, X8)
    for n, v in opts.items():
        if isinstance(v, np.ndarray):
            np.testing.assert_array_equal(v, snapshot[n])


def test_cann_size_limits_name_the_rule():
    wide = np.zeros((1, 2056), F32)
    with pytest.raises(ValueError, match=r"E = 2056 experts: MoeGatingTopK takes at most 2048 \(MAX_EXPERT_COUNT"):
        moe_gating_topk_reference(wide, 2, score="sigmoid")
    moe_gating_topk_reference(wide, 2)                 # the default chain keeps no operator limit
    # 60 groups of 34 experts pad to 60 * 64 = 3840 > 2048
    with pytest.raises(ValueError, match=r"num_groups \* ceil32\(E / num_groups\) = 60 \* 64 = 3840 > 2048"):
        moe_gating_topk_reference(np.zeros((1, 2040), F32), 2, num_groups=60, topk_groups=2)
    with pytest.raises(ValueError, match=r"k = 1025 > 1024: MoeGatingTopKSoftmax"):
        moe_gating_topk_reference(np.zeros((1, 1100), F32), 1025, finished=np.zeros(1, bool))
    with pytest.raises(ValueError, match=r"k = 1025 > 1024"):
        moe_gating_topk_reference(np.zeros((1, 1100), F32), 1025, renorm=False)


# ----------------------------------------------------------------------------------------------
# The kernel entry: defaults run, anything else is refused by name
# ----------------------------------------------------------------------------------------------


def test_kernel_entry_runs_options_on_the_grouped_kernel_and_refuses_them_on_the_ladder():
    x = np.random.default_rng(5).standard_normal((4, 8)).astype(F32)
    for kwargs in (dict(score="sigmoid"), dict(bias=np.zeros(8, F32)), dict(finished=np.zeros(4, bool))):
        res = moe_gating_topk(x, 2, **kwargs)
        idx, w = moe_gating_topk_reference(x, 2, **kwargs)
        assert res.version == "grouped"
        np.testing.assert_array_equal(res.indices, idx)
        np.testing.assert_array_equal(res.weights, w)
    with pytest.raises(ValueError, match=r"version 'v3' computes the article's semantics only.*score"):
        moe_gating_topk(x, 2, version="v3", score="sigmoid")
    with pytest.raises(TypeError, match=r"unknown routing option\(s\) temperature"):
        moe_gating_topk(x, 2, temperature=2.0)
    res = moe_gating_topk(x, 2, version="v3", score="softmax", renorm=True, eps=1e-20, num_groups=1)
    idx, w = moe_gating_topk_reference(x, 2)
    np.testing.assert_array_equal(res.indices, idx)
    np.testing.assert_allclose(res.weights, w, rtol=1e-6)


def test_docs_map_every_option_to_its_cann_attribute():
    text = (ROOT / "docs" / "moe_routing.md").read_text(encoding="utf-8")
    for option in GATING_OPTION_DEFAULTS:
        assert f"`{option}" in text, option
    for attr in ("normType", "groupSelectMode", "kGroup", "groupCount", "renorm", "routedScalingFactor",
                 "eps", "outFlag", "finished", "rowIdxOut"):
        assert attr in text, attr


# ----------------------------------------------------------------------------------------------
# Fuzz: any value of any option works or raises the library's own error naming the option
# ----------------------------------------------------------------------------------------------

from tests.test_fuzz_public_api import MALFORMED, _check_outcome  # noqa: E402

OPTION_VALUES = st.one_of(MALFORMED, st.sampled_from(["softmax", "sigmoid", "max", "top2_sum", "x"]),
                          st.just(np.zeros(8, F32)), st.just(np.zeros(3, bool)), st.just(np.ones(8, np.float64)),
                          st.just(np.array([np.inf] * 8, F32)))


@settings(max_examples=120, deadline=None)
@given(name=st.sampled_from(sorted(GATING_OPTION_DEFAULTS)), value=OPTION_VALUES, k=st.integers(1, 8))
def test_any_option_value_works_or_names_the_option(name, value, k):
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(F32)
    names = [name, "k", "topk_groups", "num_groups"]
    _check_outcome(lambda: moe_gating_topk_reference(x, k, **{name: value}), names, f"{name}={value!r}")
