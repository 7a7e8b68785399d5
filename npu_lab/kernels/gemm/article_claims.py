"""The second source article's hardware claims (sections 1, 2, 4.1 and 5), checked (issue 17 §6).

:func:`cube_article_claims` returns one row per quantitative claim: what the article says, what the
presets' sources and the asc-devkit pages say, the model's figure where it has one (computed here
from the presets and the kernels, never typed in), a verdict and the source. Verdicts:

* ``consistent`` — the sources and the model agree with the figure;
* ``wrong`` — a published page or the chip's configuration contradicts it;
* ``unverifiable`` — nothing published gives the figure and the model cannot measure it (the row
  says why).

``data/cube_article_claims.csv`` is this table, written by
``python -m npu_lab.kernels.gemm.article_claims --write`` (tests/test_gemm_article_claims.py checks
it is fresh). The article is ``shared/seeds/003_f6c259df8f5b9d74.txt`` in the project's sources.
"""

from __future__ import annotations

import sys
from pathlib import Path


from ...presets import get_preset
from ...sim.cube_costs import cube_peak_tflops
from ...lang.cross_core import CROSS_CORE_FLAG_CYCLES
from .precision import correction_lesson
from .run import gemm
from .tiling import gemm_tiling

__all__ = ["cube_article_claims", "CLAIMS_CSV", "COLUMNS", "within_launch_repeat_fraction", "write_claims_csv"]

CLAIMS_CSV = Path(__file__).resolve().parents[3] / "data" / "cube_article_claims.csv"
COLUMNS = ("id", "section", "claim", "article", "sources_say", "model", "verdict", "source")

_API = "asc-devkit docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/Mmad计算/"
_PERF = "asc-devkit docs/zh/api/附录/Cube指令理论性能汇总.md 表1"
_SIMT = "asc-devkit docs/zh/guide/编程指南/编程模型/AI-Core-SIMT编程/线程架构.md"
_PRESETS = "npu_lab/presets.py provenance"


def within_launch_repeat_fraction(M: int, N: int, K: int, version: str = "v3", hw="ascend-910b2") -> float:
    """Share of a GEMM launch's GM reads that re-read bytes some core already read in the same
    launch: ``1 - (|A| + |B|) / GM bytes read``. The most any within-launch sharing (a cluster, or
    L2 hits) could save; timing-only run of ``version``."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    _, tl = gemm((M, K), (K, N), version=version, hw=hw, timing_only=True)
    read = sum(launch.gm_read_bytes for launch in tl.launches)
    return 1.0 - (M * K + K * N) * 2 / read


def _rows() -> list[dict]:
    b2, p3 = get_preset("ascend-910b2"), get_preset("ascend-310p3")
    int8_core = cube_peak_tflops(b2, "int8") / b2.cube_cores
    int8_core_p3 = cube_peak_tflops(p3, "int8") / p3.cube_cores
    ub_core_tbps = b2.vector_repeat_bytes / b2.vector_cycles_per_repeat * b2.clock_ghz / 1e3
    ub_chip_tbps = ub_core_tbps * b2.vector_cores
    hbm_tbps = b2.hbm_bandwidth_gbps / 1e3
    dma_core_tbps = b2.core_dma_bandwidth_gbps / 1e3
    grid = (4096 // 16) ** 3
    tiling = gemm_tiling(4096, 4096, 4096)
    big = within_launch_repeat_fraction(4096, 4096, 4096)
    mid = within_launch_repeat_fraction(1024, 1024, 1024)
    decode = within_launch_repeat_fraction(16, 4096, 4096)
    corr = correction_lesson(32, 32, 1024, seed=0)
    from .sharing import shared_load_table
    share = shared_load_table()
    saved = ", ".join(f"{r.hbm_saved:.0%} at {m}x{n}x{k} (latency {r.latency_us_each_core_reads:.1f} -> "
                      f"{r.latency_us_shared:.1f} us)" for (m, n, k), r in share.iterrows())
    hop_ns = CROSS_CORE_FLAG_CYCLES / b2.clock_ghz
    dma_ns = b2.dma_latency_cycles / b2.clock_ghz
    ns_cycles = 10e-9 * b2.clock_ghz * 1e9
    return [
        dict(id="int8_tops_per_core", section="1.1",
             claim="cube peak at INT8 per AI core", article="256 TOPS per AI core",
             sources_say="int8 Mmad: cube_m x cube_n x cube_k = 16 x 16 x 32 MACs per cycle per cube core; "
                         f"910B2: {b2.cube_cores} AIC at {b2.clock_ghz} GHz",
             model=f"{int8_core:.1f} TOPS per AIC (910B2), {int8_core_p3:.1f} (310P3); "
                   f"{cube_peak_tflops(b2, 'int8'):.0f} TOPS for the whole 910B2",
             verdict="wrong", source=f"{_PERF}; {_PRESETS} (cube_cores, clock_ghz)"),
        dict(id="ub_capacity", section="2.1",
             claim="UB per block", article="256 KB - 1 MB",
             sources_say=f"910B2: {b2.ub_bytes // 1024} KB per AIV; 310P3: {p3.ub_bytes // 1024} KB per AI core; "
                         f"1 MB is the 310P3's L1 ({p3.l1_bytes // 1024} KB), not its UB",
             model=f"{b2.ub_bytes // 1024} KB (910B2), {p3.ub_bytes // 1024} KB (310P3)",
             verdict="wrong", source=f"{_PRESETS} (ub_bytes, l1_bytes: vendor-config)"),
        dict(id="ub_bandwidth", section="1.1",
             claim="UB bandwidth", article="4 TB/s",
             sources_say="no UB bandwidth is published in the asc-devkit pages; the model assumes one 256 B "
                         "vector repeat per cycle per AIV",
             model=f"{ub_core_tbps:.2f} TB/s per AIV, {ub_chip_tbps:.1f} TB/s for 48 AIV (assumed rate)",
             verdict="unverifiable", source=f"{_PRESETS} (vector_repeat_bytes datasheet, vector_cycles_per_repeat "
                                            "assumed)"),
        dict(id="ub_over_gm", section="1.1",
             claim="UB bandwidth over Global Memory bandwidth", article="8-10x",
             sources_say=f"910B2 HBM about {hbm_tbps:.1f} TB/s (datasheet, medium-low confidence): the article's "
                         f"own 4 TB/s would be {4 / hbm_tbps:.1f}x, not 8-10x (8-10x needs GM at 0.4-0.5 TB/s)",
             model=f"per core {ub_core_tbps / dma_core_tbps:.1f}x (UB repeat vs one core's MTE2 "
                   f"{b2.core_dma_bandwidth_gbps:.0f} GB/s); chip {ub_chip_tbps / hbm_tbps:.1f}x (48 AIV vs HBM); "
                   "both from assumed rates",
             verdict="unverifiable", source=f"{_PRESETS} (hbm_bandwidth_gbps, core_dma_bandwidth_gbps)"),
        dict(id="tops_per_watt", section="1.1",
             claim="compute density", article="3.2 TOPS/W per mm2",
             sources_say="no power figure in the presets' sources or the asc-devkit pages; the unit mixes area "
                         "(per mm2) and energy (per W); section 7 of the same article calls 3.2 TOPS/W the "
                         "result of an optimisation (from 1.8), not a hardware property",
             model="none: the model has no power or area",
             verdict="unverifiable", source="asc-devkit (no match for TOPS/W); article sections 1.1 and 7"),
        dict(id="grid_3d", section="1.2",
             claim="3D launch grid {M/16, N/16, K/16} of 16x16x16 blocks",
             article=f"{grid} blocks for a 4096^3 GEMM, 4096 threads per block",
             sources_say="Ascend C kernels launch a 1-D blockDim (<<<blockDim, l2ctrl, stream>>>, GetBlockIdx()); "
                         "the SIMT model has dim3 grids but runs on AIV cores (no cube), with "
                         "gridDim.x*y*z <= 65535 and blockDim.x*y*z <= 2048",
             model=f"gemm_tiling(4096, 4096, 4096): blockDim {tiling.usedCoreNum}, {tiling.tasks} (M, N, K-split) "
                   f"tasks of {tiling.singleCoreM}x{tiling.singleCoreN}x{tiling.singleCoreK}",
             verdict="wrong", source=f"{_SIMT}; npu_lab.kernels.gemm.gemm_tiling"),
        dict(id="block_16", section="1.2",
             claim="block edge 16 matches the cube's M, N, K", article="16 x 16 x 16",
             sources_say="half/bf16 Mmad: 16 x 16 x 16 per cycle; int8 16 x 16 x 32; float 16 x 16 x 4 (k0 8)",
             model="mmad_cycles: a 16x16x16 fp16 fractal per cycle (int8 K 32)",
             verdict="consistent", source=f"{_PERF}; npu_lab.sim.cube_costs"),
        dict(id="block_units", section="2.1",
             claim="a block = 1 cube unit + several vector units", article="1 cube + several vector units",
             sources_say=f"910B2: separate cores, {b2.cube_cores} AIC and {b2.vector_cores} AIV; a vector kernel's "
                         "block is one AIV (no cube), a cube kernel's one AIC, a mixed kernel's group 1 AIC + 2 AIV; "
                         "310P3: one AI core holds one cube and one vector unit",
             model="910B2 preset: cube_cores 24, vector_cores 48",
             verdict="wrong", source=f"{_PRESETS} (vector_cores, cube_cores: vendor-config)"),
        dict(id="cluster_traffic", section="2.2",
             claim="sharing data within a cluster cuts off-chip traffic", article="40-60 % less",
             sources_say="no __shared__ cluster memory, get_cluster_id or cluster_barrier in asc-devkit (the "
                         "article's code does not compile); what exists: the L2 all cores share, the AIC/AIV group "
                         "of a mixed kernel, cross-core flags",
             model=f"HBM traffic saved when a core's read of bytes another core already read in the launch hits L2 "
                   f"(GEMM v3, L2Cache(share_within_launch=True), an upper bound): {saved}; most any sharing could "
                   f"save: {big:.0%} at 4096^3, {mid:.0%} at 1024^3, {decode:.0%} at 16x4096x4096. The saving "
                   "depends on the shape (10-82 % here), not a fixed 40-60 %; latency barely moves because one "
                   "core's DMA rate, not HBM, bounds these runs",
             verdict="unverifiable", source="asc-devkit (no match); npu_lab.kernels.gemm.sharing.shared_load_table, "
                                            "within_launch_repeat_fraction (shape-dependent)"),
        dict(id="neighbour_latency", section="2.2",
             claim="latency between neighbouring cores", article="< 10 ns",
             sources_say="not published; cores exchange data through GM / L2 and order it with CrossCoreSetFlag / "
                         "CrossCoreWaitFlag, which report to the task scheduler's sync module (调度模块), not a shared "
                         "cluster memory between neighbours",
             model=f"10 ns = {ns_cycles:.0f} cycles at {b2.clock_ghz} GHz; the model's neighbour path is a flag hop "
                   f"({CROSS_CORE_FLAG_CYCLES:.0f} cycles = {hop_ns:.0f} ns, assumed) plus a GM / L2 copy "
                   f"({dma_ns:.0f} ns request latency, assumed): both assumptions, neither published, both far above "
                   "10 ns",
             verdict="unverifiable", source="asc-devkit 同步控制/核间同步/CrossCoreSetFlag(ISASI).md (no latency given); "
                                            "npu_lab.lang.cross_core.CROSS_CORE_PROVENANCE"),
        dict(id="sparse_2_4", section="4.1",
             claim="2:4 structured sparsity speed-up in FP16", article="1.8x at FP16",
             sources_say="MmadWithSparse: int8 x int8 -> int32 only (no fp16); Atlas A2/A3 only (not 310P, not "
                         "950); B is the operand stored 4:2-compressed (K/2 x N, with an index matrix loaded by "
                         "LoadDataWithSparse), A is full-size M x K and is gathered by that index; its rate row "
                         "equals dense int8 (16x16x32); no measured speed-up is published",
             model="ctx.mmad_with_sparse checks these rules (chip, int8 -> int32, L0A/L0B/L0C placement) and then refuses: the index matrix of LoadDataWithSparse is not modelled",
             verdict="wrong", source=f"{_API}MmadWithSparse.md; {_PERF}"),
        dict(id="fp32_accumulation", section="5.1",
             claim="the 'sandwich': FP16 compute, FP32 accumulation, then an FP32 'Kahan' correction",
             article="fp16 matmul into a half C, converted to fp32, apply_fp32_correction",
             sources_say="Mmad on half writes float to L0C: the cube already accumulates in fp32; the article's "
                         "correction runs after the result was rounded to fp16",
             model=f"relative error vs float64 (32x32x1024): no correction "
                   f"{corr.loc['no correction', 'relative_error']:.3e}, article correction "
                   f"{corr.loc['article correction', 'relative_error']:.3e}, fp32 output "
                   f"{corr.loc['fp32 output (no rounding to fp16)', 'relative_error']:.3e}",
             verdict="wrong", source=f"{_API}Mmad.md; npu_lab.kernels.gemm.precision.correction_lesson"),
        dict(id="mixed_precision_table", section="5.2",
             claim="measured mixed-precision configurations (Llama 3 70B attention)", article="a table",
             sources_say="the table's contents are not in the article's text as we have it (only its caption)",
             model="none",
             verdict="unverifiable", source="shared/seeds/003_f6c259df8f5b9d74.txt section 5.2"),
    ]


def cube_article_claims():
    """The claims table as a pandas DataFrame indexed by ``id`` (columns :data:`COLUMNS` less ``id``)."""
    import pandas as pd

    df = pd.DataFrame(_rows(), columns=list(COLUMNS))
    bad = set(df.verdict) - {"consistent", "wrong", "unverifiable"}
    assert not bad, bad
    return df.set_index("id")


def write_claims_csv(path: str | Path | None = None) -> Path:
    """Write the table to ``path`` (default ``data/cube_article_claims.csv``); returns the path."""
    path = Path(path) if path is not None else CLAIMS_CSV
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{path.parent} does not exist; give a path in an existing directory")
    cube_article_claims().to_csv(path, lineterminator="\n")
    return path


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] == ["--write"]:
        print(write_claims_csv())
    else:
        print(cube_article_claims().to_string())
