"""Kernel-writing exercises: ``check_kernel(fn, exercise_id)`` runs a learner's kernel on the
simulator against the exercise's numpy reference and says what is wrong, where, and how fast.

An exercise (:class:`KernelExercise`) lives in its notebook's module (``ex01`` … ``ex07``, section
``# ---- kernel exercises``) and has:

* a **solution**: a real kernel in the library, written like Ascend C, whose source holds the
  region a learner fills between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` lines (a tag,
  ``### BEGIN SOLUTION [05.sync]``, limits a region to one exercise when several share a
  kernel). :func:`kernel_solution_cell` is that source as an instructor cell (nbgrader's format);
  :func:`kernel_skeleton` is the student cell: each region replaced by ``pass  # YOUR CODE HERE``
  (what nbgrader's ``ClearSolutions`` with that ``code_stub`` gives);
* a **reference** (numpy, independent of the kernel), a **shape list** (fixed cases with tails,
  K = 1, E = K, float16 where the exercise has dtypes, plus seeded random ones), a **launcher**
  (host code: tiling struct and ``npu_lab.launch``), a **locator** (which block and tile wrote an
  output element) and a **target**: a latency computed from the library's own kernels at a fixed
  shape, never typed in.

:func:`check_kernel` never raises on a wrong or unfinished answer: it returns a
:class:`KernelCheckResult` (a ``str``; print it) with ``.correct`` — None when the kernel wrote
nothing yet, False when a number is wrong, a simulator rule fired, or (for a **speed** exercise)
the modeled latency misses the target, True otherwise — and ``.fast`` (the latency meets the
target; None when the numbers were not right). ``.timeline`` holds the timed run and
``.figure()`` draws it (:func:`npu_lab.course.viz.timeline_figure`); in a notebook the figure is
shown when ``show=True``.
"""

from __future__ import annotations

import inspect
import linecache
import re
import sys
import textwrap
import traceback
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..lang import AscendCRuleError, CapabilityError, QueueError, RaceError, UbOverflowError, UnmatchedFlagError
from ..presets import get_preset
from ..sim import SimulationError
from .checks import CheckResult

__all__ = ["KernelExercise", "KernelCheckResult", "check_kernel", "kernel_skeleton", "kernel_solution_cell",
           "kernel_exercises", "register_exercise", "load_cell", "CODE_STUB", "RANDOM_SEED"]

#: What replaces a solution region in the student version (nbgrader ``ClearSolutions.code_stub``).
CODE_STUB = "pass  # YOUR CODE HERE"
#: Seed of the random shapes every check adds to its fixed list (the same shapes every run).
RANDOM_SEED = 20240531
_BEGIN = re.compile(r"^(\s*)### BEGIN SOLUTION(?:\s*\[([^\]]+)\])?\s*$")
_END = re.compile(r"^\s*### END SOLUTION(?:\s*\[([^\]]+)\])?\s*$")


@dataclass(frozen=True)
class KernelExercise:
    """One kernel-writing exercise (see the module docstring).

    ``cases(rng) -> list[dict]``: the shapes (fixed first, then random from ``rng``); each case a
    dict the launcher and reference understand, with a ``"label"``. ``launch(fn, case, hw,
    timing_only) -> (outputs dict name -> array | None, Timeline)``. ``reference(case) -> dict``
    of expected outputs (same names). ``locate(case, name, flat_index) -> str`` ("block 3, tile
    1"). ``target(hw) -> (target_us, rule text)``; ``target_case``: the case timed against it.
    ``kind="host"`` exercises check a host function instead (``host_check(fn, hw)``)."""

    id: str
    notebook: str
    title: str
    teaches: str
    solution: Callable
    cell_name: str
    imports: str
    place_after: str
    cases: Callable | None = None
    launch: Callable | None = None
    reference: Callable | None = None
    locate: Callable | None = None
    target: Callable | None = None
    target_case: dict | None = None
    speed: bool = False
    slow_hint: str = "look at the timeline: which pipe is busy and which waits?"
    tolerance: tuple = (1e-5, 1e-6)          # rtol, atol for float outputs; ints must match
    kind: str = "kernel"
    host_check: Callable | None = None
    hw: str = "ascend-910b2"
    timed_full: bool = False                # time the target case with a full (numerical) run
    #: later exercises sharing this solution whose regions this cell leaves out (code and "YOUR CODE"
    #: comment), so an earlier cell does not show a later exercise's answer as given code
    omits: tuple = ()
    extra: Callable | None = None           # extra(latency_us, hw) -> text appended when correct
    leaderboard_versions: tuple = ()        # the course's versions npu_lab.course.leaderboard ranks it against
    #: diagnose(case, got, want) -> text: which slip the wrong outputs match (computed from them),
    #: said instead of the generic "compare your offsets" advice of a wrong-numbers result
    diagnose: Callable | None = None


_REGISTRY: dict[str, KernelExercise] = {}


def register_exercise(ex: KernelExercise) -> KernelExercise:
    """Add an exercise (called by the ``exNN`` modules at import)."""
    if not re.fullmatch(r"(0[1-9]|1[0-9]|08b)\.[a-z0-9_]+", ex.id):
        raise ValueError(f"exercise id must be 'NN.name' (notebook 01..19, or the appendix 08b; lower-case "
                         f"name); got {ex.id!r}")
    if f"ex{ex.id.split('.')[0]}" != ex.notebook:
        raise ValueError(f"exercise {ex.id} belongs to module ex{ex.id.split('.')[0]}, not {ex.notebook}")
    _REGISTRY[ex.id] = ex
    return ex


def _exercise_modules() -> list[str]:
    """The ``exNN`` modules (and ``exNN_name``) of this package that register kernel exercises, in
    notebook order: found on disk, so a notebook's module is picked up without editing a list here."""
    from pathlib import Path

    here = Path(__file__).parent
    names = [p.stem for p in here.glob("ex[0-9][0-9]*.py")
             if re.fullmatch(r"ex\d\d[a-z]?(_\w+)?", p.stem)
             and "register_exercise(" in p.read_text(encoding="utf-8")]
    return sorted(names)


def kernel_exercises() -> dict[str, KernelExercise]:
    """Every registered exercise by id, in notebook order (imports every ``exNN`` module that
    registers one)."""
    import importlib

    for name in _exercise_modules():
        importlib.import_module(f"npu_lab.course.{name}")
    return dict(sorted(_REGISTRY.items()))


def _exercise(exercise_id) -> KernelExercise:
    exercises = kernel_exercises()
    if exercise_id not in exercises:
        raise ValueError(f"unknown kernel exercise {exercise_id!r}; the exercises are: {', '.join(exercises)}")
    return exercises[exercise_id]


# ---- cells: instructor (with solution regions) and student (stubs) -----------------------------
def kernel_solution_cell(exercise_id: str) -> str:
    """The instructor cell: imports, then the solution kernel renamed to the cell's name, its
    regions for this exercise marked ``### BEGIN SOLUTION`` / ``### END SOLUTION`` (the markers
    of other exercises' regions dropped, their code kept)."""
    ex = _exercise(exercise_id)
    src = textwrap.dedent(inspect.getsource(ex.solution))
    src = re.sub(rf"\bdef {ex.solution.__name__}\(", f"def {ex.cell_name}(", src, count=1)
    out, skipping = [], False
    for line in src.splitlines():
        b, e = _BEGIN.match(line), _END.match(line)
        marker = b or e
        if skipping:
            skipping = not e
            continue
        if b and b.group(2) in ex.omits:
            # drop the region and the comment block that introduces it (from its "YOUR CODE (id)")
            while out and out[-1].lstrip().startswith("#"):
                if out.pop().lstrip().startswith(f"# YOUR CODE ({b.group(2)})"):
                    break
            skipping = True
            continue
        if marker:
            tag = marker.group(2) if b else marker.group(1)
            if tag is None or tag == exercise_id:
                indent = b.group(1) if b else line[:len(line) - len(line.lstrip())]
                out.append(indent + ("### BEGIN SOLUTION" if b else "### END SOLUTION"))
            continue
        out.append(line)
    return ex.imports.strip() + "\n\n\n" + _given_comments("\n".join(out), exercise_id) + "\n"


def _given_comments(src: str, exercise_id: str) -> str:
    """Another exercise's region is given code in this cell: its "YOUR CODE (other id):" comment
    loses the prefix, so only this exercise's gaps say YOUR CODE."""
    return re.sub(r"# YOUR CODE \(([^)]+)\): ",
                  lambda m: m.group(0) if m.group(1) == exercise_id else "# ", src)


def strip_solutions(cell: str, stub: str = CODE_STUB) -> str:
    """What nbgrader's ClearSolutions does to a cell: every solution region (markers included)
    becomes ``stub``, indented like its BEGIN line."""
    out, inside = [], False
    for line in cell.splitlines():
        b = _BEGIN.match(line)
        if b and not inside:
            out.append(b.group(1) + stub)
            inside = True
        elif inside and _END.match(line):
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("a ### BEGIN SOLUTION region has no ### END SOLUTION")
    return "\n".join(out) + "\n"


def kernel_skeleton(exercise_id: str) -> str:
    """The student cell of an exercise: the instructor cell with its solution regions replaced by
    ``pass  # YOUR CODE HERE`` (the comments above each region say what to write)."""
    return strip_solutions(kernel_solution_cell(exercise_id))


def load_cell(cell_text: str, filename: str = "<kernel-cell>") -> dict:
    """Execute a cell's text as a notebook would, its lines registered so tracebacks (and the
    hints of :func:`check_kernel`) can quote them; returns the cell's namespace."""
    if not isinstance(cell_text, str):
        raise TypeError(f"cell_text must be the cell's source as a str, got {type(cell_text).__name__}")
    linecache.cache[filename] = (len(cell_text), None, cell_text.splitlines(True), filename)
    namespace: dict = {"__name__": "__kernel_cell__"}
    exec(compile(cell_text, filename, "exec"), namespace)
    return namespace


# ---- the result ---------------------------------------------------------------------------------
class KernelCheckResult(CheckResult):
    """A check message with ``.correct``, ``.fast``, ``.latency_us``, ``.target_us``,
    ``.timeline`` (the timed run, or None) and ``.error`` (the exception caught, or None)."""

    fast: bool | None = None
    latency_us: float | None = None
    target_us: float | None = None
    timeline = None
    error: BaseException | None = None
    table = None

    def figure(self):
        """The timed run's timeline as a plotly figure (None when nothing was timed)."""
        if self.timeline is None:
            return None
        from .viz import timeline_figure

        return timeline_figure(self.timeline, title="your kernel")


def _result(text, correct, **attrs) -> KernelCheckResult:
    r = KernelCheckResult(text, correct)
    for k, v in attrs.items():
        setattr(r, k, v)
    return r


# ---- hints --------------------------------------------------------------------------------------
def _user_frame(exc: BaseException, fn) -> tuple[str, int, str] | None:
    """(file, line, source) of the deepest traceback frame in the learner's cell (the file that
    defines ``fn``), else the deepest frame outside npu_lab."""
    target = inspect.unwrap(fn)
    code = getattr(target, "__code__", None)
    filename = code.co_filename if code else None
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if filename and f.filename == filename]
    if not mine:
        mine = [f for f in frames if "npu_lab" not in f.filename.replace("\\", "/").split("site-packages")[-1]
                and f.filename != __file__]
    if not mine:
        return None
    f = mine[-1]
    line = (f.line or linecache.getline(f.filename, f.lineno)).strip()
    return f.filename, f.lineno, line


def _advice(exc: BaseException) -> tuple[str, str | None]:
    """(what kind of mistake, what to do — None when there is no fix to name beyond the message's own)."""
    msg = str(exc)
    if isinstance(exc, RaceError):
        if getattr(exc, "event", None):      # the two instructions the detector found
            (e_name, e_pipe, e_src), (name, pipe, src) = exc.earlier, exc.later
            at = lambda where: f" (line {where[1]})" if where and where[1] else ""  # noqa: E731
            return (f"a race (a missing sync: {exc.kind} on '{exc.buffer}', {e_pipe} then {pipe})",
                    f"{name} on {pipe}{at(src)} must be ordered after {e_name} on {e_pipe}{at(e_src)}: "
                    f"ctx.set_flag('{exc.event}', id) after the {e_pipe} instruction and "
                    f"ctx.wait_flag('{exc.event}', id) before the {pipe} one"
                    + (" (or pass the tensor through a TQue: VECIN syncs MTE2->V, VECOUT V->MTE3)"
                       if exc.event in ("MTE2_V", "V_MTE3") else ""))
        return ("a race (a missing sync)",
                "between the pipe that writes a UB buffer and the one that reads it, add the flag pair "
                "ctx.set_flag('SRC_DST', id) after the producer and ctx.wait_flag('SRC_DST', id) before the "
                "consumer (e.g. MTE2_S before scalar code reads loaded data, V_S before it reads a vector "
                "result), or pass the tensor through a TQue (VECIN syncs MTE2->V, VECOUT V->MTE3)")
    if isinstance(exc, UnmatchedFlagError):
        return ("a SetFlag that no WaitFlag consumes",
                "every set_flag needs its wait_flag with the same HardEvent and id: add the wait before the "
                "instruction that needs the data, or set the flag only when a wait will follow (e.g. not for "
                "a tile j + 2 that does not exist)")
    if isinstance(exc, UbOverflowError):
        return ("a Unified Buffer overflow",
                "your init_buffer calls ask for more UB than the core has: add up slots x bytes of every "
                "queue and TBuf, then use smaller tiles or fewer slots (buffer sizes are in bytes, not elements)")
    if isinstance(exc, CapabilityError):
        return ("an instruction this chip does not have",
                "use another instruction (the message names the alternative) or run on a chip that has it")
    if isinstance(exc, AscendCRuleError):
        if "DataCopy" in msg and ("multiple of 32" in msg or "32-byte" in msg) and "DataCopyPad" not in msg.split(":")[0]:
            return ("an illegal DataCopy",
                    "DataCopy moves whole 32-byte blocks only: for a length that is not a multiple of 32 bytes "
                    "use ctx.data_copy_pad(dst, src, DataCopyExtParams(1, count * itemsize, 0, 0, 0)"
                    "[, DataCopyPadExtParams(False, 0, 0, 0) when loading])")
        if "free_tensor" in msg or "FreeTensor" in msg:
            return ("a buffer used after free_tensor", "use the tensor before freeing it, or allocate a new one")
        return ("a broken Ascend C rule", None)       # the library's message names the rule and the fix
    if isinstance(exc, QueueError):
        return ("queue misuse",
                "each tile goes alloc_tensor -> enque -> deque -> free_tensor on its queue, in that order; "
                "deque needs an earlier enque (was the tile loaded?), and at most `depth` tiles may be in a "
                "queue at once")
    if getattr(exc, "part_check", False):    # an 08b part checked against numpy on its UB data
        return ("your part of the kernel is not finished or wrote a wrong value", None)
    if isinstance(exc, SimulationError):
        return ("a simulator error", None)
    if isinstance(exc, (IndexError, KeyError)):
        return ("a Python index error", "check the offsets and counts on that line against the tensor sizes")
    if isinstance(exc, (NameError, AttributeError)):
        return ("a Python name error", "a name or method is misspelled or not imported in your cell "
                "(ASCEND_C_API lists the calls)")
    return (f"a Python {type(exc).__name__}", None)


def _error_result(exc, fn, case, ex) -> KernelCheckResult:
    kind, todo = _advice(exc)
    where = _user_frame(exc, fn)
    if getattr(exc, "part_check", False):
        where = None
        loc = "in what your function left in UB:\n"
    elif where:
        fname, lineno, line = where
        loc = f"at line {lineno} of your cell ({fname}):\n    {line}\n"
    else:
        loc = "(not on a line of your cell: check the arguments you pass)\n"
    todo = f"What to do: {todo}.\n" if todo else ""      # only when there is a fix to name
    text = (f"Not yet: {type(exc).__name__} — {kind} — {loc}"
            f"{_short(str(exc))}\n{todo}(case: {case['label']})")
    return _result(text, False, error=exc)


def _short(msg: str, limit: int = 600) -> str:
    return msg if len(msg) <= limit else msg[:limit] + " …"


# ---- comparing ----------------------------------------------------------------------------------
def _mismatch(ex, case, got: dict, want: dict):
    """(None, None) when every output matches, else (message, table rows) for the first mismatch."""
    rtol, atol = ex.tolerance
    for name, expected in want.items():
        g = np.asarray(got[name]).reshape(-1)
        w = np.asarray(expected).reshape(-1)
        if g.shape != w.shape:
            return f"output {name} has {g.size} elements, expected {w.size}", []
        if w.dtype.kind == "f":
            with np.errstate(invalid="ignore"):
                bad = ~np.isclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
        else:
            bad = g != w
        if bad.any():
            first = np.flatnonzero(bad)
            rows = [(name, int(i), w[i].item(), g[i].item(), ex.locate(case, name, int(i))) for i in first[:5]]
            return f"{len(first)} of {w.size} elements of {name} differ", rows
    return None, None


def _table(rows) -> str:
    head = f"{'output':<10}{'index':>8}  {'expected':>14}  {'got':>14}  from"
    lines = [head, "-" * len(head)]
    for name, i, w, g, where in rows:
        lines.append(f"{name:<10}{i:>8}  {_fmt(w):>14}  {_fmt(g):>14}  {where}")
    return "\n".join(lines)


def _fmt(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


# ---- the check ----------------------------------------------------------------------------------
def _in_notebook() -> bool:
    ip = sys.modules.get("IPython")
    shell = ip.get_ipython() if ip and hasattr(ip, "get_ipython") else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def check_kernel(fn, exercise_id: str, *, hw=None, show: bool = False) -> KernelCheckResult:
    """Run the learner's ``fn`` for exercise ``exercise_id`` on every case; return a
    :class:`KernelCheckResult` (never raises on a wrong or unfinished answer). ``hw``: a preset
    name (default: the exercise's chip). ``show=True`` displays the timeline in a notebook."""
    ex = _exercise(exercise_id)
    # the harness's own arguments are checked before the learner's code runs: a bad chip name is
    # the caller's mistake, not an error in their kernel
    hw = ex.hw if hw is None else hw
    get_preset(hw)                      # raises naming the presets (or the wrong type)
    if not isinstance(show, (bool, np.bool_)):
        raise TypeError(f"check_kernel's show must be True or False, got {show!r}")
    if fn is None:
        return _result("No answer yet: define your function in the cell above and pass it here.", None)
    if not callable(fn):
        return _result(f"Not yet: pass your function itself (e.g. {ex.cell_name}), not a "
                       f"{type(fn).__name__}.", False)
    if ex.kind == "host":
        return ex.host_check(fn, hw)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        result = _check(ex, fn, hw)
    if show and result.timeline is not None and _in_notebook():
        from IPython.display import display

        display(result.figure())
    return result


def _check(ex: KernelExercise, fn, hw) -> KernelCheckResult:
    cases = ex.cases(np.random.default_rng(RANDOM_SEED))
    wrote_any = False
    for case in cases:
        try:
            got, _timeline = ex.launch(fn, case, hw, False)
        except Exception as exc:          # the learner's code: every error becomes a hint
            return _error_result(exc, fn, case, ex)
        want = ex.reference(case)
        untouched = all(_is_sentinel(got[n]) for n in want)
        if untouched:
            if not wrote_any and case is cases[0]:
                return _result(f"No answer yet: the kernel ran but wrote nothing to "
                               f"{', '.join(want)} (case: {case['label']}). Fill in the part marked "
                               "YOUR CODE HERE.", None)
        else:
            wrote_any = True
        msg, rows = _mismatch(ex, case, got, want)
        if msg:
            advice = ex.diagnose(case, got, want) if ex.diagnose is not None else None
            text = (f"Not yet: wrong numbers for case {case['label']}: {msg}. First mismatches:\n"
                    f"{_table(rows)}\n" + (advice or "Compare your offsets and counts for that block and tile "
                                           "(NaN or huge values mean UB that was never written: garbage)."))
            return _result(text, False, table=rows)
    # every case right: time it against the target
    try:
        _, timeline = ex.launch(fn, ex.target_case, hw, not ex.timed_full)
    except Exception as exc:
        return _error_result(exc, fn, ex.target_case, ex)
    latency = timeline.total_us
    target_us, rule = ex.target(hw)
    fast = latency <= target_us
    verdict, _evidence = timeline.bottleneck()
    head = f"correct on all {len(cases)} cases; {latency:.1f} µs at {ex.target_case['label']} ({verdict}-bound)"
    if fast:
        text = f"Right: {head}; the target is ≤ {target_us:.1f} µs ({rule}) — met."
    elif ex.speed:
        text = f"Nearly: {head}; the target is ≤ {target_us:.1f} µs ({rule}) — {ex.slow_hint}."
    else:
        text = (f"Right: {head}. For speed, the course's kernel takes ≤ {target_us:.1f} µs ({rule}) — "
                f"{ex.slow_hint}.")
    if ex.extra is not None:
        text += "\n" + ex.extra(latency, hw)
    text += "\n(`result.figure()` draws this run's timeline: which pipe is busy, which waits.)"
    return _result(text, bool(fast or not ex.speed), fast=bool(fast), latency_us=latency,
                   target_us=target_us, timeline=timeline)


# ---- sentinels: outputs start as values a kernel would not write --------------------------------
_SENTINEL = {"f": np.nan, "i": np.iinfo(np.int32).min + 7}


def sentinel_array(size: int, dtype) -> np.ndarray:
    """An output buffer filled with a marker (NaN; an odd int32 for ints), so a kernel that
    writes nothing is told apart from one that writes wrong values."""
    dtype = np.dtype(dtype)
    return np.full(size, _SENTINEL[dtype.kind if dtype.kind == "f" else "i"], dtype=dtype)


def _is_sentinel(a) -> bool:
    """True when no element holds a value a kernel computed: each is the sentinel, or fresh-UB
    garbage (every byte 0xFF) that a store of an unwritten buffer copied out."""
    a = np.asarray(a).reshape(-1)
    garbage = (a.view(np.uint8).reshape(a.size, -1) == 0xFF).all(axis=1)
    marked = np.isnan(a) if a.dtype.kind == "f" else a == _SENTINEL["i"]
    return bool((garbage | marked).all())


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ---- shared parts of the MoE gating exercises (04, 05, 07) ---------------------------------------
def moe_cases(rng, *, float16: bool = True) -> list[dict]:
    """MoE shapes (B, S, E, K, dtype): a tail tile, K = 1, E = K, a row that is not whole 32-byte
    blocks, float16, then two random ones."""
    fixed = [(1, 37, 64, 2, "float32"), (1, 20, 6, 1, "float32"), (2, 11, 8, 8, "float32"),
             (1, 50, 64, 4, "float16"), (1, 3, 3, 3, "float32")]
    if not float16:
        fixed = [c for c in fixed if c[4] == "float32"]
    for _ in range(2):
        E = int(rng.integers(1, 70))
        fixed.append((int(rng.integers(1, 3)), int(rng.integers(1, 60)), E, int(rng.integers(1, min(E, 8) + 1)), "float32"))
    return [{"B": B, "S": S, "E": E, "K": K, "dtype": dt, "label": f"B={B}, S={S}, E={E}, K={K}, {dt}"}
            for B, S, E, K, dt in fixed]


def moe_logits(case) -> np.ndarray:
    """The case's gate logits (seeded by its shape), [B·S, E]."""
    rng = np.random.default_rng([case["B"], case["S"], case["E"], case["K"]])
    return rng.standard_normal((case["B"] * case["S"], case["E"])).astype(case["dtype"])


def moe_reference(case) -> dict:
    from ..kernels.moe_gating import moe_gating_topk_reference

    idx, wgt = moe_gating_topk_reference(moe_logits(case), case["K"])
    return {"indices": np.asarray(idx, np.int32).reshape(-1), "weights": np.asarray(wgt, np.float32).reshape(-1)}


def moe_launcher(plan_version: str, tile_s: int | None = None):
    """A launcher running a learner's MoE kernel with the tiling and block_dim the host plans for
    ``plan_version`` (v1: a block per tile; v2: looping blocks)."""
    def run(fn, case, hw, timing_only):
        from ..kernels.moe_gating import plan_moe_gating
        from ..lang import GlobalTensor, launch

        B, S, E, K = case["B"], case["S"], case["E"], case["K"]
        tiling, block_dim = plan_moe_gating(B, S, E, K, version=plan_version, hw=hw,
                                            tile_s=case.get("tile_s", tile_s), dtype=case["dtype"])
        if timing_only:
            gate = GlobalTensor.empty(B * S * E, case["dtype"], "gate_logits", timing_only=True)
            idx = GlobalTensor.empty(B * S * K, np.int32, "expert_indices", timing_only=True)
            wgt = GlobalTensor.empty(B * S * K, np.float32, "routing_weights", timing_only=True)
        else:
            gate = GlobalTensor.from_array(moe_logits(case), "gate_logits")
            idx = GlobalTensor.from_array(sentinel_array(B * S * K, np.int32), "expert_indices")
            wgt = GlobalTensor.from_array(sentinel_array(B * S * K, np.float32), "routing_weights")
        timeline = launch(fn, block_dim, gate, idx, wgt, tiling.pack(), hw=hw, timing_only=timing_only)
        return (None if timing_only else {"indices": idx.data, "weights": wgt.data}), timeline
    return run


def moe_locator(plan_version: str, tile_s: int | None = None):
    """Which block and tile wrote output element i (a point's K results are consecutive)."""
    def locate(case, name, i):
        from ..kernels.moe_gating import plan_moe_gating
        from ..kernels.moe_gating.fused import tile_order

        tiling, block_dim = plan_moe_gating(case["B"], case["S"], case["E"], case["K"], version=plan_version,
                                            hw="ascend-910b2", tile_s=case.get("tile_s", tile_s), dtype=case["dtype"])
        row = i // case["K"]
        b, s = divmod(row, case["S"])
        tile = b * tiling.tilesPerBatch + s // tiling.tileS
        if plan_version == "v1":
            return f"point {row}, block {tile} (its tile)"
        pos = int(np.flatnonzero(tile_order(tiling) == tile)[0])
        return f"point {row}, tile {tile}, block {pos % block_dim} (its tile #{pos // block_dim})"
    return locate


def moe_target(version: str, timed: dict, *, factor: float = 1.0, label: str | None = None):
    """A target: the library's MoE ``version`` at the timed shape (× factor)."""
    def target(hw):
        from ..kernels.moe_gating import simulate_moe_gating

        us = simulate_moe_gating(timed["B"], timed["S"], timed["E"], timed["K"], version=version, hw=hw,
                                 tile_s=timed.get("tile_s"), dtype=timed["dtype"]).latency_us * factor
        return us, label or f"the course's {version} at this shape"
    return target


# ---- the placement document ---------------------------------------------------------------------
_DOC_HEAD = """# Kernel-writing exercises

Generated by `npu_lab.course.kernel_check.exercises_markdown()` (a test keeps this file current:
regenerate with `python -c "from npu_lab.course.kernel_check import write_exercises_markdown as w; w()"`).

Each exercise is a **skeleton cell** (the student version: every solution region replaced by
`pass  # YOUR CODE HERE`) followed by a **check cell**. `check_kernel` never raises on a wrong or
unfinished answer, so a notebook with unfinished exercises runs top to bottom under nbval. Its
result prints as text; `.correct` is None (nothing written yet), False (wrong numbers, a simulator
rule, or — for speed exercises — the target missed) or True; `.fast` says whether the modeled
latency met the target; `r.figure()` draws the timeline (`check_kernel(..., show=True)` displays
it in a notebook).

**Instructor cells** (nbgrader): `kernel_solution_cell(id)` is the same cell with the solution
between `### BEGIN SOLUTION` / `### END SOLUTION`; nbgrader's `ClearSolutions.code_stub` must be
`{"python": "pass  # YOUR CODE HERE"}` so the student version is exactly `kernel_skeleton(id)`.
Mark the skeleton cell `solution` (autograded answer) and the check cell an autograder test cell
with `assert check_kernel(...).correct` in the instructor's hidden tests if points are wanted.

"""


def _notebook_names() -> dict[str, str]:
    """Notebook number -> its file stem ("09" -> "09_cube_and_3d_grid"), read from the repository's
    instructor/ folder; a number whose notebook is absent maps to itself."""
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "instructor"
    names = {p.stem.split("_")[0]: p.stem for p in folder.glob("[0-9][0-9]*_*.ipynb")}
    for key in list(_REGISTRY):
        names.setdefault(key.split(".")[0], key.split(".")[0])
    return names


def exercises_markdown() -> str:
    """The placement document (docs/kernel_exercises.md): every exercise, where it goes, its
    skeleton and check cells, and what it teaches."""
    parts = [_DOC_HEAD, "| id | notebook | goes after | kind |\n|---|---|---|---|\n"]
    exercises = kernel_exercises()
    nb = _notebook_names()
    for eid, ex in exercises.items():
        kind = "host function" if ex.kind == "host" else ("kernel, speed target" if ex.speed else "kernel")
        parts.append(f"| `{eid}` | {nb[eid.split('.')[0]]} | {ex.place_after} | {kind} |\n")
    for eid, ex in exercises.items():
        parts.append(f"\n## `{eid}` — {ex.title}\n\n**Notebook:** `notebooks/{nb[eid.split('.')[0]]}.ipynb`, "
                     f"after {ex.place_after}.\n\n**Teaches:** {ex.teaches}.\n\n")
        if ex.kind == "kernel":
            parts.append(f"**Target:** {'must be met' if ex.speed else 'shown for scale'}, computed at "
                         f"{ex.target_case['label']} from the library (see `{ex.notebook}`).\n\n")
        parts.append("Skeleton cell:\n\n```python\n" + kernel_skeleton(eid) + "```\n\n")
        parts.append("Check cell:\n\n```python\nfrom npu_lab.course.kernel_check import check_kernel\n"
                     f"print(check_kernel({ex.cell_name}, \"{eid}\"))\n```\n")
    return "".join(parts)


def write_exercises_markdown(path=None) -> str:
    """Write :func:`exercises_markdown` to docs/kernel_exercises.md (or ``path``); returns the path."""
    from pathlib import Path

    from .._files import check_path, write_text_atomically

    path = Path(check_path(path)) if path is not None else Path(__file__).resolve().parents[2] / "docs" / "kernel_exercises.md"
    write_text_atomically(path, exercises_markdown())
    return str(path)
