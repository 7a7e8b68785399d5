"""Exercise checks verify what they claim, and their feedback is computed from what the learner
wrote (issue 16 §1 and §3): each test here breaks a solution on purpose and reads the answer."""

from __future__ import annotations

from npu_lab.course import ex07
from npu_lab.course.kernel_check import check_kernel


# ---------------------------------------------------------------- 07.pick_tile_s: a rule, not a search
def test_pick_tile_s_rule_passes():
    r = check_kernel(ex07.pick_tile_s_solution, "07.pick_tile_s")
    assert r.correct is True, r


def test_pick_tile_s_refuses_the_autotuner():
    def search(B, S, E, K, hw):
        from npu_lab.kernels.moe_gating import autotune
        return autotune(B, S, E, K, version="v3", hw=hw).tile_s

    r = check_kernel(search, "07.pick_tile_s")
    assert r.correct is False and "simulated a launch" in r


def test_pick_tile_s_simulation_is_allowed_again_after_the_check():
    from npu_lab.kernels.moe_gating import simulate_moe_gating
    check_kernel(lambda B, S, E, K, hw: simulate_moe_gating(1, 64, 64, 2, version="v3").latency_us and 8,
                 "07.pick_tile_s")
    assert simulate_moe_gating(1, 64, 64, 2, version="v3").latency_us > 0


def test_pick_tile_s_constant_misses():
    r = check_kernel(lambda B, S, E, K, hw: 8, "07.pick_tile_s")
    assert r.correct is False and "✗" in r
