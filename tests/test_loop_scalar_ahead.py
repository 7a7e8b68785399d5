"""tile_loop's fast-forward when the scalar unit runs ahead of MTE3 at a period of its own (a
GetValue + DataCopyPad per slot, as MoeInitRoutingV2's scatter): the timing-only run jumps and
gives the full run's events exactly; a period in which S waited (even without being held) does not
count as S's own period (the wait's source moves faster and may hold S later)."""

from types import SimpleNamespace

import numpy as np
import pytest

from npu_lab.lang import DataCopyExtParams, GlobalTensor, TBuf, TPosition, launch, npu_kernel
from npu_lab.lang.loop import LoopOps, _Snapshot

HW = "ascend-910b2"
WORD = DataCopyExtParams(1, 4, 0, 0, 0)


@npu_kernel
def scatter_kernel(ctx, idx_gm, out_gm, n, lag):
    """Slot i: GetValue its destination, one 4-byte DataCopyPad there. ``lag`` > 0: before slot i
    the scalar unit also waits for slot i - lag's copy (MTE3_S, event ids cycling over ``lag``)."""
    places, stage = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(places, 4 * n, name="places")
    ctx.pipe.init_buffer(stage, 32 * n, name="stage")
    p, s = places.get(np.int32), stage.get(np.int32)
    ctx.data_copy(p, idx_gm[0], n)
    ctx.data_copy(s, idx_gm[0], n)          # any words: the stage rows
    ctx.set_flag("MTE2_S", 0)
    ctx.wait_flag("MTE2_S", 0)
    ctx.set_flag("MTE2_MTE3", 0)
    ctx.wait_flag("MTE2_MTE3", 0)
    for i in ctx.tile_loop(n, key=lambda i: (min(i, lag + 1), i % lag if lag else 0)):
        if lag and i >= lag:
            ctx.wait_flag("MTE3_S", i % lag)
        d = p.get_value(i)
        ctx.data_copy_pad(out_gm[0 if ctx.timing_only else int(d)], s[8 * i], WORD)
        if lag:
            ctx.set_flag("MTE3_S", i % lag)
    for i in range(max(0, n - lag), n) if lag else ():
        ctx.wait_flag("MTE3_S", i % lag)


def _runs(n, lag):
    idx = np.arange(n, dtype=np.int32)[::-1].copy()
    out = GlobalTensor.from_array(np.zeros(n, np.int32), "out")
    full = launch(scatter_kernel, 1, GlobalTensor.from_array(idx, "idx"), out, n, lag, hw=HW)
    assert sorted(out.data.tolist()) != [0] * n          # the full run scattered words (UB's fill)
    fast = launch(scatter_kernel, 1, GlobalTensor.empty(n, np.int32, "idx", timing_only=True),
                  GlobalTensor.empty(n, np.int32, "out", timing_only=True), n, lag, hw=HW, timing_only=True)
    return full, fast


def test_scalar_ahead_loop_is_jumped_and_exact():
    full, fast = _runs(600, 0)
    assert fast.total_cycles == full.total_cycles
    assert fast.events().equals(full.events())
    segs = fast.launches[0].traces[0].segments
    assert any(np.ndim(period) and copies > 100 for _, copies, period in segs)


@pytest.mark.parametrize("lag", [1, 2, 4, 8])
def test_loops_with_scalar_waits_stay_exact(lag):
    """Slot i also waits for slot i - lag's copy: S is held back by MTE3 (one common period, or
    no jump at all), never the own-period case; the timeline stays the full run's."""
    full, fast = _runs(304, lag)
    assert fast.total_cycles == full.total_cycles
    assert fast.events().equals(full.events())


def _snapshot(j, s_clock, v_clock, waits, s_events):
    pipes = ("S", "V")
    raw = np.array([s_clock, v_clock, s_clock, v_clock, s_clock, v_clock], dtype=np.float64)
    return _Snapshot(j, (), list(pipes) * 3, raw, raw.copy(), 0, {"S": s_events, "V": j}, 0,
                     np.zeros(5, np.int64), [], waits)


@pytest.mark.parametrize("waits_in_period,expected", [(0, 14.0), (1, None)])
def test_the_scalar_runs_ahead_only_if_it_waited_for_nothing(waits_in_period, expected):
    """The rule itself: S moved 14 cycles, V 98, S issued instructions. Without a wait of S in
    the period the loop is steady with S at its own period (14); with one (which did not bind
    yet, but may: its source moves by 98) it is not."""
    ctx = SimpleNamespace(core=SimpleNamespace(pipes=("S", "V")))
    prev = _snapshot(3, 100.0, 1000.0, 5, 10)
    now = _snapshot(4, 114.0, 1098.0, 5 + waits_in_period, 11)
    got = LoopOps._steady_shifts(ctx, prev, now)
    assert (got if got is None else got[2]) == expected
    if got is not None:
        assert got[1] == 98.0
