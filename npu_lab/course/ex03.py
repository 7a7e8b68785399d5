"""Exercise checks for notebook 03 (dynamic tiling).

``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult`: a message (a ``str``
to print) that says what is right or wrong and gives a hint, with ``.correct`` True, False, or
None when no answer was given yet. Every expected answer is computed here from the library
(timing-only runs, the UB budget, the presets), never typed in, so a check stays true when the
model changes.
"""

from __future__ import annotations



from ..data import ARTICLE_SWEEP_SHAPE
from .checks import checked_keywords
from .checks import (BYTES, CheckResult, missing as _missing, parse_whole as _whole, right as _right, wrong as _wrong)
from ..kernels.moe_gating import (UbBudgetError, calculate_moe_gating_tiling, moe_ub_budget,
                                 moe_ub_bytes, moe_ub_capacity)
from ..presets import get_preset


#: The shape the exercises use unless they say otherwise: the article's B=1, S=1024, E=64, K=2.
SHAPE = dict(ARTICLE_SWEEP_SHAPE)
#: tileS values the sweet-spot exercises compare.
SWEEP_TILE_S = (1, 2, 4, 8, 16, 32, 64)
#: One row of logits whose small probabilities underflow to 0 in float32.
UNDERFLOW_LOGITS = (-300.0, 0.0, -200.0)


#: Exercise 03.1 (the lesson shows E=4096, K=2, v2 on the 910B2, where 5 points fit).
LARGEST_TILE_S_CASE = dict(E=1472, K=8, version="v2", chip="ascend-310p3")
#: Exercise 03.2 (the lesson's table is the 910B2's).
HALVING_CASE = dict(version="v2", K=2, chip="ascend-310p3")
#: Exercise 03.3 (the lesson's budget table is tileS=8, E=64, K=2).
HONEST_UB_CASE = dict(version="v2", tile_s=2, E=128, K=2)

__all__ = ['first_e_below_tile_s', 'check_largest_tile_s', 'check_tile_s_halving_e', 'check_honest_ub_bytes',
           'expected_answers', 'LARGEST_TILE_S_CASE', 'HALVING_CASE', 'HONEST_UB_CASE']


def expected_answers() -> dict[str, object]:
    """Each check's truth for the case notebook 03 asks about (what the check itself compares to)."""
    return {"check_largest_tile_s": largest_tile_s_truth(**LARGEST_TILE_S_CASE),
            "check_tile_s_halving_e": first_e_below_tile_s(8, **HALVING_CASE),
            "check_honest_ub_bytes": honest_ub_bytes_truth(**HONEST_UB_CASE)}


def honest_ub_bytes_truth(version: str, tile_s: int, E: int, K: int) -> int:
    """UB bytes ``version`` holds for ``tile_s`` points at E, K (every buffer, every copy)."""
    return moe_ub_bytes(version, tile_s, E, K)


def largest_tile_s_truth(E: int, K: int, version: str, chip: str) -> int:
    """The most points (tileB = 1) whose ``version`` buffers fit ``chip``'s UB at E, K."""
    hw = get_preset(chip)
    return moe_ub_capacity(version, E, K, hw.ub_usable_bytes, hw.block_bytes)

@checked_keywords
def first_e_below_tile_s(tile_s: int = 8, version: str = "v2", K: int = 2,
                         chip: str = "ascend-910b2") -> int:
    """The smallest E for which ``tile_s`` points no longer fit ``chip``'s UB with ``version``'s
    budget -- so the host rule halves tileS below ``tile_s`` from this E on (bisection on the
    budget, which grows with E)."""
    ub = get_preset(chip).ub_usable_bytes

    def fits(e):
        return moe_ub_bytes(version, tile_s, e, K) <= ub
    if not fits(K):
        return K
    lo, hi = K, 2 * K
    while fits(hi):             # invariant: fits(lo)
        lo, hi = hi, hi * 2
    while hi - lo > 1:          # invariant: fits(lo) and not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return hi


@checked_keywords
def check_largest_tile_s(answer, E: int = LARGEST_TILE_S_CASE["E"], K: int = LARGEST_TILE_S_CASE["K"],
                         version: str = LARGEST_TILE_S_CASE["version"],
                         chip: str = LARGEST_TILE_S_CASE["chip"]) -> CheckResult:
    """What is the largest tileS (any whole number, tileB = 1) whose ``version`` buffers fit the
    UB of ``chip`` for E experts, K (default: E = 1472, K = 8, v2 on the 310P3)? Answer: a whole
    number."""
    if answer is None:
        return _missing("a whole number of points")
    hw = get_preset(chip)
    truth = largest_tile_s_truth(E, K, version, chip)
    host = calculate_moe_gating_tiling(1, SHAPE["S"], E, K, hw, version=version).tileS
    value = _whole(answer, ("points",))
    if value is None or value < 1:
        return _wrong(f"Answer a whole number of points >= 1, not {answer!r}.")

    def need(t):
        return moe_ub_bytes(version, t, E, K, hw.block_bytes)
    if value == truth:
        extra = (f" The host rule only tries 8, 4, 2, 1 and so picks tileS={host}: it leaves "
                 f"{hw.ub_usable_bytes - need(host):,} B unused." if host != truth else "")
        return _right(f"{truth} points need {need(truth):,} B of the {hw.ub_usable_bytes:,} B UB; {truth + 1} would "
                      f"need {need(truth + 1):,} B.{extra}")
    if value > truth:
        return _wrong(f"{value} points need {need(value):,} B of UB with {version}'s buffers, more than the "
                      f"{hw.ub_usable_bytes:,} B of the {hw.name}. Remember that {version} keeps "
                      f"{'two copies' if version != 'v1' else 'one copy'} of every queue buffer.")
    if value == host:
        return _wrong(f"{value} is what the host rule picks (it halves from 8), but a larger tile fits too. "
                      "Hint: `moe_ub_capacity(version, E, K, hw.ub_usable_bytes)`, or raise the tile by one "
                      "until `moe_ub_bytes` passes the UB size.")
    return _wrong(f"{value} points fit ({need(value):,} B), but so do more. Hint: each point costs about "
                  f"{need(2) - need(1):,} B with {version}'s buffers.")


@checked_keywords
def check_tile_s_halving_e(answer, version: str = HALVING_CASE["version"], K: int = HALVING_CASE["K"],
                           chip: str = HALVING_CASE["chip"]) -> CheckResult:
    """From which E on (the smallest E) does the host rule choose tileS < 8 for ``version`` on
    ``chip`` (default v2, K = 2, the 310P3)? Answer: a whole number of experts."""
    if answer is None:
        return _missing("a whole number of experts")
    hw = get_preset(chip)
    truth = first_e_below_tile_s(8, version, K, chip)
    # the article's formula, 8 * (E*4 + K*8) bytes, against its assumed 256 KB
    article_e = (256 * 1024 // 8 - K * 8) // 4 + 1
    value = _whole(answer, ("experts",))
    if value is None:
        return _wrong(f"Answer a whole number of experts, not {answer!r}.")
    def tile(e):
        """The host's tileS at E = e, or None when not even one row fits the UB."""
        try:
            return calculate_moe_gating_tiling(1, SHAPE["S"], e, K, hw, version=version).tileS
        except UbBudgetError:
            return None
    if value < K:
        return _wrong(f"E={value} experts cannot hold the K={K} chosen per token: answer a whole number "
                      f"of experts >= {K}.")
    if value == truth:
        return _right(f"At E={truth - 1} tileS is still {tile(truth - 1)}; at E={truth} eight points need "
                      f"{moe_ub_bytes(version, 8, truth, K):,} B > {hw.ub_usable_bytes:,} B, so tileS halves to "
                      f"{tile(truth)}. By the article's own formula and 256 KB it would stay 8 until "
                      f"E={article_e}.")
    if value == article_e:
        return _wrong(f"{value} is where the article's formula (no alignment, one copy, 256 KB) halves "
                      f"tileS. The honest {version} budget on the {hw.name}'s {hw.ub_usable_bytes / 1024:.2f} KB usable "
                      "halves it much earlier.")
    if value < truth:
        return _wrong(f"At E={value} the host rule still picks tileS={tile(value)}. Try a larger E.")
    now = tile(value)
    already = f"tileS is already {now}" if now is not None else "not even one row fits the UB"
    return _wrong(f"At E={value} {already}; it dropped earlier. Try a smaller E "
                  "(bisection: halve the interval each time).")


@checked_keywords
def check_honest_ub_bytes(answer, version: str = HONEST_UB_CASE["version"],
                          tile_s: int = HONEST_UB_CASE["tile_s"], E: int = HONEST_UB_CASE["E"],
                          K: int = HONEST_UB_CASE["K"]) -> CheckResult:
    """How many bytes of UB does ``version`` hold for ``tile_s`` points at E, K (default v2,
    tileS = 2, E = 128, K = 2; 32-byte aligned buffers, every copy)? Answer: a whole number of
    bytes."""
    if answer is None:
        return _missing("a whole number of bytes")
    truth = honest_ub_bytes_truth(version, tile_s, E, K)
    formula = tile_s * (E * 4 + K * 8)
    value = _whole(answer, BYTES)
    if value is None:
        return _wrong(f"Answer a whole number of bytes, not {answer!r}.")
    buffers = moe_ub_budget(version, tile_s, E, K)
    listing = ", ".join(f"{b.name} {b.elements} \u00d7 {b.copies}" for b in buffers)
    if value == truth:
        return _right(f"{truth:,} B against the article's {formula:,} B. The buffers (elements \u00d7 "
                      f"copies): {listing}. {version} keeps two copies of every queue buffer, and each "
                      "point's row starts on a 32-byte block: K values are padded to a whole block.")
    if value == formula:
        return _wrong(f"{formula:,} B is the article's formula: one copy of each buffer, no padding. "
                      f"Hint: `moe_ub_budget({version!r}, {tile_s}, {E}, {K})` lists every buffer.")
    return _wrong(f"{value:,} B is not it. Hint: per point, {E} float32 scores, {K} float32 top-k values "
                  f"and {K} int32 indices, each row padded to whole 32-byte blocks; {tile_s} points; "
                  "times the number of copies.")


# ---- kernel exercises ---------------------------------------------------------------------------
# 03.padded_store: a tile of `points` results of K values each: its bytes are rarely whole blocks.
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402

from ..lang import (DataCopyExtParams, DataCopyPadExtParams, GlobalTensor, TPosition, TQue,  # noqa: E402
                    launch, npu_kernel)
from ..lang.tiling_struct import Int32Struct  # noqa: E402
from .kernel_check import KernelExercise, register_exercise, sentinel_array  # noqa: E402

PADDED_STORE_ALPHA = 0.5


@dataclass(frozen=True)
class PointTiling(Int32Struct):
    """Host tiling: `points` points of K values, `tile_s` points per tile, one block per tile."""

    points: int
    K: int
    tile_s: int

    @property
    def block_dim(self) -> int:
        return -(-self.points // self.tile_s)


@npu_kernel
def padded_store_solution(ctx, x_gm, y_gm, alpha, tiling_bytes):
    """y = alpha·x for this block's tile of points × K values (float32 or float16). Pipes: MTE2
    (tile in) → V (Muls) → MTE3 (tile out). The last tile may be short."""
    t = PointTiling.unpack(tiling_bytes)
    first = ctx.get_block_idx() * t.tile_s
    points = min(t.tile_s, t.points - first)
    n, size = points * t.K, x_gm.dtype.itemsize
    x_in, y_out = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
    ctx.pipe.init_buffer(x_in, 1, -(-t.tile_s * t.K * size // 32) * 32, name="x_in")
    ctx.pipe.init_buffer(y_out, 1, -(-t.tile_s * t.K * size // 32) * 32, name="y_out")
    x = x_in.alloc_tensor(x_gm.dtype)
    # YOUR CODE: load the tile's n = points * K values from x_gm[first * K]: n * size bytes are
    # rarely a multiple of 32, and DataCopy moves whole 32-byte blocks only.
    ### BEGIN SOLUTION
    ctx.data_copy_pad(x, x_gm[first * t.K], DataCopyExtParams(1, n * size, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))
    ### END SOLUTION
    x_in.enque(x)
    x = x_in.deque(x_gm.dtype)
    y = y_out.alloc_tensor(x_gm.dtype)
    ctx.muls(y, x, alpha, n)
    x_in.free_tensor(x)
    y_out.enque(y)
    y = y_out.deque(x_gm.dtype)
    # YOUR CODE: store exactly n values to y_gm[first * K] (no more: the next tile's block owns
    # the bytes after them).
    ### BEGIN SOLUTION
    ctx.data_copy_pad(y_gm[first * t.K], y, DataCopyExtParams(1, n * size, 0, 0, 0))
    ### END SOLUTION
    y_out.free_tensor(y)


def _padded_cases(rng):
    fixed = [(64, 2, 8, "float32"), (37, 2, 8, "float32"), (10, 1, 4, "float32"), (9, 3, 3, "float16"),
             (100, 8, 16, "float16"), (5, 7, 5, "float32")]
    fixed += [(int(rng.integers(1, 300)), int(rng.integers(1, 9)), int(rng.integers(1, 40)), "float32")
              for _ in range(2)]
    return [{"points": p, "K": k, "tile_s": s, "dtype": d, "label": f"points={p}, K={k}, tileS={s}, {d}"}
            for p, k, s, d in fixed]


def _padded_x(case):
    rng = np.random.default_rng([case["points"], case["K"], case["tile_s"]])
    return rng.standard_normal(case["points"] * case["K"]).astype(case["dtype"])


def _padded_launch(fn, case, hw, timing_only):
    t = PointTiling(case["points"], case["K"], case["tile_s"])
    n = case["points"] * case["K"]
    x = GlobalTensor.from_array(_padded_x(case), "x", timing_only=timing_only)
    y = GlobalTensor.from_array(sentinel_array(n, case["dtype"]), "y", timing_only=timing_only)
    timeline = launch(fn, t.block_dim, x, y, PADDED_STORE_ALPHA, t.pack(), hw=hw, timing_only=timing_only)
    return (None if timing_only else {"y": y.data}), timeline


def _padded_reference(case):
    x = _padded_x(case)
    return {"y": (x * np.asarray(PADDED_STORE_ALPHA, x.dtype)).astype(x.dtype)}


def _padded_locate(case, name, i):
    point = i // case["K"]
    return f"point {point}: block {point // case['tile_s']} (its tile)"


PADDED_TIMED = {"points": 4096, "K": 2, "tile_s": 64, "dtype": "float32", "label": "points=4096, K=2, tileS=64"}


def _padded_target(hw):
    """The course's solution at the timed shape + 5 %."""
    return (_padded_launch(padded_store_solution, PADDED_TIMED, hw, True)[1].total_us * 1.05,
            "the course's solution + 5 %")


register_exercise(KernelExercise(
    id="03.padded_store", notebook="ex03", title="A short last tile: DataCopyPad in and out",
    teaches="a tile's byte length (points·K·sizeof) is rarely whole 32-byte blocks — above all the short last "
            "tile the host's tiling leaves — so both copies are DataCopyPad with blockLen in bytes",
    solution=padded_store_solution, cell_name="my_padded_copy",
    imports="import numpy as np\nfrom npu_lab import npu_kernel\n"
            "from npu_lab.lang import DataCopyExtParams, DataCopyPadExtParams, TPosition, TQue\n"
            "from npu_lab.course.ex03 import PointTiling",
    place_after="## The struct the host builds (after tilesPerBatch and the short last tile are explained)",
    cases=_padded_cases, launch=_padded_launch, reference=_padded_reference, locate=_padded_locate,
    target=_padded_target, target_case=PADDED_TIMED, tolerance=(1e-3, 1e-6),
    slow_hint="one DataCopyPad per tile each way is all it takes"))
