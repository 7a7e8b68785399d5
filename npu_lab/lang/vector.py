"""Vector instructions (pipe ``V``), in the two forms Ascend C has.

* **tensor form** ``ctx.add(dst, src0, src1, count)`` — ``Add(dst, src0, src1, count)``: the first
  ``count`` elements, contiguous.
* **level-0 form** ``ctx.add(dst, src0, src1, mask, repeat_time, BinaryRepeatParams(...))`` —
  ``Add(dst, src0, src1, mask, repeatTime, repeatParams)``: ``repeat_time`` repeats (≤ 255) of 8
  blocks of 32 bytes; ``mask`` is an int (count mode: the first ``mask`` lanes of each repeat) or
  a list ``[mask_lo, mask_hi]`` of two uint64 bit masks (bit mode: lane i is on when its bit is
  set; ``mask_hi`` covers lanes 64..127 of 16-bit types and must be 0 for 32-bit types). Block
  strides step between the 8 blocks of a repeat, repeat strides between repeats, both in 32-byte
  blocks (``dst_blk_stride=0`` writes every block onto the same one; ``src1_rep_stride=1`` walks a
  tensor one block per repeat — how a per-row value is broadcast after ``Brcb``).

Sources: asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/基础算术/ (Add, Adds, Exp, ...),
数据填充/ (Duplicate, CreateVecIndex), 类型转换/Cast.md, and the 通用说明 pages on repeat
parameters and masks.

Cost (the model): ``issue + repeats x cycles-per-repeat`` of the instruction's kind, a repeat being
256 bytes of the widest operand (docs/cost_model.md). Every result is computed with numpy in a full
run; a timing-only run charges the same time.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np

from ..sim.costs import PER_ELEMENT_KINDS, vector_cycles
from .operands import scalar_operand
from .errors import AscendCRuleError
from .tensor import LocalTensor

MAX_REPEAT = 255


class _MaskPlaceholder:
    """``MASK_PLACEHOLDER``: the mask argument of a level-0 call whose mask comes from the mask
    register (the isSetMask = false form, set by set_vector_mask / set_mask_count)."""

    def __repr__(self) -> str:
        return "MASK_PLACEHOLDER"


MASK_PLACEHOLDER = _MaskPlaceholder()
BLOCKS_PER_REPEAT = 8
BLOCK_BYTES = 32


@dataclass(frozen=True, init=False)
class BinaryRepeatParams:
    """``BinaryRepeatParams{dstBlkStride, src0BlkStride, src1BlkStride, dstRepStride,
    src0RepStride, src1RepStride}`` (32-byte blocks)."""

    dst_blk_stride: int = 1
    src0_blk_stride: int = 1
    src1_blk_stride: int = 1
    dst_rep_stride: int = 8
    src0_rep_stride: int = 8
    src1_rep_stride: int = 8

    def __init__(self, dst_blk_stride=1, src0_blk_stride=1, src1_blk_stride=1, dst_rep_stride=8,
                 src0_rep_stride=8, src1_rep_stride=8):
        # the generated frozen __init__ sets each field through object.__setattr__: twice as slow,
        # and kernels build one of these per instruction
        self.__dict__.update(dst_blk_stride=dst_blk_stride, src0_blk_stride=src0_blk_stride,
                             src1_blk_stride=src1_blk_stride, dst_rep_stride=dst_rep_stride,
                             src0_rep_stride=src0_rep_stride, src1_rep_stride=src1_rep_stride)


@dataclass(frozen=True, init=False)
class UnaryRepeatParams:
    """``UnaryRepeatParams{dstBlkStride, srcBlkStride, dstRepStride, srcRepStride}`` (32-byte blocks)."""

    dst_blk_stride: int = 1
    src_blk_stride: int = 1
    dst_rep_stride: int = 8
    src_rep_stride: int = 8

    def __init__(self, dst_blk_stride=1, src_blk_stride=1, dst_rep_stride=8, src_rep_stride=8):
        # see BinaryRepeatParams.__init__
        self.__dict__.update(dst_blk_stride=dst_blk_stride, src_blk_stride=src_blk_stride,
                             dst_rep_stride=dst_rep_stride, src_rep_stride=src_rep_stride)


@dataclass(frozen=True, init=False)
class CopyRepeatParams:
    """``CopyRepeatParams{dstStride, srcStride, dstRepeatSize, srcRepeatSize}`` (32-byte blocks)."""

    dst_stride: int = 1
    src_stride: int = 1
    dst_repeat_size: int = 8
    src_repeat_size: int = 8

    def __init__(self, dst_stride=1, src_stride=1, dst_repeat_size=8, src_repeat_size=8):
        # see BinaryRepeatParams.__init__
        self.__dict__.update(dst_stride=dst_stride, src_stride=src_stride, dst_repeat_size=dst_repeat_size,
                             src_repeat_size=src_repeat_size)


class RoundMode:
    """``RoundMode`` of ``Cast``."""

    CAST_NONE = "CAST_NONE"
    CAST_RINT = "CAST_RINT"
    CAST_FLOOR = "CAST_FLOOR"
    CAST_CEIL = "CAST_CEIL"
    CAST_ROUND = "CAST_ROUND"
    CAST_TRUNC = "CAST_TRUNC"
    CAST_ODD = "CAST_ODD"


_MODES = (RoundMode.CAST_NONE, RoundMode.CAST_RINT, RoundMode.CAST_FLOOR, RoundMode.CAST_CEIL,
          RoundMode.CAST_ROUND, RoundMode.CAST_TRUNC, RoundMode.CAST_ODD)

_ROUND = {RoundMode.CAST_RINT: np.rint, RoundMode.CAST_FLOOR: np.floor, RoundMode.CAST_CEIL: np.ceil,
          RoundMode.CAST_ROUND: lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5),
          RoundMode.CAST_TRUNC: np.trunc}



def round_float(x: np.ndarray, dtype, mode: str) -> np.ndarray:
    """``x`` (any float or int array whose values float64 holds exactly) rounded to the float
    ``dtype`` by a Cast RoundMode, exactly: the nearest-even result of numpy's cast, moved to its
    other neighbour (``nextafter``) where the mode says so. NaN stays NaN; past the largest finite
    value the directed modes stop there or go to inf as IEEE does."""
    v = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        y = v.astype(dtype)
        if mode in (RoundMode.CAST_NONE, RoundMode.CAST_RINT):
            return y
        yb = y.astype(np.float64)
        above, below = yb > v, yb < v                # the nearest-even result overshot / undershot
        other = np.where(above, np.nextafter(y, dtype.type(-np.inf)), np.nextafter(y, dtype.type(np.inf)))
        if mode == RoundMode.CAST_FLOOR:
            move = above
        elif mode == RoundMode.CAST_CEIL:
            move = below
        elif mode == RoundMode.CAST_TRUNC:
            move = np.abs(yb) > np.abs(v)
        elif mode == RoundMode.CAST_ROUND:           # ties away from zero
            ob = other.astype(np.float64)
            move = (above | below) & (np.abs(ob - v) == np.abs(yb - v)) & (np.abs(ob) > np.abs(yb))
        elif mode == RoundMode.CAST_ODD:             # inexact: the neighbour whose last bit is 1
            bits = y.view(np.uint16 if dtype.itemsize == 2 else np.uint32 if dtype.itemsize == 4 else np.uint64)
            move = (above | below) & (bits & 1 == 0)
        else:
            raise AscendCRuleError(f"round_mode {mode!r} does not apply to a float result")
    return np.where(move, other, y).astype(dtype)


#: (isa, instruction, dtype) already found in the instruction's dtype list
_DTYPE_OK: set = set()

_BINARY = {"Add": (np.add, "simple"), "Sub": (np.subtract, "simple"), "Mul": (np.multiply, "simple"),
           "Div": (np.divide, "div"), "Max": (np.maximum, "simple"), "Min": (np.minimum, "simple")}
_FLOAT_ONLY = {"Div", "Exp"}


def need_local(*tensors, align: int = BLOCK_BYTES):
    """Vector operands are UB LocalTensors starting on a 32-byte block (通用地址对齐约束 in
    asc-devkit docs/zh/api/SIMD-API/通用说明和约束.md); a few operands document a smaller
    ``align`` (a reduction's results, MrgSort's lists)."""
    for t in tensors:
        if t.__class__ is LocalTensor and (t.region.offset_bytes + t.offset * t.dtype.itemsize) % align == 0:
            continue                     # the common case, without property look-ups
        if not isinstance(t, LocalTensor):
            raise TypeError(f"vector instructions work on UB LocalTensors, got {type(t).__name__}; "
                            "data_copy global data into UB first")
        if t.ub_address % align:
            raise AscendCRuleError(
                f"UB operand '{t.name}' starts {t.byte_offset} B into its buffer, not on a {align}-byte "
                f"boundary; vector instructions need {align}-byte aligned UB addresses. Start it at a "
                f"multiple of {max(1, align // t.dtype.itemsize)} {t.dtype.name} elements")


def _whole(name, value, lo, hi=None):
    if type(value) is int and lo <= value and (hi is None or value <= hi):   # common case, fast
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < lo \
            or (hi is not None and value > hi):
        span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise AscendCRuleError(f"{name} must be a whole number {span}, got {value!r}")
    return int(value)


def lanes_of(mask, itemsize: int) -> tuple:
    """The lanes (element positions inside one 256-byte repeat) a level-0 ``mask`` switches on,
    as a tuple (cached: the same few masks come back on every repeat of a kernel's loop)."""
    key = tuple(mask) if isinstance(mask, list) else mask
    try:
        return _lanes_cached(key, itemsize)
    except TypeError:               # unhashable junk: let the checks below say what is wrong
        return _lanes(mask, itemsize)


@functools.lru_cache(maxsize=1024)
def _lanes_cached(mask, itemsize: int) -> tuple:
    return _lanes(mask, itemsize)


def _lanes(mask, itemsize: int) -> tuple:
    per_repeat = 256 // itemsize
    if isinstance(mask, (list, tuple)):
        if len(mask) != 2:
            raise AscendCRuleError(f"a bit-mode mask is [mask_lo, mask_hi] (two uint64), got {mask!r}")
        lo, hi = (_whole("mask word", m, 0, 2**64 - 1) for m in mask)
        if per_repeat <= 64 and hi:
            raise AscendCRuleError(f"mask_hi must be 0 for {8 * itemsize}-bit types: a repeat has only "
                                   f"{per_repeat} lanes (got mask_hi={hi:#x})")
        bits = [(lo >> i) & 1 for i in range(64)] + [(hi >> i) & 1 for i in range(64)]
        return tuple(i for i in range(per_repeat) if bits[i])
    m = _whole("mask (count mode: lanes per repeat)", mask, 1)
    if m > per_repeat:
        raise AscendCRuleError(f"mask={m} is wider than one repeat: a repeat holds {per_repeat} "
                               f"{8 * itemsize}-bit elements (256 bytes)")
    return tuple(range(m))


@functools.lru_cache(maxsize=4096)
def _footprint(lanes: tuple, itemsize: int, repeat: int, blk_stride: int, rep_stride: int):
    """(offsets, last) of a level-0 operand: repeat r, lane l → r·rep + block(l)·blk + l%8;
    ``last`` is the largest offset (-1 when nothing is touched)."""
    per_block = BLOCK_BYTES // itemsize
    lanes = np.asarray(lanes, dtype=np.int64)
    within = lanes % per_block + (lanes // per_block) * blk_stride * per_block
    offsets = (np.arange(repeat)[:, None] * rep_stride * per_block + within).ravel()
    offsets.flags.writeable = False
    if len(offsets):
        lo, hi = int(offsets.min()), int(offsets.max())
        _remember_bounds(offsets, lo, hi)
        if hi - lo + 1 == len(offsets) and (len(offsets) == 1 or bool((np.diff(offsets) == 1).all())):
            _SLICES[id(offsets)] = (offsets, slice(lo, hi + 1))     # one run: index by a slice
    return offsets, (int(offsets.max()) if len(offsets) else -1)


#: (min, max) of the cached footprints, keyed by id and holding the array (so the id stays its
#: own): span_of is asked for every operand of every level-0 instruction
_BOUNDS: dict[int, tuple] = {}


def _remember_bounds(offsets: np.ndarray, lo: int, hi: int) -> None:
    if len(_BOUNDS) > 8192:
        _BOUNDS.clear()
        _SLICES.clear()
    _BOUNDS[id(offsets)] = (offsets, lo, hi)


#: the cached footprints that are one run of consecutive elements, keyed by id like _BOUNDS: a
#: slice reads a view and writes in place, where an index array gathers and scatters
_SLICES: dict[int, tuple] = {}


def as_index(off: np.ndarray):
    """``off`` as a numpy index: a slice when it is a cached footprint of consecutive elements
    (same elements, same order), else the array itself."""
    known = _SLICES.get(id(off))
    if known is not None and known[0] is off:
        return known[1]
    return off


def footprint(t: LocalTensor, lanes, repeat: int, blk_stride: int, rep_stride: int, what: str,
              blk_max: int = 255) -> np.ndarray:
    """Element offsets of operand ``t`` (checked to lie inside it). ``blk_max``: the block
    stride field's range (uint8 in BinaryRepeatParams, uint16 in UnaryRepeatParams and
    BrcbRepeatParams: asc-devkit include/basic_api/kernel_struct_unary.h, kernel_struct_brcb.h)."""
    blk_stride = _whole(f"{what} block stride", blk_stride, 0, blk_max)
    rep_stride = _whole(f"{what} repeat stride", rep_stride, 0, 65535)
    lanes = lanes if isinstance(lanes, tuple) else tuple(int(x) for x in lanes)
    off, last = _footprint(lanes, t.dtype.itemsize, repeat, blk_stride, rep_stride)
    if last >= t.count:
        raise AscendCRuleError(
            f"{what} '{t.name}': {repeat} repeat(s) with block stride {blk_stride} and repeat stride "
            f"{rep_stride} reach element {last}, past the tensor's {t.count} elements "
            "from its address; the hardware would read or write the UB beyond it. Lower repeat_time "
            "or the strides, or give the tensor more room")
    return off


def span_of(t: LocalTensor, off: np.ndarray):
    """(tensor, byte_lo, byte_hi) of the elements at ``off`` (for hazard tracking)."""
    size = t.dtype.itemsize
    base = t.offset * size
    known = _BOUNDS.get(id(off))
    if known is not None and known[0] is off:
        return t, base + known[1] * size, base + (known[2] + 1) * size
    if len(off) == 0:
        return t, base, base
    return t, base + int(off.min()) * size, base + (int(off.max()) + 1) * size


#: checked level-0 instructions (see VectorOps._level0): the same instruction on the same
#: operand places recurs every tile, and its checks and footprints depend on nothing else
_PLANS: dict = {}


def _plan_key(name, dst, srcs, mask, repeat_time, strides):
    """The _PLANS key of a level-0 call, or None when an argument is not a plain int (bools,
    numpy ints and junk take the checked path every time, so every error is still raised)."""
    if type(repeat_time) is not int:
        return None
    if type(mask) is not int:
        if type(mask) is not list or len(mask) != 2 or type(mask[0]) is not int or type(mask[1]) is not int:
            return None
        mask = (mask[0], mask[1])
    for b, r in strides:
        if type(b) is not int or type(r) is not int:
            return None
    if len(srcs) == 2:          # the common shapes, without a list
        a, b = srcs
        return (name, mask, repeat_time, tuple(strides), dst.dtype, dst.offset, dst.count,
                a.dtype, a.offset, a.count, b.dtype, b.offset, b.count)
    if len(srcs) == 1:
        a = srcs[0]
        return (name, mask, repeat_time, tuple(strides), dst.dtype, dst.offset, dst.count,
                a.dtype, a.offset, a.count)
    key = [name, mask, repeat_time, tuple(strides), dst.dtype, dst.offset, dst.count]
    for t in srcs:
        key += (t.dtype, t.offset, t.count)
    return tuple(key)


#: an instruction's scalar (Adds, Select, ...) as a 0-d array of the operand dtype, by (type, value,
#: dtype): the same few recur
_SCALARS: dict = {}


def _scalar_as(value, dtype) -> np.ndarray:
    """``np.asarray(value).astype(dtype)``, cached for plain non-zero, non-NaN ints and floats
    (0.0 and -0.0 are equal keys with different bits; NaN never equals itself)."""
    if (value.__class__ is int or value.__class__ is float and not math.isnan(value)) and value:
        key = (value.__class__, value, dtype)
        known = _SCALARS.get(key)
        if known is None:
            if len(_SCALARS) > 1024:
                _SCALARS.clear()
            known = _SCALARS[key] = np.asarray(value).astype(dtype)
            known.flags.writeable = False
        return known
    return np.asarray(value).astype(dtype)


class VectorOps:
    """Mixed into :class:`~npu_lab.lang.context.KernelContext`."""

    # ---- shared machinery -----------------------------------------------------------------
    def _vec(self, name, kind, nbytes, reads, writes, elements, repeats=None):
        # level-0: the instruction runs exactly `repeats`; tensor form: the repeats its bytes need
        key = (name, kind, nbytes if repeats is None else repeats * self.hw.vector_repeat_bytes)
        if kind in PER_ELEMENT_KINDS:     # Exp, Div: priced per element, so by the dtype too
            key = (*key, writes[0][0].dtype.itemsize)
        costs = self._vector_costs
        known = costs.get(key)
        if known is None:
            cost, reps = vector_cycles(self.hw, kind, key[2], *key[3:])
            known = costs[key] = (cost, reps, f"{name} x{reps}")    # the event's name too
        self.core.vector_repeats += known[1]
        self._exec("V", known[2], known[0], reads, writes, nbytes=nbytes, elements=elements)

    def _count(self, count, *tensors) -> int:
        n = _whole("count (elements)", count, 1)
        for t in tensors:
            if n > t.count:
                raise AscendCRuleError(f"count={n} exceeds UB tensor '{t.name}' ({t.count} elements "
                                       "from its address)")
        return n

    def _check_repeat(self, repeat_time) -> int:
        if type(repeat_time) is int and 0 <= repeat_time <= MAX_REPEAT:     # the common case
            return repeat_time
        if isinstance(repeat_time, numbers.Integral) and not isinstance(repeat_time, (bool, np.bool_)) \
                and repeat_time > MAX_REPEAT:
            raise AscendCRuleError(
                f"repeat_time must be 0..{MAX_REPEAT} (repeatTime is a uint8_t), got {repeat_time}; "
                f"split the work into instructions of at most {MAX_REPEAT} repeats, or use the tensor "
                "form with a count")
        return _whole("repeat_time", repeat_time, 0, MAX_REPEAT)

    def _check_dtype(self, name, t) -> None:
        """``t``'s dtype is in the instruction's list for this chip (its page's 数据类型 section,
        :data:`~npu_lab.capabilities.DTYPES`)."""
        key = (self.hw.isa, name, t.dtype)
        if key in _DTYPE_OK:
            return
        from ..capabilities import dtype_reason

        why = dtype_reason(self.hw.isa, name, t.dtype.name)
        if why:
            self._rule(f"{self.hw.name}: {why}; '{t.name}' is {t.dtype.name}")
        _DTYPE_OK.add(key)

    def _check_float(self, name, *tensors):
        for t in tensors:
            if t.dtype.kind != "f":
                raise AscendCRuleError(f"{name} works on float16 / float32; '{t.name}' is {t.dtype.name}")

    def _same_dtype(self, name, *tensors):
        first = tensors[0].dtype
        for t in tensors:
            if t.dtype is not first and t.dtype != first:
                break
        else:
            return
        dts = {t.dtype for t in tensors}
        if len(dts) > 1:
            sizes = {t.dtype.itemsize for t in tensors}
            fix = ("if the bytes already hold what you want (indices kept as raw bits, e.g. by "
                   "WholeReduceMax or GatherMask), view them as the other type with "
                   "tensor.reinterpret_cast(dtype) (ReinterpretCast: the same bytes, nothing converted); to "
                   "convert values, ctx.cast(dst, src, RoundMode, count) first"
                   if len(sizes) == 1 else "convert with ctx.cast(dst, src, RoundMode, count) first")
            raise AscendCRuleError(f"{name}: operands must share one dtype; got "
                                   f"{', '.join(f'{t.name}:{t.dtype.name}' for t in tensors)}: {fix}")

    def _level0(self, name, kind, fn, dst, srcs, mask, repeat_time, strides, blk_max=255):
        """Run a level-0 instruction: ``strides`` = [(blk, rep)] for dst then each src; block
        strides up to ``blk_max`` (the params struct's field width; fixed per instruction name,
        so the plan cache needs no key for it)."""
        if mask is MASK_PLACEHOLDER:
            return self._level0_set_mask(name, kind, fn, dst, srcs, repeat_time, strides, blk_max)
        if self._mask_mode != "norm":
            self._rule(f"{name} with an explicit mask while the mask mode is Counter (set_mask_count): the "
                       "instruction would read its mask as an element count. Pass MASK_PLACEHOLDER (the "
                       "isSetMask=false form) or call set_mask_norm() first (掩码操作/SetMaskCount.md: 使用完之后"
                       "调用SetMaskNorm将Mask模式恢复为Normal模式)")
        key = _plan_key(name, dst, srcs, mask, repeat_time, strides)
        plan = _PLANS.get(key) if key is not None else None
        if plan is None:
            plan = self._level0_plan(name, dst, srcs, mask, repeat_time, strides, blk_max)
            if key is not None:
                if len(_PLANS) > 8192:
                    _PLANS.clear()
                _PLANS[key] = plan
        repeat, elements, src_spans, dst_lo, dst_hi, src_at, dst_at = plan
        if len(srcs) == 1:
            reads = [(srcs[0], *src_spans[0])]
        else:
            reads = [(t, lo, hi) for t, (lo, hi) in zip(srcs, src_spans)]
        self._vec(name, kind, repeat * 256, reads, [(dst, dst_lo, dst_hi)], elements, repeats=repeat)
        if self.timing_only or repeat == 0:
            return
        if len(srcs) == 2:
            result = fn(srcs[0].data[src_at[0]], srcs[1].data[src_at[1]])   # errstate: see launch
        else:
            result = fn(*[t.data[at] for t, at in zip(srcs, src_at)])
        if result.__class__ is not np.ndarray or result.dtype != dst.dtype:
            result = np.asarray(result).astype(dst.dtype, copy=False)
        dst.data[dst_at] = result

    # ---- mask registers: SetMaskCount / SetMaskNorm / SetVectorMask (Memory矢量计算/掩码操作/) ------
    _mask_mode = "norm"            # the default (SetMaskNorm.md: 该模式为系统默认模式)
    _vector_mask = None            # what SetVectorMask last set: an int (len) or (mask_high, mask_low)

    def set_mask_count(self) -> None:
        """``SetMaskCount()``: Counter mode — a level-0 call given ``MASK_PLACEHOLDER`` processes
        the ``len`` elements of :meth:`set_vector_mask` in all, its repeat count inferred by the
        vector unit (repeatTime ignored), the last repeat partial (掩码操作/SetMaskCount.md)."""
        self._mask_mode = "count"
        self.scalar("SetMaskCount", ops=1)

    def set_mask_norm(self) -> None:
        """``SetMaskNorm()``: back to Normal mode (the default; 掩码操作/SetMaskNorm.md)."""
        self._mask_mode = "norm"
        self.scalar("SetMaskNorm", ops=1)

    def set_vector_mask(self, *args) -> None:
        """``SetVectorMask(len)`` or ``SetVectorMask(maskHigh, maskLow)`` (掩码操作/SetVectorMask.md):
        Normal mode: the mask every ``MASK_PLACEHOLDER`` level-0 call uses (len = the first len
        lanes, or the two uint64 bit words); Counter mode: ``len`` = elements in all. Charged as
        one scalar op (a register write; the page gives no cost)."""
        if len(args) == 1:
            value = _whole("SetVectorMask len", args[0], 0, 2**31 - 1)
        elif len(args) == 2:
            value = tuple(_whole("SetVectorMask mask word", a, 0, 2**64 - 1) for a in args)
        else:
            raise TypeError("set_vector_mask takes (len) or (mask_high, mask_low)")
        self._vector_mask = value
        self.scalar("SetVectorMask", ops=1)

    def _level0_set_mask(self, name, kind, fn, dst, srcs, repeat_time, strides, blk_max):
        """A level-0 call with MASK_PLACEHOLDER: the mask (and in Counter mode the count) come from
        the registers set by set_vector_mask / set_mask_count."""
        value = self._vector_mask
        if value is None:
            self._rule(f"{name} with MASK_PLACEHOLDER reads the mask register, but set_vector_mask was never "
                       "called: call set_vector_mask(len) (or (mask_high, mask_low)) first (SetVectorMask.md)")
        if self._mask_mode == "norm":
            mask = value if isinstance(value, int) else [value[1], value[0]]
            return self._level0(name, kind, fn, dst, srcs, mask, repeat_time, strides, blk_max)
        if not isinstance(value, int):
            self._rule(f"{name} in Counter mode takes the element count from SetVectorMask(len); the mask "
                       "register holds two bit words (SetVectorMask(maskHigh, maskLow)). Call set_vector_mask(len)")
        total = value
        per = 256 // dst.dtype.itemsize
        repeat = -(-total // per)
        lanes = tuple(range(per))
        offs = []
        for t, (b, r), role in zip((dst, *srcs), strides, ("dst", "src0", "src1")):
            b = _whole(f"{role} block stride", b, 0, blk_max)
            r = _whole(f"{name} {role} repeat stride (uint8 in the repeat params)", r, 0, 255)
            off = _footprint(lanes, t.dtype.itemsize, repeat, b, r)[0][:total]
            if len(off) and int(off.max()) >= t.count:
                self._rule(f"{name} in Counter mode over {total} elements: {role} '{t.name}' would be read or "
                           f"written up to element {int(off.max())}, past its {t.count}")
            offs.append(off)
        reads = [span_of(t, o) for t, o in zip(srcs, offs[1:])]
        self._vec(name, kind, repeat * 256, reads, [span_of(dst, offs[0])], total, repeats=repeat)
        if self.timing_only or total == 0:
            return
        result = fn(*[t.data[o] for t, o in zip(srcs, offs[1:])])
        dst.data[offs[0]] = np.asarray(result).astype(dst.dtype, copy=False)

    def _level0_plan(self, name, dst, srcs, mask, repeat_time, strides, blk_max=255) -> tuple:
        """Check a level-0 instruction's arguments; returns (repeat, elements, per source its
        (byte lo, byte hi), dst byte lo, dst byte hi, per source its index, dst index) — a
        function of the arguments, the operands' dtypes, offsets and counts only (see _plan_key)."""
        repeat = self._check_repeat(repeat_time)
        lanes = lanes_of(mask, dst.dtype.itemsize)
        for (_, rep), role in zip(strides, ("dst", "src0", "src1")):
            # Binary/Unary/CopyRepeatParams hold repeat strides in uint8_t (BinaryRepeatParams.md)
            _whole(f"{name} {role} repeat stride (uint8 in the repeat params)", rep, 0, None)
            if rep > 255:
                self._rule(f"{name} {role} repeat stride (uint8 in the repeat params) must be a whole number "
                           f"0..255, got {rep}: the field would keep only {rep % 256} (its low 8 bits). "
                           "Issue one instruction per row instead, or lay the rows out closer together")
        offs = [footprint(t, lanes, repeat, b, r, role, blk_max)
                for t, (b, r), role in zip((dst, *srcs), strides, ("dst", "src0", "src1"))]
        src_spans = tuple(span_of(t, o)[1:] for t, o in zip(srcs, offs[1:]))
        _, dst_lo, dst_hi = span_of(dst, offs[0])
        return (repeat, repeat * len(lanes), src_spans, dst_lo, dst_hi,
                tuple(as_index(o) for o in offs[1:]), as_index(offs[0]))

    def _tensor_form(self, name, kind, fn, dst, srcs, count):
        n = self._count(count, dst, *srcs)
        width = size = dst.dtype.itemsize
        reads = []
        for t in srcs:
            tsize = t.dtype.itemsize
            if tsize > width:
                width = tsize
            lo = t.offset * tsize
            reads.append((t, lo, lo + n * tsize))
        lo = dst.offset * size
        self._vec(name, kind, n * width, reads, [(dst, lo, lo + n * size)], n)
        if self.timing_only:
            return
        result = fn(*[t.data[:n] for t in srcs])   # errstate: see launch
        if result.__class__ is not np.ndarray or result.dtype != dst.dtype:
            result = np.asarray(result).astype(dst.dtype, copy=False)
        dst.data[:n] = result

    def _dispatch(self, name, kind, fn, dst, srcs, args, params_type):
        """Tensor form when ``args`` is (count,), level-0 when (mask, repeat_time, params)."""
        need_local(dst, *srcs)
        if name in _FLOAT_ONLY:
            self._check_float(name, dst, *srcs)
        self._same_dtype(name, dst, *srcs)
        self._check_dtype(name, dst)
        if len(args) == 1:
            return self._tensor_form(name, kind, fn, dst, srcs, args[0])
        if len(args) == 3:
            mask, repeat_time, params = args
            if not isinstance(params, params_type):
                raise TypeError(f"{name} level-0 form takes a {params_type.__name__}, got {type(params).__name__}")
            if params_type is BinaryRepeatParams:
                strides = [(params.dst_blk_stride, params.dst_rep_stride),
                           (params.src0_blk_stride, params.src0_rep_stride),
                           (params.src1_blk_stride, params.src1_rep_stride)]
            else:          # UnaryRepeatParams: uint16 block strides (kernel_struct_unary.h)
                strides = [(params.dst_blk_stride, params.dst_rep_stride),
                           (params.src_blk_stride, params.src_rep_stride)]
                return self._level0(name, kind, fn, dst, srcs, mask, repeat_time, strides, 65535)
            return self._level0(name, kind, fn, dst, srcs, mask, repeat_time, strides)
        raise TypeError(f"{name} takes (..., count) or (..., mask, repeat_time, "
                        f"{params_type.__name__}); got {len(args)} trailing argument(s)")

    # ---- binary ---------------------------------------------------------------------------
    def add(self, dst, src0, src1, *args):
        """``Add``: dst = src0 + src1."""
        self._binary("Add", dst, src0, src1, args)

    def sub(self, dst, src0, src1, *args):
        """``Sub``: dst = src0 - src1."""
        self._binary("Sub", dst, src0, src1, args)

    def mul(self, dst, src0, src1, *args):
        """``Mul``: dst = src0 * src1."""
        self._binary("Mul", dst, src0, src1, args)

    def div(self, dst, src0, src1, *args):
        """``Div``: dst = src0 / src1 (float only; slower per repeat)."""
        self._binary("Div", dst, src0, src1, args)

    def max(self, dst, src0, src1, *args):
        """``Max``: dst = maximum(src0, src1)."""
        self._binary("Max", dst, src0, src1, args)

    def min(self, dst, src0, src1, *args):
        """``Min``: dst = minimum(src0, src1)."""
        self._binary("Min", dst, src0, src1, args)

    def _binary(self, name, dst, src0, src1, args):
        fn, kind = _BINARY[name]
        self._dispatch(name, kind, fn, dst, (src0, src1), args, BinaryRepeatParams)

    # ---- with a scalar --------------------------------------------------------------------
    def adds(self, dst, src, scalar, *args):
        """``Adds``: dst = src + scalar."""
        self._scalar_op("Adds", np.add, dst, src, scalar, args)

    def muls(self, dst, src, scalar, *args):
        """``Muls``: dst = src * scalar."""
        self._scalar_op("Muls", np.multiply, dst, src, scalar, args)

    def maxs(self, dst, src, scalar, *args):
        """``Maxs``: dst = maximum(src, scalar)."""
        self._scalar_op("Maxs", np.maximum, dst, src, scalar, args)

    def mins(self, dst, src, scalar, *args):
        """``Mins``: dst = minimum(src, scalar)."""
        self._scalar_op("Mins", np.minimum, dst, src, scalar, args)

    def _scalar_op(self, name, fn, dst, src, scalar, args):
        if type(scalar) not in (int, float) and (not isinstance(scalar, (numbers.Real, np.number))
                                                 or isinstance(scalar, bool)):
            raise TypeError(f"{name} takes a scalar number, got {type(scalar).__name__}")
        need_local(src)
        scalar_operand(name, scalar, src.dtype)
        if src.dtype.kind in "iu" and (not float(scalar).is_integer()):
            raise AscendCRuleError(f"{name} on {src.dtype.name} takes an integer scalar, got {scalar!r}")
        value = _scalar_as(scalar, src.dtype)
        self._dispatch(name, "simple", lambda x: fn(x, value), dst, (src,), args, UnaryRepeatParams)

    # ---- unary ----------------------------------------------------------------------------
    def exp(self, dst, src, *args):
        """``Exp``: dst = exp(src), exact (priced by ``vector_exp_cycles_per_repeat``)."""
        self._dispatch("Exp", "exp", np.exp, dst, (src,), args, UnaryRepeatParams)

    # the unary instructions of 基础算术/ (tensor form or level-0 with UnaryRepeatParams). Costs,
    # from docs/zh/api/附录/Vector指令理论性能汇总.md (element/cycle): Abs, Reciprocal, Relu 128 half
    # / 64 float — one 256-byte repeat a cycle, the "simple" rate; Sqrt and Ln 32 (half, float),
    # the same as Exp — priced with Exp's cost field (vector_exp_cycles_per_repeat)
    def relu(self, dst, src, *args):
        """``Relu``: dst = max(src, 0) (half, int32, float; 基础算术/Relu.md)."""
        self._unary("Relu", "simple", lambda x: np.maximum(x, x.dtype.type(0)), dst, src, args)

    def abs(self, dst, src, *args):
        """``Abs``: dst = |src| (half, float; 基础算术/Abs.md)."""
        self._unary("Abs", "simple", np.abs, dst, src, args)

    def sqrt(self, dst, src, *args):
        """``Sqrt``: dst = sqrt(src) (half, float; 基础算术/Sqrt.md; NaN below 0, as numpy)."""
        self._unary("Sqrt", "exp", np.sqrt, dst, src, args)

    def ln(self, dst, src, *args):
        """``Ln``: dst = ln(src) (half, float; 基础算术/Ln.md; −inf at 0, NaN below, as numpy)."""
        self._unary("Ln", "exp", np.log, dst, src, args)

    def reciprocal(self, dst, src, *args):
        """``Reciprocal``: dst = 1 / src (half, float; 基础算术/Reciprocal.md). Model note:
        computed exactly (numpy); the page does not state the hardware's precision."""
        self._unary("Reciprocal", "simple", lambda x: np.reciprocal(x), dst, src, args)

    def _unary(self, name, kind, fn, dst, src, args):
        self._same_dtype(name, dst, src)
        self._dispatch(name, kind, fn, dst, (src,), args, UnaryRepeatParams)

    def gather(self, dst, src, src_offset, src_base_addr: int, count: int):
        """``Gather(dst, src, srcOffset, srcBaseAddr, count)`` (离散与聚合/Gather.md, tensor
        form): dst[i] = src[(srcBaseAddr + srcOffset[i]) / sizeof(T)], offsets in **bytes**
        (uint32). Offsets must be whole elements apart and inside ``src`` (on a device a stray
        offset reads whatever lies there; here it raises). Cost: the published 5 elements a
        cycle (Vector指令理论性能汇总.md, 表15) plus one issue."""
        need_local(dst, src, src_offset)
        self._same_dtype("Gather", dst, src)
        self._check_dtype("Gather", dst)
        if src_offset.dtype != np.uint32:
            self._rule(f"Gather's srcOffset is a uint32 tensor of byte offsets (Gather.md); '{src_offset.name}' "
                       f"is {src_offset.dtype.name}")
        size = src.dtype.itemsize
        base = _whole("Gather srcBaseAddr (bytes)", src_base_addr, 0, 2**32 - 1)
        if base % size:
            self._rule(f"Gather srcBaseAddr={base} B is not a multiple of sizeof({src.dtype.name}) = {size}; "
                       "Gather.md: 取值应保证src元素类型位宽对齐，否则数据发生错位")
        n = self._count(count, dst, src_offset)
        cycles = math.ceil(self.hw.vector_issue_cycles + n / 5)
        lo = dst.offset * size
        self._exec("V", f"Gather x{n}", cycles,
                   [(src, src.offset * size, (src.offset + src.count) * size),
                    (src_offset, src_offset.offset * 4, (src_offset.offset + n) * 4)],
                   [(dst, lo, lo + n * size)], nbytes=n * size, elements=n)
        if self.timing_only:
            return
        byte = base + src_offset.data[:n].astype(np.int64)
        if (byte % size).any() or (byte // size >= src.count).any():
            bad = int(np.flatnonzero((byte % size != 0) | (byte // size >= src.count))[0])
            self._rule(f"Gather: srcBaseAddr + srcOffset[{bad}] = {int(byte[bad])} B is not a whole "
                       f"{src.dtype.name} inside '{src.name}' ({src.count} elements); on the device it reads "
                       "misaligned or out-of-buffer data")
        dst.data[:n] = src.data[byte // size]

    def transpose(self, dst, src):
        """``Transpose(dst, src)`` — the plain form (数据排布转换/Transpose.md): one 16x16 block of
        two-byte elements (uint16, int16, half), dst = src.T. dst and src must not be the same
        bytes (the model copies; on the device an in-place transpose overwrites its input).
        Cost: 512 bytes at the published 256 bytes a cycle (Vector指令理论性能汇总.md): two
        repeats at the simple rate."""
        need_local(dst, src)
        self._same_dtype("Transpose", dst, src)
        self._check_dtype("Transpose", dst)
        self._count(256, dst, src)
        if dst.region is src.region and abs(dst.offset - src.offset) < 256:
            self._rule("Transpose: src and dst overlap; the 16x16 transpose reads every element of src after "
                       "writing some of dst. Use two buffers")
        lo_s, lo_d = src.offset * 2, dst.offset * 2
        self._vec("Transpose", "simple", 512, [(src, lo_s, lo_s + 512)], [(dst, lo_d, lo_d + 512)], 256)
        if not self.timing_only:
            dst.data[:256] = src.data[:256].reshape(16, 16).T.ravel()

    def shift_left(self, dst, src, scalar_value: int, *args):
        """``ShiftLeft``: dst = src << scalar_value on integers."""
        need_local(src)
        if src.dtype.kind not in "iu":
            raise AscendCRuleError(f"shift_left works on integer tensors; '{src.name}' is {src.dtype.name}")
        self._require("ShiftLeft")
        self._check_dtype("ShiftLeft", src)
        # ShiftLeft.md (A2): scalarValue in [0, 16] for 16-bit, [0, 32] for 32-bit types. A shift
        # by the full width gives 0 here (assumed: the page allows it without saying the result;
        # a logical shift that wide clears every bit)
        bits = _whole(f"ShiftLeft scalarValue (0..{8 * src.dtype.itemsize} for {src.dtype.name}, "
                      "逻辑计算/ShiftLeft.md)", scalar_value, 0, 8 * src.dtype.itemsize)
        if bits == 8 * src.dtype.itemsize:
            return self._dispatch("ShiftLeft", "simple", lambda x: np.zeros_like(x), dst, (src,), args,
                                  UnaryRepeatParams)
        self._dispatch("ShiftLeft", "simple", lambda x: np.left_shift(x, bits), dst, (src,), args,
                       UnaryRepeatParams)

    def cast(self, dst, src, round_mode: str, count):
        """``Cast(dst, src, RoundMode, count)``: convert to dst's dtype, rounding by ``round_mode``.

        The (src, dst) pair and the mode must be in the chip's table of 类型转换/Cast.md
        (:data:`~npu_lab.capabilities.CAST_MODES`; e.g. float32 -> float16 allows every mode on
        the 910B, only CAST_ODD / CAST_NONE on the 310P). Semantics (Cast.md's RoundMode enum):
        CAST_NONE rounds to nearest even where the conversion loses precision; CAST_RINT nearest
        even, CAST_FLOOR toward −inf, CAST_CEIL toward +inf, CAST_ROUND nearest with ties away
        from zero, CAST_TRUNC toward zero, CAST_ODD to the neighbour with an odd last mantissa
        bit when inexact (von Neumann). To an integer type they round to an integer; float32 ->
        float32 rounds to an integral float; to a narrower float (float32 -> float16, int32 ->
        float32) they pick the float neighbour exactly (float64 arithmetic and ``nextafter``).
        int32 -> half takes no mode: the value is multiplied by the half scale of
        :meth:`set_deq_scale` first (Cast.md: "与SetDeqScale(half scale)接口配合使用"), a rule
        error without one. Simplified: out-of-range float -> int follows numpy, not the
        hardware's saturation (not published here)."""
        from ..capabilities import DEQ, cast_modes

        need_local(dst, src)
        if round_mode not in _MODES:
            raise AscendCRuleError(f"round_mode must be a RoundMode (CAST_NONE, CAST_RINT, CAST_FLOOR, "
                                   f"CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD), got {round_mode!r}")
        self._require(f"Cast {src.dtype.name}->{dst.dtype.name}")
        allowed = cast_modes(self.hw.isa, src.dtype.name, dst.dtype.name)
        page = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/类型转换/Cast.md"
        if allowed is None:
            from ..capabilities import CAST_MODES

            pairs = ", ".join(f"{a}->{b}" for a, b in CAST_MODES.get(self.hw.isa, {}) if a == src.dtype.name)
            self._rule(f"Cast {src.dtype.name} -> {dst.dtype.name} is not in {self.hw.name}'s table of "
                       f"supported conversions ({page}); from {src.dtype.name} it has: {pairs or 'none'}. "
                       "Convert in two steps through a listed type")
        deq = None
        if allowed is DEQ:
            deq = getattr(self, "_deq_scale", None)
            if deq is None:
                self._rule(f"Cast int32 -> float16 scales by the DEQSCALE register: call "
                           f"set_deq_scale(half_scale) first ({page}: 'int32_t到half数据类型的转换，设置舍入模式"
                           "无效，需要与SetDeqScale接口配合使用'; 类型转换辅助配置接口/SetDeqScale.md)")
        elif round_mode not in allowed:
            self._rule(f"Cast {src.dtype.name} -> {dst.dtype.name} on {self.hw.name} allows "
                       f"{', '.join(allowed)} ({page}, this chip's table); got {round_mode}. Pick one of those")
        dst_dtype = dst.dtype
        if deq is not None:
            fn = lambda x: (x.astype(np.float64) * deq).astype(np.float16)
        elif dst_dtype.kind in "iu":
            fn = _ROUND[RoundMode.CAST_RINT if round_mode == RoundMode.CAST_NONE else round_mode]
        elif src.dtype == dst_dtype:                 # float -> float: to an integral value
            fn = lambda x: _ROUND[round_mode](x)
        else:
            fn = lambda x: round_float(x, dst_dtype, round_mode)
        self._tensor_form("Cast", "simple", fn, dst, (src,), count)

    def set_deq_scale(self, scale) -> None:
        """``SetDeqScale(half scale)``: the DEQSCALE register that Cast int32 -> half multiplies
        by (类型转换辅助配置接口/SetDeqScale.md; bits 0..15 hold a half). A register write on the
        scalar unit: charged as one scalar op (the model; the page gives no cost)."""
        if isinstance(scale, bool) or not isinstance(scale, (numbers.Real, np.floating)):
            raise TypeError(f"set_deq_scale takes a half scale (a number), got {type(scale).__name__}")
        with np.errstate(over="ignore"):
            half = np.float16(scale)
        if not np.isfinite(half):
            raise AscendCRuleError(f"SetDeqScale's scale is a half: {scale!r} is not a finite half "
                                   "(|scale| <= 65504)")
        self._require("SetDeqScale")
        self.scalar("SetDeqScale", ops=1)
        self._deq_scale = float(half)

    # ---- fill / copy ----------------------------------------------------------------------
    def duplicate(self, dst, scalar, *args):
        """``Duplicate(dst, scalar, count)`` or ``Duplicate(dst, scalar, mask, repeatTime,
        dstBlockStride, dstRepeatStride)``: fill with a scalar."""
        need_local(dst)
        self._check_dtype("Duplicate", dst)
        value = np.asarray(scalar_operand("Duplicate", scalar, dst.dtype)).astype(dst.dtype)
        if len(args) == 1:
            return self._tensor_form("Duplicate", "simple", lambda: value, dst, (), args[0])
        if len(args) == 4:
            mask, repeat_time, blk, rep = args
            # Duplicate's dstBlockStride is a uint16_t (Duplicate.md)
            return self._level0("Duplicate", "simple", lambda: value, dst, (), mask, repeat_time, [(blk, rep)],
                                65535)
        raise TypeError("duplicate takes (dst, scalar, count) or (dst, scalar, mask, repeat_time, "
                        f"dst_block_stride, dst_repeat_stride); got {len(args)} trailing argument(s)")

    def copy(self, dst, src, mask, repeat_time, repeat_params: CopyRepeatParams):
        """``Copy(dst, src, mask, repeatTime, CopyRepeatParams)``: a vector UB→UB copy (level-0
        only), 16- or 32-bit types. Not on the 310P's AI core (Copy（UBToUB掩码式高维数据搬运）.md;
        dav_m200/kernel_operator_data_copy_impl.h): a CapabilityError there. With ``src_stride=0`` every block of a repeat reads the same
        source block (a per-row broadcast after ``Brcb``)."""
        need_local(dst, src)
        self._require("Copy")                  # the 310P's AI core has no vector Copy (capabilities)
        self._same_dtype("Copy", dst, src)
        if dst.dtype.itemsize not in (2, 4):
            raise AscendCRuleError(f"Copy moves 16- or 32-bit elements; '{dst.name}' is {dst.dtype.name}")
        if not isinstance(repeat_params, CopyRepeatParams):
            raise TypeError(f"copy takes a CopyRepeatParams, got {type(repeat_params).__name__}")
        p = repeat_params
        self._level0("Copy", "simple", lambda x: x, dst, (src,), mask, repeat_time,
                     [(p.dst_stride, p.dst_repeat_size), (p.src_stride, p.src_repeat_size)])

    def create_vec_index(self, dst, first_value, count):
        """``CreateVecIndex(dst, firstValue, count)``: dst[i] = first_value + i (int16, half,
        int32, float: 数据填充/CreateVecIndex.md)."""
        need_local(dst)
        self._check_dtype("CreateVecIndex", dst)
        scalar_operand("CreateVecIndex", first_value, dst.dtype)
        n = self._count(count, dst)
        self._tensor_form("CreateVecIndex", "simple",
                          lambda: np.arange(n, dtype=np.float64) + first_value, dst, (), n)

    def arith_progression(self, dst, first_value, diff_value, count):
        """``ArithProgression(dst, firstValue, diffValue, count)``: dst[i] = first + i·diff."""
        need_local(dst)
        scalar_operand("ArithProgression", first_value, dst.dtype)
        scalar_operand("ArithProgression", diff_value, dst.dtype)
        n = self._count(count, dst)
        self._tensor_form("ArithProgression", "simple",
                          lambda: first_value + np.arange(n, dtype=np.float64) * diff_value, dst, (), n)
