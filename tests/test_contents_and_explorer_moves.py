"""The welcome notebook's table of contents is computed from the notebooks present, and every
explorer of the course builds quickly and redraws a move within a generous bound (issue 16 §5, §7).
The figures themselves are `make bench`'s (scripts/bench.py, section every_explorer)."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

from npu_lab.course.contents import course_contents

REPO = Path(__file__).resolve().parents[1]


def test_contents_lists_every_notebook_present():
    table = course_contents(REPO / "notebooks")
    names = sorted(p.name for p in (REPO / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    assert sorted(table["notebook"]) == names
    assert table.loc["08", "title"].startswith("Debugging")


def test_contents_picks_up_a_new_notebook(tmp_path):
    cell = {"cell_type": "markdown", "metadata": {}, "source": ["# 09 · Cube units\n\n**Estimated time:** 30 minutes."]}
    (tmp_path / "09_cube.ipynb").write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                                        "nbformat_minor": 5}))
    table = course_contents(tmp_path)
    assert list(table.index) == ["09"] and table.loc["09", "title"] == "Cube units"
    assert table.loc["09", "time"] == "30 minutes"


def test_contents_says_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="holds no notebook"):
        course_contents(tmp_path)
    (tmp_path / "10_x.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["1"]}]}))
    with pytest.raises(ValueError, match="does not start with a markdown cell"):
        course_contents(tmp_path)
    with pytest.raises(ValueError, match="not a directory"):
        course_contents(tmp_path / "missing")


def _bench():
    spec = importlib.util.spec_from_file_location("bench", REPO / "scripts" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name, make", _bench().every_explorer(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_explorer_builds_and_moves_fast_enough(name, make):
    """Generous bounds (a loaded CI machine): build under 5 s, a move's median under 0.5 s and its
    worst (a first visit) under 2 s. `make bench` prints the real figures."""
    build, times = _bench().explorer_move_times(make)
    assert times, f"{name}: no control was moved"
    print(f"{name}: build {build * 1e3:.0f} ms, move median {statistics.median(times) * 1e3:.0f} ms, "
          f"worst {max(times) * 1e3:.0f} ms")
    assert build < 5.0 and statistics.median(times) < 0.5 and max(times) < 2.0


def test_plotly_does_not_drag_in_rfc3987_syntax():
    """The first explorer of a kernel builds in under a second: the IRI grammars jsonschema would
    compile through plotly's renderers are kept out (see npu_lab.course.viz)."""
    import subprocess
    import sys
    code = ("import time, sys; t = time.perf_counter(); from npu_lab.course.explorers import CopyCostExplorer; "
            "import time as _; s = time.perf_counter(); CopyCostExplorer(); "
            "print(time.perf_counter() - s, 'rfc3987_syntax' in sys.modules and sys.modules['rfc3987_syntax'] is not None)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(REPO)}).stdout.split()
    assert out[1] == "False"
    assert float(out[0]) < 5.0
