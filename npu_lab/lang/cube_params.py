"""The parameter structs of the cube core's instructions, with Ascend C's field names, types'
ranges and defaults (the real headers: asc-devkit ``include/basic_api/kernel_struct_data_copy.h``
(Nd2NzParams), ``kernel_struct_mm.h`` (LoadData2DParams, MmadParams), ``kernel_struct_fixpipe.h``
(FixpipeParamsV220) and ``QuantMode_t``).

Positional construction follows the C++ constructors the matmul example uses
(examples/01_simd_cpp_api/00_introduction/02_matrix/matmul_basic_api/matmul_basic_api.asc):

* ``Nd2NzParams{ndNum, nValue, dValue, srcNdMatrixStride, srcDValue, dstNzC0Stride, dstNzNStride,
  dstNzMatrixStride}``
* ``LoadData2DParams{startIndex, repeatTimes, srcStride, sid, dstGap, ifTranspose, addrMode}``
* ``MmadParams{m, n, k, unitFlag, cmatrixSource, cmatrixInitVal}`` (plus ``kDirectionAlign`` by name)
* ``FixpipeParamsV220{nSize, mSize, srcStride, dstStride, reluEn, quantPre, deqScalar, ndNum,
  srcNdStride, dstNdStride, unitFlag}``

Python spells the fields in snake_case (``n_value``, ``if_transpose``, ``cmatrix_init_val``). Each
struct checks its fields' ranges (the pages' 取值范围) when built: a value out of range raises an
:class:`~npu_lab.lang.errors.AscendCRuleError` naming the field, the range and the page.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, fields

import numpy as np

from .errors import AscendCRuleError

_ISASI = "docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/"
ND2NZ_PAGE = _ISASI + "矩阵计算的搬入/DataCopy（GMToL1随路转换-ND2NZ搬运）.md"
LOAD2D_PAGE = _ISASI + "矩阵计算的搬入/LoadData_2D.md"
MMAD_PAGE = _ISASI + "Mmad计算/Mmad.md"
FIXPIPE_PAGE = _ISASI + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md"


def _whole(struct: str, name: str, value, lo: int, hi: int, page: str) -> int:
    if type(value) is int and lo <= value <= hi:          # the common case, without ABC checks
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or not lo <= value <= hi:
        raise AscendCRuleError(f"{struct}.{name} must be a whole number in [{lo}, {hi}] ({page}), got {value!r}")
    return int(value)


def _flag(struct: str, name: str, value, page: str) -> bool:
    if value is True or value is False:
        return value
    if not isinstance(value, (bool, np.bool_)) and value not in (0, 1):
        raise AscendCRuleError(f"{struct}.{name} is a bool ({page}), got {value!r}")
    return bool(value)


class QuantMode_t:
    """``QuantMode_t``: what Fixpipe does to each L0C value on the way out (kernel_struct_fixpipe.h).
    Modelled: ``NoQuant`` (float -> float, int32 -> int32), ``F322F16`` (float -> half, CAST_RINT),
    ``F322BF16`` (float -> bfloat16, CAST_RINT; bfloat16 is stored as uint16 bits), ``DEQF16``
    (int32 -> half, times the scalar ``deqScalar``) and ``VDEQF16`` (int32 -> half, times a
    per-column scale from the ``cbufWorkspace`` tensor in L1: the Fixpipe overload with four
    arguments); the others are listed and refused."""

    NoQuant = "NoQuant"
    F322F16 = "F322F16"
    F322BF16 = "F322BF16"
    DEQF16 = "DEQF16"
    VDEQF16 = "VDEQF16"
    QF322B8_PRE = "QF322B8_PRE"
    VQF322B8_PRE = "VQF322B8_PRE"
    REQ8 = "REQ8"
    VREQ8 = "VREQ8"
    ALL = ("NoQuant", "F322F16", "F322BF16", "DEQF16", "VDEQF16", "QF322B8_PRE", "VQF322B8_PRE", "REQ8", "VREQ8")
    MODELLED = ("NoQuant", "F322F16", "F322BF16", "DEQF16", "VDEQF16")
    #: the tensor (per-channel) modes: their scales come from cbufWorkspace, not deqScalar
    VECTOR = ("VDEQF16", "VQF322B8_PRE", "VREQ8")


@dataclass(frozen=True)
class Nd2NzParams:
    """``Nd2NzParams``: ``ndNum`` ND matrices of ``nValue`` rows x ``dValue`` columns, rows
    ``srcDValue`` elements apart in GM, matrices ``srcNdMatrixStride`` elements apart; in L1 each
    becomes NZ: column blocks of C0 = 32 B / sizeof(T) elements, ``dstNzC0Stride`` 32-B units apart,
    rows ``dstNzNStride`` 32-B units apart inside a block, matrices ``dstNzMatrixStride`` elements
    apart. Ranges: ND2NZ_PAGE (表4)."""

    nd_num: int = 0
    n_value: int = 0
    d_value: int = 0
    src_nd_matrix_stride: int = 0
    src_d_value: int = 0
    dst_nz_c0_stride: int = 0
    dst_nz_n_stride: int = 0
    dst_nz_matrix_stride: int = 0

    def __post_init__(self):
        s, p = "Nd2NzParams", ND2NZ_PAGE
        _whole(s, "ndNum", self.nd_num, 0, 4095, p)
        _whole(s, "nValue", self.n_value, 0, 16384, p)
        _whole(s, "dValue", self.d_value, 0, 65535, p)
        _whole(s, "srcNdMatrixStride", self.src_nd_matrix_stride, 0, 65535, p)
        _whole(s, "srcDValue", self.src_d_value, 1, 65535, p)
        _whole(s, "dstNzC0Stride", self.dst_nz_c0_stride, 1, 16384, p)
        _whole(s, "dstNzNStride", self.dst_nz_n_stride, 1, 16384, p)
        _whole(s, "dstNzMatrixStride", self.dst_nz_matrix_stride, 0, 16384, p)


@dataclass(frozen=True)
class LoadData2DParams:
    """``LoadData2DParams``: ``repeatTimes`` 512-byte fractals, the first at fractal
    ``startIndex`` of the source, the next ``srcStride`` fractals further (0: the same one again);
    in the destination ``dstGap`` fractals between one's end and the next one's start;
    ``ifTranspose`` transposes each fractal (b16 only); ``sid`` and ``addrMode`` are kept at 0 on
    the L1 -> L0 path. Ranges: LOAD2D_PAGE (表2)."""

    start_index: int = 0
    repeat_times: int = 0
    src_stride: int = 0
    sid: int = 0
    dst_gap: int = 0
    if_transpose: bool = False
    addr_mode: int = 0

    def __post_init__(self):
        s, p = "LoadData2DParams", LOAD2D_PAGE
        _whole(s, "startIndex", self.start_index, 0, 65535, p)
        _whole(s, "repeatTimes", self.repeat_times, 0, 255, p)
        _whole(s, "srcStride", self.src_stride, 0, 65535, p)
        _whole(s, "sid", self.sid, 0, 255, p)
        _whole(s, "dstGap", self.dst_gap, 0, 65535, p)
        _flag(s, "ifTranspose", self.if_transpose, p)
        if _whole(s, "addrMode", self.addr_mode, 0, 1, p):
            raise AscendCRuleError(f"LoadData2DParams.addrMode=1 (decreasing) is configurable on the GM -> L1 "
                                   f"path only ({p}); keep 0 for L1 -> L0A/L0B")


UNIT_FLAG_PAGE = _ISASI + "Mmad计算关键特性说明/UnitFlag.md"


def _unit_flag_rule(struct: str, value: int) -> str:
    """Why a non-zero unitFlag is refused, with its real rules (UNIT_FLAG_PAGE, MMAD_PAGE 表4)."""
    if value == 1:
        return (f"{struct}.unitFlag=1 is not a mode: 0 (2'b00) is off, 2 (2'b10) on without resetting the flag bits, "
                f"3 (2'b11) on and resetting them ({MMAD_PAGE}, unitFlag; {UNIT_FLAG_PAGE})")
    return (f"{struct}.unitFlag={value}: the unit-flag handshake — one flag bit per 512-B block of L0C, Mmad writes "
            "a block when its bit is 0, Fixpipe reads it when 1; Mmad and Fixpipe must both enable it (2 on the first "
            "n-1 Mmads of a K loop, 3 on the last and on the Fixpipe; Mmad and Fixpipe should move the same amount) — "
            f"is not modelled ({UNIT_FLAG_PAGE}). Use 0 and order Mmad -> Fixpipe with the M_FIX flag (a queue)")


@dataclass(frozen=True)
class MmadParams:
    """``MmadParams{m, n, k, unitFlag, cmatrixSource, cmatrixInitVal}`` (+ ``kDirectionAlign``):
    C[m, n] (+)= A[m, k] · B[k, n]; ``cmatrixInitVal`` True starts C at 0 (the header's default),
    False accumulates onto what L0C holds; ``kDirectionAlign`` (float only) aligns L0A/L0B's K to
    16 instead of 8. ``cmatrixSource`` (C from the bias table) and ``unitFlag`` are not modelled
    (must stay at their defaults). Ranges: MMAD_PAGE (表4)."""

    m: int = 0
    n: int = 0
    k: int = 0
    unit_flag: int = 0
    cmatrix_source: bool = False
    cmatrix_init_val: bool = True
    k_direction_align: bool = False

    def __post_init__(self):
        s, p = "MmadParams", MMAD_PAGE
        for name in ("m", "n", "k"):
            _whole(s, name, getattr(self, name), 0, 4095, p)
        if _whole(s, "unitFlag", self.unit_flag, 0, 3, p):
            raise AscendCRuleError(_unit_flag_rule("MmadParams", self.unit_flag))
        if _flag(s, "cmatrixSource", self.cmatrix_source, p):
            raise AscendCRuleError(f"MmadParams.cmatrixSource=true (C from the bias table, TPosition C2) is not "
                                   f"modelled; keep false ({p})")
        _flag(s, "cmatrixInitVal", self.cmatrix_init_val, p)
        _flag(s, "kDirectionAlign", self.k_direction_align, p)


@dataclass(frozen=True)
class FixpipeParamsV220:
    """``FixpipeParamsV220{nSize, mSize, srcStride, dstStride, reluEn, quantPre, deqScalar, ndNum,
    srcNdStride, dstNdStride, unitFlag}`` for L0C -> GM with NZ2ND (the default ``CFG_ROW_MAJOR``
    config): ``mSize`` x ``nSize`` values, column blocks of 16 ``srcStride`` C0 units (16 values)
    apart in L0C (the page: mSize rounded up to 16), rows ``dstStride`` elements apart in GM;
    ``quantPre`` converts (QuantMode_t), ``reluEn`` applies ReLU. Ranges: FIXPIPE_PAGE (表4)."""

    n_size: int = 0
    m_size: int = 0
    src_stride: int = 0
    dst_stride: int = 0
    relu_en: bool = False
    quant_pre: str = QuantMode_t.NoQuant
    deq_scalar: float = 0.0
    nd_num: int = 1
    src_nd_stride: int = 0
    dst_nd_stride: int = 0
    unit_flag: int = 0

    def __post_init__(self):
        s, p = "FixpipeParamsV220", FIXPIPE_PAGE
        _whole(s, "nSize", self.n_size, 0, 4095, p)
        _whole(s, "mSize", self.m_size, 0, 8192, p)
        _whole(s, "srcStride", self.src_stride, 0, 65535, p)
        _whole(s, "dstStride", self.dst_stride, 0, 2**32 - 1, p)
        _flag(s, "reluEn", self.relu_en, p)
        if self.quant_pre not in QuantMode_t.ALL:
            raise AscendCRuleError(f"{s}.quantPre must be a QuantMode_t ({', '.join(QuantMode_t.ALL)}), "
                                   f"got {self.quant_pre!r} ({p})")
        if self.quant_pre not in QuantMode_t.MODELLED:
            raise AscendCRuleError(f"{s}.quantPre={self.quant_pre} is not modelled; use one of "
                                   f"{', '.join(QuantMode_t.MODELLED)} ({p})")
        _whole(s, "ndNum", self.nd_num, 0, 65535, p)
        _whole(s, "srcNdStride", self.src_nd_stride, 0, 512, p)
        _whole(s, "dstNdStride", self.dst_nd_stride, 0, 65535, p)
        if _whole(s, "unitFlag", self.unit_flag, 0, 3, p):
            raise AscendCRuleError(_unit_flag_rule(s, self.unit_flag))


QUANT_PAGE = _ISASI + "矩阵搬出关键特性说明/随路量化.md"
QUANT_RELU_PAGE = _ISASI + "矩阵搬出关键特性说明/随路量化与随路ReLU场景组合.md"


def deq_scale_uint64(scales) -> np.ndarray:
    """Per-channel dequantisation scales (float, one per output column N) -> the uint64 words
    ``Fixpipe``'s VDEQF16 reads from ``cbufWorkspace`` (QUANT_PAGE, 表1): bits 0-31 hold the scale
    as a float32 (the hardware uses its sign, 8 exponent and the top 10 mantissa bits, 31..13),
    bit 36 (MCB) = 0 (the int32 is converted to float directly), the offset bits 37-45 = 0 (no
    offset in DEQF16). Returns a 1-D uint64 array. The page: 量化和ReLU参数不能为inf/nan和非规格化数
    (Fixpipe（L0C到GM数据搬运）.md, 约束说明), so a NaN, an infinity or a subnormal is refused; so is
    a scale that rounds to zero or overflows float32."""
    x = np.asarray(scales)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"deq_scale_uint64 takes a 1-D array of per-column scales (one per N column), got shape "
                         f"{x.shape}")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)) or x.dtype == np.bool_:
        raise TypeError(f"deq_scale_uint64: scales must be real numbers, got {x.dtype}")
    with np.errstate(over="ignore"):
        f = x.astype(np.float32)
    tiny = np.finfo(np.float32).tiny
    bad = ~np.isfinite(f) | ((f != 0) & (np.abs(f) < tiny)) | ((f == 0) & (x != 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"deq_scale_uint64: scale [{i}] = {x[i]!r} is inf, NaN or not a normal float32; the page "
                         "says 量化和ReLU参数不能为inf/nan和非规格化数 (Fixpipe（L0C到GM数据搬运）.md)")
    return f.view(np.uint32).astype(np.uint64)


def deq_scale_float(words) -> np.ndarray:
    """The float32 factor the hardware multiplies by for each uint64 quant word (QUANT_PAGE, 表1):
    M1 = bits 31..13 read as a float with 1 sign, 8 exponent and 10 mantissa bits, i.e. the low 13
    mantissa bits of the float32 cleared (the page: 将量化参数的23bits尾数位的低13bits数据位清零)."""
    w = np.asarray(words)
    if w.dtype != np.uint64:
        raise TypeError(f"quant words are uint64 (deq_scale_uint64 makes them), got {w.dtype}")
    return ((w & np.uint64(0xFFFFE000)).astype(np.uint32)).view(np.float32)


def field_names(struct) -> tuple[str, ...]:
    """The struct's fields in C++ order (snake_case)."""
    return tuple(f.name for f in fields(struct))
