// chips: ascend-910b2
// Gather fused into the expert up-projection: the Ascend C beside npu_lab/kernels/moe_layer/fused_gather.py
// gather_matmul_kernel (gathered = True; same calls, same order). KERNEL_TYPE_AIC_ONLY, one launch for
// every expert (as GroupedMatmul): out [M, F] (float) row r = hidden[sortedRowIdx[r] / K] x W_up[e(r)],
// rows in the dispatch's expert order, so no expanded_x is written to GM or read back.
//
// Per task (expert e, an M tile of e's rows, an N tile of F; or every N tile when `resident`):
//   S     reads the tile's row ids from the dispatch's permutation (GlobalTensor::GetValue,
//         docs/zh/api/SIMD-API/基础API/数据结构/GlobalTensor/GetValue.md);
//   MTE2  one DataCopy GM -> L1 with Nd2NzParams (nValue = 1) per gathered row, into row j of the NZ
//         panel (a1[16 * j]; the panel's C0 stride is round16(vm) rows); the W_up[e] panel as the GEMM's
//         half path copies it;
//   MTE1  LoadData L1 -> L0A / L0B;  M  Mmad (float accumulate);  FIX  Fixpipe float to out.
// `resident`: the tile's gathered rows [vm, H] are copied once and stay in L1 for every N tile; else
// each N tile copies them again, in A panels of kA columns (kA a multiple of the B panel's kL1).
// The Python walks a host-made task list (sorted by shape); this listing walks the same tasks from the
// expert counts in expert order (the order of independent tiles changes no result).
#include "kernel_operator.h"
using namespace AscendC;

constexpr int32_t MAX_EXPERTS = 256;
constexpr int32_t MAX_BM = 128;

struct GatherMatmulTilingData {
    int32_t h, f, k;                  // hidden, FFN width, top-K
    int32_t bm, bn, bk, kL1, kA;      // base tile rows / columns / K, B panel K, A panel K
    int32_t aBuffers, cBuffers, resident;
    int32_t numExperts, taskNum;
    int32_t expertRows[MAX_EXPERTS];  // the dispatch's expert_tokens_count
    int32_t expertOffset[MAX_EXPERTS];
};

__aicore__ inline int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }
__aicore__ inline int32_t Round16(int32_t a) { return (a + 15) / 16 * 16; }
__aicore__ inline int32_t Min(int32_t a, int32_t b) { return a < b ? a : b; }

class KernelGatherMatmul {
public:
    __aicore__ inline KernelGatherMatmul() {}

    __aicore__ inline void Init(GM_ADDR hidden, GM_ADDR sortedRowIdx, GM_ADDR wUp, GM_ADDR out,
                                const GatherMatmulTilingData* tiling, TPipe* pipeIn)
    {
        t = tiling;
        pipe = pipeIn;
        xGm.SetGlobalBuffer((__gm__ half*)hidden);
        srcGm.SetGlobalBuffer((__gm__ int32_t*)sortedRowIdx);
        wGm.SetGlobalBuffer((__gm__ half*)wUp);
        outGm.SetGlobalBuffer((__gm__ float*)out);
    }

    __aicore__ inline void Process()
    {
        int32_t n16 = Round16(t->bn);
        pipe->InitBuffer(a1Queue, t->aBuffers, t->bm * t->kA * sizeof(half));
        pipe->InitBuffer(b1Queue, 2, t->kL1 * n16 * sizeof(half));
        pipe->InitBuffer(a2Queue, 2, t->bm * t->bk * sizeof(half));
        pipe->InitBuffer(b2Queue, 2, t->bk * n16 * sizeof(half));
        pipe->InitBuffer(cQueue, t->cBuffers, t->bm * n16 * sizeof(float));
        for (int32_t task = GetBlockIdx(); task < t->taskNum; task += GetBlockNum()) {
            int32_t e, m0, n0;
            TaskOf(task, e, m0, n0);
            int32_t vm = Min(t->bm, t->expertRows[e] - m0);
            int32_t row = t->expertOffset[e] + m0;
            // scalar: read row ids
            for (int32_t j = 0; j < vm; ++j) {
                toks[j] = srcGm.GetValue(row + j) / t->k;
            }
            GlobalTensor<half> wE = wGm[e * t->h * t->f];
            if (t->resident) {                          // the gathered rows stay in L1 for every N tile
                LocalTensor<half> a1 = a1Queue.AllocTensor<half>();
                FillA(a1, 0, t->h, vm);
                a1Queue.EnQue(a1);
                a1 = a1Queue.DeQue<half>();
                for (int32_t nb = 0; nb < t->f; nb += t->bn) {
                    Tile(a1, wE, row, nb, vm, Min(t->bn, t->f - nb));
                }
                a1Queue.FreeTensor(a1);
            } else {
                TileCopyingA(wE, row, n0, vm, Min(t->bn, t->f - n0));
            }
        }
    }

private:
    // task -> (expert, first row in the expert, first column): experts in order, M tiles, N tiles
    // (every N tile in one task when resident)
    __aicore__ inline void TaskOf(int32_t task, int32_t& e, int32_t& m0, int32_t& n0)
    {
        int32_t nTiles = t->resident ? 1 : CeilDiv(t->f, t->bn);
        e = 0;
        while (task >= CeilDiv(t->expertRows[e], t->bm) * nTiles) {
            task -= CeilDiv(t->expertRows[e], t->bm) * nTiles;
            ++e;
        }
        m0 = task / nTiles * t->bm;
        n0 = task % nTiles * t->bn;
    }

    // columns [kc, kc + vkc) of the tile's gathered rows -> the NZ panel a1: one copy per row
    __aicore__ inline void FillA(const LocalTensor<half>& a1, int32_t kc, int32_t vkc, int32_t vm)
    {
        int32_t m16 = Round16(vm);
        for (int32_t j = 0; j < vm; ++j) {
            DataCopy(a1[16 * j], xGm[toks[j] * t->h + kc], Nd2NzParams{1, 1, static_cast<uint32_t>(vkc), 0,
                     static_cast<uint64_t>(t->h), static_cast<uint16_t>(m16), 1, 0});
        }
    }

    // one C tile whose A panels are copied here (kA columns each, spanning kA / kL1 B panels)
    __aicore__ inline void TileCopyingA(const GlobalTensor<half>& wE, int32_t row, int32_t col, int32_t vm, int32_t vn)
    {
        LocalTensor<float> c = cQueue.AllocTensor<float>();
        LocalTensor<half> a1;
        for (int32_t kc = 0; kc < t->h; kc += t->kL1) {
            int32_t vkc = Min(t->kL1, t->h - kc);
            int32_t ka = kc % t->kA;
            if (ka == 0) {                              // a new A panel: columns [kc, kc + kA)
                a1 = a1Queue.AllocTensor<half>();
                FillA(a1, kc, Min(t->kA, t->h - kc), vm);
                a1Queue.EnQue(a1);
                a1 = a1Queue.DeQue<half>();
            }
            Panel(c, a1, wE, ka, kc, vkc, col, vm, vn);
            if (ka + vkc >= t->kA || kc + vkc >= t->h) {   // the A panel's last B panel
                a1Queue.FreeTensor(a1);
            }
        }
        Out(c, row, col, vm, vn);
    }

    // one C tile from an A panel already holding all of K
    __aicore__ inline void Tile(const LocalTensor<half>& a1, const GlobalTensor<half>& wE, int32_t row, int32_t col,
                                int32_t vm, int32_t vn)
    {
        LocalTensor<float> c = cQueue.AllocTensor<float>();
        for (int32_t kc = 0; kc < t->h; kc += t->kL1) {
            Panel(c, a1, wE, kc, kc, Min(t->kL1, t->h - kc), col, vm, vn);
        }
        Out(c, row, col, vm, vn);
    }

    // the B panel of K rows [kc, kc + vkc): copy, then base K tiles: LoadData both, Mmad
    __aicore__ inline void Panel(const LocalTensor<float>& c, const LocalTensor<half>& a1, const GlobalTensor<half>& wE,
                                 int32_t ka, int32_t kc, int32_t vkc, int32_t col, int32_t vm, int32_t vn)
    {
        int32_t m16 = Round16(vm);
        int32_t n1 = CeilDiv(vn, 16);
        int32_t kp1 = CeilDiv(vkc, 16);
        LocalTensor<half> b1 = b1Queue.AllocTensor<half>();
        DataCopy(b1, wE[kc * t->f + col], Nd2NzParams{1, static_cast<uint16_t>(vkc), static_cast<uint32_t>(vn), 0,
                 static_cast<uint64_t>(t->f), static_cast<uint16_t>(Round16(vkc)), 1, 0});
        b1Queue.EnQue(b1);
        b1 = b1Queue.DeQue<half>();
        for (int32_t kb = 0; kb < vkc; kb += t->bk) {
            int32_t vk = Min(t->bk, vkc - kb);
            int32_t k1 = CeilDiv(vk, 16);
            LocalTensor<half> a2 = a2Queue.AllocTensor<half>();
            LocalTensor<half> b2 = b2Queue.AllocTensor<half>();
            for (int32_t j = 0; j < k1; ++j) {
                LoadData(a2[j * 256], a1, LoadData2DParams{static_cast<uint16_t>(((ka + kb) / 16 + j) * (m16 / 16)),
                         static_cast<uint8_t>(m16 / 16), 1, 0, static_cast<uint16_t>(k1 - 1), false, 0});
            }
            for (int32_t j = 0; j < k1; ++j) {
                LoadData(b2[j * n1 * 256], b1, LoadData2DParams{static_cast<uint16_t>(kb / 16 + j),
                         static_cast<uint8_t>(n1), static_cast<uint16_t>(kp1), 0, 0, true, 0});
            }
            a2Queue.EnQue(a2);
            b2Queue.EnQue(b2);
            a2 = a2Queue.DeQue<half>();
            b2 = b2Queue.DeQue<half>();
            bool first = kc == 0 && kb == 0;
            if (!first && (m16 / 16) * (vn / 16) < 10) {
                PipeBarrier<PIPE_M>();                  // Mmad.md: small accumulating Mmads need it
            }
            Mmad(c, a2, b2, MmadParams{static_cast<uint16_t>(m16), static_cast<uint16_t>(vn),
                 static_cast<uint16_t>(vk), 0, false, first});
            a2Queue.FreeTensor(a2);
            b2Queue.FreeTensor(b2);
        }
        b1Queue.FreeTensor(b1);
    }

    __aicore__ inline void Out(LocalTensor<float>& c, int32_t row, int32_t col, int32_t vm, int32_t vn)
    {
        cQueue.EnQue(c);
        c = cQueue.DeQue<float>();
        Fixpipe(outGm[row * t->f + col], c, FixpipeParamsV220{static_cast<uint16_t>(vn), static_cast<uint16_t>(vm),
                static_cast<uint16_t>(Round16(vm)), static_cast<uint32_t>(t->f), false, QuantMode_t::NoQuant, 0, 1, 0,
                0, 0});
        cQueue.FreeTensor(c);
    }

    const GatherMatmulTilingData* t;
    TPipe* pipe;
    TQue<TPosition::A1, 2> a1Queue;
    TQue<TPosition::B1, 2> b1Queue;
    TQue<TPosition::A2, 2> a2Queue;
    TQue<TPosition::B2, 2> b2Queue;
    TQue<TPosition::CO1, 2> cQueue;
    GlobalTensor<half> xGm, wGm;
    GlobalTensor<int32_t> srcGm;
    GlobalTensor<float> outGm;
    int32_t toks[MAX_BM];
};

extern "C" __global__ __aicore__ void gather_matmul(GM_ADDR hidden, GM_ADDR sortedRowIdx, GM_ADDR wUp, GM_ADDR out,
                                                    GM_ADDR workspace, GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    REGISTER_TILING_DEFAULT(GatherMatmulTilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelGatherMatmul op;
    op.Init(hidden, sortedRowIdx, wUp, out, &tilingData, &pipe);
    op.Process();
}
