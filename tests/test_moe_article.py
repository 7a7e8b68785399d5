"""The article's numbers, reproduced by fitting the model (npu_lab.kernels.moe_gating.article)."""

import json

import numpy as np
import pandas as pd
import pytest

from npu_lab import get_preset
from npu_lab.data import load_article_tile_sweep, load_previous_model_claims
from npu_lab.kernels.moe_gating import exp_speedup, fit_hardware, reproduce_article_claims, sweep
from npu_lab.kernels.moe_gating.article import (ARTICLE_PRESET_PATH, DEFAULT_FREE, PREVIOUS_COLUMNS,
                                                fit_article_preset)
from npu_lab.kernels.moe_gating.fit_ranges import ARTICLE_FREE, FIT_RANGES


@pytest.fixture(scope="module")
def fit():
    return fit_article_preset()


def test_article_fit_frees_the_fields_stated_before_the_fit():
    assert DEFAULT_FREE == ARTICLE_FREE
    assert set(ARTICLE_FREE) <= set(FIT_RANGES)


def test_article_fit_stays_inside_its_ranges(fit):
    """Issue 9 §4: every fitted value inside its plausible range (the one target that is met)."""
    table = fit.fields.set_index("field")
    assert list(table.index) == list(ARTICLE_FREE)
    for field, r in FIT_RANGES.items():
        assert r.contains(table.loc[field, "fitted"]), field
        assert bool(table.loc[field, "inside"]) is True, field


def test_article_fit_honest_facts_where_the_targets_are_not_met(fit):
    """Under the current model the targets MAPE <= 5 % and minimum at tileS = 8 are NOT met inside
    the ranges. What the fit does say, asserted so a model change that alters it is noticed:
    every field sits on its UPPER bound (the model is too fast even at the dearest plausible chip),
    every row is predicted below the measurement, the MAPE is far above 5 %, and the model's
    minimum is not at tileS = 8. If a model change makes the targets reachable, this test fails:
    then assert the targets instead (issue 9 §4)."""
    assert (fit.fields["bound"] == "upper").all(), fit.fields[["field", "fitted", "bound"]]
    for field, r in FIT_RANGES.items():
        assert getattr(fit.spec, field) == pytest.approx(r.high), field
    assert (fit.residuals.residual_pct < 0).all()
    assert 30 < fit.mape < 90                 # reported: 60 % on the model of this commit
    assert fit.mape == pytest.approx(np.mean(np.abs(fit.residuals.residual_pct)))
    best = fit.residuals.loc[fit.residuals.model_us.idxmin(), "tileS"]
    assert best != 8


def test_a_bound_that_binds_is_the_optimum_not_an_artefact(fit):
    """Each field on its upper bound is the least-squares optimum: raising any one of them past its
    bound lowers the error (the model is monotone and below every row), lowering it raises the error."""
    m = load_article_tile_sweep()
    tiles, measured = m["tile_s"].tolist(), m["latency_us"].to_numpy(dtype=float)

    def mape(spec):
        return float(np.mean(np.abs(sweep("v1", 1, 1024, 64, 2, spec, tiles).latency_us.to_numpy() / measured - 1))) * 100

    for field in ARTICLE_FREE:
        value = getattr(fit.spec, field)
        assert mape(fit.spec.replace(**{field: value * 1.5})) < fit.mape, field
        assert mape(fit.spec.replace(**{field: value / 1.5})) > fit.mape, field


def test_fitted_fields_are_labelled_fitted_and_others_keep_their_source(fit):
    for field in ARTICLE_FREE:
        kind, note = fit.spec.provenance[field]
        assert kind == "fitted" and "residuals" in note
        assert "plausible range" in note and "on its upper bound" in note
    assert fit.spec.provenance["ub_bytes"][0] == "vendor-config"
    assert fit.spec.ub_bytes == get_preset("ascend-910b2").ub_bytes


def test_committed_article_preset_is_fresh(fit):
    """data/article_fitted_chip.json is what the fit gives today. If the model changed on
    purpose: python -m npu_lab.kernels.moe_gating.article --write"""
    committed = get_preset("article")
    for field in ARTICLE_FREE:
        assert getattr(committed, field) == pytest.approx(getattr(fit.spec, field), rel=1e-4), field
    # the committed file itself (not only the preset built from it) holds the fitted values
    data = json.loads(ARTICLE_PRESET_PATH.read_text())
    assert data["name"] == "article"
    for field in ARTICLE_FREE:
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
        fit_hardware(m, free=ARTICLE_FREE + ("clock_ghz",))
    with pytest.raises(ValueError, match="unknown HardwareSpec field"):
        fit_hardware(m, free=("warp_size",))
    with pytest.raises(ValueError, match="tile_s and latency_us"):
        fit_hardware(pd.DataFrame({"tile_s": [1]}))


@pytest.fixture(scope="module")
def claims():
    return reproduce_article_claims("article")


def test_claims_table_has_a_row_per_claim_with_a_verdict(claims):
    assert list(claims.columns) == ["claim", "article", *PREVIOUS_COLUMNS, "model", "verdict"]
    assert len(claims) == 11
    verdicts = {"reproduced", "partly", "not reproduced"}
    assert set(claims.verdict) <= verdicts and set(claims["previous verdict"]) <= verdicts
    # the sweet spot row reports the model's own minimum, whatever it is
    assert claims.verdict.iloc[0] == ("reproduced" if claims.model.iloc[0] == "8" else "not reproduced")


def test_claims_put_the_previous_model_beside_the_current(claims):
    """Every recorded claim joined on its text; the previous model's columns are the record's."""
    old = load_previous_model_claims().set_index("claim")
    assert set(old.index) == set(claims.claim)
    for _, row in claims.iterrows():
        assert row["previous model"] == old.loc[row.claim, "model"]
        assert row["previous verdict"] == old.loc[row.claim, "verdict"]
    # the fit inside the ranges loses the five latencies the previous, unbounded fit reproduced
    latency = claims.claim.str.contains("latency")
    assert (claims.loc[latency, "previous verdict"] == "reproduced").all()
    assert (claims.loc[latency, "verdict"] == "not reproduced").all()


def test_claims_on_another_chip_keep_the_plain_columns():
    claims = reproduce_article_claims("ascend-910b2")
    assert list(claims.columns) == ["claim", "article", "model", "verdict"]
    with pytest.raises(TypeError, match="previous"):
        reproduce_article_claims("article", previous="yes")


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
    assert list(fit.fields.columns) == ["field", "unit", "base", "fitted", "low", "high", "inside", "bound", "source"]
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
