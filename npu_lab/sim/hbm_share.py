"""How far the static HBM share is from a dynamic one, measured after the fact on a timeline.

The simulator gives every core of a launch the *static* share of HBM for the whole launch
(docs/cost_model.md, :func:`npu_lab.sim.l2.core_bytes_per_cycle`):

    b_static = min(core DMA peak, HBM bandwidth / active cores),   active = min(block_dim, cores)

On the chip the cores streaming *at each moment* share HBM (issue 9 §1): while few cores stream
(a tail wave, a core that runs two tiles while the others are done, gaps between copies), each
could draw more, up to its own DMA peak; when a core streams in (MTE2) and out (MTE3) at once it
draws two streams. This module does not re-simulate with a dynamic share (the timeline would have
to be solved as a fixed point: durations depend on the share, the share on who overlaps whom).
It measures, from a finished timeline, the streams that overlap at each moment and reports:

* ``mean_streams`` / ``max_streams``: DMA transfers in flight at once, time-weighted over the
  time at least one is in flight, against the ``active_cores`` the static share divides by;
* ``oversubscribed_share``: the share of that time during which the static rates add up to more
  than the HBM bandwidth (the static share is optimistic then);
* ``dynamic_over_static``: transfer time under a dynamic share over transfer time under the
  static one, first order: each moment's bytes at ``min(peak, HBM / streams then)`` instead of
  ``b_static``, with the moments kept where they are. Below 1: the static share is pessimistic
  (the cores could have moved their bytes faster); above 1: optimistic.
* ``max_core_change_us``: the largest change, over cores, of a core's summed transfer time under
  the dynamic share (negative: faster). A launch's latency cannot shrink by much more than the
  busiest core's saving, so comparing it with ``latency_us`` says whether the static share can
  move a verdict.

A transfer is the last ``bytes / b_static`` of each MTE2 / MTE3 event (the model charges the
request latency first, then the bytes). All DMA events count, L2 hits included (conservative:
they draw on L2, not HBM). Costs are never affected: this is a report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .timeline import Timeline


@dataclass(frozen=True)
class HbmShareReport:
    """One launch's streams against its static HBM share (module docstring)."""

    launch: str
    active_cores: int
    static_gbps: float            # per stream
    peak_gbps: float              # a core's DMA peak
    hbm_gbps: float
    streaming_us: float           # time with at least one transfer in flight
    mean_streams: float
    max_streams: int
    oversubscribed_share: float
    dynamic_over_static: float
    max_core_change_us: float     # largest change of one core's transfer time (negative: saving)
    latency_us: float             # the launch's latency, overhead included


def _launch_report(timeline: Timeline, index: int, events) -> HbmShareReport:
    rec = timeline.launches[index]
    hw = rec.hw
    active = min(rec.block_dim, hw.cores(rec.core_type))
    peak = hw.core_dma_bandwidth_gbps
    static = min(peak, hw.hbm_bandwidth_gbps / active)
    dma = events[(events["launch"] == index) & events["pipe"].isin(("MTE2", "MTE3"))]
    latency = hw.cycles_to_us(rec.total_cycles)
    end = dma["end_us"].to_numpy(dtype=np.float64)
    transfer = dma["bytes"].to_numpy(dtype=np.float64) / (static * 1e3)         # GB/s -> B/us
    start = np.maximum(dma["start_us"].to_numpy(dtype=np.float64), end - transfer)
    keep = end > start
    start, end, core = start[keep], end[keep], dma["core"].to_numpy()[keep]
    if not len(start):
        return HbmShareReport(rec.name, active, static, peak, hw.hbm_bandwidth_gbps, 0.0, 0.0, 0, 0.0, 1.0,
                              0.0, latency)
    # sweep line: +1 at each start, -1 at each end; streams constant between consecutive points
    times = np.concatenate([start, end])
    steps = np.concatenate([np.ones(len(start)), -np.ones(len(end))])
    order = np.lexsort((steps, times))        # at equal times, ends (-1) before starts
    times, steps = times[order], steps[order]
    streams = np.cumsum(steps)[:-1]
    # each transfer's dynamic time: its stretch of each elementary interval at the rate then
    rate = np.where(streams > 0, np.minimum(peak, hw.hbm_bandwidth_gbps / np.maximum(streams, 1)), peak)
    dyn_time = np.diff(times) * static / rate                      # static-time -> dynamic-time
    cum = np.concatenate([[0.0], np.cumsum(dyn_time)])
    at = np.searchsorted(times, start), np.searchsorted(times, end)   # bounds are points of `times`
    per_transfer = cum[at[1]] - cum[at[0]] - (end - start)         # change of each transfer's time
    change_by_core = np.bincount(core.astype(np.int64), weights=per_transfer)
    dt = np.diff(times)
    busy = (streams > 0) & (dt > 0)
    s, dt = streams[busy], dt[busy]
    streaming = float(dt.sum())
    dynamic = np.minimum(peak, hw.hbm_bandwidth_gbps / s)
    stream_time_static = float((s * dt).sum())
    stream_time_dynamic = float((s * dt * static / dynamic).sum())
    return HbmShareReport(
        launch=rec.name, active_cores=active, static_gbps=static, peak_gbps=peak,
        hbm_gbps=hw.hbm_bandwidth_gbps, streaming_us=streaming,
        mean_streams=float((s * dt).sum() / streaming), max_streams=int(s.max()),
        oversubscribed_share=float(dt[s * static > hw.hbm_bandwidth_gbps * (1 + 1e-9)].sum() / streaming),
        dynamic_over_static=stream_time_dynamic / stream_time_static,
        max_core_change_us=float(change_by_core[np.argmax(np.abs(change_by_core))]), latency_us=latency)


def hbm_share_report(timeline: Timeline) -> list[HbmShareReport]:
    """One :class:`HbmShareReport` per launch of ``timeline`` (module docstring)."""
    if not isinstance(timeline, Timeline):
        raise TypeError(f"hbm_share_report takes a Timeline (from npu_lab.launch or a MoeGatingResult's "
                        f".timeline), got {type(timeline).__name__}")
    if not timeline.launches:
        raise ValueError("empty timeline: launch a kernel first")
    events = timeline.events()
    return [_launch_report(timeline, i, events) for i in range(len(timeline.launches))]
