"""The chunked-E kernel (npu_lab/kernels/moe_gating/large_e.py, CANN's KFullLoad idea): exact
against the reference for any chunk width, the timing-only timeline, and the template choice on a
chip whose UB does not hold a whole row."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_gating import moe_gating_topk_reference
from npu_lab.kernels.moe_gating.large_e import calculate_large_e_tiling, run_large_e, simulate_large_e
from npu_lab.kernels.moe_gating.templates import choose_moe_template, moe_gating_topk_auto, template_sweep
from npu_lab.presets import get_preset
from tests.strategies import gate_logits

SMALL_UB = get_preset("ascend-910b2").replace(ub_bytes=64 * 1024, provenance_note="test: a 64 KB UB")


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_chunked_kernel_equals_reference(data):
    E = data.draw(st.integers(1, 2048))
    K = data.draw(st.integers(1, min(E, 300)))
    x = data.draw(gate_logits(shape=(data.draw(st.integers(1, 12)), E)))
    chunk = data.draw(st.sampled_from((None, 32, 64, 96, 256)))
    idx, w, timeline, t = run_large_e(x, K, chunk=chunk)
    ref_idx, ref_w = moe_gating_topk_reference(x, K)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(w, ref_w)
    assert t.chunks == -(-E // t.chunk)


def test_timing_only_run_gives_the_full_runs_timeline():
    x = np.random.default_rng(1).standard_normal((300, 1000)).astype(np.float32)
    _, _, full, t = run_large_e(x, 8, chunk=128)
    timing, t2 = simulate_large_e(300, 1000, 8, chunk=128)
    assert t == t2 and t.chunks == 8
    assert timing.total_us == full.total_us and timing.events().equals(full.events())


def test_chunking_costs_time_next_to_the_whole_row():
    df = template_sweep(E_values=(1024, 2048), K=8, N=1024, chunk=256)
    assert (df["chunks"] > 1).all()
    assert (df["latency_large_e_us"] > df["latency_us"]).all()


def test_kfullload_takes_over_where_the_row_does_not_fit():
    c = choose_moe_template(1, 64, 2048, 8, SMALL_UB)
    assert c.template == "KFullLoad" and "does not fit" in c.reason
    assert [ok for _, ok, _ in c.tried] == [False, False, True]
    x = np.random.default_rng(2).standard_normal((30, 2048)).astype(np.float32)
    res, choice = moe_gating_topk_auto(x, 16, hw=SMALL_UB)
    ref_idx, ref_w = moe_gating_topk_reference(x, 16)
    assert choice.version == res.version == "large_e"
    np.testing.assert_array_equal(res.indices, ref_idx)
    np.testing.assert_array_equal(res.weights, ref_w)


def test_bad_chunk_is_refused():
    with pytest.raises(ValueError, match=r"chunk must be a multiple of 32"):
        calculate_large_e_tiling(4, 100, 2, chunk=40)
