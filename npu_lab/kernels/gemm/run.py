"""``gemm(A, B, version=...)``: run one GEMM version on a chip; returns (C, timeline). And the
chip's rooflines for a GEMM shape."""

from __future__ import annotations

import numpy as np

from ...hardware import HardwareSpec
from ...lang import GlobalTensor, launch
from ...presets import get_preset
from ...sim.cube_costs import cube_peak_tflops, cube_roofline_us, hbm_roofline_us
from .kernels import gemm_naive_kernel, gemm_tiled_kernel
from ...lang import deq_scale_uint64, float_to_bfloat16
from .reference import BF16_NAMES, _check, gemm_dtype, gemm_out_dtype
from .tiling import GemmTiling, gemm_tiling

#: version -> (kernel, what it teaches)
GEMM_VERSIONS = {
    "v1": (gemm_naive_kernel, "naive: one base tile at a time, every A and B tile loaded for every Mmad"),
    "v2": (gemm_tiled_kernel, "L1-tiled: K panels in L1 feed several Mmads; the A panel is reused across N"),
    "v3": (gemm_tiled_kernel, "v2 double-buffered: two buffers per queue, so the four cube pipes overlap"),
    "v4": (gemm_tiled_kernel, "v3 with a K-split: more tasks for small M x N; partial sums meet by SetAtomicAdd"),
}


def _operands(A, B, M, N, K, dtype, timing_only):
    """GM tensors of A, B (Bᵀ for int8 / float: the layout LoadData needs without a transpose)."""
    b16 = np.dtype(dtype).itemsize == 2
    if timing_only:
        a = GlobalTensor.empty(M * K, dtype, "A", timing_only=True)
        b = GlobalTensor.empty(K * N, dtype, "B" if b16 else "B_T", timing_only=True)
        return a, b
    a = GlobalTensor.from_array(np.ascontiguousarray(A), "A")
    b = GlobalTensor.from_array(np.ascontiguousarray(B if b16 else B.T), "B" if b16 else "B_T")
    return a, b


def gemm(A, B, *, version: str = "v3", hw: HardwareSpec | str = "ascend-910b2", out_dtype=None,
         tiling: GemmTiling | None = None, atomic: bool = True, timing_only: bool = False, l2=None,
         inputs_in_l2: bool = False, deq_scale=None, **tiling_kw):
    """C = A · B on the cube cores of ``hw``; returns ``(C, timeline)`` (C is None when timing-only).

    ``A`` [M, K] and ``B`` [K, N]: float16, float32 or int8 arrays, or bfloat16 as uint16 bits
    (:func:`npu_lab.lang.float_to_bfloat16`); ``dtype="bfloat16"`` with float arrays rounds them to
    bfloat16 first (nearest even). A bfloat16 GEMM returns bfloat16 bits (uint16; read them with
    ``bfloat16_to_float``), or float32 with ``out_dtype=np.float32``. In a timing-only run, ``A`` may
    be the shape ``(M, K)`` and ``B`` ``(K, N)`` with ``dtype=`` in ``tiling_kw``. ``version``: v1..v4
    (:data:`GEMM_VERSIONS`). ``tiling``: a :class:`GemmTiling` (default :func:`gemm_tiling` of the
    version; ``base=``, ``k_split=``, ``step_k=`` pass through). ``atomic`` (v4): SetAtomicAdd for
    the K-split (False shows the overwritten partial sums). C starts zeroed (the host clears it; not
    charged — a real operator runs a memset or ``InitGlobalMemory`` before an atomic accumulation).
    ``l2``: an :class:`~npu_lab.sim.l2.L2Cache` (A and B resident in it are read from L2);
    ``inputs_in_l2=True``: A and B were just written by earlier kernels and sit in a fresh L2, so
    every (re-)read of them is an L2 hit (the L2 model has no within-launch reuse yet: without
    this, a tile read again by another core or another N tile comes from HBM).

    ``deq_scale`` (int8 inputs, v2..v4): dequantise int32 -> half in Fixpipe — a float is one
    scale for all of C (quantPre DEQF16, ``deqScalar``); a 1-D array of N floats one per column
    (VDEQF16: the words :func:`~npu_lab.lang.deq_scale_uint64` makes, copied GM -> L1 and handed to
    Fixpipe as its cbufWorkspace). C is then float16: ``C[m, n] = half(float(C_int32[m, n]) * s[n])``
    with s[n] cut to the (1, 8, 10) format the hardware multiplies by (随路量化.md)."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    if version not in GEMM_VERSIONS:
        raise ValueError(f"version must be one of {', '.join(GEMM_VERSIONS)}, got {version!r}")
    dtype = tiling_kw.pop("dtype", None)
    if timing_only and isinstance(A, tuple):
        (M, K), (K2, N) = A, B
        if K != K2:
            raise ValueError(f"inner dimensions differ: A {A}, B {B}")
        dtype = gemm_dtype(np.float16 if dtype is None else dtype)
        gemm_out_dtype(dtype)
    else:
        if isinstance(dtype, str) and dtype in BF16_NAMES:
            A, B = np.asarray(A), np.asarray(B)
            for name, x in (("A", A), ("B", B)):
                if x.dtype != np.uint16 and not np.issubdtype(x.dtype, np.floating):
                    raise TypeError(f"dtype='bfloat16': {name} must be float (rounded to bfloat16 here) or uint16 "
                                    f"bfloat16 bits, got {x.dtype}")
            A = A if A.dtype == np.uint16 else float_to_bfloat16(A)
            B = B if B.dtype == np.uint16 else float_to_bfloat16(B)
        elif dtype is not None and np.asarray(A).dtype != gemm_dtype(dtype):
            raise TypeError(f"dtype={dtype!r} but A is {np.asarray(A).dtype}: dtype= names the inputs' type of a "
                            "timing-only run (or 'bfloat16' to round float inputs); cast A and B instead")
        A, B = _check(A, B)
        (M, K), N = A.shape, B.shape[1]
        dtype = A.dtype
    deq = None
    if deq_scale is not None:
        deq, out_dtype = _deq_operand(deq_scale, dtype, out_dtype, version, N, timing_only)
    out = gemm_out_dtype(dtype, out_dtype)
    if tiling is None:
        if deq is not None and not isinstance(deq, float):
            tiling_kw["per_channel_dequant"] = True          # L1 keeps room for the quant words
        tiling = gemm_tiling(M, N, K, dtype, hw, version=version, **tiling_kw)
    elif not isinstance(tiling, GemmTiling):
        raise TypeError(f"tiling must be a GemmTiling (from gemm_tiling), got {type(tiling).__name__}")
    elif tiling_kw:
        raise TypeError(f"pass either tiling= or tiling options ({sorted(tiling_kw)}), not both")
    if (tiling.M, tiling.N, tiling.Ka) != (M, N, K):
        raise ValueError(f"the tiling is for {tiling.M}x{tiling.N}x{tiling.Ka}, the matrices are {M}x{N}x{K}")
    if tiling.kSplit > 1 and atomic and out == np.uint16:
        raise TypeError("a bfloat16 K-split adds its partial sums into GM with SetAtomicAdd<bfloat16_t>: the A2 has it "
                        "(原子操作/SetAtomicAdd.md) but the model's atomic add does not take bfloat16 bits; pass "
                        "out_dtype=np.float32 (float partial sums, SetAtomicAdd<float>) or k_split=1")
    a, b = _operands(A, B, M, N, K, dtype, timing_only)
    if inputs_in_l2:
        if l2 is not None:
            raise ValueError("pass l2= or inputs_in_l2=True, not both")
        from ...sim.l2 import L2Cache
        l2 = L2Cache(hw)
        l2.touch([a.buffer, b.buffer])
    c = GlobalTensor.empty(M * N, out, "C", timing_only=timing_only)
    kernel = GEMM_VERSIONS[version][0]
    use_atomic = bool(atomic) and tiling.kSplit > 1
    args = (a, b, c, use_atomic, tiling.pack()) + (() if deq is None else (deq,))
    tl = launch(kernel, tiling.usedCoreNum, *args, hw=hw, timing_only=timing_only, name=f"gemm_{version}", l2=l2)
    return (None if timing_only else c.data.reshape(M, N).copy()), tl


def _deq_operand(deq_scale, dtype, out_dtype, version, N, timing_only):
    """(the kernel's ``deq`` argument, the output dtype) for ``gemm(..., deq_scale=...)``."""
    if dtype != np.int8:
        raise TypeError(f"deq_scale dequantises an int8 GEMM's int32 accumulators in Fixpipe ((V)DEQF16: int32_t -> "
                        f"half); the inputs are {dtype.name}")
    if version == "v1":
        raise ValueError("deq_scale needs a tiled version (v2, v3, v4): the naive kernel v1 writes int32")
    if out_dtype is not None and np.dtype(out_dtype) != np.float16:
        raise TypeError(f"(V)DEQF16 writes half; out_dtype must be float16 (or None), got {np.dtype(out_dtype).name}")
    if np.ndim(deq_scale) == 0:
        if isinstance(deq_scale, bool) or not isinstance(deq_scale, (int, float, np.integer, np.floating)):
            raise TypeError(f"deq_scale must be a float (per tensor) or N floats (per channel), got {deq_scale!r}")
        deq_scale_uint64(np.array([deq_scale], np.float64))        # finite, normal: checked once
        return float(deq_scale), np.float16
    s = np.asarray(deq_scale)
    if s.shape != (N,):
        raise ValueError(f"per-channel deq_scale must have one scale per column of C: shape ({N},), got {s.shape}")
    words = np.zeros(-(-N // 4) * 4, np.uint64)                    # whole 32-B units for the GM -> L1 copy
    words[:N] = deq_scale_uint64(s)
    if timing_only:
        return GlobalTensor.empty(words.size, np.uint64, "deq", timing_only=True), np.float16
    return GlobalTensor.from_array(words, "deq"), np.float16


def gemm_roofline(M: int, N: int, K: int, dtype=np.float16, hw: HardwareSpec | str = "ascend-910b2") -> dict:
    """The chip's bounds for one GEMM: cube time at the published rate (all cube cores), HBM time
    for the minimum traffic (A, B read once, C written once), and which one binds."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    dtype = gemm_dtype(dtype)
    size = dtype.itemsize
    out = gemm_out_dtype(dtype).itemsize
    min_bytes = (M * K + K * N) * size + M * N * out
    cube = cube_roofline_us(hw, M, N, K, dtype)
    hbm = hbm_roofline_us(hw, min_bytes)
    return {"flops": 2.0 * M * N * K, "cube_tflops": cube_peak_tflops(hw, dtype), "cube_us": cube,
            "min_hbm_bytes": min_bytes, "hbm_us": hbm, "bound": "cube" if cube >= hbm else "HBM",
            "floor_us": max(cube, hbm)}


def gemm_ladder(M: int, N: int, K: int, dtype=np.float16, hw: HardwareSpec | str = "ascend-910b2", *,
                versions=tuple(GEMM_VERSIONS), inputs_in_l2: bool = False):
    """The GEMM ladder at one shape, timing-only: a pandas DataFrame with one row per version —
    latency (µs), achieved TFLOPS, the fraction of the chip's floor (the larger of the cube and
    HBM rooflines), HBM bytes moved, the bottleneck verdict — what a roofline plot draws."""
    import pandas as pd

    hw = get_preset(hw) if isinstance(hw, str) else hw
    unknown = [v for v in versions if v not in GEMM_VERSIONS]
    if unknown or not versions:
        raise ValueError(f"versions must be some of {', '.join(GEMM_VERSIONS)}, got {versions!r}")
    roof = gemm_roofline(M, N, K, dtype, hw)
    rows = []
    for v in versions:
        _, tl = gemm((M, K), (K, N), version=v, hw=hw, timing_only=True, dtype=dtype, inputs_in_l2=inputs_in_l2)
        verdict, _why = tl.bottleneck()
        rows.append({"version": v, "what": GEMM_VERSIONS[v][1], "latency_us": tl.total_us,
                     "tflops": roof["flops"] / (tl.total_us * 1e-6) / 1e12,
                     "fraction_of_roofline": roof["floor_us"] / tl.total_us, "hbm_mb": tl.hbm_bytes / 1e6,
                     "bottleneck": verdict})
    return pd.DataFrame(rows).set_index("version")
