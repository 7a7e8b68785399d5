"""Issue 11: the edge-case bugs found by adversarial testing, one test (or a few) per bug, plus
the "messages and small items". Each test failed on the code before its fix."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from npu_lab import HardwareSpec, HardwareSpecError, get_preset
from npu_lab.cli import main
from npu_lab.data import load_article_tile_sweep
from npu_lab.course.ex03 import check_tile_s_halving_e, first_e_below_tile_s
from npu_lab.kernels.moe_gating import (UbBudgetError, autotune, fast_exp_max_rel_error, fast_exp_numpy,
                                        fit_hardware, lookup_tile_s, moe_gating_topk,
                                        moe_gating_topk_reference, plan_moe_gating, simulate_moe_gating,
                                        sweep, ub_used_bytes)
from npu_lab.kernels.moe_gating import discrete
from npu_lab.lang import UbOverflowError

HW = get_preset("ascend-910b2")
HEADER = "tile_s,blocks,ub_kb_est,latency_us,core_utilisation_est\n"


# ---- 1. whole-number floats in integer HardwareSpec fields ----------------------------------------
def test_whole_number_float_in_int_field_becomes_an_int():
    hw = HW.replace(vector_cores=48.0, ub_bytes=196608.0)
    assert type(hw.vector_cores) is int and type(hw.ub_bytes) is int
    # the MoE path used to say "hw.ub_bytes must be an int"; the scheduler raised a TypeError
    assert simulate_moe_gating(1, 64, 64, 2, version="v2", hw=hw).latency_us == \
        simulate_moe_gating(1, 64, 64, 2, version="v2", hw=HW).latency_us


def test_whole_number_float_from_json_becomes_an_int():
    data = json.loads(HW.to_json())
    data["vector_cores"] = 48.0
    hw = HardwareSpec.from_json(json.dumps(data))
    assert type(hw.vector_cores) is int
    simulate_moe_gating(1, 64, 64, 2, version="v1", hw=hw)


def test_fractional_int_field_is_still_refused():
    with pytest.raises(HardwareSpecError, match="vector_cores must be a whole number"):
        HW.replace(vector_cores=47.5)


# ---- 2. the discrete chain's UB budget matches what its TopK kernel allocates --------------------
@pytest.mark.parametrize("E, K", [(12000, 7000), (10000, 9700)])
def test_discrete_plan_refuses_what_the_topk_kernel_cannot_hold(E, K):
    with pytest.raises(UbBudgetError, match="TopK kernel.*needs"):
        plan_moe_gating(1, 8, E, K, version="discrete")
    with pytest.raises(UbBudgetError):     # not a UbOverflowError from inside the kernel
        simulate_moe_gating(1, 8, E, K, version="discrete")


@pytest.mark.parametrize("K", [1, 2, 50])
def test_discrete_budget_boundary_is_exact(K):
    """The largest E the plan accepts runs; one more is refused by the plan, not by the kernel."""
    largest = max(e for e in range(K, 20000) if sum(discrete.topk_ub_buffers(1, e, K).values()) <= HW.ub_usable_bytes)
    simulate_moe_gating(1, 3, largest, K, version="discrete")
    with pytest.raises(UbBudgetError):
        simulate_moe_gating(1, 3, largest + 1, K, version="discrete")


def test_discrete_chain_says_its_k_limit():
    """The generic Renormalise keeps a row of K weights inside one 256-byte repeat."""
    with pytest.raises(ValueError, match="K <= 56"):
        simulate_moe_gating(1, 8, 3000, 100, version="discrete")


@pytest.mark.parametrize("E, K", [(64, 2), (1000, 8), (3000, 50), (4000, 16)])
def test_discrete_multi_row_tiles_fit_every_kernel(E, K):
    t = discrete.generic_row_tiling(100, E, K, HW.ub_bytes)
    assert sum(discrete.topk_ub_buffers(t.rows, E, K).values()) <= HW.ub_bytes
    simulate_moe_gating(1, 100, E, K, version="discrete")     # no UbOverflowError


# ---- 3. every check answers every input -------------------------------------------------------------
@pytest.mark.parametrize("answer", [1, 0, -5, "-5", 100000, 10**12, 1e300])
def test_check_tile_s_halving_e_answers_not_quite(answer):
    result = check_tile_s_halving_e(answer)
    assert result.correct is False and result.startswith("Not quite")


def test_check_tile_s_halving_e_still_knows_the_truth():
    truth = first_e_below_tile_s(8, "v2", 2, "ascend-310p3")     # the exercise's case
    assert check_tile_s_halving_e(truth).correct is True


# ---- 4. the CLI checks the discrete chain against its own reference ---------------------------------
def test_cli_run_discrete_with_a_large_scale_matches(capsys):
    assert main(["run", "--version", "discrete", "--scale", "100", "--S", "64"]) == 0
    assert "indices match: yes" in capsys.readouterr().out


# ---- 5. the non-finite message does not advertise an argument moe_gating_topk lacks ------------------
def test_nonfinite_message_of_the_kernels_names_no_missing_argument():
    x = np.array([[1.0, np.nan, 0.0]], np.float32)
    with pytest.raises(ValueError, match="non-finite") as err:
        moe_gating_topk(x, 2)
    assert "pass nonfinite=" not in str(err.value)
    with pytest.raises(TypeError):
        moe_gating_topk(x, 2, nonfinite="hardware")     # the argument it must not advertise
    with pytest.raises(ValueError, match="pass nonfinite='hardware'"):
        moe_gating_topk_reference(x, 2)                  # the reference does have it


# ---- 6. plan_moe_gating(version='discrete') checks the shape ----------------------------------------
@pytest.mark.parametrize("shape, error, match", [
    ((1, 0, 8, 2), ValueError, "S must be >= 1"),
    ((1, 8, 0, 2), ValueError, "E must be >= 1"),
    ((1, 8, 8, 20), ValueError, "K must be <= E"),
    ((1, 1.5, 8, 2), TypeError, "S must be an int"),
    ((0, 8, 8, 2), ValueError, "B must be >= 1"),
])
def test_discrete_plan_checks_the_shape(shape, error, match):
    with pytest.raises(error, match=match):
        plan_moe_gating(*shape, version="discrete")


# ---- 7. autotune names a bad shape --------------------------------------------------------------------
def test_autotune_blames_s_not_tile_s():
    with pytest.raises(ValueError, match="S must be >= 1; got 0"):
        autotune(1, 0, 64, 2)


# ---- 8. no overflow warning from v1/v2's scalar softmax ------------------------------------------------
@pytest.mark.parametrize("version", ["v1", "v2", "v2_bad_sync"])
def test_extreme_logits_leak_no_warning(version):
    x = np.array([[3e38, -3e38, 0.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = moe_gating_topk(x, 3, version=version)
    ref_idx, ref_w = moe_gating_topk_reference(x, 3)
    np.testing.assert_array_equal(result.indices, ref_idx)
    np.testing.assert_allclose(result.weights, ref_w)


# ---- 9. fast_exp_numpy clamps at -87 like the kernel --------------------------------------------------
def test_fast_exp_numpy_clamps_like_the_kernel():
    low = fast_exp_numpy(np.array([-100.0, -87.0, -1000.0], np.float32))
    assert np.all(low > 0) and np.all(np.isfinite(low))
    assert low[0] == low[1] == low[2]                     # everything below -87 is exp(-87)
    assert np.isfinite(fast_exp_max_rel_error(-100, 0))


@pytest.mark.parametrize("kwargs", [dict(samples=0), dict(samples=10**9), dict(lo=1.0, hi=0.0),
                                    dict(lo=float("nan")), dict(hi=1000.0), dict(samples=2.5)])
def test_fast_exp_max_rel_error_checks_its_arguments(kwargs):
    with pytest.raises(ValueError, match="|".join(kwargs)):
        fast_exp_max_rel_error(**kwargs)


# ---- 10. HardwareSpec.from_json ------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["[]", "null", "42", '"x"', "", "   ", "{", "true"])
def test_from_json_non_object_text_is_a_hardware_spec_error(text):
    with pytest.raises(HardwareSpecError):
        HardwareSpec.from_json(text)


@pytest.mark.parametrize("provenance", [["assumed", "x"], "assumed", 5, {"ub_bytes": None},
                                        {"ub_bytes": "assumed"}, {"ub_bytes": [1, 2]}])
def test_from_json_bad_provenance_is_a_hardware_spec_error(provenance):
    data = json.loads(HW.to_json())
    data["provenance"] = provenance
    with pytest.raises(HardwareSpecError, match="provenance"):
        HardwareSpec.from_json(json.dumps(data))


def test_from_json_null_provenance_means_none():
    data = json.loads(HW.to_json())
    data["provenance"] = None
    assert HardwareSpec.from_json(json.dumps(data)).provenance == {}


def test_from_json_files(tmp_path):
    binary = tmp_path / "chip.json"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(HardwareSpecError, match="not a text"):
        HardwareSpec.from_json(binary)
    with pytest.raises(HardwareSpecError, match="neither valid JSON nor an existing file"):
        HardwareSpec.from_json(str(tmp_path / "missing.json"))
    with pytest.raises(HardwareSpecError, match="cannot read"):
        HardwareSpec.from_json(tmp_path)
    listing = tmp_path / "list.json"
    listing.write_text("[1, 2]")
    with pytest.raises(HardwareSpecError, match="list.json.*JSON object"):
        HardwareSpec.from_json(listing)


# ---- 11. load_article_tile_sweep --------------------------------------------------------------------------
@pytest.mark.parametrize("body, match", [
    ("1.5,1024,0.3,1500.9,0.2\n", "tile_s must hold whole numbers"),
    ("1,1024,0.3,1500.9,0.2\n", "latency_us must hold whole numbers"),
    ("-1,1024,0.3,1500,0.2\n", "tile_s must be >= 1"),
    ("1,1024,0.3,1500,0.2\n1,1024,0.3,1400,0.2\n", "tile_s=1 appears more than once"),
    ("1,1024,inf,1500,0.2\n", "ub_kb_est must hold finite numbers"),
    ("1,1024,0.3\n4,256,1.2,450,0.4,9,9\n", "not a well-formed CSV"),
])
def test_article_sweep_loader_refuses_and_names_the_file(tmp_path, body, match):
    path = tmp_path / "sweep.csv"
    path.write_text(HEADER + body)
    with pytest.raises(ValueError, match=match) as err:
        load_article_tile_sweep(path)
    assert str(path) in str(err.value)


def test_article_sweep_loader_empty_and_binary_files(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.csv: the file is empty"):
        load_article_tile_sweep(empty)
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00\x81,\n\x80")
    with pytest.raises(ValueError, match="bin.csv"):
        load_article_tile_sweep(binary)


# ---- 12. lookup_tile_s ---------------------------------------------------------------------------------------
def test_lookup_tile_s_accepts_the_chip_alias():
    assert lookup_tile_s(1024, 64, 2, chip="910b2") == lookup_tile_s(1024, 64, 2)


@pytest.mark.parametrize("kwargs", [dict(version="v1"), dict(chip="ascend-310p3", version="v2"), dict(chip="article")])
def test_lookup_tile_s_without_a_table_lists_the_tables(kwargs):
    with pytest.raises(ValueError, match="tables exist for: .*chip='ascend-910b2' version='v3'"):
        lookup_tile_s(1024, 64, 2, **kwargs)


def test_lookup_tile_s_zero_s_fails_cleanly():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="S must be >= 1"):
            lookup_tile_s(0, 64, 2)


# ---- messages and small items -----------------------------------------------------------------------------
def test_sweep_takes_one_tile_size_or_none():
    assert sweep(tile_s=8)["tileS"].tolist() == [8]
    assert sweep(tile_s=None)["tileS"].tolist() == [1, 4, 8, 16, 32]


def test_ub_used_bytes_of_discrete_is_a_clear_error():
    tiling, _ = plan_moe_gating(1, 1024, 64, 2)
    with pytest.raises(ValueError, match="discrete chain has no MoeGatingTiling"):
        ub_used_bytes(tiling, "discrete")


def test_autotune_refuses_the_discrete_chain():
    with pytest.raises(ValueError, match="discrete chain has no tileS"):
        autotune(1, 1024, 64, 2, version="discrete")


@pytest.mark.parametrize("kwargs, match", [
    (dict(measurements=pd.DataFrame({"tile_s": [1, 8], "latency_us": [1500, 0]})), "latency_us must be"),
    (dict(measurements=pd.DataFrame({"tile_s": [1], "latency_us": [1500]}), starts=0), "starts must be"),
    (dict(measurements=pd.DataFrame({"tile_s": [1, 4096], "latency_us": [1, 2]}),
          shape=dict(B=1, S=4096, E=16000, K=2)), "tileS=4096: it does not run"),
    (dict(measurements=pd.DataFrame({"tile_s": [1], "latency_us": [1500]}), free=("ub_bytes",)),
     "whole-number field"),
])
def test_fit_hardware_refuses_clearly(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fit_hardware(**kwargs)


def test_fit_hardware_takes_one_field_name_as_one_field():
    result = fit_hardware(pd.DataFrame({"tile_s": [8], "latency_us": [280]}), free="launch_overhead_us",
                          starts=1)
    assert list(result.fitted) == ["launch_overhead_us"]


@pytest.mark.parametrize("answer, correct", [("5 us", False), ("20 μs", True), ("20 µs", True),
                                             ("20 us", True), ("20 bytes", False), (20, True)])
def test_check_units_belong_to_the_answer(answer, correct):
    from npu_lab.course.ex01 import check_launch_overhead
    from npu_lab.course.ex03 import check_largest_tile_s

    assert check_launch_overhead(answer, chip="ascend-910b2", launches=1).correct is correct
    assert check_largest_tile_s(answer).correct is False      # a count of points has no unit


def test_what_if_chip_with_a_huge_ub_allocates_only_what_buffers_hold():
    import tracemalloc

    hw = HW.replace(ub_bytes=2**36)
    x = np.random.default_rng(0).standard_normal((1, 64, 64)).astype(np.float32)
    tracemalloc.start()
    try:
        result = moe_gating_topk(x, 2, version="v1", hw=hw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak} B"
    np.testing.assert_array_equal(result.indices, moe_gating_topk_reference(x, 2)[0])


def test_ub_overflow_is_still_raised_with_lazy_storage():
    from npu_lab.lang.memory import UbAllocator

    ub = UbAllocator(1024, 32, with_storage=True)
    ub.alloc(1000, "a")
    with pytest.raises(UbOverflowError, match="needs 32 bytes"):
        ub.alloc(1, "b")


# ---- the CLI's slow / huge paths and messages --------------------------------------------------------------
def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("npu_lab: error:") and err.count("\n") == 1, err
    return err


def test_cli_seed_must_be_non_negative_and_is_named(capsys):
    assert main(["run", "--seed", "-1"]) == 2
    assert "--seed" in _one_line_error(capsys)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cli_huge_scale_is_refused_without_a_warning(capsys, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["run", "--scale", "1e39", "--dtype", dtype]) == 2
    assert "--scale" in _one_line_error(capsys)


def test_cli_run_refuses_a_run_too_big_for_memory_with_the_figure(capsys):
    assert main(["run", "--S", "1000000", "--E", "1024"]) == 2
    err = _one_line_error(capsys)
    assert "GiB" in err and "--max-memory-gb" in err


def test_cli_memory_error_is_one_line(capsys, monkeypatch):
    import npu_lab.cli as cli

    def boom(*args, **kwargs):
        raise MemoryError("Unable to allocate 11.8 GiB for an array")
    monkeypatch.setattr(cli, "moe_gating_topk", boom)
    assert main(["run", "--S", "8"]) == 1
    assert "out of memory" in _one_line_error(capsys)


def test_cli_trace_caps_blocks_by_default_and_says_so(tmp_path, capsys, monkeypatch):
    import npu_lab.cli as cli

    monkeypatch.setattr(cli, "TRACE_EVENT_BUDGET", 200)
    out = tmp_path / "t.json"
    assert main(["trace", "--version", "v1", "--tile-s", "1", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "of 1024 blocks" in text and "default cap" in text and "--max-blocks" in text
    assert main(["trace", "--version", "v1", "--tile-s", "1", "--max-blocks", "1024", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "(1024 blocks)" in text and "default cap" not in text


def test_cli_sweep_says_a_tile_size_was_clamped(capsys):
    assert main(["sweep", "--S", "100", "--tile-s", "1,99999"]) == 0
    assert "99999 > S=100 clamped to S=100" in capsys.readouterr().out
    assert main(["sweep", "--tile-s", "99999999999999999999"]) == 2
    assert "clamped to S=1024" in _one_line_error(capsys)
