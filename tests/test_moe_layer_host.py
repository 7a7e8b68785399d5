"""The host program of §4b compiles (g++ -fsyntax-only against the ACL stand-in); mistakes are caught."""

from __future__ import annotations

import shutil

import pytest

from npu_lab.kernels.moe_layer.host import check_host_program, host_program

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def test_the_host_program_compiles_and_has_every_step():
    assert check_host_program() == []
    text = host_program()
    for call in ("aclInit", "aclrtSetDevice", "aclrtCreateStream", "aclrtMalloc", "ACL_MEMCPY_HOST_TO_DEVICE",
                 "<<<tiling.blockNum, nullptr, stream>>>", "aclrtSynchronizeStream", "ACL_MEMCPY_DEVICE_TO_HOST",
                 "aclrtFree", "aclFinalize"):
        assert call in text


@pytest.mark.parametrize("old,new,match", [
    ("ACL_MEMCPY_DEVICE_TO_HOST));\n    CHECK_ACL(aclrtMemcpy(weights", "ACL_MEMCPY_DEVICE_TO_HOSTT));\n    CHECK_ACL(aclrtMemcpy(weights",
     "DEVICE_TO_HOSTT"),
    ("nullptr, tilingDev)", "nullptr)", "too few arguments"),
    ("aclrtSynchronizeStream(stream)", "aclrtSynchronizeStream()", "too few arguments"),
])
def test_mistakes_are_reported_on_their_line(old, new, match):
    text = host_program()
    assert old in text
    errors = check_host_program(text.replace(old, new, 1))
    assert errors and any(match in e for e in errors), errors
    assert all(e.startswith("line ") for e in errors)
