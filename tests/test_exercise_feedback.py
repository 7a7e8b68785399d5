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


# ---------------------------------------------------------------- feedback computed from the run
def test_topk_breakdown_is_read_off_the_timeline():
    import re

    from npu_lab.course import ex06
    for K, E in ((6, 64), (2, 256)):
        text = ex06.v_instruction_breakdown(K, E)
        counts = [int(n) for n in re.findall(r"\(= (\d+)\)", text)]
        assert sum(counts) == ex06.topk_vector_instructions(K, E), text
    assert "Adds" not in ex06.v_instruction_breakdown(6, 64)          # no Adds at E = 64 ...
    assert "Adds" in ex06.v_instruction_breakdown(2, 256)             # ... they come with the two-level argmax
    right = ex06.check_topk_vector_instructions(ex06.topk_vector_instructions())
    assert right.correct and ex06.v_instruction_breakdown() in right


def test_fast_exp_feedback_counts_the_values_the_kernel_exponentiates():
    from npu_lab.course import ex06
    from npu_lab.kernels.moe_gating import simulate_moe_gating
    case = ex06.FAST_EXP_CASE
    events = simulate_moe_gating(1, 1024, 64, case["K"], version="v3", tile_s=case["tile_s"]).timeline.events()
    exp = events[events["name"].str.startswith("Exp")].iloc[0]
    r = ex06.check_fast_exp_vector_cost(ex06.fast_exp_vector_cost_pct())
    assert r.correct and f"exponentiates {int(exp['elements'])} values" in r
    assert int(exp["elements"]) > case["tile_s"] * case["K"]          # K is padded to whole blocks


def _variant(exercise_id, old, new):
    from npu_lab.course.kernel_check import kernel_exercises, kernel_solution_cell, load_cell
    cell = kernel_solution_cell(exercise_id)
    assert old in cell
    return load_cell(cell.replace(old, new), f"<{exercise_id} variant>")[kernel_exercises()[exercise_id].cell_name]


def test_gm_overrun_says_what_the_hardware_would_do_and_the_fix():
    fn = _variant("03.padded_store", "ctx.data_copy_pad(y_gm[first * t.K], y, DataCopyExtParams(1, n * size, 0, 0, 0))",
                  "ctx.data_copy(y_gm[first * t.K], y, -(-n * size // 32) * 32 // size)")
    r = check_kernel(fn, "03.padded_store")
    assert r.correct is False
    assert "would write" in r and "past the end" in r and "Copy at most" in r


def test_what_to_do_only_when_there_is_a_fix():
    from npu_lab.course.kernel_check import _advice
    from npu_lab.lang import AscendCRuleError
    assert _advice(AscendCRuleError("some rule"))[1] is None
    assert _advice(ValueError("x"))[1] is None
    fn = _variant("03.padded_store", "ctx.data_copy_pad(y_gm[first * t.K], y, DataCopyExtParams(1, n * size, 0, 0, 0))",
                  "ctx.data_copy(y_gm[first * t.K], y, n)")
    assert "What to do:" in check_kernel(fn, "03.padded_store")


def test_mixed_dtypes_of_one_size_name_reinterpret_cast():
    import numpy as np
    import pytest as _pytest

    from npu_lab.lang import AscendCRuleError, GlobalTensor, TBuf, TPosition, launch, npu_kernel

    @npu_kernel
    def mixed(ctx, x_gm):
        buf = TBuf(TPosition.VECCALC)
        ctx.pipe.init_buffer(buf, 512, name="b")
        f = buf.get(np.float32)
        ctx.add(f, f, f[64].reinterpret_cast(np.int32), 64)

    with _pytest.raises(AscendCRuleError, match="reinterpret_cast"):
        launch(mixed, 1, GlobalTensor.from_array(np.zeros(8, np.float32), "x"), hw="ascend-910b2")


# ---------------------------------------------------------------- speed targets with room
def _margins(exercise_id, solution, naive):
    sol = check_kernel(solution, exercise_id)
    bad = check_kernel(naive, exercise_id)
    assert sol.correct is True and sol.fast is True, sol
    assert bad.fast is False, bad
    return (sol.target_us - sol.latency_us) / sol.target_us, (bad.latency_us - bad.target_us) / bad.target_us


def test_coalesce_target_has_room_on_both_sides():
    from npu_lab.course import ex04
    from npu_lab.kernels.moe_gating.fused import moe_gating_v1_kernel
    good, bad = _margins("04.coalesce", ex04.moe_v1_coalesced_solution, moe_gating_v1_kernel)
    assert good > 0.01 and bad > 0.01, (good, bad)


def test_faster_target_has_room_on_both_sides():
    from npu_lab.kernels.moe_gating.fused import moe_gating_v2_kernel
    good, bad = _margins("07.faster", ex07.moe_faster_solution, moe_gating_v2_kernel)
    assert good > 0.05 and bad > 0.05, (good, bad)


def test_scaled_add_target_names_its_tile_length():
    from npu_lab.course import ex01
    text = ex01._scaled_add_target("ascend-910b2")[1]
    assert f"{ex01.SCALED_ADD_TILE_LEN} elements" in text and str(ex01._LESSON_TILE_LEN) in text


# ---------------------------------------------------------------- what the exercise prose claims
def test_prose_coalescing_at_tile_s_8_is_under_one_percent():
    """04.coalesce's prose: at the article's tileS = 8 the per-point copies cost under 1 % of v1."""
    from npu_lab.course import ex04
    from npu_lab.course.kernel_check import moe_launcher
    from npu_lab.kernels.moe_gating import simulate_moe_gating
    case = dict(ex04.MOE_V1_TIMED, tile_s=8)
    v1 = simulate_moe_gating(1, 1024, 24, 2, version="v1", tile_s=8).latency_us
    best = moe_launcher("v1")(ex04.moe_v1_coalesced_solution, case, "ascend-910b2", True)[1].total_us
    assert (v1 - best) / v1 < 0.01


def test_prose_v2c_is_within_a_percent_of_v2_at_the_article_e():
    """07.faster's prose: at E = 64 (S = 2048, K = 2, default tiling) v2 and v2c are within 1 %."""
    from npu_lab.kernels.moe_gating import simulate_moe_gating
    v2, v2c = (simulate_moe_gating(1, 2048, 64, 2, version=v).latency_us for v in ("v2", "v2c"))
    assert abs(v2 - v2c) / v2 < 0.01


def test_no_file_cites_a_design_document_outside_the_repository():
    """The repository cites its own docs (docs/, README.md), never notes kept outside it."""
    import subprocess
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    files = subprocess.run(["git", "ls-files", "npu_lab", "docs", "scripts", "instructor", "README.md", "data"],
                           cwd=repo, capture_output=True, text=True, check=True).stdout.split()
    name = "DESIGN" + ".md"
    hits = [f for f in files if (repo / f).is_file() and name in (repo / f).read_text(encoding="utf-8", errors="ignore")]
    assert not hits, f"{name} is cited in {hits}"
