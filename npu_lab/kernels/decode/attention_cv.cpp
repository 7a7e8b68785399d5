// chips: ascend-910b2
// Decode attention v3, cube + vector in one kernel: the Ascend C beside attention_cv.py
// decode_attention_cv_kernel. out [B, Hq, D] = softmax(q Kᵀ / sqrt(D)) V per sequence and query head,
// q [B, Hq, D] half, caches [B, Lmax, Hkv, D] half (BSND), G = Hq / Hkv query heads per KV head (<= 16).
//
// KERNEL_TYPE_MIX_AIC_1_2: a task is (sequence b, KV head n); AI core group i runs tasks i, i + blockDim, ...
// AIC: S = q_g Kᵀ in chunks of CHUNK positions (K's rows, stride Hkv * D, copied Nd2Nz as Bᵀ: their NZ
// fractals are L0B's ZN without a transpose), Fixpipe fp32 into the S workspace;
// CrossCoreSetFlag<2, PIPE_FIX>(0). AIVs (half the G rows each): CrossCoreWaitFlag(0), per row Muls 1/sqrt(D),
// ReduceMax, Adds -max, Exp, ReduceSum, Muls 1/sum, Cast to half into the P workspace;
// CrossCoreSetFlag<2, PIPE_MTE3>(1). AIC: CrossCoreWaitFlag(1) (both AIVs), then O = P V with K = L in
// chunks accumulating in L0C, Fixpipe fp32 out. The sequence lengths travel in the tiling struct.
//
// References (asc-devkit): examples/01_simd_cpp_api/00_introduction/03_fusion_operation/
// matmul_leakyrelu_basic_api; docs/zh/api/SIMD-API/基础API/同步控制/核间同步/CrossCoreSetFlag(ISASI).md,
// CrossCoreWaitFlag(ISASI).md; 矩阵计算（ISASI）/Mmad计算/Mmad.md; ops-transformer attention/incre_flash_attention.
#include "kernel_operator.h"
using namespace AscendC;

constexpr int32_t MAX_BATCH = 32;
constexpr int32_t CHUNK = 128;           // cache positions per cube step (L0B: CHUNK x D halves)

struct DecodeCvTilingData {
    int32_t batch, kvHeads, group, headDim, maxLen;
    float scale;                         // 1 / sqrt(headDim)
    int32_t seqLens[MAX_BATCH];
};

__aicore__ inline int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }
__aicore__ inline int32_t Round16(int32_t a) { return (a + 15) / 16 * 16; }
__aicore__ inline int32_t Min(int32_t a, int32_t b) { return a < b ? a : b; }
__aicore__ inline int32_t Max32(int32_t a, int32_t b) { return a > b ? a : b; }

class KernelDecodeAttentionCv {
public:
    __aicore__ inline KernelDecodeAttentionCv() {}

    __aicore__ inline void Init(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR out, GM_ADDR workspace,
                                const DecodeCvTilingData& tiling, TPipe* pipe)
    {
        t = tiling;
        pipe_ = pipe;
        int32_t tasks = t.batch * t.kvHeads;
        qGm.SetGlobalBuffer((__gm__ half*)q);
        kGm.SetGlobalBuffer((__gm__ half*)k);
        vGm.SetGlobalBuffer((__gm__ half*)v);
        outGm.SetGlobalBuffer((__gm__ float*)out);
        sGm.SetGlobalBuffer((__gm__ float*)workspace);                                   // S: [tasks, G, Lmax] fp32
        pGm.SetGlobalBuffer((__gm__ half*)(workspace + tasks * t.group * t.maxLen * sizeof(float)));  // P: half
    }

    __aicore__ inline void Process()
    {
        int32_t tasks = t.batch * t.kvHeads;
        if ASCEND_IS_AIC {
            int32_t wide = Max32(t.headDim, CHUNK);
            pipe_->InitBuffer(a1Queue, 1, 16 * wide * sizeof(half));
            pipe_->InitBuffer(b1Queue, 1, Round16(CHUNK) * t.headDim * sizeof(half));
            pipe_->InitBuffer(a2Queue, 1, 16 * wide * sizeof(half));
            pipe_->InitBuffer(b2Queue, 1, CHUNK * t.headDim * sizeof(half));
            pipe_->InitBuffer(cQueue, 1, 16 * wide * sizeof(float));
            for (int32_t task = GetBlockIdx(); task < tasks; task += GetBlockNum()) {
                Scores(task);
                CrossCoreSetFlag<0x2, PIPE_FIX>(0);     // S is in GM: both AIVs may start
                CrossCoreWaitFlag(1);                   // both AIVs wrote P
                Values(task);
            }
        }
        if ASCEND_IS_AIV {
            int32_t lpad = CeilDiv(t.maxLen, 8) * 8;
            pipe_->InitBuffer(inQueue, 1, lpad * sizeof(float));
            pipe_->InitBuffer(outQueue, 1, CeilDiv(t.maxLen, 16) * 32);
            pipe_->InitBuffer(redBuf, 64);
            pipe_->InitBuffer(tmpBuf, 64 * sizeof(float) + lpad * sizeof(float));
            red = redBuf.Get<float>();
            tmp = tmpBuf.Get<float>();
            int32_t half_ = CeilDiv(t.group, 2);
            int32_t sub = GetSubBlockIdx();
            for (int32_t task = GetBlockIdx() / 2; task < tasks; task += GetBlockNum()) {
                int32_t len = t.seqLens[task / t.kvHeads];
                CrossCoreWaitFlag(0);
                for (int32_t g = sub * half_; g < Min(t.group, (sub + 1) * half_); ++g) {
                    int32_t at = (task * t.group + g) * t.maxLen;
                    CopyIn(at, len);
                    Compute(len);
                    CopyOut(at, len);
                }
                CrossCoreSetFlag<0x2, PIPE_MTE3>(1);    // this AIV's rows of P are in GM
            }
        }
    }

private:
    // S = q_g Kᵀ for one task, chunk by chunk, into the S workspace
    __aicore__ inline void Scores(int32_t task)
    {
        int32_t b = task / t.kvHeads, n = task % t.kvHeads;
        int32_t len = t.seqLens[b];
        int32_t D = t.headDim;
        int32_t row0 = (b * t.kvHeads * t.group + n * t.group) * D;
        LocalTensor<half> a1 = a1Queue.AllocTensor<half>();
        DataCopy(a1, qGm[row0], Nd2NzParams{1, static_cast<uint16_t>(t.group), static_cast<uint32_t>(D), 0,
                 static_cast<uint64_t>(D), 16, 1, 0});
        a1Queue.EnQue(a1);
        a1 = a1Queue.DeQue<half>();
        LocalTensor<half> a2 = a2Queue.AllocTensor<half>();
        int32_t k1 = D / 16;
        for (int32_t j = 0; j < k1; ++j) {
            LoadData(a2[j * 256], a1, LoadData2DParams{static_cast<uint16_t>(j), 1, 1, 0,
                     static_cast<uint16_t>(k1 - 1), false, 0});
        }
        a1Queue.FreeTensor(a1);
        a2Queue.EnQue(a2);
        a2 = a2Queue.DeQue<half>();
        for (int32_t c0 = 0; c0 < len; c0 += CHUNK) {
            int32_t vl = Min(CHUNK, len - c0);
            int32_t n1 = CeilDiv(vl, 16);
            LocalTensor<half> b1 = b1Queue.AllocTensor<half>();
            DataCopy(b1, kGm[((b * t.maxLen + c0) * t.kvHeads + n) * D], Nd2NzParams{1, static_cast<uint16_t>(vl),
                     static_cast<uint32_t>(D), 0, static_cast<uint64_t>(t.kvHeads * D), static_cast<uint16_t>(Round16(vl)), 1, 0});
            b1Queue.EnQue(b1);
            b1 = b1Queue.DeQue<half>();
            LocalTensor<half> b2 = b2Queue.AllocTensor<half>();
            for (int32_t i = 0; i < k1; ++i) {        // Kᵀ's fractals are ZN already: no transpose
                LoadData(b2[i * n1 * 256], b1, LoadData2DParams{static_cast<uint16_t>(i * n1), static_cast<uint8_t>(n1),
                         1, 0, 0, false, 0});
            }
            b1Queue.FreeTensor(b1);
            b2Queue.EnQue(b2);
            b2 = b2Queue.DeQue<half>();
            LocalTensor<float> c = cQueue.AllocTensor<float>();
            Mmad(c, a2, b2, MmadParams{16, static_cast<uint16_t>(vl), static_cast<uint16_t>(D), 0, false, true});
            b2Queue.FreeTensor(b2);
            cQueue.EnQue(c);
            c = cQueue.DeQue<float>();
            Fixpipe(sGm[task * t.group * t.maxLen + c0], c, FixpipeParamsV220{static_cast<uint16_t>(vl),
                    static_cast<uint16_t>(t.group), 16, static_cast<uint32_t>(t.maxLen), false, QuantMode_t::NoQuant,
                    0, 1, 0, 0, 0});
            cQueue.FreeTensor(c);
        }
        a2Queue.FreeTensor(a2);
    }

    // O = P V for one task: K = len in chunks accumulating in L0C
    __aicore__ inline void Values(int32_t task)
    {
        int32_t b = task / t.kvHeads, n = task % t.kvHeads;
        int32_t len = t.seqLens[b];
        int32_t D = t.headDim;
        int32_t n1 = D / 16;
        LocalTensor<float> c = cQueue.AllocTensor<float>();
        for (int32_t c0 = 0; c0 < len; c0 += CHUNK) {
            int32_t vl = Min(CHUNK, len - c0);
            int32_t k1 = CeilDiv(vl, 16);
            LocalTensor<half> a1 = a1Queue.AllocTensor<half>();
            DataCopy(a1, pGm[task * t.group * t.maxLen + c0], Nd2NzParams{1, static_cast<uint16_t>(t.group),
                     static_cast<uint32_t>(vl), 0, static_cast<uint64_t>(t.maxLen), 16, 1, 0});
            LocalTensor<half> b1 = b1Queue.AllocTensor<half>();
            DataCopy(b1, vGm[((b * t.maxLen + c0) * t.kvHeads + n) * D], Nd2NzParams{1, static_cast<uint16_t>(vl),
                     static_cast<uint32_t>(D), 0, static_cast<uint64_t>(t.kvHeads * D), static_cast<uint16_t>(Round16(vl)), 1, 0});
            a1Queue.EnQue(a1);
            b1Queue.EnQue(b1);
            a1 = a1Queue.DeQue<half>();
            b1 = b1Queue.DeQue<half>();
            LocalTensor<half> a2 = a2Queue.AllocTensor<half>();
            LocalTensor<half> b2 = b2Queue.AllocTensor<half>();
            for (int32_t j = 0; j < k1; ++j) {
                LoadData(a2[j * 256], a1, LoadData2DParams{static_cast<uint16_t>(j), 1, 1, 0,
                         static_cast<uint16_t>(k1 - 1), false, 0});
            }
            for (int32_t i = 0; i < k1; ++i) {        // V [len, D] is B [K, N]: each fractal transposed
                LoadData(b2[i * n1 * 256], b1, LoadData2DParams{static_cast<uint16_t>(i), static_cast<uint8_t>(n1),
                         static_cast<uint16_t>(k1), 0, 0, true, 0});
            }
            a1Queue.FreeTensor(a1);
            b1Queue.FreeTensor(b1);
            a2Queue.EnQue(a2);
            b2Queue.EnQue(b2);
            a2 = a2Queue.DeQue<half>();
            b2 = b2Queue.DeQue<half>();
            if (c0 > 0 && n1 < 10) {
                PipeBarrier<PIPE_M>();   // Mmad.md: small accumulating Mmads wait for the previous one
            }
            Mmad(c, a2, b2, MmadParams{16, static_cast<uint16_t>(D), static_cast<uint16_t>(vl), 0, false, c0 == 0});
            a2Queue.FreeTensor(a2);
            b2Queue.FreeTensor(b2);
        }
        cQueue.EnQue(c);
        c = cQueue.DeQue<float>();
        Fixpipe(outGm[(b * t.kvHeads * t.group + n * t.group) * D], c, FixpipeParamsV220{static_cast<uint16_t>(D),
                static_cast<uint16_t>(t.group), 16, static_cast<uint32_t>(D), false, QuantMode_t::NoQuant, 0, 1, 0, 0, 0});
        cQueue.FreeTensor(c);
    }

    __aicore__ inline void CopyIn(int32_t at, int32_t len)
    {
        LocalTensor<float> x = inQueue.AllocTensor<float>();
        DataCopyPad(x, sGm[at], DataCopyExtParams{1, static_cast<uint32_t>(len * sizeof(float)), 0, 0, 0},
                    DataCopyPadExtParams<float>{false, 0, 0, 0});
        inQueue.EnQue(x);
    }

    __aicore__ inline void Compute(int32_t len)
    {
        LocalTensor<float> x = inQueue.DeQue<float>();
        Muls(x, x, t.scale, len);
        ReduceMax(red, x, tmp, len, false);
        SetFlag<HardEvent::V_S>(EVENT_ID0);
        WaitFlag<HardEvent::V_S>(EVENT_ID0);
        float m = red.GetValue(0);
        Adds(x, x, -m, len);
        Exp(x, x, len);
        ReduceSum(red[8], x, tmp, len);
        SetFlag<HardEvent::V_S>(EVENT_ID0);
        WaitFlag<HardEvent::V_S>(EVENT_ID0);
        float total = red.GetValue(8);
        SetFlag<HardEvent::S_V>(EVENT_ID0);      // V may overwrite red (the next row's ReduceMax)
        WaitFlag<HardEvent::S_V>(EVENT_ID0);
        Muls(x, x, 1.0f / total, len);
        LocalTensor<half> y = outQueue.AllocTensor<half>();
        Cast(y, x, RoundMode::CAST_NONE, len);
        inQueue.FreeTensor(x);
        outQueue.EnQue(y);
    }

    __aicore__ inline void CopyOut(int32_t at, int32_t len)
    {
        LocalTensor<half> y = outQueue.DeQue<half>();
        DataCopyPad(pGm[at], y, DataCopyExtParams{1, static_cast<uint32_t>(len * sizeof(half)), 0, 0, 0});
        outQueue.FreeTensor(y);
    }

    DecodeCvTilingData t;
    TPipe* pipe_;
    TQue<TPosition::A1, 1> a1Queue;
    TQue<TPosition::B1, 1> b1Queue;
    TQue<TPosition::A2, 1> a2Queue;
    TQue<TPosition::B2, 1> b2Queue;
    TQue<TPosition::CO1, 1> cQueue;
    TQue<TPosition::VECIN, 1> inQueue;
    TQue<TPosition::VECOUT, 1> outQueue;
    TBuf<TPosition::VECCALC> redBuf, tmpBuf;
    LocalTensor<float> red, tmp;
    GlobalTensor<half> qGm, kGm, vGm, pGm;
    GlobalTensor<float> outGm, sGm;
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
