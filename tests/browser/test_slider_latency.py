"""Keypress -> plot redraw for EVERY slider of every slider notebook, in JupyterLab in a real
headless Chromium (``make test-browser``; marker ``browser``). Issue 16 §5.

For each notebook: open a scratch copy, run all cells, then for each explorer output (an output
holding both a slider and a plotly graph) and each slider in it, press ArrowRight a few times
(ArrowLeft once a slider stops at its end) and time every press in the page's own clock: from the
keydown on the slider's handle until the explorer's plot data differ from before
(:func:`harness.keypress_to_plot_ms`: the kernel ran the update, the widget message came back and
plotly took the new data). Playwright's round trips are not in the figure. A table of every slider
(median and worst, and how long the kernel took to answer) is printed at the end of the session.

Goal (issue 16): a median of at most 100 ms and a worst of at most 200 ms per notebook, on a quiet
machine. Asserted: a median of at most 250 ms and a worst of at most 600 ms. The allowance is for a
loaded CI machine (2 cores shared by several jobs: the kernel, JupyterLab's server and Chromium
then wait for a core, which measured 2-3x the quiet figures); a regression to a slider that
simulates on every move (300-1000 ms on a quiet machine) still fails. The table says which goal
each notebook met.

Notebooks 11-14 are driven the same way with their dropdowns too (a key press on a dropdown picks
the next option), twice per control instead of three times (the run's time budget, see
:data:`NEW_NOTEBOOKS`).

Run one notebook: ``PYTHONPATH=$PWD .venv/bin/python -m pytest -m browser -q -s tests/browser -k 03_``.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from . import harness as h

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
#: every notebook that displays an explorer with sliders (08b, 07b, 10 have none): 01-09 drive
#: every slider MOVES times; 11-14 (:data:`NEW_NOTEBOOKS`) every slider and dropdown, fewer times
SLIDER_NOTEBOOKS = ("01_hardware_model.ipynb", "02_discrete_pipeline.ipynb", "03_dynamic_tiling.ipynb",
                    "04_fused_kernel.ipynb", "05_double_buffering.ipynb", "06_vectorization.ipynb",
                    "07_tuning.ipynb", "09_cube_and_3d_grid.ipynb")
#: notebooks 11-14: their explorers' sliders and dropdowns (a key press on a dropdown chooses the
#: next option: for the learner as slow a path as a slider's). Each control is pressed
#: NEW_MOVES times, not MOVES: 25 controls at 3 presses would add ~3 minutes to a run that must
#: stay under ~7 on 2 cores; every control still gets a first visit and a second press (the two
#: paths a move takes: a configuration the idle-time warm-up prepared or one it did not reach).
NEW_NOTEBOOKS = ("11_kv_cache_decode.ipynb", "12_sparse_kv.ipynb", "13_balance_and_monitor.ipynb",
                 "14_production_routing.ipynb")
MOVES = 3                 # timed presses per slider (01-09)
NEW_MOVES = 2             # timed presses per slider or dropdown (11-14)
GOAL_MEDIAN_MS, GOAL_WORST_MS = 100, 200          # issue 16, a quiet machine
BOUND_MEDIAN_MS, BOUND_WORST_MS = 250, 600        # asserted: a loaded CI machine (see the docstring)
#: the keys that step a control forward and back
_KEYS = {"slider": ("ArrowRight", "ArrowLeft"), "dropdown": ("ArrowDown", "ArrowUp")}

#: rows of the summary table, filled by the tests, printed by conftest's terminal summary
RESULTS: list[dict] = []


def _explorer_outputs(page):
    """Outputs holding a slider and a plotly graph: the explorers, in notebook order."""
    return (page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-slider"))
            .filter(has=page.locator(".js-plotly-plot")))


def _time_control(page, control, plot, notebook: str, moves: int, kind: str = "slider") -> list[dict]:
    """``moves`` timed presses; [] when the control moves but its plot does not change (a slider
    that only changes the status line, e.g. B in the UB budget: the bar is per tile)."""
    forward, back = _KEYS[kind]
    times, key = [], forward
    for _ in range(moves):
        for attempt in range(2):   # a control at its end does not move: turn round once
            readout = h.control_value(control)
            try:
                times.append(h.keypress_to_plot_ms(page, control, plot, key, notebook_path=notebook,
                                                   timeout=8 if attempt == 0 else 15))
                break
            except TimeoutError:
                if h.control_value(control) != readout:      # it moved, the plot did not change
                    return times
                if attempt:
                    raise
                key = back if key == forward else forward
    return times


def _controls(out, notebook: str):
    """(kind, locator) of the controls to press in an explorer output: its sliders, and for
    :data:`NEW_NOTEBOOKS` its dropdowns too."""
    sliders = out.locator(".widget-slider")
    found = [("slider", sliders.nth(i)) for i in range(sliders.count())]
    if notebook in NEW_NOTEBOOKS:
        dropdowns = out.locator(".widget-dropdown")
        found += [("dropdown", dropdowns.nth(i)) for i in range(dropdowns.count())]
    return found


@pytest.mark.browser
@pytest.mark.parametrize("notebook", SLIDER_NOTEBOOKS + NEW_NOTEBOOKS)
def test_keypress_to_plot(notebook, tmp_path, page, shots, lab_server):
    if not (NOTEBOOKS / notebook).exists():
        pytest.skip(f"{notebook} is not released")
    moves = NEW_MOVES if notebook in NEW_NOTEBOOKS else MOVES
    folder = h.copy_notebooks(NOTEBOOKS, tmp_path / "notebooks", [notebook])
    srv = lab_server(folder)
    errors = h.open_notebook_and_run_all(page, srv.url, srv.token, notebook)
    assert errors == [], f"error outputs: {errors}\nserver log:\n{srv.log_tail()}"
    all_ms, unrendered = [], []
    with h.screenshot_on_failure(page, shots, f"latency-{notebook}"):
        outputs = _explorer_outputs(page)
        assert outputs.count() >= 1, f"{notebook}: no explorer (slider + plot) found"
        for j in range(outputs.count()):
            out = outputs.nth(j)
            plot = out.locator(".js-plotly-plot").first
            h.scroll_into_view(plot)
            try:
                h.read_plotly_data(page, plot=plot)            # drawn before the first press
            except Exception:       # noqa: BLE001 - playwright's timeout: the plot never got its data
                h.screenshot(page, shots, f"latency-{notebook}-explorer{j}-unrendered", show=out)
                unrendered.append(j)
                continue                                       # the other explorers are still timed
            for kind, control in _controls(out, notebook):
                label = control.locator(".widget-label").inner_text().strip()
                h.scroll_into_view(control)
                h.read_plotly_data(page, plot=plot)
                try:
                    runs = _time_control(page, control, plot, notebook, moves, kind)
                except TimeoutError as exc:
                    raise AssertionError(f"{notebook}: explorer {j}, {kind} {label!r}: {exc}") from None
                if not runs:
                    RESULTS.append(dict(notebook=notebook, explorer=j, slider=label, median_ms=None, worst_ms=None,
                                        kernel_ms=None, bytes=0, load=os.getloadavg()[0]))
                    continue
                ms = [r["total_ms"] for r in runs]
                all_ms += ms
                kernel = [r["first_reply_ms"] for r in runs if r["first_reply_ms"] is not None]
                RESULTS.append(dict(notebook=notebook, explorer=j, slider=label, median_ms=statistics.median(ms),
                                    worst_ms=max(ms), kernel_ms=statistics.median(kernel) if kernel else None,
                                    bytes=statistics.median(r["reply_bytes"] for r in runs),
                                    load=os.getloadavg()[0]))
    assert not unrendered, (f"{notebook}: the plot of explorer(s) {unrendered} (in notebook order) has no data "
                            f"{h.UI_TIMEOUT:.0f} s after the notebook ran: its FigureWidget drew nothing")
    median, worst = statistics.median(all_ms), max(all_ms)
    print(f"{notebook}: keypress -> plot over {len(all_ms)} presses: median {median:.0f} ms, worst {worst:.0f} ms "
          f"(goal <= {GOAL_MEDIAN_MS} / {GOAL_WORST_MS} ms; load average {os.getloadavg()[0]:.1f})")
    assert median <= BOUND_MEDIAN_MS and worst <= BOUND_WORST_MS, (
        f"{notebook}: keypress -> plot median {median:.0f} ms, worst {worst:.0f} ms; bound {BOUND_MEDIAN_MS} / "
        f"{BOUND_WORST_MS} ms (goal {GOAL_MEDIAN_MS} / {GOAL_WORST_MS})")


def summary_lines() -> list[str]:
    """The table printed after the run: one row per slider, then one per notebook."""
    if not RESULTS:
        return []
    lines = ["keypress -> plot data changed, in the page's clock (ms); kernel: keypress -> first reply",
             f"{'notebook':<30} {'#':>1} {'slider':<14} {'median':>7} {'worst':>6} {'kernel':>7} {'bytes':>7} {'load':>5}"]
    for r in RESULTS:
        kernel = "" if r["kernel_ms"] is None else f"{r['kernel_ms']:.0f}"
        if r["median_ms"] is None:
            lines.append(f"{r['notebook']:<30} {r['explorer']:>1} {r['slider'][:14]:<14}  (the plot does not depend on it)")
            continue
        lines.append(f"{r['notebook']:<30} {r['explorer']:>1} {r['slider'][:14]:<14} {r['median_ms']:>7.0f} "
                     f"{r['worst_ms']:>6.0f} {kernel:>7} {r['bytes']:>7.0f} {r['load']:>5.1f}")
    by_nb: dict[str, list[dict]] = {}
    for r in RESULTS:
        if r["median_ms"] is not None:
            by_nb.setdefault(r["notebook"], []).append(r)
    lines.append(f"per notebook (medians of the sliders' medians, worst of all presses); goal "
                 f"<= {GOAL_MEDIAN_MS} / {GOAL_WORST_MS} ms")
    for nb, rows in by_nb.items():
        med = statistics.median(r["median_ms"] for r in rows)
        worst = max(r["worst_ms"] for r in rows)
        met = "goal met" if med <= GOAL_MEDIAN_MS and worst <= GOAL_WORST_MS else "over the goal"
        lines.append(f"  {nb:<30} median {med:5.0f}  worst {worst:5.0f}  {met}")
    return lines
