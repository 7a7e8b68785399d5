// chips: ascend-910b2
// kv_cache_append / paged_kv_cache_append: the Ascend C beside append.py (kv_append_kernel).
//
// One kernel for both layouts: the host turns (seq_id, seq_len[, block_table]) into a slot id per
// row before the launch (vLLM's slot_mapping), and bumps seq_lens after it; the kernel only copies.
// Pipes: MTE2 (slot ids) -> S (GetValue), then per row and head tile MTE2 (GM -> UB) -> MTE3
// (UB -> GM) through two ping-pong UB slots:
//   MTE2_S     the slot ids are in UB: the scalar unit may read them
//   MTE2_MTE3  slot j % 2 is loaded: MTE3 may store it
//   MTE3_MTE2  slot j % 2 is stored: MTE2 may refill it (tile j + 2)
// Ascend C's TQueBind<VECIN, VECOUT, 2> would do this hand-off; the course API spells it out.
//
// References (asc-devkit docs/zh/api/SIMD-API/基础API/): 同步控制/核内同步/SetFlag-WaitFlag(ISASI).md,
// 资源管理/TPipe/AllocEventID.md, ReleaseEventID.md, FetchEventID.md,
// Memory矢量计算/数据搬运/DataCopyPad（GMToUB非对齐数据搬运）.md, DataCopyPad（UBToGM非对齐数据搬运）.md.
#include "kernel_operator.h"
using namespace AscendC;

// The host's tiling struct (append.py KvAppendTiling): six int32, in this order.
struct KvAppendTiling {
    int32_t rows;          // this step's tokens (one per decoding sequence)
    int32_t rowsPerBlock;
    int32_t kvHeads;
    int32_t headDim;
    int32_t headsPerTile;  // two slots of headsPerTile * headDim elements fit the usable UB
    int32_t slotIdsLen;    // int32 slot ids in UB, whole 32-byte blocks
};

template <typename T>
class KernelKvAppend {
public:
    __aicore__ inline KernelKvAppend() {}

    __aicore__ inline void Init(GM_ADDR kNew, GM_ADDR vNew, GM_ADDR kCache, GM_ADDR vCache, GM_ADDR slotIds,
                                const KvAppendTiling* tiling, TPipe* pipeIn)
    {
        t = tiling;
        pipe = pipeIn;
        first = GetBlockIdx() * t->rowsPerBlock;
        rows = t->rows - first < t->rowsPerBlock ? t->rows - first : t->rowsPerBlock;
        rowElems = t->kvHeads * t->headDim;
        tileElems = t->headsPerTile * t->headDim;
        kNewGm.SetGlobalBuffer((__gm__ T*)kNew);
        vNewGm.SetGlobalBuffer((__gm__ T*)vNew);
        kCacheGm.SetGlobalBuffer((__gm__ T*)kCache);
        vCacheGm.SetGlobalBuffer((__gm__ T*)vCache);
        slotIdsGm.SetGlobalBuffer((__gm__ int32_t*)slotIds);
        pipe->InitBuffer(idsBuf, t->slotIdsLen * sizeof(int32_t));
        pipe->InitBuffer(kvBuf, 2 * tileElems * sizeof(T));
    }

    __aicore__ inline void Process()
    {
        LocalTensor<int32_t> ids = idsBuf.Get<int32_t>();
        LocalTensor<T> slot0 = kvBuf.Get<T>();
        LocalTensor<T> slot1 = slot0[tileElems];
        DataCopyPad(ids, slotIdsGm[first], DataCopyExtParams{1, static_cast<uint32_t>(rows * sizeof(int32_t)), 0, 0, 0},
                    DataCopyPadExtParams<int32_t>{false, 0, 0, 0});
        TEventID eventIds = GetTPipePtr()->FetchEventID(HardEvent::MTE2_S);
        SetFlag<HardEvent::MTE2_S>(eventIds);
        WaitFlag<HardEvent::MTE2_S>(eventIds);
        // two pairs of each event in flight: ids held (AllocEventID.md)
        loaded0 = GetTPipePtr()->AllocEventID<HardEvent::MTE2_MTE3>();
        loaded1 = GetTPipePtr()->AllocEventID<HardEvent::MTE2_MTE3>();
        stored0 = GetTPipePtr()->AllocEventID<HardEvent::MTE3_MTE2>();
        stored1 = GetTPipePtr()->AllocEventID<HardEvent::MTE3_MTE2>();
        int32_t j = 0;
        for (int32_t r = 0; r < rows; r++) {
            int32_t slot = Compute(ids, r);
            for (int32_t h0 = 0; h0 < t->kvHeads; h0 += t->headsPerTile) {
                int32_t heads = t->kvHeads - h0 < t->headsPerTile ? t->kvHeads - h0 : t->headsPerTile;
                uint32_t bytes = heads * t->headDim * sizeof(T);
                int32_t src = (first + r) * rowElems + h0 * t->headDim;
                int32_t dst = slot * rowElems + h0 * t->headDim;
                for (int32_t kv = 0; kv < 2; kv++) {          // K, then V
                    LocalTensor<T> buf = (j % 2 == 0) ? slot0 : slot1;
                    CopyIn(buf, kv, src, bytes, j);
                    CopyOut(buf, kv, dst, bytes, j);
                    j++;
                }
            }
        }
        for (int32_t k = (j > 2 ? j - 2 : 0); k < j; k++) {  // the last two stores' flags
            WaitFlag<HardEvent::MTE3_MTE2>(k % 2 == 0 ? stored0 : stored1);
        }
        GetTPipePtr()->ReleaseEventID<HardEvent::MTE2_MTE3>(loaded0);
        GetTPipePtr()->ReleaseEventID<HardEvent::MTE2_MTE3>(loaded1);
        GetTPipePtr()->ReleaseEventID<HardEvent::MTE3_MTE2>(stored0);
        GetTPipePtr()->ReleaseEventID<HardEvent::MTE3_MTE2>(stored1);
    }

private:
    // The scalar unit reads row r's cache slot (after the MTE2_S flag of Process).
    __aicore__ inline int32_t Compute(const LocalTensor<int32_t>& ids, int32_t r)
    {
        return ids.GetValue(r);
    }

    // MTE2: tile j into its slot, once tile j-2's store has left it.
    __aicore__ inline void CopyIn(const LocalTensor<T>& buf, int32_t kv, int32_t src, uint32_t bytes, int32_t j)
    {
        if (j >= 2) {
            WaitFlag<HardEvent::MTE3_MTE2>(j % 2 == 0 ? stored0 : stored1);
        }
        if (kv == 0) {
            DataCopyPad(buf, kNewGm[src], DataCopyExtParams{1, bytes, 0, 0, 0}, DataCopyPadExtParams<T>{false, 0, 0, 0});
        } else {
            DataCopyPad(buf, vNewGm[src], DataCopyExtParams{1, bytes, 0, 0, 0}, DataCopyPadExtParams<T>{false, 0, 0, 0});
        }
        SetFlag<HardEvent::MTE2_MTE3>(j % 2 == 0 ? loaded0 : loaded1);
    }

    // MTE3: the loaded tile to its cache slot, then the slot is free for tile j+2.
    __aicore__ inline void CopyOut(const LocalTensor<T>& buf, int32_t kv, int32_t dst, uint32_t bytes, int32_t j)
    {
        WaitFlag<HardEvent::MTE2_MTE3>(j % 2 == 0 ? loaded0 : loaded1);
        if (kv == 0) {
            DataCopyPad(kCacheGm[dst], buf, DataCopyExtParams{1, bytes, 0, 0, 0});
        } else {
            DataCopyPad(vCacheGm[dst], buf, DataCopyExtParams{1, bytes, 0, 0, 0});
        }
        SetFlag<HardEvent::MTE3_MTE2>(j % 2 == 0 ? stored0 : stored1);
    }

    TPipe* pipe;
    TBuf<TPosition::VECCALC> idsBuf, kvBuf;
    GlobalTensor<T> kNewGm, vNewGm, kCacheGm, vCacheGm;
    GlobalTensor<int32_t> slotIdsGm;
    const KvAppendTiling* t;
    int32_t first, rows, rowElems, tileElems;
    TEventID loaded0, loaded1, stored0, stored1;
};

extern "C" __global__ __aicore__ void kv_cache_append(GM_ADDR kNew, GM_ADDR vNew, GM_ADDR kCache, GM_ADDR vCache,
                                                      GM_ADDR slotIds, GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(KvAppendTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelKvAppend<DTYPE_K_NEW> op;                  // half or float: the op's K/V dtype
    op.Init(kNew, vNew, kCache, vCache, slotIds, &tilingData, &pipe);
    op.Process();
}
