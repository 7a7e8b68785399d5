"""Host side of MoeGatingTopK: validate, tile, copy to "device", launch a version, copy back.

``moe_gating_topk(logits, k, version=...)`` returns real outputs and the timeline;
``simulate_moe_gating(B, S, E, K, version=...)`` gives the timeline alone from the shape, with a
timing-only run (what sliders and sweeps call).

Versions, in teaching order: ``discrete`` → ``v1`` → ``v2`` (``v2_bad_sync``, the pitfall) →
``v2c`` → ``v3`` → ``v3_fast_exp`` → ``v4``. Beside the ladder, ``"grouped"`` (:mod:`.grouped`): the
full routing semantics, which ``moe_gating_topk`` runs when a routing option is not at its default.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ...hardware import HardwareSpec
from ...lang import CapabilityError, GlobalTensor, launch
from ...presets import get_preset
from ...sim.timeline import Timeline
from .discrete import generic_row_tiling, run_discrete_chain
from .fused import moe_gating_v1_kernel, moe_gating_v2_bad_sync_kernel, moe_gating_v2_kernel, moe_gating_v2c_kernel
from .reference import GATING_OPTION_DEFAULTS, KERNEL_NONFINITE_HINT, _check_k, _is_default, _raise_on_nonfinite, as_logits_array
from .sorted_topk import (MoeGatingV4Tiling, calculate_moe_gating_v4_tiling, moe_gating_v4_kernel,
                          moe_gating_v4_ub_bytes, v4_block_dim)
from .buckets import nearest_bucket_tile_s
from .tiling import MoeGatingTiling, _check_shape, calculate_moe_gating_tiling, moe_ub_bytes, moe_ub_capacity
from .vectorized import moe_gating_v3_fast_exp_kernel, moe_gating_v3_kernel

VERSIONS = {
    "discrete": "framework chain: Softmax → TopK (full sort) → Renormalise, 3 launches via HBM",
    "v1": "fused, one block per tile, scalar heap, synchronous",
    "v2": "fused, double-buffered: blocks ≤ cores loop over tiles, copy-in overlaps compute",
    "v2_bad_sync": "v2 with the pitfall: the next copy-in waits for this copy-out",
    "v2c": "v2 with coalesced DMA: one padded copy per tile in and out, scalar heap kept",
    "v3": "fused, vectorized top-K and softmax on the vector unit, one DMA per tile",
    "v3_fast_exp": "v3 with a polynomial exp made of simple vector instructions",
    "v4": "built like CANN's perf template: rows per core and per loop, Sort32 + MrgSort + GatherMask",
}
#: the fused kernel for the full routing semantics (:mod:`.grouped`): what ``moe_gating_topk`` runs
#: when a routing option is not at its default. Not in VERSIONS (the article's ladder).
ROUTING_VERSION = "grouped"
ROUTING_VERSION_WHAT = ("fused, every routing option: sigmoid/softmax, selection-only bias, grouped top-k, "
                        "renorm, scaling, finished rows, extra outputs (CANN MoeGatingTopK's structure)")
#: versions that pick their own row tiling: tileS does not apply
ROW_TILED = ("discrete", "v4")
_KERNELS = {"v1": moe_gating_v1_kernel, "v2": moe_gating_v2_kernel,
            "v2_bad_sync": moe_gating_v2_bad_sync_kernel, "v2c": moe_gating_v2c_kernel, "v3": moe_gating_v3_kernel,
            "v3_fast_exp": moe_gating_v3_fast_exp_kernel, "v4": moe_gating_v4_kernel}
_BUDGET_VERSION = {"v1": "v1", "v2": "v2", "v2_bad_sync": "v2_bad_sync", "v2c": "v2c", "v3": "v3",
                   "v3_fast_exp": "v3"}


#: instructions a version issues whatever the shape (checked against the chip before a launch)
ALWAYS_NEEDS = {"v1": ("DataCopyPad",), "v2": ("DataCopyPad",), "v2_bad_sync": ("DataCopyPad",),
                "v3": ("Copy",),                  # the bit-masked Copy writing column k (310P: none)
                "v3_fast_exp": ("Copy", "Cast float32->int32", "ShiftLeft"),
                "v4": ("DataCopyPad", "Sort32", "MrgSort")}


def unsupported_reason(version: str, hw) -> str | None:
    """Why ``version`` cannot run on chip ``hw`` at any shape (None when it can run): e.g. v1's
    8-byte per-point stores need DataCopyPad, which the 310P's AI core lacks. Shape-dependent
    limits (an unaligned tail store) are found when the kernel runs."""
    from ...capabilities import check_supported

    if isinstance(version, str) and version == ROUTING_VERSION:
        from .grouped import grouped_unsupported_reason
        return grouped_unsupported_reason(_hw(hw))
    _check_version(version)
    hw = _hw(hw)
    for instruction in ALWAYS_NEEDS.get(version, ()):
        why = check_supported(hw.isa, instruction)
        if why:
            return f"{version} cannot run on {hw.name}: {why}"
    return None


@dataclass
class MoeGatingResult:
    """What one run gives: outputs (None in a timing-only run), the timeline, the tiling used."""

    indices: np.ndarray | None
    weights: np.ndarray | None
    timeline: Timeline
    tiling: MoeGatingTiling | None
    version: str
    block_dim: int
    #: the GatingOutputs of a run with extras=True (grouped kernel), else None
    extras: object = None

    @property
    def latency_us(self) -> float:
        return self.timeline.total_us


def _check_version(version: str) -> str:
    if not isinstance(version, str) or version not in VERSIONS:
        raise ValueError(f"unknown version {version!r}; choose one of: {', '.join(VERSIONS)}")
    return version


def _hw(hw) -> HardwareSpec:
    """A preset name or a HardwareSpec (get_preset passes a spec through, rejects the rest)."""
    return get_preset(hw)


def default_tile_s(B: int, S: int, E: int, K: int, version: str, hw) -> int | None:
    """The tileS a fused ``version`` runs with when the caller gives none (see :mod:`.buckets`):
    v1 the article's host rule (returned as None: ``calculate_moe_gating_tiling`` applies it); v2,
    v2c, v3 (and v2_bad_sync, v3_fast_exp) the autotuned bucket table of the chip, nearest bucket
    to (B·S, E, K), clamped to S and the UB capacity; None (the host rule) without a table."""
    B, S, E, K = _check_shape(B, S, E, K)
    if _check_version(version) not in _BUDGET_VERSION:
        raise ValueError(f"default_tile_s is for the versions that tile by tileS ({', '.join(_BUDGET_VERSION)}); "
                         f"{version} picks its own row tiling (plan_moe_gating gives it)")
    hw = _hw(hw)
    tile = nearest_bucket_tile_s(B * S, E, K, version, hw.name)
    if tile is None:
        return None
    capacity = moe_ub_capacity(_BUDGET_VERSION[version], E, K, hw.ub_usable_bytes, hw.block_bytes)
    if capacity < 1:
        return None                       # the host rule raises, saying why
    return max(1, min(tile, S, capacity))


#: Most tiles one fused launch may have. The host and the kernels keep per-tile lists (tile
#: sizes, the tile order, each block's tiles: ~32 B a tile, measured); at this many a timing-only
#: run takes about 0.3 s and 250 MB. 2**31 points at tileS = 8 would be 2.7e8 tiles (40 s, 8.5 GB).
MAX_TILES = 1 << 22
INT32_MAX = 2**31 - 1


class TooManyTilesError(ValueError):
    """A shape and tileS with more tiles than :data:`MAX_TILES` (a sweep marks the row and goes on)."""


def _check_tile_count(tiling: MoeGatingTiling, version: str) -> None:
    if tiling.totalTiles > MAX_TILES:
        least = -(-tiling.S // max(1, MAX_TILES // tiling.B))
        raise TooManyTilesError(
            f"{version} at tileS={tiling.tileS} cuts B={tiling.B} x S={tiling.S} into {tiling.totalTiles:,} tiles, "
            f"more than the simulator's limit of {MAX_TILES:,} (npu_lab.kernels.moe_gating.run.MAX_TILES: "
            f"its per-tile bookkeeping would need ~{tiling.totalTiles * 32 / 2**30:.1f} GiB); use tileS >= {least:,} "
            "if the UB holds it, a smaller B·S, or v4 (rows per core and per loop)")


def plan_moe_gating(B: int, S: int, E: int, K: int, *, version: str = "v3", hw="ascend-910b2",
                    tile_s: int | None = None, dtype=np.float32):
    """(tiling, block_dim) the host would choose. v1 launches one block per tile; v2/v2c/v3
    launch min(cores, tiles) blocks that loop; ``tile_s=None`` is the version's default
    (:func:`default_tile_s`: v1 the article's rule, the others their autotuned bucket table). v4 has
    its own struct (:class:`MoeGatingV4Tiling`: rows per core and per loop) and the discrete chain
    none (None, its generic kernels' block_dim): tileS does not apply to either."""
    version = _check_version(version)
    hw = _hw(hw)
    why = unsupported_reason(version, hw)
    if why:
        raise CapabilityError(why)
    if version in ROW_TILED:
        if tile_s is not None and (isinstance(tile_s, bool) or not isinstance(tile_s, (int, np.integer))
                                   or tile_s < 1):
            raise ValueError(f"tile_s must be >= 1 (and is ignored by {version}); got {tile_s!r}")
        B, S, E, K = _check_shape(B, S, E, K)
        if version == "v4":
            tiling = calculate_moe_gating_v4_tiling(B, S, E, K, hw, dtype=dtype)
            return tiling, v4_block_dim(tiling)
        # the framework's generic kernels pick their own row tiling
        if B * S > INT32_MAX:
            raise ValueError(f"the discrete chain's row tiling holds N = B·S in an int32 field: B·S = {B * S:,} "
                             f"is more than {INT32_MAX:,}; use a smaller B or S")
        t = generic_row_tiling(B * S, E, K, hw.ub_usable_bytes)
        if t.tiles > MAX_TILES:
            raise TooManyTilesError(f"the discrete chain cuts B·S = {B * S:,} rows into {t.tiles:,} tiles of {t.rows} rows, "
                             f"more than the simulator's limit of {MAX_TILES:,} "
                             "(npu_lab.kernels.moe_gating.run.MAX_TILES); use a smaller B·S")
        return None, min(hw.vector_cores, t.tiles)
    if tile_s is None:
        tile_s = default_tile_s(B, S, E, K, version, hw)
    tiling = calculate_moe_gating_tiling(B, S, E, K, hw, version=_BUDGET_VERSION[version], tile_s=tile_s)
    _check_tile_count(tiling, version)
    block_dim = tiling.totalTiles if version == "v1" else min(hw.vector_cores, tiling.totalTiles)
    return tiling, block_dim


def ub_used_bytes(tiling: MoeGatingTiling, version: str) -> int:
    """UB a block of ``version`` holds with this tiling (the kernel allocates exactly this)."""
    if _check_version(version) == "discrete":
        raise ValueError("the discrete chain has no MoeGatingTiling: its UB per kernel is "
                         "discrete.topk_ub_buffers(rows, E, K); ub_used_bytes takes a fused version "
                         f"({', '.join(_BUDGET_VERSION)} or v4)")
    if version == "v4":
        if not isinstance(tiling, MoeGatingV4Tiling):
            raise TypeError(f"v4's tiling is a MoeGatingV4Tiling (plan_moe_gating(..., version='v4')); got "
                            f"{type(tiling).__name__}")
        return moe_gating_v4_ub_bytes(tiling.ubFormer, tiling.col, tiling.k)   # float32: the larger budget
    if not isinstance(tiling, MoeGatingTiling):
        raise TypeError(f"{version}'s tiling must be a MoeGatingTiling (from plan_moe_gating or "
                        f"calculate_moe_gating_tiling); got {type(tiling).__name__}")
    return moe_ub_bytes(_BUDGET_VERSION[version], tiling.tileBS, tiling.E, tiling.K)


def _launch(version, hw, gate_gm, idx_gm, wgt_gm, B, S, E, K, tile_s, timing_only):
    tiling, block_dim = plan_moe_gating(B, S, E, K, version=version, hw=hw, tile_s=tile_s, dtype=gate_gm.dtype)
    if version == "discrete":
        return run_discrete_chain(gate_gm, idx_gm, wgt_gm, B * S, E, K, hw, timing_only), None, block_dim
    timeline = launch(_KERNELS[version], block_dim, gate_gm, idx_gm, wgt_gm, tiling.pack(), hw=hw,
                      timing_only=timing_only, name=f"MoeGatingTopK {version}")
    return timeline, tiling, block_dim


def moe_gating_topk(gate_logits, k: int, *, version: str | None = None, hw="ascend-910b2",
                    tile_s: int | None = None, **options) -> MoeGatingResult:
    """Run MoeGatingTopK ``version`` on the simulated chip.

    ``gate_logits``: [B, S, E] or [N, E], float32 or float16, finite. Returns indices int32 and
    weights float32 shaped [..., K] like the reference, plus the timeline.

    ``options``: the routing options of :func:`moe_gating_topk_reference` (score, bias, groups,
    renorm, scaling, eps, finished, extras), same names, same checks. ``version=None`` (default)
    runs ``v3`` when every option is at its default and the ``"grouped"`` kernel
    (:mod:`.grouped`, the full semantics) otherwise — except ``renorm=False`` alone on a shape
    whose row does not fit the UB, where CANN's tiling picks KFullLoad and so does this
    (:func:`.templates.choose_moe_template`; the result's version is ``"large_e"``);
    ``version="grouped"`` runs the grouped kernel always. The versions of the article's ladder
    (v1 .. v4, discrete) compute the defaults only: naming one with a non-default option raises
    ``ValueError`` (no option is ever silently ignored). With ``extras=True`` the result's
    ``extras`` holds the :class:`GatingOutputs`."""
    unknown = sorted(set(options) - set(GATING_OPTION_DEFAULTS))
    if unknown:
        raise TypeError(f"moe_gating_topk() got unknown routing option(s) {', '.join(unknown)}; the options are: "
                        f"{', '.join(GATING_OPTION_DEFAULTS)}")
    used = [n for n, v in options.items() if not _is_default(n, v)]
    if version is None and used == ["renorm"]:
        # renorm = 0 alone: CANN's template choice; KFullLoad (E in chunks, online softmax) where a row
        # does not fit the UB, else the grouped kernel below (EKFullLoad)
        from .templates import _run_if_k_full_load
        res = _run_if_k_full_load(gate_logits, k, hw)
        if res is not None:
            return res
    if (isinstance(version, str) and version == ROUTING_VERSION) or (version is None and used):
        if tile_s is not None:
            raise ValueError(f"tile_s does not apply to the {ROUTING_VERSION} kernel (it tiles by rows); got {tile_s!r}")
        from .grouped_host import run_grouped
        out, timeline, tiling = run_grouped(gate_logits, k, hw=hw, **options)
        idx, w = (out.indices, out.weights) if options.get("extras") is True else out
        res = MoeGatingResult(idx, w, timeline, tiling, ROUTING_VERSION, tiling.blockNum)
        res.extras = out if options.get("extras") is True else None
        return res
    version = "v3" if version is None else version
    if used:
        _check_version(version)
        raise ValueError(f"version {version!r} computes the article's semantics only; routing option(s) "
                         f"{', '.join(used)} need the {ROUTING_VERSION!r} kernel: pass version={ROUTING_VERSION!r} "
                         "or leave version out")
    version = _check_version(version)
    hw = _hw(hw)
    x = as_logits_array(gate_logits)
    if x.ndim not in (2, 3):
        raise ValueError(f"gate_logits must have rank 2 [N, E] or 3 [B, S, E]; got shape {x.shape}")
    if x.dtype not in (np.float32, np.float16):
        raise TypeError(f"gate_logits must be float32 or float16 on the device; got {x.dtype}. "
                        "Cast with .astype(np.float32)")
    if 0 in x.shape:
        raise ValueError(f"gate_logits has an empty dimension in shape {x.shape}; every dimension must be >= 1")
    lead = x.shape[:-1]
    B, S = (1, x.shape[0]) if x.ndim == 2 else x.shape[:2]
    E = x.shape[-1]
    K = _check_k(k, E)
    _raise_on_nonfinite(x.reshape(-1, E).astype(np.float32), x.shape, KERNEL_NONFINITE_HINT)
    gate_gm = GlobalTensor.from_array(x, "gate_logits")
    idx_gm = GlobalTensor.empty(B * S * K, np.int32, "expert_indices")
    wgt_gm = GlobalTensor.empty(B * S * K, np.float32, "routing_weights")
    timeline, tiling, block_dim = _launch(version, hw, gate_gm, idx_gm, wgt_gm, B, S, E, K, tile_s, False)
    return MoeGatingResult(idx_gm.data.reshape(*lead, K).copy(), wgt_gm.data.reshape(*lead, K).copy(),
                           timeline, tiling, version, block_dim)


def simulate_moe_gating(B: int, S: int, E: int, K: int, *, version: str = "v3", hw="ascend-910b2",
                        tile_s: int | None = None, dtype=np.float32, **options) -> MoeGatingResult:
    """Timing-only run from the shape alone (no data): the same timeline a full run gives.

    Default tiling (``tile_s=None``, here and in :func:`moe_gating_topk`): **v1** uses the
    article's host rule (tileS = 8, halved until the tile fits UB; v1 is the article's kernel with
    its host code); **v2, v2c, v3** (v2_bad_sync, v3_fast_exp with them) use the chip's autotuned
    bucket table, ``data/moe_tile_buckets_<chip>_<version>.csv``, at the bucket nearest to
    (B·S, E, K), clamped to S and the UB (:func:`default_tile_s`, :mod:`.buckets`); a chip
    without a table falls back to the host rule. v4 and the discrete chain tile by rows.

    ``version="grouped"`` (the full routing semantics) takes the routing options as keywords
    (``bias=True`` / ``finished=True`` for "present"): :func:`.grouped_host.simulate_grouped`."""
    if isinstance(version, str) and version == ROUTING_VERSION:
        from .grouped_host import simulate_grouped
        if tile_s is not None:
            raise ValueError(f"tile_s does not apply to the {ROUTING_VERSION} kernel (it tiles by rows); got {tile_s!r}")
        timeline, tiling = simulate_grouped(B, S, E, K, hw=hw, dtype=dtype, **options)
        return MoeGatingResult(None, None, timeline, tiling, ROUTING_VERSION, tiling.blockNum)
    if options:
        raise TypeError(f"routing options ({', '.join(options)}) apply to version={ROUTING_VERSION!r} only")
    version = _check_version(version)
    hw = _hw(hw)
    for name, v in (("B", B), ("S", S), ("E", E)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {v!r}")
    K = _check_k(K, E)
    try:
        with warnings.catch_warnings():       # numpy warns on deprecated aliases (b'a'): a refusal, not a warning
            warnings.simplefilter("ignore", DeprecationWarning)
            dt = np.dtype(dtype)
    except (TypeError, ValueError):
        dt = None
    if dt not in (np.float32, np.float16):
        raise TypeError(f"dtype must be float32 or float16 (the device's logit types); got {dtype!r}")
    gate_gm = GlobalTensor.empty(B * S * E, dtype, "gate_logits", timing_only=True)
    idx_gm = GlobalTensor.empty(B * S * K, np.int32, "expert_indices", timing_only=True)
    wgt_gm = GlobalTensor.empty(B * S * K, np.float32, "routing_weights", timing_only=True)
    timeline, tiling, block_dim = _launch(version, hw, gate_gm, idx_gm, wgt_gm, B, S, E, K, tile_s, True)
    return MoeGatingResult(None, None, timeline, tiling, version, block_dim)
