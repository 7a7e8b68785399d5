"""One core running one block: in-order pipes fed by a scalar unit (docs/cost_model.md).

Times are in cycles, relative to the block's start. The scalar unit (pipe ``S``) runs the kernel's
control code and issues every other instruction, in program order, into a per-pipe queue. Each
pipe executes its queue in order; pipes run in parallel. An instruction on pipe P starts at

    max(P's free time, the time S issued it, the flags P waits on, the data-ready times given,
        for a DMA pipe: the completion of the copy N requests back)

and *occupies* P for ``cost`` cycles (its ``end``, which is when P may start its next one). Its
result is *complete* ``latency`` cycles later: the DMA request latency on MTE2/MTE3 (the engine
keeps up to N requests in flight, so latencies overlap), the pipeline depth on V, nothing on S.
Readers, flags, queues and the race detector all use the completion time; busy time counts
occupancy only.

``set_flag(src, dst)`` records when src's last instruction completes (plus the flag's own cost);
``wait_flag(src, dst)`` makes dst's next instruction wait for it (and stalls S when dst is S — a
V→S wait drains the vector pipe and is counted in ``scalar_drains``). ``pipe_barrier(P)`` makes
P's next instruction wait until everything issued on P completed, plus the barrier's cost.

Nothing here looks at data values: a timeline depends only on the instructions issued and their
sizes, which is why a timing-only run reproduces a full run exactly.

Happens-before (the race detector's clocks, independent of the timeline): every pipe has a vector
clock ``clock[P]`` (one count per pipe of this core, the idea of Pallas's interpret mode). An
instruction on P ticks P's own count; ``set_flag(src, dst)`` snapshots src's clock (everything issued
on src so far, and all src had learnt) and the matching ``wait_flag`` joins it into dst's clock;
``PipeBarrier<PIPE_ALL>`` joins every clock into every clock; a one-pipe barrier adds nothing (a pipe
is in order anyway). The scalar unit issues every instruction after the waits it passed, so a pipe
learns, at its next instruction, what S had learnt from its waits (``WaitFlag<MTE2_S>`` then a V
instruction orders the V instruction after the load) — but not S's *own* UB accesses: a SetValue
is ordered before a later DataCopy / vector instruction only by an ``S_MTE3`` / ``S_V`` flag, a
GetValue before a later overwrite by ``S_MTE2`` / ``S_V`` (asc-devkit
docs/zh/guide/技术附录/概念原理和术语/内存访问原理/Scalar读写数据.md: "SetValue ... MTE3流水需要等待
Scalar操作结束", shown with SetFlag/WaitFlag; the simulator models a project without auto-sync).
Access A (pipe p, count c) happens before an access on pipe q exactly when ``clock[q][p] >= c``.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections import deque
from dataclasses import dataclass

import numpy as np

VECTOR_PIPES = ("S", "MTE2", "V", "MTE3")
CUBE_PIPES = ("S", "MTE2", "MTE1", "M", "FIX")
ALL_PIPES = ("S", "MTE2", "V", "MTE3", "MTE1", "M", "FIX")
PIPE_CODE = {name: code for code, name in enumerate(ALL_PIPES)}
PIPE_MEANING = {
    "S": "scalar unit: control flow, address arithmetic, scalar UB reads",
    "MTE2": "DMA in: global memory (HBM) -> UB / L1",
    "V": "vector unit: 256-byte repeats",
    "MTE3": "DMA out: UB -> global memory",
    "MTE1": "L1 -> L0A / L0B",
    "M": "cube unit: 16x16x16 fractal MMAD",
    "FIX": "L0C -> global memory / L1",
}

_LIBRARY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INTERNAL_DIRS = (os.path.join(_LIBRARY_DIR, "sim"), os.path.join(_LIBRARY_DIR, "lang"))
_INTERNAL_CODE: dict = {}   # code object -> is it inside npu_lab/sim or npu_lab/lang


class SimulationError(RuntimeError):
    """The kernel did something the device could not run (a hang, a race, a bad sync)."""


class UnmatchedFlagError(SimulationError):
    """A block ended with a ``SetFlag`` no ``WaitFlag`` consumed: the device leaves that flag set,
    and the next wait on the same event and id (in this kernel or the next one on the core) passes
    without waiting for anything. SetFlag-WaitFlag(ISASI).md: SetFlag和WaitFlag必须成对使用."""


def issuing_source(frame=None) -> tuple[str, int]:
    """(file, line) of the kernel code that issued the current instruction: the first frame
    outside ``npu_lab/sim`` and ``npu_lab/lang``, searched from ``frame`` (default: the caller
    of the caller; the lang layer passes a frame closer to the kernel's)."""
    if frame is None:
        frame = sys._getframe(2)
    internal = _INTERNAL_CODE
    while frame is not None:
        code = frame.f_code
        inside = internal.get(code)
        if inside is None:
            inside = internal[code] = code.co_filename.startswith(_INTERNAL_DIRS)
        if not inside:
            break
        frame = frame.f_back
    if frame is None:
        return ("?", 0)
    return (frame.f_code.co_filename, frame.f_lineno)


_EMPTY_COLUMNS = (np.zeros(0, np.int8), np.zeros(0, object), np.zeros(0), np.zeros(0),
                  np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, object), np.zeros(0))


@dataclass
class BlockTrace:
    """What one block did, times relative to the block's start (cycles).

    Events are column arrays (pipe code, name, start, end, bytes, elements, source, ready), stored as
    segments ``(columns, copies, period)``: plain events have period 0 (and copies 1); a
    fast-forwarded loop keeps one period of events and ``copies`` more shifted by 1, 2, ...
    periods, so a block of a million tiles stays small. ``period`` is one number, or an array
    of one per event when the scalar unit runs ahead of the other pipes at a period of its own
    (a loop of GetValue + DataCopy with no wait on S: :meth:`CoreState.replicate_events`). The columns are
    materialised (``.pipe``, ``.start_cycles``, ...) only when somebody asks. ``start``/``end``
    is the pipe's occupancy; ``ready`` is when the result is complete (end + the pipe's latency).

    ``scalar_drains`` counts the scalar unit's waits on the vector pipe (a ``V_S`` wait_flag, e.g.
    before ``get_value`` of a vector result, and ``PipeBarrier<PIPE_ALL>``); ``scalar_drain_cycles``
    is how long S stood still in them."""

    segments: list
    hbm_read_bytes: int
    hbm_write_bytes: int
    vector_repeats: int
    duration_cycles: float
    scalar_drains: int = 0
    scalar_drain_cycles: float = 0.0

    @functools.cached_property
    def _columns(self) -> tuple:
        parts = []
        for seg in self.segments:
            parts.append(_expand_segment(*seg))
        if not parts:
            return _EMPTY_COLUMNS
        return tuple(np.concatenate(c) if len(parts) > 1 else c[0] for c in zip(*parts))

    pipe = property(lambda self: self._columns[0])
    name = property(lambda self: self._columns[1])
    start_cycles = property(lambda self: self._columns[2])
    end_cycles = property(lambda self: self._columns[3])
    nbytes = property(lambda self: self._columns[4])
    elements = property(lambda self: self._columns[5])
    source = property(lambda self: self._columns[6])  # object array of (file, line)
    ready_cycles = property(lambda self: self._columns[7])  # result complete (end + latency)

    def __len__(self) -> int:
        return sum(len(cols[0]) * copies for cols, copies, _ in self.segments)

    def same_work_as(self, other: "BlockTrace") -> bool:
        return (self.duration_cycles == other.duration_cycles
                and len(self) == len(other)
                and np.array_equal(self.pipe, other.pipe)
                and np.array_equal(self.start_cycles, other.start_cycles)
                and np.array_equal(self.end_cycles, other.end_cycles)
                and np.array_equal(self.ready_cycles, other.ready_cycles)
                and np.array_equal(self.nbytes, other.nbytes))

    @functools.cached_property
    def _busy(self) -> dict[str, float]:
        busy = np.zeros(len(ALL_PIPES))
        for cols, copies, _ in self.segments:
            busy += copies * np.bincount(cols[0], weights=cols[3] - cols[2], minlength=len(ALL_PIPES))
        return {p: float(busy[PIPE_CODE[p]]) for p in ALL_PIPES}

    def busy_cycles_by_pipe(self) -> dict[str, float]:
        return dict(self._busy)


class CoreState:
    """The pipes of one core while it runs one block.

    Latencies (cycles, whole numbers): ``dma_latency_cycles`` on MTE2/MTE3 with at most
    ``dma_outstanding_requests`` copies in flight per engine, ``vector_latency_cycles`` on V;
    ``sync_flag_cycles`` per flag, ``pipe_barrier_cycles`` per barrier. All default to 0 (the
    bare in-order model); :class:`~npu_lab.lang.context.KernelContext` passes the spec's."""

    def __init__(self, pipes: tuple[str, ...], scalar_issue_cycles: float, *, dma_latency_cycles: float = 0.0,
                 dma_outstanding_requests: int = 1 << 30, vector_latency_cycles: float = 0.0,
                 sync_flag_cycles: float = 0.0, pipe_barrier_cycles: float = 0.0):
        self.pipes = pipes
        self.scalar_issue_cycles = _whole(scalar_issue_cycles)
        self.free = dict.fromkeys(pipes, 0.0)   # end of the last instruction's occupancy on each pipe
        self.done = dict.fromkeys(pipes, 0.0)   # completion of the last instruction on each pipe
        self.floor = dict.fromkeys(pipes, 0.0)  # earliest start of the next one (waited flags)
        self.latency = dict.fromkeys(pipes, 0.0)
        for p in ("MTE2", "MTE3"):
            if p in self.latency:
                self.latency[p] = _whole(dma_latency_cycles)
        if "V" in self.latency:
            self.latency["V"] = _whole(vector_latency_cycles)
        self.outstanding = max(1, int(dma_outstanding_requests))
        #: completion times of the copies in flight, per DMA pipe (at most ``outstanding``)
        self.inflight = {p: deque() for p in ("MTE2", "MTE3") if p in self.free}
        self.sync_flag_cycles = _whole(sync_flag_cycles)
        self.pipe_barrier_cycles = _whole(pipe_barrier_cycles)
        self.flags: dict[tuple[str, str], deque] = {}
        self.events: list[tuple] = []
        self._segments: list[tuple] = []   # (columns, copies, period) of events already flushed
        self.hbm_read_bytes = 0
        self.hbm_write_bytes = 0
        self.vector_repeats = 0
        self.scalar_drains = 0          # V->S waits and PIPE_ALL barriers (round trips)
        self.scalar_drain_cycles = 0.0  # how long S stood still in them
        self.scalar_waits = 0           # every wait of S (flag, drain, queue), binding or not
        self.pipe_events = dict.fromkeys(pipes, 0)  # instructions issued per pipe
        self.issue_bound = 0   # instructions whose start was set by the scalar unit's issue time
        #: off (None) unless npu_lab.lang.context.record_calls() is open: then a list of
        #: (pipe, event name) per instruction and (None, "SetFlag<MTE2_S>"-style call) per sync call
        self.call_log: list | None = None
        #: off (None) unless the launch records this block's instruction stream (see
        #: npu_lab.lang.context.KernelContext ``stream=``): then the lang layer appends one tuple per
        #: instruction and the sync / queue calls append ``(call, detail)`` here, in program order
        self.stream: list | None = None
        # ---- happens-before (see the module docstring) ----
        n = len(pipes)
        self.pipe_index = {p: i for i, p in enumerate(pipes)}
        self.clock = {p: [0] * n for p in pipes}     # updated in place (see _tick)
        self._tick = {p: (self.clock[p], i) for i, p in enumerate(pipes)}
        self._scalar_index = self.pipe_index.get("S", 0)
        self._s_generation = 0                      # bumped whenever S learns something (a wait)
        self._s_seen = dict.fromkeys(pipes, 0)      # the generation each pipe last learnt from S
        #: per flag key, parallel to ``flags``: (clock snapshot of src, source line of the SetFlag)
        self.flag_clocks: dict[tuple[str, str, int], deque] = {}

    # ---- happens-before -----------------------------------------------------------------
    def _learn_from_scalar(self, pipe: str) -> None:
        """``pipe`` learns what S learnt from its waits (S issued pipe's next instruction after
        them), but not S's own count: S's UB accesses need a flag from S."""
        self._s_seen[pipe] = self._s_generation
        if pipe == "S":
            return
        c = self.clock[pipe]
        si = self._scalar_index
        own = c[si]
        c[:] = map(max, c, self.clock["S"])       # in place: _tick holds the list
        c[si] = own

    def clock_snapshot(self, pipe: str) -> tuple:
        """Everything issued on ``pipe`` so far, as a clock (a SetFlag / EnQue / FreeTensor on it)."""
        if pipe != "S" and self._s_seen[pipe] != self._s_generation:
            self._learn_from_scalar(pipe)
        return tuple(self.clock[pipe])

    def join_clock(self, pipe: str, snapshot) -> None:
        """``pipe``'s next instructions are ordered after ``snapshot`` (a WaitFlag / DeQue /
        AllocTensor on it)."""
        if snapshot is None:
            return
        c = self.clock[pipe]
        c[:] = map(max, c, snapshot)
        if pipe == "S":
            self._s_generation += 1

    def unconsumed_flags(self) -> list:
        """``(src, dst, event id, (file, line) of the SetFlag)`` of every flag set and never waited."""
        out = []
        for key, pending in self.flag_clocks.items():
            for _snap, source in pending:
                out.append((*key, source))
        return out

    def check_flags_consumed(self) -> None:
        """Raise :class:`UnmatchedFlagError` if a SetFlag was never waited (at the block's end)."""
        left = self.unconsumed_flags()
        if not left:
            return
        src, dst, eid, (file, line) = left[0]
        raise UnmatchedFlagError(
            f"SetFlag<HardEvent::{src}_{dst}>({eid}) at {os.path.basename(file)}:{line} is never "
            f"waited: the block ends with that flag still set ({len(left)} unconsumed SetFlag(s) in "
            "all). On the device the flag stays set, so the next WaitFlag on the same event and id "
            "passes at once, ordering nothing (SetFlag-WaitFlag(ISASI).md: SetFlag和WaitFlag必须成对使用). "
            f"Fix: add WaitFlag<HardEvent::{src}_{dst}>({eid}) (ctx.wait_flag(\"{src}_{dst}\", id)) "
            "where the destination pipe needs the data — after the loop, for the last tile's flags "
            "(\"pair the last SetFlags\") — or set the flag only when a wait will follow.")

    def _check_pipe(self, pipe: str) -> None:
        if pipe not in self.free:
            raise SimulationError(f"pipe {pipe!r} does not exist on this core; pipes: {self.pipes}")

    def issue(self, pipe: str, name: str, cost_cycles: float, *, nbytes: int = 0,
              elements: int = 0, ready_cycles: float = 0.0, source=None) -> tuple[float, float]:
        """Issue one instruction; returns its (start, end) occupancy in cycles. Its completion
        (end + the pipe's latency) is ``self.done[pipe]`` afterwards."""
        free = self.free
        if pipe == "S":
            start = free["S"]
            if ready_cycles > start:
                start = ready_cycles
        else:
            if pipe not in free:
                self._check_pipe(pipe)
            issued = free["S"] + self.scalar_issue_cycles
            free["S"] = issued
            other = free[pipe]
            if self.floor[pipe] > other:
                other = self.floor[pipe]
            if ready_cycles > other:
                other = ready_cycles
            inflight = self.inflight.get(pipe)
            if inflight is not None:
                # the window of the last N copies' completions; entries at or before the pipe's
                # clock can never delay anything, so they are dropped (this keeps a steady
                # state's window the same size from one loop iteration to the next)
                while inflight and inflight[0] <= free[pipe]:
                    inflight.popleft()
                if len(inflight) >= self.outstanding:
                    oldest = inflight.popleft()      # copy i - N must be complete before copy i starts
                    if oldest > other:
                        other = oldest
            if issued > other:
                self.issue_bound += 1
                start = issued
            else:
                start = other
        end = start + cost_cycles
        free[pipe] = end
        if self._s_seen[pipe] != self._s_generation:
            self._learn_from_scalar(pipe)
        c, i = self._tick[pipe]
        c[i] += 1
        complete = end + self.latency[pipe]
        self.done[pipe] = complete
        if pipe != "S" and inflight is not None:
            inflight.append(complete)
        self.pipe_events[pipe] += 1
        if self.call_log is not None:
            self.call_log.append((pipe, name))
        self.events.append((PIPE_CODE[pipe], name, start, end, nbytes, elements,
                            source if source is not None else issuing_source(), complete))
        return start, end

    def flag_time(self, src: str) -> float:
        """When a flag set now on ``src`` reaches its waiter: src's issued work complete (the
        SetFlag page: 源流水的前序指令的所有读写操作都完成之后), no earlier than the scalar unit
        reaching the SetFlag, plus the flag's own cost."""
        t = self.done[src]
        if self.free["S"] > t:
            t = self.free["S"]
        return t + self.sync_flag_cycles

    def set_flag(self, src: str, dst: str, event_id: int = 0, source=None) -> None:
        """``source``: (file, line) of the kernel's SetFlag (found from the call stack if None)."""
        self._check_pipe(src)
        self._check_pipe(dst)
        key = (src, dst, event_id)
        pending = self.flags.get(key)
        if pending is None:
            pending = self.flags[key] = deque()
            self.flag_clocks[key] = deque()
        pending.append(self.flag_time(src))
        self.flag_clocks[key].append((self.clock_snapshot(src), source or issuing_source()))
        self.log_call(f"SetFlag<{src}_{dst}>", event_id)

    def wait_flag(self, src: str, dst: str, event_id: int = 0) -> None:
        self._check_pipe(src)
        self._check_pipe(dst)
        self.log_call(f"WaitFlag<{src}_{dst}>", event_id)
        pending = self.flags.get((src, dst, event_id))
        if not pending:
            raise SimulationError(
                f"wait_flag({src}_{dst}, event {event_id}) has no matching set_flag before it: "
                "on the device this pipe would wait forever. Set the flag (same event and id) "
                "after the producing instruction, then wait for it before the consuming one.")
        when = pending.popleft()
        snapshot = self.flag_clocks[(src, dst, event_id)].popleft()[0]
        c = self.clock[dst]
        c[:] = map(max, c, snapshot)
        if dst == "S":
            self._s_generation += 1
        if dst == "S" and src == "V":
            self._drain(when)
        else:
            self.wait_until(dst, when)

    def log_call(self, call: str, detail=None) -> None:
        """Record a sync / queue call (``EnQue``, ``SetFlag<MTE2_S>``) when recording is on.
        ``detail`` (the event id, the queue's name, ...) goes to the instruction stream only: two
        blocks whose streams are equal call the same syncs on the same flags and queues."""
        if self.call_log is not None:
            self.call_log.append((None, call))
        if self.stream is not None:
            self.stream.append((call, detail))

    def _drain(self, time_cycles: float) -> None:
        """The scalar unit waits for the vector pipe (a V->S round trip): counted."""
        self.scalar_drains += 1
        self.scalar_waits += 1
        if time_cycles > self.free["S"]:
            self.scalar_drain_cycles += time_cycles - self.free["S"]
            self.free["S"] = time_cycles

    def wait_until(self, pipe: str, time_cycles: float) -> None:
        """Make ``pipe``'s next instruction start no earlier than ``time_cycles``."""
        if pipe == "S":
            self.scalar_waits += 1
            self.free["S"] = max(self.free["S"], time_cycles)
        else:
            self.floor[pipe] = max(self.floor[pipe], time_cycles)

    def pipe_barrier(self, pipe: str = "ALL") -> None:
        """``ALL``: the scalar unit waits until every issued instruction of every pipe completed,
        plus the barrier's cost, and no pipe starts its next instruction before that (counted as
        a scalar drain). One pipe: its next instruction waits until everything issued on it
        completed, plus the barrier's cost (PipeBarrier(ISASI).md: 保证前序指令中所有数据的读写工作
        全部完成，后序指令才能执行)."""
        self.log_call(f"PipeBarrier<PIPE_{pipe}>")
        if pipe == "ALL":
            t = max(max(self.done.values()), self.free["S"]) + self.pipe_barrier_cycles
            self._drain(t)
            for p in self.pipes:
                self.wait_until(p, t)
            # happens-before: every pipe is ordered after everything issued on every pipe
            joined = [max(col) for col in zip(*self.clock.values())]
            for p in self.pipes:
                self.clock[p][:] = joined
            self._s_generation += 1
        else:
            self._check_pipe(pipe)
            self.wait_until(pipe, self.done[pipe] + self.pipe_barrier_cycles)

    def event_count(self) -> int:
        return sum(len(cols[0]) * copies for cols, copies, _ in self._segments) + len(self.events)

    def replicate_events(self, first: int, copies: int, period: float, scalar_period: float | None = None) -> None:
        """Append ``copies`` copies of the events from index ``first`` on, each shifted by
        another ``period`` cycles (a fast-forwarded steady-state loop). Stored compressed.
        ``scalar_period`` (when not None): the scalar unit's own events move by that many cycles a
        period instead (it runs ahead of the other pipes, waiting for none: npu_lab/lang/loop.py);
        the copies keep program order, each event shifted by its own pipe's period."""
        self._flush()
        # the segments wholly before the period stay; the rest are made plain (a nested loop's
        # compressed copies inside the period expanded, shifted), cut at ``first``, and the period
        # stored once plain and ``copies`` times compressed
        offset, k = 0, len(self._segments)
        for i, (cols, c, _) in enumerate(self._segments):
            if offset + len(cols[0]) * c > first:
                k = i
                break
            offset += len(cols[0]) * c
        head, tail = self._segments[:k], self._segments[k:]
        if not tail:
            return
        cols = tuple(np.concatenate(c) for c in zip(*(_expand_segment(*seg) for seg in tail)))
        cut = first - offset
        before = tuple(c[:cut] for c in cols)
        period_events = tuple(c[cut:] for c in cols)
        if scalar_period is not None and scalar_period != period:
            period = np.where(period_events[0] == PIPE_CODE["S"], float(scalar_period), float(period))
        self._segments = head + [(before, 1, 0.0), (period_events, 1, 0.0), (period_events, copies, period)]

    def _flush(self) -> None:
        if self.events:
            self._segments.append((self._columns(self.events), 1, 0.0))
            self.events = []

    @staticmethod
    def _columns(events) -> tuple:
        n = len(events)
        cols = list(zip(*events))
        source = np.empty(n, dtype=object)
        source[:] = cols[6]
        return (np.fromiter(cols[0], dtype=np.int8, count=n), np.array(cols[1], dtype=object),
                np.fromiter(cols[2], dtype=np.float64, count=n), np.fromiter(cols[3], dtype=np.float64, count=n),
                np.fromiter(cols[4], dtype=np.int64, count=n), np.fromiter(cols[5], dtype=np.int64, count=n),
                source, np.fromiter(cols[7], dtype=np.float64, count=n))

    def finish(self) -> BlockTrace:
        self._flush()
        # the block ends when its last result is complete (the last copy out landed in GM)
        duration = max(max(self.free.values()), max(self.done.values())) if self.free else 0.0
        return BlockTrace(list(self._segments), self.hbm_read_bytes, self.hbm_write_bytes,
                          self.vector_repeats, float(duration), self.scalar_drains,
                          float(self.scalar_drain_cycles))


def _expand_segment(cols, copies, period) -> tuple:
    """A stored segment as plain columns: compressed copies tiled, each shifted by 1, 2, ... periods
    (start, end and ready times: columns 2, 3, 7); ``period`` one number or one per event."""
    n = len(cols[0])
    if np.ndim(period):
        shift = (np.arange(1, copies + 1, dtype=np.float64)[:, None] * period[None, :]).reshape(-1)
    elif period == 0:
        return cols
    else:
        shift = np.repeat(np.arange(1, copies + 1, dtype=np.float64) * period, n)
    rep = [np.tile(c, copies) for c in cols]
    for j in (2, 3, 7):
        rep[j] = rep[j] + shift
    return tuple(rep)


def _whole(cycles: float) -> float:
    """Whole cycles (as in sim.costs.whole_cycles; kept here so core imports nothing of costs)."""
    return float(math.ceil(round(cycles, 6)))
