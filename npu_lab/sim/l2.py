"""The L2 cache between launches: data one launch wrote is read back by the next from L2.

Source: the vendor's performance guide, asc-devkit docs/zh/guide/算子实践参考/SIMD算子性能优化/
内存访问/L2-Cache切分.md ("L2 Cache大小为192MB，L2 Cache读写混合带宽约为7TB/s，而GM的带宽约为
1.6TB/s"; data that misses L2 is read from GM) and 内存访问/设置合理的L2-CacheMode.md (MTE2 reads and
MTE3 / FixPipe writes go through L2 in the default CACHE_MODE_NORMAL; when the data exceeds L2,
old lines are replaced — written back to GM first).

The model (docs/cost_model_system.md says what it leaves out):

* The unit is a whole GM *buffer* (:class:`~npu_lab.lang.tensor.GmBuffer`, the allocation a
  GlobalTensor and its views point into), not a cache line. A launch that reads or writes any
  part of a buffer is taken to touch all of it.
* :class:`L2Cache` is the chip's L2 across a sequence of launches: an LRU list of buffers of at
  most ``hw.l2_bytes``. After each launch the buffers it read, then those it wrote, become the
  most recent; the least recent are evicted until the rest fit. A buffer larger than the whole
  L2 does not stay and flushes everything older (an LRU cache streamed through by a sequential
  scan larger than itself keeps nothing of the scan).
* During a launch, a GM *read* of a buffer that was resident when the launch started is an L2
  hit: it moves at the core's share of the L2 bandwidth and does not count as HBM traffic (nor
  against the HBM roofline). Everything else — inputs the host wrote, buffers evicted, data this
  same launch wrote — is read from HBM.
* *Writes* are priced at the HBM share, as before, and counted as HBM bytes: written lines are
  written back to HBM sooner or later, so every written byte crosses HBM once. (A write that
  stays in L2 would be faster than that; the model is conservative there.)
* A launch without an L2Cache (``launch(..., l2=None)``, a single kernel) starts with a cold L2:
  every read comes from HBM, exactly the model before L2 existed.
* **Within a launch** (issue 17 §5, ``L2Cache(hw, share_within_launch=True)``): the bytes a copy
  of this launch already read or wrote stay in L2 for the rest of the launch, so a later read of
  exactly those bytes — another core reading the same B tile, the vector cores of a mixed kernel
  reading the workspace the cube just wrote — is an L2 hit. Tracked by byte ranges (each copy's
  rows: first byte, stride, row length, rows), not whole buffers, and only while the launch's
  footprint fits in L2 (past ``l2_bytes`` nothing more is shared: an LRU streamed through keeps
  nothing of the stream). Simplifications: blocks are simulated one after another, so the first
  reader in block order misses and every later one hits, although on the chip neighbouring cores
  read at about the same time (then both may miss, or one waits on the other's fill): the
  figure is the most sharing can give, an upper bound. The launch simulates every block (no
  ``block_classes`` replication) and runs every loop iteration (no fast-forward), since a block's
  hits depend on what the blocks before it read.

Everything depends on buffer sizes and launch order only, never on data, so a timing-only run
routes every copy exactly as a full run does.
"""

from __future__ import annotations

from collections import OrderedDict

from ..hardware import HardwareSpec


def core_bytes_per_cycle(hw: HardwareSpec, active_cores: int) -> tuple[float, float]:
    """(HBM, L2) bytes per cycle one core's DMA gets while ``active_cores`` cores stream at once:
    ``min(the core's DMA peak, chip bandwidth / active cores)`` for each (the static share,
    docs/cost_model.md; :mod:`npu_lab.sim.hbm_share` measures how far that is from a dynamic one)."""
    if isinstance(active_cores, bool) or not isinstance(active_cores, int) or active_cores < 1:
        raise ValueError(f"active_cores must be a whole number >= 1 (cores streaming at once), got {active_cores!r}")
    hbm_gbps = min(hw.core_dma_bandwidth_gbps, hw.hbm_bandwidth_gbps / active_cores)
    l2_gbps = min(hw.core_dma_bandwidth_gbps, hw.l2_bandwidth_gbps / active_cores)
    return hw.bytes_per_cycle(hbm_gbps), hw.bytes_per_cycle(l2_gbps)


class L2Cache:
    """The chip's L2 across launches: which GM buffers it holds, least recent first.

    Create one per sequence of launches on one chip and pass it to every
    :func:`npu_lab.launch` of the sequence (``l2=cache``); the launches update it."""

    def __init__(self, hw: HardwareSpec, share_within_launch: bool = False):
        if not isinstance(hw, HardwareSpec):
            raise TypeError(f"L2Cache needs the chip's HardwareSpec (for l2_bytes), got {type(hw).__name__}")
        if not isinstance(share_within_launch, bool):
            raise TypeError(f"share_within_launch is True or False, got {share_within_launch!r}")
        self.hw = hw
        #: a launch's reads of bytes it already touched are L2 hits (module docstring)
        self.share_within_launch = share_within_launch
        self.capacity_bytes = int(hw.l2_bytes)
        self._lru: OrderedDict = OrderedDict()     # GmBuffer -> bytes, least recent first

    def holds(self, buffer) -> bool:
        """Whether ``buffer`` (a GmBuffer) is resident now."""
        return buffer in self._lru

    def resident_buffers(self) -> frozenset:
        """The GmBuffers resident now (what a launch starting now reads from L2)."""
        return frozenset(self._lru)

    @property
    def resident_bytes(self) -> int:
        return sum(self._lru.values())

    def contents(self) -> list[tuple[str, int]]:
        """(buffer name, bytes) of every resident buffer, least recent first."""
        return [(b.name, n) for b, n in self._lru.items()]

    def touch(self, buffers) -> None:
        """Make ``buffers`` (GmBuffers, in access order) the most recent; evict the least recent
        until the rest fit. A buffer larger than the L2 flushes it and does not stay."""
        for buf in buffers:
            self._lru.pop(buf, None)
            if buf.nbytes > self.capacity_bytes:
                self._lru.clear()
                continue
            self._lru[buf] = buf.nbytes
        while self._lru and self.resident_bytes > self.capacity_bytes:
            self._lru.popitem(last=False)

    def __repr__(self) -> str:
        used = self.resident_bytes
        return (f"L2Cache({self.hw.name}: {len(self._lru)} buffer(s), {used:,} of "
                f"{self.capacity_bytes:,} B)")


class GmRouter:
    """One launch's routing of GM copies: L2 for reads of buffers resident when the launch
    started, HBM for the rest. Records the buffers the launch touches (for :meth:`L2Cache.touch`)."""

    def __init__(self, hbm_bytes_per_cycle: float, l2_bytes_per_cycle: float, resident=frozenset(), *,
                 share_within_launch: bool = False, l2_bytes: int = 0):
        self.hbm_bytes_per_cycle = float(hbm_bytes_per_cycle)
        self.l2_bytes_per_cycle = float(l2_bytes_per_cycle)
        self.resident = frozenset(resident)
        self.read: dict = {}        # GmBuffer -> None, in first-touch order (an ordered set)
        self.written: dict = {}
        self.l2_hits: dict = {}     # buffers read from L2
        self.share = bool(share_within_launch)
        self.l2_bytes = int(l2_bytes)
        self.touched_ranges: dict = {}   # GmBuffer -> (starts, ends): merged byte ranges this launch touched
        self.footprint_bytes = 0
        self.shared_hit_bytes = 0        # bytes read from L2 because this launch touched them before

    def route(self, buffer, pipe: str, rows=None) -> tuple[float, bool]:
        """(bytes per cycle, whether the copy touches HBM) of a copy of ``buffer`` on ``pipe``
        (MTE2 reads GM, MTE3 / FIX write it). ``rows`` = (first byte, stride, row bytes, rows) of the
        copy in the buffer: with within-launch sharing, a read of bytes the launch touched is a hit."""
        if pipe == "MTE2":
            self.read.setdefault(buffer, None)
            if buffer in self.resident:
                self.l2_hits.setdefault(buffer, None)
                return self.l2_bytes_per_cycle, False
            if self.share and rows is not None:
                hit = self._covered(buffer, rows)
                self._touch(buffer, rows)
                if hit:
                    self.l2_hits.setdefault(buffer, None)
                    self.shared_hit_bytes += rows[2] * rows[3]
                    return self.l2_bytes_per_cycle, False
        else:
            self.written.setdefault(buffer, None)
            if self.share and rows is not None:
                self._touch(buffer, rows)
        return self.hbm_bytes_per_cycle, True

    # ---- within-launch ranges (module docstring) -------------------------------------------
    @staticmethod
    def _rows(rows):
        import numpy as np
        lo, step, width, count = rows
        if count <= 1 or step <= width:
            return np.array([lo], dtype=np.int64), np.array([lo + max(0, count - 1) * step + width], dtype=np.int64)
        starts = lo + step * np.arange(count, dtype=np.int64)
        return starts, starts + width

    def _covered(self, buffer, rows) -> bool:
        import numpy as np
        got = self.touched_ranges.get(buffer)
        if got is None:
            return False
        s, e = got
        rs, re_ = self._rows(rows)
        i = np.searchsorted(s, rs, side="right") - 1        # the range starting at or before each row
        ok = i >= 0
        return bool(ok.all() and (e[i] >= re_).all())

    def _touch(self, buffer, rows) -> None:
        import numpy as np
        if self.footprint_bytes > self.l2_bytes:
            return                                          # past L2's size nothing more is kept
        rs, re_ = self._rows(rows)
        got = self.touched_ranges.get(buffer)
        if got is not None:
            rs, re_ = np.concatenate([got[0], rs]), np.concatenate([got[1], re_])
        order = np.argsort(rs, kind="stable")
        rs, re_ = rs[order], re_[order]
        reach = np.maximum.accumulate(re_)
        new = np.ones(len(rs), dtype=bool)
        new[1:] = rs[1:] > reach[:-1]                       # a gap before this range: a new merged one
        idx = np.flatnonzero(new)
        starts = rs[idx]
        ends = np.maximum.reduceat(re_, idx)
        old = int((got[1] - got[0]).sum()) if got is not None else 0
        self.footprint_bytes += int((ends - starts).sum()) - old
        self.touched_ranges[buffer] = (starts, ends)

    def touched(self) -> list:
        """Buffers the launch touched, for the LRU: those only read first, then those written."""
        return [b for b in self.read if b not in self.written] + list(self.written)


def gm_bytes_per_cycle(ctx, gm, pipe: str, rows=None) -> tuple[float, bool]:
    """The hook :class:`~npu_lab.lang.dma.DmaOps` calls for every copy: (bytes per cycle, whether
    the bytes count as HBM traffic) of a copy between GlobalTensor ``gm`` and UB on ``pipe``;
    ``rows`` (first byte, stride, row bytes, rows) for within-launch sharing.
    Without a router (a context made by hand) every copy goes to HBM at the context's rate."""
    router = getattr(ctx, "gm_router", None)
    if router is None or gm is None:
        return ctx.dma_bytes_per_cycle, True
    return router.route(gm.buffer, pipe, rows)
