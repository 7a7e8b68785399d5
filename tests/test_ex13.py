"""Notebook 13's checks (npu_lab.course.ex13): truths computed from the library, hints for the
likely wrong answers, and the LPT-scheduler check against right, wrong and broken schedulers."""

from __future__ import annotations

import heapq

import pytest

from npu_lab.course import ex13
from npu_lab.sched import lpt_schedule, optimal_makespan, round_robin_schedule


def _lpt(work, cores):
    heap, out = [(0, c) for c in range(cores)], [[] for _ in range(cores)]
    for i in sorted(range(len(work)), key=lambda i: -work[i]):
        load, c = heapq.heappop(heap)
        out[c].append(i)
        heapq.heappush(heap, (load + work[i], c))
    return out


def test_truths_come_from_the_library():
    t = ex13.expected_answers()
    assert set(t) == {n for n in ex13.__all__ if n.startswith("check_")} - set(ex13.KERNEL_CHECKS)
    w, m = list(ex13.LPT_CASE["work"]), ex13.LPT_CASE["cores"]
    assert t["check_lpt_makespan"] == lpt_schedule(w, m).makespan > optimal_makespan(w, m)   # LPT is not optimal here
    assert ex13.check_lpt_makespan(t["check_lpt_makespan"]).correct
    assert ex13.check_service_batch(t["check_service_batch"]).correct
    assert ex13.check_service_batch(str(t["check_service_batch"])).correct


@pytest.mark.parametrize("check, answer, words", [
    (ex13.check_lpt_makespan, None, "No answer yet"),
    (ex13.check_lpt_makespan, "many", "not a number"),
    (ex13.check_lpt_makespan, 14, "optimum"),
    (ex13.check_lpt_makespan, 18, "round-robin"),
    (ex13.check_service_batch, 58, "tokens/s x P99"),
    (ex13.check_service_batch, 10, "bf16"),
    (ex13.check_service_batch, 300, "decode_step_roofline"),
])
def test_wrong_answers_get_their_hint(check, answer, words):
    r = check(answer)
    assert words in r and r.correct is not True


def test_the_scheduler_check():
    assert ex13.check_lpt_scheduler(_lpt).correct
    assert ex13.check_lpt_scheduler(None).correct is None
    assert ex13.check_lpt_scheduler(lambda w, m: None).correct is None
    rr = ex13.check_lpt_scheduler(lambda w, m: [[i for i in range(len(w)) if i % m == c] for c in range(m)])
    assert rr.correct is False and "round-robin" in rr
    assert "exactly once" in ex13.check_lpt_scheduler(lambda w, m: _lpt(w, m)[:-1] + [[0]])
    assert "lists for" in ex13.check_lpt_scheduler(lambda w, m: _lpt(w, m)[:1])
    assert "raised ZeroDivisionError" in ex13.check_lpt_scheduler(lambda w, m: 1 / 0)
    assert ex13.check_lpt_scheduler(3).correct is False
    # a scheduler that is LPT except on ties (highest core instead of lowest) is still LPT
    def lpt_high(work, cores):
        out = _lpt(work, cores)
        return out[::-1]
    assert ex13.check_lpt_scheduler(lpt_high).correct
    assert round_robin_schedule([9, 8, 7, 6, 5, 4, 3], 3).makespan == 18
