"""ipywidgets explorers: controls that re-run a kernel in timing-only mode and redraw a plotly
``FigureWidget`` in place (the explorers' convention, npu_lab/course/explorers). Thin: the simulation is the library's, the figure is
:mod:`npu_lab.course.viz`'s; this module only wires controls to them.

* :func:`buffers_explorer` — the scaled-add kernel with 1 or 2 buffers, a tile-count slider and a
  chip dropdown: its timeline, latency and bottleneck verdict.
"""

from __future__ import annotations

import html
import math
import time

import ipywidgets as W

from ..hardware import HardwareSpec, HardwareSpecError
from ..kernels.scaled_add import scaled_add
from ..lang import UbOverflowError
from ..presets import get_preset, list_presets
from ..sim import SimulationError
from .explorers._base import warm_when_idle
from .viz import sync_after_move, sync_widget_state, timeline_figure, update_timeline_figure

__all__ = ["BuffersExplorer", "buffers_explorer", "tile_len_for"]

# Errors a learner can provoke with the controls: shown in the status line, never raised.
_EXPECTED_ERRORS = (ValueError, UbOverflowError, HardwareSpecError, SimulationError)
_CACHE_SIZE = 256   # configurations kept per explorer (a timeline of 1M elements is ~100 KB)


def tile_len_for(n: int, hw: HardwareSpec, tiles_per_core: int) -> int:
    """The scaled-add ``tile_len`` (elements, a multiple of 8 = 32 bytes) that cuts each core's
    share of ``n`` elements into ``tiles_per_core`` tiles."""
    if isinstance(tiles_per_core, bool) or not isinstance(tiles_per_core, int) or tiles_per_core < 1:
        raise ValueError(f"tiles per core must be a whole number >= 1, got {tiles_per_core!r}")
    per_core = math.ceil(n / hw.vector_cores)
    return max(8, math.ceil(math.ceil(per_core / tiles_per_core) / 8) * 8)


def smallest_tiles_per_core(n: int, hw: HardwareSpec, num_buffers: int) -> int:
    """The fewest tiles per core whose scaled-add tiles (3 float32 queues x ``num_buffers``) fit UB."""
    largest = max(8, hw.ub_usable_bytes // (3 * num_buffers * 4) // 8 * 8)
    tiles = max(1, math.ceil(math.ceil(n / hw.vector_cores) / largest))
    while tile_len_for(n, hw, tiles) > largest:     # rounding to 8 may need one more
        tiles += 1
    return tiles


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _chip_options() -> list[tuple[str, str]]:
    options = []
    for name in list_presets():
        try:
            spec = get_preset(name)
        except (FileNotFoundError, HardwareSpecError):
            continue  # e.g. the fitted preset before its data file is generated
        options.append((f"{name} ({spec.vector_cores} vector cores)", name))
    return options


class BuffersExplorer(W.VBox):
    """The explorer widget. Controls: ``.buffers`` (ToggleButtons 1 / 2), ``.tiles`` (IntSlider,
    tiles per core), ``.chip`` (Dropdown of presets). Output: ``.figure`` (a timeline
    FigureWidget), ``.status`` (HTML: latency, bottleneck, or the library's error message).
    ``.timeline`` is the last successful run, ``.error`` the last error message (or None),
    ``.last_update_s`` the wall time of the last redraw."""

    def __init__(self, n: int, hw: HardwareSpec | str, buffers: int, tiles: int, max_tiles: int,
                 max_cores: int):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n (elements) must be a whole number >= 1, got {n!r}")
        chip_options = _chip_options()
        self._custom = {}
        if isinstance(hw, HardwareSpec):
            key = f"{hw.name} (custom)"
            self._custom[key] = hw
            chip_options = [(key, key)] + chip_options
            chip_value = key
        else:
            spec = get_preset(hw)
            keys = [key for _, key in chip_options if get_preset(key).name == spec.name]
            if keys:
                chip_value = keys[0]
            else:  # a preset missing from the list (its data file failed to load, say)
                chip_value = f"{spec.name} (custom)"
                self._custom[chip_value] = spec
                chip_options = [(chip_value, chip_value)] + chip_options
        self.n = n
        self.buffers = W.ToggleButtons(options=[("1 buffer", 1), ("2 buffers", 2)], value=buffers,
                                       description="queues:", style={"button_width": "90px"})
        self.tiles = W.IntSlider(value=tiles, min=1, max=max_tiles, description="tiles/core",
                                 continuous_update=True)
        self.chip = W.Dropdown(options=chip_options, value=chip_value, description="chip:")
        self.status = W.HTML()
        self.error = None
        self.last_update_s = 0.0
        self._runs = {}
        first, error = self._run()
        if first is None:
            raise ValueError(f"the explorer's starting point does not run: {error}")
        self.timeline = first
        self.figure = timeline_figure(first, widget=True, max_cores=max_cores, title=self._title())
        self._show(first)
        for control in (self.buffers, self.tiles, self.chip):
            control.observe(self._on_change, names="value")
        super().__init__([W.HBox([self.buffers, self.chip]), self.tiles, self.status, self.figure])

    # ---- the slider -> redraw path ----------------------------------------------------------
    def _spec(self) -> HardwareSpec:
        return self._custom.get(self.chip.value) or get_preset(self.chip.value)

    def _title(self) -> str:
        b, t = self.buffers.value, self.tiles.value
        return f"scaled_add, n = {self.n:,}, {_plural(b, 'buffer')}, {_plural(t, 'tile')}/core"

    def _run(self, buffers: int | None = None, *, tiles: int | None = None, chip: str | None = None):
        """(timeline, None) or (None, the library's error message) for the current controls (or
        the ``tiles`` / ``chip`` given); cached per (chip, tiles, buffers), so a slider moved back
        and forth (and the status line's other buffer count) simulates each configuration once."""
        key = (chip or self.chip.value, tiles or self.tiles.value, buffers or self.buffers.value)
        hit = self._runs.get(key)
        if hit is None:
            hit = self._runs[key] = self._simulate(*key)
            if len(self._runs) > _CACHE_SIZE:
                self._runs.pop(next(iter(self._runs)))     # the oldest entry
        return hit

    def _simulate(self, chip: str, tiles: int, num_buffers: int):
        hw = self._custom.get(chip) or get_preset(chip)
        tile_len = tile_len_for(self.n, hw, tiles)
        need = 3 * num_buffers * tile_len * 4          # 3 float32 queues x buffers
        if need > hw.ub_usable_bytes:   # say it in the control's unit: tiles per core
            return None, (f"{tiles} tile(s)/core make tiles of {tile_len:,} elements: "
                          f"3 queues x {num_buffers} buffer(s) x {tile_len:,} x 4 B = {need:,} B, more than "
                          f"the {hw.ub_usable_bytes:,} B UB of {hw.name}. The smallest tiles/core that fits: "
                          f"{smallest_tiles_per_core(self.n, hw, num_buffers)}.")
        try:
            _, t = scaled_add(self.n, None, timing_only=True, hw=hw, tile_len=tile_len,
                              num_buffers=num_buffers)
        except _EXPECTED_ERRORS as exc:
            return None, str(exc)
        return t, None

    def _show(self, t) -> None:
        other_b = 3 - self.buffers.value
        other, _ = self._run(other_b)
        verdict, evidence = t.bottleneck()
        hw = t.hw
        tile_len = tile_len_for(self.n, hw, self.tiles.value)
        compare = (f"{_plural(other_b, 'buffer')}: {other.total_us:.2f} \u00b5s" if other is not None
                   else f"{_plural(other_b, 'buffer')}: does not fit")
        self.status.value = (
            f"<b>latency {t.total_us:.2f} \u00b5s</b> ({compare}) \u00b7 tile {tile_len} elements "
            f"= {tile_len * 4 / 1024:.1f} KB \u00b7 <b>{verdict}</b>-bound: {html.escape(evidence)}")

    def _on_change(self, change=None) -> None:
        start = time.perf_counter()
        t, self.error = self._run()
        if t is None:
            self.status.value = (f"<span style='color:#b00020'><b>does not run:</b> "
                                 f"{html.escape(self.error)}</span>")
            self.figure.layout.title.text = f"{self._title()}: does not fit (showing the last run that did)"
        else:
            self.timeline = t
            update_timeline_figure(self.figure, t, title=self._title())
            self._show(t)
        # for pages that build views later (Voila): now after a change from code, after a pause in
        # the browser's moves
        sync_after_move(self, lambda: sync_widget_state(self.figure), change)
        warm_when_idle(self, self._neighbours())     # the next moves' runs, while the kernel is idle
        self.last_update_s = time.perf_counter() - start

    def _repr_mimebundle_(self, **kwargs):
        sync_widget_state(self.figure)
        warm_when_idle(self, self._neighbours())
        return super()._repr_mimebundle_(**kwargs)

    def _neighbours(self):
        """Runs the next moves need (the tiles slider one to three steps away, both buffer counts):
        run while the kernel is idle (:func:`~npu_lab.course.explorers._base.warm_when_idle`)."""
        chip, here = self.chip.value, self.tiles.value
        for step in (1, -1, 2, -2, 3, -3):
            tiles = here + step
            if self.tiles.min <= tiles <= self.tiles.max:
                for b in (self.buffers.value, 3 - self.buffers.value):
                    yield lambda t=tiles, b=b: self._run(b, tiles=t, chip=chip)

    def redraw(self) -> None:
        """Re-run and redraw with the current control values."""
        self._on_change()


def buffers_explorer(n: int = 1 << 20, hw: HardwareSpec | str = "ascend-910b2", *, buffers: int = 2,
                     tiles: int = 8, max_tiles: int = 32, max_cores: int = 4) -> BuffersExplorer:
    """An explorer of the scaled-add kernel (z = alpha·x + y on ``n`` float32 elements): choose
    1 or 2 buffers per queue, how many tiles each core's share is cut into, and the chip; the
    timeline of the first ``max_cores`` cores and a status line (latency, the other buffer count's
    latency, the bottleneck verdict) redraw in place. Choices that do not fit (a tile too big for
    the chip's Unified Buffer) show the library's error message instead of a timeline update.

    Runs are timing-only (no numerics), so a slider move costs milliseconds. Display the
    returned widget; set ``.buffers.value``, ``.tiles.value`` or ``.chip.value`` from code to
    drive it."""
    if buffers not in (1, 2):
        raise ValueError(f"buffers must be 1 or 2, got {buffers!r}")
    if isinstance(max_tiles, bool) or not isinstance(max_tiles, int) or max_tiles < 1:
        raise ValueError(f"max_tiles must be a whole number >= 1, got {max_tiles!r}")
    if not isinstance(tiles, int) or not 1 <= tiles <= max_tiles:
        raise ValueError(f"tiles must be a whole number from 1 to max_tiles={max_tiles}, got {tiles!r}")
    if isinstance(hw, str):
        hw = get_preset(hw).name
    elif not isinstance(hw, HardwareSpec):
        raise TypeError(f"hw must be a preset name or a HardwareSpec, got {type(hw).__name__}")
    return BuffersExplorer(n, hw, buffers, tiles, max_tiles, max_cores)
