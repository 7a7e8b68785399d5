// chips: ascend-910b2
// GEMM v2 / v3 / v4: the Ascend C beside kernels.py gemm_tiled_kernel. C [M, N] = A [M, K] * B [K, N],
// half in, float accumulation in L0C; half out (Fixpipe F322F16) or float out (v4's atomic sum).
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

// The 3D task grid in one index: task = (mIdx * nTiles + nIdx) * kSplit + kIdx (tiling.py task_coords).
__aicore__ inline void TaskCoords(const GemmTilingData& t, int32_t task, int32_t& mIdx, int32_t& nIdx, int32_t& kIdx)
{
    int32_t nTiles = CeilDiv(t.N, t.singleCoreN);
    mIdx = task / (nTiles * t.kSplit);
    nIdx = (task / t.kSplit) % nTiles;
    kIdx = task % t.kSplit;
}

template <typename OutT>
class KernelGemmTiled {
public:
    __aicore__ inline KernelGemmTiled() {}

    __aicore__ inline void Init(GM_ADDR a, GM_ADDR b, GM_ADDR c, bool atomicAdd, const GemmTilingData& tiling, TPipe* pipe)
    {
        t = tiling;
        atomic = atomicAdd;
        int32_t kTiles = CeilDiv(t.singleCoreK, t.baseK);
        kL1 = Min(t.stepKa, kTiles) * t.baseK;
        aGm.SetGlobalBuffer((__gm__ half*)a);
        bGm.SetGlobalBuffer((__gm__ half*)b);
        cGm.SetGlobalBuffer((__gm__ OutT*)c);
        // depthA1 / depthB1 count base blocks; a panel holds stepKa / stepKb of them
        pipe->InitBuffer(a1Queue, t.depthA1 / t.stepKa, Round16(t.baseM) * kL1 * sizeof(half));
        pipe->InitBuffer(b1Queue, t.depthB1 / t.stepKb, kL1 * Round16(t.baseN) * sizeof(half));
        pipe->InitBuffer(a2Queue, t.dbL0A, t.baseM * t.baseK * sizeof(half));
        pipe->InitBuffer(b2Queue, t.dbL0B, t.baseK * t.baseN * sizeof(half));
        pipe->InitBuffer(cQueue, t.dbL0C, t.baseM * t.baseN * sizeof(float));
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
            for (int32_t mb = 0; mb < tm; mb += t.baseM) {
                Rows(mIdx * t.singleCoreM + mb, Min(t.baseM, tm - mb), nIdx * t.singleCoreN, tn,
                     kIdx * t.singleCoreK, tk);
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
        LocalTensor<half> a1;
        for (int32_t nb = 0; nb < tn; nb += t.baseN) {
            int32_t vn = Min(t.baseN, tn - nb);
            int32_t col = col0 + nb;
            LocalTensor<float> c = cQueue.AllocTensor<float>();
            for (int32_t kc = 0; kc < tk; kc += kL1) {
                int32_t vkc = Min(kL1, tk - kc);
                if (!haveA) {                    // the A panel (with isReuseA: once per row of base tiles)
                    a1 = a1Queue.AllocTensor<half>();
                    DataCopy(a1, aGm[row * t.Ka + kAt + kc], Nd2NzParams{1, static_cast<uint16_t>(vm),
                             static_cast<uint32_t>(vkc), 0, static_cast<uint64_t>(t.Ka), static_cast<uint16_t>(m16), 1, 0});
                    a1Queue.EnQue(a1);
                    a1 = a1Queue.DeQue<half>();
                    haveA = true;
                }
                LocalTensor<half> b1 = b1Queue.AllocTensor<half>();
                DataCopy(b1, bGm[(kAt + kc) * t.N + col], Nd2NzParams{1, static_cast<uint16_t>(vkc),
                         static_cast<uint32_t>(vn), 0, static_cast<uint64_t>(t.N), static_cast<uint16_t>(Round16(vkc)), 1, 0});
                b1Queue.EnQue(b1);
                b1 = b1Queue.DeQue<half>();
                for (int32_t kb = 0; kb < vkc; kb += t.baseK) {
                    int32_t vk = Min(t.baseK, vkc - kb);
                    int32_t k1 = CeilDiv(vk, 16);
                    int32_t n1 = CeilDiv(vn, 16);
                    LocalTensor<half> a2 = a2Queue.AllocTensor<half>();
                    LocalTensor<half> b2 = b2Queue.AllocTensor<half>();
                    // the panel's fractal (i, j) is number j * (m16 / 16) + i (column blocks m16 rows tall): a K
                    // fractal column's fractals are adjacent in L1 and land k1 apart in L0A (ZZ)
                    for (int32_t j = 0; j < k1; ++j) {
                        LoadData(a2[j * 256], a1, LoadData2DParams{static_cast<uint16_t>((kb / 16 + j) * (m16 / 16)),
                                 static_cast<uint8_t>(m16 / 16), 1, 0, static_cast<uint16_t>(k1 - 1), false, 0});
                    }
                    for (int32_t i = 0; i < k1; ++i) {
                        LoadData(b2[i * n1 * 256], b1, LoadData2DParams{static_cast<uint16_t>(kb / 16 + i),
                                 static_cast<uint8_t>(n1), static_cast<uint16_t>(CeilDiv(vkc, 16)), 0, 0, true, 0});
                    }
                    a2Queue.EnQue(a2);
                    b2Queue.EnQue(b2);
                    a2 = a2Queue.DeQue<half>();
                    b2 = b2Queue.DeQue<half>();
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
            c = cQueue.DeQue<float>();
            Fixpipe(cGm[row * t.N + col], c, FixpipeParamsV220{static_cast<uint16_t>(vn), static_cast<uint16_t>(vm),
                    static_cast<uint16_t>(m16), static_cast<uint32_t>(t.N), false,
                    sizeof(OutT) == 2 ? QuantMode_t::F322F16 : QuantMode_t::NoQuant, 0, 1, 0, 0, 0});
            cQueue.FreeTensor(c);
        }
        if (haveA) {
            a1Queue.FreeTensor(a1);              // the row's A panel (isReuseA)
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
    GlobalTensor<half> aGm, bGm;
    GlobalTensor<OutT> cGm;
};

// v2 and v3 differ only in the tiling's buffer counts; v4 is the K-split (float C here; half C with
// the half entry above).
extern "C" __global__ __aicore__ void gemm_v3(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR workspace, GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    REGISTER_TILING_DEFAULT(GemmTilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelGemmTiled<half> op;
    op.Init(a, b, c, tilingData.kSplit > 1, tilingData, &pipe);   // a half K-split adds in half
    op.Process();
}

extern "C" __global__ __aicore__ void gemm_v4(GM_ADDR a, GM_ADDR b, GM_ADDR c, GM_ADDR workspace, GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    REGISTER_TILING_DEFAULT(GemmTilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelGemmTiled<float> op;
    op.Init(a, b, c, tilingData.kSplit > 1, tilingData, &pipe);
    op.Process();
}
