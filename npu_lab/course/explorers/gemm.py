"""The GEMM explorer (notebook 09): sliders over M, N, K and the base tile, the version, and the
K-split; the roofline with the current run marked and the status line with its latency, TFLOPS,
fraction of the floor, bottleneck and tiling.

Timing-only runs (:func:`~npu_lab.kernels.gemm.gemm`), cached per configuration. A run takes
5-150 ms of CPU (the kernels' tile loop fast-forwards across tasks; tails such as M = 1000 are the
slow ones), and in a kernel that also serves the browser up to 0.2 s: a run started in idle time
to prepare the next move (:func:`~._base.warm_when_idle`) held up a slider press arriving
meanwhile by that much (issue 16 §5: 09's worst press, 200-240 ms). So every (M, N, K, version) the
sliders offer at the default base tile and kSplit on the 910B2 is simulated once and committed
(``data/gemm_explorer_grid.csv``, :func:`write_gemm_grid`, about 30 s): the explorer checks the
file against live runs of two probe positions when it is built and ignores it when they differ
(a changed cost model never shows stale numbers: it simulates live). The host tiling the status
line prints is computed live (0.1 ms). Other base tiles, a forced kSplit and other chips
simulate live, cached per position. A configuration the library refuses (a base tile that does
not fit L0) shows its message in ``.status``.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import ipywidgets as W
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ...kernels.gemm import GEMM_VERSIONS, gemm, gemm_roofline, gemm_tiling
from ...lang import AscendCRuleError
from ...presets import DATA_DIR
from ..figure_widget import ExplorerFigureWidget
from ._base import (_commit_grid_csv, _DROPDOWN, _EXPECTED_ERRORS, _check_choice, _error_html, _Explorer, _LRU,
                    _checked_grid, _read_grid_csv, _Refused, _simulate_grid)

__all__ = ["GemmExplorer", "SIZES", "BASES", "gemm_grid", "write_gemm_grid", "GRID_PATH"]

#: Sizes the M, N, K sliders offer (powers of two and a few tails).
SIZES = (16, 64, 100, 256, 512, 1000, 1024, 2048, 4096)
#: Base tiles (baseM, baseN, baseK) the dropdown offers, fp16.
BASES = ((128, 128, 64), (64, 64, 64), (128, 256, 64), (256, 128, 64), (128, 128, 128), (256, 256, 64))
_ERRORS = (*_EXPECTED_ERRORS, AscendCRuleError)
#: the committed grid: its chip, its base tile (the explorer's default), the file
GRID_CHIP = "ascend-910b2"
GRID_BASE = BASES[0]
GRID_PATH = DATA_DIR / "gemm_explorer_grid.csv"
_GRID_COLUMNS = ["M", "N", "K", "version", "time_us", "hbm_bytes", "bottleneck", "error"]
#: positions re-simulated at build to check the grid is current (cheap; a tail and a full tile)
_PROBES = ((256, 256, 256, "v3"), (64, 1000, 512, "v4"))


def _simulate(chip, M, N, K, base, version, k_split=0):
    """(time_us, hbm_bytes, bottleneck) of one timing-only fp16 run."""
    kw = {"k_split": k_split} if version == "v4" and k_split else {}
    tiling = gemm_tiling(M, N, K, np.float16, chip, version=version, base=base, **kw)
    _, tl = gemm((M, K), (K, N), version=version, hw=chip, timing_only=True, dtype=np.float16, tiling=tiling)
    return tl.total_us, tl.hbm_bytes, tl.bottleneck()[0]


def gemm_grid(chip: str = GRID_CHIP, progress=None) -> pd.DataFrame:
    """Every (M, N, K, version) the sliders offer at :data:`GRID_BASE` and the tiling's own kSplit
    on ``chip``: time (µs), HBM bytes and bottleneck, or the library's refusal in ``error``.
    Timing-only runs, about 30 s of one core. ``progress(i, n)``: called after each run."""
    keys = [(M, N, K, v) for v in GEMM_VERSIONS for M, N, K in itertools.product(SIZES, SIZES, SIZES)]
    return _simulate_grid(keys, lambda M, N, K, v: _simulate(chip, M, N, K, GRID_BASE, v), _ERRORS,
                          (np.nan, 0, ""), _GRID_COLUMNS, progress)


def write_gemm_grid(path: Path | None = None, progress=None) -> Path:
    """Recompute and commit the explorer's grid (after the cost model or a GEMM kernel changed):
    ``python -c 'from npu_lab.course.explorers.gemm import write_gemm_grid; write_gemm_grid()'``."""
    path = GRID_PATH if path is None else Path(path)
    _commit_grid_csv(gemm_grid(progress=progress), path)
    _load_grid.cache_clear()
    return path


@functools.lru_cache(maxsize=1)
def _load_grid() -> dict:
    """{(M, N, K, version): (time_us, hbm_bytes, bottleneck) or the refusal's message} ({} when missing)."""
    return _read_grid_csv(GRID_PATH, _GRID_COLUMNS, (int, int, int, str), (float, int, str))


class GemmExplorer(_Explorer):
    """Controls ``.M``, ``.N``, ``.K`` (SelectionSliders over :data:`SIZES`), ``.base`` (Dropdown over
    :data:`BASES`), ``.version`` (Dropdown v1..v4) and ``.k_split`` (IntSlider, 0 = the tiling's
    default; v4 only). ``.figure``: the roofline (cube peak, HBM roof) with the current run;
    ``.status``: its numbers. ``.result`` is the last (latency_us, tflops, tiling) or None.
    ``.grid_used``: whether the committed grid is current and in use."""

    def __init__(self, chip: str = "ascend-910b2", M: int = 1024, N: int = 1024, K: int = 1024,
                 version: str = "v3", base=(128, 128, 64)):
        for name, v in (("M", M), ("N", N), ("K", K)):
            _check_choice(name, v, [(None, s) for s in SIZES])
        _check_choice("version", version, [(None, v) for v in GEMM_VERSIONS])
        _check_choice("base", tuple(base), [(None, b) for b in BASES])
        self.chip = chip
        self._runs = _LRU()
        self._grid = self._current_grid(chip)
        self.grid_used = bool(self._grid)
        self.M, self.N, self.K = (W.SelectionSlider(options=list(SIZES), value=v, description=n)
                                  for n, v in (("M", M), ("N", N), ("K", K)))
        self.base = W.Dropdown(options=[(f"{b[0]}x{b[1]}x{b[2]}", b) for b in BASES], value=tuple(base),
                               description="base tile", layout=_DROPDOWN)
        self.version = W.Dropdown(options=[(f"{v}: {GEMM_VERSIONS[v][1][:40]}", v) for v in GEMM_VERSIONS],
                                  value=version, description="version", layout=dict(width="420px"))
        self.k_split = W.IntSlider(value=0, min=0, max=8, description="kSplit (v4)")
        self.status = W.HTML()
        self.result = None
        self.figure = ExplorerFigureWidget(
            data=[go.Scatter(x=[], y=[], mode="lines", name="roof", line=dict(color="grey")),
                  go.Scatter(x=[], y=[], mode="markers", name="this run", marker=dict(size=14, color="#d62728"))],
            layout=dict(height=380, margin=dict(l=10, r=10, t=50, b=40), title="GEMM roofline",
                        xaxis=dict(type="log", title="FLOPs per HBM byte moved"),
                        yaxis=dict(type="log", title="TFLOPS")))
        self.widget = W.VBox([W.HBox([self.M, self.N, self.K]), W.HBox([self.base, self.version, self.k_split]),
                              self.status, self.figure])
        self._watch(self.M, self.N, self.K, self.base, self.version, self.k_split)
        self.update()

    def set(self, **values) -> None:
        """``explorer.set(M=2048, version="v4")``: the sizes must be among :data:`SIZES`."""
        for name in ("M", "N", "K"):
            if name in values:
                _check_choice(name, values[name], [(None, s) for s in SIZES])
        super().set(**values)

    @staticmethod
    def _current_grid(chip: str) -> dict:
        """The committed grid when it is for ``chip`` and its probe positions equal live runs, else {}."""
        probes = [lambda p=p: (p, _simulate(chip, *p[:3], GRID_BASE, p[3])) for p in _PROBES]
        return _checked_grid(_load_grid() if chip == GRID_CHIP else {}, probes, lambda got, live: got == live)

    def _run(self, M, N, K, base, version, k_split):
        """(time_us, hbm_bytes, bottleneck, tiling): from the grid at its base tile and the tiling's
        own kSplit, else simulated."""
        kw = {"k_split": k_split} if version == "v4" and k_split else {}
        tiling = gemm_tiling(M, N, K, np.float16, self.chip, version=version, base=base, **kw)
        hit = self._grid.get((M, N, K, version)) if base == GRID_BASE and not kw else None
        if isinstance(hit, str):
            raise _Refused(hit)
        if hit is None:
            hit = _simulate(self.chip, M, N, K, base, version, k_split)
        return (*hit, tiling)

    def _key(self, M, N, K):
        return (M, N, K, self.base.value, self.version.value, self.k_split.value if self.version.value == "v4" else 0)

    def _neighbours(self):
        """M, N and K one size either side: precomputed while the kernel is idle, so a slider move
        finds it cached (from the grid: the tiling only; another base tile or kSplit: a run)."""
        here = {n: SIZES.index(getattr(self, n).value) for n in "MNK"}
        for step in (1, -1):
            for name in "MNK":
                i = here[name] + step
                if 0 <= i < len(SIZES):
                    size = {n: SIZES[j] for n, j in here.items()}
                    size[name] = SIZES[i]
                    key = self._key(size["M"], size["N"], size["K"])
                    yield lambda key=key: self._runs.get_or(key, lambda: self._run(*key))

    def update(self) -> None:
        M, N, K = self.M.value, self.N.value, self.K.value
        key = self._key(M, N, K)
        try:
            us, hbm, verdict, t = self._runs.get_or(key, lambda: self._run(*key))
        except _ERRORS as err:
            self.error, self.result = str(err), None
            self.status.value = _error_html(f"{self.version.value} at {M}x{N}x{K}", str(err))
            return
        self.error = None
        roof = gemm_roofline(M, N, K, np.float16, self.chip)
        tflops = roof["flops"] / (us * 1e-6) / 1e12
        self.result = (us, tflops, t)
        bw = self._spec(self.chip).hbm_bandwidth_gbps / 1e3
        x = roof["flops"] / hbm
        xs = np.logspace(np.log10(x / 8), np.log10(max(x, roof["flops"] / roof["min_hbm_bytes"]) * 8), 40)
        with self.figure.batch_update():
            self.figure.data[0].x, self.figure.data[0].y = xs, np.minimum(roof["cube_tflops"], xs * bw)
            self.figure.data[1].x, self.figure.data[1].y = [x], [tflops]
            self.figure.layout.title = (f"{M}x{N}x{K} fp16, {self.version.value}: {tflops:.1f} of "
                                        f"{roof['cube_tflops']:.0f} TFLOPS")
        self.status.value = (
            f"<b>{us:.1f} µs</b>, {tflops:.1f} TFLOPS = {roof['floor_us'] / us:.0%} of the floor "
            f"({roof['bound']}-bound at minimum traffic, {roof['floor_us']:.1f} µs); {hbm / 1e6:.1f} MB from HBM "
            f"(minimum {roof['min_hbm_bytes'] / 1e6:.1f} MB); {verdict}-bound. Tiling: {t.tasks} tasks of "
            f"{t.singleCoreM}x{t.singleCoreN}x{t.singleCoreK} (kSplit {t.kSplit}) on blockDim {t.usedCoreNum}, "
            f"base {t.baseM}x{t.baseN}x{t.baseK}, stepKa {t.stepKa}.")
