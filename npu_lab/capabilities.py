"""Which instructions each chip's vector core has (the ``isa`` of a :class:`HardwareSpec`).

Ascend C pages list, per product, whether an API exists ("产品支持情况"). Two families matter here:

* ``ascend910b`` — "Atlas A2 训练系列产品/Atlas A2 推理系列产品" (the 910B2 and the article preset);
* ``ascend310p`` — "Atlas 推理系列产品AI Core" (the 310P3).

Only the differences that a course kernel can run into are listed; every entry cites its page in
asc-devkit ``docs/zh/api/SIMD-API/基础API/`` and says what to use instead.
"""

from __future__ import annotations

import functools

ISAS = {
    "ascend910b": "Atlas A2 training / inference series (Ascend 910B): AIV vector cores",
    "ascend310p": "Atlas inference series AI Core (Ascend 310P)",
}

_P = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/"

#: (isa, instruction) -> (source page, what to do instead)
MISSING = {
    ("ascend310p", "DataCopyPad"): (
        _P + "数据搬运/DataCopyPad（GMToUB非对齐数据搬运）.md ('Atlas 推理系列产品AI Core：不支持')",
        "copy whole 32-byte blocks with data_copy (pad the tensor in global memory, or overlap "
        "the last block back onto data already written)"),
    ("ascend310p", "Sort32"): (
        _P + "排序组合（ISASI）/Sort32.md (no 'Atlas 推理系列产品AI Core' support)",
        "find the top K with K rounds of whole_reduce_max, or use the 310P's region-proposal "
        "sort (RpSort16 + MrgSort4, not modelled)"),
    ("ascend310p", "MrgSort"): (
        _P + "排序组合（ISASI）/MrgSort.md (no 'Atlas 推理系列产品AI Core' support)",
        "the 310P has MrgSort4 on region proposals (not modelled)"),
    ("ascend310p", "GatherMask pattern 7"): (
        _P + "比较与选择/GatherMask.md ('Atlas 推理系列产品AI Core，支持模式1-6')",
        "pattern 1 and 2 together, or a user pattern of all ones"),
    ("ascend310p", "Copy"): (
        _P + "数据搬运/Copy（UBToUB掩码式高维数据搬运）.md ('Atlas 推理系列产品AI Core：不支持'); asc-devkit "
        "impl/basic_api/dav_m200/kernel_operator_data_copy_impl.h: both level-0 overloads (mask bit and "
        "mask count mode) are ASCENDC_REPORT_NOT_SUPPORT",
        "a bit-masked level-0 Adds of 0 (int) or Muls by 1.0 (float) with the same strides, or "
        "DataCopy UB->UB for whole blocks"),
    ("ascend310p", "ShiftLeft"): (
        _P + "逻辑计算/ShiftLeft.md ('Atlas 推理系列产品AI Core：不支持')",
        "multiply by a power of two"),
    ("ascend310p", "Cast float32->int32"): (
        _P + "类型转换/Cast.md (the 310P AI Core table has no float -> int32 conversion)",
        "convert through float16 (float32 -> float16 -> int32) or int64"),
    ("ascend310p", "WholeReduceMax ORDER_ONLY_VALUE"): (
        "docs/api/SIMD-API/基础API/Memory矢量计算/归约计算/WholeReduceMax.md (310P: ORDER_VALUE_INDEX, ORDER_INDEX_VALUE only)",
        "ORDER_VALUE_INDEX and read every other element"),
    ("ascend310p", "WholeReduceMax ORDER_ONLY_INDEX"): (
        "docs/api/SIMD-API/基础API/Memory矢量计算/归约计算/WholeReduceMax.md (310P: ORDER_VALUE_INDEX, ORDER_INDEX_VALUE only)",
        "ORDER_VALUE_INDEX and read every other element"),
    ("ascend310p", "WholeReduceMin ORDER_ONLY_VALUE"): (
        "docs/api/SIMD-API/基础API/Memory矢量计算/归约计算/WholeReduceMin.md", "ORDER_VALUE_INDEX"),
    ("ascend310p", "WholeReduceMin ORDER_ONLY_INDEX"): (
        "docs/api/SIMD-API/基础API/Memory矢量计算/归约计算/WholeReduceMin.md", "ORDER_VALUE_INDEX"),
}

#: (isa, instruction, dtype) -> (allowed modes, source page)
MODES = {
    ("ascend910b", "Compare", "int32"): (("EQ",), _P + "比较与选择/Compare.md ('int32_t（只支持CMPMODE::EQ）')"),
    ("ascend910b", "Compares", "int32"): (("EQ",), _P + "比较与选择/Compares.md ('int32_t（只支持CMPMODE::EQ）')"),
    ("ascend310p", "Compare", "int32"): ((), _P + "比较与选择/Compare.md (310P AI Core: half, float only)"),
    ("ascend310p", "Compares", "int32"): ((), _P + "比较与选择/Compares.md (310P AI Core: half, float only)"),
}


@functools.lru_cache(maxsize=1024)
def check_supported(isa: str, instruction: str, *, dtype: str | None = None, mode: str | None = None):
    """None if the chip family ``isa`` has ``instruction`` (for ``dtype`` and ``mode``), else the
    reason as a string (callers raise it as a CapabilityError)."""
    missing = MISSING.get((isa, instruction))
    if missing is not None:
        page, instead = missing
        return (f"{instruction} does not exist on {ISAS.get(isa, isa)} ({page}); instead: {instead}")
    if dtype is not None and mode is not None:
        allowed = MODES.get((isa, instruction, dtype))
        if allowed is not None and mode not in allowed[0]:
            if not allowed[0]:
                return f"{instruction} has no {dtype} form on {ISAS.get(isa, isa)} ({allowed[1]})"
            return (f"{instruction} on {dtype} supports only mode(s) {', '.join(allowed[0])} on "
                    f"{ISAS.get(isa, isa)} ({allowed[1]}); got {mode} — the hardware would silently "
                    f"compute {allowed[0][0]}")
    return None


# ---- Cast: the per-chip tables of 类型转换/Cast.md ("支持的数据类型组合情况") ---------------------
_CAST_PAGE = _P + "类型转换/Cast.md"
_R5 = ("CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC")
_NONE = ("CAST_NONE",)
#: the mode of int32 -> half: roundMode has no effect, the value is scaled by SetDeqScale first
DEQ = ("DEQ",)
#: isa -> (src dtype, dst dtype) -> allowed RoundModes (numpy names; bfloat16 / int4 pairs omitted:
#: numpy has no such dtype). "Atlas A2 训练系列产品/Atlas A2 推理系列产品" and "Atlas 推理系列产品AI Core".
CAST_MODES = {
    "ascend910b": {
        ("int8", "float16"): _NONE, ("uint8", "float16"): _NONE,
        ("int16", "float16"): _R5 + _NONE, ("int16", "float32"): _NONE,
        ("float16", "int8"): _R5 + _NONE, ("float16", "uint8"): _R5 + _NONE,
        ("float16", "int16"): _R5, ("float16", "int32"): _R5, ("float16", "float32"): _NONE,
        ("int32", "int16"): _NONE, ("int32", "float16"): DEQ, ("int32", "float32"): _R5 + _NONE,
        ("int32", "int64"): _NONE,
        ("float32", "int16"): _R5, ("float32", "float16"): _R5 + ("CAST_ODD",) + _NONE,
        ("float32", "int32"): _R5, ("float32", "float32"): _R5, ("float32", "int64"): _R5,
        ("int64", "int32"): _NONE, ("int64", "float32"): _R5,
    },
    "ascend310p": {
        ("int8", "float16"): _NONE, ("uint8", "float16"): _NONE, ("int16", "float16"): _NONE,
        ("float16", "int8"): _R5[1:] + _NONE, ("float16", "uint8"): _R5[1:] + _NONE,
        ("float16", "int16"): ("CAST_RINT",), ("float16", "int32"): _R5, ("float16", "float32"): _NONE,
        ("int32", "int16"): _NONE, ("int32", "float16"): DEQ, ("int32", "float32"): _NONE,
        ("float32", "float16"): ("CAST_ODD",) + _NONE, ("float32", "int64"): _R5,
    },
}


def cast_modes(isa: str, src: str, dst: str):
    """The RoundModes Cast.md allows for ``src`` -> ``dst`` on ``isa`` (a tuple; :data:`DEQ` for
    int32 -> half), or None when the chip's table has no such conversion."""
    return CAST_MODES.get(isa, {}).get((src, dst))


# ---- dtypes per instruction: the 数据类型 section of each page, A2 and 310P AI Core ----------------
_ARITH = ("int16", "float16", "int32", "float32")
_FLOAT = ("float16", "float32")
_B16_B32 = ("int16", "uint16", "float16", "int32", "uint32", "float32")
#: instruction -> (numpy dtype names, page under Memory矢量计算/); the same list on both chips
#: unless DTYPES_BY_ISA says otherwise (bfloat16 has no numpy dtype; see lang.tensor.bfloat16)
DTYPES = {
    **{op: (_ARITH, "基础算术/" + op + ".md") for op in
       ("Add", "Sub", "Mul", "Max", "Min", "Adds", "Muls", "Maxs", "Mins")},
    "Div": (_FLOAT, "基础算术/Div.md"), "Exp": (_FLOAT, "基础算术/Exp.md"),
    "Abs": (_FLOAT, "基础算术/Abs.md"), "Sqrt": (_FLOAT, "基础算术/Sqrt.md"),
    "Ln": (_FLOAT, "基础算术/Ln.md"), "Reciprocal": (_FLOAT, "基础算术/Reciprocal.md"),
    "Relu": (("float16", "int32", "float32"), "基础算术/Relu.md"),
    "Duplicate": (_B16_B32, "数据填充/Duplicate.md"),
    # the 310P page lists no types (assumed the A2 list)
    "CreateVecIndex": (_ARITH, "数据填充/CreateVecIndex.md"),
    "ShiftLeft": (("int16", "uint16", "int32", "uint32"), "逻辑计算/ShiftLeft.md"),
    "Brcb": (_B16_B32, "数据填充/Brcb.md"),
    "Transpose": (("uint16", "int16", "float16"), "数据排布转换/Transpose.md"),
    "Gather": (_B16_B32, "离散与聚合/Gather.md"),
}


@functools.lru_cache(maxsize=1024)
def dtype_reason(isa: str, instruction: str, dtype: str):
    """None if ``instruction`` takes ``dtype`` on ``isa`` (or the instruction has no list here),
    else why (a sentence naming the page and the types it lists)."""
    entry = DTYPES.get(instruction)
    if entry is None or dtype in entry[0]:
        return None
    types, page = entry
    return (f"{instruction} takes {', '.join(types)} on {ISAS.get(isa, isa)} ({_P}{page}, 数据类型); "
            f"not {dtype}. Reinterpret or Cast to a listed type")
