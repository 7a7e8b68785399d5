"""Hostile and broken submissions, graded by the real pipeline (``python -m npu_lab grade``) on
the fixture course tests/data/nbgrader, in one batch with clean submissions (issue 21):

* a check function redefined in the setup cell, or in the answer cell, or the course module its
  helpers come from patched -> no points (the check cell imports the check afresh);
* a kernel "solved" with numpy writing the GM output (from the reference) -> no points, and the
  message says what the kernel did and the rule;
* a submission that opens the gradebook (scores, hidden tests), overwrites another student's
  submission, writes into the course's source folder, reads the solutions from the course and
  instructor folders -> none of it happens, a later untouched submission still scores 0, the
  overwritten student is graded on what they handed in;
* tampered grading metadata (points) and an invented grade cell -> the instructor's points;
* an endless loop -> stopped at the time limit, the cells before it keep their points, the batch
  goes on; a memory hog -> MemoryError in its cell;
* not a notebook, an empty file, a notebook without cells, a student not on the roster, deleted
  cells -> one report line each, the rest graded.

A second, smaller batch runs the write attacks with the mount namespace switched off (as on a
machine that does not allow one): the hashes catch the changes, the attacker's grade is void and
the files are put back.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import textwrap
from contextlib import redirect_stdout
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbgrader", reason="grading needs nbgrader (make install)")

from npu_lab.cli import main as cli_main  # noqa: E402
from npu_lab.course import sandbox  # noqa: E402
from npu_lab.course.grading import grade_submissions  # noqa: E402
from npu_lab.course.markers import find_exercises  # noqa: E402
from npu_lab.course.release import generate_student_notebooks  # noqa: E402
from npu_lab.course.solutions import without_markers  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "data" / "nbgrader" / "90_practice.ipynb"
TIMEOUT_S = 20
INSTRUCTOR = nbformat.read(FIXTURE, as_version=4)
PREDICTION, KERNEL = find_exercises(INSTRUCTOR)
SETUP_CELL = 1


def _attack_cell(body: str) -> str:
    """Attack code appended to a cell: every step tried, what happened printed (never raises)."""
    return "\n\n# --- attack\n" + textwrap.dedent(body)


def _try(code: str) -> str:
    return f"try:\n{textwrap.indent(code, '    ')}\n    print('ATTACK OK')\nexcept Exception as _e:\n    print('ATTACK FAILED', type(_e).__name__, _e)\n"


def submissions(student_nb, paths) -> dict:
    """{student: notebook or bytes} for the hostile batch; ``paths``: where things are."""
    solved = copy.deepcopy(student_nb)
    for ex in (PREDICTION, KERNEL):
        solved.cells[ex.solution_cell].source = without_markers(INSTRUCTOR.cells[ex.solution_cell].source)

    def edited(base, **cells):
        nb = copy.deepcopy(base)
        for index, text in cells.items():
            nb.cells[int(index[1:])].source += text
        return nb

    fake_checks = ('\ndef check_tile_bytes(answer):\n    return right("fine")\n\n'
                   'def check_kernel(kernel, exercise_id):\n    return right("fine")\n')
    # every CheckResult the student's copy of the module makes is "correct"
    patch_module = ("\nimport npu_lab.course.checks as _m\n_m.CheckResult.correct = True\n"
                    "_m.CheckResult.__new__ = lambda cls, text, correct=None: str.__new__(cls, text)\n")
    numpy_kernel = copy.deepcopy(student_nb)
    numpy_kernel.cells[PREDICTION.solution_cell] = solved.cells[PREDICTION.solution_cell]
    numpy_kernel.cells[KERNEL.solution_cell].source = (
        "@npu_kernel\ndef my_kernel(ctx, x_gm, y_gm, z_gm, alpha, n):\n"
        "    z_gm.data[:] = scaled_add_reference(x_gm.data, y_gm.data, alpha)   # no instruction at all\n")
    gradebook = _attack_cell(
        "import sqlite3\n"
        + _try(f"_db = sqlite3.connect({str(paths['gradebook'])!r})\n"
               "_db.execute(\"UPDATE grade SET extra_credit = 100, auto_score = 100\")\n"
               "_db.execute(\"UPDATE source_cell SET source = 'assert True'\")\n"
               "_db.commit()")
        + _try(f"open({str(paths['victim'])!r}, 'w').write('{{}}')"))
    writes = _attack_cell(
        _try(f"open({str(paths['course_source'] / 'evil.py')!r}, 'w').write('pwned')")
        + _try(f"open({str(paths['instructor'] / 'evil.txt')!r}, 'w').write('pwned')")
        + _try("import npu_lab.course.kernel_check as _kc, pathlib\n"
               "pathlib.Path(_kc.__file__).write_text('pwned')"))
    reads = copy.deepcopy(student_nb)
    reads.cells[PREDICTION.solution_cell].source += _attack_cell(
        "import json\n"
        + _try("_nb = json.load(open(" + repr(str(paths["instructor"] / FIXTURE.name)) + "))\n"
               "exec(''.join(_nb['cells'][3]['source']))")
        + _try("_nb = json.load(open(" + repr(str(paths['course_source'] / FIXTURE.name)) + "))\n"
               "exec(''.join(_nb['cells'][3]['source']))"))
    endless = copy.deepcopy(solved)
    endless.cells[KERNEL.solution_cell].source = "while True:\n    pass\n"
    memory = edited(solved, **{f"c{SETUP_CELL}": "\n_hog = bytearray(3 * 2**30)\n"})
    tampered = copy.deepcopy(student_nb)
    tampered.cells[KERNEL.check_cell].metadata["nbgrader"]["points"] = 100
    tampered.cells[KERNEL.check_cell].source = "print('all good')"
    extra = nbformat.v4.new_code_cell("print('bonus')")
    extra.metadata["nbgrader"] = {"grade": True, "grade_id": "bonus", "locked": False, "points": 50,
                                  "schema_version": 3, "solution": False, "task": False}
    tampered.cells.insert(2, extra)
    missing = copy.deepcopy(solved)
    del missing.cells[KERNEL.solution_cell:KERNEL.check_cell + 1]
    check_deleted = copy.deepcopy(solved)
    del check_deleted.cells[KERNEL.check_cell]
    no_cells = nbformat.v4.new_notebook()
    return {
        "alice": solved,                                           # clean, first
        "h_redef_setup": edited(student_nb, **{f"c{SETUP_CELL}": fake_checks}),
        "h_redef_answer": edited(student_nb, **{f"c{PREDICTION.solution_cell}": fake_checks + patch_module,
                                                f"c{KERNEL.solution_cell}": "\n" + fake_checks}),
        "h_patch_module": edited(student_nb, **{f"c{SETUP_CELL}": patch_module}),
        "h_numpy_kernel": numpy_kernel,
        "h_gradebook": edited(student_nb, **{f"c{SETUP_CELL}": gradebook}),
        "h_writes": edited(solved, **{f"c{SETUP_CELL}": writes}),
        "h_reads": reads,
        "h_endless": endless,
        "h_memory": memory,
        "h_tampered": tampered,
        "h_missing": missing,
        "h_check_deleted": check_deleted,
        "h_no_cells": no_cells,
        "h_not_a_notebook": b"this is not JSON, just my notes\n",
        "h_empty": b"",
        "mallory": solved,                                         # not on the roster
        "zz_untouched": student_nb,                                # after the gradebook attack
        "zz_victim": solved,                                       # overwritten by h_gradebook
    }


def _write(subs: Path, table: dict) -> None:
    for student, nb in table.items():
        (subs / student).mkdir(parents=True)
        target = subs / student / FIXTURE.name
        if isinstance(nb, bytes):
            target.write_bytes(nb)
        else:
            nbformat.write(nb, target)


def _scores(out: Path) -> dict:
    with (out / "scores.csv").open() as f:
        return {(r["student"], r["exercise"]): (float(r["score"]), r["status"]) for r in csv.DictReader(f)}


def _outputs(out: Path, student: str, cell: int) -> str:
    nb = nbformat.read(out / "course" / "autograded" / student / "90_practice" / FIXTURE.name, as_version=4)
    return json.dumps(nb.cells[cell].get("outputs", []))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    instructor = root / "instructor"
    instructor.mkdir()
    (instructor / FIXTURE.name).write_bytes(FIXTURE.read_bytes())
    [released] = generate_student_notebooks([FIXTURE], root / "release")
    student_nb = nbformat.read(released, as_version=4)
    subs, out = root / "submissions", root / "graded"
    paths = {"gradebook": out / "course" / "gradebook.db", "victim": subs / "zz_victim" / FIXTURE.name,
             "course_source": out / "course" / "source" / "90_practice", "instructor": instructor}
    table = submissions(student_nb, paths)
    _write(subs, table)
    roster = root / "roster.txt"
    roster.write_text("\n".join(s for s in table if s != "mallory") + "\n")
    before = {p: p.read_bytes() for p in [*subs.rglob("*.ipynb"), *instructor.iterdir()]}
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = cli_main(["grade", str(subs), "-o", str(out), "--instructor", str(instructor),
                         "--timeout-s", str(TIMEOUT_S), "--memory-gb", "2", "--roster", str(roster)])
    assert code == 0, buf.getvalue()
    return {"out": out, "stdout": buf.getvalue(), "before": before, "paths": paths, "instructor": instructor}


def test_clean_submissions_are_unaffected(hostile):
    s = _scores(hostile["out"])
    assert s["alice", "90.1"] == (1.0, "graded") and s["alice", "90.scaled_add"] == (3.0, "graded")
    # after the gradebook attack: the hidden tests are still the instructor's, the scores untouched
    assert s["zz_untouched", "90.1"] == (0.0, "graded") and s["zz_untouched", "90.scaled_add"] == (0.0, "graded")
    # overwritten (or not) during the batch: graded on what was handed in
    assert s["zz_victim", "90.1"][0] == 1.0 and s["zz_victim", "90.scaled_add"][0] == 3.0
    assert "alice: 4 / 4 points" in hostile["stdout"] and "zz_untouched: 0 / 4 points" in hostile["stdout"]


@pytest.mark.parametrize("student", ["h_redef_setup", "h_redef_answer", "h_patch_module"])
def test_redefined_or_patched_checks_do_not_reach_the_graded_cell(hostile, student):
    s = _scores(hostile["out"])
    assert s[student, "90.1"][0] == 0.0 and s[student, "90.scaled_add"][0] == 0.0
    # the restored check ran the library's check: its real message, not "fine"
    assert "No answer yet" in _outputs(hostile["out"], student, PREDICTION.check_cell + 0)


def test_a_numpy_kernel_scores_nothing_and_is_told_the_rule(hostile):
    s = _scores(hostile["out"])
    assert s["h_numpy_kernel", "90.1"][0] == 1.0 and s["h_numpy_kernel", "90.scaled_add"][0] == 0.0
    text = _outputs(hostile["out"], "h_numpy_kernel", KERNEL.check_cell)
    assert "wrote a GlobalTensor through numpy" in text and "DataCopy" in text


def test_the_gradebook_and_other_folders_are_out_of_reach(hostile):
    out, stdout = hostile["out"], hostile["stdout"]
    s = _scores(out)
    assert s["h_gradebook", "90.1"][0] == 0.0 and s["h_gradebook", "90.scaled_add"][0] == 0.0
    attacks = _outputs(out, "h_gradebook", SETUP_CELL) + _outputs(out, "h_writes", SETUP_CELL)
    assert "ATTACK OK" not in attacks and attacks.count("ATTACK FAILED") == 5
    import sqlite3

    db = sqlite3.connect(out / "course" / "gradebook.db")
    assert "assert result.correct" in db.execute("SELECT group_concat(source) FROM source_cell").fetchone()[0]
    assert db.execute("SELECT max(coalesce(extra_credit, 0)) FROM grade").fetchone()[0] == 0
    for path, data in hostile["before"].items():
        assert path.read_bytes() == data, f"{path} changed"
    assert not (hostile["paths"]["course_source"] / "evil.py").exists()
    assert not (hostile["instructor"] / "evil.txt").exists()
    # h_writes handed in a solved notebook: its failed attacks cost it nothing
    assert s["h_writes", "90.1"][0] == 1.0 and s["h_writes", "90.scaled_add"][0] == 3.0


def test_solutions_cannot_be_read_from_the_course_or_instructor_folder(hostile):
    if not sandbox.can_hide():
        pytest.skip("reading is stopped only by a mount namespace (root) or another user: this machine "
                    "allows neither, so a submission that knows the paths could read them (docs/instructors.md)")
    s = _scores(hostile["out"])
    assert s["h_reads", "90.1"][0] == 0.0
    text = _outputs(hostile["out"], "h_reads", PREDICTION.solution_cell)
    assert text.count("ATTACK FAILED") == 2


def test_tampered_points_and_cells_are_restored(hostile):
    s = _scores(hostile["out"])
    assert s["h_tampered", "90.scaled_add"] == (0.0, "graded")
    assert "h_tampered: 0 / 4 points" in hostile["stdout"]
    assert "restored from the instructor's source" in hostile["stdout"]
    assert "grade id 'bonus'" in hostile["stdout"]


def test_an_endless_loop_is_stopped_and_the_batch_goes_on(hostile):
    s = _scores(hostile["out"])
    assert s["h_endless", "90.1"] == (1.0, "graded")               # the cell before the loop keeps its point
    score, status = s["h_endless", "90.scaled_add"]
    assert score == 0.0 and f"longer than the {TIMEOUT_S:g} s limit" in status
    assert f"h_endless/90_practice.ipynb: stopped at cell {KERNEL.solution_cell}" in hostile["stdout"]


def test_a_memory_hog_gets_a_memory_error_in_its_cell(hostile):
    assert "MemoryError" in _outputs(hostile["out"], "h_memory", SETUP_CELL)
    s = _scores(hostile["out"])
    assert s["h_memory", "90.1"][0] == 1.0        # the rest of the notebook still ran


@pytest.mark.parametrize("student, line", [
    ("h_not_a_notebook", "is not a notebook (not JSON"),
    ("h_empty", "is empty"),
    ("h_no_cells", "has no cells"),
])
def test_bad_files_get_a_report_line_and_zero(hostile, student, line):
    s = _scores(hostile["out"])
    assert s[student, "90.1"][0] == 0.0 and line in s[student, "90.1"][1]
    assert f"{student}/90_practice.ipynb: not graded: 90_practice.ipynb {line}" in hostile["stdout"]


def test_unknown_student_and_missing_cells(hostile):
    s, stdout = _scores(hostile["out"]), hostile["stdout"]
    assert not any(student == "mallory" for student, _ in s)
    assert "mallory: not graded: unknown student (not on the roster" in stdout
    assert s["h_missing", "90.1"] == (1.0, "graded")
    assert s["h_missing", "90.scaled_add"] == (0.0, "not graded: the check cell is missing from the submission")
    assert "exercise ex90_scaled_add: not graded: its check and answer cells are missing" in stdout
    # only the check cell deleted: put back after the answer, graded
    assert s["h_check_deleted", "90.scaled_add"] == (3.0, "graded")


def test_grading_time_is_reported(hostile):
    assert "notebook(s) in" in hostile["stdout"] and "cells ran as" in hostile["stdout"]


# ------------------------------------------------------------------------------- no namespace
def test_without_a_namespace_the_hashes_catch_writes_and_put_files_back(tmp_path, monkeypatch):
    """The write attacks on a machine without a mount namespace and without a second user: they
    succeed for a moment; the grader voids that grade and restores every file."""
    monkeypatch.setattr(sandbox, "can_hide", lambda: False)
    instructor = tmp_path / "instructor"
    instructor.mkdir()
    (instructor / FIXTURE.name).write_bytes(FIXTURE.read_bytes())
    [released] = generate_student_notebooks([FIXTURE], tmp_path / "release")
    student_nb = nbformat.read(released, as_version=4)
    subs, out = tmp_path / "submissions", tmp_path / "graded"
    paths = {"gradebook": out / "course" / "gradebook.db", "victim": subs / "zz_victim" / FIXTURE.name,
             "course_source": out / "course" / "source" / "90_practice", "instructor": instructor}
    table = submissions(student_nb, paths)
    _write(subs, {k: table[k] for k in ("alice", "h_gradebook", "h_writes", "zz_untouched", "zz_victim")})
    before = {p: p.read_bytes() for p in [*subs.rglob("*.ipynb"), *instructor.iterdir()]}
    report = grade_submissions(subs, out, instructor, timeout_s=TIMEOUT_S, sandbox_user="none")
    s = {(r["student"], r["exercise"]): (float(r["score"]), r["status"]) for r in report.rows}
    for attacker in ("h_gradebook", "h_writes"):
        for ex in ("90.1", "90.scaled_add"):
            assert s[attacker, ex][0] == 0.0 and "changed files outside its folder" in s[attacker, ex][1]
    assert s["alice", "90.scaled_add"] == (3.0, "graded") and s["zz_victim", "90.scaled_add"] == (3.0, "graded")
    assert s["zz_untouched", "90.1"] == (0.0, "graded")
    for path, data in before.items():
        assert path.read_bytes() == data, f"{path} not restored"
    assert not (paths["course_source"] / "evil.py").exists() and not (instructor / "evil.txt").exists()
    import npu_lab.course.kernel_check as kc

    assert "def check_kernel" in Path(kc.__file__).read_text()
