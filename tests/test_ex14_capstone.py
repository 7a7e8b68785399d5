"""Notebook 14's capstone (npu_lab/course/ex14_capstone.py): the solution cell passes check_kernel
(numbers and the latency target), the skeleton and wrong kernels fail with feedback that says what
is wrong, and the temporary notebook cells are well formed."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from npu_lab.course.kernel_check import check_kernel, kernel_skeleton, kernel_solution_cell, load_cell

ROOT = Path(__file__).resolve().parents[1]
EX = "14.router"


@pytest.fixture(scope="module")
def solution_cell():
    return kernel_solution_cell(EX)


def test_solution_cell_passes_with_headroom(solution_cell):
    fn = load_cell(solution_cell, "<capstone-solution>")["my_router"]
    r = check_kernel(fn, EX)
    assert r.correct is True and r.fast is True, str(r)
    assert "correct on all" in str(r) and "met" in str(r)
    measured = float(str(r).split("cases; ")[1].split(" µs")[0])
    target = float(str(r).split("target is ≤ ")[1].split(" µs")[0])
    assert measured < 0.9 * target          # real headroom: a faithful answer does not scrape by


def test_skeleton_runs_and_says_nothing_was_computed(solution_cell):
    skel = kernel_skeleton(EX)
    assert "### BEGIN SOLUTION" not in skel and skel.count("pass  # YOUR CODE HERE") == 3
    code = [ln for ln in skel.splitlines() if not ln.lstrip().startswith("#")]
    assert not any(call in ln for ln in code for call in ("ctx.reciprocal(", "ctx.mrg_sort(", "ctx.whole_reduce_sum("))
    r = check_kernel(load_cell(skel, "<capstone-skeleton>")["my_router"], EX)
    assert r.correct is False
    assert str(r).startswith("Not yet: wrong numbers") and "indices" in str(r), str(r)


@pytest.mark.parametrize("old,new,says", [
    # sigmoid without the + 1: the scores are exp(x), the ranking changes
    ("        ctx.adds(norm, norm, 1.0, r * E)\n", "", "indices"),
    # groups ranked by their best key only (group max), not the top-2 sum
    ("        ctx.add(gs, gs, gs[half], r * groups)\n", "", "indices"),
    # the routed scaling factor forgotten
    ("        ctx.muls(w, w, t.routedScalingFactor, r * Kp)\n", "", "weights"),
])
def test_wrong_kernels_fail_naming_the_output(solution_cell, old, new, says):
    assert old in solution_cell
    cell = solution_cell.replace(old, new, 1)
    r = check_kernel(load_cell(cell, "<capstone-wrong>")["my_router"], EX)
    assert r.correct is False, str(r)
    assert says in str(r), str(r)


def test_capstone_cells_notebook():
    """Notebook 14 ends with the capstone: its heading, the skeleton with a solution region, and
    the check cell with hidden tests (instructor notebooks are committed without outputs)."""
    nb = nbformat.read(ROOT / "instructor" / "14_production_routing.ipynb", as_version=4)
    start = next(i for i, c in enumerate(nb.cells)
                 if c.cell_type == "markdown" and c.source.startswith("## Capstone"))
    cells = nb.cells[start:]
    kinds = [c.cell_type for c in cells]
    assert kinds[0] == "markdown" and "code" in kinds
    text = "\n".join(c.source for c in cells)
    assert "### BEGIN SOLUTION" in text and "### BEGIN HIDDEN TESTS" in text
    assert 'check_kernel(my_router, "14.router")' in text
    for c in cells:
        if c.cell_type == "code":
            assert not c.outputs and c.execution_count is None
