"""The decode explorer (notebook 11): sliders over batch, context length, GQA group size and the
FlashDecode S2 split; the step's time against the HBM roofline (the KV bytes it must read ÷ the
bandwidth), for v2 (no split) and the chosen version.

Timing-only runs of :func:`~npu_lab.kernels.decode.decode_attention` (every sequence at the
context length; KV heads 8, head_dim 128 as Llama-3's; query heads = 8 × the group). v4 whose
tiling does not split S2 (B·N2 >= 0.4 × cores, or a split of 1) is v2's launch with v2's tiling:
it takes v2's run (the host tiling, cheap, decides). A configuration the library refuses (a
split past the cores) shows its message in ``.status``.

Speed (a move must redraw in a blink, issue 16 §5): a forced split at a large batch is thousands
of short tasks whose key pattern repeats every ``splits`` tasks, too long a period for
``tile_loop`` to fast-forward, so one run takes 0.1-5 s of Python. Every position the sliders
offer on the 910B2 is therefore simulated once and committed (``data/decode_explorer_grid.csv``,
:func:`write_decode_grid`); the explorer checks the file against live runs of two probe
positions when it is built and ignores it when they differ (a changed cost model never shows
stale numbers: it simulates live, cached per position). Other chips simulate live.
"""

from __future__ import annotations

import functools
from pathlib import Path

import ipywidgets as W
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ...kernels.decode import decode_attention
from ...kernels.decode.tiling import decode_tiling
from ...presets import DATA_DIR, get_preset
from ..figure_widget import ExplorerFigureWidget
from ._base import (_commit_grid_csv, _DROPDOWN, _EXPECTED_ERRORS, _check_choice, _error_html, _Explorer, _LRU,
                    _checked_grid, _read_grid_csv, _Refused, _simulate_grid)

__all__ = ["DecodeExplorer", "CONTEXTS", "GROUPS", "BATCHES", "SPLITS", "KV_HEADS", "HEAD_DIM", "decode_grid",
           "write_decode_grid", "GRID_PATH"]

#: Batch sizes the slider offers (powers of two up to the tiling's 64 sequences).
BATCHES = (1, 2, 4, 8, 16, 32, 64)
#: Context lengths the slider offers (positions cached per sequence).
CONTEXTS = (256, 512, 1024, 2048, 4096, 8192)
#: GQA group sizes (query heads per KV head): 1 = MHA, 8 = Llama-3-70B's 64 / 8.
GROUPS = (1, 2, 4, 8)
#: FlashDecode S2 pieces the split slider offers (0 = CANN's rule, :func:`flash_decode_splits`).
SPLITS = (0, 1, 2, 3, 4, 6, 8, 12, 16)
KV_HEADS, HEAD_DIM = 8, 128
_VERSIONS = (("v2: chunks + online softmax", "v2"), ("v4: FlashDecode (split S2)", "v4"),
             ("v5: int8 KV (antiquant)", "v5"))
#: the chip of the committed grid, and the file
GRID_CHIP = "ascend-910b2"
GRID_PATH = DATA_DIR / "decode_explorer_grid.csv"
_GRID_COLUMNS = ["batch", "context", "group", "version", "splits", "time_us", "roofline_us", "pieces", "error"]
#: positions re-simulated at build to check the grid is current: a FlashDecode split (the split
#: kernel and the combine) and int8 KV (antiquant)
_PROBES = ((1, 256, 2, "v4", 0), (1, 256, 1, "v5", 0))


def _simulate(chip, batch, context, group, version, splits):
    """(time_us, roofline_us, pieces) of one timing-only run."""
    lens = np.full(batch, context)
    kv_dtype = np.int8 if version == "v5" else np.float16
    r = decode_attention((batch, KV_HEADS * group, HEAD_DIM), ((batch, context, KV_HEADS, HEAD_DIM), kv_dtype),
                         None, lens, version=version, hw=chip, timing_only=True,
                         splits=splits if version == "v4" and splits else None)
    return r.timeline.total_us, r.roofline_us, r.tiling.splits


def _position_key(chip, b, c, g, v, sp) -> tuple:
    """The run a position shows: v2's when v4's tiling equals v2's (no split: the same launch, the
    same tiling bytes, so the same timeline; only the launch's name differs)."""
    if v != "v4":
        return (b, c, g, v, 0)
    lens, hw = np.full(b, c), get_preset(chip)
    t4 = decode_tiling(b, KV_HEADS, g, HEAD_DIM, c, lens, 2, hw, version="v4", splits=sp or None)
    if t4.splits == 1 and t4 == decode_tiling(b, KV_HEADS, g, HEAD_DIM, c, lens, 2, hw, version="v2"):
        return (b, c, g, "v2", 0)
    return (b, c, g, v, sp)


def decode_grid(chip: str = GRID_CHIP, progress=None) -> pd.DataFrame:
    """Every distinct run the explorer's positions need on ``chip`` (one row per
    :func:`_position_key`): time, roofline (µs), pieces, or the library's refusal in ``error``.
    Timing-only runs; about 12 minutes of one core. ``progress(i, n)``: called after each run."""
    keys = []
    for b in BATCHES:
        for c in CONTEXTS:
            for g in GROUPS:
                for _, v in _VERSIONS:
                    for sp in (SPLITS if v == "v4" else (0,)):
                        try:
                            k = _position_key(chip, b, c, g, v, sp)
                        except _EXPECTED_ERRORS:
                            k = (b, c, g, v, sp)
                        if k not in keys:
                            keys.append(k)
    return _simulate_grid(keys, lambda *key: _simulate(chip, *key), _EXPECTED_ERRORS, (np.nan, np.nan, 0),
                          _GRID_COLUMNS, progress)


def write_decode_grid(path: Path | None = None, progress=None) -> Path:
    """Recompute and commit the explorer's grid (after the cost model or a decode kernel changed):
    ``python -c 'from npu_lab.course.explorers.decode import write_decode_grid; write_decode_grid()'``."""
    path = GRID_PATH if path is None else Path(path)
    grid = decode_grid(progress=progress)
    _commit_grid_csv(grid, path)
    _load_grid.cache_clear()
    return path


@functools.lru_cache(maxsize=1)
def _load_grid() -> dict:
    """{position key: (time_us, roofline_us, pieces) or the refusal's message} ({} when missing)."""
    return _read_grid_csv(GRID_PATH, _GRID_COLUMNS, (int, int, int, str, int), (float, float, int))


class DecodeExplorer(_Explorer):
    """Controls ``.batch`` (SelectionSlider over :data:`BATCHES`), ``.context`` (SelectionSlider
    over :data:`CONTEXTS`), ``.group`` (Dropdown over :data:`GROUPS`), ``.splits``
    (SelectionSlider over :data:`SPLITS`; 0 = CANN's rule, v4 only) and ``.version`` (Dropdown
    v2 / v4 / v5). ``.figure`` traces: 0 ``"time"`` — bars of v2 and the chosen version (µs);
    1 ``"HBM roofline"`` — the floor of each (its KV bytes ÷ the bandwidth). ``.status``: times,
    achieved fraction, splits. ``.result``: the chosen run's (time_us, roofline_us, splits) or
    None. ``.grid_used``: whether the committed grid is current and in use."""

    TRACE_NAMES = ("time", "HBM roofline")

    def __init__(self, batch: int = 4, context: int = 2048, group: int = 8, splits: int = 0, version: str = "v4",
                 chip: str = "ascend-910b2"):
        _check_choice("batch", batch, [(None, b) for b in BATCHES])
        _check_choice("context", context, [(None, c) for c in CONTEXTS])
        _check_choice("group", group, [(None, g) for g in GROUPS])
        _check_choice("splits", splits, [(None, s) for s in SPLITS])
        _check_choice("version", version, _VERSIONS)
        get_preset(chip)                                  # a wrong chip name raises here, naming the presets
        self.chip = chip
        self._runs = _LRU()
        self._grid = self._current_grid(chip)
        self.grid_used = bool(self._grid)
        self.batch = W.SelectionSlider(options=list(BATCHES), value=batch, description="batch")
        self.context = W.SelectionSlider(options=list(CONTEXTS), value=context, description="context")
        self.group = W.Dropdown(options=list(GROUPS), value=group, description="GQA group")
        self.splits = W.SelectionSlider(options=list(SPLITS), value=splits, description="S2 split (v4)")
        self.version = W.Dropdown(options=list(_VERSIONS), value=version, description="version", layout=_DROPDOWN)
        self.status = W.HTML()
        self.result = None
        self.figure = ExplorerFigureWidget(
            data=[go.Bar(x=[], y=[], name="time", marker_color="#1f77b4"),
                  go.Bar(x=[], y=[], name="HBM roofline", marker_color="#bbbbbb")],
            layout=dict(height=340, barmode="group", margin=dict(l=10, r=10, t=50, b=40),
                        title="decode step", yaxis=dict(title="µs")))
        self.widget = W.VBox([W.HBox([self.batch, self.context]), W.HBox([self.group, self.splits, self.version]),
                              self.status, self.figure])
        self._watch(self.batch, self.context, self.group, self.splits, self.version)
        self.update()

    @staticmethod
    def _current_grid(chip: str) -> dict:
        """The committed grid when it is for ``chip`` and its probe positions equal live runs, else {}."""
        probes = [lambda p=p: (_position_key(chip, *p), _simulate(chip, *p)) for p in _PROBES]
        return _checked_grid(_load_grid() if chip == GRID_CHIP else {}, probes,
                             lambda got, live: np.allclose(got[:2], live[:2], rtol=1e-9, atol=0) and got[2] == live[2])

    def _run(self, batch, context, group, version, splits):
        """(time_us, roofline_us, pieces) of a position key: from the grid, else simulated."""
        key = (batch, context, group, version, splits)
        hit = self._grid.get(key)
        if isinstance(hit, str):
            raise _Refused(hit)
        if hit is not None:
            return hit
        return _simulate(self.chip, batch, context, group, version, splits)

    def _key(self, b, c, g, v, sp) -> tuple:
        return _position_key(self.chip, b, c, g, v, sp)

    def update(self) -> None:
        b, c, g, v = self.batch.value, self.context.value, self.group.value, self.version.value
        sp = self.splits.value if v == "v4" else 0
        try:
            base = self._runs.get_or((b, c, g, "v2", 0), lambda: self._run(b, c, g, "v2", 0))
            key = self._key(b, c, g, v, sp)
            mine = self._runs.get_or(key, lambda: self._run(*key))
        except _EXPECTED_ERRORS as err:
            self.error, self.result = str(err), None
            self.status.value = _error_html(f"{v} at batch {b}, context {c}", str(err))
            return
        self.error = None
        self.result = mine
        names = ["v2 (no split)", f"{v}" + (f" ({mine[2]} pieces)" if v == "v4" else "")]
        with self.figure.batch_update():
            self.figure.data[0].x, self.figure.data[0].y = names, [round(base[0], 1), round(mine[0], 1)]
            self.figure.data[1].x, self.figure.data[1].y = names, [round(base[1], 1), round(mine[1], 1)]
            self.figure.layout.title = (f"batch {b} x context {c}, {KV_HEADS * g} query heads / {KV_HEADS} KV heads: "
                                        f"{v} {mine[0]:.1f} µs")
        bn = b * KV_HEADS
        cores = self._spec(self.chip).vector_cores
        self.status.value = (
            f"v2 <b>{base[0]:.1f} µs</b> ({base[1] / base[0]:.0%} of the HBM roofline {base[1]:.1f} µs); "
            f"{v} <b>{mine[0]:.1f} µs</b> ({mine[1] / mine[0]:.0%} of {mine[1]:.1f} µs), S2 in {mine[2]} piece(s). "
            f"B·N2 = {bn} {'<' if bn < 0.4 * cores else '>='} 0.4 × {cores} cores: CANN's tiling "
            f"{'splits' if bn < 0.4 * cores else 'does not split'} S2.")
