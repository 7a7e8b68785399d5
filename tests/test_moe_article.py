"""The article's numbers, reproduced by fitting the model (npu_lab.kernels.moe_gating.article)."""

import json

import numpy as np
import pandas as pd
import pytest

from npu_lab import get_preset
from npu_lab.data import load_article_tile_sweep
from npu_lab.kernels.moe_gating import exp_speedup, fit_hardware, reproduce_article_claims, sweep
from npu_lab.kernels.moe_gating.article import ARTICLE_PRESET_PATH, DEFAULT_FREE, fit_article_preset


@pytest.fixture(scope="module")
def fit():
    return fit_article_preset()


def test_fit_meets_the_issue_targets(fit):
    """Minimum at tileS = 8 and mean absolute percentage error <= 15% over the five rows."""
    assert fit.mape <= 15
    best = fit.residuals.loc[fit.residuals.model_us.idxmin(), "tileS"]
    assert best == 8


def test_fitted_fields_are_labelled_fitted_and_others_keep_their_source(fit):
    for field in DEFAULT_FREE:
        kind, note = fit.spec.provenance[field]
        assert kind == "fitted" and "residuals" in note
    assert fit.spec.provenance["ub_bytes"][0] == "vendor-config"
    assert fit.spec.ub_bytes == get_preset("ascend-910b2").ub_bytes


def test_committed_article_preset_is_fresh(fit):
    """data/article_fitted_chip.json is what the fit gives today. If the model changed on
    purpose: python -m npu_lab.kernels.moe_gating.article --write"""
    committed = get_preset("article")
    for field in DEFAULT_FREE:
        assert getattr(committed, field) == pytest.approx(getattr(fit.spec, field), rel=1e-4), field
    # the committed file itself (not only the preset built from it) holds the fitted values
    data = json.loads(ARTICLE_PRESET_PATH.read_text())
    assert data["name"] == "article"
    for field in DEFAULT_FREE:
        assert data[field] == pytest.approx(getattr(fit.spec, field), rel=1e-4), field
        assert data["provenance"][field][0] == "fitted", field


def test_residuals_are_model_minus_measured(fit):
    r = fit.residuals
    np.testing.assert_allclose(r.residual_us, r.model_us - r.measured_us)
    model = sweep("v1", 1, 1024, 64, 2, fit.spec, r.tileS.tolist()).latency_us.to_numpy()
    np.testing.assert_allclose(model, r.model_us.to_numpy(), rtol=1e-3)


def test_fit_validates_its_input():
    m = load_article_tile_sweep()
    with pytest.raises(ValueError, match="at most 4"):
        fit_hardware(m, free=DEFAULT_FREE + ("clock_ghz", "dma_latency_cycles"))
    with pytest.raises(ValueError, match="unknown HardwareSpec field"):
        fit_hardware(m, free=("warp_size",))
    with pytest.raises(ValueError, match="tile_s and latency_us"):
        fit_hardware(pd.DataFrame({"tile_s": [1]}))


def test_claims_table_has_a_row_per_claim_with_a_verdict():
    claims = reproduce_article_claims("article")
    assert list(claims.columns) == ["claim", "article", "model", "verdict"]
    assert len(claims) == 11
    assert set(claims.verdict) <= {"reproduced", "partly", "not reproduced"}
    assert claims.verdict.iloc[0] == "reproduced"          # sweet spot at 8 on the fitted chip


def test_fast_exp_speed_follows_the_assumed_exp_cost():
    """The polynomial only wins when Exp is much dearer per repeat than a multiply-add."""
    hw = get_preset("ascend-910b2")
    assert exp_speedup(hw) < exp_speedup(hw.replace(vector_exp_cycles_per_repeat=40.0))
    assert exp_speedup(hw.replace(vector_exp_cycles_per_repeat=40.0)) > 1.5


def test_fit_keeps_each_field_inside_its_range_and_reports_it():
    """A bounded fit never leaves a field's plausible range, and says per field whether it is inside."""
    from npu_lab.kernels.moe_gating.fit_ranges import FIT_RANGES, FitRange

    m = load_article_tile_sweep()
    tight = {"launch_overhead_us": FitRange(5.0, 6.0, "test"), "block_dispatch_us": FIT_RANGES["block_dispatch_us"]}
    fit = fit_hardware(m, free=("launch_overhead_us", "block_dispatch_us"), ranges=tight, starts=1)
    table = fit.fields.set_index("field")
    assert list(fit.fields.columns) == ["field", "unit", "base", "fitted", "low", "high", "inside", "source"]
    for field, r in tight.items():
        assert r.low <= table.loc[field, "fitted"] <= r.high * (1 + 1e-9)
        assert table.loc[field, "inside"] is True or table.loc[field, "inside"] == True  # noqa: E712
    unbounded = fit_hardware(m, free="launch_overhead_us", ranges={}, starts=1)
    assert unbounded.fields["inside"].iloc[0] is None
    assert unbounded.spec.launch_overhead_us > 6.0     # the tight range did bind
    with pytest.raises(TypeError, match="FitRange"):
        fit_hardware(m, free="launch_overhead_us", ranges={"launch_overhead_us": (1, 2)})
    with pytest.raises(ValueError, match="low < high"):
        FitRange(3.0, 2.0, "backwards")
