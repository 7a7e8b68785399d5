"""Kernel exercises 11.append and 11.combine (npu_lab/course/ex11_append.py, ex11_combine.py): the
solutions pass and equal the library's kernels in time; the skeletons run and say nothing is
written; a dropped flag is a race the detector names; each slip gets the feedback computed from
what the learner's kernel wrote."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab.course import ex11_append, ex11_combine
from npu_lab.course.kernel_check import check_kernel, kernel_exercises, kernel_skeleton, kernel_solution_cell, load_cell
from npu_lab.kernels.decode import decode_tiling, flash_decode_splits, kv_cache_append, paged_kv_cache_append
from npu_lab.kernels.decode.attention import NEG_BIG
from npu_lab.presets import get_preset

APPEND, COMBINE = "11.append", "11.combine"
NAMES = {APPEND: "my_kv_append", COMBINE: "my_flash_decode_combine"}
LOAD_STORE_FLAGS = ('                ctx.set_flag("MTE2_MTE3", ev_loaded[j % 2])\n'
                    '                ctx.wait_flag("MTE2_MTE3", ev_loaded[j % 2])\n')
REFILL_WAIT = '                if j >= 2:\n                    ctx.wait_flag("MTE3_MTE2", ev_stored[j % 2])\n'


def _check(eid, cell, tag):
    return check_kernel(load_cell(cell, f"<{eid} {tag}>")[NAMES[eid]], eid)


def _variant(eid, tag, *replacements):
    cell = kernel_solution_cell(eid)
    for old, new in replacements:
        assert old in cell, old
        cell = cell.replace(old, new)
    return _check(eid, cell, tag)


# ---- 11.append -----------------------------------------------------------------------------------
def test_append_solution_is_right_and_as_fast_as_the_library():
    res = _check(APPEND, kernel_solution_cell(APPEND), "solution")
    assert res.correct is True and res.fast is True, res
    assert res.latency_us == pytest.approx(res.target_us, rel=1e-9)


def test_append_skeleton_runs_and_says_nothing_is_written():
    skel = kernel_skeleton(APPEND)
    assert skel.count("pass  # YOUR CODE HERE") == 3 and "ctx.wait_flag(\"MTE3_MTE2\"" not in skel
    res = _check(APPEND, skel, "skeleton")
    assert res.correct is None and "wrote nothing" in res, res


def test_append_cases_cover_paged_page_start_tail_tile_several_rows_and_a_full_sequence():
    cases = kernel_exercises()[APPEND].cases(np.random.default_rng(0))
    hw = get_preset("ascend-910b2")
    full, page_start, tail, multi = False, False, False, False
    for case in cases:
        k_new, v_new, kc, vc, table = ex11_append._inputs(case)
        slots, rows, reported = ex11_append.append_host(case, k_new, v_new, kc, vc, table)
        full |= bool(reported) and len(rows) < len(case["ids"])
        if table is not None:
            page = case["page_size"]
            page_start |= any(case["lens"][s] % page == 0 and case["lens"][s] > 0 for s in case["ids"])
        t = ex11_append._tiling(case, hw, len(slots))
        tail |= case["H"] % t.heads_per_tile != 0
        multi |= t.rows_per_block > 1
    assert full and page_start and tail and multi


@pytest.mark.parametrize("index", [0, 2, 3])
def test_append_reference_agrees_with_the_library_kernel(index):
    """The exercise's reference is what the library's append writes (a full sequence reported)."""
    case = kernel_exercises()[APPEND].cases(np.random.default_rng(0))[index]
    k_new, v_new, kc, vc, table = ex11_append._inputs(case)
    want = kernel_exercises()[APPEND].reference(case)
    kw = dict(on_full="report", heads_per_tile=case["hpt"], block_dim=case["block_dim"])
    if table is None:
        run = kv_cache_append(k_new, v_new, kc, vc, list(case["ids"]), np.array(case["lens"]), **kw)
    else:
        run = paged_kv_cache_append(k_new, v_new, kc, vc, list(case["ids"]), np.array(case["lens"]), table, **kw)
    np.testing.assert_array_equal(run.k_cache.reshape(-1), want["k_cache"])
    np.testing.assert_array_equal(run.v_cache.reshape(-1), want["v_cache"])


@pytest.mark.parametrize("tag, replacement, words", [
    ("no load-store flag", (LOAD_STORE_FLAGS, ""), "MTE2_MTE3"),
    ("no refill wait", (REFILL_WAIT, ""), "MTE3_MTE2"),
])
def test_a_dropped_append_flag_is_a_race_named_on_the_learners_line(tag, replacement, words):
    res = _variant(APPEND, tag, replacement)
    assert res.correct is False and "race" in res and words in res and "line" in res, res


@pytest.mark.parametrize("tag, replacements, diagnosis", [
    ("K and V swapped", [("for src, dst in ((k_new, k_cache), (v_new, v_cache))",
                          "for src, dst in ((k_new, v_cache), (v_new, k_cache))")], "holds kernel row 0's V"),
    ("row index as slot", [("dst[slot * row_elems", "dst[(first + r) * row_elems")], "not the row index"),
    ("block's first row forgotten", [("src[(first + r) * row_elems", "src[r * row_elems")], "first + r"),
    ("tail tile dropped", [("for h0 in range(0, t.kv_heads, t.heads_per_tile)",
                            "for h0 in range(0, t.kv_heads - t.heads_per_tile + 1, t.heads_per_tile)")],
     "never written"),
])
def test_append_slips_are_diagnosed_from_the_caches(tag, replacements, diagnosis):
    res = _variant(APPEND, tag, *replacements)
    assert res.correct is False and "Diagnosis" in res and diagnosis in res, res


# ---- 11.combine ----------------------------------------------------------------------------------
def test_combine_solution_is_right_and_as_fast_as_the_library_v4():
    res = _check(COMBINE, kernel_solution_cell(COMBINE), "solution")
    assert res.correct is True and res.fast is True, res
    assert res.latency_us == pytest.approx(res.target_us, rel=1e-9)
    assert "CANN's tiling" in res and "pieces" in res


def test_combine_skeleton_runs_and_says_nothing_is_written():
    skel = kernel_skeleton(COMBINE)
    assert skel.count("pass  # YOUR CODE HERE") == 3
    res = _check(COMBINE, skel, "skeleton")
    assert res.correct is None and "wrote nothing" in res, res


def test_combine_cases_take_canns_split_and_have_empty_pieces():
    cases = kernel_exercises()[COMBINE].cases(np.random.default_rng(0))
    hw = get_preset("ascend-910b2")
    chosen = [c for c in cases if c["splits"] is None]
    assert len(chosen) >= 4
    for case in chosen:
        t = ex11_combine._tiling(case, hw)
        assert t.splits == flash_decode_splits(case["B"], case["N2"], max(case["lens"]), hw.vector_cores, case["chunk"])
        assert t.splits > 1
    empty = [c for c in cases[:4] if (ex11_combine.flash_decode_workspace(c)[1] == np.float32(NEG_BIG)).any()]
    assert len(empty) >= 2
    big = next(c for c in cases if c["scores"] == "large")
    assert ex11_combine.flash_decode_workspace(big)[1].max() > 710        # math.exp overflows past 709.8


@pytest.mark.parametrize("tag, replacements, diagnosis", [
    ("equal weights", [("w = [x / sum(e) for x in e]", "w = [1.0 / sp] * sp")], "equal weights"),
    ("not normalised", [("w = [x / sum(e) for x in e]", "w = e")], "not normalised"),
    ("adjacent rows", [("(G - 1) * D * 4 // 32, 0))", "0, 0))")], "consecutive rows"),
    ("one piece", [("            for i in range(1, sp):\n                ctx.muls(scaled, pieces[i * D], float(w[i]), D)\n"
                    "                ctx.add(ot[g * D], ot[g * D], scaled, D)\n", "")], "first piece"),
])
def test_combine_slips_are_diagnosed_from_the_workspace(tag, replacements, diagnosis):
    res = _variant(COMBINE, tag, *replacements)
    assert res.correct is False and f"Diagnosis ({diagnosis})" in res, res


def test_exp_without_the_max_overflows_on_the_large_scores_case():
    res = _variant(COMBINE, "no max", ("e = [math.exp(x - m) for x in vals[g]]", "e = [math.exp(x) for x in vals[g]]"))
    assert res.correct is False and "OverflowError" in res and "scores near 1000" in res, res


def test_combine_workspace_is_step_one_of_the_library_v4():
    case = kernel_exercises()[COMBINE].cases(np.random.default_rng(0))[1]
    o, lse, t = ex11_combine.flash_decode_workspace(case)
    q, k, v, lens = ex11_combine._inputs(case)
    assert t == decode_tiling(case["B"], case["N2"], case["G"], case["D"], k.shape[1], lens, 2,
                              get_preset("ascend-910b2"), version="v4", chunk=case["chunk"])
    assert o.shape == (t.tasks, t.group, t.head_dim) and np.isfinite(o).all() and np.isfinite(lse).all()
