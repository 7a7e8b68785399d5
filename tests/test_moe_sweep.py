"""Sweeps, the autotuner and the shape-bucket table (npu_lab.kernels.moe_gating.sweep)."""

import numpy as np
import pandas as pd
import pytest

from npu_lab import get_preset
from npu_lab.kernels.moe_gating import autotune, bucket_table, lookup_tile_s, simulate_moe_gating, sweep
from npu_lab.kernels.moe_gating.sweep import SWEEP_COLUMNS, bucket_table_path, candidate_tile_sizes


def test_sweep_has_the_articles_columns_and_matches_single_runs():
    """Each sweep row is exactly the timing-only run of that tileS."""
    df = sweep("v1", 1, 1024, 64, 2, "ascend-910b2", [1, 4, 8, 16, 32])
    assert list(df.columns) == SWEEP_COLUMNS
    assert df.tileS.tolist() == [1, 4, 8, 16, 32]
    assert df.blocks.tolist() == [1024, 256, 128, 64, 32]       # v1: one block per tile
    for row in df.itertuples():
        single = simulate_moe_gating(1, 1024, 64, 2, version="v1", tile_s=row.tileS)
        assert row.latency_us == single.latency_us
    assert ((df.core_utilisation > 0) & (df.core_utilisation <= 1)).all()
    assert (df.ub_used_kb * 1024 <= get_preset("ascend-910b2").ub_bytes).all()


def test_looping_versions_launch_at_most_one_block_per_core():
    hw = get_preset("ascend-910b2")
    df = sweep("v3", 1, 1024, 64, 2, hw, [1, 8, 64])
    assert (df.blocks <= hw.vector_cores).all()
    assert df.tiles.tolist() == [1024, 128, 16]


def test_a_tile_that_overflows_ub_is_reported_not_raised():
    df = sweep("v2", 1, 64, 4096, 2, "ascend-910b2", [1, 64])
    assert np.isnan(df.latency_us.iloc[1]) and "UB" in df.note.iloc[1]
    assert df.latency_us.iloc[0] > 0


def test_sweep_rejects_bad_tile_sizes():
    with pytest.raises(ValueError, match="whole number >= 1"):
        sweep("v1", 1, 64, 8, 2, "ascend-910b2", [0])
    with pytest.raises(ValueError, match="at least one"):
        sweep("v1", 1, 64, 8, 2, "ascend-910b2", [])


def test_autotune_picks_the_minimum_of_its_own_table_and_says_why():
    best = autotune(1, 1024, 64, 2, version="v1")
    assert best.latency_us == best.table.latency_us.min()
    assert f"tileS={best.tile_s}" in best.reason and "next best" in best.reason


def test_candidates_never_exceed_S():
    assert candidate_tile_sizes(5) == [1, 2, 4, 5]
    assert max(candidate_tile_sizes(10_000)) == 256


def test_bucket_table_in_data_is_fresh():
    """The committed table equals what the autotuner gives today. If the model changed on
    purpose, regenerate: python -c 'from npu_lab.kernels.moe_gating.sweep import write_bucket_table; write_bucket_table()'"""
    committed = pd.read_csv(bucket_table_path())
    fresh = bucket_table()
    pd.testing.assert_frame_equal(committed[["S", "E", "K", "tileS"]], fresh[["S", "E", "K", "tileS"]])
    np.testing.assert_allclose(committed.latency_us, fresh.latency_us, rtol=1e-6)


def test_lookup_uses_the_nearest_bucket_and_respects_S():
    table = pd.read_csv(bucket_table_path())
    row = table.iloc[3]
    assert lookup_tile_s(int(row.S), int(row.E), int(row.K)) == row.tileS
    assert lookup_tile_s(3, 64, 2) <= 3


def test_lookup_clamps_to_what_fits_ub():
    """A bucket's tileS that would overflow UB for the actual shape is cut to what fits."""
    from npu_lab.kernels.moe_gating import moe_ub_capacity

    tile = lookup_tile_s(3000, 128, 4)
    assert 1 <= tile <= moe_ub_capacity("v3", 128, 4, get_preset("ascend-910b2").ub_bytes)


def test_sweep_clamps_tile_sizes_above_S_once():
    df = sweep("v1", 1, 20, 8, 2, "ascend-910b2", [8, 32, 64])
    assert df.tileS.tolist() == [8, 20]
