"""Host-side GEMM tiling: how C [M, N] = A [M, K] · B [K, N] is cut into tasks, base tiles and L1
panels, within the cube core's buffers.

Field names are Ascend C's matmul tiling (``TCubeTiling``, asc-devkit
docs/zh/api/SIMD-API/高阶API/矩阵计算/Matmul-Tiling类/TCubeTiling结构体.md): ``singleCoreM/N/K``
(one task's share of C and of K), ``baseM/N/K`` (one Mmad: the L0A/L0B/L0C tile), ``stepKa`` /
``stepKb`` (base K tiles per L1 panel of A / B), ``depthA1`` / ``depthB1`` (base blocks A1 / B1 hold
in all: stepKa x the panel's buffers, so 2 x stepKa = double-buffered panels), ``dbL0A/B/C`` (L0
buffers: 1 or 2), ``usedCoreNum`` (blockDim). One field is this
course's: ``kSplit`` (tasks along K; Ascend C writes it as singleCoreK < K).

The "3D grid": Ascend C launches a one-dimensional ``blockDim`` (``GetBlockIdx()`` is one index).
The tasks form an (M-tile, N-tile, K-split) grid, numbered ``task = (mIdx * nTiles + nIdx) * kSplit
+ kIdx``; block b runs tasks b, b + blockDim, b + 2·blockDim, ... (blockDim ≤ cores, as real
operators launch; :func:`balanced_block_dim`: the fewest blocks that need the same number of waves). :func:`block_tasks` gives that mapping.

Capacities (NPU架构版本2201.md): L1 512 KB, L0A/L0B 64 KB, L0C 128 KB on the 910B2 (the 310P3: 1 MB /
64 / 64 / 256 KB). :func:`gemm_tiling` checks every buffer and says which one overflows and by how much.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ...hardware import HardwareSpec
from ...lang.tiling_struct import Int32Struct
from ...presets import get_preset
from ...sim.cube_costs import ND2NZ_EFFICIENT_ALIGN_BYTES, k0_of


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _round(a: int, b: int) -> int:
    return _ceil(a, b) * b


@dataclass(frozen=True)
class GemmTiling(Int32Struct):
    """The tiling struct the host copies to the device (little-endian int32, field order)."""

    M: int
    N: int
    Ka: int
    singleCoreM: int
    singleCoreN: int
    singleCoreK: int
    baseM: int
    baseN: int
    baseK: int
    stepKa: int
    stepKb: int
    depthA1: int
    depthB1: int
    dbL0A: int
    dbL0B: int
    dbL0C: int
    usedCoreNum: int
    kSplit: int
    isReuseA: int          # 1: the A panel covers singleCoreK, so it is loaded once per base row
    isNaive: int           # 1: v1, every base tile loaded for every Mmad

    def __post_init__(self):
        for name in self.__dataclass_fields__:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
                raise ValueError(f"GemmTiling.{name} must be a whole number >= 0, got {v!r}")
        for name in ("baseM", "baseN"):
            if getattr(self, name) % 16 or getattr(self, name) == 0:
                raise ValueError(f"GemmTiling.{name}={getattr(self, name)} must be a positive multiple of 16 "
                                 "(one 16x16 fractal of L0C)")

    @property
    def m_tiles(self) -> int:
        return _ceil(self.M, self.singleCoreM)

    @property
    def n_tiles(self) -> int:
        return _ceil(self.N, self.singleCoreN)

    @property
    def tasks(self) -> int:
        return self.m_tiles * self.n_tiles * self.kSplit

    @property
    def k_l1(self) -> int:
        """K elements one L1 panel holds (stepKa x baseK)."""
        return self.stepKa * self.baseK

    def task_coords(self, task: int) -> tuple[int, int, int]:
        """(mIdx, nIdx, kIdx) of task number ``task``: the 3D grid in one index."""
        per_m = self.n_tiles * self.kSplit
        return task // per_m, (task // self.kSplit) % self.n_tiles, task % self.kSplit

    def task_shape(self, task: int) -> tuple[int, int, int]:
        """(rows, columns, K extent) of a task's share: the tail tasks are smaller."""
        mi, ni, ki = self.task_coords(task)
        return (min(self.singleCoreM, self.M - mi * self.singleCoreM),
                min(self.singleCoreN, self.N - ni * self.singleCoreN),
                min(self.singleCoreK, self.Ka - ki * self.singleCoreK))


def block_tasks(tiling: GemmTiling, block_idx: int) -> range:
    """The tasks block ``block_idx`` runs: ``block_idx, block_idx + usedCoreNum, ...``."""
    return range(block_idx, tiling.tasks, tiling.usedCoreNum)


def a1_buffers(t: GemmTiling) -> int:
    """L1 buffers of A panels: depthA1 base blocks in all, stepKa per panel."""
    return max(1, t.depthA1 // t.stepKa)


def b1_buffers(t: GemmTiling) -> int:
    """L1 buffers of B panels: depthB1 base blocks in all, stepKb per panel."""
    return max(1, t.depthB1 // t.stepKb)


def l1_l0_bytes(t: GemmTiling, dtype) -> dict[str, int]:
    """Bytes each buffer holds with this tiling (what :func:`gemm_tiling` checks)."""
    size = np.dtype(dtype).itemsize
    k_l1 = min(t.k_l1, _round(t.singleCoreK, t.baseK))
    return {"L1": (a1_buffers(t) * _round(t.baseM, 16) * k_l1 + b1_buffers(t) * k_l1 * _round(t.baseN, 16)) * size,
            "L0A": t.dbL0A * t.baseM * t.baseK * size,
            "L0B": t.dbL0B * t.baseK * t.baseN * size,
            "L0C": t.dbL0C * t.baseM * t.baseN * 4}


def gemm_tiling(M: int, N: int, K: int, dtype=np.float16, hw: HardwareSpec | str = "ascend-910b2", *,
                version: str = "v3", base=None, k_split: int | None = None, step_k: int | None = None,
                per_channel_dequant: bool = False) -> GemmTiling:
    """The tiling of one GEMM version (see the module docstring).

    * base tiles ``base=(baseM, baseN, baseK)``: default 128 x 128 x 64 (half; K scaled to 32 B
      fractals for other types: baseK x sizeof(T) = 128 B), which fits two buffers of each L0;
    * ``singleCoreM = baseM``; ``singleCoreN``: all of N when there are at least as many M tiles
      as cores, else N split so that the tasks fill the cores;
    * ``kSplit`` (v4 only): default enough K-split tasks to fill the cores when M x N alone
      cannot, with singleCoreK a multiple of the L1 panel;
    * the L1 panel (``stepKa`` base K tiles, default: the largest that fits L1 with its buffers,
      at most singleCoreK): if it covers singleCoreK the A panel is reused across N (``isReuseA``);
    * ``per_channel_dequant``: L1 also holds a task's uint64 quant words (singleCoreN rounded up to
      4, 8 B each: the VDEQF16 Fixpipe's cbufWorkspace), so the panels get that much less of L1.
    """
    hw = get_preset(hw) if isinstance(hw, str) else hw
    for name, v in (("M", M), ("N", N), ("K", K)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {v!r}")
    if version not in ("v1", "v2", "v3", "v4"):
        raise ValueError(f"version must be one of v1 (naive), v2 (L1-tiled), v3 (double-buffered), v4 (K-split); "
                         f"got {version!r}")
    size = np.dtype(dtype).itemsize
    k0 = k0_of(dtype)
    if base is None:
        base = (128, 128, 128 // size)
    if not isinstance(base, (tuple, list)) or len(base) != 3 or not all(
            isinstance(b, numbers.Integral) and not isinstance(b, bool) for b in base):
        raise ValueError(f"base must be three whole numbers (baseM, baseN, baseK), e.g. (128, 128, 64); got {base!r}")
    bm, bn, bk = (int(b) for b in base)
    if bm % 16 or bn % 16 or bm < 16 or bn < 16:
        raise ValueError(f"baseM={bm} and baseN={bn} must be multiples of 16 (whole L0C fractals)")
    if bk % 16 or bk < 16 or bk % k0:
        raise ValueError(f"baseK={bk} must be a multiple of 16 and of the fractal's K ({k0} for {np.dtype(dtype).name}) "
                         "so that every LoadData moves whole 512-byte fractals")
    bm, bn = min(bm, _round(M, 16)), min(bn, _round(N, 16))
    bk = min(bk, _round(K, 16 if k0 <= 16 else k0))
    cores = hw.cube_cores
    naive = version == "v1"
    double = version in ("v3", "v4")
    nbuf = 2 if double else 1
    m_tiles = _ceil(M, bm)
    if m_tiles >= cores:
        single_n = _round(N, bn)
    else:
        single_n = _round(_ceil(N, max(1, cores // m_tiles)), bn)
    n_tiles = _ceil(N, single_n)
    if not isinstance(per_channel_dequant, (bool, np.bool_)):
        raise TypeError(f"per_channel_dequant must be True or False, got {per_channel_dequant!r}")
    reserved = _round(single_n, 4) * 8 if per_channel_dequant else 0
    # the L1 panel: the largest number of base K tiles that fits L1 with its buffers
    per_k = nbuf * (bm + bn) * size
    max_step = max(1, (hw.l1_bytes - reserved) // (per_k * bk))
    if version == "v4":
        if k_split is None:
            free = max(1, cores // (m_tiles * n_tiles))
            k_split = max(1, min(free, _ceil(K, 2 * bk)))
        if isinstance(k_split, bool) or not isinstance(k_split, numbers.Integral) or k_split < 1:
            raise ValueError(f"k_split must be a whole number >= 1, got {k_split!r}")
        single_k = _round(_ceil(K, int(k_split)), bk)
        k_split = _ceil(K, single_k)
    else:
        if k_split not in (None, 1):
            raise ValueError(f"k_split={k_split} needs version='v4' (the partial sums meet in GM by SetAtomicAdd)")
        k_split, single_k = 1, K
    if naive:
        step = 1
    elif step_k is not None:
        if isinstance(step_k, bool) or not isinstance(step_k, numbers.Integral) or step_k < 1:
            raise ValueError(f"step_k must be a whole number >= 1, got {step_k!r}")
        step = int(step_k)
    else:
        step = min(max_step, _ceil(single_k, bk))
        if reserved:
            # the reserve may cost one base K tile of the panel: keep the panel's rows whole 256-B units
            # where the full-L1 step had them (else every Nd2Nz row is its own burst: nd2nz_bursts)
            full = min(max(1, hw.l1_bytes // (per_k * bk)), _ceil(single_k, bk))
            unit = ND2NZ_EFFICIENT_ALIGN_BYTES
            if step < full and (full * bk * size) % unit == 0:
                aligned = [q for q in range(step, 0, -1) if (q * bk * size) % unit == 0]
                step = aligned[0] if aligned else step
    # two L0 buffers where they fit (double buffering), else one (what Matmul's tiling does with dbL0C)
    db = {name: nbuf if nbuf * need <= cap else 1 for name, need, cap in (
        ("A", bm * bk * size, hw.l0a_bytes), ("B", bk * bn * size, hw.l0b_bytes), ("C", bm * bn * 4, hw.l0c_bytes))}
    t = GemmTiling(M=M, N=N, Ka=K, singleCoreM=bm, singleCoreN=single_n, singleCoreK=single_k, baseM=bm, baseN=bn,
                   baseK=bk, stepKa=step, stepKb=step, depthA1=nbuf * step, depthB1=nbuf * step, dbL0A=db["A"], dbL0B=db["B"],
                   dbL0C=db["C"], usedCoreNum=balanced_block_dim(m_tiles * n_tiles * k_split, cores), kSplit=k_split,
                   isReuseA=int(not naive and step * bk >= single_k), isNaive=int(naive))
    check_tiling(t, dtype, hw, reserved)
    return t


def balanced_block_dim(tasks: int, cores: int) -> int:
    """blockDim for ``tasks`` equal tasks on ``cores`` cores: the fewest blocks that finish in the
    same number of waves, ``ceil(tasks / ceil(tasks / cores))`` (32 tasks on 24 cores: 16 blocks of 2
    tasks, not 8 blocks of 2 and 16 of 1 — the makespan is two tasks either way, and the cores left
    idle neither pay launch overhead nor share HBM). At most ``cores`` (one wave: one task each)."""
    if isinstance(tasks, bool) or not isinstance(tasks, numbers.Integral) or tasks < 1:
        raise ValueError(f"tasks must be a whole number >= 1, got {tasks!r}")
    if isinstance(cores, bool) or not isinstance(cores, numbers.Integral) or cores < 1:
        raise ValueError(f"cores must be a whole number >= 1, got {cores!r}")
    waves = _ceil(tasks, cores)
    return _ceil(tasks, waves)


def check_tiling(t: GemmTiling, dtype, hw: HardwareSpec, l1_reserved_bytes: int = 0) -> None:
    """Raise a ValueError naming each buffer the tiling overflows (and the fix); L1 less
    ``l1_reserved_bytes`` (the quant words of a per-channel dequantisation)."""
    caps = {"L1": hw.l1_bytes - l1_reserved_bytes, "L0A": hw.l0a_bytes, "L0B": hw.l0b_bytes, "L0C": hw.l0c_bytes}
    need = l1_l0_bytes(t, dtype)
    over = [f"{b}: {need[b]:,} B > {caps[b]:,} B" for b in caps if need[b] > caps[b]]
    if over:
        raise ValueError(f"GEMM tiling base {t.baseM}x{t.baseN}x{t.baseK}, L1 panel {t.k_l1} of K, buffers "
                         f"A1/B1 {a1_buffers(t)}/{b1_buffers(t)}, L0 {t.dbL0A}/{t.dbL0B}/{t.dbL0C} overflows {hw.name}'s "
                         f"{'; '.join(over)} (NPU架构版本2201.md). Use smaller base tiles, a shorter L1 panel "
                         "(step_k) or single buffers")
    if t.usedCoreNum > hw.cube_cores:
        raise ValueError(f"usedCoreNum={t.usedCoreNum} exceeds {hw.name}'s {hw.cube_cores} cube cores")
