// chips: ascend-910b2
// MoeGatingTopK v2 and v2_bad_sync: the Ascend C beside fused.py (moe_gating_v2_kernel and
// moe_gating_v2_bad_sync_kernel; both are _looping_scalar_kernel there, here one class template).
//
// v2, double-buffered: block_dim <= cores and each block loops over its tiles. Tile j+1's copy-in is
// issued *before* tile j's compute (CopyIn(j + 1) first in the loop): a 2-slot input queue
// (TQue<VECIN, 2>, depth 2 because two EnQue come before the first DeQue) and two output slots, so
// MTE2 (tile j+1), S (tile j) and MTE3 (tile j-1) overlap. The scalar unit is the consumer and
// producer, which no TQue synchronises, so the flags are by hand, per slot (event id j % 2):
//   MTE2_S  the slot's scores are loaded: S may read them
//   S_MTE2  S has read the slot: MTE2 may refill it (tile j+2)
//   S_MTE3  the results are written: MTE3 may store them
//   MTE3_S  the stores are done: S may rewrite the output slot (tile j+2)
//
// v2_bad_sync (BAD_SYNC = true), the article's pitfall: the barrier moved to the wrong place. The
// next copy-in comes after this tile's copy-out, behind a PipeBarrier<PIPE_ALL>: the two buffers
// are there, the overlap is not (MTE2, S and MTE3 take turns again).
//
// v2c (fused_v2c.cpp) keeps this structure but moves a tile with one copy in and one out.
//
// Same calls, same order as the Python: npu_lab.kernels.listings checks it against a traced run.
// References (asc-devkit docs/zh/api/SIMD-API/基础API/): 资源管理/TQue/TQue简介.md (depth),
// 同步控制/核内同步/SetFlag-WaitFlag(ISASI).md, 同步控制/核内同步/PipeBarrier(ISASI).md,
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

// The k-th tile in dealing order (fused.py tile_order): full tiles first, then each batch's short
// tail tile, so dealt round-robin the short tiles land on the blocks that got fewer full tiles.
__aicore__ inline int32_t TileOf(const MoeGatingTiling& t, int32_t k)
{
    if (t.S % t.tileS == 0) return k;                 // every tile is full
    int32_t fullPerBatch = t.tilesPerBatch - 1;
    int32_t full = t.B * fullPerBatch;
    if (k >= full) return (k - full) * t.tilesPerBatch + fullPerBatch;
    return k / fullPerBatch * t.tilesPerBatch + k % fullPerBatch;
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
template <typename T, bool BAD_SYNC>
class KernelMoeGatingV2 {
public:
    __aicore__ inline KernelMoeGatingV2() {}

    __aicore__ inline void Init(GM_ADDR gate, GM_ADDR indices, GM_ADDR weights, const MoeGatingTiling& tiling, TPipe* pipeIn)
    {
        pipe = pipeIn;
        t = tiling;
        E = tiling.E;
        K = tiling.K;
        tileBS = tiling.tileBS;
        Es = RowStride(E, sizeof(T));
        Ks = RowStride(K, sizeof(float));
        blockIdx = GetBlockIdx();
        blockNum = GetBlockNum();
        myTiles = (tiling.totalTiles - blockIdx + blockNum - 1) / blockNum;   // tiles blockIdx, +blockNum, ...
        gateGm.SetGlobalBuffer((__gm__ T*)gate);
        indicesGm.SetGlobalBuffer((__gm__ int32_t*)indices);
        weightsGm.SetGlobalBuffer((__gm__ float*)weights);
        // UB as budgeted for "v2": two input slots, two output slots
        pipe->InitBuffer(scoresQueue, 2, tileBS * RowStride(E, sizeof(float)) * sizeof(float));
        pipe->InitBuffer(valuesBuf, 2 * tileBS * Ks * sizeof(float));
        pipe->InitBuffer(indicesBuf, 2 * tileBS * Ks * sizeof(int32_t));
        outValues = valuesBuf.Get<float>();
        outIndices = indicesBuf.Get<int32_t>();
    }

    __aicore__ inline void Process()
    {
        // one event id per slot for the pairs that stay set across a tile (two in flight), held for
        // the loop (AllocEventID.md); S_MTE3 is waited right after it is set: a fetched id does
        for (int32_t i = 0; i < 2; ++i) {
            eventSToMte2[i] = GetTPipePtr()->AllocEventID<HardEvent::S_MTE2>();
            eventMte2ToS[i] = GetTPipePtr()->AllocEventID<HardEvent::MTE2_S>();
            eventMte3ToS[i] = GetTPipePtr()->AllocEventID<HardEvent::MTE3_S>();
        }
        eventSToMte3 = GetTPipePtr()->FetchEventID(HardEvent::S_MTE3);
        CopyIn(0);
        for (int32_t j = 0; j < myTiles; ++j) {
            if constexpr (!BAD_SYNC) {
                if (j + 1 < myTiles) {
                    CopyIn(j + 1);              // prefetch: MTE2 loads tile j+1 while S computes tile j
                }
            }
            Compute(j);
            CopyOut(j);
            if constexpr (BAD_SYNC) {
                if (j + 1 < myTiles) {
                    PipeBarrier<PIPE_ALL>();    // BUG (the lesson): waits for this tile's copy-out ...
                    CopyIn(j + 1);              // ... before the next copy-in even starts
                }
            }
        }
        for (int32_t i = 0; i < 2; ++i) {
            GetTPipePtr()->ReleaseEventID<HardEvent::S_MTE2>(eventSToMte2[i]);
            GetTPipePtr()->ReleaseEventID<HardEvent::MTE2_S>(eventMte2ToS[i]);
            GetTPipePtr()->ReleaseEventID<HardEvent::MTE3_S>(eventMte3ToS[i]);
        }
    }

private:
    TEventID eventSToMte2[2], eventMte2ToS[2], eventMte3ToS[2];   // per slot (j % 2)
    TEventID eventSToMte3;

    __aicore__ inline void CopyIn(int32_t j)
    {
        int32_t firstRow, points;
        TileRows(t, TileOf(t, blockIdx + j * blockNum), firstRow, points);
        if (j >= 2) {
            WaitFlag<HardEvent::S_MTE2>(eventSToMte2[j % 2]);   // S has finished reading this slot (tile j-2)
        }
        LocalTensor<T> scores = scoresQueue.AllocTensor<T>();
        for (int32_t p = 0; p < points; ++p) {   // one copy per point, as in v1
            int32_t row = firstRow + p;
            if (E * sizeof(T) % BLOCK_BYTES == 0) {
                DataCopy(scores[p * Es], gateGm[row * E], E);
            } else {
                DataCopyPad(scores[p * Es], gateGm[row * E],
                            DataCopyExtParams{1, static_cast<uint32_t>(E * sizeof(T)), 0, 0, 0},
                            DataCopyPadExtParams<T>{false, 0, 0, 0});
            }
        }
        SetFlag<HardEvent::MTE2_S>(eventMte2ToS[j % 2]);      // the scalar unit may read the slot
        scoresQueue.EnQue(scores);
    }

    __aicore__ inline void Compute(int32_t j)
    {
        int32_t firstRow, points;
        TileRows(t, TileOf(t, blockIdx + j * blockNum), firstRow, points);
        LocalTensor<T> scores = scoresQueue.DeQue<T>();
        WaitFlag<HardEvent::MTE2_S>(eventMte2ToS[j % 2]);       // S waits for tile j's load only
        if (j >= 2) {
            WaitFlag<HardEvent::MTE3_S>(eventMte3ToS[j % 2]);   // the output slot's stores (tile j-2) are done
        }
        LocalTensor<float> values = outValues[(j % 2) * tileBS * Ks];
        LocalTensor<int32_t> indices = outIndices[(j % 2) * tileBS * Ks];
        for (int32_t p = 0; p < points; ++p) {
            // scalar: heap top-k + softmax
            HeapTopKSoftmax(scores[p * Es], values[p * Ks], indices[p * Ks], E, K);
        }
        if (j + 2 < myTiles) {
            SetFlag<HardEvent::S_MTE2>(eventSToMte2[j % 2]);    // the slot may be refilled (tile j+2)
        }
        scoresQueue.FreeTensor(scores);
        SetFlag<HardEvent::S_MTE3>(eventSToMte3);
    }

    __aicore__ inline void CopyOut(int32_t j)
    {
        int32_t firstRow, points;
        TileRows(t, TileOf(t, blockIdx + j * blockNum), firstRow, points);
        LocalTensor<float> values = outValues[(j % 2) * tileBS * Ks];
        LocalTensor<int32_t> indices = outIndices[(j % 2) * tileBS * Ks];
        WaitFlag<HardEvent::S_MTE3>(eventSToMte3);
        for (int32_t p = 0; p < points; ++p) {   // a DataCopyPad per point and output
            int32_t row = firstRow + p;
            DataCopyPad(indicesGm[row * K], indices[p * Ks],
                        DataCopyExtParams{1, static_cast<uint32_t>(K * sizeof(int32_t)), 0, 0, 0});
            DataCopyPad(weightsGm[row * K], values[p * Ks],
                        DataCopyExtParams{1, static_cast<uint32_t>(K * sizeof(float)), 0, 0, 0});
        }
        if (j + 2 < myTiles) {
            SetFlag<HardEvent::MTE3_S>(eventMte3ToS[j % 2]);    // the output slot may be rewritten (tile j+2)
        }
    }

    TPipe* pipe;          // the entry's TPipe (避免TPipe在对象内创建和初始化.md)
    TQue<TPosition::VECIN, 2> scoresQueue;      // depth 2: the prefetch enqueues before the DeQue
    TBuf<TPosition::VECCALC> valuesBuf, indicesBuf;
    LocalTensor<float> outValues;
    LocalTensor<int32_t> outIndices;
    GlobalTensor<T> gateGm;
    GlobalTensor<int32_t> indicesGm;
    GlobalTensor<float> weightsGm;
    MoeGatingTiling t;
    int32_t E, K, tileBS, Es, Ks, blockIdx, blockNum, myTiles;
};

// DTYPE_GATE: float or half, the gate logits' type (an operator project generates the macro).
extern "C" __global__ __aicore__ void moe_gating_v2(GM_ADDR gate, GM_ADDR indices, GM_ADDR weights, GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(MoeGatingTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;                     // the entry owns the TPipe; the kernel class gets a pointer
    KernelMoeGatingV2<DTYPE_GATE, false> op;
    op.Init(gate, indices, weights, tilingData, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void moe_gating_v2_bad_sync(GM_ADDR gate, GM_ADDR indices, GM_ADDR weights,
                                                             GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(MoeGatingTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;                     // the entry owns the TPipe; the kernel class gets a pointer
    KernelMoeGatingV2<DTYPE_GATE, true> op;
    op.Init(gate, indices, weights, tilingData, &pipe);
    op.Process();
}
