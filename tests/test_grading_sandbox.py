"""The grader's parts, without nbgrader: the sandboxed child (npu_lab.course.sandbox), the fresh
import of a course check (npu_lab.course.submission.guarded_check), the file guard
(npu_lab.course.guard) and reading bad submissions. The whole pipeline on hostile submissions is
tests/test_grading_hostile.py."""

from __future__ import annotations

import json
import time

import nbformat
import pytest

from npu_lab.course import guard
from npu_lab.course.sandbox import library_copy, resolve_user, run_cells
from npu_lab.course.submission import (SubmissionError, guarded_check, instructor_setup, read_submission,
                                       restore_graded_cells)


@pytest.fixture(scope="module")
def libdir(tmp_path_factory):
    return library_copy(tmp_path_factory.mktemp("lib"))


def run(cells, tmp_path, libdir, timeout_s=30.0, memory_bytes=2 * 2**30):
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    return run_cells(list(enumerate(cells)), scratch, libdir, timeout_s=timeout_s, memory_bytes=memory_bytes)


def test_cells_run_in_order_in_the_scratch_folder_with_its_own_library(tmp_path, libdir):
    result = run(["import os, npu_lab\nx = 6 * 7\nprint(x, os.getcwd(), os.environ['HOME'])",
                  "print(npu_lab.__file__)", "raise ValueError('boom')", "print('after', x)"], tmp_path, libdir)
    assert result.failure is None
    assert [c.status for c in result.cells] == ["ok", "ok", "error", "ok"]
    scratch = str(tmp_path / "scratch")
    assert result.cells[0].stdout == f"42 {scratch} {scratch}\n"
    assert result.cells[1].stdout.startswith(str(libdir))        # the copy, not the checkout
    assert (result.cells[2].ename, result.cells[2].evalue) == ("ValueError", "boom")
    assert "<cell 2>" in result.cells[2].traceback[0]
    assert result.cells[3].stdout == "after 42\n"


def test_an_endless_cell_is_stopped_at_the_deadline_with_its_children(tmp_path, libdir):
    start = time.monotonic()
    result = run(["import subprocess, sys\np = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                  "q = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
                  "open('pid', 'w').write(f'{p.pid} {q.pid}')", "while True:\n    pass", "print('never')"],
                 tmp_path, libdir, timeout_s=4)
    assert time.monotonic() - start < 20
    assert [c.status for c in result.cells] == ["ok"]
    assert "stopped at cell 1" in result.failure and "4 s limit" in result.failure
    time.sleep(0.5)
    for pid in map(int, (tmp_path / "scratch" / "pid").read_text().split()):
        assert _gone(pid), f"process {pid} the cell started survived the run"   # group and setsid ones


def _gone(pid: int) -> bool:
    """No such process, or a zombie (killed; its new parent has not reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("cell, message", [
    ("import os\nos._exit(3)", "exited (code 3"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL"),
    ("import os, sys\nos.write(int(sys.argv[1]), b'{\"index\": 2, \"status\": \"ok\"}\\n')", "out of protocol"),
])
def test_a_dying_or_forging_child_stops_the_run_with_a_reason(tmp_path, libdir, cell, message):
    result = run(["pass", cell, "print('never')"], tmp_path, libdir)
    assert message in result.failure, result.failure
    assert len(result.cells) <= 1


def test_sys_exit_and_memory_errors_are_cell_errors(tmp_path, libdir):
    result = run(["import sys\nsys.exit(1)", "x = bytearray(4 * 2**30)", "print('still here')"], tmp_path, libdir)
    assert result.failure is None
    assert [c.ename for c in result.cells[:2]] == ["SystemExit", "MemoryError"]
    assert result.cells[2].stdout == "still here\n"


def _course_check_notebook():
    setup = nbformat.v4.new_code_cell("from npu_lab.course.ex01 import check_launch_overhead\nimport numpy as np\n"
                                      "print('setup')\n\ndef helper():\n    return 1\n")
    answer = nbformat.v4.new_code_cell("answer = None")
    answer.metadata["nbgrader"] = {"grade": False, "grade_id": "ex01_1_solution", "solution": True, "locked": False}
    check = nbformat.v4.new_code_cell("result = check_launch_overhead(answer)\nprint(result)\nassert result.correct")
    check.metadata["nbgrader"] = {"grade": True, "grade_id": "ex01_1", "solution": False, "locked": True, "points": 1}
    return nbformat.v4.new_notebook(cells=[setup, answer, check])


def test_instructor_setup_takes_imports_and_defs_only():
    setup, names = instructor_setup(_course_check_notebook(), 2)
    assert "print('setup')" not in setup and "def helper" in setup
    assert names == {"check_launch_overhead", "np", "helper"}


@pytest.mark.parametrize("attack", [
    "def check_launch_overhead(a):\n    class R(str):\n        correct = True\n    return R('fine')",
    "import npu_lab.course.ex01 as m\nm._missing = lambda text: m.CheckResult(text, True)",
    "import npu_lab.course.checks as c\nc.CheckResult.correct = True\n"
    "c.CheckResult.__new__ = lambda cls, text, correct=None: str.__new__(cls, text)",
])
def test_a_guarded_check_uses_the_library_not_the_students_version(tmp_path, libdir, attack):
    """Unguarded, each attack passes the assert; guarded, the course's own check says "no answer"."""
    nb = _course_check_notebook()
    setup, names = instructor_setup(nb, 2)
    plain = run([nb.cells[0].source, "answer = None\n" + attack, nb.cells[2].source], tmp_path, libdir)
    assert plain.cells[2].status == "ok"                       # the attack works on a bare check cell
    guarded = run([nb.cells[0].source, "answer = None\n" + attack, guarded_check(nb.cells[2].source, setup, names),
                   "print(type(check_launch_overhead).__module__)"], tmp_path, libdir)
    assert guarded.cells[2].status == "error" and guarded.cells[2].ename == "AssertionError"
    assert "No answer yet" in guarded.cells[2].stdout


def test_restore_graded_cells_puts_back_source_points_and_deleted_checks():
    instructor = _course_check_notebook()
    student = nbformat.from_dict(json.loads(json.dumps(instructor)))
    student.cells[2].source = "print('trust me')"
    student.cells[2].metadata["nbgrader"]["points"] = 99
    fake = nbformat.v4.new_code_cell("pass")
    fake.metadata["nbgrader"] = {"grade": True, "grade_id": "ex01_1", "points": 5}     # a duplicate id
    student.cells.append(fake)
    nb, notes, missing = restore_graded_cells(student, instructor)
    assert nb.cells[2].source == instructor.cells[2].source and nb.cells[2].metadata.nbgrader["points"] == 1
    assert "nbgrader" not in nb.cells[3].metadata and missing == []
    assert any("duplicate" in n for n in notes) and any("restored" in n for n in notes)
    del student.cells[2:]
    nb, notes, missing = restore_graded_cells(student, instructor)
    assert nb.cells[2].source == instructor.cells[2].source and "put back" in notes[-1]
    del student.cells[1:]
    assert restore_graded_cells(student, instructor)[2] == ["ex01_1"]


@pytest.mark.parametrize("data, message", [
    (b"", "is empty"), (b"   \n", "is empty"), (b"\xff\xfe junk", "not JSON"), (b"[1, 2]", "without a 'cells' list"),
    (json.dumps({"cells": [], "nbformat": 4, "nbformat_minor": 5, "metadata": {}}).encode(), "has no cells"),
    (json.dumps({"cells": [{"cell_type": "code"}], "nbformat": 4, "nbformat_minor": 5, "metadata": {}}).encode(),
     "nbformat can read"),
])
def test_read_submission_says_why_a_file_is_not_gradable(data, message):
    with pytest.raises(SubmissionError, match=message):
        read_submission(data, "x.ipynb")


def test_guard_sees_changes_and_restores(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.txt").write_text("1")
    (tmp_path / "a" / "two.txt").write_text("2")
    snap = guard.take([tmp_path / "a"])
    assert snap.changes() == []
    (tmp_path / "a" / "one.txt").write_text("changed")
    (tmp_path / "a" / "two.txt").unlink()
    (tmp_path / "a" / "new.txt").write_text("new")
    assert [line.rsplit(" ", 1)[1] for line in snap.changes()] == ["added", "changed", "removed"]
    snap.restore()
    assert snap.changes() == []
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["one.txt", "two.txt"]
    assert (tmp_path / "a" / "one.txt").read_text() == "1"
    # same size, the old modification time put back: the status-change time still moved
    one = tmp_path / "a" / "one.txt"
    st = one.stat()
    time.sleep(0.01)
    one.write_text("9")
    import os

    os.utime(one, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert snap.changes() == [f"{one} changed"]
    snap.restore()
    assert one.read_text() == "1" and snap.changes() == []


def test_resolve_user_rejects_unknown_users():
    assert resolve_user("none") is None
    with pytest.raises(ValueError, match="no user"):
        resolve_user("no-such-user-npu-lab")


@pytest.mark.parametrize("options, message", [
    (["--timeout-s", "0"], "timeout_s must be a finite number of seconds > 0"),
    (["--timeout-s", "inf"], "timeout_s must be a finite number of seconds > 0"),
    (["--memory-gb", "0.1"], "at least 0.5"),
    (["--memory-gb", "nan"], "at least 0.5"),
    (["--sandbox-user", "no-such-user-npu-lab"], "no user 'no-such-user-npu-lab'"),
    (["--roster", "/nonexistent/roster.txt"], "roster '/nonexistent/roster.txt' does not exist"),
])
def test_grade_refuses_bad_limits_and_options(tmp_path, capsys, options, message):
    from npu_lab.cli import main as cli_main

    (tmp_path / "subs" / "alice").mkdir(parents=True)
    (tmp_path / "subs" / "alice" / "90_practice.ipynb").write_text("{}")
    fixture = __import__("pathlib").Path(__file__).parent / "data" / "nbgrader"
    assert cli_main(["grade", str(tmp_path / "subs"), "-o", str(tmp_path / "out"), "--instructor", str(fixture),
                     *options]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()                      # refused before anything was written


def test_every_course_check_is_bound_afresh_from_the_instructor_setup():
    """Each check cell of instructor/ calls checks that its guarded version re-imports: names
    imported or defined in the instructor's setup cells (a check defined elsewhere — in an
    answer cell — would be the student's)."""
    import builtins

    from npu_lab.course.markers import apply_metadata, notebook_paths
    from npu_lab.course.release import INSTRUCTOR_DIR
    from npu_lab.course.submission import called_names

    paths = notebook_paths(INSTRUCTOR_DIR)
    if not paths:
        pytest.skip("no instructor/ notebooks yet: run `python scripts/make_instructor.py`")
    checked = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        for ex in apply_metadata(nb, path.name):
            _setup, names = instructor_setup(nb, ex.check_cell)
            called = called_names(nb.cells[ex.check_cell].source) - set(dir(builtins))
            assert called and called <= names, f"{path.name} {ex.id}: {sorted(called - names)} not in the setup"
            checked += 1
    assert checked >= 20
