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
              f"never go to HBM and back. v1 reads each token's {E} logits once ({E * 4} B) and writes only its "
              f"{K} indices and {K} weights ({8 * K} B); the chain also writes all {E} softmax probabilities, "
              "reads them again to sort, and writes and re-reads the top-K before renormalising.")
    if value == truth:
        return _right(detail)
    if value in (truth / 1000, truth / 1024, truth / 1e6, truth / 2 ** 20):
        return _wrong(f"{value:g} looks like KB or MB: answer in bytes.")
    if value == chain or value == fused:
        return _wrong(f"{value:,.0f} B is what one of the two moves, not the difference.")
    return _wrong(f"{value:,.0f} B is not it. Hint: count the bytes per token each way (the logits in, the "
                  "probabilities out and back, the top-K out and back, the results out), or read "
                  f"`simulate_moe_gating({B}, {S}, {E}, {K}, version=v).timeline.hbm_bytes` for both.")


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


def double_buffer_gain_pct(chip: str = DB_GAIN_CASE["chip"], tile_s: int = DB_GAIN_CASE["tile_s"]) -> float:
    """Percent by which v2 cuts v1's latency at the article's shape, ``tile_s``, on ``chip``."""
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    v1, v2 = (simulate_moe_gating(B, S, E, K, version=v, hw=chip, tile_s=tile_s).latency_us for v in ("v1", "v2"))
    return 100 * (1 - v2 / v1)


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
              f"claims 15\u201320 % at tileS = 8. Part of it ({from_loop:.0f} points, see v2_bad_sync at "
              f"{lat['v2_bad_sync']:.1f} \u00b5s) comes from launching one looping block per core instead of "
              "one block per tile; the rest is the overlap of the next tile's copy-in with this tile's compute.")
    if abs(value - truth) <= 2:
        return _right(detail)
    return _wrong(f"{value:.0f} % is off. Hint: `simulate_moe_gating(1, 1024, 64, 2, version=v, hw='{chip}', "
                  f"tile_s={tile_s}).latency_us` for v = 'v1' and 'v2'; gain = 1 - v2 / v1.")
