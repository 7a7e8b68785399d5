"""The MoE layer explorer (notebook 14) reads its stage tables from a committed grid, so a preset
change redraws without simulating; the grid is fresh, and a stale one is ignored (issue 16 §5)."""

from __future__ import annotations

import pandas as pd
import pytest

from npu_lab.course.explorers import moe_layer as M

_LOAD_GRID = M._load_grid


@pytest.fixture
def fresh_caches(monkeypatch):
    monkeypatch.setattr(M, "_GRIDS", {})
    monkeypatch.setitem(M._USE_COMMITTED, "ok", True)
    yield
    _LOAD_GRID.cache_clear()


def test_committed_grid_is_fresh():
    """Every (preset, gating, tokens) of the file equals a live run (regenerate with
    ``write_moe_layer_grid()`` after a kernel or the cost model changed)."""
    grid = M._load_grid()
    assert set(grid) == {(p, t, g) for p in M.ROUTER_PRESETS for t in M.TOKEN_STEPS for g in M.GATINGS}
    for key, table in grid.items():
        assert M.same_stages(table, M._live_stages(*key)), f"{key}: data/moe_layer_explorer_stages.csv is stale"


def test_preset_change_does_not_simulate(fresh_caches, monkeypatch):
    e = M.MoeLayerExplorer()
    calls = []
    monkeypatch.setattr(M, "_live_stages", lambda *key: calls.append(key))
    for preset in M.ROUTER_PRESETS:
        for gating in M.GATINGS:
            e.set(preset=preset, gating=gating)
            assert M.same_stages(e.stages, M._load_grid()[(preset, e.tokens.value, gating)])
            assert preset in e.figure.layout.title.text
    assert calls == []


def test_a_stale_grid_is_ignored(fresh_caches, monkeypatch):
    """A committed table that differs from the live starting point retires the file: every
    preset is then computed live."""
    key = ("Qwen-MoE-like", 8, "v4")
    grid = dict(M._load_grid())
    stale = grid[key].copy()
    stale["us"] = stale["us"] * 2
    grid[key] = stale
    other = ("Mixtral-like", 8, "v4")
    grid[other] = grid[other].assign(us=grid[other]["us"] * 3)
    monkeypatch.setattr(M, "_load_grid", lambda: grid)
    e = M.MoeLayerExplorer(*key[:2], gating=key[2])
    assert M._USE_COMMITTED["ok"] is False
    assert M.same_stages(e.stages, M._live_stages(*key))
    e.preset.value = "Mixtral-like"
    assert M.same_stages(e.stages, M._live_stages(*other))
    assert not M.same_stages(e.stages, grid[other])


def test_same_stages_notices_a_changed_time_or_word():
    table = M._load_grid()[("Qwen-MoE-like", 8, "v4")]
    assert M.same_stages(table, table.copy())
    worse = table.copy()
    worse.iloc[0, worse.columns.get_loc("us")] *= 1 + 1e-9
    assert not M.same_stages(table, worse)
    words = table.copy()
    words.iloc[0, words.columns.get_loc("what")] = "something else"
    assert not M.same_stages(table, words)
    assert isinstance(table, pd.DataFrame) and list(table.index) == list(M.STAGES)
