"""Mixed precision done right (issue 17 §4): what the cube accumulates in, what int8 weights cost
and save, and why the second article's ``apply_fp32_correction`` compensates nothing.

* :func:`accumulation_error` — fp16 products accumulated in fp32 in L0C (what ``Mmad`` does: half x
  half -> float, Mmad.md; the gemm kernel ``v3``) against "fp16 accumulation": the gemm kernel
  ``v4`` with a K-split of ``k_step``, so every ``k_step`` of K is Fixpipe'd with ``F322F16`` and
  summed into a half GM tensor by ``SetAtomicAdd`` — each partial sum is rounded to fp16 and the
  running sum is fp16. Error against float64 as K grows, with the modelled latency of each.
* :func:`int8_weight_error_cost` — int8 weights and activations, the int8 gemm kernel (int8 x int8
  -> int32 in L0C) dequantised in its own Fixpipe: per tensor (``DEQF16``, one scale) or per output
  channel (``VDEQF16``, a quant word per column in L1), against half and bfloat16 — error and
  modelled cost from simulated runs, as K grows.
* :func:`kahan_sum_fp32`, :func:`sequential_sum_fp32`, :func:`kahan_lesson` — compensated summation
  of a long fp32 reduction (a vector core reducing in fp32), done as Kahan wrote it.
* :func:`article_fp32_correction` — the article's ``apply_fp32_correction`` (section 5.1) as it is
  written. It runs *after* the fp16 matmul on already-rounded values: there is no lost low part left
  to recover. With its defaults (alpha = 1, beta = 0) it is the identity, bit for bit; otherwise it
  scales by alpha + beta and subtracts the previous *element's* rounding error from the next one.

Everything is seeded (``seed=``) and returns pandas DataFrames. Errors are
``max |C - C_float64| / max |C_float64|``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ...hardware import HardwareSpec
from ...presets import get_preset
from ...lang import bfloat16_to_float
from .run import gemm

__all__ = ["accumulation_error", "int8_weight_error_cost", "kahan_sum_fp32", "sequential_sum_fp32",
           "kahan_error_bound", "kahan_lesson", "article_fp32_correction", "correction_lesson",
           "relative_error", "column_relative_error"]

#: unit roundoff of float32 (round to nearest): 2**-24
U_FP32 = 2.0 ** -24


def _whole(name: str, v, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
        raise ValueError(f"{name} must be a whole number >= {lo}, got {v!r}")
    return int(v)


def _k_values(K_values, multiple: int) -> list[int]:
    if isinstance(K_values, (str, bytes)) or not hasattr(K_values, "__iter__"):
        raise TypeError(f"K_values must be a sequence of whole numbers, got {K_values!r}")
    ks = [_whole("each K", k) for k in K_values]
    if not ks:
        raise ValueError("K_values is empty; give at least one K")
    bad = [k for k in ks if k % multiple]
    if bad:
        raise ValueError(f"K={bad[0]} is not a multiple of {multiple} (k_step): each K step is one "
                         "Fixpipe of a whole partial sum")
    return ks


def relative_error(C, ref) -> float:
    """max |C - ref| / max |ref| (float64)."""
    C, ref = np.asarray(C, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if C.shape != ref.shape:
        raise ValueError(f"shapes differ: {C.shape} vs {ref.shape}")
    scale = np.abs(ref).max()
    return float(np.abs(C - ref).max() / scale) if scale else float(np.abs(C - ref).max())


def column_relative_error(C, ref) -> float:
    """The worst column's relative error: max over n of max_m |C - ref| / max_m |ref| (float64) —
    what a per-channel scale is for: a small output channel is judged against its own size."""
    C, ref = np.asarray(C, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if C.shape != ref.shape or C.ndim != 2:
        raise ValueError(f"expected two matrices of one shape, got {C.shape} and {ref.shape}")
    scale = np.abs(ref).max(axis=0)
    err = np.abs(C - ref).max(axis=0)
    return float(np.max(np.where(scale > 0, err / np.where(scale > 0, scale, 1.0), err)))


def accumulation_error(K_values=(256, 1024, 4096), *, M: int = 32, N: int = 32, k_step: int = 128,
                       seed: int = 0, hw: HardwareSpec | str = "ascend-910b2"):
    """fp32 accumulation in L0C vs fp16 accumulation of K-step partial sums, as K grows; and the
    same product in bfloat16.

    A [M, K] and B [K, N] are standard normal, rounded to fp16 (seeded); the truth is their float64
    product. Columns per K: ``fp32_acc_fp32_out`` (v3, Fixpipe writes the fp32 L0C as float),
    ``fp32_acc_fp16_out`` (v3, one F322F16 rounding at the end — what a half GEMM returns),
    ``fp16_acc`` (v4 with ``kSplit = K / k_step``: every step's partial is rounded to fp16 and
    accumulated in fp16 GM by SetAtomicAdd), ``bf16_fp32_acc_bf16_out`` (v3 on the same values
    rounded to bfloat16, fp32 in L0C, F322BF16 at the end: bfloat16 keeps 8 significant bits to
    half's 11, so its input and output roundings cost about 8x more), their relative errors against
    float64, and the modelled latency (µs) of the v3 (``fp32_acc_us``), v4 (``fp16_acc_us``) and
    bfloat16 v3 (``bf16_us``: the same cube rate as half, Cube指令理论性能汇总.md 表1) runs."""
    import pandas as pd

    hw = get_preset(hw) if isinstance(hw, str) else hw
    M, N, k_step = _whole("M", M), _whole("N", N), _whole("k_step", k_step)
    if k_step % 16:
        raise ValueError(f"k_step={k_step} must be a multiple of 16 (one fp16 K fractal)")
    rng = np.random.default_rng(seed)
    rows = []
    for K in _k_values(K_values, k_step):
        A = rng.standard_normal((M, K)).astype(np.float16)
        B = rng.standard_normal((K, N)).astype(np.float16)
        ref = A.astype(np.float64) @ B.astype(np.float64)
        c32, tl32 = gemm(A, B, version="v3", hw=hw, out_dtype=np.float32)
        c16, tl16 = gemm(A, B, version="v3", hw=hw)
        cacc, tlacc = gemm(A, B, version="v4", hw=hw, k_split=K // k_step)
        cbf, tlbf = gemm(A.astype(np.float32), B.astype(np.float32), version="v3", hw=hw, dtype="bfloat16")
        rows.append({"K": K, "k_steps": K // k_step, "fp32_acc_fp32_out": relative_error(c32, ref),
                     "fp32_acc_fp16_out": relative_error(c16, ref), "fp16_acc": relative_error(cacc, ref),
                     "bf16_fp32_acc_bf16_out": relative_error(bfloat16_to_float(cbf), ref),
                     "fp32_acc_us": tl16.total_us, "fp16_acc_us": tlacc.total_us, "bf16_us": tlbf.total_us})
    return pd.DataFrame(rows).set_index("K")


def _quantise_int8(x: np.ndarray, axis) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 along ``axis`` (None: the whole tensor): scale = max|x| / 127 per slice;
    returns (int8 values, float64 scales)."""
    amax = np.abs(x).max(axis=axis, keepdims=axis is not None)
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    q = np.clip(np.rint(x / scale), -127, 127).astype(np.int8)
    return q, (scale.squeeze(axis) if axis is not None else scale)


def int8_weight_error_cost(K_values=(256, 1024, 4096), *, M: int = 32, N: int = 256, seed: int = 0,
                           channel_spread: float = 1.0, hw: HardwareSpec | str = "ascend-910b2"):
    """int8 weights dequantised in Fixpipe — per tensor (DEQF16) and per channel (VDEQF16) —
    against half and bfloat16: error and modelled cost side by side as K grows, every figure from a
    simulated kernel run (the gemm kernel v3).

    X [M, K] is standard normal; W [K, N] standard normal with column n scaled by
    ``exp(channel_spread * z_n)``, z standard normal (real weights' channels differ in size; 0 gives
    equal columns); seeded, float64 the truth (X @ W). Columns: ``fp16_err`` / ``fp16_us`` (the half
    GEMM), ``bf16_err`` / ``bf16_us`` (bfloat16 in and out), ``int8_tensor_err`` / ``int8_tensor_us``
    (X and W each with one scale, sx and sw; ``gemm(..., deq_scale=sx*sw)``: Fixpipe DEQF16 writes
    half(C_int32 · sx·sw)), ``int8_channel_err`` / ``int8_channel_us`` (W with one scale per output
    column, sw[n] = max|W[:, n]| / 127; Fixpipe VDEQF16 with the words sx·sw[n] in L1: one extra
    L1 -> Fixpipe-buffer copy per Fixpipe and a GM -> L1 copy per task, priced). Errors are the
    worst column's (:func:`column_relative_error`): each output channel against its own size.

    Not in the table: per-row (per-token) activation scales — Fixpipe scales columns only, so those
    need a vector-core epilogue after the GEMM (a mixed kernel, not built here)."""
    import pandas as pd

    hw = get_preset(hw) if isinstance(hw, str) else hw
    M, N = _whole("M", M), _whole("N", N)
    if isinstance(channel_spread, bool) or not isinstance(channel_spread, numbers.Real) or \
            not 0 <= channel_spread <= 4:
        raise ValueError(f"channel_spread must be a number in [0, 4] (the log-scale spread of the columns' sizes), "
                         f"got {channel_spread!r}")
    rng = np.random.default_rng(seed)
    col_scale = np.exp(channel_spread * rng.standard_normal(N))
    rows = []
    for K in _k_values(K_values, 1):
        X = rng.standard_normal((M, K))
        W = rng.standard_normal((K, N)) * col_scale
        ref = X @ W
        c16, tl16 = gemm(X.astype(np.float16), W.astype(np.float16), version="v3", hw=hw)
        cbf, tlbf = gemm(X.astype(np.float32), W.astype(np.float32), version="v3", hw=hw, dtype="bfloat16")
        xq, sx = _quantise_int8(X, None)
        wq_t, sw_t = _quantise_int8(W, None)
        wq_c, sw_c = _quantise_int8(W, 0)
        ct, tlt = gemm(xq, wq_t, version="v3", hw=hw, deq_scale=float(sx * sw_t))
        cc, tlc = gemm(xq, wq_c, version="v3", hw=hw, deq_scale=float(sx) * sw_c)
        err = column_relative_error
        rows.append({"K": K, "fp16_err": err(c16, ref), "bf16_err": err(bfloat16_to_float(cbf), ref),
                     "int8_tensor_err": err(ct, ref), "int8_channel_err": err(cc, ref),
                     "fp16_us": tl16.total_us, "bf16_us": tlbf.total_us, "int8_tensor_us": tlt.total_us,
                     "int8_channel_us": tlc.total_us})
    return pd.DataFrame(rows).set_index("K")


def _fp32_vector(x) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"expected a non-empty 1-D vector, got shape {x.shape}")
    if x.dtype != np.float32:
        raise TypeError(f"expected float32 values (the reduction's dtype), got {x.dtype}; cast with .astype(np.float32)")
    if not np.isfinite(x).all():
        raise ValueError("the vector holds inf or nan")
    return x


def sequential_sum_fp32(x) -> np.float32:
    """Left-to-right float32 sum (one rounding per addition), as a loop of fp32 adds does it."""
    return np.cumsum(_fp32_vector(x), dtype=np.float32)[-1]


def kahan_sum_fp32(x) -> np.float32:
    """Kahan's compensated sum in float32: each addition's rounding error is kept in ``c`` and fed
    back into the *next* addition of the same running sum — while the low part still exists."""
    x = _fp32_vector(x)
    s = np.float32(0.0)
    c = np.float32(0.0)
    for v in x.tolist():
        y = np.float32(np.float32(v) - c)
        t = np.float32(s + y)
        c = np.float32(np.float32(t - s) - y)
        s = t
    return s


def kahan_error_bound(x) -> float:
    """Goldberg's Theorem 8 / Higham (4.9): |kahan - exact| <= (2u + 2n u^2) * sum |x_i|, u = 2^-24."""
    x = _fp32_vector(x)
    return (2 * U_FP32 + 2 * x.size * U_FP32 ** 2) * float(np.abs(x.astype(np.float64)).sum())


def kahan_lesson(n: int = 100_000, seed: int = 0):
    """One long fp32 reduction (``n`` uniform values in [0, 1), seeded), summed three ways: sequential
    fp32, Kahan in fp32, numpy's pairwise fp32 sum; the exact sum by ``math.fsum``. Columns:
    ``sum``, ``abs_error``, ``relative_error``; ``df.attrs["kahan_bound"]`` is the bound."""
    import pandas as pd

    n = _whole("n", n)
    x = np.random.default_rng(seed).random(n, dtype=np.float32)
    exact = math.fsum(x.astype(np.float64).tolist())
    sums = {"sequential fp32": sequential_sum_fp32(x), "Kahan fp32": kahan_sum_fp32(x),
            "pairwise fp32 (numpy)": np.sum(x, dtype=np.float32)}
    df = pd.DataFrame([{"method": k, "sum": float(v), "abs_error": abs(float(v) - exact),
                        "relative_error": abs(float(v) - exact) / exact} for k, v in sums.items()]).set_index("method")
    df.attrs["exact"] = exact
    df.attrs["kahan_bound"] = kahan_error_bound(x)
    return df


def article_fp32_correction(C, alpha: float = 1.0, beta: float = 0.0) -> np.ndarray:
    """The second article's ``apply_fp32_correction`` (section 5.1), as written, in float32:
    ``y = C[i]*alpha - comp; t = beta*C[i] + y; comp = (t - beta*C[i]) - y; C[i] = t`` over the
    flattened C. Returns a new float32 array (the input is not modified).

    Why it compensates nothing: C already holds fp16-rounded results converted to fp32; the bits the
    fp16 matmul dropped are gone. ``comp`` is the rounding error of the two-term sum beta*C[i] +
    alpha*C[i] and is subtracted from the *next element*, a different output. With alpha = 1,
    beta = 0 (the article's defaults) every ``comp`` is 0 and C comes back unchanged."""
    C = np.asarray(C)
    if C.dtype != np.float32:
        raise TypeError(f"the article converts C to float32 before the correction; got {C.dtype}")
    for name, v in (("alpha", alpha), ("beta", beta)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
    a, b = np.float32(alpha), np.float32(beta)
    out = C.copy().reshape(-1)
    comp = np.float32(0.0)
    for i in range(out.size):
        ci = out[i]
        y = np.float32(ci * a - comp)
        t = np.float32(b * ci + y)
        comp = np.float32(np.float32(t - b * ci) - y)
        out[i] = t
    return out.reshape(C.shape)


def correction_lesson(M: int = 32, N: int = 32, K: int = 1024, *, seed: int = 0,
                      hw: HardwareSpec | str = "ascend-910b2"):
    """The article's sandwich on the model: a half GEMM (fp32 in L0C, F322F16 at the end), its
    output converted to fp32, ``article_fp32_correction`` applied, converted back to fp16. Rows:
    ``no correction``, ``article correction``, ``fp32 output (no rounding to fp16)``; column
    ``relative_error`` against float64. The first two are equal: the correction comes too late."""
    import pandas as pd

    M, N, K = _whole("M", M), _whole("N", N), _whole("K", K)
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    c16, _ = gemm(A, B, version="v3", hw=hw)
    corrected = article_fp32_correction(c16.astype(np.float32)).astype(np.float16)
    c32, _ = gemm(A, B, version="v3", hw=hw, out_dtype=np.float32)
    return pd.DataFrame({"relative_error": {"no correction": relative_error(c16, ref),
                                            "article correction": relative_error(corrected, ref),
                                            "fp32 output (no rounding to fp16)": relative_error(c32, ref)}})
