// chips: ascend-910b2 ascend-310p3
// scaled_add: z = alpha * x + y, the Ascend C beside scaled_add.py (scaled_add_kernel).
//
// The same calls in the same order as the Python; npu_lab.kernels.listings checks that against a
// traced run (tests/test_listings.py). Pipes: MTE2 (load x, y) -> V (Muls, Add) -> MTE3 (store z).
// num_buffers = 2 gives each queue two slots, so MTE2 loads tile i+1 while V computes tile i.
//
// References (asc-devkit docs/zh/api/SIMD-API/基础API/): 资源管理/TPipe/InitBuffer.md,
// 资源管理/TQue/*.md, Memory矢量计算/数据搬运/DataCopy（GM与UB连续数据搬运）.md,
// Memory矢量计算/数据搬运/DataCopyPad（GMToUB非对齐数据搬运）.md, Memory矢量计算/基础算术/Muls.md, Add.md.
#include "kernel_operator.h"
using namespace AscendC;

// The host's tiling struct (scaled_add.py ScaledAddTiling): four int32 and a float, in this order.
struct ScaledAddTiling {
    int32_t total;        // elements in x, y, z
    int32_t block_len;    // elements per block (whole 32-byte blocks)
    int32_t tile_len;     // elements per tile (a multiple of 8)
    int32_t num_buffers;  // UB slots per queue: 1 (single) or 2 (double buffering)
    float alpha;          // the scalar operand: an entry takes GM addresses only, so it travels here
};

class KernelScaledAdd {
public:
    __aicore__ inline KernelScaledAdd() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR z, const ScaledAddTiling& tiling, TPipe* pipeIn)
    {
        pipe = pipeIn;
        alpha = tiling.alpha;
        tileLen = tiling.tile_len;
        start = GetBlockIdx() * tiling.block_len;                        // this block's slice
        length = tiling.total - start < tiling.block_len ? tiling.total - start : tiling.block_len;
        xGm.SetGlobalBuffer((__gm__ float*)x);
        yGm.SetGlobalBuffer((__gm__ float*)y);
        zGm.SetGlobalBuffer((__gm__ float*)z);
        pipe->InitBuffer(xQueue, tiling.num_buffers, tileLen * sizeof(float));
        pipe->InitBuffer(yQueue, tiling.num_buffers, tileLen * sizeof(float));
        pipe->InitBuffer(zQueue, tiling.num_buffers, tileLen * sizeof(float));
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
    // MTE2 fills a free slot, then hands it to V. A tail that is not whole 32-byte blocks needs
    // DataCopyPad: DataCopy would round it down.
    __aicore__ inline void CopyIn(int32_t lo, int32_t n)
    {
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
    }

    // V waits for the loads (DeQue), writes an output slot, frees the input slots.
    __aicore__ inline void Compute(int32_t n)
    {
        LocalTensor<float> x = xQueue.DeQue<float>();
        LocalTensor<float> y = yQueue.DeQue<float>();
        LocalTensor<float> z = zQueue.AllocTensor<float>();
        Muls(z, x, alpha, n);
        Add(z, z, y, n);
        zQueue.EnQue(z);
        xQueue.FreeTensor(x);
        yQueue.FreeTensor(y);
    }

    // MTE3 waits for V (DeQue), stores, then frees the slot for the next tile.
    __aicore__ inline void CopyOut(int32_t lo, int32_t n)
    {
        LocalTensor<float> z = zQueue.DeQue<float>();
        if (n % 8 == 0) {
            DataCopy(zGm[lo], z, n);
        } else {
            DataCopyPad(zGm[lo], z, DataCopyExtParams{1, static_cast<uint32_t>(n * sizeof(float)), 0, 0, 0});
        }
        zQueue.FreeTensor(z);
    }

    TPipe* pipe;          // the entry's TPipe (避免TPipe在对象内创建和初始化.md)
    TQue<TPosition::VECIN, 1> xQueue, yQueue;   // depth 1: one EnQue before each DeQue
    TQue<TPosition::VECOUT, 1> zQueue;
    GlobalTensor<float> xGm, yGm, zGm;
    float alpha;
    int32_t tileLen, start, length;
};

// The entry as an operator project writes it: GM addresses only, ending in workspace and tiling
// (alpha is in the tiling struct); the struct registered before GET_TILING_DATA; the TPipe created
// here and handed to the kernel class by pointer.
extern "C" __global__ __aicore__ void scaled_add(GM_ADDR x, GM_ADDR y, GM_ADDR z, GM_ADDR workspace, GM_ADDR tiling)
{
    REGISTER_TILING_DEFAULT(ScaledAddTiling);
    GET_TILING_DATA(tilingData, tiling);
    TPipe pipe;                     // the entry owns the TPipe; the kernel class gets a pointer
    KernelScaledAdd op;
    op.Init(x, y, z, tilingData, &pipe);
    op.Process();
}
