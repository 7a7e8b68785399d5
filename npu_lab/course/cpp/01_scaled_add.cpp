// chips: ascend-910b2 ascend-310p3
// z = alpha * x + y, two slots per queue: the Ascend C of your my_scaled_add (01.scaled_add_double_buffer).
#include "kernel_operator.h"
using namespace AscendC;

struct ScaledAddTiling {      // the host's struct (npu_lab.kernels.scaled_add.ScaledAddTiling)
    int32_t total;            // elements in x, y, z
    int32_t block_len;        // elements per block
    int32_t tile_len;         // elements per tile
    int32_t num_buffers;      // UB slots per queue
    float alpha;
};

class KernelScaledAdd {
public:
    __aicore__ inline KernelScaledAdd() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR z, const ScaledAddTiling& tiling, TPipe* pipeIn)
    {
        pipe = pipeIn;
        alpha = tiling.alpha;
        tileLen = tiling.tile_len;
        start = GetBlockIdx() * tiling.block_len;
        length = tiling.total - start < tiling.block_len ? tiling.total - start : tiling.block_len;
        xGm.SetGlobalBuffer((__gm__ float*)x);
        yGm.SetGlobalBuffer((__gm__ float*)y);
        zGm.SetGlobalBuffer((__gm__ float*)z);
        // YOUR CODE: two slots of tileLen floats for each queue (pipe->InitBuffer(queue, slots, bytes))
        // ### BEGIN SOLUTION
        pipe->InitBuffer(xQueue, 2, tileLen * sizeof(float));
        pipe->InitBuffer(yQueue, 2, tileLen * sizeof(float));
        pipe->InitBuffer(zQueue, 2, tileLen * sizeof(float));
        // ### END SOLUTION
    }

    __aicore__ inline void Process()
    {
        for (int32_t offset = 0; offset < length; offset += tileLen) {
            int32_t n = length - offset < tileLen ? length - offset : tileLen;
            CopyIn(start + offset, n);
            Compute(n);
            CopyOut(start + offset, n);
        }
    }

private:
    __aicore__ inline void CopyIn(int32_t lo, int32_t n)
    {
        // YOUR CODE: what your Python's CopyIn does, call for call: AllocTensor<float>() from xQueue and
        // yQueue, DataCopy(dst, xGm[lo], n) -- or, when n % 8 != 0, DataCopyPad(dst, xGm[lo],
        // DataCopyExtParams{1, bytes, 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0}) -- then EnQue.
        // ### BEGIN SOLUTION
        LocalTensor<float> x = xQueue.AllocTensor<float>();
        LocalTensor<float> y = yQueue.AllocTensor<float>();
        if (n % 8 == 0) {
            DataCopy(x, xGm[lo], n);
            DataCopy(y, yGm[lo], n);
        } else {
            DataCopyPad(x, xGm[lo], DataCopyExtParams{1, static_cast<uint32_t>(n * sizeof(float)), 0, 0, 0},
                        DataCopyPadExtParams<float>{false, 0, 0, 0});
            DataCopyPad(y, yGm[lo], DataCopyExtParams{1, static_cast<uint32_t>(n * sizeof(float)), 0, 0, 0},
                        DataCopyPadExtParams<float>{false, 0, 0, 0});
        }
        xQueue.EnQue(x);
        yQueue.EnQue(y);
        // ### END SOLUTION
    }

    __aicore__ inline void Compute(int32_t n)
    {
        // YOUR CODE: DeQue<float>() x and y, AllocTensor z, Muls(z, x, alpha, n), Add(z, z, y, n),
        // EnQue z, FreeTensor x and y -- in your Python's order.
        // ### BEGIN SOLUTION
        LocalTensor<float> x = xQueue.DeQue<float>();
        LocalTensor<float> y = yQueue.DeQue<float>();
        LocalTensor<float> z = zQueue.AllocTensor<float>();
        Muls(z, x, alpha, n);
        Add(z, z, y, n);
        zQueue.EnQue(z);
        xQueue.FreeTensor(x);
        yQueue.FreeTensor(y);
        // ### END SOLUTION
    }

    __aicore__ inline void CopyOut(int32_t lo, int32_t n)
    {
        // YOUR CODE: DeQue z, store it (DataCopy, or DataCopyPad(zGm[lo], z, DataCopyExtParams{...}) for a
        // tail), FreeTensor z.
        // ### BEGIN SOLUTION
        LocalTensor<float> z = zQueue.DeQue<float>();
        if (n % 8 == 0) {
            DataCopy(zGm[lo], z, n);
        } else {
            DataCopyPad(zGm[lo], z, DataCopyExtParams{1, static_cast<uint32_t>(n * sizeof(float)), 0, 0, 0});
        }
        zQueue.FreeTensor(z);
        // ### END SOLUTION
    }

    TPipe* pipe;
    TQue<TPosition::VECIN, 2> xQueue, yQueue;
    TQue<TPosition::VECOUT, 2> zQueue;
    GlobalTensor<float> xGm, yGm, zGm;
    float alpha;
    int32_t tileLen, start, length;
};

extern "C" __global__ __aicore__ void my_scaled_add(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(ScaledAddTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;
    KernelScaledAdd op;
    op.Init(x, y, z, tilingData, &pipe);
    op.Process();
}
