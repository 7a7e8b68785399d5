"""Notebook 11's course code: the ex11 checks (truth from the library, feedback from the answer)
and the DecodeExplorer (one batch_update per move, cached positions, refusals in the status)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from npu_lab.course import ex11
from npu_lab.course.explorers import DecodeExplorer
from npu_lab.kernels.decode import decode_attention


def test_checks_accept_the_truth_and_name_the_slip():
    truth = ex11.expected_answers()
    assert ex11.check_kv_bytes_per_token(truth["check_kv_bytes_per_token"]).correct
    assert ex11.check_kv_bytes_per_token(f"{truth['check_kv_bytes_per_token']:,} bytes").correct
    assert ex11.check_kv_bytes_per_token(None).correct is None
    one_layer = ex11.check_kv_bytes_per_token(truth["check_kv_bytes_per_token"] // 80)
    assert one_layer.correct is False and "one layer" in one_layer
    mha = ex11.check_kv_bytes_per_token(truth["check_kv_bytes_per_token"] * 8)
    assert mha.correct is False and "query heads" in mha
    assert ex11.check_kv_bytes_per_token("lots").correct is False

    assert ex11.check_v1_limit(truth["check_v1_limit"]).correct
    off = ex11.check_v1_limit(truth["check_v1_limit"] + 8)
    assert off.correct is False and "+8" in off

    assert ex11.check_flash_decode_splits(truth["check_flash_decode_splits"]).correct
    no_split = ex11.check_flash_decode_splits(1)
    assert no_split.correct is False and "0.4" in no_split


def test_truths_come_from_the_kernels():
    """The v1 limit is where v1 starts refusing; the split is what v4's tiling picks."""
    truth = ex11.expected_answers()
    n = truth["check_v1_limit"]
    shape = lambda L: ((1, 8, 128), ((1, L, 1, 128), np.float16))        # noqa: E731
    assert decode_attention(*shape(n), None, [n], version="v1", timing_only=True).tiling.chunk == n
    with pytest.raises(ValueError, match="UB"):
        decode_attention(*shape(n + 8), None, [n + 8], version="v1", timing_only=True)
    c = ex11.SPLIT_CASE
    r = decode_attention((c["batch"], c["kv_heads"], 128), ((c["batch"], c["context"], c["kv_heads"], 128), np.float16),
                         None, [c["context"]] * c["batch"], version="v4", timing_only=True)
    assert r.tiling.splits == truth["check_flash_decode_splits"]


def test_decode_explorer_moves_and_refusals():
    e = DecodeExplorer(batch=1, context=256, group=2, splits=0, version="v4")
    assert e.error is None and "µs" in e.status.value
    t_v4, floor, pieces = e.result
    assert pieces > 1 and t_v4 >= floor
    e.set(splits=1)                                    # one piece: v4 is v2
    assert e.result[2] == 1 and e.result[0] == pytest.approx(e.figure.data[0].y[0], abs=0.06)
    start = time.perf_counter()
    e.set(splits=0)                                    # seen before: cached, no simulation
    assert time.perf_counter() - start < 0.5
    assert e.result[0] == t_v4
    e.set(version="v5")
    assert e.result[1] == pytest.approx(floor / 2)     # int8 reads half float16's bytes
    with pytest.raises(ValueError):
        e.set(context=300)
    with pytest.raises(ValueError):
        e.set(batch=0)
    e.set(version="v4", splits=16)                     # more pieces than chunks: still runs, or says why
    assert (e.error is None) == (e.result is not None)


@pytest.mark.parametrize("batch,splits", [(8, 0), (1, 1), (2, 0), (1, 0)])
def test_decode_explorer_v4_without_a_split_shares_v2s_run_and_equals_a_direct_run(batch, splits):
    """A v4 position whose tiling does not split S2 takes v2's cached run (one simulation a
    move): its figures must be exactly those of a direct v4 run; a split position runs v4."""
    e = DecodeExplorer(batch=batch, context=512, group=4, splits=splits, version="v4")
    r = decode_attention((batch, 32, 128), ((batch, 512, 8, 128), np.float16), None, [512] * batch, version="v4",
                         timing_only=True, splits=splits or None)
    assert e.result == (r.timeline.total_us, r.roofline_us, r.tiling.splits)
    shared = e._key(batch, 512, 4, "v4", splits) == (batch, 512, 4, "v2", 0)
    assert shared == (r.tiling.splits == 1)
