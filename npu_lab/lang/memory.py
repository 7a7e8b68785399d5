"""Unified Buffer management: the allocator, ``TPipe``, ``TQue`` and ``TBuf`` (docs/cost_model.md).

Written the Ascend C way::

    q_in = TQue(TPosition.VECIN, 2)          # TQue<TPosition::VECIN, 2> inQueue;
    ctx.pipe.init_buffer(q_in, 2, 8192)      # pipe.InitBuffer(inQueue, 2, 8192);
    x = q_in.alloc_tensor(np.float32)        # inQueue.AllocTensor<float>();
    q_in.enque(x); x = q_in.deque(np.float32); q_in.free_tensor(x)
    tmp = TBuf(TPosition.VECCALC); ctx.pipe.init_buffer(tmp, 1024); t = tmp.get(np.float32)

Sources: asc-devkit docs/zh/api/SIMD-API/基础API/资源管理/ (TPipe InitBuffer, TQue, TBuf) and
the TQueSync page under 同步控制/核内同步.

A queue's position fixes the sync EnQue/DeQue insert (what Ascend C's TQue does):

=========  ==================  =========================================
position   EnQue sets          DeQue makes wait
=========  ==================  =========================================
VECIN      flag MTE2 -> V      pipe V (until the load that filled it)
VECOUT     flag V -> MTE3      pipe MTE3 (until the vector op that wrote it)
=========  ==================  =========================================

So the scalar unit is *not* synchronised by a queue: scalar code that reads a VECIN tensor
needs its own ``wait_flag("MTE2_S", id)`` — the simulator raises a ``RaceError`` without it, as
the hardware would compute with stale bytes. ``alloc_tensor`` makes the producer pipe wait until
the slot's previous consumer freed it. Each of these syncs is a flag, and a happens-before edge for
the race detector (EnQue: producer -> consumer; FreeTensor -> the next AllocTensor of the slot:
consumer -> producer; see :mod:`npu_lab.sim.core`): it passes when the source
pipe's work *completed* (DMA latency, vector pipeline included), plus ``sync_flag_cycles``. ``depth`` is how many tensors may be enqueued and not yet
dequeued (``TQue<pos, depth>``); one more ``enque`` raises.
"""

from __future__ import annotations

import numbers
from collections import deque

import numpy as np

from ..sim.core import SimulationError
from ..sim.costs import round_up
from .tensor import LocalTensor, UbRegion, as_dtype


class TPosition:
    """``TPosition``: where a buffer lives logically. Vector kernels use these three."""

    VECIN = "VECIN"
    VECOUT = "VECOUT"
    VECCALC = "VECCALC"
    # the cube core's (see "the cube core's buffers" below)
    A1 = "A1"
    B1 = "B1"
    A2 = "A2"
    B2 = "B2"
    CO1 = "CO1"
    #: L1 too: the quant words a tensor-quant Fixpipe reads (its cbufWorkspace), the bias (not modelled)
    C1 = "C1"


QUEUE_PIPES = {TPosition.VECIN: ("MTE2", "V"), TPosition.VECOUT: ("V", "MTE3")}
_POSITIONS = (TPosition.VECIN, TPosition.VECOUT, TPosition.VECCALC)

#: Fresh UB bytes: real UB holds leftovers; 0xFF reads as NaN (float) or -1 (int).
UB_GARBAGE_BYTE = 0xFF


# ---- the cube core's buffers (issue 17 §1) ---------------------------------------------------------
# asc-devkit docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/概述/矩阵计算流程.md and the TPosition table of
# 资源管理/TQue: A1/B1 live in L1, A2 in L0A, B2 in L0B, CO1 in L0C. A queue on them syncs the pipes
# of the matmul flow: GM -MTE2-> L1 -MTE1-> L0A/L0B -M-> L0C -FIX-> GM.
QUEUE_PIPES.update({TPosition.A1: ("MTE2", "MTE1"), TPosition.B1: ("MTE2", "MTE1"),
                    TPosition.A2: ("MTE1", "M"), TPosition.B2: ("MTE1", "M"), TPosition.CO1: ("M", "FIX"),
                    # C1 is L1 on NPU arch 2201: a queue GM -> C1 syncs MTE2 -> MTE1 (impl/basic_api/kernel_event.h);
                    # Fixpipe's quant words are read on FIX, so such a kernel orders MTE2 -> FIX by hand
                    TPosition.C1: ("MTE2", "MTE1")})
#: the physical buffer of each position
BUFFER_OF_POSITION = {TPosition.VECIN: "UB", TPosition.VECOUT: "UB", TPosition.VECCALC: "UB",
                      TPosition.A1: "L1", TPosition.B1: "L1", TPosition.A2: "L0A", TPosition.B2: "L0B",
                      TPosition.CO1: "L0C", TPosition.C1: "L1"}
_POSITIONS = _POSITIONS + (TPosition.A1, TPosition.B1, TPosition.A2, TPosition.B2, TPosition.CO1, TPosition.C1)
#: HardwareSpec field of each cube buffer's capacity
CUBE_BUFFER_FIELDS = {"L1": "l1_bytes", "L0A": "l0a_bytes", "L0B": "l0b_bytes", "L0C": "l0c_bytes"}


def buffer_of(tensor) -> str:
    """The physical buffer a LocalTensor lives in: ``"UB"``, ``"L1"``, ``"L0A"``, ``"L0B"`` or ``"L0C"``."""
    return getattr(tensor.region, "buffer", "UB")


class BufferRegion(UbRegion):
    """A region of a cube buffer (L1, L0A, L0B, L0C): a UbRegion that knows its buffer, and, in L1,
    which layout the last GM -> L1 copy wrote into each byte range (``"NZ"`` for an Nd2Nz copy,
    ``"ND"`` for a contiguous one) so that LoadData can refuse an ND tile (see npu_lab.lang.cube)."""

    __slots__ = ("buffer", "layouts")

    def __init__(self, buffer: str, *args):
        super().__init__(*args)
        self.buffer = buffer
        self.layouts: list[tuple[int, int, str]] = []

    def record_layout(self, lo: int, hi: int, layout: str) -> None:
        self.layouts = [e for e in self.layouts if not (lo <= e[0] and e[1] <= hi)]
        self.layouts.append((lo, hi, layout))

    def layout_of(self, lo: int, hi: int) -> set:
        return {e[2] for e in self.layouts if e[0] < hi and lo < e[1]}


class UbOverflowError(MemoryError):
    """Asked for more Unified Buffer than the chip has."""


class QueueError(SimulationError):
    """A TQue / TBuf used against its rules (EnQue past depth, DeQue of an empty queue, ...)."""


class UbAllocator:
    """Bump allocator over the core's UB; every buffer is rounded up to 32 bytes. Storage is
    created per buffer (only what is allocated), so a what-if chip with a huge UB costs nothing
    until a kernel uses it."""

    buffer = "UB"

    def __init__(self, capacity_bytes: int, block_bytes: int, with_storage: bool, ctx=None):
        self.capacity_bytes = int(capacity_bytes)
        self.block_bytes = int(block_bytes)
        self.with_storage = with_storage
        self.used_bytes = 0
        self.held: list[UbRegion] = []
        self.ctx = ctx

    @property
    def free_bytes(self) -> int:
        return self.capacity_bytes - self.used_bytes

    def release_all(self) -> None:
        """Give every buffer back (TPipe Destroy): the regions are marked freed, so a tensor on
        one of them raises when used again."""
        for region in self.held:
            region.freed = True
        self.held = []
        self.used_bytes = 0

    def alloc(self, nbytes: int, name: str) -> UbRegion:
        if isinstance(nbytes, (bool, np.bool_)) or not isinstance(nbytes, numbers.Integral) or nbytes <= 0:
            raise ValueError(f"UB buffer '{name}' must have a positive whole number of bytes, got {nbytes!r}")
        size = round_up(int(nbytes), self.block_bytes)
        if size > self.free_bytes:
            held = ", ".join(f"{r.name}={r.nbytes} B" for r in self.held) or "none"
            raise UbOverflowError(
                f"{self.buffer} overflow: buffer '{name}' needs {size} bytes ({nbytes} rounded up to "
                f"{self.block_bytes}-byte blocks) but only {self.free_bytes} of "
                f"{self.capacity_bytes} bytes are left; already held: {held}. Use a smaller tile "
                "or fewer buffers.")
        storage = np.full(size, UB_GARBAGE_BYTE, np.uint8) if self.with_storage else None
        region = self._region(name, self.used_bytes, size, storage)
        self.used_bytes += size
        self.held.append(region)
        return region

    def _region(self, name, offset, size, storage) -> UbRegion:
        return UbRegion(name, offset, size, storage, self.ctx)


class CubeBufferAllocator(UbAllocator):
    """The allocator of one cube buffer (L1, L0A, L0B or L0C): like the UB's, slots in 32-byte
    units (the instructions check their own, stricter alignments: 512 B on L0A/L0B, 1024 B for
    Mmad's L0C operand), regions that know their buffer."""

    def __init__(self, buffer: str, capacity_bytes: int, block_bytes: int, with_storage: bool, ctx=None):
        super().__init__(capacity_bytes, block_bytes, with_storage, ctx)
        self.buffer = buffer

    def _region(self, name, offset, size, storage) -> UbRegion:
        return BufferRegion(self.buffer, name, offset, size, storage, self.ctx)


def _check_whole(name: str, value, lo: int, hi: int | None = None) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < lo \
            or (hi is not None and value > hi):
        span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be a whole number {span}, got {value!r}")
    return int(value)


class TBuf:
    """``TBuf<TPosition::VECCALC>``: scratch UB with no queue semantics (the kernel syncs by
    hand). Give it memory with ``ctx.pipe.init_buffer(tbuf, nbytes)``, then ``tbuf.get(dtype)``."""

    def __init__(self, position: str = TPosition.VECCALC):
        if position not in _POSITIONS:
            raise ValueError(f"TBuf position must be one of {_POSITIONS}, got {position!r}")
        self.position = position
        self.region: UbRegion | None = None

    def get(self, dtype, count: int | None = None) -> LocalTensor:
        """``Get<T>()`` (the whole buffer) or ``Get<T>(len)`` (its first ``len`` elements)."""
        if self.region is None:
            raise QueueError("TBuf.get before ctx.pipe.init_buffer(tbuf, nbytes): it has no memory yet")
        dt = as_dtype(dtype)
        if count is not None:
            count = _check_whole("TBuf.get len", count, 1, self.region.nbytes // dt.itemsize)
        return LocalTensor(self.region, dt, 0, count)


class _Slot:
    __slots__ = ("region", "freed_at", "in_use", "freed_clock")

    def __init__(self, region: UbRegion):
        self.region = region
        self.freed_at = 0.0
        self.in_use = False
        self.freed_clock = None     # the consumer's clock at FreeTensor (happens-before)


class TQue:
    """``TQue<position, depth>``: ``num`` equal UB slots (given by ``init_buffer``) passed from a
    producer pipe to a consumer pipe; at most ``depth`` of them enqueued at once."""

    def __init__(self, position: str, depth: int = 1):
        if position not in QUEUE_PIPES:
            raise ValueError(f"TQue position must be one of {', '.join(QUEUE_PIPES)} (VECCALC scratch is a "
                             f"TBuf), got {position!r}")
        self.position = position
        self.depth = _check_whole("TQue depth", depth, 1, 8)
        self.producer, self.consumer = QUEUE_PIPES[position]
        self.name = position.lower()
        self.core = None
        self._slots: list[_Slot] = []
        self._next = 0
        self._ready: deque = deque()   # (tensor, slot, time the producer finished)
        self._ready_clocks: deque = deque()   # the producer's clock at each EnQue (happens-before)
        self._out: dict[int, _Slot] = {}

    def _bind(self, core, regions: list[UbRegion], name: str) -> None:
        if self.core is not None:
            raise QueueError(f"queue '{self.name}' already has its buffers; call init_buffer once per queue")
        self.core, self.name = core, name
        self._slots = [_Slot(r) for r in regions]

    @property
    def num_buffers(self) -> int:
        return len(self._slots)

    def _need_buffers(self, what: str) -> None:
        if self.core is None:
            raise QueueError(f"TQue.{what} before ctx.pipe.init_buffer(que, num, nbytes): the queue has no memory")

    def alloc_tensor(self, dtype) -> LocalTensor:
        """``AllocTensor<T>()``: the next slot, whole; the producer pipe's next instruction waits
        until the slot's previous consumer freed it."""
        self._need_buffers("alloc_tensor")
        slot = self._slots[self._next]
        if slot.in_use:
            raise QueueError(
                f"queue '{self.name}': alloc_tensor with all {self.num_buffers} buffer(s) in use; "
                "on the device this waits forever. free_tensor the tensor you are done with first.")
        self.core.log_call("AllocTensor", self.name)
        self._next = (self._next + 1) % len(self._slots)
        slot.in_use = True
        slot.region.freed = False
        self.core.wait_until(self.producer, slot.freed_at)
        self.core.join_clock(self.producer, slot.freed_clock)
        self._out[id(slot.region)] = slot
        return LocalTensor(slot.region, dtype)

    def enque(self, tensor: LocalTensor) -> None:
        """``EnQue(tensor)``: hand the tensor to the consumer (a flag producer -> consumer)."""
        slot = self._slot_of(tensor, "enque")
        self.core.log_call("EnQue", self.name)
        if len(self._ready) >= self.depth:
            raise QueueError(
                f"queue '{self.name}' (TQue<{self.position}, {self.depth}>): enque number "
                f"{len(self._ready) + 1} before a deque; depth {self.depth} allows only {self.depth} "
                f"tensor(s) in flight. Declare TQue<{self.position}, {len(self._ready) + 1}> to "
                "prefetch that far, or deque first.")
        # EnQue is a SetFlag: the consumer may go once the producer's work completed + the flag
        self._ready.append((tensor, slot, self.core.flag_time(self.producer)))
        self._ready_clocks.append(self.core.clock_snapshot(self.producer))

    def deque(self, dtype=None) -> LocalTensor:
        """``DeQue<T>()``: the oldest enqueued tensor; the consumer pipe waits for its producer."""
        self._need_buffers("deque")
        if not self._ready:
            raise QueueError(f"queue '{self.name}': deque with nothing enqueued; on the device "
                             "this waits forever. enque a tensor first.")
        self.core.log_call("DeQue", self.name)
        tensor, _slot, produced_at = self._ready.popleft()
        self.core.wait_until(self.consumer, produced_at)
        self.core.join_clock(self.consumer, self._ready_clocks.popleft())
        return tensor if dtype is None else tensor.reinterpret_cast(dtype)

    def free_tensor(self, tensor: LocalTensor) -> None:
        """``FreeTensor(tensor)``: release the slot; its next producer waits for the consumer."""
        slot = self._slot_of(tensor, "free_tensor")
        self.core.log_call("FreeTensor", self.name)
        if any(s is slot for _, s, _ in self._ready):
            raise QueueError(f"queue '{self.name}': free_tensor of a tensor still enqueued; deque it first")
        # FreeTensor is a SetFlag too: the slot is free once the consumer's reads completed
        slot.freed_at = self.core.flag_time(self.consumer)
        slot.freed_clock = self.core.clock_snapshot(self.consumer)
        slot.in_use = False
        slot.region.freed = True

    def _slot_of(self, tensor: LocalTensor, what: str) -> _Slot:
        self._need_buffers(what)
        if not isinstance(tensor, LocalTensor):
            raise TypeError(f"queue '{self.name}': {what} takes a LocalTensor, got {type(tensor).__name__}")
        slot = self._out.get(id(tensor.region))
        if slot is None or not slot.in_use:
            raise QueueError(f"queue '{self.name}': {what} of a tensor that was not allocated "
                             f"from this queue (or was already freed): {tensor!r}")
        return slot


#: TEventIDs a TPipe hands out per HardEvent: ``QUE_MAX_EVENT`` (asc-devkit
#: impl/basic_api/kernel_macros.h: 8 for __NPU_ARCH__ 2002 / 2201 — the 310P and 910B — else 4)
QUE_MAX_EVENT = 8


class EventIdError(SimulationError, ValueError):
    """AllocEventID / ReleaseEventID / FetchEventID used against their rules."""


class TPipe:
    """``TPipe``: carves UB into queue slots and scratch buffers for one block, and hands out the
    event ids of SetFlag / WaitFlag (``AllocEventID`` / ``ReleaseEventID`` / ``FetchEventID``: in
    a TPipe kernel the ids come from these, not literals — SetFlag-WaitFlag(ISASI).md, 约束说明)."""

    def __init__(self, core, allocator: UbAllocator):
        self.core = core
        self.allocator = allocator
        #: physical buffer -> its allocator (a cube core adds L1, L0A, L0B, L0C)
        self.allocators: dict[str, UbAllocator] = {allocator.buffer: allocator}
        self.queues: list[TQue] = []
        self._names: dict[str, int] = {}
        self._event_ids: dict[str, set] = {}     # HardEvent -> ids AllocEventID'd and not released

    # ---- event ids (asc-devkit docs/zh/api/SIMD-API/基础API/资源管理/TPipe/AllocEventID.md,
    # ReleaseEventID.md, FetchEventID.md; impl/basic_api/kernel_tpipe_impl.h: a bit set per
    # HardEvent, the lowest free id first) ---------------------------------------------------
    @staticmethod
    def _hard_event(event, call: str) -> str:
        from .context import HardEvent        # context imports this module

        if event not in HardEvent.ALL:
            raise EventIdError(f"{call}: unknown HardEvent {event!r}; use one of {', '.join(HardEvent.ALL)} "
                               "(source pipe _ destination pipe)")
        return event

    def _lowest_free(self, event: str, call: str) -> int:
        taken = self._event_ids.setdefault(event, set())
        for i in range(QUE_MAX_EVENT):
            if i not in taken:
                return i
        raise EventIdError(
            f"{call}: all {QUE_MAX_EVENT} TEventIDs of HardEvent::{event} are allocated ({sorted(taken)}) and "
            "none released; on the device this asserts (kernel_tpipe_impl.h: 'current id is 8, max ...'). "
            "ReleaseEventID<HardEvent::" + event + ">(id) each id as soon as its SetFlag/WaitFlag pair is done "
            "(AllocEventID.md: 使用结束后应该立刻调用ReleaseEventID释放，防止TEventID耗尽).")

    def alloc_event_id(self, event) -> int:
        """``AllocEventID<HardEvent::X>()``: the lowest free TEventID of ``event``, held until
        :meth:`release_event_id`. Raises EventIdError when all ``QUE_MAX_EVENT`` are held."""
        event = self._hard_event(event, "alloc_event_id")
        eid = self._lowest_free(event, "alloc_event_id")
        self._event_ids[event].add(eid)
        self.core.log_call("AllocEventID", (event, eid))
        return eid

    def release_event_id(self, event, event_id) -> None:
        """``ReleaseEventID<HardEvent::X>(id)``: give back an id :meth:`alloc_event_id` handed out
        (ReleaseEventID.md: 传入的TEventID需由对应的AllocEventID申请而来)."""
        event = self._hard_event(event, "release_event_id")
        taken = self._event_ids.setdefault(event, set())
        if event_id not in taken:
            raise EventIdError(
                f"release_event_id(HardEvent::{event}, {event_id!r}): that id was not allocated for {event} "
                f"(held: {sorted(taken) or 'none'}). ReleaseEventID takes an id AllocEventID<HardEvent::{event}>() "
                "returned, once (ReleaseEventID.md); an id from FetchEventID is not held and needs no release.")
        taken.discard(event_id)
        self.core.log_call("ReleaseEventID", (event, event_id))

    def fetch_event_id(self, event) -> int:
        """``FetchEventID(HardEvent::X)``: the lowest free TEventID of ``event`` without holding it
        (FetchEventID.md: for a pair used at once; two pairs of one event in flight need two ids
        from alloc_event_id)."""
        event = self._hard_event(event, "fetch_event_id")
        eid = self._lowest_free(event, "fetch_event_id")
        self.core.log_call("FetchEventID", (event, eid))
        return eid

    def _reset_event_ids(self) -> None:
        """Destroy gives every TEventID back (TPipe/Destroy.md: 释放资源)."""
        self._event_ids.clear()

    def _name(self, base: str) -> str:
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}{n}"

    def init_buffer(self, buffer, *args, name: str | None = None) -> None:
        """``InitBuffer(que, num, len)`` gives a TQue ``num`` slots of ``len`` bytes;
        ``InitBuffer(tbuf, len)`` gives a TBuf ``len`` bytes. ``name`` labels it in errors and
        race reports (a simulator nicety; C++ uses the variable's name)."""
        self._need_alive("init_buffer")
        if isinstance(buffer, TQue):
            if len(args) != 2:
                raise TypeError("init_buffer(que, num, len): a TQue takes a buffer count and a byte length")
            num = _check_whole("init_buffer num", args[0], 1, 8)
            nbytes = _check_whole("init_buffer len (bytes)", args[1], 1)
            base = self._name(name or buffer.position.lower())
            allocator = self._allocator_for(buffer.position)
            regions = [allocator.alloc(nbytes, f"{base}[{i}]" if num > 1 else base) for i in range(num)]
            buffer._bind(self.core, regions, base)
            self.queues.append(buffer)
        elif isinstance(buffer, TBuf):
            if len(args) != 1:
                raise TypeError("init_buffer(tbuf, len): a TBuf takes one byte length")
            if buffer.region is not None:
                raise QueueError("this TBuf already has its memory; call init_buffer once per TBuf")
            nbytes = _check_whole("init_buffer len (bytes)", args[0], 1)
            allocator = self._allocator_for(buffer.position)
            buffer.region = allocator.alloc(nbytes, self._name(name or "tbuf"))
        else:
            raise TypeError(f"init_buffer takes a TQue or a TBuf, got {type(buffer).__name__}")
        self.core.log_call("InitBuffer", (allocator.used_bytes, args))

    # ---- lifecycle: Init / Destroy / Reset (docs/zh/api/SIMD-API/基础API/资源管理/TPipe/) ----------
    # The constructor has already called Init ("Tpipe构造函数内部已调用Init"); reusing a TPipe is
    # Destroy then Init ("每次复用需要先Destroy释放资源，再调用init重新初始化", Init.md).
    def init(self) -> None:
        """``Init()``: (re)initialise the pipe's memory and event ids after :meth:`destroy`."""
        if not getattr(self, "_destroyed", False):
            raise QueueError("TPipe.init(): this TPipe is already initialised (its constructor calls Init, "
                             "TPipe/Init.md); to reuse it call destroy() first, then init()")
        self._destroyed = False
        self.core.log_call("TPipe::Init", ())

    def destroy(self) -> None:
        """``Destroy()``: release every buffer the pipe gave out (their tensors may not be used
        again) after every pipe has finished with them: Destroy waits for all pipes, unlike
        DestroyWithoutPipeAll (TPipe/Destroy.md, DestroyWithoutPipeAll.md). Event ids are
        released too."""
        if getattr(self, "_destroyed", False):
            raise QueueError("TPipe.destroy(): already destroyed; call init() before using or destroying it again")
        self.core.pipe_barrier("ALL")
        for allocator in self.allocators.values():
            allocator.release_all()
        for q in self.queues:
            q._released = True
        self.queues = []
        self._names = {}
        reset_events = getattr(self, "_reset_event_ids", None)   # the event-id state, where kept
        if reset_events is not None:
            reset_events()
        self._destroyed = True
        self.core.log_call("TPipe::Destroy", ())

    def reset(self) -> None:
        """``Reset()``: release the resources and return to the initial state in one call
        (TPipe/Reset.md): :meth:`destroy` then :meth:`init`."""
        self.destroy()
        self._destroyed = False
        self.core.log_call("TPipe::Reset", ())

    def _need_alive(self, what: str) -> None:
        if getattr(self, "_destroyed", False):
            raise QueueError(f"{what} on a destroyed TPipe: call init() (TPipe/Init.md) before giving out buffers again")

    def _allocator_for(self, position: str) -> UbAllocator:
        """The allocator of the buffer ``position`` lives in, or a QueueError when this core has
        no such buffer (a vector core has no L1/L0; the 910B's cube core has no UB)."""
        buffer = BUFFER_OF_POSITION[position]
        allocator = self.allocators.get(buffer)
        if allocator is None:
            have = ", ".join(self.allocators)
            raise QueueError(
                f"TPosition::{position} lives in {buffer}, which this core does not have (it has {have}). "
                "On the 910B the cube core (AIC) has L1/L0A/L0B/L0C and the vector core (AIV) the UB: "
                "launch a cube kernel (npu_kernel(core_type='cube')) for A1/B1/A2/B2/CO1, a vector one for "
                "VECIN/VECOUT/VECCALC (docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md)")
        return allocator
