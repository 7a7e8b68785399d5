"""Launching a mixed (cube + vector) kernel: ``@npu_kernel(mix=(1, 2))`` (issue 17 §2).

``launch`` hands such a kernel here. Each of the ``block_dim`` blocks is an AI core group — one AIC
and two AIVs (KERNEL_TYPE_MIX_AIC_1_2; asc-devkit docs/zh/api/SIMD-API/基础API/Kernel-Tiling/
设置Kernel类型.md) — and the kernel body runs on all three, branching on ``ctx.is_aic()``. The cores
interact through GM and the cross-core flags of :mod:`npu_lab.lang.cross_core`, which also finds
hangs and cross-core races.

Placement: groups go to AI cores as :func:`~npu_lab.sim.schedule.schedule_blocks` places blocks
(waves when ``block_dim`` > cube cores); a group occupies its AI core until its last core
finished. The timeline (:class:`~npu_lab.sim.mixed.MixedLaunchRecord`) shows AIC ``c`` as core
``c`` and its AIVs as cores ``cube_cores + 2c`` and ``+ 1``. Launch overhead: the mixed type's
(:mod:`npu_lab.sim.launch_cost`: 2 x block_dim vector and block_dim cube cores started). HBM
share: static, as in :mod:`npu_lab.lang.launch`, with one streamer per AI core group (see ``launch_mixed``).

Fast path, as for vector and cube launches (:mod:`npu_lab.lang.launch`, :mod:`npu_lab.lang.loop`):

* ``@npu_kernel(mix=(1, 2), block_classes=f)``: groups with equal labels do identical work (the same
  instructions and sizes on each of their three cores, addresses aside). A timing-only run
  simulates each class's first group (its representative) and replicates its three traces; a full
  run simulates every group (it needs the numbers) and checks that each group's three traces equal
  its representative's, else a SimulationError. Classes declare the groups independent: a mode 0
  flag or SyncAll (they synchronise every group) is refused in such a kernel. A timing-only run
  checks cross-core races only between the cores of a representative group (a full run checks all).
* ``ctx.tile_loop`` on an AIC or AIV is fast-forwarded in a timing-only run: alone on its core when
  its iterations make no cross-core call, else for the whole group at a common iteration
  (:mod:`npu_lab.lang.cross_core`, "Fast path"). Both are exact: tests check timing-only == full.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..sim.core import SimulationError
from ..sim.costs import whole_cycles
from ..sim.l2 import GmRouter, core_bytes_per_cycle
from ..sim.launch_cost import cores_launched, launch_overhead_us
from ..sim.mixed import MixedLaunchRecord
from ..sim.schedule import schedule_blocks
from ..sim.timeline import Timeline, gm_read_bytes
from .context import KernelContext
from .cross_core import MixGroup
from .launch import _classes
from .loop import _check_count, _Keys

_fast_path = [True]


@contextlib.contextmanager
def mixed_fast_path(enabled: bool = True):
    """Inside the ``with``, mixed launches use (``True``) or ignore (``False``) their fast path —
    block classes and tile_loop fast-forward — so every group and iteration is simulated (the
    reference the fast path is tested and benchmarked against)."""
    if not isinstance(enabled, (bool, np.bool_)):
        raise TypeError(f"mixed_fast_path(enabled) takes True or False, got {enabled!r}")
    _fast_path.append(bool(enabled))
    try:
        yield
    finally:
        _fast_path.pop()


#: most AI core groups one mixed launch simulates (three threads each)
MAX_MIX_BLOCKS = 256
MIX_RATIOS = {(1, 2): "mix_aic_1_2"}


class MixedKernelContext(KernelContext):
    """A KernelContext that records its GM accesses for the cross-core race detector and
    fast-forwards ``tile_loop`` alone or with its group (module docstring)."""

    def _dma(self, pipe, name, local, ub_lo, ub_hi, moved_bytes, gm_bytes, count, *, gm=None,
             block_count=1, burst_bytes=None, gm_step_bytes=0):
        super()._dma(pipe, name, local, ub_lo, ub_hi, moved_bytes, gm_bytes, count, gm=gm, block_count=block_count,
                     burst_bytes=burst_bytes, gm_step_bytes=gm_step_bytes)
        if gm is not None:
            lo = gm.address_bytes
            if block_count > 1:
                rows = (lo, gm_step_bytes, gm_bytes // block_count, block_count)
            else:
                rows = (lo, 0, gm_bytes, 1)
            kind = "r" if pipe == "MTE2" else ("a" if self._atomic is not None else "w")
            self._mix.group.record_gm(self._mix, pipe, gm.buffer, rows, kind, name, self.core.events[-1][6]
                                      if self.core.events else None)

    def fixpipe(self, dst, src, intri_params) -> None:
        n_before = self.core.pipe_events.get("FIX", 0)
        super().fixpipe(dst, src, intri_params)
        if self.core.pipe_events.get("FIX", 0) == n_before:
            return
        p = intri_params
        size = dst.dtype.itemsize
        rows = (dst.address_bytes, p.dst_stride * size, p.n_size * size, p.m_size)
        kind = "a" if self._atomic is not None else "w"
        self._mix.group.record_gm(self._mix, "FIX", dst.buffer, rows, kind, "Fixpipe", self.core.events[-1][6])

    def tile_loop(self, count, key=None):
        """``ctx.tile_loop`` (:meth:`npu_lab.lang.loop.LoopOps.tile_loop`) on a core of a mixed
        kernel. A timing-only run jumps over steady iterations: on this core alone while the period
        made no cross-core call, else with the whole AI core group (MixGroup.loop_checkpoint)."""
        count = _check_count(count)
        m = self._mix
        if not self.timing_only or count < 4 or getattr(self.gm_router, "share", False) or not _fast_path[-1]:
            yield from range(count)
            return
        keys = _Keys(key)
        history, calls = [], []
        seq = None                   # None: local so far; an int: coordinated; False: given up
        j = 0
        while j < count:
            history.append(self._loop_snapshot(j))
            calls.append(m.xcalls)
            del history[:-3], calls[:-3]
            skipped = 0
            if seq is None and len(calls) > 1 and calls[-1] != calls[-2]:
                seq = m.next_loop_seq()      # the last iteration set or waited a cross-core flag
            if seq is None:
                skipped = self._local_fast_forward(j, count, keys, history, calls)
            elif seq is not False:
                skipped = m.group.loop_checkpoint(m, seq, j, count, keys, history)
                if skipped is None:
                    seq, skipped = False, 0
            if skipped:
                j += skipped
                history.clear()
                calls.clear()
                continue
            yield j
            j += 1

    def _local_fast_forward(self, j, count, keys, history, calls) -> int:
        """LoopOps._fast_forward over periods without cross-core calls only."""
        clean = [h for h, c in zip(history, calls) if c == calls[-1]]   # the counts only grow
        return self._fast_forward(j, count, keys, clean) if len(clean) > 1 else 0


def launch_mixed(kernel, block_dim: int, args, kwargs, *, hw, timing_only: bool, name, l2, gm_guard):
    """Run a ``mix=(1, 2)`` kernel (see the module docstring); returns the Timeline."""
    ratio = tuple(kernel.mix)
    kernel_type = MIX_RATIOS[ratio]
    if hw.isa != "ascend910b":
        from .errors import CapabilityError
        raise CapabilityError(f"{hw.name} ({hw.isa}) has no KERNEL_TYPE_MIX_AIC_1_2: its AI cores carry cube and "
                              "vector together (设置Kernel类型.md); the mixed AIC:AIV kernel types and cross-core flags "
                              "exist on the A2 / A3 / 950 products only")
    if block_dim > MAX_MIX_BLOCKS:
        raise ValueError(f"a mixed kernel simulates three cores per block; block_dim {block_dim} is more than the "
                         f"limit of {MAX_MIX_BLOCKS} (npu_lab.lang.mixed_launch.MAX_MIX_BLOCKS). Give each AI core "
                         "group more work (block_dim <= cube cores is the usual choice)")
    cubes = hw.cube_cores
    # the static HBM share (npu_lab.lang.launch): one streamer per AI core group — the AIC's operand streams
    # dominate a group's traffic (the AIVs move one C tile per task, the AIC its A and B panels), so counting
    # the three cores as three equal streamers would cut the AIC's share to a third (sim/hbm_share.py
    # measures how far any static share is from a dynamic one)
    active = min(block_dim, cubes)
    dma_bpc, l2_bpc = core_bytes_per_cycle(hw, active)
    router = GmRouter(dma_bpc, l2_bpc, l2.resident_buffers() if l2 is not None else (),
                      share_within_launch=l2 is not None and l2.share_within_launch, l2_bytes=hw.l2_bytes)
    dispatch = whole_cycles(hw.us_to_cycles(hw.block_dispatch_us))
    # starts do not depend on durations while every group has its own AI core (what mode 0 and
    # SyncAll need; with waves only intra-group flags are meaningful and starts are recomputed)
    starts0, _ = schedule_blocks(np.zeros(block_dim), cubes, dispatch)
    group = MixGroup(block_dim, cubes, starts0)
    classifier = None if router.share or not _fast_path[-1] else getattr(kernel, "block_classes", None)
    if classifier is not None:
        labels = np.asarray(classifier(block_dim, *args, **kwargs))
        if labels.shape != (block_dim,):
            raise ValueError(f"block_classes returned shape {labels.shape}, expected ({block_dim},)")
        group.classed = True
    else:
        labels = np.arange(block_dim)
    uniq, first, inverse = _classes(labels)
    run_tasks = [int(i) for i in first] if timing_only else list(range(block_dim))
    for task in run_tasks:
        for sub in (None, 0, 1):
            core_type = "cube" if sub is None else "vector"
            idx = task if sub is None else 2 * task + sub
            ctx = MixedKernelContext(hw, idx, block_dim, core_type=core_type, timing_only=timing_only,
                                     dma_bytes_per_cycle=dma_bpc)
            ctx.gm_router = router
            group.add(task, sub, ctx)

    def body(member):
        with np.errstate(all="ignore"):
            kernel(member.ctx, *args, **kwargs)
        member.ctx.core.check_flags_consumed()

    with gm_guard():
        group.run(body)
    left = [(m, f, len(v)) for (i, f), v in group.counters.items() if v and not isinstance(f, tuple)
            for m in [group.members[i]]]
    if left:
        m, f, n = left[0]
        raise SimulationError(
            f"cross-core flag {f} of the {m.label()} was set {n} more time(s) than it was waited: the kernel ends with "
            "the counter non-zero, so the next kernel's CrossCoreWaitFlag on that id would pass at once "
            "(CrossCoreSetFlag(ISASI).md: 用户需要确保配套使用CrossCoreSetFlag和CrossCoreWaitFlag，否则会出现未定义行为). "
            "Add the matching wait, or drop the set")
    ran = [m.ctx.core.finish() for m in group.members]          # 3 per simulated group, in run_tasks order
    traces = []
    for cls, rep in enumerate(first):
        i = run_tasks.index(int(rep))
        traces.extend(ran[3 * i:3 * i + 3])
    if not timing_only and len(uniq) < block_dim:
        for i, task in enumerate(run_tasks):
            cls = int(inverse[task])
            for k in range(3):
                if not ran[3 * i + k].same_work_as(traces[3 * cls + k]):
                    raise SimulationError(
                        f"block_classes says AI core groups {int(first[cls])} and {task} do identical work, but the "
                        f"{('AIC', 'AIV0', 'AIV1')[k]}'s timelines differ; fix the kernel's block_classes (a group's "
                        "label must decide every core's instructions and sizes, e.g. its tasks' shapes)")
    durations = np.array([max(traces[3 * c + k].duration_cycles for k in range(3)) for c in range(len(uniq))])[inverse]
    start, core = schedule_blocks(durations, cubes, dispatch)
    roles = np.tile(np.array([0, 1, 2]), block_dim)
    task_of = np.repeat(np.arange(block_dim), 3)
    block_core = np.where(roles == 0, core[task_of], cubes + 2 * core[task_of] + (roles - 1))
    weight = np.repeat(np.bincount(inverse, minlength=len(uniq)), 3).astype(np.float64)
    hbm = float(np.array([t.hbm_read_bytes + t.hbm_write_bytes for t in traces], dtype=np.float64) @ weight)
    l2_hits = float(np.array([gm_read_bytes(t) - t.hbm_read_bytes for t in traces], dtype=np.float64) @ weight)
    repeats = float(np.array([t.vector_repeats for t in traces], dtype=np.float64) @ weight)
    floor, reason = max((hbm / hw.bytes_per_cycle(hw.hbm_bandwidth_gbps), f"HBM roofline: {hbm:.0f} B at "
                         f"{hw.hbm_bandwidth_gbps:.0f} GB/s"),
                        (l2_hits / hw.bytes_per_cycle(hw.l2_bandwidth_gbps), f"L2 roofline: {l2_hits:.0f} B of L2 hits"),
                        (repeats * hw.vector_cycles_per_repeat / hw.vector_cores,
                         f"vector roofline: {repeats:.0f} repeats on {hw.vector_cores} cores"))
    if l2 is not None:
        l2.touch(router.touched())
    record = MixedLaunchRecord(
        name=name or getattr(kernel, "__name__", "kernel"), hw=hw, core_type="vector", block_dim=3 * block_dim,
        traces=traces, block_class=(3 * inverse[task_of] + roles).astype(np.int64), block_start=start[task_of],
        block_core=block_core.astype(np.int64),
        overhead_cycles=whole_cycles(hw.us_to_cycles(launch_overhead_us(hw, kernel_type, 2 * block_dim))),
        floor_cycles=floor, floor_reason=reason, kernel_type=kernel_type,
        cores_launched=cores_launched(hw, kernel_type, 2 * block_dim),
        l2_hit_buffers=tuple(b.name for b in router.l2_hits), groups=block_dim)
    return Timeline([record])
