"""The decode listings' extra C++ builds (npu_lab/kernels/decode/listing_cases.py CPP_BUILDS):
attention.cpp with bfloat16_t K/V compiles against asc-devkit's headers (its sizeof(T) == 2
branch is Cast<float, bfloat16_t>), and a wrong type in that build is caught on its line.
Skipped, with the reason, when the headers or a compiler are missing (as tests/test_cpp_compile.py)."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab.cpp import compile_check as cc
from npu_lab.kernels.decode import decode_attention
from npu_lab.kernels.decode.listing_cases import CPP_BUILDS, cpp_build_text
from npu_lab.lang import float_to_bfloat16
from tests.test_cpp_compile import _devkit_or_skip

BUILDS = [(listing, *b[:3]) for listing, builds in CPP_BUILDS.items() for b in builds]


def test_the_bf16_build_is_registered_and_the_python_runs_bf16():
    assert ("decode/attention.cpp", "DTYPE_K", "bfloat16_t", ("ascend-910b2",)) in BUILDS
    text = cpp_build_text("decode/attention.cpp", "DTYPE_K", "bfloat16_t")
    assert "KernelDecodeAttention<bfloat16_t, false>" in text and "sizeof(T) == 2" in text
    rng = np.random.default_rng(0)
    k = float_to_bfloat16(rng.standard_normal((1, 16, 1, 64)).astype(np.float32))
    q = rng.standard_normal((1, 2, 64)).astype(np.float32)
    assert decode_attention(q, k, k, [16], chunk=8).out.shape == (1, 2, 64)


@pytest.mark.parametrize("listing, macro, cpp_type, chips", BUILDS, ids=[f"{b[0]}:{b[2]}" for b in BUILDS])
def test_extra_build_compiles(listing, macro, cpp_type, chips):
    _devkit_or_skip()
    text = cpp_build_text(listing, macro, cpp_type)
    for chip in chips:
        assert cc.compile_listing(text, chip, name=listing.split("/")[-1]) == [], (listing, cpp_type, chip)


def test_a_cast_with_no_overload_fails_in_the_bf16_build():
    """Negative control: bfloat16 -> float has CAST_NONE only on dav_c220; a bfloat16_t destination
    for half rows has no Cast overload at all, and the compile says so on that line."""
    _devkit_or_skip()
    text = cpp_build_text("decode/attention.cpp", "DTYPE_K", "bfloat16_t")
    old = "Cast(kf, kt, RoundMode::CAST_NONE, s * D);"
    assert text.count(old) == 1
    line = text[:text.index(old)].count("\n") + 1
    bad = text.replace(old, "Cast(kt, kt.ReinterpretCast<int64_t>(), RoundMode::CAST_NONE, s * D);")
    diags = cc.compile_listing(bad, "ascend-910b2", name="attention.cpp")
    assert diags and line in [d.line for d in diags], diags


def test_bad_build_names():
    with pytest.raises(ValueError, match="no extra C\\+\\+ build"):
        cpp_build_text("decode/append.cpp", "DTYPE_K", "bfloat16_t")
    with pytest.raises(ValueError, match="registers the builds"):
        cpp_build_text("decode/attention.cpp", "DTYPE_K", "int8_t")
