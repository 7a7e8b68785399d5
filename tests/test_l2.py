"""The L2 cache between launches (npu_lab.sim.l2): hits are cheaper than HBM, capacity is
respected, the chain's HBM figure excludes L2 hits, timing-only == full."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab import GlobalTensor, get_preset, launch
from npu_lab.kernels.moe_gating import moe_gating_topk, simulate_moe_gating
from npu_lab.kernels.scaled_add import ScaledAddTiling, scaled_add_kernel
from npu_lab.sim.l2 import GmRouter, L2Cache, core_bytes_per_cycle
from npu_lab.sim.timeline import gm_read_bytes

HW = get_preset("ascend-910b2")
N = 1 << 18                                   # 1 MB of float32 per buffer


def _buffers(n=N, timing_only=True, names=("x", "y", "z", "w")):
    return [GlobalTensor.empty(n, np.float32, name, timing_only=timing_only) for name in names]


def _chain(hw, l2, n=N, timing_only=True, data=None):
    """z = 2x + y, then w = 2z + y: the second launch reads z (just written) and y (just read)."""
    x, y, z, w = _buffers(n, timing_only)
    if data is not None:
        x.data[:], y.data[:] = data
    tiling = ScaledAddTiling(n, n // 48, 2048, 2)
    first = launch(scaled_add_kernel, tiling.block_dim, x, y, z, tiling.pack(), hw=hw,
                   timing_only=timing_only, l2=l2)
    second = launch(scaled_add_kernel, tiling.block_dim, z, y, w, tiling.pack(), hw=hw,
                    timing_only=timing_only, l2=l2)
    return first.launches[0], second.launches[0], w


def test_cache_is_lru_over_whole_buffers():
    cache = L2Cache(HW.replace(l2_bytes=3000))
    a, b, c, big = (GlobalTensor.empty(n, np.uint8, name).buffer for name, n in
                    (("a", 1000), ("b", 1000), ("c", 1500), ("big", 4000)))
    cache.touch([a, b])
    assert cache.holds(a) and cache.holds(b) and cache.resident_bytes == 2000
    cache.touch([a, c])                       # b is the least recent: evicted to make room
    assert cache.contents() == [("a", 1000), ("c", 1500)]
    cache.touch([big])                        # larger than the L2: flushes it and does not stay
    assert cache.contents() == []


def test_views_share_their_buffer():
    gm = GlobalTensor.empty(64, np.float32, "g")
    assert gm[8].buffer is gm.buffer and gm[8][8].buffer is gm.buffer
    assert gm.buffer.nbytes == 256 and gm[8].buffer.nbytes == 256


def test_router_hits_only_reads_of_resident_buffers():
    a, b = (GlobalTensor.empty(8, np.float32, n).buffer for n in "ab")
    router = GmRouter(1.0, 4.0, {a})
    assert router.route(a, "MTE2") == (4.0, False)
    assert router.route(b, "MTE2") == (1.0, True)
    assert router.route(a, "MTE3") == (1.0, True)      # writes go to HBM
    assert router.touched() == [b, a]                  # read-only first, then written
    assert list(router.l2_hits) == [a]


def test_core_share_of_l2_and_hbm():
    hbm, l2 = core_bytes_per_cycle(HW, 48)
    assert hbm == pytest.approx(HW.bytes_per_cycle(HW.hbm_bandwidth_gbps / 48))
    assert l2 == pytest.approx(HW.bytes_per_cycle(min(HW.core_dma_bandwidth_gbps, HW.l2_bandwidth_gbps / 48)))
    assert l2 > hbm
    with pytest.raises(ValueError, match="active_cores"):
        core_bytes_per_cycle(HW, 0)


def test_l2_hit_is_cheaper_than_hbm_and_not_hbm_traffic():
    _, cold, _ = _chain(HW, None)             # no L2 carried: the second launch reads HBM
    _, warm, _ = _chain(HW, L2Cache(HW))
    nbytes = 4 * N
    assert cold.l2_hit_bytes == 0 and cold.hbm_bytes == 3 * nbytes
    assert warm.l2_hit_bytes == 2 * nbytes    # z and y
    assert warm.hbm_bytes == nbytes           # only w's write
    assert sorted(warm.l2_hit_buffers) == ["y", "z"]
    assert warm.total_cycles < cold.total_cycles
    assert warm.gm_read_bytes == cold.gm_read_bytes == 2 * nbytes


def test_capacity_is_respected():
    """An L2 holding one buffer: after the first launch only z (written last) stays."""
    small = HW.replace(l2_bytes=4 * N)
    _, second, _ = _chain(small, L2Cache(small))
    assert second.l2_hit_buffers == ("z",) and second.l2_hit_bytes == 4 * N
    tiny = HW.replace(l2_bytes=4 * N - 32)    # nothing fits: every read from HBM
    _, second, _ = _chain(tiny, L2Cache(tiny))
    assert second.l2_hit_bytes == 0 and second.hbm_bytes == 3 * 4 * N


def test_l2_roofline_binds_when_l2_is_slow():
    slow = HW.replace(l2_bandwidth_gbps=1.0)
    _, second, _ = _chain(slow, L2Cache(slow))
    assert second.floor_reason.startswith("L2 roofline")          # the highest of the floors
    assert second.floor_cycles == pytest.approx(second.l2_hit_bytes / slow.bytes_per_cycle(1.0))
    assert second.body_cycles >= second.floor_cycles


def test_l2_of_another_chip_is_refused():
    with pytest.raises(ValueError, match="L2Cache of this chip"):
        _chain(HW, L2Cache(get_preset("ascend-310p3")))
    with pytest.raises(TypeError, match="HardwareSpec"):
        L2Cache("ascend-910b2")


def test_timing_only_equals_full_run_with_l2():
    rng = np.random.default_rng(0)
    n = 48 * 2048
    data = rng.standard_normal((2, n)).astype(np.float32)
    t1, t2, _ = _chain(HW, L2Cache(HW), n, timing_only=True)
    f1, f2, w = _chain(HW, L2Cache(HW), n, timing_only=False, data=data)
    np.testing.assert_allclose(w.data, 2 * (2 * data[0] + data[1]) + data[1], rtol=1e-6)
    for a, b in ((t1, f1), (t2, f2)):
        assert (a.total_cycles, a.hbm_bytes, a.l2_hit_bytes) == (b.total_cycles, b.hbm_bytes, b.l2_hit_bytes)


@pytest.mark.parametrize("hw", ["ascend-910b2", "ascend-310p3"])
def test_discrete_chain_timing_only_equals_full(hw):
    logits = np.random.default_rng(1).standard_normal((200, 64)).astype(np.float32)
    full = moe_gating_topk(logits, 2, version="discrete", hw=hw).timeline
    timing = simulate_moe_gating(1, 200, 64, 2, version="discrete", hw=hw).timeline
    assert full.total_us == timing.total_us
    assert (full.hbm_bytes, full.l2_hit_bytes) == (timing.hbm_bytes, timing.l2_hit_bytes)
    assert [l.l2_hit_buffers for l in full.launches] == [l.l2_hit_buffers for l in timing.launches]


def test_discrete_chain_reads_its_intermediates_from_l2_when_they_fit():
    N_, E, K = 1024, 64, 2
    t = simulate_moe_gating(1, N_, E, K, version="discrete").timeline
    softmax, topk, renorm = t.launches
    assert softmax.l2_hit_bytes == 0                           # logits come from the host: cold
    assert topk.l2_hit_buffers == ("probs",) and topk.l2_hit_bytes == N_ * E * 4
    assert renorm.l2_hit_buffers == ("topk_values",) and renorm.l2_hit_bytes == N_ * K * 4
    assert t.hbm_bytes + t.l2_hit_bytes == N_ * E * 4 * 3 + N_ * K * 4 * 4   # every GM byte, once


def test_discrete_chain_intermediate_larger_than_l2_is_read_from_hbm():
    """probs [1024, 64] is 256 KB: with 128 KB of L2 TopK reads it from HBM; the 8 KB of top-K
    values still fit, so Renormalise reads them from L2."""
    N_, E, K = 1024, 64, 2
    small = get_preset("ascend-910b2").replace(l2_bytes=128 * 1024)
    t = simulate_moe_gating(1, N_, E, K, version="discrete", hw=small).timeline
    softmax, topk, renorm = t.launches
    assert topk.l2_hit_bytes == 0
    assert renorm.l2_hit_bytes == N_ * K * 4
    assert t.hbm_bytes == N_ * E * 4 * 3 + N_ * K * 4 * 3
    roomy = simulate_moe_gating(1, N_, E, K, version="discrete").timeline
    assert roomy.launches[1].total_cycles < topk.total_cycles   # the L2 hit is cheaper


def test_single_launch_is_cold_and_gm_reads_are_all_hbm():
    """Without an L2Cache nothing is a hit: every MTE2 byte is an HBM byte (this catches a DMA
    cost rewrite that stops recording GM bytes on its MTE2 events)."""
    r = simulate_moe_gating(1, 1024, 64, 2, version="v3")
    (rec,) = r.timeline.launches
    assert rec.l2_hit_bytes == 0 and rec.l2_hit_buffers == ()
    assert sum(gm_read_bytes(t) * c for t, c in zip(rec.traces, rec.class_counts)) == 1024 * 64 * 4
