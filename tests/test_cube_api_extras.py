"""Issue 17's smaller API items: the Matmul API's base block next to our tiling, MmadWithSparse's and
unitFlag's rules (npu_lab.kernels.gemm.api_tiling, npu_lab.lang.cube, npu_lab.lang.cube_params)."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab.kernels.gemm.api_tiling import compare_with_matmul_api, matmul_api_base_block, matmul_api_scenario
from npu_lab.lang import MmadParams, TBuf, TPosition, launch, npu_kernel
from npu_lab.lang.cube_params import FixpipeParamsV220, QuantMode_t
from npu_lab.lang.errors import AscendCRuleError, CapabilityError


def test_api_base_block_follows_the_source():
    # GetMultiCoreBasicBlock then UpdateBaseBlock: 128 x 256 x (128 B of the input type)
    assert matmul_api_base_block(128, 4096, 4096, np.float16) == (128, 256, 64)
    assert matmul_api_base_block(128, 4096, 4096, np.int8) == (128, 256, 128)
    assert matmul_api_base_block(128, 4096, 4096, np.float32) == (128, 256, 32)
    assert matmul_api_base_block(40, 100, 20, np.float16) == (48, 112, 32)       # aligned to 16; K to 32
    assert matmul_api_base_block(64, 1000, 16, np.float32) == (64, 384, 32)      # small baseK and M: baseN 384
    assert matmul_api_scenario(4096, 4096, 24) == "SPLIT_MN"
    assert matmul_api_scenario(16, 4096, 24) == "SPLIT_SMALL_MN"
    with pytest.raises(ValueError, match="dtype must be"):
        matmul_api_base_block(16, 16, 16, np.float64)
    with pytest.raises(ValueError, match="single_m must be"):
        matmul_api_base_block(0, 16, 16)


def test_comparison_table():
    df = compare_with_matmul_api([(4096, 4096, 4096), (512, 128, 128)])
    assert df.loc[(4096, 4096, 4096), "api_base"] == "128x256x64"
    assert set(df.columns) >= {"ours_base", "api_base", "api_scenario", "same_base"}


def _sparse_kernel(dt_a=np.int8, dt_c=np.int32):
    @npu_kernel(core_type="cube")
    def k(ctx):
        bufs = {}
        for pos in (TPosition.A2, TPosition.B2, TPosition.CO1):
            bufs[pos] = TBuf(pos)
            ctx.pipe.init_buffer(bufs[pos], 4096)
        ctx.mmad_with_sparse(bufs[TPosition.CO1].get(dt_c), bufs[TPosition.A2].get(dt_a), bufs[TPosition.B2].get(dt_a),
                             MmadParams(16, 16, 64, 0, False, True))
    return k


def test_mmad_with_sparse_rules_then_refused():
    with pytest.raises(CapabilityError, match="not modelled.*LoadDataWithSparse"):
        launch(_sparse_kernel(), 1)
    with pytest.raises(CapabilityError, match="int8 A and B into int32 C only.*no float16 4:2-sparse"):
        launch(_sparse_kernel(np.float16, np.float32), 1)


def test_unit_flag_rules():
    with pytest.raises(AscendCRuleError, match="unitFlag=1 is not a mode"):
        MmadParams(16, 16, 16, 1, False, True)
    with pytest.raises(AscendCRuleError, match="one flag bit per 512-B block of L0C.*UnitFlag.md"):
        MmadParams(16, 16, 16, 3, False, True)
    with pytest.raises(AscendCRuleError, match="FixpipeParamsV220.unitFlag=2"):
        FixpipeParamsV220(16, 16, 16, 16, False, QuantMode_t.NoQuant, 0.0, 1, 0, 0, 2)
