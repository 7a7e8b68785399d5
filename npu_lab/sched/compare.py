"""Length distributions and the schedules side by side (issue 19 §2), and the article's
section-6 figures ("核利用率从平均65%提升至92%", "P99延迟降低47%") against what they give.

The article states no distribution, no number of cores and no definition of "utilisation"; so
:func:`article_balance_check` states its own (listed in the returned table) and reports what the
schedules give under each. Utilisation here = total work / (cores x makespan); P99 = the 99th
percentile over items of each item's completion time (a core runs its list in order).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .lpt import (Schedule, contiguous_schedule, lpt_schedule, round_robin_schedule, split_long_schedule,
                  validate_work)

DISTRIBUTIONS = ("uniform", "lognormal", "zipf")
MAX_ITEMS = 10**6


def sample_lengths(n: int, distribution: str = "lognormal", seed: int = 0, *, low: int = 128,
                   high: int = 8192, sigma: float = 1.0, median: int = 1024, zipf_a: float = 1.5) -> list[int]:
    """``n`` seeded work lengths (whole numbers in [low, high]), e.g. decode context lengths in tokens.

    ``distribution``: ``"uniform"`` (integers in [low, high]), ``"lognormal"`` (median ``median``,
    shape ``sigma``; a long tail), or ``"zipf"`` (``low`` x a Zipf(``zipf_a``) draw: many short, a
    few very long). Long draws are clipped to ``high`` (a context limit). Same seed, same list."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_ITEMS:
        raise ValueError(f"n must be a whole number in [1, {MAX_ITEMS}], got {n!r}")
    if not isinstance(distribution, str) or distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}; known: {', '.join(DISTRIBUTIONS)}")
    for name, v in (("low", low), ("high", high), ("median", median)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= 2**31 - 1:
            raise ValueError(f"{name} must be a whole number in [1, 2**31 - 1], got {v!r}")
    if low > high:
        raise ValueError(f"need low <= high, got low={low}, high={high}")
    for name, v, lo, hi in (("sigma", sigma, 0.0, 10.0), ("zipf_a", zipf_a, 1.0, 100.0)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not lo < v <= hi:
            raise ValueError(f"{name} must be a number in ({lo:g}, {hi:g}], got {v!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    rng = np.random.default_rng(seed)
    if distribution == "uniform":
        x = rng.integers(low, high + 1, size=n)
    elif distribution == "lognormal":
        x = np.rint(rng.lognormal(np.log(median), sigma, size=n))
    else:
        x = low * np.minimum(rng.zipf(zipf_a, size=n), high // low + 1)   # no int64 overflow
    return [int(v) for v in np.clip(x, low, high)]


def p99_completion(schedule: Schedule) -> float:
    """The 99th percentile (numpy's linear interpolation) of the items' completion times."""
    return float(np.percentile(list(schedule.completion_times().values()), 99))


def compare_schedules(work, cores: int, threshold: int | None = None, combine_cost: int = 0) -> pd.DataFrame:
    """Round-robin, contiguous, LPT and split-long on the same ``work`` and ``cores``.

    One row per schedule: makespan, mean_load, balance (min/max load), utilisation (work / (cores x
    makespan)), tail (makespan - mean load), p99 (99th-percentile item completion), speedup_vs_rr
    (round-robin makespan / this one). Units: those of ``work``. ``threshold``/``combine_cost``: see
    :func:`~npu_lab.sched.lpt.split_long_schedule`."""
    w = validate_work(work)
    schedules = [round_robin_schedule(w, cores), contiguous_schedule(w, cores), lpt_schedule(w, cores),
                 split_long_schedule(w, cores, threshold, combine_cost)]
    rr = schedules[0].makespan
    rows = [dict(schedule=s.name, cores=s.cores, items=len(w), makespan=s.makespan, mean_load=sum(s.loads) / s.cores,
                 balance=s.balance(), utilisation=s.utilisation(), tail=s.tail(), p99=p99_completion(s),
                 speedup_vs_rr=rr / s.makespan if s.makespan else 1.0) for s in schedules]
    return pd.DataFrame(rows)


ARTICLE_UTILISATION = (0.65, 0.92)
ARTICLE_P99_CHANGE = -0.47


def article_balance_check(cores: int = 48, n: int = 256, seed: int = 0) -> pd.DataFrame:
    """The article's 65 % -> 92 % utilisation and P99 -47 % against the schedules, for stated length
    distributions (uniform 128-8192, lognormal median 1024 sigma 1, Zipf 1.5 x 128; all clipped to
    8192, seeded) of ``n`` sequences on ``cores`` cores (48 = the 910B2's vector cores).

    One row per (distribution, schedule) with utilisation and p99 (tokens), and per distribution the
    change from round-robin to LPT (``p99_change_vs_rr``); ``attrs['verdict']`` says what follows."""
    rows = []
    for dist in DISTRIBUTIONS:
        w = sample_lengths(n, dist, seed)
        df = compare_schedules(w, cores)
        rr = df.iloc[0]
        for _, r in df.iterrows():
            rows.append(dict(distribution=dist, items=n, cores=cores, schedule=r.schedule,
                             utilisation=r.utilisation, balance=r.balance, makespan=r.makespan, p99=r.p99,
                             p99_change_vs_rr=r.p99 / rr.p99 - 1, article_utilisation="65 % -> 92 %",
                             article_p99_change="-47 %"))
    out = pd.DataFrame(rows)
    got = "; ".join(
        f"{d}: round-robin {g.utilisation.iloc[0]:.0%} -> LPT {g.utilisation.iloc[2]:.0%}, "
        f"P99 {g.p99_change_vs_rr.iloc[2]:+.0%}" for d, g in out.groupby("distribution", sort=False))
    out.attrs["verdict"] = (
        "unverifiable as stated: the article gives no length distribution, batch, core count or definition of "
        "utilisation, and its own scheduler adds a communication cost to every core but core 0 (not a model of "
        "anything). A 65 % -> 92 % change is what LPT does over a static split for some long-tailed inputs, "
        "and not for others. Here: " + got)
    out.attrs["assumptions"] = ("utilisation = total work / (cores x makespan); P99 = 99th percentile of item "
                                "completion times, each core running its list in order; lengths in tokens; "
                                f"n={n}, cores={cores}, seed={seed}")
    return out


#: how close (absolute, utilisation points) a modelled figure must be to count as the article's
ARTICLE_TOLERANCE = 0.05


def article_spread_sweep(sigmas=(0.25, 0.5, 0.75, 1.0, 1.5), items=(96, 256), cores: int = 48,
                         seed: int = 0) -> pd.DataFrame:
    """Where the article's 65 % -> 92 % could come from: lognormal lengths (median 1024 tokens,
    clipped to 128..8192) of spread ``sigma``, ``items`` sequences on ``cores`` cores.

    One row per (sigma, items): utilisation of round-robin (``rr_utilisation``), LPT and split-long,
    LPT's P99 change from round-robin, and ``matches_article`` — round-robin within
    :data:`ARTICLE_TOLERANCE` of 65 % *and* LPT within it of 92 %. ``attrs['verdict']`` names the
    matching cases (or none): the figure pair is a property of the input, not of LPT."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    sig, its = list(sigmas), list(items)
    if not sig or not its:
        raise ValueError("sigmas and items must each list at least one value, e.g. sigmas=(0.5, 1.0), items=(96,)")
    rows = []
    for s in sig:
        for n in its:
            df = compare_schedules(sample_lengths(n, "lognormal", seed, sigma=s), cores)
            u = dict(zip(df.schedule, df.utilisation))
            p = dict(zip(df.schedule, df.p99))
            rows.append(dict(sigma=s, items=n, cores=cores, rr_utilisation=u["round-robin"], lpt_utilisation=u["LPT"],
                             split_long_utilisation=u["split-long"], lpt_p99_change=p["LPT"] / p["round-robin"] - 1,
                             matches_article=abs(u["round-robin"] - ARTICLE_UTILISATION[0]) <= ARTICLE_TOLERANCE
                             and abs(u["LPT"] - ARTICLE_UTILISATION[1]) <= ARTICLE_TOLERANCE))
    out = pd.DataFrame(rows)
    hits = out[out.matches_article]
    where = ", ".join(f"sigma={r.sigma:g} with {r.items} sequences (P99 {r.lpt_p99_change:+.0%})"
                      for r in hits.itertuples()) or "none of these cases"
    out.attrs["verdict"] = (
        f"65 % -> 92 % (within ±{ARTICLE_TOLERANCE:.0%}) on {cores} cores: {where}. Round-robin's utilisation "
        "falls as the spread grows and rises with more sequences per core; LPT reaches > 90 % once there are a "
        "few sequences per core, and only splitting keeps it there when one sequence is longer than a core's "
        "share. The article's pair is one point of this surface, and its −47 % P99 another; neither is "
        "reproducible without the distribution it came from.")
    return out
