"""check_kernel and the kernel-writing exercises (npu_lab/course/kernel_check.py, exNN sections)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from npu_lab.course import ex01, ex05, ex06
from npu_lab.course.kernel_check import (CODE_STUB, check_kernel, kernel_exercises, kernel_skeleton,
                                         kernel_solution_cell, load_cell, strip_solutions)
from npu_lab.kernels.moe_gating import simulate_moe_gating
from npu_lab.lang import ASCEND_C_API

EXERCISES = kernel_exercises()
IDS = list(EXERCISES)


def _cell_fn(cell: str, exercise_id: str, tag: str):
    ns = load_cell(cell, f"<cell {exercise_id} {tag}>")
    return ns[EXERCISES[exercise_id].cell_name]


def _variant(exercise_id: str, old: str, new: str, tag: str):
    cell = kernel_solution_cell(exercise_id)
    assert old in cell, f"{old!r} not in the {exercise_id} cell"
    return _cell_fn(cell.replace(old, new), exercise_id, tag)


def test_at_least_ten_exercises_one_per_notebook():
    assert len(EXERCISES) >= 10
    assert {i[:2] for i in IDS} >= {f"{n:02d}" for n in range(1, 8)}
    for eid, ex in EXERCISES.items():
        assert re.fullmatch(r"(0[1-9]|1[0-9]|08b)\.[a-z0-9_]+", eid) and ex.notebook == f"ex{eid.split('.')[0]}"


@pytest.mark.parametrize("eid", IDS)
def test_instructor_cell_passes_and_student_cell_runs(eid):
    cell = kernel_solution_cell(eid)
    assert cell.count("### BEGIN SOLUTION") == cell.count("### END SOLUTION") >= 1
    assert not re.search(r"SOLUTION \[", cell), "another exercise's tag leaked into the cell"
    solved = check_kernel(_cell_fn(cell, eid, "instructor"), eid)
    assert solved.correct is True, solved
    assert solved.fast in (True, None), solved
    # the student version: every region replaced by nbgrader's stub; it runs and the check does not raise
    student = kernel_skeleton(eid)
    assert student == strip_solutions(cell) and CODE_STUB in student and "BEGIN SOLUTION" not in student
    assert len(student.splitlines()) <= 90, "a skeleton must fit one notebook cell"
    unfinished = check_kernel(_cell_fn(student, eid, "student"), eid)
    assert unfinished.correct in (None, False), unfinished
    assert isinstance(unfinished, str) and str(unfinished)


def test_library_solution_is_the_cell():
    """The library function and the cell are one source: the library's solution passes too."""
    r = check_kernel(ex06.gather_mask_solution, "06.gather_mask")
    assert r.correct is True and r.latency_us > 0 and r.timeline is not None


def test_prefetch_answer_is_the_course_v2():
    """05.prefetch's answer IS v2: the same modeled latency at the timed shape."""
    r = check_kernel(ex05.moe_v2_solution, "05.prefetch")
    t = ex05.MOE_TIMED
    v2 = simulate_moe_gating(t["B"], t["S"], t["E"], t["K"], version="v2").latency_us
    assert r.latency_us == pytest.approx(v2, rel=1e-9)


def test_prefetch_after_the_stores_is_correct_but_slow():
    cell = kernel_solution_cell("05.prefetch")
    moved = cell.replace("        if j + 1 < n:\n            copy_in(j + 1)\n", "", 1).replace(
        '            ctx.set_flag("MTE3_S", j % 2)                  # the output slot may be rewritten (tile j+2)\n',
        '            ctx.set_flag("MTE3_S", j % 2)                  # the output slot may be rewritten (tile j+2)\n'
        "        if j + 1 < n:\n            copy_in(j + 1)\n")
    assert moved != cell
    r = check_kernel(_cell_fn(moved, "05.prefetch", "late"), "05.prefetch")
    assert r.correct is False and r.fast is False and "MTE2" in r and "target" in r


def test_one_buffer_is_correct_but_misses_the_target():
    fn = _variant("01.scaled_add_double_buffer", "init_buffer(x_in, 2,", "init_buffer(x_in, 1,", "one")
    r = check_kernel(fn, "01.scaled_add_double_buffer")
    assert r.correct is False and r.fast is False
    assert r.latency_us > r.target_us and "MTE2" in r


def test_the_course_v2_itself_does_not_meet_the_faster_target():
    """07.faster asks for more than v2: v2's own kernel is right but misses the target (v2c's)."""
    from npu_lab.kernels.moe_gating.fused import moe_gating_v2_kernel

    result = check_kernel(moe_gating_v2_kernel, "07.faster")
    assert result.correct is False and result.fast is False and "Nearly" in result
    assert result.latency_us > result.target_us


def test_missing_sync_gives_a_race_hint_on_the_learners_line():
    r = check_kernel(_cell_fn(kernel_skeleton("05.sync"), "05.sync", "nosync"), "05.sync")
    assert r.correct is False and type(r.error).__name__ == "RaceError"
    assert "a race (a missing sync" in r and "set_flag" in r
    assert "scalar_topk_softmax(ctx, scores[p * Es]" in r and "<cell 05.sync nosync>" in r


def test_unaligned_data_copy_names_data_copy_pad():
    fn = _variant("03.padded_store",
                  "ctx.data_copy_pad(y_gm[first * t.K], y, DataCopyExtParams(1, n * size, 0, 0, 0))",
                  "ctx.data_copy(y_gm[first * t.K], y, n)", "unaligned")
    r = check_kernel(fn, "03.padded_store")
    assert r.correct is False and "illegal DataCopy" in r and "data_copy_pad" in r
    assert "ctx.data_copy(y_gm[first * t.K], y, n)" in r and re.search(r"line \d+ of your cell", r)


def test_ub_overflow_hint():
    fn = _variant("01.scaled_add_double_buffer", 't.tile_len * 4, name="x_in"', 't.tile_len * 4 * 100, name="x_in"', "ub")
    r = check_kernel(fn, "01.scaled_add_double_buffer")
    assert r.correct is False and "Unified Buffer overflow" in r and "t.tile_len * 4 * 100" in r


def test_wrong_index_shows_a_mismatch_table_with_block_and_tile():
    fn = _variant("03.padded_store", "x_gm[first * t.K]", "x_gm[first]", "index")
    r = check_kernel(fn, "03.padded_store")
    assert r.correct is False and "expected" in r and "got" in r and "block 1" in r
    assert r.table and r.table[0][4].startswith("point")


def test_python_error_names_the_line():
    fn = _variant("06.gather_mask", "ctx.gather_mask(values, pairs, 1,", "ctx.gather_mask(valuez, pairs, 1,", "typo")
    r = check_kernel(fn, "06.gather_mask")
    assert r.correct is False and "name error" in r and "valuez" in r


def test_bad_arguments():
    assert check_kernel(None, "01.scaled_add_double_buffer").correct is None
    assert check_kernel(42, "01.scaled_add_double_buffer").correct is False
    with pytest.raises(ValueError, match="unknown kernel exercise"):
        check_kernel(ex01.scaled_add_double_buffer_solution, "01.nope")
    assert check_kernel(lambda B, S, E, K, hw: 0, "07.pick_tile_s").correct is False


def test_figure_is_optional():
    r = check_kernel(ex06.gather_mask_solution, "06.gather_mask")
    fig = r.figure()
    assert fig is not None and len(fig.data) > 0


@pytest.mark.parametrize("eid", [i for i in IDS if EXERCISES[i].kind == "kernel"])
def test_solutions_call_only_ascend_c(eid):
    src = kernel_solution_cell(eid)
    known = {v["python"].split(".")[-1] for v in ASCEND_C_API.values() if v["python"].startswith("KernelContext.")}
    calls = set(re.findall(r"\bctx\.(\w+)\(", src)) - {"tile_loop"}      # tile_loop: a for loop (simulator note)
    assert calls <= known | {"pipe"}, calls - known


# ---- reference against solution on random shapes -----------------------------------------------
def _compare(eid, case):
    ex = EXERCISES[eid]
    got, _ = ex.launch(ex.solution, case, ex.hw, False)
    for name, want in ex.reference(case).items():
        np.testing.assert_allclose(np.asarray(got[name]).reshape(-1), np.asarray(want).reshape(-1), rtol=1e-5, atol=1e-7)


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 5000))
def test_scaled_add_solution_matches_reference(n):
    _compare("01.scaled_add_double_buffer", {"n": n, "label": ""})


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 70), e8=st.integers(1, 8), data=st.data())
def test_topk_rounds_solution_matches_reference(rows, e8, data):
    E = 8 * e8
    K = data.draw(st.integers(1, E))
    tile = data.draw(st.integers(1, 40))
    _compare("06.topk_rounds", {"rows": rows, "E": E, "K": K, "tile": tile, "label": ""})


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 300), half=st.booleans())
def test_row_softmax_solution_matches_reference(rows, cols, half):
    _compare("02.row_softmax", {"rows": rows, "cols": cols, "dtype": "float16" if half else "float32", "label": ""})


def test_placement_document_is_current():
    from pathlib import Path

    from npu_lab.course.kernel_check import exercises_markdown

    doc = Path(__file__).resolve().parents[1] / "docs" / "kernel_exercises.md"
    assert doc.read_text(encoding="utf-8") == exercises_markdown(), "regenerate docs/kernel_exercises.md"


# ---- happens-before: the two learner-run failures (issue 16 §1) --------------------------------
def test_sync_without_the_mte3_s_wait_fails_on_the_reused_output_slot():
    """05.sync with MTE2_S but without the MTE3_S wait: the stores of tile j-2 and the scalar writes
    of tile j are not ordered, even where the timeline keeps them apart: a RaceError naming MTE3_S."""
    fn = _variant("05.sync", '        if j >= 2:\n            ctx.wait_flag("MTE3_S", j % 2)\n', "", "no-mte3-s")
    r = check_kernel(fn, "05.sync")
    assert r.correct is False and type(r.error).__name__ == "RaceError", str(r)
    assert r.error.event == "MTE3_S" and r.error.kind == "write after read", str(r)
    assert "no MTE3_S flag between DataCopyPad" in str(r) and "heap top-k + softmax on S" in str(r)
    assert "ctx.wait_flag('MTE3_S', id) before the S one" in str(r)
    assert "<cell 05.sync no-mte3-s>" in str(r)


def test_sync_without_the_mte2_s_pair_fails_and_the_whole_answer_passes():
    fn = _variant("05.sync", '        ctx.wait_flag("MTE2_S", j % 2)\n', "", "no-mte2-s-wait")
    r = check_kernel(fn, "05.sync")
    assert r.correct is False and type(r.error).__name__ == "RaceError" and r.error.event == "MTE2_S", str(r)
    assert check_kernel(_cell_fn(kernel_solution_cell("05.sync"), "05.sync", "whole"), "05.sync").correct


def test_sync_with_an_unconsumed_set_flag_fails_with_its_line():
    """An MTE3_S SetFlag for a tile j + 2 that does not exist is a flag left set at the end."""
    fn = _variant("05.sync", '        if j + 2 < n:\n            ctx.set_flag("MTE3_S", j % 2)',
                  '        if True:\n            ctx.set_flag("MTE3_S", j % 2)', "always-set")
    r = check_kernel(fn, "05.sync")
    assert r.correct is False and type(r.error).__name__ == "UnmatchedFlagError", str(r)
    assert "a SetFlag that no WaitFlag consumes" in str(r) and "SetFlag<HardEvent::MTE3_S>" in str(r)
    assert "<cell 05.sync always-set>" in str(r)


def test_the_order_of_two_waits_is_free():
    fn = _variant("05.sync", '        ctx.wait_flag("MTE2_S", j % 2)\n        if j >= 2:\n'
                  '            ctx.wait_flag("MTE3_S", j % 2)\n',
                  '        if j >= 2:\n            ctx.wait_flag("MTE3_S", j % 2)\n        '
                  'ctx.wait_flag("MTE2_S", j % 2)\n', "late-wait")
    assert check_kernel(fn, "05.sync").correct


def test_an_earlier_cell_omits_a_later_exercises_region():
    """09.l1tile and 09.ksplit share one solution: l1tile's cell leaves out ksplit's regions (and
    their YOUR CODE comments), so the atomic add is not given code above ksplit's skeleton."""
    l1 = kernel_solution_cell("09.l1tile")
    ks = kernel_solution_cell("09.ksplit")
    assert "set_atomic_add" not in l1 and "disable_dma_atomic" not in l1 and "09.ksplit" not in l1
    assert "### BEGIN SOLUTION" in l1 and "ctx.mmad(" in l1
    assert ks.count("### BEGIN SOLUTION") == 2 and "ctx.set_atomic_add(c_gm.dtype)" in ks
