"""What a launch costs before its blocks run: a fixed part plus a part per core started.

Source: the vendor's performance guide, asc-devkit docs/zh/guide/算子实践参考/SIMD算子性能优化/
头尾开销优化/设置合适的核数和算子Kernel类型.md: every core started pays start-up and initialisation
(核启动, TLB misses, same-address conflicts, variable initialisation), so "头开销会随着使用的核数增加
而增加" — the head overhead grows with the number of cores launched. And: "以纯Vector算子为例，如果
以混合启动的方式执行该算子，调度器会同时启动Vector核和Cube核。然而，此时Cube核并没有实际的计算指令，
但仍会产生核启动和核初始化的头开销" — a pure vector kernel launched as mixed AIC+AIV also starts
cube cores that have nothing to do, and pays their start-up too.

    overhead_us = launch_overhead_us + launch_per_core_us x (cores started, all kinds)

The kernel types (asc-devkit docs/zh/api/SIMD-API/基础API/Kernel-Tiling/设置Kernel类型.md,
``KERNEL_TASK_TYPE_DEFAULT``); ``block_dim`` is the number of blocks of the kernel's own cores:

=================  ========================  ===============================================
kernel type        Ascend C                  cores started
=================  ========================  ===============================================
``vector``         KERNEL_TYPE_AIV_ONLY      min(block_dim, vector cores)
``cube``           KERNEL_TYPE_AIC_ONLY      min(block_dim, cube cores)
``mix_aic_1_2``    KERNEL_TYPE_MIX_AIC_1_2   the vector cores above, plus one (idle) cube core
(alias ``mix``)                              per two: min(ceil(block_dim / 2), cube cores)
``mix_aic_1_1``    KERNEL_TYPE_MIX_AIC_1_1   the vector cores above, plus one (idle) cube core
                                             each: min(block_dim, cube cores)
=================  ========================  ===============================================

``mix`` is the 1:2 split because that is what the operator project picks when it detects the
type itself ("默认按照AIV:AIC为1:2的配比下发任务", the same guide page). The mixed types are listed
for the A2 / A3 / 950 products only; the 310P (Atlas 推理系列产品) takes KERNEL_TYPE_AICORE and
KERNEL_TYPE_MIX_VECTOR_CORE, whose AI cores carry cube and vector together, so a mixed AIC:AIV
type does not apply there (:func:`kernel_type_reason` says so).

Only the head overhead is modelled: a mixed launch runs its blocks on the vector cores exactly
as a vector launch does (the idle cube cores do not slow them down).
"""

from __future__ import annotations

import math

from ..hardware import HardwareSpec

#: kernel type -> (Ascend C name, cores the blocks run on, idle cube cores per vector core)
KERNEL_TYPES = {
    "vector": ("KERNEL_TYPE_AIV_ONLY", "vector", 0.0),
    "cube": ("KERNEL_TYPE_AIC_ONLY", "cube", 0.0),
    "mix_aic_1_2": ("KERNEL_TYPE_MIX_AIC_1_2", "vector", 0.5),
    "mix_aic_1_1": ("KERNEL_TYPE_MIX_AIC_1_1", "vector", 1.0),
}
KERNEL_TYPE_ALIASES = {"mix": "mix_aic_1_2"}
#: instruction sets whose products take the mixed AIC:AIV types (设置Kernel类型.md, 约束说明)
MIX_ISAS = ("ascend910b",)


def canonical_kernel_type(kernel_type: str) -> str:
    """The kernel type's canonical name (``mix`` -> ``mix_aic_1_2``), or a ValueError naming the
    valid ones."""
    name = KERNEL_TYPE_ALIASES.get(kernel_type, kernel_type) if isinstance(kernel_type, str) else None
    if name not in KERNEL_TYPES:
        raise ValueError(f"kernel type must be one of {sorted(KERNEL_TYPES) + sorted(KERNEL_TYPE_ALIASES)} "
                         f"(Ascend C's KERNEL_TYPE_AIV_ONLY, AIC_ONLY, MIX_AIC_1_2, MIX_AIC_1_1); "
                         f"got {kernel_type!r}")
    return name


def execution_core_type(kernel_type: str) -> str:
    """``"vector"`` or ``"cube"``: the cores a kernel of this type runs its blocks on."""
    return KERNEL_TYPES[canonical_kernel_type(kernel_type)][1]


def kernel_type_reason(hw: HardwareSpec, kernel_type: str) -> str | None:
    """Why chip ``hw`` cannot launch this kernel type (None when it can)."""
    name = canonical_kernel_type(kernel_type)
    if name.startswith("mix") and hw.isa not in MIX_ISAS:
        return (f"{hw.name} ({hw.isa}) has no {KERNEL_TYPES[name][0]}: the mixed AIC:AIV kernel types exist on "
                "the A2 / A3 / 950 products only (设置Kernel类型.md); its AI cores carry cube and vector "
                "together, so launch the kernel as 'vector'")
    return None


def cores_launched(hw: HardwareSpec, kernel_type: str, block_dim: int) -> dict[str, int]:
    """{"vector": n, "cube": m}: the cores a launch of ``block_dim`` blocks starts (table above)."""
    if isinstance(block_dim, bool) or not isinstance(block_dim, int) or block_dim < 1:
        raise ValueError(f"block_dim must be a whole number >= 1, got {block_dim!r}")
    _, runs_on, cube_per_vector = KERNEL_TYPES[canonical_kernel_type(kernel_type)]
    if runs_on == "cube":
        return {"vector": 0, "cube": min(block_dim, hw.cube_cores)}
    vector = min(block_dim, hw.vector_cores)
    idle_cube = min(math.ceil(block_dim * cube_per_vector), hw.cube_cores) if cube_per_vector else 0
    return {"vector": vector, "cube": idle_cube}


def launch_overhead_us(hw: HardwareSpec, kernel_type: str, block_dim: int) -> float:
    """``launch_overhead_us + launch_per_core_us x cores started`` (µs; module docstring)."""
    started = sum(cores_launched(hw, kernel_type, block_dim).values())
    return hw.launch_overhead_us + hw.launch_per_core_us * started


def full_launch_overhead_us(hw: HardwareSpec, kernel_type: str = "vector") -> float:
    """The head overhead of a launch on every core of the kernel's kind (µs): what a timeline of a
    kernel launched on all vector cores shows first, and what docs/cost_model_system.md's "about 20 µs for an
    empty kernel on all cores" measures on the 910B2."""
    runs_on = execution_core_type(kernel_type)
    return launch_overhead_us(hw, kernel_type, max(1, hw.cores(runs_on)))
