"""Sweeps, the autotuner and the shape-bucket table (npu_lab.kernels.moe_gating.sweep)."""

import numpy as np
import pandas as pd
import pytest

from npu_lab import get_preset
from npu_lab.kernels.moe_gating import autotune, bucket_table, lookup_tile_s, simulate_moe_gating, sweep
from npu_lab.kernels.moe_gating.buckets import TABLES
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


@pytest.mark.parametrize("chip, version", TABLES)
def test_bucket_tables_in_data_are_fresh(chip, version):
    """Every committed table exists and a few of its rows (first, middle, last runnable) are what
    the autotuner gives today. If the model or a kernel changed on purpose, regenerate:
    python -c 'from npu_lab.kernels.moe_gating.sweep import write_bucket_tables; write_bucket_tables()'"""
    committed = pd.read_csv(bucket_table_path(version, chip))
    assert set(committed.version) == {version} and set(committed.chip) == {chip}
    runnable = committed.dropna(subset=["tileS"])
    picks = runnable.iloc[[0, len(runnable) // 2, -1]]
    for row in picks.itertuples():
        fresh = bucket_table(version, chip, S_values=(int(row.S),), E_values=(int(row.E),), K_values=(int(row.K),))
        assert int(fresh.tileS.iloc[0]) == int(row.tileS), f"stale {chip} {version} row S={row.S} E={row.E} K={row.K}"
        np.testing.assert_allclose(fresh.latency_us.iloc[0], row.latency_us, rtol=1e-6)


def test_default_tile_s_comes_from_the_bucket_table_except_v1():
    """No tile_s: v2/v2c/v3 take the nearest bucket's tileS (B·S rows), v1 the article's rule (8)."""
    from npu_lab.kernels.moe_gating import default_tile_s, plan_moe_gating
    from npu_lab.kernels.moe_gating.buckets import nearest_bucket_tile_s

    for version in ("v2", "v2c", "v3", "v3_fast_exp"):
        want = nearest_bucket_tile_s(4 * 4096, 64, 2, version, "ascend-910b2")
        assert want is not None and default_tile_s(4, 4096, 64, 2, version, "ascend-910b2") == min(want, 4096)
        assert plan_moe_gating(4, 4096, 64, 2, version=version)[0].tileS == min(want, 4096)
    assert plan_moe_gating(1, 65536, 64, 2, version="v1")[0].tileS == 8
    assert plan_moe_gating(1, 65536, 64, 2, version="v3")[0].tileS > 8
    # no table for the article's fitted chip: the article's rule
    assert plan_moe_gating(1, 65536, 64, 2, version="v3", hw="article")[0].tileS == 8
    # clamped to S
    assert plan_moe_gating(1, 3, 64, 2, version="v3")[0].tileS <= 3


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
