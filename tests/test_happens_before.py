"""The race detector by happens-before (npu_lab/sim/core.py clocks, npu_lab/lang/context.py _exec):
a cross-pipe pair on overlapping UB bytes with no sync edge is a RaceError whatever the timing;
SetFlag never waited is an UnmatchedFlagError; TPipe event ids (AllocEventID / FetchEventID).

Each "hidden" case asserts the report says the timeline *kept the two apart*: that is exactly the
case the old, timing-based detector (a race only when the later access started before the earlier
one completed) let pass."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab import GlobalTensor, launch, npu_kernel
from npu_lab.lang import (EventIdError, RaceError, TBuf, TPosition, TQue, UnmatchedFlagError)

HW = "ascend-910b2"
HIDDEN = "happens to keep them apart"
MODES = [pytest.param(False, id="full"), pytest.param(True, id="timing-only")]


def _gm(n, name="x_gm", dtype=np.float32):
    return GlobalTensor.from_array(np.arange(n).astype(dtype), name)


def _ub(ctx, count, name, dtype=np.float32):
    b = TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(b, count * np.dtype(dtype).itemsize, name=name)
    return b.get(dtype)


def _run(kernel, timing_only, *args):
    return launch(kernel, 1, *args, hw=HW, timing_only=timing_only)


# ---- races the timeline hides ----------------------------------------------------------------------
def _scalar_read(flag: bool):
    @npu_kernel
    def k(ctx, x_gm):
        x = _ub(ctx, 64, "x")
        ctx.data_copy(x, x_gm, 64)
        ctx.scalar("long scalar work", ops=20000)        # the load is long done when S reads
        if flag:
            ctx.set_flag("MTE2_S", 0)
            ctx.wait_flag("MTE2_S", 0)
        x.get_value(3)
    return k


@pytest.mark.parametrize("timing_only", MODES)
def test_missing_mte2_s_is_a_race_even_when_the_load_finished_long_before(timing_only):
    with pytest.raises(RaceError) as info:
        _run(_scalar_read(False), timing_only, _gm(64))
    e = info.value
    assert HIDDEN in str(e) and e.event == "MTE2_S" and e.kind == "read after write" and e.buffer == "x"
    assert "no MTE2_S flag between DataCopy" in str(e) and "GetValue on S" in str(e)
    assert "test_happens_before.py:" in str(e)        # both instructions' kernel lines
    assert e.earlier[2][1] != e.later[2][1]
    _run(_scalar_read(True), timing_only, _gm(64))     # with the pair: fine


def _store_behind_a_long_copy(flag: bool):
    @npu_kernel
    def k(ctx, x_gm, big_gm, y_gm, big_out):
        x, y, big = _ub(ctx, 64, "x"), _ub(ctx, 64, "y"), _ub(ctx, 16384, "big")
        ctx.data_copy(big, big_gm, 16384)
        ctx.data_copy(x, x_gm, 64)
        ctx.set_flag("MTE2_V", 0)
        ctx.wait_flag("MTE2_V", 0)
        ctx.muls(y, x, 2.0, 64)                         # short
        ctx.set_flag("MTE2_MTE3", 0)
        ctx.wait_flag("MTE2_MTE3", 0)
        ctx.data_copy(big_out, big, 16384)              # long: MTE3 is busy well past the Muls
        if flag:
            ctx.set_flag("V_MTE3", 0)
            ctx.wait_flag("V_MTE3", 0)
        ctx.data_copy(y_gm, y, 64)
    return k


@pytest.mark.parametrize("timing_only", MODES)
def test_missing_v_mte3_hidden_by_a_long_instruction_on_the_consumer_pipe(timing_only):
    args = lambda: (_gm(64), _gm(16384, "big_gm"), GlobalTensor.empty(64, np.float32, "y_gm"),  # noqa: E731
                    GlobalTensor.empty(16384, np.float32, "big_out"))
    with pytest.raises(RaceError) as info:
        _run(_store_behind_a_long_copy(False), timing_only, *args())
    assert HIDDEN in str(info.value) and info.value.event == "V_MTE3" and info.value.buffer == "y"
    assert 'ctx.set_flag("V_MTE3", id) after Muls' in str(info.value)
    _run(_store_behind_a_long_copy(True), timing_only, *args())


def _double_buffered(reuse_flag: bool, tiles: int = 6, n: int = 16384):
    """x in two slots (loads long, compute short): slot j % 2 is reloaded at tile j + 2. Without
    V_MTE2 per slot the reload is not ordered after tile j's Muls, though MTE2's queue of long
    loads keeps it late on this timeline."""
    @npu_kernel
    def k(ctx, x_gm, y_gm):
        xs = [_ub(ctx, n, f"x{s}") for s in range(2)]
        ys = [_ub(ctx, 64, f"y{s}") for s in range(2)]
        v_mte2 = [ctx.pipe.alloc_event_id("V_MTE2") for _ in range(2)]
        mte3_v = [ctx.pipe.alloc_event_id("MTE3_V") for _ in range(2)]
        mte2_v = [ctx.pipe.alloc_event_id("MTE2_V") for _ in range(2)]   # two loads in flight
        v_mte3 = ctx.pipe.fetch_event_id("V_MTE3")

        def load(j):
            if reuse_flag and j >= 2:
                ctx.wait_flag("V_MTE2", v_mte2[j % 2])
            ctx.data_copy(xs[j % 2], x_gm[j * n], n)
            ctx.set_flag("MTE2_V", mte2_v[j % 2])

        load(0)
        for j in ctx.tile_loop(tiles, key=lambda j: (j + 1 < tiles, j >= 2, j + 2 < tiles)):
            if j + 1 < tiles:
                load(j + 1)
            ctx.wait_flag("MTE2_V", mte2_v[j % 2])
            if j >= 2:
                ctx.wait_flag("MTE3_V", mte3_v[j % 2])
            ctx.muls(ys[j % 2], xs[j % 2], 2.0, 64)
            if reuse_flag and j + 2 < tiles:
                ctx.set_flag("V_MTE2", v_mte2[j % 2])
            ctx.set_flag("V_MTE3", v_mte3)
            ctx.wait_flag("V_MTE3", v_mte3)
            ctx.data_copy(y_gm[j * 64], ys[j % 2], 64)
            if j + 2 < tiles:
                ctx.set_flag("MTE3_V", mte3_v[j % 2])
        for s in range(2):
            ctx.pipe.release_event_id("V_MTE2", v_mte2[s])
            ctx.pipe.release_event_id("MTE3_V", mte3_v[s])
            ctx.pipe.release_event_id("MTE2_V", mte2_v[s])
    return k


@pytest.mark.parametrize("timing_only", MODES)
def test_cross_iteration_race_in_a_double_buffered_loop(timing_only):
    tiles, n = 6, 16384
    with pytest.raises(RaceError) as info:
        _run(_double_buffered(False, tiles, n), timing_only, _gm(tiles * n), GlobalTensor.empty(tiles * 64, np.float32))
    e = info.value
    assert HIDDEN in str(e) and e.event == "V_MTE2" and e.kind == "write after read" and e.buffer in ("x0", "x1")


@pytest.mark.parametrize("tiles", [3, 6, 40])
def test_the_synced_double_buffered_loop_passes_and_fast_forwarding_stays_exact(tiles):
    n = 16384
    y = GlobalTensor.empty(tiles * 64, np.float32)
    full = _run(_double_buffered(True, tiles, n), False, _gm(tiles * n), y)
    fast = _run(_double_buffered(True, tiles, n), True, _gm(tiles * n), GlobalTensor.empty(tiles * 64, np.float32))
    assert np.array_equal(y.data, 2 * np.arange(tiles * n, dtype=np.float32).reshape(tiles, n)[:, :64].ravel())
    assert full.total_us == fast.total_us
    a, b = full.launches[0].traces[0], fast.launches[0].traces[0]
    assert a.same_work_as(b)


# ---- what orders what ------------------------------------------------------------------------------
def _setvalue_then_vector(flag: bool):
    @npu_kernel
    def k(ctx):
        a, b = _ub(ctx, 64, "a"), _ub(ctx, 64, "b")
        a.set_value(0, 1.0)                   # S writes; issuing the Adds later orders nothing
        if flag:
            ctx.set_flag("S_V", 0)
            ctx.wait_flag("S_V", 0)
        ctx.adds(b, a, 1.0, 64)
    return k


def test_the_scalar_units_own_writes_need_a_flag_before_another_pipe_reads_them():
    """Scalar读写数据.md: SetValue, then SetFlag/WaitFlag before the pipe that uses the data."""
    with pytest.raises(RaceError) as info:
        launch(_setvalue_then_vector(False), 1, hw=HW)
    assert info.value.event == "S_V" and info.value.kind == "read after write"
    launch(_setvalue_then_vector(True), 1, hw=HW)


def test_what_the_scalar_unit_waited_for_orders_what_it_issues_next():
    """S waits for MTE2 (MTE2_S) and then issues a V instruction: V is ordered after the load
    (the scalar unit did not issue it before the wait passed), with no MTE2_V flag."""
    @npu_kernel
    def k(ctx, x_gm):
        x, y = _ub(ctx, 64, "x"), _ub(ctx, 64, "y")
        ctx.data_copy(x, x_gm, 64)
        ctx.set_flag("MTE2_S", 0)
        ctx.wait_flag("MTE2_S", 0)
        ctx.muls(y, x, 2.0, 64)
    launch(k, 1, _gm(64), hw=HW)


def test_pipe_all_orders_every_pipe_after_every_pipe():
    @npu_kernel
    def k(ctx, x_gm, y_gm):
        x, y = _ub(ctx, 64, "x"), _ub(ctx, 64, "y")
        ctx.data_copy(x, x_gm, 64)
        ctx.pipe_barrier("PIPE_ALL")
        x.set_value(0, 5.0)
        ctx.pipe_barrier("PIPE_ALL")
        ctx.muls(y, x, 2.0, 64)
        ctx.pipe_barrier("PIPE_ALL")
        ctx.data_copy(y_gm, y, 64)
    y = GlobalTensor.empty(64, np.float32)
    launch(k, 1, _gm(64), y, hw=HW)
    assert y.data[0] == 10.0 and y.data[1] == 2.0


def test_a_single_pipe_barrier_orders_nothing_between_pipes():
    @npu_kernel
    def k(ctx, x_gm):
        x, y = _ub(ctx, 64, "x"), _ub(ctx, 64, "y")
        ctx.data_copy(x, x_gm, 64)
        ctx.pipe_barrier("PIPE_MTE2")
        ctx.muls(y, x, 2.0, 64)
    with pytest.raises(RaceError, match="no MTE2_V flag"):
        launch(k, 1, _gm(64), hw=HW)


def test_queue_hand_offs_are_edges_and_free_tensor_orders_the_next_alloc():
    """VECIN EnQue/DeQue orders V after MTE2; FreeTensor -> AllocTensor orders the next load of
    the slot after the V reads of its last tile (no V_MTE2 flag needed)."""
    @npu_kernel
    def k(ctx, x_gm, y_gm):
        q_in, q_out = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
        ctx.pipe.init_buffer(q_in, 1, 256, name="x_in")
        ctx.pipe.init_buffer(q_out, 1, 256, name="y_out")
        for j in range(4):
            x = q_in.alloc_tensor(np.float32)
            ctx.data_copy(x, x_gm[j * 64], 64)
            q_in.enque(x)
            x = q_in.deque(np.float32)
            y = q_out.alloc_tensor(np.float32)
            ctx.muls(y, x, 2.0, 64)
            q_in.free_tensor(x)
            q_out.enque(y)
            y = q_out.deque(np.float32)
            ctx.data_copy(y_gm[j * 64], y, 64)
            q_out.free_tensor(y)
    y = GlobalTensor.empty(256, np.float32)
    launch(k, 1, _gm(256), y, hw=HW)
    assert np.array_equal(y.data, 2 * np.arange(256, dtype=np.float32))


def test_a_racy_block_class_is_caught_by_its_representative():
    @npu_kernel(block_classes=lambda block_dim, x_gm: np.zeros(block_dim, int))
    def k(ctx, x_gm):
        x = _ub(ctx, 64, "x")
        ctx.data_copy(x, x_gm, 64)
        ctx.scalar("work", ops=5000)
        x.get_value(0)
    for timing_only in (False, True):
        with pytest.raises(RaceError, match="no MTE2_S flag"):
            launch(k, 8, _gm(64), hw=HW, timing_only=timing_only)


# ---- SetFlag never waited ----------------------------------------------------------------------------
def test_a_set_flag_never_waited_is_an_error_naming_it_and_its_line():
    @npu_kernel
    def k(ctx, x_gm):
        x = _ub(ctx, 64, "x")
        ctx.data_copy(x, x_gm, 64)
        ctx.set_flag("MTE2_S", 3)                      # the line the report must name
    for timing_only in (False, True):
        with pytest.raises(UnmatchedFlagError) as info:
            launch(k, 1, _gm(64), hw=HW, timing_only=timing_only)
        msg = str(info.value)
        assert "SetFlag<HardEvent::MTE2_S>(3)" in msg and "never waited" in msg
        line = next(i for i, text in enumerate(open(__file__, encoding="utf-8"), 1)
                    if "the line the report must name" in text and "set_flag" in text)
        assert f"at test_happens_before.py:{line} is never waited" in msg
        assert 'ctx.wait_flag("MTE2_S", id)' in msg and "SetFlag和WaitFlag必须成对使用" in msg


def test_every_flag_of_the_course_kernels_is_waited():
    """v2's last tiles set no flag for a tile j + 2 that does not exist; the argmax path pairs its
    last SetFlags after the loop: no course kernel ends with a flag set (else launch raises)."""
    from npu_lab.kernels.moe_gating import simulate_moe_gating
    for version in ("discrete", "v1", "v2", "v2_bad_sync", "v2c", "v3", "v3_fast_exp", "v4"):
        simulate_moe_gating(1, 77, 24, 3, version=version, hw=HW, tile_s=4)
    simulate_moe_gating(1, 64, 64, 2, version="discrete", hw="ascend-310p3")


# ---- TPipe event ids ---------------------------------------------------------------------------------
def test_alloc_event_id_hands_out_the_lowest_free_id_and_release_gives_it_back():
    got = {}

    @npu_kernel
    def k(ctx):
        p = ctx.get_tpipe_ptr()
        assert p is ctx.pipe
        a, b = p.alloc_event_id("MTE2_V"), p.alloc_event_id("MTE2_V")
        other = p.alloc_event_id("V_MTE3")               # ids are per HardEvent
        fetched = p.fetch_event_id("MTE2_V")              # the next free one, not held
        again = p.fetch_event_id("MTE2_V")
        p.release_event_id("MTE2_V", a)
        reused = p.alloc_event_id("MTE2_V")
        got.update(a=a, b=b, other=other, fetched=fetched, again=again, reused=reused)
        for event, eid in (("MTE2_V", b), ("MTE2_V", reused), ("V_MTE3", other)):
            p.release_event_id(event, eid)
    launch(k, 1, hw=HW)
    assert got == {"a": 0, "b": 1, "other": 0, "fetched": 2, "again": 2, "reused": 0}


def test_event_id_rules():
    def run(body):
        @npu_kernel
        def k(ctx):
            body(ctx.pipe)
        launch(k, 1, hw=HW)

    with pytest.raises(EventIdError, match=r"all 8 TEventIDs of HardEvent::V_S are allocated.*ReleaseEventID"):
        run(lambda p: [p.alloc_event_id("V_S") for _ in range(9)])
    with pytest.raises(EventIdError, match=r"all 8 TEventIDs"):
        run(lambda p: ([p.alloc_event_id("S_V") for _ in range(8)], p.fetch_event_id("S_V")))
    with pytest.raises(EventIdError, match=r"was not allocated for MTE2_S.*FetchEventID is not held"):
        run(lambda p: p.release_event_id("MTE2_S", p.fetch_event_id("MTE2_S")))
    with pytest.raises(EventIdError, match=r"was not allocated"):
        run(lambda p: (p.release_event_id("S_MTE3", p.alloc_event_id("S_MTE3")),
                       p.release_event_id("S_MTE3", 0)))
    with pytest.raises(EventIdError, match=r"unknown HardEvent 'MTE2_VEC'"):
        run(lambda p: p.alloc_event_id("MTE2_VEC"))   # a typo of MTE2_V; MTE2_MTE1 is a cube event now


def test_event_ids_are_in_the_api_map():
    from npu_lab.lang import ASCEND_C_API
    for name in ("AllocEventID", "ReleaseEventID", "FetchEventID", "GetTPipePtr"):
        assert ASCEND_C_API[name]["page"].endswith(".md")
    assert ASCEND_C_API["AllocEventID"]["python"] == "TPipe.alloc_event_id"
