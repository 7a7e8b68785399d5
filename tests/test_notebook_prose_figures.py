"""Figures typed into the notebooks' prose, checked against the library (issue 11).

nbval compares code outputs only, and `make notebooks` re-blesses those, so a number written in
a markdown cell goes stale silently when the model changes. Each entry below finds one figure in
one notebook's markdown (a regex capturing the number, matched on whitespace-normalised text),
recomputes it from the library and compares within a tolerance. When the model changes on
purpose, the failing entry says which sentence to rewrite.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from npu_lab import get_preset
from npu_lab.kernels.moe_gating import autotune, simulate_moe_gating

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
SHAPE = (1, 1024, 64, 2)


@functools.lru_cache(maxsize=None)
def _markdown(notebook: str) -> str:
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]
    return "\n\n".join(" ".join("".join(c["source"]).split()) for c in cells if c["cell_type"] == "markdown")


def _busy(version: str, chip: str, pipe: str) -> float:
    t = simulate_moe_gating(*SHAPE, version=version, hw=chip, tile_s=8).timeline
    return float(t.busy_us_by_pipe()[pipe])


def _fused_vs_discrete(chip: str) -> float:
    discrete = simulate_moe_gating(*SHAPE, version="discrete", hw=chip).latency_us
    return discrete / autotune(*SHAPE, version="v3", hw=chip).latency_us


def _db_gain_percent(chip: str) -> float:
    lat = {v: simulate_moe_gating(*SHAPE, version=v, hw=chip, tile_s=8).latency_us for v in ("v1", "v2")}
    return 100 * (1 - lat["v2"] / lat["v1"])


def _discrete_extra_kb() -> float:
    B, S, E, K = SHAPE
    moved = simulate_moe_gating(*SHAPE, version="discrete").timeline.hbm_bytes
    return (moved - (B * S * E * 4 + B * S * K * 8)) / 1024


def _article_formula_largest_e(K: int = 2, tile_s: int = 8, ub_bytes: int = 256 * 1024) -> int:
    return (ub_bytes // tile_s - K * 8) // 4


def _break_even(target: float) -> float:
    from npu_lab.exercises_tuning import exp_break_even_cycles

    return exp_break_even_cycles("ascend-910b2", 4096, target)


def _fast_exp_instructions() -> int:
    from npu_lab.exercises_tuning import fast_exp_instructions

    return fast_exp_instructions()


ARTICLE = functools.partial(get_preset, "article")
MISLABELLED_800KB = pytest.mark.xfail(
    strict=False, reason="notebook 02 calls the chain's total (819,200 B = 800 KB) 'the extra bytes'; the "
                         "extra over the minimum is 540,672 B = 528 KB (issue 11: reported for the notebook editor)")

# (id, notebook, regex with one group = the number, the library's figure, relative tolerance)
FIGURES = [
    pytest.param("02", r"the extra bytes cost little time: ([\d.]+) KB", _discrete_extra_kb, 0.05,
                 id="02-extra-bytes-kb", marks=MISLABELLED_800KB),
    pytest.param("03", r"keep tileS = 8 up to E = (\d+)", _article_formula_largest_e, 0, id="03-article-e-8188"),
    pytest.param("03", r"= (\d+) B per point for E = 64, K = 2", lambda: 64 * 4 + 2 * 8, 0, id="03-bytes-per-point"),
    pytest.param("03", r"about (\d+) % more in every row", lambda: 100 * (0.3 * 1024 / (64 * 4 + 2 * 8) - 1), 0.08,
                 id="03-ub-column-13pct"),
    pytest.param("05", r"the gain is about (\d+) %, below the article's band", lambda: _db_gain_percent("article"),
                 0.08, id="05-article-db-gain"),
    pytest.param("06", r"about (\d+) µs of scalar heap work", lambda: _busy("v1", "ascend-910b2", "S"), 0.03,
                 id="06-scalar-heap-us"),
    pytest.param("06", r"take about (\d+) µs of vector time", lambda: _busy("v3", "ascend-910b2", "V"), 0.05,
                 id="06-vector-us"),
    pytest.param("06", r"some (\d+)× less than the scalar work",
                 lambda: _busy("v1", "ascend-910b2", "S") / _busy("v3", "ascend-910b2", "V"), 0.05,
                 id="06-scalar-over-vector"),
    pytest.param("06", r"polynomial costs (\d+) × \(16 to issue", _fast_exp_instructions, 0, id="06-fast-exp-14"),
    pytest.param("06", r"2× holds if the exact Exp costs about (\d+) cycles per repeat", lambda: _break_even(2.0),
                 0.05, id="06-exp-cycles-for-2x"),
    pytest.param("06", r"model gives about ([\d.]+)× on the 910B2 preset", lambda: _fused_vs_discrete("ascend-910b2"),
                 0.05, id="06-fused-vs-discrete-910b2"),
    pytest.param("06", r"about (\d+)× on the fitted 'article' preset", lambda: _fused_vs_discrete("article"), 0.1,
                 id="06-fused-vs-discrete-article"),
    pytest.param("07", r"Dispatch per block, about ([\d.]+) µs", lambda: ARTICLE().block_dispatch_us, 0.05,
                 id="07-fitted-dispatch"),
    pytest.param("07", r"Launch overhead, about (\d+) µs against", lambda: ARTICLE().launch_overhead_us, 0.05,
                 id="07-fitted-launch"),
    pytest.param("07", r"Scalar UB access, about (\d+) cycles", lambda: ARTICLE().scalar_ub_access_cycles, 0.05,
                 id="07-fitted-ub-access"),
    pytest.param("07", r"some (\d+) ns for one scalar read",
                 lambda: ARTICLE().scalar_ub_access_cycles / ARTICLE().clock_ghz, 0.05, id="07-ub-access-ns"),
]

_NAMES = {p.name.split("_")[0]: p.stem for p in NOTEBOOKS.glob("*.ipynb")}


@pytest.mark.parametrize("notebook, pattern, compute, rel_tol", FIGURES)
def test_prose_figure_matches_the_library(notebook, pattern, compute, rel_tol):
    text = _markdown(_NAMES[notebook])
    found = re.findall(pattern, text)
    assert len(found) == 1, (f"notebook {notebook}: expected the sentence matching {pattern!r} once, found "
                             f"{len(found)}; if the prose changed, update this entry")
    written = float(found[0])
    truth = float(compute())
    # the prose rounds: allow the rounding of the written figure plus the stated tolerance
    decimals = len(found[0].split(".")[1]) if "." in found[0] else 0
    slack = 0.5 * 10 ** -decimals + rel_tol * abs(truth)
    assert abs(written - truth) <= slack, (
        f"notebook {notebook} says {found[0]} where the library gives {truth:.4g} "
        f"({pattern!r}): rewrite the sentence or explain the change")
