"""Tests of notebook 09's course code: ex09 checks and kernel exercises, cube_viz, GemmExplorer."""

from __future__ import annotations

import time

import numpy as np
import pytest

from npu_lab.course import ex09
from npu_lab.course.cube_viz import gemm_roofline_figure, roofline_points, task_grid_figure
from npu_lab.course.explorers import GemmExplorer
from npu_lab.course.explorers import gemm as gemm_explorer
from npu_lab.course.explorers.gemm import SIZES
from npu_lab.course.kernel_check import check_kernel, kernel_skeleton, kernel_solution_cell, load_cell
from npu_lab.kernels.gemm import GEMM_VERSIONS, gemm_ladder, gemm_tiling


def test_value_checks_accept_the_truth_and_explain_mistakes():
    truth = ex09.expected_answers()
    assert ex09.check_mmad_cycles(truth["check_mmad_cycles"]).correct
    assert ex09.check_mmad_cycles(None).correct is None
    wrong = ex09.check_mmad_cycles(512)            # fractals without the head
    assert wrong.correct is False and "start-up" in wrong
    assert ex09.check_grid_tasks(truth["check_grid_tasks"]).correct
    t = gemm_tiling(**{k: v for k, v in ex09.GRID_CASE.items() if k != "k_split"}, version="v4",
                    k_split=ex09.GRID_CASE["k_split"])
    assert "K-split" in ex09.check_grid_tasks(t.m_tiles * t.n_tiles)
    assert ex09.check_grid_tasks("many").correct is False


@pytest.mark.parametrize("eid, name", [("09.l1tile", "my_gemm_tiled"), ("09.ksplit", "my_gemm_ksplit")])
def test_kernel_exercises_solution_passes_skeleton_does_not(eid, name):
    sol = load_cell(kernel_solution_cell(eid), f"<{eid}-solution>")[name]
    assert check_kernel(sol, eid).correct is True
    skel = load_cell(kernel_skeleton(eid), f"<{eid}-skeleton>")[name]
    assert check_kernel(skel, eid).correct is not True


def test_task_grid_figure_labels_every_task():
    t = gemm_tiling(100, 3000, 2048, version="v4", k_split=3)
    fig = task_grid_figure(t)
    assert len(fig.data) == 3
    labels = [x for tr in fig.data for row in tr.text for x in row]
    assert len(labels) == t.tasks
    with pytest.raises(TypeError, match="GemmTiling"):
        task_grid_figure((1, 2))


def test_roofline_figure_points_below_the_roof():
    ladder = gemm_ladder(512, 512, 512)
    x, y = roofline_points(ladder, 512, 512, 512)
    fig = gemm_roofline_figure(ladder, 512, 512, 512)
    peak = max(fig.data[0].y)
    assert (y <= peak).all() and (y <= x * 1.6 + 1e-9).all()     # under both roofs (1.6 TB/s)
    with pytest.raises(ValueError, match="gemm_ladder"):
        gemm_roofline_figure(ladder.drop(columns="tflops"), 512, 512, 512)


def test_gemm_explorer_redraws_fast_and_reports_refusals():
    e = GemmExplorer()
    assert e.error is None and "TFLOPS" in e.status.value
    start = time.perf_counter()
    e.set(M=512)
    e.set(M=1024)                     # seen before: cached
    assert time.perf_counter() - start < 2.0
    e.set(base=(256, 256, 64))        # does not fit L0C
    assert e.error and "L0C" in e.status.value and e.result is None
    with pytest.raises(ValueError):
        e.set(M=17)


def test_gemm_grid_covers_every_position_and_is_fresh_where_sampled():
    """Every (M, N, K, version) the sliders offer is in the committed grid; a sample of rows, spread
    over versions and sizes (tails included), equals a live run exactly (a stale file: regenerate
    with write_gemm_grid)."""
    grid = gemm_explorer._load_grid()
    assert grid, f"{gemm_explorer.GRID_PATH} is missing: run write_gemm_grid()"
    every = {(M, N, K, v) for v in GEMM_VERSIONS for M in SIZES for N in SIZES for K in SIZES}
    assert set(grid) == every, sorted(every ^ set(grid))[:5]
    rng = np.random.default_rng(0)
    keys = sorted(k for k in grid if max(k[:3]) <= 1024)      # cheap runs
    for i in rng.choice(len(keys), 8, replace=False):
        M, N, K, v = keys[i]
        assert grid[keys[i]] == gemm_explorer._simulate(gemm_explorer.GRID_CHIP, M, N, K, gemm_explorer.GRID_BASE, v)


def test_gemm_explorer_moves_read_the_grid_without_simulating(monkeypatch):
    e = GemmExplorer()
    assert e.grid_used
    live, simulate = [], gemm_explorer._simulate
    monkeypatch.setattr(gemm_explorer, "_simulate", lambda *a: live.append(a) or simulate(*a))
    for kw in (dict(M=4096), dict(N=1000, K=4096), dict(version="v4"), dict(version="v1", M=16), dict(K=100)):
        e.set(**kw)
        assert e.error is None and e.result is not None
        us, tflops, tiling = e.result
        assert tiling.baseK == 64 and f"{us:.1f} µs" in e.status.value
    assert live == []
    e.set(version="v4", k_split=3)                 # a forced kSplit is not in the grid: it simulates
    e.set(version="v3", base=(64, 64, 64))         # so does another base tile
    assert [a[-2:] for a in live] == [("v4", 3), ("v3", 0)] and e.error is None


def test_gemm_explorer_ignores_a_stale_grid(monkeypatch):
    """A grid whose probe positions differ from live runs (a changed cost model) is not used."""
    stale = {k: (v[0] * 2, v[1], v[2]) if isinstance(v, tuple) else v for k, v in gemm_explorer._load_grid().items()}
    monkeypatch.setattr(gemm_explorer, "_load_grid", lambda: stale)
    e = GemmExplorer()
    assert not e.grid_used
    live = gemm_explorer._simulate(gemm_explorer.GRID_CHIP, 1024, 1024, 1024, gemm_explorer.GRID_BASE, "v3")
    assert e.result[0] == live[0]
