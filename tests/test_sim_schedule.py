"""Tests of many cores and one launch (npu_lab.sim.schedule, npu_lab.lang.launch; docs/cost_model.md).

The rules under test:

* block i goes to the first core that is free; the task scheduler hands out one block per
  ``block_dispatch_us``, so ``block_dim > cores`` runs in waves;
* the launch overhead is paid once per launch; a sequence of launches adds up;
* a launch is never faster than its roofline (all HBM bytes at the chip's HBM bandwidth);
* identical blocks are simulated once in a timing-only run, and a timing-only run gives exactly
  the timeline of a full run; a full run checks the kernel's claim that blocks are identical.
"""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab import GlobalTensor, SimulationError, Timeline, get_preset, launch, npu_kernel
from npu_lab.lang import TBuf
from npu_lab.kernels.scaled_add import scaled_add
from npu_lab.sim.launch_cost import launch_overhead_us
from npu_lab.sim.schedule import schedule_blocks

HW = get_preset("ascend-910b2")
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _scratch(ctx, count):
    """A float32 scratch tensor of ``count`` elements in UB (a TBuf)."""
    buf = TBuf()
    ctx.pipe.init_buffer(buf, 4 * count, name="buf")
    return buf.get("float32")


def _same_blocks(bd, reps):
    return np.zeros(bd, dtype=int)


@npu_kernel(block_classes=_same_blocks)
def busy_vector_kernel(ctx, reps: int):
    """Every block: ``reps`` exps over a 16 KB UB buffer (compute only, no HBM traffic)."""
    buf = _scratch(ctx, 4096)
    for _ in range(reps):
        ctx.exp(buf, buf, 4096)


def body_cycles(tl: Timeline) -> float:
    (record,) = tl.launches
    return record.total_cycles - record.overhead_cycles


# ---- waves -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("chip", ["ascend-910b2", "ascend-310p3"])
def test_twice_the_cores_takes_two_waves(chip):
    """block_dim = 2 x cores of identical blocks takes about twice one wave's block phase; the
    difference is the dispatch stagger, at most cores x block_dispatch."""
    hw = get_preset(chip)
    cores = hw.vector_cores
    one = body_cycles(launch(busy_vector_kernel, cores, 1200, hw=hw, timing_only=True))
    two = body_cycles(launch(busy_vector_kernel, 2 * cores, 1200, hw=hw, timing_only=True))
    dispatch = hw.us_to_cycles(hw.block_dispatch_us)
    assert two > one
    assert abs(two - 2 * one) <= cores * dispatch + 1e-6
    assert two == pytest.approx(2 * one, rel=0.05)


def test_blocks_go_to_cores_round_robin_in_waves():
    """With identical long blocks, block i runs on core i % cores; wave w starts after wave w-1."""
    cores = HW.vector_cores
    (rec,) = launch(busy_vector_kernel, 3 * cores, 20, hw=HW, timing_only=True).launches
    np.testing.assert_array_equal(rec.block_core, np.arange(3 * cores) % cores)
    duration = rec.traces[0].duration_cycles
    for w in (1, 2):
        wave = slice(w * cores, (w + 1) * cores)
        previous = slice((w - 1) * cores, w * cores)
        assert np.all(rec.block_start[wave] >= rec.block_start[previous] + duration)


def test_dispatch_cost_is_charged_per_block():
    """A block starts one dispatch interval after the previous one was handed out (first wave)."""
    (rec,) = launch(busy_vector_kernel, 4, 1, hw=HW, timing_only=True).launches
    dispatch = HW.us_to_cycles(HW.block_dispatch_us)
    np.testing.assert_allclose(rec.block_start, dispatch * np.arange(1, 5))


def test_whole_microsecond_fractions_are_not_rounded_up_by_float_noise():
    """0.07 us at 1.8 GHz is exactly 126 cycles, so the first block starts at cycle 126."""
    hw = HW.replace(block_dispatch_us=0.07, launch_overhead_us=0.07, launch_per_core_us=0.0)
    (rec,) = launch(busy_vector_kernel, 1, 1, hw=hw, timing_only=True).launches
    assert rec.block_start[0] == 126
    assert rec.overhead_cycles == 126


def test_launch_overhead_is_added_once_per_launch():
    """Raising launch_overhead_us by 10 us adds exactly 10 us, whatever the block count."""
    for block_dim in (1, 48, 200):
        base = launch(busy_vector_kernel, block_dim, 5, hw=HW, timing_only=True)
        slow = launch(busy_vector_kernel, block_dim, 5, hw=HW.replace(launch_overhead_us=HW.launch_overhead_us + 10.0),
                      timing_only=True)
        assert slow.total_us - base.total_us == pytest.approx(10.0)
        assert base.launch_overhead_us == pytest.approx(launch_overhead_us(HW, "vector", block_dim))


def test_first_instruction_starts_after_the_launch_overhead():
    """In the events, the launch overhead comes first and the blocks' events after it."""
    df = launch(busy_vector_kernel, 4, 2, hw=HW, timing_only=True).events()
    overhead = df[df["pipe"] == "launch"]
    assert len(overhead) == 1 and overhead["start_us"].iloc[0] == 0.0
    assert df[df["core"] >= 0]["start_us"].min() >= HW.launch_overhead_us


def test_concat_adds_launches():
    """A pipeline of launches (each with its own overhead) takes the sum of their times, moves
    the sum of their HBM bytes, and its events are laid end to end."""
    x = np.ones(4096, np.float32)
    _, a = scaled_add(x, x, tile_len=256)
    _, b = scaled_add(x, x, tile_len=512, num_buffers=1)
    c = launch(busy_vector_kernel, 3, 4, hw=HW, timing_only=True)
    both = Timeline.concat([a, b, c])
    assert len(both.launches) == 3
    assert both.total_us == pytest.approx(a.total_us + b.total_us + c.total_us)
    assert both.hbm_bytes == a.hbm_bytes + b.hbm_bytes + c.hbm_bytes
    assert both.launch_overhead_us == pytest.approx(sum(launch_overhead_us(HW, l.kernel_type, l.block_dim)
                                                        for l in both.launches))
    df = both.events()
    assert sorted(df["launch"].unique()) == [0, 1, 2]
    second = df[df["launch"] == 1]
    assert second["start_us"].min() == pytest.approx(a.total_us)
    # the last block ends when its last copy out is complete (ready), a latency after its bar
    assert df["ready_us"].max() == pytest.approx(both.total_us)


# ---- the scheduler against a brute-force reference -------------------------------------------------


def reference_schedule(durations, cores, dispatch):
    """Block by block: wait for the previous hand-out and the earliest-free core (ties -> lowest
    core id), then one dispatch interval."""
    free = [(0.0, c) for c in range(cores)]
    heapq.heapify(free)
    starts, placed, previous = [], [], 0.0
    for d in durations:
        t_free, c = heapq.heappop(free)
        s = max(previous, t_free) + dispatch
        starts.append(s)
        placed.append(c)
        previous = s
        heapq.heappush(free, (s + d, c))
    return np.array(starts), np.array(placed, dtype=np.int64)


@st.composite
def schedules(draw):
    cores = draw(st.integers(1, 12))
    dispatch = float(draw(st.integers(0, 40)))
    kind = draw(st.sampled_from(["uniform", "uniform+tail", "mixed"]))
    n = draw(st.integers(0, 60))
    # durations >= 1: with zero-length blocks and zero dispatch, several cores free up at the same
    # instant and "the first free core" is a tie either answer satisfies
    lengths = st.integers(1, 400).map(float)
    head = draw(lengths)
    if kind == "uniform":
        durations = [head] * n
    elif kind == "uniform+tail":
        durations = [head] * n + draw(st.lists(lengths, min_size=1, max_size=5))
    else:
        durations = draw(st.lists(lengths, max_size=60))
    return np.array(durations, dtype=np.float64), cores, dispatch


@settings(max_examples=300, **SETTINGS)
@given(schedules())
def test_schedule_blocks_matches_a_heap_reference(case):
    """schedule_blocks (closed form for the leading run of equal blocks, then a heap) places
    every block exactly where the one-by-one reference does."""
    durations, cores, dispatch = case
    start, core = schedule_blocks(durations, cores, dispatch)
    ref_start, ref_core = reference_schedule(durations, cores, dispatch)
    np.testing.assert_allclose(start, ref_start, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(core, ref_core)


@settings(max_examples=100, **SETTINGS)
@given(st.lists(st.floats(0.0, 1e5, allow_nan=False), max_size=40), st.integers(1, 8),
       st.floats(0.0, 500.0))
def test_schedule_blocks_matches_reference_on_real_valued_times(durations, cores, dispatch):
    """The same with arbitrary (non-integer) durations and dispatch: starts agree to rounding."""
    durations = np.array(durations)
    start, _ = schedule_blocks(durations, cores, dispatch)
    ref_start, _ = reference_schedule(durations, cores, dispatch)
    np.testing.assert_allclose(start, ref_start, rtol=1e-9, atol=1e-6)


def test_schedule_blocks_rejects_zero_cores():
    """Blocks need at least one core to run on."""
    with pytest.raises(ValueError, match="cores"):
        schedule_blocks(np.ones(3), 0, 1.0)


def test_a_million_identical_blocks_are_placed_in_closed_form():
    """Placing 10^6 equal blocks is vectorised: the last block's start is the closed form."""
    n, cores, d = 1_000_000, 48, 180.0
    i = n - 1
    # cores are the bottleneck (D + d >= cores x d): waves of 48, each staggered by dispatch
    D = 50_000.0
    start, core = schedule_blocks(np.full(n, D), cores, d)
    assert start[i] == pytest.approx((i % cores + 1) * d + (i // cores) * (D + d))
    assert core[i] == i % cores
    # the scheduler is the bottleneck (short blocks): one block every dispatch interval
    D = 1_000.0
    start, core = schedule_blocks(np.full(n, D), cores, d)
    assert start[i] == pytest.approx((i + 1) * d)
    assert core[i] == i % cores


# ---- roofline floor --------------------------------------------------------------------------------


def test_roofline_floor_binds_when_hbm_is_tiny():
    """With HBM at 1 GB/s, copy-out of tile i overlaps copy-in of tile i+1 on each core, so the
    scheduled blocks would move bytes faster than the chip can; the HBM roofline takes over:
    block phase = total HBM bytes / HBM bandwidth, and the verdict is 'memory'."""
    tiny = HW.replace(hbm_bandwidth_gbps=1.0)
    x = np.ones(8 * 4096, np.float32)    # 16 KB tiles: full-bandwidth bursts (docs/cost_model.md §2)
    _, tl = scaled_add(x, x, hw=tiny, tile_len=4096, num_buffers=2, block_dim=2)
    (rec,) = tl.launches
    floor_cycles = tl.hbm_bytes / tiny.bytes_per_cycle(tiny.hbm_bandwidth_gbps)
    assert rec.block_end.max() < floor_cycles  # the scheduled time alone would beat the roofline
    assert body_cycles(tl) == pytest.approx(floor_cycles)
    assert tl.total_us == pytest.approx(launch_overhead_us(tiny, "vector", 2) + tl.hbm_bytes / 1e3)  # 1 GB/s = 1e3 B/us
    verdict, evidence = tl.bottleneck()
    assert verdict == "memory" and "HBM" in evidence


@settings(max_examples=25, **SETTINGS)
@given(n=st.integers(1, 20000), tile_len=st.sampled_from([64, 256, 1024, 4096]),
       num_buffers=st.sampled_from([1, 2]), block_dim=st.integers(1, 100),
       hbm=st.sampled_from([0.5, 16.0, 1600.0]))
def test_a_launch_is_never_faster_than_its_hbm_roofline(n, tile_len, num_buffers, block_dim, hbm):
    """For any scaled-add run: latency - overhead >= total HBM bytes / HBM bandwidth."""
    hw = HW.replace(hbm_bandwidth_gbps=hbm)
    _, tl = scaled_add(n, None, hw=hw, tile_len=tile_len, num_buffers=num_buffers,
                       block_dim=block_dim, timing_only=True)
    body_us = tl.total_us - tl.launch_overhead_us
    assert tl.hbm_bytes == 3 * 4 * n
    assert body_us >= tl.hbm_bytes / (hbm * 1e3) * (1 - 1e-12)


def test_vector_roofline_counts_all_repeats():
    """The vector floor is total repeats x cycles_per_repeat / cores; never above the schedule
    for a compute-only kernel on one block (so it does not bind there)."""
    tl = launch(busy_vector_kernel, 1, 10, hw=HW, timing_only=True)
    (rec,) = tl.launches
    repeats = rec.traces[0].vector_repeats
    assert repeats == 10 * 64
    assert rec.floor_cycles == pytest.approx(repeats * HW.vector_cycles_per_repeat / HW.vector_cores)
    assert rec.body_cycles == rec.block_end.max()


# ---- timing-only == full ---------------------------------------------------------------------------


EVENT_COLUMNS = ["launch", "core", "block", "pipe", "name", "start_us", "end_us", "bytes", "elements",
                 "source"]


@settings(max_examples=30, **SETTINGS)
@given(n=st.integers(1, 30000), tile_len=st.sampled_from([8, 64, 512, 2048, 7840]),
       num_buffers=st.sampled_from([1, 2]), block_dim=st.one_of(st.none(), st.integers(1, 60)),
       chip=st.sampled_from(["ascend-910b2", "ascend-310p3"]))
def test_timing_only_run_equals_full_run(n, tile_len, num_buffers, block_dim, chip):
    """Costs never depend on data, so a timing-only run (one block per class, no numerics) gives
    exactly the full run's latency and events: same times, pipes, names, blocks and cores."""
    if tile_len == 8 and n > 4000:
        n = 4000  # keep the full run (every tile simulated in Python) quick
    if chip == "ascend-310p3":
        n = max(8, n // 8 * 8)  # the 310P has no DataCopyPad: scaled_add's tails need whole blocks
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    kw = dict(hw=chip, tile_len=tile_len, num_buffers=num_buffers, block_dim=block_dim)
    _, full = scaled_add(x, y, 0.5, **kw)
    _, fast = scaled_add(n, None, 0.5, timing_only=True, **kw)
    assert fast.total_us == full.total_us
    assert fast.hbm_bytes == full.hbm_bytes
    assert fast.busy_us_by_pipe() == full.busy_us_by_pipe()
    a, b = full.events()[EVENT_COLUMNS], fast.events()[EVENT_COLUMNS]
    assert len(a) == len(b)
    assert a.equals(b)


def _lying_classes(block_dim):
    return np.zeros(block_dim, dtype=int)  # "all blocks are identical" -- they are not


@npu_kernel(block_classes=_lying_classes)
def uneven_kernel(ctx):
    buf = _scratch(ctx, 64)
    for _ in range(ctx.get_block_idx() + 1):  # block b does b + 1 instructions
        ctx.duplicate(buf, 0.0, 64)


def test_block_classes_that_lie_raise_in_a_full_run():
    """A full run simulates every block and refuses a block_classes claim the traces contradict."""
    with pytest.raises(SimulationError, match="block_classes"):
        launch(uneven_kernel, 3, hw=HW)


def test_timing_only_trusts_block_classes():
    """A timing-only run simulates one block per class (that is what makes it fast); the claim
    is checked by the full run above, so kernels must test their block_classes in a full run."""
    tl = launch(uneven_kernel, 3, hw=HW, timing_only=True)
    assert len(tl.launches[0].traces) == 1


def test_block_classes_of_wrong_shape_raise():
    """block_classes must label each of the block_dim blocks exactly once."""
    @npu_kernel(block_classes=lambda bd: np.zeros(bd + 1, dtype=int))
    def k(ctx):
        pass

    with pytest.raises(ValueError, match="block_classes"):
        launch(k, 4, hw=HW)


def test_without_block_classes_every_block_is_simulated():
    """No classifier: each block is its own class (correct, just slower)."""
    @npu_kernel
    def k(ctx):
        buf = _scratch(ctx, 64)
        ctx.duplicate(buf, 1.0, 64)

    (rec,) = launch(k, 5, hw=HW, timing_only=True).launches
    assert len(rec.traces) == 5
    assert np.all(rec.block_end > rec.block_start)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "4", None])
def test_launch_rejects_bad_block_dim(bad):
    """block_dim must be a whole number >= 1; the message says so."""
    with pytest.raises(ValueError, match="block_dim"):
        launch(busy_vector_kernel, bad, 1, hw=HW)


def test_launch_rejects_bad_hw_and_kernel():
    """launch() checks the chip (preset name or HardwareSpec) and that the kernel is callable."""
    with pytest.raises(KeyError, match="known presets"):
        launch(busy_vector_kernel, 1, 1, hw="ascend-999")
    with pytest.raises(TypeError, match="HardwareSpec"):
        launch(busy_vector_kernel, 1, 1, hw=3)
    with pytest.raises(TypeError, match="kernel"):
        launch("not a function", 1, hw=HW)


def test_full_run_writes_outputs_timing_only_does_not():
    """Outputs are written into the GlobalTensors passed in, and only in a full run."""
    @npu_kernel
    def fill(ctx, out):
        buf = _scratch(ctx, 8)
        ctx.duplicate(buf, float(ctx.get_block_idx() + 1), 8)
        ctx.set_flag("V_MTE3", 0)
        ctx.wait_flag("V_MTE3", 0)
        i = ctx.get_block_idx()
        ctx.data_copy(out[8 * i], buf, 8)

    out = GlobalTensor.empty(16, np.float32, "out")
    launch(fill, 2, out, hw=HW)
    np.testing.assert_array_equal(out.data, np.repeat([1.0, 2.0], 8))
    ghost = GlobalTensor.empty(16, np.float32, "out", timing_only=True)
    tl = launch(fill, 2, ghost, hw=HW, timing_only=True)
    assert ghost.data is None and tl.hbm_bytes == 64
