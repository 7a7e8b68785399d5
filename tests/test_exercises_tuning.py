"""Exercise checks of notebooks 05-07 accept right answers and explain wrong ones with a hint."""

from __future__ import annotations

import pytest

from npu_lab import get_preset
from npu_lab.course.ex01 import CheckResult
from npu_lab.course.ex07 import check_article_vs_datasheet, check_dominant_fitted_field, check_sweet_spot_direction
from npu_lab.course.ex05 import check_db_gain_one_tile_per_block, check_steady_state_period, check_v2_pacing_stage
from npu_lab.course.ex06 import check_fast_exp_break_even, check_fast_exp_helps_v3, check_topk_vector_instructions, exp_break_even_cycles, fast_exp_instructions
from npu_lab.kernels.moe_gating import exp_speedup

CHECKS = [check_steady_state_period, check_v2_pacing_stage, check_db_gain_one_tile_per_block,
          check_topk_vector_instructions, check_fast_exp_break_even, check_fast_exp_helps_v3,
          check_dominant_fitted_field, check_sweet_spot_direction, check_article_vs_datasheet]

# (check, right answers, wrong answers): right answers follow from the model (see the notebooks)
CASES = [
    (check_steady_state_period, [5, 5.0, "5", "5 us"], [10, 8, 7, "soon"]),
    (check_v2_pacing_stage, ["store", "Store", "MTE3", "copy-out"], ["load", "compute", "S", 3]),
    (check_db_gain_one_tile_per_block, [0, "0%", 0.4], [26, 15, "lots"]),
    (check_topk_vector_instructions, [77, "77"], [23, 76, 77.5, "many"]),   # v3: 5 + 9 K per tile
    (check_fast_exp_break_even, [17.25, "17.2", 17], [12, 34.7, "fast"]),
    (check_fast_exp_helps_v3, ["no", "No.", False], ["yes", True, "maybe"]),
    (check_dominant_fitted_field, ["block_dispatch_us", " block_dispatch_us "],
     ["launch_overhead_us", "dma_latency_cycles", "dispatch", 1]),
    (check_sweet_spot_direction, ["down", "smaller"], ["up", "same", "sideways"]),
    (check_article_vs_datasheet, [3.6, "3.6x", 3.4], [1.0, 0.28, 10, "slow"]),
]


@pytest.mark.parametrize("check", CHECKS)
def test_no_answer_yet(check):
    msg = check(None)
    assert isinstance(msg, CheckResult) and msg.correct is None and msg.startswith("No answer yet")


@pytest.mark.parametrize("check, right, wrong", CASES, ids=[c[0].__name__ for c in CASES])
def test_right_and_wrong(check, right, wrong):
    for answer in right:
        msg = check(answer)
        assert msg.correct is True, (answer, msg)
        assert msg.startswith("Right.") and len(msg) > 60          # an explanation, not just "yes"
    for answer in wrong:
        msg = check(answer)
        assert msg.correct is False, (answer, msg)
        assert msg.startswith("Not quite.")


def test_wrong_answers_get_a_hint():
    assert "Hint" in check_steady_state_period(7)
    assert "NO overlap" in check_steady_state_period(10)
    assert "single-buffer" in check_steady_state_period(8)
    assert "Hint" in check_v2_pacing_stage("load")
    assert "Hint" in check_db_gain_one_tile_per_block(26)
    assert "for K = 2 the count is 23" in check_topk_vector_instructions(42)
    assert "Hint" in check_fast_exp_break_even(12)
    assert "Hint" in check_fast_exp_helps_v3("yes")
    assert "Hint" in check_dominant_fitted_field("launch_overhead_us")
    assert "Hint" in check_sweet_spot_direction("up")
    assert "inverse" in check_article_vs_datasheet(0.28)


def test_break_even_is_where_the_speedup_crosses_one():
    hw = get_preset("ascend-910b2")
    c = exp_break_even_cycles()
    assert exp_speedup(hw.replace(vector_exp_cycles_per_repeat=c + 0.1)) >= 1.0
    assert exp_speedup(hw.replace(vector_exp_cycles_per_repeat=c - 0.1)) < 1.0
    assert hw.vector_exp_cycles_per_repeat < c                 # the preset's assumed Exp: fast exp loses
    two = exp_break_even_cycles(target=2.0)
    assert exp_speedup(hw.replace(vector_exp_cycles_per_repeat=two + 0.1)) >= 2.0 > exp_speedup(
        hw.replace(vector_exp_cycles_per_repeat=two - 0.1))
    assert fast_exp_instructions() > 1


def test_checks_follow_the_model_not_typed_answers(monkeypatch):
    """A different period exercise gives a different right answer (computed, not stored)."""
    import npu_lab.course.ex05 as ex

    monkeypatch.setattr(ex, "PERIOD_EXERCISE", (2.0, 5.0, 9.0))
    assert check_steady_state_period(9).correct is True
    assert check_steady_state_period(5).correct is False


def test_dominant_field_choices_are_the_article_presets_fitted_fields():
    """Exercise 07.1 offers exactly the fields the 'article' preset fitted (DMA latency is not one)."""
    from npu_lab.course.ex07 import FITTED_FIELDS
    article = get_preset("article")
    assert set(FITTED_FIELDS) == {f for f, (kind, _) in article.provenance.items() if kind == "fitted"}
    msg = check_dominant_fitted_field("dma_latency_cycles")
    assert msg.correct is False and "block_dispatch_us" in msg
