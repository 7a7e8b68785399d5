"""v4 MoeGatingTopK (CANN's MoeGatingTopKSoftmaxV2 perf template), launched directly with
``npu_lab.lang.launch``: outputs equal the reference, timing-only equals a full run, the tiling
is CANN's (blockFormer, blockNum ≤ cores, balanced ubFormer from an honest UB budget), the UB
the kernel takes is exactly ``moe_gating_v4_ub_bytes``, the instruction stream is the template's,
and the 310P3 (no DataCopyPad / Sort32) refuses it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_gating.reference import moe_gating_topk_reference
from npu_lab.kernels.moe_gating.sorted_topk import (MAX_E, MAX_K, MoeGatingV4Tiling,
                                                     calculate_moe_gating_v4_tiling, moe_gating_v4_kernel,
                                                     moe_gating_v4_ub_bytes, moe_gating_v4_ub_layout,
                                                     v4_block_dim)
from npu_lab.kernels.moe_gating.tiling import UbBudgetError
from npu_lab.lang import ASCEND_C_API, CapabilityError, GlobalTensor, launch, npu_kernel
from npu_lab.lang.context import record_calls
from npu_lab.presets import get_preset
from tests.strategies import gate_logits

RTOL, ATOL = 1e-6, 1e-7        # as tests/test_moe_kernels.py
HW = get_preset("ascend-910b2")


def _hw(cores: int | None):
    return HW if cores is None else HW.replace(vector_cores=cores)


def run_v4(x: np.ndarray, K: int, hw=HW, *, timing_only: bool = False, kernel=moe_gating_v4_kernel):
    """(indices [N, K], weights [N, K], timeline, tiling); outputs None when timing-only."""
    E = x.shape[-1]
    rows = x.reshape(-1, E)
    N = rows.shape[0]
    t = calculate_moe_gating_v4_tiling(1, N, E, K, hw, dtype=x.dtype)
    gate = GlobalTensor.from_array(rows.reshape(-1), "gate", timing_only=timing_only)
    idx = GlobalTensor.empty(N * K, np.int32, "indices", timing_only=timing_only)
    w = GlobalTensor.empty(N * K, np.float32, "weights", timing_only=timing_only)
    tl = launch(kernel, v4_block_dim(t), gate, idx, w, t.pack(), hw=hw, timing_only=timing_only, name="v4")
    if timing_only:
        return None, None, tl, t
    return idx.data.reshape(N, K).copy(), w.data.reshape(N, K).copy(), tl, t


def check_against_reference(x, K, hw=HW):
    ind, w, tl, t = run_v4(x, K, hw)
    ref_i, ref_w = moe_gating_topk_reference(x.reshape(-1, x.shape[-1]), K)
    np.testing.assert_array_equal(ind, ref_i)
    np.testing.assert_allclose(w, ref_w, rtol=RTOL, atol=ATOL)
    return tl, t


# ---- outputs ------------------------------------------------------------------------------------

@st.composite
def v4_cases(draw):
    """(logits [N, E], K, cores): E from 1 to 1024 with the awkward ones (not a multiple of 8
    or 32, E = K) likely, K in 1..min(E, 8), few cores so blocks loop and tails appear."""
    E = draw(st.one_of(st.integers(1, 80), st.sampled_from([8, 31, 32, 33, 63, 64, 65, 127, 128, 129, 200,
                                                            256, 257, 511, 512, 513, 700, 1000, 1024])))
    K = draw(st.one_of(st.just(min(E, MAX_K)), st.just(1), st.integers(1, min(E, MAX_K))))
    cores = draw(st.sampled_from([None, 1, 2, 3, 5]))
    N = draw(st.integers(1, 300 if E <= 256 else 60))
    x = draw(gate_logits(shape=(N, E)))
    return x, K, cores


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=v4_cases())
def test_v4_equals_reference(case):
    """Indices exactly, weights to float32 rounding: any E ≤ 1024, K ≤ 8, ties (the "ties" and
    "grid" distributions), float16, several loops per block with a short last loop."""
    x, K, cores = case
    check_against_reference(x, K, _hw(cores))


@pytest.mark.parametrize("N,E,K,cores", [
    (1000, 64, 2, 2),       # 500 rows per core: many loops, a tail loop
    (333, 130, 4, 3),       # E not a multiple of 8 or 32, 5 chunks -> padded merge
    (97, 1000, 8, 2),       # 32 chunks: three merge rounds
    (61, 1024, 5, 1),
    (250, 7, 7, 2),         # E < 8, E = K
    (600, 64, 1, 1),        # K = 1 fast path (WholeReduceMax)
    (600, 65, 1, 1),        # K = 1, E > 64: sorted path
    (129, 1, 1, 4),         # E = K = 1
])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_v4_looping_shapes_with_tail_loops(N, E, K, cores, dtype):
    x = np.random.default_rng(N * E + K).standard_normal((N, E)).astype(dtype)
    tl, t = check_against_reference(x, K, _hw(cores))
    if N >= 300:
        assert t.ubLoopOfFormerBlock > 1


def test_v4_tail_loop_actually_happens():
    """A case whose last loop of a block is short (blockFormer % ubFormer != 0)."""
    hw = _hw(1)
    t = calculate_moe_gating_v4_tiling(1, 500, 256, 8, hw)
    assert t.blockFormer == 500 and t.blockFormer % t.ubFormer != 0
    x = np.random.default_rng(1).standard_normal((500, 256)).astype(np.float32)
    check_against_reference(x, 8, hw)


def test_v4_ties_go_to_the_lower_expert_index():
    """All-equal rows across several Sort32 chunks and merge rounds: experts 0..K-1 win."""
    x = np.zeros((20, 700), np.float32)
    x[5, 650] = 1.0                                  # a winner in the last chunk
    ind, w, _, _ = run_v4(x, 8)
    assert (ind[0] == np.arange(8)).all()
    assert ind[5, 0] == 650 and (ind[5, 1:] == np.arange(7)).all()
    np.testing.assert_allclose(w[0], 1 / 8, rtol=RTOL)


def test_v4_batched_input_shape_is_flattened():
    x = np.random.default_rng(2).standard_normal((2, 37, 40)).astype(np.float32)
    check_against_reference(x, 3)


# ---- timing-only == full ------------------------------------------------------------------------

@pytest.mark.parametrize("N,E,K,cores,dtype", [
    (1000, 64, 2, 2, np.float32), (1000, 64, 1, 2, np.float16), (400, 300, 8, 1, np.float32),
    (4096, 256, 8, None, np.float32), (2000, 33, 3, 7, np.float16)])
def test_v4_timing_only_equals_full_run(N, E, K, cores, dtype):
    """Long tile loops (fast-forwarded in the timing-only run) give the same events, to the cycle."""
    hw = _hw(cores)
    x = np.random.default_rng(7).standard_normal((N, E)).astype(dtype)
    _, _, full, t = run_v4(x, K, hw)
    _, _, timing, _ = run_v4(x, K, hw, timing_only=True)
    assert timing.total_cycles == full.total_cycles
    assert timing.hbm_bytes == full.hbm_bytes
    pd.testing.assert_frame_equal(timing.events(), full.events(), check_exact=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=v4_cases())
def test_v4_timing_only_equals_full_run_any_shape(case):
    x, K, cores = case
    hw = _hw(cores)
    _, _, full, _ = run_v4(x, K, hw)
    _, _, timing, _ = run_v4(x, K, hw, timing_only=True)
    assert timing.total_cycles == full.total_cycles
    pd.testing.assert_frame_equal(timing.events(), full.events(), check_exact=True)


# ---- tiling ---------------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(N=st.integers(1, 200_000), E=st.integers(1, MAX_E), K=st.integers(1, MAX_K),
       cores=st.sampled_from([None, 1, 8, 40]), dtype=st.sampled_from([np.float32, np.float16]))
def test_v4_tiling_is_canns(N, E, K, cores, dtype):
    K = min(K, E)
    hw = _hw(cores)
    t = calculate_moe_gating_v4_tiling(1, N, E, K, hw, dtype=dtype)
    assert t.blockFormer == -(-N // hw.vector_cores)
    assert t.blockNum == v4_block_dim(t) == -(-N // t.blockFormer) <= hw.vector_cores
    assert (t.blockNum - 1) * t.blockFormer + t.blockTail == N
    assert t.colAlign == -(-E // 32) * 32 and t.colBytesAlign == -(-E // 8) * 8 and t.kAlign == 8
    # balanced: ubFormer = ceil(blockFormer / ubOuter) for the smallest ubOuter that fits
    ub_outer = -(-t.blockFormer // t.ubFormer)
    assert t.ubFormer == -(-t.blockFormer // ub_outer)
    assert moe_gating_v4_ub_bytes(t.ubFormer, E, K, dtype) <= hw.ub_usable_bytes
    assert t.ubFormer <= 255 and (K == 1 and E <= 64 or t.ubFormer * t.colAlign // 32 <= 255)
    if ub_outer > 1:
        bigger = -(-t.blockFormer // (ub_outer - 1))
        assert (moe_gating_v4_ub_bytes(bigger, E, K, dtype) > hw.ub_usable_bytes or bigger > 255
                or not (K == 1 and E <= 64) and bigger * t.colAlign // 32 > 255)
    assert t.ubLoopOfFormerBlock == -(-t.blockFormer // t.ubFormer)
    assert 1 <= t.ubTailOfFormerBlock <= t.ubFormer and 1 <= t.ubTailOfTailBlock <= t.ubFormer
    assert MoeGatingV4Tiling.unpack(t.pack()) == t


def test_v4_tiling_masks_and_fields_match_cann():
    """GatherMask patterns as TIL_CPP's GenValuesMask (renorm = 1: kAlign = 8 pairs) / GenIndicesMask."""
    for K, imask in ((1, 0b10), (2, 0b1010), (8, 0xAAAA)):
        t = calculate_moe_gating_v4_tiling(1, 4096, 256, K, HW)
        assert t.topKValuesMask == 0x5555 and t.topKIndicesMask == imask
        assert t.bufferElemSize == max(t.ubFormer * 256, 64) and t.softmaxFlag == 0
    names = [f for f in MoeGatingV4Tiling.__dataclass_fields__]
    assert names == ["row", "col", "colBytesAlign", "colAlign", "k", "kAlign", "blockFormer", "blockNum",
                     "blockTail", "ubFormer", "ubLoopOfFormerBlock", "ubTailOfFormerBlock", "ubLoopOfTailBlock",
                     "ubTailOfTailBlock", "topKValuesMask", "topKIndicesMask", "bufferElemSize", "softmaxFlag"]
    # CANN's worked example shape (fp32, E=256, N=4096) on 40 cores: blockFormer 103, balanced loops
    t = calculate_moe_gating_v4_tiling(1, 4096, 256, 8, _hw(40))
    assert (t.blockFormer, t.blockNum, t.blockTail) == (103, 40, 4096 - 39 * 103)
    assert t.ubLoopOfFormerBlock * t.ubFormer - t.blockFormer < t.ubLoopOfFormerBlock


@pytest.mark.parametrize("B,S,E,K,match", [
    (1, 8, 64, 9, "K <= 8"), (1, 8, 1025, 2, "E <= 1024"), (1, 8, 4, 5, "K must be <= E"),
    (0, 8, 64, 2, "B must be"), (1, 8, 64, 0, "K must be")])
def test_v4_tiling_rejects_what_the_template_does_not_support(B, S, E, K, match):
    with pytest.raises(ValueError, match=match):
        calculate_moe_gating_v4_tiling(B, S, E, K, HW)


def test_v4_tiling_errors():
    with pytest.raises(TypeError, match="float32 or float16"):
        calculate_moe_gating_v4_tiling(1, 8, 64, 2, HW, dtype=np.int32)
    with pytest.raises(UbBudgetError, match="not even one row"):
        calculate_moe_gating_v4_tiling(1, 8, 1024, 2, HW.replace(ub_bytes=16 * 1024))
    with pytest.raises(ValueError, match="must cover"):
        MoeGatingV4Tiling(**{**calculate_moe_gating_v4_tiling(1, 100, 64, 2, HW).__dict__, "blockTail": 5})
    with pytest.raises(TypeError):
        v4_block_dim("tiling")


def test_v4_kernel_rejects_a_wrong_launch():
    t = calculate_moe_gating_v4_tiling(1, 100, 64, 2, HW)
    gate = GlobalTensor.empty(100 * 64, np.float32, "gate")
    idx, w = GlobalTensor.empty(200, np.int32, "i"), GlobalTensor.empty(200, np.float32, "w")
    with pytest.raises(ValueError, match="blockDim"):
        launch(moe_gating_v4_kernel, t.blockNum + 1, gate, idx, w, t.pack())
    with pytest.raises(ValueError, match="indices"):
        launch(moe_gating_v4_kernel, t.blockNum, gate, GlobalTensor.empty(199, np.int32, "i"), w, t.pack())


# ---- UB --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("N,E,K,dtype", [
    (4096, 256, 8, np.float32), (4096, 256, 8, np.float16), (500, 1024, 3, np.float32),
    (9000, 64, 1, np.float16), (9000, 5, 2, np.float32), (300, 96, 1, np.float32)])
def test_v4_ub_used_equals_the_budget(N, E, K, dtype):
    used = []

    @npu_kernel(block_classes=moe_gating_v4_kernel.block_classes)
    def probe(ctx, *args):
        moe_gating_v4_kernel(ctx, *args)
        used.append(ctx.ub.used_bytes)

    _, _, _, t = run_v4(np.zeros((N, E), dtype), K, HW, timing_only=True, kernel=probe)
    assert used and set(used) == {moe_gating_v4_ub_bytes(t.ubFormer, E, K, dtype)}
    assert used[0] <= HW.ub_usable_bytes
    assert used[0] == sum(c * b for _, c, b in moe_gating_v4_ub_layout(t.ubFormer, E, K, dtype))


@settings(max_examples=100, deadline=None)
@given(rows=st.integers(1, 255), E=st.integers(1, MAX_E), K=st.integers(1, MAX_K))
def test_v4_float16_needs_no_more_ub_than_float32(rows, E, K):
    K = min(K, E)
    assert moe_gating_v4_ub_bytes(rows, E, K, np.float16) <= moe_gating_v4_ub_bytes(rows, E, K, np.float32)


# ---- the chip -------------------------------------------------------------------------------------

def test_v4_on_310p3_raises_capability_error():
    """The 310P AI core has no DataCopyPad (nor Sort32 / MrgSort): the launch says so."""
    hw = get_preset("ascend-310p3")
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    for timing_only in (False, True):
        with pytest.raises(CapabilityError, match="DataCopyPad"):
            run_v4(x, 2, hw, timing_only=timing_only)


# ---- the instruction stream -------------------------------------------------------------------------

def _block_events(tl, block=0):
    df = tl.events()
    return df[df["block"] == block]


@pytest.mark.parametrize("N,E,K,cores", [(1000, 256, 8, 2), (333, 33, 2, 3), (100, 1024, 4, 1)])
def test_v4_instruction_stream_is_the_templates(N, E, K, cores):
    """One DataCopyPad GM->UB per loop (blockCount = rows), Sort32, MrgSort when a row has
    several chunks, GatherMask, and two DataCopyPad UB->GM per loop."""
    hw = _hw(cores)
    x = np.random.default_rng(3).standard_normal((N, E)).astype(np.float32)
    _, _, tl, t = run_v4(x, K, hw)
    ev = _block_events(tl, 0)
    names = ev["name"].tolist()
    loads = [n for n in names if n.startswith("DataCopyPad GM->UB")]
    stores = [n for n in names if n.startswith("DataCopyPad UB->GM")]
    assert len(loads) == t.ubLoopOfFormerBlock and len(stores) == 2 * t.ubLoopOfFormerBlock
    assert loads[0] == f"DataCopyPad GM->UB {t.ubFormer}x{E * 4} B"
    assert loads[-1] == f"DataCopyPad GM->UB {t.ubTailOfFormerBlock}x{E * 4} B"
    assert not any(n.startswith("DataCopy ") for n in names)          # no unpadded DataCopy
    kinds = {n.split(" ")[0] for n in names}
    assert {"Sort32", "GatherMask", "Brcb", "Sub", "Exp", "WholeReduceSum", "Div"} <= kinds
    assert ("MrgSort" in kinds) == (t.colAlign > 32)
    assert "WholeReduceMax" not in kinds
    per_loop = sum(n.startswith("Sort32") for n in names) / t.ubLoopOfFormerBlock
    assert per_loop == 1
    # order inside the first loop: load, sort, merge, gather, softmax, store
    first = names.index(loads[0])
    order = [names.index(k, first) for k in (names[first], next(n for n in names if n.startswith("Sort32")),
                                             next(n for n in names if n.startswith("GatherMask")),
                                             next(n for n in names if n.startswith("Exp")), stores[0])]
    assert order == sorted(order)


def test_v4_k1_small_e_uses_whole_reduce_max_not_sort32():
    x = np.random.default_rng(4).standard_normal((200, 60)).astype(np.float32)
    _, _, tl, _ = run_v4(x, 1, _hw(2))
    kinds = {n.split(" ")[0] for n in _block_events(tl)["name"]}
    assert "WholeReduceMax" in kinds and "Sort32" not in kinds and "MrgSort" not in kinds


def test_v4_double_buffering_overlaps_the_next_load_with_compute():
    """The prefetched load of loop i+1 (MTE2) starts before loop i's vector work ends."""
    x = np.random.default_rng(5).standard_normal((1000, 256)).astype(np.float32)
    _, _, tl, t = run_v4(x, 8, _hw(1))
    ev = _block_events(tl)
    loads = ev[ev["name"].str.startswith("DataCopyPad GM->UB")]
    vec = ev[ev["pipe"] == "V"]
    assert t.ubLoopOfFormerBlock >= 3
    second_load_start = loads["start_us"].iloc[1]
    first_loop_vec_end = vec[vec["name"].str.startswith("GatherMask")]["end_us"].iloc[3]
    assert second_load_start < first_loop_vec_end


# ---- the C++ listing ----------------------------------------------------------------------------------

_CPP = Path(__file__).resolve().parents[1] / "npu_lab" / "kernels" / "moe_gating" / "sorted_topk.cpp"
_TRACED = ("InitBuffer", "AllocTensor", "EnQue", "DeQue", "FreeTensor", "DataCopyPad", "SetValue", "SetFlag",
           "WaitFlag", "CreateVecIndex", "Copy", "Cast", "Duplicate", "Sort32", "MrgSort", "WholeReduceMax",
           "GatherMask", "Brcb", "Sub", "Exp", "WholeReduceSum", "Div")


def _cpp_calls() -> list[str]:
    """Ascend C calls of the listing in text order (comments stripped)."""
    text = re.sub(r"//[^\n]*", "", _CPP.read_text())
    return re.findall(r"\b(" + "|".join(_TRACED) + r")\s*[<(]", text)


def _traced_calls(x, K, hw) -> list[str]:
    with record_calls() as logs:
        run_v4(x, K, hw)
    return [(name.split(" ")[0] if pipe else name.split("<")[0]) for pipe, name in logs[0]]


@pytest.mark.parametrize("N,E,K,dtype", [(20, 100, 3, np.float16), (40, 700, 8, np.float32),
                                         (12, 40, 1, np.float32), (12, 40, 1, np.float16), (30, 5, 2, np.float32)])
def test_v4_cpp_listing_calls_in_the_python_order(N, E, K, dtype):
    """Every call a traced run makes is in sorted_topk.cpp, and the run's calls (repeats of one
    call merged) can be read off the listing front to back — its methods are written in the
    order they run — going round again only for the next loop iteration or merge round."""
    cpp = _cpp_calls()
    assert set(cpp) == set(_TRACED) and all(name in ASCEND_C_API or name in ("InitBuffer", "SetFlag", "WaitFlag")
                                            or f"TPipe::{name}" in ASCEND_C_API for name in cpp)
    x = np.random.default_rng(0).standard_normal((N, E)).astype(dtype)
    # calls outside _TRACED (TBuf::Get, PipeBarrier, ...) are checked by tests/test_listings.py
    trace = [name for name in _traced_calls(x, K, _hw(1)) if name in _TRACED]
    trace = [name for i, name in enumerate(trace) if i == 0 or trace[i - 1] != name]
    t = calculate_moe_gating_v4_tiling(1, N, E, K, _hw(1), dtype=dtype)
    merge_rounds, n = 0, t.colAlign // 32
    while n > 1 and not (K == 1 and E <= 64):
        n, merge_rounds = -(-n // 4), merge_rounds + 1
    # per loop: a pass back for each extra merge round, one for the prefetch CopyIn, one for the next loop
    loops = t.ubLoopOfFormerBlock * (max(1, merge_rounds) + 1)
    pos, rounds = 0, 0
    for name in trace:
        assert name in cpp, f"{name} is called by the kernel but not in sorted_topk.cpp"
        while cpp[pos % len(cpp)] != name:
            pos += 1
        rounds = pos // len(cpp)
        pos += 1
    assert rounds <= loops, f"the listing's order needs {rounds} passes for {loops} loops x merge rounds"
