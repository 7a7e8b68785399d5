"""Exercise checks for notebook 02 (the discrete chain).

``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult`: a message (a ``str``
to print) that says what is right or wrong and gives a hint, with ``.correct`` True, False, or
None when no answer was given yet. Every expected answer is computed here from the library
(timing-only runs, the UB budget, the presets), never typed in, so a check stays true when the
model changes.
"""

from __future__ import annotations


import numpy as np

from ..data import ARTICLE_SWEEP_SHAPE
from .checks import checked_keywords
from .checks import (parse_percent, BYTES, CheckResult, missing as _missing, parse_whole as _whole,
                     parse_word, right as _right, wrong as _wrong)
from ..kernels.moe_gating import (moe_gating_topk, simulate_moe_gating)


#: The shape the exercises use unless they say otherwise: the article's B=1, S=1024, E=64, K=2.
SHAPE = dict(ARTICLE_SWEEP_SHAPE)
#: tileS values the sweet-spot exercises compare.
SWEEP_TILE_S = (1, 2, 4, 8, 16, 32, 64)
#: One row of logits whose small probabilities underflow to 0 in float32.
UNDERFLOW_LOGITS = (-300.0, 0.0, -200.0)


#: Exercise 02.1 asks about this shape (the lesson shows S=1024, E=64, K=2).
HBM_BYTES_SHAPE = dict(B=1, S=2048, E=128, K=4)
#: Exercise 02.2 asks about the lesson's shape on this chip (the lesson shows the 910B2).
LAUNCH_SHARE_CHIP = "ascend-310p3"
#: Exercise 02.4: the token counts whose fused-vs-chain ratio it compares (first and last) and shows.
TREND_S = (1024, 8192, 65536)

__all__ = ['check_discrete_hbm_bytes', 'check_discrete_launch_share', 'check_fused_advantage_trend',
           'check_underflow_second_expert', 'expected_answers', 'fused_advantage', 'HBM_BYTES_SHAPE',
           'LAUNCH_SHARE_CHIP', 'TREND_S', 'check_level0_last_element', 'level0_last_element_truth', 'LEVEL0_CALL']


def expected_answers() -> dict[str, object]:
    """Each check's truth for the case notebook 02 asks about (what the check itself compares to)."""
    return {"check_discrete_hbm_bytes": discrete_hbm_bytes_truth(**HBM_BYTES_SHAPE),
            "check_discrete_launch_share": discrete_launch_share_truth(LAUNCH_SHARE_CHIP),
            "check_fused_advantage_trend": fused_advantage_trend_truth(),
            "check_underflow_second_expert": underflow_second_expert_truth(),
            "check_level0_last_element": level0_last_element_truth()}


#: Exercise 02.5: ctx.add(dst, src0, src1, mask, repeat_time, BinaryRepeatParams(*strides)) on float32
LEVEL0_CALL = dict(instruction="Add", dtype="float32", mask=32, repeat_time=3, strides=(1, 1, 1, 16, 8, 8))


def _level0_fp(**changes):
    from ..lang import BinaryRepeatParams
    from .level0_picture import level0_footprint
    call = {**LEVEL0_CALL, **changes}
    return level0_footprint(call["instruction"], call["dtype"], call["mask"], call["repeat_time"],
                            BinaryRepeatParams(*call["strides"]))


def level0_last_element_truth() -> int:
    """The largest element offset of dst that LEVEL0_CALL writes (from the lang's own footprint)."""
    return _level0_fp().last_element("dst")


def check_level0_last_element(answer) -> CheckResult:
    """``ctx.add(dst, src0, src1, 32, 3, BinaryRepeatParams(1, 1, 1, 16, 8, 8))`` on float32
    tensors: the largest element index of dst (counted from dst's address) it writes. Answer: a
    whole number."""
    if answer is None:
        return _missing("a whole number: an element index of dst")
    value = _whole(answer, ())
    if value is None:
        return _wrong(f"Answer a whole number (an element index), not {answer!r}.")
    fp = _level0_fp()
    truth = fp.last_element("dst")
    blk, rep = fp.strides["dst"]
    per_block = fp.per_block
    lanes = len(fp.lanes)
    explain = (f"repeat r starts r × {rep} blocks × {per_block} elements = {rep * per_block}·r elements on; "
               f"mask {fp.mask} switches on lanes 0..{lanes - 1} ({lanes // per_block} blocks); the last "
               f"repeat (r = {fp.repeat_time - 1}) ends at {(fp.repeat_time - 1) * rep * per_block} + {lanes - 1} = "
               f"{truth}. The elements between repeats are left alone: a strided write.")
    if value == truth:
        return _right(explain)
    mistakes = {
        (fp.repeat_time - 1) * rep + lanes - 1: "that counts the repeat stride in elements: it is in 32-byte "
                                                "blocks (of 8 float32)",
        _level0_fp(mask=64).last_element("dst"): "that takes all 64 lanes: mask = 32 is normal mode, the "
                                                 "first 32 lanes of each repeat",
        _level0_fp(strides=(1, 1, 1, 8, 8, 8)).last_element("dst"): "that is the contiguous layout (repeat "
                                                                     "stride 8): dst's repeat stride here is 16",
        truth + 1: "that counts elements, not the last index (they start at 0)",
    }
    if value in mistakes:
        return _wrong(f"{value} is not it: {mistakes[value]}.")
    return _wrong(f"{value} is not it. Hint: element (repeat r, lane l) = r·repStride·8 + (l // 8)·blkStride·8 "
                  "+ l % 8 for float32 (strides in 32-byte blocks); which r and l are the last?")


def discrete_hbm_bytes_truth(B: int, S: int, E: int, K: int) -> int:
    """Bytes of HBM traffic the discrete chain moves at this shape (float32 logits)."""
    return simulate_moe_gating(B, S, E, K, version="discrete", hw="ascend-910b2").timeline.hbm_bytes


def discrete_launch_share_truth(chip: str) -> float:
    """Launch overhead as a percentage of the chain's latency at the article's shape on ``chip``."""
    t = simulate_moe_gating(*(SHAPE[k] for k in "BSEK"), version="discrete", hw=chip).timeline
    return 100 * t.launch_overhead_us / t.total_us


@checked_keywords
def fused_advantage(S: int, chip: str = "ascend-910b2", E: int = 64, K: int = 2) -> float:
    """The chain's latency over the fused kernel's (v3, its default tiling) at B=1, S tokens."""
    chain = simulate_moe_gating(1, S, E, K, version="discrete", hw=chip).latency_us
    return chain / simulate_moe_gating(1, S, E, K, version="v3", hw=chip).latency_us


@checked_keywords
def fused_advantage_trend_truth(S_from: int = TREND_S[0], S_to: int = TREND_S[-1]) -> str:
    """'grow' when the fused advantage is larger at ``S_to`` than at ``S_from`` tokens, else 'shrink'."""
    return "grow" if fused_advantage(S_to) > fused_advantage(S_from) else "shrink"


def underflow_second_expert_truth() -> int:
    """The expert the discrete chain ranks second for :data:`UNDERFLOW_LOGITS` and K=3."""
    logits = np.array([UNDERFLOW_LOGITS], dtype=np.float32)
    return int(moe_gating_topk(logits, 3, version="discrete").indices[0][1])

@checked_keywords
def check_discrete_hbm_bytes(answer, B: int = HBM_BYTES_SHAPE["B"], S: int = HBM_BYTES_SHAPE["S"],
                             E: int = HBM_BYTES_SHAPE["E"], K: int = HBM_BYTES_SHAPE["K"]) -> CheckResult:
    """How many bytes cross HBM when the discrete chain (Softmax → TopK → Renormalise) runs at this
    shape (default B=1, S=2048, E=128, K=4) with float32 logits on the 910B2? Reads the L2 cache
    serves do not count (the model's L2: data one launch writes is read back by the next from L2
    when it fits; every write reaches HBM). Answer: a whole number of bytes."""
    if answer is None:
        return _missing("a whole number of bytes")
    t = simulate_moe_gating(B, S, E, K, version="discrete", hw="ascend-910b2").timeline
    truth = discrete_hbm_bytes_truth(B, S, E, K)
    from_l2 = t.l2_hit_bytes
    everything = truth + from_l2             # every byte read or written in global memory
    minimum = B * S * E * 4 + B * S * K * 8
    per_launch = ", ".join(f"{l.name} {l.hbm_bytes:,} B" for l in t.launches)
    l2_part = "; ".join(f"{l.name} read {l.l2_hit_bytes:,} B of {' and '.join(l.l2_hit_buffers)} from L2"
                        for l in t.launches if l.l2_hit_bytes)
    value = _whole(answer, BYTES)
    if value is None:
        return _wrong(f"{answer!r} is not a whole number of bytes.")
    if value == truth:
        return _right(f"{truth:,} B ({per_launch}) = {truth / minimum:.2f}\u00d7 the minimum of {minimum:,} B "
                      "(read the logits once, write indices and weights once). The chain also writes its "
                      "intermediates, the [N, E] probabilities and the [N, K] top-K values; reading them back "
                      f"costs no HBM here because they are still in L2 ({l2_part}: {from_l2:,} B in all). "
                      "A chain whose intermediates outgrow the L2 pays those read-backs in HBM too.")
    if value == everything and from_l2:
        return _wrong(f"{value:,} B is every byte the chain reads or writes in global memory. But {from_l2:,} B "
                      f"of it never reach HBM: {l2_part}, written by the launch before and still in the "
                      "L2 cache. Hint: count the writes, and only the reads of data no earlier launch wrote.")
    if value == minimum:
        return _wrong(f"{minimum:,} B is the minimum any kernel must move (what the fused kernel moves). "
                      "The chain also writes its intermediates to global memory. Hint: for each of the three "
                      "launches, add what it writes, and what it reads that an earlier launch did not write.")
    if value in (truth // 1024, round(truth / 1000)):
        return _wrong("That looks like kilobytes; the answer is wanted in bytes.")
    return _wrong(f"{value:,} B is not what the model counts. Hint: Softmax reads and writes N\u00b7E floats; "
                  "TopK reads N\u00b7E floats and writes K values and K indices per row; Renormalise reads "
                  "and writes N\u00b7K floats (N = B\u00b7S rows). The reads of what the previous launch wrote "
                  "come from L2, not HBM. `simulate_moe_gating(..., version='discrete').timeline.hbm_bytes` "
                  "says it too (and `.l2_hit_bytes` what L2 served).")


@checked_keywords
def check_discrete_launch_share(answer, chip: str = LAUNCH_SHARE_CHIP) -> CheckResult:
    """What share of the discrete chain's latency (B=1, S=1024, E=64, K=2, on ``chip``, default
    the 310P3) is launch overhead? Answer: a percentage (74 or '74%') or a fraction (0.74); within
    3 points counts."""
    if answer is None:
        return _missing("a percentage such as 50 (or a fraction such as 0.5)")
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    t = simulate_moe_gating(B, S, E, K, version="discrete", hw=chip).timeline
    truth = discrete_launch_share_truth(chip)
    value = parse_percent(answer)
    detail = (f"{len(t.launches)} launches \u00d7 {t.launch_overhead_us / len(t.launches):.1f} \u00b5s = "
              f"{t.launch_overhead_us:.1f} \u00b5s of {t.total_us:.1f} \u00b5s")
    if value is None:
        return _wrong(f"{answer!r} is not a percentage: answer a number such as 25 or '25%' "
                      "(or a fraction such as 0.25).")
    if abs(value - truth) <= 3:
        return _right(f"About {truth:.0f} %: {detail}. The 'launch storm': each kernel of the chain pays "
                      "the fixed launch cost, however little work it does. Fusing the three into one "
                      "launch removes two of them at once.")
    return _wrong(f"{value:.0f} % is off. Hint: the grey `host` bars of the timeline are the launch "
                  "overheads; add them up and divide by the total latency "
                  "(`timeline.launch_overhead_us / timeline.total_us`).")


_TREND_WORDS = {"grow": "grow", "grows": "grow", "larger": "grow", "increase": "grow", "increases": "grow",
                "bigger": "grow", "up": "grow", "shrink": "shrink", "shrinks": "shrink", "smaller": "shrink",
                "decrease": "shrink", "decreases": "shrink", "down": "shrink"}


def check_fused_advantage_trend(answer) -> CheckResult:
    """Does the fused kernel's advantage over the discrete chain (chain latency / v3 latency, v3
    at its default tiling, E=64, K=2 on the 910B2) grow or shrink from S=1024 to S=65536 tokens?
    Answer ``'grow'`` or ``'shrink'``."""
    if answer is None:
        return _missing("'grow' or 'shrink'")
    said = parse_word(answer, _TREND_WORDS)
    if said is None:
        return _wrong(f"Answer 'grow' or 'shrink', not {answer!r}.")
    first, last = TREND_S[0], TREND_S[-1]
    ratios = {S: fused_advantage(S) for S in (first, last)}
    truth = fused_advantage_trend_truth(first, last)
    evidence = f"the chain takes {ratios[first]:.1f}\u00d7 the fused kernel's time at S={first} and " \
               f"{ratios[last]:.1f}\u00d7 at S={last}"
    if said == truth:
        kind, verdict = simulate_moe_gating(1, last, 64, 2, version="discrete").timeline.bottleneck()
        why = ("the chain's three launch overheads stop mattering, and what is left grows with the tokens "
               "faster than the fused kernel's own work: the chain's extra HBM round trip, and what the "
               f"model's verdict on the chain at S={last} names — {kind}-bound: {verdict}"
               if truth == "grow" else
               "the chain's fixed launch overhead, the part fusing removes, becomes a smaller share of "
               "its time, while the fused kernel's work grows with the tokens too")
        return _right(f"It does {truth}: {evidence}. As S grows, {why}. The table below shows "
                      "where each one's time goes.")
    return _wrong(f"The model says it {truth}s: {evidence}. Hint: what part of the chain's time is "
                  "fixed (paid once per launch) and what part grows with S, for the chain and for the "
                  "fused kernel?")


def check_underflow_second_expert(answer) -> CheckResult:
    """For one row of logits [-300, 0, -200] and K=3, which expert does the *discrete chain* rank
    second? Answer: an expert index (0, 1 or 2)."""
    if answer is None:
        return _missing("an expert index: 0, 1 or 2")
    logits = np.array([UNDERFLOW_LOGITS], dtype=np.float32)
    chain = moe_gating_topk(logits, 3, version="discrete").indices[0]
    truth = underflow_second_expert_truth()
    fused = moe_gating_topk(logits, 3, version="v1").indices[0]
    value = _whole(answer)
    if value is None or value not in (0, 1, 2):
        return _wrong(f"Answer an expert index 0, 1 or 2, not {answer!r}.")
    why = ("exp(-200) and exp(-300) are both below the smallest float32 (about 1e-45), so both "
           "probabilities are exactly 0.0: a tie, and ties go to the lower expert index")
    if value == truth:
        return _right(f"The chain ranks {chain.tolist()}: {why}. The fused kernel compares the logits "
                      f"themselves (-200 > -300) and ranks {fused.tolist()}. The weights agree (both 0).")
    if value == int(fused[1]):
        return _wrong(f"{value} is what the fused kernel (and the reference) answer, ranking the logits. "
                      "The chain ranks probabilities after the softmax. Hint: what is exp(-200) in float32?")
    return _wrong(f"Expert {value} has the largest logit, so it is ranked first. Which comes second "
                  "when the chain compares the probabilities exp(x - max)?")


# ---- kernel exercises ---------------------------------------------------------------------------
# 02.row_softmax: softmax over each row of a [rows, cols] matrix, one row per tile.
from dataclasses import dataclass  # noqa: E402

from ..lang import (DataCopyExtParams, DataCopyPadExtParams, GlobalTensor, RoundMode, TBuf,  # noqa: E402
                    TPosition, TQue, launch, npu_kernel, reduce_max_tmp_elements)
from ..lang.tiling_struct import Int32Struct  # noqa: E402
from .kernel_check import KernelExercise, register_exercise, sentinel_array  # noqa: E402


@dataclass(frozen=True)
class RowSoftmaxTiling(Int32Struct):
    """Host tiling of the row softmax: rows, cols, rows per block (the last block may have fewer)."""

    rows: int
    cols: int
    rows_per_block: int


@npu_kernel
def row_softmax_solution(ctx, x_gm, y_gm, tiling_bytes):
    """y[r] = softmax(x[r]) for this block's rows, one row per tile. x: float32 or float16
    [rows, cols]; y: float32. Pipes: MTE2 (row in) → V (max, exp, sum, scale) ↔ S (reads the max
    and the sum) → MTE3 (row out)."""
    t = RowSoftmaxTiling.unpack(tiling_bytes)
    first = ctx.get_block_idx() * t.rows_per_block
    rows, C, size = min(t.rows_per_block, t.rows - first), t.cols, x_gm.dtype.itemsize
    Cp = -(-C // 16) * 16                                  # a UB row: whole 32-byte blocks
    x_in, y_out = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
    ctx.pipe.init_buffer(x_in, 2, Cp * size, name="x_in")
    ctx.pipe.init_buffer(y_out, 2, Cp * 4, name="y_out")
    tmp_buf, stat_buf = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(tmp_buf, reduce_max_tmp_elements(Cp, 4, False) * 4, name="reduce_tmp")
    ctx.pipe.init_buffer(stat_buf, 32, name="row_stat")
    tmp, stat = tmp_buf.get(np.float32), stat_buf.get(np.float32)
    for r in range(rows):
        row = first + r
        x = x_in.alloc_tensor(x_gm.dtype)
        # YOUR CODE: load row `row` (C elements; data_copy_pad: C * size is rarely whole blocks),
        # y = exp(x - max) / sum in float32 (ctx.cast first for float16; ctx.reduce_max and
        # ctx.reduce_sum into `stat` with `tmp`; the scalar unit reads stat.get_value(0) only after
        # set_flag/wait_flag("V_S", 0), and V rewrites `stat` only after set_flag/wait_flag("S_V", 0)
        # follows that read), then store y (C float32) to y_gm[row * C].
        ### BEGIN SOLUTION
        ctx.data_copy_pad(x, x_gm[row * C], DataCopyExtParams(1, C * size, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))
        x_in.enque(x)
        x = x_in.deque(x_gm.dtype)
        y = y_out.alloc_tensor(np.float32)
        src = x
        if size == 2:
            ctx.cast(y, x, RoundMode.CAST_NONE, C)
            src = y
        ctx.reduce_max(stat, src, tmp, C)
        ctx.set_flag("V_S", 0)
        ctx.wait_flag("V_S", 0)
        row_max = stat.get_value(0)
        ctx.set_flag("S_V", 0)                 # the scalar read is done before V rewrites stat
        ctx.wait_flag("S_V", 0)
        ctx.adds(y, src, -row_max, C)
        ctx.exp(y, y, C)
        ctx.reduce_sum(stat, y, tmp, C)
        ctx.set_flag("V_S", 0)
        ctx.wait_flag("V_S", 0)
        row_sum = stat.get_value(0)
        ctx.set_flag("S_V", 0)
        ctx.wait_flag("S_V", 0)
        ctx.muls(y, y, 1.0 / row_sum, C)
        x_in.free_tensor(x)
        y_out.enque(y)
        y = y_out.deque(np.float32)
        ctx.data_copy_pad(y_gm[row * C], y, DataCopyExtParams(1, C * 4, 0, 0, 0))
        y_out.free_tensor(y)
        ### END SOLUTION


def row_softmax_tiling(rows: int, cols: int, hw) -> RowSoftmaxTiling:
    from ..presets import get_preset as _preset
    blocks = min(_preset(hw).vector_cores, rows)
    return RowSoftmaxTiling(rows, cols, -(-rows // blocks))


def _softmax_cases(rng):
    fixed = [(8, 64, "float32"), (5, 100, "float32"), (3, 7, "float16"), (4, 1, "float32"), (60, 1000, "float16")]
    fixed += [(int(rng.integers(1, 70)), int(rng.integers(1, 600)), "float32") for _ in range(2)]
    return [{"rows": r, "cols": c, "dtype": d, "label": f"[{r}, {c}] {d}"} for r, c, d in fixed]


def _softmax_x(case):
    rng = np.random.default_rng([case["rows"], case["cols"]])
    return (3 * rng.standard_normal((case["rows"], case["cols"]))).astype(case["dtype"])


def _softmax_launch(fn, case, hw, timing_only):
    t = row_softmax_tiling(case["rows"], case["cols"], hw)
    n = case["rows"] * case["cols"]
    x = GlobalTensor.from_array(_softmax_x(case), "x")
    y = GlobalTensor.from_array(sentinel_array(n, np.float32), "y")
    timeline = launch(fn, -(-t.rows // t.rows_per_block), x, y, t.pack(), hw=hw, timing_only=timing_only)
    return (None if timing_only else {"y": y.data}), timeline


def _softmax_reference(case):
    x = _softmax_x(case).astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"y": (e / e.sum(axis=1, keepdims=True)).astype(np.float32)}


def _softmax_locate(case, name, i):
    t = row_softmax_tiling(case["rows"], case["cols"], "ascend-910b2")
    row = i // case["cols"]
    return f"row {row}, column {i % case['cols']}: block {row // t.rows_per_block}, tile {row % t.rows_per_block}"


SOFTMAX_TIMED = {"rows": 480, "cols": 1024, "dtype": "float32", "label": "[480, 1024] float32"}


def _softmax_target(hw):
    """The course's solution at the timed shape, + 10 % (not a speed exercise: shown for scale)."""
    return (_softmax_launch(row_softmax_solution, SOFTMAX_TIMED, hw, False)[1].total_us * 1.1,
            "the course's row softmax + 10 %")


register_exercise(KernelExercise(
    id="02.row_softmax", notebook="ex02", title="A row softmax from a blank cell",
    teaches="the discrete chain's first kernel written by hand: DataCopyPad in and out, Cast for float16, "
            "ReduceMax / ReduceSum with their scratch, and the V_S flag before the scalar unit reads a result",
    solution=row_softmax_solution, cell_name="my_row_softmax",
    imports="import numpy as np\nfrom npu_lab import npu_kernel\n"
            "from npu_lab.lang import (DataCopyExtParams, DataCopyPadExtParams, RoundMode, TBuf, TPosition, TQue,\n"
            "                          reduce_max_tmp_elements)\n"
            "from npu_lab.course.ex02 import RowSoftmaxTiling",
    place_after="## The idea: a chain of generic kernels (after the Softmax kernel of the chain is shown)",
    cases=_softmax_cases, launch=_softmax_launch, reference=_softmax_reference, locate=_softmax_locate,
    target=_softmax_target, target_case=SOFTMAX_TIMED, timed_full=True, tolerance=(2e-5, 1e-7),
    slow_hint="two slots per queue and fewer scalar round trips are the usual wins"))
