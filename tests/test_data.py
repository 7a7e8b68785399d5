"""Tests of npu_lab.data (the loaders for data/)."""

from __future__ import annotations

import pytest

from npu_lab.data import ARTICLE_SWEEP_SHAPE, DATA_DIR, load_article_tile_sweep
from npu_lab.kernels.moe_gating import article_ub_estimate_bytes


def test_article_tile_sweep_transcription():
    df = load_article_tile_sweep()
    assert list(df.columns) == ["tile_s", "blocks", "ub_kb_est", "latency_us",
                                "core_utilisation_est"]
    assert df["tile_s"].tolist() == [1, 4, 8, 16, 32]
    assert df["latency_us"].tolist() == [1500, 450, 280, 310, 350]
    assert df["core_utilisation_est"].tolist() == [0.20, 0.40, 0.65, 0.55, 0.50]
    assert df["ub_kb_est"].tolist() == [0.3, 1.2, 2.4, 4.8, 9.6]
    assert df.attrs["shape"] == ARTICLE_SWEEP_SHAPE == {"B": 1, "S": 1024, "E": 64, "K": 2}


def test_article_tile_sweep_is_self_consistent():
    df = load_article_tile_sweep()
    s = ARTICLE_SWEEP_SHAPE["S"]
    assert (df["blocks"] * df["tile_s"] == s).all()  # blocks = S / tileS with B = 1
    assert df.loc[df["latency_us"].idxmin(), "tile_s"] == 8  # the article's sweet spot


def test_article_ub_column_is_not_its_own_formula():
    """Documented in data/README.md: the column is 0.3 KB x tileS, the formula gives 0.27."""
    df = load_article_tile_sweep()
    formula_kb = [article_ub_estimate_bytes(t, 64, 2) / 1024 for t in df["tile_s"]]
    assert formula_kb == [t * 272 / 1024 for t in df["tile_s"]]
    for t, table, formula in zip(df["tile_s"], df["ub_kb_est"], formula_kb):
        assert table == pytest.approx(0.3 * t)
        assert table > formula * 1.1  # overstated by ~13 %


def test_loader_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        load_article_tile_sweep(tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("# comment\ntile_s,blocks\n1,2\n")
    with pytest.raises(ValueError, match=r"bad.csv: expected columns \['tile_s', 'blocks', "):
        load_article_tile_sweep(bad)
    assert (DATA_DIR / "README.md").is_file()
