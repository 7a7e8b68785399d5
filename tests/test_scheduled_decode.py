"""npu_lab.kernels.decode.scheduled: the decode kernel with a host-chosen block -> task list.

Every schedule gives the reference output (the schedule moves work, not results); the contiguous
schedule is exactly the decode kernel's own split; timing-only and every-block runs give the fast
run's timeline; each task runs once; LPT never loses to round-robin on the timeline by more than
the fixed per-task work; split-long wins when one sequence dominates; the timeline's core
utilisation follows the host model's; bad input is refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_lab.kernels.decode import decode_attention, decode_attention_reference
from npu_lab.kernels.decode.scheduled import (SCHEDULES, _unpack_block_tasks, article_balance_on_kernel,
                                              compare_schedules_on_kernel, pack_block_tasks, random_decode_inputs,
                                              scheduled_decode_attention)
from npu_lab.lang.launch import full_timing_every_block
from npu_lab.sched import article_spread_sweep
from npu_lab.sched.compare import ARTICLE_TOLERANCE, ARTICLE_UTILISATION

COLS = ["launch", "core", "block", "pipe", "name", "start_us", "end_us", "bytes"]


@settings(max_examples=12, deadline=None)
@given(lens=st.lists(st.integers(1, 96), min_size=1, max_size=9), cores=st.integers(1, 6),
       schedule=st.sampled_from(SCHEDULES), dtype=st.sampled_from([np.float16, np.float32]),
       seed=st.integers(0, 3))
def test_every_schedule_matches_the_reference(lens, cores, schedule, dtype, seed):
    q, k, v, l = random_decode_inputs(lens, q_heads=4, kv_heads=2, head_dim=64, dtype=dtype, seed=seed)
    r = scheduled_decode_attention(q, k, v, l, schedule, cores=cores, chunk=32)
    ref = decode_attention_reference(q, k, v, l)
    tol = 1e-5 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(r.out, ref, rtol=tol, atol=tol)
    ran = sorted(i for core in r.schedule.assignment for i, _ in core)
    assert ran == list(range(r.tiling.tasks))                      # every task once
    assert r.timeline.launches[0].block_dim == min(cores, r.tiling.tasks)


def test_contiguous_is_the_kernels_own_split():
    q, k, v, l = random_decode_inputs([181, 291, 35, 317, 75, 229, 61, 109], seed=1)
    a = scheduled_decode_attention(q, k, v, l, "contiguous", cores=4)
    b = decode_attention(q, k, v, l, version="v2", block_dim=4)
    assert a.timeline.total_us == b.timeline.total_us
    assert a.timeline.busy_us_by_pipe() == b.timeline.busy_us_by_pipe()
    np.testing.assert_array_equal(a.out, b.out)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_timing_only_and_every_block_equal_the_fast_run(schedule):
    q, k, v, l = random_decode_inputs([300, 40, 17, 64, 9, 120], seed=2)
    fast = scheduled_decode_attention(q, k, v, l, schedule, cores=4, chunk=32)
    timing = scheduled_decode_attention(q, k, v, l, schedule, cores=4, chunk=32, timing_only=True)
    with full_timing_every_block():
        full = scheduled_decode_attention(q, k, v, l, schedule, cores=4, chunk=32)
    for other in (timing, full):
        assert other.timeline.total_us == fast.timeline.total_us
        assert other.timeline.events()[COLS].equals(fast.timeline.events()[COLS])
    assert timing.out is None
    np.testing.assert_array_equal(full.out, fast.out)


def test_schedules_order_on_the_timeline():
    # one sequence far longer than a core's share: LPT cannot beat it, splitting can
    lens = [4096, 300, 200, 100, 64, 50, 40, 30, 900, 20, 16, 16]
    df = compare_schedules_on_kernel(lens, 8).set_index("schedule")
    assert df.loc["LPT", "time_us"] <= df.loc["round-robin", "time_us"]
    assert df.loc["LPT", "time_us"] <= df.loc["contiguous", "time_us"]
    assert df.loc["split-long", "time_us"] < df.loc["LPT", "time_us"]
    assert df.loc["split-long", "tasks"] > df.loc["LPT", "tasks"]               # the pieces
    # on one launch the timeline's core utilisation follows the host model's
    for s in ("round-robin", "contiguous", "LPT"):
        assert abs(df.loc[s, "core_utilisation"] - df.loc[s, "model_utilisation"]) < 0.05
    # longer makespan in the model, longer time on the simulator
    one = df.drop(index="split-long")
    assert list(one.sort_values("model_makespan").index) == list(one.sort_values("time_us").index)


def test_fewer_tasks_than_cores_leave_cores_idle_in_the_monitor():
    from npu_lab.sim.monitor import monitor
    q, k, v, l = random_decode_inputs([64, 64], kv_heads=1)
    r = scheduled_decode_attention(q, k, v, l, "LPT", cores=8, timing_only=True)
    assert r.timeline.launches[0].block_dim == 2
    assert monitor(r.timeline).summary["idle_cores"] == r.timeline.hw.vector_cores - 2


def test_block_task_bytes_round_trip():
    lists = [[3, 0], [], [1, 2, 5], [4]]
    assert [list(x) for x in _unpack_block_tasks(pack_block_tasks(lists))] == lists


@pytest.mark.parametrize("kwargs, err, words", [
    (dict(schedule="random"), ValueError, "schedule must be one of"),
    (dict(cores=0), ValueError, "cores must be >= 1"),
    (dict(cores=2.5), TypeError, "whole number"),
    (dict(cores=49), ValueError, "vector cores"),
])
def test_bad_input(kwargs, err, words):
    q, k, v, l = random_decode_inputs([16, 8])
    with pytest.raises(err, match=words):
        scheduled_decode_attention(q, k, v, l, **kwargs)


@pytest.mark.parametrize("lens, err, words", [([], ValueError, "empty"), ([16, 8.5], ValueError, "whole"),
                                              ([16, 0], ValueError, "at least one cached position")])
def test_bad_lengths(lens, err, words):
    with pytest.raises(err, match=words):
        random_decode_inputs(lens)


def test_article_checks_compute_their_verdicts():
    sw = article_spread_sweep(sigmas=(0.25, 0.5, 1.0), items=(96, 256))
    lo, hi = ARTICLE_UTILISATION
    want = ((sw.rr_utilisation - lo).abs() <= ARTICLE_TOLERANCE) & ((sw.lpt_utilisation - hi).abs() <= ARTICLE_TOLERANCE)
    assert (sw.matches_article == want).all()
    assert sw.rr_utilisation.between(0, 1).all() and sw.lpt_utilisation.between(0, 1).all()
    for r in sw[sw.matches_article].itertuples():
        assert f"sigma={r.sigma:g}" in sw.attrs["verdict"]
    with pytest.raises(ValueError, match="at least one"):
        article_spread_sweep(sigmas=())
    k = article_balance_on_kernel(cores=4, n=12, high=256)
    assert set(k.schedule) == set(SCHEDULES) and len(k) == 8
    g = k.set_index(["distribution", "schedule"]).core_utilisation
    for d in k.distribution.unique():
        assert g[(d, "LPT")] >= g[(d, "round-robin")] - 0.02
        assert f"{d}: round-robin {g[(d, 'round-robin')]:.0%}" in k.attrs["verdict"]
