"""Tests of npu_lab.kernels.gemm.article_claims (issue 17 §6) and its CSV in data/."""

from __future__ import annotations

import pandas as pd
import pytest

from npu_lab.kernels.gemm.article_claims import (CLAIMS_CSV, COLUMNS, cube_article_claims,
                                                 within_launch_repeat_fraction, write_claims_csv)
from npu_lab.presets import get_preset
from npu_lab.sim.cube_costs import cube_peak_tflops


@pytest.fixture(scope="module")
def claims():
    return cube_article_claims()


def test_committed_csv_is_fresh(claims, tmp_path):
    """data/cube_article_claims.csv is what the library computes today. If a preset, the cost model or
    a kernel changed on purpose, regenerate: python -m npu_lab.kernels.gemm.article_claims --write"""
    fresh = write_claims_csv(tmp_path / "claims.csv").read_text(encoding="utf-8")
    assert CLAIMS_CSV.read_text(encoding="utf-8") == fresh, "stale data/cube_article_claims.csv"
    on_disk = pd.read_csv(CLAIMS_CSV, index_col="id", keep_default_na=False)
    assert list(on_disk.columns) == list(COLUMNS[1:])


def test_every_claim_has_a_verdict_and_a_source(claims):
    assert set(claims.verdict) <= {"consistent", "wrong", "unverifiable"}
    assert (claims.source.str.len() > 10).all() and (claims.article.str.len() > 0).all()
    for needed in ("int8_tops_per_core", "ub_capacity", "ub_bandwidth", "ub_over_gm", "tops_per_watt",
                   "neighbour_latency", "cluster_traffic", "sparse_2_4", "mixed_precision_table"):
        assert needed in claims.index


def test_model_figures_are_computed(claims):
    hw = get_preset("ascend-910b2")
    per_core = cube_peak_tflops(hw, "int8") / hw.cube_cores
    assert f"{per_core:.1f} TOPS per AIC" in claims.loc["int8_tops_per_core", "model"]
    assert per_core < 256 / 8  # the article is off by almost an order of magnitude
    assert claims.loc["int8_tops_per_core", "verdict"] == "wrong"
    assert f"{hw.ub_bytes // 1024} KB" in claims.loc["ub_capacity", "model"]
    assert hw.ub_bytes < 256 * 1024  # below the article's range on the 910B2
    assert "int8" in claims.loc["sparse_2_4", "sources_say"] and claims.loc["sparse_2_4", "verdict"] == "wrong"


def test_repeat_fraction_depends_on_shape():
    big = within_launch_repeat_fraction(1024, 1024, 1024)
    decode = within_launch_repeat_fraction(16, 2048, 2048)
    assert 0 <= decode < big < 1


def test_write_refuses_a_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_claims_csv(tmp_path / "nope" / "x.csv")
