// chips: ascend-910b2
// GEMM v1, naive: the Ascend C beside kernels.py gemm_naive_kernel. C [M, N] = A [M, K] * B [K, N],
// half in, float accumulation in L0C, half out (Fixpipe F322F16).
//
// One base tile at a time: for every (C base tile, base K step) the A and B base tiles are copied
// GM -> L1 (DataCopy + Nd2NzParams, ND -> NZ, pipe MTE2), loaded L1 -> L0A / L0B (LoadData, MTE1;
// B's fractals transposed: L0B holds ZN), multiplied into L0C (Mmad, M), and the finished tile goes
// L0C -> GM (Fixpipe, FIX: NZ -> ND, float -> half). One buffer per queue (TQue<A1/B1/A2/B2/CO1, 1>):
// AllocTensor waits for the previous tile's consumer, so the four pipes take turns. No reuse: every
// A tile is read again for each N tile.
//
// The one-dimensional blockDim: block b runs tasks b, b + blockDim, ... of the (M-tile, N-tile)
// grid (TaskCoords below). Tails: Nd2Nz pads rows to 32 B with zeros, Mmad reads only k
// valid columns, Fixpipe writes mSize x nSize values; Mmad's m is rounded up to 16 (m = 1 would be
// GEMV mode).
//
// References (asc-devkit): examples/01_simd_cpp_api/00_introduction/02_matrix/matmul_basic_api/
// matmul_basic_api.asc; docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/矩阵计算的搬入/
// DataCopy（GMToL1随路转换-ND2NZ搬运）.md, LoadData_2D.md, Mmad计算/Mmad.md,
// 矩阵计算的搬出/Fixpipe（L0C到GM数据搬运）.md.
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

// The 3D task grid in one index: task = (mIdx * nTiles + nIdx) * kSplit + kIdx (tiling.py task_coords).
__aicore__ inline void TaskCoords(const GemmTilingData& t, int32_t task, int32_t& mIdx, int32_t& nIdx, int32_t& kIdx)
{
    int32_t nTiles = CeilDiv(t.N, t.singleCoreN);
    mIdx = task / (nTiles * t.kSplit);
    nIdx = (task / t.kSplit) % nTiles;
    kIdx = task % t.kSplit;
}

class KernelGemmNaive {
public:
    __aicore__ inline KernelGemmNaive() {}

    __aicore__ inline void Init(GM_ADDR a, GM_ADDR b, GM_ADDR c, const GemmTilingData& tiling, TPipe* pipe)
    {
        t = tiling;
        aGm.SetGlobalBuffer((__gm__ half*)a);
        bGm.SetGlobalBuffer((__gm__ half*)b);
        cGm.SetGlobalBuffer((__gm__ half*)c);
        pipe->InitBuffer(a1Queue, 1, t.baseM * t.baseK * sizeof(half));
        pipe->InitBuffer(b1Queue, 1, t.baseK * t.baseN * sizeof(half));
        pipe->InitBuffer(a2Queue, 1, t.baseM * t.baseK * sizeof(half));
        pipe->InitBuffer(b2Queue, 1, t.baseK * t.baseN * sizeof(half));
        pipe->InitBuffer(cQueue, 1, t.baseM * t.baseN * sizeof(float));
    }

    __aicore__ inline void Process()
    {
        int32_t tasks = CeilDiv(t.M, t.singleCoreM) * CeilDiv(t.N, t.singleCoreN) * t.kSplit;
        for (int32_t task = GetBlockIdx(); task < tasks; task += GetBlockNum()) {
            int32_t mIdx, nIdx, kIdx;
            TaskCoords(t, task, mIdx, nIdx, kIdx);
            int32_t tm = Min(t.singleCoreM, t.M - mIdx * t.singleCoreM);
            int32_t tn = Min(t.singleCoreN, t.N - nIdx * t.singleCoreN);
            for (int32_t mb = 0; mb < tm; mb += t.baseM) {
                for (int32_t nb = 0; nb < tn; nb += t.baseN) {
                    Tile(mIdx * t.singleCoreM + mb, nIdx * t.singleCoreN + nb, Min(t.baseM, tm - mb),
                         Min(t.baseN, tn - nb));
                }
            }
        }
    }

private:
    __aicore__ inline void Tile(int32_t row, int32_t col, int32_t vm, int32_t vn)
    {
        int32_t m16 = Round16(vm);
        int32_t n1 = CeilDiv(vn, 16);
        LocalTensor<float> c = cQueue.AllocTensor<float>();
        for (int32_t kb = 0; kb < t.Ka; kb += t.baseK) {
            int32_t vk = Min(t.baseK, t.Ka - kb);
            // GM -> L1, ND -> NZ: {ndNum, nValue, dValue, srcNdMatrixStride, srcDValue, dstNzC0Stride,
            // dstNzNStride, dstNzMatrixStride}
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
            // L1 -> L0A (NZ -> ZZ): per K fractal column j, its m16 / 16 fractals (adjacent in L1) land
            // k1 fractals apart in L0A {startIndex, repeatTimes, srcStride, sid, dstGap, ifTranspose, addrMode}
            LocalTensor<half> a2 = a2Queue.AllocTensor<half>();
            LocalTensor<half> b2 = b2Queue.AllocTensor<half>();
            int32_t k1 = CeilDiv(vk, 16);
            for (int32_t j = 0; j < k1; ++j) {
                LoadData(a2[j * 256], a1, LoadData2DParams{static_cast<uint16_t>(j * (m16 / 16)),
                         static_cast<uint8_t>(m16 / 16), 1, 0, static_cast<uint16_t>(k1 - 1), false, 0});
            }
            // L1 -> L0B (NZ -> ZN): per 16-row block of K, its N fractals, each transposed
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
            // {m, n, k, unitFlag, cmatrixSource, cmatrixInitVal}: the first K step starts C at 0
            Mmad(c, a2, b2, MmadParams{static_cast<uint16_t>(m16), static_cast<uint16_t>(vn),
                 static_cast<uint16_t>(vk), 0, false, kb == 0});
            a2Queue.FreeTensor(a2);
            b2Queue.FreeTensor(b2);
        }
        cQueue.EnQue(c);
        c = cQueue.DeQue<float>();
        // L0C -> GM: {nSize, mSize, srcStride, dstStride, reluEn, quantPre, deqScalar, ndNum, srcNdStride,
        // dstNdStride, unitFlag}
        Fixpipe(cGm[row * t.N + col], c, FixpipeParamsV220{static_cast<uint16_t>(vn), static_cast<uint16_t>(vm),
                static_cast<uint16_t>(m16), static_cast<uint32_t>(t.N), false, QuantMode_t::F322F16, 0, 1, 0, 0, 0});
        cQueue.FreeTensor(c);
    }

    GemmTilingData t;
    TQue<TPosition::A1, 1> a1Queue;
    TQue<TPosition::B1, 1> b1Queue;
    TQue<TPosition::A2, 1> a2Queue;
    TQue<TPosition::B2, 1> b2Queue;
    TQue<TPosition::CO1, 1> cQueue;
    GlobalTensor<half> aGm, bGm, cGm;
};

extern "C" __global__ __aicore__ void gemm_v1(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR workspace, GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    REGISTER_TILING_DEFAULT(GemmTilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelGemmNaive op;
    op.Init(a, b, c, tilingData, &pipe);
    op.Process();
}
