"""Sparse KV compression (issue 19 §1): keep the attention sinks plus the most important tokens per
head, measure memory saved and attention-output error; the vector-core kernel (Sort32/MrgSort
top-k + whole-row DataCopy gather); the article's claims audited.

Public names:

* :func:`compress_kv`, :class:`CompressedKV` — the numpy reference; :data:`SCORES` ("key_norm",
  the article's; "window", accumulated attention over the last queries, SnapKV/H2O; "recent");
* :func:`importance`, :func:`select_tokens`, :func:`attention_error`, :func:`n_keep_of`;
* :func:`synthetic_kv` — seeded K/V with sinks, heavy hitters, norm outliers and a recency bias;
  :func:`error_vs_memory`, :func:`selection_overlap`, :func:`error_figure`;
* :func:`compress_kv_npu` — the kernel on the simulator (:func:`sparse_kv_kernel`,
  :func:`sparse_kv_tiling`);
* :func:`sparse_kv_claims` — the article's claims table (data/sparse_kv_claims.csv).
"""

from .reference import (SCORES, CompressedKV, attention, attention_error, compress_kv, importance, kv_bytes,
                        n_keep_of, select_tokens)
from .synthetic import SyntheticKV, error_figure, error_vs_memory, selection_overlap, synthetic_kv
from .kernel import SparseKvTiling, merge_sorted_lists, sparse_kv_kernel, sparse_kv_tiling, sparse_kv_ub_layout
from .run import SparseKvRun, compress_kv_npu
from .claims import SPARSE_KV_CLAIMS_CSV, sparse_kv_claims, write_sparse_kv_claims

__all__ = ["SCORES", "CompressedKV", "attention", "attention_error", "compress_kv", "importance", "kv_bytes",
           "n_keep_of", "select_tokens", "SyntheticKV", "error_figure", "error_vs_memory", "selection_overlap",
           "synthetic_kv", "SparseKvTiling", "merge_sorted_lists", "sparse_kv_kernel", "sparse_kv_tiling", "sparse_kv_ub_layout",
           "SparseKvRun", "compress_kv_npu", "SPARSE_KV_CLAIMS_CSV", "sparse_kv_claims",
           "write_sparse_kv_claims"]
