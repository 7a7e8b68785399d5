"""Tests of the Timeline (npu_lab.sim.timeline; docs/cost_model.md).

Every instruction is an event (core, block, pipe, name, start, end, bytes, elements, source line).
The Timeline offers a pandas DataFrame, per-pipe busy time and utilisation, latency, HBM bytes and
achieved bandwidth, a bottleneck verdict with its evidence, and a Chrome trace (one process per
core, one thread per pipe, complete events in microseconds).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from npu_lab import GlobalTensor, Timeline, get_preset, launch, npu_kernel
from npu_lab.lang import TBuf
from npu_lab.kernels.scaled_add import scaled_add
from npu_lab.sim.core import ALL_PIPES, PIPE_CODE

HW = get_preset("ascend-910b2")
VERDICTS = {"launch", "memory", "compute", "sync"}
EVENT_COLUMNS = {"launch", "core", "block", "pipe", "name", "start_us", "end_us", "duration_us",
                 "bytes", "elements", "source", "code"}


def _scratch(ctx, count):
    """A float32 scratch tensor of ``count`` elements in UB (a TBuf)."""
    buf = TBuf()
    ctx.pipe.init_buffer(buf, 4 * count, name="buf")
    return buf.get("float32")


def _all_same(bd, *args):
    return np.zeros(bd, dtype=int)


@npu_kernel(block_classes=_all_same)
def exp_kernel(ctx, reps):
    """Compute only: ``reps`` exps over 16 KB of UB."""
    buf = _scratch(ctx, 4096)
    for _ in range(reps):
        ctx.exp(buf, buf, 4096)


@npu_kernel(block_classes=_all_same)
def serial_kernel(ctx, src, dst):
    """Load, compute, store with a full barrier between each: no two pipes ever overlap."""
    buf = _scratch(ctx, 4096)
    ctx.data_copy(buf, src, 4096)
    ctx.pipe_barrier("PIPE_ALL")
    for _ in range(3):
        ctx.adds(buf, buf, 1.0, 4096)
    ctx.pipe_barrier("PIPE_ALL")
    ctx.data_copy(dst, buf, 4096)


def scaled_add_runs():
    """A few representative runs: tiny, one tile per core, many tiles (single and double)."""
    rng = np.random.default_rng(1)
    runs = {}
    for label, n, tile, nb in [("tiny", 8, 8, 1), ("one-tile", 48 * 2048, 2048, 2),
                               ("many-single", 200_000, 512, 1), ("many-double", 200_000, 512, 2)]:
        x = rng.standard_normal(n).astype(np.float32)
        runs[label] = scaled_add(x, x, tile_len=tile, num_buffers=nb)[1]
    return runs


@pytest.fixture(scope="module")
def runs():
    return scaled_add_runs()


@pytest.fixture(scope="module")
def timeline(runs):
    return runs["many-double"]


# ---- the events DataFrame ----------------------------------------------------------------------


def test_events_columns(timeline):
    """events() has one row per instruction (plus one per launch overhead) with these columns."""
    df = timeline.events()
    assert EVENT_COLUMNS <= set(df.columns)
    assert set(df["pipe"]) <= set(ALL_PIPES) | {"launch"}
    assert (df["duration_us"] >= 0).all()
    assert np.allclose(df["duration_us"], df["end_us"] - df["start_us"])
    assert df["end_us"].max() <= timeline.total_us + 1e-9


def test_events_are_sorted_by_start(timeline):
    """events() lists instructions in time order (by launch, then start)."""
    df = timeline.events()
    assert df["start_us"].is_monotonic_increasing


def test_events_name_the_kernel_source_line(timeline):
    """'source' is file:line of the kernel code that issued the instruction, 'code' that line."""
    df = timeline.events()
    loads = df[df["pipe"] == "MTE2"]
    assert loads["source"].str.startswith("scaled_add.py:").all()
    assert loads["code"].str.contains("data_copy").all()


def test_events_count_every_instruction_of_every_block(timeline):
    """Each block's trace is stored once per class but events() lists every block's copy."""
    (rec,) = timeline.launches
    expected = sum(len(t.pipe) * c for t, c in zip(rec.traces, rec.class_counts)) + 1
    assert len(timeline.events()) == expected


def test_events_max_blocks_keeps_the_first_blocks(timeline):
    """max_blocks=2 keeps blocks 0 and 1 (plus the launch-overhead row, block -1)."""
    df = timeline.events(max_blocks=2)
    assert set(df["block"]) == {-1, 0, 1}


def test_hbm_bytes_and_achieved_bandwidth(timeline):
    """scaled_add moves 12 bytes per element (read x, y; write z); achieved GB/s = bytes / ns."""
    assert timeline.hbm_bytes == 12 * 200_000
    assert timeline.achieved_bandwidth_gbps == pytest.approx(timeline.hbm_bytes / (timeline.total_us * 1e3))
    assert timeline.achieved_bandwidth_gbps <= HW.hbm_bandwidth_gbps


# ---- busy time and utilisation -------------------------------------------------------------------


def test_busy_time_is_the_sum_of_event_durations(timeline):
    """busy_us_by_pipe = per pipe, the sum over all blocks of instruction durations."""
    df = timeline.events()
    busy = timeline.busy_us_by_pipe()
    for pipe in ("MTE2", "V", "MTE3"):
        assert busy[pipe] == pytest.approx(df.loc[df["pipe"] == pipe, "duration_us"].sum())


def test_utilisations_are_fractions(runs):
    """Per-pipe utilisation and core utilisation lie in [0, 1] for every run."""
    for label, tl in runs.items():
        for pipe, u in tl.utilisation_by_pipe().items():
            assert 0.0 <= u <= 1.0, (label, pipe, u)
        assert 0.0 <= tl.core_utilisation <= 1.0, label


def test_pipe_table_lists_busy_pipes(timeline):
    """pipe_table(): busy time and utilisation of every pipe that did any work."""
    table = timeline.pipe_table()
    assert {"busy_us", "utilisation"} <= set(table.columns)
    assert {"MTE2", "V", "MTE3"} <= set(table.index)
    assert ((table["utilisation"] >= 0) & (table["utilisation"] <= 1)).all()


def test_summary_has_the_headline_figures(timeline):
    """summary() carries latency, launches, blocks, HBM bytes and bandwidth, utilisation and the verdict."""
    s = timeline.summary()
    for key in ("latency_us", "launches", "blocks", "hbm_bytes", "achieved_gbps", "core_utilisation",
                "bottleneck", "evidence"):
        assert key in s
    assert s["latency_us"] == timeline.total_us and s["launches"] == 1
    assert "us" in repr(timeline) and "bound" in repr(timeline)


# ---- bottleneck verdict ----------------------------------------------------------------------------


def test_bottleneck_is_one_of_four_with_evidence(runs):
    """Every verdict is launch / memory / compute / sync and comes with non-empty evidence."""
    for label, tl in runs.items():
        verdict, evidence = tl.bottleneck()
        assert verdict in VERDICTS, label
        assert isinstance(evidence, str) and evidence.strip(), label


def test_tiny_kernels_are_launch_bound(runs):
    """8 elements (or 2.4 MB, 1.5 us at HBM speed): the 20 us launch overhead dominates."""
    for label in ("tiny", "many-double"):
        verdict, evidence = runs[label].bottleneck()
        assert verdict == "launch", label
        assert "launch overhead" in evidence


def test_streaming_a_large_vector_is_memory_bound():
    """Scaled add over 2**24 elements (200 MB of HBM traffic, about 125 us at 1.6 TB/s) keeps the
    DMA pipes / HBM busy: 'memory'."""
    _, tl = scaled_add(2**24, None, tile_len=4096, timing_only=True)
    verdict, evidence = tl.bottleneck()
    assert verdict == "memory", evidence
    assert "DMA" in evidence or "HBM" in evidence


def test_exp_on_every_core_is_compute_bound():
    """Every core running exps back to back, launch overhead negligible: 'compute', pipe V."""
    tl = launch(exp_kernel, HW.vector_cores, 2000, hw=HW, timing_only=True)
    verdict, evidence = tl.bottleneck()
    assert verdict == "compute"
    assert "V" in evidence


def test_serialised_pipes_are_sync_bound():
    """Load, barrier, compute, barrier, store on every core and no launch or dispatch overhead: no pipe is
    busy most of the time, the pipes wait on each other: 'sync'."""
    hw = HW.replace(launch_overhead_us=0.0, launch_per_core_us=0.0, block_dispatch_us=0.0)
    src = GlobalTensor.empty(4096, np.float32, "src", timing_only=True)
    dst = GlobalTensor.empty(4096, np.float32, "dst", timing_only=True)
    tl = launch(serial_kernel, hw.vector_cores, src, dst, hw=hw, timing_only=True)
    verdict, evidence = tl.bottleneck()
    assert verdict == "sync", (verdict, evidence)
    assert evidence


def test_one_busy_block_is_judged_on_its_own_core():
    """A single block doing nothing but exps (launch overhead set to 0) is compute-bound."""
    tl = launch(exp_kernel, 1, 200, hw=HW.replace(launch_overhead_us=0.0), timing_only=True)
    verdict, _ = tl.bottleneck()
    assert verdict == "compute"


# ---- Chrome trace ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chrome(runs):
    tl = runs["many-single"]
    return tl, json.loads(json.dumps(tl.to_chrome_trace()))


def test_chrome_trace_is_json_with_trace_events(chrome):
    """json.dumps -> json.loads round-trips; the document has a 'traceEvents' list."""
    _, doc = chrome
    assert isinstance(doc["traceEvents"], list) and doc["traceEvents"]


def test_chrome_trace_complete_events(chrome):
    """Every instruction is a complete event: ph 'X', numeric ts and dur >= 0 in microseconds,
    and there are exactly as many as rows in events()."""
    tl, doc = chrome
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(tl.events())
    for e in complete:
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float))
        assert e["ts"] >= 0 and e["dur"] >= 0
        assert e["ts"] + e["dur"] <= tl.total_us + 1e-6  # microseconds, not cycles
    assert {e["ph"] for e in doc["traceEvents"]} <= {"X", "M"}


def test_chrome_trace_one_process_per_core_one_thread_per_pipe(chrome):
    """process_name metadata for each core that ran a block; thread_name for each pipe used."""
    tl, doc = chrome
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    df = tl.events()
    for core in sorted(set(df["core"]) - {-1}):
        assert f"core {core}" in processes[core + 1]
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["pid"] != 0:
            assert e["pid"] in processes
            assert threads[(e["pid"], e["tid"])] == e["cat"]
    used = df[df["core"] >= 0].groupby("core")["pipe"].unique()
    for core, pipes in used.items():
        for pipe in pipes:
            assert threads[(core + 1, PIPE_CODE[pipe] + 1)] == pipe


def test_chrome_trace_file(tmp_path, runs):
    """to_chrome_trace(path) writes the same JSON to a file Perfetto can open."""
    path = tmp_path / "trace.json"
    doc = runs["tiny"].to_chrome_trace(path)
    assert json.loads(path.read_text()) == json.loads(json.dumps(doc))


def test_chrome_trace_of_several_launches():
    """Launch overheads appear on the host process (pid 0), one per launch."""
    x = np.ones(1024, np.float32)
    tl = Timeline.concat([scaled_add(x, x, tile_len=256)[1], scaled_add(x, x, tile_len=512)[1]])
    doc = tl.to_chrome_trace()
    host = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 0]
    assert len(host) == 2
    assert host[1]["ts"] == pytest.approx(tl.launches[0].hw.cycles_to_us(tl.launches[0].total_cycles))


# ---- empty timeline ----------------------------------------------------------------------------------


def test_empty_timeline_headline_figures():
    """An empty Timeline has zero latency and says so instead of dividing by zero."""
    tl = Timeline()
    assert tl.total_us == 0 and tl.hbm_bytes == 0
    assert tl.bottleneck() == ("launch", "nothing ran")
    with pytest.raises(ValueError, match="empty"):
        tl.hw


def test_empty_timeline_events_is_an_empty_frame():
    """events() of an empty Timeline is an empty frame with the usual columns."""
    df = Timeline.concat([]).events()
    assert len(df) == 0 and EVENT_COLUMNS <= set(df.columns)


def test_many_tiny_blocks_are_dispatch_bound():
    """A thousand one-point blocks: the task scheduler, handing out blocks one at a time, is the
    bottleneck — the verdict says 'launch' and names the dispatch."""
    from npu_lab.kernels.moe_gating import simulate_moe_gating

    tl = simulate_moe_gating(1, 1024, 64, 2, version="v1", tile_s=1).timeline
    verdict, evidence = tl.bottleneck()
    assert verdict == "launch" and "one at a time" in evidence
    assert 0 < tl.launches[0].dispatch_cycles < tl.launches[0].body_cycles
