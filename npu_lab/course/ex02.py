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
from .checks import (parse_percent, BYTES, CheckResult, missing as _missing, parse_whole as _whole, right as _right, wrong as _wrong)
from ..kernels.moe_gating import (moe_gating_topk, simulate_moe_gating)


#: The shape the exercises use unless they say otherwise: the article's B=1, S=1024, E=64, K=2.
SHAPE = dict(ARTICLE_SWEEP_SHAPE)
#: tileS values the sweet-spot exercises compare.
SWEEP_TILE_S = (1, 2, 4, 8, 16, 32, 64)
#: One row of logits whose small probabilities underflow to 0 in float32.
UNDERFLOW_LOGITS = (-300.0, 0.0, -200.0)


__all__ = ['check_discrete_hbm_bytes', 'check_discrete_launch_share', 'check_underflow_second_expert']

def check_discrete_hbm_bytes(answer) -> CheckResult:
    """How many bytes cross HBM when the discrete chain (Softmax → TopK → Renormalise) runs at
    B=1, S=1024, E=64, K=2 with float32 logits on the 910B2? Reads the L2 cache serves do not
    count (the model's L2: data one launch writes is read back by the next from L2 when it fits;
    every write reaches HBM). Answer: a whole number of bytes."""
    if answer is None:
        return _missing("a whole number of bytes")
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    t = simulate_moe_gating(B, S, E, K, version="discrete", hw="ascend-910b2").timeline
    truth = t.hbm_bytes                      # the model's figure: L2 hits excluded
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


def check_discrete_launch_share(answer, chip: str = "ascend-910b2") -> CheckResult:
    """What share of the discrete chain's latency (B=1, S=1024, E=64, K=2, on the 910B2) is launch
    overhead? Answer: a percentage (74 or '74%') or a fraction (0.74); within 3 points counts."""
    if answer is None:
        return _missing("a percentage such as 50 (or a fraction such as 0.5)")
    B, S, E, K = (SHAPE[k] for k in "BSEK")
    t = simulate_moe_gating(B, S, E, K, version="discrete", hw=chip).timeline
    truth = 100 * t.launch_overhead_us / t.total_us
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
