// chips: ascend-910b2 ascend-310p3
// The discrete chain: the Ascend C beside discrete.py (softmax_kernel, topk_sort_kernel,
// renormalise_kernel) — three launches, in this order, each a generic single-buffered kernel over
// tiles of at most 8 rows, every intermediate through HBM. Same calls, same order as the Python:
// npu_lab.kernels.listings checks it against a traced run.
//
//   softmax      rows at a stride Es = ceil16(E): WholeReduceMax (mask E) + GatherMask pattern 1, or
//                ReduceMax per row (E > 64); Brcb; level-0 Sub in 64-column chunks (src1 block
//                stride 0, repeat stride 1: the per-row broadcast); Exp; WholeReduceSum (mask E) or
//                ReduceSum per row; Brcb; Div; one store of exactly E per row.
//   topk         A2: rows at Ea = ceil32(E), padding -inf (DataCopyPad right padding + a one-time
//                Duplicate the copy's UB gap never overwrites); Sort32 every 32 columns; MrgSort 4
//                lists at a time (one MrgSort with a repeat per group when every list of the round has
//                one length and a row has 2 or 4k of them, else per row: a leftover single list moves
//                with Copy) until one is left; GatherMask with user patterns -> compact [rows, K]
//                values / indices (normal mode, a repeat per row and one reused 64-lane pattern, when
//                K <= 32 and Ea / 4 <= 255; else counter mode, the rows' patterns back to back).
//                310P (no Sort32 / MrgSort): K rounds of ReduceMax(calIndex) per row; the scalar unit
//                records the winner and writes -inf over it.
//   renormalise  K % 8 != 0 on A2: the rows one per 32-B block (DataCopyPad in and out), one
//                WholeReduceSum and one Div with a repeat per row. Else: the compact [rows, K] in one copy; per phase of rows (row mod 8 / gcd(K, 8)) a
//                bit-masked WholeReduceSum and, after a Brcb of the sums, a bit-masked Div, each with a
//                repeat per row of the phase.
//
// References (asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/): 数据搬运/DataCopy*.md,
// DataCopyPad*.md, Copy.md; 排序组合（ISASI）/Sort32.md, MrgSort.md; 比较与选择/GatherMask.md;
// 数据填充/Brcb.md, Duplicate.md, CreateVecIndex.md; 归约计算/ReduceMax.md, ReduceSum.md;
// docs/api/.../归约计算/WholeReduceMax.md, WholeReduceSum.md (CANN 8.x); 同步控制/核内同步/SetFlag-WaitFlag(ISASI).md.
#include "kernel_operator.h"
using namespace AscendC;

constexpr int32_t BLOCK_BYTES = 32;
constexpr int32_t MAX_REPEAT = 255;
// Sort32 / MrgSort exist on A2 (__NPU_ARCH__ == 2201), not on the 310P's AI core (__NPU_ARCH__ 2002).
constexpr bool HAS_SORT = (__NPU_ARCH__ == 2201);
// DataCopyPad exists on A2, not on the 310P (DataCopyPad.md)
constexpr bool HAS_PAD = (__NPU_ARCH__ == 2201);

struct RowTiling {        // discrete.py RowTiling: four int32
    int32_t N, E, K, rows;
};

__aicore__ inline int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }
__aicore__ inline int32_t Align(int32_t a, int32_t b) { return CeilDiv(a, b) * b; }
// rows p apart start on the same lane of their block: p = 8 / gcd(K, 8)
__aicore__ inline int32_t RowPhases(int32_t K) { return K % 8 == 0 ? 1 : (K % 4 == 0 ? 2 : (K % 2 == 0 ? 4 : 8)); }

__aicore__ inline float NegInf()
{
    union { uint32_t bits; float value; } inf = {0xFF800000};
    return inf.value;
}

// ReduceMax(calIndex) / ReduceSum sharedTmpBuffer elements for E floats (ReduceMax.md, ReduceSum.md)
__aicore__ inline int32_t ReduceTmpLen(int32_t count)
{
    int32_t first = CeilDiv(count, 64) * 2;
    int32_t start2 = Align(first, 8);
    int32_t out2 = CeilDiv(first, 64) * 2;
    int32_t maxLen = out2 <= 2 ? start2 + Align(out2, 8)
                               : start2 + Align(out2, 8) + Align(CeilDiv(out2, 64) * 2, 8);
    int32_t sumLen = Align(CeilDiv(count, 64), 8);
    return Align(maxLen > sumLen ? maxLen : sumLen, 8);
}

// ---- 1. Softmax ---------------------------------------------------------------------------------
template <typename T>
class KernelSoftmax {
public:
    __aicore__ inline KernelSoftmax() {}

    __aicore__ inline void Init(GM_ADDR logits, GM_ADDR probs, const RowTiling& tiling, TPipe* pipeIn)
    {
        pipe = pipeIn;
        t = tiling;
        E = tiling.E;
        R = tiling.rows;
        Es = Align(E, 16);                     // whole 32-B blocks for float and half rows
        R32 = Align(R, 32);
        logitsGm.SetGlobalBuffer((__gm__ T*)logits);
        probsGm.SetGlobalBuffer((__gm__ float*)probs);
        pipe->InitBuffer(xQueue, 1, R * Es * sizeof(float));
        pipe->InitBuffer(yQueue, 1, R * Es * sizeof(float));
        pipe->InitBuffer(scratchBuf, (3 * R32 + ReduceTmpLen(E)) * sizeof(float));
        pipe->InitBuffer(bcastBuf, Align(R, 8) * 8 * sizeof(float));
        LocalTensor<float> s = scratchBuf.Get<float>();
        pairs = s;
        rowValues = s[2 * R32];
        tmp = s[3 * R32];
        bcast = bcastBuf.Get<float>();
    }

    __aicore__ inline void Process()
    {
        for (int32_t tile = GetBlockIdx(); tile * R < t.N; tile += GetBlockNum()) {
            int32_t first = tile * R;
            int32_t r = t.N - first < R ? t.N - first : R;
            CopyIn(first, r);
            Compute(r);
            CopyOut(first, r);
        }
    }

private:
    __aicore__ inline void CopyIn(int32_t first, int32_t r)
    {
        LocalTensor<T> x = xQueue.AllocTensor<T>();
        int32_t rowBytes = E * sizeof(T);
        if (rowBytes % BLOCK_BYTES == 0) {
            if (Es == E || r == 1) {
                DataCopy(x, logitsGm[first * E], r * E);
            } else {
                DataCopy(x, logitsGm[first * E],
                         DataCopyParams{static_cast<uint16_t>(r), static_cast<uint16_t>(rowBytes / BLOCK_BYTES), 0,
                                        static_cast<uint16_t>((Es - E) * sizeof(T) / BLOCK_BYTES)});
            }
        } else {
            int32_t perBlock = BLOCK_BYTES / sizeof(T);
            uint32_t gap = r == 1 ? 0 : (Es - Align(E, perBlock)) * sizeof(T) / BLOCK_BYTES;
            DataCopyPad(x, logitsGm[first * E],
                        DataCopyExtParams{static_cast<uint16_t>(r), static_cast<uint32_t>(rowBytes), 0, gap, 0},
                        DataCopyPadExtParams<T>{false, 0, 0, 0});
        }
        xQueue.EnQue(x);
    }

    __aicore__ inline void Compute(int32_t r)
    {
        LocalTensor<T> xIn = xQueue.DeQue<T>();
        LocalTensor<float> y = yQueue.AllocTensor<float>();
        LocalTensor<float> src = xIn.template ReinterpretCast<float>();
        if constexpr (sizeof(T) == 2) {        // widen first: all compute is float32
            Cast(y, xIn, RoundMode::CAST_NONE, r * Es);
            src = y;
        }
        uint64_t rsvdCnt = 0;
        if (E <= 64) {                          // row max: one repeat per row
            for (int32_t r0 = 0; r0 < r; r0 += MAX_REPEAT) {
                int32_t n = r - r0 < MAX_REPEAT ? r - r0 : MAX_REPEAT;
                WholeReduceMax(pairs[2 * r0], src[r0 * Es], E, n, 1, 1, Es / 8, ReduceOrder::ORDER_VALUE_INDEX);
            }
            GatherMask(rowValues, pairs, 1, false, 0, GatherMaskParams(1, CeilDiv(2 * r, 64), 8, 0), rsvdCnt);
        } else {
            for (int32_t i = 0; i < r; ++i) {
                ReduceMax(rowValues[i], src[i * Es], tmp, E);
            }
        }
        Brcb(bcast, rowValues, CeilDiv(r, 8), BrcbRepeatParams(1, 8));
        if (Es / 8 <= 255) {  // x - max, the max broadcast by block stride 0
            for (int32_t c = 0; c < Es; c += 64) {
                int32_t lanes = Es - c < 64 ? Es - c : 64;
                Sub(y[c], src[c], bcast, lanes, r, BinaryRepeatParams(1, 1, 0, Es / 8, Es / 8, 1));
            }
        } else {  // rows over 255 blocks: the uint8 repeat stride cannot reach the next row
            for (int32_t i = 0; i < r; ++i) {
                for (int32_t c0 = 0; c0 < Es / 64; c0 += 255) {
                    int32_t n = Es / 64 - c0 < 255 ? Es / 64 - c0 : 255;
                    Sub(y[i * Es + 64 * c0], src[i * Es + 64 * c0], bcast[8 * i], 64, n,
                        BinaryRepeatParams(1, 1, 0, 8, 8, 0));
                }
                if (Es % 64 != 0) {
                    Sub(y[i * Es + Es / 64 * 64], src[i * Es + Es / 64 * 64], bcast[8 * i], Es % 64, 1,
                        BinaryRepeatParams(1, 1, 0, 8, 8, 0));
                }
            }
        }
        Exp(y, y, r * Es);                      // all E exponentials
        if (E <= 64) {
            WholeReduceSum(rowValues, y, E, r, 1, 1, Es / 8);
        } else {
            for (int32_t i = 0; i < r; ++i) {
                ReduceSum(rowValues[i], y[i * Es], tmp, E);
            }
        }
        Brcb(bcast, rowValues, CeilDiv(r, 8), BrcbRepeatParams(1, 8));
        if (Es / 8 <= 255) {
            for (int32_t c = 0; c < Es; c += 64) {
                int32_t lanes = Es - c < 64 ? Es - c : 64;
                Div(y[c], y[c], bcast, lanes, r, BinaryRepeatParams(1, 1, 0, Es / 8, Es / 8, 1));
            }
        } else {  // rows over 255 blocks: the uint8 repeat stride cannot reach the next row
            for (int32_t i = 0; i < r; ++i) {
                for (int32_t c0 = 0; c0 < Es / 64; c0 += 255) {
                    int32_t n = Es / 64 - c0 < 255 ? Es / 64 - c0 : 255;
                    Div(y[i * Es + 64 * c0], y[i * Es + 64 * c0], bcast[8 * i], 64, n,
                        BinaryRepeatParams(1, 1, 0, 8, 8, 0));
                }
                if (Es % 64 != 0) {
                    Div(y[i * Es + Es / 64 * 64], y[i * Es + Es / 64 * 64], bcast[8 * i], Es % 64, 1,
                        BinaryRepeatParams(1, 1, 0, 8, 8, 0));
                }
            }
        }
        xQueue.FreeTensor(xIn);
        yQueue.EnQue(y);
    }

    __aicore__ inline void CopyOut(int32_t first, int32_t r)
    {
        LocalTensor<float> y = yQueue.DeQue<float>();
        if (Es == E) {                          // rows are contiguous in UB too
            DataCopy(probsGm[first * E], y, r * E);
        } else if (E * sizeof(float) % BLOCK_BYTES == 0) {
            DataCopy(probsGm[first * E], y,
                     DataCopyParams{static_cast<uint16_t>(r), static_cast<uint16_t>(E * sizeof(float) / BLOCK_BYTES),
                                    static_cast<uint16_t>((Es - E) * sizeof(float) / BLOCK_BYTES), 0});
        } else {                                // exactly E floats per row reach GM
            DataCopyPad(probsGm[first * E], y,
                        DataCopyExtParams{static_cast<uint16_t>(r), static_cast<uint32_t>(E * sizeof(float)),
                                          static_cast<uint32_t>((Es - Align(E, 8)) * sizeof(float) / BLOCK_BYTES), 0, 0});
        }
        yQueue.FreeTensor(y);
    }

    TPipe* pipe;          // the entry's TPipe (避免TPipe在对象内创建和初始化.md)
    TQue<TPosition::VECIN, 1> xQueue;
    TQue<TPosition::VECOUT, 1> yQueue;
    TBuf<TPosition::VECCALC> scratchBuf, bcastBuf;
    LocalTensor<float> pairs, rowValues, tmp, bcast;
    GlobalTensor<T> logitsGm;
    GlobalTensor<float> probsGm;
    RowTiling t;
    int32_t E, R, Es, R32;
};

// ---- 2. TopK ------------------------------------------------------------------------------------
class KernelTopK {
public:
    __aicore__ inline KernelTopK() {}

    __aicore__ inline void Init(GM_ADDR probs, GM_ADDR values, GM_ADDR indices, const RowTiling& tiling, TPipe* pipeIn)
    {
        pipe = pipeIn;
        t = tiling;
        E = tiling.E;
        K = tiling.K;
        R = tiling.rows;
        Ea = Align(E, 32);                     // Sort32 sorts 32 columns a repeat
        probsGm.SetGlobalBuffer((__gm__ float*)probs);
        valuesGm.SetGlobalBuffer((__gm__ float*)values);
        indicesGm.SetGlobalBuffer((__gm__ int32_t*)indices);
        if constexpr (HAS_SORT) {
            InitSort();
        } else {
            InitArgmax();
        }
    }

    __aicore__ inline void Process()
    {
        if constexpr (!HAS_SORT) {
            // S_MTE2 and MTE3_S stay set from one tile to the next: ids held (AllocEventID.md)
            eventSToMte2 = GetTPipePtr()->AllocEventID<HardEvent::S_MTE2>();
            eventMte3ToS = GetTPipePtr()->AllocEventID<HardEvent::MTE3_S>();
        }
        for (int32_t tile = GetBlockIdx(), j = 0; tile * R < t.N; tile += GetBlockNum(), ++j) {
            int32_t first = tile * R;
            int32_t r = t.N - first < R ? t.N - first : R;
            if constexpr (HAS_SORT) {
                CopyIn(first, r, j);
                Compute(r);
                CopyOut(first, r);
            } else {
                CopyIn(first, r, j);
                ComputeArgmax(r, j);
                CopyOut(first, r);
                SetFlag<HardEvent::MTE3_S>(eventMte3ToS);   // the outputs may be rewritten
            }
        }
        if constexpr (!HAS_SORT) {
            WaitFlag<HardEvent::S_MTE2>(eventSToMte2);  // pair the last SetFlags
            WaitFlag<HardEvent::MTE3_S>(eventMte3ToS);
            GetTPipePtr()->ReleaseEventID<HardEvent::S_MTE2>(eventSToMte2);
            GetTPipePtr()->ReleaseEventID<HardEvent::MTE3_S>(eventMte3ToS);
        }
    }

private:
    TEventID eventSToMte2, eventMte3ToS;                // argmax path: held across tiles

    __aicore__ inline void InitSort()
    {
        uint32_t pairBytes = 2 * R * Ea * sizeof(float);
        pipe->InitBuffer(sortedABuf, pairBytes);         // first: Sort32's dst is 256-B aligned
        pipe->InitBuffer(sortedBBuf, pairBytes);
        pipe->InitBuffer(xQueue, 1, R * Ea * sizeof(float));
        pipe->InitBuffer(iotaBuf, R * Ea * sizeof(int32_t));
        uint32_t words = CeilDiv(2 * R * Ea, 32);
        pipe->InitBuffer(valuePatternBuf, Align(words * sizeof(uint32_t), BLOCK_BYTES));
        pipe->InitBuffer(indexPatternBuf, Align(words * sizeof(uint32_t), BLOCK_BYTES));
        pipe->InitBuffer(valuesQueue, 1, Align(R * K * sizeof(float), BLOCK_BYTES));
        pipe->InitBuffer(indicesQueue, 1, Align(R * K * sizeof(int32_t), BLOCK_BYTES));
        sortedA = sortedABuf.Get<float>();
        sortedB = sortedBBuf.Get<float>();
        iota = iotaBuf.Get<int32_t>();
        valuePattern = valuePatternBuf.Get<uint32_t>();
        indexPattern = indexPatternBuf.Get<uint32_t>();
        // once: columns E..Ea-1 of the input slot = -inf (the copy's UB gap never overwrites them)
        LocalTensor<float> x = xQueue.AllocTensor<float>();
        Duplicate(x, NegInf(), R * Ea);
        xQueue.FreeTensor(x);
        // the expert index of every column: row 0 by CreateVecIndex, the other rows copies of it
        CreateVecIndex(iota, (int32_t)0, Ea);
        if (R > 1 && Ea / 8 <= MAX_REPEAT) {
            for (int32_t off = 0; off < Ea; off += 64) {
                Copy(iota[Ea + off], iota[off], Ea - off < 64 ? Ea - off : 64, R - 1,
                     CopyRepeatParams(1, 1, Ea / 8, 0));
            }
        } else {                                        // rows too far apart for a uint8 stride
            for (int32_t i = 1; i < R; ++i) {
                CreateVecIndex(iota[i * Ea], (int32_t)0, Ea);
            }
        }
        perRowGather = 2 * K <= 64 && Ea / 4 <= MAX_REPEAT;
        if (perRowGather) {
            // one 64-lane pattern per kind, reused by every row: even / odd lanes of the first 2K
            uint64_t even = 0;
            for (int32_t l = 0; l < 2 * K; l += 2) {
                even |= 1ULL << l;
            }
            for (int32_t w = 0; w < 2; ++w) {
                valuePattern.SetValue(w, static_cast<uint32_t>(even >> (32 * w)));
                indexPattern.SetValue(w, static_cast<uint32_t>((even << 1) >> (32 * w)));
            }
        } else {
            // counter mode over rows of 2 * Ea floats: even / odd lanes of the first 2K of every row
            Duplicate(valuePattern, (uint32_t)0, words);
            Duplicate(indexPattern, (uint32_t)0, words);
            TEventID eventVToS = GetTPipePtr()->FetchEventID(HardEvent::V_S);   // waited at once
            SetFlag<HardEvent::V_S>(eventVToS);
            WaitFlag<HardEvent::V_S>(eventVToS);
            for (int32_t i = 0; i < R; ++i) {
                for (int32_t w = 0; w < CeilDiv(2 * K, 32); ++w) {
                    uint32_t even = 0, odd = 0;
                    for (int32_t l = 32 * w; l < 32 * w + 32 && l < 2 * K; ++l) {
                        if (l % 2 == 0) even |= 1U << (l - 32 * w); else odd |= 1U << (l - 32 * w);
                    }
                    valuePattern.SetValue(i * Ea / 16 + w, even);
                    indexPattern.SetValue(i * Ea / 16 + w, odd);
                }
            }
        }
        TEventID eventSToV = GetTPipePtr()->FetchEventID(HardEvent::S_V);
        SetFlag<HardEvent::S_V>(eventSToV);
        WaitFlag<HardEvent::S_V>(eventSToV);
    }

    __aicore__ inline void InitArgmax()
    {
        pipe->InitBuffer(xQueue, 1, R * Ea * sizeof(float));
        pipe->InitBuffer(valuesQueue, 1, Align(R * K * sizeof(float), BLOCK_BYTES));
        pipe->InitBuffer(indicesQueue, 1, Align(R * K * sizeof(int32_t), BLOCK_BYTES));
        pipe->InitBuffer(scratchBuf, (8 + ReduceTmpLen(E)) * sizeof(float));
        pair = scratchBuf.Get<float>();
        tmp = pair[8];
    }

    __aicore__ inline void CopyIn(int32_t first, int32_t r, int32_t j)
    {
        LocalTensor<float> x = xQueue.AllocTensor<float>();
        if constexpr (!HAS_SORT) {
            if (j > 0) {
                WaitFlag<HardEvent::S_MTE2>(eventSToMte2);  // S's -inf writes are done
            }
        }
        int32_t rowBytes = E * sizeof(float);
        if (rowBytes % BLOCK_BYTES == 0) {
            if (Ea == E || r == 1) {
                DataCopy(x, probsGm[first * E], r * E);
            } else {                                     // a UB gap after every row
                DataCopy(x, probsGm[first * E],
                         DataCopyParams{static_cast<uint16_t>(r), static_cast<uint16_t>(rowBytes / BLOCK_BYTES), 0,
                                        static_cast<uint16_t>((Ea - E) * sizeof(float) / BLOCK_BYTES)});
            }
        } else {                                         // right padding -inf up to the block
            uint32_t gap = r == 1 ? 0 : (Ea - Align(E, 8)) * sizeof(float) / BLOCK_BYTES;
            DataCopyPad(x, probsGm[first * E],
                        DataCopyExtParams{static_cast<uint16_t>(r), static_cast<uint32_t>(rowBytes), 0, gap, 0},
                        DataCopyPadExtParams<float>{true, 0, static_cast<uint8_t>(Align(E, 8) - E), NegInf()});
        }
        xQueue.EnQue(x);
    }

    __aicore__ inline void Compute(int32_t r)
    {
        LocalTensor<float> x = xQueue.DeQue<float>();
        Sort32(sortedA, x, iota.ReinterpretCast<uint32_t>(), r * Ea / 32);
        xQueue.FreeTensor(x);
        // MrgSort every row's sorted lists of 32 pairs, 4 at a time, ping-pong between A and B
        int32_t lists = Ea / 32, len = 32;
        LocalTensor<float> src = sortedA, dst = sortedB;
        while (lists > 1) {
            if (lists * len == Ea && (lists % 4 == 0 || lists == 2)) {
                // lists of one length, 4 | lists or 2 (as 4 halves): one MrgSort, a repeat per group
                int32_t each = lists % 4 == 0 ? len : len / 2;
                int32_t repeats = r * lists * len / (4 * each);
                for (int32_t rep0 = 0; rep0 < repeats; rep0 += MAX_REPEAT) {
                    int32_t n = repeats - rep0 < MAX_REPEAT ? repeats - rep0 : MAX_REPEAT;
                    int32_t at = 8 * each * rep0;
                    uint16_t lengths[4] = {static_cast<uint16_t>(each), static_cast<uint16_t>(each),
                                           static_cast<uint16_t>(each), static_cast<uint16_t>(each)};
                    MrgSort(dst[at], MrgSortSrcList<float>(src[at], src[at + 2 * each], src[at + 4 * each],
                                                           src[at + 6 * each]),
                            MrgSort4Info(lengths, false, 15, static_cast<uint16_t>(n)));
                }
            } else {
            for (int32_t i = 0; i < r; ++i) {
                for (int32_t g = 0; g < lists; g += 4) {
                    int32_t at = 2 * i * Ea + 2 * g * len;
                    int32_t n = lists - g < 4 ? lists - g : 4;
                    int32_t lastLen = (g + n == lists) ? Ea - (lists - 1) * len : len;   // the row's last list may be short
                    if (n == 1) {                        // nothing to merge with: move it along
                        Copy(dst[at], src[at], 64, 2 * lastLen / 64, CopyRepeatParams(1, 1, 8, 8));
                    } else {
                        uint16_t lengths[4] = {static_cast<uint16_t>(len), static_cast<uint16_t>(n > 2 ? len : lastLen),
                                               static_cast<uint16_t>(n > 3 ? len : (n == 3 ? lastLen : 0)),
                                               static_cast<uint16_t>(n == 4 ? lastLen : 0)};
                        MrgSort(dst[at], MrgSortSrcList<float>(src[at], src[at + 2 * len], src[at + 4 * len],
                                                               src[at + 6 * len]),
                                MrgSort4Info(lengths, false, n == 2 ? 3 : (n == 3 ? 7 : 15), 1));
                    }
                }
            }
            }
            lists = CeilDiv(lists, 4);
            len *= 4;
            LocalTensor<float> swap = src; src = dst; dst = swap;
        }
        result = src;
    }

    // 310P: K rounds of ReduceMax per row; the scalar unit keeps the winner and knocks it out
    __aicore__ inline void ComputeArgmax(int32_t r, int32_t j)
    {
        LocalTensor<float> x = xQueue.DeQue<float>();
        outValues = valuesQueue.AllocTensor<float>();
        outIndices = indicesQueue.AllocTensor<int32_t>();
        if (j > 0) {
            WaitFlag<HardEvent::MTE3_S>(eventMte3ToS);   // the last tile's outputs are out
        }
        TEventID eventVToS = GetTPipePtr()->FetchEventID(HardEvent::V_S);   // waited at once
        TEventID eventSToV = GetTPipePtr()->FetchEventID(HardEvent::S_V);
        for (int32_t row = 0; row < r; ++row) {
            for (int32_t k = 0; k < K; ++k) {
                ReduceMax(pair, x[row * Ea], tmp, E, true);
                SetFlag<HardEvent::V_S>(eventVToS);
                WaitFlag<HardEvent::V_S>(eventVToS);
                float best = pair.GetValue(0);
                uint32_t at = pair.ReinterpretCast<uint32_t>().GetValue(1);
                outValues.SetValue(row * K + k, best);
                outIndices.SetValue(row * K + k, static_cast<int32_t>(at));
                x.SetValue(row * Ea + at, NegInf());
                SetFlag<HardEvent::S_V>(eventSToV);
                WaitFlag<HardEvent::S_V>(eventSToV);
            }
        }
        SetFlag<HardEvent::S_MTE2>(eventSToMte2);
        xQueue.FreeTensor(x);
        TEventID eventSToMte3 = GetTPipePtr()->FetchEventID(HardEvent::S_MTE3);
        SetFlag<HardEvent::S_MTE3>(eventSToMte3);        // results written by S
        WaitFlag<HardEvent::S_MTE3>(eventSToMte3);
    }

    __aicore__ inline void CopyOut(int32_t first, int32_t r)
    {
        if constexpr (HAS_SORT) {                        // the first K pairs of every row, compact
            outValues = valuesQueue.AllocTensor<float>();
            outIndices = indicesQueue.AllocTensor<int32_t>();
            uint64_t rsvdCnt = 0;
            if (perRowGather) {                          // normal mode: a repeat per row, one pattern
                GatherMaskParams perRow(1, static_cast<uint8_t>(r), static_cast<uint16_t>(2 * Ea / 8), 0);
                GatherMask(outValues, result, valuePattern, false, 0, perRow, rsvdCnt);
                GatherMask(outIndices.ReinterpretCast<uint32_t>(), result.ReinterpretCast<uint32_t>(), indexPattern,
                           false, 0, perRow, rsvdCnt);
            } else {                                     // counter mode: the rows' patterns back to back
                GatherMaskParams counter(1, 1, 8, 8);
                GatherMask(outValues, result, valuePattern, true, 2 * r * Ea, counter, rsvdCnt);
                GatherMask(outIndices.ReinterpretCast<uint32_t>(), result.ReinterpretCast<uint32_t>(), indexPattern,
                           true, 2 * r * Ea, counter, rsvdCnt);
            }
        }
        valuesQueue.EnQue(outValues);
        indicesQueue.EnQue(outIndices);
        LocalTensor<float> v = valuesQueue.DeQue<float>();
        LocalTensor<int32_t> i = indicesQueue.DeQue<int32_t>();
        if (r * K * sizeof(float) % BLOCK_BYTES == 0) {
            DataCopy(valuesGm[first * K], v, r * K);
            DataCopy(indicesGm[first * K], i, r * K);
        } else {
            DataCopyPad(valuesGm[first * K], v, DataCopyExtParams{1, static_cast<uint32_t>(r * K * sizeof(float)), 0, 0, 0});
            DataCopyPad(indicesGm[first * K], i, DataCopyExtParams{1, static_cast<uint32_t>(r * K * sizeof(int32_t)), 0, 0, 0});
        }
        valuesQueue.FreeTensor(v);
        indicesQueue.FreeTensor(i);
    }

    TPipe* pipe;          // the entry's TPipe (避免TPipe在对象内创建和初始化.md)
    TQue<TPosition::VECIN, 1> xQueue;
    TQue<TPosition::VECOUT, 1> valuesQueue, indicesQueue;
    TBuf<TPosition::VECCALC> sortedABuf, sortedBBuf, iotaBuf, valuePatternBuf, indexPatternBuf, scratchBuf;
    LocalTensor<float> sortedA, sortedB, result, pair, tmp, outValues;
    LocalTensor<int32_t> iota, outIndices;
    LocalTensor<uint32_t> valuePattern, indexPattern;
    GlobalTensor<float> probsGm, valuesGm;
    GlobalTensor<int32_t> indicesGm;
    RowTiling t;
    int32_t E, K, R, Ea;
    bool perRowGather = false;
};

// ---- 3. Renormalise -----------------------------------------------------------------------------
class KernelRenormalise {
public:
    __aicore__ inline KernelRenormalise() {}

    __aicore__ inline void Init(GM_ADDR values, GM_ADDR weights, const RowTiling& tiling, TPipe* pipeIn)
    {
        pipe = pipeIn;
        t = tiling;
        K = tiling.K;                          // <= 56: a row stays inside one repeat
        R = tiling.rows;
        valuesGm.SetGlobalBuffer((__gm__ float*)values);
        weightsGm.SetGlobalBuffer((__gm__ float*)weights);
        Kp = Align(K, 8);
        padded = K % 8 != 0 && HAS_PAD;          // rows one per 32-B block (DataCopyPad)
        int32_t slot = Align(R * K, 64) > R * Kp ? Align(R * K, 64) : R * Kp;
        pipe->InitBuffer(xQueue, 1, slot * sizeof(float));
        pipe->InitBuffer(yQueue, 1, slot * sizeof(float));
        pipe->InitBuffer(rowSumBuf, Align(R, 8) * sizeof(float));
        pipe->InitBuffer(bcastBuf, Align(R, 8) * 8 * sizeof(float));
        rowSum = rowSumBuf.Get<float>();
        bcast = bcastBuf.Get<float>();
    }

    __aicore__ inline void Process()
    {
        for (int32_t tile = GetBlockIdx(); tile * R < t.N; tile += GetBlockNum()) {
            int32_t first = tile * R;
            int32_t r = t.N - first < R ? t.N - first : R;
            CopyIn(first, r);
            Compute(r);
            CopyOut(first, r);
        }
    }

private:
    __aicore__ inline void CopyIn(int32_t first, int32_t r)
    {
        LocalTensor<float> x = xQueue.AllocTensor<float>();
        if (padded) {
            DataCopyPad(x, valuesGm[first * K],
                        DataCopyExtParams{static_cast<uint16_t>(r), static_cast<uint32_t>(K * sizeof(float)), 0, 0, 0},
                        DataCopyPadExtParams<float>{false, 0, 0, 0});
        } else if (r * K * sizeof(float) % BLOCK_BYTES == 0) {
            DataCopy(x, valuesGm[first * K], r * K);
        } else {
            DataCopyPad(x, valuesGm[first * K], DataCopyExtParams{1, static_cast<uint32_t>(r * K * sizeof(float)), 0, 0, 0},
                        DataCopyPadExtParams<float>{false, 0, 0, 0});
        }
        xQueue.EnQue(x);
    }

    __aicore__ inline void Compute(int32_t r)
    {
        LocalTensor<float> x = xQueue.DeQue<float>();
        LocalTensor<float> y = yQueue.AllocTensor<float>();
        if (padded) {                                   // a repeat per row, one row per block
            WholeReduceSum(rowSum, x, K, r, 1, 1, Kp / 8);
            Brcb(bcast, rowSum, CeilDiv(r, 8), BrcbRepeatParams(1, 8));
            Div(y, x, bcast, K, r, BinaryRepeatParams(1, 1, 0, Kp / 8, Kp / 8, 1));
            xQueue.FreeTensor(x);
            yQueue.EnQue(y);
            return;
        }
        // rows start at lane (row * K) % 8 of their block: the rows of one phase (row = ph mod p,
        // p = 8 / gcd(K, 8)) share a bit mask and lie p * K / 8 whole blocks apart: one
        // instruction per phase, a repeat per row
        int32_t p = RowPhases(K);
        for (int32_t ph = 0; ph < p && ph < r; ++ph) {
            int32_t base = ph * K / 8, lane = ph * K % 8;
            uint64_t bits[2] = {((1ULL << K) - 1) << lane, 0};
            WholeReduceSum(rowSum[ph], x[8 * base], bits, CeilDiv(r - ph, p), p, 1, p * K / 8);
        }
        Brcb(bcast, rowSum, CeilDiv(r, 8), BrcbRepeatParams(1, 8));
        for (int32_t ph = 0; ph < p && ph < r; ++ph) {
            int32_t base = ph * K / 8, lane = ph * K % 8;
            uint64_t bits[2] = {((1ULL << K) - 1) << lane, 0};
            uint8_t stride = static_cast<uint8_t>(p * K / 8);
            Div(y[8 * base], x[8 * base], bcast[8 * ph], bits, CeilDiv(r - ph, p),
                BinaryRepeatParams(1, 1, 0, stride, stride, static_cast<uint8_t>(p)));
        }
        xQueue.FreeTensor(x);
        yQueue.EnQue(y);
    }

    __aicore__ inline void CopyOut(int32_t first, int32_t r)
    {
        LocalTensor<float> y = yQueue.DeQue<float>();
        if (padded) {                                   // exactly K floats of every row reach GM
            DataCopyPad(weightsGm[first * K], y,
                        DataCopyExtParams{static_cast<uint16_t>(r), static_cast<uint32_t>(K * sizeof(float)), 0, 0, 0});
        } else if (r * K * sizeof(float) % BLOCK_BYTES == 0) {
            DataCopy(weightsGm[first * K], y, r * K);
        } else {
            DataCopyPad(weightsGm[first * K], y, DataCopyExtParams{1, static_cast<uint32_t>(r * K * sizeof(float)), 0, 0, 0});
        }
        yQueue.FreeTensor(y);
    }

    TPipe* pipe;          // the entry's TPipe (避免TPipe在对象内创建和初始化.md)
    TQue<TPosition::VECIN, 1> xQueue;
    TQue<TPosition::VECOUT, 1> yQueue;
    TBuf<TPosition::VECCALC> rowSumBuf, bcastBuf;
    LocalTensor<float> rowSum, bcast;
    GlobalTensor<float> valuesGm, weightsGm;
    RowTiling t;
    int32_t K, R, Kp;
    bool padded;
};

// The three launches, in order. DTYPE_LOGITS: float or half (an operator project generates it).
extern "C" __global__ __aicore__ void softmax(GM_ADDR logits, GM_ADDR probs, GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(RowTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;                     // the entry owns the TPipe; the kernel class gets a pointer
    KernelSoftmax<DTYPE_LOGITS> op;
    op.Init(logits, probs, tilingData, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void topk(GM_ADDR probs, GM_ADDR values, GM_ADDR indices, GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(RowTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;                     // the entry owns the TPipe; the kernel class gets a pointer
    KernelTopK op;
    op.Init(probs, values, indices, tilingData, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void renormalise(GM_ADDR values, GM_ADDR weights, GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(RowTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;                     // the entry owns the TPipe; the kernel class gets a pointer
    KernelRenormalise op;
    op.Init(values, weights, tilingData, &pipe);
    op.Process();
}
