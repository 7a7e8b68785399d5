// chips: ascend-910b2
// MoeGatingTopK v4 — the Ascend C listing of npu_lab/kernels/moe_gating/sorted_topk.py
// (same instructions, same order). Built the way CANN's MoeGatingTopKSoftmaxV2 "Perf" template is
// (hicann/ops-transformer moe/moe_gating_top_k_softmax_v2/op_kernel/moe_gating_top_k_softmax_v2_perf.h),
// with renorm = 1 semantics: top-K of the logits (ties to the lower expert), softmax over the K.
// Our own code, not a copy of CANN's. Supported: 1 <= K <= 8, K <= E <= 1024, T = float or half.
//
// Per block: blockFormer rows (blockTail on the last block), ubFormer rows per loop.
//   CopyIn   one DataCopyPad GM->UB per loop, blockCount = rows, each row at a colAlign stride
//   Compute  [Cast] -> Duplicate -inf pad -> Sort32 -> (Copy top-8 + MrgSort 4x8)* -> GatherMask
//            -> Brcb, Sub, Exp, WholeReduceSum, Brcb, Div -> GatherMask first K of 8
//            (K == 1 && E <= 64: WholeReduceMax ORDER_VALUE_INDEX instead of pad/Sort32/merge)
//   CopyOut  DataCopyPad UB->GM: indices (int32), then weights (float)
#include "kernel_operator.h"

using namespace AscendC;

// Host side fills this (calculate_moe_gating_v4_tiling); field names mirror CANN's
// MoeGatingTopKSoftmaxV2PerfTilingData.
struct MoeGatingV4TilingData {
    uint32_t row;                  // N = B * S
    uint32_t col;                  // E
    uint32_t colBytesAlign;        // ceil8(E)
    uint32_t colAlign;             // ceil32(E): the Sort32 row stride
    uint32_t k;                    // K
    uint32_t kAlign;               // 8 values per row after extraction
    uint32_t blockFormer;          // rows per core
    uint32_t blockNum;             // blockDim
    uint32_t blockTail;            // rows of the last core
    uint32_t ubFormer;             // rows per UB loop (balanced)
    uint32_t ubLoopOfFormerBlock;
    uint32_t ubTailOfFormerBlock;
    uint32_t ubLoopOfTailBlock;
    uint32_t ubTailOfTailBlock;
    uint32_t topKValuesMask;       // 0b0101... (kAlign pairs): the scores of (score, index) pairs
    uint32_t topKIndicesMask;      // 0b1010... (k pairs): the indices
    uint32_t bufferElemSize;
    uint32_t softmaxFlag;          // 0: renorm = 1 writes no softmax_result
};

constexpr uint32_t SORT_UNIT = 32;    // scores per Sort32 repeat
constexpr uint32_t MERGE_KEEP = 8;    // pairs kept from every sorted list (K <= 8)
constexpr uint32_t K_ALIGN = 8;       // values per row after extraction: one 32-B block

template <typename T>
class MoeGatingTopKV4 {
public:
    __aicore__ inline MoeGatingTopKV4() {}

    __aicore__ inline void Init(GM_ADDR gating, GM_ADDR indices, GM_ADDR weights,
                                const MoeGatingV4TilingData* tilingData, TPipe* pipeIn)
    {
        pipe = pipeIn;
        t = tilingData;
        col = t->col;
        k = t->k;
        colAlign = t->colAlign;
        chunks = colAlign / SORT_UNIT;
        fast = (k == 1 && col <= 64);                       // CANN's K = 1 special case
        union { uint32_t bits; float value; } inf = {0xFF800000};
        negInf = inf.value;                                 // -inf (float bits 0xFF800000)
        bool last = GetBlockIdx() == t->blockNum - 1;
        loops = last ? t->ubLoopOfTailBlock : t->ubLoopOfFormerBlock;
        tailRows = last ? t->ubTailOfTailBlock : t->ubTailOfFormerBlock;
        gatingGM.SetGlobalBuffer((__gm__ T*)gating + t->blockFormer * col * GetBlockIdx());
        indicesGM.SetGlobalBuffer((__gm__ int32_t*)indices + t->blockFormer * k * GetBlockIdx());
        weightsGM.SetGlobalBuffer((__gm__ float*)weights + t->blockFormer * k * GetBlockIdx());

        uint32_t rows = t->ubFormer;
        uint32_t rows8 = (rows + 7) / 8 * 8;
        uint32_t outHalf = (rows * k + 7) / 8 * 8;
        idxOff = outHalf;                                   // indices after the weights
        // allocation order = moe_gating_v4_ub_layout: pairs first (Sort32's dst: 256-B aligned)
        pipe->InitBuffer(pairsBuf, 8 * rows * colAlign);
        pipe->InitBuffer(gatingQueue, 2, rows * colAlign * sizeof(T));
        if (sizeof(T) == 2 || (chunks > 1 && !fast)) {
            pipe->InitBuffer(castBuf, 4 * rows * colAlign);  // widened scores / merge groups
        }
        if (!fast) {
            pipe->InitBuffer(indexBuf, 4 * rows * colAlign);
        }
        pipe->InitBuffer(topKOutQueue, 1, 2 * 4 * outHalf);
        pipe->InitBuffer(patternBuf, 4 * 32);
        pipe->InitBuffer(softmaxBuf, 4 * (K_ALIGN * rows + 8 * rows8));
        pipe->InitBuffer(rowStatBuf, 4 * rows8);
    }

    __aicore__ inline void Process()
    {
        CopyIn(0, loops == 1 ? tailRows : t->ubFormer);
        ComputePhase0();
        for (uint32_t i = 0; i < loops; i++) {
            uint32_t rows = (i == loops - 1) ? tailRows : t->ubFormer;
            Compute(i, rows);
            if (i + 1 < loops) {
                CopyIn(i + 1, (i + 1 == loops - 1) ? tailRows : t->ubFormer);   // prefetch
            }
            CopyOut(i, rows);
        }
    }

private:
    __aicore__ inline void CopyIn(uint32_t i, uint32_t rows)
    {
        LocalTensor<T> gating = gatingQueue.AllocTensor<T>();
        uint32_t rowBytes = (col * sizeof(T) + 31) / 32 * 32;          // each block padded to 32 B
        uint32_t gapBlocks = (colAlign * sizeof(T) - rowBytes) / 32;   // then on to the next row
        DataCopyPad(gating, gatingGM[t->ubFormer * col * i],
                    DataCopyExtParams(rows, col * sizeof(T), 0, gapBlocks, 0),
                    DataCopyPadExtParams<T>(false, 0, 0, 0));
        gatingQueue.EnQue(gating);
    }

    // GatherMask patterns (one 32-B slot each) written by the scalar unit, then the Sort32 index rows.
    __aicore__ inline void ComputePhase0()
    {
        LocalTensor<uint32_t> pattern = patternBuf.Get<uint32_t>();
        pattern.SetValue(0, t->topKValuesMask);             // 8 scores of 8 pairs
        pattern.SetValue(1, 0);
        pattern.SetValue(8, t->topKIndicesMask);            // K indices
        pattern.SetValue(9, 0);
        pattern.SetValue(16, 1);                            // the first score: the row max
        pattern.SetValue(17, 0);
        pattern.SetValue(24, (1u << k) - 1);                // the first K of every 8
        pattern.SetValue(25, 0);
        TEventID eventSToV = GetTPipePtr()->FetchEventID(HardEvent::S_V);   // waited at once
        SetFlag<HardEvent::S_V>(eventSToV);
        WaitFlag<HardEvent::S_V>(eventSToV);
        if (fast) {
            return;
        }
        LocalTensor<int32_t> index = indexBuf.Get<int32_t>();
        CreateVecIndex(index, (int32_t)0, colAlign);        // row 0: 0 .. colAlign-1
        PipeBarrier<PIPE_V>();
        if (t->ubFormer > 1) {                              // rows 1..: copies of row 0
            for (uint32_t off = 0; off < colAlign; off += 64) {
                uint32_t lanes = (colAlign - off < 64) ? colAlign - off : 64;
                Copy(index[colAlign + off], index[off], lanes, t->ubFormer - 1,
                     CopyRepeatParams(1, 1, colAlign / 8, 0));
            }
            PipeBarrier<PIPE_V>();
        }
    }

    __aicore__ inline void Compute(uint32_t i, uint32_t rows)
    {
        LocalTensor<T> gating = gatingQueue.DeQue<T>();
        LocalTensor<float> pairs = pairsBuf.Get<float>();
        LocalTensor<float> scores;
        if constexpr (sizeof(T) == 2) {
            scores = castBuf.Get<float>();
            Cast(scores, gating, RoundMode::CAST_NONE, rows * colAlign);
            PipeBarrier<PIPE_V>();
            gatingQueue.FreeTensor(gating);
        } else {
            scores = gating;
        }
        if (fast) {
            // (max, argmax) of every row; the pair lands at pairs[row * 64], where Sort32 puts it
            WholeReduceMax(pairs, scores, col, rows, 32, 1, colAlign / 8, ReduceOrder::ORDER_VALUE_INDEX);
            PipeBarrier<PIPE_V>();
        } else {
            if (colAlign != col) {                          // -inf into columns col..colAlign-1
                uint32_t pad = colAlign - col;
                uint64_t mask[2] = {(((uint64_t)1 << pad) - 1) << (32 - pad), 0};
                Duplicate(scores[colAlign - 32], negInf, mask, rows, 1, colAlign / 8);
                PipeBarrier<PIPE_V>();
            }
            LocalTensor<int32_t> index = indexBuf.Get<int32_t>();
            Sort32(pairs, scores, index.ReinterpretCast<uint32_t>(), rows * colAlign / SORT_UNIT);
            PipeBarrier<PIPE_V>();
        }
        if constexpr (sizeof(T) != 2) {
            gatingQueue.FreeTensor(gating);
        }
        if (!fast && chunks > 1) {
            MergeSort(pairs, castBuf.Get<float>(), rows);
        }
        ExtractSoftmax(pairs, rows);
    }

    // Rows hold n sorted lists of 32 pairs. Per round: the first 8 pairs of every list into groups
    // of 4 (missing lists -inf), then MrgSort 4 x 8 -> 32 per group. Only the first 8 pairs of a
    // list can reach the top K because K <= 8.
    __aicore__ inline void MergeSort(const LocalTensor<float>& pairs, const LocalTensor<float>& groups,
                                     uint32_t rows)
    {
        uint32_t n = chunks;
        while (n > 1) {
            uint32_t g = (n + 3) / 4;
            uint32_t slots = 4 * g;
            if (slots != n) {
                Duplicate(groups, negInf, rows * slots * 2 * MERGE_KEEP);
                PipeBarrier<PIPE_V>();
                for (uint32_t c = 0; c < n; c++) {          // list c of every row: 2 blocks
                    Copy(groups[c * 16], pairs[c * 64], 16, rows, CopyRepeatParams(1, 1, slots * 2, n * 8));
                }
            } else {                                        // lists are contiguous: one call
                Copy(groups, pairs, 16, rows * n, CopyRepeatParams(1, 1, 2, 8));
            }
            PipeBarrier<PIPE_V>();
            uint16_t lengths[4] = {MERGE_KEEP, MERGE_KEEP, MERGE_KEEP, MERGE_KEEP};
            MrgSort(pairs, MrgSortSrcList<float>(groups[0], groups[16], groups[32], groups[48]),
                    MrgSort4Info(lengths, false, 0b1111, rows * g));
            PipeBarrier<PIPE_V>();
            n = g;
        }
    }

    // Row r's sorted pairs at pairs[r * 64]. Weights [rows, k] -> out[0], indices -> out[idxOff] of a
    // topKOut slot, which goes to CopyOut through the VECOUT queue.
    __aicore__ inline void ExtractSoftmax(const LocalTensor<float>& pairs, uint32_t rows)
    {
        LocalTensor<float> out = topKOutQueue.AllocTensor<float>();
        LocalTensor<uint32_t> pattern = patternBuf.Get<uint32_t>();
        LocalTensor<float> vals = softmaxBuf.Get<float>();
        LocalTensor<float> bcast = vals[K_ALIGN * rows];
        LocalTensor<float> stat = rowStatBuf.Get<float>();
        LocalTensor<int32_t> indices = out[idxOff].ReinterpretCast<int32_t>();
        uint64_t rsvdCnt = 0;
        GatherMaskParams perRow(1, rows, 8, 0);             // one 64-float row per repeat, same pattern
        GatherMask(vals, pairs, pattern[0], false, 0, perRow, rsvdCnt);                              // 8 scores
        GatherMask(indices, pairs.ReinterpretCast<int32_t>(), pattern[8], false, 0, perRow, rsvdCnt);  // k indices
        GatherMask(stat, pairs, pattern[16], false, 0, perRow, rsvdCnt);                             // row max
        PipeBarrier<PIPE_V>();
        uint32_t blocks = (rows + 7) / 8;
        Brcb(bcast, stat, blocks, BrcbRepeatParams(1, 8));  // max -> one block per row
        PipeBarrier<PIPE_V>();
        Sub(vals, vals, bcast, K_ALIGN * rows);
        PipeBarrier<PIPE_V>();
        Exp(vals, vals, K_ALIGN * rows);
        PipeBarrier<PIPE_V>();
        WholeReduceSum(stat, vals, k, rows, 1, 1, 1);       // sum of the first k of every row
        PipeBarrier<PIPE_V>();
        Brcb(bcast, stat, blocks, BrcbRepeatParams(1, 8));
        PipeBarrier<PIPE_V>();
        Div(vals, vals, bcast, K_ALIGN * rows);
        PipeBarrier<PIPE_V>();
        GatherMask(out, vals, pattern[24], false, 0, GatherMaskParams(1, rows, 1, 0), rsvdCnt);     // first k of 8
        PipeBarrier<PIPE_V>();
        topKOutQueue.EnQue(out);
    }

    __aicore__ inline void CopyOut(uint32_t i, uint32_t rows)
    {
        LocalTensor<float> out = topKOutQueue.DeQue<float>();
        uint32_t base = t->ubFormer * k * i;
        DataCopyPad(indicesGM[base], out[idxOff].ReinterpretCast<int32_t>(),
                    DataCopyExtParams(1, rows * k * sizeof(int32_t), 0, 0, 0));
        DataCopyPad(weightsGM[base], out, DataCopyExtParams(1, rows * k * sizeof(float), 0, 0, 0));
        topKOutQueue.FreeTensor(out);
    }

    TPipe* pipe;          // the entry's TPipe (避免TPipe在对象内创建和初始化.md)
    TQue<TPosition::VECIN, 2> gatingQueue;
    TQue<TPosition::VECOUT, 1> topKOutQueue;
    TBuf<TPosition::VECCALC> pairsBuf, castBuf, indexBuf, patternBuf, softmaxBuf, rowStatBuf;
    GlobalTensor<T> gatingGM;
    GlobalTensor<int32_t> indicesGM;
    GlobalTensor<float> weightsGM;
    const MoeGatingV4TilingData* t;
    uint32_t col, k, colAlign, chunks, loops, tailRows, idxOff;
    bool fast;
    float negInf;
};

extern "C" __global__ __aicore__ void moe_gating_v4(GM_ADDR gating, GM_ADDR indices, GM_ADDR weights,
                                                    GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(MoeGatingV4TilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;                     // the entry owns the TPipe; the kernel class gets a pointer
    MoeGatingTopKV4<DTYPE_GATING> op;                       // float or half: the op's input dtype
    op.Init(gating, indices, weights, &tilingData, &pipe);
    op.Process();
}
