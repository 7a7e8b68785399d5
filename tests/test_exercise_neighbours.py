"""Every numeric exercise check accepts the truth and refuses the answers right next to it.

A check that accepted truth ± 1 byte, or a tile length 8 short of the largest, passed the whole
suite (issue 11). Here each truth is computed from the library independently of the check, and
the nearest wrong answers — one unit off, or just outside the stated tolerance — must be refused.
"""

from __future__ import annotations

import pytest

from npu_lab.course import ex01, ex02, ex03, ex04, ex05, ex06, ex07, ex07b
from npu_lab.data import load_article_tile_sweep
from npu_lab.kernels.moe_gating import moe_ub_bytes, moe_ub_capacity, simulate_moe_gating
from npu_lab.course.pipeline_diagram import steady_state_period
from npu_lab.presets import get_preset
from npu_lab.sim.costs import dma_occupancy_cycles
from npu_lab.sim.launch_cost import full_launch_overhead_us

HW = get_preset("ascend-910b2")
P310 = get_preset("ascend-310p3")     # several of notebooks 01-03's exercises ask about the 310P3
SHAPE = (1, 1024, 64, 2)


def _sim(version, hw="ascend-910b2", **kw):
    return simulate_moe_gating(*SHAPE, version=version, hw=hw, **kw)


def _launch_share():
    t = _sim("discrete", "ascend-310p3").timeline     # exercise 02.1 asks about the 310P3
    return 100 * t.launch_overhead_us / t.total_us


def _db_gain(chip, tile_s):
    return 100 * (1 - _sim("v2", chip, tile_s=tile_s).latency_us / _sim("v1", chip, tile_s=tile_s).latency_us)


def _article_factor():
    table = load_article_tile_sweep()
    measured = float(table.loc[table["tile_s"] == 4, "latency_us"].iloc[0])
    return measured / _sim("v1", tile_s=4).latency_us


# (check, truth, answers that must be right, answers that must be wrong)
CASES = {
    "launch_overhead": (ex01.check_launch_overhead, lambda: 3 * full_launch_overhead_us(P310),
                        lambda t: [t, t * 1.009], lambda t: [t * 1.02, t * 0.98, t + 1, t - 1]),
    # exercise 01.2: a stream of 2 KB copies on one 310P3 core, GB/s (issue + transfer per copy; latency overlapped)
    "copy_bandwidth": (ex01.check_copy_bandwidth,
                       lambda: 2048 / dma_occupancy_cycles(P310, 2048, P310.bytes_per_cycle(P310.core_dma_bandwidth_gbps),
                                                           2048) * P310.clock_ghz,
                       lambda t: [t, t * 1.025, t * 0.975, f"{t:.2f} GB/s"], lambda t: [t * 1.035, t * 0.965]),
    "largest_tile_len": (ex01.check_largest_tile_len, lambda: P310.ub_usable_bytes // 24 // 8 * 8,
                         lambda t: [t], lambda t: [t - 8, t + 8, t - 1, t + 1]),
    "discrete_hbm_bytes": (ex02.check_discrete_hbm_bytes,
                           lambda: simulate_moe_gating(1, 2048, 128, 4, version="discrete").timeline.hbm_bytes,
                           lambda t: [t, f"{t:,} bytes"], lambda t: [t - 1, t + 1, t - 32, t + 32]),
    "discrete_launch_share": (ex02.check_discrete_launch_share, _launch_share,
                              lambda t: [t, t + 2.5, t - 2.5], lambda t: [t + 3.5, t - 3.5]),
    # 02.5: computed here from the rule (strides in 32-byte blocks of 8 float32), not from the picture
    "level0_last_element": (ex02.check_level0_last_element, lambda: (3 - 1) * 16 * 8 + (32 - 1),
                            lambda t: [t, f"{t}"], lambda t: [t - 1, t + 1, 63, 319, 159]),
    "largest_tile_s": (ex03.check_largest_tile_s, lambda: moe_ub_capacity("v2", 1472, 8, P310.ub_usable_bytes),
                       lambda t: [t], lambda t: [t - 1, t + 1]),
    "tile_s_halving_e": (ex03.check_tile_s_halving_e,
                         lambda: ex03.first_e_below_tile_s(8, "v2", 2, "ascend-310p3"),
                         lambda t: [t], lambda t: [t - 1, t + 1]),
    "honest_ub_bytes": (ex03.check_honest_ub_bytes, lambda: moe_ub_bytes("v2", 2, 128, 2),
                        lambda t: [t], lambda t: [t - 1, t + 1, t - 32, t + 32]),
    # notebooks 04-07b: each truth below is the module's expected_answers() entry, which
    # tests/test_exercises_tuning.py recomputes from the library independently
    "fusing_saves_bytes": (ex04.check_fusing_saves_bytes, lambda: ex04.expected_answers()["check_fusing_saves_bytes"],
                           lambda t: [t, f"{t:,} bytes"], lambda t: [t - 1, t + 1, t - 32, t + 32]),
    "v1_waves": (ex04.check_v1_waves, lambda: ex04.expected_answers()["check_v1_waves"],
                 lambda t: [t], lambda t: [t - 1, t + 1]),
    "double_buffer_gain": (ex04.check_double_buffer_gain, lambda: _db_gain("article", 4),
                           lambda t: [t, t + 1.9, t - 1.9], lambda t: [t + 2.5, t - 2.5]),
    "steady_state_period": (ex05.check_steady_state_period, lambda: steady_state_period(4.2, 8.9, 4.4, buffers=1),
                            lambda t: [t], lambda t: [t + 0.01, t - 0.01, t + 1, t - 1]),
    "v2_tile_period": (ex05.check_v2_tile_period, lambda: ex05.expected_answers()["check_v2_tile_period"],
                       lambda t: [t, t * 1.029, t * 0.971], lambda t: [t * 1.04, t * 0.96]),
    "db_gain_two_tiles_per_core": (ex05.check_db_gain_two_tiles_per_core,
                                   lambda: ex05.expected_answers()["check_db_gain_two_tiles_per_core"],
                                   lambda t: [t, t + 0.9], lambda t: [t + 1.5, t - 1.5]),
    "topk_vector_instructions": (ex06.check_topk_vector_instructions,
                                 lambda: ex06._v_instructions(6, 2, 64) - ex06._v_instructions(6, 1, 64),
                                 lambda t: [t], lambda t: [t - 1, t + 1]),
    "fast_exp_break_even": (ex06.check_fast_exp_break_even, lambda: ex06.exp_break_even_cycles("ascend-910b2", 3000),
                            lambda t: [t], lambda t: [t + max(0.6, 0.04 * t), t - max(0.6, 0.04 * t)]),
    "fast_exp_vector_cost": (ex06.check_fast_exp_vector_cost, lambda: ex06.expected_answers()["check_fast_exp_vector_cost"],
                             lambda t: [t, t + 1.9, t - 1.9], lambda t: [t + 2.5, t - 2.5]),
    "fixed_tile_loss": (ex07.check_fixed_tile_loss, lambda: ex07.expected_answers()["check_fixed_tile_loss"],
                        lambda t: [t, t + 1.9, t - 1.9], lambda t: [t + 2.5, t - 2.5]),
    "sweet_spot_shift": (ex07.check_sweet_spot_shift, lambda: ex07.expected_answers()["check_sweet_spot_shift"],
                         lambda t: [t, t * 1.049], lambda t: [t * 1.06, t * 0.94]),
    "dispatch_effect": (ex07b.check_dispatch_effect, lambda: ex07b.expected_answers()["check_dispatch_effect"],
                        lambda t: [t, t * 1.049], lambda t: [t * 1.06, t * 0.94]),
    "article_vs_datasheet": (ex07b.check_article_vs_datasheet, _article_factor,
                             lambda t: [t, t * 1.09], lambda t: [t * 1.11, t * 0.89]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_check_accepts_the_truth_and_refuses_its_neighbours(name):
    check, truth_of, rights, wrongs = CASES[name]
    truth = truth_of()
    for answer in rights(truth):
        assert check(answer).correct is True, f"{name}: {answer!r} (truth {truth!r}) should be right"
    for answer in wrongs(truth):
        result = check(answer)
        assert result.correct is False, f"{name}: {answer!r} (truth {truth!r}) should be wrong: {result}"


def test_every_numeric_check_is_covered():
    """A new numeric check must be added above (the non-numeric ones are listed here)."""
    words = {"check_busiest_pipe", "check_double_buffering_one_tile", "check_underflow_second_expert",
             "check_fused_advantage_trend"}
    names = {n for mod in (ex01, ex02, ex03, ex04, ex05, ex06, ex07, ex07b) for n in mod.__all__ if n.startswith("check_")}
    assert names - words == {f"check_{n}" for n in CASES}
