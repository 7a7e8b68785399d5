"""data/article_valley_scan.csv is what valley_scan computes today (issue 16 §5: 07b reads the
scan instead of spending a minute on it in a cell)."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab.course.appendix_data import VALLEY_UB_CYCLES, load_valley_scan
from npu_lab.kernels.moe_gating.article import valley_scan


def test_the_shipped_scan_has_every_row():
    table = load_valley_scan()
    assert list(table["scalar_ub_access_cycles"]) == [float(v) for v in VALLEY_UB_CYCLES]


@pytest.mark.parametrize("ub", [10, 200])
def test_the_shipped_scan_is_current(ub):
    """Two rows recomputed (a fit each): the valley's ends, where the DMA latency runs to
    thousands of cycles and where it is near zero. A model change that moves the valley fails here:
    run python scripts/make_valley_scan.py."""
    shipped = load_valley_scan().set_index("scalar_ub_access_cycles").loc[float(ub)]
    fresh = valley_scan((ub,)).iloc[0]
    for column in ("mape_pct", "launch_overhead_us", "block_dispatch_us", "v2_gain_pct", "v1_e256_us"):
        assert fresh[column] == pytest.approx(shipped[column], rel=1e-3, abs=0.05), (
            f"{column} at UB access {ub}: shipped {shipped[column]}, now {fresh[column]}: "
            "run python scripts/make_valley_scan.py")
    assert fresh["dma_latency_cycles"] == pytest.approx(shipped["dma_latency_cycles"], rel=1e-3, abs=1.0)
    assert bool(fresh["inside_ranges"]) == bool(shipped["inside_ranges"])


def test_missing_file_names_the_script(tmp_path):
    with pytest.raises(FileNotFoundError, match="make_valley_scan.py"):
        load_valley_scan(tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="regenerate"):
        load_valley_scan(bad)
    assert np.isfinite(load_valley_scan()["mape_pct"]).all()
