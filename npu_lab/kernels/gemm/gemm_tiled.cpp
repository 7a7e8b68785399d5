// chips: ascend-910b2
// GEMM v2 / v3 / v4: the Ascend C beside kernels.py gemm_tiled_kernel. C [M, N] = A [M, K] * B [K, N],
// half in, float accumulation in L0C; half out (Fixpipe F322F16) or float out (v4's atomic sum).
// The same class runs bfloat16 (gemm_bf16: bfloat16 x bfloat16 -> float in L0C, Mmad.md 表7; Fixpipe
// F322BF16, round to nearest even) and int8 dequantised per channel in Fixpipe (gemm_int8_deq: int8 x
// int8 -> int32 in L0C; B kept transposed in GM, Bᵀ [N, K], because LoadData transposes b16 only; each
// task copies its singleCoreN uint64 quant words GM -> L1 (TPosition C1) and passes them to Fixpipe as
// cbufWorkspace with quantPre VDEQF16 — 矩阵搬出关键特性说明/随路量化.md; Fixpipe reads them on FIX, so
// MTE2 -> FIX and FIX -> MTE2 are ordered by hand).
//
// v2, L1-tiled: a K panel of stepKa base K tiles is copied GM -> L1 in one Nd2Nz DataCopy and feeds
// stepKa Mmads; when the panel covers the task's K (isReuseA) the A panel stays in L1 across all the
// N tiles of its rows, so A is read from GM once per task instead of once per N tile.
// v3, double-buffered: the same code with two buffers per queue (depthA1 = 2 x stepKa, depthB1 =
// 2 x stepKb, dbL0A = dbL0B = dbL0C = 2 where they fit): MTE2 fills the next panel while MTE1 loads and M multiplies, FIX drains one L0C tile
// while M fills the other — the overlap emerges from the queues, as on the vector core.
// v4, K-split: singleCoreK < K, so tasks along K fill cores a small M x N leaves idle; each task's
// partial sum is added into C in GM by Fixpipe under SetAtomicAdd<T> (C is zeroed by the host first:
// SetAtomicAdd.md, 该接口执行前不会自动清零GM数据). Without it the tasks overwrite each other.
//
// The blockDim is one-dimensional: block b runs tasks b, b + blockDim, ... of the (M-tile, N-tile,
// K-split) grid (TaskCoords below). Same calls, same order as the Python.
// References (asc-devkit docs/zh/api/SIMD-API/基础API/): 矩阵计算（ISASI）/矩阵计算的搬入/
// DataCopy（GMToL1随路转换-ND2NZ搬运）.md, LoadData_2D.md, Mmad计算/Mmad.md,
// 矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md, 原子操作/SetAtomicAdd.md, 原子操作/DisableDmaAtomic.md.
#include "kernel_operator.h"
using namespace AscendC;

// The host's tiling struct (tiling.py GemmTiling; not "GemmTiling" here: AscendC has one, kernel_struct_conv2d.h): twenty int32, in this order. Field names are
// Ascend C's matmul tiling (TCubeTiling); kSplit, isReuseA and isNaive are this course's.
struct GemmTilingData {
    int32_t M, N, Ka;
    int32_t singleCoreM, singleCoreN, singleCoreK;
    int32_t baseM, baseN, baseK;
    int32_t stepKa, stepKb, depthA1, depthB1;
    int32_t dbL0A, dbL0B, dbL0C;
    int32_t usedCoreNum, kSplit, isReuseA, isNaive;
};

__aicore__ inline int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }
__aicore__ inline int32_t Round16(int32_t a) { return (a + 15) / 16 * 16; }
__aicore__ inline int32_t Min(int32_t a, int32_t b) { return a < b ? a : b; }
__aicore__ inline int32_t RoundUp4(int32_t a) { return (a + 3) / 4 * 4; }   // uint64 words in whole 32 B

// The 3D task grid in one index: task = (mIdx * nTiles + nIdx) * kSplit + kIdx (tiling.py task_coords).
__aicore__ inline void TaskCoords(const GemmTilingData& t, int32_t task, int32_t& mIdx, int32_t& nIdx, int32_t& kIdx)
{
    int32_t nTiles = CeilDiv(t.N, t.singleCoreN);
    mIdx = task / (nTiles * t.kSplit);
    nIdx = (task / t.kSplit) % nTiles;
    kIdx = task % t.kSplit;
}

// InT: half, bfloat16_t or int8_t; OutT: what Fixpipe writes; B16: a 2-byte input (B [K, N] in GM, LoadData
// with ifTranspose) or int8 (Bᵀ [N, K], no transpose); DEQ_VEC: dequantise per channel (VDEQF16).
template <typename InT, typename OutT, bool B16, bool DEQ_VEC>
class KernelGemmTiled {
    using AccT = typename std::conditional<B16, float, int32_t>::type;   // L0C: float for 2-byte inputs, int32 for int8
    static constexpr int32_t K0 = 32 / sizeof(InT);                      // K of one 512-B fractal: 16 (b16), 32 (int8)
    static constexpr int32_t FE = 512 / sizeof(InT);                     // elements of one fractal

public:
    __aicore__ inline KernelGemmTiled() {}

    __aicore__ inline void Init(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR deq, bool atomicAdd, const GemmTilingData& tiling,
                                TPipe* pipe)
    {
        t = tiling;
        atomic = atomicAdd;
        int32_t kTiles = CeilDiv(t.singleCoreK, t.baseK);
        kL1 = Min(t.stepKa, kTiles) * t.baseK;
        aGm.SetGlobalBuffer((__gm__ InT*)a);
        bGm.SetGlobalBuffer((__gm__ InT*)b);
        cGm.SetGlobalBuffer((__gm__ OutT*)c);
        // depthA1 / depthB1 count base blocks; a panel holds stepKa / stepKb of them
        pipe->InitBuffer(a1Queue, t.depthA1 / t.stepKa, Round16(t.baseM) * kL1 * sizeof(InT));
        pipe->InitBuffer(b1Queue, t.depthB1 / t.stepKb, kL1 * Round16(t.baseN) * sizeof(InT));
        pipe->InitBuffer(a2Queue, t.dbL0A, t.baseM * t.baseK * sizeof(InT));
        pipe->InitBuffer(b2Queue, t.dbL0B, t.baseK * t.baseN * sizeof(InT));
        pipe->InitBuffer(cQueue, t.dbL0C, t.baseM * t.baseN * sizeof(AccT));
        if constexpr (DEQ_VEC) {          // a task's quant words (one uint64 per column of C) in L1
            deqGm.SetGlobalBuffer((__gm__ uint64_t*)deq);
            pipe->InitBuffer(deqBuf, RoundUp4(t.singleCoreN) * sizeof(uint64_t));
            deqL1 = deqBuf.Get<uint64_t>();
        }
    }

    __aicore__ inline void Process()
    {
        if (atomic) {
            SetAtomicAdd<OutT>();          // Fixpipe adds into C: the K-split's partial sums meet in GM
        }
        int32_t tasks = CeilDiv(t.M, t.singleCoreM) * CeilDiv(t.N, t.singleCoreN) * t.kSplit;
        for (int32_t task = GetBlockIdx(); task < tasks; task += GetBlockNum()) {
            int32_t mIdx, nIdx, kIdx;
            TaskCoords(t, task, mIdx, nIdx, kIdx);
            int32_t tm = Min(t.singleCoreM, t.M - mIdx * t.singleCoreM);
            int32_t tn = Min(t.singleCoreN, t.N - nIdx * t.singleCoreN);
            int32_t tk = Min(t.singleCoreK, t.Ka - kIdx * t.singleCoreK);
            if constexpr (DEQ_VEC) {      // this task's quant words GM -> L1, read by Fixpipe on FIX
                if (task != GetBlockIdx()) {
                    WaitFlag<HardEvent::FIX_MTE2>(0);    // the previous task's Fixpipes have read theirs
                }
                DataCopy(deqL1, deqGm[nIdx * t.singleCoreN], RoundUp4(tn));
                SetFlag<HardEvent::MTE2_FIX>(0);
                WaitFlag<HardEvent::MTE2_FIX>(0);
            }
            for (int32_t mb = 0; mb < tm; mb += t.baseM) {
                Rows(mIdx * t.singleCoreM + mb, Min(t.baseM, tm - mb), nIdx * t.singleCoreN, tn,
                     kIdx * t.singleCoreK, tk);
            }
            if constexpr (DEQ_VEC) {
                if (task + GetBlockNum() < tasks) {
                    SetFlag<HardEvent::FIX_MTE2>(0);     // the task's Fixpipes are issued: the next may refill
                }
            }
        }
        if (atomic) {
            DisableDmaAtomic();
        }
    }

private:
    // One row of base tiles: the A panel of these rows, then every N tile of the task.
    __aicore__ inline void Rows(int32_t row, int32_t vm, int32_t col0, int32_t tn, int32_t kAt, int32_t tk)
    {
        int32_t m16 = Round16(vm);
        bool haveA = false;
        LocalTensor<InT> a1;
        for (int32_t nb = 0; nb < tn; nb += t.baseN) {
            int32_t vn = Min(t.baseN, tn - nb);
            int32_t col = col0 + nb;
            LocalTensor<AccT> c = cQueue.AllocTensor<AccT>();
            for (int32_t kc = 0; kc < tk; kc += kL1) {
                int32_t vkc = Min(kL1, tk - kc);
                if (!haveA) {                    // the A panel (with isReuseA: once per row of base tiles)
                    a1 = a1Queue.AllocTensor<InT>();
                    DataCopy(a1, aGm[row * t.Ka + kAt + kc], Nd2NzParams{1, static_cast<uint16_t>(vm),
                             static_cast<uint32_t>(vkc), 0, static_cast<uint64_t>(t.Ka), static_cast<uint16_t>(m16), 1, 0});
                    a1Queue.EnQue(a1);
                    a1 = a1Queue.DeQue<InT>();
                    haveA = true;
                }
                LocalTensor<InT> b1 = b1Queue.AllocTensor<InT>();
                if constexpr (B16) {      // B [K, N]: the panel's K rows, N columns
                    DataCopy(b1, bGm[(kAt + kc) * t.N + col], Nd2NzParams{1, static_cast<uint16_t>(vkc),
                             static_cast<uint32_t>(vn), 0, static_cast<uint64_t>(t.N), static_cast<uint16_t>(Round16(vkc)), 1, 0});
                } else {                  // Bᵀ [N, K]: the panel's N rows, K columns
                    DataCopy(b1, bGm[col * t.Ka + kAt + kc], Nd2NzParams{1, static_cast<uint16_t>(vn),
                             static_cast<uint32_t>(vkc), 0, static_cast<uint64_t>(t.Ka), static_cast<uint16_t>(Round16(vn)), 1, 0});
                }
                b1Queue.EnQue(b1);
                b1 = b1Queue.DeQue<InT>();
                for (int32_t kb = 0; kb < vkc; kb += t.baseK) {
                    int32_t vk = Min(t.baseK, vkc - kb);
                    int32_t k1 = CeilDiv(vk, K0);
                    int32_t n1 = CeilDiv(vn, 16);
                    LocalTensor<InT> a2 = a2Queue.AllocTensor<InT>();
                    LocalTensor<InT> b2 = b2Queue.AllocTensor<InT>();
                    // the panel's fractal (i, j) is number j * (m16 / 16) + i (column blocks m16 rows tall): a K
                    // fractal column's fractals are adjacent in L1 and land k1 apart in L0A (ZZ)
                    for (int32_t j = 0; j < k1; ++j) {
                        LoadData(a2[j * FE], a1, LoadData2DParams{static_cast<uint16_t>((kb / K0 + j) * (m16 / 16)),
                                 static_cast<uint8_t>(m16 / 16), 1, 0, static_cast<uint16_t>(k1 - 1), false, 0});
                    }
                    if constexpr (B16) {  // each 16 x 16 fractal of B transposed into L0B's ZN
                        for (int32_t i = 0; i < k1; ++i) {
                            LoadData(b2[i * n1 * FE], b1, LoadData2DParams{static_cast<uint16_t>(kb / 16 + i),
                                     static_cast<uint8_t>(n1), static_cast<uint16_t>(CeilDiv(vkc, 16)), 0, 0, true, 0});
                        }
                    } else {              // Bᵀ's NZ fractals already are ZN: n1 adjacent ones per K fractal row
                        for (int32_t i = 0; i < k1; ++i) {
                            LoadData(b2[i * n1 * FE], b1, LoadData2DParams{static_cast<uint16_t>((kb / K0 + i) * n1),
                                     static_cast<uint8_t>(n1), 1, 0, 0, false, 0});
                        }
                    }
                    a2Queue.EnQue(a2);
                    b2Queue.EnQue(b2);
                    a2 = a2Queue.DeQue<InT>();
                    b2 = b2Queue.DeQue<InT>();
                    bool first = kc == 0 && kb == 0;
                    if (!first && (m16 / 16) * (vn / 16) < 10) {
                        PipeBarrier<PIPE_M>();   // Mmad.md: small accumulating Mmads wait for the previous one
                    }
                    Mmad(c, a2, b2, MmadParams{static_cast<uint16_t>(m16), static_cast<uint16_t>(vn),
                         static_cast<uint16_t>(vk), 0, false, first});
                    a2Queue.FreeTensor(a2);
                    b2Queue.FreeTensor(b2);
                }
                b1Queue.FreeTensor(b1);
                if (!t.isReuseA) {               // a fresh A panel for the next K panel
                    a1Queue.FreeTensor(a1);
                    haveA = false;
                }
            }
            cQueue.EnQue(c);
            c = cQueue.DeQue<AccT>();
            FixpipeParamsV220 params{static_cast<uint16_t>(vn), static_cast<uint16_t>(vm), static_cast<uint16_t>(m16),
                                     static_cast<uint32_t>(t.N), false, Quant(), 0, 1, 0, 0, 0};
            if constexpr (DEQ_VEC) {
                Fixpipe(cGm[row * t.N + col], c, deqL1[nb], params);   // column col's word is deqL1[nb]
            } else {
                Fixpipe(cGm[row * t.N + col], c, params);
            }
            cQueue.FreeTensor(c);
        }
        if (haveA) {
            a1Queue.FreeTensor(a1);              // the row's A panel (isReuseA)
        }
    }

    // Fixpipe's conversion of the L0C tile (must be set by hand: 此参数需要用户手动配置，不会自动推导)
    __aicore__ static constexpr QuantMode_t Quant()
    {
        if constexpr (DEQ_VEC) {
            return QuantMode_t::VDEQF16;                  // int32 -> half, times the column's scale
        } else if constexpr (IsSameType<OutT, bfloat16_t>::value) {
            return QuantMode_t::F322BF16;                 // float -> bfloat16, round to nearest even
        } else if constexpr (IsSameType<OutT, half>::value) {
            return QuantMode_t::F322F16;
        } else {
            return QuantMode_t::NoQuant;
        }
    }

    GemmTilingData t;
    bool atomic;
    int32_t kL1;
    TQue<TPosition::A1, 1> a1Queue;
    TQue<TPosition::B1, 1> b1Queue;
    TQue<TPosition::A2, 1> a2Queue;
    TQue<TPosition::B2, 1> b2Queue;
    TQue<TPosition::CO1, 1> cQueue;
    TBuf<TPosition::C1> deqBuf;
    LocalTensor<uint64_t> deqL1;
    GlobalTensor<InT> aGm, bGm;
    GlobalTensor<OutT> cGm;
    GlobalTensor<uint64_t> deqGm;
};

// v2 and v3 differ only in the tiling's buffer counts; v4 is the K-split (float C here; half C with
// the half entry above).
extern "C" __global__ __aicore__ void gemm_v3(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR workspace, GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    REGISTER_TILING_DEFAULT(GemmTilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelGemmTiled<half, half, true, false> op;
    op.Init(a, b, c, nullptr, tilingData.kSplit > 1, tilingData, &pipe);   // a half K-split adds in half
    op.Process();
}

extern "C" __global__ __aicore__ void gemm_v4(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR workspace, GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    REGISTER_TILING_DEFAULT(GemmTilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelGemmTiled<half, float, true, false> op;
    op.Init(a, b, c, nullptr, tilingData.kSplit > 1, tilingData, &pipe);
    op.Process();
}

// bfloat16 in; bfloat16 out (F322BF16), or float out for a K-split (its partial sums meet by SetAtomicAdd<float>)
extern "C" __global__ __aicore__ void gemm_bf16(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR workspace, GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    REGISTER_TILING_DEFAULT(GemmTilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    if (tilingData.kSplit > 1) {
        KernelGemmTiled<bfloat16_t, float, true, false> op;
        op.Init(a, b, c, nullptr, true, tilingData, &pipe);
        op.Process();
    } else {
        KernelGemmTiled<bfloat16_t, bfloat16_t, true, false> op;
        op.Init(a, b, c, nullptr, false, tilingData, &pipe);
        op.Process();
    }
}

// int8 A [M, K] and Bᵀ [N, K], half C = C_int32 x deq[n] (deq: the host's uint64 quant words, N rounded up to 4)
extern "C" __global__ __aicore__ void gemm_int8_deq(GM_ADDR a, GM_ADDR bT, GM_ADDR deq, GM_ADDR c, GM_ADDR workspace,
                                                    GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    REGISTER_TILING_DEFAULT(GemmTilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelGemmTiled<int8_t, half, false, true> op;
    op.Init(a, bT, c, deq, tilingData.kSplit > 1, tilingData, &pipe);   // a K-split adds its half partials
    op.Process();
}
