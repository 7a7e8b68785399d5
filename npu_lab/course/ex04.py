"""Exercise checks for notebook 04 (the fused kernel).

``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult`: a message (a ``str``
to print) that says what is right or wrong and gives a hint, with ``.correct`` True, False, or
None when no answer was given yet. Every expected answer is computed here from the library
(timing-only runs, the presets), never typed in, so a check stays true when the model changes.
Each exercise asks about a case *varied* from the one the notebook demonstrates (another shape,
tileS or chip), so its answer is never printed above it; :func:`expected_answers` gives the truth
of every check, computed by the same function the check uses.
"""

from __future__ import annotations

import math

from ..data import ARTICLE_SWEEP_SHAPE
from .checks import checked_keywords
from .checks import (BYTES, parse_percent, CheckResult, missing as _missing, parse_number, parse_whole as _whole,
                     right as _right, wrong as _wrong)
from ..kernels.moe_gating import simulate_moe_gating
from ..presets import get_preset


#: The shape the notebook demonstrates: the article's B=1, S=1024, E=64, K=2.
SHAPE = dict(ARTICLE_SWEEP_SHAPE)
#: Exercise 04.1 (what fusing saves): a larger shape than the one the notebook measures.
FUSING_SHAPE = dict(B=1, S=4096, E=128, K=4)
#: Exercise 04.2 (waves): v1 at tileS = 2 for S = 4096 tokens on the 910B2 preset.
WAVES_CASE = dict(S=4096, tile_s=2, chip="ascend-910b2")
#: Exercise 04.3 (double buffering): tileS = 4 on the 'article' preset (the notebook's sweep is v1 only).
DB_GAIN_CASE = dict(chip="article", tile_s=4)
#: One row of logits whose small probabilities underflow to 0 in float32.
UNDERFLOW_LOGITS = (-300.0, 0.0, -200.0)


__all__ = ['check_fusing_saves_bytes', 'check_v1_waves', 'check_double_buffer_gain', 'expected_answers',
           'fusing_saved_bytes', 'v1_waves', 'double_buffer_gain_pct']


def expected_answers() -> dict[str, object]:
    """The truth of every check of notebook 04, by check name (computed as the checks compute it)."""
    return {"check_fusing_saves_bytes": fusing_saved_bytes(),
            "check_v1_waves": v1_waves(),
            "check_double_buffer_gain": double_buffer_gain_pct()}


@checked_keywords
def fusing_saved_bytes(B: int = FUSING_SHAPE["B"], S: int = FUSING_SHAPE["S"], E: int = FUSING_SHAPE["E"],
                       K: int = FUSING_SHAPE["K"], chip: str = "ascend-910b2") -> int:
    """HBM bytes the discrete chain moves minus the bytes v1 moves (tileS = 8), for shape (B, S, E, K)."""
    chain = simulate_moe_gating(B, S, E, K, version="discrete", hw=chip).timeline.hbm_bytes
    fused = simulate_moe_gating(B, S, E, K, version="v1", hw=chip, tile_s=8).timeline.hbm_bytes
    return int(chain - fused)


def check_fusing_saves_bytes(answer) -> CheckResult:
    """How many HBM bytes does fusing (v1) save against the discrete chain at B=1, S=4096, E=128,
    K=4 on the 910B2 preset? Answer: bytes (exact; '4 MB' style answers are refused)."""
    if answer is None:
        return _missing("a number of bytes")
    B, S, E, K = (FUSING_SHAPE[k] for k in "BSEK")
    truth = fusing_saved_bytes()
    value = parse_number(answer, BYTES)
    if value is None:
        return _wrong(f"{answer!r} is not a number of bytes.")
    chain = simulate_moe_gating(B, S, E, K, version="discrete").timeline.hbm_bytes
    fused = simulate_moe_gating(B, S, E, K, version="v1", tile_s=8).timeline.hbm_bytes
    detail = (f"The chain moves {chain:,} B, v1 {fused:,} B: {truth:,} B ({truth / (B * S):,.0f} B per token) "
              f"never cross HBM. v1 reads each token's {E} logits once ({E * 4} B) and writes only its "
              f"{K} indices and {K} weights ({8 * K} B); the chain also writes all {E} softmax probabilities and "
              "the top-K to global memory (every written byte crosses HBM once). Reading them back costs no HBM "
              "bytes here: the next launch finds them in L2 (notebook 02).")
    if value == truth:
        return _right(detail)
    if value in (truth / 1000, truth / 1024, truth / 1e6, truth / 2 ** 20):
        return _wrong(f"{value:g} looks like KB or MB: answer in bytes.")
    if value == chain or value == fused:
        return _wrong(f"{value:,.0f} B is what one of the two moves, not the difference.")
    return _wrong(f"{value:,.0f} B is not it. Hint: count the bytes per token that cross HBM: the logits read "
                  "once, and every write (the probabilities, the top-K, the results); a launch that reads what "
                  "the one before wrote finds it in L2 (notebook 02). Or read "
                  f"`simulate_moe_gating({B}, {S}, {E}, {K}, version=v).timeline.hbm_bytes` for both.")


@checked_keywords
def v1_waves(S: int = WAVES_CASE["S"], tile_s: int = WAVES_CASE["tile_s"], chip: str = WAVES_CASE["chip"]) -> int:
    """Waves v1 runs at (B=1, S, E=64, K=2, tile_s) on ``chip``: ceil(blocks / vector cores)."""
    blocks = simulate_moe_gating(1, S, SHAPE["E"], SHAPE["K"], version="v1", hw=chip, tile_s=tile_s).block_dim
    return int(math.ceil(blocks / get_preset(chip).vector_cores))


def check_v1_waves(answer) -> CheckResult:
    """v1 at tileS = 2 for S = 4096 tokens (E = 64, K = 2) on the 910B2 preset: in how many waves do its
    blocks run? Answer: a whole number."""
    if answer is None:
        return _missing("a whole number of waves")
    S, tile_s, chip = WAVES_CASE["S"], WAVES_CASE["tile_s"], WAVES_CASE["chip"]
    hw = get_preset(chip)
    truth = v1_waves()
    blocks = simulate_moe_gating(1, S, SHAPE["E"], SHAPE["K"], version="v1", hw=chip, tile_s=tile_s).block_dim
    value = _whole(answer, ("waves", "wave"))
    if value is None:
        return _wrong(f"Answer a whole number of waves, not {answer!r}.")
    last = blocks - (truth - 1) * hw.vector_cores
    if value == truth:
        return _right(f"{blocks} blocks (one per tile of {tile_s} tokens) on {hw.vector_cores} cores: {truth} waves, "
                      f"the last with {last} blocks. Every block pays the scheduler's dispatch and its own first "
                      "DMA latency; v2 (notebook 05) launches one looping block per core instead.")
    if value == blocks // hw.vector_cores:
        return _wrong(f"{value} rounds down: the last, partial wave of {last} blocks still has to run.")
    return _wrong(f"{value} is not it. Hint: v1 launches one block per tile; how many tiles of {tile_s} tokens "
                  f"are there, and how many can the {hw.name}'s vector cores run at once?")


@checked_keywords
def double_buffer_gain_pct(chip: str = DB_GAIN_CASE["chip"], tile_s: int = DB_GAIN_CASE["tile_s"]) -> float:
    """Percent by which v2 cuts v1's latency at the article's shape, ``tile_s``, on ``chip``."""
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    v1, v2 = (simulate_moe_gating(B, S, E, K, version=v, hw=chip, tile_s=tile_s).latency_us for v in ("v1", "v2"))
    return 100 * (1 - v2 / v1)


@checked_keywords
def check_double_buffer_gain(answer, chip: str = DB_GAIN_CASE["chip"], tile_s: int = DB_GAIN_CASE["tile_s"]) -> CheckResult:
    """By what percentage does v2 (double-buffered) cut v1's latency at tileS = 4 on the
    ``article`` preset (article shape)? Answer: a percentage (or fraction); within 2 points counts."""
    if answer is None:
        return _missing("a percentage such as 10 (or a fraction such as 0.1)")
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    lat = {v: simulate_moe_gating(B, S, E, K, version=v, hw=chip, tile_s=tile_s).latency_us
           for v in ("v1", "v2_bad_sync", "v2")}
    truth = double_buffer_gain_pct(chip, tile_s)
    from_loop = 100 * (1 - lat["v2_bad_sync"] / lat["v1"])
    value = parse_percent(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a percentage: answer a number such as 25 or '25%' "
                      "(or a fraction such as 0.25).")
    detail = (f"v1 {lat['v1']:.1f} \u00b5s, v2 {lat['v2']:.1f} \u00b5s: {truth:.0f} % less. The article "
              f"claims 15\u201320 % at tileS = 8. Part of it ({from_loop:.0f} points: a v2 that loops one block per "
              f"core but whose flags keep each load from overlapping the compute takes {lat['v2_bad_sync']:.1f} "
              "\u00b5s; notebook 05 shows it) comes from launching one looping block per core instead of one block per "
              "tile; the rest is the overlap of the next tile's copy-in with this tile's compute.")
    if abs(value - truth) <= 2:
        return _right(detail)
    return _wrong(f"{value:.0f} % is off. Hint: `simulate_moe_gating(1, 1024, 64, 2, version=v, hw='{chip}', "
                  f"tile_s={tile_s}).latency_us` for v = 'v1' and 'v2'; gain = 1 - v2 / v1.")


# ---- kernel exercises ---------------------------------------------------------------------------
# 04.coalesce: v1 with one multi-block DataCopyPad per tile instead of one copy per point.
import numpy as np  # noqa: E402

from ..kernels.moe_gating import MoeGatingTiling  # noqa: E402
from ..kernels.moe_gating.fused import row_stride, scalar_topk_softmax  # noqa: E402
from ..lang import DataCopyExtParams, DataCopyPadExtParams, TBuf, TPosition, npu_kernel  # noqa: E402
from .kernel_check import (KernelExercise, moe_cases, moe_launcher, moe_locator, moe_reference,  # noqa: E402
                           register_exercise)


@npu_kernel
def moe_v1_coalesced_solution(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
    """v1 (one block per tile: MTE2 → S → MTE3 in turn) with the tile's scores loaded by ONE
    instruction: DataCopy when a row is whole 32-byte blocks, else one DataCopyPad of `points`
    blocks, each row padded to Es elements in UB."""
    t = MoeGatingTiling.unpack(tiling_bytes)
    b0, _b1, s0, s1 = t.tile_range(ctx.get_block_idx())
    first_row, points = b0 * t.S + s0, s1 - s0
    E, K, size = t.E, t.K, gate_gm.dtype.itemsize
    Es, Ks = row_stride(E, size), row_stride(K, 4)         # UB row strides (whole 32-B blocks)
    scores_buf, values_buf, indices_buf = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(scores_buf, t.tileBS * row_stride(E, 4) * 4, name="scores")
    ctx.pipe.init_buffer(values_buf, t.tileBS * Ks * 4, name="topk_values")
    ctx.pipe.init_buffer(indices_buf, t.tileBS * Ks * 4, name="topk_indices")
    scores = scores_buf.get(gate_gm.dtype)
    values, indices = values_buf.get(np.float32), indices_buf.get(np.int32)
    # YOUR CODE: load the tile's `points` rows of E scores (from gate_gm[first_row * E]) with ONE
    # instruction, row p landing at scores[p * Es]. (v1 issued one copy per point.)
    ### BEGIN SOLUTION
    if E * size % 32 == 0:
        ctx.data_copy(scores, gate_gm[first_row * E], points * E)
    else:
        ctx.data_copy_pad(scores, gate_gm[first_row * E], DataCopyExtParams(points, E * size, 0, 0, 0),
                          DataCopyPadExtParams(False, 0, 0, 0))
    ### END SOLUTION
    ctx.set_flag("MTE2_S", 0)                              # every row loaded: S may read
    ctx.wait_flag("MTE2_S", 0)
    for p in range(points):
        scalar_topk_softmax(ctx, scores[p * Es], values[p * Ks], indices[p * Ks], E, K)
    ctx.set_flag("S_MTE3", 0)                              # results in UB: the stores may start
    ctx.wait_flag("S_MTE3", 0)
    for p in range(points):
        row = first_row + p
        ctx.data_copy_pad(indices_gm[row * K], indices[p * Ks], DataCopyExtParams(1, K * 4, 0, 0, 0))
        ctx.data_copy_pad(weights_gm[row * K], values[p * Ks], DataCopyExtParams(1, K * 4, 0, 0, 0))


#: timed at tileS = 32 with E = 24 (a row is 96 B: not whole blocks, so DataCopyPad): at the article's
#: tileS = 8 the per-point copies cost under 1 % of v1's latency, too little for a target with room.
MOE_V1_TIMED = {"B": 1, "S": 1024, "E": 24, "K": 2, "dtype": "float32", "tile_s": 32,
                "label": "B=1, S=1024, E=24, K=2, float32, tileS=32"}


def _coalesce_target(hw):
    """Halfway between v1 and this exercise's solution at the timed shape (both computed from the
    library, never typed in): one copy per tile meets it with half the saving to spare, a kernel
    still copying per point misses it by as much."""
    from ..kernels.moe_gating import simulate_moe_gating
    from .kernel_check import moe_launcher as _ml

    t = MOE_V1_TIMED
    v1 = simulate_moe_gating(t["B"], t["S"], t["E"], t["K"], version="v1", hw=hw, tile_s=t["tile_s"]).latency_us
    best = _ml("v1")(moe_v1_coalesced_solution, t, hw, True)[1].total_us
    return (best + v1) / 2, (f"halfway between v1 ({v1:.2f} µs, a copy per point) and one copy per tile "
                             f"({best:.2f} µs))")


register_exercise(KernelExercise(
    id="04.coalesce", notebook="ex04", title="Coalesce the per-point copies",
    teaches="one multi-block DataCopyPad (blockCount = points, blockLen = E·sizeof bytes, rows padded to "
            "32 B in UB): one request, one issue and one burst instead of a DMA per point. The time saved "
            "is small (the check prints it): the per-point requests are in flight together, so their "
            "latencies already overlap, and v1's scalar heap, not MTE2, sets the pace; what drops is "
            "MTE2's busy time",
    solution=moe_v1_coalesced_solution, cell_name="my_moe_v1_coalesced",
    imports="import numpy as np\nfrom npu_lab import npu_kernel\n"
            "from npu_lab.lang import DataCopyExtParams, DataCopyPadExtParams, TBuf, TPosition\n"
            "from npu_lab.kernels.moe_gating import MoeGatingTiling\n"
            "from npu_lab.kernels.moe_gating.fused import row_stride, scalar_topk_softmax",
    place_after="## The timeline (after v1's timeline shows MTE2 busy with a copy per point)",
    cases=lambda rng: moe_cases(rng), launch=moe_launcher("v1", tile_s=8), reference=moe_reference,
    locate=moe_locator("v1", tile_s=8), target=_coalesce_target, target_case=MOE_V1_TIMED, speed=True,
    slow_hint="look at MTE2 in the timeline: each DMA instruction pays its own issue and a short burst, so "
              "one instruction for the whole tile (blockCount = points) is what saves time; the target is "
              "halfway between v1 and one copy per tile, so a kernel still copying per point misses it"))
