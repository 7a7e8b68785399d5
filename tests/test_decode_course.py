"""Notebook 11's course code: the ex11 checks (truth from the library, feedback from the answer)
and the DecodeExplorer (one batch_update per move, cached positions, refusals in the status)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from npu_lab.course import ex11
from npu_lab.course.explorers import DecodeExplorer
from npu_lab.kernels.decode import decode_attention


def test_checks_accept_the_truth_and_name_the_slip():
    truth = ex11.expected_answers()
    assert ex11.check_kv_bytes_per_token(truth["check_kv_bytes_per_token"]).correct
    assert ex11.check_kv_bytes_per_token(f"{truth['check_kv_bytes_per_token']:,} bytes").correct
    assert ex11.check_kv_bytes_per_token(None).correct is None
    one_layer = ex11.check_kv_bytes_per_token(truth["check_kv_bytes_per_token"] // 80)
    assert one_layer.correct is False and "one layer" in one_layer
    mha = ex11.check_kv_bytes_per_token(truth["check_kv_bytes_per_token"] * 8)
    assert mha.correct is False and "query heads" in mha
    assert ex11.check_kv_bytes_per_token("lots").correct is False

    assert ex11.check_v1_limit(truth["check_v1_limit"]).correct
    off = ex11.check_v1_limit(truth["check_v1_limit"] + 8)
    assert off.correct is False and "+8" in off

    assert ex11.check_flash_decode_splits(truth["check_flash_decode_splits"]).correct
    no_split = ex11.check_flash_decode_splits(1)
    assert no_split.correct is False and "0.4" in no_split


def test_truths_come_from_the_kernels():
    """The v1 limit is where v1 starts refusing; the split is what v4's tiling picks."""
    truth = ex11.expected_answers()
    n = truth["check_v1_limit"]
    shape = lambda L: ((1, 8, 128), ((1, L, 1, 128), np.float16))        # noqa: E731
    assert decode_attention(*shape(n), None, [n], version="v1", timing_only=True).tiling.chunk == n
    with pytest.raises(ValueError, match="UB"):
        decode_attention(*shape(n + 8), None, [n + 8], version="v1", timing_only=True)
    c = ex11.SPLIT_CASE
    r = decode_attention((c["batch"], c["kv_heads"], 128), ((c["batch"], c["context"], c["kv_heads"], 128), np.float16),
                         None, [c["context"]] * c["batch"], version="v4", timing_only=True)
    assert r.tiling.splits == truth["check_flash_decode_splits"]


def test_decode_explorer_moves_and_refusals():
    e = DecodeExplorer(batch=1, context=256, group=2, splits=0, version="v4")
    assert e.error is None and "µs" in e.status.value
    t_v4, floor, pieces = e.result
    assert pieces > 1 and t_v4 >= floor
    e.set(splits=1)                                    # one piece: v4 is v2
    assert e.result[2] == 1 and e.result[0] == pytest.approx(e.figure.data[0].y[0], abs=0.06)
    start = time.perf_counter()
    e.set(splits=0)                                    # seen before: cached, no simulation
    assert time.perf_counter() - start < 0.5
    assert e.result[0] == t_v4
    e.set(version="v5")
    assert e.result[1] == pytest.approx(floor / 2)     # int8 reads half float16's bytes
    with pytest.raises(ValueError):
        e.set(context=300)
    with pytest.raises(ValueError):
        e.set(batch=0)
    e.set(version="v4", splits=16)                     # more pieces than chunks: still runs, or says why
    assert (e.error is None) == (e.result is not None)


@pytest.mark.parametrize("batch,splits", [(8, 0), (1, 1), (2, 0), (1, 0)])
def test_decode_explorer_v4_without_a_split_shares_v2s_run_and_equals_a_direct_run(batch, splits):
    """A v4 position whose tiling does not split S2 takes v2's cached run (one simulation a
    move): its figures must be exactly those of a direct v4 run; a split position runs v4."""
    e = DecodeExplorer(batch=batch, context=512, group=4, splits=splits, version="v4")
    r = decode_attention((batch, 32, 128), ((batch, 512, 8, 128), np.float16), None, [512] * batch, version="v4",
                         timing_only=True, splits=splits or None)
    assert e.result == (r.timeline.total_us, r.roofline_us, r.tiling.splits)
    shared = e._key(batch, 512, 4, "v4", splits) == (batch, 512, 4, "v2", 0)
    assert shared == (r.tiling.splits == 1)


# ---- the committed grid of DecodeExplorer positions (data/decode_explorer_grid.csv) ----------------
from npu_lab.course.explorers import decode as decode_explorer  # noqa: E402
from npu_lab.course.explorers import KvCalculatorExplorer  # noqa: E402
from npu_lab.llm import MODEL_CONFIGS, kv_memory_table  # noqa: E402


def _every_position():
    D = decode_explorer
    for b in D.BATCHES:
        for c in D.CONTEXTS:
            for g in D.GROUPS:
                for v in ("v2", "v4", "v5"):
                    for sp in (D.SPLITS if v == "v4" else (0,)):
                        yield b, c, g, v, sp


def test_grid_covers_every_position_and_is_fresh_where_sampled():
    """Every position's run (after the v4-is-v2 sharing) is in the file; a sample of cheap rows,
    spread over versions and splits, equals a live simulation exactly (stale file: regenerate with
    write_decode_grid)."""
    grid = decode_explorer._load_grid()
    assert grid, f"{decode_explorer.GRID_PATH} is missing: run write_decode_grid()"
    chip = decode_explorer.GRID_CHIP
    keys = set()
    for pos in _every_position():
        try:
            keys.add(decode_explorer._position_key(chip, *pos))
        except ValueError:
            keys.add(pos)
    assert keys <= set(grid), sorted(keys - set(grid))[:5]
    rng = np.random.default_rng(0)
    cheap = [k for k in grid if k[0] <= 2 and k[1] <= 1024 and isinstance(grid[k], tuple)]
    for i in rng.choice(len(cheap), 6, replace=False):
        key = cheap[i]
        assert grid[key] == decode_explorer._simulate(chip, *key), key


def test_explorer_moves_read_the_grid_without_simulating(monkeypatch):
    e = DecodeExplorer(batch=4, context=2048, group=8, splits=0, version="v4")
    assert e.grid_used
    monkeypatch.setattr(decode_explorer, "_simulate", lambda *a: pytest.fail(f"simulated {a} live"))
    for kw in (dict(batch=64, splits=12), dict(context=8192), dict(splits=8),
               dict(version="v5"), dict(group=1, version="v4", splits=16), dict(batch=1, splits=0)):
        e.set(**kw)
        assert (e.error is None) == (e.result is not None)
    assert e.result[2] > 1                                  # batch 1: CANN's rule splits S2


def test_a_stale_grid_is_ignored(monkeypatch):
    """A grid whose probe positions differ from a live run (the cost model changed) is not used."""
    grid = dict(decode_explorer._load_grid())
    probe = decode_explorer._position_key(decode_explorer.GRID_CHIP, *decode_explorer._PROBES[0])
    t, floor, pieces = grid[probe]
    grid[probe] = (t * 1.01, floor, pieces)
    monkeypatch.setattr(decode_explorer, "_load_grid", lambda: grid)
    e = DecodeExplorer(batch=1, context=256, group=2)
    assert not e.grid_used
    r = decode_attention((1, 16, 128), ((1, 256, 8, 128), np.float16), None, [256], version="v4", timing_only=True)
    assert e.result == (r.timeline.total_us, r.roofline_us, r.tiling.splits)


def test_other_chips_simulate_live():
    e = DecodeExplorer(batch=1, context=256, group=1, chip="ascend-310p3")
    assert not e.grid_used and e.result is not None


def test_sliders_offer_only_grid_positions():
    with pytest.raises(ValueError):
        DecodeExplorer(batch=3)
    with pytest.raises(ValueError):
        DecodeExplorer(splits=5)
    with pytest.raises(ValueError):
        DecodeExplorer(chip="ascend-999")


# ---- the KV-cache calculator's model picker --------------------------------------------------------
def test_calculator_picks_every_model_and_shows_the_library_figures():
    e = KvCalculatorExplorer(model="Llama-3-70B", context=8192, batch=16)
    assert list(e.model.options) == list(MODEL_CONFIGS)
    for name in MODEL_CONFIGS:
        e.set(model=name, kv_dtype="int8", weights_dtype="fp8")
        want = kv_memory_table(name, context_len=8192, batch=16, dtypes=["int8"], weights_dtype="fp8")
        assert e.table.equals(want) and e.error is None
        assert f"{int(want.bytes_per_token.iloc[0]):,} B per token" in e.status.value
        assert e.figure.data[0].y[1] == round(want.batch_gb.iloc[0], 3)
        assert e.figure.data[1].y[0] == round(want.weights_gb.iloc[0], 3)
    e.set(model="DeepSeek-V3")
    assert "MLA" in e.status.value
    e.set(model="Llama-3-70B", kv_dtype="fp16", weights_dtype="bf16", batch=1)
    assert e.table.bytes_per_sequence.iloc[0] == 8192 * 327680


def test_calculator_refuses_values_off_its_controls():
    for kw in (dict(model="GPT-5"), dict(context=1000), dict(batch=3), dict(kv_dtype="int4"), dict(weights_dtype="fp64")):
        with pytest.raises(ValueError):
            KvCalculatorExplorer(**kw)
    e = KvCalculatorExplorer()
    with pytest.raises((ValueError, AttributeError)):
        e.set(model="llama")


def test_the_split_answer_is_not_the_ladders_printed_split():
    """Exercise 11.3 comes after the ladder's table, which prints v4's pieces at B = 1, N2 = 8: the
    question's case must need the tiling rule (here its cap by the chunk count), not that number."""
    from npu_lab.kernels.decode import decode_ladder
    ladder = decode_ladder(batch=1, context_len=1024, q_heads=32, kv_heads=8, head_dim=128)
    printed = set(ladder.splits.dropna().astype(int))
    assert ex11.expected_answers()["check_flash_decode_splits"] not in printed
