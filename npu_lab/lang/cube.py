"""The cube core's instructions (issue 17 §1): ``DataCopy`` GM -> L1 with ``Nd2NzParams``,
``LoadData`` L1 -> L0A / L0B with ``LoadData2DParams``, ``Mmad`` with ``MmadParams``, ``Fixpipe``
L0C -> GM with ``FixpipeParamsV220``, and ``SetAtomicAdd`` / ``DisableDmaAtomic`` for Fixpipe's
accumulation into GM. Mixed into :class:`~npu_lab.lang.context.KernelContext` like the vector ops.

The matmul flow (asc-devkit examples/01_simd_cpp_api/00_introduction/02_matrix/matmul_basic_api/
matmul_basic_api.asc; docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md)::

    GM --MTE2 DataCopy+Nd2Nz--> L1 (A1/B1, NZ) --MTE1 LoadData--> L0A (A2, ZZ) / L0B (B2, ZN)
       --M Mmad--> L0C (CO1, NZ, fp32/int32) --FIX Fixpipe (NZ2ND, quantPre, relu)--> GM

Layouts are real data layouts in the simulated buffers (C0 = 32 B / sizeof(T) elements; a
fractal is 16 rows x 32 B = 512 B in L1/L0A/L0B, 16 x 16 accumulators in L0C):

* **NZ** (L1, written by Nd2Nz): the matrix cut into column blocks C0 wide; each block stores its
  rows one after another (row r of block j at ``j*dstNzC0Stride*C0 + r*dstNzNStride*C0``);
* **ZZ** (L0A, what Mmad reads as A[m, k]): 16-row blocks one after another, inside each the
  k-fractals one after another, each fractal row-major: A[r, c] at
  ``((r//16)*K1 + c//k0)*512 B + (r%16)*32 B + (c%k0)*sizeof(T)`` with K1 = ceil(k/k0) fractals;
* **ZN** (L0B, B[k, n]): k-fractal rows one after another, the n-fractals inside them, each fractal
  column-major (n-major): B[c, n] at ``((c//k0)*N1 + n//16)*512 B + (n%16)*32 B + (c%k0)*sizeof(T)``;
* **NZ** (L0C, C[m, n]): 16-column blocks, M1*16 rows each: C[r, n] at
  ``(n//16)*M1*256 + r*16 + n%16`` accumulators.

So a load with the wrong strides, a B tile loaded without ``ifTranspose``, or an ND tile in L1
computes wrong numbers here as it would on the chip — and where the chip is silently wrong in a
way a course kernel runs into, the simulator raises and says what the chip would have done:
LoadData from an L1 range a plain (ND) DataCopy filled is refused, because the hardware would take
512 bytes of consecutive rows as a fractal.

Each rule cites its page; pages are under docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/.
Simplifications (said where they apply): GEMV mode (Mmad with m = 1) and the unitFlag handshake
are not modelled (refused), nor the bias table, Fixpipe's ndNum > 1, channel split or the
L0C -> L1 / UB paths.

bfloat16: numpy has no bfloat16, so a bfloat16 tensor is its uint16 bits (as the decode kernels'
K/V, :func:`~npu_lab.lang.float_to_bfloat16`). Nd2Nz and LoadData move the bits unchanged (both
list bfloat16_t and uint16_t: same size, no conversion); ``Mmad`` takes uint16 x uint16 into a
float32 L0C as bfloat16 x bfloat16 -> float (Mmad.md 表7; there is no uint16 Mmad, so the bits
cannot mean anything else): it widens them exactly (bits << 16 read as float32) and accumulates in
float32 — a bfloat16 x bfloat16 product (8 + 8 significant bits) is exact in float32. ``Fixpipe``
with ``F322BF16`` writes float -> bfloat16 bits rounded to nearest even (CAST_RINT). The 310P's AI
Core has no bfloat16 Mmad (Mmad.md 表9) and no Fixpipe to GM: refused there.

Per-channel dequantisation (``VDEQF16``): ``Fixpipe(dst, src, cbufWorkspace, params)``, the
overload the page gives for tensor quantisation, with one uint64 quant word per output column in
L1 (:func:`~npu_lab.lang.cube_params.deq_scale_uint64`). What the library does inside
(impl/basic_api/dav_c220/kernel_operator_fixpipe_v2_impl.h): the columns in chunks of 256 (128
when nSize > 256), each chunk's words copied L1 -> Fixpipe buffer (copy_cbuf_to_fbuf, in 128-B
units), a PipeBarrier<PIPE_FIX>, then that chunk's L0C -> GM move. Modelled: the same chunks on
pipe FIX, each an L1 -> FB copy (:func:`~npu_lab.sim.cube_costs.fixpipe_fb_copy_cycles`, assumed)
then its move, as one FIX event of their summed cost (one Ascend C call).
"""

from __future__ import annotations

import numpy as np

from ..sim.costs import round_up, scalar_cycles
from ..sim.cube_costs import fixpipe_cycles, fixpipe_fb_copy_cycles, k0_of, load_data_cycles, mmad_cycles, nd2nz_bursts
from ..sim.l2 import gm_bytes_per_cycle
from .cube_params import (FIXPIPE_PAGE, LOAD2D_PAGE, MMAD_PAGE, ND2NZ_PAGE, QUANT_PAGE, FixpipeParamsV220,
                          LoadData2DParams, MmadParams, Nd2NzParams, QuantMode_t, deq_scale_float, deq_scale_uint64)
from .cross_core import CrossCoreOps
from .errors import AscendCRuleError, CapabilityError
from .memory import CUBE_BUFFER_FIELDS, CubeBufferAllocator, UbAllocator, buffer_of
from .tensor import GlobalTensor, LocalTensor, float_to_bfloat16

_ISASI = "docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/"
KALIGN_PAGE = _ISASI + "Mmad计算关键特性说明/K-方向对齐约束.md"
SPARSE_PAGE = _ISASI + "Mmad计算/MmadWithSparse.md"
ATOMIC_PAGE = "docs/zh/api/SIMD-API/基础API/原子操作/SetAtomicAdd.md"
DISABLE_ATOMIC_PAGE = "docs/zh/api/SIMD-API/基础API/原子操作/DisableDmaAtomic.md"
ARCH_2201 = "docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md"
ARCH_2002 = "docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2002.md"

FRACTAL_BYTES = 512
#: Mmad (fm, filter) dtypes -> allowed dst dtypes, per ISA (Mmad.md 表7 for A2; 表9 for the 310P AI Core)
MMAD_TYPES = {
    "ascend910b": {("float16", "float16"): ("float32",), ("float32", "float32"): ("float32",),
                   ("int8", "int8"): ("int32",), ("uint16", "uint16"): ("float32",)},   # uint16 = bfloat16 bits
    "ascend310p": {("int8", "int8"): ("int32",), ("uint8", "int8"): ("int32",),
                   ("float16", "float16"): ("float16", "float32")},
}
#: DataCopy ND2NZ dtypes per ISA (DataCopy（GMToL1随路转换-ND2NZ搬运）.md, 数据类型)
ND2NZ_TYPES = {
    "ascend910b": ("int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "float32"),
    "ascend310p": ("int16", "uint16", "int32", "uint32", "float16", "float32"),
}
#: LoadData (2D) dtypes per ISA (LoadData_2D.md, 数据类型)
LOAD2D_TYPES = {
    "ascend910b": ("uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32"),
    "ascend310p": ("uint8", "int8", "uint16", "int16", "float16"),
}
#: Fixpipe quantPre -> (L0C dtype, GM dtype) pairs it converts (Fixpipe（L0C到GM数据搬运）.md, 表4 and 数据类型)
FIXPIPE_QUANT = {
    QuantMode_t.NoQuant: (("float32", "float32"), ("int32", "int32")),
    QuantMode_t.F322F16: (("float32", "float16"),),
    QuantMode_t.F322BF16: (("float32", "uint16"),),              # uint16 = bfloat16 bits
    QuantMode_t.DEQF16: (("int32", "float16"),),
    QuantMode_t.VDEQF16: (("int32", "float16"),),
}
#: how a dtype is named in messages (bfloat16 is stored as uint16 bits)
_SHOWN = {"uint16": "bfloat16 (uint16 bits)"}
#: the Fixpipe buffer holds 256 quant words; above that the library splits N in halves of 128
#: (GenFixpipeTilingV220, impl/basic_api/dav_c220/kernel_operator_fixpipe_v2_impl.h)
FB_DEQ_WORDS = 256
#: SetAtomicAdd<T> dtypes (SetAtomicAdd.md: A2 int8, int16, half, bfloat16, int32, float)
ATOMIC_TYPES = ("int8", "int16", "float16", "int32", "float32")


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _deq_chunks(n: int) -> list[tuple[int, int]]:
    """(first column, columns) of each chunk a tensor-quant Fixpipe moves (GenFixpipeTilingV220:
    all n at once up to FB_DEQ_WORDS, else chunks of half of it and a tail)."""
    if n <= FB_DEQ_WORDS:
        return [(0, n)]
    half = FB_DEQ_WORDS // 2
    return [(c, min(half, n - c)) for c in range(0, n, half)]


_DTYPE_OK: set = set()      # (isa, instruction, dtype) already found supported
_ND2NZ_PLANS: dict = {}     # (Nd2NzParams, dtype) -> index plan (shapes only)
_LOAD_PLANS: dict = {}      # LoadData (params, dtype, buffer, MTE1 cost fields) -> fractal indices, sizes, cost


class CubeOps(CrossCoreOps):
    """Mixed into :class:`~npu_lab.lang.context.KernelContext` (before DmaOps: ``data_copy`` with an
    ``Nd2NzParams`` is handled here, everything else falls through to DmaOps)."""

    # ---- set-up -------------------------------------------------------------------------
    def _init_cube(self) -> None:
        """Give a cube core its buffers: one allocator each for L1, L0A, L0B, L0C (capacities from
        the spec: NPU架构版本2201.md / 2002.md); the 310P's AI core, which holds the vector unit too,
        keeps its UB. FIX writes to GM, so its results complete a DMA latency after it."""
        hw, storage = self.hw, not self.timing_only
        allocators = {buf: CubeBufferAllocator(buf, getattr(hw, field), hw.block_bytes, storage, self)
                      for buf, field in CUBE_BUFFER_FIELDS.items()}
        self.pipe.allocators = dict(allocators)
        if hw.isa == "ascend310p":
            self.pipe.allocators["UB"] = UbAllocator(hw.ub_bytes, hw.block_bytes, storage, self)
        self.pipe.allocator = allocators["L1"]
        self.ub = allocators["L1"]
        self.core.latency["FIX"] = float(round(hw.dma_latency_cycles))
        self._atomic = None               # SetAtomicAdd<T>'s dtype while atomic add is on
        self._mmad_unbarriered = None     # (region, lo, hi) of the last Mmad's L0C write since PIPE_M

    def _require_cube(self, what: str) -> None:
        if self.core_type != "cube":
            raise CapabilityError(
                f"{self.hw.name}: {what} runs on the cube core (AIC), and this kernel runs on vector cores "
                f"(AIV), which have no cube unit, L1 or L0 buffers ({ARCH_2201}: Cube和Vector分离部署). "
                "Declare the kernel with npu_kernel(core_type='cube').")

    def _rule_at(self, message: str, page: str):
        raise AscendCRuleError(f"{message} ({page})")

    def _check_cube_dtype(self, what: str, dtype, table: dict, page: str) -> None:
        key = (self.hw.isa, what, dtype)
        if key in _DTYPE_OK:
            return
        name = np.dtype(dtype).name
        allowed = table.get(self.hw.isa, ())
        if name in allowed:
            _DTYPE_OK.add(key)
            return
        if name not in allowed:
            raise CapabilityError(f"{self.hw.name}: {what} has no {name} form on this chip ({page}, 数据类型: "
                                  f"{', '.join(allowed)})")

    # ---- GM -> L1 -----------------------------------------------------------------------
    def data_copy(self, dst, src, count_or_params) -> None:
        """``DataCopy(dst, src, Nd2NzParams)``: GM -> L1 (A1/B1) with ND -> NZ conversion on MTE2
        (ND2NZ_PAGE). Any other DataCopy goes to :meth:`DmaOps.data_copy`; one into L1 marks the
        range as ND (a later LoadData from it is refused, see the module docstring); one into
        L0A/L0B/L0C is refused (those are filled by LoadData and Mmad)."""
        if isinstance(count_or_params, Nd2NzParams):
            self._data_copy_nd2nz(dst, src, count_or_params)
            return
        local = dst if isinstance(dst, LocalTensor) else src if isinstance(src, LocalTensor) else None
        buf = buffer_of(local) if local is not None else "UB"
        if buf in ("L0A", "L0B", "L0C"):
            self._rule_at(f"DataCopy to or from '{local.name}' in {buf}: GM <-> {buf} is not a DataCopy path. "
                          "Copy GM -> L1 (DataCopy with Nd2NzParams), then LoadData L1 -> L0A/L0B; results leave "
                          "L0C by Fixpipe", _ISASI + "矩阵计算的搬入/总体说明.md")
        super().data_copy(dst, src, count_or_params)
        if buf == "L1" and local is dst:
            n = getattr(count_or_params, "block_count", None)
            nbytes = (n * (count_or_params.block_len + count_or_params.dst_stride) * 32 if n is not None
                      else int(count_or_params) * dst.dtype.itemsize)
            dst.region.record_layout(dst.byte_offset, dst.byte_offset + nbytes, "ND")

    def _nd2nz_plan(self, p: Nd2NzParams, dtype, dst_count: int, src_size: int, dst_name: str, src_name: str):
        """(dst element of each copied value, src element of each, dst elements of the zero
        padding, dst extent, src extent in elements), checked against both tensors; the index
        arrays are cached by (params, dtype): they depend on the shape only."""
        key = (p, dtype)
        plan = _ND2NZ_PLANS.get(key)
        if plan is None:
            c0 = 32 // dtype.itemsize
            blocks = _ceil(p.d_value, c0)
            i = np.arange(p.nd_num)[:, None, None]
            r = np.arange(p.n_value)[None, :, None]
            c = np.arange(blocks * c0)[None, None, :]
            dst = i * p.dst_nz_matrix_stride + (c // c0) * p.dst_nz_c0_stride * c0 + r * p.dst_nz_n_stride * c0 + c % c0
            src = np.broadcast_to(i * p.src_nd_matrix_stride + r * p.src_d_value + c, dst.shape)
            real = np.broadcast_to(c < p.d_value, dst.shape)
            starts = dst[..., ::c0].ravel()
            overlap = p.nd_num * p.n_value * blocks > len(np.unique(starts)) and \
                not (p.nd_num > 1 and p.dst_nz_matrix_stride == 0)
            plan = (dst[real], src[real], dst[~real], int(dst.max()) + 1, int(src[real].max()) + 1, overlap)
            if len(_ND2NZ_PLANS) > 256:
                _ND2NZ_PLANS.clear()
            _ND2NZ_PLANS[key] = plan
        dst_idx, src_idx, pad_idx, extent, src_extent, overlap = plan
        if extent > dst_count:
            self._rule_at(f"DataCopy Nd2Nz with {p}: the NZ result spans {extent} elements of '{dst_name}', which "
                          f"has {dst_count}; enlarge the L1 buffer or fix dstNzC0Stride / dstNzNStride (in 32-B units)",
                          ND2NZ_PAGE)
        if src_extent > src_size:
            self._rule_at(f"DataCopy Nd2Nz with {p}: reads {src_extent} elements of '{src_name}', which has "
                          f"{src_size}; check nValue, dValue, srcDValue (a row's length in GM, in elements)",
                          ND2NZ_PAGE)
        if overlap:
            self._rule_at(f"DataCopy Nd2Nz with {p}: rows of the NZ result land on the same 32-B unit of L1 "
                          f"(dstNzC0Stride={p.dst_nz_c0_stride} < nValue={p.n_value} x dstNzNStride="
                          f"{p.dst_nz_n_stride}?). 搬运至L1 Buffer的数据不能重叠: the hardware gives no warning and "
                          "the order of the overlapping writes is not guaranteed. Use dstNzC0Stride >= the rows "
                          "(rounded up to 16 for a fractal-aligned tile)", ND2NZ_PAGE)
        return dst_idx, src_idx, pad_idx, extent

    def _data_copy_nd2nz(self, dst, src, p: Nd2NzParams) -> None:
        if not (isinstance(dst, LocalTensor) and isinstance(src, GlobalTensor)):
            raise TypeError(f"DataCopy with Nd2NzParams moves a GlobalTensor into an L1 LocalTensor (A1/B1); got "
                            f"{type(src).__name__} -> {type(dst).__name__} ({ND2NZ_PAGE})")
        buf = buffer_of(dst)
        if buf != "L1":
            self._rule_at(f"DataCopy with Nd2NzParams: the destination must be in L1 (TPosition A1/B1); "
                          f"'{dst.name}' is in {buf}. ND -> NZ conversion exists only on the GM -> L1 path here; "
                          "allocate the tile from a TQue<TPosition::A1> (or B1)", ND2NZ_PAGE)
        if dst.dtype != src.dtype:
            raise TypeError(f"DataCopy Nd2Nz does not convert types: {src.dtype.name} -> {dst.dtype.name} "
                            f"({ND2NZ_PAGE}: 源矩阵和目的矩阵支持的数据类型保持一致)")
        self._check_cube_dtype("DataCopy (GM -> L1, ND2NZ)", dst.dtype, ND2NZ_TYPES, ND2NZ_PAGE)
        if dst.ub_address % 32:
            self._rule_at(f"DataCopy Nd2Nz: the L1 address of '{dst.name}' (+{dst.byte_offset} B) is not 32-byte "
                          "aligned (位于L1 Buffer的目的地址必须32字节对齐); start it at a multiple of "
                          f"{32 // dst.dtype.itemsize} elements", ND2NZ_PAGE)
        if p.nd_num == 0 or p.n_value == 0 or p.d_value == 0:
            return                                           # the page: a NOP
        dst_idx, src_idx, pad_idx, extent = self._nd2nz_plan(p, dst.dtype, dst.count, src.size, dst.name, src.name)
        size = dst.dtype.itemsize
        rows = p.nd_num * p.n_value
        row_bytes = p.d_value * size
        gm_bytes = rows * row_bytes
        moved = rows * round_up(row_bytes, 32)
        # what counts as a burst: sim.cube_costs.nd2nz_bursts (256-B aligned rows stream as one request)
        blocks, burst, step = nd2nz_bursts(p.n_value, row_bytes, p.src_d_value * size,
                                           p.src_nd_matrix_stride * size, p.nd_num)
        lo = dst.byte_offset
        self._dma("MTE2", f"DataCopy GM->L1 Nd2Nz {p.nd_num}x{p.n_value}x{p.d_value}", dst, lo, lo + extent * size,
                  moved, gm_bytes, rows * p.d_value, gm=src, block_count=blocks,
                  burst_bytes=moved if blocks == 1 else round_up(burst, 32), gm_step_bytes=step)
        dst.region.record_layout(lo, lo + extent * size, "NZ")
        if not self.timing_only:
            d = dst.data
            d[dst_idx] = src.data[src_idx]
            d[pad_idx] = 0                                   # 在目的矩阵中会补0对齐到32字节

    # ---- L1 -> L0A / L0B ----------------------------------------------------------------
    def load_data(self, dst, src, load_data_params: LoadData2DParams) -> None:
        """``LoadData(dst, src, LoadData2DParams)``: ``repeatTimes`` 512-byte fractals L1 (A1/B1) ->
        L0A (A2) or L0B (B2) on MTE1, each transposed when ``ifTranspose`` (b16 only). Rules and
        dtypes: LOAD2D_PAGE; cost: Cube指令理论性能汇总.md 表3 (npu_lab.sim.cube_costs)."""
        p = load_data_params
        if not isinstance(p, LoadData2DParams):
            raise TypeError(f"load_data takes a LoadData2DParams, got {type(p).__name__} ({LOAD2D_PAGE})")
        self._require_cube("LoadData")
        if isinstance(src, GlobalTensor):
            self._rule_at("LoadData GM -> L0A/L0B is not modelled; copy the tile GM -> L1 with DataCopy + "
                          "Nd2NzParams, then LoadData L1 -> L0A/L0B", LOAD2D_PAGE)
        if not (isinstance(dst, LocalTensor) and isinstance(src, LocalTensor)):
            raise TypeError(f"load_data moves a LocalTensor in L1 to one in L0A/L0B; got {type(src).__name__} -> "
                            f"{type(dst).__name__}")
        dbuf, sbuf = buffer_of(dst), buffer_of(src)
        if dbuf not in ("L0A", "L0B"):
            self._rule_at(f"LoadData: the destination must be in L0A (TPosition A2) or L0B (B2); '{dst.name}' is "
                          f"in {dbuf}", LOAD2D_PAGE)
        if sbuf != "L1":
            self._rule_at(f"LoadData: the source of an L1 -> L0 load must be in L1 (TPosition A1/B1); "
                          f"'{src.name}' is in {sbuf}. Data reaches L1 from GM by DataCopy with Nd2NzParams",
                          LOAD2D_PAGE)
        if dst.dtype != src.dtype:
            raise TypeError(f"LoadData does not convert types: {src.dtype.name} -> {dst.dtype.name} ({LOAD2D_PAGE})")
        self._check_cube_dtype("LoadData (2D)", dst.dtype, LOAD2D_TYPES, LOAD2D_PAGE)
        size = dst.dtype.itemsize
        if p.if_transpose and size != 2:
            self._rule_at(f"LoadData ifTranspose=true on {dst.dtype.name}: 开启转置功能时，源操作数、目的操作数仅支持"
                          "b16数据类型. For int8 / float keep B transposed in GM (an [N, K] matrix): its NZ "
                          "fractals are already the ZN fractals L0B needs, loaded without ifTranspose", LOAD2D_PAGE)
        if dst.ub_address % FRACTAL_BYTES:
            self._rule_at(f"LoadData: the {dbuf} address of '{dst.name}' (+{dst.byte_offset} B) is not 512-byte "
                          "aligned (目的地址位于L0A Buffer/L0B Buffer时，地址必须512字节对齐); step in whole "
                          f"fractals ({FRACTAL_BYTES // size} {dst.dtype.name} elements)", LOAD2D_PAGE)
        if src.ub_address % 32:
            self._rule_at(f"LoadData: the L1 address of '{src.name}' (+{src.byte_offset} B) is not 32-byte aligned",
                          LOAD2D_PAGE)
        if p.repeat_times == 0:
            return
        hw = self.hw               # the plan holds the cost: keyed by the fields that price it, too
        key = (p, dst.dtype, dbuf, hw.mte1_l0a_bytes_per_cycle, hw.mte1_l0b_bytes_per_cycle, hw.mte1_head_cycles)
        plan = _LOAD_PLANS.get(key)
        if plan is None:
            fe = FRACTAL_BYTES // size
            src_frac = p.start_index + np.arange(p.repeat_times) * p.src_stride
            dst_frac = np.arange(p.repeat_times) * (1 + p.dst_gap)
            lane = np.arange(fe)
            nbytes = p.repeat_times * FRACTAL_BYTES
            t = " transposed" if p.if_transpose else ""
            plan = (fe, int(src_frac[-1]), int(dst_frac[-1]), (int(src_frac[-1]) + 1) * fe, (int(dst_frac[-1]) + 1) * fe,
                    int(src_frac.min()) * FRACTAL_BYTES, (src_frac[:, None] * fe + lane).ravel(),
                    (dst_frac[:, None] * fe + lane).ravel(), nbytes, load_data_cycles(self.hw, nbytes, dbuf),
                    f"LoadData L1->{dbuf} {p.repeat_times}x512 B{t}")
            if len(_LOAD_PLANS) > 1024:
                _LOAD_PLANS.clear()
            _LOAD_PLANS[key] = plan
        fe, src_last, dst_last, src_need, dst_need, lo_off, src_idx, dst_idx, nbytes, cost, name = plan
        if src_need > src.count:
            self._rule_at(f"LoadData with {p}: reads fractal {src_last} of '{src.name}', whose "
                          f"{src.count} elements hold {src.count // fe} whole fractals (L1 Buffer的剩余大小不足1个分形: "
                          f"the hardware raises an exception, {ARCH_2201})", LOAD2D_PAGE)
        if dst_need > dst.count:
            self._rule_at(f"LoadData with {p}: writes fractal {dst_last} of '{dst.name}', which holds "
                          f"{dst.count // fe}; enlarge the {dbuf} buffer or load fewer fractals", LOAD2D_PAGE)
        lo = src.byte_offset + lo_off
        hi = src.byte_offset + src_need * size
        if src.region.layouts and "ND" in src.region.layout_of(lo, hi):
            self._rule_at(f"LoadData from '{src.name}': its L1 bytes were written by a plain DataCopy, so they hold "
                          "the tile row after row (ND). LoadData moves 512-byte fractals (16 rows x 32 B of an NZ "
                          "tile); from ND data the hardware would take 16 x 32 B of consecutive row pieces as one "
                          "fractal and Mmad would compute a wrong product, silently. Copy GM -> L1 with DataCopy + "
                          "Nd2NzParams (ND -> NZ on the way in)", ND2NZ_PAGE)
        self._exec("MTE1", name, cost, reads=((src, lo, hi),),
                   writes=((dst, dst.byte_offset, dst.byte_offset + dst_need * size),),
                   nbytes=nbytes, elements=p.repeat_times * fe)
        if self.timing_only:
            return
        blocks = src.data[src_idx]
        if p.if_transpose:
            blocks = blocks.reshape(p.repeat_times, 16, 16).transpose(0, 2, 1).ravel()
        dst.data[dst_idx] = blocks

    # ---- the cube -----------------------------------------------------------------------
    def mmad_with_sparse(self, dst, fm, filter, mmad_params: MmadParams) -> None:    # noqa: A002
        """``MmadWithSparse(dst, fm, filter, MmadParams)``: C[m, n] += A[m, k] · B, with B 4:2-sparse —
        stored compressed (K/2 x N, int8) in L0B by ``LoadDataWithSparse`` together with an index
        matrix in the cube's own buffer, which selects 2 of every 4 of A's K values (SPARSE_PAGE).
        The real rules are checked — A2/A3 only (not the 310P, not the 950), int8 x int8 -> int32
        only (no float16: the article's "2:4 sparsity at FP16" does not exist here), dst in L0C
        (1024-byte aligned), fm in L0A and filter in L0B (512-byte aligned) — and then the call is
        refused: the index matrix (LoadDataWithSparse) is not modelled."""
        page = SPARSE_PAGE
        if not isinstance(mmad_params, MmadParams):
            raise TypeError(f"mmad_with_sparse takes a MmadParams, got {type(mmad_params).__name__} ({page})")
        self._require_cube("MmadWithSparse")
        if self.hw.isa != "ascend910b":
            raise CapabilityError(f"{self.hw.name}: MmadWithSparse exists on the Atlas A2 / A3 only ({page}: 'Atlas "
                                  "推理系列产品AI Core：不支持', 'Ascend 950PR/Ascend 950DT：不支持')")
        for t, want, align, role in ((dst, "L0C", 1024, "dst (C)"), (fm, "L0A", 512, "fm (A, full M x K)"),
                                     (filter, "L0B", 512, "filter (B, compressed K/2 x N)")):
            if not isinstance(t, LocalTensor) or buffer_of(t) != want:
                where = buffer_of(t) if isinstance(t, LocalTensor) else type(t).__name__
                self._rule_at(f"MmadWithSparse {role} must be in {want}, got {where}", page)
            if t.ub_address % align:
                self._rule_at(f"MmadWithSparse {role} starts at {want} byte {t.ub_address}, not {align}-byte aligned",
                              page)
        kinds = (np.dtype(dst.dtype).name, np.dtype(fm.dtype).name, np.dtype(filter.dtype).name)
        if kinds != ("int32", "int8", "int8"):
            raise CapabilityError(
                f"MmadWithSparse takes int8 A and B into int32 C only (T = int32_t, U = int8_t, else it does not compile; "
                f"{page}, 表3); got {kinds[1]} x {kinds[2]} -> {kinds[0]}. There is no float16 4:2-sparse Mmad on this "
                "chip: use Mmad for half")
        raise CapabilityError(
            "MmadWithSparse is not modelled: its B comes from LoadDataWithSparse, which also loads the 4:2 index matrix "
            f"into a cube-internal buffer npu_lab does not have ({page}). Its rate row equals dense int8 "
            "(Cube指令理论性能汇总.md), so the model would price it as Mmad on the selected K/2 — not implemented")

    def mmad(self, dst, fm, filter, mmad_params: MmadParams) -> None:      # noqa: A002 (Ascend C's name)
        """``Mmad(dst, fm, filter, MmadParams)``: C[m, n] (+)= A[m, k] · B[k, n] on pipe M; A in L0A
        (ZZ), B in L0B (ZN), C in L0C (NZ); half x half -> float, bfloat16 x bfloat16 -> float (uint16
        bits, widened exactly), float x float -> float, int8 x int8 -> int32 (the A2's table 表7; the
        310P AI Core has int8/uint8 and half -> half or float, no bfloat16: 表9). Rules:
        MMAD_PAGE; K alignment: KALIGN_PAGE; cost: npu_lab.sim.cube_costs.mmad_cycles."""
        p = mmad_params
        if not isinstance(p, MmadParams):
            raise TypeError(f"mmad takes a MmadParams, got {type(p).__name__} ({MMAD_PAGE})")
        self._require_cube("Mmad")
        for t, want, pos, role in ((dst, "L0C", "CO1", "dst (C)"), (fm, "L0A", "A2", "fm (A)"),
                                   (filter, "L0B", "B2", "filter (B)")):
            if not isinstance(t, LocalTensor):
                raise TypeError(f"Mmad {role} must be a LocalTensor in {want}, got {type(t).__name__}")
            if buffer_of(t) != want:
                self._rule_at(f"Mmad {role} must be in {want} (TPosition {pos}); '{t.name}' is in {buffer_of(t)}. "
                              "结果矩阵C只支持位于L0C Buffer（CO1），左矩阵A只支持位于L0A Buffer（A2），右矩阵B只支持位于"
                              "L0B Buffer（B2）: load A and B with LoadData, accumulate in a TQue<TPosition::CO1> "
                              "tensor", MMAD_PAGE)
        a_t, b_t, c_t = fm.dtype.name, filter.dtype.name, dst.dtype.name
        allowed = MMAD_TYPES[self.hw.isa].get((a_t, b_t))
        if allowed is None or c_t not in allowed:
            sh = lambda t: _SHOWN.get(t, t)       # noqa: E731
            combos = "; ".join(f"{sh(a)} x {sh(b)} -> {'/'.join(c)}" for (a, b), c in MMAD_TYPES[self.hw.isa].items())
            extra = ""
            if "uint16" in (a_t, b_t) and self.hw.isa == "ascend310p":
                extra = (". The Atlas inference series AI Core has no bfloat16 Mmad (Mmad.md 表9: int8/uint8 and half "
                         "only): convert to half on the host, or run on the 910B")
            elif "uint16" in (a_t, b_t):
                extra = ". bfloat16 (stored as uint16 bits) multiplies with bfloat16 only, into a float32 L0C"
            raise CapabilityError(f"{self.hw.name}: Mmad has no {sh(a_t)} x {sh(b_t)} -> {c_t} form on this chip "
                                  f"({MMAD_PAGE}, 数据类型: {combos}){extra}")
        if dst.ub_address % 1024:
            self._rule_at(f"Mmad dst '{dst.name}' starts at L0C byte {dst.ub_address}, not 1024-byte aligned "
                          "(LocalTensor的起始地址需要按照1024字节对齐); step in whole 16x16 fractals", MMAD_PAGE)
        for t in (fm, filter):
            if t.ub_address % FRACTAL_BYTES:
                self._rule_at(f"Mmad operand '{t.name}' starts at byte {t.ub_address} of {buffer_of(t)}, not "
                              "512-byte aligned (起始地址需要按照512字节对齐)", MMAD_PAGE)
        m, n, k = p.m, p.n, p.k
        if m == 0 or n == 0 or k == 0:
            return                                           # the page: a NOP
        if m == 1:
            self._rule_at("Mmad with m = 1 runs in GEMV mode: the hardware reads L0A as ND, not ZZ (当M = 1时，会默认"
                          "开启GEMV功能). GEMV is not modelled: pass m rounded up to 16 (the padding rows' results are "
                          "never copied out) or lay A out as ND", MMAD_PAGE)
        k0 = k0_of(fm.dtype)
        k1 = _ceil(k, 16) * 2 if (a_t == "float32" and p.k_direction_align) else _ceil(k, k0)
        m1, n1 = _ceil(m, 16), _ceil(n, 16)
        a_bytes, b_bytes = m1 * k1 * FRACTAL_BYTES, k1 * n1 * FRACTAL_BYTES
        c_bytes = m1 * n1 * 256 * dst.dtype.itemsize
        for t, need, what in ((fm, a_bytes, f"{m1} x {k1} fractals of A"), (filter, b_bytes, f"{k1} x {n1} fractals of B"),
                              (dst, c_bytes, f"{m1} x {n1} 16x16 fractals of C")):
            if need > t.nbytes:
                self._rule_at(f"Mmad m={m}, n={n}, k={k}: needs {need} B of '{t.name}' ({what}; K is aligned to "
                              f"{k1 * k0} for {a_t}, {KALIGN_PAGE}) but the tensor has {t.nbytes} B from its address",
                              MMAD_PAGE)
        c_span = (dst, dst.byte_offset, dst.byte_offset + c_bytes)
        accumulate = not p.cmatrix_init_val
        if accumulate and self._mmad_unbarriered is not None and (m // 16) * (n // 16) < 10:
            region, lo, hi = self._mmad_unbarriered
            if region is dst.region and lo < c_span[2] and c_span[1] < hi:
                self._rule_at(f"Mmad m={m}, n={n} accumulates (cmatrixInitVal=false) into the L0C result of the "
                              f"previous Mmad with no PipeBarrier<PIPE_M> between them: below the threshold (m/16)*"
                              f"(n/16) < 10 ({(m // 16) * (n // 16)}) the hardware does not resolve the write-then-read "
                              "of L0C itself and the sum may miss the previous product. Add "
                              "ctx.pipe_barrier('PIPE_M') before it (同步优化说明)", MMAD_PAGE)
        reads = [(fm, fm.byte_offset, fm.byte_offset + a_bytes), (filter, filter.byte_offset, filter.byte_offset + b_bytes)]
        if accumulate:
            reads.append(c_span)
        cost, _ = mmad_cycles(self.hw, m, n, k, fm.dtype)
        self._exec("M", f"Mmad {m}x{n}x{k} {a_t}", cost, reads=reads, writes=(c_span,), elements=m * n * k)
        self._mmad_unbarriered = (dst.region, c_span[1], c_span[2])
        if self.timing_only:
            return
        a = fm.data[:m1 * k1 * 16 * k0].reshape(m1, k1, 16, k0).transpose(0, 2, 1, 3).reshape(m1 * 16, k1 * k0)[:m, :k]
        b = filter.data[:k1 * n1 * 16 * k0].reshape(k1, n1, 16, k0).transpose(0, 3, 1, 2).reshape(k1 * k0, n1 * 16)[:k, :n]
        cols = np.arange(n)
        c_idx = (cols // 16) * (m1 * 256) + np.arange(m)[:, None] * 16 + cols % 16     # NZ in L0C
        out = dst.data
        if a_t == "uint16":          # bfloat16 bits: widen exactly; bf16 x bf16 products are exact in fp32
            a = (a.astype(np.uint32) << 16).view(np.float32)
            b = (b.astype(np.uint32) << 16).view(np.float32)
        if a_t in ("int8", "uint8"):
            prod = a.astype(np.int64) @ b.astype(np.int64)
            if accumulate:
                prod = prod + out[c_idx].astype(np.int64)
            out[c_idx] = ((prod + 2**31) % 2**32 - 2**31).astype(np.int32)             # int32 wraps
        else:
            prod = a.astype(np.float32) @ b.astype(np.float32)                        # fp32 accumulation
            if accumulate:
                prod = out[c_idx].astype(np.float32) + prod
            out[c_idx] = prod.astype(dst.dtype)

    def _cube_barrier(self, pipe: str) -> None:
        """Called by ``pipe_barrier``: ``PIPE_M`` / ``PIPE_ALL`` settle the L0C write an accumulating
        Mmad below the (m/16)*(n/16) < 10 threshold must wait for (MMAD_PAGE)."""
        if pipe in ("PIPE_M", "PIPE_ALL"):
            self._mmad_unbarriered = None

    # ---- L0C -> GM ----------------------------------------------------------------------
    def fixpipe(self, dst, src, intri_params, *more) -> None:
        """``Fixpipe(dst, src, FixpipeParamsV220)`` or, with tensor quantisation,
        ``Fixpipe(dst, src, cbufWorkspace, FixpipeParamsV220)``: L0C (CO1, NZ) -> GM (ND, the default
        CFG_ROW_MAJOR) on pipe FIX, converting by ``quantPre`` (F322F16 / F322BF16: float -> half /
        bfloat16 bits with CAST_RINT; DEQF16: int32 -> half times ``deqScalar``; VDEQF16: int32 ->
        half times column n's scale, word n of ``cbufWorkspace``, a uint64 LocalTensor in L1),
        ReLU when ``reluEn``, adding into GM while SetAtomicAdd is on. Rules: FIXPIPE_PAGE (the
        310P's AI Core has no Fixpipe to GM); cost: npu_lab.sim.cube_costs.

        ``nSize``: the page asks for a multiple of 16 on this struct; its NZ2ND pseudo-code
        (矩阵搬出关键特性说明/NZ2ND.md) writes ``nSize`` values per row, and the model writes exactly
        ``nSize`` (a tail of N that is not a multiple of 16 is written without touching its
        neighbours) — a reading of the page, not a measurement.

        (V)DEQF16 numerics (QUANT_RELU_PAGE 表1 and the vendor's golden
        examples/01_simd_cpp_api/03_basic_api/03_matrix_compute/fixpipe_l0c2gm/scripts/gen_data_s322f16.py):
        the int32 is converted to float32 (MCB = 0), multiplied by M1 (the scale with its low 13
        mantissa bits cleared: (1, 8, 10)) where it is >= 0 and by M2 where it is < 0 (M2 = M1, or 0
        with ReLU), saturated to ±65504 and rounded to half (nearest even). ``deqScalar`` is the float
        scale (the C++ field is its uint64 word). Simplified: the product is taken in float32 (the
        multiplier's internal width is not published); the vendor golden's extra ``np.round`` to a
        whole number before the cast is not copied (it would zero every |value| < 0.5)."""
        p, workspace = intri_params, None
        if more:
            if len(more) != 1 or not isinstance(intri_params, LocalTensor):
                raise TypeError("fixpipe takes (dst, src, FixpipeParamsV220) or (dst, src, cbufWorkspace, "
                                f"FixpipeParamsV220) with cbufWorkspace a LocalTensor<uint64_t> in L1 ({FIXPIPE_PAGE})")
            workspace, p = intri_params, more[0]
        if not isinstance(p, FixpipeParamsV220):
            raise TypeError(f"fixpipe takes a FixpipeParamsV220, got {type(p).__name__} ({FIXPIPE_PAGE})")
        self._require_cube("Fixpipe")
        if self.hw.isa == "ascend310p":
            raise CapabilityError(
                f"{self.hw.name}: Fixpipe L0C -> GM does not exist on the Atlas inference series AI Core ({FIXPIPE_PAGE}: "
                f"'Atlas 推理系列产品AI Core：不支持'). On this chip a result leaves L0C for the UB through the vector "
                f"unit ({ARCH_2002}: 数据从L0C Buffer传输至Unified Buffer需要以Vector计算单元作为中转), then UB -> GM "
                "by DataCopy; that path is not modelled")
        if not isinstance(dst, GlobalTensor):
            self._rule_at(f"Fixpipe to '{getattr(dst, 'name', dst)}': only L0C -> GM is modelled (L0C -> L1 / UB are "
                          "other Fixpipe forms); pass a GlobalTensor", FIXPIPE_PAGE)
        if not isinstance(src, LocalTensor) or buffer_of(src) != "L0C":
            where = buffer_of(src) if isinstance(src, LocalTensor) else type(src).__name__
            self._rule_at(f"Fixpipe src must be in L0C (TPosition CO1), the result of Mmad; got {where}", FIXPIPE_PAGE)
        if src.ub_address % 64:
            self._rule_at(f"Fixpipe src '{src.name}' starts at L0C byte {src.ub_address}, not 64-byte aligned "
                          "(地址需要满足64字节对齐)", FIXPIPE_PAGE)
        pair = (src.dtype.name, dst.dtype.name)
        if pair not in FIXPIPE_QUANT[p.quant_pre]:
            fits = [q for q, pairs in FIXPIPE_QUANT.items() if pair in pairs]
            hint = f"; for {pair[0]} -> {_SHOWN.get(pair[1], pair[1])} use quantPre={fits[0]}" if fits else ""
            made = " or ".join(f"{a}->{_SHOWN.get(b, b)}" for a, b in FIXPIPE_QUANT[p.quant_pre])
            self._rule_at(f"Fixpipe quantPre={p.quant_pre} converts {made}, not {pair[0]} -> "
                          f"{_SHOWN.get(pair[1], pair[1])} (此参数需要用户手动配置，不会自动推导){hint}", FIXPIPE_PAGE)
        vector_quant = p.quant_pre in QuantMode_t.VECTOR
        if vector_quant and workspace is None:
            self._rule_at(f"Fixpipe quantPre={p.quant_pre} is tensor (per-channel) quantisation: its scales come from "
                          "the cbufWorkspace tensor, and this call has none (deqScalar is the scalar mode's, DEQF16). "
                          "Call Fixpipe(dst, src, cbufWorkspace, params) with one uint64 word per output column in L1 "
                          "(deq_scale_uint64 makes them)", FIXPIPE_PAGE)
        if workspace is not None and not vector_quant:
            self._rule_at(f"Fixpipe with a cbufWorkspace and quantPre={p.quant_pre}: the workspace overload is for the "
                          f"tensor modes ({', '.join(QuantMode_t.VECTOR)}: 当quantPre为VDEQF16、VQF322B8_PRE、VREQ8时支持); "
                          "use the three-argument Fixpipe", FIXPIPE_PAGE)
        if p.nd_num == 0 or p.m_size == 0 or p.n_size == 0:
            return
        if p.nd_num != 1:
            self._rule_at("Fixpipe ndNum > 1 (several NZ matrices in one call) is not modelled; call it per matrix",
                          FIXPIPE_PAGE)
        m, n = p.m_size, p.n_size
        if workspace is not None:
            self._check_quant_workspace(workspace, n)
        if p.src_stride < round_up(m, 16):
            self._rule_at(f"Fixpipe srcStride={p.src_stride} is below mSize={m} rounded up to 16 ({round_up(m, 16)}): "
                          "srcStride is the distance between L0C's 16-column blocks in rows (其值应填成mSize对16向上取整); "
                          "with less the hardware reads the next block's rows as this block's", FIXPIPE_PAGE)
        if p.dst_stride < n:
            self._rule_at(f"Fixpipe dstStride={p.dst_stride} < nSize={n}: dstStride is the GM row length in elements "
                          "(NZ2ND); shorter rows would overwrite each other", FIXPIPE_PAGE)
        n1 = _ceil(n, 16)
        src_need = ((n1 - 1) * p.src_stride * 16 + m * 16)
        if src_need > src.count:
            self._rule_at(f"Fixpipe {m} x {n} with srcStride={p.src_stride}: reads {src_need} values of '{src.name}', "
                          f"which has {src.count}", FIXPIPE_PAGE)
        dst_need = (m - 1) * p.dst_stride + n
        if dst_need > dst.size:
            self._rule_at(f"Fixpipe {m} x {n} with dstStride={p.dst_stride}: writes {dst_need} elements of "
                          f"'{dst.name}', which has {dst.size} from its address", FIXPIPE_PAGE)
        atomic = self._atomic
        if atomic is not None and atomic != dst.dtype:
            self._rule_at(f"SetAtomicAdd<{atomic.name}> is on but Fixpipe writes {dst.dtype.name}: the atomic type must "
                          "be the type written to GM (SetAtomicAdd的模板参数设定累加数据类型)", ATOMIC_PAGE)
        size = dst.dtype.itemsize
        gm_bytes = m * n * size
        bpc, _from_hbm = gm_bytes_per_cycle(self, dst, "FIX", (dst.address_bytes, p.dst_stride * size, n * size, m))
        lo = src.byte_offset
        op = " atomic-add" if atomic is not None else ""
        if workspace is None:
            cost = fixpipe_cycles(self.hw, m * n, gm_bytes, n * size, m, p.dst_stride * size, bpc)
            self._exec("FIX", f"Fixpipe L0C->GM {m}x{n} {p.quant_pre}{op}", cost,
                       reads=((src, lo, lo + src_need * src.dtype.itemsize),), nbytes=gm_bytes, elements=m * n)
        else:
            # the library's chunks (GenFixpipeTilingV220): each an L1 -> FB copy of its words
            # (128-B units), PipeBarrier<PIPE_FIX>, then that chunk's columns L0C -> GM — all on FIX,
            # one after another, so one event of their summed cost (one Ascend C call)
            chunks = _deq_chunks(n)
            fb_bytes = [round_up(cn * 8, 128) for _, cn in chunks]
            cost = sum(fixpipe_fb_copy_cycles(self.hw, fb)
                       + fixpipe_cycles(self.hw, m * cn, m * cn * size, cn * size, m, p.dst_stride * size, bpc)
                       for (_, cn), fb in zip(chunks, fb_bytes))
            w_lo = workspace.byte_offset
            w_hi = min(w_lo + chunks[-1][0] * 8 + fb_bytes[-1], workspace.region.nbytes)
            self._exec("FIX", f"Fixpipe L0C->GM {m}x{n} {p.quant_pre}{op} (quant words L1->FB: "
                       f"{' + '.join(str(fb) for fb in fb_bytes)} B)", cost,
                       reads=((src, lo, lo + src_need * src.dtype.itemsize), (workspace, w_lo, w_hi)),
                       nbytes=gm_bytes, elements=m * n)
        self.core.hbm_write_bytes += gm_bytes
        if self.timing_only:
            return
        cols = np.arange(n)
        vals = src.data[(cols // 16) * (p.src_stride * 16) + np.arange(m)[:, None] * 16 + cols % 16]
        if p.quant_pre in (QuantMode_t.DEQF16, QuantMode_t.VDEQF16):
            if p.quant_pre == QuantMode_t.DEQF16:
                m1 = deq_scale_float(deq_scale_uint64(np.array([p.deq_scalar], np.float64)))
            else:
                m1 = deq_scale_float(workspace.data[:n])[None, :]
            m2 = np.float32(0.0) if p.relu_en else m1
            f = vals.astype(np.float32)                          # MCB = 0: int32 -> float directly
            f = np.where(f >= 0, f * m1, f * m2).astype(np.float32)
            out = np.clip(f, -65504.0, 65504.0).astype(np.float16)    # saturated, then RINT to half
        else:
            if p.relu_en:
                vals = np.maximum(vals, 0)
            if p.quant_pre == QuantMode_t.F322BF16:
                out = float_to_bfloat16(vals)                    # CAST_RINT: round to nearest even
            else:
                out = vals.astype(dst.dtype)                     # F322F16: round to nearest even
        idx = (np.arange(m)[:, None] * p.dst_stride + np.arange(n)).ravel()
        # overwrite, or add under SetAtomicAdd (which refuses uint16, so never bfloat16 bits here):
        # the one GM store the DMA copies use too
        self._gm_store(dst, idx, out.ravel())

    def _check_quant_workspace(self, ws, n: int) -> None:
        """The cbufWorkspace of a tensor-quant Fixpipe (FIXPIPE_PAGE, 表2 cbufWorkspace; 约束说明):
        a uint64 LocalTensor (模板参数S必须为uint64_t类型，否则编译失败) in L1 (TPosition C1; A1/B1 are
        the same L1 here), 32-byte aligned, holding at least nSize words (one per column); the
        words must be finite normal scales (量化参数不能为inf/nan和非规格化数)."""
        if not isinstance(ws, LocalTensor):
            raise TypeError(f"Fixpipe cbufWorkspace must be a LocalTensor<uint64_t> in L1, got {type(ws).__name__}")
        if ws.dtype != np.uint64:
            self._rule_at(f"Fixpipe cbufWorkspace '{ws.name}' is {ws.dtype.name}: the quant words are uint64_t (模板参数S"
                          "必须为uint64_t类型，否则编译失败); build them with deq_scale_uint64(scales) on the host "
                          "(bits 0-31: the float32 scale)", FIXPIPE_PAGE)
        if buffer_of(ws) != "L1":
            self._rule_at(f"Fixpipe cbufWorkspace '{ws.name}' is in {buffer_of(ws)}: the quant tensor lives in L1 (支持的"
                          "物理地址为L1 Buffer); DataCopy the words GM -> L1 first", FIXPIPE_PAGE)
        if ws.ub_address % 32:
            self._rule_at(f"Fixpipe cbufWorkspace '{ws.name}' starts at L1 byte {ws.ub_address}, not 32-byte aligned "
                          "(地址需满足32字节对齐)", FIXPIPE_PAGE)
        if ws.count < n:
            self._rule_at(f"Fixpipe nSize={n} with a cbufWorkspace of {ws.count} words: tensor quantisation takes one "
                          f"uint64 word per output column (量化参数的shape为[n]); give '{ws.name}' >= {n} words",
                          QUANT_PAGE)
        if not self.timing_only:
            f = deq_scale_float(ws.data[:n])
            bad = ~np.isfinite(f) | ((f != 0) & (np.abs(f) < np.finfo(np.float32).tiny))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                self._rule_at(f"Fixpipe cbufWorkspace '{ws.name}' word {i} holds {float(f[i])}: quant scales must not be "
                              "inf/nan or subnormal (量化和ReLU参数不能为inf/nan和非规格化数); did the words reach L1 "
                              "before Fixpipe, and were they made by deq_scale_uint64?", FIXPIPE_PAGE)

    # ---- atomic accumulation into GM: SetAtomicAdd<T> / DisableDmaAtomic are DmaOps' (one switch
    # for every copy to GM, Fixpipe's included; npu_lab.lang.dma) -------------------------------
