"""Appendix 07b's valley scan, computed once and shipped in data/ (it is one unbounded fit per row,
about a minute in all: too slow for a notebook cell a learner re-runs, and a fit whose last digits
depend on the machine's floating point).

``scripts/make_valley_scan.py`` writes ``data/article_valley_scan.csv`` with
:func:`write_valley_scan`; notebook 07b reads it with :func:`load_valley_scan`; a test recomputes
rows with :func:`npu_lab.kernels.moe_gating.article.valley_scan` and compares, so a change of the
model that moves the valley fails until the file is regenerated.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

__all__ = ["VALLEY_UB_CYCLES", "VALLEY_PATH", "load_valley_scan", "write_valley_scan"]

#: the UB access cycles the scan holds fixed, one row each
VALLEY_UB_CYCLES = (10, 40, 100, 150, 175, 200, 225, 250, 300)
VALLEY_PATH = Path(__file__).resolve().parents[2] / "data" / "article_valley_scan.csv"
_HEADER = ("# valley_scan(VALLEY_UB_CYCLES) of npu_lab.kernels.moe_gating.article: per UB access cycle count, the\n"
           "# unbounded refit of launch, dispatch and DMA latency to the article's tileS table. Written by\n"
           "# scripts/make_valley_scan.py; tests/test_appendix_data.py checks it is current.\n")


def write_valley_scan(path: str | Path = VALLEY_PATH) -> pd.DataFrame:
    """Compute the scan (about a minute) and write it to ``path``; returns the table."""
    from ..kernels.moe_gating.article import valley_scan

    table = valley_scan(VALLEY_UB_CYCLES)
    path = Path(path)
    path.write_text(_HEADER + table.to_csv(index=False, float_format="%.9g"), encoding="utf-8")
    return table


def load_valley_scan(path: str | Path = VALLEY_PATH) -> pd.DataFrame:
    """The shipped scan: the columns of ``valley_scan`` (scalar_ub_access_cycles, mape_pct,
    launch_overhead_us, block_dispatch_us, dma_latency_cycles, v2_gain_pct, v1_e256_us,
    inside_ranges). Raises ``FileNotFoundError`` naming the script that writes it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run python scripts/make_valley_scan.py to compute it")
    table = pd.read_csv(path, comment="#")
    expected = ["scalar_ub_access_cycles", "mape_pct", "launch_overhead_us", "block_dispatch_us",
                "dma_latency_cycles", "v2_gain_pct", "v1_e256_us", "inside_ranges"]
    if list(table.columns) != expected:
        raise ValueError(f"{path} has columns {list(table.columns)}, expected {expected}: regenerate it with "
                         "python scripts/make_valley_scan.py")
    return table
