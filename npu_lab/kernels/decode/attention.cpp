// chips: ascend-910b2
// decode_attention v1 / v2 / v4 / v5 and flash_decode_combine: the Ascend C beside attention.py
// (decode_attention_kernel) and combine.py (flash_decode_combine_kernel).
//
// A task is one (b, n2, S2 piece): the G query heads of KV head n2 against its cached positions,
// built like IncreFlashAttention's all-vector template (ops-transformer attention/
// incre_flash_attention/docs/IFA算子设计介绍.md). The tiling decides the version: v1 = one chunk
// holding the whole S2, one buffer; v2 = chunks, two buffers per queue, online softmax; v5 = v2 over
// int8 K/V dequantised on load (T = int8_t, antiquant rows per KV head); v4 = v2
// with S2 split over cores (splits > 1) and a second launch, flash_decode_combine.
// Pipes: MTE2 (q, K, V through VECIN queues) -> V (scores, Exp, P.V) <-> S (running max / sum:
// GetValue after V_S, S_V before V reuses the bytes) -> MTE3 (out through a VECOUT queue; the
// log-sum-exp of a piece by SetValue, S_MTE3 before the store, MTE3_S before the next SetValue).
//
// References (asc-devkit docs/zh/api/SIMD-API/基础API/): Memory矢量计算/基础算术/Mul.md (level-0,
// BinaryRepeatParams), 归约计算/WholeReduceSum.md, ReduceMax.md, ReduceSum.md, 数据填充/Brcb.md,
// 类型转换/Cast.md, 同步控制/核内同步/SetFlag-WaitFlag(ISASI).md, 资源管理/TPipe/FetchEventID.md,
// 数据搬运/DataCopy（GM与UB切片数据搬运）.md.
#include "kernel_operator.h"
using namespace AscendC;

constexpr int32_t MAX_BATCH = 256;
constexpr int32_t ROWS = 248;            // rows per level-0 instruction: <= 255 repeats, a multiple of 8
constexpr float NEG_BIG = -3.0e38f;      // an empty piece's log-sum-exp: exp(NEG_BIG - m) = 0

// The host's tiling struct (tiling.py DecodeTiling), then the sequence lengths (IFA's
// actualSeqLengths: a host IntArray, so the tiling carries it).
struct DecodeTiling {
    int32_t batch, kvHeads, group, headDim, maxLen, chunk, splits, splitLen, tasks, tasksPerBlock, kvItemsize,
        numBuffers;
    int32_t pageSize, maxPages;   // paged KV: positions per page, block-table columns (0, 0: contiguous)
    int32_t seqLens[MAX_BATCH];
};

// The scalar unit's exp / log (what the simulator charges as scalar ops): a short series,
// enough for the float32 of the softmax's running statistics.
__aicore__ inline float ScalarExp(float x)
{
    if (x < -87.0f) return 0.0f;
    int32_t k = static_cast<int32_t>(x * 1.44269504f - (x < 0.0f ? 0.5f : -0.5f));
    float r = x - k * 0.693147181f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.166666667f + r * (0.0416666667f + r * 0.00833333333f))));
    union { float f; int32_t i; } u;
    u.i = (k + 127) << 23;
    return p * u.f;
}

__aicore__ inline float ScalarLog(float x)
{
    union { float f; int32_t i; } u;
    u.f = x;
    int32_t e = ((u.i >> 23) & 0xff) - 127;
    u.i = (u.i & 0x007fffff) | 0x3f800000;                     // mantissa in [1, 2)
    float y = (u.f - 1.0f) / (u.f + 1.0f), y2 = y * y;
    return e * 0.693147181f + 2.0f * y * (1.0f + y2 * (0.333333333f + y2 * (0.2f + y2 * 0.142857143f)));
}

// 1/sqrt(x) by Newton's iteration on the scalar unit (x = head_dim, once per launch)
__aicore__ inline float InvSqrt(float x)
{
    float y = 0.1f;
    for (int32_t i = 0; i < 30; i++) y = y * (1.5f - 0.5f * x * y * y);
    return y;
}

// SPLIT: v4's first step (FlashDecode), which also writes each piece's log-sum-exp
template <typename T, bool SPLIT>
class KernelDecodeAttention {
public:
    __aicore__ inline KernelDecodeAttention() {}

    __aicore__ inline void Init(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR antiquant, GM_ADDR out, GM_ADDR lse,
                                GM_ADDR blockTable, const DecodeTiling* tiling, TPipe* pipeIn)
    {
        t = tiling;
        pipe = pipeIn;
        G = t->group;
        D = t->headDim;
        c = t->chunk;
        qGm.SetGlobalBuffer((__gm__ float*)q);
        kGm.SetGlobalBuffer((__gm__ T*)k);
        vGm.SetGlobalBuffer((__gm__ T*)v);
        outGm.SetGlobalBuffer((__gm__ float*)out);
        lseGm.SetGlobalBuffer((__gm__ float*)lse);
        antiGm.SetGlobalBuffer((__gm__ float*)antiquant);
        tableGm.SetGlobalBuffer((__gm__ int32_t*)blockTable);     // paged KV only (else nullptr)
        pipe->InitBuffer(qQueue, 1, G * D * sizeof(float));
        pipe->InitBuffer(outQueue, 1, G * D * sizeof(float));
        pipe->InitBuffer(kQueue, t->numBuffers, c * D * sizeof(T));
        pipe->InitBuffer(vQueue, t->numBuffers, c * D * sizeof(T));
        pipe->InitBuffer(accBuf, G * D * sizeof(float));
        pipe->InitBuffer(prodBuf, c * D * sizeof(float));
        pipe->InitBuffer(scoresBuf, c * sizeof(float));
        pipe->InitBuffer(partBuf, c * sizeof(float));
        pipe->InitBuffer(pbBuf, c * 32);
        pipe->InitBuffer(redBuf, 256);
        pipe->InitBuffer(tmpBuf, TmpBytes(c));
        pipe->InitBuffer(lseBuf, (G + 7) / 8 * 32 > 32 ? (G + 7) / 8 * 32 : 32);
        if constexpr (sizeof(T) != 4) {
            pipe->InitBuffer(kfBuf, c * D * sizeof(float));
            pipe->InitBuffer(vfBuf, c * D * sizeof(float));
        }
        if constexpr (sizeof(T) == 1) {                           // v5: int8 -> half -> float
            pipe->InitBuffer(halfBuf, c * D * sizeof(half));
            pipe->InitBuffer(antiQueue, 1, 4 * D * sizeof(float));
        }
        if (t->pageSize > 0) {                                    // paged KV: one block-table row in UB
            pipe->InitBuffer(tableBuf, (t->maxPages * sizeof(int32_t) + 31) / 32 * 32);
            table = tableBuf.Get<int32_t>();
        }
    }

    __aicore__ inline void Process()
    {
        int32_t first = GetBlockIdx() * t->tasksPerBlock;
        int32_t last = first + t->tasksPerBlock < t->tasks ? first + t->tasksPerBlock : t->tasks;
        for (int32_t task = first; task < last; task++) {
            Task(task, task > first);
        }
    }

private:
    __aicore__ static inline uint32_t TmpBytes(int32_t n)
    {
        uint32_t bytes = ((n + 63) / 64 * 2 + 7) / 8 * 32;        // ReduceMax.md's formula, float
        return bytes > 256 ? bytes : 256;
    }

    // MTE2: chunk ci's K and V rows of KV head n2 into the queues.
    __aicore__ inline void CopyIn(int32_t row, const DataCopyParams& params)
    {
        LocalTensor<T> kt = kQueue.AllocTensor<T>();
        LocalTensor<T> vt = vQueue.AllocTensor<T>();
        DataCopy(kt, kGm[row], params);
        DataCopy(vt, vGm[row], params);
        kQueue.EnQue(kt);
        vQueue.EnQue(vt);
    }

    // V (and S for the running statistics): scores, online softmax, P.V for each query head.
    __aicore__ inline void Compute(const LocalTensor<float>& q, int32_t ci, int32_t s)
    {
        LocalTensor<float> acc = accBuf.Get<float>(), prod = prodBuf.Get<float>();
        LocalTensor<float> scores = scoresBuf.Get<float>(), part = partBuf.Get<float>();
        LocalTensor<float> pb = pbBuf.Get<float>(), red = redBuf.Get<float>(), tmp = tmpBuf.Get<float>();
        int32_t s8 = (s + 7) / 8 * 8;
        LocalTensor<T> kt = kQueue.DeQue<T>();
        LocalTensor<T> vt = vQueue.DeQue<T>();
        LocalTensor<float> kf, vf;
        if constexpr (sizeof(T) == 1) {
            // antiquant (IFA算子设计介绍.md: C = A * (B + offset) x scale), per channel: the KV
            // head's offset / scale row for every position (src1 repeat stride 0)
            kf = kfBuf.Get<float>();
            vf = vfBuf.Get<float>();
            LocalTensor<half> h = halfBuf.Get<half>();
            Dequant(kf, kt, h, 0, s);
            Dequant(vf, vt, h, 2 * D, s);
        } else {
            if constexpr (sizeof(T) == 2) {
                kf = kfBuf.Get<float>();
                vf = vfBuf.Get<float>();
                Cast(kf, kt, RoundMode::CAST_NONE, s * D);
                Cast(vf, vt, RoundMode::CAST_NONE, s * D);
            } else {
                kf = kt;                                        // T is float: no copy
                vf = vt;
            }
        }
        float corrPrev = 0.0f;
        for (int32_t g = 0; g < G; g++) {
            if (g > 0) {
                FoldIntoAcc(acc, prod, g - 1, ci, corrPrev);   // head g-1's P·V, before g reuses prod
            }
            if (s8 > s) {
                Duplicate(scores[s8 - 8], 0.0f, 8);           // Brcb reads whole groups of 8
            }
            for (int32_t r0 = 0; r0 < s; r0 += ROWS) {
                int32_t n = s - r0 < ROWS ? s - r0 : ROWS;
                for (int32_t sl = 0; sl < D / 64; sl++) {
                    // q's 64 values for every row: src1 repeat stride 0
                    Mul(prod[r0 * D + sl * 64], kf[r0 * D + sl * 64], q[g * D + sl * 64], 64, n,
                        BinaryRepeatParams(1, 1, 1, D / 8, D / 8, 0));
                    if (sl == 0) {
                        WholeReduceSum(scores[r0], prod[r0 * D + sl * 64], 64, n, 1, 1, D / 8);
                    } else {
                        WholeReduceSum(part[r0], prod[r0 * D + sl * 64], 64, n, 1, 1, D / 8);
                        Add(scores[r0], scores[r0], part[r0], n);
                    }
                }
            }
            Muls(scores, scores, scale, s);
            ReduceMax(red, scores, tmp, s, false);
            TEventID eventVToS = GetTPipePtr()->FetchEventID(HardEvent::V_S);
            SetFlag<HardEvent::V_S>(eventVToS);
            WaitFlag<HardEvent::V_S>(eventVToS);
            float mChunk = red.GetValue(0);
            // scalar: online softmax: m_new, corr = exp(m_old - m_new)
            {
                float mNew = m[g] > mChunk ? m[g] : mChunk;
                corr = ci == 0 ? 0.0f : ScalarExp(m[g] - mNew);
                m[g] = mNew;
            }
            Adds(scores, scores, -m[g], s);
            Exp(scores, scores, s);
            ReduceSum(red[8], scores, tmp, s);
            eventVToS = GetTPipePtr()->FetchEventID(HardEvent::V_S);
            SetFlag<HardEvent::V_S>(eventVToS);
            WaitFlag<HardEvent::V_S>(eventVToS);
            float pSum = red.GetValue(8);
            TEventID eventSToV = GetTPipePtr()->FetchEventID(HardEvent::S_V);
            SetFlag<HardEvent::S_V>(eventSToV);
            WaitFlag<HardEvent::S_V>(eventSToV);
            // scalar: online softmax: l = l * corr + sum
            l[g] = l[g] * corr + pSum;
            for (int32_t r0 = 0; r0 < s8; r0 += 8 * 255) {
                int32_t reps = (s8 - r0) / 8 < 255 ? (s8 - r0) / 8 : 255;
                Brcb(pb[r0 * 8], scores[r0], reps, BrcbRepeatParams(1, 8));
            }
            for (int32_t r0 = 0; r0 < s; r0 += ROWS) {
                int32_t n = s - r0 < ROWS ? s - r0 : ROWS;
                for (int32_t sl = 0; sl < D / 64; sl++) {
                    // row r's p block for all 8 blocks of the row: src1 block stride 0
                    Mul(prod[r0 * D + sl * 64], vf[r0 * D + sl * 64], pb[r0 * 8], 64, n,
                        BinaryRepeatParams(1, 1, 0, D / 8, D / 8, 1));
                }
            }
            for (int32_t rows = s; rows > 1; rows -= rows / 2) {   // sum of the rows, a tree of Adds
                Add(prod, prod, prod[(rows - rows / 2) * D], rows / 2 * D);
            }
            corrPrev = corr;
        }
        FoldIntoAcc(acc, prod, G - 1, ci, corrPrev);
        kQueue.FreeTensor(kt);
        vQueue.FreeTensor(vt);
    }

    // the online-softmax update of head g's accumulator: acc = acc * corr + P·V (P·V alone first)
    __aicore__ inline void FoldIntoAcc(const LocalTensor<float>& acc, const LocalTensor<float>& prod, int32_t g,
                                       int32_t ci, float c)
    {
        if (ci == 0) {
            Adds(acc[g * D], prod, 0.0f, D);
        } else {
            Muls(acc[g * D], acc[g * D], c, D);
            Add(acc[g * D], acc[g * D], prod, D);
        }
    }

    // int8 rows -> float: two Casts, then + offset and x scale per channel (rows of 64 columns)
    __aicore__ inline void Dequant(const LocalTensor<float>& dst, const LocalTensor<T>& src, const LocalTensor<half>& h,
                                   int32_t base, int32_t s)
    {
        Cast(h, src, RoundMode::CAST_NONE, s * D);
        Cast(dst, h, RoundMode::CAST_NONE, s * D);
        for (int32_t r0 = 0; r0 < s; r0 += ROWS) {
            int32_t n = s - r0 < ROWS ? s - r0 : ROWS;
            for (int32_t sl = 0; sl < D / 64; sl++) {
                Add(dst[r0 * D + sl * 64], dst[r0 * D + sl * 64], anti[base + D + sl * 64], 64, n,
                    BinaryRepeatParams(1, 1, 1, D / 8, D / 8, 0));
                Mul(dst[r0 * D + sl * 64], dst[r0 * D + sl * 64], anti[base + sl * 64], 64, n,
                    BinaryRepeatParams(1, 1, 1, D / 8, D / 8, 0));
            }
        }
    }

    // MTE3: out = acc / l of the G heads (and, in v4, the piece's log-sum-exp).
    __aicore__ inline void CopyOut(int32_t task, int32_t nPos)
    {
        LocalTensor<float> acc = accBuf.Get<float>();
        LocalTensor<float> o = outQueue.AllocTensor<float>();
        for (int32_t g = 0; g < G; g++) {
            // scalar: 1 / l
            float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;          // 0 for an empty FlashDecode piece
            Muls(o[g * D], acc[g * D], inv, D);
        }
        outQueue.EnQue(o);
        o = outQueue.DeQue<float>();
        DataCopy(outGm[task * G * D], o, G * D);
        outQueue.FreeTensor(o);
        if constexpr (SPLIT) {                                     // v4: the piece's log-sum-exp
            LocalTensor<float> lse = lseBuf.Get<float>();
            for (int32_t g = 0; g < G; g++) {
                // scalar: lse = m + ln(l)
                float val = l[g] > 0.0f ? m[g] + ScalarLog(l[g]) : NEG_BIG;
                lse.SetValue(g, val);
            }
            TEventID eventSToMte3 = GetTPipePtr()->FetchEventID(HardEvent::S_MTE3);
            SetFlag<HardEvent::S_MTE3>(eventSToMte3);
            WaitFlag<HardEvent::S_MTE3>(eventSToMte3);
            DataCopyPad(lseGm[task * G], lse, DataCopyExtParams{1, static_cast<uint32_t>(G * sizeof(float)), 0, 0, 0});
            TEventID eventMte3ToS = GetTPipePtr()->FetchEventID(HardEvent::MTE3_S);
            SetFlag<HardEvent::MTE3_S>(eventMte3ToS);
            WaitFlag<HardEvent::MTE3_S>(eventMte3ToS);
        }
    }

    __aicore__ inline void Task(int32_t task, bool notFirst)
    {
        int32_t bn = task / t->splits, sp = task % t->splits;
        int32_t b = bn / t->kvHeads, n2 = bn % t->kvHeads;
        int32_t lo = sp * t->splitLen;
        int32_t hi = lo + t->splitLen < t->seqLens[b] ? lo + t->splitLen : t->seqLens[b];
        int32_t nPos = hi > lo ? hi - lo : 0;
        if (t->pageSize > 0) {                                     // this sequence's page ids, for S
            if (notFirst) {
                TEventID eventSToMte2 = GetTPipePtr()->FetchEventID(HardEvent::S_MTE2);
                SetFlag<HardEvent::S_MTE2>(eventSToMte2);          // S is done with the last row
                WaitFlag<HardEvent::S_MTE2>(eventSToMte2);
            }
            DataCopyPad(table, tableGm[b * t->maxPages],
                        DataCopyExtParams{1, static_cast<uint32_t>(t->maxPages * sizeof(int32_t)), 0, 0, 0},
                        DataCopyPadExtParams<int32_t>{false, 0, 0, 0});
            TEventID eventMte2ToS = GetTPipePtr()->FetchEventID(HardEvent::MTE2_S);
            SetFlag<HardEvent::MTE2_S>(eventMte2ToS);
            WaitFlag<HardEvent::MTE2_S>(eventMte2ToS);
        }
        LocalTensor<float> q = qQueue.AllocTensor<float>();
        DataCopy(q, qGm[(b * G * t->kvHeads + n2 * G) * D], G * D);
        qQueue.EnQue(q);
        q = qQueue.DeQue<float>();
        Duplicate(accBuf.Get<float>(), 0.0f, G * D);               // an empty piece's output is 0
        if constexpr (sizeof(T) == 1) {
            anti = antiQueue.AllocTensor<float>();
            for (int32_t i = 0; i < 4; i++) {                      // k_scale, k_offset, v_scale, v_offset
                DataCopy(anti[i * D], antiGm[(i * t->kvHeads + n2) * D], D);
            }
            antiQueue.EnQue(anti);
            anti = antiQueue.DeQue<float>();
        }
        for (int32_t g = 0; g < G; g++) {
            m[g] = NEG_BIG;
            l[g] = 0.0f;
        }
        for (int32_t ci = 0; lo + ci * c < lo + nPos; ci++) {
            int32_t p0 = lo + ci * c;
            int32_t s = lo + nPos - p0 < c ? lo + nPos - p0 : c;
            int32_t row;
            if (t->pageSize > 0) {                                 // a chunk never crosses a page
                int32_t page = table.GetValue(p0 / t->pageSize);
                row = ((page * t->pageSize + p0 % t->pageSize) * t->kvHeads + n2) * D;
            } else {
                row = ((b * t->maxLen + p0) * t->kvHeads + n2) * D;
            }
            // s rows of D elements, (N2 - 1) * D elements apart in GM (DataCopyParams in 32-byte blocks)
            DataCopyParams params{static_cast<uint16_t>(s), static_cast<uint16_t>(D * sizeof(T) / 32),
                                  static_cast<uint16_t>((t->kvHeads - 1) * D * sizeof(T) / 32), 0};
            CopyIn(row, params);
            Compute(q, ci, s);
        }
        qQueue.FreeTensor(q);
        if constexpr (sizeof(T) == 1) {
            antiQueue.FreeTensor(anti);
        }
        CopyOut(task, nPos);
    }

    TPipe* pipe;
    TQue<TPosition::VECIN, 1> qQueue, kQueue, vQueue;
    TQue<TPosition::VECOUT, 1> outQueue;
    TBuf<TPosition::VECCALC> accBuf, prodBuf, scoresBuf, partBuf, pbBuf, redBuf, tmpBuf, lseBuf, kfBuf, vfBuf, halfBuf,
        tableBuf;
    LocalTensor<int32_t> table;
    GlobalTensor<int32_t> tableGm;
    TQue<TPosition::VECIN, 1> antiQueue;
    LocalTensor<float> anti;
    GlobalTensor<float> qGm, outGm, lseGm, antiGm;
    GlobalTensor<T> kGm, vGm;
    const DecodeTiling* t;
    int32_t G, D, c;
    float scale = 0.0f, corr = 0.0f;
    float m[64], l[64];                                            // per query head of the group
public:
    __aicore__ inline void SetScale(float s) { scale = s; }
};

extern "C" __global__ __aicore__ void decode_attention(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR antiquant,
                                                       GM_ADDR out, GM_ADDR lse, GM_ADDR blockTable,
                                                       GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(DecodeTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelDecodeAttention<DTYPE_K, false> op;            // float/half K/V (v1, v2) or int8 (v5)
    op.Init(q, k, v, antiquant, out, lse, blockTable, &tilingData, &pipe);
    op.SetScale(InvSqrt(static_cast<float>(tilingData.headDim)));   // 1/sqrt(D), once per launch
    op.Process();
}

// v4 step 1: the same tasks over S2 pieces; out and lse are the GM workspace of step 2
extern "C" __global__ __aicore__ void decode_attention_split(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR antiquant,
                                                             GM_ADDR out, GM_ADDR lse, GM_ADDR blockTable,
                                                             GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(DecodeTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelDecodeAttention<DTYPE_K, true> op;
    op.Init(q, k, v, antiquant, out, lse, blockTable, &tilingData, &pipe);
    op.SetScale(InvSqrt(static_cast<float>(tilingData.headDim)));
    op.Process();
}

// ---- FlashDecode step 2 (combine.py) ------------------------------------------------------------
struct CombineTiling {
    int32_t groups, splits, group, headDim, groupsPerBlock;
};

class KernelFlashDecodeCombine {
public:
    __aicore__ inline KernelFlashDecodeCombine() {}

    __aicore__ inline void Init(GM_ADDR o, GM_ADDR lse, GM_ADDR out, const CombineTiling* tiling, TPipe* pipeIn)
    {
        t = tiling;
        pipe = pipeIn;
        oGm.SetGlobalBuffer((__gm__ float*)o);
        lseGm.SetGlobalBuffer((__gm__ float*)lse);
        outGm.SetGlobalBuffer((__gm__ float*)out);
        pipe->InitBuffer(lseBuf, (t->splits * t->group + 7) / 8 * 32);
        pipe->InitBuffer(scaledBuf, t->headDim * sizeof(float));
        pipe->InitBuffer(piecesQueue, 2, t->splits * t->headDim * sizeof(float));
        pipe->InitBuffer(outQueue, 1, t->group * t->headDim * sizeof(float));
    }

    __aicore__ inline void Process()
    {
        int32_t sp = t->splits, G = t->group, D = t->headDim;
        LocalTensor<float> lse = lseBuf.Get<float>(), scaled = scaledBuf.Get<float>();
        int32_t first = GetBlockIdx() * t->groupsPerBlock;
        int32_t last = first + t->groupsPerBlock < t->groups ? first + t->groupsPerBlock : t->groups;
        for (int32_t grp = first; grp < last; grp++) {
            if (grp > first) {
                TEventID eventSToMte2 = GetTPipePtr()->FetchEventID(HardEvent::S_MTE2);   // S read the last lse
                SetFlag<HardEvent::S_MTE2>(eventSToMte2);
                WaitFlag<HardEvent::S_MTE2>(eventSToMte2);
            }
            DataCopyPad(lse, lseGm[grp * sp * G], DataCopyExtParams{1, static_cast<uint32_t>(sp * G * sizeof(float)), 0, 0, 0},
                        DataCopyPadExtParams<float>{false, 0, 0, 0});
            TEventID eventMte2ToS = GetTPipePtr()->FetchEventID(HardEvent::MTE2_S);
            SetFlag<HardEvent::MTE2_S>(eventMte2ToS);
            WaitFlag<HardEvent::MTE2_S>(eventMte2ToS);
            for (int32_t i = 0; i < sp * G; i++) {
                vals[i] = lse.GetValue(i);
            }
            LocalTensor<float> o = outQueue.AllocTensor<float>();
            for (int32_t g = 0; g < G; g++) {
                // scalar: FlashDecode weights: exp(lse_i - max) / sum
                Weights(g);
                LocalTensor<float> pieces = piecesQueue.AllocTensor<float>();
                DataCopy(pieces, oGm[(grp * sp * G + g) * D],
                         DataCopyParams{static_cast<uint16_t>(sp), static_cast<uint16_t>(D * sizeof(float) / 32),
                                        static_cast<uint16_t>((G - 1) * D * sizeof(float) / 32), 0});
                piecesQueue.EnQue(pieces);
                pieces = piecesQueue.DeQue<float>();
                Muls(o[g * D], pieces, w[0], D);
                for (int32_t i = 1; i < sp; i++) {
                    Muls(scaled, pieces[i * D], w[i], D);
                    Add(o[g * D], o[g * D], scaled, D);
                }
                piecesQueue.FreeTensor(pieces);
            }
            outQueue.EnQue(o);
            o = outQueue.DeQue<float>();
            DataCopy(outGm[grp * G * D], o, G * D);
            outQueue.FreeTensor(o);
        }
    }

private:
    __aicore__ inline void Weights(int32_t g)
    {
        float mx = NEG_BIG, total = 0.0f;
        for (int32_t i = 0; i < t->splits; i++) mx = vals[i * t->group + g] > mx ? vals[i * t->group + g] : mx;
        for (int32_t i = 0; i < t->splits; i++) {
            w[i] = ScalarExp(vals[i * t->group + g] - mx);
            total += w[i];
        }
        for (int32_t i = 0; i < t->splits; i++) w[i] = w[i] / total;
    }

    TPipe* pipe;
    TBuf<TPosition::VECCALC> lseBuf, scaledBuf;
    TQue<TPosition::VECIN, 1> piecesQueue;
    TQue<TPosition::VECOUT, 1> outQueue;
    GlobalTensor<float> oGm, lseGm, outGm;
    const CombineTiling* t;
    float vals[512], w[64];
};

extern "C" __global__ __aicore__ void flash_decode_combine(GM_ADDR o, GM_ADDR lse, GM_ADDR out, GM_ADDR workspace,
                                                           GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(CombineTiling);
    // a second entry in this file reads another struct: name it (GET_TILING_DATA_WITH_STRUCT.md)
    GET_TILING_DATA_WITH_STRUCT(CombineTiling, tilingData, tiling);
    TPipe pipe;
    KernelFlashDecodeCombine op;
    op.Init(o, lse, out, &tilingData, &pipe);
    op.Process();
}
