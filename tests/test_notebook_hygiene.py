"""Hygiene of the committed course notebooks (``notebooks/NN_topic.ipynb``).

Run with the unit tests (``make test-unit``) or alone::

    .venv/bin/python -m pytest -q tests/test_notebook_hygiene.py

For every notebook: valid nbformat, under 500 KB, no saved widget state, executed top
to bottom with its outputs (``make notebooks``), no error output except in cells marked
``# NBVAL_RAISES_EXCEPTION`` (and those do raise), no plotly.js inlined by the
``notebook`` renderer (no text/html output over 100 KB), imports ``npu_lab`` and does
not define library-sized code (no function or class over 15 lines in a cell: the course
rule is that notebooks never redefine library code), starts with a markdown title, and
is clean in the sense of ``scripts/run_notebooks.py`` (metadata noise stripped).
Across notebooks: names are ``NN_topic.ipynb`` numbered consecutively from 00.

Most fixes are one command: ``make notebooks`` re-executes and cleans everything.

The second half tests the checks themselves and ``scripts/run_notebooks.py`` on small
notebooks built in memory, so this file guards the tooling even while notebooks/ is
empty.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
RUN_NOTEBOOKS = REPO / "scripts" / "run_notebooks.py"

MAX_NOTEBOOK_BYTES = 500 * 1024
MAX_HTML_OUTPUT_BYTES = 100 * 1024
MAX_DEF_LINES = 15
NAME_RE = re.compile(r"^(\d\d)([a-z]?)_[a-z0-9]+(?:_[a-z0-9]+)*\.ipynb$")  # 07b: an appendix of 07
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
# Written by plotly's `notebook` renderers (they inline or load plotly.js).
PLOTLY_NOTEBOOK_RENDERER_MARKS = ("window.PlotlyConfig", "define('plotly'", 'define("plotly"')


def _load_run_notebooks():
    spec = importlib.util.spec_from_file_location("run_notebooks", RUN_NOTEBOOKS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_notebooks = _load_run_notebooks()


# ----------------------------------------------------------------------------- checks
# Each returns a list of human-readable problems; an empty list means fine.

def _code_cells(nb):
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def _executable(cell) -> bool:
    """Cells nbclient runs: non-empty source, not tagged skip-execution."""
    return bool(cell.source.strip()) and "skip-execution" not in cell.metadata.get("tags", [])


def check_widget_state(nb) -> list[str]:
    problems = []
    if "widgets" in nb.metadata:
        problems.append("metadata.widgets holds saved widget state (run `make notebooks`)")
    if WIDGET_STATE_MIME in json.dumps(nb):
        problems.append(f"{WIDGET_STATE_MIME} is embedded somewhere in the notebook")
    return problems


def check_executed(nb) -> list[str]:
    problems = []
    executed = [(i, c) for i, c in _code_cells(nb) if _executable(c)]
    not_run = [i for i, c in executed if c.get("execution_count") is None]
    if not_run:
        problems.append(f"code cells {not_run} were not executed (run `make notebooks`)")
    counts = [c.execution_count for _, c in executed if c.get("execution_count") is not None]
    if not not_run and counts != list(range(1, len(counts) + 1)):
        problems.append(
            f"execution counts {counts} are not 1..{len(counts)}: the outputs do not come from "
            "one top-to-bottom run in a fresh kernel (run `make notebooks`)"
        )
    if executed and not any(c.get("outputs") for _, c in executed):
        problems.append("no code cell has any output: the notebook was saved without outputs")
    return problems


def check_errors(nb) -> list[str]:
    problems = []
    for i, cell in _code_cells(nb):
        raised = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
        expected = "NBVAL_RAISES_EXCEPTION" in run_notebooks.cell_markers(cell)
        if raised and not expected:
            err = next(o for o in cell.outputs if o.get("output_type") == "error")
            problems.append(
                f"cell {i} has an error output ({err.get('ename')}: {err.get('evalue')}); if the "
                "error is the lesson, mark the cell `# NBVAL_RAISES_EXCEPTION`"
            )
        if expected and not raised:
            problems.append(f"cell {i} is marked NBVAL_RAISES_EXCEPTION but has no error output")
    return problems


def check_html_outputs(nb) -> list[str]:
    problems = []
    for i, cell in _code_cells(nb):
        for out in cell.get("outputs", []):
            html = out.get("data", {}).get("text/html")
            if html is None:
                continue
            html = "".join(html) if isinstance(html, list) else html
            size = len(html.encode("utf-8"))
            if size > MAX_HTML_OUTPUT_BYTES:
                problems.append(
                    f"cell {i} has a {size // 1024} KB text/html output (plotly's `notebook` "
                    "renderer inlines plotly.js; keep the default `plotly_mimetype` renderer)"
                )
            elif any(mark in html for mark in PLOTLY_NOTEBOOK_RENDERER_MARKS):
                problems.append(f"cell {i} uses plotly's `notebook` renderer (keep `plotly_mimetype`)")
    return problems


def _parse_cell(source: str):
    """The cell as a Python AST, IPython magics turned into plain calls; None if the
    cell is not Python even then."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:  # no IPython: comment out magics and shell escapes by hand
        source = "\n".join(
            "pass" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines()
        )
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def check_library_use(nb) -> list[str]:
    problems = []
    imports_library = False
    for i, cell in _code_cells(nb):
        tree = _parse_cell(cell.source)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(
                a.name == "npu_lab" or a.name.startswith("npu_lab.") for a in node.names
            ):
                imports_library = True
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "npu_lab":
                imports_library = True
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private or any(part.startswith("_") for part in node.module.split(".")):
                    problems.append(f"cell {i} imports a private library name ({node.module}: "
                                    f"{private or 'a private module'}): make it public or keep it inside npu_lab")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                length = node.end_lineno - node.lineno + 1
                # a kernel exercise (docs/kernel_exercises.md): the learner writes `my_*` in a cell
                # with a solution region; it is the exercise, not library code redefined
                # (instructor version), or the cell nbgrader marked a solution (student version)
                nbgrader = cell.get("metadata", {}).get("nbgrader", {})
                exercise = (("### BEGIN SOLUTION" in cell.source or nbgrader.get("solution") is True)
                            and re.search(r"^def my_\w+\(", cell.source, re.M) is not None)
                if length > MAX_DEF_LINES and not exercise:
                    kind = "class" if isinstance(node, ast.ClassDef) else "function"
                    problems.append(
                        f"cell {i} defines {kind} {node.name!r} of {length} lines (> {MAX_DEF_LINES}): "
                        "library code belongs in npu_lab/, the notebook imports it"
                    )
    if not imports_library:
        problems.append("no cell imports from npu_lab (notebooks use the library, never redefine it)")
    return problems


def check_title(nb) -> list[str]:
    if not nb.cells:
        return ["the notebook has no cells"]
    first = nb.cells[0]
    if first.cell_type != "markdown":
        return [f"the first cell is a {first.cell_type} cell, not a markdown title"]
    line = next((ln for ln in first.source.splitlines() if ln.strip()), "")
    if not re.match(r"^#\s+\S", line):
        return [f"the first cell does not start with a `# Title` line (it starts {line[:60]!r})"]
    return []


def check_clean(nb) -> list[str]:
    if run_notebooks.is_clean(nb):
        return []
    return [
        "metadata noise or widget ids that `python scripts/run_notebooks.py --clean-only "
        "<notebook>` (or `make notebooks`) would remove"
    ]


def check_names(names: list[str]) -> list[str]:
    problems = [f"{n} is not named NN_topic.ipynb (lower case, underscores)" for n in names if not NAME_RE.match(n)]
    numbers = sorted({int(NAME_RE.match(n).group(1)) for n in names if NAME_RE.match(n)})
    appendices = [n for n in names if NAME_RE.match(n) and NAME_RE.match(n).group(2)]
    problems += [f"{n} is an appendix of notebook {n[:2]}, which does not exist" for n in appendices
                 if not any(NAME_RE.match(m) and not NAME_RE.match(m).group(2) and m[:2] == n[:2] for m in names)]
    if numbers != list(range(len(numbers))):
        problems.append(f"notebook numbers {numbers} are not consecutive from 00")
    return problems


ALL_CHECKS = [check_widget_state, check_executed, check_errors, check_html_outputs,
              check_library_use, check_title, check_clean]


# ---------------------------------------------------------------- the course notebooks
_NOTEBOOK_PARAMS = [pytest.param(p, id=p.name) for p in NOTEBOOKS] or [
    pytest.param(None, id="no-notebooks", marks=pytest.mark.skip(reason="notebooks/ has no .ipynb yet"))
]


def _read(path: Path):
    return nbformat.read(path, as_version=4)


@pytest.mark.parametrize("path", _NOTEBOOK_PARAMS)
def test_valid_nbformat_and_small(path):
    nb = _read(path)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    size = path.stat().st_size
    assert size < MAX_NOTEBOOK_BYTES, (
        f"{path.name} is {size // 1024} KB (limit {MAX_NOTEBOOK_BYTES // 1024} KB): look for "
        "widget state, inlined plotly.js or large images"
    )


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda f: f.__name__.removeprefix("check_"))
@pytest.mark.parametrize("path", _NOTEBOOK_PARAMS)
def test_notebook(path, check):
    problems = check(_read(path))
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)


def test_notebook_names_consecutive():
    if not NOTEBOOKS:
        pytest.skip("notebooks/ has no .ipynb yet")
    problems = check_names([p.name for p in NOTEBOOKS])
    assert not problems, "\n".join(problems)


# -------------------------------------------------------------- the checks themselves
def _good_notebook():
    """A small notebook as `make notebooks` leaves it."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 01 · Tiling\n\nWhat you will learn."),
        nbformat.v4.new_code_cell("from npu_lab import hardware\n%matplotlib inline", execution_count=1),
        nbformat.v4.new_code_cell(
            "print(1 + 1)", execution_count=2,
            outputs=[nbformat.v4.new_output("stream", name="stdout", text="2\n")],
        ),
        nbformat.v4.new_code_cell(
            "# NBVAL_RAISES_EXCEPTION\nhardware.tile(10**9)", execution_count=3,
            outputs=[nbformat.v4.new_output("error", ename="ValueError", evalue="too big", traceback=[])],
        ),
        nbformat.v4.new_code_cell(""),  # empty cells are not executed, and that is fine
    ]
    return run_notebooks.clean_notebook(nb)


def test_checks_pass_a_good_notebook():
    nb = _good_notebook()
    nbformat.validate(nb)
    for check in ALL_CHECKS:
        assert check(nb) == [], check.__name__
    assert check_names(["00_intro.ipynb", "01_tiling.ipynb", "02_moe_gating_topk.ipynb"]) == []


@pytest.mark.parametrize(
    "spoil, check",
    [
        (lambda nb: nb.metadata.update(widgets={WIDGET_STATE_MIME: {"state": {}}}), check_widget_state),
        (lambda nb: nb.cells[2].update(execution_count=None), check_executed),
        (lambda nb: nb.cells[2].update(execution_count=7), check_executed),
        (lambda nb: [c.update(outputs=[]) for c in nb.cells if c.cell_type == "code"], check_executed),
        (lambda nb: nb.cells[2].outputs.append(
            nbformat.v4.new_output("error", ename="KeyError", evalue="x", traceback=[])), check_errors),
        (lambda nb: nb.cells[3].update(outputs=[]), check_errors),
        (lambda nb: nb.cells[2].outputs.append(nbformat.v4.new_output(
            "display_data", data={"text/html": "<script>" + "x" * 200_000 + "</script>"})), check_html_outputs),
        (lambda nb: nb.cells[2].outputs.append(nbformat.v4.new_output(
            "display_data", data={"text/html": "<script>window.PlotlyConfig = {};</script>"})), check_html_outputs),
        (lambda nb: nb.cells[1].update(source="import numpy as np"), check_library_use),
        (lambda nb: nb.cells[2].update(
            source="def reimplemented(x):\n" + "    x += 1\n" * 15 + "    return x"), check_library_use),
        (lambda nb: nb.cells[2].update(
            source="class Sim:\n" + "".join(f"    def m{k}(self):\n        pass\n" for k in range(8))), check_library_use),
        (lambda nb: nb.cells.insert(0, nbformat.v4.new_code_cell("1")), check_title),
        (lambda nb: nb.cells[0].update(source="Some text without a heading"), check_title),
        (lambda nb: nb.metadata.update(language_info={"name": "python", "version": "3.11.7"}), check_clean),
        (lambda nb: nb.cells[2].metadata.update(collapsed=False, ExecuteTime={"start_time": "x"}), check_clean),
    ],
    ids=["widget-state", "not-executed", "out-of-order", "no-outputs", "unexpected-error",
         "marked-but-no-error", "huge-html", "notebook-renderer", "no-npu_lab-import",
         "long-function", "long-class", "title-not-first", "no-title", "language-version",
         "cell-metadata-noise"],
)
def test_checks_catch_problems(spoil, check):
    nb = _good_notebook()
    spoil(nb)
    assert check(nb), f"{check.__name__} did not notice the problem"


def test_check_names_catches_gaps_and_bad_names():
    assert check_names(["00_intro.ipynb", "02_tiling.ipynb"])
    assert check_names(["01_intro.ipynb"])
    assert check_names(["00_Intro.ipynb"])
    assert check_names(["00-intro.ipynb"])
    assert check_names(["00_intro.ipynb", "01a_appendix.ipynb"])            # an appendix of a missing notebook
    assert check_names(["00_intro.ipynb", "01_a.ipynb", "01b_appendix.ipynb"]) == []


# --------------------------------------------------------- scripts/run_notebooks.py
def test_clean_notebook_strips_state_keeps_outputs_and_is_idempotent():
    nb = _good_notebook()
    view = {"model_id": "9f1c0ffee", "version_major": 2, "version_minor": 0}
    nb.cells[2].outputs.append(nbformat.v4.new_output(
        "display_data", data={"application/vnd.jupyter.widget-view+json": view, "text/plain": "IntSlider(value=3)"}))
    nb.metadata["widgets"] = {WIDGET_STATE_MIME: {"state": {"9f1c0ffee": {}}}}
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7"}
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3.11 (venv)", "language": "python"}
    nb.cells[2].metadata.update(collapsed=True, scrolled=True, ExecuteTime={"a": 1},
                                execution={"iopub.status.busy": "2024"}, tags=["keep-me"])

    cleaned = run_notebooks.clean_notebook(copy.deepcopy(nb))

    assert "widgets" not in cleaned.metadata
    assert cleaned.metadata.language_info == {"name": "python"}
    assert cleaned.metadata.kernelspec == run_notebooks.KERNELSPEC
    assert cleaned.cells[2].metadata == {"tags": ["keep-me"]}
    outputs = cleaned.cells[2].outputs
    assert [o.output_type for o in outputs] == ["stream", "display_data"]  # outputs kept
    assert outputs[1].data["text/plain"] == "IntSlider(value=3)"         # widget view kept...
    assert outputs[1].data["application/vnd.jupyter.widget-view+json"]["model_id"] == "0" * 31 + "1"  # ...renumbered
    assert cleaned.cells[2].execution_count == 2                         # counts kept
    assert [c.id for c in cleaned.cells] == [c.id for c in nb.cells]     # cell ids kept
    assert run_notebooks.is_clean(cleaned)
    assert run_notebooks.clean_notebook(copy.deepcopy(cleaned)) == cleaned


def test_cell_markers():
    code = nbformat.v4.new_code_cell
    assert run_notebooks.cell_markers(code("# NBVAL_IGNORE_OUTPUT\nx")) == {"NBVAL_IGNORE_OUTPUT"}
    assert run_notebooks.cell_markers(code("x = 1  # NBVAL_SKIP")) == set()  # nbval wants its own line
    cell = code("x")
    cell.metadata["tags"] = ["raises-exception"]
    assert run_notebooks.cell_markers(cell) == {"NBVAL_RAISES_EXCEPTION"}


def test_run_notebooks_executes_cleans_and_refuses_broken_notebooks(tmp_path):
    """End to end, in a real kernel: a good notebook is executed in its own folder and
    written back clean; a broken one is named with its cell and left untouched."""
    good = nbformat.v4.new_notebook()
    good.cells = [
        nbformat.v4.new_markdown_cell("# good"),
        nbformat.v4.new_code_cell("import os\nprint(os.path.basename(os.getcwd()))"),
        nbformat.v4.new_code_cell("# NBVAL_RAISES_EXCEPTION\nraise ValueError('expected')"),
        nbformat.v4.new_code_cell("import ipywidgets\nipywidgets.IntSlider(value=3)"),
    ]
    good.metadata["widgets"] = {WIDGET_STATE_MIME: {"state": {}}}
    bad = nbformat.v4.new_notebook()
    bad.cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("1 / 0")]
    folder = tmp_path / "course"
    folder.mkdir()
    nbformat.write(good, folder / "good.ipynb")
    nbformat.write(bad, folder / "bad.ipynb")
    bad_before = (folder / "bad.ipynb").read_bytes()

    proc = subprocess.run(
        [sys.executable, str(RUN_NOTEBOOKS), "--timeout", "120", str(folder / "*.ipynb")],
        capture_output=True, text=True, timeout=300,
    )

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "bad.ipynb" in proc.stderr and "cell 1" in proc.stderr and "ZeroDivisionError" in proc.stderr
    assert (folder / "bad.ipynb").read_bytes() == bad_before
    assert not list(folder.glob(".*.tmp")), "a temp file was left behind"
    nb = nbformat.read(folder / "good.ipynb", as_version=4)
    nbformat.validate(nb)
    assert nb.cells[1].outputs[0].text == "course\n"  # ran with the notebook's folder as cwd
    assert nb.cells[2].outputs[0].output_type == "error"
    assert "application/vnd.jupyter.widget-view+json" in nb.cells[3].outputs[0].data
    assert [c.execution_count for c in nb.cells[1:]] == [1, 2, 3]
    assert "widgets" not in nb.metadata
    assert "version" not in nb.metadata.language_info
    assert run_notebooks.is_clean(nb)
    raw = (folder / "good.ipynb").read_text(encoding="utf-8")
    assert raw.startswith('{\n "cells": [\n  {') and raw.endswith("}\n")  # Jupyter's layout


# ------------------------------------------------------------- tests/nbval_sanitize.cfg
SANITIZE_FILE = REPO / "tests" / "nbval_sanitize.cfg"


def _sanitizer():
    from nbval.plugin import get_sanitize_patterns  # parse it exactly as nbval does

    # nbval opens the file with the locale's encoding: it must be plain ASCII.
    text = SANITIZE_FILE.read_bytes().decode("ascii")
    patterns = get_sanitize_patterns(text)
    assert len(patterns) >= 8, f"nbval found only {len(patterns)} regex/replace pairs"
    compiled = [(re.compile(rx), rep) for rx, rep in patterns]

    def sanitize(s: str) -> str:
        for rx, rep in compiled:
            s = rx.sub(rep, s)
        return s

    return sanitize


def test_sanitize_blanks_what_differs_between_runs():
    sanitize = _sanitizer()
    import random
    import uuid

    # seeded, so the "fresh" parts are the same every run: the test cannot fail by chance
    # (it did ~1.2 % of the time when two random draws such as uuid % 90 + 1 happened to match)
    rng = random.Random(11)

    def fresh_uuid() -> uuid.UUID:
        return uuid.UUID(int=rng.getrandbits(128), version=4)

    def twice(make):  # the same text with fresh random parts must sanitize the same
        a, b = make(), make()
        assert a != b
        assert sanitize(a) == sanitize(b), (a, sanitize(a))
        return sanitize(a)

    u = lambda: str(fresh_uuid())  # noqa: E731
    assert "<uuid>" in twice(lambda: f"run id {u()} done")
    # a FigureWidget repr, whole and cut mid-uid at 110 characters as ipywidgets does
    twice(lambda: f"FigureWidget({{\n    'data': [{{'type': 'scatter', 'uid': '{u()}', 'x': [1]}}]")
    cut = twice(lambda: f"FigureWidget({{\n    'data': [{{'type': 'scatter', 'uid': '{u()[:11]}…")
    assert cut.endswith("'uid': '<uid>…")
    twice(lambda: f'{{"type": "bar", "uid": "{u()}"}}')
    twice(lambda: f"<npu_lab.sim.Core object at {hex(0x7f3a5c000000 + fresh_uuid().int % 4096 * 16)}>")
    twice(lambda: f"CPU times: user {fresh_uuid().int % 90 + 1} ms, sys: 0 ns\nWall time: {fresh_uuid().int % 999} \u03bcs")
    twice(lambda: f"{fresh_uuid().int % 90 + 1}.5 ms \u00b1 {fresh_uuid().int % 9}.1 \u00b5s per loop (mean \u00b1 std. dev. of 7 runs, 10 loops each)")
    twice(lambda: f"simulation: {fresh_uuid().int % 90 + 1}.3 ms wall time")
    twice(lambda: f"wrote /tmp/tmp{fresh_uuid().hex[:8]}/trace.json")
    twice(lambda: f"/home/u{fresh_uuid().hex[:4]}/venv/lib/python3.11/site-packages/plotly/io.py:3: UserWarning")


def test_sanitize_keeps_the_regression_figures():
    sanitize = _sanitizer()
    for text in [
        "simulated 12.3 us on the NPU (4096 cycles)",
        "UB offset 0x4000, tile 0x1f00",
        "version 3 of 5: 1.8x faster than the baseline",
        "expert 12 -> score 0.8123",
        "           cube    vector   mte2\nv1   12.0 us    3.1 us  40.0 us\n",
    ]:
        assert sanitize(text) == text


def test_sanitize_stays_on_its_line_and_is_fast_on_big_outputs():
    import time

    sanitize = _sanitizer()
    assert sanitize("Wall time: 3 ms\nresult: 42\n") == "wall time <t>\nresult: 42\n"
    start = time.perf_counter()
    for big in ("1," * 200_000, "a" * 300_000, "/" + "a/" * 150_000, "0x" + "f" * 300_000):
        sanitize(big)
    assert time.perf_counter() - start < 5, "a sanitize rule is super-linear on long outputs"


@pytest.mark.parametrize("path", sorted(NOTEBOOK_DIR.glob("*.ipynb")), ids=lambda p: p.name)
def test_demonstrated_errors_do_not_stop_run_all(path):
    """A cell that shows an error on purpose (# NBVAL_RAISES_EXCEPTION) carries the
    ``raises-exception`` tag: without it JupyterLab's "run all cells" and Voila stop there, and
    every cell after it stays unrun for the learner."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    untagged = [i for i, c in enumerate(cells) if c["cell_type"] == "code"
                and "NBVAL_RAISES_EXCEPTION" in "".join(c["source"])
                and "raises-exception" not in c.get("metadata", {}).get("tags", [])]
    assert untagged == [], f"{path.name}: cells {untagged} raise on purpose but lack the raises-exception tag"
