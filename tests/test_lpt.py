"""npu_lab.sched: LPT against the brute-force optimum and its bound, the simple schedules, the
length distributions and the article's 65 % -> 92 % / P99 -47 % check."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_lab.sched import (article_balance_check, compare_schedules, contiguous_schedule, lpt_bound, lpt_schedule,
                           optimal_makespan, optimal_makespan_exhaustive, round_robin_schedule, sample_lengths,
                           split_long_schedule)

small_work = st.lists(st.integers(0, 40), min_size=1, max_size=7)
small_cores = st.integers(1, 4)


@settings(max_examples=150, deadline=None)
@given(small_work, small_cores)
def test_lpt_within_graham_bound_of_the_brute_force_optimum(work, cores):
    opt = optimal_makespan(work, cores)
    assert opt == optimal_makespan_exhaustive(work, cores)            # the pruned search is exact
    lpt = lpt_schedule(work, cores)
    assert opt <= lpt.makespan <= lpt_bound(cores) * opt + 1e-9
    assert opt >= max(max(work), math.ceil(sum(work) / cores))         # never below the trivial bound


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=40), st.integers(1, 9))
def test_every_schedule_runs_every_item_once(work, cores):
    for sched in (lpt_schedule(work, cores), round_robin_schedule(work, cores), contiguous_schedule(work, cores)):
        items = sorted(i for core in sched.assignment for i, _ in core)
        assert items == list(range(len(work))) and sum(sched.loads) == sum(work)
        assert sched.cores == cores and sched.makespan == max(sched.loads)
        assert 0 <= sched.balance() <= 1 and 0 <= sched.utilisation() <= 1
    split = split_long_schedule(work, cores)
    assert sum(split.loads) == sum(work)                               # no combine cost: the same work
    longest_piece = max(c for core in split.core_lists() for c in core)
    assert longest_piece <= max(1, math.ceil(sum(work) / cores))       # the default threshold
    assert split.makespan <= sum(work) / cores + longest_piece * (1 - 1 / cores) + 1e-9   # list scheduling


def test_graham_worst_case_is_reached():
    # the classic tight instance for m = 2: 3, 3, 2, 2, 2 -> LPT 7, optimum 6 = (4/3 - 1/6) x 6
    work = [3, 3, 2, 2, 2]
    assert lpt_schedule(work, 2).makespan == 7 and optimal_makespan(work, 2) == 6
    assert 7 / 6 == pytest.approx(lpt_bound(2))


def test_hand_cases():
    s = lpt_schedule([5, 1, 4, 2, 3], 2)
    assert s.core_lists() == [[5, 2, 1], [4, 3]] and s.makespan == 8 and s.loads == (8, 7)
    rr = round_robin_schedule([5, 1, 4, 2, 3], 2)
    assert rr.core_lists() == [[5, 4, 3], [1, 2]] and rr.makespan == 12
    c = contiguous_schedule([5, 1, 4, 2, 3], 2)
    assert c.core_lists() == [[5, 1, 4], [2, 3]] and c.balance() == pytest.approx(5 / 10)
    sp = split_long_schedule([10, 2], 2, threshold=4, combine_cost=1)     # 10 -> 4, 3, 3 (+1 each)
    assert sorted(x for core in sp.core_lists() for x in core) == [2, 4, 4, 5]
    assert sp.completion_times()[0] == max(t for t in sp.loads if t)


@pytest.mark.parametrize("work, cores, err, words", [
    ([], 2, ValueError, "work is empty"),
    ([1, 2], 0, ValueError, "cores must be >= 1"),
    ([1, 2], 1.5, TypeError, "cores must be a whole number"),
    ([1, 2.5], 2, ValueError, r"work\[1\] = 2.5 is not a whole number"),
    ([1, -3], 2, ValueError, r"work\[1\] = -3 is negative"),
    ([float("nan")], 2, ValueError, "not finite"),
    ([1, "2"], 2, TypeError, "not a number"),
    ([True], 2, TypeError, "not a number"),
    ("12", 2, TypeError, "list of whole-number lengths"),
])
def test_bad_work_is_named(work, cores, err, words):
    for f in (lpt_schedule, round_robin_schedule, contiguous_schedule, split_long_schedule, optimal_makespan):
        with pytest.raises(err, match=words):
            f(work, cores)


def test_numpy_and_whole_floats_are_accepted():
    assert lpt_schedule(np.array([3, 1, 2]), np.int64(2)).makespan == 3
    assert lpt_schedule([3.0, 1.0], 2).makespan == 3
    with pytest.raises(ValueError, match="brute force is for small cases"):
        optimal_makespan(list(range(20)), 3)
    with pytest.raises(ValueError, match="threshold must be"):
        split_long_schedule([4], 2, threshold=0)


def test_length_distributions_are_seeded_and_bounded():
    for dist in ("uniform", "lognormal", "zipf"):
        a, b = sample_lengths(500, dist, seed=3), sample_lengths(500, dist, seed=3)
        assert a == b and a != sample_lengths(500, dist, seed=4)
        assert min(a) >= 128 and max(a) <= 8192 and all(isinstance(x, int) for x in a)
    # the long tail: lognormal's mean well above its median, uniform's close to it
    ln = sample_lengths(5000, "lognormal", seed=1, high=10**6)
    assert np.mean(ln) > 1.3 * np.median(ln)
    with pytest.raises(ValueError, match="known: uniform"):
        sample_lengths(10, "pareto")
    with pytest.raises(ValueError, match="n must be"):
        sample_lengths(0)


def test_compare_schedules_and_the_article_check():
    work = sample_lengths(200, "lognormal", seed=0)
    df = compare_schedules(work, 16)
    assert list(df.schedule) == ["round-robin", "contiguous", "LPT", "split-long"]
    lpt = df.set_index("schedule").loc["LPT"]
    assert lpt.makespan <= df.set_index("schedule").loc["round-robin"].makespan
    assert lpt.utilisation == pytest.approx(sum(work) / (16 * lpt.makespan))
    check = article_balance_check(cores=16, n=64)
    assert set(check.distribution) == {"uniform", "lognormal", "zipf"} and len(check) == 12
    assert "unverifiable" in check.attrs["verdict"] and "lognormal: round-robin" in check.attrs["verdict"]
    for _, g in check.groupby("distribution"):
        assert g.set_index("schedule").utilisation["LPT"] >= g.set_index("schedule").utilisation["round-robin"]
