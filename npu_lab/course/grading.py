"""Grade a folder of submitted notebooks (``make grade``, ``python -m npu_lab grade``): each
submission runs in a sandboxed process of its own, nbgrader scores it and writes the feedback.

Submissions layout: ``SUBMISSIONS/<student>/<NN_name>.ipynb`` — one folder per student holding the
student notebooks they worked in (same file names as ``notebooks/``; a student may hand in any
subset). :func:`grade_submissions`:

1. builds an nbgrader course from the instructor notebooks in ``OUT/course`` (``generate_assignment``
   fills its gradebook with every graded cell, hidden tests included; the folder is private to the
   grader, mode 0700) and reads every submission's bytes once, up front;
2. for each submission: restores its graded cells and their metadata (points) from the
   instructor's source (:mod:`.submission`), then runs its cells in a child process
   (:mod:`.sandbox`) — in a scratch folder holding only that notebook, under a wall-clock and a
   memory limit, as an unprivileged user when the grader is root, with check cells that import
   the library's checks afresh and receive their hidden tests only when they run. The course
   folder, the submissions folder, the instructor notebooks and the npu_lab package are recorded
   once and compared after each submission (:mod:`.guard`): a submission that changed any of
   them gets no grade (a line in the report says which files) and the files are put back. The
   executed notebooks stay in this process;
3. only then, when no student code runs any more, hands each executed notebook to nbgrader's
   ``autograde`` (its ``Execute`` step left out: the cells already ran) and
   ``generate_feedback``, which score it from the gradebook;

and writes into ``OUT``:

* ``scores.csv`` — one row per student and exercise: student, notebook, exercise, kind, score,
  max_score, status (``graded``, ``not submitted`` or ``not graded: <why>``);
* ``scores_by_student.csv`` — one row per student, one column per exercise, then total and max;
* ``feedback/<student>/<NN_name>.html`` — nbgrader's feedback page for each graded notebook;
* ``course/`` — the nbgrader course itself (gradebook.db, autograded notebooks): run
  ``nbgrader formgrader`` there to review or override a grade by hand.

A submission that cannot be graded (not a notebook, empty, no cells, a student not on the
roster, a timeout, the memory limit, a crash) gets zero on the cells it affects and a line in
the report; the rest of the batch is graded. docs/instructors.md says what is enforced and what
is not.
"""

from __future__ import annotations

import csv
import math
import os
import shutil
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from .markers import find_exercises, notebook_paths
from .release import INSTRUCTOR_DIR, ReleaseError, build_course, nbgrader_environment, run_nbgrader

SCORE_COLUMNS = ("student", "notebook", "exercise", "kind", "score", "max_score", "status")


class GradingError(ValueError):
    """Bad input to the grader (missing folder, no submissions, unknown notebook names)."""


@dataclass
class GradeReport:
    """Where :func:`grade_submissions` wrote its results, and the rows of ``scores.csv``."""

    out_dir: Path
    scores_csv: Path
    by_student_csv: Path
    feedback_dir: Path
    course_dir: Path
    rows: list[dict] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)   # files not graded, with the reason
    problems: list[str] = field(default_factory=list)  # "<student>/<notebook>: what happened", one a line
    seconds: dict = field(default_factory=dict)        # (student, notebook) -> seconds its grading took
    isolation: str = ""                                # who the cells ran as, what was hidden from them

    def totals(self) -> dict[str, tuple[float, float]]:
        """student -> (score, max_score) over every exercise of the graded notebooks."""
        out: dict[str, tuple[float, float]] = {}
        for row in self.rows:
            got, most = out.get(row["student"], (0.0, 0.0))
            out[row["student"]] = (got + float(row["score"] or 0), most + float(row["max_score"]))
        return out

    def summary(self) -> str:
        lines = [f"{student}: {got:g} / {most:g} points" for student, (got, most) in sorted(self.totals().items())]
        lines += [f"ignored: {why}" for why in self.ignored]
        lines += [f"problem: {line}" for line in self.problems]
        if self.seconds:
            times = sorted(self.seconds.values())
            lines.append(f"graded {len(times)} notebook(s) in {sum(times):.1f} s (median {times[len(times) // 2]:.1f} s, "
                         f"slowest {times[-1]:.1f} s); {self.isolation}")
        lines += [f"scores: {self.scores_csv}", f"scores by student: {self.by_student_csv}",
                  f"feedback: {self.feedback_dir}", f"nbgrader course (gradebook): {self.course_dir}"]
        return "\n".join(lines)


def find_submissions(submissions_dir: Path, known: set[str]) -> tuple[dict[str, dict[str, Path]], list[str]]:
    """``{student: {notebook stem: path}}`` from ``submissions_dir/<student>/<NN_name>.ipynb`` and
    the list of files skipped (with the reason). ``known``: the instructor notebook stems."""
    root = Path(submissions_dir)
    if not root.is_dir():
        raise GradingError(f"submissions folder {str(root)!r} does not exist (expected "
                           "SUBMISSIONS/<student>/<NN_name>.ipynb)")
    found: dict[str, dict[str, Path]] = {}
    ignored: list[str] = []
    for student_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for path in sorted(student_dir.glob("*.ipynb")):
            if path.stem in known:
                found.setdefault(student_dir.name, {})[path.stem] = path
            else:
                ignored.append(f"{path}: no instructor notebook {path.name} (expected one of: "
                               f"{', '.join(sorted(known))})")
    loose = sorted(p.name for p in root.glob("*.ipynb"))
    if loose:
        ignored.append(f"{root}: notebooks directly in the folder are not graded ({', '.join(loose)}); "
                       "put each student's notebooks in SUBMISSIONS/<student>/")
    if not found:
        raise GradingError(f"no submissions found in {root}: expected SUBMISSIONS/<student>/<NN_name>.ipynb "
                           f"with NN_name one of {', '.join(sorted(known))}" +
                           (f" ({'; '.join(ignored)})" if ignored else ""))
    return found, ignored


#: Defaults of the per-submission limits (``--timeout-s``, ``--memory-gb``; make GRADE_TIMEOUT_S,
#: GRADE_MEMORY_GB): a course notebook's cells take tens of seconds on a busy machine.
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MEMORY_GB = 4.0


def _autograde_without_execute(config) -> None:
    """nbgrader's Autograde, minus ClearOutput and Execute: the sandbox already ran the cells and
    the outputs it returned are what nbgrader scores (an error output in a check cell: no points)."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, DeduplicateIds, IgnorePattern,
                                        LimitOutput, OverwriteCells, OverwriteKernelspec, SaveAutoGrades)

    config.Autograde.sanitize_preprocessors = [DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata]
    config.Autograde.autograde_preprocessors = [IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
                                                SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]


def read_roster(path) -> set[str]:
    """Student ids from a roster file: one per line, or a CSV whose first column is the id (a
    header row ``id``/``student`` is skipped; ``#`` starts a comment)."""
    path = Path(path)
    if not path.is_file():
        raise GradingError(f"roster {str(path)!r} does not exist (one student id per line)")
    ids = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        first = line.split("#", 1)[0].split(",", 1)[0].strip()
        if first and first.lower() not in ("id", "student", "student_id"):
            ids.add(first)
    if not ids:
        raise GradingError(f"roster {path} lists no student ids (one per line)")
    return ids


def grade_submissions(submissions_dir, out_dir, instructor_dir=INSTRUCTOR_DIR, *,
                      timeout_s: float = DEFAULT_TIMEOUT_S, memory_gb: float | None = DEFAULT_MEMORY_GB,
                      sandbox_user: str = "auto", roster=None) -> GradeReport:
    """Grade every submission under ``submissions_dir`` against the instructor notebooks in
    ``instructor_dir``; write the score tables and feedback into ``out_dir`` (see the module doc).
    ``out_dir/course`` is rebuilt from scratch on every run.

    ``timeout_s`` / ``memory_gb``: limits per submission (wall clock; address space, None for
    none). ``sandbox_user``: the user the cells run as ("auto": ``nobody`` when the grader is
    root, else the grader; "none": the grader; or a user name). ``roster``: a file of student
    ids; a folder of a student not on it is reported and not graded."""
    import tempfile

    import nbformat

    from . import guard
    from .sandbox import child_python, library_copy, resolve_user

    if not (isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool)
            and math.isfinite(timeout_s) and timeout_s > 0):
        raise GradingError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")
    if memory_gb is not None and not (isinstance(memory_gb, (int, float)) and not isinstance(memory_gb, bool)
                                      and math.isfinite(memory_gb) and memory_gb >= 0.5):
        raise GradingError(f"memory_gb must be a finite number of GB, at least 0.5 (a Python with numpy needs "
                           f"that), or None for no limit; got {memory_gb!r}")
    try:
        user = resolve_user(sandbox_user)
    except ValueError as exc:
        raise GradingError(str(exc)) from None
    sources = {p.stem: p for p in notebook_paths(Path(instructor_dir))}
    if not sources:
        raise GradingError(f"no instructor notebooks in {instructor_dir} (NN_*.ipynb): run "
                           "`python scripts/make_instructor.py` once, or pass the folder that holds them")
    submissions, ignored = find_submissions(Path(submissions_dir), set(sources))
    problems: list[str] = []
    if roster is not None:
        known = read_roster(roster)
        for student in sorted(set(submissions) - known):
            problems.append(f"{student}: not graded: unknown student (not on the roster {roster}); "
                            f"their {len(submissions[student])} notebook(s) were skipped")
            del submissions[student]
        if not submissions:
            raise GradingError(f"no submission in {submissions_dir} is from a student on the roster {roster}")
    out = Path(out_dir)
    if out.resolve() == Path(submissions_dir).resolve() or Path(submissions_dir).resolve() in out.resolve().parents:
        raise GradingError("the output folder must not be the submissions folder or inside it (-o elsewhere)")
    # every submission's bytes, read once: what is graded even if a file is overwritten meanwhile
    handed_in = {(s, a): path.read_bytes() for s, nbs in submissions.items() for a, path in nbs.items()}
    course = out / "course"
    if course.exists():
        shutil.rmtree(course)
    course.mkdir(parents=True)
    course.chmod(0o700)                  # the gradebook and the solutions: the grader's alone
    assignments = sorted({stem for per_student in submissions.values() for stem in per_student})
    build_course([sources[a] for a in assignments], course)
    plans = {a: _instructor_plan(course, a) for a in assignments}
    import npu_lab

    package = Path(npu_lab.__file__).resolve().parent
    # the course data beside the package (npu_lab.data reads it) is the library's too
    watched = [course, Path(submissions_dir), Path(instructor_dir), package, package.parent / "data"]
    status: dict[tuple[str, str, str], str] = {}
    graded: set[tuple[str, str]] = set()
    seconds: dict[tuple[str, str], float] = {}
    scratch_root = Path(tempfile.mkdtemp(prefix="npu_lab_grade_"))
    try:
        scratch_root.chmod(0o711)        # the unprivileged child may enter its own folder, list none
        libdir = library_copy(scratch_root / "lib")
        user, hidden, isolation = _isolation(user, sandbox_user, [out, *watched[1:]],
                                             [scratch_root, Path(child_python())])
        problems.extend(isolation["problems"])
        # phase 1: every submission runs, one child at a time; the course folder holds no
        # student's data yet, and the executed notebooks stay in this process (compressed)
        snapshot = guard.take(watched + [libdir])
        executed = {}
        for number, (student, assignment) in enumerate(sorted(handed_in)):
            where = f"{student}/{assignment}.ipynb"
            scratch = scratch_root / f"s{number}"
            scratch.mkdir(mode=0o700)
            result = _grade_one(where, handed_in[student, assignment], plans[assignment], scratch, libdir,
                                snapshot, timeout_s, memory_gb, user, hidden)
            shutil.rmtree(scratch, ignore_errors=True)
            seconds[student, assignment] = result["seconds"]
            problems.extend(f"{where}: {line}" for line in result["problems"])
            for gid, why in result["exercise_status"].items():
                status[student, assignment, gid] = why
            if result["notebook"] is not None:
                executed[student, assignment] = zlib.compress(nbformat.writes(result["notebook"]).encode())
        # phase 2: no student code runs any more; nbgrader scores and writes the feedback
        for (student, assignment), blob in sorted(executed.items()):
            target = course / "submitted" / student / assignment / f"{assignment}.ipynb"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zlib.decompress(blob))
            try:
                run_nbgrader("Autograde", course, configure=_autograde_without_execute,
                             assignment_id=assignment, student_id=student)
                run_nbgrader("GenerateFeedback", course, assignment_id=assignment, student_id=student)
                graded.add((student, assignment))
            except ReleaseError as exc:
                first = str(exc).strip().splitlines()[0]
                problems.append(f"{student}/{assignment}.ipynb: not graded: nbgrader failed: {first}")
                for ex in plans[assignment]["exercises"]:
                    status[student, assignment, ex.grade_id] = f"not graded: nbgrader failed: {first}"
    finally:
        shutil.rmtree(scratch_root, ignore_errors=True)

    rows = _score_rows(course, plans, assignments, sorted(submissions), status, graded)
    report = GradeReport(out, out / "scores.csv", out / "scores_by_student.csv", out / "feedback", course,
                         rows, ignored, problems, seconds, isolation["text"])
    _write_scores(report)
    _copy_feedback(course, report.feedback_dir, graded)
    return report


def _instructor_plan(course: Path, assignment: str) -> dict:
    """What grading one notebook needs from the instructor's side (the course's ``source/`` copy,
    with its nbgrader metadata): the notebook, its exercises, and per check cell the setup source
    its guarded version imports."""
    import nbformat

    from .submission import instructor_setup

    path = course / "source" / assignment / f"{assignment}.ipynb"
    nb = nbformat.read(path, as_version=4)
    exercises = find_exercises(nb, path.name)
    setups = {}
    for ex in exercises:
        setups[ex.grade_id] = instructor_setup(nb, ex.check_cell)
    released = nbformat.read(course / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    return {"notebook": nb, "released": released, "exercises": exercises, "setups": setups, "name": path.name}


def _isolation(user, asked: str, private, needed) -> tuple:
    """``(user, hidden folders, {"text", "problems"})``: who the cells run as and what they cannot
    see. A root grader hides ``private`` (the output, submissions and instructor folders, the
    npu_lab package) in a mount namespace when the kernel allows it (skipping any folder that holds
    one of ``needed``: the scratch folder, this Python); ``user`` falls back to the grader when it
    cannot run this Python and was not asked for by name."""
    from .sandbox import can_hide, can_run_as

    problems = []
    if user is not None and not can_run_as(user):
        if asked != "auto":
            raise GradingError(f"user {user[2]} cannot run {sys.executable} (its files are not readable by that "
                               "user): make them readable, or grade with --sandbox-user none")
        problems.append(f"isolation: user {user[2]} cannot run {sys.executable} (a Python installed in a folder "
                        "private to root): the cells ran as root, with the folders below hidden; for a real camp "
                        "grade in a container or as a separate user (docs/instructors.md)")
        user = None
    hidden = []
    if can_hide():
        for folder in private:
            folder = Path(folder).resolve()
            if folder.is_dir() and not any(_inside(Path(n).resolve(), folder) for n in needed) and folder not in hidden:
                hidden.append(folder)
    elif os.geteuid() == 0:
        problems.append("isolation: no mount namespace (the kernel refused one: no CAP_SYS_ADMIN?): the course, "
                        "submissions and instructor folders are only guarded by file hashes")
    text = (f"cells ran as {'user ' + user[2] if user else 'the grader'}"
            + (f", in a mount namespace hiding {', '.join(map(str, hidden))}" if hidden else ""))
    return user, hidden, {"text": text, "problems": problems}


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _grade_one(where, data, plan, scratch, libdir, snapshot, timeout_s, memory_gb, user, hidden) -> dict:
    """Run one submission in the sandbox. Returns ``notebook`` (the executed notebook for
    nbgrader, or None when it gets no grade), ``exercise_status`` (grade id -> status for the
    exercises that are not simply graded), ``problems`` (report lines) and ``seconds``."""
    import time

    from .sandbox import run_cells
    from .submission import SubmissionError, guarded_check, read_submission, restore_graded_cells

    start = time.monotonic()
    out = {"notebook": None, "exercise_status": {}, "problems": [], "seconds": 0.0}
    try:
        submitted = read_submission(data, where.rsplit("/", 1)[-1])
    except SubmissionError as exc:
        out["problems"].append(f"not graded: {exc}")
        out["exercise_status"] = {ex.grade_id: f"not graded: {exc}" for ex in plan["exercises"]}
        out["seconds"] = time.monotonic() - start
        return out
    nb, notes, missing = restore_graded_cells(submitted, plan["notebook"], plan["released"])
    out["problems"].extend(notes)
    for gid in missing:
        out["exercise_status"][gid] = "not graded: the check cell is missing from the submission"
        out["problems"].append(f"exercise {gid}: not graded: its check and answer cells are missing "
                               "from the submission (deleted, or their metadata removed)")
    checks = {ex.grade_id for ex in plan["exercises"]}
    cells = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        gid = (cell.metadata.get("nbgrader") or {}).get("grade_id")
        source = cell.source
        if gid in checks:
            setup, names = plan["setups"][gid]
            source = guarded_check(source, setup, names)
        cells.append((index, source))
    (scratch / plan["name"]).write_bytes(data)     # the student's own notebook, nothing else
    run = run_cells(cells, scratch, libdir, timeout_s=timeout_s,
                    memory_bytes=int(memory_gb * 2**30) if memory_gb else None, user=user, hidden=hidden)
    changed = snapshot.changes()
    out["seconds"] = time.monotonic() - start
    if changed:
        snapshot.restore()
        shown = "; ".join(changed[:5]) + (f"; and {len(changed) - 5} more" if len(changed) > 5 else "")
        why = f"not graded: the submission changed files outside its folder ({shown}); they were put back"
        out["problems"].append(why)
        out["exercise_status"] = {gid: why for gid in checks}
        return out
    if run.failure:
        out["problems"].append(f"{run.failure}; the cells after it get no points")
    ran = {c.index: c for c in run.cells}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        cell.outputs = []
        cell.execution_count = None
        gid = (cell.metadata.get("nbgrader") or {}).get("grade_id")
        done = ran.get(index)
        if done is None:
            if gid in checks:
                why = run.failure or "the cell did not run"
                cell.outputs.append(nbformat_error("NotGraded", why, [why]))
                out["exercise_status"][gid] = f"not graded: {why}"
            continue
        cell.execution_count = index + 1
        if done.stdout:
            cell.outputs.append(_stream("stdout", done.stdout))
        if done.stderr:
            cell.outputs.append(_stream("stderr", done.stderr))
        if done.status != "ok":
            cell.outputs.append(nbformat_error(done.ename, done.evalue, done.traceback))
    out["notebook"] = nb
    return out


def _stream(name, text):
    import nbformat

    return nbformat.v4.new_output("stream", name=name, text=text)


def nbformat_error(ename, evalue, traceback_lines):
    import nbformat

    return nbformat.v4.new_output("error", ename=ename or "Error", evalue=evalue or "",
                                  traceback=list(traceback_lines or []))


def _score_rows(course: Path, plans, assignments, students, status, graded) -> list[dict]:
    from nbgrader.api import Gradebook, MissingEntry

    rows = []
    with nbgrader_environment(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in students:
            for assignment in assignments:
                for ex in plans[assignment]["exercises"]:
                    state = status.get((student, assignment, ex.grade_id))
                    score = 0.0
                    if state is None and (student, assignment) in graded:
                        try:
                            score = float(gb.find_grade(ex.grade_id, assignment, assignment, student).score)
                            state = "graded"
                        except MissingEntry:
                            state = "not graded: the check cell is missing from the submission"
                    rows.append(_row(student, assignment, ex, score, state or "not submitted"))
    return rows


def _row(student, assignment, ex, score, state) -> dict:
    return {"student": student, "notebook": assignment, "exercise": ex.id, "kind": ex.kind,
            "score": f"{score:g}", "max_score": f"{ex.points:g}", "status": state}


def _write_scores(report: GradeReport) -> None:
    report.out_dir.mkdir(parents=True, exist_ok=True)
    with report.scores_csv.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=SCORE_COLUMNS)
        writer.writeheader()
        writer.writerows(report.rows)
    exercises = list(dict.fromkeys(row["exercise"] for row in report.rows))
    by_student: dict[str, dict[str, str]] = {}
    for row in report.rows:
        by_student.setdefault(row["student"], {})[row["exercise"]] = row["score"]
    totals = report.totals()
    with report.by_student_csv.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", *exercises, "total", "max"])
        for student, scores in sorted(by_student.items()):
            got, most = totals[student]
            writer.writerow([student, *(scores.get(e, "") for e in exercises), f"{got:g}", f"{most:g}"])


def _copy_feedback(course: Path, feedback_dir: Path, graded) -> None:
    if feedback_dir.exists():
        shutil.rmtree(feedback_dir)
    for student, assignment in sorted(graded):
        page = course / "feedback" / student / assignment / f"{assignment}.html"
        if page.is_file():
            target = feedback_dir / student / page.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(page, target)
