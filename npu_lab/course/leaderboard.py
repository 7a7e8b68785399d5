"""A leaderboard for a kernel exercise: the learner's kernel and the course's versions timed at
the exercise's target shape, on its chip, ranked by modeled latency.

``leaderboard(fn, exercise_id)`` runs the course's versions listed by the exercise
(``KernelExercise.leaderboard_versions``) with ``simulate_moe_gating`` (timing-only runs, each
with the host's default tiling for that version) and the learner's ``fn`` through the exercise's
own launcher, then prints one row each: rank, name, latency µs, how much slower than the best,
and which pipe bounds it (``Timeline.bottleneck()``). A version the chip cannot run (e.g. v4 on
the 310P: no DataCopyPad) is listed below the ranking with the reason. The learner's kernel is
ranked only when a full run at the race shape gives the reference's results: an unfinished or
wrong kernel is often *faster* (it skips work), so it is listed unranked, with why (``check_kernel``
says where). Deterministic: the simulator is, and ties are ranked by name.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LeaderboardRow", "Leaderboard", "leaderboard"]


@dataclass(frozen=True)
class LeaderboardRow:
    name: str
    latency_us: float
    bound: str


class Leaderboard(str):
    """The printed table (a ``str``); ``.rows`` ranked fastest first, ``.skipped`` (name, reason) of
    the course's versions the chip cannot run, ``.unranked`` (name, reason) of a learner's kernel
    whose results at the race shape are not the reference's."""

    rows: tuple = ()
    skipped: tuple = ()
    unranked: tuple = ()

    def rank_of(self, name: str) -> int:
        """1-based rank of ``name`` (ValueError when it is not ranked)."""
        for i, row in enumerate(self.rows):
            if row.name == name:
                return i + 1
        raise ValueError(f"{name!r} is not on the leaderboard; ranked: {', '.join(r.name for r in self.rows)}")


def leaderboard(fn, exercise_id: str, *, hw=None, name: str = "your kernel") -> Leaderboard:
    """Rank ``fn`` (the learner's function for ``exercise_id``; None for the course's versions
    alone) against the course's versions at the exercise's target shape on ``hw`` (default: the
    exercise's chip). Raises ValueError for an exercise without versions to race. ``fn`` is run
    in full at the race shape first: if it raises or its results differ from the reference, it is
    listed unranked with the reason (``check_kernel`` explains it), not timed."""
    from ..kernels.moe_gating import simulate_moe_gating
    from ..kernels.moe_gating.run import unsupported_reason
    from ..presets import get_preset
    from .kernel_check import _exercise

    ex = _exercise(exercise_id)
    if not ex.leaderboard_versions:
        raise ValueError(f"exercise {exercise_id} has no leaderboard (it lists no course versions to race)")
    if fn is not None and not callable(fn):
        raise TypeError(f"pass your function itself (e.g. {ex.cell_name}), not a {type(fn).__name__}")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    hw = ex.hw if hw is None else hw
    chip = get_preset(hw).name
    case = ex.target_case
    rows, skipped = [], []
    for version in ex.leaderboard_versions:
        why = unsupported_reason(version, hw)
        if why:
            skipped.append((f"course {version}", why))
            continue
        run = simulate_moe_gating(case["B"], case["S"], case["E"], case["K"], version=version, hw=hw,
                                  dtype=case["dtype"])
        rows.append(LeaderboardRow(f"course {version}", run.latency_us, run.timeline.bottleneck()[0]))
    unranked = []
    if fn is not None:
        why = _not_right(ex, fn, case, hw)
        if why:
            unranked.append((name, why))
        else:
            _, timeline = ex.launch(fn, case, hw, True)
            rows.append(LeaderboardRow(name, timeline.total_us, timeline.bottleneck()[0]))
    rows.sort(key=lambda r: (round(r.latency_us, 6), r.name))
    best = rows[0].latency_us
    lines = [f"Leaderboard {exercise_id} at {case['label']} on {chip}:",
             f"  {'#':>2}  {'kernel':<20}{'µs':>9}  {'vs best':>8}  bound"]
    for i, r in enumerate(rows):
        lines.append(f"  {i + 1:>2}. {r.name:<20}{r.latency_us:9.1f}  {100 * (r.latency_us / best - 1):+7.1f}%  {r.bound}")
    for who, why in skipped:
        lines.append(f"      {who:<20} cannot run: {why.split(' (')[0]}")      # the full reason: .skipped
    for who, why in unranked:
        lines.append(f"      {who:<20} not ranked: {why}")
    out = Leaderboard("\n".join(lines))
    out.rows, out.skipped, out.unranked = tuple(rows), tuple(skipped), tuple(unranked)
    return out


def _not_right(ex, fn, case, hw) -> str | None:
    """None when ``fn`` gives the reference's results at ``case`` (a full run), else why not."""
    import warnings

    import numpy as np

    from .kernel_check import _mismatch
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            got, _ = ex.launch(fn, case, hw, False)
        except Exception as exc:          # the learner's code: check_kernel turns it into a hint
            return f"it raises {type(exc).__name__} at this shape (check_kernel says where)"
        msg, _rows = _mismatch(ex, case, got, ex.reference(case))
    return f"its results at this shape are not the reference's ({msg}; check_kernel says where)" if msg else None
