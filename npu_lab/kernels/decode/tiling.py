"""Tiling of decode attention: which (sequence, KV head, S2 piece) each block computes, how many
cached positions a UB chunk holds, and when FlashDecode splits S2 across cores.

Axes as in CANN's IncreFlashAttention (ops-transformer attention/incre_flash_attention/docs/
IFA算子设计介绍.md): B sequences, N2 KV heads, G = q_heads / N2 query heads per KV head, S1 = 1
query token, S2 cached positions. The work is split over B·N2 first; when B·N2 < 0.4 × cores the
cores would idle, so S2 is split too (FlashDecode) and a second step combines the pieces with
their log-sum-exp (op_host/incre_flash_attention_tiling.cpp: the split-KV branch is taken when
``batchSize * numKvHeads < coreNum * 0.4``; the piece count fills the cores).

The per-sequence lengths travel in the tiling, after the fixed fields: IFA's actualSeqLengths is
a host IntArray, so the host knows them when it tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...hardware import HardwareSpec
from ...lang.reduce import reduce_max_tmp_elements
from ...lang.tiling_struct import Int32Struct

#: FlashDecode threshold: split S2 when B·N2 < FLASH_DECODE_RATIO × cores (IFA tiling)
FLASH_DECODE_RATIO = 0.4
#: vector repeat limit of the level-0 instructions (255 repeats)
MAX_REPEAT = 255
#: batches the tiling's length array holds (the C++ struct's fixed array)
MAX_BATCH = 256


@dataclass(frozen=True)
class DecodeTiling(Int32Struct):
    """batch B, kv_heads N2, group G, head_dim D, max_len, chunk (positions per UB chunk), splits
    (S2 pieces per (b, n2); 1 without FlashDecode), split_len (positions per piece), tasks
    (B·N2·splits), tasks_per_block, kv_itemsize (1, 2 or 4), num_buffers (1 or 2), page_size
    (paged KV: positions per page, 0 = contiguous cache), max_pages (block-table columns)."""

    batch: int
    kv_heads: int
    group: int
    head_dim: int
    max_len: int
    chunk: int
    splits: int
    split_len: int
    tasks: int
    tasks_per_block: int
    kv_itemsize: int
    num_buffers: int
    page_size: int = 0
    max_pages: int = 0

    @property
    def block_dim(self) -> int:
        return -(-self.tasks // self.tasks_per_block)

    def pack_with(self, seq_lens) -> bytes:
        return self.pack() + np.asarray(seq_lens, "<i4").tobytes()

    @classmethod
    def unpack_with(cls, data: bytes):
        n = cls.struct_bytes()
        t = cls.unpack(data[:n])
        return t, np.frombuffer(data[n:], "<i4")


def ub_bytes_per_position(head_dim: int, itemsize: int, group: int, num_buffers: int) -> int:
    """UB bytes one cached position costs in a chunk: K and V slots (``num_buffers`` each), the
    float32 copies of K/V when they are float16, the product rows, the score and its Brcb block."""
    kv = 2 * num_buffers * head_dim * itemsize
    f32 = (2 * head_dim * 4 if itemsize != 4 else 0) + head_dim * 4      # kf, vf, prod
    f32 += head_dim * 2 if itemsize == 1 else 0                           # int8 -> half on the way
    return kv + f32 + 4 + 4 + 32                                          # scores, part, brcb


def reduce_tmp_bytes(chunk: int) -> int:
    """sharedTmpBuffer bytes ReduceMax / ReduceSum need over ``chunk`` float32 (ReduceMax.md)."""
    return max(256, -(-reduce_max_tmp_elements(chunk, 4, False) * 4 // 32) * 32)


def table_ub_bytes(max_pages: int) -> int:
    """UB for one block-table row (int32 page ids, whole 32-byte blocks); 0 for a contiguous cache."""
    return -(-max_pages * 4 // 32) * 32


def ub_fixed_bytes(head_dim: int, group: int, max_pages: int = 0, bf16: bool = False) -> int:
    """UB independent of the chunk: q [G, D], acc [G, D], out [G, D] (float32), reduce scratch
    (sized for the largest chunk), the log-sum-exp row, a paged cache's block-table row, and for
    bfloat16 K/V the de-interleaved q [G, D] and its two Gather offset tables [D] (uint32)."""
    return 3 * group * head_dim * 4 + 256 + reduce_tmp_bytes(4088) + max(32, -(-group // 8) * 32) \
        + 4 * head_dim * 4 + table_ub_bytes(max_pages) \
        + ((group + 2) * head_dim * 4 if bf16 else 0)                    # v5's scale / offset rows


def largest_chunk(hw: HardwareSpec, head_dim: int, itemsize: int, group: int, num_buffers: int,
                  max_pages: int = 0, bf16: bool = False) -> int:
    """The most positions (a multiple of 8, at most 4095 = DataCopyParams.blockCount) a chunk may
    hold in ``hw.ub_usable_bytes``."""
    free = hw.ub_usable_bytes - ub_fixed_bytes(head_dim, group, max_pages, bf16)
    n = free // ub_bytes_per_position(head_dim, itemsize, group, num_buffers) // 8 * 8
    return int(min(n, 4088))


def flash_decode_splits(batch: int, kv_heads: int, max_seq_len: int, cores: int, chunk: int) -> int:
    """S2 pieces per (b, n2): 1 when B·N2 ≥ 0.4 × cores, else enough to fill the cores
    (cores // (B·N2)), but no piece shorter than one chunk."""
    bn = batch * kv_heads
    if bn >= FLASH_DECODE_RATIO * cores:
        return 1
    return int(max(1, min(cores // bn, -(-max_seq_len // chunk))))


def decode_tiling(batch, kv_heads, group, head_dim, max_len, seq_lens, itemsize, hw: HardwareSpec, *,
                  version: str, chunk: int | None = None, splits: int | None = None,
                  block_dim: int | None = None, page_size: int = 0, max_pages: int = 0,
                  bf16: bool = False) -> DecodeTiling:
    """The tiling of one decode step. ``version``: "v1" (whole S2 in one chunk, one buffer —
    refused past :func:`largest_chunk`), "v2" (chunks, double-buffered), "v4" (v2 + FlashDecode
    split chosen by :func:`flash_decode_splits` unless ``splits`` is given).

    Paged KV (``page_size`` > 0, a block table of ``max_pages`` columns): a chunk never crosses a
    page (one DataCopy reads rows of one page, as IFA's PageAttention path copies per block), so
    the chunk divides ``page_size`` (default: the largest multiple of 8 that divides it and fits)
    and FlashDecode pieces start on a chunk. v1 (one contiguous chunk of the whole S2) refuses
    paged K/V."""
    if batch > MAX_BATCH:
        raise ValueError(f"batch {batch} > {MAX_BATCH}: the tiling's length array holds {MAX_BATCH} sequences")
    longest = int(np.max(seq_lens))
    cores = hw.vector_cores if block_dim is None else int(block_dim)
    if page_size and version == "v1":
        raise ValueError("v1 reads the whole S2 as one contiguous chunk; a paged cache is read page by page: "
                         "use version='v2', 'v4' or 'v5' with block_table")
    if version == "v1":
        limit = largest_chunk(hw, head_dim, itemsize, group, 1, bf16=bf16)
        if longest > limit:
            raise ValueError(f"v1 keeps the whole S2 in the UB: {longest} positions x "
                             f"{ub_bytes_per_position(head_dim, itemsize, group, 1)} B do not fit "
                             f"{hw.name}'s {hw.ub_usable_bytes} B (limit {limit} positions at head_dim={head_dim}, "
                             f"{itemsize}-byte K/V); use version='v2' (S2 in chunks, online softmax)")
        c, nb, sp = -(-longest // 8) * 8, 1, 1
    else:
        nb = 2
        limit = largest_chunk(hw, head_dim, itemsize, group, nb, max_pages, bf16)
        if page_size and chunk is None:
            c = max([d for d in range(8, min(limit, 512, page_size) + 1, 8) if page_size % d == 0], default=0)
        else:
            c = min(limit, 512) if chunk is None else int(chunk)
        if not 8 <= c <= limit or c % 8:
            raise ValueError(f"chunk must be a multiple of 8 in 8..{limit} (UB limit with double buffers), got {chunk!r}")
        if page_size and page_size % c:
            raise ValueError(f"chunk={c} must divide page_size={page_size}: a chunk is read from one page "
                             "(a chunk crossing a page boundary would need two DataCopys from two pages)")
        if version == "v4":
            sp = flash_decode_splits(batch, kv_heads, longest, cores, c) if splits is None else int(splits)
            if sp < 1:
                raise ValueError(f"splits must be >= 1, got {splits!r}")
        elif version in ("v2", "v5"):
            sp = 1
        else:
            raise ValueError(f"version must be 'v1', 'v2', 'v4' or 'v5', got {version!r}")
    split_len = -(-longest // sp)
    if page_size:                       # pieces start on a chunk, so no chunk crosses a page
        split_len = -(-split_len // c) * c
    tasks = batch * kv_heads * sp
    tpb = -(-tasks // min(cores, tasks))
    return DecodeTiling(batch, kv_heads, group, head_dim, max_len, c, sp, split_len, tasks, tpb, itemsize, nb,
                        int(page_size), int(max_pages))
