"""The learner writes the C++ too (issue 15 §7): ``check_cpp(source, exercise_id, fn)``.

After a kernel exercise in Python (``check_kernel``), a C++ exercise asks for the Ascend C listing
of the same kernel. Its cell holds the C++ as a string (``my_scaled_add_cpp = r\"\"\"...\"\"\"``) with
a skeleton -- the includes, the tiling struct, the entry (``REGISTER_TILING_DEFAULT``,
``GET_TILING_DATA``, the ``TPipe`` created there and handed to ``Init``), the class outline -- and
the learner writes the bodies. :func:`check_cpp`:

1. **compiles** it against asc-devkit's real headers in device mode for each chip the exercise is
   written for (:func:`npu_lab.cpp.compile_listing`), when the headers are there
   (``ASC_DEVKIT_DIR``, else ``../shared/asc-devkit``). Errors come back as the learner's line, its
   text and a one-line message, never the compiler's output. Without the headers the result says
   how to get them and the next step still runs;
2. **checks the call order** against the learner's *own* Python kernel ``fn`` (default: the
   course's solution): a small timing-only run of ``fn`` is traced (``npu_lab.lang.context.
   record_calls``, :func:`npu_lab.kernels.listings.calls_of_run`), every simulated block, and
   must follow the C++ program entered at its ``__global__`` function (a loop matches any number
   of iterations, an ``if`` either branch; instructions, and the queue / sync calls in order, as
   ``tests/test_listings.py`` checks the course's own listings).

It never raises on a wrong or unfinished answer: the result's ``.correct`` is None (the skeleton is
not filled in yet), False (a compile error, or a call missing, extra or out of order) or True.

An exercise (:class:`CppExercise`) names its solution listing in ``npu_lab/course/cpp/`` (the
regions the learner writes between ``// ### BEGIN SOLUTION`` and ``// ### END SOLUTION`` lines),
the Python kernel exercise whose launcher traces ``fn``, and the small cases traced.
:func:`cpp_solution_cell` is the instructor cell, :func:`cpp_skeleton` the student cell (each
region replaced by nbgrader's stub).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .checks import CheckResult
from .kernel_check import CODE_STUB

__all__ = ["CppExercise", "CppCheckResult", "check_cpp", "cpp_exercises", "cpp_solution_cell", "cpp_skeleton",
           "register_cpp_exercise"]

CPP_DIR = Path(__file__).resolve().parent / "cpp"
_REGION_BEGIN = "BEGIN SOLUTION"      # nbgrader's delimiters match anywhere in a line
_REGION_END = "END SOLUTION"


@dataclass(frozen=True)
class CppExercise:
    """One C++ exercise: ``id`` (``"01.scaled_add_cpp"``), the ``kernel_exercise`` whose Python the
    C++ mirrors (its launcher runs ``fn``), the solution ``listing`` (a file in
    ``npu_lab/course/cpp``), its ``entry`` (``__global__`` function), the cell's variable
    ``cell_name``, the Python kernel's name in the notebook (``python_name``), the ``cases`` traced
    (small: every loop and branch of the listing taken), ``cores`` of the traced chip (1: one
    block loops over several tiles) and whether the queue / sync calls are compared in order too."""

    id: str
    title: str
    kernel_exercise: str
    listing: str
    entry: str
    cell_name: str
    python_name: str
    cases: tuple[dict, ...]
    place_after: str
    cores: int | None = 1
    sync: bool = True
    chips: tuple[str, ...] = field(default=())   # default: the listing's // chips: line

    @property
    def path(self) -> Path:
        return CPP_DIR / self.listing

    def chips_to_compile(self) -> tuple[str, ...]:
        if self.chips:
            return self.chips
        from ..cpp.compile_check import claimed_chips

        return claimed_chips(self.path.read_text(encoding="utf-8")) or ("ascend-910b2",)


_REGISTRY: dict[str, CppExercise] = {}


def register_cpp_exercise(ex: CppExercise) -> CppExercise:
    """Add a C++ exercise (called by the ``exNN`` modules at import)."""
    if not re.fullmatch(r"0\d\.[a-z0-9_]+", ex.id):
        raise ValueError(f"a C++ exercise id is 'NN.name' (lower case), got {ex.id!r}")
    if not ex.path.is_file():
        raise FileNotFoundError(f"C++ exercise {ex.id}: no solution listing {ex.path}")
    _REGISTRY[ex.id] = ex
    return ex


def cpp_exercises() -> dict[str, CppExercise]:
    """Every registered C++ exercise by id (imports the exercise modules)."""
    from .kernel_check import kernel_exercises

    kernel_exercises()
    from . import cpp_exercises as _defs  # noqa: F401  (registers them)

    return dict(sorted(_REGISTRY.items()))


def _exercise(exercise_id) -> CppExercise:
    exercises = cpp_exercises()
    if exercise_id not in exercises:
        raise ValueError(f"unknown C++ exercise {exercise_id!r}; the C++ exercises are: {', '.join(exercises)}")
    return exercises[exercise_id]


# ---- cells --------------------------------------------------------------------------------------
def cpp_solution_cell(exercise_id: str) -> str:
    """The instructor cell: ``# Exercise <id>: <title>`` and the solution listing as a raw string
    assigned to the exercise's ``cell_name`` (its regions marked for nbgrader)."""
    ex = _exercise(exercise_id)
    text = ex.path.read_text(encoding="utf-8")
    if '"""' in text:
        raise ValueError(f"{ex.path.name} holds a triple quote: it cannot go in a raw string cell")
    return f'# Exercise {ex.id}: {ex.title}\n{ex.cell_name} = r"""\n{text}"""\n'


def cpp_skeleton(exercise_id: str) -> str:
    """The student cell: each solution region (its marker lines included) replaced by nbgrader's
    stub, indented like the BEGIN line (what ``ClearSolutions`` does)."""
    out, inside = [], False
    for line in cpp_solution_cell(exercise_id).splitlines():
        if _REGION_BEGIN in line and not inside:
            out.append(line[:len(line) - len(line.lstrip())] + CODE_STUB)
            inside = True
        elif inside and _REGION_END in line:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out) + "\n"


# ---- the result ---------------------------------------------------------------------------------
class CppCheckResult(CheckResult):
    """A check message with ``.correct``, ``.diagnostics`` (compile errors per chip), ``.compiled``
    (True / False, None when the headers were not there) and ``.match`` (the call-order result)."""

    diagnostics: dict | None = None
    compiled: bool | None = None
    match = None


def _result(text, correct, **attrs) -> CppCheckResult:
    r = CppCheckResult(text, correct)
    for k, v in attrs.items():
        setattr(r, k, v)
    return r


def _source_text(source) -> str:
    """The C++ itself, or the file a ``%%writefile`` cell wrote."""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and source.endswith(".cpp")):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no C++ file at {path}: run the %%writefile cell first")
        return path.read_text(encoding="utf-8")
    return source


def _line_hint(text: str, line: int) -> str:
    lines = text.splitlines()
    code = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return f"line {line} of your C++" + (f": {code}" if code else "")


# ---- the check ----------------------------------------------------------------------------------
def check_cpp(source, exercise_id: str, fn=None) -> CppCheckResult:
    """Check the learner's C++ ``source`` (the text, or a ``.cpp`` path) for exercise
    ``exercise_id`` against the headers (when present) and against ``fn``, the learner's Python
    kernel of the same exercise (default: the course's solution). Returns a
    :class:`CppCheckResult` (a ``str``; print it); never raises on a wrong answer."""
    ex = _exercise(exercise_id)
    if source is None:
        return _result(f"No answer yet: write the C++ in {ex.cell_name} and pass it here.", None)
    if not isinstance(source, (str, Path)):
        return _result(f"Not yet: pass the C++ text (the string {ex.cell_name}) or the path of the file a "
                       f"%%writefile cell wrote, not a {type(source).__name__}.", False)
    try:
        text = _source_text(source)
    except (OSError, UnicodeDecodeError) as e:
        return _result(f"Not yet: {e}", False)
    if CODE_STUB in text:
        return _result(f"No answer yet: {ex.cell_name} still holds '{CODE_STUB}': write the C++ there "
                       "(the comments above each gap say which calls go in).", None)
    if fn is not None and not callable(fn):
        return _result(f"Not yet: pass your Python kernel itself ({ex.python_name}), not a {type(fn).__name__}.", False)
    parts = []
    # 1. the compile check
    compiled, diagnostics = _compile(text, ex, parts)
    if compiled is False:
        return _result("\n".join(parts), False, diagnostics=diagnostics, compiled=False)
    # 2. the call order against the learner's own traced Python
    match_text, ok, match = _order(text, ex, fn)
    parts.append(match_text)
    return _result("\n".join(parts), bool(ok), diagnostics=diagnostics, compiled=compiled, match=match)


def _compile(text: str, ex: CppExercise, parts: list[str]):
    from ..cpp import compile_check as cc

    try:
        chips = ex.chips_to_compile()
        dtypes = cc.DTYPES if cc.uses_dtype(text) else ("float",)      # DTYPE_<INPUT>: both builds
        per_chip = {(chip if dt == "float" else f"{chip}, {dt} input"): cc.compile_listing(text, chip, name=ex.cell_name,
                                                                                             dtype=dt)
                    for chip in chips for dt in dtypes}
    except cc.HeadersMissing as e:
        parts.append(f"Not compiled: {e}. The call order is still checked.")
        return None, None
    except RuntimeError as e:          # no libclang and no g++
        parts.append(f"Not compiled: {e}. The call order is still checked.")
        return None, None
    bad = {chip: d for chip, d in per_chip.items() if d}
    if not bad:
        parts.append(f"Compiles against asc-devkit's headers for {', '.join(per_chip)} (0 errors).")
        return True, per_chip
    lines = ["Not yet: your C++ does not compile against asc-devkit's headers:"]
    for chip, diags in bad.items():
        for d in diags[:6]:
            lines.append(f"  [{chip}] {_line_hint(text, d.line)}\n      {d.message}")
        if len(diags) > 6:
            lines.append(f"  [{chip}] ... and {len(diags) - 6} more")
    lines.append("What to do: fix the first error (later ones often follow from it); the message names the call "
                 "and what it was given.")
    parts.extend(lines)
    return False, per_chip


def _order(text: str, ex: CppExercise, fn):
    from ..kernels.listings import ListingError, calls_of_run, compare, cpp_entries, cpp_program
    from ..presets import get_preset
    from .kernel_check import _exercise as kernel_exercise

    kex = kernel_exercise(ex.kernel_exercise)
    fn = kex.solution if fn is None else fn
    try:
        entries = cpp_entries(text)
        if ex.entry not in entries:
            return (f"Not yet: no __global__ entry {ex.entry}(...) in your C++ (entries: {', '.join(entries) or 'none'}); "
                    "keep the skeleton's entry.", False, None)
        program = cpp_program(text, ex.entry)
    except ListingError as e:
        return f"Not yet: the call order could not be read from your C++: {e}", False, None
    hw = get_preset(kex.hw)
    if ex.cores is not None:
        hw = hw.replace(vector_cores=ex.cores, provenance_note="one core: one block loops over every tile")
    total = 0
    for case in ex.cases:
        try:
            launches = calls_of_run(lambda: kex.launch(fn, case, hw, True)[1], sync=ex.sync, every_block=True)
        except Exception as e:       # the learner's Python: say so, do not raise
            return (f"Not yet: your Python kernel {ex.python_name} does not run on case {case.get('label', case)} "
                    f"({type(e).__name__}: {str(e)[:300]}); finish exercise {ex.kernel_exercise} first "
                    f"(check_kernel says what is wrong).", False, None)
        for calls in launches:
            m = compare(program, calls, sync=ex.sync)
            if not m.ok:
                return (f"Not yet: your C++ does not make the calls your Python kernel makes (case "
                        f"{case.get('label', case)}): {_friendly(m.message)}.\nWhat to do: write the C++ calls "
                        f"in the order {ex.python_name} makes them (queue calls and flags included).",
                        False, m)
            total += len(calls)
    what = "calls (queue and sync calls included)" if ex.sync else "instructions"
    return (f"Right: its {what} follow your Python kernel {ex.python_name} call for call "
            f"({len(ex.cases)} traced case(s), {total} calls).", True, None)


def _friendly(message: str) -> str:
    return (message.replace("of the trace", "your Python makes")
            .replace("but the listing expects", "but your C++ has")
            .replace("the trace ends", "your Python ends")
            .replace("the listing goes on with", "your C++ goes on with"))
