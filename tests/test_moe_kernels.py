"""Numerics of every MoeGatingTopK kernel version against the numpy reference (README.md, §9).

Every fused version must give *exactly* the reference's indices and its weights to float32
rounding (``v3_fast_exp``: to a bound derived from the measured error of its polynomial exp).
The discrete chain ranks *probabilities*, not logits, so where two different logits round to
the same float32 probability it may order them differently; it is held to exact equality on
well-separated logits and, on general inputs, to "any disagreement is between experts of equal
float32 probability".

Example counts are kept modest (the whole file runs in well under a minute on two cores).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from npu_lab.lang import CapabilityError
from npu_lab.kernels.moe_gating import unsupported_reason
from npu_lab.kernels.moe_gating.run import ROW_TILED
from npu_lab.kernels.moe_gating.sorted_topk import MAX_K as V4_MAX_K
from hypothesis import assume, HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_gating import (
    moe_gating_topk_reference,
    softmax_topk_renormalise_reference,
)
from npu_lab.kernels.moe_gating.run import (
    VERSIONS,
    moe_gating_topk,
    plan_moe_gating,
    simulate_moe_gating,
)
from npu_lab.kernels.moe_gating.vectorized import fast_exp_max_rel_error, fast_exp_numpy
from npu_lab.presets import get_preset
from tests.strategies import gate_cases

F32, F16 = np.float32, np.float16
ALL_VERSIONS = tuple(VERSIONS)
FUSED = tuple(v for v in VERSIONS if v != "discrete")
#: versions whose tiling is tileS (v4 and the discrete chain tile by rows)
TILE_S_VERSIONS = tuple(v for v in FUSED if v not in ROW_TILED)


def _k_supported(version, k) -> bool:
    """v4, like CANN's perf template, supports K <= 8 (it says so; tested in test_moe_v4.py)."""
    return version != "v4" or k <= V4_MAX_K
EXACT_EXP_FUSED = tuple(v for v in FUSED if v != "v3_fast_exp")

#: float32 rounding: a few ulps of a weight in [0, 1] (different but equally valid summation /
#: division orders), absolute slack for weights that are (sub)normal-tiny.
RTOL, ATOL = 1e-6, 1e-7
#: the fast exp has relative error <= eps per exponential; a weight is exp_i / sum_j exp_j, so
#: its relative error is <= ~2 eps (+ rounding). Allow 3 eps.
FAST_EXP_EPS = fast_exp_max_rel_error()
FAST_RTOL = 3 * FAST_EXP_EPS

HYP = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _probs(x: np.ndarray) -> np.ndarray:
    """The discrete chain's probabilities, [N, E] float32: exp(x - max) / sum."""
    rows = np.asarray(x, F32).reshape(-1, x.shape[-1])
    with np.errstate(under="ignore"):
        e = np.exp(rows - rows.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True, dtype=F32)


def _check_output_contract(res, logits, k) -> None:
    lead = logits.shape[:-1]
    assert res.indices.shape == (*lead, k) and res.indices.dtype == np.int32
    assert res.weights.shape == (*lead, k) and res.weights.dtype == np.float32
    assert res.timeline.total_us > 0


def assert_matches_reference(version: str, logits: np.ndarray, k: int, **kwargs):
    """Run ``version`` and compare with the reference; returns the result."""
    res = moe_gating_topk(logits, k, version=version, **kwargs)
    _check_output_contract(res, logits, k)
    ref_idx, ref_w = moe_gating_topk_reference(logits, k)
    if version == "discrete":
        _assert_discrete_consistent(res, logits, k, ref_idx, ref_w)
        return res
    np.testing.assert_array_equal(res.indices, ref_idx, err_msg=f"{version}: indices differ")
    if version == "v3_fast_exp":
        np.testing.assert_allclose(res.weights, ref_w, rtol=FAST_RTOL, atol=ATOL,
                                   err_msg=f"fast exp error bound 3 x {FAST_EXP_EPS:.3g}")
    else:
        np.testing.assert_allclose(res.weights, ref_w, rtol=RTOL, atol=ATOL,
                                   err_msg=f"{version}: weights beyond float32 rounding")
    return res


def _assert_discrete_consistent(res, logits, k, ref_idx, ref_w) -> None:
    """Disagreement with the logit-ranked reference only between experts of equal probability."""
    E = logits.shape[-1]
    p = _probs(logits)
    got = res.indices.reshape(-1, k)
    want = ref_idx.reshape(-1, k)
    # each index is a valid expert, no expert twice in a row
    assert got.min() >= 0 and got.max() < E
    assert all(len(set(row)) == k for row in got.tolist())
    # position by position, the chosen experts' probabilities are the reference's: a swap is
    # allowed only between experts whose float32 probabilities are equal
    np.testing.assert_array_equal(np.take_along_axis(p, got, axis=1),
                                  np.take_along_axis(p, want, axis=1),
                                  err_msg="discrete differs from the reference between experts "
                                          "of different probability")
    # and exactly what the library's own model of the chain says
    chain_idx, chain_w = softmax_topk_renormalise_reference(logits, k)
    np.testing.assert_array_equal(res.indices, chain_idx)
    np.testing.assert_allclose(res.weights, chain_w, rtol=RTOL, atol=ATOL)
    # the weights are the reference's (to float32 rounding) wherever the experts agree; where
    # they swapped equal-probability experts, the weight values are equal too
    np.testing.assert_allclose(res.weights, ref_w, rtol=4 * RTOL, atol=ATOL)


# ----------------------------------------------------------------------------------------------
# Property tests: every version, random shapes, float32 and float16, ties included
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ALL_VERSIONS)
@HYP
@given(case=gate_cases(rank=None))
def test_version_matches_reference_on_random_inputs(version, case):
    assume(_k_supported(version, case.k))
    assert_matches_reference(version, case.logits, case.k)


@pytest.mark.parametrize("version", ALL_VERSIONS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=gate_cases(ties=True, max_s=64, max_e=64))
def test_version_matches_reference_on_tie_heavy_inputs(version, case):
    assume(_k_supported(version, case.k))
    assert_matches_reference(version, case.logits, case.k)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=gate_cases(distributions=("grid", "ties"), rank=None))
def test_discrete_indices_exact_on_well_separated_logits(case):
    """Grid/ties logits: equal logits tie exactly, distinct ones are >= 0.25 apart within a
    range of 20, so their float32 probabilities are distinct and nothing underflows."""
    res = moe_gating_topk(case.logits, case.k, version="discrete")
    ref_idx, ref_w = moe_gating_topk_reference(case.logits, case.k)
    np.testing.assert_array_equal(res.indices, ref_idx)
    np.testing.assert_allclose(res.weights, ref_w, rtol=4 * RTOL, atol=ATOL)


@pytest.mark.parametrize("version", TILE_S_VERSIONS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=gate_cases(max_b=2, max_s=40, max_e=70), tile_s=st.integers(1, 48))
def test_version_matches_reference_with_random_explicit_tile_s(version, case, tile_s):
    assert_matches_reference(version, case.logits, case.k, tile_s=tile_s)


def test_discrete_underflow_example_orders_differently_from_fused():
    """exp(-200) and exp(-300) both underflow to 0 in float32: the chain sees a tie and sends it
    to the lower index; the fused kernels still see the logits apart."""
    x = np.array([[-300.0, 0.0, -200.0]], F32)
    p = _probs(x)
    assert p[0, 0] == p[0, 2] == 0.0
    for version in FUSED:
        res = moe_gating_topk(x, 3, version=version)
        assert res.indices.tolist() == [[1, 2, 0]], version
        np.testing.assert_allclose(res.weights, [[1.0, 0.0, 0.0]], atol=ATOL)
    disc = moe_gating_topk(x, 3, version="discrete")
    assert disc.indices.tolist() == [[1, 0, 2]]
    np.testing.assert_allclose(disc.weights, [[1.0, 0.0, 0.0]], atol=ATOL)
    assert moe_gating_topk_reference(x, 3)[0].tolist() == [[1, 2, 0]]


def test_fast_exp_error_bound_is_small_and_measured():
    """The bound the fast-exp test uses is a real measurement, ~1e-4 (the article: ~1e-3)."""
    assert 0 < FAST_EXP_EPS < 2e-3
    x = np.linspace(-80, 0, 10_001, dtype=F32)
    rel = np.abs(fast_exp_numpy(x) / np.exp(x.astype(np.float64)) - 1)
    assert rel.max() <= FAST_EXP_EPS * (1 + 1e-6)


def test_fast_exp_weights_actually_differ_from_exact_but_within_bound():
    """v3_fast_exp is a different computation (not a relabelled v3), within 3 eps."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 33, 40)).astype(F32)
    fast = moe_gating_topk(x, 6, version="v3_fast_exp")
    exact = moe_gating_topk(x, 6, version="v3")
    np.testing.assert_array_equal(fast.indices, exact.indices)
    assert not np.array_equal(fast.weights, exact.weights)
    np.testing.assert_allclose(fast.weights, exact.weights, rtol=FAST_RTOL, atol=ATOL)


# ----------------------------------------------------------------------------------------------
# Named edge cases, every version
# ----------------------------------------------------------------------------------------------


def _normal(shape, seed=0, dtype=F32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("S,tile_s", [(13, 4), (10, 3), (7, 5), (33, 8), (9, 16)])
def test_tail_tiles(version, S, tile_s):
    """S not a multiple of tileS: the last tile of each batch row is short."""
    x = _normal((2, S, 19), seed=S)
    res = assert_matches_reference(version, x, 3, tile_s=tile_s)
    if version not in ROW_TILED:
        t = res.tiling
        assert t.tileS == min(tile_s, S)
        assert t.tilesPerBatch == -(-S // t.tileS) and t.totalTiles == 2 * t.tilesPerBatch


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("E", [1, 2, 5, 8, 16])
def test_k_equals_e_sorts_the_whole_row(version, E):
    if not _k_supported(version, E):
        pytest.skip(f"{version} supports K <= {V4_MAX_K}")
    x = _normal((1, 6, E), seed=E)
    res = assert_matches_reference(version, x, E)
    np.testing.assert_array_equal(np.sort(res.indices, axis=-1),
                                  np.broadcast_to(np.arange(E), res.indices.shape))


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_k_equals_one_gives_argmax_and_weight_one(version):
    x = _normal((3, 11, 29), seed=1)
    res = assert_matches_reference(version, x, 1)
    np.testing.assert_array_equal(res.indices[..., 0], x.argmax(axis=-1))
    np.testing.assert_array_equal(res.weights, np.ones_like(res.weights))


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("E", [1, 3, 7, 9, 13, 31, 65, 257])
def test_e_not_a_multiple_of_8(version, E):
    k = min(E, 4)
    assert_matches_reference(version, _normal((2, 5, E), seed=E), k)


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("dtype", [F32, F16])
def test_all_equal_rows_give_lowest_indices_and_uniform_weights(version, dtype):
    x = np.full((2, 9, 12), 0.5, dtype)
    res = assert_matches_reference(version, x, 5)
    assert (res.indices == np.arange(5)).all()
    np.testing.assert_allclose(res.weights, 0.2, rtol=RTOL)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_many_ties_go_to_the_lower_index(version):
    # each row: two levels, ties inside each; also -0.0 vs 0.0 (equal under IEEE compare)
    x = np.array([[1, 3, 2, 3, 1, 3, 2, 0],
                  [0, 0, 0, 0, 0, 0, 0, 1],
                  [-0.0, 0.0, -0.0, 0.0, -1, -1, -1, -1]], F32)
    res = assert_matches_reference(version, x, 4)
    assert res.indices.tolist() == [[1, 3, 5, 2], [7, 0, 1, 2], [0, 1, 2, 3]]


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_float16_input(version):
    x = (_normal((2, 21, 40), seed=3) * 4).astype(F16)
    assert_matches_reference(version, x, 4)
    # float16 rounding creates ties that float32 would not have: still lower index first
    y32 = (np.float32(1.0) + np.arange(40, dtype=F32) * np.float32(1e-5))[None, :]
    assert moe_gating_topk(y32, 6, version=version).indices.tolist() == [[39, 38, 37, 36, 35, 34]]
    y = y32.astype(F16)          # 1 + 39e-5 is below half a float16 ulp at 1.0: all equal
    assert (y == 1.0).all()
    res = assert_matches_reference(version, y, 6)
    assert res.indices.tolist() == [[0, 1, 2, 3, 4, 5]]


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("shape", [(1, 1, 10), (1, 10)])
def test_a_single_point(version, shape):
    res = assert_matches_reference(version, _normal(shape, seed=5), 3)
    if version not in ROW_TILED:
        assert res.tiling.totalTiles == 1
    assert res.block_dim == 1


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_rank_two_input_keeps_rank_two_output(version):
    x = _normal((37, 24), seed=9)
    res = assert_matches_reference(version, x, 5)
    assert res.indices.shape == (37, 5)
    r3 = moe_gating_topk(x[None], 5, version=version)
    np.testing.assert_array_equal(r3.indices[0], res.indices)
    np.testing.assert_array_equal(r3.weights[0], res.weights)
    assert r3.timeline.total_us == res.timeline.total_us


@pytest.mark.parametrize("version", TILE_S_VERSIONS)
def test_every_explicit_tile_s_from_1_to_32(version):
    x = _normal((2, 37, 19), seed=11)
    ref_idx, ref_w = moe_gating_topk_reference(x, 3)
    rtol = FAST_RTOL if version == "v3_fast_exp" else RTOL
    for tile_s in range(1, 33):
        res = moe_gating_topk(x, 3, version=version, tile_s=tile_s)
        assert res.tiling.tileS == tile_s
        np.testing.assert_array_equal(res.indices, ref_idx, err_msg=f"tile_s={tile_s}")
        np.testing.assert_allclose(res.weights, ref_w, rtol=rtol, atol=ATOL, err_msg=f"tile_s={tile_s}")


@pytest.mark.parametrize("version", TILE_S_VERSIONS)
def test_largest_tile_that_fits_runs_without_ub_overflow(version):
    """tile_s = ubCapacity (the planner's own maximum) is allocatable by the kernel, with data."""
    E, K = 300, 16
    tiling, _ = plan_moe_gating(1, 10_000, E, K, version=version)
    cap = tiling.ubCapacity
    for dtype in (F32, F16):
        x = _normal((1, cap + 3, E), seed=cap, dtype=dtype)
        res = assert_matches_reference(version, x, K, tile_s=cap)
        assert res.tiling.tileS == cap and res.tiling.totalTiles == 2


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_310p3_preset(version):
    hw = get_preset("ascend-310p3")
    x = _normal((2, 48, 32), seed=13)
    if unsupported_reason(version, hw):
        # e.g. v1's 8-byte stores need DataCopyPad, which the 310P's AI core does not have
        with pytest.raises(CapabilityError, match="does not exist on"):
            moe_gating_topk(x, 4, version=version, hw=hw)
        return
    res = assert_matches_reference(version, x, 4, hw="ascend-310p3")
    assert res.timeline.hw.name == hw.name
    if version in FUSED and version != "v1":
        assert res.block_dim == min(hw.vector_cores, res.tiling.totalTiles)
    # same numbers on the other chip; a different timeline
    other = moe_gating_topk(x, 4, version=version)
    np.testing.assert_array_equal(other.indices, res.indices)
    np.testing.assert_array_equal(other.weights, res.weights)
    assert other.timeline.total_us != res.timeline.total_us


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_input_is_not_modified(version):
    x = _normal((2, 7, 9), seed=17)
    before = x.copy()
    assert_matches_reference(version, x, 3)
    np.testing.assert_array_equal(x, before)


# ----------------------------------------------------------------------------------------------
# Bad input: clear errors that say what was wrong and what would be right
# ----------------------------------------------------------------------------------------------

GOOD = np.zeros((2, 3, 8), F32)


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("shape", [(8,), (1, 2, 3, 8)])
def test_wrong_rank(version, shape):
    with pytest.raises(ValueError, match=r"rank 2 \[N, E\] or 3 \[B, S, E\]") as err:
        moe_gating_topk(np.zeros(shape, F32), 2, version=version)
    assert str(shape) in str(err.value)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_float64_says_cast_to_float32(version):
    with pytest.raises(TypeError) as err:
        moe_gating_topk(GOOD.astype(np.float64), 2, version=version)
    msg = str(err.value)
    assert "float64" in msg and "float32 or float16" in msg and "astype(np.float32)" in msg


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_, np.complex64])
def test_non_float_dtypes_are_rejected(dtype):
    with pytest.raises(TypeError, match="float32 or float16") as err:
        moe_gating_topk(GOOD.astype(dtype), 2, version="v1")
    assert np.dtype(dtype).name in str(err.value)


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("k", [0, -1, 9, 100])
def test_k_out_of_range(version, k):
    with pytest.raises(ValueError, match=r"1 <= k <= E = 8") as err:
        moe_gating_topk(GOOD, k, version=version)
    assert f"got k = {k}" in str(err.value)


@pytest.mark.parametrize("k", [2.0, "2", True, None])
def test_k_must_be_an_int(k):
    with pytest.raises(TypeError, match="k must be an int"):
        moe_gating_topk(GOOD, k, version="v3")


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("shape", [(0, 3, 8), (2, 0, 8), (2, 3, 0), (0, 8), (4, 0)])
def test_empty_dimensions(version, shape):
    with pytest.raises(ValueError, match="empty dimension") as err:
        moe_gating_topk(np.zeros(shape, F32), 1, version=version)
    assert str(shape) in str(err.value)


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_logits_name_the_row(version, bad):
    x = _normal((3, 4, 8))
    x[2, 1, 6] = bad
    x[2, 3, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite") as err:
        moe_gating_topk(x, 2, version=version)
    msg = str(err.value)
    assert "row (b, s) = (2, 1)" in msg and "expert 6" in msg and "2 row(s)" in msg
    # rank 2: the row is named by n
    with pytest.raises(ValueError, match=re.escape("row n = 9")):
        moe_gating_topk(x.reshape(12, 8), 2, version=version)


def test_float16_overflow_to_inf_is_caught():
    x = np.full((1, 2, 4), 1.0, F16)
    with np.errstate(over="ignore"):
        x[0, 1, 2] = np.float32(70000.0).astype(F16)   # beyond float16's max: inf
    assert np.isinf(x[0, 1, 2])
    with pytest.raises(ValueError, match=re.escape("row (b, s) = (0, 1)")):
        moe_gating_topk(x, 2, version="v3")


def test_unknown_version_lists_the_versions():
    with pytest.raises(ValueError, match="unknown version 'v9'") as err:
        moe_gating_topk(GOOD, 2, version="v9")
    for v in VERSIONS:
        assert v in str(err.value)
    with pytest.raises(ValueError, match="unknown version"):
        simulate_moe_gating(1, 3, 8, 2, version="fused")
    with pytest.raises(ValueError, match="unknown version"):
        plan_moe_gating(1, 3, 8, 2, version="V1")


@pytest.mark.parametrize("version", TILE_S_VERSIONS)
def test_tile_s_that_overflows_ub_says_sizes(version):
    hw = get_preset("ascend-910b2")
    x = np.zeros((1, 2000, 300), F32)
    with pytest.raises(ValueError, match="tile_s=1000 does not fit") as err:
        moe_gating_topk(x, 16, version=version, tile_s=1000)
    msg = str(err.value)
    cap = plan_moe_gating(1, 2000, 300, 16, version=version)[0].ubCapacity
    assert re.search(r"needs \d+ bytes", msg)
    assert f"{hw.ub_usable_bytes} usable bytes" in msg and hw.name in msg
    assert f"largest tileS that fits is {cap}" in msg


@pytest.mark.parametrize("version", TILE_S_VERSIONS)
@pytest.mark.parametrize("tile_s", [0, -4])
def test_fused_tile_s_below_one_is_rejected(version, tile_s):
    with pytest.raises(ValueError, match="tile_s must be >= 1"):
        moe_gating_topk(GOOD, 2, version=version, tile_s=tile_s)


@pytest.mark.parametrize("tile_s", [0, -4])
def test_discrete_tile_s_below_one_is_rejected(tile_s):
    with pytest.raises(ValueError, match="tile_s"):
        moe_gating_topk(GOOD, 2, version="discrete", tile_s=tile_s)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_unknown_chip_lists_presets(version):
    with pytest.raises(KeyError, match="unknown chip preset 'ascend-999'") as err:
        moe_gating_topk(GOOD, 2, version=version, hw="ascend-999")
    assert "ascend-910b2" in str(err.value) and "ascend-310p3" in str(err.value)


def test_simulate_validates_its_shape():
    with pytest.raises(ValueError, match="B must be a whole number >= 1"):
        simulate_moe_gating(0, 3, 8, 2, version="v1")
    with pytest.raises(ValueError, match="S must be a whole number >= 1"):
        simulate_moe_gating(1, 2.5, 8, 2, version="v1")
    with pytest.raises(ValueError, match=r"1 <= k <= E = 8"):
        simulate_moe_gating(1, 3, 8, 9, version="v3")
    with pytest.raises(TypeError, match="float64"):
        simulate_moe_gating(1, 3, 8, 2, version="v3", dtype=np.float64)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_simulate_rejects_integer_dtype_like_the_full_run(version):
    with pytest.raises(TypeError, match="float32 or float16"):
        simulate_moe_gating(1, 3, 8, 2, version=version, dtype=np.int32)


def test_discrete_rows_that_do_not_fit_raise_ub_budget_error():
    """The generic chain's row tiling is checked against what its TopK kernel allocates."""
    from npu_lab.kernels.moe_gating import UbBudgetError
    from npu_lab.kernels.moe_gating.discrete import generic_row_tiling, topk_ub_buffers

    ub = get_preset("ascend-910b2").ub_usable_bytes
    with pytest.raises(UbBudgetError, match=rf"E=20000 .*K=2\) needs \d+ bytes of UB, but the UB has {ub} bytes"):
        simulate_moe_gating(1, 4, 20000, 2, version="discrete")
    t = generic_row_tiling(100, 3000, 4, ub)            # fewer than 8 rows fit
    assert 1 <= t.rows < 8
    assert sum(topk_ub_buffers(t.rows, 3000, 4).values()) <= ub < sum(topk_ub_buffers(t.rows + 1, 3000, 4).values())
    res = assert_matches_reference("discrete", _normal((1, 9, 3000), seed=2), 4)
    assert res.timeline.total_us > 0


# ----------------------------------------------------------------------------------------------
# v3's two-level argmax (E > 64 in whole 64-lane chunks): all rows of a tile at once
# ----------------------------------------------------------------------------------------------
from npu_lab.kernels.moe_gating.ub_budget import uses_two_level_argmax  # noqa: E402
from tests.strategies import gate_logits  # noqa: E402


@st.composite
def _wide_cases(draw):
    E = draw(st.sampled_from((128, 192, 256, 512)))
    B, S = draw(st.integers(1, 2)), draw(st.integers(1, 40))
    logits = draw(gate_logits(shape=(B, S, E), ties=draw(st.booleans())))
    k = draw(st.sampled_from((1, 2, 3, 8, 16)))
    return logits, k, draw(st.one_of(st.none(), st.integers(1, 48)))


@pytest.mark.parametrize("version", ("v3", "v3_fast_exp"))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_wide_cases())
def test_v3_two_level_argmax_matches_reference(version, case):
    """Wide rows (the two-level path), ties, float16, tails (S not a multiple of tileS), K = 1."""
    logits, k, tile_s = case
    E = logits.shape[-1]
    assert uses_two_level_argmax(E)
    if tile_s is not None:                      # what fits the UB
        from npu_lab.kernels.moe_gating import moe_ub_capacity
        tile_s = min(tile_s, moe_ub_capacity("v3", E, k, get_preset("ascend-910b2").ub_usable_bytes))
    assert_matches_reference(version, logits, k, tile_s=tile_s)


def test_v3_two_level_argmax_ties_across_chunks_take_the_lowest_index(hw="ascend-910b2"):
    """The max sits in several chunks and lanes: the first (lowest) index wins (910B: v3 does not
    run on the 310P, whose AI core has no vector Copy)."""
    x = np.zeros((1, 8, 256), F32)
    x[0, :, [5, 64, 70, 200]] = 3.0             # lanes 5, 0, 6, 8 of chunks 0, 1, 1, 3
    x[0, 1, 5] = 0.0                            # row 1: the first max is in chunk 1, lane 0
    x[0, 2, [5, 64]] = 0.0                      # row 2: chunk 1, lane 6
    res = assert_matches_reference("v3", x, 4, hw=hw, tile_s=8)
    assert res.indices[0, :3, 0].tolist() == [5, 64, 70]


def test_v3_two_level_argmax_issues_o_chunks_not_o_rows_instructions():
    """Doubling the rows of a tile leaves the instructions a tile issues nearly unchanged."""
    from npu_lab.lang.context import record_calls

    def per_tile(tile_s):
        with record_calls() as logs:
            simulate_moe_gating(1, tile_s, 256, 8, version="v3", tile_s=tile_s)
        return sum(1 for log in logs for pipe, _ in log if pipe is not None)
    assert per_tile(32) == per_tile(16)
