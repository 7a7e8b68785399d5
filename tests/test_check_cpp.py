"""check_cpp: the learner's C++ listing (issue 15 §7; npu_lab/course/cpp_check.py).

* every C++ exercise's solution passes, against the course's Python solution (compiled when the
  headers are there);
* its skeleton (nbgrader's stub in the regions) is "no answer yet", not an error;
* a missing call, two calls swapped, an extra call each fail with the call named; a compile
  error fails with the learner's line and a one-line message (no compiler dump);
* without the headers (the header dir monkeypatched away) the result says how to get them
  (ASC_DEVKIT_DIR) and still checks the call order, so it passes a right listing and fails a
  wrong one;
* the notebook cells are the generated ones, marked for nbgrader (3 points).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npu_lab.course.cpp_check import check_cpp, cpp_exercises, cpp_skeleton, cpp_solution_cell
from npu_lab.course.kernel_check import CODE_STUB, kernel_exercises
from npu_lab.cpp import compile_check as cc

REPO = Path(__file__).resolve().parents[1]
EXERCISES = cpp_exercises()
IDS = list(EXERCISES)


def _solution_text(eid: str) -> str:
    ns: dict = {}
    exec(cpp_solution_cell(eid), ns)
    return ns[EXERCISES[eid].cell_name]


def _python_solution(eid: str):
    return kernel_exercises()[EXERCISES[eid].kernel_exercise].solution


def _headers() -> bool:
    try:
        return cc.find_devkit() is not None and bool(cc.backend())
    except cc.HeadersMissing:
        return False


@pytest.fixture
def no_headers(monkeypatch):
    monkeypatch.delenv("ASC_DEVKIT_DIR", raising=False)
    monkeypatch.setattr(cc, "find_devkit", lambda: None)


def test_there_are_three_cpp_exercises_in_01_05_06():
    assert {eid[:2] for eid in IDS} >= {"01", "05", "06"} and len(IDS) >= 3


@pytest.mark.parametrize("eid", IDS)
def test_solution_passes(eid):
    r = check_cpp(_solution_text(eid), eid, _python_solution(eid))
    assert r.correct is True, r
    assert "call for call" in r
    if _headers():
        assert r.compiled is True and "0 errors" in r
        assert all(d == [] for d in r.diagnostics.values())


@pytest.mark.parametrize("eid", IDS)
def test_skeleton_is_no_answer_yet(eid):
    ns: dict = {}
    exec(cpp_skeleton(eid), ns)
    text = ns[EXERCISES[eid].cell_name]
    assert CODE_STUB in text and "BEGIN SOLUTION" not in text
    r = check_cpp(text, eid, _python_solution(eid))
    assert r.correct is None and "No answer yet" in r


# ---- wrong answers -----------------------------------------------------------------------------
_SCALED = "01.scaled_add_cpp"
ORDER_MISTAKES = [
    ("missing call", "        yQueue.FreeTensor(y);\n", "", "FreeTensor"),
    ("wrong order", "        Muls(z, x, alpha, n);\n        Add(z, z, y, n);\n",
     "        Add(z, z, y, n);\n        Muls(z, x, alpha, n);\n", "'Muls'"),
    ("extra call", "        zQueue.EnQue(z);\n", "        zQueue.EnQue(z);\n        PipeBarrier<PIPE_V>();\n", "PipeBarrier"),
    ("a branch dropped", "        if (n % 8 == 0) {\n            DataCopy(zGm[lo], z, n);\n        } else {\n"
     "            DataCopyPad(zGm[lo], z, DataCopyExtParams{1, static_cast<uint32_t>(n * sizeof(float)), 0, 0, 0});\n"
     "        }\n", "        DataCopy(zGm[lo], z, n);\n", "DataCopyPad"),
]


@pytest.mark.parametrize("kind, old, new, word", ORDER_MISTAKES, ids=[m[0] for m in ORDER_MISTAKES])
def test_call_order_mistakes_fail(kind, old, new, word):
    text = _solution_text(_SCALED)
    assert old in text, f"the control's text {old!r} is no longer in the solution"
    r = check_cpp(text.replace(old, new, 1), _SCALED, _python_solution(_SCALED))
    assert r.correct is False, f"{kind} passed:\n{r}"
    assert "does not make the calls your Python kernel makes" in r and word in r


@pytest.mark.parametrize("kind, old, new, words", [
    ("argument count", "Muls(z, x, alpha, n);", "Muls(z, x, n);", "no matching function for call to 'Muls'"),
    ("misspelt enum", "TQue<TPosition::VECOUT, 2> zQueue;", "TQue<TPosition::VECOUTT, 2> zQueue;", "VECOUTT"),
    ("wrong type", "LocalTensor<float> z = zQueue.AllocTensor<float>();",
     "LocalTensor<float> z = zQueue.AllocTensor<int32_t>();", "LocalTensor"),
])
def test_compile_error_names_the_learners_line(kind, old, new, words):
    if not _headers():
        pytest.skip(cc.NO_HEADERS_MESSAGE)
    text = _solution_text(_SCALED)
    line = text[:text.index(old)].count("\n") + 1
    r = check_cpp(text.replace(old, new, 1), _SCALED, _python_solution(_SCALED))
    assert r.correct is False and r.compiled is False, r
    assert f"line {line} of your C++: {new.strip()}" in r and words in r
    assert "error:" not in r and "In file included" not in r        # no raw compiler output
    assert len(r.splitlines()) < 12


def test_gather_mask_without_rsvdcnt_is_a_compile_error():
    """The Python gather_mask returns the count; the C++ one needs the uint64_t& rsvdCnt argument."""
    if not _headers():
        pytest.skip(cc.NO_HEADERS_MESSAGE)
    eid = "06.gather_mask_cpp"
    text = _solution_text(eid).replace("GatherMask(values, pairs, 1, false, 0, params, rsvdCnt);",
                                       "GatherMask(values, pairs, 1, false, 0, params);")
    r = check_cpp(text, eid, _python_solution(eid))
    assert r.correct is False and "GatherMask(values, pairs, 1, false, 0, params);" in r


def test_v2_prefetch_after_the_compute_fails():
    """05: a CopyIn(j + 1) placed after CopyOut is v1's order: the traced Python (the prefetch first) differs."""
    eid = "05.prefetch_cpp"
    text = _solution_text(eid)
    old = ("            if (j + 1 < myTiles) {\n                CopyIn(j + 1);\n            }\n"
           "            // ### END SOLUTION\n            Compute(j);\n            CopyOut(j);\n")
    new = ("            // ### END SOLUTION\n            Compute(j);\n            CopyOut(j);\n"
           "            if (j + 1 < myTiles) {\n                CopyIn(j + 1);\n            }\n")
    assert old in text
    r = check_cpp(text.replace(old, new, 1), eid, _python_solution(eid))
    assert r.correct is False and "does not make the calls" in r


def test_the_learners_own_python_is_the_reference():
    """A learner whose Python swapped Muls and Add (numbers wrong, but that is check_kernel's job)
    gets the C++ with the same swap accepted and the course's order refused: the order is theirs."""
    from npu_lab.course.kernel_check import kernel_solution_cell, load_cell

    kid = EXERCISES[_SCALED].kernel_exercise
    py = kernel_solution_cell(kid).replace("        ctx.muls(z, x, alpha, n)\n        ctx.add(z, z, y, n)\n",
                                           "        ctx.add(z, x, y, n)\n        ctx.muls(z, z, alpha, n)\n")
    assert "ctx.add(z, x, y, n)" in py
    mine = load_cell(py, "<cell swapped>")["my_scaled_add"]
    text = _solution_text(_SCALED)
    swapped = text.replace("        Muls(z, x, alpha, n);\n        Add(z, z, y, n);\n",
                           "        Add(z, x, y, n);\n        Muls(z, z, alpha, n);\n")
    assert check_cpp(swapped, _SCALED, mine).correct is True
    assert check_cpp(text, _SCALED, mine).correct is False


# ---- without the headers -----------------------------------------------------------------------
def test_without_headers_says_how_and_still_checks_the_order(no_headers):
    text = _solution_text(_SCALED)
    r = check_cpp(text, _SCALED, _python_solution(_SCALED))
    assert r.correct is True and r.compiled is None
    assert "Not compiled" in r and "ASC_DEVKIT_DIR" in r and "call for call" in r
    wrong = text.replace("        yQueue.FreeTensor(y);\n", "")
    r = check_cpp(wrong, _SCALED, _python_solution(_SCALED))
    assert r.correct is False and "ASC_DEVKIT_DIR" in r and "FreeTensor" in r


def test_bad_input():
    text = _solution_text(_SCALED)
    assert check_cpp(None, _SCALED).correct is None
    assert check_cpp(42, _SCALED).correct is False
    assert check_cpp(text, _SCALED, fn=3).correct is False
    assert "no __global__ entry" in check_cpp(text.replace("void my_scaled_add(", "void other("), _SCALED)
    with pytest.raises(ValueError, match="unknown C\\+\\+ exercise"):
        check_cpp(text, "01.nope")
    r = check_cpp("missing_file.cpp", _SCALED)
    assert r.correct is False and "%%writefile" in r


def test_a_writefile_path_is_read(tmp_path):
    path = tmp_path / "my_scaled_add.cpp"
    path.write_text(_solution_text(_SCALED), encoding="utf-8")
    assert check_cpp(str(path), _SCALED, _python_solution(_SCALED)).correct is True


def test_a_python_that_does_not_run_is_reported():
    def broken(ctx, *args):
        raise IndexError("tile 3")
    r = check_cpp(_solution_text(_SCALED), _SCALED, broken)
    assert r.correct is False and "does not run" in r and "01.scaled_add_double_buffer" in r


# ---- the notebooks -----------------------------------------------------------------------------
@pytest.mark.parametrize("eid", IDS)
def test_notebook_cells_are_the_generated_ones(eid):
    nb_path = next((REPO / "instructor").glob(f"{eid[:2]}_*.ipynb"))
    cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
    src = ["".join(c["source"]) for c in cells]
    sol = next(i for i, s in enumerate(src) if s.startswith(f"# Exercise {eid}:"))
    assert src[sol] == cpp_solution_cell(eid).rstrip("\n"), f"{nb_path.name}: regenerate the cell of {eid}"
    check = src[sol + 1]
    ex = EXERCISES[eid]
    assert f'check_cpp({ex.cell_name}, "{eid}", {ex.python_name})' in check
    assert "### BEGIN HIDDEN TESTS\nassert result.correct\n### END HIDDEN TESTS" in check
    # the Python kernel it traces is written above it, never below
    kid = ex.kernel_exercise
    assert any(f'"{kid}"' in s for s in src[:sol]), f"{eid} comes before the check of {kid}"
    meta = cells[sol + 1]["metadata"].get("nbgrader", {})
    assert meta.get("points") == 3 and meta.get("grade") is True
