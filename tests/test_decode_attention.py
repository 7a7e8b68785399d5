"""Decode attention (npu_lab/kernels/decode/): v1 / v2 / v4 against the float64 reference over
hypothesis shapes (GQA, per-sequence lengths, float16 / float32), the online softmax equal to the
whole-row softmax, FlashDecode equal to v2 and chosen by CANN's rule, the UB limit of v1, the
race detector on a copy of the kernel without a flag, illegal inputs, the roofline, and
timing-only = full."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab import get_preset
from npu_lab.kernels.decode import (TOLERANCE, decode_attention, decode_attention_reference, decode_ladder,
                                    decode_roofline_us, decode_tiling, flash_decode_splits, largest_chunk)
from npu_lab.lang import RaceError
from npu_lab.lang.launch import full_timing_every_block

HW = get_preset("ascend-910b2")
HYP = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _case(seed, B, max_len, n2, g, d, dtype, lens=None):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, n2 * g, d)).astype(np.float32)
    k = rng.standard_normal((B, max_len, n2, d)).astype(dtype)
    v = rng.standard_normal((B, max_len, n2, d)).astype(dtype)
    lens = rng.integers(1, max_len + 1, B) if lens is None else np.asarray(lens)
    return q, k, v, lens


def _check(out, ref, dtype):
    rtol, atol = TOLERANCE[np.dtype(dtype)]
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)


@HYP
@given(seed=st.integers(0, 2**16), B=st.integers(1, 5), max_len=st.integers(1, 70), n2=st.integers(1, 3),
       g=st.sampled_from([1, 2, 8]), d=st.sampled_from([64, 128]), dtype=st.sampled_from([np.float16, np.float32]),
       version=st.sampled_from(["v1", "v2", "v4"]), chunk=st.sampled_from([8, 16, 40]))
def test_matches_reference(seed, B, max_len, n2, g, d, dtype, version, chunk):
    q, k, v, lens = _case(seed, B, max_len, n2, g, d, dtype)
    got = decode_attention(q, k, v, lens, version=version, chunk=None if version == "v1" else chunk)
    _check(got.out, decode_attention_reference(q, k, v, lens), dtype)


@pytest.mark.parametrize("lens", [[1, 1], [64, 64], [1, 64], [63, 2]])   # seq_len 1, = max_len, differing
@pytest.mark.parametrize("g", [1, 8])
def test_edge_lengths_and_groups(lens, g):
    q, k, v, lens = _case(7, 2, 64, 2, g, 64, np.float16, lens)
    ref = decode_attention_reference(q, k, v, lens)
    for version in ("v1", "v2", "v4"):
        _check(decode_attention(q, k, v, lens, version=version, chunk=16).out if version != "v1" else
               decode_attention(q, k, v, lens, version="v1").out, ref, np.float16)


def test_online_softmax_equals_whole_row_and_flash_decode_equals_v2():
    q, k, v, lens = _case(3, 2, 200, 2, 4, 64, np.float32, [200, 173])   # v1: the whole row fits at D = 64
    whole = decode_attention(q, k, v, lens, version="v1").out
    online = decode_attention(q, k, v, lens, version="v2", chunk=32).out
    split = decode_attention(q, k, v, lens, version="v4", chunk=32, splits=5)
    assert split.tiling.splits == 5 and len(split.timeline.launches) == 2
    np.testing.assert_allclose(online, whole, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(split.out, online, rtol=1e-5, atol=1e-6)


def test_flash_decode_rule_is_cann_s():
    cores = HW.vector_cores
    assert flash_decode_splits(1, 8, 8192, cores, 64) == cores // 8          # 8 < 0.4 x 48: split
    assert flash_decode_splits(64, 8, 8192, cores, 64) == 1                  # 512 >= 19.2: no split
    bn = int(np.ceil(0.4 * cores))                                           # the threshold itself
    assert flash_decode_splits(bn, 1, 8192, cores, 64) == 1
    assert flash_decode_splits(bn - 1, 1, 8192, cores, 64) > 1
    assert flash_decode_splits(1, 1, 100, cores, 64) == 2                    # no piece shorter than a chunk


def test_v1_refuses_past_the_ub_with_the_limit():
    limit = largest_chunk(HW, 128, 2, 8, 1)
    decode_tiling(1, 1, 8, 128, limit, [limit], 2, HW, version="v1")
    with pytest.raises(ValueError, match=f"limit {limit} positions"):
        decode_tiling(1, 1, 8, 128, limit + 8, [limit + 8], 2, HW, version="v1")


@pytest.mark.parametrize("drop", ["V_S", "S_V"])
def test_dropping_a_flag_is_a_race(drop):
    q, k, v, lens = _case(1, 1, 40, 1, 2, 64, np.float32, [40])
    with pytest.raises(RaceError):
        decode_attention(q, k, v, lens, version="v2", chunk=16, _sync={"V_S", "S_V", "S_MTE3", "MTE3_S"} - {drop})


@pytest.mark.parametrize("drop", ["S_MTE3", "MTE3_S"])
def test_flash_decode_lse_flags(drop):
    q, k, v, lens = _case(1, 1, 40, 1, 2, 64, np.float32, [40])
    with pytest.raises(RaceError):
        decode_attention(q, k, v, lens, version="v4", chunk=8, splits=2, block_dim=1,
                         _sync={"V_S", "S_V", "S_MTE3", "MTE3_S"} - {drop})


@pytest.mark.parametrize("change, error, match", [
    (dict(nq=3), ValueError, "multiple of kv_heads"),
    (dict(lens=[0, 4]), ValueError, "1..max_len"),
    (dict(lens=[5, 99]), ValueError, "1..max_len"),
    (dict(vdtype=np.float32), TypeError, "one dtype"),
    (dict(d=96), ValueError, "64-float slabs"),
])
def test_illegal_inputs(change, error, match):
    d = change.get("d", 64)
    q, k, v, lens = _case(0, 2, 8, 2, 2, d, np.float16, change.get("lens", [3, 8]))
    if "nq" in change:
        q = q[:, :change["nq"]]
    if "vdtype" in change:
        v = v.astype(change["vdtype"])
    with pytest.raises(error, match=match):
        decode_attention(q, k, v, lens)


def test_roofline_and_ladder():
    lens = np.full(4, 1024)
    r = decode_roofline_us(lens, 8, 128, 2, HW)
    assert r == pytest.approx(4 * 1024 * 8 * 128 * 2 * 2 / (HW.hbm_bandwidth_gbps * 1e3))
    df = decode_ladder(batch=1, context_len=1024, q_heads=32, kv_heads=8, head_dim=128, hw=HW)   # B·N2 = 8 < 19.2
    assert list(df.version) == ["v1", "v2", "v3", "v4", "v5"]
    assert np.isnan(df.time_us[0]) and "UB" in df.note[0]             # v1: 1024 positions do not fit
    ok = df.dropna(subset=["time_us"])
    assert (ok.achieved > 0).all() and (ok.achieved <= 1).all()
    assert (ok.time_us >= ok.roofline_us).all()
    assert df.kv_bytes[4] * 2 == df.kv_bytes[1]                       # v5: int8 halves float16's bytes
    v4 = df[df.version == "v4"].iloc[0]
    assert v4.splits > 1 and v4.time_us < df[df.version == "v2"].iloc[0].time_us   # splitting pays


@pytest.mark.parametrize("version, lens", [("v2", [40, 40, 40, 17]), ("v4", [40, 33]), ("v1", [9, 9, 9])])
def test_timing_only_and_fast_path_equal_full(version, lens):
    q, k, v, lens = _case(2, len(lens), 40, 2, 2, 64, np.float16, lens)
    fast = decode_attention(q, k, v, lens, version=version, chunk=16)
    timing = decode_attention(q.shape, (k.shape, k.dtype), None, lens, version=version, chunk=16, timing_only=True)
    with full_timing_every_block():
        full = decode_attention(q, k, v, lens, version=version, chunk=16)
    cols = ["launch", "pipe", "name", "start_us", "end_us", "bytes"]
    for other in (timing, full):
        assert other.timeline.total_us == fast.timeline.total_us
        assert other.timeline.events()[cols].equals(fast.timeline.events()[cols])
    np.testing.assert_array_equal(full.out, fast.out)


# ---- v5: int8 KV, per-channel antiquant ------------------------------------------------------
from npu_lab.kernels.decode import antiquant_error, dequantize_kv, quantize_kv_int8  # noqa: E402


@HYP
@given(seed=st.integers(0, 2**16), B=st.integers(1, 4), max_len=st.integers(1, 50), n2=st.integers(1, 3),
       g=st.sampled_from([1, 8]), d=st.sampled_from([64, 128]), version=st.sampled_from(["v5", "v4"]))
def test_int8_matches_dequantised_reference(seed, B, max_len, n2, g, d, version):
    q, k, v, lens = _case(seed, B, max_len, n2, g, d, np.float32)
    kq, ks, ko = quantize_kv_int8(k, lens)
    vq, vs, vo = quantize_kv_int8(v, lens)
    anti = (ks, ko, vs, vo)
    got = decode_attention(q, kq, vq, lens, version=version, antiquant=anti, chunk=16)
    _check(got.out, decode_attention_reference(q, kq, vq, lens, antiquant=anti), np.int8)


def test_quantisation_round_trip_and_the_error_int8_brings():
    q, k, v, lens = _case(11, 3, 64, 2, 4, 128, np.float32, [64, 5, 33])
    kq, ks, ko = quantize_kv_int8(k, lens)
    err = np.abs(dequantize_kv(kq, ks, ko) - k)[0]
    assert (err <= ks / 2 + 1e-6).all()                               # half a step per element
    e = antiquant_error(q, k, v, lens)
    assert e["kv_bytes_v5"] * 4 == e["kv_bytes_v2"]                  # int8 vs float32
    assert 1e-4 < e["max_abs_error"] < 0.1                            # int8 costs accuracy, but little


def test_int8_needs_antiquant_and_antiquant_needs_int8():
    q, k, v, lens = _case(0, 2, 8, 2, 2, 64, np.float32, [3, 8])
    kq, ks, ko = quantize_kv_int8(k)
    with pytest.raises(ValueError, match="need antiquant"):
        decode_attention(q, kq, kq, lens, version="v5")
    with pytest.raises(ValueError, match="antiquant is for int8"):
        decode_attention(q, k, v, lens, version="v2", antiquant=(ks, ko, ks, ko))
    with pytest.raises(ValueError, match=r"\[kv_heads, head_dim\]"):
        decode_attention(q, kq, kq, lens, version="v5", antiquant=(ks[:1], ko, ks, ko))
    with pytest.raises(TypeError, match="int8"):
        decode_attention(q, k, v, lens, version="v5", antiquant=(ks, ko, ks, ko))


def test_flash_decode_sweep_splits_only_below_the_threshold_and_pays_there():
    from npu_lab.kernels.decode import flash_decode_sweep
    df = flash_decode_sweep(batches=(1, 2, 4), context_len=1024, q_heads=16, kv_heads=8)
    below = df.bn < 0.4 * HW.vector_cores
    assert (df.splits[below] > 1).all() and (df.splits[~below] == 1).all()
    assert (df.speedup[below] > 1).all()
    assert (df.v2_us[~below] == df.v4_us[~below]).all()          # no split: v4 is v2


@pytest.mark.parametrize("version, dtype", [("v2", np.float16), ("v4", np.float32), ("v5", np.int8),
                                            ("v2", np.uint16)])
def test_timing_only_jumps_over_heads_and_chunks_exactly(version, dtype):
    """G = 8 heads and 6 chunks a task: the timing-only run fast-forwards both loops (tile_loop
    needs >= 4 iterations) and must still give the full run's timeline event for event."""
    rng = np.random.default_rng(8)
    B, n2, g, d, L = 3, 2, 8, 128, 48
    q = rng.standard_normal((B, n2 * g, d)).astype(np.float32)
    k, v = (rng.integers(-100, 100, (B, L, n2, d)).astype(np.int8) if dtype == np.int8 else
            rng.standard_normal((B, L, n2, d)).astype(np.float32 if dtype == np.uint16 else dtype)
            for _ in range(2))
    if dtype == np.uint16:
        from npu_lab.lang import float_to_bfloat16
        k, v = float_to_bfloat16(k), float_to_bfloat16(v)
    anti = tuple(np.full((n2, d), x, np.float32) for x in (0.01, 0.5, 0.02, -0.5)) if dtype == np.int8 else None
    lens = [48, 48, 41]
    kw = dict(version=version, chunk=8, antiquant=anti)
    timing = decode_attention(q.shape, (k.shape, k.dtype), None, lens, timing_only=True, **kw)
    with full_timing_every_block():
        full = decode_attention(q, k, v, lens, **kw)
    cols = ["launch", "pipe", "name", "start_us", "end_us", "bytes"]
    assert timing.timeline.events()[cols].equals(full.timeline.events()[cols])


def test_timing_only_exact_when_the_task_loop_jumps_over_chunk_jumps():
    """One block, 8 tasks of 6 chunks: the task loop fast-forwards over periods that hold the chunk
    loop's own fast-forwards (nested compressed events, sim.core.replicate_events)."""
    rng = np.random.default_rng(9)
    q = rng.standard_normal((4, 8, 64)).astype(np.float32)
    k = rng.standard_normal((4, 48, 2, 64)).astype(np.float16)
    kw = dict(version="v2", chunk=8, block_dim=1)
    timing = decode_attention(q.shape, (k.shape, k.dtype), None, [48] * 4, timing_only=True, **kw)
    full = decode_attention(q, k, k, [48] * 4, **kw)
    cols = ["launch", "pipe", "name", "start_us", "end_us", "bytes"]
    assert len(timing.timeline.events()) == len(full.timeline.events())
    assert timing.timeline.events()[cols].equals(full.timeline.events()[cols])
