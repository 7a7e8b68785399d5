"""Costs of the cube core's instructions, all read from the HardwareSpec (never from data).

Source: asc-devkit docs/zh/api/附录/Cube指令理论性能汇总.md (NPU架构版本2201 = Atlas A2/A3):

* Mmad: ``cycles = Δt + (ceil_m x ceil_n x ceil_k) / (cube_m x cube_n x cube_k)`` with m, n rounded
  up to 16 and k to the L0 fractal's K (k0 = 32 B / sizeof(T)); cube_m x cube_n x cube_k per cycle
  (表1): half / bfloat16 16x16x16, int8 16x16x32 (twice the MACs), float 16x16x4 (a quarter). The
  page prints ``ceil_k = ceil(k/16) x k0``; for half that is ceil(k/16)*16, and for the other types
  the K the L0 fractal holds is a multiple of k0, so the model rounds k up to k0 (it differs from the
  printed formula only for int8 / float with k not a multiple of 16). ``cube_fractal_cycles`` is the
  cycles of one 16x16x16 half fractal (1: the published rate), ``cube_mmad_head_cycles`` the Δt
  (no value published: assumed).
* DataCopy GM -> L1 with Nd2NzParams (MTE2): priced by the DMA rule (:mod:`npu_lab.sim.costs`); what
  counts as its *burst* is decided by :func:`nd2nz_bursts` (vendor-guide + assumed, see there).
* LoadData L1 -> L0A 256 B/cycle, L1 -> L0B 128 B/cycle (表3) plus a head ΔT (assumed).
* Fixpipe L0C -> GM: not in the tables (表7 gives L0C -> L1: 64 elements/cycle for F322F16). The
  model: ``fixpipe_head_cycles`` + the longer of the conversion (elements / 64 per cycle, assumed
  for the GM path) and the GM write priced like any DMA (:func:`npu_lab.sim.costs.dma_occupancy_cycles`:
  the core's share of HBM, the burst efficiency of one output row).

* Fixpipe's tensor quantisation (VDEQF16): each chunk of quant words is copied L1 -> Fixpipe buffer
  (copy_cbuf_to_fbuf in the library, impl/basic_api/dav_c220/kernel_operator_fixpipe_v2_impl.h)
  before its move. No rate is published for that copy: :func:`fixpipe_fb_copy_cycles` prices it as
  a Fixpipe head plus the bytes at the L1 -> L0B rate (表3, 128 B/cycle) — **assumed**.

bfloat16 (stored as uint16 bits, :mod:`npu_lab.lang.tensor`) is priced at its own row of 表1:
bfloat16 x bfloat16 16 x 16 x 16 per cycle, k0 = 16 — the same rate as half.

Every cost is a whole number of cycles.
"""

from __future__ import annotations

import numpy as np

from ..hardware import HardwareSpec
from .costs import dma_occupancy_cycles, gm_aligned, round_up, whole_cycles

#: cube_k (MACs along K per cycle, 表1, NPU架构版本2201) by input dtype; cube_m = cube_n = 16
CUBE_K = {"float16": 16, "bfloat16": 16, "int8": 32, "uint8": 32, "float32": 4}


def cube_type_name(dtype) -> str:
    """The cube's name for an input dtype: ``"bfloat16"`` for the string "bfloat16" or for uint16
    (bfloat16's storage; the cube has no uint16 Mmad), else numpy's name."""
    if isinstance(dtype, str) and dtype in ("bfloat16", "bf16"):
        return "bfloat16"
    name = np.dtype(dtype).name
    return "bfloat16" if name == "uint16" else name


def k0_of(dtype) -> int:
    """K of one L0A/L0B fractal: 32 bytes of the input type (half 16, int8 32, float 8)."""
    return 32 // (2 if cube_type_name(dtype) == "bfloat16" else np.dtype(dtype).itemsize)


def mmad_cycles(hw: HardwareSpec, m: int, n: int, k: int, dtype) -> tuple[float, int]:
    """(M-pipe occupancy in cycles, 16x16xk0 fractal products) of one Mmad of [m,k] x [k,n]."""
    cube_k = CUBE_K[cube_type_name(dtype)]
    k0 = k0_of(dtype)
    ceil_m, ceil_n, ceil_k = round_up(m, 16), round_up(n, 16), round_up(k, k0)
    per_cycle = 16 * 16 * cube_k
    fractals = (ceil_m // 16) * (ceil_n // 16) * (ceil_k // k0)
    return whole_cycles(hw.cube_mmad_head_cycles
                        + ceil_m * ceil_n * ceil_k / per_cycle * hw.cube_fractal_cycles), fractals


def cube_macs_per_cycle(hw: HardwareSpec, dtype="float16") -> float:
    """Multiply-accumulates one cube core does per cycle at full rate."""
    return 16 * 16 * CUBE_K[cube_type_name(dtype)] / hw.cube_fractal_cycles


def cube_peak_tflops(hw: HardwareSpec, dtype="float16") -> float:
    """The chip's cube roofline in TFLOPS (2 flops per MAC, every cube core, the AI-core clock):
    the 910B2 at fp16: 24 x 4096 x 2 x 1.8 GHz = 353.9 TFLOPS."""
    return hw.cube_cores * cube_macs_per_cycle(hw, dtype) * 2 * hw.clock_ghz * 1e9 / 1e12


#: The Nd2Nz alignment that keeps the copy efficient: the ND rows' length and pitch in GM
#: (asc-devkit docs/zh/guide/算子实践参考/优秀实践/Matmul性能调优案例/AIV核上的ND2NZ格式转换.md:
#: 数据非256字节对齐时，随路ND2NZ指令存在带宽利用率低的问题).
ND2NZ_EFFICIENT_ALIGN_BYTES = 256


def nd2nz_bursts(n_rows: int, row_bytes: int, src_pitch_bytes: int, matrix_pitch_bytes: int | None = None,
                 nd_num: int = 1) -> tuple[int, int, int]:
    """(block_count, burst_bytes, gm_step_bytes) an Nd2Nz copy of ``nd_num`` x ``n_rows`` ND rows of
    ``row_bytes`` (``src_pitch_bytes`` apart in GM; matrices ``matrix_pitch_bytes`` apart) is priced
    as, by :func:`npu_lab.sim.costs.dma_occupancy_cycles`.

    The decision (docs/cost_model.md §11, "The Nd2Nz burst"):

    * **vendor-guide** — AIV核上的ND2NZ格式转换.md: the on-the-fly ND2NZ has *low bandwidth
      utilisation when the data is not 256-byte aligned* (the inner axis, a row in GM), and the
      remedy it shows (converting on the vector core first) pays for itself for large matrices.
      So the rows' alignment decides, not the row length as such.
    * **assumed** (no figure is published) — rows whose length and GM pitch are whole 256-B units
      stream like one contiguous request of the copy's total bytes (the MTE2 engine keeps many
      row bursts in flight: block_count 1, burst = all bytes); any other copy is priced row by
      row (each row one burst of ``row_bytes``, ``src_pitch_bytes`` apart: the burst curve's and
      the 512-B alignment's penalties apply), as before this decision.

    A copy whose rows are contiguous in GM (pitch = row length, one matrix or matrices back to
    back) is one burst either way."""
    for name, v in (("n_rows", n_rows), ("row_bytes", row_bytes), ("src_pitch_bytes", src_pitch_bytes),
                    ("nd_num", nd_num)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"nd2nz_bursts: {name} must be a whole number >= 1, got {v!r}")
    rows = nd_num * n_rows
    total = rows * row_bytes
    contiguous = src_pitch_bytes == row_bytes and (nd_num == 1 or matrix_pitch_bytes == n_rows * row_bytes)
    a = ND2NZ_EFFICIENT_ALIGN_BYTES
    aligned = row_bytes % a == 0 and src_pitch_bytes % a == 0 and (
        nd_num == 1 or (matrix_pitch_bytes or 0) % a == 0)
    if contiguous or aligned:
        return 1, total, 0
    return rows, row_bytes, src_pitch_bytes


def load_data_cycles(hw: HardwareSpec, nbytes: int, dst_buffer: str) -> float:
    """MTE1 occupancy of one LoadData moving ``nbytes`` (whole 512-B fractals) into L0A or L0B."""
    bw = hw.mte1_l0a_bytes_per_cycle if dst_buffer == "L0A" else hw.mte1_l0b_bytes_per_cycle
    return whole_cycles(hw.mte1_head_cycles + nbytes / bw)


def fixpipe_cycles(hw: HardwareSpec, elements: int, gm_bytes: int, row_bytes: int, rows: int,
                   row_step_bytes: int, bytes_per_cycle: float) -> float:
    """FIX occupancy of one Fixpipe writing ``elements`` values (``gm_bytes`` to GM, ``rows`` rows
    of ``row_bytes``, ``row_step_bytes`` apart) at the core's GM share ``bytes_per_cycle``."""
    contiguous = rows <= 1 or row_step_bytes == row_bytes
    burst = gm_bytes if contiguous else row_bytes
    aligned = gm_aligned(hw, burst, 1 if contiguous else rows, row_step_bytes)
    write = dma_occupancy_cycles(hw, round_up(gm_bytes, hw.block_bytes), bytes_per_cycle, burst, aligned) \
        - hw.dma_issue_cycles
    convert = elements / hw.fixpipe_elements_per_cycle
    return whole_cycles(hw.fixpipe_head_cycles + max(convert, write))


def cube_roofline_us(hw: HardwareSpec, m: int, n: int, k: int, dtype="float16") -> float:
    """The shortest time a GEMM of [m,k] x [k,n] can take on the chip's cubes (µs)."""
    return 2.0 * m * n * k / (cube_peak_tflops(hw, dtype) * 1e12) * 1e6


def hbm_roofline_us(hw: HardwareSpec, nbytes: float) -> float:
    """The shortest time ``nbytes`` can cross HBM (µs)."""
    return nbytes / (hw.hbm_bandwidth_gbps * 1e9) * 1e6


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


__all__ = ["CUBE_K", "k0_of", "nd2nz_bursts", "ND2NZ_EFFICIENT_ALIGN_BYTES", "mmad_cycles", "cube_macs_per_cycle", "cube_peak_tflops", "load_data_cycles",
           "fixpipe_cycles", "cube_roofline_us", "hbm_roofline_us", "ceil_div"]


def fixpipe_fb_copy_cycles(hw: HardwareSpec, nbytes: int) -> float:
    """FIX occupancy of one L1 -> Fixpipe-buffer copy of ``nbytes`` quant words (whole 128-B units):
    a Fixpipe head plus the bytes at the L1 -> L0B rate — assumed, no rate is published."""
    return whole_cycles(hw.fixpipe_head_cycles + nbytes / hw.mte1_l0b_bytes_per_cycle)
