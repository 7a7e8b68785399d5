"""Within-launch L2 sharing (issue 17 §5; npu_lab.sim.l2, npu_lab.kernels.gemm.sharing)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from npu_lab.kernels.gemm import gemm
from npu_lab.kernels.gemm.epilogue import matmul_leakyrelu
from npu_lab.kernels.gemm.sharing import shared_load_table
from npu_lab.presets import get_preset
from npu_lab.sim.l2 import GmRouter, L2Cache

HW = get_preset("ascend-910b2")


def test_router_hits_only_bytes_already_touched():
    r = GmRouter(1.0, 4.0, share_within_launch=True, l2_bytes=1 << 20)
    buf = object()
    assert r.route(buf, "MTE2", (0, 0, 512, 1)) == (1.0, True)          # first read: HBM
    assert r.route(buf, "MTE2", (0, 0, 512, 1)) == (4.0, False)         # again: L2
    assert r.route(buf, "MTE2", (256, 0, 512, 1)) == (1.0, True)        # half new: HBM
    assert r.route(buf, "MTE2", (0, 256, 128, 3)) == (4.0, False)       # strided rows inside [0, 768)
    r.route(buf, "MTE3", (4096, 0, 64, 1))                             # a write lands in L2
    assert r.route(buf, "MTE2", (4096, 0, 64, 1)) == (4.0, False)
    assert r.shared_hit_bytes == 512 + 384 + 64
    off = GmRouter(1.0, 4.0)                                           # sharing off: the old model
    off.route(buf, "MTE2", (0, 0, 512, 1))
    assert off.route(buf, "MTE2", (0, 0, 512, 1)) == (1.0, True)


def test_nothing_is_shared_past_l2_size():
    r = GmRouter(1.0, 4.0, share_within_launch=True, l2_bytes=1000)
    buf = object()
    r.route(buf, "MTE2", (0, 0, 2000, 1))
    r.route(buf, "MTE2", (5000, 0, 100, 1))
    assert r.route(buf, "MTE2", (5000, 0, 100, 1)) == (1.0, True)


@pytest.mark.parametrize("shape", [(64, 96, 80), (256, 256, 256), (16, 1024, 512)])
def test_gemm_shared_timing_only_equals_full_and_saves_bytes(shape):
    M, N, K = shape
    rng = np.random.default_rng(1)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C, full = gemm(A, B, version="v3", l2=L2Cache(HW, share_within_launch=True))
    _, fast = gemm((M, K), (K, N), version="v3", timing_only=True, l2=L2Cache(HW, share_within_launch=True))
    _, cold = gemm((M, K), (K, N), version="v3", timing_only=True)
    np.testing.assert_allclose(C.astype(np.float64), A.astype(np.float64) @ B.astype(np.float64), rtol=5e-3, atol=5e-2)
    assert full.total_cycles == fast.total_cycles and full.hbm_bytes == fast.hbm_bytes
    assert fast.hbm_bytes <= cold.hbm_bytes and fast.total_cycles <= cold.total_cycles
    # never below reading A and B once and writing C once
    assert fast.hbm_bytes >= (M * K + K * N + M * N) * 2


def test_mixed_kernel_workspace_reads_hit_l2_when_shared():
    """The AIVs read the tile the AIC just wrote: within the launch, an L2 hit."""
    from npu_lab.lang import GlobalTensor, launch
    from npu_lab.kernels.gemm.epilogue import matmul_leakyrelu_mix_kernel
    from npu_lab.kernels.gemm.tiling import gemm_tiling
    M, K, N = 128, 64, 128
    t = gemm_tiling(M, N, K, np.float16, HW, version="v1")
    args = [GlobalTensor.empty(n, np.float16, name, timing_only=True)
            for n, name in ((M * K, "A"), (K * N, "B"), (M * N, "workspace"), (M * N, "C"))]
    cold = launch(matmul_leakyrelu_mix_kernel, t.usedCoreNum, *args, 0.1, t.pack(), timing_only=True)
    shared = launch(matmul_leakyrelu_mix_kernel, t.usedCoreNum, *args, 0.1, t.pack(), timing_only=True,
                    l2=L2Cache(HW, share_within_launch=True))
    assert "workspace" in shared.launches[0].l2_hit_buffers
    assert cold.hbm_bytes - shared.hbm_bytes >= M * N * 2     # the workspace is not read from HBM again


def test_shared_load_table():
    df = shared_load_table([(256, 256, 256), (16, 1024, 512)])
    assert list(df.index) == [(256, 256, 256), (16, 1024, 512)]
    assert ((df.hbm_saved >= 0) & (df.hbm_saved < 1)).all()
    assert (df.latency_us_shared <= df.latency_us_each_core_reads).all()
    with pytest.raises(ValueError, match="shapes is a list"):
        shared_load_table([(16, 16)])
    with pytest.raises(ValueError, match="version must be"):
        shared_load_table(version="v9")


def test_l2cache_flag_is_checked():
    with pytest.raises(TypeError, match="share_within_launch"):
        L2Cache(HW, share_within_launch="yes")
