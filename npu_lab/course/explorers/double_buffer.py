"""DoubleBufferExplorer: the simulated timeline of v1 / v2 / v2_bad_sync / v2c beside the
hand-made pipeline model of one core (notebook 05)."""

from __future__ import annotations

import html

import ipywidgets as W

from ...kernels.moe_gating import simulate_moe_gating
from ..pipeline_diagram import (handoff_costs, pipeline_figure, pipeline_schedule, stage_durations,
                                update_pipeline_figure)
from ..viz import _timeline_data, sync_widget_state, timeline_figure, update_timeline_figure
from ._base import _EXPECTED_ERRORS, _check_choice, _check_hw, _check_int, _error_html, _Explorer, _LRU

#: tileS values the slider offers
TILE_S_CHOICES = (1, 2, 4, 8, 16, 32, 64)
#: (label, version, pipeline_schedule keywords of the hand model)
KERNEL_CHOICES = (
    ("1 buffer (v1)", "v1", dict(buffers=1, barrier=True)),
    ("2 buffers (v2)", "v2", dict(buffers=2)),
    ("2 + bad sync", "v2_bad_sync", dict(buffers=2, barrier=True)),
    ("2 + coalesced DMA (v2c)", "v2c", dict(buffers=2)),
)


#: Largest B, S, E, K the explorer takes: a bigger shape makes thousands of tiles per core in the
#: hand-made schedule and minutes of simulation (S = 2**26: 188 s and 9 GB before this bound).
SHAPE_LIMITS = (64, 1 << 16, 4096, 64)


class DoubleBufferExplorer(_Explorer):
    """Choose tileS and the kernel; the first cores' timeline (``.figure``) and the hand model of
    one core (``.hand``: ``pipeline_schedule`` with that kernel's buffers / barrier, the stage
    times of one tile and the chip's hand-off costs) redraw in place, with both latencies in ``.status``.

    The hand model's stages: one v1 tile for v1 / v2 / v2_bad_sync (they run the same per-tile
    code), one coalesced tile for v2c (read off its own first block). ``shape`` = (B, S, E, K).
    ``max_cores``: cores drawn (1 by default: every core runs the same tiles, so core 0's rows set
    beside the hand model of one core are the comparison to make; a slider move's redraw in the
    browser costs about as much per bar drawn: two cores draw 193 bars at tileS = 8 and 513 at
    tileS = 64, and notebook 05's median press in JupyterLab went from 85-108 ms to 73-79 ms with
    one core)."""

    def __init__(self, chip: str = "ascend-910b2", version: str = "v2", tile_s: int = 8,
                 shape: tuple = (1, 1024, 64, 2), max_cores: int = 1):
        options = [(label, v) for label, v, _ in KERNEL_CHOICES]
        _check_choice("version", version, options)
        _check_choice("tile_s", tile_s, [(str(t), t) for t in TILE_S_CHOICES])
        _check_hw("chip", chip)
        if not isinstance(shape, (tuple, list)) or len(shape) != 4:
            raise ValueError(f"shape must be (B, S, E, K), got {shape!r}")
        B, S, E, K = (_check_int(n, v, 1, hi) for n, v, hi in zip("BSEK", shape, SHAPE_LIMITS))
        if K > E:
            raise ValueError(f"shape's K must be at most E, got K={K}, E={E}")
        max_cores = _check_int("max_cores", max_cores, 1, 64)
        shape = (B, S, E, K)
        self.chip, self.shape, self.max_cores = chip, tuple(shape), max_cores
        self._runs = _LRU()
        self.tile_s = W.SelectionSlider(options=TILE_S_CHOICES, value=tile_s, description="tileS")
        self.version = W.ToggleButtons(options=options, value=version, description="kernel")
        self.status = W.HTML()
        self.figure = timeline_figure(self._run("v2", 8).timeline, widget=True, max_cores=max_cores)
        self.hand = pipeline_figure({"one core": pipeline_schedule(1, 1.0, 1.0, 1.0)}, widget=True)
        self.widget = W.VBox([W.HBox([self.tile_s, self.version]), self.status, self.figure, self.hand])
        self.result = None
        self._watch(self.tile_s, self.version)
        self.update()

    def _run(self, version: str, tile_s: int):
        return self._runs.get_or((version, tile_s), lambda: simulate_moe_gating(
            *self.shape, version=version, tile_s=tile_s, hw=self._spec(self.chip)))

    def _sync_figure_state(self) -> None:
        sync_widget_state(self.figure)
        sync_widget_state(self.hand)

    def _neighbours(self):
        """Every (kernel, tileS) run, the current kernel's nearest tileS first (28 timing-only runs)."""
        here = TILE_S_CHOICES.index(self.tile_s.value)
        versions = [self.version.value] + [v for _, v, _ in KERNEL_CHOICES if v != self.version.value]
        order = sorted(range(len(TILE_S_CHOICES)), key=lambda i: abs(i - here))
        for v in versions:
            for i in order:
                yield lambda v=v, ts=TILE_S_CHOICES[i]: self._prepare(v, ts)

    def _prepare(self, version: str, tile_s: int) -> None:
        """The runs of (version, tileS); for the kernel shown, also the bars of its timeline (kept
        on the run). Only the tileS slider's bars: building a small tile's thousands of bars for
        every kernel made single idle jobs long enough to delay a move (measured in the browser)."""
        run = self._run(version, tile_s)
        self._run("v1", tile_s)
        if version == self.version.value:
            _timeline_data(run.timeline, None, self.max_cores)

    def hand_schedule(self):
        """(schedule of one core by hand, tiles per core) for the current controls."""
        version, tile_s = self.version.value, self.tile_s.value
        kw = next(k for _, v, k in KERNEL_CHOICES if v == version)
        run = self._run(version, tile_s)
        per_core = -(-run.tiling.totalTiles // self._spec(self.chip).vector_cores)
        if version == "v2c":
            first = -(-run.tiling.totalTiles // run.block_dim)     # tiles of block 0
            stages = stage_durations(run.timeline, tiles=first)
        else:
            stages = stage_durations(self._run("v1", tile_s).timeline)
        return pipeline_schedule(per_core, *stages.values(), **kw, **handoff_costs(run.timeline)), per_core

    def update(self) -> None:
        try:
            run = self._run(self.version.value, self.tile_s.value)
            by_hand, per_core = self.hand_schedule()
        except _EXPECTED_ERRORS as err:
            self.error, self.result = str(err), None
            self.status.value = _error_html(f"{self.version.value} at tileS={self.tile_s.value}", str(err))
            return
        self.error, self.result = None, run
        update_timeline_figure(self.figure, run.timeline)
        update_pipeline_figure(self.hand, {"one core": by_hand})
        self.status.value = (
            f"<b>simulator {run.latency_us:.1f} us</b> ({run.block_dim} blocks, launch "
            f"{run.timeline.launch_overhead_us:.1f} us) · by hand: {per_core} tile(s) per core in "
            f"{by_hand.ready_us.max():.1f} us · {html.escape(run.timeline.bottleneck()[0])}-bound")
