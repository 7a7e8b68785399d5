// chips: ascend-910b2
// MoeGatingTopK large-E — the Ascend C listing of npu_lab/kernels/moe_gating/large_e.py (same
// instructions, same order): E split into chunks of `chunk` columns, each sorted (Sort32 + MrgSort)
// and merged into a running top-kRun list per row. renorm = 1: the softmax over the K winners (CANN's
// MoeGatingTopKSoftmaxV2 KRenorm template, op_host/moe_gating_top_k_softmax_v2_tiling_k_renorm.cpp);
// renorm = 0: an online max / sum of the whole row kept across the chunks and the winners' full-softmax
// values at the end (the KFullLoad template, hicann/ops-transformer
// moe/moe_gating_top_k_softmax_v2/op_host/moe_gating_top_k_softmax_v2_tiling_k_fullload.cpp and
// op_kernel/moe_gating_top_k_softmax_v2_k_fullload.h). Our own code, not a copy of CANN's.
#include "kernel_operator.h"

using namespace AscendC;

struct LargeETilingData {
    int32_t row;
    int32_t col;
    int32_t k;
    int32_t kRun;                  // ceil32(k): pairs kept between chunks
    int32_t kAlign;                // ceil8(k)
    int32_t chunk;                 // columns per chunk (a multiple of 32)
    int32_t chunks;
    int32_t blockFormer;
    int32_t blockNum;
    int32_t blockTail;
    int32_t ubFormer;
    int32_t ubLoopOfFormerBlock;
    int32_t ubTailOfFormerBlock;
    int32_t ubLoopOfTailBlock;
    int32_t ubTailOfTailBlock;
    int32_t renorm;                // 1: softmax over the K winners; 0: the full softmax (online max / sum)
};

constexpr uint32_t SORT_UNIT = 32;

__aicore__ inline uint32_t Up(uint32_t a, uint32_t b) { return (a + b - 1) / b * b; }
__aicore__ inline uint32_t Max2(uint32_t a, uint32_t b) { return a > b ? a : b; }
// ReduceMax's sharedTmpBuffer for n floats without the index (ReduceMax.md)
__aicore__ inline uint32_t ReduceMaxTmp(uint32_t n) { return Up(2 * Max2(1, (n + 63) / 64), 8); }

template <typename T>
class MoeGatingTopKLargeE {
public:
    __aicore__ inline MoeGatingTopKLargeE() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR indices, GM_ADDR weights, const LargeETilingData* tilingData,
                                TPipe* pipeIn)
    {
        pipe = pipeIn;
        t = tilingData;
        union { uint32_t bits; float value; } inf = {0xFF800000};
        negInf = inf.value;
        E = t->col; K = t->k; Kr = t->kRun; Kp = t->kAlign; Ec = t->chunk; R = t->ubFormer;
        bool last = GetBlockIdx() == t->blockNum - 1;
        loops = last ? t->ubLoopOfTailBlock : t->ubLoopOfFormerBlock;
        tailRows = last ? t->ubTailOfTailBlock : t->ubTailOfFormerBlock;
        row0 = t->blockFormer * GetBlockIdx();
        xGM.SetGlobalBuffer((__gm__ T*)x);
        indicesGM.SetGlobalBuffer((__gm__ int32_t*)indices);
        weightsGM.SetGlobalBuffer((__gm__ float*)weights);
        // allocation order = large_e_layout; every size a whole number of 256 B
        pipe->InitBuffer(pairsA, Up(8 * R * Ec, 256));
        pipe->InitBuffer(pairsB, Up(8 * R * Ec, 256));
        pipe->InitBuffer(xQueue, 2, Up(R * Ec * sizeof(T), 256));
        if (sizeof(T) == 2) pipe->InitBuffer(xfBuf, Up(4 * R * Ec, 256));
        pipe->InitBuffer(index0Buf, Up(4 * R * Ec, 256));
        pipe->InitBuffer(indexBuf, Up(4 * R * Ec, 256));
        pipe->InitBuffer(runBuf, Up(8 * R * Kr, 256));
        pipe->InitBuffer(mergedBuf, Up(8 * (Kr + Ec), 256));
        pipe->InitBuffer(offsBuf, Up(2 * 4 * R * Kp, 256));
        pipe->InitBuffer(statBuf, Up(4 * Up(R, 8), 256));
        pipe->InitBuffer(bcastBuf, Up(32 * Up(R, 8), 256));
        uint32_t tmpElems = t->renorm ? Max2(64, Kp) : Max2(Max2(64, Kp), ReduceMaxTmp(Ec));
        pipe->InitBuffer(tmpBuf, Up(4 * tmpElems, 256));
        pipe->InitBuffer(outQueue, 1, Up(2 * 4 * R * Kp, 256));
        if (!t->renorm) {                                          // running max (two, swapped) and sum
            pipe->InitBuffer(mx0Buf, Up(4 * Up(R, 8), 256));
            pipe->InitBuffer(mx1Buf, Up(4 * Up(R, 8), 256));
            pipe->InitBuffer(ssumBuf, Up(4 * Up(R, 8), 256));
        }
    }

    __aicore__ inline void Process()
    {
        LocalTensor<int32_t> index0 = index0Buf.Get<int32_t>();
        LocalTensor<uint32_t> offs = offsBuf.Get<uint32_t>();
        for (uint32_t i = 0; i < R; i++) {
            CreateVecIndex(index0[i * Ec], (int32_t)0, Ec);        // positions 0..Ec-1 of every row
        }
        for (uint32_t i = 0; i < R; i++) {
            for (uint32_t j = 0; j < Kp; j++) {
                uint32_t jj = j < K ? j : K - 1;
                offs.SetValue(i * Kp + j, (i * Kr + jj) * 8);        // the first K pairs of each running list
            }
        }
        TEventID eventSToV = GetTPipePtr()->FetchEventID(HardEvent::S_V);
        SetFlag<HardEvent::S_V>(eventSToV);
        WaitFlag<HardEvent::S_V>(eventSToV);
        uint32_t steps = loops * t->chunks;
        CopyIn(0, 0);
        for (uint32_t s = 0; s < steps; s++) {
            uint32_t i = s / t->chunks;
            uint32_t c = s % t->chunks;
            Compute(i, c, s + 1 < steps);
        }
    }

private:
    __aicore__ inline uint32_t Rows(uint32_t i) { return i == loops - 1 ? tailRows : R; }

    __aicore__ inline void CopyIn(uint32_t i, uint32_t c)
    {
        uint32_t r = Rows(i);
        uint32_t ec = (E - c * Ec < Ec) ? E - c * Ec : Ec;
        LocalTensor<T> x = xQueue.AllocTensor<T>();
        uint32_t gap = (Ec * sizeof(T) - Up(ec * sizeof(T), 32)) / 32;
        DataCopyPad(x, xGM[(row0 + i * R) * E + c * Ec],
                    DataCopyExtParams(r, ec * sizeof(T), (E - ec) * sizeof(T), gap, 0),
                    DataCopyPadExtParams<T>(false, 0, 0, 0));
        xQueue.EnQue(x);
    }

    __aicore__ inline void Compute(uint32_t i, uint32_t c, bool more)
    {
        uint32_t r = Rows(i);
        uint32_t ec = (E - c * Ec < Ec) ? E - c * Ec : Ec;
        LocalTensor<float> run = runBuf.Get<float>();
        bool online = t->renorm == 0;
        if (online) {                                              // running max before / after this chunk
            mo = (c % 2 == 0) ? mx0Buf.Get<float>() : mx1Buf.Get<float>();
            mn = (c % 2 == 0) ? mx1Buf.Get<float>() : mx0Buf.Get<float>();
        }
        if (c == 0) {
            Duplicate(run, negInf, r * Kr * 2);                    // a fresh running list
            if (online) {                                          // running max -inf, running sum 0
                Duplicate(mo, negInf, r);
                Duplicate(ssumBuf.Get<float>(), 0.0f, r);
            }
        }
        LocalTensor<T> x = xQueue.DeQue<T>();
        LocalTensor<float> xf;
        if constexpr (sizeof(T) == 2) {
            xf = xfBuf.Get<float>();
            Cast(xf, x, RoundMode::CAST_NONE, r * Ec);
            PipeBarrier<PIPE_V>();
        } else {
            xf = x;
        }
        if (ec < Ec) {                                             // -inf over the chunk's pad columns
            for (uint32_t q = 0; q < r; q++) {
                if (ec % 32 != 0) {
                    uint32_t pad = 32 - ec % 32;
                    uint64_t mask[2] = {(((uint64_t)1 << pad) - 1) << (32 - pad), 0};
                    Duplicate(xf[q * Ec + Up(ec, 32) - 32], negInf, mask, 1, 1, 8);
                }
                if (Ec > Up(ec, 32)) {
                    Duplicate(xf[q * Ec + Up(ec, 32)], negInf, Ec - Up(ec, 32));
                }
            }
            PipeBarrier<PIPE_V>();
        }
        LocalTensor<int32_t> index = indexBuf.Get<int32_t>();
        Adds(index, index0Buf.Get<int32_t>(), (int32_t)(c * Ec), r * Ec);   // this chunk's expert indices
        PipeBarrier<PIPE_V>();
        LocalTensor<float> a = pairsA.Get<float>();
        LocalTensor<float> b = pairsB.Get<float>();
        Sort32(a, xf, index.ReinterpretCast<uint32_t>(), r * Ec / SORT_UNIT);
        PipeBarrier<PIPE_V>();
        if (online) {
            OnlineSoftmaxStep(xf, r);                              // the sort has read the logits: xf is free
        }
        xQueue.FreeTensor(x);
        if (more) {
            uint32_t ni = (c + 1 == (uint32_t)t->chunks) ? i + 1 : i;
            uint32_t nc = (c + 1 == (uint32_t)t->chunks) ? 0 : c + 1;
            CopyIn(ni, nc);                                        // prefetch the next chunk
        }
        LocalTensor<float> sorted = MergeChunk(a, b, r);
        LocalTensor<float> merged = mergedBuf.Get<float>();
        for (uint32_t q = 0; q < r; q++) {                         // running top-kRun := top(run, chunk)
            uint16_t lengths[4] = {(uint16_t)Kr, (uint16_t)Ec, 0, 0};
            MrgSort(merged, MrgSortSrcList<float>(run[q * Kr * 2], sorted[q * Ec * 2], run[q * Kr * 2], run[q * Kr * 2]),
                    MrgSort4Info(lengths, false, 0b11, 1));
            PipeBarrier<PIPE_V>();
            Copy(run[q * Kr * 2], merged, 64, 2 * Kr / 64, CopyRepeatParams(1, 1, 8, 8));
            PipeBarrier<PIPE_V>();
        }
        if (c == (uint32_t)t->chunks - 1) {
            Finish(r, run);
            CopyOut(i, r);
        }
    }

    // dst[q] = max / sum of row q's Ec columns: one WholeReduce over r repeats when a row is one repeat,
    // else a ReduceMax / ReduceSum per row.
    __aicore__ inline void RowStat(const LocalTensor<float>& dst, const LocalTensor<float>& src, uint32_t r, bool isMax)
    {
        LocalTensor<float> tmp = tmpBuf.Get<float>();
        if (Ec <= 64) {
            if (isMax) {
                WholeReduceMax(dst, src, Ec, r, 1, 1, Ec / 8, ReduceOrder::ORDER_ONLY_VALUE);
            } else {
                WholeReduceSum(dst, src, Ec, r, 1, 1, Ec / 8);
            }
            return;
        }
        for (uint32_t q = 0; q < r; q++) {
            if (isMax) {
                ReduceMax(dst[q], src[q * Ec], tmp, Ec, false);
            } else {
                ReduceSum(dst[q], src[q * Ec], tmp, Ec);
            }
        }
    }

    // x[q, :] -= bc[q] (bc: one 32-byte block per row, from Brcb).
    __aicore__ inline void SubRowScalar(const LocalTensor<float>& x, const LocalTensor<float>& bc, uint32_t r)
    {
        if (Ec <= 64) {
            Sub(x, x, bc, Ec, r, BinaryRepeatParams(1, 1, 0, Ec / 8, Ec / 8, 1));
            return;
        }
        for (uint32_t q = 0; q < r; q++) {                         // repeats along the row, src1 the same block
            if (Ec / 64 > 0) {
                Sub(x[q * Ec], x[q * Ec], bc[q * 8], 64, Ec / 64, BinaryRepeatParams(1, 1, 0, 8, 8, 0));
            }
            if (Ec % 64 != 0) {
                uint32_t at = q * Ec + Ec / 64 * 64;
                Sub(x[at], x[at], bc[q * 8], 32, 1, BinaryRepeatParams(1, 1, 0, 8, 8, 0));
            }
        }
    }

    // One chunk of the online softmax: mn = max(mo, chunk max), s = s * exp(mo - mn) + sum exp(x - mn).
    __aicore__ inline void OnlineSoftmaxStep(const LocalTensor<float>& xf, uint32_t r)
    {
        LocalTensor<float> stat = statBuf.Get<float>();
        LocalTensor<float> bc = bcastBuf.Get<float>();
        LocalTensor<float> ssum = ssumBuf.Get<float>();
        RowStat(stat, xf, r, true);
        PipeBarrier<PIPE_V>();
        Max(mn, mo, stat, r);
        PipeBarrier<PIPE_V>();
        Sub(mo, mo, mn, r);                                        // chunk 0: -inf - m = -inf, exp -> 0
        Brcb(bc, mn, (r + 7) / 8, BrcbRepeatParams(1, 8));
        PipeBarrier<PIPE_V>();
        Exp(mo, mo, r);                                            // the rescale factor of the old sum
        SubRowScalar(xf, bc, r);
        PipeBarrier<PIPE_V>();
        Mul(ssum, ssum, mo, r);
        Exp(xf, xf, r * Ec);
        PipeBarrier<PIPE_V>();
        RowStat(stat, xf, r, false);
        PipeBarrier<PIPE_V>();
        Add(ssum, ssum, stat, r);
        PipeBarrier<PIPE_V>();
    }

    // Every row holds Ec / 32 sorted runs of 32 pairs: merge them into one list (4 runs per MrgSort).
    __aicore__ inline LocalTensor<float> MergeChunk(LocalTensor<float> src, LocalTensor<float> dst, uint32_t r)
    {
        uint32_t n = Ec / SORT_UNIT;
        uint32_t starts[64];
        uint16_t lens[64];
        for (uint32_t j = 0; j < n; j++) { starts[j] = j * SORT_UNIT; lens[j] = SORT_UNIT; }
        while (n > 1) {
            uint32_t sets = (n + 3) / 4;
            bool uniform = n % 4 == 0;
            for (uint32_t j = 1; j < n; j++) uniform = uniform && lens[j] == lens[0];
            if (uniform) {
                uint32_t ln = lens[0];
                uint32_t total = r * sets;
                for (uint32_t s0 = 0; s0 < total; s0 += 255) {
                    uint32_t base = s0 * 8 * ln;
                    uint16_t lengths[4] = {(uint16_t)ln, (uint16_t)ln, (uint16_t)ln, (uint16_t)ln};
                    MrgSort(dst[base], MrgSortSrcList<float>(src[base], src[base + 2 * ln], src[base + 4 * ln],
                                                             src[base + 6 * ln]),
                            MrgSort4Info(lengths, false, 0b1111, (total - s0 < 255) ? total - s0 : 255));
                }
            } else {
                for (uint32_t q = 0; q < r; q++) {
                    for (uint32_t s = 0; s < sets; s++) {
                        uint32_t m = (n - 4 * s < 4) ? n - 4 * s : 4;
                        uint32_t at = q * Ec + starts[4 * s];
                        if (m == 1) {
                            Copy(dst[2 * at], src[2 * at], 64, 2 * lens[4 * s] / 64, CopyRepeatParams(1, 1, 8, 8));
                        } else {
                            uint16_t lengths[4] = {lens[4 * s], lens[4 * s + 1], m > 2 ? lens[4 * s + 2] : (uint16_t)0,
                                                   m > 3 ? lens[4 * s + 3] : (uint16_t)0};
                            LocalTensor<float> l2 = m > 2 ? src[2 * (q * Ec + starts[4 * s + 2])] : src[2 * at];
                            LocalTensor<float> l3 = m > 3 ? src[2 * (q * Ec + starts[4 * s + 3])] : src[2 * at];
                            MrgSort(dst[2 * at], MrgSortSrcList<float>(src[2 * at], src[2 * (q * Ec + starts[4 * s + 1])],
                                                                       l2, l3),
                                    MrgSort4Info(lengths, false, (uint16_t)((1u << m) - 1), 1));
                        }
                    }
                }
            }
            PipeBarrier<PIPE_V>();
            for (uint32_t s = 0; s < sets; s++) {
                uint32_t m = (n - 4 * s < 4) ? n - 4 * s : 4;
                uint32_t ln = 0;
                for (uint32_t q = 0; q < m; q++) ln += lens[4 * s + q];
                starts[s] = starts[4 * s];
                lens[s] = (uint16_t)ln;
            }
            n = sets;
            LocalTensor<float> tmp = src; src = dst; dst = tmp;
        }
        return src;
    }

    // The K winners of r rows: scores and indices [r, kAlign], softmax over the first K.
    __aicore__ inline void Finish(uint32_t r, const LocalTensor<float>& run)
    {
        LocalTensor<float> out = outQueue.AllocTensor<float>();
        LocalTensor<float> w = out;
        LocalTensor<int32_t> idx = out[R * Kp].ReinterpretCast<int32_t>();
        LocalTensor<uint32_t> offs = offsBuf.Get<uint32_t>();
        Gather(w, run, offs, 0, r * Kp);
        Gather(idx, run.ReinterpretCast<int32_t>(), offs, 4, r * Kp);          // the index lanes
        PipeBarrier<PIPE_V>();
        LocalTensor<float> stat = statBuf.Get<float>();
        LocalTensor<float> bc = bcastBuf.Get<float>();
        LocalTensor<float> tmp = tmpBuf.Get<float>();
        if (t->renorm == 0) {                                      // w = exp(x - m) * (1 / s) of the whole row
            Brcb(bc, mn, (r + 7) / 8, BrcbRepeatParams(1, 8));
            Duplicate(stat, 1.0f, r);
            PipeBarrier<PIPE_V>();
            for (uint32_t c0 = 0; c0 < Kp; c0 += 64) {
                Sub(w[c0], w[c0], bc, (Kp - c0 < 64) ? Kp - c0 : 64, r, BinaryRepeatParams(1, 1, 0, Kp / 8, Kp / 8, 1));
            }
            Div(stat, stat, ssumBuf.Get<float>(), r);
            PipeBarrier<PIPE_V>();
            Exp(w, w, r * Kp);
            Brcb(bc, stat, (r + 7) / 8, BrcbRepeatParams(1, 8));
            PipeBarrier<PIPE_V>();
            for (uint32_t c0 = 0; c0 < Kp; c0 += 64) {
                Mul(w[c0], w[c0], bc, (Kp - c0 < 64) ? Kp - c0 : 64, r, BinaryRepeatParams(1, 1, 0, Kp / 8, Kp / 8, 1));
            }
            PipeBarrier<PIPE_V>();
        } else {                                                   // softmax over the K winners
            if (Kp <= 64) {
                WholeReduceMax(stat, w, K, r, 1, 1, Kp / 8, ReduceOrder::ORDER_ONLY_VALUE);
            } else {
                for (uint32_t q = 0; q < r; q++) ReduceMax(stat[q], w[q * Kp], tmp, K, false);
            }
            PipeBarrier<PIPE_V>();
            Brcb(bc, stat, (r + 7) / 8, BrcbRepeatParams(1, 8));
            PipeBarrier<PIPE_V>();
            for (uint32_t c0 = 0; c0 < Kp; c0 += 64) {
                Sub(w[c0], w[c0], bc, (Kp - c0 < 64) ? Kp - c0 : 64, r, BinaryRepeatParams(1, 1, 0, Kp / 8, Kp / 8, 1));
            }
            PipeBarrier<PIPE_V>();
            Exp(w, w, r * Kp);
            PipeBarrier<PIPE_V>();
            if (Kp <= 64) {
                WholeReduceSum(stat, w, K, r, 1, 1, Kp / 8);
            } else {
                for (uint32_t q = 0; q < r; q++) ReduceSum(stat[q], w[q * Kp], tmp, K);
            }
            PipeBarrier<PIPE_V>();
            Brcb(bc, stat, (r + 7) / 8, BrcbRepeatParams(1, 8));
            PipeBarrier<PIPE_V>();
            for (uint32_t c0 = 0; c0 < Kp; c0 += 64) {
                Div(w[c0], w[c0], bc, (Kp - c0 < 64) ? Kp - c0 : 64, r, BinaryRepeatParams(1, 1, 0, Kp / 8, Kp / 8, 1));
            }
            PipeBarrier<PIPE_V>();
        }
        outQueue.EnQue(out);
    }

    __aicore__ inline void CopyOut(uint32_t i, uint32_t r)
    {
        LocalTensor<float> out = outQueue.DeQue<float>();
        uint32_t base = (row0 + i * R) * K;
        DataCopyPad(indicesGM[base], out[R * Kp].ReinterpretCast<int32_t>(), DataCopyExtParams(r, K * 4, 0, 0, 0));
        DataCopyPad(weightsGM[base], out, DataCopyExtParams(r, K * 4, 0, 0, 0));
        outQueue.FreeTensor(out);
    }

    TPipe* pipe;
    TQue<TPosition::VECIN, 2> xQueue;
    TQue<TPosition::VECOUT, 1> outQueue;
    TBuf<TPosition::VECCALC> pairsA, pairsB, xfBuf, index0Buf, indexBuf, runBuf, mergedBuf, offsBuf, statBuf, bcastBuf,
        tmpBuf, mx0Buf, mx1Buf, ssumBuf;
    LocalTensor<float> mo, mn;                                     // running max before / after the chunk
    GlobalTensor<T> xGM;
    GlobalTensor<int32_t> indicesGM;
    GlobalTensor<float> weightsGM;
    const LargeETilingData* t;
    uint32_t E, K, Kr, Kp, Ec, R, loops, tailRows, row0;
    float negInf;
};

extern "C" __global__ __aicore__ void moe_gating_large_e(GM_ADDR x, GM_ADDR indices, GM_ADDR weights,
                                                         GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(LargeETilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    MoeGatingTopKLargeE<DTYPE_X> op;
    op.Init(x, indices, weights, &tilingData, &pipe);
    op.Process();
}
