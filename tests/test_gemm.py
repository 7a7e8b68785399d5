"""GEMM on the cube core (npu_lab.kernels.gemm; issue 17 §3): every version equals the float64
reference within its dtype's tolerance over many shapes (M, N, K not multiples of 16 included);
timing-only and full runs give the same timeline; the block-class fast path equals timing every
block; no version beats the chip's cube roofline; the K-split needs SetAtomicAdd; the tiling fits
L1/L0 and its task grid covers C exactly once."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab import get_preset
from npu_lab.kernels.gemm import (GEMM_VERSIONS, block_tasks, gemm, gemm_reference, gemm_roofline, gemm_tiling)
from npu_lab.kernels.gemm.tiling import l1_l0_bytes
from npu_lab.lang import CapabilityError
from npu_lab.lang.launch import full_timing_every_block
from npu_lab.sim.cube_costs import cube_peak_tflops, mmad_cycles

HW = get_preset("ascend-910b2")
COLUMNS = ["launch", "core", "block", "pipe", "name", "start_us", "end_us", "bytes", "elements", "source"]
VERSIONS = list(GEMM_VERSIONS)


def _operands(M, K, N, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype == np.int8:
        return rng.integers(-128, 128, (M, K)).astype(np.int8), rng.integers(-128, 128, (K, N)).astype(np.int8)
    return rng.standard_normal((M, K)).astype(dtype), rng.standard_normal((K, N)).astype(dtype)


def _assert_close(C, A, B, version, tiling_ksplit=1):
    """int8: exact. float: fp32 accumulation (K x eps32 x sum|a||b|) plus the output's rounding
    (half: one ulp per K-split partial sum, which the half atomic add rounds)."""
    ref = gemm_reference(A, B)
    assert C.dtype == ref.dtype and C.shape == ref.shape
    if A.dtype == np.int8:
        np.testing.assert_array_equal(C, ref)
        return
    exact = A.astype(np.float64) @ B.astype(np.float64)
    mag = np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))
    out_eps = np.finfo(C.dtype).eps
    bound = A.shape[1] * 2.0 ** -23 * mag + (tiling_ksplit + 1) * out_eps * np.maximum(np.abs(exact), mag / 8)
    err = np.abs(C.astype(np.float64) - exact)
    assert np.all(err <= bound + 1e-30), f"{version}: max error {err.max():.3g} over bound at {np.argmax(err - bound)}"


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(M=st.integers(1, 160), K=st.integers(1, 300), N=st.integers(1, 160),
       dtype=st.sampled_from([np.float16, np.float32, np.int8]), seed=st.integers(0, 2**16))
def test_every_version_equals_the_reference(version, M, K, N, dtype, seed):
    A, B = _operands(M, K, N, dtype, seed)
    C, tl = gemm(A, B, version=version)
    t = gemm_tiling(M, N, K, dtype, version=version)
    _assert_close(C, A, B, version, t.kSplit)
    assert tl.total_us > 0


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("shape", [(16, 16, 16), (30, 70, 40), (130, 257, 200), (1, 1000, 33)])
def test_tails_and_edges(version, shape):
    M, K, N = shape
    for dtype in (np.float16, np.float32, np.int8):
        A, B = _operands(M, K, N, dtype, M + K + N)
        C, _ = gemm(A, B, version=version)
        _assert_close(C, A, B, version, gemm_tiling(M, N, K, dtype, version=version).kSplit)


def _assert_same_timeline(fast, full):
    assert fast.total_us == full.total_us
    assert fast.hbm_bytes == full.hbm_bytes
    assert fast.busy_us_by_pipe() == full.busy_us_by_pipe()
    a, b = full.events()[COLUMNS], fast.events()[COLUMNS]
    assert len(a) == len(b) and a.equals(b)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("shape", [(300, 200, 700), (64, 512, 1000), (1, 2048, 4096)])
def test_timing_only_equals_full_and_block_classes_equal_every_block(version, shape):
    M, K, N = shape
    A, B = _operands(M, K, N, np.float16, 3)
    C, full = gemm(A, B, version=version)
    _, timing = gemm((M, K), (K, N), version=version, timing_only=True, dtype=np.float16)
    _assert_same_timeline(timing, full)
    with full_timing_every_block():
        C2, every = gemm(A, B, version=version)
    np.testing.assert_array_equal(C, C2)
    _assert_same_timeline(full, every)


def test_the_cube_roofline_is_the_published_rate():
    """24 AIC x 16x16x16 half MACs per cycle x 2 flops x 1.8 GHz = 353.9 TFLOPS (Cube指令理论性能
    汇总.md 表1); int8 twice, float a quarter."""
    assert cube_peak_tflops(HW) == pytest.approx(24 * 4096 * 2 * 1.8e9 / 1e12)
    assert round(cube_peak_tflops(HW)) == 354
    assert cube_peak_tflops(HW, np.int8) == 2 * cube_peak_tflops(HW)
    assert cube_peak_tflops(HW, np.float32) == cube_peak_tflops(HW) / 4
    # one 16x16x16 half fractal per cycle; int8 packs K=32 in one; float takes 4 per 16 of K
    head = HW.cube_mmad_head_cycles
    assert mmad_cycles(HW, 128, 128, 64, np.float16)[0] == head + 8 * 8 * 4
    assert mmad_cycles(HW, 128, 128, 64, np.int8)[0] == head + 8 * 8 * 2
    assert mmad_cycles(HW, 128, 128, 64, np.float32)[0] == head + 8 * 8 * 16


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (256, 8192, 256), (16, 4096, 11008)])
def test_no_version_beats_the_rooflines(version, shape):
    M, K, N = shape
    _, tl = gemm((M, K), (K, N), version=version, timing_only=True, dtype=np.float16)
    r = gemm_roofline(M, N, K)
    assert tl.total_us >= r["cube_us"] and tl.total_us >= r["hbm_us"]
    assert tl.hbm_bytes >= r["min_hbm_bytes"]


def test_the_ladder_gets_faster_on_a_multi_tile_shape():
    """v2 moves fewer bytes than v1 (panels, the A panel reused across N); v3's double buffers
    overlap the pipes (never slower than v2 here); v4's K-split fills the cores on a skinny shape."""
    M, K, N = 512, 512, 1024
    t = {v: gemm((M, K), (K, N), version=v, timing_only=True, dtype=np.float16)[1] for v in VERSIONS}
    assert t["v2"].hbm_bytes < t["v1"].hbm_bytes
    assert t["v2"].total_us < t["v1"].total_us
    assert t["v3"].total_us <= t["v2"].total_us
    skinny = {v: gemm((16, 8192), (8192, 256), version=v, timing_only=True, dtype=np.float16)[1] for v in ("v3", "v4")}
    assert skinny["v4"].total_us < skinny["v3"].total_us


def test_k_split_needs_the_atomic_add():
    """Without SetAtomicAdd each K-split task overwrites C with its partial sum: the result is one
    partial sum, not the product (on the chip: whichever write lands last)."""
    A, B = _operands(32, 1024, 48, np.float32, 5)
    t = gemm_tiling(32, 48, 1024, np.float32, version="v4", k_split=4)
    assert t.kSplit == 4 and t.usedCoreNum == 4
    good, _ = gemm(A, B, version="v4", tiling=t)
    _assert_close(good, A, B, "v4", 4)
    bad, _ = gemm(A, B, version="v4", tiling=t, atomic=False)
    last = A[:, 768:].astype(np.float64) @ B[768:].astype(np.float64)
    np.testing.assert_allclose(bad, last, rtol=1e-4, atol=1e-3)
    assert np.abs(bad - good).max() > 1.0


def test_the_tiling_fits_the_buffers_and_the_grid_covers_c_once():
    for version in VERSIONS:
        for shape in [(4096, 4096, 4096), (100, 5000, 77), (1, 8192, 3)]:
            M, K, N = shape
            t = gemm_tiling(M, N, K, np.float16, version=version)
            need = l1_l0_bytes(t, np.float16)
            assert need["L1"] <= HW.l1_bytes and need["L0A"] <= HW.l0a_bytes
            assert need["L0B"] <= HW.l0b_bytes and need["L0C"] <= HW.l0c_bytes
            assert t.usedCoreNum <= HW.cube_cores
            covered = np.zeros((M, N), np.int64)
            for b in range(t.usedCoreNum):
                for task in block_tasks(t, b):
                    mi, ni, ki = t.task_coords(task)
                    if ki == 0:
                        covered[mi * t.singleCoreM:(mi + 1) * t.singleCoreM, ni * t.singleCoreN:(ni + 1) * t.singleCoreN] += 1
            assert (covered == 1).all(), (version, shape)


def test_the_tiling_refuses_what_does_not_fit():
    with pytest.raises(ValueError, match="L0C: 262,144 B > 131,072 B"):
        gemm_tiling(4096, 4096, 4096, np.float16, version="v3", base=(256, 256, 64))
    with pytest.raises(ValueError, match="multiples of 16"):
        gemm_tiling(64, 64, 64, np.float16, base=(100, 64, 64))
    with pytest.raises(ValueError, match="version='v4'"):
        gemm_tiling(64, 64, 64, np.float16, version="v3", k_split=2)


def test_bad_inputs_say_what_is_wrong():
    with pytest.raises(ValueError, match="inner dimensions"):
        gemm(np.zeros((4, 5), np.float16), np.zeros((6, 4), np.float16))
    with pytest.raises(TypeError, match="float16, float32, int8 or bfloat16"):
        gemm(np.zeros((4, 5), np.float64), np.zeros((5, 4), np.float64))
    with pytest.raises(TypeError, match="same dtype"):
        gemm(np.zeros((4, 5), np.float16), np.zeros((5, 4), np.float32))
    with pytest.raises(ValueError, match="version"):
        gemm(np.zeros((4, 5), np.float16), np.zeros((5, 4), np.float16), version="v9")


def test_the_310p3_has_no_fixpipe_to_gm():
    A, B = _operands(32, 32, 32, np.float16, 1)
    with pytest.raises(CapabilityError, match="Fixpipe L0C -> GM does not exist"):
        gemm(A, B, hw="ascend-310p3")


@pytest.mark.parametrize("version", VERSIONS)
def test_fast_forwarded_loops_equal_the_full_run(version):
    """On a one-core chip a block loops over 4 N tiles of 8 K panels each (v2-v4) or 4 N tiles of
    64 K steps (v1): the timing-only run fast-forwards both loops and must still give the full
    run's timeline exactly."""
    hw = HW.replace(cube_cores=1, provenance_note="one cube core: one block runs every task")
    M, K, N = 128, 4096, 512
    A, B = _operands(M, K, N, np.float16, 11)
    kw = dict(k_split=2) if version == "v4" else {}
    C, full = gemm(A, B, version=version, hw=hw, step_k=1 if version != "v1" else None, **kw) if version != "v1" \
        else gemm(A, B, version=version, hw=hw)
    _, timing = gemm((M, K), (K, N), version=version, hw=hw, timing_only=True, dtype=np.float16,
                     **({} if version == "v1" else dict(step_k=1, **kw)))
    _assert_close(C, A, B, version, 2 if version == "v4" else 1)
    _assert_same_timeline(timing, full)


def test_inputs_in_l2_are_read_at_l2_bandwidth():
    """A and B resident in L2: no HBM reads (only C's writes), and no slower than from HBM."""
    _, cold = gemm((1024, 1024), (1024, 1024), version="v3", timing_only=True)
    _, warm = gemm((1024, 1024), (1024, 1024), version="v3", timing_only=True, inputs_in_l2=True)
    assert warm.hbm_bytes == 1024 * 1024 * 2 < cold.hbm_bytes
    assert warm.total_us <= cold.total_us


def test_bad_tiling_options_say_what_is_wrong():
    A, B = np.ones((4, 5), np.float16), np.ones((5, 3), np.float16)
    for kw, match in ((dict(base="x"), "three whole numbers"), (dict(base=(16, 16)), "three whole numbers"),
                      (dict(tiling=5), "GemmTiling"), (dict(step_k=0), "step_k"),
                      (dict(version="v4", k_split=2.0), "k_split")):
        with pytest.raises((ValueError, TypeError), match=match):
            gemm(A, B, **kw)


def test_the_ladder_table_is_what_the_runs_give():
    from npu_lab.kernels.gemm import gemm_ladder

    table = gemm_ladder(512, 1024, 512)
    assert list(table.index) == VERSIONS
    _, tl = gemm((512, 512), (512, 1024), version="v3", timing_only=True)
    assert table.loc["v3", "latency_us"] == tl.total_us
    assert (table["fraction_of_roofline"] <= 1).all() and (table["tflops"] <= cube_peak_tflops(HW)).all()
    with pytest.raises(ValueError, match="versions"):
        gemm_ladder(64, 64, 64, versions=("v9",))
