"""The Unified Buffer budget of each MoeGatingTopK kernel version: every buffer, its dtype, its
size rounded up to whole 32-byte blocks, and how many copies (double buffering). The single
source of truth kernels allocate from and the tiling rule checks against."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _check_int(name: str, value, *, minimum: int = 1) -> int:
    """Return ``value`` as an int, or raise a message that says what was expected."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int; got {type(value).__name__} {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return value


@dataclass(frozen=True)
class UbBuffer:
    """One buffer of a kernel's Unified Buffer layout.

    ``elements`` is the element count of one copy; ``bytes_each`` is ``elements * itemsize``
    rounded up to whole blocks (32 B on Ascend: DataCopy moves whole blocks); ``copies`` is 2
    for a double-buffered queue; ``total_bytes = bytes_each * copies``.
    """

    name: str
    dtype: str
    elements: int
    copies: int
    bytes_each: int
    total_bytes: int

    def __post_init__(self) -> None:
        itemsize = np.dtype(self.dtype).itemsize
        if self.elements < 1 or self.copies < 1:
            raise ValueError(f"UbBuffer {self.name!r}: elements and copies must be >= 1")
        if self.bytes_each < self.elements * itemsize:
            raise ValueError(
                f"UbBuffer {self.name!r}: bytes_each = {self.bytes_each} is smaller than "
                f"{self.elements} x {self.dtype} = {self.elements * itemsize} bytes"
            )
        if self.total_bytes != self.bytes_each * self.copies:
            raise ValueError(
                f"UbBuffer {self.name!r}: total_bytes must be bytes_each * copies = "
                f"{self.bytes_each * self.copies}; got {self.total_bytes}"
            )

    @classmethod
    def make(cls, name: str, dtype: str, elements: int, copies: int,
             block_bytes: int = 32) -> "UbBuffer":
        """A buffer whose size is rounded up to whole ``block_bytes`` blocks."""
        raw = int(elements) * np.dtype(dtype).itemsize
        each = _ceil_div(raw, block_bytes) * block_bytes
        return cls(name, np.dtype(dtype).name, int(elements), int(copies), each, each * copies)


#: Kernel versions with a UB layout, and a one-line description of each.
MOE_UB_VERSIONS = {
    "v1": "synchronous: one copy each of scores, top-k values, top-k indices",
    "v2": "double-buffered input and output queues: two copies of each",
    "v2_bad_sync": "same layout as v2 (its bug is in the synchronisation, not the buffers)",
    "v3": "vectorized: v2's queues plus row_max, row_argmax, expert_iota, select_mask, exp_work",
}


def moe_ub_budget(version: str, tile_points: int, E: int, K: int,
                  block_bytes: int = 32) -> tuple[UbBuffer, ...]:
    """UB buffers kernel ``version`` allocates for a tile of ``tile_points`` (b, s) points.

    With T = tile_points:

    * ``v1``: scores f32 [T*E], topk_values f32 [T*K], topk_indices i32 [T*K], one copy each;
    * ``v2`` and ``v2_bad_sync``: the same three, two copies each (double-buffered queues);
    * ``v3``: v2's three, plus single-copy temporaries row_max f32 [T], row_argmax i32 [T],
      expert_iota i32 [E], select_mask f32 [T*E] and exp_work f32 [3*T*K] (the fast exp's scratch).

    Each buffer is rounded up to whole ``block_bytes`` blocks. Kernels allocate exactly these.
    """
    if not isinstance(version, str) or version not in MOE_UB_VERSIONS:
        raise ValueError(
            f"unknown kernel version {version!r}; known versions: {', '.join(MOE_UB_VERSIONS)}"
        )
    T = _check_int("tile_points", tile_points)
    E = _check_int("E", E)
    K = _check_int("K", K)
    if K > E:
        raise ValueError(f"K must be <= E; got K={K}, E={E}")
    block_bytes = _check_int("block_bytes", block_bytes)

    copies = 1 if version == "v1" else 2
    buffers = [
        UbBuffer.make("scores", "float32", T * E, copies, block_bytes),
        UbBuffer.make("topk_values", "float32", T * K, copies, block_bytes),
        UbBuffer.make("topk_indices", "int32", T * K, copies, block_bytes),
    ]
    if version == "v3":
        buffers += [
            UbBuffer.make("row_max", "float32", T, 1, block_bytes),
            UbBuffer.make("row_argmax", "int32", T, 1, block_bytes),
            UbBuffer.make("expert_iota", "int32", E, 1, block_bytes),
            UbBuffer.make("select_mask", "float32", T * E, 1, block_bytes),
            UbBuffer.make("exp_work", "float32", 3 * T * K, 1, block_bytes),
        ]
    return tuple(buffers)


def moe_ub_bytes(version: str, tile_points: int, E: int, K: int, block_bytes: int = 32) -> int:
    """Total UB bytes of :func:`moe_ub_budget` (the sum of every buffer's ``total_bytes``)."""
    return sum(b.total_bytes for b in moe_ub_budget(version, tile_points, E, K, block_bytes))


def moe_ub_capacity(version: str, E: int, K: int, ub_bytes: int, block_bytes: int = 32) -> int:
    """Largest T with ``moe_ub_bytes(version, T, E, K) <= ub_bytes``; 0 if not even T = 1 fits.

    Found by doubling then bisection on the real (aligned) budget, which is non-decreasing in T.
    """
    ub_bytes = _check_int("ub_bytes", ub_bytes)

    def fits(t: int) -> bool:
        return moe_ub_bytes(version, t, E, K, block_bytes) <= ub_bytes

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while fits(hi):  # every point costs >= 4 bytes, so this ends by hi ~ ub_bytes / 4
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # invariant: fits(lo) and not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


