"""The instructor workflow on nbgrader (docs/instructors.md), run for real.

* markers -> nbgrader metadata (npu_lab.course.markers, scripts/nbgrader_metadata.py): found,
  idempotent, bad markers named;
* the real pipeline on the fixture tests/data/nbgrader/90_practice.ipynb (one prediction, one
  kernel exercise): nbgrader's generate_assignment in a temporary course folder gives a student
  notebook without solutions whose stubs run; two submissions — one solved, one untouched — are
  autograded by ``python -m npu_lab grade`` (check cells and hidden tests restored from the
  instructor's source, run in the sandbox, scored by nbgrader from the gradebook) and the score
  CSVs say 4/4 and 0/4 (hostile submissions: tests/test_grading_hostile.py);
* staleness: the committed notebooks/ are what `make release` would write from instructor/
  (skipped, saying so, until instructor/ exists);
* show_solution; the one-shot conversion scripts/make_instructor.py on a temporary copy.
"""

from __future__ import annotations

import copy
import csv
import json
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbgrader", reason="the instructor workflow needs nbgrader (make install)")

from npu_lab.cli import main as cli_main  # noqa: E402
from npu_lab.course import show_solution  # noqa: E402
from npu_lab.course.markers import (KERNEL_POINTS, PREDICTION_POINTS, MarkerError, apply_metadata,  # noqa: E402
                                    find_exercises, notebook_paths)
from npu_lab.course.release import (CODE_STUB, INSTRUCTOR_DIR, STUDENT_DIR, compare_sources,  # noqa: E402
                                    generate_student_notebooks, stale_notebooks)
from npu_lab.course.solutions import without_markers  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURE_DIR = REPO / "tests" / "data" / "nbgrader"
FIXTURE = FIXTURE_DIR / "90_practice.ipynb"
sys.path.insert(0, str(REPO / "scripts"))


def fixture_nb():
    return nbformat.read(FIXTURE, as_version=4)


def code(source: str):
    return nbformat.v4.new_code_cell(source)


def notebook(*sources):
    return nbformat.v4.new_notebook(cells=[code(s) for s in sources])


SOLUTION = "# Exercise 03.1: a number\nanswer = None\n### BEGIN SOLUTION\nanswer = 5\n### END SOLUTION"
CHECK = "result = check(answer)\nprint(result)\n### BEGIN HIDDEN TESTS\nassert result.correct\n### END HIDDEN TESTS"


# ------------------------------------------------------------------------------- markers
def test_fixture_exercises_and_points():
    exercises = find_exercises(fixture_nb(), FIXTURE.name)
    assert [(e.id, e.kind, e.points) for e in exercises] == [
        ("90.1", "prediction", PREDICTION_POINTS), ("90.scaled_add", "kernel", KERNEL_POINTS)]
    assert (PREDICTION_POINTS, KERNEL_POINTS) == (1, 3)
    assert [(e.grade_id, e.solution_id) for e in exercises] == [
        ("ex90_1", "ex90_1_solution"), ("ex90_scaled_add", "ex90_scaled_add_solution")]


def test_apply_metadata_marks_cells_and_is_idempotent():
    nb = fixture_nb()
    exercises = apply_metadata(nb)
    once = copy.deepcopy(nb)
    apply_metadata(nb)
    assert nb == once
    kernel = exercises[1]
    assert nb.cells[kernel.check_cell].metadata.nbgrader == {
        "grade": True, "grade_id": "ex90_scaled_add", "locked": True, "points": 3, "schema_version": 3,
        "solution": False, "task": False}
    assert nb.cells[kernel.solution_cell].metadata.nbgrader["solution"] is True
    marked = [i for i, c in enumerate(nb.cells) if "nbgrader" in c.metadata]
    assert marked == sorted(i for e in exercises for i in (e.solution_cell, e.check_cell))


def test_apply_metadata_drops_its_stale_metadata_and_keeps_hand_set_metadata():
    nb = notebook(SOLUTION, CHECK, "x = 1", "y = 2")
    apply_metadata(nb)
    nb.cells[2].metadata["nbgrader"] = {"grade_id": "ex03_old", "grade": True, "points": 1}   # ours, stale
    nb.cells[3].metadata["nbgrader"] = {"grade_id": "setup", "locked": True}                   # by hand
    nb.cells[0].source = nb.cells[0].source.replace("03.1", "03.2")
    apply_metadata(nb)
    assert "nbgrader" not in nb.cells[2].metadata
    assert nb.cells[3].metadata["nbgrader"]["grade_id"] == "setup"
    assert nb.cells[1].metadata["nbgrader"]["grade_id"] == "ex03_2"


def test_kernel_id_comes_from_the_check_call_or_the_title():
    kernel = "def my_kernel(ctx, x):\n    # fill in\n    ### BEGIN SOLUTION\n    x = 1\n    ### END SOLUTION"
    check = 'result = check_kernel(my_kernel, "05.prefetch")\nprint(result)\n' + CHECK.split("\n", 2)[2]
    [ex] = find_exercises(notebook(kernel, check))
    assert (ex.id, ex.kind, ex.points) == ("05.prefetch", "kernel", 3)
    [ex] = find_exercises(notebook("# Exercise 05.prefetch: place it\n" + kernel, check))
    assert ex.id == "05.prefetch"


def test_appendix_notebooks_and_their_exercise_ids(tmp_path):
    """An appendix notebook (07b_...) is a course notebook, and its exercises are 07b.M."""
    [ex] = find_exercises(notebook(SOLUTION.replace("03.1", "07b.1"), CHECK))
    assert (ex.id, ex.grade_id, ex.solution_id) == ("07b.1", "ex07b_1", "ex07b_1_solution")
    for name in ("07_tuning.ipynb", "07b_appendix.ipynb", "notes.ipynb", "7_x.ipynb", "07bb_x.ipynb"):
        (tmp_path / name).write_text("{}")
    assert [p.name for p in notebook_paths(tmp_path)] == ["07_tuning.ipynb", "07b_appendix.ipynb"]


@pytest.mark.parametrize("cells, message", [
    ([SOLUTION.replace("### END SOLUTION", ""), CHECK], "never closed"),
    ([SOLUTION], "notebook ends"),
    ([SOLUTION, "print(1)", CHECK], "must be followed by its check cell"),
    ([CHECK], "without a solution cell"),
    ([SOLUTION.replace("# Exercise 03.1: a number\n", ""), CHECK], "no exercise id"),
    ([SOLUTION, CHECK, SOLUTION, CHECK], "appears twice"),
    ([SOLUTION + "\n" + CHECK], "both a solution and hidden tests"),
    (["# Exercise 05.a: x\n### BEGIN SOLUTION\n### END SOLUTION",
      'r = check_kernel(k, "05.b")\n### BEGIN HIDDEN TESTS\n### END HIDDEN TESTS'], "make them agree"),
])
def test_markers_that_break_the_convention_are_named(cells, message):
    with pytest.raises(MarkerError, match=message):
        find_exercises(notebook(*cells), "05_x.ipynb")


def test_solution_region_in_markdown_is_refused():
    nb = notebook(SOLUTION, CHECK)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("### BEGIN SOLUTION\nhi\n### END SOLUTION"))
    with pytest.raises(MarkerError, match="code cells"):
        find_exercises(nb)


def test_metadata_script_is_idempotent(tmp_path, capsys):
    import nbgrader_metadata

    target = tmp_path / FIXTURE.name
    shutil.copyfile(FIXTURE, target)
    assert nbgrader_metadata.main([str(target), "--strip-outputs"]) == 0
    first = target.read_bytes()
    assert nbgrader_metadata.main([str(target), "--strip-outputs"]) == 0
    assert target.read_bytes() == first
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("updated") and out[1].startswith("same") and "(2 exercises)" in out[1]
    assert nbformat.read(target, as_version=4).cells[4].metadata.nbgrader["grade_id"] == "ex90_1"


def test_metadata_script_reports_bad_markers_and_leaves_the_file(tmp_path, capsys):
    import nbgrader_metadata

    bad = tmp_path / "03_bad.ipynb"
    nbformat.write(notebook(SOLUTION), bad)
    before = bad.read_bytes()
    assert nbgrader_metadata.main([str(bad)]) == 1
    assert "notebook ends" in capsys.readouterr().err
    assert bad.read_bytes() == before


# ------------------------------------------------------------------------------- the real pipeline
@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """Release the fixture with nbgrader, hand in a solved, an untouched and a tampered copy,
    grade them through the command line. Returns (released notebook path, grade output folder, stdout)."""
    root = tmp_path_factory.mktemp("nbgrader")
    [released] = generate_student_notebooks([FIXTURE], root / "release")
    student = nbformat.read(released, as_version=4)
    instructor = fixture_nb()
    solved = copy.deepcopy(student)
    for ex in find_exercises(instructor):      # the student types the solution in
        solved.cells[ex.solution_cell].source = without_markers(instructor.cells[ex.solution_cell].source)
    # carol answers the prediction and, instead of the kernel, empties the kernel's check cell
    tampered = copy.deepcopy(student)
    prediction, kernel = find_exercises(instructor)
    tampered.cells[prediction.solution_cell] = solved.cells[prediction.solution_cell]
    tampered.cells[kernel.check_cell].source = "print('all good')"
    subs = root / "submissions"
    for name, nb in (("alice", solved), ("bob", student), ("carol", tampered)):
        (subs / name).mkdir(parents=True)
        nbformat.write(nb, subs / name / FIXTURE.name)
    (subs / "bob" / "99_unknown.ipynb").write_text("{}")
    out = root / "graded"
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        code = cli_main(["grade", str(subs), "-o", str(out), "--instructor", str(FIXTURE_DIR)])
    assert code == 0, buf.getvalue()
    return released, out, buf.getvalue()


def test_student_notebook_has_no_solutions_and_a_stub_that_runs(pipeline):
    released, out, _ = pipeline
    text = released.read_text()
    assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
    assert "answer = 512 * 4" not in text and "ctx.muls" not in text
    nb = nbformat.read(released, as_version=4)
    kernel = nb.cells[find_exercises(fixture_nb())[1].solution_cell].source
    assert kernel.endswith("\n    " + CODE_STUB)            # indented like the region it replaces
    # bob handed the stubs in untouched: autograde ran them without an error; only the restored
    # hidden tests failed
    bob = nbformat.read(out / "course" / "autograded" / "bob" / "90_practice" / FIXTURE.name, as_version=4)
    errors = [(i, o.ename) for i, c in enumerate(bob.cells) for o in c.get("outputs", [])
              if o.output_type == "error"]
    checks = [e.check_cell for e in find_exercises(fixture_nb())]
    assert errors == [(i, "AssertionError") for i in checks]
    assert all("assert result.correct" in bob.cells[i].source for i in checks)


def test_grades_solved_full_marks_untouched_zero(pipeline):
    _, out, stdout = pipeline
    with (out / "scores.csv").open() as f:
        rows = list(csv.DictReader(f))
    table = {(r["student"], r["exercise"]): (float(r["score"]), float(r["max_score"]), r["status"]) for r in rows}
    assert table == {
        ("alice", "90.1"): (1.0, 1.0, "graded"), ("alice", "90.scaled_add"): (3.0, 3.0, "graded"),
        ("bob", "90.1"): (0.0, 1.0, "graded"), ("bob", "90.scaled_add"): (0.0, 3.0, "graded"),
        # the check cell is restored from the instructor version (hidden tests included)
        ("carol", "90.1"): (1.0, 1.0, "graded"), ("carol", "90.scaled_add"): (0.0, 3.0, "graded")}
    with (out / "scores_by_student.csv").open() as f:
        wide = list(csv.reader(f))
    assert wide == [["student", "90.1", "90.scaled_add", "total", "max"],
                    ["alice", "1", "3", "4", "4"], ["bob", "0", "0", "0", "4"], ["carol", "1", "0", "1", "4"]]
    for student in ("alice", "bob", "carol"):
        page = out / "feedback" / student / "90_practice.html"
        assert page.is_file() and "90.scaled_add" in page.read_text()
    assert "alice: 4 / 4 points" in stdout and "bob: 0 / 4 points" in stdout
    assert "99_unknown.ipynb: no instructor notebook" in stdout
    assert str(out / "scores.csv") in stdout


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing", "does not exist"),
    (lambda p: p, "no submissions found"),
])
def test_grade_refuses_bad_submission_folders(tmp_path, capsys, make, message):
    assert cli_main(["grade", str(make(tmp_path)), "--instructor", str(FIXTURE_DIR)]) == 2
    assert message in capsys.readouterr().err


# ------------------------------------------------------------------------------- staleness
def test_compare_sources_names_the_stale_cell(pipeline):
    released, _, _ = pipeline
    assert stale_notebooks(FIXTURE_DIR, released.parent) == []
    committed = nbformat.read(released, as_version=4)
    edited = copy.deepcopy(committed)
    edited.cells[3].source += "\nanswer = 2048"
    assert compare_sources(committed, edited, "n") == ["n cell 3 ('# Exercise 90.1: bytes in a tile of 512 float32 "
                                                       "elements'): source differs"]
    edited = copy.deepcopy(committed)
    edited.cells[4].metadata.nbgrader["points"] = 2
    assert compare_sources(committed, edited, "n") == ["n cell 4: nbgrader metadata differs"]
    assert compare_sources(committed, nbformat.v4.new_notebook(), "n")[0] == "n: 9 cells generated, 0 committed"


def test_committed_student_notebooks_are_released_from_instructor():
    if not notebook_paths(INSTRUCTOR_DIR):
        pytest.skip("no instructor/ notebooks yet: run `python scripts/make_instructor.py && make release`")
    problems = stale_notebooks(INSTRUCTOR_DIR, STUDENT_DIR)
    assert not problems, "notebooks/ is stale, run `make release`:\n" + "\n".join(problems)


def test_instructor_notebooks_carry_their_metadata():
    paths = notebook_paths(INSTRUCTOR_DIR)
    if not paths:
        pytest.skip("no instructor/ notebooks yet: run `python scripts/make_instructor.py`")
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        before = copy.deepcopy(nb)
        apply_metadata(nb, path.name)
        assert nb == before, f"{path}: run `python scripts/nbgrader_metadata.py` (make release does)"


# ------------------------------------------------------------------------------- show_solution
def test_show_solution_reads_the_instructor_cell():
    prediction = show_solution("90.1", instructor_dir=FIXTURE_DIR)
    assert "answer = 512 * 4" in prediction and "SOLUTION" not in prediction
    assert prediction.startswith("# Exercise 90.1:")
    kernel = show_solution(" 90.scaled_add ", instructor_dir=FIXTURE_DIR)
    assert "ctx.muls(z, x, alpha, n)" in kernel and "def my_kernel" in kernel
    assert "```python" in kernel._repr_markdown_() and repr(kernel).startswith("# Solution of exercise 90.scaled_add")


def test_show_solution_unknown_id_lists_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"no exercise '05.2'.*known exercises are: 90.1, 90.scaled_add"):
        show_solution("05.2", instructor_dir=FIXTURE_DIR)
    with pytest.raises(ValueError, match="as a string"):
        show_solution(52, instructor_dir=FIXTURE_DIR)
    with pytest.raises(FileNotFoundError, match="instructor"):
        show_solution("90.1", instructor_dir=tmp_path)


def test_show_solution_knows_every_course_exercise():
    paths = notebook_paths(INSTRUCTOR_DIR)
    if not paths:
        pytest.skip("no instructor/ notebooks yet")
    for path in paths:
        for ex in find_exercises(nbformat.read(path, as_version=4), path.name):
            assert show_solution(ex.id).notebook == path.name


# ------------------------------------------------------------------------------- conversion
def test_make_instructor_converts_a_copy_once(tmp_path, capsys):
    import make_instructor

    source = tmp_path / "notebooks"
    shutil.copytree(STUDENT_DIR, source, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copyfile(FIXTURE, source / FIXTURE.name)
    target = tmp_path / "instructor"
    args = ["--source", str(source), "--target", str(target)]
    assert make_instructor.main(args) == 0
    written = notebook_paths(target)
    assert [p.name for p in written] == [p.name for p in notebook_paths(source)]
    # every notebook of the course folder is converted (appendices such as 07b included)
    assert {p.name for p in written} == {p.name for p in source.glob("*.ipynb")}
    for path in written:
        nb = json.loads(path.read_text())
        assert all(not c.get("outputs") for c in nb["cells"]), f"{path.name} keeps outputs"
    practice = nbformat.read(target / FIXTURE.name, as_version=4)
    assert practice.cells[7].metadata.nbgrader["points"] == 3
    assert make_instructor.main(args) == 2
    assert "already exist" in capsys.readouterr().err
    assert make_instructor.main(args + ["--force"]) == 0


def test_in_process_alembic_head_is_what_nbgrader_asks_the_executable():
    import os

    import nbgrader.api

    from npu_lab.course.release import alembic_head, nbgrader_environment

    with nbgrader_environment():
        assert nbgrader.api.get_alembic_version is alembic_head
        path = os.environ["PATH"]
    assert nbgrader.api.get_alembic_version is not alembic_head      # restored
    os.environ["PATH"], old = path, os.environ["PATH"]
    try:
        assert nbgrader.api.get_alembic_version() == alembic_head()
    finally:
        os.environ["PATH"] = old
