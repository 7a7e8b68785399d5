"""The performance monitor: where every pipe of every core spent a run (docs/monitor.md).

:func:`monitor` reads any :class:`~npu_lab.sim.Timeline` — vector kernels, cube kernels (pipes
S, MTE2, MTE1, M, FIX), chains of launches — and splits each core's *span* (the time after each
launch's overhead, summed over launches) into four parts per pipe:

* ``busy``: the pipe's occupancy, the sum of its instructions' bars — exactly what
  ``Timeline.busy_us_by_core()`` counts;
* ``wait_data``: the pipe stood still while its next instruction waited for a copy to complete —
  the gap before it ends on the completion (``ready``) of an MTE2 / MTE3 / MTE1 / FIX instruction,
  whether through a flag or queue (``waits for MTE2 (flag)``), the DMA engine's own window of
  requests in flight (``waits for MTE2 (latency)``), or the scalar unit issuing it only after it
  had waited for that copy (``issued after MTE2``);
* ``wait_sync``: the same for a *compute* pipe's result (S, V, M): a flag or queue hand-off from
  V, the vector pipe's own read-after-write wait, or the scalar unit issuing late because it was
  busy with its own work (``issued after S``);
* ``idle``: the rest — before a block's first instruction of the pipe when nothing explains the
  wait, after its last one, between blocks, while the core had no block, and the issue slots the
  scalar unit spends handing instructions to other pipes (the model charges those to no pipe's busy
  time, so S's idle includes them).

The four add up to the span exactly (tests/test_monitor.py). The attribution of a gap is
:func:`classify_gaps`, the single rule :func:`npu_lab.course.debugging.pipe_bubbles` uses too: a gap
*ends* at the moment its cause ended (docs/cost_model.md §0–§4: an instruction starts at the
latest of its pipe free, its issue, its flags, its inputs complete; a flag passes
``sync_flag_cycles`` after its source's result is complete).

Per run it also reports: the pipe ratios as msprof's PipeUtilization / op_summary name them
(``aiv_vec_ratio``, ``aiv_scalar_ratio``, ``aiv_mte2_ratio``, ``aiv_mte3_ratio``; on cube cores
``aic_cube_ratio``, ``aic_mte1_ratio``, ``aic_mte2_ratio``, ``aic_fixpipe_ratio``,
``aic_scalar_ratio``, and their ``*_time(us)``; msopprof's PipeUtilization page, e.g.
hiascend.com CANN 8.x ``devaids/optool/atlasopdev_16_0099.html``), msprof's ``memory_bound``
(``mte2_ratio / max(mac_ratio, vec_ratio)``, ai_vector_core_utilization page
``atlasprofiling_16_0075.html``), the DMA–compute overlap, the load balance over cores, and the
verdict of :meth:`Timeline.bottleneck` (called, never recomputed) with advice from the thresholds
of :mod:`npu_lab.sim.thresholds`.

"UB hit rate" (the article's monitor, seed 003 §7, reports ``ub_hit_rate`` and a 45 % → 78 %
improvement): the UB is a software-managed scratchpad, not a cache — every byte in it was put there
by a ``DataCopy`` the kernel issued, and every read of it "hits" by construction. Nothing on the
device counts UB hits, and msprof has no such field. The article could have meant (a) data reuse:
the share of UB reads served by data already resident instead of a fresh copy; (b) the L2 hit rate
(L2 *is* a cache, in front of HBM); or (c) how well copies are hidden behind compute. The course
reports what it can measure instead: ``ub_hit_rate`` is NaN with that explanation, and next to it
``gm_read_bytes`` (all MTE2 bytes), ``gm_reread_fraction`` (the share of them beyond the
kernel's distinct input bytes — data read from GM more than once — when the caller says how many
distinct bytes the inputs have), ``l2_hit_bytes`` / ``l2_hit_fraction`` (``Timeline.l2_hit_bytes``:
bytes an earlier launch left in L2) and ``dma_compute_overlap``.

Numbers only: no plotting here (npu_lab/course/monitor_view.py draws them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..hardware import HardwareSpec
from .core import ALL_PIPES, CUBE_PIPES, PIPE_CODE, VECTOR_PIPES
from .thresholds import IMBALANCE, LOW_OVERLAP, SMALL_COPIES_HBM_SHARE, WAIT_DATA_SHARE
from .timeline import MEMORY_PIPES, Timeline

__all__ = ["MonitorReport", "monitor", "classify_gaps", "MSPROF_NAMES", "MSPROF_ALIASES", "CATEGORIES", "DATA_PIPES"]

#: the four parts of a span, in the order the table and the plots use
CATEGORIES = ("busy", "wait_data", "wait_sync", "idle")
#: pipes whose results are data movement: a wait on one of them is a wait on data
DATA_PIPES = MEMORY_PIPES
#: compute pipes of the overlap figure (the scalar unit is left out: it issues every copy; the
#: summary's ``dma_compute_overlap_with_scalar`` counts it too, for kernels whose compute is scalar)
OVERLAP_COMPUTE_PIPES = ("V", "M")
#: msprof's name of each pipe's ratio/time (PipeUtilization.csv / op_summary), by core type
MSPROF_NAMES = {
    "vector": {"S": "aiv_scalar", "MTE2": "aiv_mte2", "V": "aiv_vec", "MTE3": "aiv_mte3"},
    "cube": {"S": "aic_scalar", "MTE2": "aic_mte2", "MTE1": "aic_mte1", "M": "aic_cube", "FIX": "aic_fixpipe"},
}
#: the same cube figures under the names msprof's op_summary_*.csv gives them: its PipeUtilization
#: columns are ``aic_mac_time(us)``, ``aic_mac_ratio`` (op_summary page, hiascend.com
#: ``devaids/Profiling/atlasprofiling_16_0067.html``; the metric set is ACL's ``mac_ratio``,
#: aclprofAicoreMetrics ACL_AICORE_PIPE_UTILIZATION, ``aclcppdevg_03_1184.html``), while msopprof's
#: PipeUtilization.csv says ``aic_cube_ratio`` (``atlasopdev_16_0099.html``): one figure, two names
MSPROF_ALIASES = {"aic_mac_ratio": "aic_cube_ratio", "aic_mac_time(us)": "aic_cube_time(us)"}
_PIPES_OF = {"vector": VECTOR_PIPES, "cube": CUBE_PIPES}
_TOL_CYCLES = 1e-3        # cycles are whole: times this close are the same time
UB_HIT_RATE_NOTE = ("not measurable: the UB is software-managed (every byte in it was copied there by "
                    "the kernel), so there is no cache to hit; see gm_reread_fraction, l2_hit_fraction "
                    "and dma_compute_overlap")


# --------------------------------------------------------------------------- gap attribution
def classify_gaps(after, until, pipe: str, ev_pipe, ev_ready, sync_lags, tol: float):
    """What each gap of ``pipe`` waited for: ``(waits_on, cause)``, two object arrays (None where
    nothing explains the gap). The one attribution rule of the course (pipe_bubbles and monitor).

    ``after``, ``until``: the gaps' bounds (arrays, one unit: µs or cycles); ``ev_pipe``: the pipe
    name of every instruction that may have ended a gap (same core, same block or run), ``ev_ready``
    its completion time; ``sync_lags``: what a flag / barrier adds after its source completed (the
    spec's ``sync_flag_cycles`` and ``pipe_barrier_cycles`` in the same unit), tried in ascending
    order; ``tol``: times closer than this are equal. In order:

    1. the gap ends one lag after an instruction of another pipe X completed (and not before the gap
       started): a flag / queue / barrier wait on X — "waits for X (flag)", ``X+Y`` when two pipes'
       results completed then;
    2. it ends exactly when an instruction of its own pipe completed: the vector pipe's automatic
       read-after-write wait, or a DMA engine whose requests in flight are all taken — "waits for
       P (latency)";
    3. another pipe's instruction completed during the gap: the scalar unit issued the next one
       only after that (it waited for X, or X = S was busy) — "issued after X", X the pipes whose
       completion came last.
    """
    after = np.asarray(after, dtype=np.float64)
    until = np.asarray(until, dtype=np.float64)
    ev_pipe = np.asarray(ev_pipe, dtype=object)
    ev_ready = np.asarray(ev_ready, dtype=np.float64)
    if after.shape != until.shape or after.ndim != 1:
        raise ValueError(f"after and until must be 1-D arrays of one length (one entry per gap), got shapes "
                         f"{after.shape} and {until.shape}")
    if ev_pipe.shape != ev_ready.shape:
        raise ValueError(f"ev_pipe and ev_ready must have one entry per instruction, got shapes {ev_pipe.shape} "
                         f"and {ev_ready.shape}")
    if pipe not in PIPE_CODE:
        raise ValueError(f"pipe must be one of {ALL_PIPES}, got {pipe!r}")
    if not tol > 0:
        raise ValueError(f"tol must be > 0 (times closer than it are equal), got {tol!r}")
    n = len(after)
    waits = np.full(n, None, dtype=object)
    cause = np.full(n, None, dtype=object)
    if n == 0:
        return waits, cause
    sorted_ready = {q: np.sort(ev_ready[ev_pipe == q]) for q in ALL_PIPES}
    others = [q for q in ALL_PIPES if q != pipe and len(sorted_ready[q])]

    def last_at_or_before(q, t):
        """Per gap: the latest completion of pipe q at or before t (-inf if none)."""
        r = sorted_ready[q]
        i = np.searchsorted(r, t, side="right") - 1
        return np.where(i >= 0, r[np.clip(i, 0, None)], -np.inf)

    def tied_names(cands: dict, ok: np.ndarray):
        """Per gap with ok: the pipes whose candidate is within tol of the latest candidate."""
        best = np.max(np.stack([cands[q] for q in cands]), axis=0) if cands else np.full(n, -np.inf)
        names = np.full(n, None, dtype=object)
        for k in np.nonzero(ok)[0]:
            names[k] = "+".join(q for q in cands if abs(cands[q][k] - best[k]) < tol)
        return names

    todo = np.ones(n, dtype=bool)
    for lag in sorted(sync_lags):
        target = until - lag
        cands = {}
        for q in others:
            r = last_at_or_before(q, target + tol)
            hit = (np.abs(r - target) < tol) & (r > after - tol)
            cands[q] = np.where(hit, r, -np.inf)
        ok = todo & (np.max(np.stack(list(cands.values())), axis=0) > -np.inf) if cands else np.zeros(n, bool)
        names = tied_names(cands, ok)
        for k in np.nonzero(ok)[0]:
            waits[k], cause[k] = names[k], f"waits for {names[k]} (flag)"
        todo &= ~ok
    if len(sorted_ready[pipe]):
        r = last_at_or_before(pipe, until + tol)
        ok = todo & (np.abs(r - until) < tol)
        waits[ok], cause[ok] = pipe, f"waits for {pipe} (latency)"
        todo &= ~ok
    cands = {}
    for q in others:
        r = last_at_or_before(q, until + tol)
        cands[q] = np.where(r > after + tol, r, -np.inf)
    ok = todo & (np.max(np.stack(list(cands.values())), axis=0) > -np.inf) if cands else np.zeros(n, bool)
    names = tied_names(cands, ok)
    for k in np.nonzero(ok)[0]:
        waits[k], cause[k] = names[k], f"issued after {names[k]}"
    return waits, cause


def category_of(waits_on, cause) -> str:
    """The monitor's part of a gap from its attribution: a wait on a DMA pipe's completion is
    ``wait_data``, on a compute pipe's (or the scalar unit's) ``wait_sync``, anything else ``idle``."""
    if cause is None or not waits_on:
        return "idle"
    return "wait_data" if any(p in DATA_PIPES for p in waits_on.split("+")) else "wait_sync"


# --------------------------------------------------------------------------- one block class
def _overlap_cycles(trace, dma_codes, comp_codes) -> tuple[float, float]:
    """(DMA busy cycles as a union, cycles of it while a compute pipe is busy too) of one block."""
    pipe = trace.pipe
    start, end = trace.start_cycles, trace.end_cycles
    dma = np.isin(pipe, dma_codes) & (end > start)
    comp = np.isin(pipe, comp_codes) & (end > start)
    if not dma.any():
        return 0.0, 0.0
    points = np.concatenate([start[dma], end[dma], start[comp], end[comp]])
    d_dma = np.concatenate([np.ones(dma.sum()), -np.ones(dma.sum()), np.zeros(2 * comp.sum())])
    d_comp = np.concatenate([np.zeros(2 * dma.sum()), np.ones(comp.sum()), -np.ones(comp.sum())])
    order = np.argsort(points, kind="stable")
    points, d_dma, d_comp = points[order], d_dma[order], d_comp[order]
    # every delta at one time point applies before the segment that follows it
    uniq, first = np.unique(points, return_index=True)
    in_dma = np.cumsum(np.add.reduceat(d_dma, first))[:-1] > 0
    in_comp = np.cumsum(np.add.reduceat(d_comp, first))[:-1] > 0
    seg = np.diff(uniq)
    return float(seg[in_dma].sum()), float(seg[in_dma & in_comp].sum())


def _block_parts(trace, pipes, hw: HardwareSpec) -> dict:
    """{pipe: {category: cycles}} of one block (relative to its start, over its duration), plus
    the DMA / overlap cycles under the key ``None``."""
    duration = trace.duration_cycles
    codes = trace.pipe
    names = np.array(ALL_PIPES, dtype=object)[codes.astype(int)] if len(codes) else np.zeros(0, object)
    start, end, ready = trace.start_cycles, trace.end_cycles, trace.ready_cycles
    lags = sorted({float(hw.sync_flag_cycles), float(hw.pipe_barrier_cycles)})
    out = {}
    for p in pipes:
        parts = dict.fromkeys(CATEGORIES, 0.0)
        mine = np.nonzero(codes == PIPE_CODE[p])[0]
        if len(mine) == 0:
            parts["idle"] = duration
            out[p] = parts
            continue
        order = mine[np.argsort(start[mine], kind="stable")]
        s, e = start[order], end[order]
        prev_end = np.maximum.accumulate(e)
        after = np.concatenate([[0.0], prev_end[:-1]])      # the lead gap starts at the block's start
        until = s
        gap = until - after
        keep = gap > _TOL_CYCLES
        waits, cause = classify_gaps(after[keep], until[keep], p, names, ready, lags, _TOL_CYCLES)
        for g, w, c in zip(gap[keep], waits, cause):
            parts[category_of(w, c)] += float(g)
        parts["busy"] = float((e - s).sum())
        parts["idle"] += max(0.0, duration - float(prev_end[-1]))     # after its last instruction
        out[p] = parts
    dma_codes = [PIPE_CODE[p] for p in DATA_PIPES]
    comp_codes = [PIPE_CODE[p] for p in OVERLAP_COMPUTE_PIPES]
    scalar_too = comp_codes + [PIPE_CODE["S"]]
    out[None] = (*_overlap_cycles(trace, dma_codes, comp_codes), _overlap_cycles(trace, dma_codes, scalar_too)[1])
    return out


# --------------------------------------------------------------------------- the report
@dataclass(frozen=True)
class MonitorReport:
    """What :func:`monitor` found.

    ``table``: one row per core type × core × pipe — ``core_type``, ``core``, ``pipe``,
    ``msprof`` (the pipe's msprof field stem, e.g. ``aiv_vec``), ``busy_us``, ``wait_data_us``,
    ``wait_sync_us``, ``idle_us``, ``span_us`` (their sum), ``utilisation`` (busy / span),
    ``core_busy_us`` (the core's block time). ``summary``: a pandas Series of the run's figures
    (docs/monitor.md lists them). ``verdict``, ``evidence``: :meth:`Timeline.bottleneck`'s.
    ``advice``: one sentence per finding, in order of importance."""

    table: "object"
    summary: "object"
    verdict: str
    evidence: str
    advice: tuple

    def utilisation_matrix(self, core_type: str | None = None):
        """Utilisation as a DataFrame, rows cores, columns msprof's names (``aiv_vec``, ...)."""
        t = self.table
        kind = core_type or t["core_type"].iloc[0]
        t = t[t["core_type"] == kind]
        return t.pivot(index="core", columns="msprof", values="utilisation")

    def __str__(self) -> str:
        s = self.summary
        lines = [f"{self.verdict}-bound: {self.evidence}",
                 f"latency {s['latency_us']:.2f} us, overlap {s['dma_compute_overlap']:.0%}, "
                 f"balance max/mean {s['balance_max_over_mean']:.2f}, idle cores {int(s['idle_cores'])}"]
        lines += [f"- {a}" for a in self.advice]
        return "\n".join(lines)


def _check_input(timeline, hw):
    if not isinstance(timeline, Timeline):
        raise TypeError(f"monitor takes a Timeline (the .timeline of a kernel's result, or npu_lab.launch's), "
                        f"got {type(timeline).__name__}")
    if not timeline.launches:
        raise ValueError("monitor got an empty Timeline: launch a kernel first (Timeline() has no launches)")
    chips = sorted({l.hw.name for l in timeline.launches})
    if len(chips) > 1 or any(l.hw != timeline.launches[0].hw for l in timeline.launches):
        raise ValueError(f"this Timeline joins launches from different chips ({', '.join(chips)}, or one chip "
                         "with different specs): one run's cores, clock and bandwidth are one chip's; monitor "
                         "each chip's Timeline on its own")
    if hw is None:
        return
    if isinstance(hw, str):
        from ..presets import get_preset
        hw = get_preset(hw)
    if not isinstance(hw, HardwareSpec):
        raise TypeError(f"hw must be a HardwareSpec or a preset name, got {type(hw).__name__}")
    if chips != [hw.name] or any(l.hw != hw for l in timeline.launches):
        raise ValueError(f"this Timeline ran on {', '.join(chips)}, not on {hw.name}: its times and core counts "
                         f"are that chip's; simulate the kernel again with hw={hw.name!r}, or leave hw out")


def _positive_or_none(name, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be None or a whole number of bytes >= 1, got {value!r}")
    return int(value)


def monitor(timeline, hw=None, *, input_bytes: int | None = None) -> MonitorReport:
    """Monitor a run: per core and pipe busy / wait_data / wait_sync / idle µs, msprof's pipe ratios,
    DMA–compute overlap, load balance, the verdict and advice (module docstring; docs/monitor.md).

    ``timeline``: any non-empty :class:`Timeline`. ``hw``: optional HardwareSpec or preset name; if
    given, the timeline must have run on that chip. ``input_bytes``: the distinct bytes of the
    kernel's GM inputs, if known: then ``gm_reread_fraction`` = 1 − input_bytes / gm_read_bytes
    (clipped at 0) says how much of what MTE2 read was read before; without it that figure is NaN."""
    import pandas as pd

    _check_input(timeline, hw)
    input_bytes = _positive_or_none("input_bytes", input_bytes)
    kinds = sorted({l.core_type for l in timeline.launches}, key=["vector", "cube"].index)
    span_us = sum(l.hw.cycles_to_us(l.body_cycles) for l in timeline.launches)
    acc = {}          # kind -> [cores, pipes, CATEGORIES] µs
    occupied = {}     # kind -> [cores] µs of block time
    dma_us = comp_overlap_us = any_overlap_us = 0.0
    for kind in kinds:
        n = max(l.hw.cores(kind) for l in timeline.launches if l.core_type == kind)
        acc[kind] = np.zeros((n, len(_PIPES_OF[kind]), len(CATEGORIES)))
        occupied[kind] = np.zeros(n)
    idle = CATEGORIES.index("idle")
    for l in timeline.launches:
        us = l.hw.cycles_to_us
        pipes = _PIPES_OF[l.core_type]
        parts = [_block_parts(t, pipes, l.hw) for t in l.traces]
        # per class [pipes, CATEGORIES] cycles, added onto the cores its blocks ran on
        per_class = np.array([[[part[p][cat] for cat in CATEGORIES] for p in pipes] for part in parts])
        durations = np.array([t.duration_cycles for t in l.traces])
        cyc = np.zeros_like(acc[l.core_type])
        occ_cyc = np.zeros(len(cyc))
        if l.block_dim:
            np.add.at(cyc, l.block_core, per_class[l.block_class])
            np.add.at(occ_cyc, l.block_core, durations[l.block_class])
        for cls, count in enumerate(l.class_counts):
            d, o, o_s = parts[cls][None]
            dma_us += us(d) * count
            comp_overlap_us += us(o) * count
            any_overlap_us += us(o_s) * count
        acc[l.core_type] += us(cyc)
        occupied[l.core_type] += us(occ_cyc)
        body_us = us(l.body_cycles)
        for kind in kinds:      # outside its blocks, or during a launch of the other core type: idle
            occ = us(occ_cyc) if kind == l.core_type else np.zeros(len(acc[kind]))
            acc[kind][:, :, idle] += np.maximum(0.0, body_us - occ)[:, None]

    rows = []
    for kind in kinds:
        for c in range(len(acc[kind])):
            for i, p in enumerate(_PIPES_OF[kind]):
                parts = dict(zip(CATEGORIES, acc[kind][c, i].tolist()))
                span = sum(parts.values())
                rows.append({"core_type": kind, "core": c, "pipe": p, "msprof": MSPROF_NAMES[kind][p],
                             **{f"{k}_us": v for k, v in parts.items()}, "span_us": span,
                             "utilisation": parts["busy"] / span if span > 0 else 0.0,
                             "core_busy_us": float(occupied[kind][c])})
    table = pd.DataFrame(rows)

    verdict, evidence = timeline.bottleneck()
    summary = _summary(timeline, table, occupied, kinds, span_us, dma_us, comp_overlap_us, input_bytes)
    summary["dma_compute_overlap_with_scalar"] = any_overlap_us / dma_us if dma_us > 0 else 0.0
    summary["verdict"], summary["evidence"] = verdict, evidence
    advice = _advice(timeline, verdict, summary, table)
    summary["advice"] = " ".join(advice)
    return MonitorReport(table, pd.Series(summary, dtype=object), verdict, evidence, tuple(advice))


def _summary(timeline, table, occupied, kinds, span_us, dma_us, overlap_us, input_bytes) -> dict:
    kind = kinds[0]        # the msprof ratios of the first core type (a cube run: aic_*)
    t = table[table["core_type"] == kind]
    occ = occupied[kind]
    used = occ > 0
    out = {"latency_us": timeline.total_us, "launches": len(timeline.launches),
           "blocks": sum(l.block_dim for l in timeline.launches), "core_type": kind,
           "span_us": span_us, "block_dim": max(l.block_dim for l in timeline.launches)}
    # msprof: <prefix>_time(us) mean over the cores that ran, <prefix>_ratio = pipe / core time
    # every core type of the run (a mixed cube + vector chain reports aic_* and aiv_*)
    for k in kinds:
        tk, ok = table[table["core_type"] == k], occupied[k]
        on = ok > 0
        out["aiv_time(us)" if k == "vector" else "aic_time(us)"] = float(ok[on].mean()) if on.any() else 0.0
        for p, stem in MSPROF_NAMES[k].items():
            busy = tk[tk["pipe"] == p].sort_values("core")["busy_us"].to_numpy()
            out[f"{stem}_time(us)"] = float(busy[on].mean()) if on.any() else 0.0
            out[f"{stem}_ratio"] = float((busy[on] / ok[on]).mean()) if on.any() else 0.0
        if k == "cube":         # msprof / ACL profiling call the cube's share mac_ratio (MSPROF_ALIASES)
            for new_name, old_name in MSPROF_ALIASES.items():
                out[new_name] = out[old_name]
    mte2 = out[f"{MSPROF_NAMES[kind]['MTE2']}_ratio"]
    comp = max(out.get("aiv_vec_ratio", 0.0), out.get("aic_cube_ratio", 0.0))
    out["memory_bound"] = mte2 / comp if comp > 0 else (math.inf if mte2 > 0 else math.nan)
    # waits, over all cores and pipes, as shares of core-pipe time
    total = float(t["span_us"].sum())
    for cat in CATEGORIES:
        out[f"{cat}_share"] = float(t[f"{cat}_us"].sum()) / total if total else 0.0
    out["dma_busy_us"] = dma_us
    out["dma_compute_overlap"] = overlap_us / dma_us if dma_us > 0 else 0.0
    # load balance over the cores of the chip (block time per core)
    mean_used = float(occ[used].mean()) if used.any() else 0.0
    out.update({"cores": len(occ), "cores_used": int(used.sum()), "idle_cores": int((~used).sum()),
                "core_busy_min_us": float(occ.min()), "core_busy_mean_us": float(occ.mean()),
                "core_busy_max_us": float(occ.max()),
                "balance_max_over_mean": float(occ.max()) / mean_used if mean_used > 0 else 0.0})
    gm = sum(l.gm_read_bytes for l in timeline.launches)
    out.update({"hbm_bytes": timeline.hbm_bytes, "hbm_share": timeline.achieved_bandwidth_gbps / timeline.hw.hbm_bandwidth_gbps,
                "gm_read_bytes": gm, "l2_hit_bytes": timeline.l2_hit_bytes,
                "l2_hit_fraction": timeline.l2_hit_bytes / gm if gm else 0.0,
                "gm_reread_fraction": (max(0.0, 1.0 - input_bytes / gm) if gm else 0.0) if input_bytes else math.nan,
                "ub_hit_rate": math.nan, "ub_hit_rate_note": UB_HIT_RATE_NOTE,
                "scalar_drains": int(sum(int(t.scalar_drains) * int(n) for l in timeline.launches
                                         for t, n in zip(l.traces, l.class_counts)))})
    return out


def _advice(timeline, verdict, s, table) -> list[str]:
    """Sentences, from the verdict first, then the overlap, the waits and the balance."""
    out = []
    if verdict == "launch":
        out.append("launch-bound: fuse launches or use fewer, bigger blocks; the pipes' figures below "
                   "matter only once the overhead is gone")
    elif verdict == "memory":
        if s["hbm_share"] < SMALL_COPIES_HBM_SHARE:
            out.append("memory-bound on DMA latency: merge small copies into bursts of 16 KB or more "
                       "(docs/cost_model.md §2)")
        else:
            out.append("memory-bound on bandwidth: move fewer bytes (fuse launches, keep intermediates in UB, "
                       "a narrower dtype)")
    elif verdict == "compute":
        t = table[table["core_type"] == s["core_type"]]
        busiest = t.groupby("pipe")["busy_us"].max().idxmax()
        hint = {"S": "the scalar unit is the busiest: move scalar loops onto the vector unit",
                "V": "the vector unit is the busiest: fewer or cheaper vector instructions (docs/cost_model.md §3a)",
                "M": "the cube is the busiest: that is where a matmul should be; bigger tiles cut its head cost"}
        out.append(f"compute-bound: {hint.get(busiest, f'pipe {busiest} is the busiest')}")
    else:
        out.append("sync-bound: the pipes wait on each other — double-buffer (BUFFER_NUM = 2), move "
                   "PipeBarrier<PIPE_ALL> and V→S waits out of the loop")
    if s["dma_busy_us"] > 0 and s["dma_compute_overlap"] < LOW_OVERLAP and verdict != "launch":
        out.append(f"only {s['dma_compute_overlap']:.0%} of the DMA time overlaps V/M work "
                   f"(below {LOW_OVERLAP:.0%}): double buffering would hide copies behind compute")
    t = table[(table["core_type"] == s["core_type"]) & table["pipe"].isin(OVERLAP_COMPUTE_PIPES)]
    used = t[t["core_busy_us"] > 0]
    if len(used):
        share = float(used["wait_data_us"].sum()) / float(used["span_us"].sum())
        if share >= WAIT_DATA_SHARE:
            out.append(f"the compute pipes wait for data {share:.0%} of the time (≥ {WAIT_DATA_SHARE:.0%}): "
                       "start the next copy before computing on this one")
    if s["cores_used"] and s["balance_max_over_mean"] >= IMBALANCE:
        out.append(f"load imbalance: the busiest core works {s['balance_max_over_mean']:.2f}× the mean "
                   f"(≥ {IMBALANCE}): split long work or assign it longest-first (LPT)")
    if s["idle_cores"]:
        out.append(f"{s['idle_cores']} of {s['cores']} cores ran no block: launch at least as many blocks as "
                   "cores, if the work can be cut that fine")
    return out
