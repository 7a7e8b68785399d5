"""``show_solution("05.2")``: a self-learner looks at a solution on purpose.

The student notebooks hold no solutions (``make release`` replaces every solution region with
``pass  # YOUR CODE HERE``); the instructor notebooks in ``instructor/`` (the repository's source of
truth) do. This reads the exercise's solution cell from there and returns it as a
:class:`Solution` — the cell as the instructor wrote it, without the ``### BEGIN/END SOLUTION``
marker lines, ready to paste over the student's cell. Nothing prints a solution unless this is
called with the exercise's id.
"""

from __future__ import annotations

from pathlib import Path

from .markers import BEGIN_SOLUTION, END_SOLUTION, find_exercises, notebook_paths, source_of
from .release import INSTRUCTOR_DIR


class Solution(str):
    """An exercise's solution cell; shows as code in Jupyter and as plain text when printed."""

    exercise: str
    notebook: str

    def __new__(cls, text: str, exercise: str, notebook: str):
        obj = super().__new__(cls, text)
        obj.exercise, obj.notebook = exercise, notebook
        return obj

    def __repr__(self) -> str:
        return f"# Solution of exercise {self.exercise} ({self.notebook})\n{self}"

    def _repr_markdown_(self) -> str:
        return f"**Solution of exercise {self.exercise}** ({self.notebook}):\n\n```python\n{self}\n```"


def solution_cells(instructor_dir: Path = INSTRUCTOR_DIR) -> dict[str, tuple[str, str]]:
    """``{exercise id: (notebook file name, solution cell source)}`` for every exercise."""
    import nbformat

    found = {}
    for path in notebook_paths(instructor_dir):
        nb = nbformat.read(path, as_version=4)
        for ex in find_exercises(nb, path.name):
            found[ex.id] = (path.name, source_of(nb.cells[ex.solution_cell]))
    return found


def without_markers(source: str) -> str:
    """The cell with its ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines removed."""
    markers = (BEGIN_SOLUTION.lstrip("# "), END_SOLUTION.lstrip("# "))
    return "\n".join(line for line in source.split("\n") if not any(m in line for m in markers))


def show_solution(exercise_id: str, *, instructor_dir: Path | str = INSTRUCTOR_DIR) -> Solution:
    """The solution of exercise ``exercise_id`` (``"05.2"``, ``"05.prefetch"``): its whole
    solution cell from the instructor notebook, solution filled in. Raises ValueError for an
    unknown id (listing the known ones) and FileNotFoundError when the instructor notebooks are
    not there (they come with the repository, not with an installed package)."""
    if not isinstance(exercise_id, str) or not exercise_id.strip():
        raise ValueError(f"give the exercise's id as a string such as '05.2', got {exercise_id!r}")
    folder = Path(instructor_dir)
    if not notebook_paths(folder):
        raise FileNotFoundError(f"no instructor notebooks in {folder}: solutions live in the repository's "
                                "instructor/NN_*.ipynb (clone the repository to see them)")
    cells = solution_cells(folder)
    wanted = exercise_id.strip()
    if wanted not in cells:
        known = ", ".join(sorted(cells)) or "none"
        raise ValueError(f"no exercise {wanted!r} in {folder}; the known exercises are: {known}")
    notebook, source = cells[wanted]
    return Solution(without_markers(source), wanted, notebook)
