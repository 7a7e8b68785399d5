"""``ASCEND_C_API``: every Ascend C call the kernel API offers, with its Python spelling, its C++
signature and its reference page in asc-devkit (``docs/zh/api/SIMD-API/基础API/...``; pages under
``docs/api/`` are the CANN 8.x / 9.0 versions, before the 9.1 renames).

Python names are the C++ names in snake_case with the same arguments in the same order; kernel
methods live on ``ctx`` (:class:`~npu_lab.lang.context.KernelContext`). A test resolves every
entry and checks the C++ listings of the course kernels call only these.
"""

from __future__ import annotations

_B = "docs/zh/api/SIMD-API/基础API/"
_M = _B + "Memory矢量计算/"
_X = _B + "矩阵计算（ISASI）/"

#: Ascend C name -> (python path, C++ signature, reference page)
_ROWS = [
    # --- where am I, tiling ---
    ("GetBlockIdx", "KernelContext.get_block_idx", "int64_t GetBlockIdx()", _B + "工具接口/系统资源与变量/GetBlockIdx.md"),
    ("GetBlockNum", "KernelContext.get_block_num", "int64_t GetBlockNum()", _B + "工具接口/系统资源与变量/GetBlockNum.md"),
    ("GET_TILING_DATA", "Int32Struct.unpack", "GET_TILING_DATA(tilingData, tiling)", _B + "Kernel-Tiling/GET_TILING_DATA.md"),
    ("GET_TILING_DATA_WITH_STRUCT", "Int32Struct.unpack", "GET_TILING_DATA_WITH_STRUCT(tiling_struct, tilingData, tiling)",
     _B + "Kernel-Tiling/GET_TILING_DATA_WITH_STRUCT.md"),
    # the struct GET_TILING_DATA reads, registered first (every operator kernel in ops-transformer does);
    # the Python side is the host's dataclass, whose fields are the C struct's
    ("REGISTER_TILING_DEFAULT", "Int32Struct.struct_format", "REGISTER_TILING_DEFAULT(tiling_struct)",
     _B + "Kernel-Tiling/REGISTER_TILING_DEFAULT.md"),
    # --- memory ---
    ("TPipe::InitBuffer", "TPipe.init_buffer",
     "void InitBuffer(TQue& que, uint8_t num, uint32_t len) / void InitBuffer(TBuf& buf, uint32_t len)",
     _B + "资源管理/TPipe/InitBuffer.md"),
    ("TQue", "TQue", "template <TPosition pos, int32_t depth> class TQue", _B + "资源管理/TQue/TQue简介.md"),
    ("AllocTensor", "TQue.alloc_tensor", "LocalTensor<T> AllocTensor<T>()", _B + "资源管理/TQue/AllocTensor.md"),
    ("EnQue", "TQue.enque", "bool EnQue(const LocalTensor<T>& tensor)", _B + "资源管理/TQue/EnQue.md"),
    ("DeQue", "TQue.deque", "LocalTensor<T> DeQue<T>()", _B + "资源管理/TQue/DeQue.md"),
    ("FreeTensor", "TQue.free_tensor", "void FreeTensor(LocalTensor<T>& tensor)", _B + "资源管理/TQue/FreeTensor.md"),
    ("TBuf", "TBuf", "template <TPosition pos = TPosition::VECCALC> class TBuf", _B + "资源管理/TBuf/TBuf简介.md"),
    ("TBuf::Get", "TBuf.get", "LocalTensor<T> Get<T>() / Get<T>(uint32_t len)", _B + "资源管理/TBuf/Get.md"),
    ("ReinterpretCast", "LocalTensor.reinterpret_cast", "LocalTensor<CAST_T> ReinterpretCast<CAST_T>() const",
     _B + "数据结构/LocalTensor/ReinterpretCast.md"),
    ("GetValue", "LocalTensor.get_value", "T GetValue(const uint32_t index) const", _B + "数据结构/LocalTensor/GetValue.md"),
    ("SetValue", "LocalTensor.set_value", "void SetValue(const uint32_t index, const T value) const",
     _B + "数据结构/LocalTensor/SetValue.md"),
    # --- sync ---
    ("SetFlag", "KernelContext.set_flag", "template <HardEvent event> void SetFlag(int32_t eventID)",
     _B + "同步控制/核内同步/SetFlag-WaitFlag(ISASI).md"),
    ("WaitFlag", "KernelContext.wait_flag", "template <HardEvent event> void WaitFlag(int32_t eventID)",
     _B + "同步控制/核内同步/SetFlag-WaitFlag(ISASI).md"),
    ("GetTPipePtr", "KernelContext.get_tpipe_ptr", "TPipe* GetTPipePtr()", _B + "资源管理/GetTPipePtr.md"),
    ("AllocEventID", "TPipe.alloc_event_id", "template <HardEvent evt> TEventID AllocEventID()",
     _B + "资源管理/TPipe/AllocEventID.md"),
    ("ReleaseEventID", "TPipe.release_event_id", "template <HardEvent evt> void ReleaseEventID(TEventID id)",
     _B + "资源管理/TPipe/ReleaseEventID.md"),
    ("FetchEventID", "TPipe.fetch_event_id",
     "TEventID FetchEventID(HardEvent evt) / template <HardEvent evt> TEventID FetchEventID()",
     _B + "资源管理/TPipe/FetchEventID.md"),
    ("PipeBarrier", "KernelContext.pipe_barrier", "template <pipe_t pipe> void PipeBarrier()",
     _B + "同步控制/核内同步/PipeBarrier(ISASI).md"),
    # --- data movement ---
    ("DataCopy", "KernelContext.data_copy",
     "void DataCopy(dst, src, const uint32_t count) / DataCopy(dst, src, const DataCopyParams& params)",
     _M + "数据搬运/DataCopy（GM与UB连续数据搬运）.md"),
    ("DataCopyPad", "KernelContext.data_copy_pad",
     "void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams&, "
     "const DataCopyPadExtParams<T>&) / DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, "
     "const DataCopyExtParams&)", _M + "数据搬运/DataCopyPad（GMToUB非对齐数据搬运）.md"),
    ("DataCopyParams", "DataCopyParams", "DataCopyParams(uint16_t blockCount, uint16_t blockLen, uint16_t srcStride, uint16_t dstStride)",
     _M + "数据搬运/DataCopy（GM与UB高维切分数据搬运）.md"),
    ("DataCopyExtParams", "DataCopyExtParams",
     "DataCopyExtParams(uint16_t blockCount, uint32_t blockLen, uint32_t srcStride, uint32_t dstStride, uint32_t rsv)",
     _M + "数据搬运/DataCopyPad（GMToUB非对齐数据搬运）.md"),
    ("DataCopyPadExtParams", "DataCopyPadExtParams",
     "DataCopyPadExtParams<T>(bool isPad, uint8_t leftPadding, uint8_t rightPadding, T paddingValue)",
     _M + "数据搬运/DataCopyPad（GMToUB非对齐数据搬运）.md"),
    # --- arithmetic ---
    ("Add", "KernelContext.add", "void Add(dst, src0, src1, const int32_t& count) / Add(dst, src0, src1, uint64_t mask, uint8_t repeatTime, const BinaryRepeatParams&)", _M + "基础算术/Add.md"),
    ("Sub", "KernelContext.sub", "void Sub(dst, src0, src1, count) / (..., mask, repeatTime, BinaryRepeatParams)", _M + "基础算术/Sub.md"),
    ("Mul", "KernelContext.mul", "void Mul(dst, src0, src1, count) / (..., mask, repeatTime, BinaryRepeatParams)", _M + "基础算术/Mul.md"),
    ("Div", "KernelContext.div", "void Div(dst, src0, src1, count) / (..., mask, repeatTime, BinaryRepeatParams)", _M + "基础算术/Div.md"),
    ("Max", "KernelContext.max", "void Max(dst, src0, src1, count) / (..., mask, repeatTime, BinaryRepeatParams)", _M + "基础算术/Max.md"),
    ("Min", "KernelContext.min", "void Min(dst, src0, src1, count) / (..., mask, repeatTime, BinaryRepeatParams)", _M + "基础算术/Min.md"),
    ("Adds", "KernelContext.adds", "void Adds(dst, src, const T& scalarValue, count) / (..., mask, repeatTime, UnaryRepeatParams)", _M + "基础算术/Adds.md"),
    ("Muls", "KernelContext.muls", "void Muls(dst, src, const T& scalarValue, count) / (..., mask, repeatTime, UnaryRepeatParams)", _M + "基础算术/Muls.md"),
    ("Maxs", "KernelContext.maxs", "void Maxs(dst, src, const T& scalarValue, count) / (..., mask, repeatTime, UnaryRepeatParams)", _M + "基础算术/Maxs.md"),
    ("Mins", "KernelContext.mins", "void Mins(dst, src, const T& scalarValue, count) / (..., mask, repeatTime, UnaryRepeatParams)", _M + "基础算术/Mins.md"),
    ("Exp", "KernelContext.exp", "void Exp(dst, src, const int32_t& count) / (dst, src, mask, repeatTime, UnaryRepeatParams)", _M + "基础算术/Exp.md"),
    ("ShiftLeft", "KernelContext.shift_left", "void ShiftLeft(dst, src, const T& scalarValue, const int32_t& count)", _M + "逻辑计算/ShiftLeft.md"),
    ("Cast", "KernelContext.cast", "void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode, const uint32_t count)", _M + "类型转换/Cast.md"),
    ("BinaryRepeatParams", "BinaryRepeatParams", "BinaryRepeatParams(dstBlkStride, src0BlkStride, src1BlkStride, dstRepStride, src0RepStride, src1RepStride)", _B + "辅助数据结构/BinaryRepeatParams.md"),
    ("UnaryRepeatParams", "UnaryRepeatParams", "UnaryRepeatParams(dstBlkStride, srcBlkStride, dstRepStride, srcRepStride)", _B + "辅助数据结构/UnaryRepeatParams.md"),
    # --- fill / copy ---
    ("Duplicate", "KernelContext.duplicate", "void Duplicate(dst, const T& scalarValue, const int32_t& count) / (dst, scalarValue, mask, repeatTime, dstBlockStride, dstRepeatStride)", _M + "数据填充/Duplicate.md"),
    ("CreateVecIndex", "KernelContext.create_vec_index", "void CreateVecIndex(LocalTensor<T> dst, const T& firstValue, uint32_t count)", _M + "数据填充/CreateVecIndex.md"),
    ("ArithProgression", "KernelContext.arith_progression", "void ArithProgression(const LocalTensor<T>& dst, const T firstValue, const T diffValue, const int32_t count)", "docs/zh/api/SIMD-API/高阶API/索引计算/Arange-94.md"),
    ("Brcb", "KernelContext.brcb", "void Brcb(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint8_t repeatTime, const BrcbRepeatParams&)", _M + "数据填充/Brcb.md"),
    ("BrcbRepeatParams", "BrcbRepeatParams", "BrcbRepeatParams(uint16_t dstBlkStride, uint16_t dstRepStride)", _M + "数据填充/Brcb.md"),
    ("Copy", "KernelContext.copy", "void Copy(dst, src, uint64_t mask, uint8_t repeatTime, const CopyRepeatParams&)", _M + "数据搬运/Copy（UBToUB掩码式高维数据搬运）.md"),
    ("CopyRepeatParams", "CopyRepeatParams", "CopyRepeatParams(dstStride, srcStride, dstRepeatSize, srcRepeatSize)", _M + "数据搬运/Copy（UBToUB掩码式高维数据搬运）.md"),
    # --- compare / select / gather ---
    ("Compare", "KernelContext.compare", "void Compare(const LocalTensor<U>& dst, src0, src1, CMPMODE cmpMode, uint32_t count) / (..., cmpMode, mask, repeatTime, BinaryRepeatParams)", _M + "比较与选择/Compare.md"),
    ("Compares", "KernelContext.compares", "void Compares(const LocalTensor<U>& dst, src0, const T src1Scalar, CMPMODE cmpMode, uint32_t count)", _M + "比较与选择/Compares.md"),
    ("Select", "KernelContext.select", "void Select(dst, const LocalTensor<U>& selMask, src0, src1 (tensor or scalar), SELMODE selMode, uint32_t count)", _M + "比较与选择/Select.md"),
    ("GatherMask", "KernelContext.gather_mask", "void GatherMask(dst, src0, src1Pattern (uint8_t 1..7 or LocalTensor<U>), const bool reduceMode, const uint32_t mask, const GatherMaskParams&, uint64_t& rsvdCnt)", _M + "比较与选择/GatherMask.md"),
    ("GatherMaskParams", "GatherMaskParams", "GatherMaskParams(uint8_t src0BlockStride, uint16_t repeatTimes, uint16_t src0RepeatStride, uint8_t src1RepeatStride)", _M + "比较与选择/GatherMask.md"),
    # --- reduce / sort ---
    ("WholeReduceMax", "KernelContext.whole_reduce_max", "void WholeReduceMax(dst, src, const int32_t mask, const int32_t repeatTime, const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride, ReduceOrder order); since CANN 9.1 ReduceRepeat<ReduceType::MAX>(...) with the same arguments (docs/zh/api/附录/接口变更说明.md; the old name still compiles)", "docs/zh/api/SIMD-API/基础API/Memory矢量计算/归约计算/ReduceRepeat.md"),
    ("WholeReduceMin", "KernelContext.whole_reduce_min", "void WholeReduceMin(dst, src, mask, repeatTime, dstRepStride, srcBlkStride, srcRepStride, ReduceOrder order); since CANN 9.1 ReduceRepeat<ReduceType::MIN>(...) with the same arguments (docs/zh/api/附录/接口变更说明.md; the old name still compiles)", "docs/zh/api/SIMD-API/基础API/Memory矢量计算/归约计算/ReduceRepeat.md"),
    ("WholeReduceSum", "KernelContext.whole_reduce_sum", "void WholeReduceSum(dst, src, const int32_t mask, const int32_t repeatTime, const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride); since CANN 9.1 ReduceRepeat<ReduceType::SUM>(...) with the same arguments (docs/zh/api/附录/接口变更说明.md; the old name still compiles)", "docs/zh/api/SIMD-API/基础API/Memory矢量计算/归约计算/ReduceRepeat.md"),
    ("ReduceMax", "KernelContext.reduce_max", "void ReduceMax(dst, src, const LocalTensor<T>& sharedTmpBuffer, const int32_t count, bool calIndex = 0)", _M + "归约计算/ReduceMax.md"),
    ("ReduceSum", "KernelContext.reduce_sum", "void ReduceSum(dst, src, const LocalTensor<T>& sharedTmpBuffer, const int32_t count)", _M + "归约计算/ReduceSum.md"),
    ("Sort32", "KernelContext.sort32", "void Sort32(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<uint32_t>& src1, const int32_t repeatTime)", _M + "排序组合（ISASI）/Sort32.md"),
    ("MrgSort", "KernelContext.mrg_sort", "void MrgSort(const LocalTensor<T>& dst, const MrgSortSrcList<T>& src, const MrgSort4Info& params)", _M + "排序组合（ISASI）/MrgSort.md"),
    ("MrgSortSrcList", "MrgSortSrcList", "MrgSortSrcList<T>(src1, src2, src3, src4)", _M + "排序组合（ISASI）/MrgSort.md"),
    ("MrgSort4Info", "MrgSort4Info", "MrgSort4Info(const uint16_t elementLengths[4], bool ifExhaustedSuspension, uint16_t validBit, uint16_t repeatTimes)", _M + "排序组合（ISASI）/MrgSort.md"),
    # --- issue 15 §6: what a first real kernel uses ---
    ("GlobalTensor::SetGlobalBuffer", "GlobalTensor.set_global_buffer",
     "void SetGlobalBuffer(__gm__ PrimType* buffer, uint64_t bufferSize) / SetGlobalBuffer(__gm__ PrimType* buffer)",
     _B + "数据结构/GlobalTensor/SetGlobalBuffer.md"),
    ("TPipe::Init", "TPipe.init", "void Init()", _B + "资源管理/TPipe/Init.md"),
    ("TPipe::Destroy", "TPipe.destroy", "void Destroy()", _B + "资源管理/TPipe/Destroy.md"),
    ("TPipe::Reset", "TPipe.reset", "void Reset()", _B + "资源管理/TPipe/Reset.md"),
    ("GetUserWorkspace", "get_user_workspace", "GM_ADDR GetUserWorkspace(GM_ADDR workspace)",
     _B + "资源管理/workspace/GetUserWorkspace.md"),
    ("printf", "KernelContext.printf", "void printf(const __gm__ char* fmt, Args&&... args)",
     "docs/zh/api/Utils-API/调测接口/printf.md"),
    ("ascendc_assert", "KernelContext.ascendc_assert",
     "ascendc_assert(expr) / ascendc_assert(expr, __gm__ const char* fmt, Args&&... args) (also assert(expr, ...))",
     _B + "调试接口/异常检测/ascendc_assert.md"),
    ("DumpTensor", "KernelContext.dump_tensor",
     "void DumpTensor(const LocalTensor<T>& tensor, uint32_t desc, uint32_t dumpSize) / (const GlobalTensor<T>&, desc, dumpSize)",
     _B + "调试接口/上板打印/DumpTensor.md"),
    ("SetAtomicAdd", "KernelContext.set_atomic_add", "template <typename T> void SetAtomicAdd()", _B + "原子操作/SetAtomicAdd.md"),
    ("SetAtomicNone", "KernelContext.set_atomic_none", "void SetAtomicNone()", _B + "原子操作/DisableDmaAtomic.md"),
    ("DisableDmaAtomic", "KernelContext.disable_dma_atomic", "void DisableDmaAtomic()", _B + "原子操作/DisableDmaAtomic.md"),
    ("bfloat16_t", "float_to_bfloat16",
     "bfloat16_t (npu_lab: uint16 bits; float_to_bfloat16 / bfloat16_to_float convert, round to nearest even)",
     _B + "数据结构/内置数据类型.md"),
    ("Relu", "KernelContext.relu", "void Relu(dst, src, const int32_t& count) / (dst, src, mask, repeatTime, UnaryRepeatParams)", _M + "基础算术/Relu.md"),
    ("Abs", "KernelContext.abs", "void Abs(dst, src, const int32_t& count) / (dst, src, mask, repeatTime, UnaryRepeatParams)", _M + "基础算术/Abs.md"),
    ("Sqrt", "KernelContext.sqrt", "void Sqrt(dst, src, const int32_t& count) / (dst, src, mask, repeatTime, UnaryRepeatParams)", _M + "基础算术/Sqrt.md"),
    ("Ln", "KernelContext.ln", "void Ln(dst, src, const int32_t& count) / (dst, src, mask, repeatTime, UnaryRepeatParams)", _M + "基础算术/Ln.md"),
    ("Reciprocal", "KernelContext.reciprocal", "void Reciprocal(dst, src, const int32_t& count) / (dst, src, mask, repeatTime, UnaryRepeatParams)", _M + "基础算术/Reciprocal.md"),
    ("SetDeqScale", "KernelContext.set_deq_scale", "void SetDeqScale(half scale)", _M + "类型转换辅助配置接口/SetDeqScale.md"),
    ("Transpose", "KernelContext.transpose", "void Transpose(const LocalTensor<T>& dst, const LocalTensor<T>& src)", _M + "数据排布转换/Transpose.md"),
    ("Gather", "KernelContext.gather",
     "void Gather(dst, src, const LocalTensor<uint32_t>& srcOffset, const uint32_t srcBaseAddr, const uint32_t count)",
     _M + "离散与聚合/Gather.md"),
    ("SetMaskCount", "KernelContext.set_mask_count", "void SetMaskCount()", _M + "掩码操作/SetMaskCount.md"),
    ("SetMaskNorm", "KernelContext.set_mask_norm", "void SetMaskNorm()", _M + "掩码操作/SetMaskNorm.md"),
    ("SetVectorMask", "KernelContext.set_vector_mask",
     "void SetVectorMask<T, MaskMode>(int32_t len) / SetVectorMask(const uint64_t maskHigh, const uint64_t maskLow); "
     "then Add<T, false>(..., MASK_PLACEHOLDER, repeatTime, params)", _M + "掩码操作/SetVectorMask.md"),
    # --- the cube core (issue 17 §1; npu_lab.lang.cube) ---
    ("Nd2NzParams", "Nd2NzParams",
     "Nd2NzParams(uint16_t ndNum, uint16_t nValue, uint32_t dValue, uint64_t srcNdMatrixStride, uint64_t srcDValue, "
     "uint16_t dstNzC0Stride, uint16_t dstNzNStride, uint32_t dstNzMatrixStride), for "
     "DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Nd2NzParams& intriParams) (GM -> L1, ND -> NZ)",
     _X + "矩阵计算的搬入/DataCopy（GMToL1随路转换-ND2NZ搬运）.md"),
    ("LoadData", "KernelContext.load_data",
     "void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParams& loadDataParams)",
     _X + "矩阵计算的搬入/LoadData_2D.md"),
    ("LoadData2DParams", "LoadData2DParams",
     "LoadData2DParams(uint16_t startIndex, uint8_t repeatTimes, uint16_t srcStride, uint8_t sid, uint16_t dstGap, "
     "bool ifTranspose, uint8_t addrMode)", _X + "矩阵计算的搬入/LoadData_2D.md"),
    ("Mmad", "KernelContext.mmad",
     "void Mmad(const LocalTensor<T>& dst, const LocalTensor<U>& fm, const LocalTensor<S>& filter, const MmadParams& mmadParams)",
     _X + "Mmad计算/Mmad.md"),
    ("MmadWithSparse", "KernelContext.mmad_with_sparse",
     "void MmadWithSparse(const LocalTensor<int32_t>& dst, const LocalTensor<int8_t>& fm, const LocalTensor<int8_t>& filter, "
     "const MmadParams& mmadParams)", _X + "Mmad计算/MmadWithSparse.md"),
    ("MmadParams", "MmadParams",
     "MmadParams(uint16_t m, uint16_t n, uint16_t k, uint8_t unitFlag, bool cmatrixSource, bool cmatrixInitVal); "
     "field kDirectionAlign", _X + "Mmad计算/Mmad.md"),
    ("Fixpipe", "KernelContext.fixpipe",
     "template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR> void Fixpipe(const GlobalTensor<T>& dst, "
     "const LocalTensor<U>& src, const FixpipeParamsV220& intriParams) / with tensor quantisation (VDEQF16): "
     "Fixpipe(dst, src, const LocalTensor<uint64_t>& cbufWorkspace, intriParams)",
     _X + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md"),
    ("FixpipeParamsV220", "FixpipeParamsV220",
     "FixpipeParamsV220(uint16_t nSize, uint16_t mSize, uint16_t srcStride, uint32_t dstStride, bool reluEn, "
     "QuantMode_t quantPre, int64_t deqScalar, uint16_t ndNum, uint16_t srcNdStride, uint16_t dstNdStride, uint8_t unitFlag)",
     _X + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md"),
    ("QuantMode_t", "QuantMode_t", "enum QuantMode_t { NoQuant, F322F16, F322BF16, DEQF16, VDEQF16, QF322B8_PRE, ... }",
     _X + "矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md"),
    # --- cube + vector in one kernel (issue 17 §2; npu_lab.lang.cross_core) ---
    ("CrossCoreSetFlag", "KernelContext.cross_core_set_flag",
     "template <uint8_t modeId, pipe_t pipe> void CrossCoreSetFlag(uint16_t flagId)",
     _B + "同步控制/核间同步/CrossCoreSetFlag(ISASI).md"),
    ("CrossCoreWaitFlag", "KernelContext.cross_core_wait_flag",
     "template <uint8_t modeId = 0, pipe_t pipe = PIPE_S> void CrossCoreWaitFlag(uint16_t flagId)",
     _B + "同步控制/核间同步/CrossCoreWaitFlag(ISASI).md"),
    ("SyncAll", "KernelContext.sync_all", "template <bool isAIVOnly = true> void SyncAll()",
     _B + "同步控制/核间同步/SyncAll.md"),
    ("ASCEND_IS_AIC", "KernelContext.is_aic", "#define ASCEND_IS_AIC constexpr(g_coreType == AscendC::AIC)  // if ASCEND_IS_AIC { ... }",
     _B + "同步控制/核间同步/关键特性说明.md"),
    ("ASCEND_IS_AIV", "KernelContext.is_aiv", "#define ASCEND_IS_AIV constexpr(g_coreType == AscendC::AIV)  // if ASCEND_IS_AIV { ... }",
     _B + "同步控制/核间同步/关键特性说明.md"),
    ("GetSubBlockIdx", "KernelContext.get_sub_block_idx", "int64_t GetSubBlockIdx()",
     _B + "工具接口/系统资源与变量/GetSubBlockIdx(ISASI).md"),
    ("GetTaskRatio", "KernelContext.get_task_ratio", "int64_t GetTaskRatio()",
     _B + "工具接口/系统资源与变量/GetTaskRatio.md"),
]

ASCEND_C_API: dict[str, dict[str, str]] = {
    name: {"python": py, "cpp": cpp, "page": page} for name, py, cpp, page in _ROWS}


def resolve(python_path: str):
    """The Python object an entry names (``"KernelContext.add"`` → the method)."""
    from .. import lang
    from .tiling_struct import Int32Struct

    head, _, attr = python_path.partition(".")
    obj = Int32Struct if head == "Int32Struct" else getattr(lang, head)
    return getattr(obj, attr) if attr else obj


def python_call_name(python_path: str) -> str:
    """How a kernel writes the call: ``ctx.add``, ``que.enque``, ``DataCopyParams``."""
    head, _, attr = python_path.partition(".")
    owner = {"KernelContext": "ctx", "TQue": "que", "TBuf": "tbuf", "TPipe": "ctx.pipe",
             "LocalTensor": "tensor", "Int32Struct": "Tiling"}.get(head, head)
    return f"{owner}.{attr}" if attr else head


def api_table():
    """A pandas DataFrame of the map (the API cheat sheet): Ascend C, Python, C++, page."""
    import pandas as pd

    return pd.DataFrame([{"Ascend C": k, "Python": python_call_name(v["python"]), "C++ signature": v["cpp"],
                          "reference page": v["page"]} for k, v in ASCEND_C_API.items()])
