"""A kernel reaches global memory only through its instructions (npu_lab.lang.launch,
GlobalTensor.data): inside a launch, GM is read-only to the kernel's own Python, so an exercise
"solved" with numpy — writing the output, or copying the numpy reference into it — fails
``check_kernel`` with a message saying what the kernel did and the rule. The library's DMA
instructions still write GM, and outside a launch ``.data`` is writable as before."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab import GlobalTensor, launch
from npu_lab.course.kernel_check import check_kernel
from npu_lab.kernels.scaled_add import ScaledAddTiling, scaled_add, scaled_add_reference
from npu_lab.lang import AscendCRuleError


def _numpy_output(ctx, x_gm, y_gm, z_gm, tiling_bytes):
    alpha = ScaledAddTiling.unpack(tiling_bytes).alpha
    z_gm.data[:] = scaled_add_reference(x_gm.data, y_gm.data, alpha)      # reads inputs, writes z


def _numpy_inplace(ctx, x_gm, y_gm, z_gm, tiling_bytes):
    alpha = ScaledAddTiling.unpack(tiling_bytes).alpha
    np.multiply(x_gm.data, alpha, out=z_gm.data)
    z_gm.data[...] += y_gm.data


@pytest.mark.parametrize("kernel", [_numpy_output, _numpy_inplace])
def test_a_numpy_kernel_fails_check_kernel_naming_the_rule(kernel):
    result = check_kernel(kernel, "01.scaled_add_double_buffer")
    assert result.correct is False
    assert "AscendCRuleError" in result and "wrote a GlobalTensor through numpy" in result
    assert "DataCopy / DataCopyPad" in result


def test_the_rule_applies_inside_a_launch_only_and_instructions_still_write():
    x = np.arange(4096, dtype=np.float32)
    y = np.ones(4096, dtype=np.float32)
    z, _ = scaled_add(x, y, 2.0)                       # a real kernel: DataCopy writes z
    np.testing.assert_allclose(z, 2 * x + y)
    z_gm = GlobalTensor.empty(8, np.float32, "z")
    z_gm.data[:] = 1.0                                 # host code may fill a GM tensor
    assert GlobalTensor.kernel_running == 0

    def writes(ctx, z_gm):
        z_gm.data[0] = 5.0

    with pytest.raises(AscendCRuleError, match="read-only to the kernel's Python"):
        launch(writes, 1, z_gm)
    assert GlobalTensor.kernel_running == 0 and z_gm.data[0] == 1.0     # reset, nothing written
    z_gm.data[0] = 2.0

    def reads(ctx, z_gm):                              # reading GM from Python stays allowed
        assert z_gm.data[0] == 2.0

    launch(reads, 1, z_gm)
