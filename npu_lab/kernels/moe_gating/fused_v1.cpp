// chips: ascend-910b2
// MoeGatingTopK v1, the article's kernel: the Ascend C beside fused.py (moe_gating_v1_kernel).
//
// One block per tile of tileS points. CopyIn: one copy per point (E scores into a UB row padded to
// whole 32-byte blocks). Compute: per point a heap top-K and a softmax over the K winners on the
// scalar unit. CopyOut: one DataCopyPad per point and output (K results = 8 bytes at K = 2:
// DataCopy would round that down to nothing). Pipes MTE2 -> S -> MTE3, strictly in turn.
// Nothing here goes through a TQue: the scalar unit reads and writes UB, so the flags are by hand
// (MTE2_S: loads done, S may read; S_MTE3: results written, MTE3 may store).
//
// Same calls, same order as the Python: npu_lab.kernels.listings checks it against a traced run.
// References (asc-devkit docs/zh/api/SIMD-API/基础API/): 资源管理/TBuf/*.md,
// 同步控制/核内同步/SetFlag-WaitFlag(ISASI).md, 数据结构/LocalTensor/GetValue.md, SetValue.md,
// Memory矢量计算/数据搬运/DataCopyPad（GMToUB非对齐数据搬运）.md, DataCopyPad（UBToGM非对齐数据搬运）.md.
#include "kernel_operator.h"
using namespace AscendC;

constexpr int32_t BLOCK_BYTES = 32;
constexpr int32_t MAX_K = 64;   // the heap lives in registers / the scalar stack

// The host's tiling struct (tiling.py MoeGatingTiling): ten int32, in this order.
struct MoeGatingTiling {
    int32_t B, S, E, K;
    int32_t tileB, tileS, tileBS;
    int32_t totalTiles, tilesPerBatch, ubCapacity;
};

// Elements from one UB row to the next: n rounded up to whole 32-byte blocks (fused.py row_stride).
__aicore__ inline int32_t RowStride(int32_t n, int32_t itemsize)
{
    int32_t perBlock = BLOCK_BYTES / itemsize;
    return (n + perBlock - 1) / perBlock * perBlock;
}

// First flat row and point count of tile `tile` (tileB = 1; the last tile of a batch may be short).
__aicore__ inline void TileRows(const MoeGatingTiling& t, int32_t tile, int32_t& firstRow, int32_t& points)
{
    int32_t b = tile / t.tilesPerBatch;
    int32_t s0 = (tile % t.tilesPerBatch) * t.tileS;
    int32_t s1 = s0 + t.tileS < t.S ? s0 + t.tileS : t.S;
    firstRow = b * t.S + s0;
    points = s1 - s0;
}

// ---- the scalar routine (fused.py scalar_topk_softmax; one ctx.scalar(...) in the Python) -------
// Heap order: (value, -index), so the root is the worst winner and a tie keeps the lower expert.
__aicore__ inline bool Worse(float va, int32_t ia, float vb, int32_t ib)
{
    return va < vb || (va == vb && ia > ib);
}

__aicore__ inline void SiftDown(float* hv, int32_t* hi, int32_t n, int32_t i)
{
    while (true) {
        int32_t l = 2 * i + 1;
        int32_t m = i;
        if (l < n && Worse(hv[l], hi[l], hv[m], hi[m])) m = l;
        if (l + 1 < n && Worse(hv[l + 1], hi[l + 1], hv[m], hi[m])) m = l + 1;
        if (m == i) return;
        float tv = hv[i]; hv[i] = hv[m]; hv[m] = tv;
        int32_t ti = hi[i]; hi[i] = hi[m]; hi[m] = ti;
        i = m;
    }
}

// exp(x) for x <= 0 in software (the scalar unit has no exp): 2^n * e^r, |r| <= ln2 / 2.
__aicore__ inline float ScalarExp(float x)
{
    if (x < -87.0f) return 0.0f;
    int32_t n = static_cast<int32_t>(x * 1.44269504f - 0.5f);
    float r = x - static_cast<float>(n) * 0.69314718f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.16666667f + r * (0.04166667f + r * 0.00833333f))));
    union { int32_t i; float f; } scale;
    scale.i = (n + 127) << 23;
    return p * scale.f;
}

// Top-K of scores[0:E] with a size-K min-heap, then softmax over the K winners (max first),
// written to values[0:K] (descending) and indices[0:K].
template <typename T>
__aicore__ inline void HeapTopKSoftmax(const LocalTensor<T>& scores, const LocalTensor<float>& values,
                                       const LocalTensor<int32_t>& indices, int32_t E, int32_t K)
{
    float hv[MAX_K];
    int32_t hi[MAX_K];
    for (int32_t e = 0; e < K; ++e) {
        hv[e] = static_cast<float>(scores.GetValue(e));
        hi[e] = e;
    }
    for (int32_t i = K / 2 - 1; i >= 0; --i) SiftDown(hv, hi, K, i);
    for (int32_t e = K; e < E; ++e) {
        float v = static_cast<float>(scores.GetValue(e));
        if (Worse(hv[0], hi[0], v, e)) {
            hv[0] = v;
            hi[0] = e;
            SiftDown(hv, hi, K, 0);
        }
    }
    for (int32_t n = K - 1; n > 0; --n) {          // heap sort: the winners end up descending
        float tv = hv[0]; hv[0] = hv[n]; hv[n] = tv;
        int32_t ti = hi[0]; hi[0] = hi[n]; hi[n] = ti;
        SiftDown(hv, hi, n, 0);
    }
    float top = hv[0];
    float sum = 0.0f;
    for (int32_t k = 0; k < K; ++k) {
        hv[k] = ScalarExp(hv[k] - top);
        sum += hv[k];
    }
    for (int32_t k = 0; k < K; ++k) {
        values.SetValue(k, hv[k] / sum);
        indices.SetValue(k, hi[k]);
    }
}

// ---- the kernel --------------------------------------------------------------------------------
template <typename T>
class KernelMoeGatingV1 {
public:
    __aicore__ inline KernelMoeGatingV1() {}

    __aicore__ inline void Init(GM_ADDR gate, GM_ADDR indices, GM_ADDR weights, const MoeGatingTiling& tiling, TPipe* pipeIn)
    {
        pipe = pipeIn;
        E = tiling.E;
        K = tiling.K;
        TileRows(tiling, GetBlockIdx(), firstRow, points);   // one block per tile
        Es = RowStride(E, sizeof(T));                         // UB row strides (whole 32-B blocks)
        Ks = RowStride(K, sizeof(float));
        gateGm.SetGlobalBuffer((__gm__ T*)gate);
        indicesGm.SetGlobalBuffer((__gm__ int32_t*)indices);
        weightsGm.SetGlobalBuffer((__gm__ float*)weights);
        // UB as the host budgeted it (ub_budget.py "v1"), sized for a full tile
        pipe->InitBuffer(scoresBuf, tiling.tileBS * RowStride(E, sizeof(float)) * sizeof(float));
        pipe->InitBuffer(valuesBuf, tiling.tileBS * Ks * sizeof(float));
        pipe->InitBuffer(indicesBuf, tiling.tileBS * Ks * sizeof(int32_t));
        scores = scoresBuf.Get<T>();
        values = valuesBuf.Get<float>();
        topkIndices = indicesBuf.Get<int32_t>();
    }

    __aicore__ inline void Process()
    {
        // each pair is waited before it is set again: ids fetched, not held (FetchEventID.md)
        eventMte2ToS = GetTPipePtr()->FetchEventID(HardEvent::MTE2_S);
        eventSToMte3 = GetTPipePtr()->FetchEventID(HardEvent::S_MTE3);
        CopyIn();
        Compute();
        CopyOut();
    }

private:
    TEventID eventMte2ToS, eventSToMte3;

    __aicore__ inline void CopyIn()   // one copy per point, as the article writes it
    {
        for (int32_t p = 0; p < points; ++p) {
            int32_t row = firstRow + p;
            if (E * sizeof(T) % BLOCK_BYTES == 0) {
                DataCopy(scores[p * Es], gateGm[row * E], E);
            } else {
                DataCopyPad(scores[p * Es], gateGm[row * E],
                            DataCopyExtParams{1, static_cast<uint32_t>(E * sizeof(T)), 0, 0, 0},
                            DataCopyPadExtParams<T>{false, 0, 0, 0});
            }
        }
        SetFlag<HardEvent::MTE2_S>(eventMte2ToS);  // the article's "wait for every copy-in" ...
    }

    __aicore__ inline void Compute()   // on the scalar unit
    {
        WaitFlag<HardEvent::MTE2_S>(eventMte2ToS);  // ... before the scalar unit reads any score
        for (int32_t p = 0; p < points; ++p) {
            // scalar: heap top-k + softmax
            HeapTopKSoftmax(scores[p * Es], values[p * Ks], topkIndices[p * Ks], E, K);
        }
        SetFlag<HardEvent::S_MTE3>(eventSToMte3);  // results are in UB: the stores may start
    }

    __aicore__ inline void CopyOut()   // K indices and K weights per point
    {
        WaitFlag<HardEvent::S_MTE3>(eventSToMte3);
        for (int32_t p = 0; p < points; ++p) {
            int32_t row = firstRow + p;
            DataCopyPad(indicesGm[row * K], topkIndices[p * Ks],
                        DataCopyExtParams{1, static_cast<uint32_t>(K * sizeof(int32_t)), 0, 0, 0});
            DataCopyPad(weightsGm[row * K], values[p * Ks],
                        DataCopyExtParams{1, static_cast<uint32_t>(K * sizeof(float)), 0, 0, 0});
        }
    }

    TPipe* pipe;          // the entry's TPipe (避免TPipe在对象内创建和初始化.md)
    TBuf<TPosition::VECCALC> scoresBuf, valuesBuf, indicesBuf;
    LocalTensor<T> scores;
    LocalTensor<float> values;
    LocalTensor<int32_t> topkIndices;
    GlobalTensor<T> gateGm;
    GlobalTensor<int32_t> indicesGm;
    GlobalTensor<float> weightsGm;
    int32_t E, K, Es, Ks, firstRow, points;
};

// DTYPE_GATE: float or half, the gate logits' type (an operator project generates the macro).
extern "C" __global__ __aicore__ void moe_gating_v1(GM_ADDR gate, GM_ADDR indices, GM_ADDR weights, GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(MoeGatingTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;                     // the entry owns the TPipe; the kernel class gets a pointer
    KernelMoeGatingV1<DTYPE_GATE> op;
    op.Init(gate, indices, weights, tilingData, &pipe);
    op.Process();
}
