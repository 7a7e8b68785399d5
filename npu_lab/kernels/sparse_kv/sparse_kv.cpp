// chips: ascend-910b2
// sparse_kv_compress: the Ascend C beside kernel.py (sparse_kv_kernel). One block per KV head.
//
//   CopyIn   DataCopyPad the head's S scores (MTE2) | CreateVecIndex 0..C-1 (V)     -> MTE2_V
//   TopK     masked Duplicate -inf over S..C-1, Duplicate +inf over the sinks, Sort32 (C/32 repeats),
//            MrgSort rounds (4 equal lists per call with repeatTimes; the rest in one call; a lone
//            list moved with Copy), GatherMask pattern 2 (the index words) of the first nKeep pairs
//   Indices  V_MTE3 -> DataCopyPad the kept positions out; V_S -> the scalar unit may read them
//   Gather   per tile of rowsPerTile rows, K then V: GetValue(position), DataCopy GM->UB of one whole
//            row (headDim elements, whole 32-B blocks); MTE2_MTE3; DataCopy UB->GM of the tile;
//            MTE3_MTE2 frees the slot (two ping-pong slots)
//
// Unlike the article's kernel: no element-by-element scalar copy, no run-time-sized array (every
// buffer is a UB TBuf sized by the tiling; the merge's list lengths a fixed 128-entry array), no
// device-side mask (the host builds a fresh one), the sinks a tiling field.
//
// References (asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/): 排序组合（ISASI）/Sort32.md,
// MrgSort.md; 比较与选择/GatherMask.md; 数据填充/Duplicate.md, CreateVecIndex.md; 数据搬运/Copy.md,
// DataCopy.md, DataCopyPad（GMToUB非对齐数据搬运）.md; 同步控制/核内同步/SetFlag-WaitFlag(ISASI).md.
#include "kernel_operator.h"
using namespace AscendC;

// The host's tiling struct (kernel.py SparseKvTiling): eight int32, in this order.
struct SparseKvTiling {
    int32_t heads;
    int32_t tokens;        // S
    int32_t headDim;       // D
    int32_t nKeep;         // kept tokens per head (sinks included)
    int32_t sinks;
    int32_t colAlign;      // C = ceil32(S): the Sort32 row
    int32_t keptLen;       // ceil32(nKeep): GatherMask writes whole 32-index repeats
    int32_t rowsPerTile;   // rows per gather tile (two tiles fit beside the sort buffers)
};

constexpr int32_t SORT_UNIT = 32;   // scores per Sort32 repeat
constexpr int32_t MAX_LISTS = 128;  // C / 32 <= 4096 / 32

template <typename T>
class KernelSparseKv {
public:
    __aicore__ inline KernelSparseKv() {}

    __aicore__ inline void Init(GM_ADDR scores, GM_ADDR k, GM_ADDR v, GM_ADDR kOut, GM_ADDR vOut, GM_ADDR idxOut,
                                const SparseKvTiling* tiling, TPipe* pipeIn)
    {
        t = tiling;
        pipe = pipeIn;
        head = GetBlockIdx();
        C = t->colAlign;
        scoresGm.SetGlobalBuffer((__gm__ float*)scores);
        kGm.SetGlobalBuffer((__gm__ T*)k);
        vGm.SetGlobalBuffer((__gm__ T*)v);
        kOutGm.SetGlobalBuffer((__gm__ T*)kOut);
        vOutGm.SetGlobalBuffer((__gm__ T*)vOut);
        idxOutGm.SetGlobalBuffer((__gm__ int32_t*)idxOut);
        // allocation order = sparse_kv_ub_layout: pairs first (Sort32's dst: 256-B aligned)
        pipe->InitBuffer(pairsABuf, 8 * C);
        pipe->InitBuffer(pairsBBuf, 8 * C);
        pipe->InitBuffer(scoresBuf, 4 * C);
        pipe->InitBuffer(indexBuf, 4 * C);
        pipe->InitBuffer(keptBuf, 4 * t->keptLen);
        pipe->InitBuffer(rowsBuf, 2 * t->rowsPerTile * t->headDim * sizeof(T));
    }

    __aicore__ inline void Process()
    {
        CopyIn();
        Compute();
        CopyOut();
    }

private:
    // MTE2: the head's scores; V: the index row, then -inf padding and +inf sinks.
    __aicore__ inline void CopyIn()
    {
        LocalTensor<float> scores = scoresBuf.Get<float>();
        LocalTensor<int32_t> index = indexBuf.Get<int32_t>();
        int32_t S = t->tokens;
        DataCopyPad(scores, scoresGm[head * S], DataCopyExtParams{1, static_cast<uint32_t>(S * sizeof(float)), 0, 0, 0},
                    DataCopyPadExtParams<float>{false, 0, 0, 0});
        CreateVecIndex(index, (int32_t)0, C);               // runs while the copy lands
        TEventID ev = GetTPipePtr()->FetchEventID(HardEvent::MTE2_V);
        SetFlag<HardEvent::MTE2_V>(ev);
        WaitFlag<HardEvent::MTE2_V>(ev);
        union { uint32_t bits; float value; } neg = {0xFF800000}, pos = {0x7F800000};
        if (C != S) {                                       // -inf into columns S..C-1 of the last chunk
            int32_t pad = C - S;
            uint64_t mask[2] = {(((uint64_t)1 << pad) - 1) << (SORT_UNIT - pad), 0};
            Duplicate(scores[C - SORT_UNIT], neg.value, mask, 1, 1, 8);
        }
        if (t->sinks > 0) {                                 // the sinks sort first, in position order
            Duplicate(scores, pos.value, t->sinks);
        }
        PipeBarrier<PIPE_V>();
    }

    // V: Sort32 every 32 scores, merge the C/32 lists (ping-pong between the two pair buffers),
    // then GatherMask the index words of the first nKeep pairs into kept.
    __aicore__ inline void Compute()
    {
        LocalTensor<float> a = pairsABuf.Get<float>();
        LocalTensor<float> b = pairsBBuf.Get<float>();
        LocalTensor<float> scores = scoresBuf.Get<float>();
        LocalTensor<int32_t> index = indexBuf.Get<int32_t>();
        Sort32(a, scores, index.ReinterpretCast<uint32_t>(), C / SORT_UNIT);
        PipeBarrier<PIPE_V>();
        uint16_t lengths[MAX_LISTS];
        int32_t n = C / SORT_UNIT;
        for (int32_t i = 0; i < n; i++) {
            lengths[i] = SORT_UNIT;
        }
        LocalTensor<float> src = a;
        LocalTensor<float> dst = b;
        while (n > 1) {
            uint16_t L = lengths[0];
            int32_t full = 0;
            while (4 * full + 4 <= n && lengths[4 * full + 1] == L && lengths[4 * full + 2] == L &&
                   lengths[4 * full + 3] == L && lengths[4 * full] == L) {
                full++;
            }
            int32_t m = 0;                                  // lists after this round
            if (full > 0) {                                 // whole groups: 4 equal lists, one call
                uint16_t four[4] = {L, L, L, L};
                MrgSort(dst, MrgSortSrcList<float>(src[0], src[2 * L], src[4 * L], src[6 * L]),
                        MrgSort4Info(four, false, 0b1111, full));
                for (int32_t g = 0; g < full; g++) {
                    lengths[m++] = 4 * L;
                }
            }
            int32_t rest = n - 4 * full;
            int32_t off = 4 * L * full;                     // pairs before the rest
            if (rest == 1) {                                // a lone list: 64 floats per repeat
                uint16_t len = lengths[4 * full];
                Copy(dst[2 * off], src[2 * off], 64, len / SORT_UNIT, CopyRepeatParams(1, 1, 8, 8));
                lengths[m++] = len;
            } else if (rest > 1) {
                uint16_t len[4] = {0, 0, 0, 0};
                int32_t start[4] = {off, off, off, off};
                int32_t total = 0;
                for (int32_t j = 0; j < rest; j++) {
                    len[j] = lengths[4 * full + j];
                    start[j] = off + total;
                    total += len[j];
                }
                uint16_t valid = rest == 2 ? 0b11 : (rest == 3 ? 0b111 : 0b1111);
                MrgSort(dst[2 * off], MrgSortSrcList<float>(src[2 * start[0]], src[2 * start[1]], src[2 * start[2]],
                                                            src[2 * start[3]]),
                        MrgSort4Info(len, false, valid, 1));
                lengths[m++] = total;
            }
            PipeBarrier<PIPE_V>();
            LocalTensor<float> tmp = src;
            src = dst;
            dst = tmp;
            n = m;
        }
        LocalTensor<int32_t> kept = keptBuf.Get<int32_t>();
        uint64_t rsvdCnt = 0;
        GatherMask(kept, src.ReinterpretCast<int32_t>(), (uint8_t)2, false, 0,
                   GatherMaskParams(1, t->keptLen / SORT_UNIT, 8, 0), rsvdCnt);   // the odd words: indices
    }

    // The kept positions out (V_MTE3), then S -> MTE2 -> MTE3: one whole-row DataCopy per kept
    // token, one DataCopy per tile out.
    __aicore__ inline void CopyOut()
    {
        LocalTensor<int32_t> kept = keptBuf.Get<int32_t>();
        TEventID evOut = GetTPipePtr()->FetchEventID(HardEvent::V_MTE3);
        SetFlag<HardEvent::V_MTE3>(evOut);
        WaitFlag<HardEvent::V_MTE3>(evOut);
        DataCopyPad(idxOutGm[head * t->nKeep], kept,
                    DataCopyExtParams{1, static_cast<uint32_t>(t->nKeep * sizeof(int32_t)), 0, 0, 0});
        TEventID evS = GetTPipePtr()->FetchEventID(HardEvent::V_S);
        SetFlag<HardEvent::V_S>(evS);
        WaitFlag<HardEvent::V_S>(evS);
        LocalTensor<T> slot0 = rowsBuf.Get<T>();
        LocalTensor<T> slot1 = slot0[t->rowsPerTile * t->headDim];
        TEventID loaded0 = GetTPipePtr()->AllocEventID<HardEvent::MTE2_MTE3>();
        TEventID loaded1 = GetTPipePtr()->AllocEventID<HardEvent::MTE2_MTE3>();
        TEventID stored0 = GetTPipePtr()->AllocEventID<HardEvent::MTE3_MTE2>();
        TEventID stored1 = GetTPipePtr()->AllocEventID<HardEvent::MTE3_MTE2>();
        int32_t D = t->headDim;
        int32_t j = 0;
        for (int32_t kv = 0; kv < 2; kv++) {                // K, then V
            for (int32_t r0 = 0; r0 < t->nKeep; r0 += t->rowsPerTile) {
                int32_t rows = t->nKeep - r0 < t->rowsPerTile ? t->nKeep - r0 : t->rowsPerTile;
                LocalTensor<T> slot = (j % 2 == 0) ? slot0 : slot1;
                if (j >= 2) {
                    WaitFlag<HardEvent::MTE3_MTE2>(j % 2 == 0 ? stored0 : stored1);   // tile j-2 left it
                }
                for (int32_t r = 0; r < rows; r++) {
                    int32_t pos = kept.GetValue(r0 + r);
                    if (kv == 0) {
                        DataCopy(slot[r * D], kGm[(head * t->tokens + pos) * D], D);
                    } else {
                        DataCopy(slot[r * D], vGm[(head * t->tokens + pos) * D], D);
                    }
                }
                SetFlag<HardEvent::MTE2_MTE3>(j % 2 == 0 ? loaded0 : loaded1);
                WaitFlag<HardEvent::MTE2_MTE3>(j % 2 == 0 ? loaded0 : loaded1);
                if (kv == 0) {
                    DataCopy(kOutGm[(head * t->nKeep + r0) * D], slot, rows * D);
                } else {
                    DataCopy(vOutGm[(head * t->nKeep + r0) * D], slot, rows * D);
                }
                SetFlag<HardEvent::MTE3_MTE2>(j % 2 == 0 ? stored0 : stored1);
                j++;
            }
        }
        for (int32_t i = (j > 2 ? j - 2 : 0); i < j; i++) {   // the last two stores, waited once
            WaitFlag<HardEvent::MTE3_MTE2>(i % 2 == 0 ? stored0 : stored1);
        }
        GetTPipePtr()->ReleaseEventID<HardEvent::MTE2_MTE3>(loaded0);
        GetTPipePtr()->ReleaseEventID<HardEvent::MTE2_MTE3>(loaded1);
        GetTPipePtr()->ReleaseEventID<HardEvent::MTE3_MTE2>(stored0);
        GetTPipePtr()->ReleaseEventID<HardEvent::MTE3_MTE2>(stored1);
    }

    TPipe* pipe;
    TBuf<TPosition::VECCALC> pairsABuf, pairsBBuf, scoresBuf, indexBuf, keptBuf, rowsBuf;
    GlobalTensor<float> scoresGm;
    GlobalTensor<T> kGm, vGm, kOutGm, vOutGm;
    GlobalTensor<int32_t> idxOutGm;
    const SparseKvTiling* t;
    int32_t head, C;
};

extern "C" __global__ __aicore__ void sparse_kv_compress(GM_ADDR scores, GM_ADDR k, GM_ADDR v, GM_ADDR kOut,
                                                         GM_ADDR vOut, GM_ADDR idxOut, GM_ADDR workspace,
                                                         GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(SparseKvTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelSparseKv<DTYPE_K> op;                       // half or float: the op's K/V dtype
    op.Init(scores, k, v, kOut, vOut, idxOut, &tilingData, &pipe);
    op.Process();
}
