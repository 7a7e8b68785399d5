"""Notebook 14's course code: the ex14 checks (truths from the library, feedback on wrong answers) and the two
explorers (build, moves, what they show)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from npu_lab.course import ex14
from npu_lab.course.explorers import MoeLayerExplorer, RoutingExplorer
from npu_lab.course.explorers.moe_layer import TOKEN_STEPS
from npu_lab.course.explorers.routing import routing_summary


def test_checks_accept_the_truth_and_explain_wrong_answers():
    truth = ex14.expected_answers()
    assert ex14.check_dropped_slots(truth["check_dropped_slots"]).correct
    assert ex14.check_scatter_copies(truth["check_scatter_copies"]).correct
    assert ex14.check_gating_share(truth["check_gating_share"]).correct
    assert ex14.check_gating_share(f"{100 * truth['check_gating_share']:.2f}%").correct
    c = ex14.SCATTER_CASE
    assert truth["check_scatter_copies"] == 2 * c["N"] * c["K"]          # every slot, dropped ones too
    r = ex14.check_scatter_copies(c["N"] * c["K"])
    assert not r.correct and "two" in str(r)
    for check in (ex14.check_dropped_slots, ex14.check_scatter_copies, ex14.check_gating_share):
        assert not check(None).correct and not check("lots").correct
    assert not ex14.check_gating_share(0.5).correct


def test_dropped_truth_is_the_sum_over_experts_of_load_past_capacity():
    s = routing_summary("Mixtral-like", 16, 1.0)
    assert ex14.dropped_slots_truth() == int(np.maximum(s["load"] - s["capacity"], 0).sum()) == s["dropped"]


def test_routing_explorer_moves_and_shows_groups():
    e = RoutingExplorer("DeepSeek-V3-like", tokens=4)
    assert "groups chosen" in e.status.value and e.summary["heat"].shape == (4, 256)
    t = time.perf_counter()
    e.capacity.value = 0.5
    assert time.perf_counter() - t < 0.5
    assert e.summary["dropped"] > 0 and "dropped" in e.status.value
    e.preset.value = "Mixtral-like"
    assert e.summary["heat"].shape == (4, 8) and "groups" not in e.status.value
    with pytest.raises(ValueError):
        RoutingExplorer("GPT-like")


def test_moe_layer_explorer_slider_moves_read_the_cached_grid():
    e = MoeLayerExplorer("Qwen-MoE-like", tokens=8)
    moves = []
    for n in TOKEN_STEPS:
        t = time.perf_counter()
        e.tokens.value = n
        moves.append(time.perf_counter() - t)
        assert abs(e.stages["share"].sum() - 1) < 1e-9
    assert max(moves) < 0.05 * 4          # 50 ms each, with room for a loaded machine
    e.tokens.value = 2048
    big = float(e.stages["us"].sum())
    e.tokens.value = 1
    assert big > float(e.stages["us"].sum())
    assert "gating" in e.status.value
