"""``ctx.tile_loop``: a kernel's loop over tiles, fast-forwarded in timing-only runs.

A block that loops over thousands of identical tiles settles into a steady state: after a few
iterations every pipe's clock, every pending flag and every queue slot moves by the same period
per iteration (or per two iterations, with two buffers). From then on the future is a shifted
copy of the past — the pipe rules are max-plus and shift-invariant, and costs are whole cycles,
so this is exact, not an approximation. A timing-only run detects that and jumps ahead: it shifts
the state, copies the last period's events and counters, and resumes at the first iteration
whose work differs (a tail tile, the last iteration without a prefetch). A full run executes
every iteration (it needs the numbers), and tests check both give the same timeline.

The state compared includes, besides the pipes' clocks, flags and queue slots: each pipe's
completion time, the DMA requests in flight (their completion times) and the vector writes still
in flight (UB spans a later vector instruction would wait for) — all shifted on a jump.

Race detection (happens-before: the pipes' vector clocks and the UB access records) is not
timing: skipped iterations are not checked again and neither clocks nor records are advanced, so
the loop resumes with the clocks of the last iteration executed — a steady state repeats the same
edges every period, so the iterations after the jump are checked against the same relations; a
timing-only run can only miss a race that spans the skipped stretch. Full runs check every
instruction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


#: Most iterations one ``tile_loop`` may run. A full run executes each (a few µs to ms of Python
#: apiece: this many is hours); a timing-only run with a ``key`` calls it once per iteration.
#: A longer loop is a kernel bug (a count in bytes instead of tiles) or a shape no lesson needs.
MAX_TILE_LOOP = 1 << 24


def _check_count(count) -> int:
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise ValueError(f"tile_loop count must be a whole number >= 0, got {count!r}")
    if count > MAX_TILE_LOOP:
        raise ValueError(f"tile_loop count {count:,} is more than the simulator's limit of {MAX_TILE_LOOP:,} "
                         "iterations (npu_lab.lang.loop.MAX_TILE_LOOP; a full run executes every one); "
                         "use bigger tiles (fewer iterations), or spread the work over more blocks")
    return int(count)


class _Keys:
    """``key(j)`` evaluated on demand (nothing stored per iteration); ``None``: all equal."""

    def __init__(self, key):
        self.key = key

    def repeats(self, j: int, count: int, d: int) -> int:
        """Whole periods of length ``d`` from iteration ``j`` whose keys repeat the period
        ``j-d .. j-1``: the iterations a fast-forward may skip, divided by ``d``."""
        if self.key is None:
            return (count - j) // d
        period = [self.key(j - d + r) for r in range(d)]
        run = 0
        while j + run < count and self.key(j + run) == period[run % d]:
            run += 1
        return run // d


@dataclass
class _Snapshot:
    j: int
    structure: tuple
    owners: list          # per time entry: the pipe whose clock makes it stale when behind
    raw: np.ndarray
    canonical: np.ndarray
    events: int
    pipe_events: dict
    issue_bound: int
    counters: np.ndarray
    live_writes: list     # (region index, record index) of vector writes in flight
    scalar_waits: int     # waits of the scalar unit so far (any: flag, drain, queue)


class LoopOps:
    """Mixed into :class:`~npu_lab.lang.context.KernelContext`."""

    def tile_loop(self, count: int, key=None):
        """Iterate ``j = 0 .. count-1``. ``key(j)`` must return a value that is equal for two
        iterations exactly when they issue the same instructions with the same sizes (e.g. the
        tile's point count and whether a next tile is prefetched). Without ``key`` every
        iteration is assumed identical.

        ``count`` is at most :data:`MAX_TILE_LOOP` in both kinds of run (a full run executes
        every iteration, and both must give the same timeline). A timing-only run holds no
        per-iteration state: ``key`` is called lazily (about once per iteration, to find where
        the work changes), and without ``key`` the jump over a steady loop costs nothing per
        iteration."""
        count = _check_count(count)
        if not self.timing_only or count < 4 or getattr(getattr(self, "gm_router", None), "share", False):
            # (within-launch L2 sharing: a copy's route depends on earlier blocks; no fast-forward, sim/l2.py)
            yield from range(count)
            return
        keys = _Keys(key)
        history: list[_Snapshot] = []
        j = 0
        while j < count:
            history.append(self._loop_snapshot(j))
            del history[:-3]
            skipped = self._fast_forward(j, count, keys, history)
            if skipped:
                j += skipped
                history.clear()
                continue
            yield j
            j += 1

    # ---- state -------------------------------------------------------------------------
    def _loop_snapshot(self, j: int) -> _Snapshot:
        """Everything that decides future instruction times. Each time entry is paired with
        the pipe that consumes it: an entry at or before that pipe's clock can no longer delay
        anything, so it is clamped to the clock (the canonical form) before comparing."""
        core = self.core
        pipes = core.pipes
        structure = [len(self.ub.held), tuple(sorted((k, len(v)) for k, v in core.flags.items() if v))]
        owners = list(pipes) + list(pipes) + list(pipes)
        raw = [core.free[p] for p in pipes] + [core.floor[p] for p in pipes] + [core.done[p] for p in pipes]
        for p, window in core.inflight.items():
            # a completion at or before the engine's clock can delay nothing: its next issue
            # drops it first (sim.core.CoreState.issue), so dropping it now changes no time --
            # and a window [stale, live] then compares equal to [live] one task later
            while window and window[0] <= core.free[p]:
                window.popleft()
            structure.append((p, len(window)))
            owners.extend([p] * len(window))
            raw.extend(window)
        v_clock = core.free.get("V", 0.0)
        live = [(i, k) for i, r in enumerate(self.ub.held) for k, e in enumerate(r.writes)
                if e[3] == "V" and e[2] > v_clock]
        structure.append(tuple((i, self.ub.held[i].writes[k][:2]) for i, k in live))
        owners.extend(["V"] * len(live))
        raw.extend(self.ub.held[i].writes[k][2] for i, k in live)
        for key in sorted(core.flags):
            owners.extend([key[1]] * len(core.flags[key]))
            raw.extend(core.flags[key])
        for q in self.pipe.queues:
            structure.append((q._next, tuple(s.in_use for s in q._slots),
                              tuple(q._slots.index(slot) for _, slot, _ in q._ready)))
            owners.extend([q.producer] * len(q._slots))
            raw.extend(s.freed_at for s in q._slots)
            owners.extend([q.consumer] * len(q._ready))
            raw.extend(t for _, _, t in q._ready)
        raw = np.array(raw, dtype=np.float64)
        clocks = np.array([core.free[p] for p in owners], dtype=np.float64)
        n = len(pipes)
        canonical = raw.copy()
        canonical[n:] = np.maximum(raw[n:], clocks[n:])      # free times stay as they are
        counters = np.array([core.hbm_read_bytes, core.hbm_write_bytes, core.vector_repeats,
                             core.scalar_drains, int(core.scalar_drain_cycles)], dtype=np.int64)
        return _Snapshot(j, tuple(structure), owners, raw, canonical, core.event_count(),
                         dict(core.pipe_events), core.issue_bound, counters, live, core.scalar_waits)

    def _fast_forward(self, j: int, count: int, keys, history) -> int:
        now = history[-1]
        for d in (1, 2):
            if len(history) < d + 1:
                continue
            prev = history[-1 - d]
            if prev.j != j - d or prev.structure != now.structure:
                continue
            shifts = self._steady_shifts(prev, now)
            if shifts is None:
                continue
            copies = keys.repeats(j, count, d)
            if copies < 1:
                continue
            self._apply_shift(prev, now, copies, shifts)
            return copies * d
        return 0

    def _steady_shifts(self, prev: _Snapshot, now: _Snapshot):
        """Per-entry shift over one period if the loop is in a steady state, else None.

        Steady: every entry that moved, moved by the same period p — except the scalar clock,
        which may fall behind (move less) when no instruction in the period waited for it;
        entries that did not move belong to pipes that were idle in the period.

        The scalar unit may also run ahead at a period of its own, s < p, while it issues its own
        instructions (a per-slot ``GetValue`` + ``DataCopyPad`` loop, as MoeInitRoutingV2's
        scatter): exact when in the period S waited for nothing (no flag, drain or queue wait:
        its instructions start at its own clock, which no other pipe moves) and set no other
        pipe's start (``issue_bound`` unchanged). Its lead over the others then only grows, so
        neither holds in any later period either: S's events repeat every s cycles, the rest
        every p. Returned as the third item (None when S keeps the common period)."""
        delta = now.canonical - prev.canonical
        active = {p for p in self.core.pipes if now.pipe_events[p] != prev.pipe_events[p]}
        moving = delta != 0
        if not moving.any():
            return None
        scalar = np.array([o == "S" for o in now.owners])
        others = np.flatnonzero(moving & ~scalar)
        if len(others) == 0:
            return None
        period = delta[others[0]]
        if period <= 0 or not np.all(delta[others] == period):
            return None
        for i in np.flatnonzero(~moving):
            if now.owners[i] in active:
                return None
        s_delta = delta[self.core.pipes.index("S")]
        if not np.all(delta[scalar & moving] == s_delta):
            return None
        scalar_period = None
        if s_delta != period:
            # the scalar unit runs ahead of nothing: it only issues, nobody waited for it
            unbound = now.issue_bound == prev.issue_bound
            scalar_idle = "S" not in active and unbound
            # or it runs ahead on its own instructions, waiting for nothing (see above)
            scalar_ahead = "S" in active and unbound and now.scalar_waits == prev.scalar_waits
            if not (0 <= s_delta < period and (scalar_idle or scalar_ahead)):
                return None
            if scalar_ahead:
                scalar_period = s_delta
        return np.where(moving, delta, 0.0), period, scalar_period

    def _apply_shift(self, prev: _Snapshot, now: _Snapshot, copies: int, shifts) -> None:
        per_entry, period, scalar_period = shifts
        total = per_entry * copies
        core = self.core
        pipes = core.pipes
        n = len(pipes)
        for i, p in enumerate(pipes):
            core.free[p] += total[i]
            core.floor[p] += total[n + i]
            core.done[p] += total[2 * n + i]
        i = 3 * n
        for window in core.inflight.values():
            for k in range(len(window)):
                window[k] += total[i]
                i += 1
        for r, k in now.live_writes:
            region = self.ub.held[r]
            lo, hi, end, pipe = region.writes[k]
            region.writes[k] = (lo, hi, end + total[i], pipe)
            i += 1
        for key in sorted(core.flags):
            pending = core.flags[key]
            for k in range(len(pending)):
                pending[k] += total[i]
                i += 1
        for q in self.pipe.queues:
            for slot in q._slots:
                slot.freed_at += total[i]
                i += 1
            ready = list(q._ready)
            q._ready.clear()
            for tensor, slot, when in ready:
                q._ready.append((tensor, slot, when + total[i]))
                i += 1
        for p in pipes:
            core.pipe_events[p] += (now.pipe_events[p] - prev.pipe_events[p]) * copies
        delta = (now.counters - prev.counters) * copies
        core.hbm_read_bytes += int(delta[0])
        core.hbm_write_bytes += int(delta[1])
        core.vector_repeats += int(delta[2])
        core.scalar_drains += int(delta[3])
        core.scalar_drain_cycles += float(delta[4])
        core.replicate_events(prev.events, copies, period, scalar_period)
