"""Timing invariants of the MoeGatingTopK versions (README.md, §9) -- relations the hardware
model must keep whatever its parameters, not exact figures -- plus one golden sweep that guards
against silent model changes.

Golden file: ``tests/golden/moe_article_sweep.json``. After an *intended* model change,
regenerate it with::

    NPU_LAB_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_moe_timing.py -k golden

and commit the new file with the change that explains it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_gating.run import (
    VERSIONS,
    moe_gating_topk,
    plan_moe_gating,
    simulate_moe_gating,
    ub_used_bytes,
)
from npu_lab.presets import get_preset
from npu_lab.sim.launch_cost import launch_overhead_us
from tests.strategies import gate_cases
from npu_lab.kernels.moe_gating import unsupported_reason
from npu_lab.lang import CapabilityError

ALL_VERSIONS = tuple(VERSIONS)
FUSED = tuple(v for v in VERSIONS if v != "discrete")
PRESETS = ("ascend-910b2", "ascend-310p3")
VERDICTS = {"launch", "memory", "compute", "sync"}
HW = get_preset("ascend-910b2")

#: the article's shape (README.md)
ARTICLE = dict(B=1, S=1024, E=64, K=2)
ARTICLE_TILE_S = (1, 4, 8, 16, 32)

HYP = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def timing_shapes(draw, max_b=4, max_s=600, max_e=300, max_k=16):
    """(B, S, E, K, tile_s or None, preset)."""
    B = draw(st.integers(1, max_b))
    S = draw(st.integers(1, max_s))
    E = draw(st.integers(1, max_e))
    K = draw(st.integers(1, min(E, max_k)))
    tile_s = draw(st.one_of(st.none(), st.integers(1, 40)))
    hw = draw(st.sampled_from(PRESETS))
    return B, S, E, K, tile_s, hw


def runs_on(version, hw) -> bool:
    """False where the version needs an instruction the chip lacks (v1 on the 310P3)."""
    return unsupported_reason(version, hw) is None


def _simulate_or_skip(B, S, E, K, *, version, hw, tile_s, dtype=np.float32):
    """simulate_moe_gating, discarding (hypothesis.assume) tilings that do not fit the UB and
    shapes the chip cannot run (a CapabilityError: e.g. DataCopyPad on the 310P3)."""
    try:
        return simulate_moe_gating(B, S, E, K, version=version, hw=hw, tile_s=tile_s, dtype=dtype)
    except CapabilityError:
        assume(get_preset(hw).isa == "ascend910b")
        raise
    except ValueError as err:
        assume("does not fit" not in str(err) and "too wide" not in str(err)
               and "supports K <=" not in str(err) and "supports E <=" not in str(err))
        raise


def _article(version, tile_s=None, hw="ascend-910b2"):
    return simulate_moe_gating(**ARTICLE, version=version, hw=hw, tile_s=tile_s)


# ----------------------------------------------------------------------------------------------
# Timing-only == full run
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ALL_VERSIONS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=gate_cases(max_b=3, max_s=120, max_e=96),
       tile_s=st.one_of(st.none(), st.integers(1, 24)),
       hw=st.sampled_from(PRESETS))
def test_timing_only_run_equals_full_run(version, case, tile_s, hw):
    """What sliders and sweeps see (no data) is exactly what the full run computes."""
    x, k = case
    B, S = (1, x.shape[0]) if x.ndim == 2 else x.shape[:2]
    E = x.shape[-1]
    assume(version != "v4" or k <= 8)      # v4 (CANN's perf template) supports K <= 8
    try:
        full = moe_gating_topk(x, k, version=version, hw=hw, tile_s=tile_s)
    except CapabilityError:
        assume(hw == "ascend-910b2")       # the 310P3 lacks DataCopyPad / Sort32: said, not run
        raise
    timing = simulate_moe_gating(B, S, E, k, version=version, hw=hw, tile_s=tile_s, dtype=x.dtype)
    assert timing.indices is None and timing.weights is None
    assert timing.timeline.total_us == full.timeline.total_us
    assert timing.timeline.hbm_bytes == full.timeline.hbm_bytes
    assert timing.block_dim == full.block_dim and timing.tiling == full.tiling
    pd.testing.assert_frame_equal(timing.timeline.events(), full.timeline.events(),
                                  check_exact=True)


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_timing_only_equals_full_run_with_long_tile_loops(version, dtype):
    """Blocks that loop over many tiles (incl. a short tail tile): B=2, S=1001, tileS=3 -> 334
    tiles per batch row, ~14 tiles per block on 48 cores."""
    x = np.random.default_rng(3).standard_normal((2, 1001, 40)).astype(dtype)
    full = moe_gating_topk(x, 4, version=version, tile_s=3)
    timing = simulate_moe_gating(2, 1001, 40, 4, version=version, tile_s=3, dtype=dtype)
    assert timing.timeline.total_us == full.timeline.total_us
    pd.testing.assert_frame_equal(timing.timeline.events(), full.timeline.events(),
                                  check_exact=True)


def test_events_have_the_expected_columns_and_launch_rows():
    res = _article("v2", tile_s=8)
    df = res.timeline.events()
    for col in ("launch", "core", "block", "pipe", "name", "start_us", "end_us", "duration_us"):
        assert col in df.columns
    assert (df["pipe"] == "launch").sum() == 1
    assert set(df["pipe"]) >= {"launch", "MTE2", "S", "MTE3"}
    assert df["end_us"].max() <= res.latency_us + 1e-9
    disc = _article("discrete").timeline.events()
    assert (disc["pipe"] == "launch").sum() == 3


# ----------------------------------------------------------------------------------------------
# Double buffering and its pitfall
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tile_s", range(1, 33))
def test_v2_vs_v1_at_article_shape(tile_s):
    """More tiles than cores: v2's overlap makes it strictly faster. At most one tile per core:
    nothing to overlap, v2 == v1 (same instructions, same sync)."""
    v1, v2 = _article("v1", tile_s), _article("v2", tile_s)
    tiles = v1.tiling.totalTiles
    assert tiles == math.ceil(1024 / tile_s) and v1.block_dim == tiles
    assert v2.block_dim == min(HW.vector_cores, tiles)
    if tiles > HW.vector_cores:
        assert v2.latency_us < v1.latency_us
    else:
        assert v2.latency_us == pytest.approx(v1.latency_us, rel=1e-12)


@HYP
@given(B=st.integers(1, 4), tiles_per_row=st.integers(1, 40), tile_s=st.integers(1, 40),
       E=st.integers(1, 300), k_frac=st.floats(0, 1), hw=st.sampled_from(PRESETS))
def test_v2_never_slower_than_v1_with_uniform_tiles(B, tiles_per_row, tile_s, E, k_frac, hw):
    """Every tile full (S a multiple of tileS): v2 <= v1, strictly when a core gets > 1 tile."""
    S, K = tiles_per_row * tile_s, max(1, min(E, 16, round(k_frac * min(E, 16))))
    v1 = _simulate_or_skip(B, S, E, K, version="v1", hw=hw, tile_s=tile_s)
    v2 = _simulate_or_skip(B, S, E, K, version="v2", hw=hw, tile_s=tile_s)
    if v1.tiling.totalTiles > v2.block_dim:
        assert v2.latency_us < v1.latency_us
    else:
        assert v2.latency_us == pytest.approx(v1.latency_us, rel=1e-12)


def test_v2_never_slower_than_v1_with_tail_tiles():
    for B, S, E, K, tile_s in [(4, 409, 165, 5, 34), (3, 131, 144, 8, None)]:
        v1 = simulate_moe_gating(B, S, E, K, version="v1", tile_s=tile_s)
        v2 = simulate_moe_gating(B, S, E, K, version="v2", tile_s=tile_s)
        assert v1.tiling.totalTiles > v2.block_dim
        assert v2.latency_us <= v1.latency_us, (B, S, E, K, tile_s, v1.latency_us, v2.latency_us)


@HYP
@given(shape=timing_shapes())
def test_bad_sync_never_beats_v2(shape):
    B, S, E, K, tile_s, hw = shape
    v2 = _simulate_or_skip(B, S, E, K, version="v2", hw=hw, tile_s=tile_s)
    bad = _simulate_or_skip(B, S, E, K, version="v2_bad_sync", hw=hw, tile_s=tile_s)
    assert bad.tiling == v2.tiling and bad.block_dim == v2.block_dim
    assert bad.latency_us >= v2.latency_us * (1 - 1e-12)


def test_bad_sync_loses_the_overlap_at_article_shape():
    """At tileS = 8 (128 tiles on 48 cores) the misplaced barrier costs most of v2's gain."""
    v1, v2, bad = (_article(v, 8).latency_us for v in ("v1", "v2", "v2_bad_sync"))
    assert v2 < bad <= v1 * (1 + 1e-12)


# ----------------------------------------------------------------------------------------------
# v3, discrete, HBM traffic
# ----------------------------------------------------------------------------------------------


def test_v3_beats_v1_at_article_shape():
    assert _article("v3").latency_us < _article("v1").latency_us
    for tile_s in ARTICLE_TILE_S:
        assert _article("v3", tile_s).latency_us < _article("v1", tile_s).latency_us


@pytest.mark.parametrize("hw", PRESETS)
def test_discrete_is_three_launches_each_paying_overhead(hw):
    spec = get_preset(hw)
    res = _article("discrete", hw=hw)
    tl = res.timeline
    assert len(tl.launches) == 3
    assert [l.name for l in tl.launches] == ["Softmax", "TopK (full sort)", "Renormalise"]
    # each launch: the fixed part plus a part per core started (npu_lab.sim.launch_cost)
    each = [launch_overhead_us(spec, l.kernel_type, l.block_dim) for l in tl.launches]
    assert all(e > spec.launch_overhead_us for e in each)
    assert tl.launch_overhead_us == pytest.approx(sum(each), rel=1e-12)
    assert tl.total_us >= sum(each)
    for version in filter(lambda v: runs_on(v, hw), FUSED):
        fused = _article(version, hw=hw).timeline
        assert len(fused.launches) == 1
        (l,) = fused.launches
        assert fused.launch_overhead_us == pytest.approx(launch_overhead_us(spec, l.kernel_type, l.block_dim),
                                                         rel=1e-12)


def test_optimised_fused_kernel_beats_discrete_at_article_shape():
    assert _article("v3").latency_us < _article("discrete").latency_us
    assert _article("v3_fast_exp").latency_us < _article("discrete").latency_us


@HYP
@given(shape=timing_shapes(), version=st.sampled_from(FUSED))
def test_fused_moves_fewer_hbm_bytes_than_discrete(shape, version):
    B, S, E, K, tile_s, hw = shape
    fused = _simulate_or_skip(B, S, E, K, version=version, hw=hw, tile_s=tile_s)
    disc = simulate_moe_gating(B, S, E, K, version="discrete", hw=hw)
    assert fused.timeline.hbm_bytes < disc.timeline.hbm_bytes
    # exactly the compulsory traffic: logits in once, indices + weights out once
    assert fused.timeline.hbm_bytes == B * S * (E * 4 + K * (4 + 4))


def test_hbm_bytes_at_article_shape():
    N, E, K = 1024, 64, 2
    assert _article("v3").timeline.hbm_bytes == N * E * 4 + N * K * 8
    # discrete: logits in, probs out and back in, values out and in, indices + weights out
    # the chain writes probs [N, E] and values [N, K], which the next launch reads back from L2
    # (192 MB holds them): HBM sees the logits, every write, and no read-back (npu_lab.sim.l2)
    disc = _article("discrete").timeline
    assert disc.hbm_bytes == N * E * 4 * 2 + N * K * 4 * 3
    assert disc.l2_hit_bytes == N * E * 4 + N * K * 4


def test_float16_logits_halve_the_input_traffic():
    for version in FUSED:
        f32 = simulate_moe_gating(**ARTICLE, version=version)
        f16 = simulate_moe_gating(**ARTICLE, version=version, dtype=np.float16)
        assert f32.timeline.hbm_bytes - f16.timeline.hbm_bytes == 1024 * 64 * 2


# ----------------------------------------------------------------------------------------------
# UB budget, rooflines, verdicts
# ----------------------------------------------------------------------------------------------


@HYP
@given(B=st.integers(1, 8), S=st.integers(1, 100_000), E=st.integers(1, 20_000),
       k_frac=st.floats(0, 1), tile_s=st.one_of(st.none(), st.integers(1, 4096)),
       version=st.sampled_from(FUSED), hw=st.sampled_from(PRESETS))
def test_every_planned_tiling_fits_the_ub(B, S, E, k_frac, tile_s, version, hw):
    K = max(1, round(k_frac * min(E, 64)))
    spec = get_preset(hw)
    try:
        tiling, block_dim = plan_moe_gating(B, S, E, K, version=version, hw=hw, tile_s=tile_s)
    except CapabilityError:
        assert not runs_on(version, hw)     # said before planning: the chip lacks an instruction
        return
    except ValueError as err:
        # refusing is fine, as long as it is because it would not fit, and says so
        assert any(why in str(err) for why in ("does not fit", "too wide", "supports K <=", "supports E <="))
        return
    assert ub_used_bytes(tiling, version) <= spec.ub_bytes
    if version == "v4":
        assert 1 <= block_dim <= spec.vector_cores and tiling.ubFormer <= tiling.blockFormer
        return
    assert 1 <= tiling.tileS <= S and tiling.tileBS <= tiling.ubCapacity
    assert 1 <= block_dim <= tiling.totalTiles
    if version != "v1":
        assert block_dim <= spec.vector_cores


@HYP
@given(shape=timing_shapes(), version=st.sampled_from(ALL_VERSIONS),
       dtype=st.sampled_from((np.float32, np.float16)))
def test_never_faster_than_the_hbm_roofline(shape, version, dtype):
    """latency >= launch overheads + all HBM bytes at full HBM bandwidth."""
    B, S, E, K, tile_s, hw = shape
    spec = get_preset(hw)
    res = _simulate_or_skip(B, S, E, K, version=version, hw=hw, tile_s=tile_s, dtype=dtype)
    tl = res.timeline
    floor_us = tl.hbm_bytes / (spec.hbm_bandwidth_gbps * 1e3)
    assert tl.hbm_bytes > 0
    assert tl.total_us >= floor_us
    assert tl.total_us >= tl.launch_overhead_us + floor_us * (1 - 1e-12)
    assert tl.bottleneck()[0] in VERDICTS
    assert tl.summary()["bottleneck"] in VERDICTS
    assert 0 < tl.core_utilisation <= 1 + 1e-9


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("hw", PRESETS)
def test_bottleneck_verdict_is_known_at_article_shape(version, hw):
    if not runs_on(version, hw):
        pytest.skip(unsupported_reason(version, hw))
    verdict, evidence = _article(version, hw=hw).timeline.bottleneck()
    assert verdict in VERDICTS and evidence


def test_big_shape_is_memory_or_compute_bound_not_launch_bound():
    res = simulate_moe_gating(8, 4096, 256, 8, version="v3")
    assert res.timeline.bottleneck()[0] in {"memory", "compute"}


# ----------------------------------------------------------------------------------------------
# Waves
# ----------------------------------------------------------------------------------------------


def test_v1_runs_more_blocks_than_cores_in_waves():
    """tileS = 1 at S = 1024: 1024 one-point blocks on 48 cores -> 22 waves, and latency grows
    with the number of waves by at least one block's run time (+ dispatch) per wave."""
    cores = HW.vector_cores
    res = _article("v1", tile_s=1)
    assert res.block_dim == 1024 and res.tiling.totalTiles == 1024
    launch = res.timeline.launches[0]
    assert len(set(launch.block_core.tolist())) == cores            # every core used
    assert np.bincount(launch.block_core).max() == math.ceil(1024 / cores)   # 22 waves
    runs = {w: simulate_moe_gating(1, w * cores, 64, 2, version="v1", tile_s=1)
            for w in (1, 2, 3, 4, 8, 16)}
    one = runs[1].timeline.launches[0]
    block_us = HW.cycles_to_us(float((one.block_end - one.block_start).max()))
    step_us = max(block_us, cores * HW.block_dispatch_us - HW.block_dispatch_us)
    for w, r in runs.items():
        assert r.block_dim == w * cores
        assert np.bincount(r.timeline.launches[0].block_core).max() == w
        assert r.latency_us - runs[1].latency_us >= (w - 1) * step_us * (1 - 1e-9), w
    latencies = [r.latency_us for r in runs.values()] + [res.latency_us]
    assert all(a < b for a, b in zip(latencies, latencies[1:])), latencies


# ----------------------------------------------------------------------------------------------
# Golden sweep
# ----------------------------------------------------------------------------------------------

GOLDEN = Path(__file__).parent / "golden" / "moe_article_sweep.json"
GOLDEN_VERSIONS = ("v1", "v2", "v3", "discrete")
REGENERATE = (f"If the model change is intended, regenerate with\n"
              f"    NPU_LAB_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_moe_timing.py -k golden\n"
              f"and commit {GOLDEN.relative_to(Path(__file__).parent.parent)} with the change.")


def _article_sweep() -> dict:
    return {v: {str(ts): _article(v, ts).latency_us for ts in ARTICLE_TILE_S}
            for v in GOLDEN_VERSIONS}


def test_golden_article_sweep():
    current = _article_sweep()
    if os.environ.get("NPU_LAB_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        doc = {
            "description": "MoeGatingTopK total_us per version and tileS at the article's shape "
                           "on the ascend-910b2 preset (tests/test_moe_timing.py)",
            "shape": ARTICLE, "hw": "ascend-910b2", "tile_s": list(ARTICLE_TILE_S),
            "total_us": current,
        }
        GOLDEN.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
        pytest.skip(f"golden file rewritten: {GOLDEN}")
    assert GOLDEN.exists(), f"golden file {GOLDEN} is missing. {REGENERATE}"
    doc = json.loads(GOLDEN.read_text())
    assert doc["shape"] == ARTICLE and doc["hw"] == "ascend-910b2"
    golden = doc["total_us"]
    diffs = []
    for v in GOLDEN_VERSIONS:
        for ts in ARTICLE_TILE_S:
            want, got = golden[v][str(ts)], current[v][str(ts)]
            if not math.isclose(got, want, rel_tol=1e-9, abs_tol=0.0):
                diffs.append(f"  {v:>9} tileS={ts:>2}: golden {want:.6f} us, now {got:.6f} us "
                             f"({(got - want) / want:+.3%})")
    assert not diffs, ("the timing model changed at the article's shape "
                       "(B=1, S=1024, E=64, K=2, ascend-910b2):\n" + "\n".join(diffs)
                       + "\n" + REGENERATE)
