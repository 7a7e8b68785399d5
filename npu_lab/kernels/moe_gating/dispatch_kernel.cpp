// chips: ascend-910b2
// Token dispatch (MoeInitRouting-style) — the Ascend C listing of npu_lab/kernels/moe_gating/dispatch_kernel.py
// (same instructions, same order). Built the way CANN's MoeInitRoutingV2 is (hicann/ops-transformer
// moe/moe_init_routing_v2/op_kernel: moe_v2_sort_one_core.h, moe_v2_expert_token_out.h,
// moe_v2_src_to_dst_op.h, moe_v2_src_to_dst_with_capacity.h). Our own code, not a copy of CANN's.
//
// Two entries, launched one after the other (CANN separates the phases with SyncAll inside one kernel):
//   moe_dispatch_sort   per block: C slots -> Cast, Muls -1, Sort32 + MrgSort (stable by expert),
//                       GatherMask keys / positions; scalar count per expert; the counts to a
//                       workspace row and, under SetAtomicAdd<int32_t>, into the GM counters
//   moe_dispatch_place  per block: prefix of the earlier blocks' counts (Add), scalar ranks and
//                       capacity, one 4-byte DataCopyPad per slot (dropped slots to a trash word),
//                       the block's expanded_row_idx range, block 0 the kept counts
#include "kernel_operator.h"

using namespace AscendC;

// Host side fills this (moe_dispatch_tiling); ten int32 in this order.
struct MoeDispatchTilingData {
    int32_t numRows;          // N tokens
    int32_t k;                // K slots a token
    int32_t expertNum;        // E
    int32_t totalSlots;       // N * K
    int32_t dropPadMode;      // 0 dropless, 1 drop / pad to expertCapacity
    int32_t expertCapacity;
    int32_t chunk;            // C = 32 * 4^mergeRounds slots a block
    int32_t mergeRounds;
    int32_t blockNum;
    int32_t tailSlots;        // slots of the last block
};

constexpr int32_t STAGE_SLOTS = 512;      // slots staged for the per-slot scatter at a time
constexpr int32_t INT32_ONE_BLOCK = 8;    // int32 per 32-B block

__aicore__ inline int32_t Round8(int32_t n) { return (n + 7) / 8 * 8; }

class MoeDispatchSort {
public:
    __aicore__ inline MoeDispatchSort() {}

    __aicore__ inline void Init(GM_ADDR experts, GM_ADDR wsExp, GM_ADDR wsPos, GM_ADDR wsCounts, GM_ADDR before,
                                const MoeDispatchTilingData* tilingData, TPipe* pipeIn)
    {
        pipe = pipeIn;
        t = tilingData;
        blockIdx = GetBlockIdx();
        C = t->chunk;
        E = t->expertNum;
        L = (blockIdx == t->blockNum - 1) ? t->tailSlots : C;
        start = blockIdx * C;
        expertsGm.SetGlobalBuffer((__gm__ int32_t*)experts + start);
        wsExpGm.SetGlobalBuffer((__gm__ int32_t*)wsExp + start);
        wsPosGm.SetGlobalBuffer((__gm__ int32_t*)wsPos + start);
        wsCountsGm.SetGlobalBuffer((__gm__ int32_t*)wsCounts + blockIdx * E);
        beforeGm.SetGlobalBuffer((__gm__ int32_t*)before);
        // pairs first: Sort32's dst starts on 256 B, its sources on 128 B
        pipe->InitBuffer(pairsABuf, 8 * C);
        pipe->InitBuffer(pairsBBuf, 8 * C);
        pipe->InitBuffer(keysBuf, 4 * C);
        pipe->InitBuffer(posBuf, 4 * C);
        pipe->InitBuffer(inQueue, 1, 4 * C);
        pipe->InitBuffer(sortedExpBuf, 4 * C);
        pipe->InitBuffer(countsBuf, 4 * Round8(E));
    }

    __aicore__ inline void Process()
    {
        CopyIn();
        Compute();
        CopyOut();
    }

private:
    __aicore__ inline void CopyIn()
    {
        LocalTensor<int32_t> x = inQueue.AllocTensor<int32_t>();
        DataCopyPad(x, expertsGm, DataCopyExtParams{1, static_cast<uint32_t>(4 * L), 0, 0, 0},
                    DataCopyPadExtParams<int32_t>{false, 0, 0, 0});
        inQueue.EnQue(x);
    }

    // Sort the block's slots by expert (stable), then count them per expert on the scalar unit.
    __aicore__ inline void Compute()
    {
        LocalTensor<int32_t> x = inQueue.DeQue<int32_t>();
        LocalTensor<float> keys = keysBuf.Get<float>();
        pos = posBuf.Get<int32_t>();
        LocalTensor<float> pairs = pairsABuf.Get<float>();
        LocalTensor<float> other = pairsBBuf.Get<float>();
        union { uint32_t bits; float value; } inf = {0xFF800000};
        Duplicate(keys, inf.value, C);                       // padding sorts last
        ArithProgression<int32_t>(pos, start, 1, C);         // global slot positions n * K + k
        PipeBarrier<PIPE_V>();
        Cast(keys, x, RoundMode::CAST_NONE, L);              // int32 -> float: exact below 2^24
        PipeBarrier<PIPE_V>();
        Muls(keys, keys, -1.0f, L);                          // Sort32 is descending: -expert sorts by expert
        PipeBarrier<PIPE_V>();
        inQueue.FreeTensor(x);
        Sort32(pairs, keys, pos.ReinterpretCast<uint32_t>(), C / 32);
        PipeBarrier<PIPE_V>();
        int32_t length = 32;
        for (int32_t round = 0; round < t->mergeRounds; round++) {     // 4 sorted lists -> one
            uint16_t lengths[4] = {static_cast<uint16_t>(length), static_cast<uint16_t>(length),
                                   static_cast<uint16_t>(length), static_cast<uint16_t>(length)};
            MrgSort(other, MrgSortSrcList<float>(pairs[0], pairs[2 * length], pairs[4 * length], pairs[6 * length]),
                    MrgSort4Info(lengths, false, 0b1111, static_cast<uint16_t>(C / (4 * length))));
            PipeBarrier<PIPE_V>();
            LocalTensor<float> tmp = pairs;
            pairs = other;
            other = tmp;
            length *= 4;
        }
        uint64_t rsvdCnt = 0;
        GatherMaskParams perRepeat(1, static_cast<uint16_t>(C / 32), 8, 0);
        GatherMask(keys, pairs, static_cast<uint8_t>(1), false, 0, perRepeat, rsvdCnt);                       // keys
        GatherMask(pos, pairs.ReinterpretCast<int32_t>(), static_cast<uint8_t>(2), false, 0, perRepeat, rsvdCnt);  // positions
        PipeBarrier<PIPE_V>();
        Muls(keys, keys, -1.0f, L);
        PipeBarrier<PIPE_V>();
        sortedExpert = sortedExpBuf.Get<int32_t>();
        Cast(sortedExpert, keys, RoundMode::CAST_RINT, L);
        counts = countsBuf.Get<int32_t>();
        Duplicate(counts, 0, Round8(E));
        TEventID eventVToS = GetTPipePtr()->FetchEventID(HardEvent::V_S);
        SetFlag<HardEvent::V_S>(eventVToS);
        WaitFlag<HardEvent::V_S>(eventVToS);
        // scalar: ExpertTokenCount
        for (int32_t i = 0; i < L; i++) {
            int32_t e = sortedExpert.GetValue(i);
            if (e < E) {
                counts.SetValue(e, counts.GetValue(e) + 1);
            }
        }
    }

    __aicore__ inline void CopyOut()
    {
        TEventID eventSToMte3 = GetTPipePtr()->FetchEventID(HardEvent::S_MTE3);
        SetFlag<HardEvent::S_MTE3>(eventSToMte3);
        WaitFlag<HardEvent::S_MTE3>(eventSToMte3);
        DataCopyPad(wsExpGm, sortedExpert, DataCopyExtParams{1, static_cast<uint32_t>(4 * L), 0, 0, 0});
        DataCopyPad(wsPosGm, pos, DataCopyExtParams{1, static_cast<uint32_t>(4 * L), 0, 0, 0});
        DataCopyExtParams row{1, static_cast<uint32_t>(4 * E), 0, 0, 0};
        DataCopyPad(wsCountsGm, counts, row);
        SetAtomicAdd<int32_t>();                             // every block's counts meet in GM
        DataCopyPad(beforeGm, counts, row);
        SetAtomicNone();
    }

    TPipe* pipe;
    TQue<TPosition::VECIN, 1> inQueue;
    LocalTensor<int32_t> pos, sortedExpert, counts;
    TBuf<TPosition::VECCALC> pairsABuf, pairsBBuf, keysBuf, posBuf, sortedExpBuf, countsBuf;
    GlobalTensor<int32_t> expertsGm;
    GlobalTensor<int32_t> wsExpGm;
    GlobalTensor<int32_t> wsPosGm;
    GlobalTensor<int32_t> wsCountsGm;
    GlobalTensor<int32_t> beforeGm;
    const MoeDispatchTilingData* t;
    int32_t blockIdx, C, E, L, start;
};

class MoeDispatchPlace {
public:
    __aicore__ inline MoeDispatchPlace() {}

    __aicore__ inline void Init(GM_ADDR wsExp, GM_ADDR wsPos, GM_ADDR wsCounts, GM_ADDR before, GM_ADDR sortedRow,
                                GM_ADDR sortedExp, GM_ADDR expanded, GM_ADDR count, GM_ADDR trash,
                                const MoeDispatchTilingData* tilingData, TPipe* pipeIn)
    {
        pipe = pipeIn;
        t = tilingData;
        blockIdx = GetBlockIdx();
        C = t->chunk;
        E = t->expertNum;
        L = (blockIdx == t->blockNum - 1) ? t->tailSlots : C;
        start = blockIdx * C;
        int32_t stage = C < STAGE_SLOTS ? C : STAGE_SLOTS;
        wsExpGm.SetGlobalBuffer((__gm__ int32_t*)wsExp + start);
        wsPosGm.SetGlobalBuffer((__gm__ int32_t*)wsPos + start);
        wsCountsGm.SetGlobalBuffer((__gm__ int32_t*)wsCounts);
        beforeGm.SetGlobalBuffer((__gm__ int32_t*)before);
        sortedRowGm.SetGlobalBuffer((__gm__ int32_t*)sortedRow);
        sortedExpGm.SetGlobalBuffer((__gm__ int32_t*)sortedExp);
        expandedGm.SetGlobalBuffer((__gm__ int32_t*)expanded + start);
        countGm.SetGlobalBuffer((__gm__ int32_t*)count);
        trashGm.SetGlobalBuffer((__gm__ int32_t*)trash + blockIdx);
        pipe->InitBuffer(rowQueue, 2, 4 * Round8(E));
        pipe->InitBuffer(prefixBuf, 4 * Round8(E));
        pipe->InitBuffer(scratchBuf, 4 * Round8(E));
        pipe->InitBuffer(totalBuf, 4 * Round8(E));
        pipe->InitBuffer(keptBuf, 4 * Round8(E));
        pipe->InitBuffer(sortedExpBuf, 4 * C);
        pipe->InitBuffer(posBuf, 4 * C);
        pipe->InitBuffer(expandedBuf, 4 * C);
        pipe->InitBuffer(placeBuf, 4 * C);
        pipe->InitBuffer(stagePosBuf, 32 * stage);
        pipe->InitBuffer(stageExpBuf, 32 * stage);
    }

    __aicore__ inline void Process()
    {
        CopyIn();
        Compute();
        CopyOut();
    }

private:
    // Every block's count row (the prefix of the earlier ones), the GM counters, this block's sorted slots.
    __aicore__ inline void CopyIn()
    {
        prefix = prefixBuf.Get<int32_t>();
        LocalTensor<int32_t> scratch = scratchBuf.Get<int32_t>();
        Duplicate(prefix, 0, Round8(E));
        Duplicate(scratch, 0, Round8(E));
        PipeBarrier<PIPE_V>();
        DataCopyExtParams row{1, static_cast<uint32_t>(4 * E), 0, 0, 0};
        DataCopyPadExtParams<int32_t> noPad{false, 0, 0, 0};
        for (int32_t j = 0; j < t->blockNum; j++) {          // every block's counts
            LocalTensor<int32_t> r = rowQueue.AllocTensor<int32_t>();
            DataCopyPad(r, wsCountsGm[j * E], row, noPad);
            rowQueue.EnQue(r);
            r = rowQueue.DeQue<int32_t>();
            LocalTensor<int32_t> acc = (j < blockIdx) ? prefix : scratch;   // the same Add either way
            Add(acc, acc, r, E);
            rowQueue.FreeTensor(r);
        }
        total = totalBuf.Get<int32_t>();
        sexp = sortedExpBuf.Get<int32_t>();
        pos = posBuf.Get<int32_t>();
        DataCopyPad(total, beforeGm, row, noPad);
        DataCopyPad(sexp, wsExpGm, DataCopyExtParams{1, static_cast<uint32_t>(4 * L), 0, 0, 0}, noPad);
        DataCopyPad(pos, wsPosGm, DataCopyExtParams{1, static_cast<uint32_t>(4 * L), 0, 0, 0}, noPad);
        TEventID eventMte2ToS = GetTPipePtr()->FetchEventID(HardEvent::MTE2_S);
        SetFlag<HardEvent::MTE2_S>(eventMte2ToS);
        WaitFlag<HardEvent::MTE2_S>(eventMte2ToS);
        TEventID eventVToS = GetTPipePtr()->FetchEventID(HardEvent::V_S);
        SetFlag<HardEvent::V_S>(eventVToS);
        WaitFlag<HardEvent::V_S>(eventVToS);
    }

    // Each slot's rank in its expert, whether it is kept, its places in sorted_row_idx and expanded_x.
    __aicore__ inline void Compute()
    {
        kept = keptBuf.Get<int32_t>();
        expandedLocal = expandedBuf.Get<int32_t>();
        place = placeBuf.Get<int32_t>();
        stagePos = stagePosBuf.Get<int32_t>();
        stageExp = stageExpBuf.Get<int32_t>();
        // scalar: SrcToDst
        {
            int32_t base = 0;                                // kept slots of the lower experts
            for (int32_t e = 0; e < E; e++) {
                int32_t n = total.GetValue(e);
                if (t->dropPadMode != 0 && n > t->expertCapacity) {
                    n = t->expertCapacity;
                }
                kept.SetValue(e, n);
                total.SetValue(e, base);                     // total[] now holds each expert's base
                base += n;
            }
            int32_t runExpert = -1;
            int32_t rank = 0;
            for (int32_t i = 0; i < L; i++) {
                int32_t e = sexp.GetValue(i);
                rank = (e == runExpert) ? rank + 1 : ((e < E) ? prefix.GetValue(e) : 0);
                runExpert = e;
                bool keep = e < E && (t->dropPadMode == 0 || rank < t->expertCapacity);
                int32_t where = keep ? total.GetValue(e) + rank : -1;
                int32_t slot = keep ? (t->dropPadMode != 0 ? e * t->expertCapacity + rank : where) : -1;
                expandedLocal.SetValue(pos.GetValue(i) - start, slot);
                place.SetValue(i, where);
            }
        }
    }

    // One 4-byte DataCopyPad per slot, from a 32-B block of its own; then the block's expanded_row_idx.
    __aicore__ inline void CopyOut()
    {
        DataCopyExtParams word{1, 4, 0, 0, 0};
        for (int32_t lo = 0; lo < L; lo += STAGE_SLOTS) {
            int32_t n = (L - lo < STAGE_SLOTS) ? L - lo : STAGE_SLOTS;
            if (lo > 0) {                                    // the previous scatters read the staging blocks
                TEventID eventMte3ToS = GetTPipePtr()->FetchEventID(HardEvent::MTE3_S);
                SetFlag<HardEvent::MTE3_S>(eventMte3ToS);
                WaitFlag<HardEvent::MTE3_S>(eventMte3ToS);
            }
            // scalar: stage rows
            for (int32_t i = 0; i < n; i++) {                // each word in a 32-B block of its own
                stagePos.SetValue(i * INT32_ONE_BLOCK, pos.GetValue(lo + i));
                stageExp.SetValue(i * INT32_ONE_BLOCK, sexp.GetValue(lo + i));
            }
            TEventID eventSToMte3 = GetTPipePtr()->FetchEventID(HardEvent::S_MTE3);
            SetFlag<HardEvent::S_MTE3>(eventSToMte3);
            WaitFlag<HardEvent::S_MTE3>(eventSToMte3);
            for (int32_t i = 0; i < n; i++) {
                int32_t where = place.GetValue(lo + i);
                // dropped / finished: the trash word (the Python charges this branchless form)
                GlobalTensor<int32_t> rowDst = (where < 0) ? trashGm : sortedRowGm[where];
                GlobalTensor<int32_t> expDst = (where < 0) ? trashGm : sortedExpGm[where];
                DataCopyPad(rowDst, stagePos[i * INT32_ONE_BLOCK], word);
                DataCopyPad(expDst, stageExp[i * INT32_ONE_BLOCK], word);
            }
        }
        DataCopyPad(expandedGm, expandedLocal, DataCopyExtParams{1, static_cast<uint32_t>(4 * L), 0, 0, 0});
        if (blockIdx == 0) {
            DataCopyPad(countGm, kept, DataCopyExtParams{1, static_cast<uint32_t>(4 * E), 0, 0, 0});
        }
    }

    TPipe* pipe;
    LocalTensor<int32_t> prefix, total, sexp, pos, kept, expandedLocal, place, stagePos, stageExp;
    TQue<TPosition::VECIN, 2> rowQueue;
    TBuf<TPosition::VECCALC> prefixBuf, scratchBuf, totalBuf, keptBuf, sortedExpBuf, posBuf, expandedBuf,
        placeBuf, stagePosBuf, stageExpBuf;
    GlobalTensor<int32_t> wsExpGm;
    GlobalTensor<int32_t> wsPosGm;
    GlobalTensor<int32_t> wsCountsGm;
    GlobalTensor<int32_t> beforeGm;
    GlobalTensor<int32_t> sortedRowGm;
    GlobalTensor<int32_t> sortedExpGm;
    GlobalTensor<int32_t> expandedGm;
    GlobalTensor<int32_t> countGm;
    GlobalTensor<int32_t> trashGm;
    const MoeDispatchTilingData* t;
    int32_t blockIdx, C, E, L, start;
};

extern "C" __global__ __aicore__ void moe_dispatch_sort(GM_ADDR experts, GM_ADDR wsExp, GM_ADDR wsPos,
                                                        GM_ADDR wsCounts, GM_ADDR before, GM_ADDR workspace,
                                                        GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(MoeDispatchTilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    MoeDispatchSort op;
    op.Init(experts, wsExp, wsPos, wsCounts, before, &tilingData, &pipe);
    op.Process();
}

extern "C" __global__ __aicore__ void moe_dispatch_place(GM_ADDR wsExp, GM_ADDR wsPos, GM_ADDR wsCounts,
                                                         GM_ADDR before, GM_ADDR sortedRow, GM_ADDR sortedExp,
                                                         GM_ADDR expanded, GM_ADDR count, GM_ADDR trash,
                                                         GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(MoeDispatchTilingData);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    MoeDispatchPlace op;
    op.Init(wsExp, wsPos, wsCounts, before, sortedRow, sortedExp, expanded, count, trash, &tilingData, &pipe);
    op.Process();
}
