"""On-device debugging: ``printf``, ``assert`` and ``DumpTensor`` (pipe S), as a kernel uses them.

Sources: asc-devkit docs/zh/api/Utils-API/调测接口/printf.md, docs/zh/api/SIMD-API/基础API/
调试接口/异常检测/assert.md and 调试接口/上板打印/DumpTensor.md.

* ``ctx.printf(fmt, *args)`` — ``AscendC::printf``: C conversions %d %i %u %x %f %s %p (the
  page's list), formatted with Python's ``%`` operator.
* ``ctx.ascendc_assert(expr, fmt="", *args)`` — ``assert(expr[, fmt, args...])``: when ``expr`` is
  false the condition and the message are printed and the kernel stops (here: a
  :class:`KernelAssertionError`).
* ``ctx.dump_tensor(tensor, desc, dump_size)`` — ``DumpTensor``: the first ``dump_size`` elements
  of a UB or GM tensor, headed like the page's sample ("DumpTensor: desc=5, addr=0,
  data_type=float16, position=UB, dump_size=32"); it waits for every pipe first (PIPE_ALL), as
  the implementation does.

They print (and record in ``ctx.debug_log``) only in a **full run**, each line prefixed with the
block index ("[Block 3] ..."), since a timing-only run has no data to print or test. The time is
charged in both runs, so timing-only still equals full: the pages say only that these calls
"会对算子性能产生一定影响", so the model charges them as scalar work, **assumed**: 10 scalar ops
for printf / assert, plus one scalar UB read per element DumpTensor prints.
"""

from __future__ import annotations

import numbers
import re

import numpy as np

from .errors import SimulationError
from .tensor import GlobalTensor, LocalTensor

#: C conversions the pages list (flags, width and precision allowed; length modifiers l / ll dropped)
_CONVERSION = re.compile(r"%(?P<spec>[-+ #0]*\d*(?:\.\d+)?)(?P<len>l{0,2})(?P<conv>[diuxXfFsp%])")
#: assumed scalar cost of formatting one message (the pages publish none)
PRINT_OPS = 10


class KernelAssertionError(SimulationError):
    """An ``assert`` in the kernel failed (the device stops the kernel and prints the message)."""


def _c_format(fmt: str, args: tuple) -> str:
    """``fmt`` with its C conversions filled from ``args``, or a TypeError naming the mismatch."""
    if not isinstance(fmt, str):
        raise TypeError(f"printf's format is a string, got {type(fmt).__name__}")
    values = list(args)
    out, last = [], 0
    for m in _CONVERSION.finditer(fmt):
        out.append(fmt[last:m.start()])
        last = m.end()
        conv = m.group("conv")
        if conv == "%":
            out.append("%")
            continue
        if not values:
            raise TypeError(f"printf format {fmt!r} has more conversions than arguments ({len(args)})")
        v = values.pop(0)
        if isinstance(v, np.generic):
            v = v.item()
        spec = m.group("spec")
        if conv in "diux":
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError(f"printf %{conv} takes an integer, got {v!r}")
            v = int(v)
            if conv == "u" and v < 0:
                v &= 2**64 - 1                                  # the uint64 it is on the device
            out.append(("%" + spec + ("d" if conv in "diu" else "x")) % v)
        elif conv in "xX":
            out.append(("%" + spec + conv) % int(v))
        elif conv in "fF":
            if not isinstance(v, numbers.Real):
                raise TypeError(f"printf %f takes a number, got {v!r}")
            out.append(("%" + spec + "f") % float(v))
        elif conv == "s":
            out.append(("%" + spec + "s") % (v,))
        else:                                                   # %p
            out.append(f"{getattr(v, 'name', v)!s}")
    if values:
        raise TypeError(f"printf format {fmt!r} has {len(args) - len(values)} conversion(s) but {len(args)} "
                        "argument(s)")
    out.append(fmt[last:])
    return "".join(out)


class DebugOps:
    """Mixed into :class:`~npu_lab.lang.context.KernelContext`."""

    def _emit(self, text: str) -> None:
        line = f"[Block {self.get_block_idx()}] {text}"
        log = self.__dict__.setdefault("debug_log", [])
        log.append(line)
        print(line)

    def printf(self, fmt: str, *args) -> None:
        """``AscendC::printf(fmt, args...)``: see the module docstring (full runs print)."""
        text = _c_format(fmt, args)          # checked in both runs: a bad format fails the same way
        self.scalar("printf", ops=PRINT_OPS)
        if not self.timing_only:
            self._emit(text)

    def ascendc_assert(self, expr, fmt: str = "", *args) -> None:
        """``assert(expr)`` / ``assert(expr, fmt, args...)``: stop the kernel when ``expr`` is
        false, printing the condition's message. Checked in full runs only (a timing-only run
        has no data, so a condition on loaded values means nothing there)."""
        message = _c_format(fmt, args) if fmt else ""
        self.scalar("assert", ops=PRINT_OPS)
        if self.timing_only or bool(expr):
            return
        self._emit(f"assert failed: {message}" if message else "assert failed")
        raise KernelAssertionError(f"block {self.get_block_idx()}: assert failed in the kernel"
                                   + (f": {message}" if message else "")
                                   + " (调试接口/异常检测/assert.md: the device stops the kernel here)")

    def dump_tensor(self, tensor, desc: int, dump_size: int) -> None:
        """``DumpTensor(tensor, desc, dumpSize)``: print the first ``dump_size`` elements of a UB
        (LocalTensor) or GM (GlobalTensor) tensor with the page's header line."""
        if not isinstance(tensor, (LocalTensor, GlobalTensor)):
            raise TypeError(f"dump_tensor takes a LocalTensor or GlobalTensor, got {type(tensor).__name__}")
        for name, v, hi in (("desc", desc, 2**32 - 1), ("dump_size", dump_size, 2**32 - 1)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not 0 <= v <= hi:
                raise ValueError(f"DumpTensor {name} is a uint32, got {v!r}")
        local = isinstance(tensor, LocalTensor)
        size = tensor.count if local else tensor.size
        if dump_size > size:
            raise ValueError(f"DumpTensor of {dump_size} elements, but '{tensor.name}' has {size} from its address")
        # the dump first waits for every pipe: asc-devkit impl/utils/debug/asc_aicore_dump_impl.h
        # calls sync_all() = pipe_barrier(PIPE_ALL) (npu_arch_2201/asc_debug_utils_impl.h)
        self.core.pipe_barrier("ALL")
        if local:
            lo = tensor.byte_offset
            self.scalar("DumpTensor", ops=PRINT_OPS, ub_reads=int(dump_size),
                        reads=[(tensor, lo, lo + dump_size * tensor.dtype.itemsize)])
        else:
            self.scalar("DumpTensor", ops=PRINT_OPS)
        if self.timing_only:
            return
        addr = tensor.byte_offset if local else tensor.address_bytes
        self._emit(f"DumpTensor: desc={int(desc)}, addr={addr:#x}, data_type={tensor.dtype.name}, "
                   f"position={'UB' if local else 'GM'}, dump_size={int(dump_size)}")
        self._emit(np.array2string(tensor.data[:dump_size], max_line_width=120, threshold=10**6))
