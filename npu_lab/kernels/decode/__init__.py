"""LLM decode on the vector core (issue 18): the KV-cache append (contiguous and paged) and decode
attention built like CANN's IncreFlashAttention (v1 whole S2 in the UB, v2 online softmax over
chunks, v4 FlashDecode split-KV + log-sum-exp combine, v5 int8 KV with antiquant), with the memory-bound roofline.
K/V may be float16, float32, bfloat16 (uint16 bits, ``npu_lab.lang.float_to_bfloat16``) or int8 (v5), and
contiguous [B, max_len, N2, D] or paged [num_pages, page_size, N2, D] with ``block_table=`` (v2 / v4 / v5).

Public names:

* :func:`kv_cache_append`, :func:`paged_kv_cache_append` — the append kernels (host owns seq_lens);
* :func:`kv_cache_append_reference`, :func:`paged_kv_cache_append_reference` — numpy references;
* :func:`decode_attention`, :func:`decode_attention_reference` — one decode step, GQA;
* :func:`decode_roofline_us`, :func:`kv_bytes_read`, :func:`decode_ladder` — the roofline and the
  per-version achieved fraction;
* :func:`quantize_kv_int8`, :func:`dequantize_kv`, :func:`antiquant_error` — v5's int8 KV
  (per-channel antiquant, (k + offset) · scale) and the error it brings;
* :func:`flash_decode_sweep` — v2 against v4 over batch: where splitting S2 pays;
* :func:`decode_tiling`, :func:`flash_decode_splits`, :func:`largest_chunk` — the tiling decisions;
* :class:`KvCacheFullError`, :data:`TOLERANCE`.
"""

from .append import AppendResult, kv_append_tiling, kv_cache_append, paged_kv_cache_append
from .reference import decode_attention_reference, kv_cache_append_reference, paged_kv_cache_append_reference
from .quant import dequantize_kv, quantize_kv_int8
from .run import (TOLERANCE, VERSIONS, DecodeResult, antiquant_error, decode_attention, decode_ladder,
                  decode_roofline_us, flash_decode_sweep, kv_bytes_read)
from .tiling import FLASH_DECODE_RATIO, decode_tiling, flash_decode_splits, largest_chunk
from .validate import KvCacheFullError

__all__ = ["AppendResult", "kv_append_tiling", "kv_cache_append", "paged_kv_cache_append",
           "decode_attention_reference", "kv_cache_append_reference", "paged_kv_cache_append_reference",
           "TOLERANCE", "VERSIONS", "DecodeResult", "decode_attention", "decode_ladder", "decode_roofline_us",
           "kv_bytes_read", "FLASH_DECODE_RATIO", "decode_tiling", "flash_decode_splits", "largest_chunk",
           "KvCacheFullError", "flash_decode_sweep", "quantize_kv_int8", "dequantize_kv", "antiquant_error"]
