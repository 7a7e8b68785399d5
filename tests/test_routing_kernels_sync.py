"""Every hand-placed flag of the routing kernels is needed: dropping all waits of one event makes
the happens-before detector refuse the run (RaceError, or a set never waited: UnmatchedFlagError).
Timing-only runs, so the check holds on the timeline the course shows, not only on its numbers."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from npu_lab.kernels.moe_gating.dispatch_kernel import moe_dispatch_kernel_run
from npu_lab.kernels.moe_gating.grouped_host import simulate_grouped
from npu_lab.kernels.moe_gating.large_e import simulate_large_e
from npu_lab.lang import RaceError, UnmatchedFlagError
from npu_lab.lang.context import KernelContext

RUNS = {
    "grouped": lambda: simulate_grouped(1, 64, 64, 4, num_groups=2, topk_groups=1, score="sigmoid"),
    "large_e": lambda: simulate_large_e(16, 512, 8, chunk=128),
    "dispatch": lambda: moe_dispatch_kernel_run(np.random.default_rng(0).integers(0, 8, (64, 2)).astype(np.int32),
                                                num_experts=8, timing_only=True),
}


def _waited_events(run, monkeypatch) -> collections.Counter:
    seen = collections.Counter()
    original = KernelContext.wait_flag

    def record(self, event, event_id):
        seen[event] += 1
        return original(self, event, event_id)

    with monkeypatch.context() as m:
        m.setattr(KernelContext, "wait_flag", record)
        run()
    return seen


@pytest.mark.parametrize("kernel", sorted(RUNS))
def test_dropping_any_event_s_waits_is_caught(kernel, monkeypatch):
    run = RUNS[kernel]
    events = _waited_events(run, monkeypatch)
    assert events, f"{kernel}: no hand-placed wait_flag at all"
    original = KernelContext.wait_flag
    for event in events:
        def skip(self, e, i, event=event):
            return None if e == event else original(self, e, i)

        with monkeypatch.context() as m:
            m.setattr(KernelContext, "wait_flag", skip)
            with pytest.raises((RaceError, UnmatchedFlagError)):
                run()
