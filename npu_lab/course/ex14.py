"""Exercise checks for notebook 14 (production routing: dispatch with capacity, the whole MoE layer).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult` (a ``str``; print
it) saying whether the answer is right, why, and a hint when it is not. Every expected answer is
computed from the library (the dispatch reference, the dispatch kernel's timeline, the layer's stage
table), never typed in; :func:`expected_answers` gives each check's truth.

The capstone (the grouped sigmoid + bias router kernel from a skeleton) is registered by the
routing-kernels module of issue 20 §2 and appended to the notebook at merge.
"""

from __future__ import annotations

import math

import numpy as np

from ..kernels.moe_gating import moe_dispatch
from ..kernels.moe_gating.dispatch_kernel import moe_dispatch_kernel_run
from ..kernels.moe_layer import ROUTER_PRESETS, moe_layer_timing, route_preset
from .checks import CheckResult, missing as _missing, parse_number as _number, right as _right, wrong as _wrong

__all__ = ["DROP_CASE", "SCATTER_CASE", "SHARE_CASE", "check_dropped_slots", "check_gating_share",
           "check_scatter_copies", "dropped_slots_truth", "expected_answers", "gating_share_truth",
           "scatter_copies_truth"]

#: 14.1: the Mixtral-like router on 16 tokens, capacity factor 1.0
DROP_CASE = dict(preset="Mixtral-like", tokens=16, capacity_factor=1.0, seed=0)
#: 14.2: the dispatch kernel's place launch at N = 300, K = 4, E = 16 (4-byte scatters)
SCATTER_CASE = dict(N=300, K=4, E=16, capacity=50)
#: 14.3: gating's share of the Qwen-MoE-like layer at 8 tokens (decode-like)
SHARE_CASE = dict(preset="Qwen-MoE-like", tokens=8)


def expected_answers() -> dict[str, object]:
    return {"check_dropped_slots": dropped_slots_truth(), "check_scatter_copies": scatter_copies_truth(),
            "check_gating_share": gating_share_truth()}


def _drop_dispatch():
    c = DROP_CASE
    _, g = route_preset(c["preset"], c["tokens"], c["seed"])
    return moe_dispatch(g.indices, g.weights, num_experts=ROUTER_PRESETS[c["preset"]].num_experts,
                        capacity_factor=c["capacity_factor"])


def dropped_slots_truth() -> int:
    return _drop_dispatch().tokens_dropped


def check_dropped_slots(answer) -> CheckResult:
    """16 tokens through the Mixtral-like router (seed 0), capacity factor 1.0: how many of the 32
    (token, expert) slots are dropped? Answer: a whole number."""
    if answer is None:
        return _missing("a whole number of slots")
    value = _number(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a number.")
    d = _drop_dispatch()
    truth = d.tokens_dropped
    over = [(e, int(n)) for e, n in enumerate(d.expert_tokens_before_capacity) if n > d.capacity]
    if value == truth:
        return _right(f"{truth}: capacity = ceil(1.0 · 16 · 2 / 8) = {d.capacity} slots per expert; the experts "
                      f"over it (expert, slots) {over} keep their first {d.capacity} in position order n·K + k "
                      "and drop the rest. A dropped token still has its other expert; the residual carries it.")
    if value == 0:
        return _wrong("0 would need every expert at or under the capacity; look at the load bars. Hint: "
                      "capacity = ceil(capacity_factor · N · K / E).")
    return _wrong(f"{value:g} is not it. Hint: sum over experts of max(0, load − capacity), with capacity = "
                  "ceil(capacity_factor · N · K / E); the explorer's bars show each load.")


def scatter_copies_truth() -> int:
    c = SCATTER_CASE
    tl = moe_dispatch_kernel_run((c["N"], c["K"]), num_experts=c["E"], capacity=c["capacity"], timing_only=True).timeline
    ev = tl.events()
    place = ev[ev["launch"] == ev["launch"].unique()[1]]
    return int(((place["pipe"] == "MTE3") & (place["bytes"] == 4)).sum())


def check_scatter_copies(answer) -> CheckResult:
    """The dispatch kernel's place launch at N = 300 tokens, K = 4, E = 16, capacity 50: how many
    4-byte DataCopyPad (UB→GM) does it issue, over all blocks? Answer: a whole number."""
    if answer is None:
        return _missing("a whole number of copies")
    value = _number(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a number.")
    c = SCATTER_CASE
    truth = scatter_copies_truth()
    slots = c["N"] * c["K"]
    if value == truth:
        return _right(f"{truth} = 2 · N · K: one word into sorted_row_idx and one into sorted_expert_idx per slot, "
                      "dropped ones too (they go to a trash word: the branchless price). CANN's SrcToDst scatters "
                      "one row at a time the same way; that is why dispatch grows with N·K at prefill.")
    if value == slots:
        return _wrong(f"{value:g} counts one array; the kernel writes two per slot. Hint: read the place kernel's "
                      "scatter loop.")
    if value < slots:
        return _wrong(f"{value:g} leaves out the dropped slots: the kernel does not branch on the data. Hint: "
                      "every slot costs the same.")
    return _wrong(f"{value:g} is not it. Hint: count the DataCopyPad calls in the place kernel's inner loop, per slot.")


def gating_share_truth() -> float:
    c = SHARE_CASE
    p = ROUTER_PRESETS[c["preset"]]
    return moe_layer_timing(c["tokens"], p.hidden_dim, p.layer_config()).gating_share


def check_gating_share(answer) -> CheckResult:
    """What share of the Qwen-MoE-like layer's time (8 tokens, the preset's fused kernel: the grouped
    kernel, softmax without renorm) is gating? Answer: a fraction (0.05) or a percentage ("5%"), within
    a quarter of the truth."""
    if answer is None:
        return _missing("a fraction or a percentage")
    value = _number(answer, ("%",))
    if value is None:
        return _wrong(f"{answer!r} is not a number.")
    if isinstance(answer, str) and answer.strip().endswith("%"):
        value = value / 100
    truth = gating_share_truth()
    if math.isclose(value, truth, rel_tol=0.25):
        return _right(f"about {truth:.1%}: the experts' GEMMs read every chosen expert's weights, a few MB each, "
                      "and dominate; fused gating is one small, launch-bound kernel. In this model the article's "
                      "\"gating can be the hot spot\" does not hold for a whole layer at any token count.")
    if value > 0.2:
        return _wrong(f"{value:.1%} is far too much. Hint: look at what the expert GEMMs must read at decode.")
    return _wrong(f"{value:.2%} is not it (the truth is within a factor you can find with moe_layer_timing).")
