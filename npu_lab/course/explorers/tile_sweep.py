"""TileSweepExplorer: latency against tileS with the current tileS highlighted (notebook 04)."""

from __future__ import annotations

import html

import ipywidgets as W
import numpy as np
import pandas as pd

from ...data import ARTICLE_SWEEP_SHAPE, load_article_tile_sweep
from ...hardware import HardwareSpec
from ...kernels.moe_gating import (VERSIONS, simulate_moe_gating, sweep,
                                  ub_used_bytes)
from ...kernels.moe_gating.sweep import SWEEP_COLUMNS, candidate_tile_sizes
from ..figure_widget import ExplorerFigureWidget
from ..viz import latency_sweep_figure
from ._base import (TILE_S_VERSIONS, _check_choice, _check_int, _chip_options, _DROPDOWN,
                    _error_html, _EXPECTED_ERRORS, _Explorer, _LRU, _SHORT_VERSION)


def _table_html(rows: list[dict], current: int, with_article: bool) -> str:
    head = ["tileS", "blocks", "UB KB", "\u00b5s", "util.", "bound"]
    if with_article:
        head.append("article \u00b5s")
    out = ["<table style='border-collapse:collapse;font-size:11px;font-family:monospace;"
           "white-space:nowrap;line-height:1.3'>",
           "<tr>" + "".join(f"<th style='padding:1px 4px;border-bottom:1px solid #999;text-align:right'>"
                            f"{h}</th>" for h in head) + "</tr>"]
    for r in rows:
        style = "background:#fde0dc;font-weight:bold" if r["tileS"] == current else ""
        if r.get("note"):
            cells = [str(r["tileS"]), f"<td colspan='{len(head) - 1}' style='color:#b00020;"
                     f"padding:1px 4px'>{html.escape(r.get('short', 'does not fit the UB'))}</td>"]
            out.append(f"<tr style='{style}'><td style='padding:1px 4px;text-align:right'>{cells[0]}"
                       f"</td>{cells[1]}</tr>")
            continue
        cells = [str(r["tileS"]), str(int(r["blocks"])), f"{r['ub_used_kb']:.2f}",
                 f"{r['latency_us']:.1f}", f"{r['core_utilisation']:.0%}", str(r["bottleneck"])]
        if with_article:
            cells.append("" if r.get("article_us") is None else f"{r['article_us']:.0f}")
        out.append(f"<tr style='{style}'>" + "".join(
            f"<td style='padding:1px 4px;text-align:right'>{html.escape(c)}</td>" for c in cells) + "</tr>")
    out.append("</table>")
    return "".join(out)


class TileSweepExplorer(_Explorer):
    """Latency against tileS for one shape, chip and kernel version (notebook 04).

    Controls: ``.tile_s`` (IntSlider "tileS", 1..64), ``.B``, ``.S``, ``.E``, ``.K`` (IntSliders
    with those descriptions), ``.chip`` (Dropdown "chip": ``article``, ``ascend-910b2``,
    ``ascend-310p3``), ``.version`` (Dropdown "version": the fused versions tiled by tileS — not v4, which tiles by rows).

    ``.figure`` traces, in this fixed order (see ``TRACE_NAMES``):

    0. ``"model"`` -- the sweep over tileS = 1, 2, 4, ..., 64 (only values <= S, plus S itself
       when S < 64; only those that fit the UB);
    1. ``"current tileS"`` -- one point: x = ``.tile_s.value``, y =
       ``simulate_moe_gating(B, S, E, K, version=..., hw=chip, tile_s=tile_s).latency_us``
       (empty when that configuration does not run);
    2. ``"article (measured)"`` -- the article's measured latencies, shown only at its shape
       (B=1, S=1024, E=64, K=2), empty otherwise.

    ``.table`` is an HTML table (tileS, blocks, UB KB, latency, core utilisation, bottleneck);
    ``.status`` starts ``"tileS=8: 77.6 us, 128 blocks, ..."``; ``.result`` is the last
    successful :class:`~npu_lab.kernels.moe_gating.MoeGatingResult` of the current tileS and
    ``.sweep_table`` the last sweep DataFrame.
    """

    TRACE_NAMES = ("model", "current tileS", "article (measured)")
    TRACE_MODEL, TRACE_CURRENT, TRACE_ARTICLE = 0, 1, 2
    MAX_TILE_S = 64
    #: Most tiles (B x ceil(S / tileS)) one simulation of an update may have: simulation time and
    #: memory grow with the tiles (v1 launches a block per tile), about 0.15 s and 100 MB per
    #: million. Larger configurations are refused with a message, whatever max_S allows.
    MAX_TILES_PER_UPDATE = 1 << 21

    def __init__(self, B: int = 1, S: int = 1024, E: int = 64, K: int = 2, *, chip: str = "article",
                 version: str = "v1", tile_s: int = 8, max_S: int = 8192, max_E: int = 16384):
        chip_options = _chip_options()
        version_options = [(f"{v} ({_SHORT_VERSION.get(v, VERSIONS[v])[:30]})", v) for v in TILE_S_VERSIONS]
        _check_choice("chip", chip, chip_options)
        _check_choice("version", version, version_options)
        max_S = _check_int("max_S", max_S, 1, 1 << 20)
        max_E = _check_int("max_E", max_E, 1, 1 << 20)
        self.tile_s = W.IntSlider(value=_check_int("tile_s", tile_s, 1, self.MAX_TILE_S), min=1,
                                  max=self.MAX_TILE_S, description="tileS", continuous_update=True)
        self.B = W.IntSlider(value=_check_int("B", B, 1, 64), min=1, max=64, description="B")
        self.S = W.IntSlider(value=_check_int("S (at most max_S)", S, 1, max_S), min=1, max=max_S, description="S")
        self.E = W.IntSlider(value=_check_int("E (at most max_E)", E, 1, max_E), min=1, max=max_E, description="E")
        self.K = W.IntSlider(value=_check_int("K", K, 1, 64), min=1, max=64, description="K")
        self.chip = W.Dropdown(options=chip_options, value=chip, description="chip",
                               layout=W.Layout(**_DROPDOWN))
        self.version = W.Dropdown(options=version_options, value=version, description="version",
                                  layout=W.Layout(**_DROPDOWN))
        self.status = W.HTML()
        self.table = W.HTML()
        self.result = None
        self.sweep_table = None
        self._sweeps = _LRU()
        self._points = _LRU()
        article = load_article_tile_sweep()
        self._article = article.rename(columns={"tile_s": "tileS"})
        self._article_us = dict(zip(article["tile_s"].astype(int), article["latency_us"].astype(float)))

        empty = pd.DataFrame({"tileS": [], "latency_us": []})
        fig = latency_sweep_figure(empty, "tileS", "latency_us", reference=self._article,
                                   reference_name=self.TRACE_NAMES[self.TRACE_ARTICLE], log_x=True,
                                   title="MoeGatingTopK: latency vs tileS")
        fig.data[self.TRACE_MODEL].name = self.TRACE_NAMES[self.TRACE_MODEL]
        fig.data[self.TRACE_CURRENT].name = self.TRACE_NAMES[self.TRACE_CURRENT]
        ticks = [1 << i for i in range(7)]
        fig.update_layout(
            width=620, height=420, margin=dict(l=10, r=10, t=60, b=40),
            xaxis=dict(title=dict(text="tileS (points per tile, log scale)"), tickvals=ticks,
                       ticktext=[str(t) for t in ticks], range=[np.log10(0.8), np.log10(80)]),
            yaxis=dict(title=dict(text="latency (\u00b5s)")))
        self.figure = ExplorerFigureWidget(data=fig.data, layout=fig.layout)
        self.update()
        self._watch(self.tile_s, self.B, self.S, self.E, self.K, self.chip, self.version)
        controls = W.VBox([W.HBox([self.tile_s, self.chip, self.version]),
                           W.HBox([self.B, self.S]), W.HBox([self.E, self.K])])
        self.widget = W.VBox([controls, self.status, W.HBox([self.figure, self.table])])

    # ---- simulation (cached) -----------------------------------------------------------------
    def sweep_tile_sizes(self, S: int | None = None) -> list[int]:
        """The tileS values the curve sweeps: powers of two up to min(S, 64), plus S if S < 64."""
        return candidate_tile_sizes(self.S.value if S is None else S, self.MAX_TILE_S)

    def _key(self):
        return (self.B.value, self.S.value, self.E.value, self.K.value, self.chip.value, self.version.value)

    def _tiles(self, B: int, S: int, tile_s: int) -> int:
        return B * -(-S // min(tile_s, S))

    def _too_big(self, B: int, S: int, tile_s: int) -> str:
        tiles = self._tiles(B, S, tile_s)
        if tiles <= self.MAX_TILES_PER_UPDATE:
            return ""
        return (f"B={B} x ceil(S={S} / tileS={tile_s}) = {tiles:,} tiles is more than the "
                f"{self.MAX_TILES_PER_UPDATE:,} one slider update may simulate; use a larger tileS "
                "or a smaller B or S (or simulate_moe_gating in a cell)")

    def _sweep(self, key) -> pd.DataFrame:
        B, S, E, K, chip, version = key

        def run():
            sizes = self.sweep_tile_sizes(S)
            ok = [ts for ts in sizes if not self._too_big(B, S, ts)]
            df = sweep(version, B, S, E, K, self._spec(chip), ok) if ok else \
                pd.DataFrame(columns=SWEEP_COLUMNS)
            skipped = [{"tileS": ts, "note": self._too_big(B, S, ts), "short": "too many tiles to simulate"}
                       for ts in sizes if ts not in ok]
            if skipped:
                df = pd.concat([df.assign(short=""), pd.DataFrame(skipped)], ignore_index=True)
                df = df.sort_values("tileS", ignore_index=True)
            return df
        return self._sweeps.get_or(key, run)

    def _point(self, key, tile_s: int):
        B, S, E, K, chip, version = key
        reason = self._too_big(B, S, tile_s)
        if reason:
            raise ValueError(reason)
        return self._points.get_or(key + (tile_s,), lambda: simulate_moe_gating(
            B, S, E, K, version=version, hw=self._spec(chip), tile_s=tile_s))

    def _neighbours(self):
        """The current shape's tileS one to four steps away, then each shape slider one step away."""
        key, ts = self._key(), self.tile_s.value
        for step in (1, -1, 2, -2, 3, -3, 4, -4):
            if 1 <= ts + step <= self.MAX_TILE_S:
                yield lambda t=ts + step: self._point(key, t)
        B, S, E, K, chip, version = key
        for name, slider in (("S", self.S), ("E", self.E), ("K", self.K), ("B", self.B)):
            for step in (1, -1):
                value = slider.value + step
                if slider.min <= value <= slider.max:
                    shape = {**dict(B=B, S=S, E=E, K=K), name: value}
                    other = (shape["B"], shape["S"], shape["E"], shape["K"], chip, version)
                    if shape["K"] <= shape["E"]:
                        yield lambda o=other: (self._sweep(o), self._point(o, ts))

    def at_article_shape(self) -> bool:
        return (self.B.value, self.S.value, self.E.value, self.K.value) == tuple(
            ARTICLE_SWEEP_SHAPE[k] for k in "BSEK")

    # ---- redraw ----------------------------------------------------------------------------
    def update(self) -> None:
        key, ts = self._key(), self.tile_s.value
        B, S, E, K, chip, version = key
        hw = self._spec(chip)
        df = result = None
        self._error_prefix = f"tileS={ts}"
        try:
            if K > E:   # the shape itself does not run: say so, not "tileS=... does not run"
                self._error_prefix = f"B={B}, S={S}, E={E}, K={K}"
                raise ValueError(f"K={K} experts per token cannot be chosen from E={E} experts: "
                                 "K must be <= E (k must satisfy 1 <= K <= E)")
            df = self._sweep(key)
            result = self._point(key, ts)
            self.error = None
        except _EXPECTED_ERRORS as exc:
            self.error = str(exc)
            if df is None:
                self._error_prefix = f"B={B}, S={S}, E={E}, K={K}"
        article = self.at_article_shape()
        ok = df.dropna(subset=["latency_us"]) if df is not None else None
        with self.figure.batch_update():
            model = self.figure.data[self.TRACE_MODEL]
            model.x = ok["tileS"].to_numpy() if ok is not None else []
            model.y = ok["latency_us"].to_numpy(dtype=float) if ok is not None else []
            current = self.figure.data[self.TRACE_CURRENT]
            # a tileS above S runs as tileS = S: put the marker where the curve is
            current.x = [self._shown_tile_s(result, ts)] if result is not None else []
            current.y = [result.latency_us] if result is not None else []
            ref = self.figure.data[self.TRACE_ARTICLE]
            ref.x = self._article["tileS"].to_numpy() if article else []
            ref.y = self._article["latency_us"].to_numpy(dtype=float) if article else []
            title = (f"MoeGatingTopK {version} on {hw.name}: B={B}, S={S}, E={E}, K={K}"
                     + ("" if article else " <span style='font-size:0.8em'>(article points only at "
                        "B=1, S=1024, E=64, K=2)</span>"))
            if self.figure.layout.title.text != title:        # a tileS move keeps the layout
                self.figure.layout.title.text = title
        if result is not None:
            self.result = result
        self.sweep_table = df
        self._show(df, ok, result, ts, hw, article)

    @staticmethod
    def _shown_tile_s(result, ts: int) -> int:
        return result.tiling.tileS if result.tiling is not None else ts

    def _current_row(self, result, ts: int) -> dict:
        t = result.timeline
        return {"tileS": ts, "blocks": sum(l.block_dim for l in t.launches),
                "ub_used_kb": ub_used_bytes(result.tiling, result.version) / 1024,
                "latency_us": t.total_us, "core_utilisation": t.core_utilisation,
                "bottleneck": t.bottleneck()[0]}

    def _show(self, df, ok, result, ts: int, hw: HardwareSpec, article: bool) -> None:
        rows = []
        if df is not None:
            for r in df.to_dict("records"):
                if isinstance(r.get("note"), str) and r["note"]:
                    rows.append({"tileS": int(r["tileS"]), "note": r["note"],
                                 "short": r.get("short") or "does not fit the UB"})
                else:
                    rows.append({**r, "tileS": int(r["tileS"])})
        if result is not None and all(r["tileS"] != ts for r in rows):
            rows.append(self._current_row(result, ts))
        elif result is None and all(r["tileS"] != ts for r in rows):
            rows.append({"tileS": ts, "note": self.error or "does not run",
                         "short": (self.error or "does not run")[:90]})
        rows.sort(key=lambda r: r["tileS"])
        for r in rows:
            r["article_us"] = self._article_us.get(r["tileS"]) if article else None
        self.table.value = _table_html(rows, ts, article)

        if result is None:
            self.status.value = _error_html(self._error_prefix, self.error or "unknown error")
            return
        row = self._current_row(result, ts)
        verdict, evidence = result.timeline.bottleneck()
        text = (f"tileS={ts}: {row['latency_us']:.1f} us, {row['blocks']} blocks, "
                f"UB {row['ub_used_kb']:.2f} KB of {hw.ub_usable_bytes / 1024:.2f} KB usable, "
                f"core utilisation {row['core_utilisation']:.0%}, {verdict}-bound")
        if result.tiling is not None and result.tiling.tileS != ts:
            text += f" (tileS clamped to S={result.tiling.tileS})"
        if ok is not None and len(ok):
            best = ok.loc[ok["latency_us"].idxmin()]
            text += f" \u00b7 best of the sweep: tileS={int(best.tileS)} at {best.latency_us:.1f} us"
        if article and ts in self._article_us:
            text += f" \u00b7 article measured {self._article_us[ts]:.0f} us"
        self.status.value = (f"<b>{html.escape(text)}</b><br><span style='font-size:0.9em'>"
                             f"{html.escape(evidence)}</span>")


# ---------------------------------------------------------------------------- UB budget
