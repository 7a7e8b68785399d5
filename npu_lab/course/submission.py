"""One handed-in notebook, made ready to grade (:mod:`.grading`): read from its bytes, graded cells
and their metadata put back from the instructor's source, check cells wrapped so that they use the
library's checks, not the student's.

* :func:`read_submission` — the notebook, or a :class:`SubmissionError` saying why it cannot be
  graded (empty file, not JSON, not a notebook, no cells);
* :func:`restore_graded_cells` — every cell the instructor's source marks for nbgrader (matched by
  ``grade_id``) gets the instructor's metadata (points included); locked cells (the check cells,
  hidden tests and all) get the instructor's source. nbgrader metadata on any other cell (an
  invented grade cell, a duplicated id) is removed. A check cell whose answer cell is there but
  which was itself deleted is put back after it; an exercise with neither is reported missing;
* :func:`guarded_check` — the source that runs for a check cell: it imports the check afresh —
  the ``npu_lab.course`` modules are loaded again from their files for the length of the cell
  (so ``m.check_x = lambda *a: True`` on the module a student imported does not reach it), and
  the check's name is bound from the instructor's own setup lines (imports and ``def``s of the
  setup cells, never the submission's), so a redefinition in the student's namespace is
  overwritten right before the assert.
"""

from __future__ import annotations

import ast
import copy
import json

from .markers import find_exercises, source_of


class SubmissionError(ValueError):
    """A submission that cannot be graded; the message says why, for the report."""


def read_submission(data: bytes, name: str):
    """The notebook (nbformat v4) in ``data``, or :class:`SubmissionError`."""
    import nbformat

    if not data.strip():
        raise SubmissionError(f"{name} is empty (a file with nothing in it)")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SubmissionError(f"{name} is not a notebook (not JSON: {str(exc).splitlines()[0][:120]})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        raise SubmissionError(f"{name} is not a notebook (JSON without a 'cells' list)")
    try:
        nb = nbformat.reads(json.dumps(raw), as_version=4)
    except Exception as exc:                  # nbformat's own errors are of several kinds
        raise SubmissionError(f"{name} is not a notebook nbformat can read ({str(exc).splitlines()[0][:120]})") from None
    if not nb.cells:
        raise SubmissionError(f"{name} has no cells (an empty notebook)")
    for cell in nb.cells:
        if not isinstance(cell.get("source", ""), (str, list)) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise SubmissionError(f"{name} is not a notebook nbformat can read (a cell without a type or source)")
    return nb


def _grading_meta(cell):
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else None


def restore_graded_cells(submitted, instructor, released=None) -> tuple:
    """``(notebook to run, notes, missing grade ids)``: a copy of ``submitted`` whose graded cells
    are restored from ``instructor`` (a notebook with nbgrader metadata, e.g. the course's
    ``source/``); ``notes`` says what was put back, one line each (a locked cell counts as changed
    when it differs from its ``released`` version, the student notebook as handed out)."""
    import nbformat

    nb = copy.deepcopy(submitted)
    wanted = {}
    order = []
    for cell in instructor.cells:
        meta = _grading_meta(cell)
        if meta and meta.get("grade_id"):
            wanted[meta["grade_id"]] = cell
            order.append(meta["grade_id"])
    handed_out = {}
    for cell in (released.cells if released is not None else []):
        meta = _grading_meta(cell)
        if meta and meta.get("grade_id"):
            handed_out[meta["grade_id"]] = source_of(cell)
    notes, seen, cells = [], set(), []
    for index, cell in enumerate(nb.cells):
        meta = _grading_meta(cell)
        gid = meta.get("grade_id") if meta else None
        if meta is not None and (gid not in wanted or gid in seen or cell.cell_type != wanted[gid].cell_type):
            del cell.metadata["nbgrader"]
            why = "is a duplicate" if gid in seen else "is not a graded cell of this notebook"
            notes.append(f"cell {index}: its grading metadata (grade id {gid!r}) {why}: removed")
            gid = None
        if gid is not None:
            seen.add(gid)
            source = wanted[gid]
            smeta = source.metadata["nbgrader"]
            if {k: meta.get(k) for k in smeta} != dict(smeta):
                notes.append(f"cell {index} ({gid}): grading metadata restored from the instructor's source")
            cell.metadata["nbgrader"] = copy.deepcopy(smeta)
            if smeta.get("locked") or (smeta.get("grade") and not smeta.get("solution")):
                if source_of(cell) != handed_out.get(gid, source_of(source)):
                    notes.append(f"cell {index} ({gid}): changed by the student; restored from the instructor's source")
                cell.source = source_of(source)
        cells.append(cell)
    nb.cells = cells
    missing = []
    for gid in order:
        source = wanted[gid]
        smeta = source.metadata["nbgrader"]
        if gid in seen or not smeta.get("grade"):
            continue
        # a deleted check cell goes back after its answer cell, when that is there
        answer = order[order.index(gid) - 1] if order.index(gid) else None
        at = next((i for i, c in enumerate(nb.cells)
                   if answer and (_grading_meta(c) or {}).get("grade_id") == answer), None)
        if at is None:
            missing.append(gid)
            continue
        restored = nbformat.v4.new_code_cell(source_of(source)) if source.cell_type == "code" \
            else nbformat.v4.new_markdown_cell(source_of(source))
        restored.metadata["nbgrader"] = copy.deepcopy(smeta)
        nb.cells.insert(at + 1, restored)
        seen.add(gid)
        notes.append(f"check cell {gid} was missing: put back after its answer cell")
    return nb, notes, missing


def instructor_setup(instructor, before: int) -> tuple[str, set]:
    """``(source, names)``: the import statements and top-level ``def``/``class`` statements of
    the instructor's non-answer code cells above cell ``before``, and the names they bind."""
    parts, names = [], set()
    for cell in instructor.cells[:before]:
        meta = _grading_meta(cell) or {}
        if cell.cell_type != "code" or meta.get("solution") or meta.get("grade"):
            continue
        text = source_of(cell)
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                parts.append(ast.get_source_segment(text, node))
                names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                parts.append(ast.get_source_segment(text, node, padded=True))
                names.add(node.name)
    return "\n".join(p for p in parts if p), names


def called_names(source: str) -> set:
    """Names called as functions at any depth of ``source`` (``check_x(answer)`` -> check_x)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


#: A guarded check cell (see the module doc). {setup!r} is the instructor's setup source,
#: {bind} the assignments of the check names, {body} the check cell, indented.
_GUARD = '''\
import sys as _npu_lab_sys
_npu_lab_saved = {{_k: _npu_lab_sys.modules.pop(_k) for _k in list(_npu_lab_sys.modules)
                  if _k == "npu_lab.course" or _k.startswith("npu_lab.course.")}}
try:
    _npu_lab_ns = {{"__name__": "__npu_lab_check__"}}
    exec(compile({setup!r}, "<instructor setup>", "exec"), _npu_lab_ns)
{bind}
{body}
finally:
    for _k in [_k for _k in _npu_lab_sys.modules if _k == "npu_lab.course" or _k.startswith("npu_lab.course.")]:
        del _npu_lab_sys.modules[_k]
    _npu_lab_sys.modules.update(_npu_lab_saved)
'''


def guarded_check(check_source: str, setup: str, setup_names: set) -> str:
    """The source run for a check cell: ``check_source`` after a fresh import of the checks it
    calls (module doc)."""
    names = sorted(called_names(check_source) & setup_names)
    bind = "\n".join(f"    {n} = _npu_lab_ns[{n!r}]" for n in names) or "    pass"
    body = "\n".join("    " + line if line.strip() else "" for line in check_source.splitlines()) or "    pass"
    return _GUARD.format(setup=setup, bind=bind, body=body)


def exercises_of(instructor, name: str):
    """The exercises of the instructor notebook (markers; see :mod:`.markers`)."""
    return find_exercises(instructor, name)
