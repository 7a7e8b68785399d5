"""The course's exercise markers, read from notebook cells, and the nbgrader metadata they imply.

Authors write only markers in the instructor notebooks (``instructor/NN_*.ipynb``); this module
finds the exercises they delimit and writes the nbgrader cell metadata (docs/instructors.md):

* a **solution cell** is a code cell with a ``### BEGIN SOLUTION`` … ``### END SOLUTION`` region.
  A prediction's solution cell starts with ``# Exercise NN.M: ...`` and holds ``answer = None``
  before the region; a kernel's solution cell defines ``def my_kernel(ctx, ...):`` with the region
  inside the body (its ``# Exercise NN.name: ...`` first line is optional: the id can come from
  the check call);
* the next code cell is its **check cell**: it calls the check and prints it, then
  ``### BEGIN HIDDEN TESTS`` / ``assert result.correct`` / ``### END HIDDEN TESTS``. A check cell
  calling ``check_kernel(fn, "NN.name")`` (or ``check_cpp(source, "NN.name", fn)``, the C++ of a
  kernel) makes the exercise a kernel exercise.

Points: :data:`PREDICTION_POINTS` per prediction, :data:`KERNEL_POINTS` per kernel exercise.
The nbgrader ids come from the exercise id: exercise ``05.2`` is graded by cell ``ex05_2`` and
answered in cell ``ex05_2_solution``. Nothing here needs nbgrader installed (plain nbformat dicts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: nbgrader's default delimiters (ClearSolutions / ClearHiddenTests match them anywhere in a line).
BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN_TESTS = "### BEGIN HIDDEN TESTS"
END_HIDDEN_TESTS = "### END HIDDEN TESTS"

PREDICTION_POINTS = 1
KERNEL_POINTS = 3
#: nbgrader metadata schema the cells are written in (nbgrader 0.9).
SCHEMA_VERSION = 3

#: ``NN.M`` / ``NN.name``; an appendix notebook ``NNx_*`` numbers its exercises ``NNx.M`` (07b.1)
EXERCISE_ID = r"\d\d[a-z]?\.[A-Za-z0-9_-]+"
_TITLE = re.compile(rf"^#\s*Exercise\s+({EXERCISE_ID})\s*:")
#: ``check_kernel(fn, "NN.name")`` and ``check_cpp(source, "NN.name", fn)``: written code, KERNEL_POINTS
_CHECK_KERNEL = re.compile(rf"""check_(?:kernel|cpp)\(\s*[^,()]+,\s*["']({EXERCISE_ID})["']""")
#: grade ids this module writes (and so may remove again when their markers are gone)
_OUR_GRADE_ID = re.compile(r"^ex\d\d[a-z]?_")
#: course notebook file names: ``NN_name.ipynb`` and appendices ``NNx_name.ipynb`` (07b_...)
NOTEBOOK_NAME = re.compile(r"^\d\d[a-z]?_.+\.ipynb$")


class MarkerError(ValueError):
    """Markers that do not follow the convention; the message names the notebook and cell."""


@dataclass(frozen=True)
class Exercise:
    """One graded exercise of a notebook: its id (``"05.2"``), kind, points and cell indices."""

    id: str
    kind: str            # "prediction" or "kernel"
    points: int
    solution_cell: int   # index in nb["cells"]
    check_cell: int

    @property
    def grade_id(self) -> str:
        """nbgrader id of the graded check cell: ``05.2`` -> ``ex05_2``."""
        return grade_id_for(self.id)

    @property
    def solution_id(self) -> str:
        """nbgrader id of the solution cell: ``05.2`` -> ``ex05_2_solution``."""
        return grade_id_for(self.id) + "_solution"


def grade_id_for(exercise_id: str) -> str:
    """The nbgrader grade id of exercise ``NN.name`` (``"05.prefetch"`` -> ``"ex05_prefetch"``)."""
    if not isinstance(exercise_id, str) or not re.fullmatch(EXERCISE_ID, exercise_id):
        raise ValueError(f"an exercise id is 'NN.M' or 'NN.name' (two digits, an optional appendix letter as "
                         f"in '07b.1', a dot, letters/digits/_/-), "
                         f"got {exercise_id!r}")
    number, name = exercise_id.split(".", 1)
    return f"ex{number}_{name}"


def source_of(cell) -> str:
    """A cell's source as one string (notebook JSON may store it as a list of lines)."""
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def has_region(text: str, begin: str, end: str, where: str) -> bool:
    """True if ``text`` holds one or more well-formed begin/end regions; MarkerError if unbalanced."""
    depth, found = 0, False
    for line in text.split("\n"):
        if begin.lstrip("# ") in line:
            if depth:
                raise MarkerError(f"{where}: nested '{begin}' (close the first region with '{end}')")
            depth, found = 1, True
        elif end.lstrip("# ") in line:
            if not depth:
                raise MarkerError(f"{where}: '{end}' without a '{begin}' above it")
            depth = 0
    if depth:
        raise MarkerError(f"{where}: '{begin}' is never closed: add '{end}' after the solution")
    return found


def title_id(text: str) -> str | None:
    """The exercise id of a ``# Exercise NN.M: ...`` first line (NBVAL markers and blanks skipped)."""
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped or stripped.lstrip("# ").startswith("NBVAL_"):
            continue
        match = _TITLE.match(stripped)
        return match.group(1) if match else None
    return None


def find_exercises(nb, name: str = "notebook") -> list[Exercise]:
    """The exercises of notebook ``nb`` (a dict or NotebookNode), in order. ``name`` is used in
    errors. Raises :class:`MarkerError` for markers that break the convention."""
    cells = nb.get("cells") if hasattr(nb, "get") else None
    if not isinstance(cells, list):
        raise TypeError(f"expected a notebook (a dict with a 'cells' list), got {type(nb).__name__}")
    exercises: list[Exercise] = []
    pending: tuple[int, str | None] | None = None     # (solution cell index, its title id)
    for index, cell in enumerate(cells):
        where = f"{name} cell {index}"
        text = source_of(cell)
        is_solution = has_region(text, BEGIN_SOLUTION, END_SOLUTION, where)
        is_check = has_region(text, BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS, where)
        if cell.get("cell_type") != "code":
            if is_solution or is_check:
                raise MarkerError(f"{where}: solution and hidden-test regions belong in code cells, "
                                  f"not {cell.get('cell_type')} cells")
            continue
        if is_solution and is_check:
            raise MarkerError(f"{where}: one cell holds both a solution and hidden tests; put the "
                              "check and its hidden tests in the next code cell")
        if pending is not None and not is_check:
            raise MarkerError(f"{name} cell {pending[0]}: a solution cell must be followed by its check "
                              f"cell (the next code cell, cell {index}, has no '{BEGIN_HIDDEN_TESTS}')")
        if is_solution:
            pending = (index, title_id(text))
        elif is_check:
            if pending is None:
                raise MarkerError(f"{where}: hidden tests without a solution cell before them (the "
                                  f"previous code cell needs a '{BEGIN_SOLUTION}' region)")
            exercises.append(_exercise(pending, index, text, name))
            pending = None
    if pending is not None:
        raise MarkerError(f"{name} cell {pending[0]}: a solution cell must be followed by a check cell "
                          f"with '{BEGIN_HIDDEN_TESTS}', but the notebook ends")
    seen: dict[str, int] = {}
    for ex in exercises:
        if ex.id in seen:
            raise MarkerError(f"{name}: exercise {ex.id} appears twice (cells {seen[ex.id]} and "
                              f"{ex.solution_cell}); give each exercise its own id")
        seen[ex.id] = ex.solution_cell
    return exercises


def _exercise(pending, check_index: int, check_text: str, name: str) -> Exercise:
    solution_index, titled = pending
    kernel = _CHECK_KERNEL.search(check_text)
    called = kernel.group(1) if kernel else None
    if titled and called and titled != called:
        raise MarkerError(f"{name} cells {solution_index}-{check_index}: the title says exercise {titled} "
                          f"but check_kernel is called with {called!r}; make them agree")
    exercise_id = titled or called
    if exercise_id is None:
        raise MarkerError(f"{name} cell {solution_index}: no exercise id: start the cell with "
                          "'# Exercise NN.M: ...' (or call check_kernel(fn, \"NN.name\") in the check cell)")
    if kernel or "check_kernel(" in check_text or "check_cpp(" in check_text:
        return Exercise(exercise_id, "kernel", KERNEL_POINTS, solution_index, check_index)
    return Exercise(exercise_id, "prediction", PREDICTION_POINTS, solution_index, check_index)


def nbgrader_metadata(exercise: Exercise, role: str) -> dict:
    """The ``metadata["nbgrader"]`` dict of an exercise's ``"solution"`` or ``"check"`` cell."""
    if role == "solution":
        return {"grade": False, "grade_id": exercise.solution_id, "locked": False,
                "schema_version": SCHEMA_VERSION, "solution": True, "task": False}
    if role == "check":
        return {"grade": True, "grade_id": exercise.grade_id, "locked": True, "points": exercise.points,
                "schema_version": SCHEMA_VERSION, "solution": False, "task": False}
    raise ValueError(f"role must be 'solution' or 'check', got {role!r}")


def apply_metadata(nb, name: str = "notebook") -> list[Exercise]:
    """Write the nbgrader metadata of every exercise of ``nb`` in place and return the exercises.

    Idempotent. Metadata this module wrote earlier (grade ids ``exNN_...``) on cells that no longer
    carry markers is removed; other nbgrader metadata (set by hand in the nbgrader toolbar) stays.
    """
    exercises = find_exercises(nb, name)
    wanted = {}
    for ex in exercises:
        wanted[ex.solution_cell] = nbgrader_metadata(ex, "solution")
        wanted[ex.check_cell] = nbgrader_metadata(ex, "check")
    for index, cell in enumerate(nb["cells"]):
        meta = cell.setdefault("metadata", {})
        if index in wanted:
            meta["nbgrader"] = wanted[index]
        elif _OUR_GRADE_ID.match(str(meta.get("nbgrader", {}).get("grade_id", ""))):
            del meta["nbgrader"]
    return exercises


def strip_outputs(nb) -> None:
    """Clear outputs and execution counts in place (instructor notebooks are kept without them)."""
    for cell in nb["cells"]:
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    nb.get("metadata", {}).pop("widgets", None)


def notebook_paths(folder: Path) -> list[Path]:
    """The course notebooks ``NN_*.ipynb`` and appendices ``NNx_*.ipynb`` of ``folder``, sorted."""
    return sorted(p for p in Path(folder).glob("[0-9][0-9]*.ipynb") if p.is_file() and NOTEBOOK_NAME.match(p.name))
