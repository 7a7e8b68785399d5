"""The GEMM's timing-only fast path (npu_lab.kernels.gemm; issue 17 §1 "timing-only equals full
exactly"): the kernels loop over a block's (task, base row, N tile) work in one ``ctx.tile_loop``, so
a timing-only run fast-forwards across task boundaries — it must still give the full run's timeline
exactly, over dtypes, tails, several tasks per block, the A panel reused or not. Also: the Nd2Nz
burst decision (sim.cube_costs.nd2nz_bursts), the balanced blockDim, and that a 4096^3 timing-only
run simulates a small part of its instructions (what keeps it under the slider budget)."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab import get_preset
from npu_lab.kernels.gemm import gemm, gemm_roofline, gemm_tiling
from npu_lab.kernels.gemm.kernels import block_work
from npu_lab.kernels.gemm.tiling import balanced_block_dim, block_tasks
from npu_lab.lang.launch import full_timing_every_block
from npu_lab.sim.costs import dma_occupancy_cycles
from npu_lab.sim.cube_costs import ND2NZ_EFFICIENT_ALIGN_BYTES, nd2nz_bursts

HW = get_preset("ascend-910b2")
COLUMNS = ["launch", "core", "block", "pipe", "name", "start_us", "end_us", "bytes", "elements", "source"]
TWO_CORES = HW.replace(cube_cores=2, provenance_note="two cube cores: each block runs several tasks")


def _same(fast, full):
    assert fast.total_us == full.total_us
    assert fast.hbm_bytes == full.hbm_bytes
    assert fast.busy_us_by_pipe() == full.busy_us_by_pipe()
    a, b = full.events()[COLUMNS], fast.events()[COLUMNS]
    assert len(a) == len(b) and a.equals(b)


def _operands(M, K, N, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype == np.int8:
        return rng.integers(-128, 128, (M, K)).astype(np.int8), rng.integers(-128, 128, (K, N)).astype(np.int8)
    return rng.standard_normal((M, K)).astype(dtype), rng.standard_normal((K, N)).astype(dtype)


CASES = ([(v, np.float16, s) for v in ("v1", "v2", "v3", "v4") for s in ((700, 256, 300), (512, 256, 1024))]
         + [(v, d, (520, 1000, 200)) for v in ("v1", "v3", "v4") for d in (np.int8, np.float32)])


@pytest.mark.parametrize("version, dtype, shape", CASES)
def test_timing_only_equals_full_with_several_tasks_per_block(version, dtype, shape):
    """Two cube cores, 4-6 M tiles: each block runs several tasks (and base rows with tails); the
    timing-only run jumps across task boundaries and must give the full run's timeline."""
    M, K, N = shape
    A, B = _operands(M, K, N, dtype, M + K)
    kw = dict(k_split=2) if version == "v4" else {}
    C, full = gemm(A, B, version=version, hw=TWO_CORES, **kw)
    _, fast = gemm((M, K), (K, N), version=version, hw=TWO_CORES, timing_only=True, dtype=dtype, **kw)
    _same(fast, full)
    with full_timing_every_block():
        C2, every = gemm(A, B, version=version, hw=TWO_CORES, **kw)
    np.testing.assert_array_equal(C, C2)
    _same(full, every)


@pytest.mark.parametrize("step_k", [1, 2, None])
def test_timing_only_equals_full_with_and_without_the_reused_a_panel(step_k):
    """step_k=None: the panel covers K (isReuseA, the A panel loaded once per base row and freed
    after the row's last N tile); 1 and 2: a fresh A panel per K panel. N a multiple of the base
    tile: no tail marks the row's end, only the key's first / last flags do."""
    M, K, N = 512, 256, 2048
    t = gemm_tiling(M, N, K, hw=TWO_CORES, version="v3", step_k=step_k)
    assert t.isReuseA == (step_k is None)
    A, B = _operands(M, K, N, np.float16, 5)
    _, full = gemm(A, B, version="v3", hw=TWO_CORES, tiling=t)
    _, fast = gemm((M, K), (K, N), version="v3", hw=TWO_CORES, timing_only=True, tiling=t)
    _same(fast, full)


def test_block_work_lists_every_tile_of_the_blocks_tasks_once():
    t = gemm_tiling(700, 300, 256, hw=TWO_CORES, version="v3")
    tiles = [w for b in range(t.usedCoreNum) for w in block_work(t, b)]
    assert len(tiles) == len(set(tiles))
    want = sum(-(-t.task_shape(x)[1] // t.baseN) * -(-t.task_shape(x)[0] // t.baseM) for x in range(t.tasks))
    assert len(tiles) == want
    assert {w[0] for w in block_work(t, 1)} == set(block_tasks(t, 1))


def test_a_large_timing_only_gemm_simulates_a_small_part_of_its_instructions():
    """4096^3 v3: 32 tasks on 16 blocks of 2 (one block class); of its 2 x 32 N tiles the block
    simulates a handful and replicates the steady state (the trace keeps one period, compressed)."""
    _, tl = gemm((4096, 4096), (4096, 4096), version="v3", timing_only=True)
    rec = tl.launches[0]
    assert len(rec.traces) == 1 and rec.block_dim == 16
    trace = rec.traces[0]
    plain = sum(len(cols[0]) for cols, copies, period in trace.segments if period == 0)
    assert plain < 0.1 * len(trace)


def test_balanced_block_dim_keeps_the_waves_and_drops_idle_cores():
    assert balanced_block_dim(32, 24) == 16          # two waves either way
    assert balanced_block_dim(24, 24) == 24
    assert balanced_block_dim(5, 24) == 5
    assert balanced_block_dim(49, 24) == 17          # three waves
    for tasks in range(1, 200):
        b = balanced_block_dim(tasks, 24)
        assert b <= 24 and -(-tasks // b) == -(-tasks // 24)
    with pytest.raises(ValueError, match="tasks must be"):
        balanced_block_dim(0, 24)
    with pytest.raises(ValueError, match="cores must be"):
        balanced_block_dim(4, True)


def test_nd2nz_aligned_rows_stream_as_one_request_and_unaligned_ones_per_row():
    a = ND2NZ_EFFICIENT_ALIGN_BYTES
    assert a == 256
    # a 128 x 64 half tile of a 4096-wide matrix: 128-B rows -> priced row by row
    assert nd2nz_bursts(128, 128, 8192) == (128, 128, 8192)
    # 512 half (1024 B) rows 8192 B apart: whole 256-B units -> one request of all the bytes
    assert nd2nz_bursts(128, 1024, 8192) == (1, 128 * 1024, 0)
    # the same row length in a 4095-wide matrix (pitch 8190 B): not aligned -> per row
    assert nd2nz_bursts(128, 1024, 8190) == (128, 1024, 8190)
    # contiguous rows are one burst whatever their length
    assert nd2nz_bursts(16, 96, 96) == (1, 16 * 96, 0)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="whole number"):
            nd2nz_bursts(bad, 128, 128)
    bpc = HW.bytes_per_cycle(HW.hbm_bandwidth_gbps / 24)
    aligned = dma_occupancy_cycles(HW, 128 * 1024, bpc, 128 * 1024, True)
    unaligned = dma_occupancy_cycles(HW, 128 * 1024, bpc, 1024, False)
    assert aligned < unaligned


def test_an_unaligned_inner_axis_costs_mte2_time():
    """AIV核上的ND2NZ格式转换.md: a B whose rows are not 256-B aligned (N = 4095) loads slower per
    byte than N = 4096 — the GEMM takes longer though it moves no more bytes."""
    _, even = gemm((1024, 1024), (1024, 4096), version="v3", timing_only=True)
    _, odd = gemm((1024, 1024), (1024, 4095), version="v3", timing_only=True)
    assert odd.hbm_bytes <= even.hbm_bytes
    assert odd.busy_us_by_pipe()["MTE2"] > 1.5 * even.busy_us_by_pipe()["MTE2"]


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.float32])
@pytest.mark.parametrize("version", ["v1", "v2", "v3", "v4"])
@pytest.mark.parametrize("inputs_in_l2", [False, True])
def test_no_gemm_beats_the_rooflines(dtype, version, inputs_in_l2):
    M, K, N = 2048, 2048, 2048
    _, tl = gemm((M, K), (K, N), version=version, timing_only=True, dtype=dtype, inputs_in_l2=inputs_in_l2)
    r = gemm_roofline(M, N, K, dtype)
    assert tl.total_us >= r["cube_us"]
    if not inputs_in_l2:
        assert tl.total_us >= r["hbm_us"] and tl.hbm_bytes >= r["min_hbm_bytes"]


def test_a_well_tiled_large_gemm_reaches_a_plausible_fraction_of_the_roofline():
    """v3 at 4096^3 with 256-B aligned rows: MTE2 streams, so the ladder's top reaches a fraction
    of the cube roofline well above the v1 naive one (and below 1)."""
    r = gemm_roofline(4096, 4096, 4096)
    frac = {v: r["floor_us"] / gemm((4096, 4096), (4096, 4096), version=v, timing_only=True)[1].total_us
            for v in ("v1", "v3")}
    assert 0.15 < frac["v3"] < 1
    assert frac["v3"] > 4 * frac["v1"]


def test_load_data_costs_follow_the_chip_they_run_on():
    """LoadData's cached plans hold its cost: a chip with a slower MTE1 must not reuse the 910B2's."""
    slow = HW.replace(mte1_l0a_bytes_per_cycle=8.0, mte1_l0b_bytes_per_cycle=8.0, provenance_note="a slow MTE1")
    _, fast = gemm((256, 256), (256, 256), version="v3", timing_only=True)
    _, slowed = gemm((256, 256), (256, 256), version="v3", timing_only=True, hw=slow)
    assert slowed.busy_us_by_pipe()["MTE1"] > 4 * fast.busy_us_by_pipe()["MTE1"]
