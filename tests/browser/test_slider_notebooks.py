"""The course's slider explorers in a real browser (``make test-browser``; marker ``browser``).

- ``04_fused_kernel.ipynb`` in JupyterLab and in Voila: run everything, move the
  ``TileSweepExplorer``'s "tileS" slider with the keyboard, wait for the latency plot to
  change, and check the highlighted point against ``simulate_moe_gating``.
- ``03_dynamic_tiling.ipynb`` in JupyterLab: move the ``UbBudgetExplorer``'s "E" slider and
  check the stacked bar's "scores" segment against ``moe_ub_budget``.

Every expected number is computed here with the library, in the test process. The servers
serve a scratch copy of the notebooks (the committed files are never touched) and are shut
down, kernels included, when the test ends, pass or fail. Screenshots before and after each
slider move go to the folder printed at the end of the run (``$NPU_LAB_SCREENSHOTS`` to
choose it).
"""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import pytest

from npu_lab import get_preset
from npu_lab.data import load_article_tile_sweep
from npu_lab.kernels.moe_gating import calculate_moe_gating_tiling, moe_ub_budget, simulate_moe_gating, sweep
from npu_lab.kernels.moe_gating.sweep import candidate_tile_sizes
from npu_lab.course.explorers import TileSweepExplorer, UbBudgetExplorer

from . import harness as h

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NB_FUSED = "04_fused_kernel.ipynb"
NB_TILING = "03_dynamic_tiling.ipynb"
REL = 1e-9  # the numbers travel as JSON doubles: only float formatting could differ

# TileSweepExplorer(chip="article") in notebook 04, i.e. its defaults (checked below).
FUSED = dict(B=1, S=1024, E=64, K=2, version="v1", chip="article")
# UbBudgetExplorer() in notebook 03: its defaults (checked below).
BUDGET = dict(B=1, S=1024, E=64, K=2, version="v2", chip="ascend-910b2")


def _defaults(cls) -> dict:
    return {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


def test_expected_explorer_defaults():
    """The constants above are what the notebooks' explorers start with (no browser: runs in
    ``make test``, so a changed default fails fast and names itself)."""
    for cls, want in ((TileSweepExplorer, FUSED), (UbBudgetExplorer, BUDGET)):
        got = _defaults(cls)
        assert {k: got[k] for k in want} == want, cls.__name__


def fused_latency_us(tile_s: int) -> float:
    c = FUSED
    return simulate_moe_gating(c["B"], c["S"], c["E"], c["K"], version=c["version"], hw=c["chip"],
                               tile_s=tile_s).latency_us


def fused_sweep() -> tuple[list[int], list[float]]:
    """The explorer's "model" curve: the sweep over its candidate tile sizes."""
    c = FUSED
    table = sweep(c["version"], c["B"], c["S"], c["E"], c["K"], get_preset(c["chip"]),
                  candidate_tile_sizes(c["S"], TileSweepExplorer.MAX_TILE_S))
    table = table.dropna(subset=["latency_us"])
    return [int(t) for t in table["tileS"]], [float(v) for v in table["latency_us"]]


def scores_kb(E: int) -> list[float]:
    """The "scores" segment of the UB bar at E, in the figure's unit (KB = bytes / 1024): one
    value for the host rule's tile (tileBS points), one for the largest tile (ubCapacity)."""
    c = BUDGET
    hw = get_preset(c["chip"])
    tiling = calculate_moe_gating_tiling(c["B"], c["S"], E, c["K"], hw, version=c["version"])

    def kb(points: int) -> float:
        (scores,) = [b for b in moe_ub_budget(c["version"], points, E, c["K"], hw.block_bytes)
                     if b.name == "scores"]
        return scores.total_bytes / 1024

    return [kb(tiling.tileBS), kb(tiling.ubCapacity)]


@pytest.fixture
def notebook_dir(tmp_path) -> Path:
    """A scratch copy of the two notebooks, served instead of the committed files."""
    return h.copy_notebooks(NOTEBOOKS, tmp_path / "notebooks", [NB_TILING, NB_FUSED])


def _open(app: str, notebook: str, folder: Path, page, lab_server, voila_server):
    if app == "lab":
        srv = lab_server(folder)
        errors = h.open_notebook_and_run_all(page, srv.url, srv.token, notebook)
    else:
        srv = voila_server(folder / notebook)
        errors = h.open_voila(page, srv.url, allowed_errors=h.expected_errors(folder / notebook))
    assert errors == [], f"error outputs: {errors}\nserver log:\n{srv.log_tail()}"
    return srv


def _explorer_plot(page, slider):
    """The plot of the explorer that owns ``slider``, scrolled into view (Voila draws a
    FigureWidget only once it is visible)."""
    explorer = h.output_of(page, slider)
    h.scroll_into_view(explorer)
    return h.plot_in(explorer)


def _trace(data: list[dict], i: int, key: str) -> list:
    return list(data[i].get(key) or [])


@pytest.mark.browser
@pytest.mark.parametrize("app", ["lab", "voila"])
def test_tile_s_slider_moves_latency_point(app, notebook_dir, page, shots, lab_server, voila_server):
    t0 = time.monotonic()
    print(f"screenshots: {shots}")
    _open(app, NB_FUSED, notebook_dir, page, lab_server, voila_server)
    with h.screenshot_on_failure(page, shots, f"04-{app}"):
        _move_tile_s(app, page, shots, t0)


def _move_tile_s(app, page, shots, t0) -> None:
    slider = h.find_slider(page, "tileS")
    plot = _explorer_plot(page, slider)
    start = int(h.slider_value(slider))
    assert start == 8, "notebook 04 leaves the explorer at tileS=8"
    # The state the notebook leaves the explorer in has reached the page.
    before = h.wait_for_plot(page, "(d, v) => d.length === 3 && d[1].x && d[1].x.length === 1 && d[1].x[0] === v",
                             plot=plot, arg=start)
    assert [t.get("name") for t in before] == list(TileSweepExplorer.TRACE_NAMES)
    assert _trace(before, 1, "x") == [start]
    assert _trace(before, 1, "y") == pytest.approx([fused_latency_us(start)], rel=REL)
    sweep_x, sweep_y = fused_sweep()
    article = load_article_tile_sweep()
    assert _trace(before, 0, "x") == sweep_x, "the model curve is not the library's sweep"
    assert _trace(before, 0, "y") == pytest.approx(sweep_y, rel=REL)
    assert _trace(before, 2, "x") == [int(t) for t in article["tile_s"]]
    assert _trace(before, 2, "y") == pytest.approx([float(v) for v in article["latency_us"]], rel=REL)
    h.screenshot(page, shots, f"04-{app}-tileS-{start}-before", show=plot)

    h.press_slider_key(page, slider, "ArrowRight", times=1)
    new = start + 1
    changed = h.wait_for_plot_change(page, before, plot=plot)
    # One batch_update moves the point; wait on the final state all the same.
    after = h.wait_for_plot(page, "(d, v) => d[1].x && d[1].x.length === 1 && d[1].x[0] === v",
                            plot=plot, arg=new)
    h.wait_for_slider_value(page, slider, new)
    h.screenshot(page, shots, f"04-{app}-tileS-{new}-after", show=plot)

    assert changed[1] != before[1]
    assert _trace(after, 1, "x") == [new]
    assert _trace(after, 1, "y") == pytest.approx([fused_latency_us(new)], rel=REL)
    assert _trace(after, 1, "y") != _trace(before, 1, "y")
    assert _trace(after, 0, "x") == sweep_x and _trace(after, 0, "y") == pytest.approx(sweep_y, rel=REL)
    print(f"04 {app}: tileS {start} -> {new}: {_trace(before, 1, 'y')[0]:.3f} -> {_trace(after, 1, 'y')[0]:.3f} us;"
          f" {time.monotonic() - t0:.1f} s; console errors: {page.npu_console_errors}")


@pytest.mark.browser
def test_e_slider_moves_ub_budget_bar(notebook_dir, page, shots, lab_server, voila_server):
    t0 = time.monotonic()
    print(f"screenshots: {shots}")
    _open("lab", NB_TILING, notebook_dir, page, lab_server, voila_server)
    with h.screenshot_on_failure(page, shots, "03-lab"):
        _move_e(page, shots, t0)


def _move_e(page, shots, t0) -> None:
    slider = h.find_slider(page, "E")
    plot = _explorer_plot(page, slider)
    start = int(h.slider_value(slider))
    assert start == BUDGET["E"], "notebook 03 leaves the explorer at E=64"
    names = list(UbBudgetExplorer.BUFFER_NAMES)
    assert names[0] == "scores"
    before = h.wait_for_plot(page, "(d, v) => d.length > 0 && d[0].x && d[0].x.length === 2"
                                   " && Math.abs(d[0].x[0] - v[0]) <= 1e-9 * v[0]",
                             plot=plot, arg=scores_kb(start))
    assert [t.get("name") for t in before][:len(names)] == names
    assert _trace(before, 0, "x") == pytest.approx(scores_kb(start), rel=REL)
    h.screenshot(page, shots, f"03-lab-E-{start}-before", show=plot)

    h.press_slider_key(page, slider, "ArrowRight", times=1)
    new = start + 1
    h.wait_for_plot_change(page, before, plot=plot)
    expected = scores_kb(new)
    after = h.wait_for_plot(page, "(d, v) => d[0].x && d[0].x.length === 2"
                                  " && v.every((e, i) => Math.abs(d[0].x[i] - e) <= 1e-9 * e)",
                            plot=plot, arg=expected)
    h.wait_for_slider_value(page, slider, new)
    h.screenshot(page, shots, f"03-lab-E-{new}-after", show=plot)

    assert expected != scores_kb(start), "the test needs a move that changes the bar"
    assert _trace(after, 0, "x") == pytest.approx(expected, rel=REL)
    print(f"03 lab: E {start} -> {new}: scores {_trace(before, 0, 'x')} -> {_trace(after, 0, 'x')} KB;"
          f" {time.monotonic() - t0:.1f} s; console errors: {page.npu_console_errors}")
