"""The device as a kernel sees it: ``ctx`` is passed into every kernel (the GPU-Puzzles trick),
so the same kernel text yields numbers (full run) and time (always).

Every method named after an Ascend C call takes that call's arguments in that order
(``npu_lab.lang.ASCEND_C_API`` maps each to its C++ signature and reference page):
``GetBlockIdx`` → ``ctx.get_block_idx()``, ``SetFlag<HardEvent::MTE2_V>(id)`` →
``ctx.set_flag("MTE2_V", id)``, ``PipeBarrier<PIPE_V>()`` → ``ctx.pipe_barrier("PIPE_V")``,
``TPipe`` → ``ctx.pipe``, ``DataCopy`` → ``ctx.data_copy``, vector instructions → ``ctx.add``,
``ctx.exp``, ... Two methods are simulator annotations with no C++ call behind them, because C++
writes them as plain code: ``ctx.scalar(...)`` charges scalar arithmetic, ``ctx.tile_loop(n)``
is a ``for`` loop the simulator may fast-forward.
"""

from __future__ import annotations

import contextlib
import numbers
import os
import sys

import numpy as np

from ..capabilities import check_supported
from ..hardware import HardwareSpec
from ..sim.core import CUBE_PIPES, VECTOR_PIPES, CoreState, issuing_source
from ..sim.costs import scalar_cycles
from .cube import CubeOps
from .debug import DebugOps
from .dma import DmaOps
from .operands import scalar_operand
from .errors import AscendCRuleError, CapabilityError, RaceError
from .loop import LoopOps
from .memory import TPipe, UbAllocator
from .reduce import ReduceOps
from .select import SelectOps
from .sort import SortOps
from .tensor import LocalTensor
from .vector import VectorOps

__all__ = ["KernelContext", "HardEvent", "RaceError", "record_calls"]

_call_recorders: list[list] = []   # open record_calls() blocks (normally none: recording is off)
#: check_supported answers by (isa, instruction, dtype, mode): the capability tables are constant
_SUPPORTED: dict = {}


@contextlib.contextmanager
def record_calls():
    """Record what each block calls, in program order (off by default; a test hook for the C++
    listings, :mod:`npu_lab.kernels.listings`). Every KernelContext created inside the ``with``
    appends its log to the yielded list, in creation order: a list of ``(pipe, event name)`` per
    instruction and ``(None, call)`` per sync / queue call (``"SetFlag<MTE2_S>"``,
    ``"PipeBarrier<PIPE_ALL>"``, ``"EnQue"``, ``"DeQue"``, ``"AllocTensor"``, ``"FreeTensor"``,
    ``"InitBuffer"``, ``"AllocEventID"``, ``"ReleaseEventID"``, ``"FetchEventID"``). Run small cases: a timing-only run fast-forwards long loops, so their
    skipped iterations are not in the log."""
    logs: list[list] = []
    _call_recorders.append(logs)
    try:
        yield logs
    finally:
        _call_recorders.remove(logs)


class HardEvent:
    """``HardEvent``: which pipe signals which. ``set_flag(event, id)`` after the producer's
    instruction, ``wait_flag(event, id)`` before the consumer's (asc-devkit
    docs/zh/api/SIMD-API/基础API/同步控制/核内同步/SetFlag-WaitFlag(ISASI).md)."""

    MTE2_V = "MTE2_V"
    V_MTE2 = "V_MTE2"
    V_MTE3 = "V_MTE3"
    MTE3_V = "MTE3_V"
    MTE2_MTE3 = "MTE2_MTE3"
    MTE3_MTE2 = "MTE3_MTE2"
    MTE2_S = "MTE2_S"
    S_MTE2 = "S_MTE2"
    MTE3_S = "MTE3_S"
    S_MTE3 = "S_MTE3"
    V_S = "V_S"
    S_V = "S_V"
    # the cube core's (impl/basic_api/kernel_event.h; the matmul flow MTE2 -> MTE1 -> M -> FIX and back)
    MTE2_MTE1 = "MTE2_MTE1"
    MTE1_MTE2 = "MTE1_MTE2"
    MTE1_M = "MTE1_M"
    M_MTE1 = "M_MTE1"
    M_FIX = "M_FIX"
    FIX_M = "FIX_M"
    MTE2_M = "MTE2_M"
    M_MTE2 = "M_MTE2"
    MTE1_FIX = "MTE1_FIX"
    FIX_MTE1 = "FIX_MTE1"
    MTE2_FIX = "MTE2_FIX"
    FIX_MTE2 = "FIX_MTE2"
    M_S = "M_S"
    FIX_S = "FIX_S"

    ALL = ("MTE2_V", "V_MTE2", "V_MTE3", "MTE3_V", "MTE2_MTE3", "MTE3_MTE2", "MTE2_S", "S_MTE2",
           "MTE3_S", "S_MTE3", "V_S", "S_V",
           "MTE2_MTE1", "MTE1_MTE2", "MTE1_M", "M_MTE1", "M_FIX", "FIX_M", "MTE2_M", "M_MTE2", "MTE1_FIX",
           "FIX_MTE1", "MTE2_FIX", "FIX_MTE2", "M_S", "FIX_S")


#: event ids a core has per HardEvent (the hardware's flag registers)
EVENT_IDS = 8
_BARRIER_PIPES = {"PIPE_ALL": "ALL", "PIPE_V": "V", "PIPE_MTE2": "MTE2", "PIPE_MTE3": "MTE3",
                  "PIPE_S": "S", "PIPE_MTE1": "MTE1", "PIPE_M": "M", "PIPE_FIX": "FIX"}


_EVENTS: dict = {}      # (event, id, pipes) -> (src, dst, id): checked once (ids are whole ints)


def _event(event, event_id, pipes=None) -> tuple[str, str, int]:
    if type(event_id) is int:                  # not a bool (True == 1 would hit the cache)
        got = _EVENTS.get((event, event_id, pipes))
        if got is not None:
            return got
    if event not in HardEvent.ALL:
        raise AscendCRuleError(f"unknown HardEvent {event!r}; use one of {', '.join(HardEvent.ALL)} "
                               "(source pipe _ destination pipe)")
    if isinstance(event_id, (bool, np.bool_)) or not isinstance(event_id, numbers.Integral) \
            or not 0 <= event_id < EVENT_IDS:
        raise AscendCRuleError(f"event id must be a whole number 0..{EVENT_IDS - 1}, got {event_id!r}")
    src, dst = event.split("_")
    if pipes is not None and not (src in pipes and dst in pipes):
        kind = "cube core (AIC)" if "M" in pipes else "vector core (AIV)"
        mine = ", ".join(e for e in HardEvent.ALL if set(e.split("_")) <= set(pipes))
        raise AscendCRuleError(
            f"HardEvent {event} names pipe {src if src not in pipes else dst}, which this {kind} does not have "
            f"(its pipes: {', '.join(pipes)}); its events: {mine} (impl/basic_api/kernel_event.h; "
            "docs/zh/api/SIMD-API/基础API/同步控制/核内同步/SetFlag-WaitFlag(ISASI).md)")
    got = (src, dst, int(event_id))
    if type(event_id) is int:
        _EVENTS[(event, event_id, pipes)] = got
    return got


class KernelContext(CubeOps, DmaOps, VectorOps, SelectOps, ReduceOps, SortOps, LoopOps, DebugOps):
    """One block's view of its core. Created by :func:`npu_lab.launch`; kernels only use it."""

    def __init__(self, hw: HardwareSpec, block_idx: int, block_dim: int, *, core_type: str = "vector",
                 timing_only: bool = False, dma_bytes_per_cycle: float | None = None,
                 stream: str | None = None):
        """``stream``: None (normal), ``"record"`` (full timing, and record the block's instruction
        stream in ``self.stream``) or ``"numerics"`` (a full run's data and the stream only: no
        issue timing, no UB hazard records, so no RaceError — :func:`npu_lab.launch` uses it for
        blocks whose class representative was simulated with full timing; see ``_exec``)."""
        if stream not in (None, "record", "numerics"):
            raise ValueError(f"stream must be None, 'record' or 'numerics', got {stream!r}")
        if stream == "numerics" and timing_only:
            raise ValueError("stream='numerics' computes the data: it needs timing_only=False")
        self.hw = hw
        self._block_idx = block_idx
        self._block_dim = block_dim
        self.core_type = core_type
        self.timing_only = timing_only
        #: True when :func:`npu_lab.launch` runs a block a second time, only for its timeline (its
        #: stream differed from its class representative's): its GM writes are done already, and an
        #: overwrite may repeat but an atomic add must not (it would add the block's values twice)
        self.replaying = False
        pipes = VECTOR_PIPES if core_type == "vector" else CUBE_PIPES
        self.core = CoreState(pipes, hw.scalar_issue_cycles, dma_latency_cycles=hw.dma_latency_cycles,
                              dma_outstanding_requests=hw.dma_outstanding_requests,
                              vector_latency_cycles=hw.vector_latency_cycles,
                              sync_flag_cycles=hw.sync_flag_cycles, pipe_barrier_cycles=hw.pipe_barrier_cycles)
        if _call_recorders:
            self.core.call_log = []
            _call_recorders[-1].append(self.core.call_log)
        #: the instruction stream (None when not recorded): per instruction ``(pipe, name, cost
        #: cycles, bytes, elements, UB spans)``, the spans ``(address lo, hi)`` of what it reads,
        #: None, what it writes, None; per sync / queue call ``(call, detail)``
        self.stream: list | None = None
        if stream is not None:
            self.stream = self.core.stream = []
        if stream == "numerics":
            self._exec = self._exec_numerics      # the instance attribute wins over the method
        capacity = hw.ub_usable_bytes if core_type == "vector" else hw.l1_bytes
        self.ub = UbAllocator(capacity, hw.block_bytes, with_storage=not timing_only, ctx=self)
        self.pipe = TPipe(self.core, self.ub)
        if core_type == "cube":
            self._init_cube()              # L1/L0A/L0B/L0C allocators (npu_lab.lang.cube)
        self.dma_bytes_per_cycle = dma_bytes_per_cycle or hw.bytes_per_cycle(hw.core_dma_bandwidth_gbps)
        self._vector_costs: dict = {}      # (name, kind, bytes) -> (cycles, repeats, event name): costs depend on sizes only
        self._dma_costs: dict = {}         # (moved, burst, aligned, bytes/cycle) -> occupancy cycles

    # ---- where am I ---------------------------------------------------------------------
    def get_block_idx(self) -> int:
        """``GetBlockIdx()``: this block's index, 0 .. block_dim - 1."""
        return self._block_idx

    def get_block_num(self) -> int:
        """``GetBlockNum()``: the launch's block_dim."""
        return self._block_dim

    def get_tpipe_ptr(self) -> TPipe:
        """``GetTPipePtr()``: the block's TPipe (the same object as ``ctx.pipe``). Source:
        docs/zh/api/SIMD-API/基础API/资源管理/GetTPipePtr.md."""
        return self.pipe

    # ---- synchronisation ----------------------------------------------------------------
    def set_flag(self, event: str, event_id: int) -> None:
        """``SetFlag<HardEvent::SRC_DST>(eventId)``: record that everything issued so far on the
        source pipe must complete before the destination pipe passes the matching wait; the flag
        itself costs ``sync_flag_cycles`` (assumed: no number is published). A ``V_S`` wait is a
        V→S round trip: the scalar unit stands still until the vector pipe drained (counted in
        the trace's ``scalar_drains``). Source: docs/zh/api/SIMD-API/基础API/同步控制/核内同步/
        SetFlag-WaitFlag(ISASI).md."""
        src, dst, eid = _event(event, event_id, self.core.pipes)
        caller = sys._getframe(1)      # the kernel (no lang code calls set_flag)
        if self.core.flags.get((src, dst, eid)):
            _file, line = self.core.flag_clocks[(src, dst, eid)][-1][1]
            raise AscendCRuleError(
                f"SetFlag<HardEvent::{event}>({eid}) again before a WaitFlag consumed the one set at "
                f"{os.path.basename(_file)}:{line}: two SetFlags of one event and id in a row are undefined "
                "behaviour on the device (a PipeBarrier after them hangs; SetFlag-WaitFlag(ISASI).md, 约束说明). "
                f"Wait for the first one before setting it again, or give the second pair its own id "
                f"(ctx.pipe.alloc_event_id(\"{event}\"), one per buffer in flight).")
        self.core.set_flag(src, dst, eid, (caller.f_code.co_filename, caller.f_lineno))

    def wait_flag(self, event: str, event_id: int) -> None:
        """``WaitFlag<HardEvent::SRC_DST>(eventId)``: the destination pipe's next instruction (the
        scalar unit itself when it is S) waits for the oldest unmatched set_flag."""
        src, dst, eid = _event(event, event_id, self.core.pipes)
        self.core.wait_flag(src, dst, eid)

    def pipe_barrier(self, pipe: str) -> None:
        """``PipeBarrier<PIPE_V>()`` and friends: the named pipe's next instruction waits until
        every instruction already issued on it has completed; ``PIPE_ALL`` waits for every pipe
        (the scalar unit too). Source: docs/zh/api/SIMD-API/基础API/同步控制/核内同步/PipeBarrier(ISASI).md.

        Cost: the next instruction on the pipe waits for the completion (not just the issue) of
        everything before it, plus ``pipe_barrier_cycles`` (assumed). On V that gives up the
        overlap of independent instructions; a true dependency through UB is already waited for
        automatically (see ``_exec``), so ``PIPE_V`` is needed only where the simulator cannot see
        it — and costs time wherever it is written."""
        if pipe not in _BARRIER_PIPES:
            raise AscendCRuleError(f"pipe_barrier takes one of {', '.join(_BARRIER_PIPES)}, got {pipe!r}")
        self.core.pipe_barrier(_BARRIER_PIPES[pipe])
        self._cube_barrier(pipe)           # the cube's Mmad accumulation rule (npu_lab.lang.cube)

    # ---- the one place an instruction is issued -----------------------------------------
    def _exec(self, pipe: str, name: str, cost_cycles: float, reads=(), writes=(),
              nbytes: int = 0, elements: int = 0) -> tuple[float, float]:
        """Issue on ``pipe``; ``reads`` / ``writes`` are ``(tensor, byte_lo, byte_hi)`` spans of UB
        (byte offsets inside the tensor's region) or bare tensors (their whole view).

        Dependencies on the vector pipe are automatic: an instruction that reads a UB span an
        earlier V instruction writes starts after that one *completes* (issue + repeats + the
        pipeline latency) — what Ascend C's compiler-inserted auto-sync (and a hand-written
        ``PipeBarrier<PIPE_V>`` between dependent instructions) guarantees; independent V
        instructions overlap. Between pipes nothing is automatic.

        Races are found by happens-before, not by timing: a read after a write, a write after a
        read or two writes of overlapping bytes on two different pipes are a ``RaceError`` unless
        the earlier access is ordered before the later one by flags, queue hand-offs, PIPE_ALL or
        the scalar unit's waits (vector clocks, :mod:`npu_lab.sim.core`) — whether or not the
        timeline happens to overlap them (on a device it would, on another shape or another day).
        Same-pipe pairs are ordered: a pipe runs in order (and V's reads wait for V's writes)."""
        rs, ws = self._resolve(name, reads), self._resolve(name, writes)
        ready = 0.0
        if pipe == "V":
            for _, r, lo, hi in rs:
                for e in r.writes:      # read after an in-flight vector write: wait for it
                    if e[2] > ready and e[0] < hi and lo < e[1]:
                        ready = e[2]
        if self.stream is not None:
            self._record_stream(pipe, name, cost_cycles, nbytes, elements, rs, ws)
        core = self.core
        # the kernel's line: _exec's caller is always lang code, so the search starts above it
        source = issuing_source(sys._getframe(2))
        start, end = core.issue(pipe, name, cost_cycles, nbytes=nbytes, elements=elements, ready_cycles=ready,
                                source=source)
        complete = core.done[pipe]
        clock = core.clock[pipe]
        pi = core.pipe_index[pipe]
        for t, r, lo, hi in rs:
            for e in r.hb_writes:
                if e[0] < hi and lo < e[1] and clock[e[2]] < e[3]:
                    self._race(t, e, (name, pipe, source, start), "reads", lo, hi)
            hb_reads = r.hb_reads
            if hb_reads:
                r.record_read((lo, hi, pi, clock[pi], name, source, complete))
            else:                           # nothing to forget: the common first read
                hb_reads.append((lo, hi, pi, clock[pi], name, source, complete))
        for t, r, lo, hi in ws:
            for e in r.hb_reads:
                if e[0] < hi and lo < e[1] and clock[e[2]] < e[3]:
                    self._race(t, e, (name, pipe, source, start), "overwrites", lo, hi)
            for e in r.hb_writes:
                if e[0] < hi and lo < e[1] and clock[e[2]] < e[3]:
                    self._race(t, e, (name, pipe, source, start), "writes", lo, hi)
            r.record_write((lo, hi, pi, clock[pi], name, source, complete), complete if pipe == "V" else None)
        return start, end

    def _exec_numerics(self, pipe: str, name: str, cost_cycles: float, reads=(), writes=(),
                       nbytes: int = 0, elements: int = 0) -> tuple[float, float]:
        """``_exec`` of a ``stream="numerics"`` block: append the instruction to the stream (the
        same entry ``_exec`` records) and nothing else. Sound because a block's timeline, and its
        hazard records, are a function of that stream alone (pipe, cost, UB addresses, syncs), never
        of data: a block whose stream equals its class representative's has the representative's
        timeline, races included. Use after free is not timing: still raised here. Returns (0, 0)."""
        self._record_stream(pipe, name, cost_cycles, nbytes, elements,
                            self._resolve(name, reads), self._resolve(name, writes))
        return 0.0, 0.0

    def _resolve(self, name: str, items) -> list:
        """``(tensor, region, byte_lo, byte_hi)`` of each read or write operand (a span tuple or a
        bare tensor: its whole view); a freed buffer raises (use after free is not timing)."""
        out = []
        for item in items:
            if item.__class__ is tuple:
                t, lo, hi = item
            else:
                t = item
                size = t.dtype.itemsize
                lo = t.offset * size
                hi = lo + t.count * size
            r = t.region
            if r.freed:
                self._freed(name, t)
            out.append((t, r, lo, hi))
        return out

    def _record_stream(self, pipe, name, cost_cycles, nbytes, elements, rs, ws) -> None:
        """Append one instruction to the block's stream: pipe, name, cost, sizes and the UB
        addresses it reads and writes (what its timing depends on)."""
        spans = [(r.offset_bytes + lo, r.offset_bytes + hi) for _, r, lo, hi in rs]
        spans.append(None)
        spans.extend([(r.offset_bytes + lo, r.offset_bytes + hi) for _, r, lo, hi in ws])
        spans.append(None)
        self.stream.append((pipe, name, cost_cycles, nbytes, elements, tuple(spans)))

    @staticmethod
    def _freed(name, t):
        raise AscendCRuleError(
            f"{name}: UB buffer '{t.name}' is used after free_tensor (FreeTensor gave it back "
            "to its queue; the next alloc_tensor may hand it to another tile). Use it "
            "before freeing it, or allocate a new tensor")

    def _race(self, tensor, earlier, later, verb, lo, hi):
        """Raise the RaceError of an access ``later = (name, pipe, source, start)`` that is not
        ordered after ``earlier`` (a hazard record, see UbRegion)."""
        e_lo, e_hi, e_pi, _count, e_name, e_source, e_complete = earlier
        e_pipe = self.core.pipes[e_pi]
        name, pipe, source, start = later
        kind = {"reads": "read after write", "overwrites": "write after read", "writes": "write after write"}[verb]
        what = {"reads": "wrote", "overwrites": "reads", "writes": "also writes"}[verb]
        overlap = (max(lo, e_lo), min(hi, e_hi))
        event = f"{e_pipe}_{pipe}"
        named = event in HardEvent.ALL
        timing = (f"this timeline overlaps them (cycle {start:.0f} < {e_complete:.0f})" if start < e_complete else
                  f"this timeline happens to keep them apart (cycle {start:.0f} >= {e_complete:.0f}), "
                  "which the device does not promise")
        if named:
            fix = (f'ctx.set_flag("{event}", id) after {e_name} and ctx.wait_flag("{event}", id) before '
                   f"{name} (SetFlag/WaitFlag<HardEvent::{event}>(id), id from ctx.pipe.fetch_event_id("
                   f'"{event}") / alloc_event_id)')
            queue = {"MTE2_V": "VECIN", "V_MTE3": "VECOUT"}.get(event)
            if queue:
                fix += f", or pass the tensor through a TQue<{queue}> (EnQue/DeQue sync {e_pipe}->{pipe})"
        else:
            fix = (f"a flag from {e_pipe} to {pipe} after {e_name} and its wait before {name}, or "
                   "PipeBarrier<PIPE_ALL>")
        raise RaceError(
            f"race on {getattr(tensor.region, 'buffer', 'UB')} buffer '{tensor.name}' ({kind}): {name} on pipe {pipe} ({_where(source)}) {verb} "
            f"bytes {overlap[0]}..{overlap[1]} that {e_name} on pipe {e_pipe} ({_where(e_source)}) {what}, "
            f"and nothing orders the two: no {event} flag between {e_name} on {e_pipe} and {name} on "
            f"{pipe} ({timing}). Fix: {fix}.",
            buffer=tensor.name, kind=kind, event=event,
            earlier=(e_name, e_pipe, e_source), later=(name, pipe, source))

    def _rule(self, message: str):
        raise AscendCRuleError(message)

    def _require(self, instruction: str, *, dtype=None, mode=None) -> None:
        """Raise a CapabilityError when this chip has no ``instruction`` (for dtype / mode)."""
        key = (self.hw.isa, instruction, dtype, mode)
        try:
            why = _SUPPORTED[key]
        except (KeyError, TypeError):          # first time (or an unhashable dtype): ask
            dtype_name = None if dtype is None else (dtype.name if isinstance(dtype, np.dtype) else np.dtype(dtype).name)
            why = check_supported(self.hw.isa, instruction, dtype=dtype_name, mode=mode)
            try:
                _SUPPORTED[key] = why
            except TypeError:
                pass
        if why:
            raise CapabilityError(f"{self.hw.name}: {why}")

    # ---- scalar -------------------------------------------------------------------------
    def scalar(self, name: str, *, ops: int = 0, ub_reads: int = 0, ub_writes: int = 0,
               exps: int = 0, reads=(), writes=(), compute=None):
        """Simulator annotation (no Ascend C call: C++ writes this as plain code). Charges scalar
        work counted in operations: ``ops`` register ops, ``ub_reads`` / ``ub_writes`` scalar UB
        accesses (what GetValue / SetValue cost) and ``exps`` software exponentials. The counts
        must not depend on data values (charge the branchless version). ``compute()`` does the
        arithmetic in a full run only, and its result is returned."""
        for n, label in ((ops, "ops"), (ub_reads, "ub_reads"), (ub_writes, "ub_writes"), (exps, "exps")):
            if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
                raise ValueError(f"scalar {label} must be a whole number >= 0, got {n!r}")
        cost = scalar_cycles(self.hw, ops, ub_reads + ub_writes, exps)
        self._exec("S", name, cost, reads, writes, elements=ub_reads + ub_writes)
        if compute is not None and not self.timing_only:
            return compute()
        return None

    def _get_value(self, tensor: LocalTensor, index: int):
        index = self._check_index(tensor, index)
        size = tensor.dtype.itemsize
        lo = tensor.byte_offset + index * size
        self._exec("S", "GetValue", scalar_cycles(self.hw, 0, 1), reads=((tensor, lo, lo + size),), elements=1)
        return 0 if self.timing_only else tensor.data[index].item()

    def _set_value(self, tensor: LocalTensor, index: int, value) -> None:
        index = self._check_index(tensor, index)
        scalar_operand("SetValue", value, tensor.dtype)
        size = tensor.dtype.itemsize
        lo = tensor.byte_offset + index * size
        self._exec("S", "SetValue", scalar_cycles(self.hw, 0, 1), writes=((tensor, lo, lo + size),), elements=1)
        if not self.timing_only:
            tensor.data[index] = value

    @staticmethod
    def _check_index(tensor: LocalTensor, index) -> int:
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, numbers.Integral) \
                or not 0 <= index < tensor.count:
            raise IndexError(f"index {index!r} outside '{tensor.name}' (0..{tensor.count - 1})")
        return int(index)


def _where(source) -> str:
    """``file:line`` of a kernel source line (the notebook cell's file name when in a notebook)."""
    if not source or source[0] == "?":
        return "line unknown"
    return f"{os.path.basename(source[0])}:{source[1]}"


def _span(item):
    if isinstance(item, LocalTensor):
        return item, item.byte_offset, item.byte_offset + item.nbytes
    return item
