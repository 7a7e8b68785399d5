"""Notebook 12's course code: ex12's checks and kernel exercise, and the SparseKvExplorer."""

from __future__ import annotations

import pytest

from npu_lab.course import ex12
from npu_lab.course.kernel_check import check_kernel, kernel_skeleton, kernel_solution_cell, load_cell


def test_checks_accept_the_truth_and_explain_wrong_answers():
    truth = ex12.expected_answers()
    assert ex12.check_n_keep(truth["check_n_keep"]).correct
    assert "on top" in ex12.check_n_keep(truth["check_n_keep"] + 4)
    assert ex12.check_n_keep(None).correct is None and ex12.check_n_keep("many").correct is False
    assert ex12.check_memory_kept(truth["check_memory_kept"]).correct
    assert ex12.check_memory_kept(f"{truth['check_memory_kept']:.2f}%").correct
    assert "positions" in ex12.check_memory_kept(100 * 2457 / 8192)
    assert ex12.check_better_score(truth["check_better_score"]).correct
    assert ex12.check_better_score("key_norm").correct is False
    assert ex12.check_better_score("banana").correct is False


def test_kernel_exercise_solution_skeleton_and_a_wrong_variant():
    cell = kernel_solution_cell("12.topk")
    sol = load_cell(cell, "<12.topk>")["my_sparse_kv"]
    res = check_kernel(sol, "12.topk")
    assert res.correct and res.fast
    skel = load_cell(kernel_skeleton("12.topk"), "<12.topk skeleton>")["my_sparse_kv"]
    assert check_kernel(skel, "12.topk").correct is None
    no_sinks = cell.replace('        ctx.duplicate(scores, float("inf"), t.sinks)\n', "        pass\n")
    assert no_sinks != cell
    bad = check_kernel(load_cell(no_sinks, "<12.topk no sinks>")["my_sparse_kv"], "12.topk")
    assert bad.correct is False and "indices" in str(bad)


def test_explorer_moves_fast_and_reports():
    from npu_lab.course.explorers import SparseKvExplorer
    e = SparseKvExplorer()
    e.keep_ratio.value = 0.1
    assert e.last_update_s < 0.5                     # <= 50 ms alone; generous on a shared machine
    assert "51</b> of 512" in e.status.value
    assert e.errors["window"] < e.errors["key_norm"]
    before = list(e.figure.data[-1].z[0])
    e.set(sinks=16, score="key_norm")
    assert sum(e.figure.data[-1].z[0]) == 51 and list(e.figure.data[-1].z[0]) != before
    with pytest.raises(ValueError):
        SparseKvExplorer(keep_ratio=0)
    with pytest.raises(TypeError):
        SparseKvExplorer(data="cache")


@pytest.mark.parametrize("line", ['            ctx.wait_flag("MTE2_MTE3", ev_loaded[j % 2])\n',
                                  '    ctx.wait_flag("V_S", ev)\n'])
def test_dropping_a_wait_is_caught(line):
    """Without the MTE2_MTE3 wait the store reads a slot still being filled; without V_S the scalar
    unit reads positions the vector unit has not written: the simulator says so (a race)."""
    cell = kernel_solution_cell("12.topk")
    assert line in cell
    bad = check_kernel(load_cell(cell.replace(line, ""), "<12.topk race>")["my_sparse_kv"], "12.topk")
    assert bad.correct is False
    assert "race" in str(bad).lower() or "flag" in str(bad).lower(), str(bad)
