// The host side of the fused gating kernel (v4, npu_lab/kernels/moe_gating/sorted_topk.cpp) as an ACL program,
// written the way asc-devkit's examples write theirs (examples/01_simd_cpp_api/02_features/04_compile/
// 00_basic_compile/main.cpp): init, device memory, copies in, the tiling struct computed on the host and copied,
// the <<<blockDim, l2ctrl, stream>>> launch, synchronise, copy back, free. Host code (.cc), not a device listing.
// Checked here: C++ syntax and types against stand-in declarations of the ACL calls (npu_lab.kernels.moe_layer.host);
// NOT checked: the real acl.h (not in asc-devkit), the launch syntax and the kernel symbol (bisheng's).
#include <cstdint>
#include <cstdio>
#include <vector>
#include "acl/acl.h"

// Same fields, same order as MoeGatingV4TilingData in sorted_topk.cpp (and MoeGatingV4Tiling in Python).
struct MoeGatingV4TilingData {
    uint32_t row, col, colBytesAlign, colAlign, k, kAlign, blockFormer, blockNum, blockTail, ubFormer;
    uint32_t ubLoopOfFormerBlock, ubTailOfFormerBlock, ubLoopOfTailBlock, ubTailOfTailBlock;
    uint32_t topKValuesMask, topKIndicesMask, bufferElemSize, softmaxFlag;
};

extern "C" void moe_gating_v4(uint8_t* gating, uint8_t* indices, uint8_t* weights, uint8_t* workspace,
                              uint8_t* tiling);

#define CHECK_ACL(call)                                                               \
    do {                                                                              \
        aclError err = (call);                                                        \
        if (err != ACL_SUCCESS) {                                                     \
            std::printf("%s failed: %d (line %d)\n", #call, static_cast<int>(err), __LINE__); \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

static uint32_t CeilDiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

// The host tiling of calculate_moe_gating_v4_tiling, cut to its skeleton: rows per core, blocks, rows per UB loop
// (ubFormer is taken as given here; the Python searches the largest that fits the UB).
static MoeGatingV4TilingData Tiling(uint32_t rows, uint32_t experts, uint32_t k, uint32_t cores, uint32_t ubFormer)
{
    MoeGatingV4TilingData t{};
    t.row = rows;
    t.col = experts;
    t.colBytesAlign = CeilDiv(experts, 8) * 8;
    t.colAlign = CeilDiv(experts, 32) * 32;
    t.k = k;
    t.kAlign = 8;
    t.blockFormer = CeilDiv(rows, cores);
    t.blockNum = CeilDiv(rows, t.blockFormer);
    t.blockTail = rows - (t.blockNum - 1) * t.blockFormer;
    t.ubFormer = ubFormer < t.blockFormer ? ubFormer : t.blockFormer;
    t.ubLoopOfFormerBlock = CeilDiv(t.blockFormer, t.ubFormer);
    t.ubTailOfFormerBlock = t.blockFormer - (t.ubLoopOfFormerBlock - 1) * t.ubFormer;
    t.ubLoopOfTailBlock = CeilDiv(t.blockTail, t.ubFormer);
    t.ubTailOfTailBlock = t.blockTail - (t.ubLoopOfTailBlock - 1) * t.ubFormer;
    for (uint32_t i = 0; i < t.kAlign; i++) { t.topKValuesMask |= 1u << (2 * i); }
    for (uint32_t i = 0; i < k; i++) { t.topKIndicesMask |= 1u << (2 * i + 1); }
    t.bufferElemSize = t.ubFormer * t.colAlign > 64 ? t.ubFormer * t.colAlign : 64;
    return t;
}

int main()
{
    const uint32_t rows = 1024, experts = 64, k = 2, cores = 48;
    std::vector<float> logits(static_cast<size_t>(rows) * experts, 0.0f);
    std::vector<int32_t> indices(static_cast<size_t>(rows) * k);
    std::vector<float> weights(static_cast<size_t>(rows) * k);
    MoeGatingV4TilingData tiling = Tiling(rows, experts, k, cores, 8);

    int32_t deviceId = 0;
    aclrtStream stream = nullptr;
    CHECK_ACL(aclInit(nullptr));
    CHECK_ACL(aclrtSetDevice(deviceId));
    CHECK_ACL(aclrtCreateStream(&stream));

    size_t inBytes = logits.size() * sizeof(float);
    size_t idxBytes = indices.size() * sizeof(int32_t);
    size_t wBytes = weights.size() * sizeof(float);
    uint8_t *gatingDev = nullptr, *indicesDev = nullptr, *weightsDev = nullptr, *tilingDev = nullptr;
    CHECK_ACL(aclrtMalloc(reinterpret_cast<void**>(&gatingDev), inBytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc(reinterpret_cast<void**>(&indicesDev), idxBytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc(reinterpret_cast<void**>(&weightsDev), wBytes, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_ACL(aclrtMalloc(reinterpret_cast<void**>(&tilingDev), sizeof(tiling), ACL_MEM_MALLOC_HUGE_FIRST));

    CHECK_ACL(aclrtMemcpy(gatingDev, inBytes, logits.data(), inBytes, ACL_MEMCPY_HOST_TO_DEVICE));
    // the tiling struct travels as bytes: the kernel's GET_TILING_DATA reads the same layout
    CHECK_ACL(aclrtMemcpy(tilingDev, sizeof(tiling), &tiling, sizeof(tiling), ACL_MEMCPY_HOST_TO_DEVICE));

    // blockDim = tiling.blockNum (<= the vector cores); l2ctrl = nullptr; one stream
    moe_gating_v4<<<tiling.blockNum, nullptr, stream>>>(gatingDev, indicesDev, weightsDev, nullptr, tilingDev);
    CHECK_ACL(aclrtSynchronizeStream(stream));

    CHECK_ACL(aclrtMemcpy(indices.data(), idxBytes, indicesDev, idxBytes, ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK_ACL(aclrtMemcpy(weights.data(), wBytes, weightsDev, wBytes, ACL_MEMCPY_DEVICE_TO_HOST));

    CHECK_ACL(aclrtFree(gatingDev));
    CHECK_ACL(aclrtFree(indicesDev));
    CHECK_ACL(aclrtFree(weightsDev));
    CHECK_ACL(aclrtFree(tilingDev));
    CHECK_ACL(aclrtDestroyStream(stream));
    CHECK_ACL(aclrtResetDevice(deviceId));
    CHECK_ACL(aclFinalize());
    std::printf("row 0: experts %d, %d\n", indices[0], indices[1]);
    return 0;
}
