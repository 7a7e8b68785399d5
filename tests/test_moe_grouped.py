"""The grouped routing kernel (npu_lab/kernels/moe_gating/grouped.py): identical outputs to the
reference over hypothesis-drawn routing configs, the timing-only run's timeline, the chip refusal,
the entry point's dispatch, and the tiling's limits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_gating import moe_gating_topk, moe_gating_topk_reference, simulate_moe_gating
from npu_lab.kernels.moe_gating.grouped import (MAX_COLS, calculate_grouped_tiling, grouped_ub_bytes,
                                                grouped_ub_layout)
from npu_lab.kernels.moe_gating.grouped_host import run_grouped
from npu_lab.lang import CapabilityError
from npu_lab.presets import get_preset
from tests.strategies import gate_logits

F32 = np.float32
FIELDS = ("indices", "weights", "row_idx", "norm_out", "expert_counts")


def _same(out, ref, extras):
    if extras:
        for f in FIELDS:
            np.testing.assert_array_equal(getattr(out, f), getattr(ref, f), err_msg=f)
    else:
        np.testing.assert_array_equal(out[0], ref[0], err_msg="indices")
        np.testing.assert_array_equal(out[1], ref[1], err_msg="weights")


@st.composite
def routing_cases(draw, max_e=300, max_n=40):
    """(logits [N, E] or [B, S, E], k, options): every option drawn, within the CANN rules."""
    E = draw(st.integers(2, max_e))
    divisors = [d for d in range(1, E + 1) if E % d == 0 and d * -(-(E // d) // 32) * 32 <= MAX_COLS]
    groups = draw(st.sampled_from(divisors))
    G = E // groups
    kgroups = draw(st.integers(1, groups))
    select = draw(st.sampled_from(("max", "top2_sum") if G >= 2 else ("max",)))
    k = draw(st.integers(1, min(kgroups * G, 64 if draw(st.booleans()) else 2048)))
    rank3 = draw(st.booleans())
    n = draw(st.integers(1, max_n))
    shape = (2, max(1, n // 2), E) if rank3 else (n, E)
    x = draw(gate_logits(shape=shape))
    lead = x.shape[:-1]
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    opts = dict(score=draw(st.sampled_from(("softmax", "sigmoid"))), num_groups=groups, topk_groups=kgroups,
                group_select=select, renorm=draw(st.booleans()),
                routed_scaling_factor=draw(st.sampled_from((1.0, 2.5, 0.5, -1.0))),
                eps=draw(st.sampled_from((1e-20, 1e-6, 0.0))), extras=draw(st.booleans()))
    if draw(st.booleans()):
        opts["bias"] = (rng.standard_normal(E) * draw(st.sampled_from((0.01, 1.0)))).astype(F32)
    if draw(st.booleans()):
        opts["finished"] = rng.random(lead) < 0.3
    return x, k, opts


@settings(max_examples=60, deadline=None)
@given(routing_cases())
def test_grouped_kernel_equals_reference(case):
    x, k, opts = case
    try:
        ref = moe_gating_topk_reference(x, k, **opts)
    except ValueError as exc:            # a CANN limit the draw broke: the kernel must say the same
        with pytest.raises(ValueError, match=str(exc).split("(")[0][:30].replace("[", r"\[").replace("+", r"\+")
                           .replace("*", r"\*").replace(".", r"\.")):
            run_grouped(x, k, **opts)
        return
    out, timeline, tiling = run_grouped(x, k, **opts)
    _same(out, ref, opts["extras"])
    assert timeline.total_us > 0 and tiling.blockNum >= 1


DEEPSEEK = dict(score="sigmoid", num_groups=8, topk_groups=4, group_select="top2_sum", renorm=True,
                routed_scaling_factor=2.5)


@pytest.mark.parametrize("E,K,opts", [
    (256, 8, DEEPSEEK),                                         # DeepSeek-V3-like (bias added below)
    (8, 2, dict(score="softmax", renorm=True, finished=None)),  # Mixtral-like, through the kernel
    (60, 4, dict(renorm=False)),                                # Qwen-MoE-like
    (64, 8, dict(renorm=False, extras=True)),
    (2048, 1, dict(score="sigmoid")),                           # the largest row, K = 1
    (2048, 300, dict(score="softmax", renorm=False)),           # K beyond v3's and v4's limits
    (1000, 37, dict(score="softmax", num_groups=8, topk_groups=3, bias=True)),   # padded groups, dense sum
    (96, 40, dict(score="sigmoid", num_groups=12, topk_groups=6)),              # > 4 chosen groups: 2 merge rounds
])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_production_configs_exact(E, K, opts, dtype):
    rng = np.random.default_rng(E + K)
    x = rng.standard_normal((37, E)).astype(dtype)
    add_bias = opts is DEEPSEEK or opts.get("bias") is True or (opts.get("score") == "sigmoid" and "num_groups" in opts)
    opts = dict(opts)
    if add_bias:
        opts["bias"] = (rng.standard_normal(E) * 0.1).astype(F32)
    _same(run_grouped(x, K, **opts)[0], moe_gating_topk_reference(x, K, **opts), opts.get("extras", False))


def test_ties_go_to_the_lower_expert_in_groups_and_merges():
    # every key equal: groups 0..kGroup-1 win, the K lowest experts of them, in order
    x = np.zeros((5, 128), F32)
    out, _, _ = run_grouped(x, 12, score="sigmoid", num_groups=4, topk_groups=2, group_select="top2_sum")
    ref = moe_gating_topk_reference(x, 12, score="sigmoid", num_groups=4, topk_groups=2, group_select="top2_sum")
    np.testing.assert_array_equal(out[0], ref[0])
    np.testing.assert_array_equal(out[0][0], np.arange(12))


def test_entry_point_runs_the_grouped_kernel_and_refuses_ladder_versions():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 50, 256)).astype(F32)
    bias = (rng.standard_normal(256) * 0.1).astype(F32)
    res = moe_gating_topk(x, 8, bias=bias, extras=True, **DEEPSEEK)
    ref = moe_gating_topk_reference(x, 8, bias=bias, extras=True, **DEEPSEEK)
    assert res.version == "grouped" and res.block_dim == res.tiling.blockNum
    np.testing.assert_array_equal(res.indices, ref.indices)
    np.testing.assert_array_equal(res.weights, ref.weights)
    np.testing.assert_array_equal(res.extras.norm_out, ref.norm_out)
    with pytest.raises(ValueError, match=r"version 'v4' computes the article's semantics only.*score"):
        moe_gating_topk(x, 8, version="v4", score="sigmoid")
    with pytest.raises(TypeError, match=r"unknown routing option\(s\) temperature"):
        moe_gating_topk(x, 8, temperature=2.0)
    # version="grouped" with the default options: the article's semantics, indices exact
    g = moe_gating_topk(x, 4, version="grouped")
    i, w = moe_gating_topk_reference(x, 4)
    np.testing.assert_array_equal(g.indices, i)
    np.testing.assert_allclose(g.weights, w, rtol=1e-6)


@pytest.mark.parametrize("opts", [dict(DEEPSEEK, bias=True, finished=True, extras=True),
                                  dict(score="softmax", renorm=False, num_groups=4, topk_groups=4)])
def test_timing_only_run_gives_the_full_runs_timeline(opts):
    B, S, E, K = 2, 700, 256, 8
    rng = np.random.default_rng(0)
    full_opts = dict(opts)
    if opts.get("bias") is True:
        full_opts["bias"] = (rng.standard_normal(E) * 0.1).astype(F32)
    if opts.get("finished") is True:
        full_opts["finished"] = rng.random((B, S)) < 0.2
    full = moe_gating_topk(rng.standard_normal((B, S, E)).astype(F32), K, version="grouped", **full_opts)
    timing = simulate_moe_gating(B, S, E, K, version="grouped", **opts)
    assert timing.timeline.total_us == full.timeline.total_us
    assert timing.timeline.events().equals(full.timeline.events())


def test_refused_on_a_chip_without_datacopypad_and_sort32():
    x = np.zeros((4, 64), F32)
    with pytest.raises(CapabilityError, match=r"grouped routing kernel cannot run on ascend-310p3: DataCopyPad"):
        moe_gating_topk(x, 2, hw="ascend-310p3", score="sigmoid")


def test_bad_options_raise_the_references_errors_before_any_launch():
    x = np.zeros((4, 64), F32)
    for kwargs, pattern in [(dict(bias=np.zeros(63, F32)), r"bias must have shape \[E\]"),
                            (dict(num_groups=5), r"num_groups = 5 does not divide E = 64"),
                            (dict(num_groups=4, topk_groups=5), r"topk_groups must satisfy"),
                            (dict(num_groups=8, topk_groups=1), r"k = 9 is larger than the 8 experts"),
                            (dict(finished=np.zeros(3, bool)), r"finished must have the logits' leading shape"),
                            (dict(bias=np.full(64, np.nan, F32)), r"bias must be finite")]:
        with pytest.raises(ValueError, match=pattern):
            moe_gating_topk(x, 9, **kwargs)


def test_tiling_fits_the_ub_and_the_repeat_limits():
    hw = get_preset("ascend-910b2")
    for E, groups, kg in ((256, 8, 4), (2048, 1, 1), (1000, 8, 3), (64, 1, 1)):
        t = calculate_grouped_tiling(4096, E, 8, hw, score="sigmoid", has_bias=True, num_groups=groups,
                                     topk_groups=kg, extras=True, has_finished=True)
        assert grouped_ub_bytes(t.ubFormer, t) <= hw.ub_usable_bytes
        assert t.ubFormer * t.colAlign // 32 <= 255
        assert all(nbytes % 256 == 0 for _, _, nbytes in grouped_ub_layout(t.ubFormer, t))
        assert (t.blockNum - 1) * t.blockFormer + t.blockTail == 4096
    with pytest.raises(ValueError, match=r"pads every group to a multiple of 32 experts.*2048"):
        calculate_grouped_tiling(4, 2040, 4, hw, num_groups=255, topk_groups=1)


# ---- the C++ listing ----------------------------------------------------------------------------------

import re  # noqa: E402
from pathlib import Path  # noqa: E402

from npu_lab.lang import ASCEND_C_API  # noqa: E402
from npu_lab.lang.context import record_calls  # noqa: E402

_CPP = Path(__file__).resolve().parents[1] / "npu_lab" / "kernels" / "moe_gating" / "grouped.cpp"


@pytest.mark.parametrize("E,K,opts", [
    (256, 8, dict(DEEPSEEK, bias=np.linspace(-0.1, 0.1, 256, dtype=F32), extras=True,
                  finished=np.arange(20) % 3 == 0)),
    (1000, 70, dict(score="softmax", num_groups=8, topk_groups=6, renorm=True)),
    (100, 3, dict(renorm=False)),
])
def test_every_call_of_a_traced_run_is_in_the_cpp_listing(E, K, opts):
    text = re.sub(r"//[^\n]*", "", _CPP.read_text(encoding="utf-8"))
    x = np.random.default_rng(0).standard_normal((20, E)).astype(np.float16)
    with record_calls() as logs:
        run_grouped(x, K, **opts)
    names = {(name.split(" ")[0] if pipe else name.split("<")[0]) for pipe, name in logs[0]}
    api = {n for n in names if n in ASCEND_C_API or f"TPipe::{n}" in ASCEND_C_API}
    assert {"Sort32", "MrgSort", "Gather", "DataCopyPad"} <= api
    for name in api:
        assert re.search(r"\b" + re.escape(name) + r"\s*[<(]", text), f"{name} is called by the kernel but not in grouped.cpp"
