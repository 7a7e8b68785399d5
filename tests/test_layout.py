"""The library proper never imports the course layer (README.md; issue 10 §7): hardware, sim,
lang and kernels stay free of checks, exercises, explorers and figures."""

from __future__ import annotations

import ast
from pathlib import Path

import npu_lab
from npu_lab.data import load_previous_model_claims, load_previous_model_fit

LIBRARY = Path(npu_lab.__file__).resolve().parent
PROPER = ("hardware.py", "presets.py", "capabilities.py", "data.py", "sim", "lang", "kernels", "llm", "sched")


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            yield ("." * node.level) + (node.module or "")
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def test_library_proper_never_imports_the_course_layer():
    files = [p for name in PROPER for p in ((LIBRARY / name).rglob("*.py") if (LIBRARY / name).is_dir()
                                           else [LIBRARY / name])]
    assert len(files) > 20
    offenders = [(str(f.relative_to(LIBRARY)), m) for f in files for m in _imports(f)
                 if "course" in m.split(".")]
    assert not offenders, f"library modules import the course layer: {offenders}"


def test_one_exercise_module_per_notebook():
    notebooks = sorted(p.name[:2] for p in (LIBRARY.parent / "notebooks").glob("0[1-9]*.ipynb"))
    modules = {p.stem[2:] for p in (LIBRARY / "course").glob("ex[0-9][0-9].py")}
    missing = [n for n in notebooks if n not in modules]
    assert not missing, f"notebooks without an exercise module npu_lab/course/exNN.py: {missing}"


def test_previous_model_records_load():
    claims = load_previous_model_claims()
    assert list(claims.columns) == ["claim", "article", "model", "verdict"] and len(claims) >= 10
    fit = load_previous_model_fit()
    assert set(fit["fitted"]) == {"launch_overhead_us", "block_dispatch_us", "scalar_ub_access_cycles"}
    assert 0 < fit["mape_pct"] < 5


def test_scheduling_is_host_side():
    """npu_lab.sched needs no simulator: it imports neither sim, lang nor kernels (issue 19 §2)."""
    files = list((LIBRARY / "sched").rglob("*.py"))
    assert files
    offenders = [(f.name, m) for f in files for m in _imports(f)
                 if any(part in m.split(".") for part in ("sim", "lang", "kernels"))]
    assert not offenders, offenders
