"""Grade a folder of submitted notebooks with nbgrader's ``autograde`` (``make grade``,
``python -m npu_lab grade``).

Submissions layout: ``SUBMISSIONS/<student>/<NN_name>.ipynb`` — one folder per student holding the
student notebooks they worked in (same file names as ``notebooks/``; a student may hand in any
subset). :func:`grade_submissions` builds an nbgrader course from the instructor notebooks in
``OUT/course`` (``generate_assignment`` fills its gradebook with every graded cell, hidden tests
included), copies each submission to ``submitted/<student>/<NN_name>/``, runs ``autograde`` (the
graded cells are restored from the gradebook, hidden tests and all, then the notebook is
executed) and ``generate_feedback``, and writes into ``OUT``:

* ``scores.csv`` — one row per student and exercise: student, notebook, exercise, kind, score,
  max_score, status (``graded``, ``not submitted`` or ``not graded: <why>``);
* ``scores_by_student.csv`` — one row per student, one column per exercise, then total and max;
* ``feedback/<student>/<NN_name>.html`` — nbgrader's feedback page for each graded notebook;
* ``course/`` — the nbgrader course itself (gradebook.db, autograded notebooks): run
  ``nbgrader formgrader`` there to review or override a grade by hand.
"""

from __future__ import annotations

import csv
import shutil
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


def grade_submissions(submissions_dir, out_dir, instructor_dir=INSTRUCTOR_DIR) -> GradeReport:
    """Autograde every submission under ``submissions_dir`` against the instructor notebooks in
    ``instructor_dir``; write the score tables and feedback into ``out_dir`` (see the module doc).
    ``out_dir/course`` is rebuilt from scratch on every run."""
    import nbformat

    sources = {p.stem: p for p in notebook_paths(Path(instructor_dir))}
    if not sources:
        raise GradingError(f"no instructor notebooks in {instructor_dir} (NN_*.ipynb): run "
                           "`python scripts/make_instructor.py` once, or pass the folder that holds them")
    submissions, ignored = find_submissions(Path(submissions_dir), set(sources))
    out = Path(out_dir)
    if out.resolve() == Path(submissions_dir).resolve():
        raise GradingError("the output folder must not be the submissions folder")
    course = out / "course"
    if course.exists():
        shutil.rmtree(course)
    assignments = sorted({stem for per_student in submissions.values() for stem in per_student})
    build_course([sources[a] for a in assignments], course)

    status: dict[tuple[str, str], str] = {}
    for student, notebooks in submissions.items():
        for assignment, path in notebooks.items():
            target = course / "submitted" / student / assignment / f"{assignment}.ipynb"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            try:
                nbformat.read(target, as_version=4)
                run_nbgrader("Autograde", course, assignment_id=assignment, student_id=student)
                run_nbgrader("GenerateFeedback", course, assignment_id=assignment, student_id=student)
                status[student, assignment] = "graded"
            except (ReleaseError, ValueError, OSError) as exc:   # nbformat's read errors are ValueErrors
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                status[student, assignment] = f"not graded: {first}"

    rows = _score_rows(course, sources, assignments, sorted(submissions), status)
    report = GradeReport(out, out / "scores.csv", out / "scores_by_student.csv", out / "feedback", course,
                         rows, ignored)
    _write_scores(report)
    _copy_feedback(course, report.feedback_dir, status)
    return report


def _score_rows(course: Path, sources, assignments, students, status) -> list[dict]:
    import nbformat
    from nbgrader.api import Gradebook, MissingEntry

    rows = []
    with nbgrader_environment(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in students:
            for assignment in assignments:
                nb = nbformat.read(sources[assignment], as_version=4)
                state = status.get((student, assignment), "not submitted")
                for ex in find_exercises(nb, sources[assignment].name):
                    score = 0.0
                    if state == "graded":
                        try:
                            score = float(gb.find_grade(ex.grade_id, assignment, assignment, student).score)
                        except MissingEntry:
                            state_row = "not graded: the check cell is missing from the submission"
                            rows.append(_row(student, assignment, ex, 0.0, state_row))
                            continue
                    rows.append(_row(student, assignment, ex, score, state))
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


def _copy_feedback(course: Path, feedback_dir: Path, status) -> None:
    if feedback_dir.exists():
        shutil.rmtree(feedback_dir)
    for (student, assignment), state in status.items():
        page = course / "feedback" / student / assignment / f"{assignment}.html"
        if state == "graded" and page.is_file():
            target = feedback_dir / student / page.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(page, target)
