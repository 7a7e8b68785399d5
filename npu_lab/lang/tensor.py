"""Tensors a kernel sees: ``GlobalTensor`` (HBM) and ``LocalTensor`` (a piece of Unified Buffer).

As in Ascend C, a tensor is an address plus a dtype: ``tensor[offset]`` is the tensor that starts
``offset`` elements further on (``operator[]``), and instructions take an element ``count`` — there
are no slices. ``local.reinterpret_cast(np.int32)`` sees the same bytes as another dtype
(``ReinterpretCast<T>()``); ``local.get_value(i)`` / ``local.set_value(i, v)`` are the scalar
unit's UB reads and writes (``GetValue`` / ``SetValue``), charged to pipe S.

Sources: asc-devkit docs/zh/api/SIMD-API/基础API/数据结构/LocalTensor/ and .../GlobalTensor/.

In a full run both kinds hold numpy data; in a timing-only run they hold only shape and dtype
(``data is None``) and instructions skip the arithmetic. Fresh UB is filled with 0xFF bytes (NaN
as float, -1 as int): real UB holds whatever was there before, so a kernel that reads bytes it
never wrote computes garbage here too instead of a lucky zero.
"""

from __future__ import annotations

import math
import numbers
import os
import sys

import numpy as np

#: ``bfloat16_t``: numpy has no bfloat16, so a bfloat16 tensor is stored as uint16 bits
#: (:func:`float_to_bfloat16` / :func:`bfloat16_to_float` convert, round to nearest even).
BFLOAT16_STORAGE = np.dtype(np.uint16)


def float_to_bfloat16(x) -> np.ndarray:
    """float32 (or anything numpy turns into it) -> bfloat16 bits as uint16, rounding to nearest
    even as the hardware's float -> bfloat16 CAST_RINT does (NaN stays a quiet NaN). The upper 16
    bits of a float32 are a bfloat16: add 0x7FFF plus the kept part's last bit, then truncate."""
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"float_to_bfloat16 takes real numbers (float, int), got {a.dtype}; bfloat16 bits are "
                        "uint16 — pass values, not bits (bfloat16_to_float reads bits)")
    if a.dtype == np.uint16:
        raise TypeError("float_to_bfloat16 got uint16: that is how bfloat16 bits are stored, so these look like "
                        "bits already; pass float values (or .astype(np.float32) if they are integers)")
    f = np.ascontiguousarray(a.astype(np.float32))
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), ((bits >> 16) | 0x40).astype(np.uint16), rounded)


def bfloat16_to_float(bits) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32, exactly (bfloat16 is float32 with 16 fewer mantissa bits)."""
    b = np.asarray(bits)
    if b.dtype != np.uint16:
        raise TypeError(f"bfloat16 values are stored as uint16 bits; got {b.dtype.name}")
    return (b.astype(np.uint32) << 16).view(np.float32)


SUPPORTED_DTYPES = ("float32", "float16", "int32", "uint8", "int16", "uint16", "uint32", "int8", "uint64")

_CHECKED_DTYPES: dict = {}


#: Largest GlobalTensor a full run allocates (numpy memory on the host, not the chip's HBM).
MAX_FULL_RUN_GM_BYTES = 4 * 2**30


def _check_size(shape, name: str) -> int:
    """Element count of ``shape`` (a whole number or a tuple of them, each >= 0), or a clear error."""
    dims = shape if isinstance(shape, (tuple, list)) else (shape,)
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)) and d >= 0 for d in dims):
        raise ValueError(f"GlobalTensor '{name}': shape must be a whole number >= 0 or a tuple of them; "
                         f"got {shape!r}")
    return math.prod(int(d) for d in dims)


def as_dtype(dtype) -> np.dtype:
    """``np.dtype(dtype)`` if the device model supports it, else a TypeError (cached: every
    tensor view asks)."""
    try:
        return _CHECKED_DTYPES[dtype]
    except (KeyError, TypeError):
        pass
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        raise TypeError(f"dtype {dtype!r} is not a numpy dtype; use one of {SUPPORTED_DTYPES}") from None
    if dt.name not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype {dt.name} is not supported on the device model; use one of {SUPPORTED_DTYPES}")
    try:
        _CHECKED_DTYPES[dtype] = dt
    except TypeError:
        pass
    return dt


def _offset(key, size: int, name: str) -> int:
    """``tensor[offset]``: a whole number of elements inside the tensor (Ascend C has no slices)."""
    if type(key) is int and 0 <= key <= size:      # the common case, without ABC checks
        return key
    if isinstance(key, slice):
        raise TypeError(f"'{name}': Ascend C tensors have no slices. Use {name}[offset] (the tensor "
                        "starting `offset` elements further on) and pass the element count to the "
                        "instruction")
    if isinstance(key, (bool, np.bool_)) or not isinstance(key, numbers.Integral):
        raise TypeError(f"'{name}'[{key!r}]: the offset must be a whole number of elements")
    key = int(key)
    if not 0 <= key <= size:
        raise IndexError(f"'{name}'[{key}] is outside the tensor (0..{size} elements)")
    return key


class GmBuffer:
    """The global-memory allocation a GlobalTensor and all its views (``gm[offset]``) point into:
    its name and size in bytes. Compared by identity, in full and timing-only runs alike, so the
    L2 model (:mod:`npu_lab.sim.l2`) can tell which buffer a copy touches without looking at data."""

    __slots__ = ("name", "nbytes")

    def __init__(self, name: str, nbytes: int):
        self.name = name
        self.nbytes = int(nbytes)

    def __repr__(self) -> str:
        return f"GmBuffer({self.name!r}, {self.nbytes} B)"


#: The npu_lab package folder: code under it is the library (its DMA paths write GM).
_LIBRARY_DIR = os.path.dirname(os.path.dirname(__file__)) + os.sep


class GlobalTensor:
    """A flat tensor in global memory, like Ascend C's ``GlobalTensor<T>``: ``size`` elements of
    ``dtype`` (``GetSize()``), ``gm[offset]`` for a tensor further on. ``.data`` is the numpy
    storage (``None`` in a timing-only run); ``.buffer`` the allocation it points into.

    While a kernel body runs (``kernel_running`` > 0, set by :func:`npu_lab.lang.launch`),
    ``.data`` seen from code outside the npu_lab package (the kernel's own lines) is a read-only
    view: a kernel reaches GM only through its instructions (``DataCopy`` / ``DataCopyPad`` to
    GM write it, as on the device, where a kernel has no other path to HBM), so an output
    written with numpy fails instead of passing a check. The library's own instruction code gets
    the writable view. Deliberately bypassing this (the private ``_base`` array) is not stopped."""

    #: > 0 while a launch runs a kernel body (see the class docstring)
    kernel_running = 0

    def __init__(self, data: np.ndarray | None, size: int, dtype, name: str = "gm", _offset: int = 0,
                 _buffer: GmBuffer | None = None):
        self.dtype = as_dtype(dtype)
        self.size = int(size)
        self.name = name
        self._base = data
        self._offset = _offset
        self.buffer = _buffer if _buffer is not None else GmBuffer(name, (self.size + _offset) * self.dtype.itemsize)

    @classmethod
    def from_array(cls, array: np.ndarray, name: str = "gm", timing_only: bool = False) -> "GlobalTensor":
        array = np.asarray(array)
        dtype = as_dtype(array.dtype)
        if timing_only:
            return cls(None, array.size, dtype, name)
        return cls(np.ascontiguousarray(array).reshape(-1), array.size, dtype, name)

    @classmethod
    def empty(cls, shape, dtype, name: str = "gm", timing_only: bool = False) -> "GlobalTensor":
        size = _check_size(shape, name)
        if not timing_only and size * as_dtype(dtype).itemsize > MAX_FULL_RUN_GM_BYTES:
            raise ValueError(f"GlobalTensor '{name}' of shape {shape!r} needs {size * as_dtype(dtype).itemsize:,} "
                             f"bytes, more than the {MAX_FULL_RUN_GM_BYTES:,} a full (numerical) run may hold; "
                             "use timing_only=True for the timeline alone")
        data = None if timing_only else np.zeros(size, dtype=as_dtype(dtype))
        return cls(data, size, dtype, name)

    @property
    def data(self) -> np.ndarray | None:
        if self._base is None:
            return None
        view = self._base[self._offset:self._offset + self.size]
        if GlobalTensor.kernel_running and not sys._getframe(1).f_code.co_filename.startswith(_LIBRARY_DIR):
            view.flags.writeable = False      # the kernel's own Python: read-only (class docstring)
        return view

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def address_bytes(self) -> int:
        """Byte offset of this view from the start of its buffer (GM alignment checks)."""
        return self._offset * self.dtype.itemsize

    def get_size(self) -> int:
        """``GetSize()``: elements from this address to the end of the buffer."""
        return self.size

    @classmethod
    def of(cls, dtype, name: str = "gm") -> "GlobalTensor":
        """``GlobalTensor<T> xGm;`` — a tensor not yet bound to global memory (size 0): bind it
        with :meth:`set_global_buffer`."""
        return cls(None, 0, dtype, name)

    def set_global_buffer(self, buffer: "GlobalTensor", buffer_size: int | None = None) -> "GlobalTensor":
        """``SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize)``: point this tensor at
        ``buffer`` (a kernel argument, i.e. a GM_ADDR, or a view of one: ``x[block_idx * n]``)
        with ``buffer_size`` elements; without a size ``GetSize()`` is 0 (the page:
        "仅传入全局数据的指针，此时通过GetSize获取到的元素个数为0"). Source:
        docs/zh/api/SIMD-API/基础API/数据结构/GlobalTensor/SetGlobalBuffer.md. The page leaves it to
        the caller that the size stays inside the real data; on a device a larger size reads
        and writes whatever lies beyond, so here it raises. Returns ``self``."""
        if not isinstance(buffer, GlobalTensor):
            raise TypeError(f"set_global_buffer takes the GM address (a GlobalTensor argument of the "
                            f"kernel, or a view of one such as x[offset]); got {type(buffer).__name__}")
        if buffer.dtype != self.dtype:
            raise TypeError(f"set_global_buffer: '{self.name}' is a GlobalTensor<{self.dtype.name}> but the "
                            f"buffer '{buffer.name}' holds {buffer.dtype.name}; C++ casts the pointer "
                            f"((__gm__ {self.dtype.name}*)x): declare the GlobalTensor with that dtype")
        if buffer_size is None:
            size = 0
        elif isinstance(buffer_size, (bool, np.bool_)) or not isinstance(buffer_size, numbers.Integral) \
                or not 0 <= buffer_size < 2**64:
            raise ValueError(f"set_global_buffer bufferSize is a uint64 element count, got {buffer_size!r}")
        elif buffer_size > buffer.size:
            raise ValueError(f"set_global_buffer('{buffer.name}', {buffer_size}): only {buffer.size} elements "
                             f"of {buffer.dtype.name} lie behind that address; a device would let the "
                             "kernel read and write past the data (SetGlobalBuffer.md: 需自行保证不会超出实际"
                             f"数据的长度). Pass at most {buffer.size}")
        else:
            size = int(buffer_size)
        self._base, self._offset, self.buffer, self.size = buffer._base, buffer._offset, buffer.buffer, size
        if self.name == "gm":
            self.name = buffer.name
        return self

    def __getitem__(self, key) -> "GlobalTensor":
        off = _offset(key, self.size, self.name)
        return GlobalTensor(self._base, self.size - off, self.dtype, self.name, self._offset + off, self.buffer)

    def __repr__(self) -> str:
        return f"GlobalTensor({self.name}, {self.size} x {self.dtype.name}, offset {self._offset})"


class UbRegion:
    """A 32-byte aligned piece of Unified Buffer and its access records, per byte range:

    * ``hb_writes`` / ``hb_reads``: the race detector's records ``(lo, hi, pipe index, pipe count,
      instruction, (file, line), completion cycle)`` — the last accesses of each range that later
      accesses must be ordered after (happens-before, :mod:`npu_lab.sim.core`);
    * ``writes``: timing only — vector writes ``(lo, hi, completion cycle, "V")`` a later vector
      read waits for (auto-sync; :mod:`npu_lab.lang.loop` shifts them when it fast-forwards).

    Ranges are tracked separately, so two halves of one buffer can be used by two pipes at once (a
    manual ping-pong). ``freed`` is set when its queue slot is released: a tensor used after
    ``FreeTensor`` raises."""

    __slots__ = ("name", "offset_bytes", "nbytes", "storage", "writes", "hb_writes", "hb_reads", "ctx",
                 "freed", "views")

    def __init__(self, name: str, offset_bytes: int, nbytes: int, storage: np.ndarray | None, ctx=None):
        self.name = name
        self.offset_bytes = offset_bytes
        self.nbytes = nbytes
        self.storage = storage  # uint8 bytes, or None in timing-only runs
        self.writes: list[tuple[int, int, float, str]] = []   # in-flight vector writes (timing)
        self.hb_writes: list[tuple] = []
        self.hb_reads: list[tuple] = []
        self.ctx = ctx
        self.freed = False
        self.views: dict = {}   # dtype -> the whole storage seen as it (LocalTensor.data slices it)

    def record_read(self, record: tuple) -> None:
        """Keep a read; an older read of the same pipe inside its range is ordered before it (a
        pipe is in order), so anything ordered after this one is ordered after that: forget it."""
        reads = self.hb_reads
        lo, hi, pi = record[0], record[1], record[2]
        for e in reads:
            if e[2] == pi and lo <= e[0] and e[1] <= hi:
                reads = self.hb_reads = [e for e in reads if not (e[2] == pi and lo <= e[0] and e[1] <= hi)]
                break
        reads.append(record)

    def record_write(self, record: tuple, vector_complete: float | None) -> None:
        """Keep a write (``vector_complete``: its completion when it is a vector write, for the
        auto-sync wait). Every access inside its range was checked to be ordered before it, so
        whatever is ordered after it is ordered after them: they are forgotten."""
        lo, hi = record[0], record[1]
        if self.hb_reads:
            self.hb_reads = [e for e in self.hb_reads if not (lo <= e[0] and e[1] <= hi)]
        writes = self.hb_writes
        for e in writes:
            if lo <= e[0] and e[1] <= hi:
                writes = self.hb_writes = [e for e in writes if not (lo <= e[0] and e[1] <= hi)]
                break
        writes.append(record)
        timing = self.writes
        for e in timing:
            if lo <= e[0] and e[1] <= hi:
                timing = self.writes = [e for e in timing if not (lo <= e[0] and e[1] <= hi)]
                break
        if vector_complete is not None:
            timing.append((lo, hi, vector_complete, "V"))


class LocalTensor:
    """``LocalTensor<T>``: ``dtype`` elements from element ``offset`` of a UB region to its end.

    ``t[offset]`` is the tensor further on; ``reinterpret_cast`` the same bytes as another dtype;
    ``get_value`` / ``set_value`` scalar UB access. ``.data`` is the numpy view (None when
    timing-only)."""

    __slots__ = ("region", "dtype", "offset", "count", "_view")

    def __init__(self, region: UbRegion, dtype, offset: int = 0, count: int | None = None):
        self._view = None          # .data, made on first use (a tensor's place never changes)
        self.region = region
        self.dtype = as_dtype(dtype)
        capacity = region.nbytes // self.dtype.itemsize
        self.offset = int(offset)
        self.count = capacity - self.offset if count is None else int(count)
        if self.offset < 0 or self.offset + self.count > capacity:
            raise IndexError(f"view [{offset}:{offset + self.count}] of UB buffer '{region.name}' "
                             f"exceeds its {capacity} {self.dtype.name} elements")

    @property
    def name(self) -> str:
        return self.region.name

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize

    @property
    def byte_offset(self) -> int:
        """Bytes from the start of the region (its UB address minus the region's)."""
        return self.offset * self.dtype.itemsize

    @property
    def ub_address(self) -> int:
        """Byte address in the core's UB (32-byte alignment rules look at this)."""
        return self.region.offset_bytes + self.byte_offset

    @property
    def data(self) -> np.ndarray | None:
        """The numpy view (None in a timing-only run)."""
        view = self._view
        if view is None:
            region = self.region
            if region.storage is None:
                return None
            whole = region.views.get(self.dtype)
            if whole is None:
                whole = region.views[self.dtype] = region.storage.view(self.dtype)
            view = self._view = whole[self.offset:self.offset + self.count]
        return view

    def get_size(self) -> int:
        """``GetSize()``: elements from this address to the end of the buffer."""
        return self.count

    def reinterpret_cast(self, dtype) -> "LocalTensor":
        """``ReinterpretCast<T>()``: the same bytes seen as another dtype."""
        dt = as_dtype(dtype)
        if self.byte_offset % dt.itemsize:
            raise ValueError(f"cannot view byte {self.byte_offset} of '{self.name}' as {dt.name}: "
                             f"the address must be a multiple of {dt.itemsize} bytes")
        return LocalTensor(self.region, dt, self.byte_offset // dt.itemsize, self.nbytes // dt.itemsize)

    def get_value(self, index: int):
        """``GetValue(index)``: one scalar UB read on pipe S (0 in a timing-only run — never
        branch on it: costs must not depend on data)."""
        return self.region.ctx._get_value(self, index)

    def set_value(self, index: int, value) -> None:
        """``SetValue(index, value)``: one scalar UB write on pipe S."""
        self.region.ctx._set_value(self, index, value)

    def __getitem__(self, key) -> "LocalTensor":
        if type(key) is int and 0 <= key <= self.count:      # the common case: no checks to redo
            view = object.__new__(LocalTensor)
            view.region, view.dtype, view.offset, view.count = self.region, self.dtype, self.offset + key, self.count - key
            view._view = None
            return view
        off = _offset(key, self.count, self.name)
        return LocalTensor(self.region, self.dtype, self.offset + off, self.count - off)

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"LocalTensor('{self.name}', {self.count} x {self.dtype.name}, offset {self.offset})"


def get_user_workspace(workspace: GlobalTensor) -> GlobalTensor:
    """``GM_ADDR GetUserWorkspace(GM_ADDR workspace)``: the user's part of the workspace the host
    passed (docs/zh/api/SIMD-API/基础API/资源管理/workspace/GetUserWorkspace.md). The workspace
    holds a system part first only when a high-level API needs one (SetSysWorkSpace, e.g. Matmul);
    npu_lab models none of those, so the system part is empty and the user part is the whole
    buffer (the page: without HAVE_WORKSPACE the framework sets no system workspace)."""
    if not isinstance(workspace, GlobalTensor):
        raise TypeError(f"get_user_workspace takes the workspace GM_ADDR (a GlobalTensor kernel argument); "
                        f"got {type(workspace).__name__}")
    return workspace[0]
