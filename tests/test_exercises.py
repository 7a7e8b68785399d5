"""Exercise checks accept right answers and explain wrong ones (never a bare True/False)."""

from __future__ import annotations

import pytest

from npu_lab.sim.launch_cost import full_launch_overhead_us
from npu_lab import get_preset
from npu_lab.course.ex01 import (CheckResult, check_busiest_pipe, check_double_buffering_one_tile,
                               check_largest_tile_len, check_launch_overhead)
from npu_lab.kernels.scaled_add import scaled_add

CHECKS = [check_launch_overhead, check_busiest_pipe, check_double_buffering_one_tile,
          check_largest_tile_len]


@pytest.mark.parametrize("check", CHECKS)
def test_no_answer_yet_is_neither_right_nor_wrong(check):
    msg = check(None)
    assert isinstance(msg, CheckResult) and msg.correct is None
    assert msg.startswith("No answer yet") and repr(msg) == str(msg)


def _chain_overhead_us():
    """Exercise 01.1's truth: three launches on the 310P3."""
    return 3 * full_launch_overhead_us(get_preset("ascend-310p3"))


@pytest.mark.parametrize("form", [float, int, str, lambda t: f"{t:g} us"])
def test_launch_overhead_right(form):
    truth = _chain_overhead_us()
    msg = check_launch_overhead(form(truth))
    assert msg.correct is True and f"{truth:g}" in msg


def test_launch_overhead_of_one_launch_on_the_910b2():
    one = full_launch_overhead_us(get_preset("ascend-910b2"))      # fixed part + 48 cores' share
    assert check_launch_overhead(one, chip="ascend-910b2", launches=1).correct is True
    assert check_launch_overhead(one + 1, chip="ascend-910b2", launches=1).correct is False


@pytest.mark.parametrize("answer, hint", [(3, "launch_overhead_us"), (_chain_overhead_us() * 1000, "nanoseconds"),
                                          ("soon", "not a number"),
                                          (full_launch_overhead_us(get_preset("ascend-310p3")), "ONE launch")])
def test_launch_overhead_wrong_explains(answer, hint):
    msg = check_launch_overhead(answer)
    assert msg.correct is False and hint in msg


@pytest.mark.parametrize("answer", ["MTE2", "mte2", " MTE2 ", "DMA in"])
def test_busiest_pipe_right(answer):
    assert check_busiest_pipe(answer).correct is True


def test_busiest_pipe_wrong_gives_busy_time_and_hint():
    msg = check_busiest_pipe("V")
    assert msg.correct is False and "Hint" in msg and "V is busy" in msg
    assert "not a pipe" in check_busiest_pipe("GPU")
    assert check_busiest_pipe(7).correct is False


def test_busiest_pipe_of_a_given_timeline():
    slow = get_preset("ascend-910b2").replace(vector_cycles_per_repeat=200.0)
    _, t = scaled_add(1 << 18, None, timing_only=True, hw=slow, tile_len=1024)
    assert check_busiest_pipe("V", timeline=t).correct is True


@pytest.mark.parametrize("answer", ["no", "No.", False])
def test_double_buffering_one_tile_right(answer):
    msg = check_double_buffering_one_tile(answer)
    assert msg.correct is True and "next tile" in msg.lower()


@pytest.mark.parametrize("answer", ["yes", True])
def test_double_buffering_one_tile_wrong(answer):
    msg = check_double_buffering_one_tile(answer)
    assert msg.correct is False and "Hint" in msg
    assert check_double_buffering_one_tile("maybe").correct is False


@pytest.mark.parametrize("chip", ["ascend-910b2", "ascend-310p3"])
def test_largest_tile_len_right_and_consistent_with_the_kernel(chip):
    largest = get_preset(chip).ub_usable_bytes // (3 * 2 * 4) // 8 * 8
    assert check_largest_tile_len(largest, chip=chip).correct is True
    scaled_add(1 << 16, None, timing_only=True, hw=chip, tile_len=largest, num_buffers=2)     # fits
    with pytest.raises(ValueError, match=f"Largest tile_len: {largest}"):
        scaled_add(1 << 16, None, timing_only=True, hw=chip, tile_len=largest + 8, num_buffers=2)


@pytest.mark.parametrize("answer, hint", [(8191, "multiple of 8"), (11000, "UB has"), (4096, "larger tile"),
                                          (8192.5, "whole number")])
def test_largest_tile_len_wrong(answer, hint):
    msg = check_largest_tile_len(answer)
    assert msg.correct is False and hint in msg
