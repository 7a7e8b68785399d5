"""Exercise checks for notebook 09 (the cube core and the "3D" task grid).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult` (a ``str``;
print it) saying whether the answer is right, why, and a hint when it is not. Every expected
answer is computed from the library (the cube cost model, the GEMM tiling), never typed in;
:func:`expected_answers` gives each check's truth, computed as the check computes it.

Kernel exercises (``check_kernel(fn, "09.l1tile")``, ``"09.ksplit"``): the L1-tiled GEMM's inner
loop (LoadData of the base tiles, Mmad accumulating in L0C), and the K-split's atomic add.
"""

from __future__ import annotations

import math

import numpy as np

from ..kernels.gemm import GemmTiling, block_tasks, gemm, gemm_tiling
from ..kernels.gemm.kernels import (ceil_div, copy_b_l1, fixpipe_quant, gemm_block_classes, load_a_l0a,
                                    load_b_l0b, round16)
from ..kernels.gemm.tiling import a1_buffers, b1_buffers
from ..lang import FixpipeParamsV220, GlobalTensor, MmadParams, Nd2NzParams, TPosition, TQue, launch, npu_kernel
from ..presets import get_preset
from ..sim.cube_costs import mmad_cycles
from .checks import CYCLES, CheckResult, missing as _missing, parse_number as _number, right as _right, wrong as _wrong
from .kernel_check import KernelExercise, register_exercise, sentinel_array

__all__ = ["check_mmad_cycles", "check_grid_tasks", "check_mixed_saving", "mixed_saving_truth", "MIXED_CASE",
           "expected_answers", "mmad_cycles_truth", "grid_tasks_truth",
           "MMAD_CASE", "GRID_CASE", "gemm_exercise_solution"]

CHIP = "ascend-910b2"
#: Exercise 09.1: one fp16 Mmad of m x n x k.
MMAD_CASE = dict(m=128, n=128, k=128, dtype="float16")
#: Exercise 09.2: a decode-like GEMM (M small) with a K-split, v4's tiling.
GRID_CASE = dict(M=100, N=3000, K=2048, k_split=3)


#: Exercise 09.3: matmul + LeakyRelu, one mixed launch against cube-then-vector (issue 17 §2).
MIXED_CASE = dict(M=512, K=128, N=128, alpha=0.1)


def expected_answers() -> dict[str, object]:
    """The truth of every check of notebook 09, by check name."""
    return {"check_mmad_cycles": mmad_cycles_truth(), "check_grid_tasks": grid_tasks_truth(),
            "check_mixed_saving": mixed_saving_truth()}


def _mixed_runs(chip: str = CHIP):
    from ..kernels.gemm.epilogue import matmul_leakyrelu
    c = MIXED_CASE
    shapes = ((c["M"], c["K"]), (c["K"], c["N"]))
    _, mixed = matmul_leakyrelu(*shapes, c["alpha"], way="mixed", hw=chip, timing_only=True)
    _, separate = matmul_leakyrelu(*shapes, c["alpha"], way="separate", hw=chip, timing_only=True)
    return mixed, separate


def mixed_saving_truth(chip: str = CHIP) -> float:
    """µs the mixed kernel saves over cube-then-vector at :data:`MIXED_CASE` (timing-only runs)."""
    mixed, separate = _mixed_runs(chip)
    return separate.total_us - mixed.total_us


def check_mixed_saving(answer, chip: str = CHIP) -> CheckResult:
    """Matmul + LeakyRelu at 512 x 128 x 128 fp16: how many µs does one mixed (cube + vector) launch
    save over a cube launch followed by a vector launch? Answer: µs."""
    if answer is None:
        return _missing("a number of µs")
    value = _number(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a number of µs.")
    mixed, separate = _mixed_runs(chip)
    truth = separate.total_us - mixed.total_us
    overheads = separate.launch_overhead_us - mixed.launch_overhead_us
    bodies = truth - overheads
    if math.isclose(value, truth, rel_tol=0.02):
        return _right(f"{truth:.1f} µs: {overheads:.1f} µs of launch overhead (two launches, {separate.launch_overhead_us:.1f} µs, "
                      f"against one, {mixed.launch_overhead_us:.1f} µs, which starts the cube and the vector cores together) "
                      f"and {bodies:.1f} µs of work: the AIVs' epilogue of one tile overlaps the AIC's next tile, where the "
                      "separate vector kernel can start only after the whole GEMM.")
    if math.isclose(value, overheads, rel_tol=0.02):
        return _wrong(f"{value:g} µs is the launch overheads' difference only. Hint: the bodies differ too — in the mixed "
                      "kernel the vector work overlaps the cube's.")
    if math.isclose(value, truth * 1000, rel_tol=0.02) or math.isclose(value, truth / 1000, rel_tol=0.02):
        return _wrong(f"{value:g} is off by a factor of 1000: the answer is in µs.")
    return _wrong("not it. Hint: run matmul_leakyrelu((512, 128), (128, 128), 0.1, way=..., timing_only=True) both ways "
                  "and subtract the timelines' total_us.")


def mmad_cycles_truth(chip: str = CHIP) -> float:
    """M-pipe cycles of one :data:`MMAD_CASE` Mmad (head + fractals at the published rate)."""
    c = MMAD_CASE
    return mmad_cycles(get_preset(chip), c["m"], c["n"], c["k"], np.dtype(c["dtype"]))[0]


def check_mmad_cycles(answer, chip: str = CHIP) -> CheckResult:
    """How many cycles does one 128 x 128 x 128 fp16 Mmad hold the M pipe on the 910B2? Answer: cycles."""
    if answer is None:
        return _missing("a number of cycles")
    value = _number(answer, CYCLES)
    if value is None:
        return _wrong(f"{answer!r} is not a number of cycles.")
    hw = get_preset(chip)
    c = MMAD_CASE
    truth = mmad_cycles_truth(chip)
    body = c["m"] * c["n"] * c["k"] / (16 * 16 * 16)
    if math.isclose(value, truth, rel_tol=1e-6):
        return _right(f"{truth:.0f} cycles: {c['m']}x{c['n']}x{c['k']} / (16x16x16 MACs per cycle) = {body:.0f} "
                      f"fractal products, plus the head of {hw.cube_mmad_head_cycles:.0f} cycles (Cube指令理论性能汇总.md: "
                      "Δt + fractals / rate). At this size the head costs 3 %; for one 16x16x16 fractal it would be almost all of it.")
    if math.isclose(value, body):
        return _wrong(f"{value:g} counts the fractal products only. Hint: every Mmad also pays a start-up "
                      "(hw.cube_mmad_head_cycles).")
    if math.isclose(value, body / 2) or math.isclose(value, body / 2 + hw.cube_mmad_head_cycles):
        return _wrong(f"{value:g} is the int8 rate (16x16x32 per cycle). Hint: half is 16x16x16.")
    return _wrong(f"{value:g} is not it. Hint: how many 16x16x16 products make up {c['m']}x{c['n']}x{c['k']}, at one "
                  "per cycle, plus a start-up? mmad_cycles(hw, m, n, k, np.float16) computes it.")


def grid_tasks_truth() -> int:
    """Tasks (M-tile x N-tile x K-split) of :data:`GRID_CASE` with v4's tiling."""
    c = GRID_CASE
    return gemm_tiling(c["M"], c["N"], c["K"], version="v4", k_split=c["k_split"]).tasks


def check_grid_tasks(answer) -> CheckResult:
    """A 100 x 3000 x 2048 fp16 GEMM with v4's tiling and a K-split of 3: how many (M-tile, N-tile,
    K-split) tasks does the one-dimensional grid hold? Answer: a whole number."""
    if answer is None:
        return _missing("a whole number of tasks")
    value = _number(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a number.")
    c = GRID_CASE
    t = gemm_tiling(c["M"], c["N"], c["K"], version="v4", k_split=c["k_split"])
    truth = t.tasks
    if value == truth:
        return _right(f"{truth} = {t.m_tiles} M-tile x {t.n_tiles} N-tiles (singleCoreN = {t.singleCoreN}) x "
                      f"{t.kSplit} K-splits of {t.singleCoreK}. blockDim is {t.usedCoreNum}: block b runs tasks "
                      f"b, b + {t.usedCoreNum}, ... and decodes each with task_coords (one index, not a 3D grid).")
    if value == t.m_tiles * t.n_tiles:
        return _wrong(f"{value:g} forgets the K-split. Hint: each (M, N) tile is split {t.kSplit} ways along K.")
    if value == t.usedCoreNum and value != truth:
        return _wrong(f"{value:g} is blockDim, the blocks launched; a block may run several tasks.")
    return _wrong(f"{value:g} is not it. Hint: gemm_tiling({c['M']}, {c['N']}, {c['K']}, version='v4', "
                  f"k_split={c['k_split']}) — read singleCoreM/N/K, or its .tasks.")


# ---- kernel exercises ---------------------------------------------------------------------------
@npu_kernel(core_type="cube", block_classes=gemm_block_classes)
def gemm_exercise_solution(ctx, a_gm: GlobalTensor, b_gm: GlobalTensor, c_gm: GlobalTensor, atomic: bool,
                           tiling_bytes: bytes):
    """The L1-tiled GEMM (v2/v3/v4 of npu_lab.kernels.gemm, fp16 inputs): per task, per base row of
    M and per N tile, K panels come into L1 (MTE2, Nd2Nz), base tiles into L0A/L0B (MTE1,
    LoadData), Mmads accumulate in L0C (M), Fixpipe writes the tile out (FIX). Pipes: MTE2 -> MTE1
    -> M -> FIX, ordered by the queues."""
    t = GemmTiling.unpack(tiling_bytes)
    dt = a_gm.dtype
    acc = np.dtype(np.float32)
    size, k0 = dt.itemsize, 32 // dt.itemsize
    fe = 512 // size                                   # elements of one 16 x k0 fractal
    M, N, K = t.M, t.N, t.Ka
    bm, bn, bk = t.baseM, t.baseN, t.baseK
    k_l1 = min(t.stepKa * bk, ceil_div(t.singleCoreK, bk) * bk)
    qa1, qb1 = TQue(TPosition.A1, 1), TQue(TPosition.B1, 1)
    qa2, qb2, qc = TQue(TPosition.A2, 1), TQue(TPosition.B2, 1), TQue(TPosition.CO1, 1)
    ctx.pipe.init_buffer(qa1, a1_buffers(t), round16(bm) * k_l1 * size, name="a1")
    ctx.pipe.init_buffer(qb1, b1_buffers(t), k_l1 * round16(bn) * size, name="b1")
    ctx.pipe.init_buffer(qa2, t.dbL0A, bm * bk * size, name="a2")
    ctx.pipe.init_buffer(qb2, t.dbL0B, bk * bn * size, name="b2")
    ctx.pipe.init_buffer(qc, t.dbL0C, bm * bn * 4, name="c")
    quant = fixpipe_quant(acc, c_gm.dtype)
    # YOUR CODE (09.ksplit): with a K-split, several tasks write the same C tile: when `atomic`,
    # make Fixpipe ADD into GM instead of overwriting (ctx.set_atomic_add(dtype of C)).
    ### BEGIN SOLUTION [09.ksplit]
    if atomic:
        ctx.set_atomic_add(c_gm.dtype)
    ### END SOLUTION [09.ksplit]
    for task in block_tasks(t, ctx.get_block_idx()):
        mi, ni, ki = t.task_coords(task)
        tm, tn, tk = t.task_shape(task)
        k_at = ki * t.singleCoreK
        for mb in range(0, tm, bm):
            vm = min(bm, tm - mb)
            m16 = round16(vm)
            row = mi * t.singleCoreM + mb
            a1 = None
            for j in range(ceil_div(tn, bn)):
                vn = min(bn, tn - j * bn)
                col = ni * t.singleCoreN + j * bn
                c = qc.alloc_tensor(acc)
                for kc in range(0, tk, k_l1):
                    vkc = min(k_l1, tk - kc)
                    if a1 is None or not t.isReuseA:
                        if a1 is not None:
                            qa1.free_tensor(a1)
                        a1 = qa1.alloc_tensor(dt)
                        ctx.data_copy(a1, a_gm[row * K + k_at + kc], Nd2NzParams(1, vm, vkc, 0, K, m16, 1, 0))
                        qa1.enque(a1)
                        a1 = qa1.deque(dt)
                    b1 = qb1.alloc_tensor(dt)
                    copy_b_l1(ctx, b1, b_gm, True, k_at + kc, col, vkc, vn, K, N)
                    qb1.enque(b1)
                    b1 = qb1.deque(dt)
                    # YOUR CODE (09.l1tile): walk this L1 panel (vkc elements of K) by baseK steps kb:
                    # take an L0A and an L0B tile from qa2 / qb2, fill them from the panels
                    # (load_a_l0a(ctx, a2, a1, m16 // 16, kb, vk, k0, fe) and
                    # load_b_l0b(ctx, b2, b1, True, kb, vk, vkc, ceil_div(vn, 16), k0, fe)), pass them through
                    # the queues, then ctx.mmad(c, a2, b2, MmadParams(m16, vn, vk, 0, False, first)) where
                    # `first` (cmatrixInitVal) is True only on the task's first K step; free both tiles.
                    # Mmad.md: an accumulating Mmad of fewer than 10 fractals needs ctx.pipe_barrier("PIPE_M").
                    ### BEGIN SOLUTION [09.l1tile]
                    for kb in range(0, vkc, bk):
                        vk = min(bk, vkc - kb)
                        a2, b2 = qa2.alloc_tensor(dt), qb2.alloc_tensor(dt)
                        load_a_l0a(ctx, a2, a1, m16 // 16, kb, vk, k0, fe)
                        load_b_l0b(ctx, b2, b1, True, kb, vk, vkc, ceil_div(vn, 16), k0, fe)
                        qa2.enque(a2)
                        qb2.enque(b2)
                        a2, b2 = qa2.deque(dt), qb2.deque(dt)
                        first = kc == 0 and kb == 0
                        if not first and (m16 // 16) * (vn // 16) < 10:
                            ctx.pipe_barrier("PIPE_M")
                        ctx.mmad(c, a2, b2, MmadParams(m16, vn, vk, 0, False, first))
                        qa2.free_tensor(a2)
                        qb2.free_tensor(b2)
                    ### END SOLUTION [09.l1tile]
                    qb1.free_tensor(b1)
                qc.enque(c)
                c = qc.deque(acc)
                ctx.fixpipe(c_gm[row * N + col], c, FixpipeParamsV220(vn, vm, m16, N, False, quant, 1.0, 1, 0, 0, 0))
                qc.free_tensor(c)
            qa1.free_tensor(a1)
    # YOUR CODE (09.ksplit): switch the atomic add off again at the end (ctx.disable_dma_atomic()).
    ### BEGIN SOLUTION [09.ksplit]
    if atomic:
        ctx.disable_dma_atomic()
    ### END SOLUTION [09.ksplit]


_IMPORTS = ("import numpy as np\nfrom npu_lab import npu_kernel\n"
            "from npu_lab.lang import FixpipeParamsV220, GlobalTensor, MmadParams, Nd2NzParams, TPosition, TQue\n"
            "from npu_lab.kernels.gemm import GemmTiling, block_tasks\n"
            "from npu_lab.kernels.gemm.tiling import a1_buffers, b1_buffers\n"
            "from npu_lab.kernels.gemm.kernels import (ceil_div, copy_b_l1, fixpipe_quant, gemm_block_classes,\n"
            "                                          load_a_l0a, load_b_l0b, round16)")


def _gemm_cases(rng, *, k_split: int | None = None) -> list[dict]:
    """fp16 GEMM shapes: one fractal, tails in M, N and K, several base tiles, then two random ones."""
    fixed = [(16, 16, 16), (37, 50, 70), (128, 256, 512), (200, 130, 1000), (1, 300, 96)]
    for _ in range(2):
        fixed.append((int(rng.integers(1, 300)), int(rng.integers(1, 300)), int(rng.integers(16, 700))))
    version = "v4" if k_split else "v3"
    out = []
    for M, N, K in fixed:
        ks = min(k_split, max(1, K // 64)) if k_split else None
        out.append({"M": M, "N": N, "K": K, "version": version, "k_split": ks,
                    "label": f"M={M}, N={N}, K={K}, fp16" + (f", kSplit={ks}" if ks else "")})
    return out


def _gemm_tiling_of(case, hw) -> GemmTiling:
    kw = {"k_split": case["k_split"]} if case.get("k_split") else {}
    return gemm_tiling(case["M"], case["N"], case["K"], np.float16, hw, version=case["version"], **kw)


def _gemm_inputs(case):
    rng = np.random.default_rng([case["M"], case["N"], case["K"]])
    return (rng.standard_normal((case["M"], case["K"])).astype(np.float16),
            rng.standard_normal((case["K"], case["N"])).astype(np.float16))


def _gemm_launch(fn, case, hw, timing_only):
    """Host code: the library's tiling, A [M, K] and B [K, N] in GM, C [M, N] float32 (NaN until
    written; zeros when a K-split accumulates into it, as a host memset would leave it)."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    t = _gemm_tiling_of(case, hw)
    M, N, K = case["M"], case["N"], case["K"]
    atomic = t.kSplit > 1
    if timing_only:
        a = GlobalTensor.empty(M * K, np.float16, "A", timing_only=True)
        b = GlobalTensor.empty(K * N, np.float16, "B", timing_only=True)
        c = GlobalTensor.empty(M * N, np.float32, "C", timing_only=True)
    else:
        A, B = _gemm_inputs(case)
        a, b = GlobalTensor.from_array(A, "A"), GlobalTensor.from_array(B, "B")
        c0 = np.zeros(M * N, np.float32) if atomic else sentinel_array(M * N, np.float32)
        c = GlobalTensor.from_array(c0, "C")
    tl = launch(fn, t.usedCoreNum, a, b, c, atomic, t.pack(), hw=hw, timing_only=timing_only)
    return (None if timing_only else {"C": c.data.copy()}), tl


def _gemm_reference(case) -> dict:
    A, B = _gemm_inputs(case)
    return {"C": (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32).reshape(-1)}


def _gemm_locate(case, name, i) -> str:
    t = _gemm_tiling_of(case, get_preset(CHIP))
    row, col = divmod(i, case["N"])
    mi, ni = row // t.singleCoreM, col // t.singleCoreN
    tasks = [(mi * t.n_tiles + ni) * t.kSplit + k for k in range(t.kSplit)]
    blocks = sorted({x % t.usedCoreNum for x in tasks})
    return f"C[{row}, {col}]: task(s) {tasks} on block(s) {blocks}"


def _gemm_target(version: str, case: dict):
    def target(hw):
        kw = {"k_split": case["k_split"]} if case.get("k_split") else {}
        _, tl = gemm((case["M"], case["K"]), (case["K"], case["N"]), version=version, hw=hw, timing_only=True,
                     dtype=np.float16, out_dtype=np.float32, **kw)
        return tl.total_us, f"the library's {version} at this shape"
    return target


_L1_TIMED = {"M": 512, "N": 512, "K": 1024, "version": "v3", "k_split": None, "label": "M=N=512, K=1024, fp16, v3 tiling"}
_KS_TIMED = {"M": 16, "N": 1024, "K": 4096, "version": "v4", "k_split": 4,
             "label": "M=16, N=1024, K=4096, fp16, kSplit=4"}

register_exercise(KernelExercise(
    id="09.l1tile", notebook="ex09", title="The L1-tiled GEMM's inner loop",
    teaches="one K panel in L1 feeds several Mmads: LoadData moves each base tile L1 -> L0A / L0B (A as "
            "ZZ fractals, B transposed to ZN), Mmad accumulates into the same L0C tile (cmatrixInitVal "
            "only on the first K step, the fp32 accumulator never leaves L0C), and the queues A2 / B2 "
            "order MTE1 before M",
    solution=gemm_exercise_solution, cell_name="my_gemm_tiled", imports=_IMPORTS,
    omits=("09.ksplit",),      # its cases have no K-split; the atomic add is the later exercise's answer
    place_after="## The ladder (after v2's listing)",
    cases=lambda rng: _gemm_cases(rng), launch=_gemm_launch, reference=_gemm_reference, locate=_gemm_locate,
    target=_gemm_target("v3", _L1_TIMED), target_case=_L1_TIMED, tolerance=(1e-4, 1e-3),
    slow_hint="compare the timeline with the library's v3: is M waiting for MTE1?"))

register_exercise(KernelExercise(
    id="09.ksplit", notebook="ex09", title="K-split partial sums meet by SetAtomicAdd",
    teaches="with a K-split, kSplit tasks compute partial sums of the same C tile on different cores; "
            "SetAtomicAdd makes Fixpipe add into GM (C zeroed first) instead of overwriting, and "
            "SetAtomicNone (disable_dma_atomic) switches it off; without it the last task's partial sum wins",
    solution=gemm_exercise_solution, cell_name="my_gemm_ksplit", imports=_IMPORTS,
    place_after="## K-split (after v4's race without the atomic add)",
    cases=lambda rng: _gemm_cases(rng, k_split=3), launch=_gemm_launch, reference=_gemm_reference,
    locate=_gemm_locate, target=_gemm_target("v4", _KS_TIMED), target_case=_KS_TIMED, tolerance=(1e-4, 1e-3),
    slow_hint="compare with the library's v4 timeline"))
