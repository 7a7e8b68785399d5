// chips: ascend-910b2
// MoeGatingTopK v3, vectorized: the Ascend C beside vectorized.py (moe_gating_v3_kernel and
// moe_gating_v3_fast_exp_kernel). Same calls, same order as the Python: npu_lab.kernels.listings
// checks it against a traced run.
//
// The vector unit works on all rows of a tile at once. Rows sit in UB at a stride Ep = E rounded
// up to 64 (each row whole 256-B repeats: repeat j of a 64-lane instruction is row j), columns
// E..Ep-1 are never read (every reduction takes exactly E lanes). K rounds of
//   argmax     WholeReduceMax, one repeat per row (E <= 64); E > 64 in whole 64-lane chunks: the
//              two-level argmax over all rows at once (TwoLevelArgmax: per lane the running Max
//              over the chunks and the first chunk holding it, Compare LE + Select; WholeReduceMax
//              of the lane maxima, Compare EQ, the smallest 2^23 + 64*chunk + lane by
//              WholeReduceMin, an int32 Adds of -0x4B000000 on its bits); else ReduceMax(calIndex)
//              per row
//   split      GatherMask pattern 1 (values) / 2 (index bits) of the [value, index] pairs
//   column k   Brcb + a bit-masked level-0 Copy into [rows, Kp] (Kp = 8/16/32/64 >= K)
//   knock-out  Brcb of the argmax (minus 64*c per 64-column chunk c), Compare EQ of a 64-lane
//              iota (repeat stride 0) against it (block stride 0, repeat stride 1) -> bit mask,
//              Select VSEL_TENSOR_TENSOR_MODE: -inf where the bit is set
// then a softmax over the K (Sub the Brcb'd row max, Exp or the polynomial FastExp,
// WholeReduceSum mask K, Brcb, Div) and GatherMask [rows, Kp] -> [rows * K] before the stores.
// int32 Compare is used as EQ only (the one int32 mode on the 910B). An A2 kernel: the 310P's AI
// core has no level-0 Copy (Copy（UBToUB掩码式高维数据搬运）.md 'Atlas 推理系列产品AI Core：不支持';
// dav_m200/kernel_operator_data_copy_impl.h), nor int32 Compare, float -> int32 Cast, ShiftLeft.
//
// References (asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/): 数据搬运/DataCopy*.md,
// DataCopyPad*.md, Copy.md; 比较与选择/Compare.md, Select.md, GatherMask.md; 数据填充/Brcb.md,
// Duplicate.md, CreateVecIndex.md; 归约计算/ReduceMax.md; docs/api/.../归约计算/WholeReduceMax.md,
// WholeReduceSum.md (CANN 8.x); 类型转换/Cast.md; 逻辑计算/ShiftLeft.md.
#include "kernel_operator.h"
using namespace AscendC;

constexpr int32_t BLOCK_BYTES = 32;
constexpr int32_t REPEAT_CHUNK = 252;
constexpr float TWO_POW_23 = 8388608.0f;   // 2^23 + n is exact for n < 2^23; its bits are 0x4B000000 + n
constexpr int32_t TWO_POW_23_BITS = 0x4B000000;  // <= 255 repeats; a multiple of 4 keeps Compare's mask 32-B aligned
// the fitted polynomial 2^f ~ ((c0 f + c1) f + c2) f + c3 on [0, 1), p(0) = 1 and p(1) = 2 (vectorized.py FAST_EXP_COEFFS)
constexpr float C0 = 0.0791252181f, C1 = 0.224946305f, C2 = 0.695928454f, C3 = 1.0f;
constexpr float LOG2E = 1.44269504f;

struct MoeGatingTiling {
    int32_t B, S, E, K;
    int32_t tileB, tileS, tileBS;
    int32_t totalTiles, tilesPerBatch, ubCapacity;
};

__aicore__ inline int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }
__aicore__ inline int32_t Align(int32_t a, int32_t b) { return CeilDiv(a, b) * b; }

__aicore__ inline void TileRows(const MoeGatingTiling& t, int32_t tile, int32_t& firstRow, int32_t& points)
{
    int32_t b = tile / t.tilesPerBatch;
    int32_t s0 = (tile % t.tilesPerBatch) * t.tileS;
    int32_t s1 = s0 + t.tileS < t.S ? s0 + t.tileS : t.S;
    firstRow = b * t.S + s0;
    points = s1 - s0;
}

// fused.py tile_order: full tiles first, the short tail tiles last.
__aicore__ inline int32_t TileOf(const MoeGatingTiling& t, int32_t k)
{
    if (t.S % t.tileS == 0) return k;
    int32_t fullPerBatch = t.tilesPerBatch - 1;
    int32_t full = t.B * fullPerBatch;
    if (k >= full) return (k - full) * t.tilesPerBatch + fullPerBatch;
    return k / fullPerBatch * t.tilesPerBatch + k % fullPerBatch;
}

// One bit per 32-bit lane: lane `lane` of each of the 8 blocks of a repeat.
__aicore__ inline uint64_t LaneBits(int32_t lane)
{
    uint64_t bits = 0;
    for (int32_t j = 0; j < 8; ++j) bits |= 1ULL << (8 * j + lane);
    return bits;
}

// exp(x) with simple instructions (vectorized.py fast_exp): 2^n * p(f), t = x log2 e, n = floor t.
__aicore__ inline void FastExp(const LocalTensor<float>& dst, const LocalTensor<float>& src,
                               const LocalTensor<float>& work, int32_t count)
{
    int32_t step = Align(count, 8);
    LocalTensor<float> t = work;
    LocalTensor<float> p = work[2 * step];
    LocalTensor<int32_t> n = work[step].ReinterpretCast<int32_t>();
    Maxs(t, src, -87.0f, count);
    Muls(t, t, LOG2E, count);
    Cast(n, t, RoundMode::CAST_FLOOR, count);
    Cast(p, n, RoundMode::CAST_NONE, count);
    Sub(t, t, p, count);
    Muls(p, t, C0, count);
    Adds(p, p, C1, count);
    for (int32_t c = 0; c < 2; ++c) {
        Mul(p, p, t, count);
        Adds(p, p, c == 0 ? C2 : C3, count);
    }
    Adds(n, n, 127, count);
    ShiftLeft(n, n, 23, count);
    Mul(dst, p, n.ReinterpretCast<float>(), count);
}

template <typename T, bool FAST>
class KernelMoeGatingV3 {
public:
    __aicore__ inline KernelMoeGatingV3() {}

    __aicore__ inline void Init(GM_ADDR gate, GM_ADDR indices, GM_ADDR weights, const MoeGatingTiling& tiling, TPipe* pipeIn)
    {
        pipe = pipeIn;
        t = tiling;
        E = tiling.E;
        K = tiling.K;
        T_ = tiling.tileBS;
        Ep = Align(E, 64);                                  // a row is whole 256-B repeats
        m = Ep / 64;
        Kp = K <= 8 ? 8 : (K <= 16 ? 16 : (K <= 32 ? 32 : 64));
        int32_t T8 = Align(T_, 8), T32 = Align(T_, 32);
        blockIdx = GetBlockIdx();
        blockNum = GetBlockNum();
        myTiles = (tiling.totalTiles - blockIdx + blockNum - 1) / blockNum;
        gateGm.SetGlobalBuffer((__gm__ T*)gate);
        indicesGm.SetGlobalBuffer((__gm__ int32_t*)indices);
        weightsGm.SetGlobalBuffer((__gm__ float*)weights);
        // UB exactly as ub_budget.moe_ub_budget("v3") / v3_layout lays it out
        pipe->InitBuffer(scoresQueue, 2, T_ * Ep * sizeof(float));     // float16 uses the first half
        pipe->InitBuffer(valuesQueue, 2, Align(T8 * K * sizeof(float), BLOCK_BYTES));
        pipe->InitBuffer(indicesQueue, 2, Align(T8 * K * sizeof(int32_t), BLOCK_BYTES));
        twoLevel = E > 64 && E % 64 == 0 && E / 8 <= 255;     // ub_budget.uses_two_level_argmax
        reduceTmpLen = m > 1 && !twoLevel ? Align(ReduceMaxTmpLen(E), 8) : 0;
        pipe->InitBuffer(scoresWorkBuf, 2 * Align(T_ * Ep, 8) * sizeof(float));
        pipe->InitBuffer(selectMaskBuf, Align(T_ * Ep / 8, BLOCK_BYTES));
        pipe->InitBuffer(rowResultsBuf, (4 * T32 + 72 + reduceTmpLen) * sizeof(float));
        pipe->InitBuffer(rowBcastBuf, (T8 * 8 * m + 2 * T8 * 8) * sizeof(float));
        pipe->InitBuffer(topkPaddedBuf, 5 * T8 * Kp * sizeof(float));
        if (twoLevel) {
            pipe->InitBuffer(argmaxWorkBuf, 3 * T_ * 64 * sizeof(float));
        }
        LocalTensor<float> sw = scoresWorkBuf.Get<float>();
        work = sw;
        negInf = sw[Align(T_ * Ep, 8)];
        mask = selectMaskBuf.Get<uint8_t>();
        LocalTensor<float> rr = rowResultsBuf.Get<float>();
        pairs = rr;
        rowValues = rr[2 * T32];
        rowArgmax = rr[3 * T32].ReinterpretCast<int32_t>();
        iota = rr[4 * T32].ReinterpretCast<int32_t>();
        pattern = rr[4 * T32 + 64].ReinterpretCast<uint32_t>();
        reduceTmp = rr[4 * T32 + 72];
        LocalTensor<float> rb = rowBcastBuf.Get<float>();
        argmaxBcast = rb.ReinterpretCast<int32_t>();
        maxBcast = rb[T8 * 8 * m];
        columnBcast = rb[T8 * 8 * m + T8 * 8];
        LocalTensor<float> tp = topkPaddedBuf.Get<float>();
        valuesPad = tp;
        indicesPad = tp[T8 * Kp].ReinterpretCast<int32_t>();
        expWork = tp[2 * T8 * Kp];

        union { uint32_t bits; float value; } inf = {0xFF800000};
        Duplicate(negInf, inf.value, T_ * Ep);                 // Select's src0, once
        Duplicate(valuesPad, 0.0f, T8 * Kp);                   // finite pad lanes
        CreateVecIndex(iota, (int32_t)0, 64);                  // lanes 0..63 of a repeat
        if (twoLevel) {                                        // 2^23 + lane, for every row
            LocalTensor<float> aw = argmaxWorkBuf.Get<float>();
            laneMax = aw;
            laneChunk = aw[T_ * 64];
            laneIota = aw[2 * T_ * 64];
            CreateVecIndex(laneIota, TWO_POW_23, 64);
            for (int32_t r0 = 0; r0 < T_ - 1; r0 += REPEAT_CHUNK) {
                int32_t n = T_ - 1 - r0 < REPEAT_CHUNK ? T_ - 1 - r0 : REPEAT_CHUNK;
                Copy(laneIota[64 + 64 * r0], laneIota, 64, n, CopyRepeatParams(1, 1, 8, 0));
            }
        }
        uint64_t bits = 0;                                     // GatherMask: first K of every Kp lanes
        for (int32_t lane = 0; lane < 64; ++lane) {
            if (lane % Kp < K) bits |= 1ULL << lane;
        }
        pattern.SetValue(0, static_cast<uint32_t>(bits));
        pattern.SetValue(1, static_cast<uint32_t>(bits >> 32));
        TEventID eventSToV = GetTPipePtr()->FetchEventID(HardEvent::S_V);   // waited at once
        SetFlag<HardEvent::S_V>(eventSToV);                    // the pattern is in UB
        WaitFlag<HardEvent::S_V>(eventSToV);
    }

    __aicore__ inline void Process()
    {
        CopyIn(0);
        for (int32_t j = 0; j < myTiles; ++j) {
            if (j + 1 < myTiles) {
                CopyIn(j + 1);                                 // prefetch into the other slot
            }
            Compute(j);
            CopyOut(j);
        }
    }

private:
    // Max and first argmax of every row (E = m whole 64-lane chunks) -> rowValues, bcast, rowArgmax
    __aicore__ inline void TwoLevelArgmax(const LocalTensor<float>& src, const LocalTensor<float>& bcast,
                                          int32_t rows, int32_t rows8)
    {
        uint64_t rsvdCnt = 0;
        uint8_t wide = static_cast<uint8_t>(Ep / 8);           // a row's repeat stride, in blocks
        Duplicate(laneChunk, 0.0f, rows * 64);
        for (int32_t c = 1; c < m; ++c) {                      // level 1: per lane, over the chunks
            LocalTensor<float> prev = c == 1 ? src : laneMax;
            int32_t prevRow = c == 1 ? Ep : 64;
            uint8_t prevStride = c == 1 ? wide : 8;
            for (int32_t r0 = 0; r0 < rows; r0 += REPEAT_CHUNK) {   // chunk c no larger: keep
                int32_t n = rows - r0 < REPEAT_CHUNK ? rows - r0 : REPEAT_CHUNK;
                Compare(mask[r0 * 8], src[r0 * Ep + 64 * c], prev[r0 * prevRow], CMPMODE::LE, 64, n,
                        BinaryRepeatParams(1, 1, 1, 8, wide, prevStride));
            }
            Select(laneChunk, mask, laneChunk, static_cast<float>(c), SELMODE::VSEL_TENSOR_SCALAR_MODE, rows * 64);
            for (int32_t r0 = 0; r0 < rows; r0 += REPEAT_CHUNK) {
                int32_t n = rows - r0 < REPEAT_CHUNK ? rows - r0 : REPEAT_CHUNK;
                Max(laneMax[r0 * 64], prev[r0 * prevRow], src[r0 * Ep + 64 * c], 64, n,
                    BinaryRepeatParams(1, 1, 1, 8, prevStride, wide));
            }
        }
        for (int32_t r0 = 0; r0 < rows; r0 += REPEAT_CHUNK) {  // level 2: the row max
            int32_t n = rows - r0 < REPEAT_CHUNK ? rows - r0 : REPEAT_CHUNK;
            WholeReduceMax(pairs[2 * r0], laneMax[r0 * 64], 64, n, 1, 1, 8, ReduceOrder::ORDER_VALUE_INDEX);
        }
        GatherMaskParams split(1, CeilDiv(2 * rows, 64), 8, 0);
        GatherMask(rowValues, pairs, 1, false, 0, split, rsvdCnt);
        Brcb(bcast, rowValues, rows8, BrcbRepeatParams(1, 8));
        for (int32_t r0 = 0; r0 < rows; r0 += REPEAT_CHUNK) {  // the lanes holding it
            int32_t n = rows - r0 < REPEAT_CHUNK ? rows - r0 : REPEAT_CHUNK;
            Compare(mask[r0 * 8], laneMax[r0 * 64], bcast[r0 * 8], CMPMODE::EQ, 64, n,
                    BinaryRepeatParams(1, 1, 0, 8, 8, 1));
        }
        Muls(laneChunk, laneChunk, 64.0f, rows * 64);          // 64 * chunk
        Add(laneChunk, laneChunk, laneIota, rows * 64);        // + 2^23 + lane
        Select(laneChunk, mask, laneChunk, 2.0f * TWO_POW_23, SELMODE::VSEL_TENSOR_SCALAR_MODE, rows * 64);
        for (int32_t r0 = 0; r0 < rows; r0 += REPEAT_CHUNK) {  // the first index holding the max
            int32_t n = rows - r0 < REPEAT_CHUNK ? rows - r0 : REPEAT_CHUNK;
            WholeReduceMin(pairs[2 * r0], laneChunk[r0 * 64], 64, n, 1, 1, 8, ReduceOrder::ORDER_VALUE_INDEX);
        }
        GatherMask(rowArgmax.ReinterpretCast<uint32_t>(), pairs.ReinterpretCast<uint32_t>(), 1, false, 0,
                   split, rsvdCnt);                            // 2^23 + index, as bits
        Adds(rowArgmax, rowArgmax, -TWO_POW_23_BITS, rows);
    }

    __aicore__ inline int32_t ReduceMaxTmpLen(int32_t count)
    {   // ReduceMax.md: room for (value, index) pairs of every pass
        int32_t first = CeilDiv(count, 64) * 2;
        int32_t start2 = Align(first, 8);
        int32_t out2 = CeilDiv(first, 64) * 2;
        if (out2 <= 2) return start2 + Align(out2, 8);
        return start2 + Align(out2, 8) + Align(CeilDiv(out2, 64) * 2, 8);
    }

    __aicore__ inline void CopyIn(int32_t j)
    {
        int32_t first, rows;
        TileRows(t, TileOf(t, blockIdx + j * blockNum), first, rows);
        LocalTensor<T> scores = scoresQueue.AllocTensor<T>();
        int32_t rowBytes = E * sizeof(T);
        if (rowBytes % BLOCK_BYTES == 0) {
            if (Ep == E) {                                     // rows are contiguous in UB too
                DataCopy(scores, gateGm[first * E], rows * E);
            } else {                                           // one copy, a UB gap after every row
                DataCopy(scores, gateGm[first * E],
                         DataCopyParams{static_cast<uint16_t>(rows), static_cast<uint16_t>(rowBytes / BLOCK_BYTES), 0,
                                        static_cast<uint16_t>((Ep - E) * sizeof(T) / BLOCK_BYTES)});
            }
        } else {                                               // rows padded to 32 B; pad never read
            int32_t perBlock = BLOCK_BYTES / sizeof(T);
            DataCopyPad(scores, gateGm[first * E],
                        DataCopyExtParams{static_cast<uint16_t>(rows), static_cast<uint32_t>(rowBytes), 0,
                                          static_cast<uint32_t>((Ep - Align(E, perBlock)) * sizeof(T) / BLOCK_BYTES), 0},
                        DataCopyPadExtParams<T>{false, 0, 0, 0});
        }
        scoresQueue.EnQue(scores);
    }

    __aicore__ inline void Compute(int32_t j)
    {
        int32_t first, rows;
        TileRows(t, TileOf(t, blockIdx + j * blockNum), first, rows);
        LocalTensor<T> slot = scoresQueue.DeQue<T>();
        LocalTensor<float> src = slot.template ReinterpretCast<float>();
        if constexpr (sizeof(T) == 2) {                        // widen: all compute is float32
            Cast(work, slot, RoundMode::CAST_NONE, rows * Ep);
            src = work;
        }
        int32_t rows8 = CeilDiv(rows, 8);
        uint64_t rsvdCnt = 0;
        for (int32_t k = 0; k < K; ++k) {
            LocalTensor<float> bcast = k == 0 ? maxBcast : columnBcast;
            if (twoLevel) {                                    // all rows at once, O(m) instructions
                TwoLevelArgmax(src, bcast, rows, rows8);
            } else {
                if (E <= 64) {                                 // one repeat per row
                    for (int32_t r0 = 0; r0 < rows; r0 += REPEAT_CHUNK) {
                        int32_t n = rows - r0 < REPEAT_CHUNK ? rows - r0 : REPEAT_CHUNK;
                        WholeReduceMax(pairs[2 * r0], src[r0 * Ep], E, n, 1, 1, Ep / 8,
                                       ReduceOrder::ORDER_VALUE_INDEX);
                    }
                } else {                                       // a row spans m repeats: per row
                    for (int32_t r = 0; r < rows; ++r) {
                        ReduceMax(pairs[2 * r], src[r * Ep], reduceTmp, E, true);
                    }
                }
                GatherMaskParams split(1, CeilDiv(2 * rows, 64), 8, 0);
                GatherMask(rowValues, pairs, 1, false, 0, split, rsvdCnt);                    // values
                GatherMask(rowArgmax.ReinterpretCast<uint32_t>(), pairs.ReinterpretCast<uint32_t>(), 2, false, 0,
                           split, rsvdCnt);                                                    // index bits
                Brcb(bcast, rowValues, rows8, BrcbRepeatParams(1, 8));
            }
            uint64_t lane[2] = {LaneBits(k % 8), 0};
            Copy(valuesPad[(k / 8) * 8], bcast, lane, rows8, CopyRepeatParams(Kp / 8, 1, Kp, 8));
            Brcb(argmaxBcast, rowArgmax, rows8, BrcbRepeatParams(m, 8 * m));
            if (8 * m <= 255) {
                Copy(indicesPad[(k / 8) * 8], argmaxBcast, lane, rows8, CopyRepeatParams(Kp / 8, m, Kp, 8 * m));
            } else {                                           // E > 1984: uint8 srcRepeatSize, per 8 rows
                for (int32_t g = 0; g < rows8; ++g) {
                    Copy(indicesPad[(k / 8) * 8 + g * 8 * Kp], argmaxBcast[g * 64 * m], lane, 1,
                         CopyRepeatParams(Kp / 8, m, Kp, 0));
                }
            }
            if (k + 1 < K) {
                KnockOutInt32(rows, rows8);
                Select(work, mask, negInf, src, SELMODE::VSEL_TENSOR_TENSOR_MODE, rows * Ep);
                src = work;
            }
        }
        // softmax over the K winners; column 0 is the row max
        for (int32_t c = 0; c < Kp / 8; ++c) {
            Sub(valuesPad[c * 8], valuesPad[c * 8], maxBcast, 64, rows8,
                BinaryRepeatParams(Kp / 8, Kp / 8, 1, Kp, Kp, 8));
        }
        if constexpr (FAST) {
            FastExp(valuesPad, valuesPad, expWork, rows * Kp);
        } else {
            Exp(valuesPad, valuesPad, rows * Kp);
        }
        for (int32_t r0 = 0; r0 < rows; r0 += REPEAT_CHUNK) {
            int32_t n = rows - r0 < REPEAT_CHUNK ? rows - r0 : REPEAT_CHUNK;
            WholeReduceSum(rowValues[r0], valuesPad[r0 * Kp], K, n, 1, 1, Kp / 8);
        }
        Brcb(columnBcast, rowValues, rows8, BrcbRepeatParams(1, 8));
        for (int32_t c = 0; c < Kp / 8; ++c) {
            Div(valuesPad[c * 8], valuesPad[c * 8], columnBcast, 64, rows8,
                BinaryRepeatParams(Kp / 8, Kp / 8, 1, Kp, Kp, 8));
        }
        scoresQueue.FreeTensor(slot);
    }

    // bit j of row i's chunk c: j == argmax - 64 c (int32 Compare, EQ only on A2)
    __aicore__ inline void KnockOutInt32(int32_t rows, int32_t rows8)
    {
        for (int32_t c = 1; c < m; ++c) {
            Adds(rowArgmax, rowArgmax, -64, rows);
            Brcb(argmaxBcast[c * 8], rowArgmax, rows8, BrcbRepeatParams(m, 8 * m));
        }
        for (int32_t r0 = 0; r0 < rows * m; r0 += REPEAT_CHUNK) {
            int32_t n = rows * m - r0 < REPEAT_CHUNK ? rows * m - r0 : REPEAT_CHUNK;
            Compare(mask[r0 * 8], iota, argmaxBcast[r0 * 8], CMPMODE::EQ, 64, n,
                    BinaryRepeatParams(1, 1, 0, 8, 0, 1));
        }
    }

    __aicore__ inline void CopyOut(int32_t j)
    {
        int32_t first, rows;
        TileRows(t, TileOf(t, blockIdx + j * blockNum), first, rows);
        LocalTensor<float> values = valuesQueue.AllocTensor<float>();
        LocalTensor<int32_t> indices = indicesQueue.AllocTensor<int32_t>();
        uint64_t rsvdCnt = 0;
        GatherMaskParams compact(1, CeilDiv(rows * Kp, 64), 8, 0);     // [rows, Kp] -> [rows * K]
        GatherMask(values, valuesPad, pattern, false, 0, compact, rsvdCnt);
        GatherMask(indices, indicesPad, pattern, false, 0, compact, rsvdCnt);
        valuesQueue.EnQue(values);
        indicesQueue.EnQue(indices);
        values = valuesQueue.DeQue<float>();
        indices = indicesQueue.DeQue<int32_t>();
        if (rows * K * sizeof(float) % BLOCK_BYTES == 0) {
            DataCopy(indicesGm[first * K], indices, rows * K);
            DataCopy(weightsGm[first * K], values, rows * K);
        } else {
            DataCopyPad(indicesGm[first * K], indices,
                        DataCopyExtParams{1, static_cast<uint32_t>(rows * K * sizeof(int32_t)), 0, 0, 0});
            DataCopyPad(weightsGm[first * K], values,
                        DataCopyExtParams{1, static_cast<uint32_t>(rows * K * sizeof(float)), 0, 0, 0});
        }
        valuesQueue.FreeTensor(values);
        indicesQueue.FreeTensor(indices);
    }

    TPipe* pipe;          // the entry's TPipe (避免TPipe在对象内创建和初始化.md)
    TQue<TPosition::VECIN, 2> scoresQueue;          // depth 2: the prefetch enqueues before the DeQue
    TQue<TPosition::VECOUT, 1> valuesQueue, indicesQueue;
    TBuf<TPosition::VECCALC> scoresWorkBuf, selectMaskBuf, rowResultsBuf, rowBcastBuf, topkPaddedBuf, argmaxWorkBuf;
    LocalTensor<float> work, negInf, pairs, rowValues, reduceTmp, maxBcast, columnBcast, valuesPad, expWork;
    LocalTensor<float> laneMax, laneChunk, laneIota;     // the two-level argmax (E > 64)
    LocalTensor<int32_t> rowArgmax, iota, argmaxBcast, indicesPad;
    LocalTensor<uint32_t> pattern;
    LocalTensor<uint8_t> mask;
    GlobalTensor<T> gateGm;
    GlobalTensor<int32_t> indicesGm;
    GlobalTensor<float> weightsGm;
    MoeGatingTiling t;
    int32_t E, K, T_, Ep, m, Kp, reduceTmpLen, blockIdx, blockNum, myTiles;
    bool twoLevel;
};

// DTYPE_GATE: float or half, the gate logits' type (an operator project generates the macro).
extern "C" __global__ __aicore__ void moe_gating_v3(GM_ADDR gate, GM_ADDR indices, GM_ADDR weights, GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(MoeGatingTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;                     // the entry owns the TPipe; the kernel class gets a pointer
    KernelMoeGatingV3<DTYPE_GATE, false> op;
    op.Init(gate, indices, weights, tilingData, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void moe_gating_v3_fast_exp(GM_ADDR gate, GM_ADDR indices, GM_ADDR weights,
                                                             GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(MoeGatingTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;                     // the entry owns the TPipe; the kernel class gets a pointer
    KernelMoeGatingV3<DTYPE_GATE, true> op;
    op.Init(gate, indices, weights, tilingData, &pipe);
    op.Process();
}
