"""The two fused MoE kernels (issue 20 §4b): router MatMul + gating (a mixed AIC + AIV kernel) and
gather + expert up-GEMM (a cube kernel reading rows by index), against numpy and the unfused chain."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_gating import moe_dispatch
from npu_lab.kernels.moe_layer import MoeLayerConfig, moe_layer, moe_layer_reference, moe_layer_timing
from npu_lab.kernels.moe_layer.fused_gather import gather_matmul, gather_matmul_plan, gather_matmul_reference
from npu_lab.kernels.moe_layer.fused_router import fused_router_gating, fused_router_plan, fused_router_reference
from npu_lab.kernels.moe_layer.fusion import gather_matmul_fusion, router_gating_fusion
from npu_lab.lang.errors import RaceError
from npu_lab.presets import get_preset
from npu_lab.sim.mixed import MixedLaunchRecord

HW = get_preset("ascend-910b2")
#: one AI core group: every tile on one AIC and its two AIVs (the ping-pong slots are reused)
ONE_GROUP = HW.replace(cube_cores=1, vector_cores=2, provenance_note="one AI core group")
COLS = ["core", "pipe", "name", "start_us", "end_us", "bytes"]


def _router_inputs(n, h, e, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, h)).astype(np.float16),
            (rng.standard_normal((h, e)) / np.sqrt(h)).astype(np.float16))


def _logit_tolerance(x, w):
    """What two fp32 sums of the same fp16 products may differ by (another order): H·eps32·Σ|x||w|."""
    return x.shape[1] * np.finfo(np.float32).eps * (np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)))


def _check_routing(idx, wt, x, w, k):
    """Indices exact where no two of a row's top-(K+1) logits lie within the tolerance of each
    other (a near-tie may order either way); in a near-tie row the kernel's chosen experts must
    have the reference's top-K logit values within tolerance. Weights within fp32 rounding."""
    ref_idx, ref_wt, logits = fused_router_reference(x, w, k)
    tol = 4 * _logit_tolerance(x, w) + 1e-6
    order = np.sort(logits, axis=1)[:, ::-1]
    top = order[:, :min(k + 1, logits.shape[1])]
    gaps = -np.diff(top, axis=1)
    row_tol = tol.max(axis=1)
    clean = (gaps > 2 * row_tol[:, None]).all(axis=1)
    np.testing.assert_array_equal(idx[clean], ref_idx[clean])
    np.testing.assert_allclose(wt[clean], ref_wt[clean], rtol=1e-5, atol=1e-6)
    for r in np.flatnonzero(~clean):          # near ties: the same values, perhaps other experts
        got = np.sort(logits[r, idx[r]])[::-1]
        np.testing.assert_allclose(got, order[r, :k], atol=2 * row_tol[r])
        assert len(set(idx[r].tolist())) == k
    np.testing.assert_allclose(wt.sum(axis=1), 1.0, rtol=1e-5)
    return int((~clean).sum())


# ---- router + gating ------------------------------------------------------------------------------
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 90), h=st.integers(1, 140), e=st.integers(2, 130), k=st.integers(1, 8),
       seed=st.integers(0, 5), one_group=st.booleans())
def test_fused_router_matches_the_unfused_reference(n, h, e, k, seed, one_group):
    k = min(k, e)
    x, w = _router_inputs(n, h, e, seed)
    idx, wt, _ = fused_router_gating(x, w, k, hw=ONE_GROUP if one_group else HW)
    assert idx.shape == (n, k) and idx.dtype == np.int32 and wt.dtype == np.float32
    _check_routing(idx, wt, x, w, k)


def test_near_ties_are_handled_not_hidden():
    """Tied logits (duplicated router columns): the kernel picks the tied experts in some order;
    the check accepts either order but still demands the tied values."""
    x, w = _router_inputs(40, 64, 16, 3)
    w[:, 5] = w[:, 9]                                 # experts 5 and 9 always tie
    idx, wt, _ = fused_router_gating(x, w, 4)
    assert _check_routing(idx, wt, x, w, 4) > 0


@pytest.mark.parametrize("shape", [(40, 64, 60, 4), (100, 96, 64, 8), (7, 32, 33, 1), (300, 48, 8, 2)])
def test_fused_router_timing_only_equals_full(shape):
    n, h, e, k = shape
    x, w = _router_inputs(n, h, e, 0)
    for hw in (HW, ONE_GROUP):
        _, _, full = fused_router_gating(x, w, k, hw=hw)
        a, b, fast = fused_router_gating((n, h), (h, e), k, hw=hw, timing_only=True)
        assert a is None and b is None
        assert full.total_cycles == fast.total_cycles and full.hbm_bytes == fast.hbm_bytes
        pd.testing.assert_frame_equal(full.events()[COLS], fast.events()[COLS])


def test_fused_router_is_one_mixed_launch_and_pipelines_the_tiles():
    """One MIX_AIC_1_2 launch; with several tiles on one group the AIC's Mmad of tile 1 runs while
    an AIV still gates tile 0, and the AIC never starts tile i + 2 before both AIVs finished tile i."""
    n, h, e, k = 96, 256, 64, 4
    _, _, tl = fused_router_gating((n, h), (h, e), k, hw=ONE_GROUP, timing_only=True, rows=16)
    assert len(tl.launches) == 1
    rec = tl.launches[0]
    assert isinstance(rec, MixedLaunchRecord) and rec.kernel_type == "mix_aic_1_2"
    ev = tl.events()
    aic, aiv = ev[ev.core == 0], ev[ev.core >= 1]
    assert {"M", "FIX", "MTE1"} <= set(aic["pipe"]) and {"V", "MTE3"} <= set(aiv["pipe"])
    fix = aic[aic["pipe"] == "FIX"].sort_values("start_us")
    assert len(fix) == 6                               # six tiles of 16 rows
    outs = [aiv[(aiv.core == c) & (aiv["pipe"] == "MTE3")].sort_values("start_us") for c in (1, 2)]
    # two stores (indices, weights) per tile per AIV
    done = np.maximum(outs[0].ready_us.values[1::2], outs[1].ready_us.values[1::2])
    mte2 = aic[aic["pipe"] == "MTE2"].sort_values("start_us")
    per_tile = len(mte2) // 6
    first_load = mte2.start_us.values[::per_tile]
    assert (first_load[2:] >= done[:-2]).all()        # back-pressure: slot i % 2 is free again
    assert (first_load[1:] < done[:-1]).any()         # ...but the AIC runs ahead: overlap


def test_dropping_a_cross_core_wait_is_a_race():
    x, w = _router_inputs(96, 64, 16, 0)
    with pytest.raises(RaceError, match="workspace"):
        fused_router_gating(x, w, 2, hw=ONE_GROUP, rows=16, drop_wait="aiv")     # AIVs read before the AIC wrote
    with pytest.raises(RaceError, match="workspace"):
        fused_router_gating(x, w, 2, hw=ONE_GROUP, rows=16, drop_wait="aic")     # AIC overwrites a slot being read
    fused_router_gating(x, w, 2, hw=ONE_GROUP, rows=16)                           # with both: fine


def test_fused_router_bad_input():
    x, w = _router_inputs(8, 16, 8, 0)
    with pytest.raises(ValueError, match="K <= 8"):
        fused_router_gating(*_router_inputs(8, 16, 20, 0), 9)
    with pytest.raises(ValueError, match="E <= 1024"):
        fused_router_plan(8, 16, 1100, 2)
    with pytest.raises(ValueError, match="first dimension must be H"):
        fused_router_gating(x, w[:8], 2)
    with pytest.raises(ValueError, match="cannot pick more"):
        fused_router_gating(x, w, 9 if w.shape[1] < 9 else 99)
    with pytest.raises(ValueError, match="multiple of 16"):
        fused_router_gating(x, w, 2, rows=20)
    bad = x.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        fused_router_gating(bad, w, 2)
    with pytest.raises(ValueError, match="drop_wait"):
        fused_router_gating(x, w, 2, drop_wait="both")
    with pytest.raises(ValueError, match=r"\[N, H\]"):
        fused_router_gating(x[0], w, 2)


# ---- gather + matmul ------------------------------------------------------------------------------
def _dispatch_case(n, h, e, k, f, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h)).astype(np.float16)
    idx = np.stack([rng.choice(e, k, replace=False) for _ in range(n)]).astype(np.int32)
    d = moe_dispatch(idx, np.full((n, k), 1.0 / k, np.float32), num_experts=e)
    w = (rng.standard_normal((e, h, f)) / np.sqrt(h)).astype(np.float16)
    return x, d, w


def _close(got, want, a_abs):
    """fp32 sums of fp16 products in another order: H·eps32·Σ|a||b| (per element), plus a tiny floor."""
    return np.abs(got.astype(np.float64) - want) <= a_abs + 1e-6


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 40), h=st.integers(1, 150), e=st.integers(1, 9), k=st.integers(1, 3), f=st.integers(1, 140),
       seed=st.integers(0, 5), variant=st.sampled_from(["per tile", "resident", "expanded"]))
def test_gather_matmul_matches_numpy(n, h, e, k, f, seed, variant):
    k = min(k, e)
    x, d, w = _dispatch_case(n, h, e, k, f, seed)
    rows = d.expert_tokens_count
    want = gather_matmul_reference(x, d.sorted_row_idx, rows, w, k)
    exact = np.concatenate([x[d.sorted_row_idx[s:s + c] // k].astype(np.float64) @ w[ei].astype(np.float64)
                            for ei, (s, c) in enumerate(zip(np.r_[0, np.cumsum(rows)[:-1]], rows))])
    src = np.abs(np.concatenate([x[d.sorted_row_idx[s:s + c] // k].astype(np.float64) for s, c in
                                 zip(np.r_[0, np.cumsum(rows)[:-1]], rows)]))
    bound = np.concatenate([src[s:s + c] @ np.abs(w[ei].astype(np.float64))
                            for ei, (s, c) in enumerate(zip(np.r_[0, np.cumsum(rows)[:-1]], rows))])
    tol = 2 * h * np.finfo(np.float32).eps * bound
    if variant == "expanded":
        got, _ = gather_matmul(x[d.sorted_row_idx // k], d.sorted_row_idx, rows, w, k, gathered=False)
    else:
        got, _ = gather_matmul(x, d.sorted_row_idx, rows, w, k, resident=variant == "resident")
    assert got.shape == (d.sorted_row_idx.size, f) and got.dtype == np.float32
    assert _close(got, want, tol).all() and _close(got, exact, tol).all()


@pytest.mark.parametrize("resident", [False, True])
@pytest.mark.parametrize("case", [(20, 64, 4, 2, 48), (33, 300, 8, 2, 200), (5, 32, 3, 1, 16)])
def test_gather_matmul_timing_only_equals_full(case, resident):
    n, h, e, k, f = case
    x, d, w = _dispatch_case(n, h, e, k, f, 0)
    _, full = gather_matmul(x, d.sorted_row_idx, d.expert_tokens_count, w, k, resident=resident)
    none, fast = gather_matmul((n, h), None, d.expert_tokens_count, (e, h, f), k, timing_only=True, resident=resident)
    assert none is None
    assert full.total_cycles == fast.total_cycles and full.hbm_bytes == fast.hbm_bytes
    pd.testing.assert_frame_equal(full.events()[COLS], fast.events()[COLS])


def test_gather_matmul_copies_one_row_at_a_time():
    """The fused kernel's A copies are nValue = 1 Nd2Nz copies (one per gathered row); the
    unfused GEMM copies whole tiles of expanded_x."""
    x, d, w = _dispatch_case(20, 64, 4, 2, 48, 0)
    rows = d.expert_tokens_count
    _, fused = gather_matmul(x, d.sorted_row_idx, rows, w, 2)
    _, plain = gather_matmul(x[d.sorted_row_idx // 2], d.sorted_row_idx, rows, w, 2, gathered=False)
    names = lambda tl: tl.events()["name"]
    a_rows = names(fused).str.contains(r"Nd2Nz 1x1x64").sum()
    assert a_rows == d.sorted_row_idx.size                 # one per row (48 columns: one N tile)
    assert names(plain).str.contains(r"Nd2Nz 1x1x64").sum() == 0
    assert (fused.events()["name"] == "read row ids").sum() == sum(1 for r in rows if r)


def test_gather_matmul_bad_input():
    x, d, w = _dispatch_case(10, 32, 4, 2, 16, 0)
    rows, src = d.expert_tokens_count, d.sorted_row_idx
    with pytest.raises(ValueError, match="E = 4 counts"):
        gather_matmul(x, src, rows[:3], w, 2)
    with pytest.raises(ValueError, match="N·K = 20 slots"):
        gather_matmul(x, src + 100, rows, w, 2)
    with pytest.raises(ValueError, match="middle dimension must be H"):
        gather_matmul(x[:, :16], src, rows, w, 2)
    with pytest.raises(ValueError, match="reads expanded_x"):
        gather_matmul(x, src, rows, w, 2, gathered=False)
    with pytest.raises(ValueError, match=r"int array \[M"):
        gather_matmul(x, src[:-1], rows, w, 2)
    with pytest.raises(ValueError, match="at least one row"):
        gather_matmul_plan([0, 0], 32, 16, 2, 4)
    with pytest.raises(ValueError, match="multiple of 16"):
        gather_matmul(x, src, rows, w, 2, base=(20, 16))
    with pytest.raises(TypeError, match="gathered"):
        gather_matmul(x, src, rows, w, 2, gathered=1)


# ---- the comparison tables and the layer ------------------------------------------------------------
def test_fusion_tables_are_simulated_and_say_so():
    rg = router_gating_fusion(16, 256, 64, 4)
    assert list(rg["kind"]) == ["simulated", "simulated", "model bound", "model bound"]
    assert list(rg["launches"][:2]) == [2, 1]
    assert rg["us"].iloc[1] < rg["us"].iloc[0]                 # one launch overhead fewer at decode
    assert len(rg.attrs["timelines"]["fused"].launches) == 1
    gm = gather_matmul_fusion([3, 0, 5, 8], 256, 128, 2)
    assert (gm["kind"][:-1] == "simulated").all() and gm["kind"].iloc[-1] == "model bound"
    assert gm["us"].iloc[1] < gm["us"].iloc[0]                 # no gather launch at this size
    assert gm["hbm_mb"].iloc[1] < gm["hbm_mb"].iloc[0]         # expanded_x is neither written nor read
    assert gm.attrs["expanded_x_bytes_saved"] == 2 * 16 * 256 * 2


def test_layer_with_fused_kernels_equals_numpy():
    rng = np.random.default_rng(1)
    n, h, E, K, F = 24, 64, 8, 2, 48
    x = rng.standard_normal((n, h)).astype(np.float32)
    r = (rng.standard_normal((h, E)) / 8).astype(np.float32)
    up = (rng.standard_normal((E, h, F)) / 8).astype(np.float32)
    dn = (rng.standard_normal((E, F, h)) / 8).astype(np.float32)
    cfg = MoeLayerConfig(E, K, F)
    want = moe_layer_reference(x, r, (up, dn), cfg)
    plain = moe_layer(x, r, (up, dn), cfg)
    for fused in ("router", "gather", True):
        res = moe_layer(x, r, (up, dn), cfg, fused=fused, full_kernels=True)
        np.testing.assert_allclose(res.output, want, rtol=1e-4, atol=1e-4)
        st_ = res.stages
        if fused in ("router", True):
            assert st_.loc["gating", "us"] == 0 and "fused router" in st_.loc["router", "what"]
        if fused in ("gather", True):
            assert st_.loc["gather", "us"] == 0 and "fused gather" in st_.loc["experts_up", "what"]
        assert res.total_us < plain.total_us
    t = moe_layer_timing(n, h, cfg, fused=True)
    assert t.stages.loc["gating", "us"] == 0 and t.stages.loc["gather", "us"] == 0


def test_layer_refuses_what_it_cannot_fuse():
    cfg = MoeLayerConfig(16, 2, 32, gating_options={"score": "sigmoid"})
    with pytest.raises(ValueError, match="fuse only the gather"):
        moe_layer_timing(8, 64, cfg, fused="router")
    moe_layer_timing(8, 64, cfg, fused="gather")
    with pytest.raises(ValueError, match="unknown fusion"):
        moe_layer_timing(8, 64, MoeLayerConfig(16, 2, 32), fused="combine")
    with pytest.raises(TypeError, match="fused must be"):
        moe_layer_timing(8, 64, MoeLayerConfig(16, 2, 32), fused=3)
