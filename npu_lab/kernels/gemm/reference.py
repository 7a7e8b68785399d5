"""The GEMM reference: C = A · B accumulated in float64 by numpy, then cast to the output type the
cube path gives (Mmad.md 数据类型: half x half -> float in L0C, int8 x int8 -> int32; Fixpipe's
quantPre then casts float -> half with round-to-nearest-even, F322F16)."""

from __future__ import annotations

import numpy as np

#: input dtype -> (L0C accumulator dtype, default output dtype)
_RULES = {"float16": ("float32", "float16"), "float32": ("float32", "float32"), "int8": ("int32", "int32")}


def gemm_out_dtype(dtype, out_dtype=None) -> np.dtype:
    """The output dtype of a GEMM on ``dtype`` inputs: the default (half -> half, float -> float,
    int8 -> int32) or ``out_dtype`` when Fixpipe can write it (half inputs: float16 or float32)."""
    name = np.dtype(dtype).name
    if name not in _RULES:
        raise TypeError(f"gemm inputs must be float16, float32 or int8 (the cube's Mmad types on the A2; "
                        f"bfloat16 is not modelled), got {name}")
    acc, default = _RULES[name]
    if out_dtype is None:
        return np.dtype(default)
    out = np.dtype(out_dtype).name
    allowed = {"float32": ("float16", "float32"), "int32": ("int32", "float16")}[acc]
    if out not in allowed:
        raise TypeError(f"a GEMM on {name} accumulates in {acc}; Fixpipe writes it as {' or '.join(allowed)}, "
                        f"not {out}")
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
    int32 results wrap as the hardware's int32 accumulator does."""
    A, B = _check(A, B)
    out = gemm_out_dtype(A.dtype, out_dtype)
    if A.dtype == np.int8:
        c = A.astype(np.int64) @ B.astype(np.int64)
        c = (c + 2**31) % 2**32 - 2**31
        return c.astype(out)
    return (A.astype(np.float64) @ B.astype(np.float64)).astype(out)
