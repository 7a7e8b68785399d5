"""Sweeps over tileS, the autotuner and the shape-bucket table (notebook 07_tuning; docs/kernel_exercises.md, 07.pick_tile_s).

Everything here runs timing-only simulations (no data), fast enough for a slider.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..._files import write_atomically
from ...lang import CapabilityError
from ...presets import DATA_DIR, get_preset
from .buckets import TABLE_OF_VERSION, TABLES, bucket_table_path, clear_cache, nearest_bucket_tile_s
from .run import ROW_TILED, TooManyTilesError, _check_version, plan_moe_gating, simulate_moe_gating, ub_used_bytes
from .tiling import MoeGatingTiling, UbBudgetError, _check_shape, moe_ub_capacity

ARTICLE_TILE_S = (1, 4, 8, 16, 32)
SWEEP_COLUMNS = ["tileS", "tiles", "blocks", "ub_used_kb", "latency_us", "core_utilisation",
                 "bottleneck", "hbm_bytes", "launches", "note"]


#: Most tile sizes (or bucket values) one call simulates: each is a timing-only run.
MAX_SWEEP_POINTS = 1024


def _whole_list(name: str, values) -> list[int]:
    """A non-empty list or tuple of whole numbers >= 1 (at most MAX_SWEEP_POINTS of them)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, range, np.ndarray)):
        raise TypeError(f"{name} must be a list of whole numbers >= 1 such as [1, 16, 128]; got {values!r}")
    out = list(values)
    if not 1 <= len(out) <= MAX_SWEEP_POINTS:
        raise ValueError(f"{name} must list 1 to {MAX_SWEEP_POINTS:,} values, got {len(out):,}")
    for v in out:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"every value of {name} must be a whole number >= 1, got {v!r}")
    return [int(v) for v in out]


def sweep(version: str = "v1", B: int = 1, S: int = 1024, E: int = 64, K: int = 2,
          hw="ascend-910b2", tile_s=ARTICLE_TILE_S) -> pd.DataFrame:
    """One row per tileS: the article's columns (tileS, blocks, UB used KB, latency µs, core
    utilisation) plus tiles, bottleneck, HBM bytes and launches. A tileS that does not fit UB
    gets NaN figures and the reason in ``note`` (the sweep goes on). ``tile_s`` is a list of
    tile sizes, one size, or None (the article's 1, 4, 8, 16, 32); sizes above S are clamped to S."""
    _check_version(version)
    B, S, E, K = _check_shape(B, S, E, K)
    hw = get_preset(hw)
    if tile_s is None:
        tile_s = ARTICLE_TILE_S
    elif isinstance(tile_s, (int, np.integer)) and not isinstance(tile_s, (bool, np.bool_)):
        tile_s = [tile_s]
    elif isinstance(tile_s, (str, bytes)) or not hasattr(tile_s, "__iter__"):
        raise TypeError(f"tile_s must be a list of whole numbers >= 1 (or one of them); got {tile_s!r}")
    values = list(tile_s)
    if not values:
        raise ValueError("tile_s must list at least one tile size, e.g. [1, 4, 8, 16, 32]")
    if len(values) > MAX_SWEEP_POINTS:
        raise ValueError(f"tile_s lists {len(values):,} sizes; a sweep takes at most {MAX_SWEEP_POINTS:,} "
                         "(each is a simulation): pick powers of two, e.g. candidate_tile_sizes(S)")
    for ts in values:
        if isinstance(ts, bool) or not isinstance(ts, (int, np.integer)) or ts < 1:
            raise ValueError(f"every tileS must be a whole number >= 1, got {ts!r}")
    # a tile longer than the sequence is the sequence: clamp to S, keep each size once
    values = list(dict.fromkeys(min(int(ts), int(S)) for ts in values))
    rows = []
    row_tiled = None           # v4 and the chain ignore tileS: simulate them once, not once a row
    for ts in values:
        try:
            if version in ROW_TILED:
                row_tiled = row_tiled or simulate_moe_gating(B, S, E, K, version=version, hw=hw, tile_s=int(ts))
                result = row_tiled
            else:
                result = simulate_moe_gating(B, S, E, K, version=version, hw=hw, tile_s=int(ts))
        except (UbBudgetError, CapabilityError, TooManyTilesError) as exc:
            # does not fit the UB, needs an instruction the chip lacks (an unaligned tail store
            # on the 310P3) or has more tiles than the simulator takes: say so in the row, go on
            rows.append({"tileS": int(ts), "note": str(exc)})
            continue
        t = result.timeline
        tiling = result.tiling
        by_tile_s = isinstance(tiling, MoeGatingTiling)      # v4 and the discrete chain tile by rows
        rows.append({
            "tileS": tiling.tileS if by_tile_s else int(ts),
            "tiles": tiling.totalTiles if by_tile_s else np.nan,
            "blocks": sum(l.block_dim for l in t.launches),
            "ub_used_kb": np.nan if tiling is None else ub_used_bytes(tiling, version) / 1024,
            "latency_us": t.total_us,
            "core_utilisation": t.core_utilisation,
            "bottleneck": t.bottleneck()[0],
            "hbm_bytes": t.hbm_bytes,
            "launches": len(t.launches),
            "note": "",
        })
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)


@dataclass
class TuneResult:
    """The autotuner's choice and why."""

    tile_s: int
    latency_us: float
    reason: str
    table: pd.DataFrame


def candidate_tile_sizes(S: int, largest: int = 256) -> list[int]:
    """Powers of two up to min(S, largest), plus S itself when it is smaller than ``largest``."""
    out = [1 << i for i in range(0, 20) if (1 << i) <= min(S, largest)]
    if S < largest and S not in out:
        out.append(S)
    return out


def autotune(B: int, S: int, E: int, K: int, *, version: str = "v3", hw="ascend-910b2",
             candidates=None) -> TuneResult:
    """Best tileS for a shape by timing-only simulation of every candidate that fits UB.
    Fused versions only: the discrete chain has no tileS to tune."""
    if _check_version(version) in ROW_TILED:
        raise ValueError(f"autotune tunes the fused kernels' tileS (version v1, v2, v2_bad_sync, v2c, v3 or "
                         f"v3_fast_exp); {'the discrete chain' if version == 'discrete' else version} has no tileS "
                         f"(it picks its own rows): use simulate_moe_gating(..., version={version!r})")
    B, S, E, K = _check_shape(B, S, E, K)   # a bad shape is named here, not blamed on a tileS
    hw = get_preset(hw)
    table = sweep(version, B, S, E, K, hw, candidate_tile_sizes(S) if candidates is None else candidates)
    ok = table.dropna(subset=["latency_us"])
    if ok.empty:
        raise ValueError(f"no tileS runs for E={E}, K={K} on {hw.name}: {table['note'].iloc[0]}")
    ok = ok.sort_values(["latency_us", "tileS"])
    best = ok.iloc[0]
    runner = ok.iloc[1] if len(ok) > 1 else None
    reason = (f"tileS={int(best.tileS)} gives {best.latency_us:.1f} us ({best.bottleneck}-bound, "
              f"{int(best.blocks)} blocks)")
    if runner is not None:
        reason += (f"; next best tileS={int(runner.tileS)} at {runner.latency_us:.1f} us "
                   f"(+{(runner.latency_us / best.latency_us - 1):.1%})")
    return TuneResult(int(best.tileS), float(best.latency_us), reason, table)


BUCKET_S = (1, 16, 128, 1024, 8192, 65536)
BUCKET_E = (8, 64, 256)
BUCKET_K = (2, 8)


def bucket_table(version: str = "v3", hw="ascend-910b2", S_values=BUCKET_S, E_values=BUCKET_E,
                 K_values=BUCKET_K, B: int = 1) -> pd.DataFrame:
    """The article's "a few preset parameter sets for shape ranges": for each (S, E, K) bucket
    representative, the autotuned tileS. A host picks the row of the nearest bucket (see
    :mod:`.buckets`, which makes these tables every fused version's default). A bucket where no
    tileS runs on the chip (e.g. an 8-byte output row the 310P3 cannot store without DataCopyPad)
    gets an empty tileS and the reason in ``note``."""
    _check_version(version)
    hw = get_preset(hw)
    S_values, E_values, K_values = (_whole_list(n, v) for n, v in (("S_values", S_values), ("E_values", E_values),
                                                                     ("K_values", K_values)))
    _check_shape(B, 1, 1, 1)
    rows = []
    for E in E_values:
        for K in K_values:
            if K > E:
                continue
            for S in S_values:
                row = {"chip": hw.name, "version": version, "S": S, "E": E, "K": K}
                try:
                    best = autotune(B, S, E, K, version=version, hw=hw)
                except ValueError as exc:        # nothing fits / runs at this bucket
                    rows.append({**row, "tileS": np.nan, "latency_us": np.nan, "note": str(exc)})
                    continue
                rows.append({**row, "tileS": best.tile_s, "latency_us": round(best.latency_us, 3), "note": ""})
    return pd.DataFrame(rows, columns=["chip", "version", "S", "E", "K", "tileS", "latency_us", "note"])


def write_bucket_table(version: str = "v3", chip: str = "ascend-910b2") -> Path:
    """Autotune every bucket of ``version`` on ``chip`` and write the table to ``data/``."""
    hw = get_preset(chip)
    path = bucket_table_path(version, hw.name)
    table = bucket_table(version, hw)
    write_atomically(path, lambda p: table.to_csv(p, index=False), "bucket table")   # whole or not at all
    clear_cache()
    return path


def write_bucket_tables() -> list[Path]:
    """Regenerate every committed table (:data:`.buckets.TABLES`), e.g. after the cost model or a
    kernel changed: ``python -c 'from npu_lab.kernels.moe_gating.sweep import write_bucket_tables;
    write_bucket_tables()'`` (about a minute)."""
    return [write_bucket_table(version, chip) for chip, version in TABLES]


def lookup_tile_s(S: int, E: int, K: int, version: str = "v3", chip: str = "ascend-910b2") -> int:
    """tileS from the committed bucket table of ``version`` (v2_bad_sync reads v2's, v3_fast_exp
    v3's): the row whose (S, E, K) is nearest in log scale, clamped to S and the UB."""
    _, S, E, K = _check_shape(1, S, E, K)
    _check_version(version)
    hw = get_preset(chip)            # accepts the aliases ('910b2'); raises for unknown chips
    table_version = TABLE_OF_VERSION.get(version) or version
    path = bucket_table_path(table_version, hw.name)
    tile = nearest_bucket_tile_s(S, E, K, version, hw.name) if path.is_file() else None
    if tile is None:
        have = sorted(p.name.removeprefix("moe_tile_buckets_").removesuffix(".csv").rsplit("_", 1)
                      for p in DATA_DIR.glob("moe_tile_buckets_*_*.csv"))
        listed = ", ".join(f"chip={c!r} version={v!r}" for c, v in have) or "none"
        raise ValueError(f"no bucket table for version={version!r} on chip={hw.name!r} (looked for "
                         f"{path.name} in {DATA_DIR}); tables exist for: {listed}. Use "
                         "autotune(...) for this shape, or write_bucket_table(version, chip) first.")
    # never more than the shape or the UB allows
    budget_version = "v3" if version.startswith("v3") else version
    capacity = moe_ub_capacity(budget_version, E, K, hw.ub_usable_bytes, hw.block_bytes)
    tiling, _ = plan_moe_gating(1, S, E, K, version=version, hw=hw, tile_s=max(1, min(tile, S, capacity)))
    return tiling.tileS
