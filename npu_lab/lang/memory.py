"""Unified Buffer management: the allocator, ``TPipe``, ``TQue`` and ``TBuf`` (DESIGN.md §4.1).

A ``TQue`` has a position that fixes who produces and who consumes its buffers:

=========  =========  =========
position   producer   consumer
=========  =========  =========
VECIN      MTE2       V (or S)
VECOUT     V (or S)   MTE3
=========  =========  =========

``alloc_tensor`` takes the next slot; the producer pipe's next instruction waits until the
slot's previous user freed it. ``enque`` sets a flag producer→consumer; ``deque`` waits on it;
``free_tensor`` sets a flag consumer→producer. With two slots the load of tile i+1 can run while
tile i is computed *because of these rules*; nothing discounts the time.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..sim.core import SimulationError
from ..sim.costs import round_up
from .tensor import LocalTensor, UbRegion, as_dtype

QUEUE_PIPES = {"VECIN": ("MTE2", "V"), "VECOUT": ("V", "MTE3")}


class UbOverflowError(MemoryError):
    """Asked for more Unified Buffer than the chip has."""


class UbAllocator:
    """Bump allocator over the core's UB; every buffer is rounded up to 32 bytes."""

    def __init__(self, capacity_bytes: int, block_bytes: int, with_storage: bool):
        self.capacity_bytes = capacity_bytes
        self.block_bytes = block_bytes
        self.with_storage = with_storage
        self.used_bytes = 0
        self.held: list[UbRegion] = []
        # storage is allocated per buffer, lazily: a what-if chip with a huge ub_bytes must not
        # allocate all of it up front (2**36 B per block), only the bytes its buffers hold
        self._storage = with_storage

    @property
    def free_bytes(self) -> int:
        return self.capacity_bytes - self.used_bytes

    def alloc(self, nbytes: int, name: str) -> UbRegion:
        if not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
            raise ValueError(f"UB buffer '{name}' must have a positive whole number of bytes, got {nbytes!r}")
        size = round_up(int(nbytes), self.block_bytes)
        if size > self.free_bytes:
            held = ", ".join(f"{r.name}={r.nbytes} B" for r in self.held) or "none"
            raise UbOverflowError(
                f"UB overflow: buffer '{name}' needs {size} bytes ({nbytes} rounded up to "
                f"{self.block_bytes}-byte blocks) but only {self.free_bytes} of "
                f"{self.capacity_bytes} bytes are left; already held: {held}. Use a smaller tile "
                "or fewer buffers.")
        storage = np.zeros(size, np.uint8) if self._storage else None
        region = UbRegion(name, self.used_bytes, size, storage)
        self.used_bytes += size
        self.held.append(region)
        return region


class TBuf:
    """A scratch buffer with no queue semantics (``TBuf<VECCALC>``): the kernel syncs by hand."""

    def __init__(self, region: UbRegion):
        self.region = region

    def get(self, dtype, count: int | None = None) -> LocalTensor:
        return LocalTensor(self.region, dtype, 0, count)


class _Slot:
    __slots__ = ("region", "freed_at", "in_use")

    def __init__(self, region: UbRegion):
        self.region = region
        self.freed_at = 0.0
        self.in_use = False


class TQue:
    """A queue of ``num_buffers`` equal UB slots between a producer and a consumer pipe."""

    def __init__(self, core, position: str, name: str, regions: list[UbRegion],
                 producer: str, consumer: str):
        self.core = core
        self.position = position
        self.name = name
        self.producer = producer
        self.consumer = consumer
        self._slots = [_Slot(r) for r in regions]
        self._next = 0
        self._ready: deque = deque()   # (tensor, slot, time the producer finished)
        self._out: dict[int, _Slot] = {}

    @property
    def num_buffers(self) -> int:
        return len(self._slots)

    def alloc_tensor(self, dtype, count: int | None = None) -> LocalTensor:
        slot = self._slots[self._next]
        if slot.in_use:
            raise SimulationError(
                f"queue '{self.name}': alloc_tensor with all {self.num_buffers} buffer(s) in use; "
                "on the device this waits forever. free_tensor the tensor you are done with first.")
        self._next = (self._next + 1) % len(self._slots)
        slot.in_use = True
        # the producer may not overwrite the slot before its previous consumer released it
        self.core.wait_until(self.producer, slot.freed_at)
        tensor = LocalTensor(slot.region, dtype, 0, count)
        self._out[id(slot.region)] = slot
        return tensor

    def enque(self, tensor: LocalTensor) -> None:
        slot = self._slot_of(tensor, "enque")
        self._ready.append((tensor, slot, self.core.free[self.producer]))

    def deque(self) -> LocalTensor:
        if not self._ready:
            raise SimulationError(f"queue '{self.name}': deque with nothing enqueued; on the device "
                                  "this waits forever. enque a tensor first.")
        tensor, _slot, produced_at = self._ready.popleft()
        self.core.wait_until(self.consumer, produced_at)
        return tensor

    def free_tensor(self, tensor: LocalTensor) -> None:
        slot = self._slot_of(tensor, "free_tensor")
        slot.freed_at = self.core.free[self.consumer]
        slot.in_use = False

    def _slot_of(self, tensor: LocalTensor, what: str) -> _Slot:
        slot = self._out.get(id(tensor.region))
        if slot is None or not slot.in_use:
            raise SimulationError(f"queue '{self.name}': {what} of a tensor that was not allocated "
                                  f"from this queue (or was already freed): {tensor!r}")
        return slot


class TPipe:
    """Carves UB into queues and scratch buffers for one block."""

    def __init__(self, core, allocator: UbAllocator):
        self.core = core
        self.allocator = allocator
        self.queues: list[TQue] = []

    def init_queue(self, position: str, num_buffers: int, nbytes: int, name: str,
                   consumer: str | None = None, producer: str | None = None) -> TQue:
        """``num_buffers`` slots of ``nbytes`` each. ``consumer`` (VECIN) or ``producer``
        (VECOUT) may be ``"S"`` when the scalar unit works on the data."""
        if position not in QUEUE_PIPES:
            raise ValueError(f"queue position must be one of {sorted(QUEUE_PIPES)}, got {position!r}")
        if not isinstance(num_buffers, int) or not 1 <= num_buffers <= 8:
            raise ValueError(f"num_buffers must be an int from 1 to 8 (2 = double buffering), got {num_buffers!r}")
        default_producer, default_consumer = QUEUE_PIPES[position]
        regions = [self.allocator.alloc(nbytes, f"{name}[{i}]" if num_buffers > 1 else name)
                   for i in range(num_buffers)]
        queue = TQue(self.core, position, name, regions, producer or default_producer,
                     consumer or default_consumer)
        self.queues.append(queue)
        return queue

    def init_tbuf(self, nbytes: int, name: str) -> TBuf:
        return TBuf(self.allocator.alloc(nbytes, name))

    def alloc_local(self, dtype, count: int, name: str) -> LocalTensor:
        """A plain UB tensor of ``count`` elements (no queue)."""
        dt = as_dtype(dtype)
        return LocalTensor(self.allocator.alloc(count * dt.itemsize, name), dt, 0, count)
