"""Exercise checks for notebook 13 (balancing work over cores, the monitor, the case study).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult` (a ``str``;
print it) saying whether the answer is right, why, and a hint when it is not. Every expected
answer is computed from the library (:mod:`npu_lab.sched`, :mod:`npu_lab.llm.case_study`), never
typed in; :func:`expected_answers` gives each check's truth, computed as the check computes it.

Code exercise: :func:`check_lpt_scheduler` runs the learner's LPT scheduler on fixed and seeded
cases and compares it with the library's :func:`~npu_lab.sched.lpt_schedule`, the brute-force
optimum and Graham's bound (a host function: no kernel, so it is a check here, not a
``check_kernel`` exercise).
"""

from __future__ import annotations

import math

import numpy as np

from ..llm.case_study import case_study_point
from ..sched import (contiguous_schedule, lpt_bound, lpt_schedule, optimal_makespan, round_robin_schedule,
                     validate_work)
from .checks import CheckResult, missing as _missing, parse_number as _number, right as _right, wrong as _wrong

__all__ = ["check_lpt_makespan", "check_service_batch", "check_lpt_scheduler", "expected_answers",
           "lpt_makespan_truth", "service_batch_truth", "LPT_CASE", "SERVICE_CASE", "LPT_CHECK_CASES",
           "KERNEL_CHECKS"]

#: checks that take code, not a value (no answer to hide above them)
KERNEL_CHECKS = ("check_lpt_scheduler",)
#: Exercise 13.1: seven work items on three cores, LPT by hand
LPT_CASE = dict(work=(9, 8, 7, 6, 5, 4, 3), cores=3)
#: Exercise 13.2: the largest batch whose decode step fits the article's "after" P99
SERVICE_CASE = dict(p99_ms=15.0, context_len=8192, kv_dtype="int8", weights_dtype="int8")


def expected_answers() -> dict[str, object]:
    """The truth of every value check of notebook 13, by check name."""
    return {"check_lpt_makespan": lpt_makespan_truth(), "check_service_batch": service_batch_truth()}


def lpt_makespan_truth() -> int:
    """LPT's makespan on :data:`LPT_CASE`."""
    return lpt_schedule(list(LPT_CASE["work"]), LPT_CASE["cores"]).makespan


def check_lpt_makespan(answer) -> CheckResult:
    """Seven items of lengths 9, 8, 7, 6, 5, 4, 3 on three cores by LPT: the makespan?"""
    if answer is None:
        return _missing("a whole number (the largest core load)")
    value = _number(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a number.")
    w, m = list(LPT_CASE["work"]), LPT_CASE["cores"]
    lpt = lpt_schedule(w, m)
    truth, opt = lpt.makespan, optimal_makespan(w, m)
    loads = " / ".join("+".join(str(c) for c in core) + f" = {sum(core)}" for core in lpt.core_lists())
    if value == truth:
        return _right(f"{truth}: {loads}. The last item (3) lands on a core already at {truth - 3}, and nothing is "
                      f"left to even it out. The optimum is {opt} (every core at {sum(w) // m}), so LPT is "
                      f"{truth / opt:.3f} x optimal here — within Graham's bound {lpt_bound(m):.3f} "
                      "for three cores.")
    if value == opt:
        return _wrong(f"{value:g} is the optimum (a perfect split exists), not what LPT's greedy gives. Hint: place "
                      "the items one by one, longest first, each on the core with the least load so far; where "
                      "does the last item go?")
    if value == round_robin_schedule(w, m).makespan:
        return _wrong(f"{value:g} is round-robin's makespan (item i to core i mod 3). Hint: LPT puts each item on the "
                      "least-loaded core, not the next one.")
    if value == contiguous_schedule(w, m).makespan:
        return _wrong(f"{value:g} is the contiguous split's (three consecutive items per core). Hint: LPT looks at "
                      "the loads.")
    if value == math.ceil(sum(w) / m) or value == sum(w) / m:
        return _wrong(f"{value:g} is the mean load, a lower bound. Hint: LPT does not always reach it.")
    return _wrong(f"{value:g} is not it. Hint: sort longest first; give each item to the least-loaded core "
                  "(the lowest-numbered on a tie); the makespan is the largest load.")


def service_batch_truth() -> int:
    """The batch with the most tokens/s whose step fits :data:`SERVICE_CASE`'s P99 and the HBM."""
    c = SERVICE_CASE
    claims = case_study_point(1, c["context_len"], c["kv_dtype"], c["weights_dtype"])["claims"]
    return next(x["best_batch"] for x in claims if x["article_p99_ms"] == c["p99_ms"])


def check_service_batch(answer) -> CheckResult:
    """Llama-3-70B on 8 cards, int8 weights and int8 KV, every sequence at 8K: the largest batch
    whose decode step is at most 15 ms (the article's "after" P99)? Answer: a whole number."""
    if answer is None:
        return _missing("a whole number of sequences")
    value = _number(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a number.")
    c = SERVICE_CASE
    truth = service_batch_truth()
    point = case_study_point(truth, c["context_len"], c["kv_dtype"], c["weights_dtype"])
    row = point["row"]
    if value == truth:
        after = next(x for x in point["claims"] if x["article_p99_ms"] == c["p99_ms"])
        nxt = case_study_point(truth + 1, c["context_len"], c["kv_dtype"], c["weights_dtype"])["row"]
        why = (f"one more sequence and the step passes {c['p99_ms']:g} ms ({nxt['step_ms']:.2f} ms)"
               if nxt["step_ms"] > c["p99_ms"] else "one more sequence and weights + KV no longer fit the HBM")
        return _right(f"batch {truth}: a step of {row['step_ms']:.2f} ms ({row['bound']}-bound), "
                      f"{row['tokens_per_s']:,.0f} tokens/s; {why}. So 3,850 tokens/s at a 15 ms P99 is {after['verdict']} with int8 "
                      "weights and KV — and only with them (bf16 weights allow far fewer).")
    implied = 3850 * c["p99_ms"] / 1e3
    if math.isclose(value, implied, rel_tol=0.02) or value in (math.floor(implied), math.ceil(implied)):
        return _wrong(f"{value:g} is tokens/s x P99 from the article's own figures (a ceiling the article implies). "
                      "Hint: the question is what the hardware allows — the step time of decode_step_roofline.")
    bf16 = case_study_point(1, c["context_len"], "bf16", "bf16")["claims"]
    if value == next(x["best_batch"] for x in bf16 if x["article_p99_ms"] == c["p99_ms"]):
        return _wrong(f"{value:g} is the answer with bf16 weights and KV. Hint: the question stores both in int8.")
    return _wrong(f"{value:g} is not it. Hint: decode_step_roofline(range(1, 257), 8192, kv_dtype='int8', "
                  "weights_dtype='int8') gives step_us per batch; the largest batch with step_us <= 15,000 (and "
                  "fits_hbm) is the answer.")


# ---- the code exercise: an LPT scheduler ------------------------------------------------------
#: (work, cores) the scheduler check runs first (then seeded random ones)
LPT_CHECK_CASES = (((9, 8, 7, 6, 5, 4, 3), 3), ((7, 7, 6, 6, 5, 5, 4, 4, 4), 4), ((3, 3, 3, 3), 2),
                   ((0, 0, 5), 2), ((12,), 3), ((5, 1, 4), 1), ((2, 9, 4, 4, 1, 7, 3, 8), 3))
_RANDOM_CASES = 12
_SEED = 13


def _lpt_cases():
    rng = np.random.default_rng(_SEED)
    cases = [(list(w), m) for w, m in LPT_CHECK_CASES]
    for _ in range(_RANDOM_CASES):
        n = int(rng.integers(1, 11))
        cases.append(([int(x) for x in rng.integers(1, 50, n)], int(rng.integers(1, 6))))
    return cases


def _loads_of(out, work, cores):
    """The per-core loads of a learner's answer (a list of ``cores`` lists of item indices), or an
    error message saying what is wrong with its shape."""
    if isinstance(out, (str, bytes)) or not isinstance(out, (list, tuple)):
        return None, f"it returned {type(out).__name__}, not a list of {cores} lists of item indices"
    if len(out) != cores:
        return None, f"it returned {len(out)} lists for {cores} cores (one list per core, empty ones included)"
    seen = []
    for c, core in enumerate(out):
        if isinstance(core, (str, bytes)) or not isinstance(core, (list, tuple)):
            return None, f"core {c}'s entry is {type(core).__name__}, not a list of item indices"
        for i in core:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < len(work):
                return None, f"core {c} lists {i!r}, not an item index 0..{len(work) - 1}"
            seen.append(int(i))
    missing = sorted(set(range(len(work))) - set(seen))
    twice = sorted({i for i in seen if seen.count(i) > 1})
    if missing or twice:
        return None, (f"every item must run exactly once: " + (f"missing {missing} " if missing else "")
                      + (f"twice {twice}" if twice else "")).strip()
    return [sum(work[i] for i in core) for core in out], None


def check_lpt_scheduler(fn) -> CheckResult:
    """Run ``fn(work, cores)`` — work: a list of whole lengths, cores >= 1; it returns one list of
    item indices per core — on :data:`LPT_CHECK_CASES` and seeded random cases. Right when every
    item runs once and each makespan equals LPT's (the library's :func:`~npu_lab.sched.lpt_schedule`;
    ties can be broken either way, the makespan does not change), which stays within Graham's
    bound of the brute-force optimum."""
    if fn is None:
        return _missing("your function (e.g. my_lpt)")
    if not callable(fn):
        return _wrong(f"pass your function itself (my_lpt), not a {type(fn).__name__}.")
    worst = 1.0
    cases = _lpt_cases()
    for work, cores in cases:
        w = validate_work(work)
        try:
            out = fn(list(w), cores)
        except Exception as exc:          # the learner's code: every error becomes a hint
            return _wrong(f"my_lpt({w}, {cores}) raised {type(exc).__name__}: {exc}")
        if out is None and (work, cores) == (list(LPT_CHECK_CASES[0][0]), LPT_CHECK_CASES[0][1]):
            return _missing("a body for your function (it returned None)")
        loads, problem = _loads_of(out, w, cores)
        if problem:
            return _wrong(f"for work={w}, cores={cores}: {problem}.")
        got, lpt = max(loads), lpt_schedule(w, cores).makespan
        opt = optimal_makespan(w, cores)
        if got != lpt:
            if got == round_robin_schedule(w, cores).makespan:
                hint = "that is round-robin's (item i to core i mod cores): pick the least-loaded core instead"
            elif got == contiguous_schedule(w, cores).makespan:
                hint = "that is the contiguous split's: LPT looks at the loads"
            elif got < lpt:
                hint = "better than LPT — but not LPT: sort longest first and take the least-loaded core"
            else:
                hint = "sort longest first, and give each item to the least-loaded core"
            return _wrong(f"for work={w}, cores={cores} your makespan is {got}, LPT's is {lpt} (optimum {opt}): {hint}.")
        worst = max(worst, got / opt if opt else 1.0)
    return _right(f"LPT on all {len(cases)} cases; the worst makespan / optimum was {worst:.3f} (Graham's bound "
                  f"for the core counts tried: at most {max(lpt_bound(m) for _, m in cases):.3f}). Graham's "
                  "worst case (7, 7, 6, 6, 5, 5, 4, 4, 4 on four cores) reaches the bound exactly.")
