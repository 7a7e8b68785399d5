"""Exercise checks of notebooks 04-07b accept right answers and explain wrong ones with a hint.

Each truth is derived here from the library, independently of the check; every module's
``expected_answers()`` must name exactly its checks, and each check must accept its own truth."""

from __future__ import annotations

import math

import pytest

from npu_lab import get_preset
from npu_lab.course import ex04, ex05, ex06, ex07, ex07b
from npu_lab.course.ex01 import CheckResult
from npu_lab.course.ex05 import check_db_gain_two_tiles_per_core, check_steady_state_period, check_v2_tile_period
from npu_lab.course.ex06 import (check_fast_exp_break_even, check_fast_exp_vector_cost, check_topk_vector_instructions,
                                 exp_break_even_cycles, fast_exp_instructions)
from npu_lab.course.ex07 import check_fixed_tile_loss, check_sweet_spot_shift
from npu_lab.course.ex07b import check_article_vs_datasheet, check_dispatch_effect
from npu_lab.course.pipeline_diagram import stage_durations, steady_state_period
from npu_lab.data import load_article_tile_sweep
from npu_lab.kernels.moe_gating import autotune, exp_speedup, simulate_moe_gating

MODULES = [ex04, ex05, ex06, ex07, ex07b]
CHECKS = [check_steady_state_period, check_v2_tile_period, check_db_gain_two_tiles_per_core,
          check_topk_vector_instructions, check_fast_exp_break_even, check_fast_exp_vector_cost,
          check_fixed_tile_loss, check_sweet_spot_shift, check_dispatch_effect, check_article_vs_datasheet]


def _lat(S, E, K, version, hw="ascend-910b2", tile_s=None):
    return simulate_moe_gating(1, S, E, K, version=version, hw=hw, tile_s=tile_s).latency_us


def _v_busy(version, K, tile_s):
    return simulate_moe_gating(1, 1024, 64, K, version=version, tile_s=tile_s).timeline.busy_us_by_pipe()["V"]


def _article_4():
    t = load_article_tile_sweep()
    return float(t.loc[t["tile_s"] == 4, "latency_us"].iloc[0]) / _lat(1024, 64, 2, "v1", tile_s=4)


def _dispatch_effect():
    art, b2 = get_preset("article"), get_preset("ascend-910b2")
    return _lat(1024, 64, 2, "v1", art, 2) - _lat(1024, 64, 2, "v1", art.replace(block_dispatch_us=b2.block_dispatch_us), 2)


# (check, truth computed here, answers derived from the truth that must be right / wrong)
TRUTHS = {
    "check_steady_state_period": lambda: steady_state_period(4.2, 8.9, 4.4, buffers=1),
    "check_v2_tile_period": lambda: max(stage_durations(simulate_moe_gating(1, 1024, 64, 2, version="v1", hw="article",
                                                                            tile_s=12).timeline).values()),
    "check_db_gain_two_tiles_per_core": lambda: 100 * (1 - _lat(2048, 64, 2, "v2", tile_s=32) / _lat(2048, 64, 2, "v1", tile_s=32)),
    "check_topk_vector_instructions": lambda: 5 + 9 * 6,          # 5 + 9 K per tile (the message explains it)
    "check_fast_exp_break_even": lambda: exp_break_even_cycles("ascend-910b2", 3000),
    "check_fast_exp_vector_cost": lambda: 100 * (_v_busy("v3_fast_exp", 4, 32) / _v_busy("v3", 4, 32) - 1),
    "check_fixed_tile_loss": lambda: 100 * (_lat(32768, 128, 4, "v3", tile_s=8)
                                            / autotune(1, 32768, 128, 4, version="v3").latency_us - 1),
    # kept: the 'article' preset's own best tileS at E = 64, K = 2 (16 since the fit is held inside its ranges)
    "check_sweet_spot_shift": lambda: (_lat(1024, 384, 8, "v1", "article", autotune(
        1, 1024, 64, 2, version="v1", hw="article", candidates=[1, 2, 4, 8, 16, 32]).tile_s) - autotune(
        1, 1024, 384, 8, version="v1", hw="article", candidates=[1, 2, 4, 8, 16, 32]).latency_us),
    "check_dispatch_effect": _dispatch_effect,
    "check_article_vs_datasheet": _article_4,
}


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_expected_answers_name_every_check_and_each_check_accepts_its_truth(module):
    truths = module.expected_answers()
    checks = {n for n in module.__all__ if n.startswith("check_")}
    assert set(truths) == checks
    for name, truth in truths.items():
        assert getattr(module, name)(truth).correct is True, name


@pytest.mark.parametrize("name", sorted(TRUTHS))
def test_truth_is_computed_from_the_library(name):
    module = next(m for m in MODULES if name in m.expected_answers())
    assert math.isclose(float(module.expected_answers()[name]), float(TRUTHS[name]()), rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize("check", CHECKS, ids=lambda f: f.__name__)
def test_no_answer_yet(check):
    msg = check(None)
    assert isinstance(msg, CheckResult) and msg.correct is None and msg.startswith("No answer yet")


@pytest.mark.parametrize("check", CHECKS, ids=lambda f: f.__name__)
def test_right_and_wrong(check):
    truth = float(TRUTHS[check.__name__]())
    for answer in (truth, f"{truth:.6g}"):
        msg = check(answer)
        assert msg.correct is True and msg.startswith("Right.") and len(msg) > 60, (answer, msg)
    for answer in (truth * 1.5 + 3, -truth - 7, "soon"):
        msg = check(answer)
        assert msg.correct is False and msg.startswith("Not quite."), (answer, msg)


def test_wrong_answers_get_a_hint():
    l, c, s = ex05.PERIOD_EXERCISE
    assert "NO overlap" in check_steady_state_period(l + c + s)
    assert "two buffers" in check_steady_state_period(max(l, c, s))
    assert "Hint" in check_steady_state_period(0.5)
    assert "Hint" in check_v2_tile_period(1)
    assert "Hint" in check_db_gain_two_tiles_per_core(90)
    assert "for K = 2 the count is 23" in check_topk_vector_instructions(42)
    assert "Hint" in check_fast_exp_break_even(12)
    assert "Hint" in check_fast_exp_vector_cost(90)
    assert "Hint" in check_fixed_tile_loss(1)
    assert "Hint" in check_sweet_spot_shift(1)
    assert "Hint" in check_dispatch_effect(1)
    assert "inverse" in check_article_vs_datasheet(1 / _article_4())


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
    monkeypatch.setattr(ex05, "PERIOD_EXERCISE", (2.0, 5.0, 9.0))
    assert check_steady_state_period(14).correct is True       # one buffer: compute + max(load, store)
    assert check_steady_state_period(13.3).correct is False
    assert ex05.expected_answers()["check_steady_state_period"] == 14


def test_dispatch_effect_names_the_article_presets_fitted_fields():
    article = get_preset("article")
    assert set(ex07.FITTED_FIELDS) == {f for f, (kind, _) in article.provenance.items() if kind == "fitted"}
    msg = check_dispatch_effect(_dispatch_effect())
    assert all(f in msg for f in ex07.FITTED_FIELDS)
