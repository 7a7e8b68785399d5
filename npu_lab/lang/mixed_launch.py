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
"""

from __future__ import annotations

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

#: most AI core groups one mixed launch simulates (three threads each)
MAX_MIX_BLOCKS = 256
MIX_RATIOS = {(1, 2): "mix_aic_1_2"}


class MixedKernelContext(KernelContext):
    """A KernelContext that records its GM accesses for the cross-core race detector and runs
    ``tile_loop`` without fast-forwarding (cross-core flags inside a loop are not periodic state)."""

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
        return range(count)


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
    for task in range(block_dim):
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
    traces = [m.ctx.core.finish() for m in group.members]
    durations = np.array([max(traces[3 * t + k].duration_cycles for k in range(3)) for t in range(block_dim)])
    start, core = schedule_blocks(durations, cubes, dispatch)
    roles = np.tile(np.array([0, 1, 2]), block_dim)
    task_of = np.repeat(np.arange(block_dim), 3)
    block_core = np.where(roles == 0, core[task_of], cubes + 2 * core[task_of] + (roles - 1))
    hbm = float(sum(t.hbm_read_bytes + t.hbm_write_bytes for t in traces))
    l2_hits = float(sum(gm_read_bytes(t) - t.hbm_read_bytes for t in traces))
    repeats = float(sum(t.vector_repeats for t in traces))
    floor, reason = max((hbm / hw.bytes_per_cycle(hw.hbm_bandwidth_gbps), f"HBM roofline: {hbm:.0f} B at "
                         f"{hw.hbm_bandwidth_gbps:.0f} GB/s"),
                        (l2_hits / hw.bytes_per_cycle(hw.l2_bandwidth_gbps), f"L2 roofline: {l2_hits:.0f} B of L2 hits"),
                        (repeats * hw.vector_cycles_per_repeat / hw.vector_cores,
                         f"vector roofline: {repeats:.0f} repeats on {hw.vector_cores} cores"))
    if l2 is not None:
        l2.touch(router.touched())
    record = MixedLaunchRecord(
        name=name or getattr(kernel, "__name__", "kernel"), hw=hw, core_type="vector", block_dim=3 * block_dim,
        traces=traces, block_class=np.arange(3 * block_dim, dtype=np.int64), block_start=start[task_of],
        block_core=block_core.astype(np.int64),
        overhead_cycles=whole_cycles(hw.us_to_cycles(launch_overhead_us(hw, kernel_type, 2 * block_dim))),
        floor_cycles=floor, floor_reason=reason, kernel_type=kernel_type,
        cores_launched=cores_launched(hw, kernel_type, 2 * block_dim),
        l2_hit_buffers=tuple(b.name for b in router.l2_hits), groups=block_dim)
    return Timeline([record])
