"""The small timing-only runs npu_lab.kernels.listings traces to compare the sparse-KV kernel with
its C++ listing (sparse_kv.cpp)."""

from __future__ import annotations

import numpy as np


def run_case(hw, **case):
    """Run one registry case timing-only on ``hw``; returns the Timeline."""
    from .run import compress_kv_npu
    dtype = np.dtype(case.pop("dtype", "float32"))
    shape = (case.pop("heads"), case.pop("tokens"), case.pop("head_dim"))
    k = np.zeros(shape, dtype)
    return compress_kv_npu(k, k, case.pop("ratio"), case.pop("sinks"), timing_only=True, hw=hw, **case).timeline
