"""Exercise 11.online_softmax (npu_lab/course/ex11.py): the solution passes and meets the library's
v2; the skeleton and wrong online-softmax updates fail, each with the feedback its slip deserves."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab.course import ex11
from npu_lab.course.kernel_check import check_kernel, kernel_exercises, kernel_skeleton, kernel_solution_cell, load_cell
from npu_lab.kernels.decode import decode_attention, decode_attention_reference

EX = "11.online_softmax"
CORR_ACC = "                    ctx.muls(acc[g * D], acc[g * D], corr, D)\n"
CORR_L = ("l[g] = l[g] * corr + p_sum", "l[g] = l[g] + p_sum")


def _fn(cell: str, tag: str):
    return load_cell(cell, f"<{EX} {tag}>")["my_decode_v2"]


def _variant(tag: str, *replacements):
    cell = kernel_solution_cell(EX)
    for old, new in replacements:
        assert old in cell, old
        cell = cell.replace(old, new)
    return check_kernel(_fn(cell, tag), EX)


def test_solution_is_right_and_as_fast_as_the_library_v2():
    res = check_kernel(_fn(kernel_solution_cell(EX), "solution"), EX)
    assert res.correct is True and res.fast is True, res
    # the given code is v2's: the same instructions on every pipe, so the same time
    assert res.latency_us == pytest.approx(res.target_us, rel=1e-9)


def test_skeleton_runs_and_says_nothing_is_written():
    skel = kernel_skeleton(EX)
    assert "### BEGIN SOLUTION" not in skel and skel.count("pass  # YOUR CODE HERE") == 4
    res = check_kernel(_fn(skel, "skeleton"), EX)
    assert res.correct is None and "wrote nothing" in res


def test_cases_include_one_chunk_the_max_first_and_the_max_moving_later():
    ex = kernel_exercises()[EX]
    cases = ex.cases(np.random.default_rng(0))
    kinds = [(c["scores"], max(c["lens"]) > c["chunk"]) for c in cases]
    assert ("falling", False) in kinds and ("falling", True) in kinds and ("rising", True) in kinds
    for case in cases[:3]:
        q, k, v, lens = ex11._inputs(case)
        scores = [k[0, :lens[0], h // case["G"]].astype(np.float64) @ q[0, h] for h in range(q.shape[1])]
        first_chunk_holds_max = [sc[:case["chunk"]].max() == sc.max() for sc in scores]
        assert all(first_chunk_holds_max) == (case["scores"] == "falling"), case["label"]


def test_reference_is_decode_attention_reference_and_the_library_v2_agrees():
    ex = kernel_exercises()[EX]
    case = ex.cases(np.random.default_rng(0))[3]
    q, k, v, lens = ex11._inputs(case)
    want = ex.reference(case)["out"]
    np.testing.assert_allclose(want, decode_attention_reference(q, k, v, lens).reshape(-1), rtol=1e-6)
    got = decode_attention(q, k, v, lens, version="v2", chunk=case["chunk"]).out.reshape(-1)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)


def test_forgetting_the_correction_is_wrong_only_when_the_max_moves_later():
    res = _variant("no correction", (CORR_ACC, ""), CORR_L)
    assert res.correct is False
    assert "the max moves to a later chunk" in res and "Diagnosis (no correction)" in res, res
    assert "exp(m_old - m_new)" in res


def test_forgetting_the_division_is_caught_on_the_first_case():
    res = _variant("no division", ("1.0 / l[g], D)", "1.0, D)"))
    assert res.correct is False
    assert "one chunk per sequence" in res and "Diagnosis (no division)" in res, res


@pytest.mark.parametrize("tag, replacements, diagnosis", [
    ("l not corrected", [CORR_L], "l not corrected"),
    ("acc not corrected", [(CORR_ACC, "")], "acc not corrected"),
    ("inverted", [("math.exp(m[g] - m_new)", "math.exp(m_new - m[g]) if ci else 0.0")], "inverted correction"),
    ("chunk max", [("ctx.adds(scores, scores, -m_new, s)", "ctx.adds(scores, scores, -m_chunk, s)")], "chunk max"),
])
def test_other_slips_are_named(tag, replacements, diagnosis):
    res = _variant(tag, *replacements)
    assert res.correct is False and f"Diagnosis ({diagnosis})" in res, res


def test_a_slip_model_is_the_reference_where_it_should_be():
    """The diagnosis is not blind: without the correction the model equals the reference while the
    first chunk holds the max and differs once the max moves; a one-chunk case needs no update."""
    cases = kernel_exercises()[EX].cases(np.random.default_rng(0))
    for case, same in ((cases[0], True), (cases[1], True), (cases[2], False)):
        want = ex11._reference(case)["out"]
        model = ex11.online_softmax_slips(case)["no correction"]
        assert np.allclose(model, want, rtol=2e-3, atol=2e-3) == same, case["label"]
    assert not np.allclose(ex11.online_softmax_slips(cases[0])["no division"], ex11._reference(cases[0])["out"])


def test_an_inverted_factor_on_the_first_chunk_overflows_on_the_learners_line():
    res = _variant("inverted overflow", ("math.exp(m[g] - m_new)", "math.exp(m_new - m[g])"))
    assert res.correct is False and "OverflowError" in res and "math.exp(m_new - m[g])" in res, res


def test_a_wrong_number_not_matching_a_slip_gets_the_case_hint():
    res = _variant("scale", ("ctx.muls(scores, scores, 1.0 / math.sqrt(D), s)", "ctx.muls(scores, scores, 0.1, s)"))
    assert res.correct is False and "Diagnosis" not in res
    assert "Check p = exp(scores - m_new)" in res, res
