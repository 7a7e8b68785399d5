"""One core running one block: in-order pipes fed by a scalar unit (DESIGN.md §4.1).

Times are in cycles, relative to the block's start. The scalar unit (pipe ``S``) runs the kernel's
control code and issues every other instruction, in program order, into a per-pipe queue. Each
pipe executes its queue in order; pipes run in parallel. An instruction on pipe P starts at

    max(P's free time, the time S issued it, the flags P waits on, the data-ready times given)

and ends ``cost`` cycles later. ``set_flag(src, dst)`` records the end of src's last instruction;
``wait_flag(src, dst)`` makes dst's next instruction wait for it (and stalls S when dst is S).

Nothing here looks at data values: a timeline depends only on the instructions issued and their
sizes, which is why a timing-only run reproduces a full run exactly.
"""

from __future__ import annotations

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


class SimulationError(RuntimeError):
    """The kernel did something the device could not run (a hang, a race, a bad sync)."""


def issuing_source() -> tuple[str, int]:
    """(file, line) of the kernel code that issued the current instruction: the first frame
    outside ``npu_lab/sim`` and ``npu_lab/lang``."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL_DIRS):
        frame = frame.f_back
    if frame is None:
        return ("?", 0)
    return (frame.f_code.co_filename, frame.f_lineno)


@dataclass
class BlockTrace:
    """What one block did, times relative to the block's start (cycles). Column arrays, one row
    per instruction: pipe code, name, start, end, bytes moved, elements processed, source."""

    pipe: np.ndarray
    name: np.ndarray
    start_cycles: np.ndarray
    end_cycles: np.ndarray
    nbytes: np.ndarray
    elements: np.ndarray
    source: np.ndarray  # object array of (file, line)
    hbm_read_bytes: int
    hbm_write_bytes: int
    vector_repeats: int
    duration_cycles: float

    def same_work_as(self, other: "BlockTrace") -> bool:
        return (self.duration_cycles == other.duration_cycles
                and len(self.pipe) == len(other.pipe)
                and np.array_equal(self.pipe, other.pipe)
                and np.array_equal(self.start_cycles, other.start_cycles)
                and np.array_equal(self.end_cycles, other.end_cycles)
                and np.array_equal(self.nbytes, other.nbytes))

    def busy_cycles_by_pipe(self) -> dict[str, float]:
        busy = np.bincount(self.pipe, weights=self.end_cycles - self.start_cycles,
                           minlength=len(ALL_PIPES))
        return {p: float(busy[PIPE_CODE[p]]) for p in ALL_PIPES}


class CoreState:
    """The pipes of one core while it runs one block."""

    def __init__(self, pipes: tuple[str, ...], scalar_issue_cycles: float):
        self.pipes = pipes
        self.scalar_issue_cycles = float(math.ceil(round(scalar_issue_cycles, 6)))  # whole cycles
        self.free = dict.fromkeys(pipes, 0.0)   # end of the last instruction on each pipe
        self.floor = dict.fromkeys(pipes, 0.0)  # earliest start of the next one (waited flags)
        self.flags: dict[tuple[str, str], deque] = {}
        self.events: list[tuple] = []
        self._segments: list[tuple] = []   # column arrays of events already flushed
        self.hbm_read_bytes = 0
        self.hbm_write_bytes = 0
        self.vector_repeats = 0
        self.pipe_events = dict.fromkeys(pipes, 0)  # instructions issued per pipe
        self.issue_bound = 0   # instructions whose start was set by the scalar unit's issue time

    def _check_pipe(self, pipe: str) -> None:
        if pipe not in self.free:
            raise SimulationError(f"pipe {pipe!r} does not exist on this core; pipes: {self.pipes}")

    def issue(self, pipe: str, name: str, cost_cycles: float, *, nbytes: int = 0,
              elements: int = 0, ready_cycles: float = 0.0, source=None) -> tuple[float, float]:
        """Issue one instruction; returns its (start, end) in cycles."""
        free = self.free
        if pipe == "S":
            start = max(free["S"], ready_cycles)
        else:
            if pipe not in free:
                self._check_pipe(pipe)
            issued = free["S"] + self.scalar_issue_cycles
            free["S"] = issued
            other = max(free[pipe], self.floor[pipe], ready_cycles)
            if issued > other:
                self.issue_bound += 1
            start = max(other, issued)
        end = start + cost_cycles
        free[pipe] = end
        self.pipe_events[pipe] += 1
        self.events.append((PIPE_CODE[pipe], name, start, end, nbytes, elements,
                            source if source is not None else issuing_source()))
        return start, end

    def set_flag(self, src: str, dst: str) -> None:
        self._check_pipe(src)
        self._check_pipe(dst)
        self.flags.setdefault((src, dst), deque()).append(self.free[src])

    def wait_flag(self, src: str, dst: str) -> None:
        self._check_pipe(src)
        self._check_pipe(dst)
        pending = self.flags.get((src, dst))
        if not pending:
            raise SimulationError(
                f"wait_flag({src}, {dst}) has no matching set_flag({src}, {dst}) before it: "
                "on the device this pipe would wait forever. Set the flag after the producing "
                "instruction, then wait for it before the consuming one.")
        self.wait_until(dst, pending.popleft())

    def wait_until(self, pipe: str, time_cycles: float) -> None:
        """Make ``pipe``'s next instruction start no earlier than ``time_cycles``."""
        if pipe == "S":
            self.free["S"] = max(self.free["S"], time_cycles)
        else:
            self.floor[pipe] = max(self.floor[pipe], time_cycles)

    def pipe_barrier(self, pipe: str = "ALL") -> None:
        """``ALL``: the scalar unit waits until every pipe has drained, and no pipe starts its
        next instruction before that. A barrier on one pipe costs nothing here because each
        pipe is already in order."""
        if pipe == "ALL":
            t = max(self.free.values())
            for p in self.pipes:
                self.wait_until(p, t)
        else:
            self._check_pipe(pipe)

    def event_count(self) -> int:
        return sum(len(seg[0]) for seg in self._segments) + len(self.events)

    def replicate_events(self, first: int, copies: int, period: float) -> None:
        """Append ``copies`` copies of the events from index ``first`` on, each shifted by
        another ``period`` cycles (a fast-forwarded steady-state loop)."""
        self._flush()
        cols = [np.concatenate(c) for c in zip(*self._segments)] if len(self._segments) > 1 else list(self._segments[0])
        self._segments = [tuple(cols)]
        tail = [c[first:] for c in cols]
        n = len(tail[0])
        shifts = np.repeat(np.arange(1, copies + 1, dtype=np.float64) * period, n)
        rep = [np.tile(c, copies) for c in tail]
        rep[2] = rep[2] + shifts
        rep[3] = rep[3] + shifts
        self._segments.append(tuple(rep))

    def _flush(self) -> None:
        if self.events:
            self._segments.append(self._columns(self.events))
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
                source)

    def finish(self) -> BlockTrace:
        if self._segments:
            self._flush()
            pipe, name, start, end, nbytes, elements, source = (np.concatenate(c) for c in zip(*self._segments))
            duration = max(self.free.values()) if self.free else 0.0
            return BlockTrace(pipe, name, start, end, nbytes, elements, source, self.hbm_read_bytes,
                              self.hbm_write_bytes, self.vector_repeats, float(duration))
        events = self.events
        n = len(events)
        if n:
            cols = list(zip(*events))
            pipe = np.fromiter(cols[0], dtype=np.int8, count=n)
            name = np.array(cols[1], dtype=object)
            start = np.fromiter(cols[2], dtype=np.float64, count=n)
            end = np.fromiter(cols[3], dtype=np.float64, count=n)
            nbytes = np.fromiter(cols[4], dtype=np.int64, count=n)
            elements = np.fromiter(cols[5], dtype=np.int64, count=n)
            source = np.empty(n, dtype=object)
            source[:] = cols[6]
        else:
            pipe = np.zeros(0, np.int8)
            name = np.zeros(0, object)
            start = end = np.zeros(0)
            nbytes = elements = np.zeros(0, np.int64)
            source = np.zeros(0, object)
        duration = max(self.free.values()) if self.free else 0.0
        return BlockTrace(pipe, name, start, end, nbytes, elements, source,
                          self.hbm_read_bytes, self.hbm_write_bytes, self.vector_repeats,
                          float(duration))
