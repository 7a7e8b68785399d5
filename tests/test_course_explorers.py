"""The explorers of notebooks 05-07 (DoubleBufferExplorer, FastExpExplorer, TuningExplorer): controls drive the
simulations and the status lines."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab.kernels.moe_gating import simulate_moe_gating
from npu_lab.course.explorers import DoubleBufferExplorer


@pytest.fixture(scope="module")
def dbe():
    return DoubleBufferExplorer()


@pytest.mark.parametrize("version", ["v1", "v2", "v2_bad_sync", "v2c"])
def test_status_is_the_simulated_latency(dbe, version):
    dbe.set(version=version, tile_s=8)
    truth = simulate_moe_gating(1, 1024, 64, 2, version=version, tile_s=8).latency_us
    assert dbe.error is None and f"simulator {truth:.1f} us" in dbe.status.value
    assert dbe.result.version == version


def test_hand_model_follows_the_kernel(dbe):
    ends = {}
    for version in ("v1", "v2", "v2_bad_sync"):
        dbe.set(version=version, tile_s=8)
        ends[version] = dbe.hand_schedule()[0].end_us.max()
    assert ends["v2"] < ends["v1"] == pytest.approx(ends["v2_bad_sync"])   # the barrier undoes the overlap
    dbe.set(version="v2c", tile_s=8)
    assert dbe.hand_schedule()[0].end_us.max() < ends["v2"]                # one copy per tile


def test_bad_choices_are_refused():
    with pytest.raises(ValueError, match="version"):
        DoubleBufferExplorer(version="v9")
    with pytest.raises(ValueError, match="tile_s"):
        DoubleBufferExplorer(tile_s=3)


def test_fast_exp_explorer_status_and_marker():
    from npu_lab import get_preset
    from npu_lab.course.ex06 import exp_break_even_cycles
    from npu_lab.kernels.moe_gating import exp_speedup
    from npu_lab.course.explorers import FastExpExplorer

    fe = FastExpExplorer()
    hw = get_preset("ascend-910b2")
    assert fe.exp_cost.value == hw.vector_exp_cycles_per_repeat      # starts at the preset's assumption
    fe.set(n_floats=4096, exp_cost=35.0)
    truth = exp_speedup(hw.replace(vector_exp_cycles_per_repeat=35.0), 4096)
    assert fe.speedup == truth and f"{truth:.2f}x" in fe.status.value
    assert f"break-even at {exp_break_even_cycles(hw, 4096):.1f}" in fe.status.value
    assert list(fe.figure.data[1].x) == [35.0]
    with pytest.raises(ValueError, match="n_floats"):
        FastExpExplorer(n_floats=5)


def test_tuning_explorer_circles_the_tuners_choice_and_explains_refusals():
    from npu_lab.kernels.moe_gating import autotune
    from npu_lab.course.explorers import TuningExplorer
    from npu_lab.course.explorers.tuning import TUNING_TILES

    te = TuningExplorer(chip="ascend-910b2", version="v3")
    truth = autotune(1, 1024, 64, 2, version="v3", hw="ascend-910b2", candidates=list(TUNING_TILES))
    assert te.best.tile_s == truth.tile_s and truth.reason in te.status.value
    te.set(E=8, K=8)
    assert "E=8, K=8" in te.status.value
    te.set(chip="ascend-310p3", version="v1")
    assert te.error and "DataCopyPad" in te.status.value and te.best is None
    with pytest.raises(ValueError, match="version"):
        TuningExplorer(version="v4")               # v4 has no tileS


# ---- the TuningExplorer's committed sweeps (issue 16 §5: no simulation on a slider move) ----
_GRID_SAMPLE = [("v1", "article", 8, 1), ("v1", "article", 64, 2), ("v2", "ascend-910b2", 256, 8),
                ("v2c", "ascend-310p3", 32, 4), ("v3", "ascend-910b2", 128, 2), ("v3", "article", 16, 8)]


def test_tuning_grid_covers_every_choice_and_is_fresh():
    """The committed sweeps hold every (version, chip, E, K) the explorer offers, and a sample of
    them equals a live sweep (regenerate with tuning.write_tuning_grid() when this fails)."""
    from npu_lab.kernels.moe_gating import autotune, sweep
    from npu_lab.course.explorers import tuning as T

    grid = T._load_grid()
    keys = {(v, c, e, k) for v in T.TUNING_VERSIONS for c in T.MOE_CHIPS for e in T.E_CHOICES
            for k in T.K_CHOICES if k <= e}
    assert set(grid) == keys
    for key in _GRID_SAMPLE:
        version, chip, E, K = key
        live = sweep(version, 1, T.GRID_S, E, K, chip, T.TUNING_TILES)
        assert T._same_sweep(grid[key], live), f"{key}: data/tuning_explorer_sweeps.csv is stale"
        assert list(grid[key]["bottleneck"].fillna("")) == list(live["bottleneck"].where(live["latency_us"].notna(), "").fillna(""))
        truth = autotune(1, T.GRID_S, E, K, version=version, hw=chip, candidates=list(T.TUNING_TILES))
        mine = T._tune(grid[key])
        assert (mine.tile_s, mine.latency_us, mine.reason) == (truth.tile_s, truth.latency_us, truth.reason)


def test_tuning_explorer_moves_without_simulating(monkeypatch):
    from npu_lab.course.explorers import tuning as T

    te = T.TuningExplorer(chip="ascend-910b2", version="v2")
    assert te._shipped, "the committed sweeps were not used"

    def no_sim(*a, **k):
        raise AssertionError("a slider move simulated")
    monkeypatch.setattr(T, "autotune", no_sim)
    monkeypatch.setattr(T, "sweep", no_sim)
    for E in T.E_CHOICES:
        te.E.value = E
        assert te.error is None and f"E={E}," in te.status.value
    te.K.value = 8
    assert te.best.tile_s in T.TUNING_TILES and list(te.figure.data[1].x) == [te.best.tile_s]


def test_tuning_explorer_ignores_a_stale_grid(monkeypatch):
    """A committed sweep that no longer matches the model (a cost changed) is not shown."""
    from npu_lab.course.explorers import tuning as T

    stale = {k: v.assign(latency_us=v["latency_us"] * 1.5) for k, v in T._load_grid().items()}
    monkeypatch.setattr(T, "_load_grid", lambda: stale)
    te = T.TuningExplorer(chip="article", version="v1")
    assert te._shipped == {}
    te.E.value = 128
    live = T.autotune(1, 1024, 128, 2, version="v1", hw="article", candidates=list(T.TUNING_TILES))
    assert te.best.latency_us == live.latency_us
    assert T.TuningExplorer(S=512)._shipped == {}          # the file is for S = 1024 only


def test_heat_map_grid_marks_the_sweet_spot_and_refuses_a_bad_dimension():
    import numpy as np

    from npu_lab.course.explorers import sweet_spot_heat_map, tile_latency_grid
    from npu_lab.kernels.moe_gating import sweep

    grid = tile_latency_grid("v3", "S", [16, 1024], tiles=(1, 8, 32))
    assert list(grid.index) == [16, 1024] and list(grid.columns) == [1, 8, 32]
    assert np.isnan(grid.loc[16, 32])                                      # a tile longer than S does not exist
    row = sweep("v3", 1, 1024, 64, 2, "ascend-910b2", [1, 8, 32]).set_index("tileS")["latency_us"]
    assert np.allclose(grid.loc[1024].to_numpy(), row.reindex([1, 8, 32]).to_numpy())
    fig = sweet_spot_heat_map({"v3": grid}, "S")
    z = np.array(fig.data[0].z, dtype=float)
    assert np.nanmin(z, axis=1) == pytest.approx([1.0, 1.0])              # each row relative to its own best
    with pytest.raises(ValueError, match="dim"):
        tile_latency_grid("v3", "K", [2])


# ---------------------------------------------------------------- notebook 01: what a copy costs
def test_copy_cost_is_the_models_cost_functions():
    from npu_lab import get_preset
    from npu_lab.course.explorers import copy_cost
    from npu_lab.sim.costs import burst_efficiency, dma_occupancy_cycles, gm_aligned
    from npu_lab.sim.l2 import core_bytes_per_cycle

    for chip in ("ascend-910b2", "ascend-310p3"):
        hw = get_preset(chip)
        for burst, align, cores in [(32, 512, 1), (2048, 512, 1), (2048, 32, 1), (4096, 512, hw.vector_cores),
                                    (16384, 32, 1), (65536, 512, 1)]:
            c = copy_cost(chip, burst, align, cores)
            bpc = core_bytes_per_cycle(hw, cores)[0]
            aligned = align == 512 and gm_aligned(hw, burst)
            assert c.aligned == aligned
            assert c.occupancy_cycles == dma_occupancy_cycles(hw, burst, bpc, burst, aligned)
            factor = 1.0 if aligned else hw.dma_gm_misaligned_efficiency
            assert c.efficiency == pytest.approx(burst_efficiency(hw, burst) * factor)
            assert c.effective_gbps == pytest.approx(burst / c.period_cycles * hw.clock_ghz)
            assert c.effective_gbps <= c.peak_gbps


def test_copy_cost_has_the_guides_shape():
    from npu_lab.course.explorers import copy_cost_curve
    from npu_lab.course.explorers.copy_cost import BURST_CHOICES

    for chip in ("ascend-910b2", "ascend-310p3"):
        aligned = [c.effective_gbps for c in copy_cost_curve(chip, 512)]
        loose = [c.effective_gbps for c in copy_cost_curve(chip, 32)]
        assert aligned == sorted(aligned) and loose == sorted(loose)          # bigger bursts, more bandwidth
        at_16k = copy_cost_curve(chip, 512, bursts=[16384])[0]
        assert at_16k.effective_gbps >= 0.85 * at_16k.peak_gbps > 4 * aligned[BURST_CHOICES.index(512)]
        if chip == "ascend-910b2":                                            # 512-B alignment: the A2 only
            assert all(b < a for a, b, n in zip(aligned, loose, BURST_CHOICES) if n >= 512)
        else:
            assert loose == aligned


def test_copy_stream_period_matches_the_simulator():
    """The explorer's period (latencies overlapping, copies in flight) is what the simulator does
    with a stream of copies on one core."""
    import numpy as np

    from npu_lab import GlobalTensor, get_preset, launch, npu_kernel
    from npu_lab.course.explorers import copy_cost
    from npu_lab.lang import TBuf, TPosition

    @npu_kernel
    def stream(ctx, x_gm, burst, copies):
        buf = TBuf(TPosition.VECCALC)
        ctx.pipe.init_buffer(buf, burst * copies, name="x")
        x, n = buf.get(np.float32), burst // 4
        for i in range(copies):                      # every copy to its own UB span: no waits between them
            ctx.data_copy(x[i * n], x_gm[i * n], n)

    for chip, burst, copies in [("ascend-310p3", 2048, 48), ("ascend-910b2", 512, 96), ("ascend-910b2", 4096, 40)]:
        hw = get_preset(chip)
        c = copy_cost(chip, burst, 512, 1)
        x = GlobalTensor.empty(copies * burst // 4, np.float32, "x", timing_only=True)
        ev = launch(stream, 1, x, burst, copies, hw=chip, timing_only=True).events()
        ev = ev[ev["pipe"] == "MTE2"]
        assert len(ev) == copies
        assert ev.duration_us.iloc[0] == pytest.approx(hw.cycles_to_us(c.occupancy_cycles))
        span = ev.start_us.iloc[-1] - ev.start_us.iloc[0]
        assert span / (copies - 1) == pytest.approx(c.time_per_copy_us, rel=0.02)
        assert ev.ready_us.iloc[0] - ev.start_us.iloc[0] == pytest.approx(c.waited_copy_us)


def test_copy_cost_explorer_follows_its_sliders():
    from npu_lab.course.explorers import CopyCostExplorer, copy_cost, copy_cost_curve

    e = CopyCostExplorer()
    assert e.cost == copy_cost("ascend-910b2", 512, 512, 1)
    e.burst.value = 8192                              # a slider move redraws
    assert e.cost.burst_bytes == 8192 and list(e.figure.data[2].x) == [8192]
    assert f"{copy_cost('ascend-910b2', 8192).effective_gbps:.1f} GB/s" in e.status.value
    e.align.value = 32
    assert e.cost == copy_cost("ascend-910b2", 8192, 32, 1) and "not 512-B aligned" in e.status.value
    e.set(chip="ascend-310p3", cores=True)
    assert e.cost == copy_cost("ascend-310p3", 8192, 32, 8) and "all 8 cores" in e.status.value
    assert list(e.figure.data[0].y) == [c.effective_gbps for c in copy_cost_curve("ascend-310p3", 512, 8)]
    assert e.last_update_s < 0.2
    with pytest.raises(ValueError, match="burst_bytes"):
        CopyCostExplorer(burst_bytes=1000)
    with pytest.raises(ValueError, match="gm_align_bytes"):
        copy_cost("ascend-910b2", 512, 64)
    with pytest.raises(ValueError, match="cores"):
        copy_cost("ascend-310p3", 512, 512, 9)


def test_copy_bandwidth_check_says_what_went_wrong():
    """Exercise 01.2's check (ex01) takes the explorer's number and names the usual slips."""
    from npu_lab import get_preset
    from npu_lab.course.ex01 import COPY_STREAM_CASE, check_copy_bandwidth
    from npu_lab.course.explorers import copy_cost

    c = copy_cost(COPY_STREAM_CASE["chip"], COPY_STREAM_CASE["burst_bytes"])
    assert check_copy_bandwidth(None).correct is None
    assert check_copy_bandwidth(c.effective_gbps).correct is True
    assert check_copy_bandwidth(f"{c.effective_gbps:.1f} GB/s").correct is True
    assert "MB/s" in check_copy_bandwidth(c.effective_gbps * 1000)
    waited = COPY_STREAM_CASE["burst_bytes"] / (c.occupancy_cycles + c.latency_cycles) * get_preset(c.chip).clock_ghz
    assert "waited for" in check_copy_bandwidth(waited)
    assert "peak" in check_copy_bandwidth(c.peak_gbps)
    assert check_copy_bandwidth("fast").correct is False


def test_explorers_precompute_the_next_moves_while_the_kernel_is_idle(monkeypatch):
    """After a browser move, idle turns of the event loop fill the caches for the neighbouring
    values, so the next move simulates nothing; a newer move re-aims the warm-up."""
    import asyncio

    from npu_lab.course.explorers import DoubleBufferExplorer, TileSweepExplorer
    from npu_lab.course.explorers import double_buffer, tile_sweep

    dbe, tse = DoubleBufferExplorer(), TileSweepExplorer(chip="article")

    async def moves():
        dbe.tile_s.set_state({"index": 4})      # a SelectionSlider's front end sends its index: 16
        tse.tile_s.set_state({"value": 9})
        for _ in range(3000):                    # until both warm-ups ran out of jobs (30 s at most)
            await asyncio.sleep(0.01)
            if getattr(dbe, "_npu_warm", 1) is None and getattr(tse, "_npu_warm", 1) is None:
                break

    asyncio.run(moves())
    assert dbe.tile_s.value == 16 and tse.tile_s.value == 9

    def no_sim(*a, **k):
        raise AssertionError("a move simulated: its run was not precomputed")
    monkeypatch.setattr(double_buffer, "simulate_moe_gating", no_sim)
    monkeypatch.setattr(tile_sweep, "simulate_moe_gating", no_sim)
    monkeypatch.setattr(tile_sweep, "sweep", no_sim)
    for ts, version in ((64, "v2"), (1, "v1"), (4, "v2c")):
        dbe.set(tile_s=ts, version=version)
        assert dbe.error is None and dbe.result.tiling.tileS == ts
    for ts in (10, 13, 5, 9):
        tse.tile_s.value = ts
        assert tse.error is None
    tse.S.value = 1025                           # one step of a shape slider: warmed too
    assert tse.error is None and tse.result.latency_us > 0


def test_a_committed_grid_is_written_exactly_and_whole(tmp_path):
    """The explorers' grids (tuning, decode, MoE layer) are written by one helper: float64 values
    round-trip exactly, and a write that fails leaves the previous file as it was."""
    import pandas as pd

    from npu_lab.course.explorers._base import _commit_grid_csv

    path = tmp_path / "grid.csv"
    frame = pd.DataFrame({"x": [0.1 + 0.2, 1 / 3, 1e-300], "k": [1, 2, 3]})
    assert _commit_grid_csv(frame, path) == path
    assert pd.read_csv(path)["x"].tolist() == frame["x"].tolist()
    before = path.read_bytes()

    class Broken(pd.DataFrame):
        def to_csv(self, target, **kwargs):
            open(target, "w").write("half a row,")
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _commit_grid_csv(Broken(frame), path)
    assert path.read_bytes() == before


def test_a_simulated_grid_reads_back_as_it_was_run(tmp_path):
    """The decode and GEMM explorers' grids: a row per key with its values, or the library's
    refusal in ``error``; read back, keys and values have their types again and a refusal is its
    message."""
    from npu_lab.course.explorers._base import _commit_grid_csv, _read_grid_csv, _simulate_grid

    def simulate(n, name):
        if n < 0:
            raise ValueError(f"n = {n} is refused")
        return n / 3, n * 2, name.upper()

    columns = ["n", "name", "third", "double", "shout", "error"]
    frame = _simulate_grid([(1, "a"), (-1, "b"), (7, "c")], simulate, (ValueError,), (np.nan, 0, ""), columns)
    assert list(frame.columns) == columns and frame["error"].tolist() == ["", "n = -1 is refused", ""]
    path = _commit_grid_csv(frame, tmp_path / "grid.csv")
    grid = _read_grid_csv(path, columns, (int, str), (float, int, str))
    assert grid == {(1, "a"): (1 / 3, 2, "A"), (-1, "b"): "n = -1 is refused", (7, "c"): (7 / 3, 14, "C")}
    assert _read_grid_csv(tmp_path / "missing.csv", columns, (int, str), (float, int, str)) == {}
    with pytest.raises(AttributeError):                  # an error outside ``errors`` is not a refusal
        _simulate_grid([(1, None)], simulate, (ValueError,), (np.nan, 0, ""), columns)
