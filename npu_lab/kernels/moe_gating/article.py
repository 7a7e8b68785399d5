"""The first article's numbers — reproduced from the model, never typed in (data/README.md says where each comes from; notebook 07b compares).

* :func:`fit_hardware` fits at most four named HardwareSpec fields to measured latencies by least
  squares (relative residuals), each kept inside its plausible range, and returns the fitted spec
  with per-row residuals and, per field, its value, range and whether it lies inside.
* The ``article`` preset is the 910B2 with :data:`~.fit_ranges.ARTICLE_FREE` fitted to the
  article's tileS table inside :data:`~.fit_ranges.FIT_RANGES` (both stated before the fit);
  ``python -m npu_lab.kernels.moe_gating.article --write`` regenerates
  ``data/article_fitted_chip.json`` (a test fails when it is stale) and prints the fields table.
  Under the current cost model the best fit inside the ranges puts every field on its upper
  bound and stays far from the table: the measured chip has per-block and per-point costs the
  model lacks (notebook 07b says which).
* :func:`reproduce_article_claims` puts each claim next to the model's figure and a verdict, and on
  the ``article`` preset beside the previous cost model's recorded figure and verdict.
"""

from __future__ import annotations

import argparse
import copy
import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ...data import ARTICLE_SWEEP_SHAPE, load_article_tile_sweep, load_previous_model_claims
from ...hardware import _INT_FIELDS, FIELD_DOCS, HardwareSpec
from ...lang import TBuf, TPosition, launch, npu_kernel
from ...presets import DATA_DIR, get_preset
from ...lang import CapabilityError
from .run import simulate_moe_gating, unsupported_reason
from .sweep import autotune, sweep
from .fit_ranges import ARTICLE_FREE, FIT_RANGES, FitRange
from .vectorized import fast_exp, fast_exp_max_rel_error

# The free fields and their ranges were chosen before the current model's fit was run
# (fit_ranges.py, and its git history). The previous cost model fitted three fields without
# bounds (launch, dispatch, scalar UB access; data/article_fit_previous_model.json).
#: The fields fit_hardware frees by default: the article preset's choice, :data:`ARTICLE_FREE`.
DEFAULT_FREE = ARTICLE_FREE
ARTICLE_PRESET_PATH = DATA_DIR / "article_fitted_chip.json"


@dataclass
class FitResult:
    spec: HardwareSpec
    residuals: pd.DataFrame       # tileS, measured, model, residual_us, residual_pct
    mape: float                   # mean absolute percentage error
    fitted: dict                  # field -> (base value, fitted value)
    fields: pd.DataFrame | None = None   # per field: base, fitted, low, high, inside, bound, source


def _model_latencies(hw: HardwareSpec, tile_s, version: str, shape: dict) -> np.ndarray:
    df = sweep(version, shape["B"], shape["S"], shape["E"], shape["K"], hw, tile_s)
    return df["latency_us"].to_numpy(dtype=float)


def _bound_hit(r: FitRange | None, value: float) -> str:
    """``"upper"`` / ``"lower"`` when ``value`` sits on that bound of ``r`` (within 0.1 %, where the
    optimiser stops), else ``""``."""
    if r is None:
        return ""
    if abs(value / r.high - 1) <= 1e-3:
        return "upper"
    return "lower" if abs(value / r.low - 1) <= 1e-3 else ""


def fit_hardware(measurements: pd.DataFrame, base_preset="ascend-910b2", free=DEFAULT_FREE, *,
                 version: str = "v1", shape: dict | None = None, starts: int = 4,
                 ranges: dict | None = None) -> FitResult:
    """Least-squares fit of ≤ 4 HardwareSpec fields so that the ``version`` sweep reproduces
    ``measurements`` (columns ``tile_s``, ``latency_us``). Parameters are fitted in log space
    (they stay positive); residuals are relative (several starting points, the best kept). A field
    with a plausible range (``ranges``,
    default :data:`~.fit_ranges.FIT_RANGES`; ``{}`` fits without bounds) is kept inside it.
    Returns the fitted spec (fitted fields labelled ``fitted``), per-row residuals, the mean
    absolute percentage error and, per fitted field (``FitResult.fields``: field, unit, base,
    fitted, low, high, inside, bound, source), its value, its range, whether it lies inside and
    which bound it sits on (``"upper"``, ``"lower"`` or ``""``)."""
    base = get_preset(base_preset)
    ranges = FIT_RANGES if ranges is None else ranges
    if not isinstance(ranges, dict) or not all(isinstance(r, FitRange) for r in ranges.values()):
        raise TypeError("ranges must be a dict {field: FitRange(low, high, source)} (or {} for no bounds)")
    if not isinstance(free, str) and not isinstance(free, (list, tuple)):
        raise TypeError(f"free must be a field name or a list of up to 4 field names; got {free!r}")
    free = (free,) if isinstance(free, str) else tuple(free)   # one field name, not its letters
    if not 1 <= len(free) <= 4:
        raise ValueError(f"fit at most 4 fields (and at least 1); got {len(free)}: {free}")
    unknown = [f for f in free if not isinstance(f, str) or f not in FIELD_DOCS]
    if unknown:
        raise ValueError(f"unknown HardwareSpec field(s) {unknown}; choose from {sorted(FIELD_DOCS)}")
    whole = [f for f in free if f in _INT_FIELDS]
    if whole:
        raise ValueError(f"cannot fit whole-number field(s) {whole} (sizes and counts); fit continuous "
                         f"ones such as {', '.join(DEFAULT_FREE)}")
    if isinstance(starts, bool) or not isinstance(starts, (int, np.integer)) or not 1 <= starts <= 50:
        raise ValueError(f"starts must be a whole number from 1 to 50 (least-squares starting points); "
                         f"got {starts!r}")
    if not isinstance(measurements, pd.DataFrame):
        raise TypeError(f"measurements must be a pandas DataFrame with columns tile_s and latency_us; "
                        f"got {type(measurements).__name__}")
    for col in ("tile_s", "latency_us"):
        if col not in measurements.columns:
            raise ValueError(f"measurements need columns tile_s and latency_us; missing {col!r}")
    if measurements.empty:
        raise ValueError("measurements has no rows: give at least one (tile_s, latency_us)")
    if shape is not None and (not isinstance(shape, dict) or set("BSEK") - set(shape)):
        raise ValueError(f"shape must be a dict with keys B, S, E and K (like ARTICLE_SWEEP_SHAPE); got {shape!r}")
    shape = dict(ARTICLE_SWEEP_SHAPE if shape is None else shape)
    for col in ("tile_s", "latency_us"):
        if pd.to_numeric(measurements[col], errors="coerce").dtype.kind not in "iuf":
            raise ValueError(f"measurements.{col} must hold real numbers; got {measurements[col].tolist()}")
    tile_col = pd.to_numeric(measurements["tile_s"], errors="coerce").to_numpy(dtype=float)
    if not (np.isfinite(tile_col) & (tile_col >= 1) & (tile_col == np.round(tile_col))).all():
        raise ValueError(f"measurements.tile_s must be whole numbers >= 1; got {measurements['tile_s'].tolist()}")
    measured = pd.to_numeric(measurements["latency_us"], errors="coerce").to_numpy(dtype=float)
    if not (np.isfinite(measured) & (measured > 0)).all():
        raise ValueError("measurements.latency_us must be finite latencies > 0 (the fit divides by them); "
                         f"got {measurements['latency_us'].tolist()}")
    tile_s = [int(t) for t in tile_col]
    if len(set(tile_s)) != len(tile_s):
        raise ValueError(f"measurements.tile_s has a tileS more than once ({tile_s}): one row per tileS")
    first = sweep(version, shape["B"], shape["S"], shape["E"], shape["K"], base, tile_s)
    unfit = first[first["latency_us"].isna()]
    if not unfit.empty:
        raise ValueError(f"cannot fit to tileS={int(unfit['tileS'].iloc[0])}: it does not run on "
                         f"{base.name} ({unfit['note'].iloc[0]})")
    x_base = np.log(np.array([max(float(getattr(base, f)), 1e-3) for f in free]))
    low = np.array([np.log(ranges[f].low) if f in ranges else -np.inf for f in free])
    high = np.array([np.log(ranges[f].high) if f in ranges else np.inf for f in free])
    x_base = np.clip(x_base, low + 1e-6, high - 1e-6)   # start inside the box

    def spec_for(x) -> HardwareSpec:
        return base.replace(**{f: float(v) for f, v in zip(free, np.exp(x))})

    def residual(x):
        return _model_latencies(spec_for(x), tile_s, version, shape) / measured - 1.0

    rng = np.random.default_rng(0)
    best = None
    for i in range(starts):
        x0 = x_base if i == 0 else np.clip(x_base + rng.normal(0, 1.0, len(free)), low + 1e-6, high - 1e-6)
        sol = least_squares(residual, x0, diff_step=0.02, x_scale=1.0, max_nfev=300, bounds=(low, high))
        if best is None or sol.cost < best.cost:
            best = sol
    values = np.exp(best.x)
    for i, f in enumerate(free):          # a value on its bound to within float noise is the bound
        for edge in (ranges[f].low, ranges[f].high) if f in ranges else ():
            if abs(values[i] / edge - 1) <= 1e-6:
                values[i] = edge
    model = _model_latencies(spec_for(best.x), tile_s, version, shape)
    pct = (model / measured - 1.0) * 100
    residuals = pd.DataFrame({"tileS": tile_s, "measured_us": measured, "model_us": model,
                              "residual_us": model - measured, "residual_pct": pct})
    note = "; ".join(f"tileS={t}: {p:+.1f}%" for t, p in zip(tile_s, pct))
    bound = {f: _bound_hit(ranges.get(f), v) for f, v in zip(free, values)}
    prov = dict(base.provenance)
    for f, v in zip(free, values):
        where = ""
        if f in ranges:
            where = f"; plausible range {ranges[f].low:g}-{ranges[f].high:g}" + (
                f", on its {bound[f]} bound" if bound[f] else "")
        prov[f] = ("fitted", f"least squares to the article's tileS table ({version}){where}; residuals {note}")
    spec = base.replace(name="article", description=f"{base.name} with {', '.join(free)} fitted to the "
                        "first article's tileS table", provenance=prov,
                        **{f: float(round(v, 6)) for f, v in zip(free, values)})
    fields = pd.DataFrame([{
        "field": f, "unit": FIELD_DOCS[f][0], "base": float(getattr(base, f)), "fitted": float(round(v, 6)),
        "low": ranges[f].low if f in ranges else np.nan, "high": ranges[f].high if f in ranges else np.nan,
        "inside": bool(ranges[f].contains(v)) if f in ranges else None, "bound": bound[f],
        "source": ranges[f].source if f in ranges else "no range given"} for f, v in zip(free, values)])
    return FitResult(spec, residuals, float(np.mean(np.abs(pct))),
                     {f: (float(getattr(base, f)), float(round(v, 6))) for f, v in zip(free, values)}, fields)


@functools.lru_cache(maxsize=1)
def _fit_article_preset_cached() -> FitResult:
    return fit_hardware(load_article_tile_sweep(), free=ARTICLE_FREE, ranges=FIT_RANGES)


def fit_article_preset() -> FitResult:
    """The ``article`` preset's fit: :data:`ARTICLE_FREE` of the 910B2 preset, each inside its
    :data:`FIT_RANGES` range, to the article's tileS table (v1 sweeps, about 2 s). Cached per
    process (tests and the notebook ask more than once); a fresh copy is returned each call."""
    return copy.deepcopy(_fit_article_preset_cached())


def write_article_preset() -> FitResult:
    result = fit_article_preset()
    result.spec.to_json(ARTICLE_PRESET_PATH)
    return result


# ---- identifiability: the valley along the scalar UB access --------------------------------------
#: The fields refitted at each point of the valley (the scalar UB access is held fixed there).
VALLEY_FREE = ("launch_overhead_us", "block_dispatch_us", "dma_latency_cycles")


def double_buffering_gain(hw="article", tile_s: int = 8) -> float:
    """1 - v2 / v1 latency at the article's shape and ``tile_s`` on chip ``hw`` (a fraction)."""
    shape = ARTICLE_SWEEP_SHAPE
    lat = {v: simulate_moe_gating(shape["B"], shape["S"], shape["E"], shape["K"], version=v, hw=hw,
                                  tile_s=tile_s).latency_us for v in ("v1", "v2")}
    return 1 - lat["v2"] / lat["v1"]


def valley_scan(ub_access_cycles, base_preset="ascend-910b2", *, starts: int = 4, ranges: dict | None = None,
                measurements: pd.DataFrame | None = None) -> pd.DataFrame:
    """Hold ``scalar_ub_access_cycles`` at each given value, refit :data:`VALLEY_FREE` to the article's
    table (``ranges={}`` by default: unbounded, as the previous model's valley was mapped) and report
    per point: the mean absolute error (``mape_pct``), the refitted fields, the double-buffering gain
    v2 vs v1 at tileS = 8 (``v2_gain_pct``), v1 at E = 256 (``v1_e256_us``: a measurement that would
    tell the points apart) and whether every value of the row lies inside :data:`FIT_RANGES`
    (``inside_ranges``). Several v1 sweeps per fit: about 2 s per point."""
    values = [ub_access_cycles] if isinstance(ub_access_cycles, (int, float, np.number)) else list(ub_access_cycles)
    if not values or not all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
                             and np.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"ub_access_cycles must be one or more positive cycle counts; got {ub_access_cycles!r}")
    base = get_preset(base_preset)
    table = load_article_tile_sweep() if measurements is None else measurements
    shape = ARTICLE_SWEEP_SHAPE
    rows = []
    for ub in values:
        f = fit_hardware(table, base.replace(scalar_ub_access_cycles=float(ub)), free=VALLEY_FREE, starts=starts,
                         ranges={} if ranges is None else ranges)
        row = {"scalar_ub_access_cycles": float(ub), "mape_pct": f.mape,
               **{field: float(getattr(f.spec, field)) for field in VALLEY_FREE},
               "v2_gain_pct": 100 * double_buffering_gain(f.spec),
               "v1_e256_us": simulate_moe_gating(shape["B"], shape["S"], 256, shape["K"], version="v1",
                                                 hw=f.spec, tile_s=8).latency_us}
        row["inside_ranges"] = all(FIT_RANGES[k].contains(row[k]) for k in (*VALLEY_FREE, "scalar_ub_access_cycles"))
        rows.append(row)
    return pd.DataFrame(rows)


def gain_spread_pct(valley: pd.DataFrame, within_pct: float = 1.0) -> tuple[float, float]:
    """(lowest, highest) ``v2_gain_pct`` over the rows of a :func:`valley_scan` whose error is within
    ``within_pct`` percentage points of the scan's best: the gain the table leaves open "at the same error"."""
    if not isinstance(valley, pd.DataFrame) or not {"mape_pct", "v2_gain_pct"} <= set(valley.columns):
        raise ValueError("valley must be a DataFrame from valley_scan (columns mape_pct and v2_gain_pct)")
    if isinstance(within_pct, bool) or not isinstance(within_pct, (int, float)) or not within_pct >= 0:
        raise ValueError(f"within_pct must be a number of percentage points >= 0; got {within_pct!r}")
    near = valley[valley.mape_pct <= valley.mape_pct.min() + within_pct]
    return float(near.v2_gain_pct.min()), float(near.v2_gain_pct.max())


# ---- the claims ---------------------------------------------------------------------------------
@npu_kernel
def _exp_kernel(ctx, count: int, fast: bool):
    """Micro-benchmark: one exp over ``count`` floats, exact or polynomial (V pipe only)."""
    bufs = [TBuf(TPosition.VECCALC) for _ in range(3)]
    padded = -(-count // 8) * 8                   # fast_exp's scratch parts start on 32-byte blocks
    for buf, n, name in zip(bufs, (count, count, 3 * padded), ("x", "y", "work")):
        ctx.pipe.init_buffer(buf, n * 4, name=name)
    x, y, work = (b.get(np.float32) for b in bufs)
    if fast:
        fast_exp(ctx, y, x, work, count)
    else:
        ctx.exp(y, x, count)


def exp_speedup(hw="ascend-910b2", count: int = 4096) -> float:
    """Vector time of the exact Exp over the polynomial exp on ``count`` floats (one core)."""
    hw = get_preset(hw)
    largest = (hw.ub_usable_bytes // (5 * 4)) // 8 * 8 - 8   # x, y and 3 floats of scratch per element (32-B parts)
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or not 1 <= count <= largest:
        raise ValueError(f"count must be a whole number from 1 to {largest} (what fits {hw.name}'s UB "
                         f"with the fast exp's scratch); got {count!r}")
    busy = [launch(_exp_kernel, 1, count, fast, hw=hw, timing_only=True).busy_us_by_pipe()["V"]
            for fast in (False, True)]
    return busy[0] / busy[1]


def _verdict(ok: bool, partly: bool = False) -> str:
    return "reproduced" if ok else ("partly" if partly else "not reproduced")


#: The columns the previous cost model's recorded claims add, beside the current model's.
PREVIOUS_COLUMNS = ("previous model", "previous verdict")


def reproduce_article_claims(hw="article", previous: bool | None = None) -> pd.DataFrame:
    """One row per claim of the first article: its figure, the model's figure, a verdict.

    Columns ``claim, article, model, verdict``; with ``previous`` (default: when ``hw`` is the
    ``article`` preset, the chip the record was made on) also ``previous model`` and ``previous
    verdict`` before ``model``: the previous cost model's figure and verdict for the same claim
    (:func:`npu_lab.data.load_previous_model_claims`, joined on the claim text; a claim the record
    lacks gets ``not recorded``). The current verdict stays the last column."""
    if previous is not None and not isinstance(previous, bool):
        raise TypeError(f"previous must be True, False or None (None: only on the 'article' preset); got {previous!r}")
    hw = get_preset(hw)
    for version in ("v1", "v2_bad_sync", "v3"):     # the article's kernels, each claim needs one
        why = unsupported_reason(version, hw)
        if why:
            raise CapabilityError(f"the article's claims are measured with its v1/v2/v3 kernels; {why}. "
                                  "Reproduce them on a chip that runs them: 'article' or 'ascend-910b2'")
    if previous is None:
        previous = hw.name == "article"
    shape = ARTICLE_SWEEP_SHAPE
    table = load_article_tile_sweep()
    v1 = sweep("v1", shape["B"], shape["S"], shape["E"], shape["K"], hw, table["tile_s"])
    rows = []
    best = int(v1.loc[v1.latency_us.idxmin(), "tileS"])
    rows.append(("sweet spot at tileS = 8", "8", str(best), _verdict(best == 8)))
    for (_, art), (_, mod) in zip(table.iterrows(), v1.iterrows()):
        err = mod.latency_us / art.latency_us - 1
        rows.append((f"tileS={int(art.tile_s)}: {int(art.blocks)} blocks, latency",
                     f"{art.latency_us:.0f} us", f"{mod.latency_us:.0f} us ({err:+.0%})",
                     _verdict(abs(err) <= 0.15, abs(err) <= 0.3)))
    t8 = dict(B=shape["B"], S=shape["S"], E=shape["E"], K=shape["K"], hw=hw, tile_s=8)
    lat = {v: simulate_moe_gating(version=v, **t8).latency_us for v in ("v1", "v2_bad_sync")}
    gain = double_buffering_gain(hw)
    rows.append(("double buffering gains 15-20% at tileS = 8", "15-20%", f"{gain:.0%}",
                 _verdict(0.15 <= gain <= 0.20, 0.10 <= gain <= 0.30)))
    bad = lat["v2_bad_sync"] / lat["v1"] - 1
    rows.append(("double buffering with a wrong sync can be slower than single buffering",
                 "slower", f"{bad:+.1%} vs v1", _verdict(bad > 0, bad > -0.02)))
    speed, err = exp_speedup(hw), fast_exp_max_rel_error()
    rows.append(("polynomial exp ~2x faster than exact exp at ~1e-3 error", "2x at ~1e-3",
                 f"{speed:.2f}x at {err:.1e}", _verdict(1.7 <= speed <= 2.3 and err <= 2e-3, speed > 1.2)))
    discrete = simulate_moe_gating(version="discrete", B=shape["B"], S=shape["S"], E=shape["E"],
                                   K=shape["K"], hw=hw).latency_us
    fused = autotune(shape["B"], shape["S"], shape["E"], shape["K"], version="v3", hw=hw).latency_us
    rows.append(("optimised fused kernel >10x faster than the discrete chain", ">10x",
                 f"{discrete / fused:.1f}x", _verdict(discrete / fused > 10, discrete / fused > 3)))
    moves = {(E, K): autotune(1, 1024, E, K, version="v1", hw=hw, candidates=[1, 2, 4, 8, 16, 32]).tile_s
             for E, K in ((64, 2), (256, 8), (16, 1))}
    rows.append(("the sweet spot moves when E or K changes", "moves",
                 ", ".join(f"E={e},K={k}: {t}" for (e, k), t in moves.items()),
                 _verdict(len(set(moves.values())) > 1)))
    table = pd.DataFrame(rows, columns=["claim", "article", "model", "verdict"])
    if not previous:
        return table
    old = load_previous_model_claims().set_index("claim")[["model", "verdict"]]
    old.columns = list(PREVIOUS_COLUMNS)
    table = table.join(old, on="claim").fillna({c: "not recorded" for c in PREVIOUS_COLUMNS})
    return table[["claim", "article", *PREVIOUS_COLUMNS, "model", "verdict"]]


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Fit the 'article' chip preset to the article's tileS table")
    parser.add_argument("--write", action="store_true", help=f"write {ARTICLE_PRESET_PATH.name}")
    args = parser.parse_args(argv)
    result = write_article_preset() if args.write else fit_article_preset()
    print(result.residuals.round(2).to_string(index=False))
    print(f"MAPE {result.mape:.1f}%, model minimum at tileS = "
          f"{int(result.residuals.loc[result.residuals.model_us.idxmin(), 'tileS'])}")
    print(result.fields.drop(columns="source").to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
