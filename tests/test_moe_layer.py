"""npu_lab.kernels.moe_layer: the whole layer equals a plain numpy layer; its stage table; timing-only."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_layer import STAGES, MoeLayerConfig, gather_rows, moe_layer, moe_layer_reference, moe_layer_timing


def _weights(rng, n, h, e, f):
    x = rng.standard_normal((n, h)).astype(np.float32)
    r = (rng.standard_normal((h, e)) * 0.3).astype(np.float32)
    up = (rng.standard_normal((e, h, f)) * 0.1).astype(np.float32)
    down = (rng.standard_normal((e, f, h)) * 0.1).astype(np.float32)
    return x, r, (up, down)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 40), h=st.sampled_from([16, 48, 64]), e=st.integers(2, 12), k=st.integers(1, 3),
       f=st.sampled_from([16, 32]), cf=st.sampled_from([None, 0.5, 1.0, 2.0]),
       act=st.sampled_from(["relu", "silu"]), seed=st.integers(0, 999))
def test_layer_equals_plain_numpy(n, h, e, k, f, cf, act, seed):
    k = min(k, e)
    x, r, experts = _weights(np.random.default_rng(seed), n, h, e, f)
    cfg = MoeLayerConfig(e, k, f, capacity_factor=cf, activation=act)
    got = moe_layer(x, r, experts, cfg)
    ref = moe_layer_reference(x, r, experts, cfg)
    np.testing.assert_allclose(got.output, ref, rtol=1e-5, atol=1e-5)
    assert list(got.stages.index) == list(STAGES)
    assert got.stages["share"].sum() == pytest.approx(1.0)


def test_full_kernels_give_the_same_numbers_and_times():
    x, r, experts = _weights(np.random.default_rng(5), 20, 32, 6, 16)
    cfg = MoeLayerConfig(6, 2, 16, capacity_factor=1.0)
    fast = moe_layer(x, r, experts, cfg)
    full = moe_layer(x, r, experts, cfg, full_kernels=True)
    np.testing.assert_allclose(full.output, fast.output, rtol=1e-5, atol=1e-5)
    assert full.stages["us"].tolist() == fast.stages["us"].tolist()
    assert fast.dispatch.tokens_dropped > 0 or fast.dispatch.capacity * 6 >= 40


def test_a_dropped_token_gets_zero_and_the_reference_agrees():
    x, r, experts = _weights(np.random.default_rng(1), 30, 16, 4, 16)
    x[:, 0], r[0, :] = 3.0, [10.0, 0.0, 0.0, 0.0]         # every token prefers expert 0 (logit +30)
    cfg = MoeLayerConfig(4, 1, 16, capacity_factor=0.5)   # capacity ceil(0.5 * 30 / 4) = 4
    got = moe_layer(x, r, experts, cfg)
    assert got.dispatch.tokens_dropped >= 26
    assert (np.abs(got.output).sum(axis=1) == 0).sum() == got.dispatch.tokens_dropped
    np.testing.assert_allclose(got.output, moe_layer_reference(x, r, experts, cfg), rtol=1e-5, atol=1e-5)


def test_timing_only_matches_the_run_with_the_same_routing():
    x, r, experts = _weights(np.random.default_rng(2), 32, 64, 8, 32)
    cfg = MoeLayerConfig(8, 2, 32)
    run = moe_layer(x, r, experts, cfg)
    timing = moe_layer_timing(32, 64, cfg, expert_rows=run.dispatch.expert_tokens_count.tolist())
    assert timing.stages["us"].tolist() == run.stages["us"].tolist()
    assert timing.output is None


def test_decode_and_prefill_shares_move_the_right_way():
    cfg = MoeLayerConfig(64, 6, 1408)
    decode = moe_layer_timing(8, 2048, cfg)
    prefill = moe_layer_timing(2048, 2048, cfg)
    assert prefill.total_us > decode.total_us
    for res in (decode, prefill):
        assert 0 < res.gating_share < 1
        assert res.stages.loc[["activation", "combine"], "kind"].eq("stand-in").all()
    # the unfused framework chain costs more than the fused kernel at every size
    slow = moe_layer_timing(8, 2048, MoeLayerConfig(64, 6, 1408, gating_version="discrete"))
    assert slow.stages.loc["gating", "us"] > decode.stages.loc["gating", "us"]


def test_gather_kernel_equals_numpy_and_timing_only():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, 96)).astype(np.float16)
    src = rng.permutation(100)[:77]
    y, tl = gather_rows(x, src, 2)
    assert np.array_equal(y, x[src // 2])
    _, fast = gather_rows((50, 96), 77, 2, timing_only=True)
    assert fast.events().equals(tl.events())


@pytest.mark.parametrize("kw,match", [
    (dict(num_experts=4, top_k=5, ffn_dim=8), "top_k = 5 > num_experts"),
    (dict(num_experts=4, top_k=1, ffn_dim=0), "ffn_dim"),
    (dict(num_experts=4, top_k=1, ffn_dim=8, capacity_factor=0), "capacity_factor"),
    (dict(num_experts=4, top_k=1, ffn_dim=8, activation="tanh"), "activation"),
    (dict(num_experts=4, top_k=1, ffn_dim=8, gating_version="v9"), "gating_version"),
])
def test_bad_config(kw, match):
    with pytest.raises(ValueError, match=match):
        MoeLayerConfig(**kw)


def test_bad_shapes():
    x, r, (up, down) = _weights(np.random.default_rng(4), 4, 16, 4, 8)
    cfg = MoeLayerConfig(4, 2, 8)
    with pytest.raises(ValueError, match="router_weight"):
        moe_layer(x, r[:, :3], (up, down), cfg)
    with pytest.raises(ValueError, match="experts must be"):
        moe_layer(x, r, (up[:, :, :4], down), cfg)
    with pytest.raises(ValueError, match="finite"):
        moe_layer(np.full_like(x, np.nan), r, (up, down), cfg)
    with pytest.raises(ValueError, match="expert_rows"):
        moe_layer_timing(4, 16, cfg, expert_rows=[100, 0, 0, 0])
