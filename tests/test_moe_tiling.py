"""Tests of the MoeGatingTopK host-side tiling (npu_lab.kernels.moe_gating.tiling)."""

from __future__ import annotations

import math
import struct
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_lab import get_preset
from npu_lab.kernels.moe_gating import (
    MOE_UB_VERSIONS,
    MoeGatingTiling,
    UbBuffer,
    article_calculate_tiling,
    article_ub_estimate_bytes,
    calculate_moe_gating_tiling,
    moe_ub_budget,
    moe_ub_bytes,
    moe_ub_capacity,
)

VERSIONS = tuple(MOE_UB_VERSIONS)
FIELDS = ("B", "S", "E", "K", "tileB", "tileS", "tileBS", "totalTiles", "tilesPerBatch",
          "ubCapacity")


@pytest.fixture(scope="module")
def b2():
    return get_preset("ascend-910b2")


@pytest.fixture(scope="module")
def p3():
    return get_preset("ascend-310p3")


def test_presets_have_the_ub_sizes_this_module_is_tested_against(b2, p3):
    assert (b2.ub_bytes, b2.block_bytes) == (192 * 1024, 32)
    assert (p3.ub_bytes, p3.block_bytes) == (256 * 1024, 32)


# ----------------------------------------------------------------------------------------------
# The UB budget
# ----------------------------------------------------------------------------------------------


def test_v3_budget_layout_by_hand():
    # T=3 rows at Ep = 64 (E rounded up to 64), winners in rows of Kp = 8, T8 = 8, T32 = 32
    bufs = moe_ub_budget("v3", 3, 10, 3)
    assert [(b.name, b.dtype, b.elements, b.copies, b.bytes_each, b.total_bytes) for b in bufs] == [
        ("scores", "float32", 192, 2, 768, 1536),        # 3 x 64 floats
        ("topk_values", "float32", 24, 2, 96, 192),      # T8 x K: GatherMask keeps whole repeats
        ("topk_indices", "int32", 24, 2, 96, 192),
        ("scores_work", "float32", 384, 1, 1536, 1536),  # knocked-out scores + a -inf block
        ("select_mask", "uint8", 24, 1, 32, 32),         # 192 bits
        ("row_results", "float32", 200, 1, 800, 800),    # pairs 64, values 32, argmax 32, iota 64, pattern 8
        ("row_bcast", "float32", 192, 1, 768, 768),      # 3 Brcb targets of T8 x 8
        ("topk_padded", "float32", 320, 1, 1280, 1280),  # values 64, indices 64, exp scratch 192
    ]
    # Select's 8 KB is Ascend C's reserved UB, outside hw.ub_usable_bytes: not in the budget
    assert moe_ub_bytes("v3", 3, 10, 3) == 6336
    # E > 64: a row is two repeats, the argmax broadcast two blocks, plus ReduceMax's tmp
    wide = {b.name: b for b in moe_ub_budget("v3", 3, 65, 3)}
    assert wide["scores"].elements == 3 * 128 and wide["select_mask"].elements == 3 * 128 // 8
    assert wide["row_results"].elements > 200 and wide["row_bcast"].elements == 8 * 8 * 2 + 128


def test_v3_budget_rejects_more_than_64_winners():
    with pytest.raises(ValueError, match="K <= 64"):
        moe_ub_budget("v3", 1, 100, 65)


def test_v1_budget_for_the_article_shape():
    # 8 points x 64 experts x 4 B = 2048; each point's 2 results start a 32-byte row of their
    # own (DataCopyPad stores them point by point): 8 x 32 B = 256, twice
    assert [b.total_bytes for b in moe_ub_budget("v1", 8, 64, 2)] == [2048, 256, 256]
    assert moe_ub_bytes("v1", 1, 64, 2) == 256 + 32 + 32  # 8-byte top-k buffers round up to 32


@settings(max_examples=40, deadline=None)
@given(t=st.integers(1, 512), e=st.integers(1, 2048), data=st.data())
def test_budget_relations_between_versions(t, e, data):
    k = data.draw(st.integers(1, min(e, 16)))
    v1 = moe_ub_bytes("v1", t, e, k)
    assert moe_ub_bytes("v2", t, e, k) == 2 * v1
    assert moe_ub_budget("v2_bad_sync", t, e, k) == moe_ub_budget("v2", t, e, k)
    assert moe_ub_bytes("v3", t, e, k) > moe_ub_bytes("v2", t, e, k)
    unaligned = 4 * (t * e + 2 * t * k)
    ceil8 = lambda n: -(-n // 8) * 8
    assert v1 == 4 * t * (ceil8(e) + 2 * ceil8(k))       # every row padded to whole 32-B blocks
    assert unaligned <= v1 < unaligned + t * 3 * 32
    assert all(b.bytes_each % 32 == 0 for b in moe_ub_budget("v3", t, e, k))
    assert moe_ub_bytes("v1", t, e, k, block_bytes=1) == unaligned


def test_unknown_version_lists_known_ones():
    with pytest.raises(ValueError, match=r"unknown kernel version 'v4'; known versions: "
                                         r"v1, v2, v2_bad_sync, v2c, v3"):
        moe_ub_budget("v4", 8, 64, 2)


def test_ub_buffer_rejects_inconsistent_sizes():
    with pytest.raises(ValueError, match="total_bytes must be bytes_each \\* copies = 64"):
        UbBuffer("x", "float32", 8, 2, 32, 32)
    with pytest.raises(ValueError, match="smaller than 9 x float32 = 36 bytes"):
        UbBuffer("x", "float32", 9, 1, 32, 32)


@settings(max_examples=40, deadline=None)
@given(version=st.sampled_from(VERSIONS), e=st.integers(1, 20000), ub=st.integers(64, 300_000),
       data=st.data())
def test_capacity_is_the_largest_tile_that_fits(version, e, ub, data):
    k = data.draw(st.integers(1, min(e, 16)))
    cap = moe_ub_capacity(version, e, k, ub)
    if cap == 0:
        assert moe_ub_bytes(version, 1, e, k) > ub
    else:
        assert moe_ub_bytes(version, cap, e, k) <= ub < moe_ub_bytes(version, cap + 1, e, k)


# ----------------------------------------------------------------------------------------------
# calculate_moe_gating_tiling
# ----------------------------------------------------------------------------------------------


def test_article_shape_on_910b2(b2):
    t = calculate_moe_gating_tiling(1, 1024, 64, 2, b2)
    # 320 B a point (256 of scores, two 32-byte result rows) of 188160 usable B: 588*320 = 188160
    assert t == MoeGatingTiling(B=1, S=1024, E=64, K=2, tileB=1, tileS=8, tileBS=8,
                                totalTiles=128, tilesPerBatch=128, ubCapacity=588)
    assert calculate_moe_gating_tiling(1, 1024, 64, 2, b2, version="v2").ubCapacity == 294


def test_ub_capacity_on_310p3_by_hand(p3):
    # usable 256 KB - 8 KB = 253952: 320*793 = 253760 <= 253952 < 254080 for 794 points
    assert calculate_moe_gating_tiling(2, 100, 64, 2, p3).ubCapacity == 793


def test_v1_tile_halves_exactly_at_the_hand_computed_expert_count(b2):
    # v1, K=2, 8 points: 8 * (4*ceil8(E) + 32 + 32) bytes <= 188160 usable  <=>  ceil8(E) <= 5864
    assert calculate_moe_gating_tiling(1, 1024, 5864, 2, b2).tileS == 8
    assert calculate_moe_gating_tiling(1, 1024, 5865, 2, b2).tileS == 4
    assert calculate_moe_gating_tiling(1, 1024, 6129, 2, b2).tileS == 4


def _tile_s(e, version, hw, k=2):
    """tileS chosen for E experts, or 0 when not even one row fits."""
    if moe_ub_bytes(version, 1, e, k) > hw.ub_usable_bytes:
        return 0
    return calculate_moe_gating_tiling(1, 4096, e, k, hw, version=version).tileS


def _first_e_with_tile_below(t, version, hw, k=2):
    """Smallest E whose tileS < t (tileS is non-increasing in E), by doubling and bisection."""
    lo, hi = k, 2 * k
    while _tile_s(hi, version, hw, k) >= t:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _tile_s(mid, version, hw, k) >= t else (lo, mid)
    return hi


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("preset", ["ascend-910b2", "ascend-310p3"])
def test_growing_e_halves_tile_exactly_where_the_budget_overflows(version, preset):
    hw = get_preset(preset)
    for t in (8, 4, 2):
        e_b = _first_e_with_tile_below(t, version, hw)
        before = calculate_moe_gating_tiling(1, 4096, e_b - 1, 2, hw, version=version)
        after = calculate_moe_gating_tiling(1, 4096, e_b, 2, hw, version=version)
        assert (before.tileS, after.tileS) == (t, t // 2)
        assert moe_ub_bytes(version, t, e_b - 1, 2) <= hw.ub_usable_bytes
        assert moe_ub_bytes(version, t, e_b, 2) > hw.ub_usable_bytes


@settings(max_examples=60, deadline=None)
@given(version=st.sampled_from(VERSIONS), b=st.integers(1, 8), s=st.integers(1, 3000),
       e=st.integers(1, 13000), start=st.sampled_from([1, 2, 8, 16, 64]), data=st.data())
def test_tile_is_the_largest_halving_that_fits_capped_at_s(version, b, s, e, start, data):
    k = data.draw(st.integers(1, min(e, 16)))
    hw = get_preset("ascend-910b2")
    if moe_ub_bytes(version, 1, e, k) > hw.ub_usable_bytes:
        with pytest.raises(ValueError, match="E-chunked"):
            calculate_moe_gating_tiling(b, s, e, k, hw, version=version, tile_s_start=start)
        return
    t = calculate_moe_gating_tiling(b, s, e, k, hw, version=version, tile_s_start=start)
    candidates = [start >> j for j in range(start.bit_length()) if start >> j >= 1]
    fitting = [c for c in candidates if moe_ub_bytes(version, c, e, k) <= hw.ub_usable_bytes]
    assert t.tileS == min(fitting[0], s)
    assert t.tileB == 1 and t.tileBS == t.tileS
    assert t.tilesPerBatch == math.ceil(s / t.tileS) and t.totalTiles == b * t.tilesPerBatch
    assert t.tileBS <= t.ubCapacity
    assert t.ubCapacity == moe_ub_capacity(version, e, k, hw.ub_usable_bytes)


def test_tile_is_capped_at_s(b2):
    t = calculate_moe_gating_tiling(3, 5, 64, 2, b2)
    assert (t.tileS, t.tilesPerBatch, t.totalTiles) == (5, 1, 3)


def test_explicit_tile_s_is_used_and_clamped(b2):
    assert calculate_moe_gating_tiling(1, 1024, 64, 2, b2, tile_s=32).tileS == 32
    assert calculate_moe_gating_tiling(1, 20, 64, 2, b2, tile_s=32).tileS == 20


def test_explicit_tile_s_that_does_not_fit_names_bytes_and_the_largest_fit(b2):
    cap = moe_ub_capacity("v3", 4096, 2, b2.ub_usable_bytes)
    needed = moe_ub_bytes("v3", 8, 4096, 2)
    assert cap < 8 < needed  # sanity of the scenario
    with pytest.raises(ValueError, match=(
            rf"tile_s=8 does not fit: kernel version 'v3' needs {needed} bytes of UB for 8 "
            rf"points \(E=4096, K=2\), but ascend-910b2 has 188160 usable bytes; the largest tileS "
            rf"that fits is {cap}")):
        calculate_moe_gating_tiling(1, 1024, 4096, 2, b2, version="v3", tile_s=8)


def test_rows_too_wide_for_ub_point_to_the_chunked_path(b2):
    # one row of v1: 60000 * 4 = 240000 B of scores (whole blocks) + 32 + 32
    with pytest.raises(ValueError, match=r"E=60000 experts is too wide for one core: a single row "
                                         r"needs 240064 bytes of UB for kernel version 'v1' "
                                         r"\(K=2\), but ascend-910b2 has 188160 usable bytes.*E-chunked"):
        calculate_moe_gating_tiling(1, 16, 60000, 2, b2)


def test_works_with_any_object_carrying_the_three_attributes():
    hw = SimpleNamespace(name="toy", ub_bytes=4096, block_bytes=32)
    t = calculate_moe_gating_tiling(1, 64, 64, 2, hw, version="v2")
    assert t.tileS == 4  # v2 at 8 points is 4352 B > 4096; at 4 points 2176 B
    with pytest.raises(TypeError, match="hw must be a HardwareSpec.*without ub_bytes"):
        calculate_moe_gating_tiling(1, 64, 64, 2, SimpleNamespace(name="x", block_bytes=32))


@pytest.mark.parametrize(
    "args, kwargs, exc, pattern",
    [
        ((0, 8, 64, 2), {}, ValueError, r"B must be >= 1; got 0"),
        ((1, -3, 64, 2), {}, ValueError, r"S must be >= 1; got -3"),
        ((1, 8, 64.0, 2), {}, TypeError, r"E must be an int; got float"),
        ((1, 8, 4, 5), {}, ValueError, r"K must be <= E \(cannot pick 5 of 4 experts\)"),
        ((1, 8, 64, True), {}, TypeError, r"K must be an int; got bool"),
        ((1, 8, 64, 2), {"version": "v9"}, ValueError, r"known versions: v1, v2"),
        ((1, 8, 64, 2), {"tile_s": 0}, ValueError, r"tile_s must be >= 1; got 0"),
        ((1, 8, 64, 2), {"tile_s_start": 0}, ValueError, r"tile_s_start must be >= 1; got 0"),
    ],
)
def test_bad_arguments(b2, args, kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        calculate_moe_gating_tiling(*args, b2, **kwargs)


# ----------------------------------------------------------------------------------------------
# The struct: validation, pack / unpack
# ----------------------------------------------------------------------------------------------


def test_pack_exact_bytes_for_the_article_shape(b2):
    t = calculate_moe_gating_tiling(1, 1024, 64, 2, b2)
    packed = t.pack()
    assert packed == bytes.fromhex(
        "01000000" "00040000" "40000000" "02000000" "01000000"
        "08000000" "08000000" "80000000" "80000000" "4c020000")
    assert np.frombuffer(packed, "<i4").tolist() == [1, 1024, 64, 2, 1, 8, 8, 128, 128, 588]
    assert MoeGatingTiling.unpack(bytearray(packed)) == t


@st.composite
def tilings(draw):
    b, s = draw(st.integers(1, 2**15)), draw(st.integers(1, 2**15))
    e = draw(st.integers(1, 2**16))
    k = draw(st.integers(1, min(e, 64)))
    tile_b, tile_s = draw(st.integers(1, 8)), draw(st.integers(1, 4096))
    return MoeGatingTiling.from_tiles(b, s, e, k, tile_b, tile_s, draw(st.integers(1, 2**31 - 1)))


@settings(max_examples=50, deadline=None)
@given(tilings())
def test_pack_unpack_round_trip(t):
    packed = t.pack()
    assert len(packed) == 40 == MoeGatingTiling.NBYTES
    assert struct.unpack("<10i", packed) == tuple(getattr(t, f) for f in FIELDS)
    assert MoeGatingTiling.unpack(packed) == t


@pytest.mark.parametrize("n", [0, 36, 44])
def test_unpack_wrong_length(n):
    with pytest.raises(ValueError, match=rf"exactly 40 bytes \(10 little-endian int32 fields: "
                                         rf"B, S, E, K, tileB, .*ubCapacity\); got {n} bytes"):
        MoeGatingTiling.unpack(b"\x01" * n)


def test_unpack_validates_contents():
    good = [1, 1024, 64, 2, 1, 8, 8, 128, 128, 588]
    bad = good.copy()
    bad[6] = 9  # tileBS != tileB * tileS
    with pytest.raises(ValueError, match=r"tileBS must equal tileB \* tileS = 1 \* 8 = 8; got 9"):
        MoeGatingTiling.unpack(struct.pack("<10i", *bad))
    with pytest.raises(TypeError, match="bytes-like"):
        MoeGatingTiling.unpack(12)


@pytest.mark.parametrize(
    "change, pattern",
    [
        ({"tilesPerBatch": 127},
         r"tilesPerBatch must equal ceil\(S / tileS\) = ceil\(1024 / 8\) = 128"),
        ({"totalTiles": 64},
         r"totalTiles must equal ceil\(B / tileB\) \* ceil\(S / tileS\) = 1 \* 128"),
        ({"ubCapacity": 0}, r"ubCapacity must be >= 1; got 0"),
        ({"K": 65}, r"K = 65 > E = 64"),
    ],
)
def test_struct_validation(change, pattern):
    fields = dict(zip(FIELDS, [1, 1024, 64, 2, 1, 8, 8, 128, 128, 588]))
    fields.update(change)
    with pytest.raises(ValueError, match=pattern):
        MoeGatingTiling(**fields)


def test_struct_rejects_values_beyond_int32_and_non_ints():
    with pytest.raises(ValueError, match=r"ubCapacity = 2147483648 does not fit the int32"):
        MoeGatingTiling.from_tiles(1, 8, 4, 2, 1, 8, 2**31)
    with pytest.raises(TypeError, match=r"MoeGatingTiling.E must be an int; got float"):
        MoeGatingTiling(1, 8, 4.0, 2, 1, 8, 8, 1, 1, 10)
    t = MoeGatingTiling(*[np.int32(v) for v in (1, 8, 4, 2, 1, 8, 8, 1, 1, 10)])
    assert type(t.E) is int


# ----------------------------------------------------------------------------------------------
# tile_range
# ----------------------------------------------------------------------------------------------


def test_tile_range_known_tail():
    t = MoeGatingTiling.from_tiles(2, 10, 8, 2, 1, 4, 100)  # 3 tiles per batch, last is short
    assert [t.tile_range(i) for i in range(t.totalTiles)] == [
        (0, 1, 0, 4), (0, 1, 4, 8), (0, 1, 8, 10),
        (1, 2, 0, 4), (1, 2, 4, 8), (1, 2, 8, 10),
    ]


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 6), s=st.integers(1, 300), tile_b=st.integers(1, 4),
       tile_s=st.integers(1, 64))
def test_tile_ranges_cover_every_point_exactly_once(b, s, tile_b, tile_s):
    t = MoeGatingTiling.from_tiles(b, s, 8, 2, tile_b, tile_s, 1000)
    hits = np.zeros((b, s), int)
    for i in range(t.totalTiles):
        b0, b1, s0, s1 = t.tile_range(i)
        assert 0 <= b0 < b1 <= b and 0 <= s0 < s1 <= s
        assert (b1 - b0) * (s1 - s0) <= t.tileBS
        hits[b0:b1, s0:s1] += 1
    assert (hits == 1).all()


def test_tile_range_out_of_range():
    t = MoeGatingTiling.from_tiles(1, 10, 8, 2, 1, 4, 100)
    for bad in (-1, 3):
        with pytest.raises(IndexError, match=r"block_idx must be in \[0, totalTiles\) = \[0, 3\)"):
            t.tile_range(bad)
    with pytest.raises(TypeError, match="block_idx must be an int"):
        t.tile_range(1.0)


# ----------------------------------------------------------------------------------------------
# The article's own formula and rule
# ----------------------------------------------------------------------------------------------


def test_article_estimate_is_unaligned_single_buffered():
    assert article_ub_estimate_bytes(8, 64, 2) == 8 * (64 * 4 + 2 * 8) == 2176
    assert article_ub_estimate_bytes(1, 64, 2) == 272 < moe_ub_bytes("v1", 1, 64, 2) == 320
    assert article_ub_estimate_bytes(8, 64, 2) < moe_ub_bytes("v2", 8, 64, 2) == 5120


def test_article_estimate_over_assumed_ub():
    with pytest.raises(ValueError, match=r"more than the 262144 bytes of UB assumed.*at most 7 "):
        article_ub_estimate_bytes(8, 8189, 2)
    assert article_ub_estimate_bytes(8, 8189, 2, ub_assumed_bytes=None) == 8 * 32772


def test_article_rule_does_not_shrink_tile_when_e_goes_from_64_to_256():
    # The article says its function shrinks tileS when E grows from 64 to 256; by its own formula
    # 256 KB / (256*4 + 2*8) B = 252 points, far above 8, so it does not.
    assert article_calculate_tiling(1, 1024, 64, 2).tileS == 8
    t = article_calculate_tiling(1, 1024, 256, 2)
    assert (t.tileS, t.ubCapacity) == (8, 252)
    assert article_calculate_tiling(1, 1024, 8188, 2).tileS == 8
    assert article_calculate_tiling(1, 1024, 8189, 2).tileS == 4


def test_article_rule_does_not_cap_tile_at_s(b2):
    assert article_calculate_tiling(1, 3, 64, 2).tileS == 8
    assert calculate_moe_gating_tiling(1, 3, 64, 2, b2).tileS == 3
