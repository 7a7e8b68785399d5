// chips: ascend-910b2
// Decode attention v3, cube + vector in one kernel: the Ascend C beside attention_cv.py
// decode_attention_cv_kernel. out [B, Hq, D] = softmax(q Kᵀ / sqrt(D)) V per sequence and query head,
// q [B, Hq, D] half, caches [B, Lmax, Hkv, D] half (BSND), G = Hq / Hkv query heads per KV head (<= 16).
//
// KERNEL_TYPE_MIX_AIC_1_2: a task is (sequence b, KV head n); AI core group i runs tasks i, i + blockDim, ...
// S2 in chunks of CHUNK positions with the online-softmax update (IFA's C+V template); chunk c uses slot
// c % 2 of the group's workspace (S fp32 [G, CHUNK], P half [G, CHUNK], O fp32 [G, D]).
// AIC, chunk c: S_c = q_g K_cᵀ (K's rows, stride Hkv * D, copied Nd2Nz as Bᵀ: their NZ fractals are L0B's
// ZN without a transpose), Fixpipe fp32 into the S slot, CrossCoreSetFlag<2, PIPE_FIX>(0); then P·V of
// chunk c - 1: CrossCoreWaitFlag(1) (both AIVs wrote P), O = P V, Fixpipe into the O slot,
// CrossCoreSetFlag<2, PIPE_FIX>(2). AIVs (half the G rows each), chunk c: CrossCoreWaitFlag(0); per row
// Muls 1/sqrt(D), ReduceMax, m_new = max(m, max_c), corr = exp(m - m_new), Adds -m_new, Exp, ReduceSum,
// l = l corr + sum, Cast to half into the P slot; CrossCoreSetFlag<2, PIPE_MTE3>(1); then
// CrossCoreWaitFlag(2) and acc = acc corr + O of chunk c - 1. At the end acc / l, DataCopy out.
// The sequence lengths travel in the tiling struct.
//
// References (asc-devkit): examples/01_simd_cpp_api/00_introduction/03_fusion_operation/
// matmul_leakyrelu_basic_api; docs/zh/api/SIMD-API/基础API/同步控制/核间同步/CrossCoreSetFlag(ISASI).md,
// CrossCoreWaitFlag(ISASI).md; 矩阵计算（ISASI）/Mmad计算/Mmad.md; ops-transformer
// attention/incre_flash_attention (docs/IFA算子设计介绍.md: the C+V template, the online softmax).
#include "kernel_operator.h"
using namespace AscendC;

constexpr int32_t MAX_BATCH = 32;
constexpr int32_t MAX_ROWS = 8;          // query rows per AIV (G <= 16)
constexpr int32_t CHUNK = 128;           // cache positions per cube step (L0B: CHUNK x D halves)
constexpr float NEG_BIG = -3.0e38f;      // the running max before the first chunk (finite: no inf - inf)

struct DecodeCvTilingData {
    int32_t batch, kvHeads, group, headDim, maxLen;
    float scale;                         // 1 / sqrt(headDim)
    int32_t seqLens[MAX_BATCH];
};

__aicore__ inline int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }
__aicore__ inline int32_t Round16(int32_t a) { return (a + 15) / 16 * 16; }
__aicore__ inline int32_t Min(int32_t a, int32_t b) { return a < b ? a : b; }
__aicore__ inline int32_t Max32(int32_t a, int32_t b) { return a > b ? a : b; }

// The scalar unit's exp (what the simulator charges as a scalar exp): a short series, enough for the
// float32 of the softmax's running statistics (as attention.cpp's).
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

class KernelDecodeAttentionCv {
public:
    __aicore__ inline KernelDecodeAttentionCv() {}

    __aicore__ inline void Init(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR out, GM_ADDR workspace,
                                const DecodeCvTilingData& tiling, TPipe* pipe)
    {
        t = tiling;
        pipe_ = pipe;
        int32_t groups = GetBlockNum();
        qGm.SetGlobalBuffer((__gm__ half*)q);
        kGm.SetGlobalBuffer((__gm__ half*)k);
        vGm.SetGlobalBuffer((__gm__ half*)v);
        outGm.SetGlobalBuffer((__gm__ float*)out);
        // two slots per AI core group, whatever the context length
        int32_t sBytes = groups * 2 * t.group * CHUNK * sizeof(float);
        int32_t pBytes = groups * 2 * t.group * CHUNK * sizeof(half);
        sGm.SetGlobalBuffer((__gm__ float*)workspace);
        pGm.SetGlobalBuffer((__gm__ half*)(workspace + sBytes));
        oGm.SetGlobalBuffer((__gm__ float*)(workspace + sBytes + pBytes));
    }

    __aicore__ inline void Process()
    {
        int32_t tasks = t.batch * t.kvHeads;
        if ASCEND_IS_AIC {
            me = GetBlockIdx();
            int32_t D = t.headDim;
            pipe_->InitBuffer(q1Queue, 1, 16 * D * sizeof(half));
            pipe_->InitBuffer(kv1Queue, 1, Round16(CHUNK) * D * sizeof(half));
            pipe_->InitBuffer(p1Queue, 1, 16 * CHUNK * sizeof(half));
            pipe_->InitBuffer(q2Queue, 1, 16 * D * sizeof(half));
            pipe_->InitBuffer(p2Queue, 1, 16 * CHUNK * sizeof(half));
            pipe_->InitBuffer(kv2Queue, 1, CHUNK * D * sizeof(half));
            pipe_->InitBuffer(sQueue, 1, 16 * CHUNK * sizeof(float));
            pipe_->InitBuffer(oQueue, 1, 16 * D * sizeof(float));
            for (int32_t task = me; task < tasks; task += GetBlockNum()) {
                int32_t len = t.seqLens[task / t.kvHeads];
                int32_t chunks = CeilDiv(len, CHUNK);
                LocalTensor<half> qa = LoadQuery(task);     // q_g stays in L0A for the whole task
                for (int32_t c = 0; c < chunks; ++c) {
                    Scores(task, c, qa);
                    CrossCoreSetFlag<0x2, PIPE_FIX>(0);     // S_c is in GM: both AIVs may start
                    if (c > 0) {
                        Values(task, c - 1);                // its P is ready by now
                    }
                }
                Values(task, chunks - 1);
                q2Queue.FreeTensor(qa);
            }
        }
        if ASCEND_IS_AIV {
            me = GetBlockIdx() / 2;
            int32_t half_ = CeilDiv(t.group, 2);
            r0 = GetSubBlockIdx() * half_;
            rows = Max32(0, Min(t.group, r0 + half_) - r0);    // 0 for the second AIV when G = 1
            if (rows > 0) {
                pipe_->InitBuffer(sInQueue, 1, rows * CHUNK * sizeof(float));
                pipe_->InitBuffer(pOutQueue, 1, rows * CHUNK * sizeof(half));
                pipe_->InitBuffer(oInQueue, 1, rows * t.headDim * sizeof(float));
                pipe_->InitBuffer(outQueue, 1, rows * t.headDim * sizeof(float));
                pipe_->InitBuffer(accBuf, rows * t.headDim * sizeof(float));
                pipe_->InitBuffer(redBuf, 64);
                pipe_->InitBuffer(tmpBuf, 64 * sizeof(float) + CHUNK * sizeof(float));
                acc = accBuf.Get<float>();
                red = redBuf.Get<float>();
                tmp = tmpBuf.Get<float>();
            }
            for (int32_t task = me; task < tasks; task += GetBlockNum()) {
                int32_t len = t.seqLens[task / t.kvHeads];
                int32_t chunks = CeilDiv(len, CHUNK);
                for (int32_t r = 0; r < rows; ++r) {
                    m[r] = NEG_BIG;
                    l[r] = 0.0f;
                }
                for (int32_t c = 0; c < chunks; ++c) {
                    CrossCoreWaitFlag(0);                   // S_c is in GM
                    if (rows > 0) {
                        int32_t vl = Min(CHUNK, len - c * CHUNK);
                        CopyIn(c, vl);
                        Compute(c, vl);
                        CopyOut(c, vl);
                    }
                    CrossCoreSetFlag<0x2, PIPE_MTE3>(1);    // this AIV's rows of P_c are in GM
                    if (c > 0) {
                        Fold(c - 1);
                    }
                    for (int32_t r = 0; r < rows; ++r) {
                        corrPrev[r] = corr[r];
                    }
                }
                Fold(chunks - 1);
                if (rows > 0) {
                    Finish(task);
                }
            }
        }
    }

private:
    __aicore__ inline int32_t Slot(int32_t c) { return (2 * me + c % 2) * t.group; }   // first row of the slot

    __aicore__ inline LocalTensor<half> LoadQuery(int32_t task)
    {
        int32_t b = task / t.kvHeads, n = task % t.kvHeads;
        int32_t D = t.headDim;
        LocalTensor<half> a1 = q1Queue.AllocTensor<half>();
        DataCopy(a1, qGm[(b * t.kvHeads * t.group + n * t.group) * D], Nd2NzParams{1, static_cast<uint16_t>(t.group),
                 static_cast<uint32_t>(D), 0, static_cast<uint64_t>(D), 16, 1, 0});
        q1Queue.EnQue(a1);
        a1 = q1Queue.DeQue<half>();
        LocalTensor<half> a2 = q2Queue.AllocTensor<half>();
        int32_t k1 = D / 16;
        for (int32_t j = 0; j < k1; ++j) {
            LoadData(a2[j * 256], a1, LoadData2DParams{static_cast<uint16_t>(j), 1, 1, 0,
                     static_cast<uint16_t>(k1 - 1), false, 0});
        }
        q1Queue.FreeTensor(a1);
        q2Queue.EnQue(a2);
        return q2Queue.DeQue<half>();
    }

    // S_c = q_g K_cᵀ (G x vl, fp32) into the S slot
    __aicore__ inline void Scores(int32_t task, int32_t c, const LocalTensor<half>& qa)
    {
        int32_t b = task / t.kvHeads, n = task % t.kvHeads;
        int32_t len = t.seqLens[b];
        int32_t D = t.headDim;
        int32_t c0 = c * CHUNK;
        int32_t vl = Min(CHUNK, len - c0);
        int32_t n1 = CeilDiv(vl, 16);
        int32_t k1 = D / 16;
        LocalTensor<half> b1 = kv1Queue.AllocTensor<half>();
        DataCopy(b1, kGm[((b * t.maxLen + c0) * t.kvHeads + n) * D], Nd2NzParams{1, static_cast<uint16_t>(vl),
                 static_cast<uint32_t>(D), 0, static_cast<uint64_t>(t.kvHeads * D), static_cast<uint16_t>(Round16(vl)), 1, 0});
        kv1Queue.EnQue(b1);
        b1 = kv1Queue.DeQue<half>();
        LocalTensor<half> b2 = kv2Queue.AllocTensor<half>();
        for (int32_t i = 0; i < k1; ++i) {            // Kᵀ's fractals are ZN already: no transpose
            LoadData(b2[i * n1 * 256], b1, LoadData2DParams{static_cast<uint16_t>(i * n1), static_cast<uint8_t>(n1),
                     1, 0, 0, false, 0});
        }
        kv1Queue.FreeTensor(b1);
        kv2Queue.EnQue(b2);
        b2 = kv2Queue.DeQue<half>();
        LocalTensor<float> s = sQueue.AllocTensor<float>();
        Mmad(s, qa, b2, MmadParams{16, static_cast<uint16_t>(vl), static_cast<uint16_t>(D), 0, false, true});
        kv2Queue.FreeTensor(b2);
        sQueue.EnQue(s);
        s = sQueue.DeQue<float>();
        Fixpipe(sGm[Slot(c) * CHUNK], s, FixpipeParamsV220{static_cast<uint16_t>(vl), static_cast<uint16_t>(t.group),
                16, static_cast<uint32_t>(CHUNK), false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0});
        sQueue.FreeTensor(s);
    }

    // O_c = P_c V_c (G x D, fp32) into the O slot, once both AIVs wrote P_c
    __aicore__ inline void Values(int32_t task, int32_t c)
    {
        int32_t b = task / t.kvHeads, n = task % t.kvHeads;
        int32_t len = t.seqLens[b];
        int32_t D = t.headDim;
        int32_t n1 = D / 16;
        int32_t c0 = c * CHUNK;
        int32_t vl = Min(CHUNK, len - c0);
        int32_t k1 = CeilDiv(vl, 16);
        CrossCoreWaitFlag(1);                           // both AIVs wrote P_c
        LocalTensor<half> a1 = p1Queue.AllocTensor<half>();
        DataCopy(a1, pGm[Slot(c) * CHUNK], Nd2NzParams{1, static_cast<uint16_t>(t.group), static_cast<uint32_t>(vl), 0,
                 static_cast<uint64_t>(CHUNK), 16, 1, 0});
        LocalTensor<half> b1 = kv1Queue.AllocTensor<half>();
        DataCopy(b1, vGm[((b * t.maxLen + c0) * t.kvHeads + n) * D], Nd2NzParams{1, static_cast<uint16_t>(vl),
                 static_cast<uint32_t>(D), 0, static_cast<uint64_t>(t.kvHeads * D), static_cast<uint16_t>(Round16(vl)), 1, 0});
        p1Queue.EnQue(a1);
        kv1Queue.EnQue(b1);
        a1 = p1Queue.DeQue<half>();
        b1 = kv1Queue.DeQue<half>();
        LocalTensor<half> a2 = p2Queue.AllocTensor<half>();
        LocalTensor<half> b2 = kv2Queue.AllocTensor<half>();
        for (int32_t j = 0; j < k1; ++j) {
            LoadData(a2[j * 256], a1, LoadData2DParams{static_cast<uint16_t>(j), 1, 1, 0,
                     static_cast<uint16_t>(k1 - 1), false, 0});
        }
        for (int32_t i = 0; i < k1; ++i) {            // V [vl, D] is B [K, N]: each fractal transposed
            LoadData(b2[i * n1 * 256], b1, LoadData2DParams{static_cast<uint16_t>(i), static_cast<uint8_t>(n1),
                     static_cast<uint16_t>(k1), 0, 0, true, 0});
        }
        p1Queue.FreeTensor(a1);
        kv1Queue.FreeTensor(b1);
        p2Queue.EnQue(a2);
        kv2Queue.EnQue(b2);
        a2 = p2Queue.DeQue<half>();
        b2 = kv2Queue.DeQue<half>();
        LocalTensor<float> o = oQueue.AllocTensor<float>();
        Mmad(o, a2, b2, MmadParams{16, static_cast<uint16_t>(D), static_cast<uint16_t>(vl), 0, false, true});
        p2Queue.FreeTensor(a2);
        kv2Queue.FreeTensor(b2);
        oQueue.EnQue(o);
        o = oQueue.DeQue<float>();
        Fixpipe(oGm[Slot(c) * D], o, FixpipeParamsV220{static_cast<uint16_t>(D), static_cast<uint16_t>(t.group), 16,
                static_cast<uint32_t>(D), false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0});
        oQueue.FreeTensor(o);
        CrossCoreSetFlag<0x2, PIPE_FIX>(2);             // O_c is in GM
    }

    // S_c's rows of this AIV: from the first row's start to the last row's last score
    __aicore__ inline void CopyIn(int32_t c, int32_t vl)
    {
        int32_t span = (rows - 1) * CHUNK + vl;
        LocalTensor<float> x = sInQueue.AllocTensor<float>();
        DataCopyPad(x, sGm[(Slot(c) + r0) * CHUNK], DataCopyExtParams{1, static_cast<uint32_t>(span * sizeof(float)),
                    0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0});
        sInQueue.EnQue(x);
    }

    // P_c = exp(S_c / sqrt(D) - m_new) per row, the running max m, sum l and correction corr updated
    __aicore__ inline void Compute(int32_t c, int32_t vl)
    {
        LocalTensor<float> x = sInQueue.DeQue<float>();
        LocalTensor<half> y = pOutQueue.AllocTensor<half>();
        for (int32_t r = 0; r < rows; ++r) {
            LocalTensor<float> xr = x[r * CHUNK];
            Muls(xr, xr, t.scale, vl);
            ReduceMax(red, xr, tmp, vl, false);
            SetFlag<HardEvent::V_S>(EVENT_ID0);
            WaitFlag<HardEvent::V_S>(EVENT_ID0);
            float mChunk = red.GetValue(0);
            // scalar: online softmax: m_new, corr = exp(m_old - m_new)
            float mNew = m[r] > mChunk ? m[r] : mChunk;
            corr[r] = c > 0 ? ScalarExp(m[r] - mNew) : 0.0f;   // rescales the running sum and acc
            m[r] = mNew;
            Adds(xr, xr, -mNew, vl);
            Exp(xr, xr, vl);
            ReduceSum(red[8], xr, tmp, vl);
            SetFlag<HardEvent::V_S>(EVENT_ID0);
            WaitFlag<HardEvent::V_S>(EVENT_ID0);
            float sum = red.GetValue(8);
            SetFlag<HardEvent::S_V>(EVENT_ID0);      // V may overwrite red (the next row's ReduceMax)
            WaitFlag<HardEvent::S_V>(EVENT_ID0);
            // scalar: online softmax: l = l * corr + sum
            l[r] = l[r] * corr[r] + sum;
            Cast(y[r * CHUNK], xr, RoundMode::CAST_NONE, vl);
        }
        sInQueue.FreeTensor(x);
        pOutQueue.EnQue(y);
    }

    // P_c's rows of this AIV into the P slot
    __aicore__ inline void CopyOut(int32_t c, int32_t vl)
    {
        int32_t span = (rows - 1) * CHUNK + vl;
        LocalTensor<half> y = pOutQueue.DeQue<half>();
        DataCopyPad(pGm[(Slot(c) + r0) * CHUNK], y, DataCopyExtParams{1, static_cast<uint32_t>(span * sizeof(half)),
                    0, 0, 0});
        pOutQueue.FreeTensor(y);
    }

    // acc = O_c for the first chunk, else acc corr + O_c (the online-softmax rescale)
    __aicore__ inline void Fold(int32_t c)
    {
        CrossCoreWaitFlag(2);                           // the AIC wrote O_c
        if (rows == 0) {
            return;
        }
        int32_t D = t.headDim;
        LocalTensor<float> o = oInQueue.AllocTensor<float>();
        DataCopy(o, oGm[(Slot(c) + r0) * D], rows * D);
        oInQueue.EnQue(o);
        o = oInQueue.DeQue<float>();
        for (int32_t r = 0; r < rows; ++r) {
            if (c == 0) {
                Adds(acc[r * D], o[r * D], 0.0f, D);
            } else {
                Muls(acc[r * D], acc[r * D], corrPrev[r], D);
                Add(acc[r * D], acc[r * D], o[r * D], D);
            }
        }
        oInQueue.FreeTensor(o);
    }

    // the division at the end: out = acc / l
    __aicore__ inline void Finish(int32_t task)
    {
        int32_t b = task / t.kvHeads, n = task % t.kvHeads;
        int32_t D = t.headDim;
        LocalTensor<float> ot = outQueue.AllocTensor<float>();
        for (int32_t r = 0; r < rows; ++r) {
            // scalar: 1 / l
            float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
            Muls(ot[r * D], acc[r * D], inv, D);
        }
        outQueue.EnQue(ot);
        ot = outQueue.DeQue<float>();
        DataCopy(outGm[(b * t.kvHeads * t.group + n * t.group + r0) * D], ot, rows * D);
        outQueue.FreeTensor(ot);
    }

    DecodeCvTilingData t;
    TPipe* pipe_;
    int32_t me = 0, r0 = 0, rows = 0;
    float m[MAX_ROWS], l[MAX_ROWS], corr[MAX_ROWS], corrPrev[MAX_ROWS];
    TQue<TPosition::A1, 1> q1Queue, p1Queue;
    TQue<TPosition::B1, 1> kv1Queue;
    TQue<TPosition::A2, 1> q2Queue, p2Queue;
    TQue<TPosition::B2, 1> kv2Queue;
    TQue<TPosition::CO1, 1> sQueue, oQueue;
    TQue<TPosition::VECIN, 1> sInQueue, oInQueue;
    TQue<TPosition::VECOUT, 1> pOutQueue, outQueue;
    TBuf<TPosition::VECCALC> accBuf, redBuf, tmpBuf;
    LocalTensor<float> acc, red, tmp;
    GlobalTensor<half> qGm, kGm, vGm, pGm;
    GlobalTensor<float> outGm, sGm, oGm;
};

extern "C" __global__ __aicore__ void decode_attention_cv(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR out,
                                                          GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(DecodeCvTilingData);
    GET_TILING_DATA(tilingData, tiling);
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    TPipe pipe;
    KernelDecodeAttentionCv op;
    op.Init(q, k, v, out, workspace, tilingData, &pipe);
    op.Process();
}
