"""Launching a kernel on many cores (docs/cost_model.md).

``launch(kernel, block_dim, *args, hw=...)`` runs ``kernel(ctx, *args)`` once per block and
places the blocks on cores (waves when ``block_dim`` > cores). Launch overhead is paid once: a
fixed part plus a part per core started, cube cores a mixed kernel type starts idle included
(:mod:`npu_lab.sim.launch_cost`); the task scheduler's dispatch cost once per block. Cores
streaming at once share HBM: each gets ``min(its own DMA peak, HBM bandwidth / active cores)``;
reads of a buffer an earlier launch left in L2 (``l2=`` an :class:`~npu_lab.sim.l2.L2Cache`
carried between launches) get the same share of the L2 bandwidth instead and are no HBM traffic.
The result is never faster than the chip's rooflines (all HBM bytes at full HBM bandwidth; all
L2 hits at full L2 bandwidth; all vector repeats on all cores).

Blocks a kernel declares identical (``@npu_kernel(block_classes=...)``) are simulated once in a
timing-only run and replicated. A full run computes every block's data and checks the claim: the
first block of each class (its representative) is simulated with full timing (races, hazards)
while its instruction stream is recorded; every other block of the class runs in a cheaper
"numerics + stream" mode (no issue timing, no UB hazard records) and its stream must equal the
representative's, else a SimulationError. A block's timeline is a function of that stream alone
(pipe, name, cost, bytes, UB address spans of each instruction; every sync and queue call with its
flag id or queue), never of data values, so equal streams mean equal timelines. Errors that do not
depend on timing (Ascend C argument rules, UB overflow, queue depth, capabilities, use after free,
a wait with no set) are raised in every block. ``with full_timing_every_block():`` simulates every
block with full timing instead and compares the traces (tests, debugging).
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np

from ..hardware import HardwareSpec
from ..presets import get_preset
from ..sim.core import SimulationError
from ..sim.costs import whole_cycles
from ..sim.l2 import GmRouter, L2Cache, core_bytes_per_cycle
from ..sim.launch_cost import (canonical_kernel_type, cores_launched, execution_core_type, kernel_type_reason,
                               launch_overhead_us)
from ..sim.schedule import schedule_blocks
from ..sim.timeline import LaunchRecord, Timeline, gm_read_bytes
from .context import KernelContext
from .tensor import GlobalTensor
from .errors import AscendCRuleError, CapabilityError


def npu_kernel(fn=None, *, block_classes=None, core_type: str = "vector", mix=None):
    """Mark ``fn(ctx, *args)`` as a kernel.

    ``block_classes(block_dim, *args) -> int array`` (optional) labels each block; blocks with
    equal labels must do identical work (same instructions, same sizes). ``core_type`` is the
    kernel type (``KERNEL_TASK_TYPE_DEFAULT``): ``"vector"`` (AIV only), ``"cube"`` (AIC only),
    ``"mix"`` / ``"mix_aic_1_2"`` or ``"mix_aic_1_1"`` (a vector kernel launched as mixed
    AIC+AIV: its blocks run on vector cores, the idle cube cores add launch overhead; see
    :mod:`npu_lab.sim.launch_cost`).

    ``mix=(1, 2)``: a cube + vector kernel (C++ ``__mix__(1, 2)``, KERNEL_TYPE_MIX_AIC_1_2): the body
    runs on one AIC and its two AIVs per block, which talk through GM and cross-core flags
    (:mod:`npu_lab.lang.mixed_launch`, :mod:`npu_lab.lang.cross_core`); ``core_type`` does not apply;
    ``block_classes`` labels AI core groups (blocks), as for a vector kernel."""
    if mix is not None:
        if tuple(mix) != (1, 2) if isinstance(mix, (tuple, list)) else True:
            raise ValueError(f"mix must be (1, 2) (__mix__(1, 2): one AIC, two AIVs per AI core; the 1:1 and 1:0 "
                             f"forms are not modelled), got {mix!r}")
        core_type = "mix_aic_1_2"
    canonical_kernel_type(core_type)          # fail at definition, not at launch
    def wrap(f):
        @functools.wraps(f)
        def kernel(ctx, *args, **kwargs):
            return f(ctx, *args, **kwargs)
        kernel.block_classes = block_classes
        kernel.core_type = core_type
        kernel.mix = tuple(mix) if mix is not None else None
        kernel.is_npu_kernel = True
        return kernel
    return wrap(fn) if fn is not None else wrap


def _classes(labels: np.ndarray):
    """(unique labels, first block of each, class of each block), like np.unique; small
    non-negative integer labels (the usual: a tile's size) take a linear-time path."""
    if labels.dtype.kind in "iu" and len(labels) and labels.min() >= 0 and labels.max() < (1 << 20):
        counts = np.bincount(labels)
        uniq = np.flatnonzero(counts)
        if len(uniq) <= 16:
            remap = np.zeros(len(counts), dtype=np.int64)
            remap[uniq] = np.arange(len(uniq))
            inverse = remap[labels]
            first = np.array([int(np.argmax(inverse == c)) for c in range(len(uniq))], dtype=np.int64)
            return uniq, first, inverse
    return np.unique(labels, return_index=True, return_inverse=True)


_full_timing_every_block = [False]


@contextlib.contextmanager
def full_timing_every_block():
    """Inside the ``with``, a full run simulates every block with full timing and compares the
    traces of blocks ``block_classes`` calls identical (slower; the reference the stream check
    is tested against, and a debugging aid). Timing-only runs are unaffected."""
    _full_timing_every_block.append(True)
    try:
        yield
    finally:
        _full_timing_every_block.pop()


def _first_difference(a: list, b: list) -> int:
    """Index of the first entry where two (unequal) instruction streams differ."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _describe(stream: list, i: int) -> str:
    if i >= len(stream):
        return f"nothing (its stream ends after {len(stream)} entries)"
    entry = stream[i]
    if len(entry) == 6:
        pipe, name, cost, nbytes, elements, spans = entry
        cut = spans.index(None)
        return (f"{name} on {pipe} ({cost:g} cycles, {nbytes} B, {elements} elements, UB reads "
                f"{list(spans[:cut])}, writes {list(spans[cut + 1:-1])})")
    call, detail = entry
    return call if detail is None else f"{call} ({detail})"


def _stream_difference(rep: list, other: list, rep_idx: int, idx: int) -> str:
    i = _first_difference(rep, other)
    return (f"their instruction streams first differ at entry {i}: block {rep_idx} issues "
            f"{_describe(rep, i)}, block {idx} issues {_describe(other, i)}")


#: Most blocks one launch may simulate: per-block bookkeeping grows with it (about 100 B a block).
MAX_BLOCK_DIM = 1 << 24


#: Most blocks a launch simulates one by one (a kernel without ``block_classes``): ~1 s here.
MAX_UNCLASSED_BLOCKS = 1 << 16


def _check_block_dim(block_dim) -> int:
    if isinstance(block_dim, bool) or not isinstance(block_dim, (int, np.integer)) or not 1 <= block_dim <= MAX_BLOCK_DIM:
        raise ValueError(f"block_dim must be a whole number from 1 to {MAX_BLOCK_DIM:,} (the number of blocks "
                         f"to run; the simulator's bound on memory), got {block_dim!r}")
    return int(block_dim)


#: Why a kernel's numpy write to a GlobalTensor fails (see GlobalTensor: read-only inside a launch).
GM_WRITE_RULE = ("the kernel wrote a GlobalTensor through numpy (`gm.data[...] = ...`, an in-place "
                 "operator or `out=` on `gm.data`): a kernel writes global memory only with its "
                 "instructions — DataCopy / DataCopyPad from a UB LocalTensor to the GlobalTensor "
                 "(asc-devkit docs/zh/api/SIMD-API/基础API/Memory矢量计算/数据搬运/DataCopy（GM与UB连续数据搬运）.md); inside a launch `gm.data` is "
                 "read-only to the kernel's Python. Load the inputs into UB, compute with vector "
                 "instructions, then DataCopy the result out")


@contextlib.contextmanager
def _gm_written_by_instructions_only():
    """Around one kernel body: GM is read-only to the kernel's own Python (GlobalTensor), and
    numpy's bare "read-only" error becomes an AscendCRuleError that says what the kernel did."""
    GlobalTensor.kernel_running += 1
    try:
        yield
    except ValueError as exc:
        if "read-only" in str(exc) and not isinstance(exc, SimulationError):
            raise AscendCRuleError(GM_WRITE_RULE) from exc
        raise
    finally:
        GlobalTensor.kernel_running -= 1


def launch(kernel, block_dim: int, *args, hw: HardwareSpec | str = "ascend-910b2",
           timing_only: bool = False, name: str | None = None, l2: L2Cache | None = None,
           **kwargs) -> Timeline:
    """Run ``kernel`` over ``block_dim`` blocks on chip ``hw``; return the Timeline. Outputs are
    written into the GlobalTensors passed in (left untouched in a timing-only run).

    ``l2``: the chip's L2 as left by earlier launches (one :class:`~npu_lab.sim.l2.L2Cache` passed
    to every launch of a sequence); this launch reads resident buffers from it and updates it.
    None: a cold L2, every read from HBM."""
    block_dim = _check_block_dim(block_dim)
    if isinstance(hw, str):
        hw = get_preset(hw)
    if not isinstance(hw, HardwareSpec):
        raise TypeError(f"hw must be a HardwareSpec or a preset name, got {type(hw).__name__}")
    if not callable(kernel):
        raise TypeError("kernel must be a function kernel(ctx, *args)")
    if l2 is not None and (not isinstance(l2, L2Cache) or l2.hw.name != hw.name):
        raise ValueError(f"l2 must be the L2Cache of this chip ({hw.name}), made by L2Cache(hw) and passed to "
                         f"every launch of the sequence; got {l2!r}")
    if getattr(kernel, "mix", None) is not None:
        from .mixed_launch import launch_mixed     # cube + vector in one kernel (issue 17 §2)
        return launch_mixed(kernel, block_dim, args, kwargs, hw=hw, timing_only=timing_only, name=name, l2=l2,
                            gm_guard=_gm_written_by_instructions_only)
    kernel_type = canonical_kernel_type(getattr(kernel, "core_type", "vector"))
    why = kernel_type_reason(hw, kernel_type)
    if why:
        raise CapabilityError(why)
    core_type = execution_core_type(kernel_type)
    cores = hw.cores(core_type)
    if cores < 1:
        raise ValueError(f"{hw.name} has no {core_type} cores to run this kernel on")
    if l2 is not None and (not isinstance(l2, L2Cache) or l2.hw.name != hw.name):
        raise ValueError(f"l2 must be the L2Cache of this chip ({hw.name}), made by L2Cache(hw) and passed to "
                         f"every launch of the sequence; got {l2!r}")
    active = min(block_dim, cores)
    dma_bpc, l2_bpc = core_bytes_per_cycle(hw, active)
    share = l2 is not None and l2.share_within_launch
    router = GmRouter(dma_bpc, l2_bpc, l2.resident_buffers() if l2 is not None else (), share_within_launch=share,
                      l2_bytes=hw.l2_bytes)

    classifier = None if share else getattr(kernel, "block_classes", None)   # sharing: every block simulated
    if share and block_dim > MAX_UNCLASSED_BLOCKS:
        raise ValueError(f"within-launch L2 sharing simulates every block; block_dim {block_dim:,} is more than "
                         f"{MAX_UNCLASSED_BLOCKS:,}")
    if classifier is not None:
        labels = np.asarray(classifier(block_dim, *args, **kwargs))
        if labels.shape != (block_dim,):
            raise ValueError(f"block_classes returned shape {labels.shape}, expected ({block_dim},)")
    elif block_dim > MAX_UNCLASSED_BLOCKS and not share:
        raise ValueError(f"block_dim {block_dim:,} without block_classes: every block would be simulated on its own "
                         f"(~15 µs of Python each, minutes here); the limit is {MAX_UNCLASSED_BLOCKS:,} "
                         "(npu_lab.lang.launch.MAX_UNCLASSED_BLOCKS). Declare which blocks do identical work with "
                         "@npu_kernel(block_classes=...) so each kind is simulated once, or launch fewer blocks")
    else:
        labels = np.arange(block_dim)
    uniq, first, inverse = _classes(labels)

    def run_block(idx: int, stream: str | None = None, replaying: bool = False):
        ctx = KernelContext(hw, idx, block_dim, core_type=core_type, timing_only=timing_only,
                            dma_bytes_per_cycle=dma_bpc, stream=stream)
        ctx.replaying = replaying
        ctx.gm_router = router               # read by DmaOps._dma through sim.l2.gm_bytes_per_cycle
        # float overflow / NaN / invalid casts are silent on the device, as here; one errstate per
        # block rather than per instruction (it is not free: ~1 us a call)
        with np.errstate(all="ignore"), _gm_written_by_instructions_only():
            kernel(ctx, *args, **kwargs)
        ctx.core.check_flags_consumed()      # a SetFlag never waited (UnmatchedFlagError)
        if stream is None:
            return ctx.core.finish(), None
        c = ctx.core                         # counters set outside _exec, compared too
        ctx.stream.append(("counters", (c.hbm_read_bytes, c.hbm_write_bytes, c.vector_repeats)))
        return (ctx.core.finish() if stream == "record" else None), ctx.stream

    if timing_only:
        traces = [run_block(int(i))[0] for i in first]
    else:
        traces = [None] * len(uniq)
        streams = [None] * len(uniq)
        members = np.bincount(inverse, minlength=len(uniq))
        fast = not _full_timing_every_block[-1]
        varying = set()    # classes whose streams differ between blocks: full timing from then on
        for idx in range(block_dim):
            cls = inverse[idx]
            if traces[cls] is None:          # the class's representative: full timing
                record = "record" if fast and members[cls] > 1 else None
                traces[cls], streams[cls] = run_block(idx, record)
                continue
            why = ""
            if fast and cls not in varying:
                stream = run_block(idx, "numerics")[1]
                if stream == streams[cls]:
                    continue                 # same stream: the representative's timeline
                # a different stream may still give the same timeline (a scalar SetValue at a
                # data-dependent UB address moves no clock): decide as without the fast path,
                # by full timing (the kernel runs again: its outputs are written again, same data,
                # but its atomic adds are not repeated)
                why = "; " + _stream_difference(streams[cls], stream, int(first[cls]), idx)
                varying.add(cls)
                replaying = True
            else:
                replaying = False
            if not run_block(idx, replaying=replaying)[0].same_work_as(traces[cls]):
                raise SimulationError(
                    f"block_classes says blocks {int(first[cls])} and {idx} do identical work, but "
                    f"their timelines differ{why}; fix the kernel's block_classes")
    durations = np.array([t.duration_cycles for t in traces])[inverse]
    start, core = schedule_blocks(durations, cores, whole_cycles(hw.us_to_cycles(hw.block_dispatch_us)))

    counts = np.bincount(inverse, minlength=len(traces))
    hbm = float(sum((t.hbm_read_bytes + t.hbm_write_bytes) * c for t, c in zip(traces, counts)))
    l2_hits = float(sum((gm_read_bytes(t) - t.hbm_read_bytes) * c for t, c in zip(traces, counts)))
    repeats = float(sum(t.vector_repeats * c for t, c in zip(traces, counts)))
    hbm_floor = hbm / hw.bytes_per_cycle(hw.hbm_bandwidth_gbps)
    l2_floor = l2_hits / hw.bytes_per_cycle(hw.l2_bandwidth_gbps)
    vec_floor = repeats * hw.vector_cycles_per_repeat / cores
    floor, reason = max((hbm_floor, f"HBM roofline: {hbm:.0f} B at {hw.hbm_bandwidth_gbps:.0f} GB/s"),
                        (l2_floor, f"L2 roofline: {l2_hits:.0f} B of L2 hits at {hw.l2_bandwidth_gbps:.0f} GB/s"),
                        (vec_floor, f"vector roofline: {repeats:.0f} repeats on {cores} cores"))
    if l2 is not None:
        l2.touch(router.touched())
    started = cores_launched(hw, kernel_type, block_dim)
    record = LaunchRecord(
        name=name or getattr(kernel, "__name__", "kernel"), hw=hw, core_type=core_type,
        block_dim=block_dim, traces=traces, block_class=inverse.astype(np.int64),
        block_start=start, block_core=core,
        overhead_cycles=whole_cycles(hw.us_to_cycles(launch_overhead_us(hw, kernel_type, block_dim))),
        floor_cycles=floor, floor_reason=reason, kernel_type=kernel_type, cores_launched=started,
        l2_hit_buffers=tuple(b.name for b in router.l2_hits))
    return Timeline([record])
