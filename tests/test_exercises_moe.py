"""The MoeGatingTopK exercise checks accept right answers (in the forms a learner types) and
explain wrong ones; the expected answers come from the library, so the tests derive them too."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab import get_preset
from npu_lab.course.ex01 import CheckResult
from npu_lab.course import ex02
from npu_lab.course.ex02 import (check_discrete_hbm_bytes, check_discrete_launch_share, check_fused_advantage_trend,
                                 check_underflow_second_expert)
from npu_lab.course.ex04 import check_double_buffer_gain, check_fusing_saves_bytes, check_v1_waves
from npu_lab.course.ex03 import check_honest_ub_bytes, check_largest_tile_s, check_tile_s_halving_e, first_e_below_tile_s
from npu_lab.kernels.moe_gating import (calculate_moe_gating_tiling, moe_gating_topk, moe_ub_bytes,
                                        moe_ub_capacity, simulate_moe_gating)

ALL_CHECKS = [check_discrete_hbm_bytes, check_discrete_launch_share, check_underflow_second_expert,
              check_fused_advantage_trend,
              check_largest_tile_s, check_tile_s_halving_e, check_honest_ub_bytes, check_v1_waves,
              check_double_buffer_gain, check_fusing_saves_bytes]


def _right(msg):
    assert isinstance(msg, CheckResult) and isinstance(msg, str)
    assert msg.correct is True and msg.startswith("Right"), msg
    return msg


def _wrong(msg):
    assert isinstance(msg, CheckResult)
    assert msg.correct is False and msg.startswith("Not quite"), msg
    assert len(msg) > 40, "a wrong answer gets an explanation or a hint, not just a verdict"
    return msg


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda f: f.__name__)
def test_no_answer_yet(check):
    msg = check(None)
    assert msg.correct is None and "replace None" in msg


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("junk", ["banana", [1, 2], True])
def test_junk_is_explained_not_raised(check, junk):
    _wrong(check(junk))


def _discrete(S=1024, E=64, K=2, chip="ascend-910b2"):
    return simulate_moe_gating(1, S, E, K, version="discrete", hw=chip).timeline


def test_discrete_hbm_bytes():
    truth = _discrete(2048, 128, 4).hbm_bytes           # exercise 02.2's shape
    assert "Softmax" in _right(check_discrete_hbm_bytes(truth))
    # counting the read-backs of the intermediates too: the model serves those from L2
    from_l2 = _discrete().l2_hit_bytes
    assert from_l2 > 0 and "probs" in _right(check_discrete_hbm_bytes(truth))
    assert "L2" in _wrong(check_discrete_hbm_bytes(truth + from_l2))
    _right(check_discrete_hbm_bytes(f"{truth:,}"))
    assert "minimum" in _wrong(check_discrete_hbm_bytes(2048 * 128 * 4 + 2048 * 4 * 8))
    _right(check_discrete_hbm_bytes(_discrete().hbm_bytes, S=1024, E=64, K=2))
    assert "kilobytes" in _wrong(check_discrete_hbm_bytes(truth // 1024))
    assert "Hint" in _wrong(check_discrete_hbm_bytes(12345))


def test_discrete_launch_share():
    t = _discrete(chip="ascend-310p3")                  # exercise 02.1's chip
    share = t.launch_overhead_us / t.total_us
    for answer in (share, f"{100 * share:.0f}%", round(100 * share)):
        _right(check_discrete_launch_share(answer))
    assert "launch_overhead_us" in _wrong(check_discrete_launch_share(100 * share - 10))


def test_fused_advantage_trend_follows_the_model():
    ratio = {S: _discrete(S).total_us / simulate_moe_gating(1, S, 64, 2, version="v3").latency_us
             for S in (1024, 65536)}
    truth = "grow" if ratio[65536] > ratio[1024] else "shrink"
    other = {"grow": "shrink", "shrink": "grow"}[truth]
    assert f"{ratio[1024]:.1f}" in _right(check_fused_advantage_trend(truth))
    _right(check_fused_advantage_trend(truth.upper() + "s"))
    assert "Hint" in _wrong(check_fused_advantage_trend(other))
    _wrong(check_fused_advantage_trend("sideways"))
    assert ex02.expected_answers()["check_fused_advantage_trend"] == truth


def test_underflow_second_expert():
    x = np.array([[-300.0, 0.0, -200.0]], np.float32)
    chain = moe_gating_topk(x, 3, version="discrete").indices[0]
    fused = moe_gating_topk(x, 3, version="v1").indices[0]
    assert chain[1] != fused[1]                      # the lesson only works if they differ
    assert "tie" in _right(check_underflow_second_expert(int(chain[1])))
    assert "fused kernel" in _wrong(check_underflow_second_expert(int(fused[1])))
    _wrong(check_underflow_second_expert(int(chain[0])))
    _wrong(check_underflow_second_expert(7))


@pytest.mark.parametrize("E, K, chip", [(1472, 8, "ascend-310p3"), (4096, 2, "ascend-910b2")])
def test_largest_tile_s(E, K, chip):
    hw = get_preset(chip)
    truth = moe_ub_capacity("v2", E, K, hw.ub_usable_bytes)
    host = calculate_moe_gating_tiling(1, 1024, E, K, hw, version="v2").tileS
    assert truth > host                                # the exercise's point: the rule wastes UB
    _right(check_largest_tile_s(truth, E=E, K=K, chip=chip))
    assert "host rule" in _wrong(check_largest_tile_s(host, E=E, K=K, chip=chip))
    assert "more than" in _wrong(check_largest_tile_s(truth + 1, E=E, K=K, chip=chip))


def test_tile_s_halving_e():
    hw = get_preset("ascend-310p3")                    # exercise 03.2's chip
    truth = first_e_below_tile_s(8, "v2", 2, "ascend-310p3")
    tile = lambda e: calculate_moe_gating_tiling(1, 1024, e, 2, hw, version="v2").tileS  # noqa: E731
    assert tile(truth - 1) == 8 and tile(truth) == 4
    _right(check_tile_s_halving_e(truth))
    assert "article's formula" in _wrong(check_tile_s_halving_e(8189))
    assert "larger" in _wrong(check_tile_s_halving_e(truth - 1))
    assert "smaller" in _wrong(check_tile_s_halving_e(truth + 100))


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_first_e_below_tile_s_is_the_exact_boundary(version):
    ub = get_preset("ascend-910b2").ub_usable_bytes
    for tile_s in (8, 4, 1):
        e = first_e_below_tile_s(tile_s, version)
        assert moe_ub_bytes(version, tile_s, e - 1, 2) <= ub < moe_ub_bytes(version, tile_s, e, 2)


def test_honest_ub_bytes():
    _right(check_honest_ub_bytes(moe_ub_bytes("v2", 2, 128, 2)))              # exercise 03.3's case
    assert "article's formula" in _wrong(check_honest_ub_bytes(2 * (128 * 4 + 2 * 8)))
    _wrong(check_honest_ub_bytes(1000))
    _right(check_honest_ub_bytes(moe_ub_bytes("v2", 8, 64, 2), tile_s=8, E=64, K=2))


def test_fusing_saves_bytes():
    chain = simulate_moe_gating(1, 4096, 128, 4, version="discrete").timeline.hbm_bytes
    fused = simulate_moe_gating(1, 4096, 128, 4, version="v1", tile_s=8).timeline.hbm_bytes
    saved = chain - fused
    assert saved > 0                                            # the probabilities never go to HBM and back
    assert f"{saved:,} B" in _right(check_fusing_saves_bytes(saved))
    _right(check_fusing_saves_bytes(f"{saved} bytes"))
    assert "KB or MB" in _wrong(check_fusing_saves_bytes(saved / 1024))
    assert "one of the two" in _wrong(check_fusing_saves_bytes(chain))
    _wrong(check_fusing_saves_bytes(saved + 32))


def test_v1_waves():
    hw = get_preset("ascend-910b2")
    blocks = simulate_moe_gating(1, 4096, 64, 2, version="v1", tile_s=2).block_dim
    assert blocks == 4096 // 2                                   # one block per tile
    waves = -(-blocks // hw.vector_cores)
    _right(check_v1_waves(waves))
    assert "rounds down" in _wrong(check_v1_waves(blocks // hw.vector_cores))
    _wrong(check_v1_waves(waves + 1))
    _wrong(check_v1_waves("many"))


def test_double_buffer_gain():
    lat = {v: simulate_moe_gating(1, 1024, 64, 2, version=v, hw="article", tile_s=4).latency_us
           for v in ("v1", "v2")}
    gain = 1 - lat["v2"] / lat["v1"]
    # the message quotes the computed gain (not only the article's fixed "15-20 %")
    assert f"{100 * gain:.0f} % less" in _right(check_double_buffer_gain(gain))
    _right(check_double_buffer_gain(f"{100 * gain:.1f}%"))
    _wrong(check_double_buffer_gain(100 * gain + 10))
