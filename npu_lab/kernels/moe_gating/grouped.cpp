// chips: ascend-910b2
// MoeGatingTopK grouped — the Ascend C listing of npu_lab/kernels/moe_gating/grouped.py (same
// instructions, same order): the full routing semantics (softmax or sigmoid, a selection-only bias,
// grouped top-k by group max or top-2 sum, renorm on / off, routed scaling, finished rows, row_idx
// and norm_out), structured like CANN's MoeGatingTopK (hicann/ops-transformer
// moe/moe_gating_top_k/op_kernel/moe_gating_top_k_generalized.h). Our own code, not a copy of CANN's.
//
// Per loop of `rows` rows (groups padded to groupAlign = ceil32(E / groups) columns):
//   CopyIn   DataCopyPad rows * groups blocks of groupSize elements, each at a groupAlign stride
//   Compute  [Cast] -> -inf pad -> softmax (ReduceMax, Brcb, Sub, Exp, ReduceSum, Div, Mul) or
//            sigmoid (Muls, Exp, Adds, Reciprocal) -> + bias -> Sort32 -> MrgSort rounds (per group)
//            -> Gather group heads (+ second: top2_sum) -> scalar ranking -> MrgSort chosen groups
//            -> Gather the first K pairs -> weights (renorm, scaling) -> finished rows
//   CopyOut  DataCopyPad UB->GM: indices, weights [, row_idx, norm_out]
#include "kernel_operator.h"

using namespace AscendC;

struct MoeGatingGroupedTilingData {
    int32_t row;                   // N
    int32_t col;                   // E
    int32_t groups;                // groupCount
    int32_t groupSize;             // E / groupCount
    int32_t groupAlign;            // ceil32(groupSize)
    int32_t colAlign;              // groups * groupAlign
    int32_t k;
    int32_t kAlign;                // ceil8(k)
    int32_t kGroup;
    int32_t grouped;               // groups restrict the choice
    int32_t normType;              // 0 softmax, 1 sigmoid
    int32_t groupSelectMode;       // 0 max, 1 top-2 sum
    int32_t renorm;
    int32_t hasBias;
    int32_t hasFinished;
    int32_t outFlag;
    int32_t selectOnLogits;
    int32_t blockFormer;
    int32_t blockNum;
    int32_t blockTail;
    int32_t ubFormer;
    int32_t ubLoopOfFormerBlock;
    int32_t ubTailOfFormerBlock;
    int32_t ubLoopOfTailBlock;
    int32_t ubTailOfTailBlock;
    float routedScalingFactor;
    float eps;
};

constexpr uint32_t SORT_UNIT = 32;
constexpr uint32_t MAX_GROUPS = 256;

__aicore__ inline uint32_t Align(uint32_t a, uint32_t b) { return (a + b - 1) / b * b; }

template <typename T>
class MoeGatingTopKGrouped {
public:
    __aicore__ inline MoeGatingTopKGrouped() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR bias, GM_ADDR finished, GM_ADDR indices, GM_ADDR weights,
                                GM_ADDR rowIdx, GM_ADDR normOut, const MoeGatingGroupedTilingData* tilingData,
                                TPipe* pipeIn)
    {
        pipe = pipeIn;
        t = tilingData;
        union { uint32_t bits; float value; } inf = {0xFF800000};
        negInf = inf.value;
        C = t->colAlign; G = t->groupSize; Gp = t->groupAlign; kAlign = t->kAlign;
        bool last = GetBlockIdx() == t->blockNum - 1;
        loops = last ? t->ubLoopOfTailBlock : t->ubLoopOfFormerBlock;
        tailRows = last ? t->ubTailOfTailBlock : t->ubTailOfFormerBlock;
        row0 = t->blockFormer * GetBlockIdx();
        xGM.SetGlobalBuffer((__gm__ T*)x + row0 * t->col);
        biasGM.SetGlobalBuffer((__gm__ float*)bias);
        finishedGM.SetGlobalBuffer((__gm__ int32_t*)finished + row0);
        indicesGM.SetGlobalBuffer((__gm__ int32_t*)indices + row0 * t->k);
        weightsGM.SetGlobalBuffer((__gm__ float*)weights + row0 * t->k);
        rowIdxGM.SetGlobalBuffer((__gm__ int32_t*)rowIdx + row0 * t->k);
        normGM.SetGlobalBuffer((__gm__ float*)normOut + row0 * t->col);

        uint32_t r = t->ubFormer;
        uint32_t rk = r * kAlign;
        uint32_t r8 = Align(r, 8);
        finalLen = t->grouped ? t->kGroup * Gp : C;
        normOff = Align(3 * rk, 64);
        // allocation order = grouped_ub_layout; every size a whole number of 256 B
        pipe->InitBuffer(pairsA, Align(8 * r * C, 256));
        pipe->InitBuffer(pairsB, Align(8 * r * C, 256));
        pipe->InitBuffer(xQueue, 2, Align(r * C * sizeof(T), 256));
        if (sizeof(T) == 2) pipe->InitBuffer(xfBuf, Align(4 * r * C, 256));
        if (!t->outFlag) pipe->InitBuffer(normBuf, Align(4 * r * C, 256));
        if (t->hasBias) pipe->InitBuffer(keyBuf, Align(4 * r * C, 256));
        pipe->InitBuffer(indexBuf, Align(4 * r * C, 256));
        if (t->grouped) {
            uint32_t half = Align(r * t->groups, 8);
            pipe->InitBuffer(finalBuf, Align(8 * r * finalLen, 256));
            pipe->InitBuffer(scratchA, Align(8 * finalLen, 256));   // MrgSort's src and dst: separate buffers
            pipe->InitBuffer(scratchB, Align(8 * finalLen, 256));
            pipe->InitBuffer(gscoreBuf, Align(2 * 4 * half, 256));
            pipe->InitBuffer(goffsBuf, Align(2 * 4 * half, 256));
        }
        if (Gp != G) pipe->InitBuffer(tableBuf, Align(4 * C, 256));
        if (t->hasBias) pipe->InitBuffer(biasQueue, 1, Align(4 * C, 256));
        if (t->hasFinished) pipe->InitBuffer(flagQueue, 2, Align(4 * r, 256));
        pipe->InitBuffer(selBuf, Align(4 * rk, 256));
        pipe->InitBuffer(posBuf, Align(4 * rk, 256));
        pipe->InitBuffer(offsBuf, Align(2 * 4 * rk, 256));
        pipe->InitBuffer(rowBaseBuf, Align(4 * rk, 256));
        denseSum = t->normType == 0 && t->groups > 1 && Gp != G;
        if (denseSum) {
            pipe->InitBuffer(denseBuf, Align(4 * t->col, 256));
            pipe->InitBuffer(doffsBuf, Align(4 * t->col, 256));
        }
        if (t->outFlag) pipe->InitBuffer(riBaseBuf, Align(4 * rk, 256));
        pipe->InitBuffer(statBuf, Align(4 * 2 * r8, 256));
        pipe->InitBuffer(bcastBuf, Align(4 * 8 * 2 * r8, 256));
        pipe->InitBuffer(tmpBuf, Align(4 * (C > kAlign ? C : kAlign), 256));
        pipe->InitBuffer(outQueue, 1, Align(4 * normOff + (t->outFlag ? 4 * r * C : 0), 256));
    }

    __aicore__ inline void Process()
    {
        Prepare();
        CopyIn(0, loops == 1 ? tailRows : t->ubFormer);
        for (uint32_t i = 0; i < loops; i++) {
            uint32_t rows = (i == loops - 1) ? tailRows : t->ubFormer;
            Compute(i, rows);
            if (i + 1 < loops) {
                CopyIn(i + 1, (i + 1 == loops - 1) ? tailRows : t->ubFormer);
            }
            CopyOut(i, rows);
        }
    }

private:
    __aicore__ inline void CopyGroupsIn(const LocalTensor<float>& dst, const GlobalTensor<float>& src, uint32_t rows)
    {
        uint32_t gap = (Gp * 4 - Align(G * 4, 32)) / 32;
        DataCopyPad(dst, src, DataCopyExtParams(rows * t->groups, G * 4, 0, gap, 0),
                    DataCopyPadExtParams<float>(false, 0, 0, 0));
    }

    // Once per block: the bias row, Sort32's positions, the position -> expert table, offset tables.
    __aicore__ inline void Prepare()
    {
        uint32_t r = t->ubFormer;
        if (t->hasBias) {
            LocalTensor<float> b = biasQueue.AllocTensor<float>();
            CopyGroupsIn(b, biasGM, 1);
            biasQueue.EnQue(b);
            bias = biasQueue.DeQue<float>();
        }
        LocalTensor<int32_t> index = indexBuf.Get<int32_t>();
        CreateVecIndex(index, (int32_t)0, C);
        if (Gp != G) {
            LocalTensor<int32_t> table = tableBuf.Get<int32_t>();
            for (uint32_t g = 0; g < (uint32_t)t->groups; g++) {
                CreateVecIndex(table[g * Gp], (int32_t)(g * G), Gp);
            }
        }
        PipeBarrier<PIPE_V>();
        if (r > 1) {
            if (C / 8 <= 255) {
                for (uint32_t off = 0; off < C; off += 64) {
                    Copy(index[C + off], index[off], (C - off < 64) ? C - off : 64, r - 1,
                         CopyRepeatParams(1, 1, C / 8, 0));
                }
            } else {
                for (uint32_t i = 1; i < r; i++) {
                    Copy(index[i * C], index, 64, C / 64, CopyRepeatParams(1, 1, 8, 8));
                }
            }
            PipeBarrier<PIPE_V>();
        }
        LocalTensor<uint32_t> offs = offsBuf.Get<uint32_t>();
        LocalTensor<int32_t> rowBase = rowBaseBuf.Get<int32_t>();
        for (uint32_t i = 0; i < r; i++) {
            for (uint32_t j = 0; j < kAlign; j++) {
                uint32_t jj = j < (uint32_t)t->k ? j : t->k - 1;
                offs.SetValue(i * kAlign + j, (i * finalLen + jj) * 8 + 4);   // the index lane of pair jj
                rowBase.SetValue(i * kAlign + j, (int32_t)(i * C * 4));
            }
        }
        if (t->grouped) {
            LocalTensor<uint32_t> goffs = goffsBuf.Get<uint32_t>();
            uint32_t n = Align(r * t->groups, 8);
            for (uint32_t i = 0; i < r; i++) {
                for (uint32_t g = 0; g < (uint32_t)t->groups; g++) {
                    uint32_t head = (i * C + g * Gp) * 8;
                    goffs.SetValue(i * t->groups + g, head);
                    goffs.SetValue(n + i * t->groups + g, head + 8);
                }
            }
        }
        if (denseSum) {
            LocalTensor<uint32_t> doffs = doffsBuf.Get<uint32_t>();
            for (uint32_t e = 0; e < (uint32_t)t->col; e++) {
                doffs.SetValue(e, ((e / G) * Gp + e % G) * 4);
            }
        }
        if (t->outFlag) {
            LocalTensor<int32_t> riBase = riBaseBuf.Get<int32_t>();
            for (uint32_t i = 0; i < r; i++) {
                for (uint32_t j = 0; j < kAlign; j++) {
                    uint32_t jj = j < (uint32_t)t->k ? j : t->k - 1;
                    riBase.SetValue(i * kAlign + j, (int32_t)(jj * t->row + i));
                }
            }
        }
        TEventID eventSToV = GetTPipePtr()->FetchEventID(HardEvent::S_V);
        SetFlag<HardEvent::S_V>(eventSToV);
        WaitFlag<HardEvent::S_V>(eventSToV);
    }

    __aicore__ inline void CopyIn(uint32_t i, uint32_t rows)
    {
        LocalTensor<T> x = xQueue.AllocTensor<T>();
        uint32_t gap = (Gp * sizeof(T) - Align(G * sizeof(T), 32)) / 32;
        DataCopyPad(x, xGM[t->ubFormer * t->col * i], DataCopyExtParams(rows * t->groups, G * sizeof(T), 0, gap, 0),
                    DataCopyPadExtParams<T>(false, 0, 0, 0));
        xQueue.EnQue(x);
        if (t->hasFinished) {
            LocalTensor<int32_t> f = flagQueue.AllocTensor<int32_t>();
            DataCopyPad(f, finishedGM[t->ubFormer * i], DataCopyExtParams(1, rows * 4, 0, 0, 0),
                        DataCopyPadExtParams<int32_t>(false, 0, 0, 0));
            flagQueue.EnQue(f);
        }
    }

    __aicore__ inline void PadNegInf(const LocalTensor<float>& buf, uint32_t rows)
    {
        if (G == Gp) return;
        uint32_t pad = Gp - G;
        uint64_t mask[2] = {(((uint64_t)1 << pad) - 1) << (32 - pad), 0};
        if (Gp / 8 <= 255) {
            Duplicate(buf[Gp - 32], negInf, mask, rows * t->groups, 1, Gp / 8);
        } else {
            for (uint32_t q = 0; q < rows * t->groups; q++) {
                Duplicate(buf[q * Gp + Gp - 32], negInf, mask, 1, 1, 8);
            }
        }
        PipeBarrier<PIPE_V>();
    }

    // dst[i, :] = src[i, :] op bcast[i] (bcast: one 32-B block per row, from Brcb)
    template <int OP>
    __aicore__ inline void RowOp(const LocalTensor<float>& dst, const LocalTensor<float>& src,
                                 const LocalTensor<float>& bc, uint32_t rows, uint32_t width)
    {
        if (width / 8 <= 255) {
            for (uint32_t c = 0; c < width; c += 64) {
                uint64_t lanes = (width - c < 64) ? width - c : 64;
                BinaryRepeatParams p(1, 1, 0, width / 8, width / 8, 1);
                if constexpr (OP == 0) Sub(dst[c], src[c], bc, lanes, rows, p);
                if constexpr (OP == 1) Mul(dst[c], src[c], bc, lanes, rows, p);
                if constexpr (OP == 2) Div(dst[c], src[c], bc, lanes, rows, p);
                if constexpr (OP == 3) Add(dst[c], src[c], bc, lanes, rows, p);
            }
        } else {
            for (uint32_t i = 0; i < rows; i++) {
                BinaryRepeatParams p(1, 1, 0, 8, 8, 0);
                if constexpr (OP == 0) Sub(dst[i * width], src[i * width], bc[i * 8], 64, width / 64, p);
                if constexpr (OP == 1) Mul(dst[i * width], src[i * width], bc[i * 8], 64, width / 64, p);
                if constexpr (OP == 2) Div(dst[i * width], src[i * width], bc[i * 8], 64, width / 64, p);
                if constexpr (OP == 3) Add(dst[i * width], src[i * width], bc[i * 8], 64, width / 64, p);
            }
        }
    }

    __aicore__ inline void Broadcast(const LocalTensor<float>& dst, const LocalTensor<float>& stat, uint32_t rows)
    {
        Brcb(dst, stat, (rows + 7) / 8, BrcbRepeatParams(1, 8));
        PipeBarrier<PIPE_V>();
    }

    template <bool MAX>
    __aicore__ inline void RowReduce(const LocalTensor<float>& dst, const LocalTensor<float>& src, uint32_t rows,
                                     uint32_t width, uint32_t count)
    {
        if (width <= 64 && count <= 64) {
            if constexpr (MAX) {
                WholeReduceMax(dst, src, count, rows, 1, 1, width / 8, ReduceOrder::ORDER_ONLY_VALUE);
            } else {
                WholeReduceSum(dst, src, count, rows, 1, 1, width / 8);
            }
        } else {
            LocalTensor<float> tmp = tmpBuf.Get<float>();
            for (uint32_t i = 0; i < rows; i++) {
                if constexpr (MAX) {
                    ReduceMax(dst[i], src[i * width], tmp, count, false);
                } else {
                    ReduceSum(dst[i], src[i * width], tmp, count);
                }
            }
        }
        PipeBarrier<PIPE_V>();
    }

    __aicore__ inline void Softmax(const LocalTensor<float>& xf, const LocalTensor<float>& norm, uint32_t rows)
    {
        LocalTensor<float> stat = statBuf.Get<float>();
        LocalTensor<float> bc = bcastBuf.Get<float>();
        LocalTensor<float> tmp = tmpBuf.Get<float>();
        uint32_t r8 = Align(rows, 8);
        for (uint32_t q = 0; q < rows; q++) {
            ReduceMax(stat[q], xf[q * C], tmp, C, false);       // the pad columns are -inf
        }
        PipeBarrier<PIPE_V>();
        Broadcast(bc, stat, rows);
        RowOp<0>(norm, xf, bc, rows, C);
        PipeBarrier<PIPE_V>();
        Exp(norm, norm, rows * C);
        PipeBarrier<PIPE_V>();
        LocalTensor<float> sums = stat[r8];
        if (!denseSum) {
            for (uint32_t q = 0; q < rows; q++) {
                ReduceSum(sums[q], norm[q * C], tmp, t->col);
            }
        } else {                                                // the E real columns, packed, in order
            LocalTensor<float> dense = denseBuf.Get<float>();
            LocalTensor<uint32_t> doffs = doffsBuf.Get<uint32_t>();
            for (uint32_t q = 0; q < rows; q++) {
                Gather(dense, norm, doffs, q * C * 4, t->col);
                PipeBarrier<PIPE_V>();
                ReduceSum(sums[q], dense, tmp, t->col);
                PipeBarrier<PIPE_V>();
            }
        }
        PipeBarrier<PIPE_V>();
        Duplicate(bc, 1.0f, r8);
        PipeBarrier<PIPE_V>();
        Div(sums, bc, sums, r8);                                // 1 / sum
        PipeBarrier<PIPE_V>();
        Broadcast(bc, sums, rows);
        RowOp<1>(norm, norm, bc, rows, C);
        PipeBarrier<PIPE_V>();
    }

    __aicore__ inline void Compute(uint32_t i, uint32_t rows)
    {
        LocalTensor<T> x = xQueue.DeQue<T>();
        LocalTensor<float> xf;
        if constexpr (sizeof(T) == 2) {
            xf = xfBuf.Get<float>();
            Cast(xf, x, RoundMode::CAST_NONE, rows * C);
            PipeBarrier<PIPE_V>();
        } else {
            xf = x;
        }
        LocalTensor<float> out = outQueue.AllocTensor<float>();
        uint32_t rkAll = t->ubFormer * kAlign;
        LocalTensor<float> norm = t->outFlag ? out[Align(3 * rkAll, 64)] : normBuf.Get<float>();
        PadNegInf(xf, rows);
        if (t->selectOnLogits && !t->outFlag) {
            // V2 renorm = 1: the weights come from the logits alone
        } else if (t->normType == 0) {
            Softmax(xf, norm, rows);
        } else {
            Muls(norm, xf, -1.0f, rows * C);
            PipeBarrier<PIPE_V>();
            Exp(norm, norm, rows * C);
            PipeBarrier<PIPE_V>();
            Adds(norm, norm, 1.0f, rows * C);
            PipeBarrier<PIPE_V>();
            Reciprocal(norm, norm, rows * C);
            PipeBarrier<PIPE_V>();
        }
        LocalTensor<float> key;
        if (t->selectOnLogits) {
            key = xf;
        } else if (t->hasBias) {
            key = keyBuf.Get<float>();
            if (C / 8 <= 255) {
                for (uint32_t c = 0; c < C; c += 64) {
                    Add(key[c], norm[c], bias[c], (C - c < 64) ? C - c : 64, rows,
                        BinaryRepeatParams(1, 1, 1, C / 8, C / 8, 0));
                }
            } else {
                for (uint32_t q = 0; q < rows; q++) {
                    Add(key[q * C], norm[q * C], bias, C);
                }
            }
            PipeBarrier<PIPE_V>();
            PadNegInf(key, rows);
        } else {
            key = norm;
            PadNegInf(key, rows);
        }
        LocalTensor<float> a = pairsA.Get<float>();
        LocalTensor<float> b = pairsB.Get<float>();
        Sort32(a, key, indexBuf.Get<int32_t>().ReinterpretCast<uint32_t>(), rows * C / SORT_UNIT);
        PipeBarrier<PIPE_V>();
        uint32_t span = t->grouped ? Gp : C;
        LocalTensor<float> sorted = MergeRounds(a, b, rows * (C / span), span);
        LocalTensor<float> final = sorted;
        if (t->grouped) {
            final = ChooseGroups(sorted, rows);
        }
        TopK(i, final, xf, norm, out, rows);
        xQueue.FreeTensor(x);
        outQueue.EnQue(out);
    }

    // Merge up to 4 sorted runs (pair offsets) of src into dst at pair `at`; one run is copied.
    __aicore__ inline void MergeSet(const LocalTensor<float>& dst, const LocalTensor<float>& src, uint32_t at,
                                    const uint32_t* starts, const uint16_t* lens, uint32_t n)
    {
        if (n == 1) {
            Copy(dst[2 * at], src[2 * starts[0]], 64, 2 * lens[0] / 64, CopyRepeatParams(1, 1, 8, 8));
            return;
        }
        uint16_t lengths[4] = {lens[0], lens[1], n > 2 ? lens[2] : (uint16_t)0, n > 3 ? lens[3] : (uint16_t)0};
        LocalTensor<float> l0 = src[2 * starts[0]];
        LocalTensor<float> l1 = src[2 * starts[1]];
        LocalTensor<float> l2 = n > 2 ? src[2 * starts[2]] : l0;
        LocalTensor<float> l3 = n > 3 ? src[2 * starts[3]] : l0;
        MrgSort(dst[2 * at], MrgSortSrcList<float>(l0, l1, l2, l3),
                MrgSort4Info(lengths, false, (uint16_t)((1u << n) - 1), 1));
    }

    // `regions` regions of `span` pairs, each of span / 32 sorted chunks: merge every region into one
    // sorted list, 4 runs per MrgSort, every pair kept. Returns the buffer holding the result.
    __aicore__ inline LocalTensor<float> MergeRounds(LocalTensor<float> src, LocalTensor<float> dst,
                                                     uint32_t regions, uint32_t span)
    {
        uint32_t n = span / SORT_UNIT;
        uint32_t starts[64];
        uint16_t lens[64];
        for (uint32_t j = 0; j < n; j++) { starts[j] = j * SORT_UNIT; lens[j] = SORT_UNIT; }
        while (n > 1) {
            uint32_t sets = (n + 3) / 4;
            bool uniform = n % 4 == 0;
            for (uint32_t j = 1; j < n; j++) uniform = uniform && lens[j] == lens[0];
            if (uniform) {
                uint32_t ln = lens[0];
                uint32_t total = regions * sets;
                for (uint32_t s = 0; s < total; s += 255) {
                    uint32_t rep = (total - s < 255) ? total - s : 255;
                    uint32_t base = s * 4 * ln * 2;
                    uint16_t lengths[4] = {(uint16_t)ln, (uint16_t)ln, (uint16_t)ln, (uint16_t)ln};
                    MrgSort(dst[base], MrgSortSrcList<float>(src[base], src[base + 2 * ln], src[base + 4 * ln],
                                                             src[base + 6 * ln]),
                            MrgSort4Info(lengths, false, 0b1111, rep));
                }
            } else {
                for (uint32_t reg = 0; reg < regions; reg++) {
                    for (uint32_t s = 0; s < sets; s++) {
                        uint32_t m = (n - 4 * s < 4) ? n - 4 * s : 4;
                        uint32_t st[4];
                        for (uint32_t q = 0; q < m; q++) st[q] = reg * span + starts[4 * s + q];
                        MergeSet(dst, src, st[0], st, &lens[4 * s], m);
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

    // Group scores from the heads of the sorted group lists; the scalar unit ranks them (stable:
    // the lower group first) and the kept groups' lists are merged in group order into final.
    __aicore__ inline LocalTensor<float> ChooseGroups(const LocalTensor<float>& sorted, uint32_t rows)
    {
        uint32_t groups = t->groups;
        uint32_t n = rows * groups;
        uint32_t nAll = Align(t->ubFormer * groups, 8);
        LocalTensor<float> gs = gscoreBuf.Get<float>();
        LocalTensor<uint32_t> goffs = goffsBuf.Get<uint32_t>();
        Gather(gs, sorted, goffs, 0, n);
        if (t->groupSelectMode == 1) {
            Gather(gs[nAll], sorted, goffs[nAll], 0, n);
            PipeBarrier<PIPE_V>();
            Add(gs, gs, gs[nAll], n);
        }
        PipeBarrier<PIPE_V>();
        TEventID eventVToS = GetTPipePtr()->FetchEventID(HardEvent::V_S);
        SetFlag<HardEvent::V_S>(eventVToS);
        WaitFlag<HardEvent::V_S>(eventVToS);
        LocalTensor<float> final = finalBuf.Get<float>();
        for (uint32_t q = 0; q < rows; q++) {
            float scores[MAX_GROUPS];
            for (uint32_t g = 0; g < groups; g++) {
                scores[g] = gs.GetValue(q * groups + g);
            }
            bool taken[MAX_GROUPS] = {false};
            // scalar: rank groups
            {   // the kGroup best groups by selection (kGroup x groups compares; equal: the lower group)
                for (uint32_t c = 0; c < (uint32_t)t->kGroup; c++) {
                    int32_t best = -1;
                    for (uint32_t g = 0; g < groups; g++) {
                        if (!taken[g] && (best < 0 || scores[g] > scores[best])) best = g;
                    }
                    taken[best] = true;
                }
            }
            uint8_t chosen[MAX_GROUPS];
            uint32_t c = 0;
            for (uint32_t g = 0; g < groups; g++) {
                if (taken[g]) chosen[c++] = (uint8_t)g;                   // in group order
            }
            if (q > 0 && t->kGroup > 4) PipeBarrier<PIPE_V>();            // the scratch rows are reused
            MergeChosen(final, sorted, q, chosen);
        }
        TEventID eventSToV = GetTPipePtr()->FetchEventID(HardEvent::S_V);   // next loop's Gather writes gscore
        SetFlag<HardEvent::S_V>(eventSToV);
        WaitFlag<HardEvent::S_V>(eventSToV);
        PipeBarrier<PIPE_V>();
        return final;
    }

    __aicore__ inline void MergeChosen(const LocalTensor<float>& final, const LocalTensor<float>& src, uint32_t q,
                                       const uint8_t* chosen)
    {
        uint32_t n = t->kGroup;
        uint32_t starts[MAX_GROUPS];
        uint16_t lens[MAX_GROUPS];
        for (uint32_t c = 0; c < n; c++) { starts[c] = q * C + chosen[c] * Gp; lens[c] = Gp; }
        LocalTensor<float> cur = src;
        uint32_t side = 0;
        bool more = true;
        while (more) {
            uint32_t sets = (n + 3) / 4;
            bool last = sets == 1;
            LocalTensor<float> dst = last ? final : (side == 0 ? scratchA.Get<float>() : scratchB.Get<float>());
            uint32_t at = last ? q * finalLen : 0;
            for (uint32_t s = 0; s < sets; s++) {
                uint32_t m = (n - 4 * s < 4) ? n - 4 * s : 4;
                MergeSet(dst, cur, at, &starts[4 * s], &lens[4 * s], m);
                uint32_t ln = 0;
                for (uint32_t k2 = 0; k2 < m; k2++) ln += lens[4 * s + k2];
                starts[s] = at;
                lens[s] = (uint16_t)ln;
                at += ln;
            }
            more = !last;
            if (more) {
                PipeBarrier<PIPE_V>();
                n = sets;
                cur = dst;
                side = 1 - side;
            }
        }
    }

    __aicore__ inline void TopK(uint32_t loop, const LocalTensor<float>& final, const LocalTensor<float>& xf,
                                const LocalTensor<float>& norm, const LocalTensor<float>& out, uint32_t rows)
    {
        uint32_t rk = rows * kAlign;
        uint32_t rkAll = t->ubFormer * kAlign;
        uint32_t r8 = Align(rows, 8);
        LocalTensor<uint32_t> offs = offsBuf.Get<uint32_t>();
        LocalTensor<int32_t> rowBase = rowBaseBuf.Get<int32_t>();
        LocalTensor<int32_t> pos = posBuf.Get<int32_t>();
        LocalTensor<int32_t> posOff = offs[rkAll].ReinterpretCast<int32_t>();
        LocalTensor<float> stat = statBuf.Get<float>();
        LocalTensor<float> bc = bcastBuf.Get<float>();
        Gather(pos, final.ReinterpretCast<int32_t>(), offs, 0, rk);          // positions of the first K
        PipeBarrier<PIPE_V>();
        Muls(posOff, pos, (int32_t)4, rk);
        PipeBarrier<PIPE_V>();
        LocalTensor<int32_t> indices = out[rkAll].ReinterpretCast<int32_t>();
        if (Gp != G) {
            Gather(indices, tableBuf.Get<int32_t>(), posOff.ReinterpretCast<uint32_t>(), 0, rk);   // -> expert
        } else {
            Adds(indices, pos, (int32_t)0, rk);
        }
        PipeBarrier<PIPE_V>();
        Add(posOff, posOff, rowBase, rk);
        PipeBarrier<PIPE_V>();
        const LocalTensor<float>& source = (t->normType == 0 && t->renorm) ? xf : norm;
        LocalTensor<float> w = out;
        Gather(w, source, posOff.ReinterpretCast<uint32_t>(), 0, rk);
        PipeBarrier<PIPE_V>();
        if (t->renorm) {
            if (t->normType == 0) {
                RowReduce<true>(stat, w, rows, kAlign, t->k);
                Broadcast(bc, stat, rows);
                RowOp<0>(w, w, bc, rows, kAlign);
                PipeBarrier<PIPE_V>();
                Exp(w, w, rk);
                PipeBarrier<PIPE_V>();
            }
            RowReduce<false>(stat, w, rows, kAlign, t->k);
            Adds(stat, stat, t->eps, r8);
            PipeBarrier<PIPE_V>();
            Broadcast(bc, stat, rows);
            RowOp<2>(w, w, bc, rows, kAlign);
            PipeBarrier<PIPE_V>();
        }
        if (t->routedScalingFactor != 1.0f) {
            Muls(w, w, t->routedScalingFactor, rk);
            PipeBarrier<PIPE_V>();
        }
        if (t->hasFinished) {
            Finish(w, indices, rows, rk, r8);
        }
        if (t->outFlag) {                        // row_idx[i, j] = j * N + i
            Adds(out[2 * rkAll].ReinterpretCast<int32_t>(), riBaseBuf.Get<int32_t>(),
                 (int32_t)(row0 + loop * t->ubFormer), rk);
            PipeBarrier<PIPE_V>();
        }
    }

    // Finished rows: weight 0, index E, without a branch: w * (1 - f), idx * (1 - f) + E * f.
    __aicore__ inline void Finish(const LocalTensor<float>& w, const LocalTensor<int32_t>& indices, uint32_t rows,
                                  uint32_t rk, uint32_t r8)
    {
        LocalTensor<int32_t> flags = flagQueue.DeQue<int32_t>();
        LocalTensor<float> f = statBuf.Get<float>();
        LocalTensor<float> keep = f[r8];
        LocalTensor<float> kb = bcastBuf.Get<float>();
        LocalTensor<float> fb = kb[8 * r8];
        Cast(f, flags, RoundMode::CAST_NONE, r8);
        PipeBarrier<PIPE_V>();
        Muls(keep, f, -1.0f, r8);
        PipeBarrier<PIPE_V>();
        Adds(keep, keep, 1.0f, r8);
        PipeBarrier<PIPE_V>();
        Broadcast(kb, keep, rows);
        Broadcast(fb, f, rows);
        RowOp<1>(w, w, kb, rows, kAlign);
        LocalTensor<float> idxf = selBuf.Get<float>();
        Cast(idxf, indices, RoundMode::CAST_NONE, rk);
        PipeBarrier<PIPE_V>();
        RowOp<1>(idxf, idxf, kb, rows, kAlign);
        Muls(fb, fb, (float)t->col, 8 * r8);
        PipeBarrier<PIPE_V>();
        RowOp<3>(idxf, idxf, fb, rows, kAlign);
        PipeBarrier<PIPE_V>();
        Cast(indices, idxf, RoundMode::CAST_RINT, rk);
        PipeBarrier<PIPE_V>();
        flagQueue.FreeTensor(flags);
    }

    __aicore__ inline void CopyOut(uint32_t i, uint32_t rows)
    {
        LocalTensor<float> out = outQueue.DeQue<float>();
        uint32_t rkAll = t->ubFormer * kAlign;
        uint32_t base = t->ubFormer * t->k * i;
        DataCopyExtParams params(rows, t->k * 4, 0, 0, 0);
        DataCopyPad(indicesGM[base], out[rkAll].ReinterpretCast<int32_t>(), params);
        DataCopyPad(weightsGM[base], out, params);
        if (t->outFlag) {
            DataCopyPad(rowIdxGM[base], out[2 * rkAll].ReinterpretCast<int32_t>(), params);
            uint32_t gap = (Gp * 4 - Align(G * 4, 32)) / 32;
            DataCopyPad(normGM[t->ubFormer * t->col * i], out[Align(3 * rkAll, 64)],
                        DataCopyExtParams(rows * t->groups, G * 4, gap, 0, 0));
        }
        outQueue.FreeTensor(out);
    }

    TPipe* pipe;
    TQue<TPosition::VECIN, 2> xQueue, flagQueue;
    TQue<TPosition::VECIN, 1> biasQueue;
    TQue<TPosition::VECOUT, 1> outQueue;
    TBuf<TPosition::VECCALC> pairsA, pairsB, xfBuf, normBuf, keyBuf, indexBuf, finalBuf, scratchA, scratchB, gscoreBuf,
        goffsBuf, tableBuf, selBuf, posBuf, offsBuf, rowBaseBuf, denseBuf, doffsBuf, riBaseBuf, statBuf, bcastBuf,
        tmpBuf;
    GlobalTensor<T> xGM;
    GlobalTensor<float> biasGM, weightsGM, normGM;
    GlobalTensor<int32_t> finishedGM, indicesGM, rowIdxGM;
    LocalTensor<float> bias;
    const MoeGatingGroupedTilingData* t;
    uint32_t C, G, Gp, kAlign, loops, tailRows, row0, finalLen, normOff;
    bool denseSum;
    float negInf;
};

extern "C" __global__ __aicore__ void moe_gating_grouped(GM_ADDR x, GM_ADDR bias, GM_ADDR finished,
                                                         GM_ADDR indices, GM_ADDR weights, GM_ADDR rowIdx,
                                                         GM_ADDR normOut, GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(MoeGatingGroupedTilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    MoeGatingTopKGrouped<DTYPE_X> op;                      // float or half: the op's input dtype
    op.Init(x, bias, finished, indices, weights, rowIdx, normOut, &tilingData, &pipe);
    op.Process();
}
