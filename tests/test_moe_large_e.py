"""The chunked-E kernel (npu_lab/kernels/moe_gating/large_e.py, CANN's KRenorm and KFullLoad
templates): renorm = 1 exact against the reference for any chunk width; renorm = 0 (the online max /
sum) exact in its indices and within KFL_RTOL in its weights; the timing-only timeline, the sync the
race detector demands, and the template choice on a chip whose UB does not hold a whole row."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_gating import moe_gating_topk, moe_gating_topk_reference
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


def test_the_chunked_templates_take_over_where_the_row_does_not_fit():
    """CANN's two chunked templates differ only in the renorm they serve (IsCapable: renorm == 1 for
    KRenorm, ..._tiling_k_renorm.cpp; renorm == 0 for KFullLoad, ..._tiling_k_fullload.cpp)."""
    c = choose_moe_template(1, 64, 2048, 8, SMALL_UB)
    assert c.template == "KRenorm" and "does not fit" in c.reason
    assert [ok for _, ok, _ in c.tried] == [False, False, False, True]
    assert "renorm == 0" in c.tried[2][2]
    c = choose_moe_template(1, 64, 2048, 8, SMALL_UB, renorm=False)
    assert c.template == "KFullLoad" and "online max / sum" in c.reason
    assert [ok for _, ok, _ in c.tried] == [False, False, True]
    assert "v4" in c.tried[0][2] and "renorm = 1 only" in c.tried[0][2]
    x = np.random.default_rng(2).standard_normal((30, 2048)).astype(np.float32)
    res, choice = moe_gating_topk_auto(x, 16, hw=SMALL_UB)
    ref_idx, ref_w = moe_gating_topk_reference(x, 16)
    assert choice.version == res.version == "large_e"
    np.testing.assert_array_equal(res.indices, ref_idx)
    np.testing.assert_array_equal(res.weights, ref_w)
    res, choice = moe_gating_topk_auto(x, 16, hw=SMALL_UB, renorm=False)
    assert choice.template == "KFullLoad" and res.tiling.renorm == 0
    assert _check_kfl(x, 16, res.indices, res.weights) == 30


def test_moe_gating_topk_renorm_false_runs_kfullload_where_cann_would():
    x = np.random.default_rng(5).standard_normal((20, 2048)).astype(np.float32)
    res = moe_gating_topk(x, 8, renorm=False, hw=SMALL_UB)
    assert res.version == "large_e" and res.tiling.renorm == 0 and res.tiling.chunks > 1
    _check_kfl(x, 8, res.indices, res.weights)
    whole = moe_gating_topk(x[:, :1024], 8, renorm=False, hw=SMALL_UB)   # a row fits: EKFullLoad
    assert whole.version == "grouped"
    ref_idx, ref_w = moe_gating_topk_reference(x[:, :1024], 8, renorm=False)
    np.testing.assert_array_equal(whole.indices, ref_idx)
    np.testing.assert_array_equal(whole.weights, ref_w)
    assert moe_gating_topk(x, 8, renorm=False).version == "grouped"      # the 910B2 holds the row
    with pytest.raises(ValueError, match=r"k = 1100 > 1024"):
        moe_gating_topk(x, 1100, renorm=False, hw=SMALL_UB)             # the grouped path's error


def test_bad_chunk_is_refused():
    with pytest.raises(ValueError, match=r"chunk must be a multiple of 32"):
        calculate_large_e_tiling(4, 100, 2, chunk=40)


# --- renorm = 0: KFullLoad, the online max / sum ---------------------------------------------------

#: the weights' tolerance (large_e.py's docstring): the row sum is taken in chunk order, each chunk's
#: sum rescaled by exp(m_old - m_new), where the reference sums the whole row at once; the
#: exponentials themselves are the reference's (the same max, the same exp), so the weights differ
#: only by the sum's rounding. Measured over 2000 configs of the hypothesis strategy below
#: (scripts/measure_kfullload_error.py): 3.8e-7 relative at most.
KFL_RTOL, KFL_ATOL = 2e-6, 1e-30


def _reference_norm(x):
    rows = np.asarray(x, np.float32).reshape(-1, x.shape[-1])
    e = np.exp(rows - rows.max(axis=-1, keepdims=True))
    return e * (np.float32(1.0) / e.sum(axis=-1, keepdims=True, dtype=np.float32))


def _check_kfl(x, K, idx, w):
    """Indices: the chosen experts' full-softmax values equal the reference's weights element for
    element (the same top-K set, in the same order of values), and the indices themselves are equal
    on every row where no two experts near the top have equal probabilities but different logits
    (there the reference, which ranks by probability, takes the lower index and the kernel, which
    ranks by logit, the larger logit). Weights within KFL_RTOL. Returns the rows checked exactly."""
    ref_idx, ref_w = moe_gating_topk_reference(x, K, renorm=False)
    E = x.shape[-1]
    rows, norm = np.asarray(x, np.float32).reshape(-1, E), _reference_norm(x)
    idx2, ref_idx2 = idx.reshape(-1, K), ref_idx.reshape(-1, K)
    np.testing.assert_array_equal(np.take_along_axis(norm, idx2.astype(np.int64), 1), ref_w.reshape(-1, K))
    exact = 0
    for q in range(rows.shape[0]):
        cut = np.sort(norm[q])[::-1][min(K, E - 1)]
        near = norm[q] >= cut
        vals, logits = norm[q][near], rows[q][near]
        if all(len(set(logits[vals == v].tolist())) == 1 for v in set(vals.tolist())):
            np.testing.assert_array_equal(idx2[q], ref_idx2[q])
            exact += 1
    np.testing.assert_allclose(w, ref_w, rtol=KFL_RTOL, atol=KFL_ATOL)
    return exact


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_kfullload_equals_reference_within_the_tolerance(data):
    E = data.draw(st.integers(1, 2048))
    K = data.draw(st.integers(1, min(E, 1024)))
    x = data.draw(gate_logits(shape=(data.draw(st.integers(1, 10)), E)))
    chunk = data.draw(st.sampled_from((None, 32, 64, 96, 160, 256)))
    idx, w, timeline, t = run_large_e(x, K, chunk=chunk, renorm=False)
    assert t.renorm == 0 and t.chunks == -(-E // t.chunk)
    _check_kfl(x, K, idx, w)


@pytest.mark.parametrize("N, E, K, chunk", [
    (3, 256, 8, 256),       # E = one chunk exactly
    (5, 1000, 8, 128),      # E not a multiple of 32: a masked pad in the last chunk
    (4, 2048, 16, None),    # the widest row
    (2, 40, 40, None),      # K = E
    (3, 300, 70, 160),      # K > 64, a 32-column Sub tail, per-row reductions
])
def test_kfullload_edge_shapes(N, E, K, chunk):
    x = np.random.default_rng(E + K).standard_normal((N, E)).astype(np.float32) * 4
    idx, w, _, t = run_large_e(x, K, chunk=chunk, renorm=False)
    assert _check_kfl(x, K, idx, w) == N          # distinct random logits: every row exact
    if K == E:
        np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-6)


def test_kfullload_ties_take_the_lower_expert_and_share_the_probability():
    x = np.zeros((3, 600), np.float32)
    x[1, 100:400] = 2.0                            # ties across chunk boundaries
    idx, w, _, _ = run_large_e(x, 5, chunk=128, renorm=False)
    np.testing.assert_array_equal(idx[0], np.arange(5))
    np.testing.assert_array_equal(idx[1], 100 + np.arange(5))
    np.testing.assert_allclose(w[0], 1 / 600, rtol=1e-6)
    _check_kfl(x, 5, idx, w)


def test_kfullload_float16_and_3d_logits():
    x = (np.random.default_rng(3).standard_normal((2, 3, 700)) * 3).astype(np.float16)
    idx, w, _, _ = run_large_e(x, 6, chunk=256, renorm=False)
    assert idx.shape == w.shape == (2, 3, 6)
    _check_kfl(x, 6, idx, w)


def test_kfullload_timing_only_equals_the_full_run():
    x = np.random.default_rng(4).standard_normal((300, 1000)).astype(np.float32)
    _, _, full, t = run_large_e(x, 8, chunk=128, renorm=False)
    timing, t2 = simulate_large_e(300, 1000, 8, chunk=128, renorm=False)
    assert t == t2 and t.renorm == 0
    assert timing.total_us == full.total_us and timing.events().equals(full.events())
    renorm1, _ = simulate_large_e(300, 1000, 8, chunk=128)
    assert timing.total_us > renorm1.total_us     # the online softmax costs: Exp over every chunk


def test_kfullload_dropping_the_s_v_wait_is_a_race(monkeypatch):
    from npu_lab.lang import RaceError
    from npu_lab.lang.context import KernelContext
    original = KernelContext.wait_flag
    monkeypatch.setattr(KernelContext, "wait_flag",
                        lambda self, e, i: None if e == "S_V" else original(self, e, i))
    with pytest.raises(RaceError, match="offs"):
        simulate_large_e(16, 512, 8, chunk=128, renorm=False)


def test_kfullload_the_prefetch_must_wait_for_the_online_step(monkeypatch):
    """The online step rewrites the input slot in place (x - m, exp) before FreeTensor: a prefetch
    that does not wait for the free races with it (the detector names the step's ReduceSum)."""
    from npu_lab.lang import RaceError
    from npu_lab.lang.memory import TQue
    original = TQue.alloc_tensor

    def alloc_without_waiting(self, dtype):
        if self.name != "x":
            return original(self, dtype)
        core = self.core
        saved = core.wait_until, core.join_clock
        core.wait_until = core.join_clock = lambda *a: None
        try:
            return original(self, dtype)
        finally:
            core.wait_until, core.join_clock = saved

    monkeypatch.setattr(TQue, "alloc_tensor", alloc_without_waiting)
    with pytest.raises(RaceError, match="ReduceSum"):
        simulate_large_e(16, 512, 8, chunk=128, renorm=False)


def test_kfullload_bad_input():
    x = np.zeros((2, 2048), np.float32)
    with pytest.raises(TypeError, match="renorm must be True"):
        run_large_e(x, 4, renorm=0)
    with pytest.raises(TypeError, match="renorm must be True"):
        simulate_large_e(4, 100, 2, renorm="no")
    with pytest.raises(ValueError, match=r"k = 1100 > 1024.*MAX_K"):
        run_large_e(x, 1100, renorm=False)
    with pytest.raises(ValueError, match=r"k must satisfy 1 <= k <= E"):
        run_large_e(x[:, :8], 9, renorm=False)
    with pytest.raises(ValueError, match="non-finite|NaN|nan"):
        run_large_e(np.full((1, 64), np.nan, np.float32), 2, renorm=False)
    with pytest.raises(ValueError, match="whole number"):
        simulate_large_e(0, 100, 2, renorm=False)
    run_large_e(x, 1100)                           # renorm = 1 has no MAX_K: the same k runs
