"""TuningExplorer: the tileS sweep for one (E, K, chip, version) with the autotuner's choice
circled and the article's measured points as a reference (notebook 07).

A slider move must redraw in a blink (issue 16 §5), and one (E, K) is nine timing-only runs
(60-150 ms): the sweeps of every (version, chip, E, K) the explorer offers at S = 1024 are
computed once and committed (``data/tuning_explorer_sweeps.csv``, :func:`write_tuning_grid`,
checked fresh by tests/test_course_explorers.py). The explorer checks its starting point against
a live sweep when it is built and ignores the file when they differ (so a changed cost model never
shows stale numbers); any other S is simulated live, cached per key."""

from __future__ import annotations

import functools
import html
from pathlib import Path

import ipywidgets as W
import numpy as np
import pandas as pd

from ...data import load_article_tile_sweep
from ...kernels.moe_gating import autotune, sweep
from ...kernels.moe_gating.sweep import TuneResult
from ...presets import DATA_DIR
from ..viz import latency_sweep_figure, update_latency_sweep
from ._base import _commit_grid_csv, _EXPECTED_ERRORS, TILE_S_VERSIONS, _check_choice, _check_int, _check_list, _error_html, _Explorer, _LRU, MOE_CHIPS

#: candidate tileS values the sweep and the tuner try
TUNING_TILES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
E_CHOICES = (8, 16, 32, 64, 128, 256)
K_CHOICES = (1, 2, 4, 8)
#: versions offered: the tileS-tiled fused kernels without the pitfall and the fast-exp variant
TUNING_VERSIONS = tuple(v for v in TILE_S_VERSIONS if v not in ("v2_bad_sync", "v3_fast_exp"))
#: S of the committed sweeps (the explorer's default)
GRID_S = 1024
GRID_PATH = DATA_DIR / "tuning_explorer_sweeps.csv"
_GRID_COLUMNS = ["version", "chip", "E", "K", "tileS", "latency_us", "bottleneck", "blocks"]


def tuning_grid(S: int = GRID_S) -> pd.DataFrame:
    """The sweep over :data:`TUNING_TILES` of every (version, chip, E, K) the explorer offers
    (K <= E), one row per tileS: latency (µs, empty where the tile does not run; the reason is
    not kept: a key where no tile runs is simulated live, for autotune's message), bottleneck,
    blocks. Timing-only runs; about a minute."""
    frames = []
    for version in TUNING_VERSIONS:
        for chip in MOE_CHIPS:
            for E in E_CHOICES:
                for K in (k for k in K_CHOICES if k <= E):
                    table = sweep(version, 1, S, E, K, chip, TUNING_TILES)
                    frames.append(table.assign(version=version, chip=chip, E=E, K=K)[_GRID_COLUMNS])
    return pd.concat(frames, ignore_index=True)


def write_tuning_grid() -> Path:
    """Recompute and commit the explorer's sweeps (after the cost model or a kernel changed):
    ``python -c 'from npu_lab.course.explorers.tuning import write_tuning_grid; write_tuning_grid()'``."""
    grid = tuning_grid()
    _commit_grid_csv(grid, GRID_PATH)
    _load_grid.cache_clear()
    return GRID_PATH


class _Grid(dict):
    """{(version, chip, E, K): sweep table}, each table cut from the file's rows when first asked."""

    def __init__(self, frame: pd.DataFrame):
        super().__init__()
        self._frame = frame.drop(columns=["version", "chip", "E", "K"])
        keys = list(zip(frame["version"], frame["chip"], frame["E"].astype(int), frame["K"].astype(int)))
        self._rows: dict = {}
        for i, key in enumerate(keys):        # each key's rows are contiguous (written in order)
            start, _ = self._rows.get(key, (i, i))
            self._rows[key] = (start, i + 1)
        for key in self._rows:
            dict.__setitem__(self, key, None)

    def __getitem__(self, key):
        table = dict.__getitem__(self, key)
        if table is None:
            start, stop = self._rows[key]
            table = self._frame.iloc[start:stop].reset_index(drop=True)
            dict.__setitem__(self, key, table)
        return table

    def get(self, key, default=None):
        return self[key] if key in self else default

    def items(self):
        return ((k, self[k]) for k in self.keys())


@functools.lru_cache(maxsize=1)
def _load_grid() -> dict:
    """{(version, chip, E, K): sweep table} from the committed file ({} when it is missing)."""
    if not GRID_PATH.exists():
        return {}
    return _Grid(pd.read_csv(GRID_PATH))


def _tune(table: pd.DataFrame) -> TuneResult | None:
    """autotune's choice and reason from a sweep table (the same rule and words as
    :func:`~npu_lab.kernels.moe_gating.autotune`; tests check they agree); None when no tile runs."""
    ok = table.dropna(subset=["latency_us"])
    if ok.empty:
        return None
    ok = ok.sort_values(["latency_us", "tileS"])
    best = ok.iloc[0]
    runner = ok.iloc[1] if len(ok) > 1 else None
    reason = (f"tileS={int(best.tileS)} gives {best.latency_us:.1f} us ({best.bottleneck}-bound, "
              f"{int(best.blocks)} blocks)")
    if runner is not None:
        reason += (f"; next best tileS={int(runner.tileS)} at {runner.latency_us:.1f} us "
                   f"(+{(runner.latency_us / best.latency_us - 1):.1%})")
    return TuneResult(int(best.tileS), float(best.latency_us), reason, table)


def _same_sweep(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    x, y = a["latency_us"].to_numpy(dtype=float), b["latency_us"].to_numpy(dtype=float)
    return (list(a["tileS"]) == list(b["tileS"]) and len(x) == len(y)
            and bool(np.all((np.isnan(x) & np.isnan(y)) | np.isclose(x, y, rtol=1e-12, atol=0))))


class TuningExplorer(_Explorer):
    """Controls ``.E``, ``.K`` (SelectionSliders; K is capped at E), ``.chip`` (Dropdown),
    ``.version`` (ToggleButtons); ``.figure`` is latency against tileS at S = ``S`` with the tuner's
    tileS highlighted; ``.status`` starts with "<b>version on chip, E=.., K=..</b>: " and the
    tuner's reason; ``.best`` is the last :class:`~npu_lab.kernels.moe_gating.TuneResult`."""

    def __init__(self, chip: str = "article", version: str = "v1", E: int = 64, K: int = 2, S: int = 1024):
        _check_choice("chip", chip, [(c, c) for c in MOE_CHIPS])
        _check_choice("version", version, [(v, v) for v in TUNING_VERSIONS])
        _check_choice("E", E, [(str(e), e) for e in E_CHOICES])
        _check_choice("K", K, [(str(k), k) for k in K_CHOICES])
        self.S_tokens = _check_int("S", S, 1, 1 << 20)
        self._results = _LRU()
        self.E = W.SelectionSlider(options=E_CHOICES, value=E, description="E")
        self.K = W.SelectionSlider(options=K_CHOICES, value=K, description="K")
        self.chip = W.Dropdown(options=list(MOE_CHIPS), value=chip, description="chip")
        self.version = W.ToggleButtons(options=list(TUNING_VERSIONS), value=version, description="version")
        self.status = W.HTML()
        article = load_article_tile_sweep().rename(columns={"tile_s": "tileS"})
        full = sweep(version, 1, self.S_tokens, E, min(K, E), chip, TUNING_TILES)
        # the committed sweeps, if they agree with this live one (else every key is simulated live)
        shipped = _load_grid() if self.S_tokens == GRID_S else {}
        stored = shipped.get((version, chip, E, min(K, E)))
        self._shipped = shipped if stored is not None and _same_sweep(stored, full) else {}
        first = full.dropna(subset=["latency_us"])
        self.figure = latency_sweep_figure(first, "tileS", highlight=8, reference=article, widget=True, log_x=True,
                                           title=f"Latency vs tileS (S = {self.S_tokens})")
        self.widget = W.VBox([W.HBox([self.E, self.K]), W.HBox([self.chip, self.version]), self.status, self.figure])
        self.best = None
        self._watch(self.E, self.K, self.chip, self.version)
        self.update()

    def _compute(self, key):
        version, chip, E, K = key
        stored = self._shipped.get(key)
        best = _tune(stored) if stored is not None else None     # committed: no simulation on a move
        if best is None:   # the tuner sweeps the same candidates: its table is the sweep (one sweep per key, not two)
            best = autotune(1, self.S_tokens, E, K, version=version, hw=chip, candidates=list(TUNING_TILES))
        return best.table.dropna(subset=["latency_us"]), best

    def _neighbours(self):
        """E and K one step away (read from the committed sweeps at S = 1024, else simulated)."""
        version, chip = self.version.value, self.chip.value
        ei, ki = E_CHOICES.index(self.E.value), K_CHOICES.index(self.K.value)
        for i, j in ((ei + 1, ki), (ei - 1, ki), (ei, ki + 1), (ei, ki - 1)):
            if 0 <= i < len(E_CHOICES) and 0 <= j < len(K_CHOICES):
                key = (version, chip, E_CHOICES[i], min(K_CHOICES[j], E_CHOICES[i]))
                yield lambda key=key: self._results.get_or(key, lambda: self._compute(key))

    def update(self) -> None:
        E, K = self.E.value, min(self.K.value, self.E.value)
        key = (self.version.value, self.chip.value, E, K)
        head = f"{key[0]} on {key[1]}, E={E}, K={K}"
        try:
            table, self.best = self._results.get_or(key, lambda: self._compute(key))
        except _EXPECTED_ERRORS as err:
            self.error, self.best = str(err), None
            self.status.value = _error_html(head, str(err))
            return
        self.error = None
        update_latency_sweep(self.figure, table, highlight=self.best.tile_s)
        self.status.value = f"<b>{html.escape(head)}</b>: {html.escape(self.best.reason)}"


# ---- heat maps of the sweet spot (notebook 07) -------------------------------------------------
#: tileS columns of the heat maps
HEAT_MAP_TILES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def tile_latency_grid(version: str, dim: str, values, *, S: int = 1024, E: int = 64, K: int = 2,
                      chip: str = "ascend-910b2", tiles=HEAT_MAP_TILES):
    """Latency (µs) of ``version`` over (``dim``, tileS): a DataFrame, one row per value of ``dim``
    ("S" or "E", the other dimensions fixed at S, E, K), one column per tileS; NaN where a tile is
    longer than S or does not fit the UB. Timing-only runs, one sweep per row."""
    import pandas as pd

    if dim not in ("S", "E"):
        raise ValueError(f"dim must be 'S' or 'E' (the dimension the rows vary), got {dim!r}")
    values, tiles = _check_list("values", values, most=64), _check_list("tiles", tiles, most=64)
    rows = []
    for v in values:
        shape = {"S": S, "E": E, "K": K, dim: v}
        lat = sweep(version, 1, shape["S"], shape["E"], shape["K"], chip, list(tiles)).set_index("tileS")["latency_us"]
        rows.append(lat.reindex(list(tiles)).to_numpy(dtype=float))
    return pd.DataFrame(rows, index=list(values), columns=list(tiles)).rename_axis(dim)


def sweet_spot_heat_map(grids: dict, dim: str, title: str | None = None):
    """Side-by-side heat maps of ``grids`` ({label: tile_latency_grid(...)}) over (``dim``, tileS),
    each row coloured relative to its own best tileS (1.0 = best), hover showing µs."""
    from plotly.subplots import make_subplots

    import pandas as pd

    if not isinstance(grids, dict) or not grids or not all(isinstance(g, pd.DataFrame) for g in grids.values()):
        raise TypeError(f"grids must be a non-empty dict {{label: tile_latency_grid(...)}}, got {grids!r:.80}")
    if dim not in ("S", "E"):
        raise ValueError(f"dim must be 'S' or 'E' (the dimension the rows vary), got {dim!r}")
    fig = make_subplots(rows=1, cols=len(grids), subplot_titles=list(grids), horizontal_spacing=0.1)
    for col, (label, g) in enumerate(grids.items(), start=1):
        fig.add_heatmap(z=g.div(g.min(axis=1), axis=0).to_numpy(), customdata=g.to_numpy(), coloraxis="coloraxis",
                        x=[str(t) for t in g.columns], y=[str(v) for v in g.index], row=1, col=col,
                        hovertemplate=f"{dim}=%{{y}}, tileS=%{{x}}<br>%{{customdata:.1f}} us, %{{z:.2f}}x the row's best"
                                      f"<extra>{label}</extra>")
    fig.update_layout(title=title or f"Latency over ({dim}, tileS), relative to each row's best", height=360,
                      margin=dict(l=10, r=10, t=70, b=40),
                      coloraxis=dict(cmin=1, cmax=3, colorscale="Viridis_r", colorbar=dict(title="x best")))
    fig.update_xaxes(title_text="tileS", type="category")
    fig.update_yaxes(title_text=dim, type="category")
    return fig
