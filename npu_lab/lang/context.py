"""The device as a kernel sees it: ``ctx`` is passed into every kernel (the GPU-Puzzles trick),
so the same kernel text yields numbers (full run) and time (always).

Ascend C name → here:  ``GetBlockIdx`` → ``ctx.get_block_idx()``, ``SetFlag/WaitFlag`` →
``ctx.set_flag/ctx.wait_flag``, ``PipeBarrier<PIPE_ALL>`` → ``ctx.pipe_barrier()``,
``TPipe`` → ``ctx.pipe``, ``DataCopy`` → ``ctx.data_copy``, vector instructions →
``ctx.add``, ``ctx.exp``, ... (see :mod:`npu_lab.lang.vector`).
"""

from __future__ import annotations

from ..hardware import HardwareSpec
from ..sim.core import CUBE_PIPES, VECTOR_PIPES, CoreState, SimulationError
from ..sim.costs import dma_cycles, scalar_cycles
from .memory import TPipe, UbAllocator
from .tensor import GlobalTensor, LocalTensor
from .loop import LoopOps
from .vector import VectorOps


class RaceError(SimulationError):
    """An instruction touched UB data another pipe had not finished with (a missing sync)."""


class KernelContext(VectorOps, LoopOps):
    """One block's view of its core. Created by :func:`npu_lab.launch`; kernels only use it."""

    def __init__(self, hw: HardwareSpec, block_idx: int, block_dim: int, *, core_type: str = "vector",
                 timing_only: bool = False, dma_bytes_per_cycle: float | None = None):
        self.hw = hw
        self._block_idx = block_idx
        self._block_dim = block_dim
        self.core_type = core_type
        self.timing_only = timing_only
        pipes = VECTOR_PIPES if core_type == "vector" else CUBE_PIPES
        self.core = CoreState(pipes, hw.scalar_issue_cycles)
        capacity = hw.ub_bytes if core_type == "vector" else hw.l1_bytes
        self.ub = UbAllocator(capacity, hw.block_bytes, with_storage=not timing_only)
        self.pipe = TPipe(self.core, self.ub)
        self.dma_bytes_per_cycle = dma_bytes_per_cycle or hw.bytes_per_cycle(hw.core_dma_bandwidth_gbps)

    # ---- where am I ---------------------------------------------------------------------
    def get_block_idx(self) -> int:
        return self._block_idx

    def get_block_num(self) -> int:
        return self._block_dim

    # ---- synchronisation ----------------------------------------------------------------
    def set_flag(self, src: str, dst: str) -> None:
        """Record that everything issued so far on ``src`` must finish before ``dst`` waits."""
        self.core.set_flag(src, dst)

    def wait_flag(self, src: str, dst: str) -> None:
        """``dst``'s next instruction (the scalar unit itself when dst is ``S``) waits for the
        oldest unmatched ``set_flag(src, dst)``."""
        self.core.wait_flag(src, dst)

    def pipe_barrier(self, pipe: str = "ALL") -> None:
        self.core.pipe_barrier(pipe)

    # ---- the one place an instruction is issued -----------------------------------------
    def _exec(self, pipe: str, name: str, cost_cycles: float, reads=(), writes=(),
              nbytes: int = 0, elements: int = 0) -> tuple[float, float]:
        start, end = self.core.issue(pipe, name, cost_cycles, nbytes=nbytes, elements=elements)
        for t in reads:
            if isinstance(t, LocalTensor):
                r = t.region
                lo, hi = t.byte_range
                hit = r.conflict(r.writes, lo, hi, start, pipe)
                if hit:
                    self._race(name, pipe, start, t, f"{hit[1]} is still writing it until {hit[0]:.0f}")
                r.record_read(lo, hi, end, pipe)
        for t in writes:
            if isinstance(t, LocalTensor):
                r = t.region
                lo, hi = t.byte_range
                hit = r.conflict(r.reads, lo, hi, start, pipe)
                if hit:
                    self._race(name, pipe, start, t, f"{hit[1]} is still reading it until {hit[0]:.0f}")
                hit = r.conflict(r.writes, lo, hi, start, pipe)
                if hit:
                    self._race(name, pipe, start, t, f"{hit[1]} is still writing it until {hit[0]:.0f}")
                r.record_write(lo, hi, end, pipe)
        return start, end

    def _race(self, name, pipe, start, tensor, why):
        raise RaceError(
            f"race on UB buffer '{tensor.name}': {name} on pipe {pipe} starts at cycle {start:.0f} "
            f"but {why}. Add the missing sync (enque/deque through a TQue, or set_flag/wait_flag "
            "between the two pipes).")

    # ---- DMA ----------------------------------------------------------------------------
    def data_copy(self, dst, src, count: int | None = None) -> None:
        """``DataCopy``: GM→UB on MTE2 or UB→GM on MTE3; ``count`` elements (default: all of
        ``src``). Costs ``dma_latency + bytes/bandwidth`` with bytes rounded up to 32-B blocks."""
        if isinstance(dst, LocalTensor) and isinstance(src, GlobalTensor):
            pipe, gm, local, direction = "MTE2", src, dst, "GM->UB"
        elif isinstance(dst, GlobalTensor) and isinstance(src, LocalTensor):
            pipe, gm, local, direction = "MTE3", dst, src, "UB->GM"
        else:
            raise TypeError("data_copy moves GlobalTensor -> LocalTensor (MTE2) or LocalTensor -> "
                            f"GlobalTensor (MTE3); got {type(src).__name__} -> {type(dst).__name__}")
        if dst.dtype != src.dtype:
            raise TypeError(f"data_copy does not convert: {src.dtype.name} -> {dst.dtype.name}; "
                            "copy as is, then use ctx.cast on the vector unit")
        if count is None:
            count = src.count if isinstance(src, LocalTensor) else src.size
        count = int(count)
        limit = min(local.count, gm.size)
        if count < 1 or count > limit:
            raise ValueError(f"data_copy of {count} elements between '{local.name}' ({local.count}) and "
                             f"'{gm.name}' ({gm.size}): count must be 1..{limit}")
        nbytes = count * dst.dtype.itemsize
        cost = dma_cycles(self.hw, nbytes, self.dma_bytes_per_cycle)
        reads, writes = ((), (dst,)) if pipe == "MTE2" else ((src,), ())
        self._exec(pipe, f"DataCopy {direction} {nbytes} B", cost, reads, writes, nbytes=nbytes, elements=count)
        if pipe == "MTE2":
            self.core.hbm_read_bytes += nbytes
        else:
            self.core.hbm_write_bytes += nbytes
        if not self.timing_only:
            dst.data[:count] = src.data[:count]

    # ---- scalar -------------------------------------------------------------------------
    def scalar(self, name: str, *, ops: int = 0, ub_reads: int = 0, ub_writes: int = 0,
               exps: int = 0, reads=(), writes=(), compute=None):
        """Scalar-unit work counted in operations: ``ops`` register ops, ``ub_reads`` /
        ``ub_writes`` scalar UB accesses and ``exps`` software exponentials. The counts must not
        depend on data values (charge the branchless version). ``compute()`` does the
        arithmetic in a full run only, and its result is returned."""
        for n, label in ((ops, "ops"), (ub_reads, "ub_reads"), (ub_writes, "ub_writes"), (exps, "exps")):
            if n < 0:
                raise ValueError(f"scalar {label} must be >= 0, got {n}")
        cost = scalar_cycles(self.hw, ops, ub_reads + ub_writes, exps)
        self._exec("S", name, cost, reads, writes, elements=ub_reads + ub_writes)
        if compute is not None and not self.timing_only:
            return compute()
        return None

    def get_value(self, tensor: LocalTensor, index: int):
        """``GetValue``: one scalar UB read (0 in a timing-only run — never branch on it)."""
        self._check_index(tensor, index)
        self._exec("S", "GetValue", scalar_cycles(self.hw, 0, 1), reads=(tensor,), elements=1)
        return 0 if self.timing_only else tensor.data[index].item()

    def set_value(self, tensor: LocalTensor, index: int, value) -> None:
        """``SetValue``: one scalar UB write."""
        self._check_index(tensor, index)
        self._exec("S", "SetValue", scalar_cycles(self.hw, 0, 1), writes=(tensor,), elements=1)
        if not self.timing_only:
            tensor.data[index] = value

    @staticmethod
    def _check_index(tensor: LocalTensor, index: int) -> None:
        if not 0 <= index < tensor.count:
            raise IndexError(f"index {index} outside '{tensor.name}' (0..{tensor.count - 1})")
