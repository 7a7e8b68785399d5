// chips: ascend-910b2
// Router MatMul fused with gating: the Ascend C beside npu_lab/kernels/moe_layer/fused_router.py
// fused_router_gating_kernel (same calls, same order). KERNEL_TYPE_MIX_AIC_1_2: each block is an AI
// core group (one AIC, two AIVs) and owns router tiles g, g + groups, ... (rows [i * rows, i * rows + rows)).
//
// AIC: logits tile [rows, E] = hidden [rows, H] x W_router [H, E] (half in, float accumulate):
//      Nd2Nz copies GM -> L1, LoadData L1 -> L0A / L0B, Mmad, Fixpipe (NoQuant: float out) into
//      workspace slot i % 2 of the group, then CrossCoreSetFlag<2, PIPE_FIX>(0). Before tile i >= 2
//      it waits CrossCoreWaitFlag(1): both AIVs finished tile i - 2, whose slot it overwrites.
// AIV: CrossCoreWaitFlag(0), then the v4 gating (moe_gating/sorted_topk.cpp: DataCopyPad in, Sort32
//      + MrgSort, GatherMask, softmax over the K) on its half of the tile's rows, read from the slot;
//      indices and weights to GM; CrossCoreSetFlag<2, PIPE_MTE3>(1).
// The hand-off goes through GM because the A2 has no L0C -> UB Fixpipe (docs/zh/api/SIMD-API/基础API/
// 矩阵计算（ISASI）/矩阵计算的搬出/Fixpipe（L0C到UB数据搬运）.md: Atlas A2 ... 不支持); the two slots
// of rows x E floats per group stay in L2.
//
// References (asc-devkit): examples/01_simd_cpp_api/00_introduction/03_fusion_operation/
// matmul_leakyrelu_basic_api; docs/zh/api/SIMD-API/基础API/同步控制/核间同步/CrossCoreSetFlag(ISASI).md,
// CrossCoreWaitFlag(ISASI).md.
#include "kernel_operator.h"
using namespace AscendC;

// The v4 gating's tiling of one AIV's half tile (calculate_moe_gating_v4_tiling, one core).
struct HalfTileGatingTiling {
    uint32_t row, col, colBytesAlign, colAlign, k, kAlign, blockFormer, blockNum, blockTail, ubFormer;
    uint32_t ubLoopOfFormerBlock, ubTailOfFormerBlock, ubLoopOfTailBlock, ubTailOfTailBlock;
    uint32_t topKValuesMask, topKIndicesMask, bufferElemSize, softmaxFlag;
};

// FusedRouterPlan: the host's choices (fused_router_plan).
struct FusedRouterTilingData {
    int32_t n, h, e, k;             // tokens, hidden, experts, top-K
    int32_t rows, tiles, groups;    // router tile rows (a multiple of 16), tiles, AI core groups
    int32_t bk, kL1;                // base K and L1 panel K of the cube tile
    HalfTileGatingTiling gating;
};

constexpr int32_t SLOTS = 2;          // workspace slots per group: the AIC runs at most two tiles ahead
constexpr uint32_t SORT_UNIT = 32;
constexpr uint32_t MERGE_KEEP = 8;
constexpr uint32_t K_ALIGN = 8;

__aicore__ inline int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }
__aicore__ inline int32_t Round16(int32_t a) { return (a + 15) / 16 * 16; }
__aicore__ inline int32_t Min(int32_t a, int32_t b) { return a < b ? a : b; }
__aicore__ inline int32_t Max(int32_t a, int32_t b) { return a > b ? a : b; }

// A class template (T = float, the logits' type): a mixed kernel is built once for the AIC and once for
// the AIVs, and only in a template is the other side's discarded `if ASCEND_IS_AI*` branch (and the
// vector-only Sort32 / MrgSort it calls) left uninstantiated.
template <typename T>
class KernelFusedRouterGating {
public:
    __aicore__ inline KernelFusedRouterGating() {}

    __aicore__ inline void Init(GM_ADDR hidden, GM_ADDR routerWeight, GM_ADDR indices, GM_ADDR weights,
                                GM_ADDR workspace, const FusedRouterTilingData* tiling, TPipe* pipeIn)
    {
        t = tiling;
        pipe = pipeIn;
        xGm.SetGlobalBuffer((__gm__ half*)hidden);
        wGm.SetGlobalBuffer((__gm__ half*)routerWeight);
        wsGm.SetGlobalBuffer((__gm__ T*)workspace);
        idxGm.SetGlobalBuffer((__gm__ int32_t*)indices);
        wtGm.SetGlobalBuffer((__gm__ T*)weights);
    }

    __aicore__ inline void Process()
    {
        if ASCEND_IS_AIC {
            int32_t g = GetBlockIdx();
            int32_t n16 = Round16(t->e);
            pipe->InitBuffer(a1Queue, 2, t->rows * t->kL1 * sizeof(half));
            pipe->InitBuffer(b1Queue, 2, t->kL1 * n16 * sizeof(half));
            pipe->InitBuffer(a2Queue, 2, t->rows * t->bk * sizeof(half));
            pipe->InitBuffer(b2Queue, 2, t->bk * n16 * sizeof(half));
            pipe->InitBuffer(cQueue, (2 * t->rows * n16 * 4 <= 131072) ? 2 : 1, t->rows * n16 * sizeof(float));
            int32_t i = 0;
            for (int32_t tile = g; tile < t->tiles; tile += t->groups) {
                if (i >= SLOTS) {
                    CrossCoreWaitFlag(1);                     // both AIVs are done with this slot's last tile
                }
                LogitsTile(tile, (g * SLOTS + i % SLOTS) * t->rows * t->e);
                CrossCoreSetFlag<0x2, PIPE_FIX>(0);           // tile i is in the workspace: release both AIVs
                ++i;
            }
            for (int32_t j = 0; j < Min(SLOTS, i); ++j) {
                CrossCoreWaitFlag(1);                         // pair the AIVs' last sets
            }
        }
        if ASCEND_IS_AIV {
            int32_t g = GetBlockIdx() / 2;
            int32_t sub = GetSubBlockIdx();
            InitGating();
            ComputePhase0();
            int32_t i = 0;
            for (int32_t tile = g; tile < t->tiles; tile += t->groups) {
                CrossCoreWaitFlag(0);
                int32_t vm = Min(t->rows, t->n - tile * t->rows);
                int32_t halfRows = CeilDiv(vm, 2);
                int32_t r = Max(0, Min(halfRows, vm - sub * halfRows));
                int32_t first = Min(tile * t->rows + sub * halfRows, t->n - 1);
                GateRows((g * SLOTS + i % SLOTS) * t->rows * t->e + sub * halfRows * t->e, first * t->k, r);
                CrossCoreSetFlag<0x2, PIPE_MTE3>(1);          // this AIV's half is out: the AIC may reuse the slot
                ++i;
            }
        }
    }

private:
    // ---- AIC: one logits tile into the workspace ---------------------------------------------------
    __aicore__ inline void LogitsTile(int32_t tile, int32_t wsAt)
    {
        int32_t row = tile * t->rows;
        int32_t vm = Min(t->rows, t->n - row);
        int32_t m16 = Round16(vm);
        int32_t vn = t->e;
        int32_t n1 = CeilDiv(vn, 16);
        LocalTensor<float> c = cQueue.AllocTensor<float>();
        for (int32_t kc = 0; kc < t->h; kc += t->kL1) {
            int32_t vkc = Min(t->kL1, t->h - kc);
            LocalTensor<half> a1 = a1Queue.AllocTensor<half>();
            DataCopy(a1, xGm[row * t->h + kc], Nd2NzParams{1, static_cast<uint16_t>(vm), static_cast<uint32_t>(vkc), 0,
                     static_cast<uint64_t>(t->h), static_cast<uint16_t>(m16), 1, 0});
            a1Queue.EnQue(a1);
            a1 = a1Queue.DeQue<half>();
            LocalTensor<half> b1 = b1Queue.AllocTensor<half>();
            DataCopy(b1, wGm[kc * t->e], Nd2NzParams{1, static_cast<uint16_t>(vkc), static_cast<uint32_t>(vn), 0,
                     static_cast<uint64_t>(t->e), static_cast<uint16_t>(Round16(vkc)), 1, 0});
            b1Queue.EnQue(b1);
            b1 = b1Queue.DeQue<half>();
            int32_t kp1 = CeilDiv(vkc, 16);
            for (int32_t kb = 0; kb < vkc; kb += t->bk) {
                int32_t vk = Min(t->bk, vkc - kb);
                int32_t k1 = CeilDiv(vk, 16);
                LocalTensor<half> a2 = a2Queue.AllocTensor<half>();
                LocalTensor<half> b2 = b2Queue.AllocTensor<half>();
                for (int32_t j = 0; j < k1; ++j) {            // A: NZ panel -> ZZ, one K fractal column each
                    LoadData(a2[j * 256], a1, LoadData2DParams{static_cast<uint16_t>((kb / 16 + j) * (m16 / 16)),
                             static_cast<uint8_t>(m16 / 16), 1, 0, static_cast<uint16_t>(k1 - 1), false, 0});
                }
                for (int32_t j = 0; j < k1; ++j) {            // B: each 16 x 16 fractal transposed -> ZN
                    LoadData(b2[j * n1 * 256], b1, LoadData2DParams{static_cast<uint16_t>(kb / 16 + j),
                             static_cast<uint8_t>(n1), static_cast<uint16_t>(kp1), 0, 0, true, 0});
                }
                a2Queue.EnQue(a2);
                b2Queue.EnQue(b2);
                a2 = a2Queue.DeQue<half>();
                b2 = b2Queue.DeQue<half>();
                bool first = kc == 0 && kb == 0;
                if (!first && (m16 / 16) * (vn / 16) < 10) {
                    PipeBarrier<PIPE_M>();                    // Mmad.md: small accumulating Mmads need it
                }
                Mmad(c, a2, b2, MmadParams{static_cast<uint16_t>(m16), static_cast<uint16_t>(vn),
                     static_cast<uint16_t>(vk), 0, false, first});
                a2Queue.FreeTensor(a2);
                b2Queue.FreeTensor(b2);
            }
            b1Queue.FreeTensor(b1);
            a1Queue.FreeTensor(a1);
        }
        cQueue.EnQue(c);
        c = cQueue.DeQue<float>();
        Fixpipe(wsGm[wsAt], c, FixpipeParamsV220{static_cast<uint16_t>(vn), static_cast<uint16_t>(vm),
                static_cast<uint16_t>(m16), static_cast<uint32_t>(t->e), false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0});
        cQueue.FreeTensor(c);
    }

    // ---- AIV: the v4 gating on r rows of the slot ----------------------------------------------------
    __aicore__ inline void InitGating()
    {
        const HalfTileGatingTiling& gt = t->gating;
        col = gt.col;
        k = gt.k;
        colAlign = gt.colAlign;
        chunks = colAlign / SORT_UNIT;
        fast = (k == 1 && col <= 64);
        union { uint32_t bits; float value; } inf = {0xFF800000};
        negInf = inf.value;
        uint32_t rows = gt.ubFormer;
        uint32_t rows8 = (rows + 7) / 8 * 8;
        uint32_t outHalf = (rows * k + 7) / 8 * 8;
        idxOff = outHalf;
        pipe->InitBuffer(pairsBuf, 8 * rows * colAlign);
        pipe->InitBuffer(gatingQueue, 2, rows * colAlign * sizeof(T));
        if (chunks > 1 && !fast) {
            pipe->InitBuffer(castBuf, 4 * rows * colAlign);      // the merge's groups
        }
        if (!fast) {
            pipe->InitBuffer(indexBuf, 4 * rows * colAlign);
        }
        pipe->InitBuffer(topKOutQueue, 1, 2 * 4 * outHalf);
        pipe->InitBuffer(patternBuf, 4 * 32);
        pipe->InitBuffer(softmaxBuf, 4 * (K_ALIGN * rows + 8 * rows8));
        pipe->InitBuffer(rowStatBuf, 4 * rows8);
    }

    __aicore__ inline void ComputePhase0()
    {
        const HalfTileGatingTiling& gt = t->gating;
        LocalTensor<uint32_t> pattern = patternBuf.Get<uint32_t>();
        pattern.SetValue(0, gt.topKValuesMask);
        pattern.SetValue(1, 0);
        pattern.SetValue(8, gt.topKIndicesMask);
        pattern.SetValue(9, 0);
        pattern.SetValue(16, 1);
        pattern.SetValue(17, 0);
        pattern.SetValue(24, (1u << k) - 1);
        pattern.SetValue(25, 0);
        TEventID eventSToV = GetTPipePtr()->FetchEventID(HardEvent::S_V);
        SetFlag<HardEvent::S_V>(eventSToV);
        WaitFlag<HardEvent::S_V>(eventSToV);
        if (fast) {
            return;
        }
        LocalTensor<int32_t> index = indexBuf.Get<int32_t>();
        CreateVecIndex(index, (int32_t)0, colAlign);
        PipeBarrier<PIPE_V>();
        // rows 1..: copies of row 0 (ubFormer >= 2 here: half a tile is >= 8 rows, and 4 rows of E <= 1024 fit)
        for (uint32_t off = 0; off < colAlign; off += 64) {
            uint32_t lanes = (colAlign - off < 64) ? colAlign - off : 64;
            Copy(index[colAlign + off], index[off], lanes, gt.ubFormer - 1, CopyRepeatParams(1, 1, colAlign / 8, 0));
        }
        PipeBarrier<PIPE_V>();
    }

    // r rows of logits at wsGm[wsAt] -> indices / weights at [outAt], in loops of ubFormer rows
    // (none when this AIV has no row of the tile).
    __aicore__ inline void GateRows(int32_t wsAt, int32_t outAt, int32_t r)
    {
        uint32_t u = t->gating.ubFormer;
        uint32_t loops = CeilDiv(r, u);
        for (uint32_t i = 0; i < loops; i++) {
            uint32_t rows = (i + 1 < loops) ? u : r - (loops - 1) * u;
            if (i == 0) {
                CopyIn(wsAt, 0, rows);
            }
            Compute(rows);
            if (i + 1 < loops) {
                CopyIn(wsAt, i + 1, (i + 2 < loops) ? u : r - (loops - 1) * u);   // prefetch
            }
            CopyOut(outAt, i, rows);
        }
    }

    __aicore__ inline void CopyIn(int32_t wsAt, uint32_t i, uint32_t rows)
    {
        LocalTensor<T> gating = gatingQueue.AllocTensor<T>();
        uint32_t rowBytes = (col * sizeof(T) + 31) / 32 * 32;
        uint32_t gapBlocks = (colAlign * sizeof(T) - rowBytes) / 32;
        DataCopyPad(gating, wsGm[wsAt + t->gating.ubFormer * col * i],
                    DataCopyExtParams(rows, col * sizeof(T), 0, gapBlocks, 0),
                    DataCopyPadExtParams<T>(false, 0, 0, 0));
        gatingQueue.EnQue(gating);
    }

    __aicore__ inline void Compute(uint32_t rows)
    {
        LocalTensor<T> scores = gatingQueue.DeQue<T>();
        LocalTensor<T> pairs = pairsBuf.Get<T>();
        if (fast) {
            WholeReduceMax(pairs, scores, col, rows, 32, 1, colAlign / 8, ReduceOrder::ORDER_VALUE_INDEX);
            PipeBarrier<PIPE_V>();
        } else {
            if (colAlign != col) {
                uint32_t pad = colAlign - col;
                uint64_t mask[2] = {(((uint64_t)1 << pad) - 1) << (32 - pad), 0};
                Duplicate(scores[colAlign - 32], negInf, mask, rows, 1, colAlign / 8);
                PipeBarrier<PIPE_V>();
            }
            LocalTensor<int32_t> index = indexBuf.Get<int32_t>();
            Sort32(pairs, scores, index.template ReinterpretCast<uint32_t>(), rows * colAlign / SORT_UNIT);
            PipeBarrier<PIPE_V>();
        }
        gatingQueue.FreeTensor(scores);
        if (!fast && chunks > 1) {
            MergeSort(pairs, castBuf.Get<T>(), rows);
        }
        ExtractSoftmax(pairs, rows);
    }

    __aicore__ inline void MergeSort(const LocalTensor<T>& pairs, const LocalTensor<T>& groups, uint32_t rows)
    {
        uint32_t n = chunks;
        while (n > 1) {
            uint32_t g = (n + 3) / 4;
            uint32_t slots = 4 * g;
            if (slots != n) {
                Duplicate(groups, negInf, rows * slots * 2 * MERGE_KEEP);
                PipeBarrier<PIPE_V>();
                for (uint32_t c = 0; c < n; c++) {
                    Copy(groups[c * 16], pairs[c * 64], 16, rows, CopyRepeatParams(1, 1, slots * 2, n * 8));
                }
            } else {
                Copy(groups, pairs, 16, rows * n, CopyRepeatParams(1, 1, 2, 8));
            }
            PipeBarrier<PIPE_V>();
            uint16_t lengths[4] = {MERGE_KEEP, MERGE_KEEP, MERGE_KEEP, MERGE_KEEP};
            MrgSort(pairs, MrgSortSrcList<T>(groups[0], groups[16], groups[32], groups[48]),
                    MrgSort4Info(lengths, false, 0b1111, rows * g));
            PipeBarrier<PIPE_V>();
            n = g;
        }
    }

    __aicore__ inline void ExtractSoftmax(const LocalTensor<T>& pairs, uint32_t rows)
    {
        LocalTensor<T> out = topKOutQueue.AllocTensor<T>();
        LocalTensor<uint32_t> pattern = patternBuf.Get<uint32_t>();
        LocalTensor<T> vals = softmaxBuf.Get<T>();
        LocalTensor<T> bcast = vals[K_ALIGN * rows];
        LocalTensor<T> stat = rowStatBuf.Get<T>();
        LocalTensor<int32_t> indices = out[idxOff].template ReinterpretCast<int32_t>();
        uint64_t rsvdCnt = 0;
        GatherMaskParams perRow(1, rows, 8, 0);
        GatherMask(vals, pairs, pattern[0], false, 0, perRow, rsvdCnt);
        GatherMask(indices, pairs.template ReinterpretCast<int32_t>(), pattern[8], false, 0, perRow, rsvdCnt);
        GatherMask(stat, pairs, pattern[16], false, 0, perRow, rsvdCnt);
        PipeBarrier<PIPE_V>();
        uint32_t blocks = (rows + 7) / 8;
        Brcb(bcast, stat, blocks, BrcbRepeatParams(1, 8));
        PipeBarrier<PIPE_V>();
        Sub(vals, vals, bcast, K_ALIGN * rows);
        PipeBarrier<PIPE_V>();
        Exp(vals, vals, K_ALIGN * rows);
        PipeBarrier<PIPE_V>();
        WholeReduceSum(stat, vals, k, rows, 1, 1, 1);
        PipeBarrier<PIPE_V>();
        Brcb(bcast, stat, blocks, BrcbRepeatParams(1, 8));
        PipeBarrier<PIPE_V>();
        Div(vals, vals, bcast, K_ALIGN * rows);
        PipeBarrier<PIPE_V>();
        GatherMask(out, vals, pattern[24], false, 0, GatherMaskParams(1, rows, 1, 0), rsvdCnt);
        PipeBarrier<PIPE_V>();
        topKOutQueue.EnQue(out);
    }

    __aicore__ inline void CopyOut(int32_t outAt, uint32_t i, uint32_t rows)
    {
        LocalTensor<T> out = topKOutQueue.DeQue<T>();
        uint32_t base = outAt + t->gating.ubFormer * k * i;
        DataCopyPad(idxGm[base], out[idxOff].template ReinterpretCast<int32_t>(),
                    DataCopyExtParams(1, rows * k * sizeof(int32_t), 0, 0, 0));
        DataCopyPad(wtGm[base], out, DataCopyExtParams(1, rows * k * sizeof(T), 0, 0, 0));
        topKOutQueue.FreeTensor(out);
    }

    const FusedRouterTilingData* t;
    TPipe* pipe;
    TQue<TPosition::A1, 2> a1Queue;
    TQue<TPosition::B1, 2> b1Queue;
    TQue<TPosition::A2, 2> a2Queue;
    TQue<TPosition::B2, 2> b2Queue;
    TQue<TPosition::CO1, 2> cQueue;
    TQue<TPosition::VECIN, 2> gatingQueue;
    TQue<TPosition::VECOUT, 1> topKOutQueue;
    TBuf<TPosition::VECCALC> pairsBuf, castBuf, indexBuf, patternBuf, softmaxBuf, rowStatBuf;
    GlobalTensor<half> xGm, wGm;
    GlobalTensor<T> wsGm, wtGm;
    GlobalTensor<int32_t> idxGm;
    uint32_t col, k, colAlign, chunks, idxOff;
    bool fast;
    float negInf;
};

extern "C" __global__ __aicore__ void router_gating_fused(GM_ADDR hidden, GM_ADDR routerWeight, GM_ADDR indices,
                                                          GM_ADDR weights, GM_ADDR workspace, GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    REGISTER_TILING_DEFAULT(FusedRouterTilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelFusedRouterGating<float> op;
    op.Init(hidden, routerWeight, indices, weights, workspace, &tilingData, &pipe);
    op.Process();
}
