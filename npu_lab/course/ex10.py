"""Exercise checks for notebook 10 (mixed precision done right).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult` (print it).
Every truth is computed from the library (:mod:`npu_lab.kernels.gemm.precision`, the gemm kernels'
timelines), never typed in; :func:`expected_answers` gives each check's truth.
"""

from __future__ import annotations

import numpy as np

from ..kernels.gemm.precision import article_fp32_correction, int8_weight_error_cost
from .checks import FACTOR, CheckResult, missing as _missing, parse_number as _number, right as _right, wrong as _wrong

__all__ = ["check_int8_speedup", "check_correction_change", "expected_answers", "int8_speedup_truth",
           "correction_change_truth", "INT8_CASE"]

#: Exercise 10.1: the int8 GEMM against the half one at this shape (modelled).
INT8_CASE = dict(M=32, N=256, K=4096)


def expected_answers() -> dict[str, object]:
    """The truth of every check of notebook 10, by check name."""
    return {"check_int8_speedup": int8_speedup_truth(), "check_correction_change": correction_change_truth()}


def int8_speedup_truth() -> float:
    """fp16 latency / (int8 latency + the dequantisation estimate) at :data:`INT8_CASE` (910B2)."""
    c = INT8_CASE
    row = int8_weight_error_cost((c["K"],), M=c["M"], N=c["N"]).iloc[0]
    return float(row.fp16_us / row.int8_total_us)


def check_int8_speedup(answer) -> CheckResult:
    """How many times faster is the int8 GEMM (with its dequantisation) than the half GEMM at
    M = 32, N = 256, K = 4096 on the 910B2 model? Answer: a factor (within 3 %)."""
    if answer is None:
        return _missing("a factor such as 1.5")
    value = _number(answer, FACTOR)
    if value is None:
        return _wrong(f"{answer!r} is not a number.")
    c = INT8_CASE
    row = int8_weight_error_cost((c["K"],), M=c["M"], N=c["N"]).iloc[0]
    truth = float(row.fp16_us / row.int8_total_us)
    if abs(value - truth) <= 0.03 * truth:
        return _right(f"{truth:.2f}x: {row.fp16_us:.1f} µs (half) against {row.int8_us:.1f} µs (int8) + "
                      f"{row.dequant_us:.2f} µs (dequantisation, estimated). int8 halves the bytes of both operands, "
                      "and its tiling differs (an int8 base K tile is 128 elements, not 64), so the gain is not "
                      f"simply 2x; the price is the error: {row.int8_err:.1e} against {row.fp16_err:.1e}.")
    return _wrong(f"{value:g}x is not it. Hint: int8_weight_error_cost(({INT8_CASE['K']},), M={INT8_CASE['M']}, "
                  f"N={INT8_CASE['N']}) gives fp16_us and int8_total_us.")


def correction_change_truth() -> float:
    """The largest change the article's correction (defaults alpha = 1, beta = 0) makes to a float32 C."""
    C = np.random.default_rng(10).standard_normal((16, 16)).astype(np.float32)
    return float(np.abs(article_fp32_correction(C) - C).max())


def check_correction_change(answer) -> CheckResult:
    """Run the article's ``apply_fp32_correction`` with its defaults (alpha = 1, beta = 0) on a float32
    C: what is the largest absolute change it makes to any element? Answer: a number."""
    if answer is None:
        return _missing("a number")
    value = _number(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a number.")
    truth = correction_change_truth()
    if abs(value - truth) <= 1e-12:
        return _right(f"{truth:g}: with beta = 0 every step computes y = C[i] - comp, t = y, comp = (t - 0) - y = 0. "
                      "The 'compensation' is always zero, and C comes back bit for bit. Even with other alpha, "
                      "beta it only carries one element's rounding error into the next element.")
    return _wrong(f"{value:g} is not it. Hint: write out the loop by hand for beta = 0: what is `compensation` "
                  "after the first element?")
