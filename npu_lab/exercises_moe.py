"""Exercise checks for the MoeGatingTopK notebooks (02 discrete chain, 03 tiling, 04 fused kernel).

``check_<name>(answer)`` returns a :class:`~npu_lab.exercises.CheckResult`: a message (a ``str``
to print) that says what is right or wrong and gives a hint, with ``.correct`` True, False, or
None when no answer was given yet. Every expected answer is computed here from the library
(timing-only runs, the UB budget, the presets), never typed in, so a check stays true when the
model changes.
"""

from __future__ import annotations

import math

import numpy as np

from .data import ARTICLE_SWEEP_SHAPE
from .checks import (BYTES, PERCENT, CheckResult, missing as _missing, parse_number as _number,
                     parse_whole as _whole, right as _right, wrong as _wrong)
from .kernels.moe_gating import (UbBudgetError, calculate_moe_gating_tiling, moe_gating_topk, moe_ub_bytes,
                                 moe_ub_capacity, simulate_moe_gating, sweep, unsupported_reason)
from .kernels.moe_gating.run import ALWAYS_NEEDS
from .presets import get_preset

__all__ = ["check_discrete_hbm_bytes", "check_discrete_launch_share", "check_underflow_second_expert",
           "check_largest_tile_s", "check_tile_s_halving_e", "check_honest_ub_bytes",
           "check_sweet_spot", "check_double_buffer_gain", "check_missing_instruction", "first_e_below_tile_s",
           "SWEEP_TILE_S", "UNDERFLOW_LOGITS"]

#: The shape the exercises use unless they say otherwise: the article's B=1, S=1024, E=64, K=2.
SHAPE = dict(ARTICLE_SWEEP_SHAPE)
#: tileS values the sweet-spot exercises compare.
SWEEP_TILE_S = (1, 2, 4, 8, 16, 32, 64)
#: One row of logits whose small probabilities underflow to 0 in float32.
UNDERFLOW_LOGITS = (-300.0, 0.0, -200.0)










def _percent(answer):
    """A share as a percentage: 0.74, '74%' and 74 all mean 74 %."""
    value = _number(answer, PERCENT)
    if value is None:
        return None
    if isinstance(answer, str) and answer.strip().endswith("%"):
        return value
    return value * 100 if abs(value) <= 1 else value


# ----------------------------------------------------------------------------- notebook 02
def check_discrete_hbm_bytes(answer) -> CheckResult:
    """How many bytes of HBM traffic does the discrete chain (Softmax → TopK → Renormalise) move
    at B=1, S=1024, E=64, K=2 with float32 logits? Answer: a whole number of bytes."""
    if answer is None:
        return _missing("a whole number of bytes")
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    t = simulate_moe_gating(B, S, E, K, version="discrete", hw="ascend-910b2").timeline
    truth = t.hbm_bytes
    minimum = B * S * E * 4 + B * S * K * 8
    per_launch = ", ".join(f"{l.name} {l.hbm_bytes:,} B" for l in t.launches)
    value = _whole(answer, BYTES)
    if value is None:
        return _wrong(f"{answer!r} is not a whole number of bytes.")
    if value == truth:
        return _right(f"{truth:,} B ({per_launch}) = {truth / minimum:.2f}\u00d7 the minimum of {minimum:,} B "
                      "(read the logits once, write indices and weights once). The [N, E] probabilities "
                      "are written by Softmax and read back by TopK: two extra trips of N\u00b7E\u00b74 bytes.")
    if value == minimum:
        return _wrong(f"{minimum:,} B is the minimum any kernel must move (what the fused kernel moves). "
                      "The chain also writes its intermediates to HBM and reads them back. Hint: for each of "
                      "the three launches, add what it reads and what it writes.")
    if value in (truth // 1024, round(truth / 1000)):
        return _wrong("That looks like kilobytes; the answer is wanted in bytes.")
    return _wrong(f"{value:,} B is not what the model counts. Hint: Softmax reads and writes N\u00b7E floats; "
                  "TopK reads N\u00b7E floats and writes K values and K indices per row; Renormalise reads "
                  "and writes N\u00b7K floats (N = B\u00b7S rows). `simulate_moe_gating(..., "
                  "version='discrete').timeline.hbm_bytes` says it too.")


def check_discrete_launch_share(answer, chip: str = "ascend-910b2") -> CheckResult:
    """What share of the discrete chain's latency (B=1, S=1024, E=64, K=2, on the 910B2) is launch
    overhead? Answer: a percentage (74 or '74%') or a fraction (0.74); within 3 points counts."""
    if answer is None:
        return _missing("a percentage such as 50 (or a fraction such as 0.5)")
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    t = simulate_moe_gating(B, S, E, K, version="discrete", hw=chip).timeline
    truth = 100 * t.launch_overhead_us / t.total_us
    value = _percent(answer)
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


def check_underflow_second_expert(answer) -> CheckResult:
    """For one row of logits [-300, 0, -200] and K=3, which expert does the *discrete chain* rank
    second? Answer: an expert index (0, 1 or 2)."""
    if answer is None:
        return _missing("an expert index: 0, 1 or 2")
    logits = np.array([UNDERFLOW_LOGITS], dtype=np.float32)
    chain = moe_gating_topk(logits, 3, version="discrete").indices[0]
    fused = moe_gating_topk(logits, 3, version="v1").indices[0]
    value = _whole(answer)
    if value is None or value not in (0, 1, 2):
        return _wrong(f"Answer an expert index 0, 1 or 2, not {answer!r}.")
    why = ("exp(-200) and exp(-300) are both below the smallest float32 (about 1e-45), so both "
           "probabilities are exactly 0.0: a tie, and ties go to the lower expert index")
    if value == int(chain[1]):
        return _right(f"The chain ranks {chain.tolist()}: {why}. The fused kernel compares the logits "
                      f"themselves (-200 > -300) and ranks {fused.tolist()}. The weights agree (both 0).")
    if value == int(fused[1]):
        return _wrong(f"{value} is what the fused kernel (and the reference) answer, ranking the logits. "
                      "The chain ranks probabilities after the softmax. Hint: what is exp(-200) in float32?")
    return _wrong(f"Expert {value} has the largest logit, so it is ranked first. Which comes second "
                  "when the chain compares the probabilities exp(x - max)?")


# ----------------------------------------------------------------------------- notebook 03
def first_e_below_tile_s(tile_s: int = 8, version: str = "v2", K: int = 2,
                         chip: str = "ascend-910b2") -> int:
    """The smallest E for which ``tile_s`` points no longer fit ``chip``'s UB with ``version``'s
    budget -- so the host rule halves tileS below ``tile_s`` from this E on (bisection on the
    budget, which grows with E)."""
    ub = get_preset(chip).ub_bytes

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


def check_largest_tile_s(answer, E: int = 4096, K: int = 2, version: str = "v2",
                         chip: str = "ascend-910b2") -> CheckResult:
    """What is the largest tileS (any whole number, tileB = 1) whose ``version`` buffers fit the
    UB of ``chip`` for E = 4096 experts, K = 2? Answer: a whole number."""
    if answer is None:
        return _missing("a whole number of points")
    hw = get_preset(chip)
    truth = moe_ub_capacity(version, E, K, hw.ub_bytes, hw.block_bytes)
    host = calculate_moe_gating_tiling(1, SHAPE["S"], E, K, hw, version=version).tileS
    value = _whole(answer, ("points",))
    if value is None or value < 1:
        return _wrong(f"Answer a whole number of points >= 1, not {answer!r}.")

    def need(t):
        return moe_ub_bytes(version, t, E, K, hw.block_bytes)
    if value == truth:
        extra = (f" The host rule only tries 8, 4, 2, 1 and so picks tileS={host}: it leaves "
                 f"{hw.ub_bytes - need(host):,} B unused." if host != truth else "")
        return _right(f"{truth} points need {need(truth):,} B of the {hw.ub_bytes:,} B UB; {truth + 1} would "
                      f"need {need(truth + 1):,} B.{extra}")
    if value > truth:
        return _wrong(f"{value} points need {need(value):,} B of UB with {version}'s buffers, more than the "
                      f"{hw.ub_bytes:,} B of the {hw.name}. Remember that {version} keeps "
                      f"{'two copies' if version != 'v1' else 'one copy'} of every queue buffer.")
    if value == host:
        return _wrong(f"{value} is what the host rule picks (it halves from 8), but a larger tile fits too. "
                      "Hint: `moe_ub_capacity(version, E, K, hw.ub_bytes)`, or raise the tile by one "
                      "until `moe_ub_bytes` passes the UB size.")
    return _wrong(f"{value} points fit ({need(value):,} B), but so do more. Hint: each point costs about "
                  f"{need(2) - need(1):,} B with {version}'s buffers.")


def check_tile_s_halving_e(answer, version: str = "v2", K: int = 2, chip: str = "ascend-910b2") -> CheckResult:
    """From which E on (the smallest E) does the host rule choose tileS < 8 for ``version`` on
    ``chip`` (K = 2)? Answer: a whole number of experts."""
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
                      f"{moe_ub_bytes(version, 8, truth, K):,} B > {hw.ub_bytes:,} B, so tileS halves to "
                      f"{tile(truth)}. By the article's own formula and 256 KB it would stay 8 until "
                      f"E={article_e}.")
    if value == article_e:
        return _wrong(f"{value} is where the article's formula (no alignment, one copy, 256 KB) halves "
                      f"tileS. The honest {version} budget on the {hw.name}'s {hw.ub_bytes // 1024} KB "
                      "halves it much earlier.")
    if value < truth:
        return _wrong(f"At E={value} the host rule still picks tileS={tile(value)}. Try a larger E.")
    now = tile(value)
    already = f"tileS is already {now}" if now is not None else "not even one row fits the UB"
    return _wrong(f"At E={value} {already}; it dropped earlier. Try a smaller E "
                  "(bisection: halve the interval each time).")


def check_honest_ub_bytes(answer, version: str = "v2", tile_s: int = 8) -> CheckResult:
    """How many bytes of UB does ``version`` hold for tileS = 8 at E = 64, K = 2 (32-byte aligned
    buffers, every copy)? Answer: a whole number of bytes."""
    if answer is None:
        return _missing("a whole number of bytes")
    E, K = SHAPE["E"], SHAPE["K"]
    truth = moe_ub_bytes(version, tile_s, E, K)
    formula = tile_s * (E * 4 + K * 8)
    value = _whole(answer, BYTES)
    if value is None:
        return _wrong(f"Answer a whole number of bytes, not {answer!r}.")
    if value == truth:
        return _right(f"{truth:,} B, against the article's {formula:,} B: {version} double-buffers its "
                      "queues, so every buffer is there twice (and each is rounded up to whole 32-byte "
                      "blocks, which costs nothing here because 8 points give whole blocks).")
    if value == formula:
        return _wrong(f"{formula:,} B is the article's formula: one copy of each buffer. {version} is "
                      "double-buffered. Hint: `moe_ub_budget(version, 8, 64, 2)` lists every buffer.")
    return _wrong(f"{value:,} B is not it. Hint: scores 8\u00d764 float32, top-k values 8\u00d72 float32 and "
                  "indices 8\u00d72 int32, each rounded up to 32 B, times the number of copies.")


# ----------------------------------------------------------------------------- notebook 04
def _tile_sweep(chip: str, version: str):
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    return sweep(version, B, S, E, K, chip, SWEEP_TILE_S).dropna(subset=["latency_us"])


def check_sweet_spot(answer, chip: str = "ascend-910b2", version: str = "v1") -> CheckResult:
    """Which tileS of 1, 2, 4, ..., 64 gives the lowest ``version`` latency at the article's shape
    (B=1, S=1024, E=64, K=2) on ``chip``? Answer: a whole number. The message says why (or that
    ``version`` cannot run on ``chip`` at all: v1 needs DataCopyPad, which the 310P3 lacks)."""
    if answer is None:
        return _missing("a tileS, e.g. 8")
    hw = get_preset(chip)
    why_not = unsupported_reason(version, hw)
    if why_not:
        return _wrong(f"There is no sweet spot to find: {why_not}.")
    df = _tile_sweep(chip, version)
    best = df.loc[df["latency_us"].idxmin()]
    truth, best_us = int(best["tileS"]), float(best["latency_us"])
    spread = df["latency_us"].max() / best_us - 1
    table = ", ".join(f"{int(r.tileS)}: {r.latency_us:.1f}" for r in df.itertuples())
    verdicts = sorted(set(df["bottleneck"]))
    if spread < 0.05:
        why = (f"The curve is nearly flat (all within {spread:.1%}): every tileS is {'/'.join(verdicts)}-bound, "
               f"so what dominates does not depend on how the points are grouped into tiles.")
        if "memory" in verdicts and version in ("v1", "v2", "v2_bad_sync"):
            dma_us = hw.cycles_to_us(hw.dma_latency_cycles)
            why += (f" Here that is the DMAs: {version} copies every point on its own ({SHAPE['E'] * 4} B in, "
                    f"two {SHAPE['K'] * 4}-B copies out), each paying the fixed {dma_us:.2f} µs DMA "
                    f"latency, and the {3 * SHAPE['S']} copies are shared by only {hw.vector_cores} cores "
                    "whatever the tile size.")
    else:
        cores = hw.vector_cores
        waves = int(math.ceil(best["blocks"] / cores))
        why = (f"Smaller tiles mean more blocks, each paying dispatch and its own copy-in/out; larger tiles "
               f"mean fewer blocks than the chip can run at once. At tileS={truth} there are "
               f"{int(best['blocks'])} blocks for {cores} cores ({waves} wave{'s' if waves > 1 else ''}).")
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    evidence = simulate_moe_gating(B, S, E, K, version=version, hw=hw, tile_s=truth).timeline.bottleneck()[1]
    why += f" The model's evidence at tileS={truth}: {evidence}."
    value = _whole(answer)
    if value is None or value not in set(df["tileS"]):
        return _wrong(f"Answer one of {sorted(int(t) for t in df['tileS'])}, not {answer!r}.")
    mine = float(df.loc[df["tileS"] == value, "latency_us"].iloc[0])
    head = f"{version} on {hw.name}, latency (\u00b5s) by tileS: {table}."
    if value == truth:
        return _right(f"tileS={truth} at {best_us:.1f} \u00b5s. {head} {why}")
    if mine <= best_us * 1.02:
        return CheckResult(f"Right, practically: tileS={value} is within {mine / best_us - 1:.1%} of the "
                           f"best, tileS={truth}. {head} {why}", True)
    return _wrong(f"tileS={value} takes {mine:.1f} \u00b5s, {mine / best_us - 1:.0%} more than the best. Hint: "
                  "run the TileSweepExplorer with this chip and version, or `sweep(...)`.")


def check_missing_instruction(answer, version: str = "v1", chip: str = "ascend-310p3") -> CheckResult:
    """Which Ascend C instruction does ``version`` need that ``chip``'s core lacks (v1 on the 310P3:
    DataCopyPad, for its 8-byte per-point stores)? Answer: the Ascend C name, any case, with or
    without ``ctx.`` / snake_case."""
    if answer is None:
        return _missing("an Ascend C instruction name such as 'DataCopy'")
    hw = get_preset(chip)
    why_not = unsupported_reason(version, hw)
    if why_not is None:
        raise ValueError(f"{version} runs on {hw.name}: there is no missing instruction to ask about")
    from .capabilities import check_supported

    missing_names = [i for i in ALWAYS_NEEDS.get(version, ()) if check_supported(hw.isa, i)]
    if not isinstance(answer, str):
        return _wrong(f"Answer an instruction name as a string, such as 'DataCopy', not {answer!r}.")
    norm = lambda name: name.lower().replace("ctx.", "").replace("_", "").strip()  # noqa: E731
    if norm(answer) in {norm(m) for m in missing_names}:
        return _right(f"{why_not}. Real operators for the 310P pad the tensor in global memory so every "
                      "copy is whole 32-byte blocks, or write each tile's outputs in one whole-block copy.")
    if norm(answer) == "datacopy":
        return _wrong("DataCopy exists on every chip, but it moves whole 32-byte blocks only: a point's K "
                      "results (8 bytes at K = 2) would be rounded down to nothing. Which instruction "
                      "stores an 8-byte row? Try `unsupported_reason('v1', 'ascend-310p3')`.")
    return _wrong(f"{answer!r} is not it. Hint: which instruction does v1 use for its per-point stores? "
                  "`unsupported_reason('v1', 'ascend-310p3')` says it.")


def check_double_buffer_gain(answer, chip: str = "article", tile_s: int = 8) -> CheckResult:
    """By what percentage does v2 (double-buffered) cut v1's latency at tileS = 8 on the
    ``article`` preset (article shape)? Answer: a percentage (or fraction); within 2 points counts."""
    if answer is None:
        return _missing("a percentage such as 10 (or a fraction such as 0.1)")
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    lat = {v: simulate_moe_gating(B, S, E, K, version=v, hw=chip, tile_s=tile_s).latency_us
           for v in ("v1", "v2_bad_sync", "v2")}
    truth = 100 * (1 - lat["v2"] / lat["v1"])
    from_loop = 100 * (1 - lat["v2_bad_sync"] / lat["v1"])
    value = _percent(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a percentage: answer a number such as 25 or '25%' "
                      "(or a fraction such as 0.25).")
    detail = (f"v1 {lat['v1']:.1f} \u00b5s, v2 {lat['v2']:.1f} \u00b5s: {truth:.0f} % less. The article "
              f"claims 15\u201320 %. Part of it ({from_loop:.0f} points, see v2_bad_sync at "
              f"{lat['v2_bad_sync']:.1f} \u00b5s) comes from launching one looping block per core instead of "
              "one block per tile; the rest is the overlap of the next tile's copy-in with this tile's compute.")
    if abs(value - truth) <= 2:
        return _right(detail)
    return _wrong(f"{value:.0f} % is off. Hint: `simulate_moe_gating(1, 1024, 64, 2, version=v, hw='{chip}', "
                  f"tile_s={tile_s}).latency_us` for v = 'v1' and 'v2'; gain = 1 - v2 / v1.")
