"""Tensors a kernel sees: ``GlobalTensor`` (HBM) and ``LocalTensor`` (a view of Unified Buffer).

In a full run both hold numpy data; in a timing-only run they hold only shape and dtype
(``data is None``) and instructions skip the arithmetic. A ``LocalTensor`` remembers, through its
UB region, when its data was last written and read, so the simulator can refuse a race (an
instruction reading data before the instruction writing it has finished) instead of silently
computing with stale data.
"""

from __future__ import annotations

import math

import numpy as np

SUPPORTED_DTYPES = ("float32", "float16", "int32", "uint8", "int16", "uint32", "int8")


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


class GlobalTensor:
    """A flat (1-D) tensor in global memory, like Ascend C's ``GlobalTensor<T>``.

    Slice it with element offsets (``x[off:off + n]``) to get a view; ``.data`` is the numpy
    storage (``None`` in a timing-only run)."""

    def __init__(self, data: np.ndarray | None, size: int, dtype, name: str = "gm", _offset: int = 0):
        self.dtype = as_dtype(dtype)
        self.size = int(size)
        self.name = name
        self._base = data
        self._offset = _offset

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
        return self._base[self._offset:self._offset + self.size]

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __getitem__(self, key) -> "GlobalTensor":
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError(f"{self.name}: index a GlobalTensor with a contiguous slice "
                            "[start:stop] of element offsets")
        start, stop, _ = key.indices(self.size)
        if key.stop is not None and key.stop > self.size:
            raise IndexError(f"{self.name}[{key.start}:{key.stop}] runs past its end ({self.size} elements)")
        stop = max(stop, start)
        return GlobalTensor(self._base, stop - start, self.dtype, self.name, self._offset + start)

    def __repr__(self) -> str:
        return f"GlobalTensor({self.name}, {self.size} x {self.dtype.name}, offset {self._offset})"


class UbRegion:
    """A 32-byte aligned piece of Unified Buffer and its hazard record: for byte ranges of it,
    which pipe last wrote / read them and until when (cycles). Ranges are tracked separately, so
    two halves of one buffer can be used by two pipes at once (a manual ping-pong)."""

    __slots__ = ("name", "offset_bytes", "nbytes", "storage", "writes", "reads")

    def __init__(self, name: str, offset_bytes: int, nbytes: int, storage: np.ndarray | None):
        self.name = name
        self.offset_bytes = offset_bytes
        self.nbytes = nbytes
        self.storage = storage  # uint8 bytes, or None in timing-only runs
        self.writes: list[tuple[int, int, float, str]] = []   # (lo, hi, end, pipe)
        self.reads: list[tuple[int, int, float, str]] = []

    @staticmethod
    def conflict(entries, lo: int, hi: int, start: float, pipe: str):
        """The first entry overlapping [lo, hi) on another pipe that ends after ``start``."""
        for e_lo, e_hi, e_end, e_pipe in entries:
            if e_lo < hi and lo < e_hi and start < e_end and e_pipe != pipe:
                return e_end, e_pipe
        return None

    def record_read(self, lo: int, hi: int, end: float, pipe: str) -> None:
        # an older read of the same pipe inside this range ends no later: forget it
        self.reads = [e for e in self.reads if not (e[3] == pipe and lo <= e[0] and e[1] <= hi)]
        self.reads.append((lo, hi, end, pipe))

    def record_write(self, lo: int, hi: int, end: float, pipe: str) -> None:
        # everything inside the range is overwritten (its users were checked to be done)
        self.reads = [e for e in self.reads if not (lo <= e[0] and e[1] <= hi)]
        self.writes = [e for e in self.writes if not (lo <= e[0] and e[1] <= hi)]
        self.writes.append((lo, hi, end, pipe))


class LocalTensor:
    """A typed view of a UB region: ``count`` elements of ``dtype`` starting at ``offset``
    elements. Slicing (``t[a:b]``) gives a sub-view of the same region."""

    __slots__ = ("region", "dtype", "offset", "count")

    def __init__(self, region: UbRegion, dtype, offset: int = 0, count: int | None = None):
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
    def byte_range(self) -> tuple[int, int]:
        lo = self.offset * self.dtype.itemsize
        return lo, lo + self.count * self.dtype.itemsize

    @property
    def data(self) -> np.ndarray | None:
        """The numpy view (None in a timing-only run)."""
        st = self.region.storage
        if st is None:
            return None
        return st.view(self.dtype)[self.offset:self.offset + self.count]

    def reinterpret(self, dtype) -> "LocalTensor":
        """The same bytes seen as another dtype (Ascend C's ReinterpretCast)."""
        dt = as_dtype(dtype)
        start_byte = self.offset * self.dtype.itemsize
        if start_byte % dt.itemsize or self.nbytes % dt.itemsize:
            raise ValueError(f"cannot view {self.nbytes} bytes at byte {start_byte} of '{self.name}' as {dt.name}")
        return LocalTensor(self.region, dt, start_byte // dt.itemsize, self.nbytes // dt.itemsize)

    def __getitem__(self, key) -> "LocalTensor":
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError(f"'{self.name}': slice a LocalTensor with a contiguous [start:stop]")
        start, stop, _ = key.indices(self.count)
        if key.stop is not None and key.stop > self.count:
            raise IndexError(f"'{self.name}'[{key.start}:{key.stop}] runs past its {self.count} elements")
        return LocalTensor(self.region, self.dtype, self.offset + start, max(0, stop - start))

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"LocalTensor('{self.name}', {self.count} x {self.dtype.name}, offset {self.offset})"
