"""npu_lab.kernels.moe_layer: the whole layer equals a plain numpy layer; its stage table; timing-only."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_gating import moe_gating_topk_reference, simulate_moe_gating
from npu_lab.kernels.moe_layer import (ROUTER_PRESETS, STAGES, MoeLayerConfig, gather_rows, gating_share_table,
                                       moe_layer, moe_layer_reference, moe_layer_timing)

DEEPSEEK = ROUTER_PRESETS["DeepSeek-V3-like"]


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
@example(n=5, h=64, e=2, k=1, f=32, cf=None, act="silu", seed=1)
def test_layer_equals_plain_numpy(n, h, e, k, f, cf, act, seed):
    k = min(k, e)
    x, r, experts = _weights(np.random.default_rng(seed), n, h, e, f)
    cfg = MoeLayerConfig(e, k, f, capacity_factor=cf, activation=act)
    got = moe_layer(x, r, experts, cfg)
    ref = moe_layer_reference(x, r, experts, cfg)
    # the FFN's hidden activation is rounded to fp16; numpy's fp32 sums over a block of tokens and over one
    # token may differ in the last bit and flip one such rounding (2^-11 relative): ~1e-5 at the output
    # (the example above: 1.3e-5, on main too)
    np.testing.assert_allclose(got.output, ref, rtol=1e-4, atol=1e-4)
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


def _deepseek_small(seed, n=6, h=32, f=16, capacity_factor=None):
    """The DeepSeek-V3-like router (E = 256, K = 8, its routing options and bias) in a small layer."""
    rng = np.random.default_rng(seed)
    x, r, experts = _weights(rng, n, h, DEEPSEEK.num_experts, f)
    cfg = MoeLayerConfig(DEEPSEEK.num_experts, DEEPSEEK.top_k, f, capacity_factor=capacity_factor,
                         gating_options=DEEPSEEK.layer_config().gating_options)
    return x, r, experts, cfg


@pytest.mark.parametrize("seed,cf", [(0, None), (1, 1.0)])
def test_deepseek_layer_equals_plain_numpy_with_grouped_routing(seed, cf):
    x, r, experts, cfg = _deepseek_small(seed, capacity_factor=cf)
    assert cfg.gating_version == "grouped" and cfg.gating_options["score"] == "sigmoid"
    got = moe_layer(x, r, experts, cfg)
    np.testing.assert_allclose(got.output, moe_layer_reference(x, r, experts, cfg), rtol=1e-5, atol=1e-5)
    # the layer routed with the full semantics: the reference's grouped sigmoid choice, scaled weights
    logits = x.astype(np.float16).astype(np.float32) @ r.astype(np.float16).astype(np.float32)
    idx, w = moe_gating_topk_reference(logits, cfg.top_k, **cfg.gating_options)
    assert np.array_equal(got.expert_indices, idx)
    np.testing.assert_allclose(got.routing_weights.sum(axis=1), 2.5, rtol=1e-5)
    plain, _ = moe_gating_topk_reference(logits, cfg.top_k)
    assert not np.array_equal(idx, plain)          # softmax top-K would route differently: the test can tell
    assert "grouped" in got.stages.loc["gating", "what"]


def test_grouped_layer_full_kernels_and_timing_only_agree():
    x, r, experts, cfg = _deepseek_small(2, n=4, h=16)
    fast = moe_layer(x, r, experts, cfg)
    full = moe_layer(x, r, experts, cfg, full_kernels=True)
    np.testing.assert_allclose(full.output, fast.output, rtol=1e-5, atol=1e-5)
    assert full.stages["us"].tolist() == fast.stages["us"].tolist()
    timing = moe_layer_timing(4, 16, cfg, expert_rows=fast.dispatch.expert_tokens_count.tolist())
    assert timing.stages["us"].tolist() == fast.stages["us"].tolist()


@pytest.mark.parametrize("tokens", [8, 4096])
def test_deepseek_timing_uses_the_grouped_kernel(tokens):
    cfg = DEEPSEEK.layer_config()
    grouped = moe_layer_timing(tokens, DEEPSEEK.hidden_dim, cfg)
    softmax = moe_layer_timing(tokens, DEEPSEEK.hidden_dim, DEEPSEEK.layer_config(softmax_path=True))
    assert softmax.stages.loc["gating", "what"].startswith("moe_gating_topk v4")
    g_us = grouped.stages.loc["gating", "us"]
    assert g_us == simulate_moe_gating(1, tokens, 256, 8, version="grouped", bias=True,
                                       **{k: v for k, v in cfg.gating_options.items() if k != "bias"}).latency_us
    assert g_us != softmax.stages.loc["gating", "us"]
    # only the gating stage moves
    others = [s for s in STAGES if s != "gating"]
    assert grouped.stages.loc[others, "us"].tolist() == softmax.stages.loc[others, "us"].tolist()


def test_presets_route_with_their_own_options():
    assert ROUTER_PRESETS["Mixtral-like"].layer_config().gating_version == "v4"
    qwen = ROUTER_PRESETS["Qwen-MoE-like"].layer_config()
    assert qwen.gating_version == "grouped" and qwen.gating_options == {"renorm": False}
    a, b = DEEPSEEK.layer_config(), DEEPSEEK.layer_config(bias_seed=1)
    assert a == DEEPSEEK.layer_config() and a != b and hash(a) == hash(DEEPSEEK.layer_config())
    assert not a.gating_options["bias"].flags.writeable
    t = gating_share_table(tokens=(8,), presets=("DeepSeek-V3-like",), gating_versions=("fused", "v4"))
    assert t["gating"].tolist() == ["grouped", "v4"] and t["routing"].tolist() == ["preset", "softmax path"]


@pytest.mark.parametrize("opts,err,match", [
    (dict(num_groups=3), ValueError, "does not divide E"),
    (dict(num_groups=4, topk_groups=5), ValueError, "topk_groups"),
    (dict(num_groups=8, topk_groups=1), ValueError, "larger than the 8 experts"),       # K = 10 > 1 · 8
    (dict(bias=np.zeros(63, np.float32)), ValueError, "bias must have shape"),
    (dict(bias=np.full(64, np.nan, np.float32)), ValueError, "bias must be finite"),
    (dict(score="relu"), ValueError, "score must be one of"),
    (dict(temperature=2.0), TypeError, "unknown routing option"),
    (dict(finished=np.zeros(3, bool)), ValueError, "cannot be a layer option"),
    ("sigmoid", TypeError, "gating_options must be a dict"),
])
def test_bad_gating_options_are_refused(opts, err, match):
    with pytest.raises(err, match=match):
        MoeLayerConfig(64, 10, 32, gating_options=opts)


def test_a_ladder_version_with_routing_options_is_refused():
    with pytest.raises(ValueError, match="softmax path only"):
        MoeLayerConfig(64, 4, 32, gating_version="v4", gating_options={"score": "sigmoid"})
    with pytest.raises(ValueError, match="softmax path only"):
        DEEPSEEK.layer_config(gating_version="discrete")
    assert MoeLayerConfig(64, 4, 32, gating_options={"renorm": True}).gating_version == "v4"   # defaults: ladder
