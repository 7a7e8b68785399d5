// chips: ascend-910b2
// Matmul + LeakyRelu in one cube + vector kernel: the Ascend C beside epilogue.py
// matmul_leakyrelu_mix_kernel. C [M, N] = LeakyRelu(A [M, K] * B [K, N]), half in and out.
//
// KERNEL_TYPE_MIX_AIC_1_2: each block is an AI core group, one AIC and two AIVs, all running this
// entry; `if ASCEND_IS_AIC` / `if ASCEND_IS_AIV` pick the side. The AIC computes the block's C tiles
// (the naive GEMM's loop: GM -> L1 Nd2Nz, L1 -> L0A/L0B LoadData, Mmad, Fixpipe F322F16) into the GM
// workspace and, per tile, CrossCoreSetFlag<2, PIPE_FIX>(0): once the Fixpipe is done, both AIVs
// are released. Each AIV waits (CrossCoreWaitFlag(0)), takes half the tile's rows (GetSubBlockIdx),
// DataCopyPad GM -> UB, Muls + Max (max(x, alpha x) = LeakyRelu for 0 <= alpha <= 1), DataCopyPad
// UB -> C, then CrossCoreSetFlag<2, PIPE_MTE3>(1): when both AIVs set it, the AIC may run another
// tile ahead (at most AHEAD = 2: a flag's counter holds 0..15, and a reused workspace would need it).
// On an AIV GetBlockIdx() counts AIVs (2 * group + sub-block), so the group is GetBlockIdx() / 2.
//
// References (asc-devkit): examples/01_simd_cpp_api/00_introduction/03_fusion_operation/
// matmul_leakyrelu_basic_api/matmul_leakyrelu_basic_api.asc; docs/zh/api/SIMD-API/基础API/同步控制/
// 核间同步/CrossCoreSetFlag(ISASI).md, CrossCoreWaitFlag(ISASI).md; 工具接口/系统资源与变量/
// GetSubBlockIdx(ISASI).md; Kernel-Tiling/设置Kernel类型.md.
#include "kernel_operator.h"
using namespace AscendC;

// The GEMM's tiling (tiling.py GemmTiling, as in gemm_naive.cpp) and LeakyRelu's alpha (a scalar
// travels in the tiling struct; the Python passes it beside the struct).
struct EpilogueTilingData {
    int32_t M, N, Ka;
    int32_t singleCoreM, singleCoreN, singleCoreK;
    int32_t baseM, baseN, baseK;
    int32_t stepKa, stepKb, depthA1, depthB1;
    int32_t dbL0A, dbL0B, dbL0C;
    int32_t usedCoreNum, kSplit, isReuseA, isNaive;
    float alpha;
};

constexpr int32_t AHEAD = 2;                     // tiles the AIC may run ahead of its AIVs
constexpr int32_t EPILOGUE_UB_BYTES = 32 * 1024; // each of an AIV's two buffers

__aicore__ inline int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }
__aicore__ inline int32_t Round16(int32_t a) { return (a + 15) / 16 * 16; }
__aicore__ inline int32_t Min(int32_t a, int32_t b) { return a < b ? a : b; }
__aicore__ inline int32_t Max32(int32_t a, int32_t b) { return a > b ? a : b; }

__aicore__ inline void TaskCoords(const EpilogueTilingData& t, int32_t task, int32_t& mIdx, int32_t& nIdx)
{
    int32_t nTiles = CeilDiv(t.N, t.singleCoreN);
    mIdx = task / (nTiles * t.kSplit);
    nIdx = (task / t.kSplit) % nTiles;
}

class KernelMatmulLeakyRelu {
public:
    __aicore__ inline KernelMatmulLeakyRelu() {}

    __aicore__ inline void Init(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR workspace, const EpilogueTilingData& tiling,
                                TPipe* pipe)
    {
        t = tiling;
        aGm.SetGlobalBuffer((__gm__ half*)a);
        bGm.SetGlobalBuffer((__gm__ half*)b);
        cGm.SetGlobalBuffer((__gm__ half*)c);
        wsGm.SetGlobalBuffer((__gm__ half*)workspace);
        pipe_ = pipe;
    }

    __aicore__ inline void Process()
    {
        int32_t tasks = CeilDiv(t.M, t.singleCoreM) * CeilDiv(t.N, t.singleCoreN) * t.kSplit;
        if ASCEND_IS_AIC {
            pipe_->InitBuffer(a1Queue, 1, t.baseM * t.baseK * sizeof(half));
            pipe_->InitBuffer(b1Queue, 1, t.baseK * t.baseN * sizeof(half));
            pipe_->InitBuffer(a2Queue, 1, t.baseM * t.baseK * sizeof(half));
            pipe_->InitBuffer(b2Queue, 1, t.baseK * t.baseN * sizeof(half));
            pipe_->InitBuffer(cQueue, 1, t.baseM * t.baseN * sizeof(float));
            int32_t i = 0;
            for (int32_t task = GetBlockIdx(); task < tasks; task += GetBlockNum()) {
                if (i >= AHEAD) {
                    CrossCoreWaitFlag(1);                        // both AIVs finished tile i - AHEAD
                }
                CubeTask(task);
                CrossCoreSetFlag<0x2, PIPE_FIX>(0);              // tile i is in GM: release both AIVs
                ++i;
            }
            for (int32_t j = 0; j < Min(AHEAD, i); ++j) {
                CrossCoreWaitFlag(1);                            // pair the last sets
            }
        }
        if ASCEND_IS_AIV {
            int32_t ubRow = CeilDiv(t.singleCoreN * sizeof(half), 32) * 32 / sizeof(half);
            int32_t bytes = Max32(EPILOGUE_UB_BYTES, ubRow * sizeof(half));   // a chunk of any tile width fits
            pipe_->InitBuffer(inQueue, 2, bytes);
            pipe_->InitBuffer(outQueue, 2, bytes);
            int32_t sub = GetSubBlockIdx();
            for (int32_t task = GetBlockIdx() / 2; task < tasks; task += GetBlockNum()) {
                CrossCoreWaitFlag(0);
                int32_t mIdx, nIdx;
                TaskCoords(t, task, mIdx, nIdx);
                int32_t tm = Min(t.singleCoreM, t.M - mIdx * t.singleCoreM);
                int32_t tn = Min(t.singleCoreN, t.N - nIdx * t.singleCoreN);
                int32_t half_ = CeilDiv(tm, 2);
                int32_t rows = Min(half_, tm - sub * half_);
                LeakyRows(mIdx * t.singleCoreM + sub * half_, rows, nIdx * t.singleCoreN, tn);
                CrossCoreSetFlag<0x2, PIPE_MTE3>(1);             // this AIV's half is out
            }
        }
    }

private:
    __aicore__ inline void CubeTask(int32_t task)
    {
        int32_t mIdx, nIdx;
        TaskCoords(t, task, mIdx, nIdx);
        int32_t tm = Min(t.singleCoreM, t.M - mIdx * t.singleCoreM);
        int32_t tn = Min(t.singleCoreN, t.N - nIdx * t.singleCoreN);
        for (int32_t mb = 0; mb < tm; mb += t.baseM) {
            for (int32_t nb = 0; nb < tn; nb += t.baseN) {
                Tile(mIdx * t.singleCoreM + mb, nIdx * t.singleCoreN + nb, Min(t.baseM, tm - mb), Min(t.baseN, tn - nb));
            }
        }
    }

    __aicore__ inline void Tile(int32_t row, int32_t col, int32_t vm, int32_t vn)
    {
        int32_t m16 = Round16(vm);
        int32_t n1 = CeilDiv(vn, 16);
        LocalTensor<float> c = cQueue.AllocTensor<float>();
        for (int32_t kb = 0; kb < t.Ka; kb += t.baseK) {
            int32_t vk = Min(t.baseK, t.Ka - kb);
            LocalTensor<half> a1 = a1Queue.AllocTensor<half>();
            LocalTensor<half> b1 = b1Queue.AllocTensor<half>();
            DataCopy(a1, aGm[row * t.Ka + kb], Nd2NzParams{1, static_cast<uint16_t>(vm), static_cast<uint32_t>(vk), 0,
                     static_cast<uint64_t>(t.Ka), static_cast<uint16_t>(m16), 1, 0});
            DataCopy(b1, bGm[kb * t.N + col], Nd2NzParams{1, static_cast<uint16_t>(vk), static_cast<uint32_t>(vn), 0,
                     static_cast<uint64_t>(t.N), static_cast<uint16_t>(Round16(vk)), 1, 0});
            a1Queue.EnQue(a1);
            b1Queue.EnQue(b1);
            a1 = a1Queue.DeQue<half>();
            b1 = b1Queue.DeQue<half>();
            LocalTensor<half> a2 = a2Queue.AllocTensor<half>();
            LocalTensor<half> b2 = b2Queue.AllocTensor<half>();
            int32_t k1 = CeilDiv(vk, 16);
            for (int32_t j = 0; j < k1; ++j) {
                LoadData(a2[j * 256], a1, LoadData2DParams{static_cast<uint16_t>(j * (m16 / 16)),
                         static_cast<uint8_t>(m16 / 16), 1, 0, static_cast<uint16_t>(k1 - 1), false, 0});
            }
            for (int32_t i = 0; i < k1; ++i) {
                LoadData(b2[i * n1 * 256], b1, LoadData2DParams{static_cast<uint16_t>(i), static_cast<uint8_t>(n1),
                         static_cast<uint16_t>(k1), 0, 0, true, 0});
            }
            a1Queue.FreeTensor(a1);
            b1Queue.FreeTensor(b1);
            a2Queue.EnQue(a2);
            b2Queue.EnQue(b2);
            a2 = a2Queue.DeQue<half>();
            b2 = b2Queue.DeQue<half>();
            if (kb > 0 && (m16 / 16) * (vn / 16) < 10) {
                PipeBarrier<PIPE_M>();   // Mmad.md: small accumulating Mmads wait for the previous one
            }
            Mmad(c, a2, b2, MmadParams{static_cast<uint16_t>(m16), static_cast<uint16_t>(vn),
                 static_cast<uint16_t>(vk), 0, false, kb == 0});
            a2Queue.FreeTensor(a2);
            b2Queue.FreeTensor(b2);
        }
        cQueue.EnQue(c);
        c = cQueue.DeQue<float>();
        Fixpipe(wsGm[row * t.N + col], c, FixpipeParamsV220{static_cast<uint16_t>(vn), static_cast<uint16_t>(vm),
                static_cast<uint16_t>(m16), static_cast<uint32_t>(t.N), false, QuantMode_t::F322F16, 0, 1, 0, 0, 0});
        cQueue.FreeTensor(c);
    }

    // LeakyRelu of rows x cols of the workspace at (row0, col0) into C, in chunks that fit the UB.
    __aicore__ inline void LeakyRows(int32_t row0, int32_t rows, int32_t col0, int32_t cols)
    {
        int32_t ubRow = CeilDiv(cols * sizeof(half), 32) * 32 / sizeof(half);
        int32_t chunk = Max32(1, Min(rows, EPILOGUE_UB_BYTES / (ubRow * sizeof(half))));
        uint32_t gap = (t.N - cols) * sizeof(half);
        for (int32_t r = 0; r < rows; r += chunk) {
            int32_t n = Min(chunk, rows - r);
            int32_t at = (row0 + r) * t.N + col0;
            CopyIn(at, n, cols, gap);
            Compute(n * ubRow);
            CopyOut(at, n, cols, gap);
        }
    }

    __aicore__ inline void CopyIn(int32_t at, int32_t n, int32_t cols, uint32_t gap)
    {
        LocalTensor<half> x = inQueue.AllocTensor<half>();
        DataCopyPad(x, wsGm[at], DataCopyExtParams{static_cast<uint16_t>(n), static_cast<uint32_t>(cols * sizeof(half)),
                    gap, 0, 0}, DataCopyPadExtParams<half>{false, 0, 0, 0});
        inQueue.EnQue(x);
    }

    __aicore__ inline void Compute(int32_t count)
    {
        LocalTensor<half> x = inQueue.DeQue<half>();
        LocalTensor<half> y = outQueue.AllocTensor<half>();
        Muls(y, x, static_cast<half>(t.alpha), count);    // alpha x
        Max(y, x, y, count);                              // max(x, alpha x)
        inQueue.FreeTensor(x);
        outQueue.EnQue(y);
    }

    __aicore__ inline void CopyOut(int32_t at, int32_t n, int32_t cols, uint32_t gap)
    {
        LocalTensor<half> y = outQueue.DeQue<half>();
        DataCopyPad(cGm[at], y, DataCopyExtParams{static_cast<uint16_t>(n), static_cast<uint32_t>(cols * sizeof(half)),
                    0, gap, 0});
        outQueue.FreeTensor(y);
    }

    EpilogueTilingData t;
    TPipe* pipe_;
    TQue<TPosition::A1, 1> a1Queue;
    TQue<TPosition::B1, 1> b1Queue;
    TQue<TPosition::A2, 1> a2Queue;
    TQue<TPosition::B2, 1> b2Queue;
    TQue<TPosition::CO1, 1> cQueue;
    TQue<TPosition::VECIN, 2> inQueue;
    TQue<TPosition::VECOUT, 2> outQueue;
    GlobalTensor<half> aGm, bGm, cGm, wsGm;
};

extern "C" __global__ __aicore__ void matmul_leakyrelu_mix(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR workspace,
                                                           GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    REGISTER_TILING_DEFAULT(EpilogueTilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelMatmulLeakyRelu op;
    op.Init(a, b, c, workspace, tilingData, &pipe);
    op.Process();
}
