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
