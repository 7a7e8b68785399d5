"""The Unified Buffer budget of each MoeGatingTopK kernel version: every buffer, its dtype, its
size rounded up to whole 32-byte blocks, and how many copies (double buffering). The single
source of truth kernels allocate from and the tiling rule checks against."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from functools import lru_cache

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
    "v2c": "same layout as v2; one padded copy per tile instead of one per point",
    "v3": "vectorized: rows at a 64-column stride; queues plus scores_work, select_mask, row_results, "
          "row_bcast, topk_padded",
}


@dataclass(frozen=True)
class V3Layout:
    """Where v3 keeps what (see :mod:`.vectorized`): T rows of E scores at a stride of ``Ep`` =
    E rounded up to 64 (each row whole 256-byte repeats), the K winners in rows of ``Kp`` (8, 16,
    32 or 64: a row is whole 32-byte blocks and a repeat holds whole rows). ``pieces`` maps each
    TBuf to its parts: name -> (element offset, element count), every offset 32-byte aligned.
    The kernel carves its tensors out of the TBufs at exactly these offsets."""

    T: int
    E: int
    K: int
    Ep: int
    Kp: int
    pieces: dict

    @property
    def chunks(self) -> int:
        """64-column chunks (repeats) per row."""
        return self.Ep // 64


def _pack(parts) -> dict:
    out, at = {}, 0
    for name, count in parts:
        count = _ceil_div(count, 8) * 8          # keep every part 32-byte aligned (4-byte elements)
        out[name] = (at, count)
        at += count
    out["_total"] = (0, at)
    return out


def uses_two_level_argmax(E: int) -> bool:
    """v3 finds the argmax of rows wider than 64 with the two-level argmax (all rows of a tile at
    once, :func:`.vectorized.two_level_argmax`) when E is whole 64-lane chunks and a row's repeat
    stride fits the uint8 field (E <= 2040); else with one ReduceMax(calIndex) per row."""
    return E > 64 and E % 64 == 0 and E // 8 <= 255


def v3_layout(T: int, E: int, K: int) -> V3Layout:
    """The v3 UB layout for a tile of T rows (see :class:`V3Layout`). K is at most 64."""
    return _v3_layout(_check_int("tile_points", T), _check_int("E", E), _check_int("K", K))


@lru_cache(maxsize=4096)      # sliders and sweeps ask for the same few layouts again and again
def _v3_layout(T: int, E: int, K: int) -> V3Layout:
    T, E, K = _check_int("tile_points", T), _check_int("E", E), _check_int("K", K)
    if K > 64:
        from .k_limits import larger_k_advice     # the advice from every version's real limit
        raise ValueError(f"v3 keeps each row's K winners in one 256-byte repeat, so K <= 64; got K={K}; "
                         f"{larger_k_advice(K)}")
    from ...lang.reduce import reduce_max_tmp_elements
    Ep = _ceil_div(E, 64) * 64
    Kp = next(p for p in (8, 16, 32, 64) if p >= K)
    T8, T32 = _ceil_div(T, 8) * 8, _ceil_div(T, 32) * 32
    pieces = {}
    if uses_two_level_argmax(E):
        # the two-level argmax of wide rows: running max per lane [T, 64], the chunk it came from
        # (then the candidate index), and 2**23 + lane, all float32
        pieces["argmax_work"] = _pack([("lane_max", T * 64), ("lane_chunk", T * 64), ("lane_iota", T * 64)])
    pieces = {
        **pieces,
        # the scores being knocked out, then a same-sized block of -inf (Select's src0)
        "scores_work": _pack([("work", T * Ep), ("neg_inf", T * Ep)]),
        # per-row results: WholeReduceMax pairs, their values / indices split by GatherMask
        # (whole repeats: up to T32), the expert iota, the GatherMask pattern, ReduceMax's tmp
        "row_results": _pack([("pairs", 2 * T32), ("row_values", T32), ("row_argmax", T32),
                              ("expert_iota", 64), ("pattern", 8),
                              ("reduce_tmp", reduce_max_tmp_elements(E, 4, True)
                               if Ep > 64 and not uses_two_level_argmax(E) else 0)]),
        # Brcb destinations (Brcb may not write the buffer it reads): argmax per 64-column
        # chunk, the row max (round 0), one column of values / the row sums
        "row_bcast": _pack([("argmax_bcast", T8 * 8 * (Ep // 64)), ("max_bcast", T8 * 8),
                            ("column_bcast", T8 * 8)]),
        # the K winners in [T, Kp] rows, and the polynomial exp's scratch
        "topk_padded": _pack([("values", T8 * Kp), ("indices", T8 * Kp), ("exp_work", 3 * T8 * Kp)]),
    }
    return V3Layout(T, E, K, Ep, Kp, pieces)


def _v3_buffers(T: int, E: int, K: int, block_bytes: int) -> tuple[UbBuffer, ...]:
    lay = v3_layout(T, E, K)
    T8 = _ceil_div(T, 8) * 8
    size = lambda name: lay.pieces[name]["_total"][1]
    return (
        UbBuffer.make("scores", "float32", T * lay.Ep, 2, block_bytes),
        UbBuffer.make("topk_values", "float32", T8 * K, 2, block_bytes),
        UbBuffer.make("topk_indices", "int32", T8 * K, 2, block_bytes),
        UbBuffer.make("scores_work", "float32", size("scores_work"), 1, block_bytes),
        UbBuffer.make("select_mask", "uint8", T * lay.Ep // 8, 1, block_bytes),
        UbBuffer.make("row_results", "float32", size("row_results"), 1, block_bytes),
        UbBuffer.make("row_bcast", "float32", size("row_bcast"), 1, block_bytes),
        UbBuffer.make("topk_padded", "float32", size("topk_padded"), 1, block_bytes),
        *((UbBuffer.make("argmax_work", "float32", size("argmax_work"), 1, block_bytes),)
          if "argmax_work" in lay.pieces else ()),
        # Select's 8 KB of scratch (Select.md: 预留8KB) is not charged here: it is Ascend C's
        # reserved UB, outside what a kernel may allocate (HardwareSpec.ub_usable_bytes)
    )


def moe_ub_budget(version: str, tile_points: int, E: int, K: int,
                  block_bytes: int = 32) -> tuple[UbBuffer, ...]:
    """UB buffers kernel ``version`` allocates for a tile of ``tile_points`` (b, s) points.

    With T = tile_points:

    * ``v1``: scores f32 [T*E8], topk_values f32 [T*K8], topk_indices i32 [T*K8], one copy each,
      where X8 = X rounded up to 8 elements: every row starts on a 32-byte block, because DMA
      into / out of UB works on whole blocks (DataCopyPad pads each row to 32 bytes);
    * ``v2``, ``v2_bad_sync`` and ``v2c``: the same three, two copies each (double-buffered);
    * ``v3``: rows at a stride Ep = E rounded up to 64: scores f32 [T*Ep] (two copies; float16
      input uses the first half), topk_values f32 / topk_indices i32 [T8*K] (two copies), and
      single-copy TBufs scores_work, select_mask (bits), row_results, row_bcast, topk_padded and,
      for E > 64 in whole 64-lane chunks, argmax_work (3·T·64 float32 of the two-level argmax),
      laid out by :func:`v3_layout`. Select's 8 KB of scratch is Ascend C's reserved UB, already
      outside ``hw.ub_usable_bytes`` (NPU架构版本2201.md), so no budget charges it.

    Each buffer is rounded up to whole ``block_bytes`` blocks. Kernels allocate exactly these.
    """
    return _budget(version, tile_points, E, K, block_bytes)


def _budget(version, tile_points, E, K, block_bytes):
    key = (version, tile_points, E, K, block_bytes)
    if type(version) is str and all(type(v) is int for v in key[1:]):   # not bool, not numpy: exact keys
        return _budget_cached(*key)
    return _budget_checked(*key)


@lru_cache(maxsize=8192)      # a pure function of its arguments, asked for again and again
def _budget_cached(version, tile_points, E, K, block_bytes):
    return _budget_checked(version, tile_points, E, K, block_bytes)


def _budget_checked(version, tile_points, E, K, block_bytes):
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
    if version == "v3":
        return _v3_buffers(T, E, K, block_bytes)
    row = max(1, block_bytes // 4)  # float32 / int32 elements per 32-byte block
    E8, K8 = _ceil_div(E, row) * row, _ceil_div(K, row) * row
    buffers = [
        UbBuffer.make("scores", "float32", T * E8, copies, block_bytes),
        UbBuffer.make("topk_values", "float32", T * K8, copies, block_bytes),
        UbBuffer.make("topk_indices", "int32", T * K8, copies, block_bytes),
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


