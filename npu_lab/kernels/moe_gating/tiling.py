"""Host-side tiling for MoeGatingTopK: the tiling struct and the tileS rule (the UB budget it
checks against is :mod:`.ub_budget`, re-exported here).

Kernels must take these from here rather than re-deriving them:

* :class:`MoeGatingTiling`, the article's struct (ten little-endian int32 fields), which packs to
  the bytes the host copies to the device;
* :func:`moe_ub_budget`, the Unified Buffer layout of each kernel version -- every buffer, its
  dtype, its size rounded up to whole 32-byte blocks, and how many copies (double buffering);
  the single source of truth that kernels allocate from;
* :func:`calculate_moe_gating_tiling`, the article's rule (tileB = 1, tileS starts at 8 and
  halves until the tile fits), applied to that honest budget and the chip's real UB size.

**Which rule a run uses by default** (no ``tile_s`` given to ``simulate_moe_gating`` /
``moe_gating_topk`` / ``plan_moe_gating``): v1 — the article's kernel — keeps the article's rule
above; v2, v2c and v3 (with v2_bad_sync and v3_fast_exp) take tileS from the chip's autotuned
bucket table (:mod:`.buckets`, ``run.default_tile_s``), clamped to S and the UB; a chip without
a table falls back to the article's rule. Passing ``tile_s`` always wins.

:func:`article_ub_estimate_bytes` keeps the article's own back-of-envelope formula (no alignment,
no second buffer, no temporaries) so a notebook can set the two side by side.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, fields

import numpy as np

from ...lang.tiling_struct import Int32Struct
from .ub_budget import (MOE_UB_VERSIONS, UbBuffer, _ceil_div, _check_int, moe_ub_budget, moe_ub_bytes,
                        moe_ub_capacity)

__all__ = [
    "MOE_UB_VERSIONS",
    "MoeGatingTiling",
    "UbBuffer",
    "article_calculate_tiling",
    "article_ub_estimate_bytes",
    "calculate_moe_gating_tiling",
    "moe_ub_budget",
    "moe_ub_bytes",
    "moe_ub_capacity",
]

INT32_MAX = 2**31 - 1


class UbBudgetError(ValueError):
    """The tile asked for (or even one row) does not fit the chip's Unified Buffer."""


def _check_shape(B, S, E, K) -> tuple[int, int, int, int]:
    B, S, E, K = (_check_int(n, v) for n, v in zip("BSEK", (B, S, E, K)))
    if K > E:
        raise ValueError(f"K must be <= E (cannot pick {K} of {E} experts); got K={K}, E={E}")
    return B, S, E, K


# --------------------------------------------------------------------------------------------
# The tiling struct
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MoeGatingTiling(Int32Struct):
    """The article's ``MoeGatingTiling`` struct; field names mirror the C struct.

    All fields are int32 on the device. ``B, S, E, K`` are the runtime shape (gate logits
    [B, S, E], top-K). One tile -- one block of work -- covers ``tileB x tileS`` (b, s) points
    (``tileBS`` of them); there are ``tilesPerBatch = ceil(S / tileS)`` tiles along S and
    ``totalTiles = ceil(B / tileB) * tilesPerBatch`` in all. ``ubCapacity`` is the largest number
    of points one core's UB can hold for the kernel version this tiling was computed for (a
    count of points, not bytes or elements).

    ``tileBS > ubCapacity`` is *not* rejected here, so a notebook can build an over-budget
    tiling on purpose and watch the simulator's UB allocator refuse it.
    """

    B: int
    S: int
    E: int
    K: int
    tileB: int
    tileS: int
    tileBS: int
    totalTiles: int
    tilesPerBatch: int
    ubCapacity: int

    #: ``struct`` format: ten little-endian int32, in field order (pack/unpack: Int32Struct).
    STRUCT_FORMAT = "<10i"
    #: Size of the packed struct in bytes.
    NBYTES = 40

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            checked = _check_int(f"MoeGatingTiling.{f.name}", value)
            if checked > INT32_MAX:
                raise ValueError(
                    f"MoeGatingTiling.{f.name} = {checked} does not fit the int32 field of the "
                    f"device struct (max {INT32_MAX})"
                )
            object.__setattr__(self, f.name, checked)
        if self.K > self.E:
            raise ValueError(f"MoeGatingTiling: K = {self.K} > E = {self.E}; need K <= E")
        if self.tileBS != self.tileB * self.tileS:
            raise ValueError(
                f"MoeGatingTiling: tileBS must equal tileB * tileS = {self.tileB} * {self.tileS} "
                f"= {self.tileB * self.tileS}; got {self.tileBS}"
            )
        tiles_per_batch = _ceil_div(self.S, self.tileS)
        if self.tilesPerBatch != tiles_per_batch:
            raise ValueError(
                f"MoeGatingTiling: tilesPerBatch must equal ceil(S / tileS) = "
                f"ceil({self.S} / {self.tileS}) = {tiles_per_batch}; got {self.tilesPerBatch}"
            )
        total = _ceil_div(self.B, self.tileB) * tiles_per_batch
        if self.totalTiles != total:
            raise ValueError(
                f"MoeGatingTiling: totalTiles must equal ceil(B / tileB) * ceil(S / tileS) = "
                f"{_ceil_div(self.B, self.tileB)} * {tiles_per_batch} = {total}; "
                f"got {self.totalTiles}"
            )

    @classmethod
    def from_tiles(cls, B: int, S: int, E: int, K: int, tileB: int, tileS: int,
                   ubCapacity: int) -> "MoeGatingTiling":
        """Build a tiling from the free choices, deriving tileBS, tilesPerBatch and totalTiles."""
        S_ = _check_int("S", S)
        tileS_ = _check_int("tileS", tileS)
        tiles_per_batch = _ceil_div(S_, tileS_)
        return cls(
            B=B, S=S, E=E, K=K, tileB=tileB, tileS=tileS,
            tileBS=_check_int("tileB", tileB) * tileS_,
            totalTiles=_ceil_div(_check_int("B", B), int(tileB)) * tiles_per_batch,
            tilesPerBatch=tiles_per_batch,
            ubCapacity=ubCapacity,
        )

    def tile_range(self, block_idx: int) -> tuple[int, int, int, int]:
        """Half-open ranges ``(b_start, b_end, s_start, s_end)`` handled by block ``block_idx``.

        As in the article's kernel: ``tile_b = block_idx // tilesPerBatch`` and
        ``tile_s = block_idx % tilesPerBatch``; the ends are clamped to B and S, so the last tile
        along S is short when ``S % tileS != 0``.
        """
        if isinstance(block_idx, (bool, np.bool_)) or not isinstance(block_idx, numbers.Integral):
            raise TypeError(f"block_idx must be an int; got {type(block_idx).__name__}")
        idx = int(block_idx)
        if not 0 <= idx < self.totalTiles:
            raise IndexError(
                f"block_idx must be in [0, totalTiles) = [0, {self.totalTiles}); got {idx}"
            )
        tile_b, tile_s = divmod(idx, self.tilesPerBatch)
        b_start = tile_b * self.tileB
        s_start = tile_s * self.tileS
        return (b_start, min(b_start + self.tileB, self.B),
                s_start, min(s_start + self.tileS, self.S))


# --------------------------------------------------------------------------------------------
# The tileS rule
# --------------------------------------------------------------------------------------------


def _check_hw(hw) -> tuple[str, int, int]:
    missing = [a for a in ("name", "ub_bytes", "block_bytes") if not hasattr(hw, a)]
    if missing:
        raise TypeError(
            "hw must be a HardwareSpec (e.g. npu_lab.hardware.get_preset('ascend-910b2')); "
            f"got {type(hw).__name__} without {', '.join(missing)}"
        )
    # the UB a kernel may allocate (HardwareSpec.ub_usable_bytes: minus the framework's 256 B and
    # Ascend C's 8 KB reserve); a duck-typed hw without it is taken as all usable
    usable = getattr(hw, "ub_usable_bytes", None)
    return (str(hw.name), _check_int("hw.ub_usable_bytes", hw.ub_bytes if usable is None else usable),
            _check_int("hw.block_bytes", hw.block_bytes))


def calculate_moe_gating_tiling(B: int, S: int, E: int, K: int, hw, *, version: str = "v1",
                                tile_s: int | None = None,
                                tile_s_start: int = 8) -> MoeGatingTiling:
    """The article's host-side tiling rule, on the honest UB budget of ``version`` on ``hw``.

    * ``tileB = 1`` (one batch row per tile);
    * ``tileS`` starts at ``tile_s_start`` (the article's 8) and halves while
      ``moe_ub_bytes(version, tileB * tileS, E, K) > hw.ub_usable_bytes`` and ``tileS > 1``;
      then it is capped at S (``min(tileS, S)``): a tile longer than the sequence only reserves
      UB it never uses. (The article does not cap; for S < 8 its struct says tileS = 8.)
    * ``tile_s`` given explicitly replaces the search: it is clamped to S the same way, and must
      fit the UB, else ``ValueError`` names the bytes it needs, the UB size and the largest
      tileS that fits.
    * ``ubCapacity`` = the largest number of points whose buffers fit ``hw.ub_usable_bytes`` (192 KB − 256 B − 8 KB
      on the 910B: NPU架构版本2201.md)
      (:func:`moe_ub_capacity`, with 32-B alignment and the version's copies and temporaries).

    Raises ``ValueError`` when even a single row does not fit (very large E): that needs the
    E-chunked kernel with a running top-K, which npu_lab does not implement yet.

    ``hw`` needs ``.name``, ``.ub_usable_bytes`` (or ``.ub_bytes``: allocatable bytes per vector core) and ``.block_bytes`` (32).
    """
    B, S, E, K = _check_shape(B, S, E, K)
    hw_name, ub_bytes, block_bytes = _check_hw(hw)
    tile_b = 1
    capacity = moe_ub_capacity(version, E, K, ub_bytes, block_bytes)  # also checks version
    if capacity == 0:
        one_row = moe_ub_bytes(version, 1, E, K, block_bytes)
        raise UbBudgetError(
            f"E={E} experts is too wide for one core: a single row needs {one_row} bytes of UB "
            f"for kernel version {version!r} (K={K}), but {hw_name} has {ub_bytes} usable bytes. "
            "Rows this large need the E-chunked path (split E into chunks and keep a running "
            "top-K): npu_lab.kernels.moe_gating.large_e.run_large_e, or moe_gating_topk_auto, which "
            "picks it where CANN's tiling would (choose_moe_template)."
        )

    if tile_s is None:
        tile_s_start = _check_int("tile_s_start", tile_s_start)
        tile_S = tile_s_start
        while moe_ub_bytes(version, tile_b * tile_S, E, K, block_bytes) > ub_bytes and tile_S > 1:
            tile_S //= 2
        tile_S = min(tile_S, S)
    else:
        requested = _check_int("tile_s", tile_s)
        tile_S = min(requested, S)
        needed = moe_ub_bytes(version, tile_b * tile_S, E, K, block_bytes)
        if needed > ub_bytes:
            clamped = f" (clamped to S={S})" if tile_S != requested else ""
            raise UbBudgetError(
                f"tile_s={tile_S}{clamped} does not fit: kernel version {version!r} needs "
                f"{needed} bytes "
                f"of UB for {tile_b * tile_S} points (E={E}, K={K}), but {hw_name} has "
                f"{ub_bytes} usable bytes; the largest tileS that fits is {capacity // tile_b}"
            )
    return MoeGatingTiling.from_tiles(B, S, E, K, tile_b, tile_S, capacity)


def article_ub_estimate_bytes(tile_points: int, E: int, K: int,
                              ub_assumed_bytes: int | None = 256 * 1024) -> int:
    """The article's own UB estimate: ``tile_points * (E*4 + K*(4+4))`` bytes.

    No 32-byte alignment, no second buffer for double buffering, no temporaries -- compare with
    :func:`moe_ub_bytes`. The article assumes a 256 KB UB (the 910B's is 192 KB). A tile its
    formula puts over ``ub_assumed_bytes`` is one its own rule would never choose, so that raises
    ``ValueError``; pass ``ub_assumed_bytes=None`` to get the number anyway.
    """
    T = _check_int("tile_points", tile_points)
    E = _check_int("E", E)
    K = _check_int("K", K)
    per_point = E * 4 + K * (4 + 4)
    estimate = T * per_point
    if ub_assumed_bytes is not None:
        limit = _check_int("ub_assumed_bytes", ub_assumed_bytes)
        if estimate > limit:
            raise ValueError(
                f"by the article's formula {T} points (E={E}, K={K}) need {estimate} bytes ({per_point} per "
                f"point), more than the {limit} bytes of UB assumed; the article's rule would "
                f"halve tileS (at most {limit // per_point} points fit). Pass "
                "ub_assumed_bytes=None to get the estimate anyway."
            )
    return estimate


def article_calculate_tiling(B: int, S: int, E: int, K: int,
                             ub_assumed_bytes: int = 256 * 1024) -> MoeGatingTiling:
    """The article's ``calculate_moe_gating_tiling`` exactly as written, for comparison.

    ``maxPointsPerCore = ub_assumed_bytes // (E*4 + K*8)``; tileB = 1; tileS = 8, halved while
    ``tileS > maxPointsPerCore`` and ``tileS > 1``; tileS is *not* capped at S;
    ``ubCapacity = maxPointsPerCore``. Use :func:`calculate_moe_gating_tiling` for real work.
    """
    B, S, E, K = _check_shape(B, S, E, K)
    limit = _check_int("ub_assumed_bytes", ub_assumed_bytes)
    max_points = limit // (E * 4 + K * 8)
    if max_points < 1:
        raise ValueError(
            f"by the article's formula one row (E={E}, K={K}) needs {E * 4 + K * 8} bytes, more "
            f"than the {limit} bytes of UB assumed; its struct would hold ubCapacity = 0"
        )
    tile_S = 8
    while tile_S > max_points and tile_S > 1:
        tile_S //= 2
    return MoeGatingTiling.from_tiles(B, S, E, K, 1, tile_S, max_points)
