"""Tests of notebook 09's course code: ex09 checks and kernel exercises, cube_viz, GemmExplorer."""

from __future__ import annotations

import time

import pytest

from npu_lab.course import ex09
from npu_lab.course.cube_viz import gemm_roofline_figure, roofline_points, task_grid_figure
from npu_lab.course.explorers import GemmExplorer
from npu_lab.course.kernel_check import check_kernel, kernel_skeleton, kernel_solution_cell, load_cell
from npu_lab.kernels.gemm import gemm_ladder, gemm_tiling


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
