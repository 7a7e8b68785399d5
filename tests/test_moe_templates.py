"""Template selection by shape (npu_lab/kernels/moe_gating/templates.py): CANN's priority order,
the reason given, and exact results for every 1 <= K <= E <= 2048 through the chosen template."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_gating import moe_gating_topk_reference
from npu_lab.kernels.moe_gating.templates import (TEMPLATES, choose_moe_template, moe_gating_topk_auto,
                                                  template_sweep, template_sweep_figure)


def test_priority_order_and_reasons():
    assert [p for _, p, _ in TEMPLATES] == sorted(p for _, p, _ in TEMPLATES)
    c = choose_moe_template(1, 4096, 256, 8)
    assert (c.template, c.version) == ("Perf", "v4") and "K = 8 <= 8" in c.reason
    c = choose_moe_template(1, 4096, 256, 9)
    assert (c.template, c.version) == ("EKFullLoad", "grouped")
    assert c.tried[0][:2] == ("Perf", False) and "K <= 8" in c.tried[0][2]
    c = choose_moe_template(1, 64, 2048, 4)
    assert c.template == "EKFullLoad" and "E <= 1024" in c.tried[0][2]
    with pytest.raises(ValueError, match=r"k must satisfy 1 <= k <= E"):
        choose_moe_template(1, 4, 8, 9)


@settings(max_examples=40, deadline=None)
@given(E=st.integers(1, 2048), data=st.data())
def test_every_k_and_e_exact_through_the_chosen_template(E, data):
    K = data.draw(st.one_of(st.integers(1, min(E, 8)), st.integers(1, E)))
    N = data.draw(st.integers(1, 6))
    seed = data.draw(st.integers(0, 1000))
    rng = np.random.default_rng(seed)
    x = (rng.integers(-8, 9, size=(N, E)) / 4).astype(np.float32)        # ties on purpose
    res, choice = moe_gating_topk_auto(x, K)
    idx, w = moe_gating_topk_reference(x, K)
    assert res.version == choice.version
    np.testing.assert_array_equal(res.indices, idx)
    np.testing.assert_array_equal(res.weights, w)


def test_sweep_shows_where_each_template_takes_over():
    df = template_sweep(E_values=(8, 256, 1024, 1536, 2048), K=8, N=512)
    assert list(df["template"]) == ["Perf", "Perf", "Perf", "EKFullLoad", "EKFullLoad"]
    perf = df[df.template == "Perf"]
    assert (perf["latency_v4_us"] <= perf["latency_grouped_us"]).all()     # the priority order pays
    assert df["latency_us"].is_monotonic_increasing
    fig = template_sweep_figure(df)
    assert len(fig.data) == 4


def test_renorm_false_goes_past_perf_and_the_chunked_template_follows_renorm():
    from npu_lab.presets import get_preset
    small = get_preset("ascend-910b2").replace(ub_bytes=64 * 1024, provenance_note="test: a 64 KB UB")
    c = choose_moe_template(1, 4096, 256, 8, renorm=False)
    assert c.template == "EKFullLoad" and not c.tried[0][1] and "renorm = 1 only" in c.tried[0][2]
    assert [t for t, _, _ in choose_moe_template(1, 64, 2048, 8, small, renorm=False).tried] == \
        ["Perf", "EKFullLoad", "KFullLoad"]
    assert choose_moe_template(1, 64, 2048, 8, small).template == "KRenorm"
    with pytest.raises(TypeError, match="renorm must be True"):
        choose_moe_template(1, 4, 64, 2, renorm=None)
    with pytest.raises(ValueError, match=r"k = 1025 > 1024"):
        choose_moe_template(1, 4, 2048, 1025, renorm=False)


@settings(max_examples=30, deadline=None)
@given(E=st.integers(1, 2048), data=st.data())
def test_every_k_and_e_renorm_false_through_the_chosen_template(E, data):
    """renorm = 0 on the 910B2 (EKFullLoad: bit-exact) and on a 64 KB UB (KFullLoad from E = 1536:
    indices exact — grid logits, so equal probabilities only where the logits are equal — and
    weights within the stated tolerance)."""
    from npu_lab.presets import get_preset
    small = get_preset("ascend-910b2").replace(ub_bytes=64 * 1024, provenance_note="test: a 64 KB UB")
    K = data.draw(st.one_of(st.integers(1, min(E, 8)), st.integers(1, min(E, 1024))))
    N = data.draw(st.integers(1, 5))
    hw = data.draw(st.sampled_from(("ascend-910b2", small)))
    x = (np.random.default_rng(data.draw(st.integers(0, 1000))).integers(-8, 9, size=(N, E)) / 4).astype(np.float32)
    res, choice = moe_gating_topk_auto(x, K, hw=hw, renorm=False)
    idx, w = moe_gating_topk_reference(x, K, renorm=False)
    assert res.version == choice.version and choice.template in ("EKFullLoad", "KFullLoad")
    np.testing.assert_array_equal(res.indices, idx)
    if choice.template == "EKFullLoad":
        np.testing.assert_array_equal(res.weights, w)
    else:
        np.testing.assert_allclose(res.weights, w, rtol=2e-6, atol=1e-30)


def test_sweep_shows_the_renorm_false_path():
    import pandas as pd
    from npu_lab.presets import get_preset
    small = get_preset("ascend-910b2").replace(ub_bytes=64 * 1024, provenance_note="test: a 64 KB UB")
    E = (256, 1024, 1536, 2048)
    one = template_sweep(E_values=E, K=8, N=256, hw=small)
    zero = template_sweep(E_values=E, K=8, N=256, hw=small, renorm=False)
    assert list(one["template"]) == ["Perf", "Perf", "KRenorm", "KRenorm"]
    assert list(zero["template"]) == ["EKFullLoad", "EKFullLoad", "KFullLoad", "KFullLoad"]
    assert zero["latency_v4_us"].isna().all() and (~zero["renorm"]).all()
    kfl = zero[zero.template == "KFullLoad"]
    assert (kfl["chunks"] > 1).all() and (kfl["latency_us"] == kfl["latency_large_e_us"]).all()
    # the online softmax costs more than the K-only softmax at the same chunking
    assert (kfl["latency_large_e_us"].values > one[one.template == "KRenorm"]["latency_large_e_us"].values).all()
    fig = template_sweep_figure(pd.concat([one, zero]))
    names = [t.name for t in fig.data]
    assert len(names) == 6 and "KFullLoad (large_e, chunked, online softmax) renorm 0" in names
    with pytest.raises(ValueError, match="non-empty DataFrame"):
        template_sweep_figure(one.iloc[:0])
