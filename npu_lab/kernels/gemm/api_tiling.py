"""What the high-level ``Matmul`` API's tiling would choose, next to :func:`~npu_lab.kernels.gemm.gemm_tiling`
(issue 17 §3, "a short comparison").

The high-level API (asc-devkit examples/01_simd_cpp_api/00_introduction/02_matrix/matmul_advanced_api:
``MultiCoreMatmulTiling`` + ``SetDim`` + ``GetTiling`` on the host, ``Matmul<...>`` + ``IterateAll`` on
the kernel) fills the same ``TCubeTiling`` fields our tiling has (usedCoreNum, singleCoreM/N/K,
baseM/N/K, stepKa/Kb, depthA1/B1, dbL0A/B/C). Its algorithm is 4400 lines
(impl/adv_api/tiling/matmul/matmul_tiling_algorithm.cpp); this module reproduces only its first
decision on the 910B — which multi-core scenario a shape falls in and the *base block* it starts
from — exactly as the source writes it:

* ``GetMultiCoreScenario``: SPLIT_MN when M >= 128 and M·N > 26214 x cores (26214 = 128 x 256 x 0.8),
  SPLIT_SMALL_MN when M·N < 26214 x cores, else OTHERS (also OTHERS with a K-split or a fixed
  single shape);
* ``GetMultiCoreBasicBlock``: baseM 128 (256 when L0C is 256 KB), baseN 256, baseK = 128 B of the
  input type (64 half, 128 int8, 32 float);
* ``UpdateBaseBlock`` for a single-core shape (sm, sn): baseK = min(baseK, Ka aligned to 32); baseM =
  128 if sm >= 128 else sm aligned to 16; baseN = 256 (384 when baseK <= 32 and baseM <= 64) if sn
  is at least that, else sn aligned to 16.

Everything after (the L1 factors stepKa/depthA1, the L0 double buffers, the dims search) is not
reproduced; :func:`compare_with_matmul_api` applies the rules above to *our* single-core shape, so
the comparison is "which base block the API would give this core's task", not the API's full plan.
"""

from __future__ import annotations

import numpy as np

from ...hardware import HardwareSpec
from ...presets import get_preset
from .tiling import gemm_tiling

__all__ = ["matmul_api_scenario", "matmul_api_base_block", "compare_with_matmul_api", "API_TILING_SOURCE"]

API_TILING_SOURCE = "asc-devkit impl/adv_api/tiling/matmul/matmul_tiling_algorithm.cpp"
_MN_LIMIT = 26214          # 128 * 256 * 0.8 (GetMultiCoreScenario)
_BITS = {"float16": 16, "int8": 8, "float32": 32}


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


def matmul_api_scenario(M: int, N: int, cores: int) -> str:
    """``GetMultiCoreScenario`` on the 910B (no K-split, no fixed single shape)."""
    if M >= 128 and M * N > _MN_LIMIT * cores:
        return "SPLIT_MN"
    if M * N < _MN_LIMIT * cores:
        return "SPLIT_SMALL_MN"
    return "OTHERS"


def matmul_api_base_block(single_m: int, single_n: int, K: int, dtype=np.float16,
                          hw: HardwareSpec | str = "ascend-910b2") -> tuple[int, int, int]:
    """(baseM, baseN, baseK) of ``GetMultiCoreBasicBlock`` then ``UpdateBaseBlock`` for a core's
    single shape (``single_m`` x ``single_n``, K = Ka)."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    name = np.dtype(dtype).name
    if name not in _BITS:
        raise ValueError(f"dtype must be float16, int8 or float32 (the cube's inputs), got {name}")
    for label, v in (("single_m", single_m), ("single_n", single_n), ("K", K)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{label} must be a whole number >= 1, got {v!r}")
    base_m = 256 if hw.l0c_bytes == 262144 else 128
    base_k = 128 * 8 // _BITS[name]
    base_k = min(base_k, _align(K, 32))               # "32 is more efficient than 16"
    base_m = 128 if single_m >= 128 else _align(single_m, 16)
    max_n = 384 if base_k <= 32 and base_m <= 64 else 256
    base_n = max_n if single_n >= max_n else _align(single_n, 16)
    return base_m, base_n, base_k


def compare_with_matmul_api(shapes=((4096, 4096, 4096), (1024, 1024, 1024), (16, 4096, 4096), (512, 128, 128)),
                            dtype=np.float16, hw: HardwareSpec | str = "ascend-910b2"):
    """A DataFrame per (M, N, K): our tiling (v3) — blockDim, single-core shape, base tile — and the
    base block and scenario the Matmul API's rules give for that single-core shape (module docstring)."""
    import pandas as pd

    hw = get_preset(hw) if isinstance(hw, str) else hw
    rows = []
    for M, N, K in shapes:
        t = gemm_tiling(M, N, K, dtype, hw, version="v3")
        api = matmul_api_base_block(t.singleCoreM, t.singleCoreN, K, dtype, hw)
        rows.append({"M": M, "N": N, "K": K, "usedCoreNum": t.usedCoreNum,
                     "single": f"{t.singleCoreM}x{t.singleCoreN}x{t.singleCoreK}",
                     "ours_base": f"{t.baseM}x{t.baseN}x{t.baseK}",
                     "api_base": "x".join(map(str, api)),
                     "api_scenario": matmul_api_scenario(M, N, hw.cube_cores),
                     "same_base": (t.baseM, t.baseN, t.baseK) == api})
    return pd.DataFrame(rows).set_index(["M", "N", "K"])
