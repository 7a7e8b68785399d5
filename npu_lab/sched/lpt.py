"""Assigning variable-length work to cores (issue 19 §2): LPT against the simple schedules.

Host-side and exact (integers in, integers out; no simulator). A work item is a whole number of
cost units (tokens of a decode sequence, cycles of an attention block); a core runs its items one
after the other, so its load is their sum and the makespan is the largest load.

* :func:`lpt_schedule` — Graham's longest-processing-time-first: sort descending, give each item to
  the least-loaded core (ties: the lowest core). Makespan <= (4/3 - 1/(3m)) x optimum for m cores
  (R. L. Graham, "Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math. 17, 1969).
* :func:`round_robin_schedule` — item i to core i mod m (static, what a kernel does with its block index).
* :func:`contiguous_schedule` — consecutive runs of ceil(n/m) items per core (the article's
  ``seqs_per_block`` split).
* :func:`split_long_schedule` — FlashDecode's idea: items longer than ``threshold`` are cut into
  pieces of at most ``threshold`` (each piece then needs a combine step, priced by
  ``combine_cost``), then the pieces are placed by LPT.
* :func:`optimal_makespan` — brute force over all assignments, for small cases only.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass

import numpy as np

MAX_BRUTE_FORCE_ITEMS = 12
#: More cores than any schedule here needs (a chip has dozens, an 8-card node a few hundred).
MAX_CORES = 1 << 16


@dataclass(frozen=True)
class Schedule:
    """A schedule: ``assignment[c]`` lists the (item index, cost) pairs core c runs, in order;
    ``loads[c]`` their sum; ``makespan`` max(loads). For split schedules the item index is that of
    the original item (several pieces may share one)."""

    name: str
    assignment: tuple[tuple[tuple[int, int], ...], ...]
    loads: tuple[int, ...]

    @property
    def makespan(self) -> int:
        return max(self.loads)

    @property
    def cores(self) -> int:
        return len(self.loads)

    def core_lists(self) -> list[list[int]]:
        """Each core's list of costs, in the order it runs them."""
        return [[cost for _, cost in core] for core in self.assignment]

    def balance(self) -> float:
        """min load / max load (1.0: perfectly balanced), the article's ``balance_ratio``."""
        return min(self.loads) / self.makespan if self.makespan else 1.0

    def utilisation(self) -> float:
        """Total work / (cores x makespan): the share of core time spent working."""
        return sum(self.loads) / (self.cores * self.makespan) if self.makespan else 1.0

    def tail(self) -> int:
        """makespan - mean load (cost units): how far the last core runs past the average."""
        return self.makespan - sum(self.loads) / self.cores

    def completion_times(self) -> dict[int, int]:
        """For each original item: when its last piece ends (cores run their lists in order)."""
        done: dict[int, int] = {}
        for core in self.assignment:
            t = 0
            for item, cost in core:
                t += cost
                done[item] = max(done.get(item, 0), t)
        return done


def validate_work(work) -> list[int]:
    """``work`` as a list of whole numbers >= 0 with at least one item, or a clear error.

    Accepts a list/tuple/1-D numpy array of ints (or floats that are exactly whole); rejects an empty
    list, NaN, infinities, fractions, negatives, booleans and strings, naming the first bad item."""
    if isinstance(work, (str, bytes)) or not hasattr(work, "__len__"):
        raise TypeError(f"work must be a list of whole-number lengths such as [512, 128, 2048], got {work!r}")
    arr = list(np.asarray(work, dtype=object).ravel()) if isinstance(work, np.ndarray) else list(work)
    if not arr:
        raise ValueError("work is empty: give at least one work item (a length >= 0)")
    out = []
    for i, x in enumerate(arr):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
            raise TypeError(f"work[{i}] = {x!r} is not a number; lengths are whole numbers >= 0")
        if isinstance(x, (float, np.floating)):
            if math.isnan(x) or math.isinf(x):
                raise ValueError(f"work[{i}] = {x} is not finite; lengths are whole numbers >= 0")
            if x != int(x):
                raise ValueError(f"work[{i}] = {x} is not a whole number; lengths are counted in tokens or "
                                 "cycles (round them yourself if you mean to)")
        if x < 0:
            raise ValueError(f"work[{i}] = {x} is negative; lengths are >= 0")
        out.append(int(x))
    return out


def _cores(cores) -> int:
    if isinstance(cores, bool) or not isinstance(cores, (int, np.integer)):
        raise TypeError(f"cores must be a whole number >= 1, got {type(cores).__name__} {cores!r}")
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    if cores > MAX_CORES:
        raise ValueError(f"cores must be <= {MAX_CORES} (a chip has dozens of cores), got {cores}")
    return int(cores)


def _build(name: str, cores: int, pairs_per_core: list[list[tuple[int, int]]]) -> Schedule:
    return Schedule(name, tuple(tuple(p) for p in pairs_per_core), tuple(sum(c for _, c in p) for p in pairs_per_core))


def _lpt_pairs(pairs: list[tuple[int, int]], cores: int) -> list[list[tuple[int, int]]]:
    order = sorted(pairs, key=lambda p: (-p[1], p[0]))          # longest first; stable by index
    heap = [(0, c) for c in range(cores)]                      # (load, core): least loaded, lowest core
    out: list[list[tuple[int, int]]] = [[] for _ in range(cores)]
    for item, cost in order:
        load, c = heapq.heappop(heap)
        out[c].append((item, cost))
        heapq.heappush(heap, (load + cost, c))
    return out


def lpt_schedule(work, cores: int) -> Schedule:
    """Longest-processing-time-first: each item, longest first, to the least-loaded core.

    ``work``: lengths (whole numbers >= 0, e.g. tokens per sequence); ``cores`` >= 1. Returns a
    :class:`Schedule`: ``.core_lists()`` each core's lengths, ``.makespan`` the largest load (same
    unit as ``work``). Guarantee: makespan <= (4/3 - 1/(3*cores)) x the optimum (Graham 1969)."""
    w, m = validate_work(work), _cores(cores)
    return _build("LPT", m, _lpt_pairs(list(enumerate(w)), m))


def round_robin_schedule(work, cores: int) -> Schedule:
    """Static round-robin: item i to core i mod ``cores`` (arguments as :func:`lpt_schedule`)."""
    w, m = validate_work(work), _cores(cores)
    out: list[list[tuple[int, int]]] = [[] for _ in range(m)]
    for i, cost in enumerate(w):
        out[i % m].append((i, cost))
    return _build("round-robin", m, out)


def contiguous_schedule(work, cores: int) -> Schedule:
    """Contiguous chunks: core c takes items [c*k, (c+1)*k) with k = ceil(n / cores), as the
    article's kernel splits its batch (``seqs_per_block``); trailing cores may get nothing."""
    w, m = validate_work(work), _cores(cores)
    k = -(-len(w) // m)
    out = [[(i, w[i]) for i in range(c * k, min((c + 1) * k, len(w)))] for c in range(m)]
    return _build("contiguous", m, out)


def split_long_schedule(work, cores: int, threshold: int | None = None, combine_cost: int = 0) -> Schedule:
    """Split-the-long-ones (FlashDecode's split-KV): an item longer than ``threshold`` becomes
    ceil(len/threshold) near-equal pieces, each charged ``combine_cost`` extra (its share of the
    log-sum-exp combine); the pieces are then placed by LPT.

    ``threshold`` defaults to ceil(total / cores) (no piece longer than a perfect share);
    ``combine_cost`` >= 0 in the unit of ``work``. Arguments otherwise as :func:`lpt_schedule`."""
    w, m = validate_work(work), _cores(cores)
    if threshold is None:
        threshold = max(1, -(-sum(w) // m))
    if isinstance(threshold, bool) or not isinstance(threshold, (int, np.integer)) or threshold < 1:
        raise ValueError(f"threshold must be a whole number >= 1 (the longest piece kept whole), got {threshold!r}")
    if isinstance(combine_cost, bool) or not isinstance(combine_cost, (int, np.integer)) or combine_cost < 0:
        raise ValueError(f"combine_cost must be a whole number >= 0, got {combine_cost!r}")
    pieces: list[tuple[int, int]] = []
    for i, cost in enumerate(w):
        if cost <= threshold:
            pieces.append((i, cost))
            continue
        n = -(-cost // threshold)
        base, extra = divmod(cost, n)
        pieces += [(i, base + (1 if j < extra else 0) + combine_cost) for j in range(n)]
    return _build("split-long", m, _lpt_pairs(pieces, m))


def optimal_makespan(work, cores: int) -> int:
    """The optimal makespan by brute force (every assignment, with symmetry pruning); at most
    :data:`MAX_BRUTE_FORCE_ITEMS` items, else ``ValueError``. For checking LPT's bound."""
    w, m = validate_work(work), _cores(cores)
    if len(w) > MAX_BRUTE_FORCE_ITEMS:
        raise ValueError(f"brute force is for small cases: {len(w)} items > {MAX_BRUTE_FORCE_ITEMS}")
    w = sorted(w, reverse=True)
    best = lpt_schedule(w, m).makespan
    lower = max(max(w), -(-sum(w) // m))
    loads = [0] * m

    def place(i: int) -> None:
        nonlocal best
        if best == lower:
            return
        if i == len(w):
            best = min(best, max(loads))
            return
        seen = set()
        for c in range(m):
            if loads[c] in seen or loads[c] + w[i] >= best:
                continue                                       # same load = same subtree; or no better
            seen.add(loads[c])
            loads[c] += w[i]
            place(i + 1)
            loads[c] -= w[i]

    place(0)
    return best


def optimal_makespan_exhaustive(work, cores: int) -> int:
    """The optimum by trying all cores**n assignments, no pruning (a cross-check of
    :func:`optimal_makespan`; n <= 8)."""
    w, m = validate_work(work), _cores(cores)
    if len(w) > 8:
        raise ValueError(f"exhaustive search is for n <= 8 items, got {len(w)}")
    best = None
    for assign in itertools.product(range(m), repeat=len(w)):
        loads = [0] * m
        for cost, c in zip(w, assign):
            loads[c] += cost
        best = max(loads) if best is None else min(best, max(loads))
    return best


def lpt_bound(cores: int) -> float:
    """Graham's bound on LPT makespan / optimum: 4/3 - 1/(3 * cores)."""
    return 4 / 3 - 1 / (3 * _cores(cores))
