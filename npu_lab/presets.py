"""Chip presets with the provenance of every number (docs/cost_model.md §8: how the labels were checked).

``get_preset(name)`` returns a :class:`~npu_lab.hardware.HardwareSpec`; ``list_presets()`` names
them. The ``article`` preset is the 910B2 with a few fields least-squares fitted to the first
article's tileS table; it is read from ``data/article_fitted_chip.json`` (regenerate it with
``python -m npu_lab.kernels.moe_gating.article --write``).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from .hardware import HardwareSpec

DATA_DIR = Path(__file__).resolve().parent.parent / "data"

_API = "asc-devkit docs/zh/api/SIMD-API/基础API/"
_COMMON_ASSUMED = {
    "core_dma_bandwidth_gbps": ("assumed", "64 B/cycle per core MTE peak; not published"),
    "dma_latency_cycles": ("assumed", "~0.5 us from issue to first byte; not published"),
    "vector_issue_cycles": ("assumed", "start-up of a vector instruction; not published (Vector指令理论性能汇总.md "
                            "gives throughputs only, and notes that even a NOP with repeatTime 0 costs time)"),
    "scalar_op_cycles": ("assumed", "in-order scalar core, 1 op per cycle"),
    "scalar_ub_access_cycles": ("assumed", "scalar load/store to UB goes through the scalar data cache"),
    "scalar_exp_cycles": ("assumed", "exp as a short software routine on the scalar unit; not published"),
    "scalar_issue_cycles": ("assumed", "scalar unit pushes one instruction into a pipe queue"),
    "block_bytes": ("vendor-doc", _API + "Memory矢量计算/数据搬运/DataCopy（GM与UB连续数据搬运）.md: GM<->UB "
                    "copies move whole 32-byte DataBlocks"),
    "vector_repeat_bytes": ("vendor-doc", _API + "Memory矢量计算/基础算术/Exp.md (every vector page): 每次读取连续"
                            "的256Bytes数据 — one repeat = 8 blocks x 32 B"),
    "max_repeat": ("vendor-doc", _API + "Memory矢量计算/基础算术/Exp.md: repeatTime is a uint8_t"),
    "block_dispatch_us": ("assumed", "task scheduler hands out blocks one at a time; not published"),
}

# ---- per-instruction rates (issue 15 §5; docs/cost_model.md §3a) ------------------------------
VECTOR_RATES_DOC = "asc-devkit docs/zh/api/附录/Vector指令理论性能汇总.md"
#: The page's published throughputs ("理论并行度", elements per cycle) for the instructions the
#: model prices, Atlas A2/A3 (NPU arch 2201; the page also covers the 950, not the 310P):
#: instruction -> (table, {dtype: elements per cycle}). A rate is how fast the V pipe takes an
#: instruction's elements (its occupancy), not its latency.
PUBLISHED_VECTOR_RATES = {
    "Add": (6, {"half": 128, "float": 64, "int32": 64}),
    "Exp": (6, {"half": 32, "float": 32}),
    "Div": (6, {"half": 32, "float": 32}),
    "ReduceRepeat": (11, {"half": Fraction(128, 7), "float": Fraction(64, 7)}),
    "Sort32": (14, {"half": 2, "float": 2}),
    "MrgSort": (14, {"half": 2, "float": 2}),
    "GatherMask": (9, {"half": 64, "float": 32}),
}
_ITEMSIZE = {"half": 2, "float": 4, "int32": 4}


def published_cycles_per_repeat(instruction: str, dtype: str = "float", elements: int | None = None) -> float:
    """Cycles one repeat of ``instruction`` takes at the page's published rate: the elements of a
    256-byte repeat of ``dtype`` (or ``elements``: 32 for a Sort32 repeat) / elements per cycle."""
    if instruction not in PUBLISHED_VECTOR_RATES:
        raise ValueError(f"no published rate for {instruction!r} here; known: {sorted(PUBLISHED_VECTOR_RATES)} "
                         f"(the rest of {VECTOR_RATES_DOC} is listed in docs/cost_model.md §3a)")
    rates = PUBLISHED_VECTOR_RATES[instruction][1]
    if dtype not in rates:
        raise ValueError(f"{instruction} has a published rate for {sorted(rates)}, not {dtype!r}")
    if elements is not None and (isinstance(elements, bool) or not isinstance(elements, int) or elements < 1):
        raise ValueError(f"elements must be a whole number >= 1 (32 for one Sort32 repeat), got {elements!r}")
    n = elements if elements is not None else 256 // _ITEMSIZE[dtype]
    return float(Fraction(n) / Fraction(rates[dtype]))


def _rate_note(instruction: str, what: str, dtype: str = "float", elements: int | None = None) -> str:
    table, rates = PUBLISHED_VECTOR_RATES[instruction]
    rate = rates[dtype]
    n = elements if elements is not None else 256 // _ITEMSIZE[dtype]
    return (f"{VECTOR_RATES_DOC} table {table} (Atlas A2/A3): {instruction} {dtype} {rate} element/cycle, so "
            f"{n} elements ({what}) take {published_cycles_per_repeat(instruction, dtype, elements):g} cycles; "
            "a throughput (理论并行度), not a latency")


_VECTOR_RATES = dict(
    vector_cycles_per_repeat=published_cycles_per_repeat("Add"),
    vector_div_cycles_per_repeat=published_cycles_per_repeat("Div"),
    vector_exp_cycles_per_repeat=published_cycles_per_repeat("Exp"),
    vector_reduce_cycles_per_repeat=published_cycles_per_repeat("ReduceRepeat"),
    vector_sort_cycles_per_repeat=published_cycles_per_repeat("Sort32", elements=32),
    vector_gather_mask_cycles_per_repeat=published_cycles_per_repeat("GatherMask"),
)

_VECTOR_RATES_PROVENANCE = {
    "vector_cycles_per_repeat": ("vendor-doc", _rate_note("Add", "one 256-B repeat") + "; the same 1 cycle a "
                                 "repeat for Sub/Mul/Max/Min/Adds/Muls/Maxs/ShiftLeft (tables 6-7), Compare/Select "
                                 "(table 9), Cast by its wider type (table 10), Duplicate/Brcb/CreateVecIndex "
                                 "(table 13); Copy and ArithProgression are not listed (assumed the same)"),
    "vector_div_cycles_per_repeat": ("vendor-doc", _rate_note("Div", "a float32 repeat") + "; half is also 32 "
                                     "element/cycle, so a 128-half repeat takes 4"),
    "vector_exp_cycles_per_repeat": ("vendor-doc", _rate_note("Exp", "a float32 repeat") + "; half is also 32 "
                                     "element/cycle, so a 128-half repeat takes 4"),
    "vector_reduce_cycles_per_repeat": ("vendor-doc", _rate_note("ReduceRepeat", "one repeat") + " (half: 128/7, "
                                        "also 7 a repeat). WholeReduceMax/Min/Sum were renamed ReduceRepeat in 9.1; "
                                        "ReduceMax/ReduceSum are composed (软仿指令), priced here pass by pass at "
                                        "this rate"),
    "vector_sort_cycles_per_repeat": ("vendor-doc", _rate_note("Sort32", "one Sort32 repeat", elements=32)
                                      + "; MrgSort also 2 element/cycle: 16 cycles per 32 pairs merged"),
    "vector_gather_mask_cycles_per_repeat": ("vendor-doc", _rate_note("GatherMask", "a 256-B float32 source repeat")
                                             + "; half is 64 element/cycle: also 2 a repeat"),
    "cube_fractal_cycles": ("vendor-doc", "asc-devkit docs/zh/api/附录/Cube指令理论性能汇总.md table 1 (NPU arch "
                            "2201): Mmad half cube_m x cube_n x cube_k = 16 x 16 x 16 per cycle, so 1 cycle per "
                            "16x16x16 fractal (float 16x16x4: 4 cycles; int8 16x16x32); the head cost Δt of the "
                            "page's formula is not published"),
}


def _assumed_for_310p(prov: dict) -> dict:
    """The 310P's per-instruction rates: the A2/A3 figures, labelled assumed (nothing is published
    for Atlas 推理系列产品: both rate pages cover A2/A3 and the 950 only)."""
    return {field: ("assumed", "taken from the 910B: nothing is published for the 310P (Atlas 推理系列产品; "
                    "the rate pages cover Atlas A2/A3 and the 950 only); same 256-B repeat. 910B source: " + note)
            for field, (_, note) in prov.items()}


_GUIDE = "asc-devkit docs/zh/guide/算子实践参考/SIMD算子性能优化/内存访问/"
_BURST_NOTE = (_GUIDE + "尽量一次搬运较大的数据块.md gives the curve's shape (full bandwidth from about "
               "16 KB per copy); its measured figure is not in the mirror (an LFS pointer), so this "
               "point is ")

# ---- per-core cost model (issue 9 §1-2; docs/cost_model.md): values and provenance --------
_CORE_COST_MODEL = dict(
    dma_issue_cycles=32.0,
    dma_outstanding_requests=32,
    dma_burst_full_bytes=16384,
    dma_burst_efficiency_32b=0.05,
    dma_burst_efficiency_512b=0.3,
    dma_burst_efficiency_4kb=0.75,
    dma_gm_align_bytes=512,
    dma_gm_misaligned_efficiency=0.7,
    vector_latency_cycles=12.0,
    sync_flag_cycles=20.0,
    pipe_barrier_cycles=20.0,
)

_CORE_COST_PROVENANCE = {
    "dma_issue_cycles": ("assumed", "MTE descriptor decode and address generation per copy request; not "
                         "published. ~32 cycles keeps a tiny copy's pipe time small next to the 900-cycle latency"),
    "dma_outstanding_requests": ("assumed", "not published. A DMA engine is built to hide its own latency "
                                 "(Little's law): 900 cycles of latency / ~30 cycles per small request "
                                 "needs ~30 in flight, so 32"),
    "dma_burst_full_bytes": ("vendor-guide", _GUIDE + "尽量一次搬运较大的数据块.md: 单次搬运数据长度16KB以上时"
                             "，通常能较好地发挥出带宽的最佳性能"),
    "dma_burst_efficiency_32b": ("assumed", _BURST_NOTE + "assumed: one 32-byte block per burst wastes most "
                                 "of an HBM access (5 %)"),
    "dma_burst_efficiency_512b": ("assumed", _BURST_NOTE + "assumed: 512 B, one aligned GM line, 30 %"),
    "dma_burst_efficiency_4kb": ("assumed", _BURST_NOTE + "assumed: 4 KB, three quarters of the way up (75 %)"),
    "dma_gm_align_bytes": ("vendor-guide", _GUIDE + "GM地址尽量512B对齐.md: 保证GM地址512B对齐可以最有效的发挥出带宽的效率"),
    "vector_latency_cycles": ("assumed", "vector ALU pipeline depth; not published. About a dozen stages: a "
                              "dependent instruction starts ~28 cycles after its producer (16 issue + 12)"),
    "sync_flag_cycles": ("assumed", "SetFlag/WaitFlag round trip through the core's sync unit; no number is "
                         "published (docs/zh/api/SIMD-API/基础API/同步控制/核内同步/SetFlag-WaitFlag(ISASI).md "
                         "only says the waiter blocks until the source's earlier reads and writes completed); "
                         "a few tens of cycles"),
    "pipe_barrier_cycles": ("assumed", "PipeBarrier after the pipe drained; no number is published "
                            "(docs/zh/api/SIMD-API/基础API/同步控制/核内同步/PipeBarrier(ISASI).md: 会对性能产生影响)"),
}

# ---- the cube core (issue 17 §1): provenance of the cube fields (values: HardwareSpec's defaults) --
_CUBE_PERF = "asc-devkit docs/zh/api/附录/Cube指令理论性能汇总.md"


def _cube_provenance(isa: str) -> dict:
    """Provenance of the cube-core fields: the A2 figures of Cube指令理论性能汇总.md (the page covers
    A2 / A3 / 950 only, so on the 310P the same figures are assumed)."""
    published = "vendor-doc" if isa == "ascend910b" else "assumed"     # an API appendix page, not the guide
    where = "" if isa == "ascend910b" else " (the page covers A2/A3/950 only, not the 310P: the A2 figure, assumed here)"
    return {
        "cube_fractal_cycles": (published, _CUBE_PERF + " 表1: half x half, cube_m x cube_n x cube_k = 16 x 16 x 16 "
                                "per cycle (int8 16x16x32, float 16x16x4)" + where),
        "cube_mmad_head_cycles": ("assumed", _CUBE_PERF + " writes Mmad cycles as Δt + fractals / rate; Δt (头开销) "
                                  "is not given a value: 16 cycles assumed"),
        "mte1_l0a_bytes_per_cycle": (published, _CUBE_PERF + " 表3: LoadData (2D) L1 -> L0A 256 B/cycle" + where),
        "mte1_l0b_bytes_per_cycle": (published, _CUBE_PERF + " 表3: LoadData (2D) L1 -> L0B 128 B/cycle" + where),
        "mte1_head_cycles": ("assumed", _CUBE_PERF + ": the ΔT of a LoadData is not given a value: 16 cycles assumed"),
        "fixpipe_elements_per_cycle": ("assumed", _CUBE_PERF + " 表7 publishes 64 elements/cycle for L0C -> L1 "
                                       "(F322F16, NZ2NZ); L0C -> GM is not published: the same rate assumed, the "
                                       "GM write itself priced as a DMA" + where),
        "fixpipe_head_cycles": ("assumed", "start-up of a Fixpipe; not published: 32 cycles assumed"),
    }


_VECTOR_COSTS = dict(
    core_dma_bandwidth_gbps=None,  # filled per chip: 64 B/cycle x clock
    dma_latency_cycles=900.0,
    block_bytes=32,
    vector_repeat_bytes=256,
    max_repeat=255,
    vector_issue_cycles=16.0,
    **_VECTOR_RATES,
    scalar_op_cycles=1.0,
    scalar_ub_access_cycles=10.0,
    scalar_exp_cycles=40.0,
    scalar_issue_cycles=2.0,
    cube_fractal_cycles=1.0,
    block_dispatch_us=0.1,
    **_CORE_COST_MODEL,
)


def _costs(clock_ghz: float) -> dict:
    costs = dict(_VECTOR_COSTS)
    costs["core_dma_bandwidth_gbps"] = 64 * clock_ghz
    return costs


# ---- memory hierarchy and launch (docs/cost_model_system.md) -----------------------------------
_GUIDE = "asc-devkit docs/zh/guide/算子实践参考/SIMD算子性能优化/"
#: Launch overhead per core started. The guide (头尾开销优化/设置合适的核数和算子Kernel类型.md) says
#: the head overhead grows with the cores launched, but its figure (头开销随启动核数的变化.png) is
#: a Git-LFS pointer in the mirror: the shape is the guide's, the slope is assumed.
LAUNCH_PER_CORE_US = 0.1
#: An empty kernel on all 48 vector cores of the 910B2 costs about 20 us (a measurement the
#: course's notes report, medium confidence; the guide plots the head overhead against the cores
#: started in 头开销随启动核数的变化.png, a Git-LFS pointer in the mirror, so the number cannot be
#: checked there): the fixed part is what is left after 48 cores' share.
EMPTY_KERNEL_ALL_CORES_US = 20.0


def _system_910b2() -> tuple[dict, dict]:
    """(values, provenance) of the L2 and launch fields of the 910B2."""
    values = dict(l2_bandwidth_gbps=7000.0, launch_per_core_us=LAUNCH_PER_CORE_US,
                  launch_overhead_us=round(EMPTY_KERNEL_ALL_CORES_US - 48 * LAUNCH_PER_CORE_US, 6))
    prov = {
        "l2_bandwidth_gbps": ("assumed", "not published. The figure comes from a hypothetical illustration: "
                              + _GUIDE + "内存访问/L2-Cache切分.md: '假设，AI处理器的L2 Cache大小为192MB，L2 Cache"
                              "读写混合带宽约为7TB/s，而GM的带宽约为1.6TB/s' (假设 = suppose); no chip is named"),
        "launch_per_core_us": ("assumed", _GUIDE + "头尾开销优化/设置合适的核数和算子Kernel类型.md: head "
                               "overhead grows with the cores launched (shape: vendor-guide; its figure is not "
                               "in the mirror, so 0.1 us per core is assumed)"),
        "launch_overhead_us": ("measured", "fixed part: about 20 us for an empty kernel on all 48 vector cores "
                               "(minus 48 x launch_per_core_us), a measurement the course's notes report for the "
                               "910B (medium confidence) but do not source; the guide's plot of head overhead "
                               "against cores started (" + _GUIDE + "头尾开销优化/设置合适的核数和算子Kernel类型.md, "
                               "figure 头开销随启动核数的变化.png) is a Git-LFS pointer in the mirror, so the number "
                               "cannot be checked against it"),
    }
    return values, prov


def _system_310p3() -> tuple[dict, dict]:
    """(values, provenance) of the L2 and launch fields of the 310P3 (all assumed)."""
    # nobody publishes the 310P's L2 bandwidth: the 910B's 7 TB/s scaled by AI cores and clock
    l2_gbps = round(7000.0 * (8 / 24) * (1.06 / 1.8), 1)
    values = dict(l2_bandwidth_gbps=l2_gbps, launch_per_core_us=LAUNCH_PER_CORE_US,
                  launch_overhead_us=round(EMPTY_KERNEL_ALL_CORES_US - 8 * LAUNCH_PER_CORE_US, 6))
    prov = {
        "l2_bandwidth_gbps": ("assumed", "not published: the 910B2's assumed 7 TB/s (a hypothetical in " + _GUIDE
                              + "内存访问/L2-Cache切分.md) scaled by AI cores (8/24) and clock (1.06/1.8 GHz)"),
        "launch_per_core_us": ("assumed", "taken equal to the 910B2's (shape from " + _GUIDE + "头尾开销优化/"
                               "设置合适的核数和算子Kernel类型.md)"),
        "launch_overhead_us": ("assumed", "not published; an empty kernel on all 8 cores taken equal to the "
                               "910B's reported 20 us (itself unsourced), minus 8 x launch_per_core_us"),
    }
    return values, prov


_ARCH_2201 = "asc-devkit docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md"


def ascend_910b2() -> HardwareSpec:
    prov = dict(_COMMON_ASSUMED)
    prov.update(_CORE_COST_PROVENANCE)
    prov.update({
        "dma_gm_misaligned_efficiency": ("vendor-guide", _GUIDE + "GM地址尽量512B对齐.md (Atlas A2): 32B对齐场景"
                                         "只能达到512B对齐场景的70% in the worst case; taken as a flat 70 %"),
        "vector_cores": ("vendor-config", "24 AIC + 48 AIV (1 cube : 2 vector)"),
        "cube_cores": ("vendor-config", "24 AIC"),
        "clock_ghz": ("vendor-config", "1.8 GHz (910B1 1.85, 910B4 1.5)"),
        "ub_bytes": ("vendor-config", "192 KB per AIV (the article assumes 256 KB)"),
        "ub_reserved_bytes": ("vendor-guide", _ARCH_2201 + ": 预留256B (ASC_UB_SIZE = 192 * 1024 - 256)"),
        "asc_reserved_ubuf_bytes": ("vendor-guide", _ARCH_2201 + ": 192KB - 256B - 8KB unless compiled with "
                                    "--cce-disable-asc-reserved-ubuf (Select uses the 8 KB)"),
        "l1_bytes": ("vendor-doc", _ARCH_2201 + ": L1 Buffer 512KB"),
        "l0a_bytes": ("vendor-doc", _ARCH_2201 + ": L0A Buffer 64KB"),
        "l0b_bytes": ("vendor-doc", _ARCH_2201 + ": L0B Buffer 64KB"),
        "l0c_bytes": ("vendor-doc", _ARCH_2201 + ": L0C Buffer 128KB"),
        "l2_bytes": ("vendor-config", "192 MB (the guide's L2-Cache切分.md uses 192 MB too, as a hypothetical)"),
        "hbm_bandwidth_gbps": ("assumed", "about 1.6 TB/s: the figure usually quoted for the 910B, but no vendor "
                               "datasheet is in the sources. The guide uses 1.6 TB/s only in a hypothetical ("
                               + _GUIDE + "内存访问/L2-Cache切分.md: 假设…GM的带宽约为1.6TB/s) and 1.8 TB/s as an "
                               "example of 'some AI processor' (算子实践参考/性能分析/分析性能数据.md); its Add case "
                               "study on an Atlas A2 training part with 48 vector cores measures 2.35 TB/s read+write "
                               "(典型算子实践案例/SIMD算子实现/Add矢量算子实践/高阶性能打磨.md), so this may be low "
                               "for some A2 parts"),
    })
    prov.update(_VECTOR_RATES_PROVENANCE)
    prov.update(_cube_provenance("ascend910b"))
    system, system_prov = _system_910b2()
    prov.update(system_prov)
    return HardwareSpec(
        name="ascend-910b2", vector_cores=48, cube_cores=24, clock_ghz=1.8,
        ub_bytes=192 * 1024, l1_bytes=512 * 1024, l0a_bytes=64 * 1024, l0b_bytes=64 * 1024,
        l0c_bytes=128 * 1024, l2_bytes=192 * 1024 * 1024, hbm_bandwidth_gbps=1600.0,
        description="Ascend 910B2 (training/inference, HBM)",
        provenance=prov, **_costs(1.8), **system)


def ascend_310p3() -> HardwareSpec:
    prov = dict(_COMMON_ASSUMED)
    prov.update(_CORE_COST_PROVENANCE)
    prov.update({
        "dma_gm_misaligned_efficiency": ("vendor-guide", _GUIDE + "GM地址尽量512B对齐.md: 本性能优化手段仅针对"
                                         "Atlas A2 ... 生效 — no alignment penalty on this chip (1.0)"),
        "vector_cores": ("vendor-config", "8 AI cores run vector kernels (7 extra vector cores not modelled)"),
        "cube_cores": ("vendor-config", "8 AI cores (cube + vector)"),
        "clock_ghz": ("vendor-config", "1.06 GHz AI core (vector cores 1.0 GHz)"),
        "ub_bytes": ("vendor-config", "256 KB"),
        "ub_reserved_bytes": ("assumed", "NPU架构版本2002.md states no framework reserve (the 256 B is a "
                              "cube+vector fusion reserve of 2201); taken as 0"),
        "asc_reserved_ubuf_bytes": ("vendor-config", "asc-devkit impl/basic_api/utils/kernel_utils_constants.h "
                                    "(__NPU_ARCH__ 2002): TMP_UB_OFFSET = 248 KB of 256 KB (Brcb.md: 预留8KB)"),
        "l1_bytes": ("vendor-config", "1 MB"),
        "l0a_bytes": ("vendor-config", "64 KB"),
        "l0b_bytes": ("vendor-config", "64 KB"),
        "l0c_bytes": ("vendor-config", "256 KB"),
        "l2_bytes": ("vendor-config", "16 MB"),
        "hbm_bandwidth_gbps": ("assumed", "about 204.8 GB/s LPDDR4X: the figure usually quoted for the 310P, but "
                               "no vendor datasheet is in the sources (medium-low confidence)"),
    })
    prov.update(_assumed_for_310p(_VECTOR_RATES_PROVENANCE))
    prov.update(_cube_provenance("ascend310p"))
    system, system_prov = _system_310p3()
    prov.update(system_prov)
    return HardwareSpec(
        name="ascend-310p3", vector_cores=8, cube_cores=8, clock_ghz=1.06,
        ub_bytes=256 * 1024, l1_bytes=1024 * 1024, l0a_bytes=64 * 1024, l0b_bytes=64 * 1024,
        l0c_bytes=256 * 1024, l2_bytes=16 * 1024 * 1024, hbm_bandwidth_gbps=204.8,
        ub_reserved_bytes=0, asc_reserved_ubuf_bytes=8 * 1024,
        description="Ascend 310P3 (inference card, LPDDR4X)", isa="ascend310p",
        provenance=prov, **{**_costs(1.06), "dma_gm_misaligned_efficiency": 1.0}, **system)


def _article() -> HardwareSpec:
    path = DATA_DIR / "article_fitted_chip.json"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing; generate it with `python -m npu_lab.kernels.moe_gating.article --write`")
    return HardwareSpec.from_json(path)


_PRESETS = {"ascend-910b2": ascend_910b2, "ascend-310p3": ascend_310p3, "article": _article}
_ALIASES = {"910b2": "ascend-910b2", "910b": "ascend-910b2", "310p3": "ascend-310p3", "310p": "ascend-310p3"}


class UnknownPresetError(KeyError, ValueError):
    """No preset has that name (the message lists the known ones)."""

    def __str__(self) -> str:
        return str(self.args[0])


def list_presets() -> list[str]:
    return list(_PRESETS)


def get_preset(name: str) -> HardwareSpec:
    """The preset called ``name`` (case-insensitive; '910b2' and '310p3' are accepted too)."""
    if isinstance(name, HardwareSpec):
        return name
    if not isinstance(name, str):
        raise TypeError(f"preset name must be a string, got {type(name).__name__}")
    key = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in _PRESETS:
        raise UnknownPresetError(f"unknown chip preset {name!r}; known presets: {', '.join(_PRESETS)}")
    return _PRESETS[key]()


def compare_presets(names=("ascend-910b2", "ascend-310p3")):
    """Side-by-side table of presets: value and provenance per field."""
    import pandas as pd

    if isinstance(names, str) or not isinstance(names, (list, tuple)) or not names:
        raise TypeError(f"names must be a non-empty list of preset names such as "
                        f"['ascend-910b2', 'ascend-310p3']; got {names!r}")
    first = get_preset(names[0]).table()
    frames = {("unit", ""): first["unit"]}
    for name in names:
        t = get_preset(name).table()
        frames[(name, "value")] = t["value"]
        frames[(name, "provenance")] = t["provenance"]
    return pd.DataFrame(frames)
