"""The GEMM reference: C = A · B accumulated in float64 by numpy, then cast to the output type the
cube path gives (Mmad.md 数据类型: half x half -> float in L0C, int8 x int8 -> int32; Fixpipe's
quantPre then casts float -> half with round-to-nearest-even, F322F16).

bfloat16: numpy has no bfloat16 type, so a bfloat16 matrix is its uint16 bits
(:func:`npu_lab.lang.float_to_bfloat16` makes them, round to nearest even; ``bfloat16_to_float``
reads them back exactly). bfloat16 x bfloat16 -> float in L0C (Mmad.md 表7), Fixpipe F322BF16 back
to bfloat16 bits (or NoQuant to float)."""

from __future__ import annotations

import numpy as np

from ...lang import bfloat16_to_float, float_to_bfloat16

#: input dtype -> (L0C accumulator dtype, default output dtype)
_RULES = {"float16": ("float32", "float16"), "float32": ("float32", "float32"), "int8": ("int32", "int32"),
          "uint16": ("float32", "uint16")}          # uint16 = bfloat16 bits
#: the names gemm takes for bfloat16 (stored as uint16)
BF16_NAMES = ("bfloat16", "bf16")


def gemm_dtype(dtype) -> np.dtype:
    """numpy dtype of a GEMM input: ``"bfloat16"`` / ``"bf16"`` -> uint16 (its bits), else
    ``np.dtype(dtype)``."""
    if isinstance(dtype, str) and dtype in BF16_NAMES:
        return np.dtype(np.uint16)
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be float16, float32, int8 or 'bfloat16', got {dtype!r}") from None


def gemm_out_dtype(dtype, out_dtype=None) -> np.dtype:
    """The output dtype of a GEMM on ``dtype`` inputs: the default (half -> half, float -> float,
    int8 -> int32) or ``out_dtype`` when Fixpipe can write it (half inputs: float16 or float32)."""
    name = gemm_dtype(dtype).name
    if name not in _RULES:
        raise TypeError(f"gemm inputs must be float16, float32, int8 or bfloat16 (uint16 bits; the cube's Mmad types "
                        f"on the A2, Mmad.md 表7), got {name}")
    acc, default = _RULES[name]
    if out_dtype is None:
        return np.dtype(default)
    out = gemm_dtype(out_dtype).name
    allowed = {"float32": ("float16", "float32"), "int32": ("int32", "float16"),
               "uint16": ("uint16", "float32")}[acc if name != "uint16" else "uint16"]
    if out not in allowed:
        shown = " or ".join("bfloat16 (uint16 bits)" if a == "uint16" else a for a in allowed)
        raise TypeError(f"a GEMM on {'bfloat16' if name == 'uint16' else name} accumulates in {acc}; Fixpipe writes "
                        f"it as {shown}, not {out}")
    return np.dtype(out)


def _check(A, B) -> tuple[np.ndarray, np.ndarray]:
    A, B = np.asarray(A), np.asarray(B)
    if A.ndim != 2 or B.ndim != 2:
        raise ValueError(f"gemm takes 2-D matrices A [M, K] and B [K, N]; got shapes {A.shape} and {B.shape}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {A.shape}, B is {B.shape}; A's columns must equal B's rows")
    if 0 in A.shape or 0 in B.shape:
        raise ValueError(f"empty matrices: A {A.shape}, B {B.shape}")
    if A.dtype != B.dtype:
        raise TypeError(f"A and B must have the same dtype (Mmad's fm and filter), got {A.dtype} and {B.dtype}")
    gemm_out_dtype(A.dtype)
    return A, B


def gemm_reference(A, B, out_dtype=None) -> np.ndarray:
    """C = A · B in float64 (int64 for int8), cast to the GEMM's output dtype (:func:`gemm_out_dtype`).
    int32 results wrap as the hardware's int32 accumulator does. bfloat16 (uint16 bits): the exact
    values in float64, the product rounded to bfloat16 bits (via float32: the rare double rounding is
    within any bfloat16 tolerance) or to float32."""
    A, B = _check(A, B)
    out = gemm_out_dtype(A.dtype, out_dtype)
    if A.dtype == np.uint16:
        c = bfloat16_to_float(A).astype(np.float64) @ bfloat16_to_float(B).astype(np.float64)
        return float_to_bfloat16(c) if out == np.uint16 else c.astype(out)
    if A.dtype == np.int8:
        c = A.astype(np.int64) @ B.astype(np.int64)
        c = (c + 2**31) % 2**32 - 2**31
        return c.astype(out)
    return (A.astype(np.float64) @ B.astype(np.float64)).astype(out)
