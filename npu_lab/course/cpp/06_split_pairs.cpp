// chips: ascend-910b2
// Split (value, index-bits) pairs with two GatherMask: the Ascend C of your my_split_pairs (06.gather_mask).
#include "kernel_operator.h"
using namespace AscendC;

struct RowTiling {            // the host's struct (npu_lab.course.ex06.RowTiling)
    int32_t rows;             // pairs in all
    int32_t cols;
    int32_t tile;             // pairs per block
    int32_t K;
};

class KernelSplitPairs {
public:
    __aicore__ inline KernelSplitPairs() {}

    __aicore__ inline void Init(GM_ADDR pairs, GM_ADDR values, GM_ADDR indices, const RowTiling& tiling, TPipe* pipeIn)
    {
        pipe = pipeIn;
        first = GetBlockIdx() * tiling.tile;
        n = tiling.rows - first < tiling.tile ? tiling.rows - first : tiling.tile;
        int32_t Tp = (tiling.tile + 31) / 32 * 32;     // pairs rounded up to whole 256-byte repeats
        pairsGm.SetGlobalBuffer((__gm__ float*)pairs);
        valuesGm.SetGlobalBuffer((__gm__ float*)values);
        indicesGm.SetGlobalBuffer((__gm__ int32_t*)indices);
        pipe->InitBuffer(pairsQueue, 1, Tp * 2 * sizeof(float));
        pipe->InitBuffer(valuesQueue, 1, Tp * sizeof(float));
        pipe->InitBuffer(indicesQueue, 1, Tp * sizeof(int32_t));
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
        LocalTensor<float> pairs = pairsQueue.AllocTensor<float>();
        DataCopyPad(pairs, pairsGm[2 * first], DataCopyExtParams{1, static_cast<uint32_t>(2 * n * sizeof(float)), 0, 0, 0},
                    DataCopyPadExtParams<float>{false, 0, 0, 0});
        pairsQueue.EnQue(pairs);
    }

    __aicore__ inline void Compute()
    {
        LocalTensor<float> pairs = pairsQueue.DeQue<float>();
        LocalTensor<float> values = valuesQueue.AllocTensor<float>();
        LocalTensor<int32_t> indices = indicesQueue.AllocTensor<int32_t>();
        uint64_t rsvdCnt = 0;        // GatherMask writes how many elements it kept
        // YOUR CODE: GatherMaskParams params(1, repeats, 8, 0) (a repeat is 64 floats of the 2n); GatherMask
        // with built-in pattern 1 (even elements: the values) into values, and with pattern 2 (odd: the index
        // bits) through ReinterpretCast<uint32_t>() views of indices and pairs; the last argument is rsvdCnt.
        // ### BEGIN SOLUTION
        GatherMaskParams params(1, (2 * n + 63) / 64, 8, 0);
        GatherMask(values, pairs, 1, false, 0, params, rsvdCnt);
        GatherMask(indices.ReinterpretCast<uint32_t>(), pairs.ReinterpretCast<uint32_t>(), 2, false, 0, params, rsvdCnt);
        // ### END SOLUTION
        pairsQueue.FreeTensor(pairs);
        valuesQueue.EnQue(values);
        indicesQueue.EnQue(indices);
    }

    __aicore__ inline void CopyOut()
    {
        LocalTensor<float> values = valuesQueue.DeQue<float>();
        LocalTensor<int32_t> indices = indicesQueue.DeQue<int32_t>();
        DataCopyPad(valuesGm[first], values, DataCopyExtParams{1, static_cast<uint32_t>(n * sizeof(float)), 0, 0, 0});
        DataCopyPad(indicesGm[first], indices, DataCopyExtParams{1, static_cast<uint32_t>(n * sizeof(int32_t)), 0, 0, 0});
        valuesQueue.FreeTensor(values);
        indicesQueue.FreeTensor(indices);
    }

    TPipe* pipe;
    TQue<TPosition::VECIN, 1> pairsQueue;
    TQue<TPosition::VECOUT, 1> valuesQueue, indicesQueue;
    GlobalTensor<float> pairsGm, valuesGm;
    GlobalTensor<int32_t> indicesGm;
    int32_t first, n;
};

extern "C" __global__ __aicore__ void my_split_pairs(GM_ADDR pairs, GM_ADDR values, GM_ADDR indices, GM_ADDR workspace,
                                                     GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(RowTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelSplitPairs op;
    op.Init(pairs, values, indices, tilingData, &pipe);
    op.Process();
}
