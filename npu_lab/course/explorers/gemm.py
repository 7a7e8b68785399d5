"""The GEMM explorer (notebook 09): sliders over M, N, K and the base tile, the version, and the
K-split; the roofline with the current run marked and the status line with its latency, TFLOPS,
fraction of the floor, bottleneck and tiling.

Timing-only runs (:func:`~npu_lab.kernels.gemm.gemm`), cached per configuration (a 1024^3 run takes
about 15 ms of CPU, 4096^3 about 30-60 ms the first time: the kernels' tile loop fast-forwards across
tasks; a position seen before redraws in well under a millisecond of simulation). The defaults are 1024^3 so the first moves stay fast. A configuration
the library refuses (a base tile that does not fit L0) shows its message in ``.status``.
"""

from __future__ import annotations

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from ...kernels.gemm import GEMM_VERSIONS, gemm, gemm_roofline, gemm_tiling
from ...lang import AscendCRuleError
from ..figure_widget import ExplorerFigureWidget
from ._base import _DROPDOWN, _EXPECTED_ERRORS, _check_choice, _error_html, _Explorer, _LRU

__all__ = ["GemmExplorer", "SIZES", "BASES"]

#: Sizes the M, N, K sliders offer (powers of two and a few tails).
SIZES = (16, 64, 100, 256, 512, 1000, 1024, 2048, 4096)
#: Base tiles (baseM, baseN, baseK) the dropdown offers, fp16.
BASES = ((128, 128, 64), (64, 64, 64), (128, 256, 64), (256, 128, 64), (128, 128, 128), (256, 256, 64))
_ERRORS = (*_EXPECTED_ERRORS, AscendCRuleError)


class GemmExplorer(_Explorer):
    """Controls ``.M``, ``.N``, ``.K`` (SelectionSliders over :data:`SIZES`), ``.base`` (Dropdown over
    :data:`BASES`), ``.version`` (Dropdown v1..v4) and ``.k_split`` (IntSlider, 0 = the tiling's
    default; v4 only). ``.figure``: the roofline (cube peak, HBM roof) with the current run;
    ``.status``: its numbers. ``.result`` is the last (latency_us, tflops, tiling) or None."""

    def __init__(self, chip: str = "ascend-910b2", M: int = 1024, N: int = 1024, K: int = 1024,
                 version: str = "v3", base=(128, 128, 64)):
        for name, v in (("M", M), ("N", N), ("K", K)):
            _check_choice(name, v, [(None, s) for s in SIZES])
        _check_choice("version", version, [(None, v) for v in GEMM_VERSIONS])
        _check_choice("base", tuple(base), [(None, b) for b in BASES])
        self.chip = chip
        self._runs = _LRU()
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

    def _run(self, M, N, K, base, version, k_split):
        kw = {"k_split": k_split} if version == "v4" and k_split else {}
        tiling = gemm_tiling(M, N, K, np.float16, self.chip, version=version, base=base, **kw)
        _, tl = gemm((M, K), (K, N), version=version, hw=self.chip, timing_only=True, dtype=np.float16,
                     tiling=tiling)
        return tl.total_us, tl.hbm_bytes, tl.bottleneck()[0], tiling

    def _key(self, M, N, K):
        return (M, N, K, self.base.value, self.version.value, self.k_split.value if self.version.value == "v4" else 0)

    def _neighbours(self):
        """M, N and K one size either side (a 4096^3 run is the slowest, 0.1-0.3 s): precomputed
        while the kernel is idle, so a slider move finds it cached."""
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
