"""Compare, select, gather and broadcast on the vector unit (pipe ``V``).

Sources: asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/比较与选择/ (Compare.md,
Compares.md, Select.md, GatherMask.md) and 数据填充/Brcb.md. The rules modelled:

* ``Compare`` / ``Compares`` write a **bit mask** (uint8; element i is bit i % 8 of byte i // 8).
  The element count must fill whole 256-byte repeats ("count个元素所占空间256字节对齐"; the
  hardware drops the tail silently). On the 910B int32 supports only ``EQ`` (the hardware runs
  EQ whatever mode it is given); the 310P has no int32 compare. The level-0 ``mask`` is a
  reserved parameter there ("保留参数，设置无效"): every repeat compares all its lanes.
* ``Select`` with a ``SELMODE``: bit 1 takes src0, bit 0 takes src1 (a tensor in
  VSEL_TENSOR_TENSOR_MODE, a scalar in VSEL_TENSOR_SCALAR_MODE; VSEL_CMPMASK_SPR reuses the first
  256/sizeof(T) bits in every repeat).
* ``GatherMask`` keeps the elements a pattern selects (built-in patterns 1–7, or a user uint32 /
  uint16 bit pattern), packed to the front of dst, and returns how many it kept (``rsvdCnt``;
  C++ returns it through a reference). Pattern 7 does not exist on the 310P. Counter mode
  (reduceMode = true): on the 910B ``mask`` elements a repeat, placed by src0BlockStride and
  src0RepeatStride as in normal mode (配置方式一); on the 310P ``mask`` elements in all (配置方式二).
  The call leaves the mask mode Normal.
* ``Brcb``: each of 8 source elements per repeat fills one 32-byte block of dst; src and dst
  may be parts of one buffer, never the same bytes.

* ``Select`` in modes 1 and 2 (and ``Brcb`` on the 310P) use 8 KB of UB as the library's own
  scratch ("使用时需要预留8KB的Unified Buffer空间"). That is Ascend C's reserved UB
  (docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md: usable UB is
  192KB − 256B − 8KB), modelled once as ``HardwareSpec.asc_reserved_ubuf_bytes``: the allocator
  never hands it out, so no kernel budget charges it. Compiled with
  ``--cce-disable-asc-reserved-ubuf`` (``hw.disable_asc_reserved_ubuf``) the 8 KB is ordinary UB
  and these calls are compile errors (静态Tensor编程.md, 使用预留UB空间的API范围: 2201 lists
  AddDeqRelu and Select); here they raise.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

import numpy as np

from .operands import scalar_operand
from .errors import AscendCRuleError
from .tensor import LocalTensor
from .vector import (
    BinaryRepeatParams,
    UnaryRepeatParams,
    _scalar_as,
    _whole,
    as_index,
    footprint,
    need_local,
    span_of,
)

_CMP = {"LT": np.less, "GT": np.greater, "EQ": np.equal, "LE": np.less_equal, "GE": np.greater_equal,
        "NE": np.not_equal}


class CMPMODE:
    """``CMPMODE``: src0 <mode> src1."""

    LT, GT, EQ, LE, GE, NE = "LT", "GT", "EQ", "LE", "GE", "NE"


class SELMODE:
    """``SELMODE`` of Select."""

    VSEL_CMPMASK_SPR = "VSEL_CMPMASK_SPR"
    VSEL_TENSOR_SCALAR_MODE = "VSEL_TENSOR_SCALAR_MODE"
    VSEL_TENSOR_TENSOR_MODE = "VSEL_TENSOR_TENSOR_MODE"


@dataclass(frozen=True, init=False)
class GatherMaskParams:
    """``GatherMaskParams{src0BlockStride, repeatTimes, src0RepeatStride, src1RepeatStride}``
    (strides in 32-byte blocks)."""

    src0_block_stride: int = 1
    repeat_times: int = 0
    src0_repeat_stride: int = 8
    src1_repeat_stride: int = 8

    def __init__(self, src0_block_stride=1, repeat_times=0, src0_repeat_stride=8, src1_repeat_stride=8):
        # see BinaryRepeatParams.__init__ (one per instruction: the frozen __init__ is slow)
        self.__dict__.update(src0_block_stride=src0_block_stride, repeat_times=repeat_times,
                             src0_repeat_stride=src0_repeat_stride, src1_repeat_stride=src1_repeat_stride)


@dataclass(frozen=True, init=False)
class BrcbRepeatParams:
    """``BrcbRepeatParams(dstBlkStride, dstRepStride)`` (32-byte blocks)."""

    dst_blk_stride: int = 1
    dst_rep_stride: int = 8

    def __init__(self, dst_blk_stride=1, dst_rep_stride=8):
        # see BinaryRepeatParams.__init__
        self.__dict__.update(dst_blk_stride=dst_blk_stride, dst_rep_stride=dst_rep_stride)


#: UB the library's Select (modes 1, 2) and, on the 310P, Brcb use as scratch (Select.md, Brcb.md):
#: Ascend C's reserved UB, HardwareSpec.asc_reserved_ubuf_bytes (kept for callers that cite it)
SCRATCH_RESERVE_BYTES = 8 * 1024


#: built-in GatherMask patterns: which lanes of every group of 2 or 4 are kept
GATHER_PATTERNS = {1: (2, 0), 2: (2, 1), 3: (4, 0), 4: (4, 1), 5: (4, 2), 6: (4, 3), 7: (1, 0)}


def pack_bits(bits: np.ndarray) -> np.ndarray:
    """Booleans → uint8 bytes, element i = bit i % 8 of byte i // 8 (the hardware's order)."""
    return np.packbits(np.asarray(bits, bool), bitorder="little")


def unpack_bits(mask: np.ndarray, n: int) -> np.ndarray:
    """uint8 (or wider) mask bytes → the first ``n`` booleans."""
    raw = np.ascontiguousarray(mask).view(np.uint8)
    if n <= 8 * raw.size:          # unpack only what is asked; 0/1 bytes are valid booleans
        return np.unpackbits(raw, count=n, bitorder="little").view(bool)
    return np.unpackbits(raw, bitorder="little")[:n].astype(bool)


@functools.lru_cache(maxsize=256)
def _builtin_keep(pattern: int, lanes_per_repeat: int, repeat: int) -> tuple:
    """(kept lanes as booleans over all repeats, how many) of a built-in GatherMask pattern."""
    group, pick = GATHER_PATTERNS[pattern]
    keep = np.tile(np.arange(lanes_per_repeat) % group == pick, repeat)
    keep.flags.writeable = False
    return keep, int(keep.sum())


#: dtypes Compare / Compares take
_CMP_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.int32))
_MASK_DTYPES = (np.dtype(np.uint8), np.dtype(np.int8))


#: every lane of a 256-byte repeat, per lane count (GatherMask's normal mode reads whole repeats)
_ALL_LANES = {64: tuple(range(64)), 128: tuple(range(128))}
#: footprints of level-0 Compare sources and Brcb destinations, by operand place and strides: the
#: same call recurs every tile (the arrays are cached by _footprint, so they stay the same objects)
_CMP_OFFS: dict = {}
#: level-0 Compare calls that passed every check, by _compare_key: (elements, spans, indices)
_CMP_PLANS: dict = {}


def _compare_key(isa, dst, src0, src1, cmp_mode, args):
    """The _CMP_PLANS key of a level-0 Compare (None unless every argument is plain: LocalTensors,
    a str mode, int mask / repeat / strides — anything else takes the checked path)."""
    if len(args) != 3 or dst.__class__ is not LocalTensor or src0.__class__ is not LocalTensor \
            or src1.__class__ is not LocalTensor or cmp_mode.__class__ is not str:
        return None
    mask, repeat_time, p = args
    if type(mask) is not int or type(repeat_time) is not int or p.__class__ is not BinaryRepeatParams:
        return None
    strides = (p.src0_blk_stride, p.src0_rep_stride, p.src1_blk_stride, p.src1_rep_stride)
    if type(strides[0]) is not int or type(strides[1]) is not int or type(strides[2]) is not int \
            or type(strides[3]) is not int:
        return None
    return (isa, cmp_mode, mask, repeat_time, strides, dst.dtype, dst.offset, dst.count,
            src0.dtype, src0.offset, src0.count, src1.dtype, src1.offset, src1.count)
_BRCB_DST: dict = {}


def _same_view(a, b, n: int) -> bool:
    """Do tensors ``a`` and ``b`` see the same first ``n`` elements (same buffer, place, dtype)?"""
    return a.region is b.region and a.offset == b.offset and a.dtype == b.dtype


def _user_keep(words: np.ndarray, repeat: int, step: int, per_repeat_words: int, lanes: int) -> np.ndarray:
    """The lanes a user GatherMask pattern keeps over ``repeat`` repeats: repeat r reads the
    ``per_repeat_words`` words from word r·step (step 0: the same pattern every repeat)."""
    if not repeat:
        return np.zeros(0, bool)
    if step == 0:
        return np.tile(unpack_bits(words[:per_repeat_words], lanes), repeat)
    if step == per_repeat_words and per_repeat_words * 8 * words.dtype.itemsize == lanes:
        return unpack_bits(words[:repeat * step], repeat * lanes)      # patterns back to back
    return np.concatenate([unpack_bits(words[r * step:r * step + per_repeat_words], lanes)
                           for r in range(repeat)])


_SEL_MODES = (SELMODE.VSEL_CMPMASK_SPR, SELMODE.VSEL_TENSOR_SCALAR_MODE, SELMODE.VSEL_TENSOR_TENSOR_MODE)


class SelectOps:
    """Mixed into :class:`~npu_lab.lang.context.KernelContext`."""

    def _cmp_rules(self, name, dst, src0, mode):
        need_local(dst, src0)
        if mode not in _CMP:
            raise AscendCRuleError(f"{name} mode must be a CMPMODE (LT GT EQ LE GE NE), got {mode!r}")
        if dst.dtype not in _MASK_DTYPES:
            raise AscendCRuleError(f"{name} writes a bit mask into a uint8 tensor; '{dst.name}' is {dst.dtype.name}")
        if src0.dtype not in _CMP_DTYPES:
            raise AscendCRuleError(f"{name} compares float16, float32 or int32; '{src0.name}' is {src0.dtype.name}")
        self._require(name, dtype=src0.dtype, mode=mode)

    def _cmp_count(self, name, count, src0):
        n = _whole("count (elements)", count, 1)
        per_repeat = 256 // src0.dtype.itemsize
        if n % per_repeat:
            self._rule(f"{name} of {n} {src0.dtype.name}: the count must fill whole 256-byte repeats "
                       f"(a multiple of {per_repeat}); the hardware compares only the first "
                       f"{n // per_repeat * per_repeat} and leaves the mask bits of the last "
                       f"{n % per_repeat} unwritten. Pad the data to {-(-n // per_repeat) * per_repeat} elements")
        return n

    def _need_scratch(self, what: str, page: str) -> None:
        """The instruction uses Ascend C's reserved UB (outside the allocator: nothing to check)
        unless the kernel is compiled with --cce-disable-asc-reserved-ubuf, where it does not
        compile."""
        if self.hw.disable_asc_reserved_ubuf:
            self._rule(f"{what} uses Ascend C's reserved UB ({self.hw.asc_reserved_ubuf_bytes} B, "
                       f"docs/zh/api/SIMD-API/基础API/Memory矢量计算/{page}: 预留8KB), which "
                       "--cce-disable-asc-reserved-ubuf (hw.disable_asc_reserved_ubuf=True) gives to the "
                       "kernel: the call is a compile error (docs/zh/guide/编程指南/编程模型/AI-Core-SIMD编程/"
                       "基于Tensor的CPP编程/静态Tensor编程.md, 使用预留UB空间的API范围). Compile without the "
                       "option, or use Compare + a bit-masked level-0 instruction instead")

    def compare(self, dst, src0, src1, cmp_mode: str, *args):
        """``Compare(dst, src0, src1, cmpMode, count)`` or level-0 ``Compare(dst, src0, src1,
        cmpMode, mask, repeatTime, BinaryRepeatParams)``: dst bits = src0 <mode> src1."""
        key = _compare_key(self.hw.isa, dst, src0, src1, cmp_mode, args)
        plan = _CMP_PLANS.get(key) if key is not None else None
        if plan is not None:        # checked before: only the operands' UB alignment can differ
            need_local(src1)
            need_local(dst, src0)
            n, spans, idx = plan
            self._vec("Compare", "simple", n * src0.dtype.itemsize,
                      [(src0, *spans[0]), (src1, *spans[1])], [(dst, *spans[2])], n)
            if not self.timing_only:
                bits = _CMP[cmp_mode](src0.data[idx[0]], src1.data[idx[1]])
                dst.region.storage[spans[2][0]:spans[2][1]] = np.packbits(bits, bitorder="little")
            return
        need_local(src1)
        self._cmp_rules("Compare", dst, src0, cmp_mode)
        self._same_dtype("Compare", src0, src1)
        if len(args) == 1:
            n = self._cmp_count("Compare", args[0], src0)
            self._count(n, src0, src1)
            self._count(n // 8, dst)
            self._mask_out("Compare", dst, (src0, src1), [slice(0, n)] * 2, n, _CMP[cmp_mode])
            return
        if len(args) != 3 or not isinstance(args[2], BinaryRepeatParams):
            raise TypeError("compare takes (dst, src0, src1, mode, count) or (..., mode, mask, "
                            "repeat_time, BinaryRepeatParams)")
        mask, repeat_time, p = args
        self._full_mask("Compare", mask, src0)
        repeat = self._check_repeat(repeat_time)
        lanes = _ALL_LANES[256 // src0.dtype.itemsize]
        strides = (p.src0_blk_stride, p.src0_rep_stride, p.src1_blk_stride, p.src1_rep_stride)
        # the footprints depend on these alone: cached (plain ints only, so bad ones are still checked)
        okey = (src0.dtype, src0.offset, src0.count, src1.offset, src1.count, repeat, strides) \
            if type(strides[0]) is int and type(strides[1]) is int and type(strides[2]) is int \
            and type(strides[3]) is int else None
        offs = _CMP_OFFS.get(okey) if okey is not None else None
        if offs is None:
            offs = [footprint(src0, lanes, repeat, p.src0_blk_stride, p.src0_rep_stride, "src0"),
                    footprint(src1, lanes, repeat, p.src1_blk_stride, p.src1_rep_stride, "src1")]
            if okey is not None:
                if len(_CMP_OFFS) > 4096:
                    _CMP_OFFS.clear()
                _CMP_OFFS[okey] = offs
        n = repeat * len(lanes)
        self._count(max(n // 8, 1), dst)
        self._mask_out("Compare", dst, (src0, src1), offs, n, _CMP[cmp_mode])
        if key is not None and n:
            if len(_CMP_PLANS) > 4096:
                _CMP_PLANS.clear()
            lo = dst.offset * dst.dtype.itemsize
            _CMP_PLANS[key] = (n, (span_of(src0, offs[0])[1:], span_of(src1, offs[1])[1:], (lo, lo + -(-n // 8))),
                               (as_index(offs[0]), as_index(offs[1])))

    def compares(self, dst, src0, src1_scalar, cmp_mode: str, *args):
        """``Compares(dst, src0, scalar, cmpMode, count)`` or level-0 with ``(mask, repeatTime,
        UnaryRepeatParams)``: dst bits = src0 <mode> scalar."""
        self._cmp_rules("Compares", dst, src0, cmp_mode)
        scalar = np.asarray(scalar_operand("Compares", src1_scalar, src0.dtype)).astype(src0.dtype)
        fn = lambda a: _CMP[cmp_mode](a, scalar)
        if len(args) == 1:
            n = self._cmp_count("Compares", args[0], src0)
            self._count(n, src0)
            self._count(n // 8, dst)
            self._mask_out("Compares", dst, (src0,), [slice(0, n)], n, fn)
            return
        if len(args) != 3 or not isinstance(args[2], UnaryRepeatParams):
            raise TypeError("compares takes (dst, src0, scalar, mode, count) or (..., mode, mask, "
                            "repeat_time, UnaryRepeatParams)")
        mask, repeat_time, p = args
        self._full_mask("Compares", mask, src0)
        repeat = self._check_repeat(repeat_time)
        lanes = tuple(range(256 // src0.dtype.itemsize))
        offs = [footprint(src0, lanes, repeat, p.src_blk_stride, p.src_rep_stride, "src0")]
        n = repeat * len(lanes)
        self._count(max(n // 8, 1), dst)
        self._mask_out("Compares", dst, (src0,), offs, n, fn)

    def _full_mask(self, name, mask, src0):
        per_repeat = 256 // src0.dtype.itemsize
        full = mask == per_repeat or (isinstance(mask, (list, tuple)) and len(mask) == 2 and
                                      mask[0] == 2**64 - 1 and (per_repeat <= 64 and mask[1] == 0
                                                                or per_repeat == 128 and mask[1] == 2**64 - 1))
        if not full:
            self._rule(f"{name}: on this chip the level-0 mask is a reserved parameter "
                       f"(保留参数，设置无效) — every repeat compares all {per_repeat} lanes whatever "
                       f"mask says. Pass mask={per_repeat} and ignore the bits you do not need")

    def _mask_out(self, name, dst, srcs, offs, n, fn):
        """``offs``: per source, its footprint (element offsets) or a slice of its first n."""
        reads = []
        for t, o in zip(srcs, offs):
            if o.__class__ is slice:
                size = t.dtype.itemsize
                reads.append((t, t.offset * size, (t.offset + n) * size))
            else:
                reads.append(span_of(t, o))
        lo = dst.offset * dst.dtype.itemsize
        self._vec(name, "simple", n * srcs[0].dtype.itemsize, reads, [(dst, lo, lo + -(-n // 8))], n)
        if self.timing_only:
            return
        bits = fn(*[t.data[as_index(o)] for t, o in zip(srcs, offs)])
        # dst is uint8 / int8 (_cmp_rules) and holds the bytes (_count): write its storage bytes
        packed = np.packbits(bits, bitorder="little") if bits.__class__ is np.ndarray and bits.dtype == bool \
            else pack_bits(bits)
        dst.region.storage[lo:lo + -(-n // 8)] = packed

    def select(self, dst, sel_mask, src0, src1, sel_mode: str, count):
        """``Select(dst, selMask, src0, src1, selMode, count)``: dst = bit ? src0 : src1 (src1 a
        tensor in VSEL_TENSOR_TENSOR_MODE / VSEL_CMPMASK_SPR, a scalar in
        VSEL_TENSOR_SCALAR_MODE)."""
        need_local(dst, sel_mask, src0)
        modes = _SEL_MODES
        if sel_mode not in modes:
            raise AscendCRuleError(f"select mode must be a SELMODE ({', '.join(modes)}), got {sel_mode!r}")
        self._check_float("Select", dst, src0)
        self._same_dtype("Select", dst, src0)
        if sel_mask.dtype.kind != "u":
            raise AscendCRuleError(f"Select's mask is an unsigned bit mask (uint8..uint64), '{sel_mask.name}' "
                                   f"is {sel_mask.dtype.name}")
        scalar_mode = sel_mode == SELMODE.VSEL_TENSOR_SCALAR_MODE
        if scalar_mode == isinstance(src1, LocalTensor):
            raise AscendCRuleError(f"{sel_mode} takes src1 as a {'scalar' if scalar_mode else 'LocalTensor'}; "
                                   f"got {type(src1).__name__}")
        if scalar_mode:
            scalar_operand("Select", src1, dst.dtype)
        n = self._count(count, dst, src0, *(() if scalar_mode else (src1,)))
        if sel_mode != SELMODE.VSEL_CMPMASK_SPR:
            self._need_scratch("Select in " + sel_mode, "比较与选择/Select.md")
        per_repeat = 256 // dst.dtype.itemsize
        mask_bits = per_repeat if sel_mode == SELMODE.VSEL_CMPMASK_SPR else n
        mask_bytes = -(-mask_bits // 8)
        if mask_bytes > sel_mask.nbytes:
            raise AscendCRuleError(f"Select over {n} elements consumes {mask_bits} mask bits; '{sel_mask.name}' "
                                   f"holds only {sel_mask.nbytes * 8}")
        size = dst.dtype.itemsize
        lo = sel_mask.offset * sel_mask.dtype.itemsize
        reads = [(sel_mask, lo, lo + mask_bytes), (src0, src0.offset * size, (src0.offset + n) * size)]
        if not scalar_mode:
            lo = src1.offset * src1.dtype.itemsize
            reads.append((src1, lo, lo + n * size))
        self._vec("Select", "simple", n * size, reads, [(dst, dst.offset * size, (dst.offset + n) * size)], n)
        if self.timing_only:
            return
        lo = sel_mask.offset * sel_mask.dtype.itemsize       # the mask's bytes, as uint8
        # unpack_bits of those bytes (mask_bits <= 8 * mask_bytes): 0/1 bytes are valid booleans
        bits = np.unpackbits(sel_mask.region.storage[lo:lo + mask_bytes], count=mask_bits,
                             bitorder="little").view(bool)
        if sel_mode == SELMODE.VSEL_CMPMASK_SPR:
            bits = np.resize(bits, n)
        out = dst.data[:n]
        if scalar_mode:
            other = _scalar_as(src1, dst.dtype)
        elif _same_view(src1, dst, n):       # dst is src1: only the src0 lanes change
            np.putmask(out, bits, src0.data[:n])     # src0 has dst's dtype: no cast either way
            return
        else:
            other = src1.data[:n]
        if _same_view(src0, dst, n):         # dst is src0: only the other lanes change
            if other.dtype == out.dtype:     # putmask = copyto(where=) without casting, faster
                np.putmask(out, np.invert(bits, out=bits), other)     # bits is ours: invert in place
            else:
                np.copyto(out, other, where=~bits)
        else:
            out[...] = np.where(bits, src0.data[:n], other)

    def gather_mask(self, dst, src0, src1_pattern, reduce_mode: bool, mask: int,
                    params: GatherMaskParams) -> int:
        """``GatherMask(dst, src0, src1Pattern, reduceMode, mask, GatherMaskParams, rsvdCnt)``:
        keep the selected elements of src0, packed to the front of dst; returns ``rsvdCnt``.
        ``src1_pattern`` is 1–7 (built-in) or a uint32 / uint16 LocalTensor of pattern bits."""
        need_local(dst, src0)
        self._same_dtype("GatherMask", dst, src0)
        if dst.dtype.itemsize not in (2, 4):
            raise AscendCRuleError(f"GatherMask gathers 16- or 32-bit elements; '{dst.name}' is {dst.dtype.name}")
        if not isinstance(params, GatherMaskParams):
            raise TypeError(f"gather_mask takes a GatherMaskParams, got {type(params).__name__}")
        self._mask_mode = "norm"       # GatherMask.md: the call leaves the mask mode Normal (Counter callers set it again)
        per_repeat = 256 // src0.dtype.itemsize
        user = isinstance(src1_pattern, LocalTensor)
        if user:
            want = np.uint32 if src0.dtype.itemsize == 4 else np.uint16
            if src1_pattern.dtype != want:
                raise AscendCRuleError(f"a GatherMask user pattern for {src0.dtype.name} is a {np.dtype(want).name} "
                                       f"tensor of bits; '{src1_pattern.name}' is {src1_pattern.dtype.name}")
        else:
            if type(src1_pattern) is int and src1_pattern in GATHER_PATTERNS:   # the common case
                pass
            elif isinstance(src1_pattern, (bool, np.bool_)) or not isinstance(src1_pattern, numbers.Integral) \
                    or src1_pattern not in GATHER_PATTERNS:
                raise AscendCRuleError(f"GatherMask built-in pattern must be 1..7 (1 even, 2 odd, 3-6 one of "
                                       f"every 4, 7 all), got {src1_pattern!r}")
            if src1_pattern == 7:
                self._require("GatherMask pattern 7")
        if reduce_mode:
            # counter mode: the 910B takes `mask` elements per repeat, the 310P `mask` in all
            lanes_per_repeat = _whole("GatherMask mask (counter mode: elements)", mask, 1, 2**32 - 1)
            repeat = 1 if self.hw.isa == "ascend310p" else _whole("repeat_times", params.repeat_times, 1, 255)
            if lanes_per_repeat * src0.dtype.itemsize % 32 and repeat > 1:
                self._rule("GatherMask counter mode with several repeats needs mask elements to fill whole "
                           "32-byte blocks")
        else:
            lanes_per_repeat = per_repeat
            repeat = _whole("GatherMaskParams.repeat_times", params.repeat_times, 0, 255)
            block_stride, rep_stride = params.src0_block_stride, params.src0_repeat_stride
        if reduce_mode and self.hw.isa == "ascend310p":
            # 配置方式二 (the 310P): `mask` elements in all, read contiguously
            n = repeat * lanes_per_repeat
            if n > src0.count:
                self._rule(f"GatherMask reads {n} elements past '{src0.name}' ({src0.count})")
            offs = slice(0, n)
            read = (src0, src0.byte_offset, src0.byte_offset + n * src0.dtype.itemsize)
        elif reduce_mode:
            # 配置方式一 (the 910B): `mask` elements a repeat, placed by src0BlockStride within a
            # repeat and src0RepeatStride between repeats, as in normal mode (GatherMask.md:
            # "两种取值都支持：按需配置src0BlockStride、src0RepeatStride参数")
            offs = footprint(src0, tuple(range(lanes_per_repeat)), repeat, params.src0_block_stride,
                             params.src0_repeat_stride, "src0")
            n = len(offs)
            read = span_of(src0, offs)
            offs = as_index(offs)
        else:
            offs = footprint(src0, _ALL_LANES[per_repeat], repeat, block_stride, rep_stride, "src0")
            n = len(offs)
            read = span_of(src0, offs)
            offs = as_index(offs)
        if user:
            words_per_repeat = -(-lanes_per_repeat // (8 * src1_pattern.dtype.itemsize))
            # user patterns: repeat r reads from word r·src1RepeatStride blocks (both modes on the
            # 910B, GatherMask.md: "迭代间间隔由src1RepeatStride决定，迭代内src1Pattern连续消耗");
            # the 310P's single counter-mode pass consumes the pattern contiguously
            step = words_per_repeat if reduce_mode and self.hw.isa == "ascend310p" \
                else params.src1_repeat_stride * 32 // src1_pattern.dtype.itemsize
            need = (repeat - 1) * step + words_per_repeat if repeat else 0
            if need > src1_pattern.count:
                self._rule(f"GatherMask pattern '{src1_pattern.name}' holds {src1_pattern.count} words; "
                           f"{repeat} repeats need {need}")
        reads = [read]
        if user and repeat:
            reads.append((src1_pattern, src1_pattern.byte_offset, src1_pattern.byte_offset + need * src1_pattern.dtype.itemsize))
        # rsvdCnt is known only from the data; the instruction's time is not
        self._vec("GatherMask", "gather_mask", max(n, 1) * src0.dtype.itemsize, reads,
                  [(dst, dst.byte_offset, dst.byte_offset + min(n, dst.count) * dst.dtype.itemsize)], n,
                  repeats=repeat if not reduce_mode else None)
        if user:
            if self.timing_only:
                return 0
            keep = _user_keep(src1_pattern.data, repeat, step, words_per_repeat, lanes_per_repeat)
            kept = int(np.count_nonzero(keep))
        else:
            keep, kept = _builtin_keep(int(src1_pattern), lanes_per_repeat, repeat)
        if kept > dst.count:
            self._rule(f"GatherMask keeps {kept} elements but '{dst.name}' has room for {dst.count}")
        if not self.timing_only:
            dst.data[:kept] = src0.data[offs][keep]
        return kept

    def brcb(self, dst, src, repeat_time: int, params: BrcbRepeatParams):
        """``Brcb(dst, src, repeatTime, BrcbRepeatParams)``: for repeat i and j < 8, the 32-byte
        block ``i*dstRepStride + j*dstBlkStride`` of dst is filled with src[8*i + j]. Both
        strides are uint16 (kernel_struct_brcb.h); src and dst may share a buffer but not bytes.
        Model note: on the 310P a dstBlkStride other than 1 runs the header's scalar fallback (a
        GetValue, an S_V flag and a one-block Duplicate per block: asc-devkit
        impl/basic_api/dav_m200/kernel_operator_vec_brcb_impl.h, "only support for dstblockStride
        = 1" on the vector path); its result is the same, its time is priced here as the vector
        form (not modelled)."""
        need_local(dst, src)
        self._same_dtype("Brcb", dst, src)
        if dst.dtype.itemsize not in (2, 4):
            raise AscendCRuleError(f"Brcb broadcasts 16- or 32-bit elements; '{dst.name}' is {dst.dtype.name}")
        if not isinstance(params, BrcbRepeatParams):
            raise TypeError(f"brcb takes a BrcbRepeatParams, got {type(params).__name__}")
        self._check_dtype("Brcb", dst)
        repeat = self._check_repeat(repeat_time)
        if self.hw.isa == "ascend310p":
            self._need_scratch("Brcb on the 310P", "数据填充/Brcb.md")
        if params.dst_blk_stride == 0:
            self._rule("Brcb: dst_blk_stride=0 is undefined behaviour on the hardware (every block "
                       "written onto the same one); use 1")
        per_block = 32 // dst.dtype.itemsize
        blk, rep = params.dst_blk_stride, params.dst_rep_stride
        # the footprint depends on these alone: cached (plain ints only, so bad ones are still checked)
        key = (dst.dtype, dst.offset, dst.count, repeat, blk, rep) \
            if type(blk) is int and type(rep) is int else None
        known = _BRCB_DST.get(key) if key is not None else None
        if known is None:
            dst_off = footprint(dst, _ALL_LANES[8 * per_block], repeat, blk, rep, "dst", 65535)   # uint16 fields
            known = (span_of(dst, dst_off), as_index(dst_off))
            if key is not None:
                if len(_BRCB_DST) > 4096:
                    _BRCB_DST.clear()
                _BRCB_DST[key] = known
        (_, dst_lo, dst_hi), at = known
        self._count(max(8 * repeat, 1), src)
        lo = src.offset * src.dtype.itemsize
        if dst.region is src.region and repeat:
            # "不支持源操作数与目的操作数使用同一块内存地址" (Brcb.md): the same bytes, not the same
            # TBuf — two non-overlapping parts of one buffer are fine (checked on the span from
            # dst's first to last block: a source between strided blocks counts as overlapping)
            s_lo, s_hi = lo, lo + 8 * repeat * src.dtype.itemsize
            if s_lo < dst_hi and dst_lo < s_hi:
                self._rule(f"Brcb: the source '{src.name}' (bytes {s_lo}..{s_hi} of its buffer) overlaps what "
                           "it writes; Brcb.md: 不支持源操作数与目的操作数使用同一块内存地址. Put src and dst "
                           "in different bytes (another buffer, or another part of this one)")
        self._vec("Brcb", "simple", repeat * 256, [(src, lo, lo + 8 * repeat * src.dtype.itemsize)],
                  [(dst, dst_lo, dst_hi)], 8 * repeat, repeats=repeat)
        if not self.timing_only and repeat:
            if at.__class__ is slice:        # blocks back to back: fill them as rows of a view
                dst.data[at].reshape(8 * repeat, per_block)[...] = src.data[:8 * repeat, None]
            else:
                dst.data[at] = np.repeat(src.data[:8 * repeat], per_block)
