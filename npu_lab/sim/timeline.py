"""The timeline of one or more launches (docs/cost_model.md).

A launch stores each *distinct* block's trace once plus where every block was placed (core,
start); events are materialised only when asked for (``events()``), so summaries of a million
blocks stay cheap. Times are cycles internally; everything public is in microseconds.
"""

from __future__ import annotations

import json
import linecache
import os
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .._files import check_path, write_atomically
from ..hardware import HardwareSpec
from .core import ALL_PIPES, PIPE_CODE, BlockTrace
from .schedule import schedule_blocks
from .thresholds import (BUSY_PIPE, DISPATCH_SHARE, HBM_SHARE, LAUNCH_SHARE, SMALL_COPIES_HBM_SHARE,
                         TURNS_EACH, TURNS_TOGETHER)

COMPUTE_PIPES = ("S", "V", "M")
EVENT_DTYPES = {"launch": "int64", "core": "int64", "block": "int64", "pipe": "object", "name": "object",
                "start_us": "float64", "end_us": "float64", "ready_us": "float64", "bytes": "int64", "elements": "int64",
                "source": "object", "code": "object"}
MEMORY_PIPES = ("MTE2", "MTE3", "MTE1", "FIX")
_MTE2 = PIPE_CODE["MTE2"]


def gm_read_bytes(trace: BlockTrace) -> int:
    """Bytes a block read from global memory: the bytes of its MTE2 (GM→UB) events, whether HBM
    or L2 served them. ``gm_read_bytes(t) - t.hbm_read_bytes`` is what L2 served (npu_lab.sim.l2).
    Summed over the stored segments, so a fast-forwarded loop costs no more than its period."""
    total = 0
    for cols, copies, _ in trace.segments:
        total += copies * int(cols[4][cols[0] == _MTE2].sum())
    return total


@dataclass
class LaunchRecord:
    """One kernel launch: overhead, then blocks placed on cores (cycles from the launch start)."""

    name: str
    hw: HardwareSpec
    core_type: str
    block_dim: int
    traces: list[BlockTrace]
    block_class: np.ndarray      # index into traces, per block
    block_start: np.ndarray      # cycles from launch start (after the overhead)
    block_core: np.ndarray
    overhead_cycles: float
    floor_cycles: float = 0.0    # chip-level roofline floor of the blocks' phase
    floor_reason: str = ""
    kernel_type: str = "vector"  # sim.launch_cost.KERNEL_TYPES: "vector", "cube", "mix_aic_1_2", ...
    cores_launched: dict = field(default_factory=dict)   # {"vector": n, "cube": m} cores started
    l2_hit_buffers: tuple = ()   # names of the GM buffers this launch read from L2

    def core_slots(self) -> int:
        """Cores a timeline of this launch has rows for (a mixed launch: AICs and AIVs, sim/mixed.py)."""
        return self.hw.cores(self.core_type)

    def core_label(self, core: int) -> str:
        return f"core {core} ({'AIV' if self.core_type == 'vector' else 'AIC'})"

    @cached_property
    def undispatched_cycles(self) -> float:
        """The blocks' phase if the task scheduler handed out blocks for free."""
        durations = np.array([t.duration_cycles for t in self.traces])[self.block_class]
        start, _ = schedule_blocks(durations, self.hw.cores(self.core_type), 0.0)
        return float((start + durations).max()) if self.block_dim else 0.0

    @property
    def dispatch_cycles(self) -> float:
        """How much longer the blocks' phase is because blocks are dispatched one at a time."""
        return max(0.0, self.body_cycles - max(self.undispatched_cycles, self.floor_cycles))

    @cached_property
    def block_end(self) -> np.ndarray:
        durations = np.array([t.duration_cycles for t in self.traces])
        return self.block_start + durations[self.block_class]

    @cached_property
    def class_counts(self) -> np.ndarray:
        return np.bincount(self.block_class, minlength=len(self.traces))

    @property
    def body_cycles(self) -> float:
        scheduled = float(self.block_end.max()) if self.block_dim else 0.0
        return max(scheduled, self.floor_cycles)

    @property
    def total_cycles(self) -> float:
        return self.overhead_cycles + self.body_cycles

    def _sum(self, attr: str) -> float:
        values = np.array([getattr(t, attr) for t in self.traces], dtype=np.float64)
        return float(values @ self.class_counts)

    @property
    def hbm_bytes(self) -> int:
        """Bytes that crossed HBM: reads L2 did not serve, and every write (sim/l2.py)."""
        return int(self._sum("hbm_read_bytes") + self._sum("hbm_write_bytes"))

    @cached_property
    def gm_read_bytes(self) -> int:
        """Bytes read from global memory, from HBM or from L2."""
        return int(np.array([gm_read_bytes(t) for t in self.traces], dtype=np.float64) @ self.class_counts)

    @property
    def l2_hit_bytes(self) -> int:
        """Bytes read from L2: data an earlier launch left there (``l2_hit_buffers`` names it)."""
        return self.gm_read_bytes - int(self._sum("hbm_read_bytes"))

    def busy_cycles_by_pipe(self) -> dict[str, float]:
        total = dict.fromkeys(ALL_PIPES, 0.0)
        for trace, count in zip(self.traces, self.class_counts):
            for pipe, busy in trace.busy_cycles_by_pipe().items():
                total[pipe] += busy * count
        return total

    def busy_cycles_by_core(self) -> np.ndarray:
        """[cores, len(ALL_PIPES)] busy cycles of each pipe of each core."""
        per_class = np.array([[t.busy_cycles_by_pipe()[p] for p in ALL_PIPES] for t in self.traces])
        out = np.zeros((self.hw.cores(self.core_type), len(ALL_PIPES)))
        if self.block_dim:
            np.add.at(out, self.block_core, per_class[self.block_class])
        return out


def _check_max_blocks(max_blocks):
    """None (every block) or a whole number >= 0 of blocks to keep per launch."""
    if max_blocks is None:
        return None
    if isinstance(max_blocks, bool) or not isinstance(max_blocks, (int, np.integer)) or max_blocks < 0:
        raise ValueError(f"max_blocks must be None (every block) or a whole number >= 0 of blocks to keep "
                         f"per launch, got {max_blocks!r}")
    return int(max_blocks)


@dataclass
class Timeline:
    """Launches run back to back. Build with :func:`npu_lab.launch` or :meth:`concat`."""

    launches: list[LaunchRecord] = field(default_factory=list)

    @classmethod
    def concat(cls, timelines) -> "Timeline":
        if isinstance(timelines, (str, bytes, Timeline)) or not hasattr(timelines, "__iter__"):
            raise TypeError(f"Timeline.concat takes a list of Timelines, got {type(timelines).__name__}")
        timelines = list(timelines)
        bad = [type(t).__name__ for t in timelines if not isinstance(t, Timeline)]
        if bad:
            raise TypeError(f"Timeline.concat takes a list of Timelines; got {', '.join(sorted(set(bad)))} in it")
        out = cls()
        for t in timelines:
            out.launches.extend(t.launches)
        return out

    @property
    def hw(self) -> HardwareSpec:
        if not self.launches:
            raise ValueError("empty timeline: launch a kernel first")
        return self.launches[0].hw

    # ---- headline figures -------------------------------------------------------------
    @property
    def total_cycles(self) -> float:
        return sum(l.total_cycles for l in self.launches)

    @property
    def total_us(self) -> float:
        return sum(l.hw.cycles_to_us(l.total_cycles) for l in self.launches)

    @property
    def hbm_bytes(self) -> int:
        return sum(l.hbm_bytes for l in self.launches)

    @property
    def l2_hit_bytes(self) -> int:
        """Bytes read from L2 instead of HBM (data an earlier launch of the sequence wrote);
        not in :attr:`hbm_bytes`."""
        return sum(l.l2_hit_bytes for l in self.launches)

    @property
    def achieved_bandwidth_gbps(self) -> float:
        return self.hbm_bytes / (self.total_us * 1e3) if self.total_us else 0.0

    @property
    def launch_overhead_us(self) -> float:
        return sum(l.hw.cycles_to_us(l.overhead_cycles) for l in self.launches)

    def busy_us_by_pipe(self) -> dict[str, float]:
        out = dict.fromkeys(ALL_PIPES, 0.0)
        for l in self.launches:
            for pipe, cycles in l.busy_cycles_by_pipe().items():
                out[pipe] += l.hw.cycles_to_us(cycles)
        return out

    def busy_us_by_core(self) -> np.ndarray:
        """[cores, len(ALL_PIPES)] busy µs of each pipe of each core, summed over launches."""
        cores = self.core_count() if self.launches else 0
        out = np.zeros((cores, len(ALL_PIPES)))
        for l in self.launches:
            per = l.hw.cycles_to_us(l.busy_cycles_by_core())
            out[: len(per)] += per
        return out

    def core_count(self) -> int:
        """Cores of the chip the launches ran on (0 for an empty timeline)."""
        return max((l.core_slots() for l in self.launches), default=0)

    def utilisation_by_pipe(self) -> dict[str, float]:
        """Busy time of each pipe summed over cores / (cores x total latency)."""
        denom = self.core_count() * self.total_us
        return {p: (b / denom if denom else 0.0) for p, b in self.busy_us_by_pipe().items()}

    @property
    def core_utilisation(self) -> float:
        """Fraction of core-time (cores x latency) during which a core had a block to run."""
        occupied = sum(l.hw.cycles_to_us(float((l.block_end - l.block_start).sum())) for l in self.launches)
        denom = self.core_count() * self.total_us
        return occupied / denom if denom else 0.0

    def summary(self) -> dict:
        verdict, evidence = self.bottleneck()
        util = self.utilisation_by_pipe()
        return {
            "latency_us": self.total_us,
            "launches": len(self.launches),
            "blocks": sum(l.block_dim for l in self.launches),
            "hbm_bytes": self.hbm_bytes,
            "l2_hit_bytes": self.l2_hit_bytes,
            "achieved_gbps": self.achieved_bandwidth_gbps,
            "core_utilisation": self.core_utilisation,
            **{f"util_{p}": util[p] for p in ("S", "MTE2", "V", "MTE3") if p in util},
            "bottleneck": verdict,
            "evidence": evidence,
        }

    def bottleneck(self) -> tuple[str, str]:
        """('launch' | 'memory' | 'compute' | 'sync', evidence). Launch-bound when the launch
        overhead is at least half the latency; otherwise judged on the busiest core's pipes over
        the time after the overhead: memory (a DMA pipe ≥ 40% busy, or HBM ≥ 60% of peak),
        compute (S, V or M ≥ 40% busy), else sync (pipes mostly wait on each other). Pipes that
        take turns (together busy ≥ 80% but none ≥ 60%) are sync-bound: overlap would help.
        Serial block dispatch taking half the time after the overhead is launch-bound too.
        The thresholds are named in :mod:`npu_lab.sim.thresholds` (each says why);
        :func:`npu_lab.sim.monitor.monitor` reports this verdict with its per-pipe figures."""
        total = self.total_us
        if total <= 0:
            return "launch", "nothing ran"
        launch_share = self.launch_overhead_us / total
        # judge the busiest core, over the time after the launch overhead (the overhead has its
        # own verdict above)
        body = max(total - self.launch_overhead_us, 1e-12)
        by_core = self.busy_us_by_core()
        mem_idx = [PIPE_CODE[p] for p in MEMORY_PIPES]
        comp_idx = [PIPE_CODE[p] for p in COMPUTE_PIPES]
        mem = float(by_core[:, mem_idx].max()) / body
        comp = float(by_core[:, comp_idx].max()) / body
        busy = dict(zip(ALL_PIPES, by_core.max(axis=0)))
        hbm_share = self.achieved_bandwidth_gbps / self.hw.hbm_bandwidth_gbps
        floors = [l for l in self.launches if l.floor_cycles >= l.body_cycles and l.floor_cycles > 0]
        if launch_share >= LAUNCH_SHARE:
            return "launch", (f"launch overhead is {launch_share:.0%} of {total:.1f} us "
                              f"({len(self.launches)} launch(es))")
        if floors:
            reason = floors[0].floor_reason    # HBM / L2 roofline: memory; vector roofline: compute
            return "compute" if reason.startswith("vector") else "memory", reason
        dispatch_us = sum(l.hw.cycles_to_us(l.dispatch_cycles) for l in self.launches)
        if dispatch_us >= DISPATCH_SHARE * body:
            blocks = sum(l.block_dim for l in self.launches)
            return "launch", (f"the task scheduler hands out {blocks} blocks one at a time, which "
                              f"adds {dispatch_us:.1f} us, {dispatch_us / body:.0%} of the time after "
                              "the launch overhead (fewer, bigger blocks would help)")
        turns = float(by_core.sum(axis=1).max()) / body   # all pipes of the busiest core, added
        if max(mem, comp) < TURNS_EACH and hbm_share < HBM_SHARE and turns >= TURNS_TOGETHER:
            return "sync", (f"the pipes take turns: on the busiest core DMA is busy {mem:.0%} and "
                            f"compute {comp:.0%} of the time after the launch, hardly ever at once; "
                            "overlapping them (double buffering) would help")
        if mem >= comp and (mem >= BUSY_PIPE or hbm_share >= HBM_SHARE):
            latency_bound = "; many small copies: DMA latency, not bandwidth" if hbm_share < SMALL_COPIES_HBM_SHARE else ""
            return "memory", (f"the busiest core's DMA pipe is busy {mem:.0%} of the time after the "
                              f"launch; HBM at {hbm_share:.0%} of {self.hw.hbm_bandwidth_gbps:.0f} GB/s"
                              f"{latency_bound}")
        if comp > mem and comp >= BUSY_PIPE:
            pipe = max(COMPUTE_PIPES, key=lambda p: busy[p])
            return "compute", f"pipe {pipe} of the busiest core is busy {comp:.0%} of the time after the launch"
        return "sync", (f"no pipe of any core is busy most of the time (DMA {mem:.0%}, compute "
                        f"{comp:.0%}, launch {launch_share:.0%}): pipes wait on each other, on "
                        "flags or on block dispatch")

    # ---- events -----------------------------------------------------------------------
    def events(self, max_blocks: int | None = None):
        """All instructions as a pandas DataFrame with columns launch, core, block, pipe, name,
        start_us, end_us (the pipe's occupancy), ready_us (when the result is complete: end + the
        DMA request latency or the vector pipeline depth), duration_us, bytes, elements, source
        (file:line) and code (that line).
        ``max_blocks`` keeps only the first blocks of each launch (for plotting huge runs)."""
        import pandas as pd

        max_blocks = _check_max_blocks(max_blocks)
        frames = [pd.DataFrame({c: pd.Series(dtype=t) for c, t in EVENT_DTYPES.items()})]
        offset_cycles = 0.0
        for li, l in enumerate(self.launches):
            to_us = l.hw.cycles_to_us
            frames.append(pd.DataFrame({
                "launch": [li], "core": [-1], "block": [-1], "pipe": ["launch"],
                "name": [f"{l.name}: launch overhead"], "start_us": [to_us(offset_cycles)],
                "end_us": [to_us(offset_cycles + l.overhead_cycles)],
                "ready_us": [to_us(offset_cycles + l.overhead_cycles)], "bytes": [0], "elements": [0],
                "source": [""], "code": [""]}))
            base = offset_cycles + l.overhead_cycles
            blocks = np.arange(l.block_dim)
            if max_blocks is not None:
                blocks = blocks[:max_blocks]
            for cls, trace in enumerate(l.traces):
                mine = blocks[l.block_class[blocks] == cls]
                if len(mine) == 0 or len(trace.pipe) == 0:
                    continue
                n = len(trace.pipe)
                starts = l.block_start[mine]
                src = [f"{os.path.basename(f)}:{line}" for f, line in trace.source]
                code = [linecache.getline(f, line).strip() for f, line in trace.source]
                frames.append(pd.DataFrame({
                    "launch": li,
                    "core": np.repeat(l.block_core[mine], n),
                    "block": np.repeat(mine, n),
                    "pipe": np.tile(np.array(ALL_PIPES, dtype=object)[trace.pipe.astype(int)], len(mine)),
                    "name": np.tile(trace.name, len(mine)),
                    "start_us": to_us(np.tile(trace.start_cycles, len(mine)) + np.repeat(starts, n) + base),
                    "end_us": to_us(np.tile(trace.end_cycles, len(mine)) + np.repeat(starts, n) + base),
                    "ready_us": to_us(np.tile(trace.ready_cycles, len(mine)) + np.repeat(starts, n) + base),
                    "bytes": np.tile(trace.nbytes, len(mine)),
                    "elements": np.tile(trace.elements, len(mine)),
                    "source": np.tile(np.array(src, dtype=object), len(mine)),
                    "code": np.tile(np.array(code, dtype=object), len(mine)),
                }))
            offset_cycles += l.total_cycles
        df = pd.concat(frames, ignore_index=True)
        df["duration_us"] = df["end_us"] - df["start_us"]
        return df.sort_values(["launch", "start_us", "core"], kind="stable").reset_index(drop=True)

    def pipe_table(self):
        """Per-pipe busy time (µs, summed over cores) and utilisation, as a DataFrame."""
        import pandas as pd

        busy = self.busy_us_by_pipe()
        util = self.utilisation_by_pipe()
        rows = [{"pipe": p, "busy_us": busy[p], "utilisation": util[p]} for p in ALL_PIPES if busy[p] > 0]
        return pd.DataFrame(rows).set_index("pipe") if rows else pd.DataFrame(columns=["busy_us", "utilisation"])

    def to_chrome_trace(self, path=None, max_blocks: int | None = None) -> dict:
        """Chrome trace-event JSON (Perfetto, chrome://tracing): one process per core, one
        thread per pipe, complete events (ph 'X') with ts/dur in microseconds. ``path`` (a file
        name) is written whole or not at all: a failed write leaves no truncated file."""
        if path is not None:
            path = check_path(path, "to_chrome_trace's path")
        df = self.events(max_blocks=max_blocks)
        trace_events = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0,
                         "args": {"name": "host / task scheduler"}}]
        cores = sorted(int(c) for c in df["core"].unique() if c >= 0)
        first = self.launches[0] if self.launches else None
        for c in cores:
            label = first.core_label(c) if first is not None else f"core {c} (AIV)"
            trace_events.append({"ph": "M", "name": "process_name", "pid": c + 1, "tid": 0,
                                 "args": {"name": label}})
            for p in ALL_PIPES:
                trace_events.append({"ph": "M", "name": "thread_name", "pid": c + 1,
                                     "tid": PIPE_CODE[p] + 1, "args": {"name": p}})
        for row in df.itertuples(index=False):
            pid = int(row.core) + 1 if row.core >= 0 else 0
            tid = PIPE_CODE[row.pipe] + 1 if row.pipe in PIPE_CODE else 0
            trace_events.append({
                "ph": "X", "name": row.name, "cat": row.pipe, "pid": pid, "tid": tid,
                "ts": float(row.start_us), "dur": float(row.duration_us),
                "args": {"block": int(row.block), "bytes": int(row.bytes), "ready_us": float(row.ready_us),
                         "elements": int(row.elements), "source": row.source}})
        doc = {"traceEvents": trace_events, "displayTimeUnit": "ns",
               "metadata": {"chip": self.hw.name, "latency_us": self.total_us}}
        if path is not None:
            def dump(tmp):
                with open(tmp, "w") as fh:
                    json.dump(doc, fh)
            write_atomically(path, dump, "to_chrome_trace's path")
        return doc

    def __repr__(self) -> str:
        verdict, _ = self.bottleneck() if self.launches else ("-", "")
        l2 = f", {self.l2_hit_bytes} L2-hit bytes" if self.launches and self.l2_hit_bytes else ""
        return (f"Timeline({len(self.launches)} launch(es), {self.total_us:.2f} us, "
                f"{self.hbm_bytes} HBM bytes{l2}, {verdict}-bound)")
