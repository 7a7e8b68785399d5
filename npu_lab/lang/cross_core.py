"""Cube + vector in one kernel (issue 17 §2): ``KERNEL_TYPE_MIX_AIC_1_2`` kernels, the cross-core
flags ``CrossCoreSetFlag`` / ``CrossCoreWaitFlag`` and the hardware ``SyncAll``.

A mixed kernel (``@npu_kernel(mix=(1, 2))``, C++ ``__global__ __mix__(1, 2)``) runs its body on
every core of an AI core group: one AIC (cube) and its two AIVs (vector). ``block_dim`` counts
AI cores (groups), as ``numBlocks`` does in asc-devkit's
examples/01_simd_cpp_api/00_introduction/03_fusion_operation/matmul_leakyrelu_basic_api (2 blocks:
2 AIC + 4 AIV). The body branches on ``ctx.is_aic()`` / ``ctx.is_aiv()`` (``if ASCEND_IS_AIC`` /
``ASCEND_IS_AIV``); on an AIV ``get_block_idx()`` is ``2 * group + get_sub_block_idx()``
(GetSubBlockIdx(ISASI).md, GetTaskRatio.md), on the AIC it is the group. Data passes between
the cores through GM (a workspace): the AIC's Fixpipe writes it, the AIVs' DataCopy read it.

Rules (pages under docs/zh/api/SIMD-API/基础API/同步控制/核间同步/, CrossCoreSetFlag(ISASI).md and
CrossCoreWaitFlag(ISASI).md; A2 = the 910B):

* modes on the A2: 0 (all AICs, or all AIVs, of the launch), 1 (the two AIVs of one AI core),
  2 (the AIC and its AIVs: an AIC set releases both AIVs' waits; both AIVs' sets release the
  AIC's wait). Mode 4 (AIC <-> one AIV) is 950PR/DT only: refused.
* ``pipe`` of a set: PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_FIX — not PIPE_S or
  PIPE_ALL. The set reports after that pipe's earlier work completed (本核前置位的pipe流水任务后).
* ``flagId`` 0..15 per core; the hardware silently keeps the low 4 bits of a larger id (refused
  here, saying so). SyncAll uses ids 11..14 internally (a kernel mixing both is refused when the
  ids collide); the high-level Matmul uses 0..2N-1 (not modelled).
* a flag id is a counter (0..15) per waiting core: a set (once every participant of its mode has
  set) adds 1; a wait with the counter at 0 blocks the core from issuing (on the A2 every pipe:
  the wait's ``modeId`` / ``pipe`` 不生效), else subtracts 1. A wait no set ever satisfies hangs
  the core: the simulator finds it (every core blocked or finished) and says so. Sixteen sets
  never waited overflow the counter: the hardware reports an error, so does the simulator.
* cross-core sync needs the scheduler's sync module, which KERNEL_TYPE_AIV_ONLY / AIC_ONLY
  kernels do not start: a cross-core call in a non-mixed kernel is refused.
* ``SyncAll<isAIVOnly=false>()`` (SyncAll.md, hardware form) in a mixed kernel: AIC waits for
  its AIVs, all AICs synchronise, AIVs wait for their AIC. ``numBlocks`` must not exceed the
  cores (else the kernel hangs: refused). ``isAIVOnly=true`` synchronises the AIVs only.

Cost: a cross-core flag goes through the task scheduler's sync module (调度模块), not a wire
between the cores; no latency is published. Assumed: ``CROSS_CORE_FLAG_CYCLES`` per flag hop,
labelled in :data:`CROSS_CORE_PROVENANCE`; SyncAll is three hops (the page's three phases).

Race detection across cores: every GM access of a mixed kernel is recorded as (core, pipe, the
pipe's own count, byte span of the GM buffer). A set snapshots what the setting pipe has ordered
(its vector clock, :mod:`npu_lab.sim.core`) plus what the core learnt from earlier waits; the
matching wait makes the waiting core learn it. Two accesses of different cores to overlapping
GM bytes, at least one a write (two atomic adds commute), with no such chain between them are a
:class:`~npu_lab.lang.errors.RaceError`, whatever the timing. Simplifications: a copy's GM span
is the hull from its first to its last byte (conservative for strided copies); GM ordering
between pipes of one core is not checked here.

Fast path (timing-only runs; :mod:`npu_lab.lang.mixed_launch`): a ``ctx.tile_loop`` whose iterations
make no cross-core call is fast-forwarded on its core alone, as on a vector or cube core (nothing
crosses the core's boundary in the skipped iterations; flags other cores posted for it wait unread,
their times fixed). A loop whose iterations set or wait cross-core flags is fast-forwarded for the
whole AI core group at once (:meth:`MixGroup.loop_checkpoint`): every live core of the group stops at
the start of the same iteration j (a consistent cut: nothing is in flight but the flags already
posted), and the group jumps only when each core's state and the posted, unread flags are those of
iteration j - d (d = 1 or 2) shifted by one common period — the pipe rules are max-plus and
shift-invariant, so the skipped iterations' sets and waits pair up exactly as they would have. A
core that cannot reach the cut (it waits for a flag only a later iteration sets, or is in another
loop) makes the group give up fast-forwarding that loop; mode 0 / SyncAll calls in the period
couple groups: no jump. After a group's jump the race detector forgets the group's earlier GM
accesses (their pipe counts no longer match the addresses the loop resumes at): a timing-only run
checks races within the stretches it simulates, a full run checks every access.
"""

from __future__ import annotations

import numbers
import threading

import numpy as np

from .errors import AscendCRuleError, CapabilityError, RaceError
from ..sim.core import SimulationError

SYNC_DIR = "docs/zh/api/SIMD-API/基础API/同步控制/核间同步/"
SET_PAGE = SYNC_DIR + "CrossCoreSetFlag(ISASI).md"
WAIT_PAGE = SYNC_DIR + "CrossCoreWaitFlag(ISASI).md"
SYNCALL_PAGE = SYNC_DIR + "SyncAll.md"
SUBBLOCK_PAGE = "docs/zh/api/SIMD-API/基础API/工具接口/系统资源与变量/GetSubBlockIdx(ISASI).md"
TASKRATIO_PAGE = "docs/zh/api/SIMD-API/基础API/工具接口/系统资源与变量/GetTaskRatio.md"

#: modes the A2 / A3 take (CrossCoreSetFlag(ISASI).md, modeId支持的取值说明); 4 is 950PR/DT only
MODES = (0, 1, 2)
#: pipes a set may name in modes 0, 1, 2 (pipe支持的流水类型说明)
SET_PIPES = ("PIPE_V", "PIPE_M", "PIPE_MTE1", "PIPE_MTE2", "PIPE_MTE3", "PIPE_FIX")
FLAG_IDS = 16            # 0..15 per core (flagId取值范围说明)
COUNTER_MAX = 15         # each flag's counter counts 0..15 (约束说明)
SYNCALL_FLAG_IDS = (11, 12, 13, 14)
#: assumed cost of one cross-core flag hop through the scheduler's sync module (cycles)
CROSS_CORE_FLAG_CYCLES = 180.0
CROSS_CORE_PROVENANCE = {
    "cross_core_flag_cycles": ("assumed", "CrossCoreSetFlag -> CrossCoreWaitFlag through the task scheduler's "
                               "sync module (CrossCoreSetFlag(ISASI).md: 向调度模块上报); no latency is "
                               "published; 180 cycles = 100 ns at 1.8 GHz assumed"),
    "sync_all_hops": ("vendor-doc", "SyncAll<false>() = AIC waits for AIVs, all AICs sync, AIVs wait for AIC "
                      "(SyncAll.md, 功能说明): three hops"),
}

__all__ = ["CrossCoreOps", "MixGroup", "CROSS_CORE_FLAG_CYCLES", "CROSS_CORE_PROVENANCE", "MODES", "SET_PIPES"]


class _Abort(BaseException):
    """Unwinds a core's thread when another core of the launch failed (not an error of its own)."""


def _check_flag_id(flag_id, what: str) -> int:
    if isinstance(flag_id, (bool, np.bool_)) or not isinstance(flag_id, numbers.Integral):
        raise AscendCRuleError(f"{what}: flagId must be a whole number 0..{FLAG_IDS - 1}, got {flag_id!r} ({SET_PAGE})")
    if not 0 <= flag_id < FLAG_IDS:
        raise AscendCRuleError(
            f"{what}: flagId {flag_id} is out of range: each AIC and AIV has {FLAG_IDS} flag ids, 0..{FLAG_IDS - 1}. "
            f"The hardware silently keeps the low 4 bits (flagId {int(flag_id) & 15}), so this would pair with "
            f"another flag's sets and waits ({SET_PAGE}, flagId相关的约束). Use an id 0..15 (11..14 are SyncAll's)")
    return int(flag_id)


class CrossCoreOps:
    """Mixed into :class:`~npu_lab.lang.context.KernelContext` (through CubeOps). Outside a mixed
    launch (``self._mix`` None) every call is refused with the kernel-type rule."""

    _mix = None            # the MixGroup member of this core in a mixed launch

    def _require_mix(self, what: str, page: str) -> "_Member":
        if self._mix is None:
            raise CapabilityError(
                f"{what} needs a mixed kernel: with KERNEL_TYPE_AIV_ONLY / AIC_ONLY the hardware does not start the "
                f"scheduler's sync module, so cross-core sync cannot work ({page}, 约束说明). Declare the kernel "
                "@npu_kernel(mix=(1, 2)) (C++ __mix__(1, 2), KERNEL_TYPE_MIX_AIC_1_2)")
        return self._mix

    # ---- who am I -----------------------------------------------------------------------
    def is_aic(self) -> bool:
        """``ASCEND_IS_AIC``: True on the cube core of a mixed kernel (and in a cube kernel)."""
        return self.core_type == "cube"

    def is_aiv(self) -> bool:
        """``ASCEND_IS_AIV``: True on a vector core."""
        return self.core_type == "vector"

    def get_sub_block_idx(self) -> int:
        """``GetSubBlockIdx()``: 0 or 1, which AIV of its AI core this is; 0 on the AIC (SUBBLOCK_PAGE)."""
        return self._mix.sub if self._mix is not None else 0

    def get_task_ratio(self) -> int:
        """``GetTaskRatio()``: 2 on an AIV of a 1:2 mixed kernel, else 1 (TASKRATIO_PAGE)."""
        return 2 if self._mix is not None and self.core_type == "vector" else 1

    # ---- CrossCoreSetFlag / CrossCoreWaitFlag ---------------------------------------------
    def cross_core_set_flag(self, mode_id: int, pipe: str, flag_id: int) -> None:
        """``CrossCoreSetFlag<modeId, pipe>(flagId)``: once ``pipe``'s earlier work on this core
        completed, report to the sync module; the waits it releases depend on the mode (module
        docstring). The flag reaches its waiters ``CROSS_CORE_FLAG_CYCLES`` (assumed) after the
        pipe's work completed (and the scalar unit reached the set), plus the core's own
        ``sync_flag_cycles``; the waiter's scalar unit resumes then."""
        m = self._require_mix("CrossCoreSetFlag", SET_PAGE)
        if mode_id == 4:
            raise CapabilityError(f"{self.hw.name}: CrossCoreSetFlag mode 4 (AIC <-> one AIV) exists on the Ascend "
                                  f"950PR/950DT only; the A2 / A3 take modes 0, 1, 2 ({SET_PAGE}, modeId支持的取值说明). "
                                  "Use mode 2 (AIC <-> both AIVs)")
        if mode_id not in MODES:
            raise AscendCRuleError(f"CrossCoreSetFlag modeId must be 0, 1 or 2 on {self.hw.name}, got {mode_id!r} "
                                   f"({SET_PAGE})")
        if pipe not in SET_PIPES:
            raise AscendCRuleError(f"CrossCoreSetFlag<{mode_id}, {pipe}>: pipe must be one of {', '.join(SET_PIPES)} "
                                   f"(PIPE_S and PIPE_ALL are not supported in modes 0, 1, 2; {SET_PAGE}). Name the "
                                   "pipe whose work the other core needs: PIPE_FIX after a Fixpipe, PIPE_MTE3 after a "
                                   "DataCopy UB->GM")
        flag_id = _check_flag_id(flag_id, f"CrossCoreSetFlag<{mode_id}, {pipe}>")
        if mode_id == 1 and self.core_type != "vector":
            raise AscendCRuleError(f"CrossCoreSetFlag mode 1 synchronises the two AIVs of one AI core; the AIC has no "
                                   f"part in it ({SET_PAGE}, 模式1). Use mode 2 between the AIC and its AIVs")
        p = pipe[len("PIPE_"):]
        if p not in self.core.pipes:
            kind = "cube core (AIC)" if self.core_type == "cube" else "vector core (AIV)"
            raise AscendCRuleError(f"CrossCoreSetFlag<{mode_id}, {pipe}>: the {kind} has no {p} pipe (its pipes: "
                                   f"{', '.join(self.core.pipes)}; {SET_PAGE})")
        m.group.check_syncall_ids(flag_id, "CrossCoreSetFlag")
        if mode_id == 0 and m.group.classed:
            m.group.refuse_coupling(f"CrossCoreSetFlag<0, {pipe}>({flag_id})")
        m.xcalls += 1
        m.global_calls += mode_id == 0
        t = self.core.flag_time(p) + CROSS_CORE_FLAG_CYCLES
        self.core.log_call("CrossCoreSetFlag", (mode_id, pipe, flag_id))
        snapshot = m.snapshot(self.core.clock_snapshot(p))
        m.group.arrive(m, mode_id, flag_id, t, snapshot)

    def cross_core_wait_flag(self, flag_id: int, mode_id: int = 0, pipe: str = "PIPE_S") -> None:
        """``CrossCoreWaitFlag<modeId = 0, pipe = PIPE_S>(flagId)``: block this core's issue until
        flag ``flagId``'s counter is non-zero, then take one. On the A2 ``modeId`` and ``pipe`` have
        no effect (不生效): every pipe's later instructions wait. A wait no set will satisfy is a
        hang (SimulationError once every core of the launch is blocked or done)."""
        m = self._require_mix("CrossCoreWaitFlag", WAIT_PAGE)
        if mode_id not in MODES + (4,):
            raise AscendCRuleError(f"CrossCoreWaitFlag modeId must be 0, 1 or 2, got {mode_id!r} ({WAIT_PAGE})")
        flag_id = _check_flag_id(flag_id, "CrossCoreWaitFlag")
        self.core.log_call("CrossCoreWaitFlag", flag_id)
        m.xcalls += 1
        when, snapshot = m.group.take(m, flag_id)
        m.learn(snapshot)
        self.core.wait_until("S", when + self.core.sync_flag_cycles)

    def sync_all(self, is_aiv_only: bool = True) -> None:
        """``SyncAll<isAIVOnly>()`` (hardware form, SYNCALL_PAGE). In a mixed kernel pass
        ``is_aiv_only=False``: AIC waits for its AIVs, all AICs sync, AIVs wait for their AIC (three
        hops, each ``CROSS_CORE_FLAG_CYCLES``). ``True`` syncs the AIVs only (an AIC calling it
        is refused: the page says it then does not do what a mix kernel expects)."""
        m = self._require_mix("SyncAll", SYNCALL_PAGE)
        if not isinstance(is_aiv_only, (bool, np.bool_)):
            raise TypeError(f"sync_all(is_aiv_only) takes True or False, got {is_aiv_only!r}")
        if is_aiv_only and self.core_type == "cube":
            raise AscendCRuleError("SyncAll<true>() on the AIC of a mixed kernel: isAIVOnly=true synchronises the "
                                   f"vector cores only ({SYNCALL_PAGE}: 对于Mix算子，isAIVOnly设置为true，会导致接口实际只能"
                                   "完成Vector全核同步). Use sync_all(is_aiv_only=False) on every core")
        if m.group.classed:
            m.group.refuse_coupling("SyncAll")
        m.group.check_block_dim_for_syncall()
        m.group.syncall_used = True
        m.xcalls += 1
        m.global_calls += 1
        m.group.check_syncall_ids(None, "SyncAll")
        self.core.log_call("SyncAll", bool(is_aiv_only))
        # the sync waits for every pipe's issued work (its trigger pipe is PIPE_ALL by default)
        t = max(max(self.core.done.values()), self.core.free["S"])
        hops = 1 if is_aiv_only else 3
        snapshot = m.snapshot(tuple(max(c) for c in zip(*self.core.clock.values())))
        when, joined = m.group.barrier_all(m, bool(is_aiv_only), t + hops * CROSS_CORE_FLAG_CYCLES, snapshot)
        m.learn(joined)
        self.core.wait_until("S", when + self.core.sync_flag_cycles)


class _Member:
    """One core of a mixed launch: its context, group index, role and what it knows of the others."""

    def __init__(self, group: "MixGroup", index: int, task: int, sub: int | None, ctx):
        self.group, self.index, self.task, self.sub, self.ctx = group, index, task, sub, ctx
        self.kind = "cube" if sub is None else "vector"
        self.sub = 0 if sub is None else sub
        self.role = "AIC" if sub is None else f"AIV{sub}"
        self.known: dict = {}          # (member index, pipe) -> that pipe's count this core is ordered after
        self.state = "ready"           # ready | blocked | done
        self.blocked_on = None
        self.xcalls = 0                # cross-core calls so far (a tile_loop period with none is local)
        self.global_calls = 0          # of which mode 0 sets and SyncAlls (they couple groups)
        self.loop_seq = 0              # tile_loops of this core coordinated with its group so far

    def next_loop_seq(self) -> int:
        self.loop_seq += 1
        return self.loop_seq - 1

    def snapshot(self, pipe_clock: tuple) -> dict:
        """What a set on a pipe with clock ``pipe_clock`` orders: those counts of this core, and
        all this core learnt from earlier waits."""
        snap = dict(self.known)
        for p, i in self.ctx.core.pipe_index.items():
            key = (self.index, p)
            if pipe_clock[i] > snap.get(key, 0):
                snap[key] = pipe_clock[i]
        return snap

    def learn(self, snapshot: dict | None) -> None:
        if not snapshot:
            return
        k = self.known
        for key, v in snapshot.items():
            if v > k.get(key, 0):
                k[key] = v

    def ordered_after(self, other: int, pipe: str, count: int) -> bool:
        return self.known.get((other, pipe), 0) >= count

    def label(self) -> str:
        return f"{self.role} of AI core group {self.task}"


class MixGroup:
    """All cores of one mixed launch, run one at a time (threads passing a baton) so a wait can
    block its core until another core sets the flag — deterministic: the cores run in order
    AIC 0, AIV 0.0, AIV 0.1, AIC 1, ... and switch only at a blocking wait or at the end."""

    def __init__(self, block_dim: int, cube_cores: int, task_starts: np.ndarray):
        self.block_dim = block_dim
        self.cube_cores = cube_cores
        self.task_starts = task_starts       # cycles: converts times between groups (mode 0, SyncAll)
        self.members: list[_Member] = []
        self.counters: dict = {}             # (member index, flag id) -> list of (time, snapshot)
        self.arrivals: dict = {}             # barrier key -> {member index: list of (time, snapshot)}
        self.gm_records: dict = {}           # id(GmBuffer) -> list of access records
        self.syncall_used = False
        self.user_ids: set = set()
        self.cond = threading.Condition()
        self.turn = 0
        self.error: BaseException | None = None
        self.classed = False                 # only each block class's representative group runs
        self.loops: dict = {}                # (task, loop seq) -> _LoopCut of a coordinated tile_loop

    # ---- membership -------------------------------------------------------------------
    def add(self, task: int, sub: int | None, ctx) -> _Member:
        m = _Member(self, len(self.members), task, sub, ctx)
        self.members.append(m)
        ctx._mix = m
        return m

    def _peers(self, m: _Member, mode: int, kind: str | None = None):
        """The participants of mode ``mode`` for a set by ``m``."""
        kind = kind or m.kind
        if mode == 0:
            return [x for x in self.members if x.kind == kind]
        return [x for x in self.members if x.task == m.task and x.kind == "vector"]

    # ---- flags --------------------------------------------------------------------------
    def _abs(self, m: _Member, t: float) -> float:
        return t + float(self.task_starts[m.task])

    def _rel(self, m: _Member, t: float) -> float:
        return t - float(self.task_starts[m.task])

    def check_syncall_ids(self, flag_id, what: str) -> None:
        if flag_id is not None:
            self.user_ids.add(flag_id)
        clash = sorted(self.user_ids & set(SYNCALL_FLAG_IDS)) if self.syncall_used else []
        if clash:
            raise AscendCRuleError(f"{what}: this kernel uses SyncAll, whose hardware form takes flag ids 11..14 "
                                   f"internally, and cross-core flag id(s) {clash}: they would release each other's "
                                   f"waits ({SET_PAGE}, 约束说明: SyncAll硬件同步接口flagId占用范围为[11-14]). Use ids 0..10")

    def _post(self, target: _Member, flag_id: int, t_abs: float, snapshot: dict) -> None:
        pending = self.counters.setdefault((target.index, flag_id), [])
        if len(pending) >= COUNTER_MAX:
            raise SimulationError(
                f"cross-core flag {flag_id} of the {target.label()} would count past {COUNTER_MAX}: "
                f"{len(pending) + 1} sets are waiting for a CrossCoreWaitFlag({flag_id}). Each flag id's counter "
                f"holds 0..{COUNTER_MAX}; beyond that the hardware reports an error and stops the kernel ({SET_PAGE}, "
                "约束说明). Pair every CrossCoreSetFlag with a wait on the other side before setting again")
        pending.append((self._rel(target, t_abs), snapshot))
        if target.state == "blocked" and target.blocked_on == flag_id:
            target.state = "ready"

    def arrive(self, m: _Member, mode: int, flag_id: int, t_rel: float, snapshot: dict) -> None:
        """A set by ``m``. Mode 2 from the AIC posts to both its AIVs at once; every other case is
        a barrier: when all participants have set, their waits' counters go up (mode 2 from the
        AIVs: the AIC's; modes 0 and 1: every participant's), at the latest set's time."""
        t_abs = self._abs(m, t_rel)
        if mode == 2 and m.kind == "cube":
            for x in self.members:
                if x.task == m.task and x.kind == "vector":
                    self._post(x, flag_id, t_abs, snapshot)
            return
        peers = self._peers(m, mode)
        key = (mode, m.kind, flag_id, m.task if mode != 0 else -1)
        slots = self.arrivals.setdefault(key, {})
        slots.setdefault(m.index, []).append((t_abs, snapshot))
        if all(slots.get(x.index) for x in peers):
            got = [slots[x.index].pop(0) for x in peers]
            t = max(g[0] for g in got)
            joined: dict = {}
            for _, s in got:
                for k, v in s.items():
                    if v > joined.get(k, 0):
                        joined[k] = v
            targets = ([x for x in self.members if x.task == m.task and x.kind == "cube"] if mode == 2 else peers)
            for x in targets:
                self._post(x, flag_id, t, joined)

    def take(self, m: _Member, flag_id: int):
        """(time relative to m's group, snapshot) of the flag a wait by ``m`` consumes; blocks the
        core (hands the baton on) while the counter is zero."""
        key = (m.index, flag_id)
        while not self.counters.get(key):
            m.state, m.blocked_on = "blocked", flag_id
            self._switch(m)
        m.state, m.blocked_on = "ready", None
        return self.counters[key].pop(0)

    def barrier_all(self, m: _Member, aiv_only: bool, t_rel: float, snapshot: dict):
        """SyncAll: every AIV (``aiv_only``) or every core of the launch arrives; all leave at the
        latest arrival, each knowing what all knew."""
        key = ("syncall", aiv_only)
        peers = [x for x in self.members if x.kind == "vector"] if aiv_only else list(self.members)
        slots = self.arrivals.setdefault(key, {})
        slots.setdefault(m.index, []).append((self._abs(m, t_rel), snapshot))
        done_key = ("syncall-done", aiv_only)
        if all(slots.get(x.index) for x in peers):
            got = [slots[x.index].pop(0) for x in peers]
            joined: dict = {}
            for _, s in got:
                for k, v in s.items():
                    if v > joined.get(k, 0):
                        joined[k] = v
            t = max(g[0] for g in got)
            for x in peers:
                self.counters.setdefault((x.index, done_key), []).append((self._rel(x, t), joined))
                if x.state == "blocked" and x.blocked_on == done_key:
                    x.state = "ready"
        key2 = (m.index, done_key)
        while not self.counters.get(key2):
            m.state, m.blocked_on = "blocked", done_key
            self._switch(m)
        m.state, m.blocked_on = "ready", None
        return self.counters[key2].pop(0)

    def check_block_dim_for_syncall(self) -> None:
        if self.block_dim > self.cube_cores:
            raise SimulationError(
                f"SyncAll with block_dim {self.block_dim} > {self.cube_cores} AI cores: the groups run in waves, the "
                f"first wave waits at SyncAll for groups that cannot start until it ends — the kernel hangs "
                f"({SYNCALL_PAGE}: numBlocks必须保证不大于实际运行该算子的AI处理器核数，否则...导致Kernel“卡死”). "
                f"Launch at most {self.cube_cores} blocks")

    def refuse_coupling(self, what: str) -> None:
        raise SimulationError(
            f"{what} in a mixed kernel with block_classes: a mode 0 flag or SyncAll synchronises every AI core "
            "group of the launch, so no group's timeline is its own and the groups cannot be simulated once per "
            "class (npu_lab.lang.mixed_launch). Drop block_classes from @npu_kernel, or synchronise within a group "
            "only (modes 1 and 2)")

    # ---- coordinated fast-forward of a tile_loop with cross-core calls (module docstring) ---
    def loop_checkpoint(self, m: _Member, seq: int, j: int, count: int, keys, history) -> int | None:
        """Core ``m`` is at the start of iteration ``j`` of its coordinated loop ``seq`` (its
        snapshots ``history``, the last at ``j``). Blocks until every live core of its group is at
        the same cut (or the cut cannot happen); returns the iterations to skip (0: run ``j``), or
        None when the group gave this loop up (run the rest plainly)."""
        st = self.loops.setdefault((m.task, seq), _LoopCut())
        if st.abandoned:
            return None
        st.at[m.index] = (j, count, keys, history)
        while m.index in st.at and not st.abandoned:
            m.state, m.blocked_on = "blocked", ("loop", seq)
            self._switch(m)
        m.state, m.blocked_on = "ready", None
        if m.index in st.result:
            return st.result.pop(m.index)
        return None

    def _resolve_loops(self) -> bool:
        """Every core is blocked or done: settle the loop cuts that cores wait at. True when a
        core was released."""
        released = False
        if self.error is not None:           # a core failed: the launch is unwinding
            return False
        for (task, seq), st in self.loops.items():
            if not st.at:
                continue
            live = [x for x in self.members if x.task == task and x.state != "done"]
            waiting = [x for x in live if x.index in st.at]
            if not waiting:
                st.at.clear()
                continue
            counts = {st.at[x.index][1] for x in waiting}
            if len(waiting) < len(live) or len(counts) > 1:
                # a core of the group is elsewhere (a flag wait only a later iteration satisfies, another
                # loop) or runs another trip count: there is no common cut; run the loop plainly
                st.abandoned = True
                for x in waiting:
                    x.state = "ready"
                st.at.clear()
                released = True
                continue
            js = {st.at[x.index][0] for x in waiting}
            if len(js) > 1:                  # the laggards run one more iteration
                top = max(js)
                for x in waiting:
                    if st.at[x.index][0] < top:
                        st.result[x.index] = 0
                        del st.at[x.index]
                        x.state = "ready"
                released = True
                continue
            self._jump(task, st, waiting, js.pop())
            released = True
        return released

    def _pending(self, task: int):
        """The flags posted to the cores of group ``task`` and not yet taken, and the half-complete
        mode 1 / 2 barriers of the group: (structure, times relative to the group's start)."""
        mine = {x.index for x in self.members if x.task == task}
        structure, times = [], []
        for key in sorted((k for k in self.counters if k[0] in mine and self.counters[k]), key=repr):
            structure.append(("flag", key, len(self.counters[key])))
            times.extend(t for t, _ in self.counters[key])
        start = float(self.task_starts[task])
        for key in sorted((k for k in self.arrivals if k[0] in (1, 2) and k[-1] == task), key=repr):
            for i in sorted(self.arrivals[key]):
                if self.arrivals[key][i]:
                    structure.append(("set", key, i, len(self.arrivals[key][i])))
                    times.extend(t - start for t, _ in self.arrivals[key][i])
        stuck = any(v for k, slots in self.arrivals.items() if k[0] not in (1, 2) for v in slots.values())
        globals_ = tuple(x.global_calls for x in self.members if x.task == task)
        return (tuple(structure), globals_, stuck), np.array(times, dtype=np.float64)

    def _shift_pending(self, task: int, dt: float) -> None:
        mine = {x.index for x in self.members if x.task == task}
        for key in self.counters:
            if key[0] in mine:
                self.counters[key] = [(t + dt, s) for t, s in self.counters[key]]
        for key, slots in self.arrivals.items():
            if key[0] in (1, 2) and key[-1] == task:
                for i in slots:
                    slots[i] = [(t + dt, s) for t, s in slots[i]]

    def _jump(self, task: int, st: "_LoopCut", cores: list, j: int) -> None:
        """All live cores of group ``task`` are at iteration ``j``: jump when the group is steady."""
        structure, times = self._pending(task)
        st.cuts.append((j, structure, times))
        del st.cuts[:-3]
        skip = 0
        for d in (1, 2):
            prev_cut = next((c for c in st.cuts if c[0] == j - d), None)
            if prev_cut is None or prev_cut[1] != structure or structure[2]:
                continue
            plan, period = [], None
            for x in cores:
                _, count, keys, history = st.at[x.index]
                now = history[-1]
                prev = next((h for h in history if h.j == j - d), None)
                if prev is None or now.j != j or prev.structure != now.structure:
                    break
                shifts = x.ctx._steady_shifts(prev, now)
                if shifts is None or shifts[2] is not None or (period is not None and shifts[1] != period):
                    break
                period = shifts[1]
                plan.append((x, prev, now, shifts, keys.repeats(j, count, d)))
            else:
                if period is None or not np.all(times - prev_cut[2] == period):
                    continue
                copies = min(p[4] for p in plan)
                if copies < 1:
                    continue
                for x, prev, now, shifts, _ in plan:
                    x.ctx._apply_shift(prev, now, copies, shifts)
                self._shift_pending(task, copies * period)
                # the group's GM access records predate the jump: their clocks no longer line up with
                # the addresses after it (a loop alternating two workspace slots resumes on the other
                # slot after an odd jump), so checks restart from the jump (a full run checks all)
                mine = {x.index for x in self.members if x.task == task}
                for key, records in self.gm_records.items():
                    self.gm_records[key] = [r for r in records if r[0] not in mine]
                skip = copies * d
                st.cuts.clear()
                break
        for x in cores:
            st.result[x.index] = skip
            x.state = "ready"
        st.at.clear()

    # ---- GM accesses (race detection across cores) ----------------------------------------
    def record_gm(self, m: _Member, pipe: str, buffer, rows, kind: str, name: str, source) -> None:
        """Record a GM access of ``m`` (kind 'r', 'w' or 'a' = atomic add) to the byte intervals
        ``rows`` = (lo, step, width, count): ``count`` intervals ``[lo + i*step, lo + i*step + width)``,
        and check it against the other cores' earlier accesses to overlapping bytes of the same
        buffer (module docstring)."""
        lo, step, width, count = rows
        if width <= 0 or count <= 0:
            return
        hi = lo + (count - 1) * step + width
        clock = m.ctx.core.clock[pipe][m.ctx.core.pipe_index[pipe]]
        records = self.gm_records.setdefault(id(buffer), [])
        for rec in records:
            oi, opipe, ocount, orows, olo, ohi, okind, oname, osrc = rec
            if oi == m.index or ohi <= lo or hi <= olo:
                continue
            if kind == "r" and okind == "r" or kind == "a" and okind == "a":
                continue
            if m.ordered_after(oi, opipe, ocount):
                continue
            both = _overlap(rows, orows)
            if both is None:
                continue
            other = self.members[oi]
            raise RaceError(
                f"cross-core race on GM buffer '{getattr(buffer, 'name', '?')}' bytes [{both[0]}, {both[1]}): "
                f"the {other.label()} {'writes' if okind != 'r' else 'reads'} them ({oname} on {opipe}, "
                f"{_where(osrc)}) and the {m.label()} {'writes' if kind != 'r' else 'reads'} them ({name} on {pipe}, "
                f"{_where(source)}) with no cross-core flag ordering the two: on the device the "
                f"{'read may see old data' if 'r' in (kind, okind) else 'last writer is undefined'}. Fix: after the "
                f"producer's copy, CrossCoreSetFlag<2, PIPE_{opipe if okind != 'r' else pipe}>(id) on its core and "
                f"CrossCoreWaitFlag(id) on the consumer's before it touches the data ({SET_PAGE})")
        records.append((m.index, pipe, clock, rows, lo, hi, kind, name, source))

    # ---- running the cores ---------------------------------------------------------------
    def _switch(self, m: _Member) -> None:
        """Hand the baton to the next ready core after ``m`` and wait for it to come back; if no
        core is ready and ``m`` is blocked, every core is blocked or done: a hang."""
        n = len(self.members)
        with self.cond:
            nxt = self._next_ready(m.index)
            if nxt is None:
                raise SimulationError(self._hang_message())
            self.turn = nxt.index
            self.cond.notify_all()
            while self.turn != m.index and self.error is None:
                self.cond.wait()
            if self.error is not None:
                raise _Abort()

    def _next_ready(self, after: int):
        """The next ready core after member ``after`` (itself last); when none, settle the loop
        cuts cores wait at (they may release some) and look again."""
        n = len(self.members)
        for _ in range(2):
            nxt = next((self.members[(after + k) % n] for k in range(1, n + 1)
                        if self.members[(after + k) % n].state == "ready"), None)
            if nxt is not None or not self._resolve_loops():
                return nxt
        return None

    def _hang_message(self) -> str:
        blocked = [x for x in self.members if x.state == "blocked"]
        parts = [f"the {x.label()} waits on "
                 f"{'SyncAll' if isinstance(x.blocked_on, tuple) else f'CrossCoreWaitFlag({x.blocked_on})'}"
                 for x in blocked[:4]]
        more = f" (and {len(blocked) - 4} more)" if len(blocked) > 4 else ""
        return (f"the kernel hangs: {'; '.join(parts)}{more}, and no core left running will set it — every core is "
                f"blocked or finished. On the device these cores wait forever (the task times out). A "
                f"CrossCoreWaitFlag needs a matching CrossCoreSetFlag on the other side: mode 2 from the AIC "
                f"releases both AIVs; mode 2 from the AIVs releases the AIC only when both AIVs set ({WAIT_PAGE}, "
                "约束说明: CrossCoreWaitFlag必须与CrossCoreSetFlag接口配合使用)")

    def run(self, body) -> None:
        """Run ``body(member)`` for every member, one thread each, one at a time."""
        def worker(m: _Member):
            try:
                with self.cond:
                    while self.turn != m.index and self.error is None:
                        self.cond.wait()
                    if self.error is not None:
                        return
                body(m)
            except _Abort:
                pass
            except BaseException as exc:       # noqa: BLE001 - handed to the launching thread
                with self.cond:
                    if self.error is None:
                        self.error = exc
                    self.cond.notify_all()
                m.state = "done"
                return
            m.state = "done"
            with self.cond:
                nxt = self._next_ready(m.index)
                if nxt is None:
                    blocked = [x for x in self.members if x.state == "blocked"]
                    if blocked and self.error is None:
                        self.error = SimulationError(self._hang_message())
                else:
                    self.turn = nxt.index
                self.cond.notify_all()

        threads = [threading.Thread(target=worker, args=(m,), daemon=True) for m in self.members]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.error is not None:
            raise self.error


class _LoopCut:
    """A coordinated tile_loop of one AI core group: the cores waiting at its current cut
    (member index -> (j, count, keys, history)), what each is told, the last cuts' flag states."""

    def __init__(self):
        self.at: dict = {}
        self.result: dict = {}
        self.cuts: list = []
        self.abandoned = False


def _intervals(rows) -> tuple[np.ndarray, np.ndarray]:
    lo, step, width, count = rows
    if count > 1 and step < width:            # rows touch or overlap: one interval
        return np.array([lo]), np.array([lo + (count - 1) * step + width])
    starts = lo + step * np.arange(count, dtype=np.int64)
    return starts, starts + width


def _overlap(a, b):
    """The first overlapping byte range [lo, hi) of two strided interval sets, or None."""
    sa, ea = _intervals(a)
    sb, eb = _intervals(b)
    idx = np.searchsorted(ea, sb, side="right")        # first A interval ending after each B start
    ok = idx < len(sa)
    hit = np.zeros(len(sb), dtype=bool)
    hit[ok] = sa[idx[ok]] < eb[ok]
    if not hit.any():
        return None
    j = int(np.argmax(hit))
    i = int(idx[j])
    return max(int(sa[i]), int(sb[j])), min(int(ea[i]), int(eb[j]))


def _where(source) -> str:
    import os
    if not source:
        return "?"
    f, line = source
    return f"{os.path.basename(f)}:{line}"
