"""Exercise checks for notebook 06 (vectorization).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult`: a message (a
``str``; print it) that says whether the answer is right, why, and — when it is not — a hint.
``.correct`` is True, False, or None when no answer was given yet.

Every expected answer is computed here from the library (the hand pipeline model, timing-only
runs of the kernels, the presets), never typed in, so a check stays true when the model changes.
Each exercise varies the case the notebook demonstrates (another K, vector length or tileS), so
its answer is not printed above it; :func:`expected_answers` gives every check's truth, computed
by the same function the check uses.
"""

from __future__ import annotations


from .checks import checked_keywords
from .checks import (CYCLES, CheckResult, missing as _missing, parse_number as _number,
                     parse_whole as _whole, right as _right, wrong as _wrong)
from ..kernels.moe_gating import exp_speedup, simulate_moe_gating
from ..presets import get_preset


CHIP = "ascend-910b2"
#: The article's test shape (B, S, E, K).
SHAPE = (1, 1024, 64, 2)


__all__ = ['check_topk_vector_instructions', 'fast_exp_instructions', 'exp_break_even_cycles', 'check_fast_exp_break_even',
           'check_fast_exp_vector_cost', 'expected_answers', 'topk_vector_instructions', 'fast_exp_vector_cost_pct']

#: Exercise 06.1: the top-K's K (the notebook's tiny run has K = 2).
TOPK_K = 6
#: Exercise 06.2: the vector length (the notebook prints the break-even for 4096 and 16 floats).
BREAK_EVEN_COUNT = 3000
#: Exercise 06.3: v3 at this tileS and K (the notebook runs tileS = 8, K = 2).
FAST_EXP_CASE = dict(tile_s=32, K=4)


def expected_answers() -> dict[str, object]:
    """The truth of every check of notebook 06, by check name (computed as the checks compute it)."""
    return {"check_topk_vector_instructions": topk_vector_instructions(),
            "check_fast_exp_break_even": exp_break_even_cycles(CHIP, BREAK_EVEN_COUNT),
            "check_fast_exp_vector_cost": fast_exp_vector_cost_pct()}


@checked_keywords
def topk_vector_instructions(K: int = TOPK_K, E: int = 64) -> int:
    """Vector instructions v3 issues per tile for (E, K): a two-tile run minus a one-tile run."""
    return _v_instructions(K, 2, E) - _v_instructions(K, 1, E)

def _v_names(K: int, tiles: int, E: int):
    """Vector instructions of a v3 run on one core, by name (the repeat count dropped: 'Compare')."""
    from collections import Counter
    one_core = get_preset(CHIP).replace(vector_cores=1)
    events = simulate_moe_gating(1, 8 * tiles, E, K, version="v3", hw=one_core, tile_s=8).timeline.events()
    return Counter(name.split(" x")[0] for name in events.loc[events["pipe"] == "V", "name"])


def v_instruction_breakdown(K: int = TOPK_K, E: int = 64) -> str:
    """The per-tile count of v3's vector instructions at (E, K), by instruction, each as a*K + b
    (a and b read off two timelines, at K and K + 1; nothing typed in), and the total as a sum."""
    def per_tile(k):
        return _v_names(k, 2, E) - _v_names(k, 1, E)

    here, nxt = per_tile(K), per_tile(K + 1)
    terms, slope_total, const_total = [], 0, 0
    for name in sorted(set(here) | set(nxt), key=lambda n: (-(nxt[n] - here[n]), n)):
        a = nxt[name] - here[name]
        b = here[name] - a * K
        slope_total, const_total = slope_total + a, const_total + b
        expr = ("K" if a == 1 else f"{a}K" if a else "") + (f"{b:+d}" if b and a else str(b) if not a else "")
        terms.append(f"{name} {expr.replace('+', ' + ').replace('-', ' − ')} (= {here[name]})")
    total = f"{slope_total}K {const_total:+d}".replace("+", "+ ").replace("-", "− ")
    return (f"{total} at E = {E}, K = {K}: " + ", ".join(terms)
            + " — the per-round terms are the top-K's rounds (the knock-out is skipped in the last one), "
              "the constants the softmax over the K winners and the output compaction")


def _v_instructions(K: int, tiles: int, E: int) -> int:
    one_core = get_preset(CHIP).replace(vector_cores=1)
    t = simulate_moe_gating(1, 8 * tiles, E, K, version="v3", hw=one_core, tile_s=8).timeline
    events = t.events()
    return int((events["pipe"] == "V").sum())


@checked_keywords
def check_topk_vector_instructions(answer, K: int = TOPK_K, E: int = 64) -> CheckResult:
    """v3 computes the top-K and the softmax of a whole tile with vector instructions. How many
    vector (V) instructions does it issue per tile for K = 6 (exact exp)? Answer: a whole number."""
    if answer is None:
        return _missing("a whole number of instructions")
    truth = topk_vector_instructions(K, E)
    value = _whole(answer, ("instructions",))
    if value is None:
        return _wrong(f"Answer a whole number of instructions, not {answer!r}.")
    if value == truth:
        return _right(f"{truth} per tile, whatever tileS is: {v_instruction_breakdown(K, E)}. Each instruction "
                      "covers all points of the tile: the scalar heap did per-point work, this does per-tile work.")
    k2 = _v_instructions(2, 2, E) - _v_instructions(2, 1, E)
    return _wrong(f"{value} is not it. Hint: for K = 2 the count is {k2}. Read _topk_softmax_tile: "
                  "which instructions run K times, which K - 1 times, which once?")


@checked_keywords
def fast_exp_instructions(count: int = 4096) -> int:
    """How many vector instructions the polynomial exp issues (counted on a timeline)."""
    from ..kernels.moe_gating.article import _exp_kernel
    from ..lang import launch

    events = launch(_exp_kernel, 1, count, True, hw=CHIP, timing_only=True).events()
    return int((events["pipe"] == "V").sum())


@checked_keywords
def exp_break_even_cycles(hw=CHIP, count: int = 4096, target: float = 1.0) -> float:
    """The ``vector_exp_cycles_per_repeat`` at which :func:`exp_speedup` reaches ``target`` (by
    bisection; the speed-up grows with the exact Exp's cost)."""
    hw = get_preset(hw) if isinstance(hw, str) else hw

    def speedup(cost):
        return exp_speedup(hw.replace(vector_exp_cycles_per_repeat=float(cost)), count)

    # the exact Exp's time grows linearly with its cost per repeat (the polynomial's does not depend
    # on it), so two runs put the crossing within a cycle or two; bisect in a bracket around it,
    # checked to hold the crossing (else the whole range), to a billionth of a cycle
    lo, hi = 0.0, 1024.0
    s4, s64 = speedup(4.0), speedup(64.0)
    if s64 > s4:
        guess = 4.0 + (target - s4) * 60.0 / (s64 - s4)
        a, b = max(0.0, guess - 8.0), min(1024.0, guess + 8.0)
        if a < b and speedup(a) < target <= speedup(b):
            lo, hi = a, b
    while hi - lo > 1e-9:
        mid = (lo + hi) / 2
        if speedup(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@checked_keywords
def check_fast_exp_break_even(answer, count: int = BREAK_EVEN_COUNT) -> CheckResult:
    """From how many cycles per repeat of the exact Exp (``vector_exp_cycles_per_repeat``) on does
    the polynomial exp win, for 3000 floats on the 910B2 preset? Answer: cycles per repeat."""
    if answer is None:
        return _missing("a number of cycles per repeat")
    truth = exp_break_even_cycles(CHIP, count)
    hw = get_preset(CHIP)
    value = _number(answer, CYCLES)
    if value is None:
        return _wrong(f"{answer!r} is not a number of cycles.")
    if abs(value - truth) <= max(0.5, 0.03 * truth):
        return _right(f"About {truth:.2f} cycles per repeat. The polynomial costs the same whatever Exp "
                      f"costs ({fast_exp_instructions()} simple instructions, each {hw.vector_issue_cycles:g} cycles "
                      f"to start + 1 per repeat); the exact Exp is one instruction whose per-repeat cost you are varying. "
                      f"The preset has {hw.vector_exp_cycles_per_repeat:g} (the vendor's published rate): far below the break-even.")
    return _wrong(f"{value:g} is not where the two cost the same. Hint: exp_speedup(hw.replace("
                  f"vector_exp_cycles_per_repeat=c), {count}) grows with c; find the c where it "
                  "crosses 1.0 (or solve issue + repeats x c = the polynomial's cost by hand).")


@checked_keywords
def fast_exp_vector_cost_pct(tile_s: int = FAST_EXP_CASE["tile_s"], K: int = FAST_EXP_CASE["K"]) -> float:
    """Percent by which v3_fast_exp raises v3's vector (V) busy time, all cores, at (1, 1024, 64, K), ``tile_s``."""
    busy = {v: simulate_moe_gating(1, 1024, SHAPE[2], K, version=v, hw=CHIP, tile_s=tile_s).timeline.busy_us_by_pipe()["V"]
            for v in ("v3", "v3_fast_exp")}
    return float(100 * (busy["v3_fast_exp"] / busy["v3"] - 1))


@checked_keywords
def check_fast_exp_vector_cost(answer, tile_s: int = FAST_EXP_CASE["tile_s"], K: int = FAST_EXP_CASE["K"]) -> CheckResult:
    """By how many percent does the polynomial exp raise v3's vector busy time (all cores) at S = 1024,
    E = 64, K = 4, tileS = 32 on the 910B2 preset? Answer: a percentage (negative if it lowers it);
    within 2 points counts."""
    if answer is None:
        return _missing("a percentage, e.g. 15 (negative if the polynomial saves time)")
    truth = fast_exp_vector_cost_pct(tile_s, K)
    runs = {v: simulate_moe_gating(1, 1024, SHAPE[2], K, version=v, hw=CHIP, tile_s=tile_s) for v in ("v3", "v3_fast_exp")}
    busy = {v: r.timeline.busy_us_by_pipe()["V"] for v, r in runs.items()}
    value = _number(answer, ("%",))
    if value is None:
        return _wrong(f"{answer!r} is not a percentage.")
    # what the kernel really exponentiates, read off its timeline (one Exp per tile)
    events = runs["v3"].timeline.events()
    exp = events[events["name"].str.startswith("Exp")].iloc[0]
    values, repeats = int(exp["elements"]), int(str(exp["name"]).split(" x")[1])
    evidence = (f"vector busy: v3 {busy['v3']:.2f} \u00b5s, v3_fast_exp {busy['v3_fast_exp']:.2f} \u00b5s "
                f"({truth:+.1f} %); latency {runs['v3'].latency_us:.2f} against {runs['v3_fast_exp'].latency_us:.2f} \u00b5s")
    lat = {v: r.latency_us for v, r in runs.items()}
    change = abs(lat["v3_fast_exp"] / lat["v3"] - 1)
    moves = ("the latency barely moves, because the vector unit is not what limits v3 here." if change < 0.03 else
             f"the latency moves by {100 * change:.1f} %: the vector unit is on v3's critical path here.")
    if abs(value - truth) <= 2:
        return _right(f"{evidence}. Per tile v3 exponentiates {values} values — tileS = {tile_s} rows x "
                      f"{values // tile_s} columns (K = {K} padded to whole 32-byte blocks) — in {repeats} repeat(s): "
                      f"the exact Exp is one instruction, the polynomial {fast_exp_instructions()}, each paying its "
                      f"issue cost. On so few values the polynomial {'loses' if truth > 0 else 'wins'}; {moves}")
    if value < 0 < truth:
        return _wrong(f"The polynomial does not save vector time here ({evidence}). Hint: count instructions and "
                      "repeats per tile for both.")
    return _wrong(f"The model does not say {value:g} %. Hint: simulate_moe_gating(1, 1024, 64, {K}, version=v, "
                  f"tile_s={tile_s}).timeline.busy_us_by_pipe()['V'] for v = 'v3' and 'v3_fast_exp'.")


# ---- kernel exercises ---------------------------------------------------------------------------
# 06.gather_mask: split (value, index) pairs — what Sort32 and WholeReduceMax produce — with GatherMask.
# 06.topk_rounds: the K-round vector top-K over a whole tile (v3's idea, without the softmax).
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402

from ..lang import (SELMODE, BinaryRepeatParams, BrcbRepeatParams, DataCopyExtParams,  # noqa: E402
                    DataCopyPadExtParams, DataCopyParams, GatherMaskParams, GlobalTensor, TBuf, TPosition,
                    TQue, launch, npu_kernel)
from ..lang.tiling_struct import Int32Struct  # noqa: E402
from .kernel_check import KernelExercise, register_exercise, sentinel_array  # noqa: E402


@dataclass(frozen=True)
class RowTiling(Int32Struct):
    """Host tiling: `rows` rows of `cols` elements (or pairs), `tile` rows per block, and K."""

    rows: int
    cols: int
    tile: int
    K: int

    @property
    def block_dim(self) -> int:
        return -(-self.rows // self.tile)


@npu_kernel
def gather_mask_solution(ctx, pairs_gm, values_gm, indices_gm, tiling_bytes):
    """Split this block's tile of n (value, index-bits) float32 pairs into n values (float32) and
    n indices (int32). Pipes: MTE2 → V (two GatherMask) → MTE3."""
    t = RowTiling.unpack(tiling_bytes)
    first = ctx.get_block_idx() * t.tile
    n = min(t.tile, t.rows - first)
    Tp = -(-t.tile // 32) * 32                             # pairs rounded up to whole 256-byte repeats
    pairs_q, values_q, indices_q = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1), TQue(TPosition.VECOUT, 1)
    ctx.pipe.init_buffer(pairs_q, 1, Tp * 2 * 4, name="pairs")
    ctx.pipe.init_buffer(values_q, 1, Tp * 4, name="values")
    ctx.pipe.init_buffer(indices_q, 1, Tp * 4, name="indices")
    pairs = pairs_q.alloc_tensor(np.float32)
    ctx.data_copy_pad(pairs, pairs_gm[2 * first], DataCopyExtParams(1, 2 * n * 4, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))
    pairs_q.enque(pairs)
    pairs = pairs_q.deque(np.float32)
    values, indices = values_q.alloc_tensor(np.float32), indices_q.alloc_tensor(np.int32)
    # YOUR CODE: two GatherMask calls over the 2n floats (GatherMaskParams(1, repeats, 8, 0), a
    # repeat is 64 floats): built-in pattern 1 keeps the even elements (values), 2 the odd ones
    # (index bits: gather through .reinterpret_cast(np.uint32) views of both tensors).
    ### BEGIN SOLUTION
    params = GatherMaskParams(1, -(-2 * n // 64), 8, 0)
    ctx.gather_mask(values, pairs, 1, False, 0, params)
    ctx.gather_mask(indices.reinterpret_cast(np.uint32), pairs.reinterpret_cast(np.uint32), 2, False, 0, params)
    ### END SOLUTION
    pairs_q.free_tensor(pairs)
    values_q.enque(values)
    indices_q.enque(indices)
    values, indices = values_q.deque(np.float32), indices_q.deque(np.int32)
    ctx.data_copy_pad(values_gm[first], values, DataCopyExtParams(1, n * 4, 0, 0, 0))
    ctx.data_copy_pad(indices_gm[first], indices, DataCopyExtParams(1, n * 4, 0, 0, 0))
    values_q.free_tensor(values)
    indices_q.free_tensor(indices)


def _pairs(case):
    rng = np.random.default_rng([case["rows"], case["tile"]])
    pairs = np.empty((case["rows"], 2), np.float32)
    pairs[:, 0] = rng.standard_normal(case["rows"])
    pairs[:, 1] = rng.integers(0, 4096, case["rows"]).astype(np.uint32).view(np.float32)
    return pairs.reshape(-1)


def _gather_cases(rng):
    fixed = [(64, 32), (100, 32), (7, 7), (1, 1), (1000, 256)]
    fixed += [(int(rng.integers(1, 500)), int(rng.integers(1, 300))) for _ in range(2)]
    return [{"rows": r, "tile": s, "label": f"{r} pairs, {s} a tile"} for r, s in fixed]


def _gather_launch(fn, case, hw, timing_only):
    t = RowTiling(case["rows"], 2, case["tile"], 1)
    pairs = GlobalTensor.from_array(_pairs(case), "pairs", timing_only=timing_only)
    values = GlobalTensor.from_array(sentinel_array(t.rows, np.float32), "values", timing_only=timing_only)
    indices = GlobalTensor.from_array(sentinel_array(t.rows, np.int32), "indices", timing_only=timing_only)
    timeline = launch(fn, t.block_dim, pairs, values, indices, t.pack(), hw=hw, timing_only=timing_only)
    return (None if timing_only else {"values": values.data, "indices": indices.data}), timeline


def _gather_reference(case):
    pairs = _pairs(case)
    return {"values": pairs[0::2].copy(), "indices": pairs.view(np.uint32)[1::2].astype(np.int32)}


def _row_locate(case, name, i, per_row=1):
    row = i // per_row
    return f"row {row}: block {row // case['tile']} (its tile), row {row % case['tile']} of it"


GATHER_TIMED = {"rows": 16384, "tile": 512, "label": "16384 pairs, 512 a tile"}

register_exercise(KernelExercise(
    id="06.gather_mask", notebook="ex06", title="Split (value, index) pairs with GatherMask",
    teaches="GatherMask's built-in patterns (1 even, 2 odd), its repeat parameters, and ReinterpretCast to "
            "move index bits through a float tensor — the step after Sort32 / WholeReduceMax in v3 and v4",
    solution=gather_mask_solution, cell_name="my_split_pairs",
    imports="import numpy as np\nfrom npu_lab import npu_kernel\n"
            "from npu_lab.lang import DataCopyExtParams, DataCopyPadExtParams, GatherMaskParams, TPosition, TQue\n"
            "from npu_lab.course.ex06 import RowTiling",
    place_after="### Why EQ and not NE (before 06.topk_rounds, whose rounds split WholeReduceMax's pairs this way)",
    cases=_gather_cases, launch=_gather_launch, reference=_gather_reference, locate=_row_locate,
    target=lambda hw: (_gather_launch(gather_mask_solution, GATHER_TIMED, hw, True)[1].total_us * 1.05,
                       "the course's solution + 5 %"),
    target_case=GATHER_TIMED, tolerance=(0.0, 0.0),
    slow_hint="two GatherMask instructions per tile are all it takes"))


@npu_kernel
def topk_rounds_solution(ctx, x_gm, values_gm, indices_gm, tiling_bytes):
    """Top-K of every row of this block's tile, on the vector unit, in K rounds over the whole
    tile: x float32 [rows, E] (E a multiple of 8, ≤ 64); outputs [K, rows] (round k's values and
    indices for every row). Each UB row is 64 floats: one 256-byte repeat per row."""
    t = RowTiling.unpack(tiling_bytes)
    first = ctx.get_block_idx() * t.tile
    rows, E, K, N, Tp = min(t.tile, t.rows - first), t.cols, t.K, t.rows, -(-t.tile // 32) * 32
    x_q, v_q, i_q = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1), TQue(TPosition.VECOUT, 1)
    ctx.pipe.init_buffer(x_q, 1, t.tile * 64 * 4, name="scores")
    ctx.pipe.init_buffer(v_q, 1, K * Tp * 4, name="topk_values")
    ctx.pipe.init_buffer(i_q, 1, K * Tp * 4, name="topk_indices")
    bufs = [TBuf(TPosition.VECCALC) for _ in range(5)]
    for buf, nbytes, name in zip(bufs, (t.tile * 64 * 4, -(-2 * t.tile // 64) * 256, Tp * 32, t.tile * 8, 256),
                                 ("neg_inf", "pairs", "argmax_bcast", "select_mask", "iota")):
        ctx.pipe.init_buffer(buf, nbytes, name=name)
    neg_inf, pairs, bcast = bufs[0].get(np.float32), bufs[1].get(np.float32), bufs[2].get(np.int32)
    mask, iota = bufs[3].get(np.uint8), bufs[4].get(np.int32)
    ctx.duplicate(neg_inf, float("-inf"), rows * 64)
    ctx.create_vec_index(iota, 0, 64)                      # lanes 0..63 of a repeat
    x = x_q.alloc_tensor(np.float32)                       # row r at x[r * 64], lanes E..63 unused
    ctx.data_copy(x, x_gm[first * E], DataCopyParams(rows, E // 8, 0, (64 - E) // 8))
    x_q.enque(x)
    x = x_q.deque(np.float32)
    values, indices = v_q.alloc_tensor(np.float32), i_q.alloc_tensor(np.int32)
    params = GatherMaskParams(1, -(-2 * rows // 64), 8, 0)
    for k in range(K):
        # YOUR CODE: round k — [max, lane] of every row (ctx.whole_reduce_max: mask E lanes, one
        # repeat per row, 8 blocks between rows); split the pairs into values[k * Tp] and
        # indices[k * Tp] (GatherMask patterns 1 and 2); then, unless it is the last round, knock
        # each row's winner out: Brcb the row's index into a block (BrcbRepeatParams(1, 8)),
        # Compare it EQ with `iota` (BinaryRepeatParams(1, 1, 0, 8, 0, 1)), Select -inf there.
        ### BEGIN SOLUTION
        ctx.whole_reduce_max(pairs, x, E, rows, 1, 1, 8)
        ctx.gather_mask(values[k * Tp], pairs, 1, False, 0, params)
        ctx.gather_mask(indices[k * Tp].reinterpret_cast(np.uint32), pairs.reinterpret_cast(np.uint32), 2, False, 0, params)
        if k + 1 < K:
            ctx.brcb(bcast, indices[k * Tp], -(-rows // 8), BrcbRepeatParams(1, 8))
            ctx.compare(mask, iota, bcast, "EQ", 64, rows, BinaryRepeatParams(1, 1, 0, 8, 0, 1))
            ctx.select(x, mask, neg_inf, x, SELMODE.VSEL_TENSOR_TENSOR_MODE, rows * 64)
        ### END SOLUTION
    x_q.free_tensor(x)
    v_q.enque(values)
    i_q.enque(indices)
    values, indices = v_q.deque(np.float32), i_q.deque(np.int32)
    gap = (Tp - -(-rows // 8) * 8) // 8                    # UB gap between rounds, 32-byte blocks
    ctx.data_copy_pad(values_gm[first], values, DataCopyExtParams(K, rows * 4, gap, (N - rows) * 4, 0))
    ctx.data_copy_pad(indices_gm[first], indices, DataCopyExtParams(K, rows * 4, gap, (N - rows) * 4, 0))
    v_q.free_tensor(values)
    i_q.free_tensor(indices)


def _topk_cases(rng):
    fixed = [(16, 64, 2, 16), (37, 8, 8, 16), (20, 16, 1, 8), (100, 24, 4, 32), (3, 64, 64, 8)]
    fixed += [(int(rng.integers(1, 120)), 8 * int(rng.integers(1, 9)), 0, 32) for _ in range(2)]
    fixed = [(r, e, k or int(rng.integers(1, e + 1)), s) for r, e, k, s in fixed]
    return [{"rows": r, "E": e, "K": k, "tile": s, "label": f"rows={r}, E={e}, K={k}, tile={s}"} for r, e, k, s in fixed]


def _topk_x(case):
    rng = np.random.default_rng([case["rows"], case["E"], case["K"]])
    return rng.standard_normal((case["rows"], case["E"])).astype(np.float32)


def _topk_launch(fn, case, hw, timing_only):
    t = RowTiling(case["rows"], case["E"], case["tile"], case["K"])
    n = t.rows * t.K
    x = GlobalTensor.from_array(_topk_x(case), "x", timing_only=timing_only)
    v = GlobalTensor.from_array(sentinel_array(n, np.float32), "values", timing_only=timing_only)
    i = GlobalTensor.from_array(sentinel_array(n, np.int32), "indices", timing_only=timing_only)
    timeline = launch(fn, t.block_dim, x, v, i, t.pack(), hw=hw, timing_only=timing_only)
    return (None if timing_only else {"values": v.data, "indices": i.data}), timeline


def _topk_reference(case):
    """[K, rows]: round k holds every row's k-th largest (ties: the lower index first)."""
    x = _topk_x(case)
    order = np.argsort(-x, axis=1, kind="stable")[:, :case["K"]]
    return {"values": np.take_along_axis(x, order, 1).T.copy(), "indices": order.T.astype(np.int32).copy()}


def _topk_locate(case, name, i):
    k, row = divmod(i, case["rows"])
    return f"round {k}, row {row}: block {row // case['tile']} (its tile)"


TOPK_TIMED = {"rows": 4096, "E": 64, "K": 4, "tile": 32, "label": "rows=4096, E=64, K=4, tile=32"}

register_exercise(KernelExercise(
    id="06.topk_rounds", notebook="ex06", title="The K-round vector top-K",
    teaches="v3's idea: each round one WholeReduceMax gives every row's max and lane, GatherMask splits "
            "the pairs, Brcb + Compare(EQ) + Select knock the winner out — K rounds over the whole tile "
            "instead of a heap per point",
    solution=topk_rounds_solution, cell_name="my_topk_rounds",
    imports="import numpy as np\nfrom npu_lab import npu_kernel\n"
            "from npu_lab.lang import (SELMODE, BinaryRepeatParams, BrcbRepeatParams, DataCopyExtParams, DataCopyParams,\n"
            "                          GatherMaskParams, TBuf, TPosition, TQue)\n"
            "from npu_lab.course.ex06 import RowTiling",
    place_after="### After: K rounds over the whole tile, on the vector unit (before ## The kernel)",
    cases=_topk_cases, launch=_topk_launch, reference=_topk_reference, locate=_topk_locate,
    target=lambda hw: (_topk_launch(topk_rounds_solution, TOPK_TIMED, hw, True)[1].total_us * 1.05,
                       "the course's solution + 5 %"),
    target_case=TOPK_TIMED, tolerance=(0.0, 0.0),
    slow_hint="one instruction per round for all rows of the tile, not one per row"))
