"""Blocks onto cores (docs/cost_model.md): block i goes to the first free core, the task scheduler
hands out one block per ``dispatch`` interval, so ``block_dim > cores`` runs in waves.

    start[i] = max(start[i-1], earliest free core) + dispatch

A leading run of blocks with equal duration (the common case: all full tiles) is placed in
closed form with numpy, so placing a million identical blocks costs about as much as placing ten.
"""

from __future__ import annotations

import heapq

import numpy as np


def _uniform_run(n: int, cores: int, duration: float, dispatch: float) -> tuple[np.ndarray, np.ndarray]:
    """Starts and cores of n equal blocks on idle cores (exact solution of the recurrence)."""
    wave, core = np.divmod(np.arange(n, dtype=np.int64), cores)
    if duration + dispatch >= cores * dispatch:
        # cores are the bottleneck: waves of `cores` blocks, each wave dispatch-staggered
        start = wave * (duration + dispatch)
        start += (core + 1) * dispatch
    else:
        # the scheduler is the bottleneck: one block every `dispatch`
        start = np.arange(1, n + 1, dtype=np.float64) * dispatch
    return start, core


def schedule_blocks(durations: np.ndarray, cores: int, dispatch: float) -> tuple[np.ndarray, np.ndarray]:
    """(start, core) of each block. ``durations`` in cycles, ``dispatch`` in cycles per block."""
    durations = np.asarray(durations, dtype=np.float64)
    n = len(durations)
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    if n == 0:
        return np.zeros(0), np.zeros(0, np.int64)
    # length of the leading run of identical durations
    differs = np.flatnonzero(durations != durations[0])
    run = int(differs[0]) if len(differs) else n
    start = np.empty(n)
    core = np.empty(n, dtype=np.int64)
    start[:run], core[:run] = _uniform_run(run, cores, float(durations[0]), dispatch)
    if run == n:
        return start, core
    # the rest (tail tiles, mixed work) one by one with a heap of core free times
    free = [(0.0, c) for c in range(cores)]
    if run:
        last = {}
        for j in range(max(0, run - cores), run):
            last[int(core[j])] = start[j] + durations[j]
        free = [(last.get(c, 0.0), c) for c in range(cores)]
    heapq.heapify(free)
    previous = start[run - 1] if run else 0.0
    for i in range(run, n):
        t_free, c = heapq.heappop(free)
        s = max(previous, t_free) + dispatch
        start[i], core[i] = s, c
        previous = s
        heapq.heappush(free, (s + durations[i], c))
    return start, core
