"""npu_lab.sim.monitor (the numbers) and npu_lab.course.monitor_view (plots, the MoE ladder).

Invariants, on every course kernel version the chip can run, on both chips: per core and pipe
busy + wait_data + wait_sync + idle == the span; busy == Timeline's own busy figures; utilisation,
overlap in [0, 1]; the verdict is Timeline.bottleneck()'s. Then kernels built to be memory-bound
and compute-bound get those verdicts; a launch with fewer blocks than cores shows idle cores; a
flag wait on a copy counts as waiting on data and one on the vector pipe as waiting on sync; the
msprof ratios agree with op_summary; bad input raises clear errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from npu_lab import GlobalTensor, get_preset, launch, npu_kernel
from npu_lab.course import ex08
from npu_lab.course.debugging import op_summary
from npu_lab.course.monitor_view import LADDER_COLUMNS, monitor_bars_figure, monitor_ladder, utilisation_heatmap
from npu_lab.kernels.moe_gating import VERSIONS, simulate_moe_gating
from npu_lab.kernels.scaled_add import scaled_add
from npu_lab.lang import TBuf, TPosition
from npu_lab.lang.errors import CapabilityError
from npu_lab.sim import Timeline
from npu_lab.sim.core import ALL_PIPES, PIPE_CODE
from npu_lab.sim.monitor import CATEGORIES, MSPROF_NAMES, category_of, monitor
from npu_lab.sim.thresholds import IMBALANCE

CHIPS = ("ascend-910b2", "ascend-310p3")
PARTS = [f"{c}_us" for c in CATEGORIES]


def _course_timelines(chip):
    """Every MoE version the chip can run at two shapes (one tile per block; many tiles per block)
    and the scaled-add kernel single- and double-buffered."""
    out = {}
    for v in VERSIONS:
        for shape in ((1, 256, 64, 2), (2, 2048, 128, 4)):
            try:
                out[(v, shape)] = simulate_moe_gating(*shape, version=v, hw=chip).timeline
            except CapabilityError:
                pass
    for nb in (1, 2):
        out[("scaled_add", nb)] = scaled_add(1 << 16, None, hw=chip, num_buffers=nb, timing_only=True)[1]
    return out


@pytest.fixture(scope="module", params=CHIPS)
def course_runs(request):
    return request.param, _course_timelines(request.param)


def test_invariants_on_every_course_kernel(course_runs):
    chip, runs = course_runs
    assert len(runs) >= 4
    for key, t in runs.items():
        r = monitor(t, chip)
        tab = r.table
        span = sum(l.hw.cycles_to_us(l.body_cycles) for l in t.launches)
        np.testing.assert_allclose(tab[PARTS].sum(axis=1), span, rtol=1e-12, atol=1e-9, err_msg=str(key))
        np.testing.assert_allclose(tab["span_us"], span, rtol=1e-12, atol=1e-9)
        assert (tab[PARTS] >= -1e-9).all().all(), key
        assert tab["utilisation"].between(0, 1 + 1e-12).all(), key
        # busy is exactly the Timeline's own per-core busy time
        busy = t.busy_us_by_core()
        vec = tab[tab["core_type"] == "vector"]
        for p in {"S", "MTE2", "V", "MTE3"}:
            got = vec[vec["pipe"] == p].sort_values("core")["busy_us"].to_numpy()
            np.testing.assert_allclose(got, busy[:, PIPE_CODE[p]], rtol=1e-12, atol=1e-9, err_msg=f"{key} {p}")
        s = r.summary
        assert 0 <= s["dma_compute_overlap"] <= s["dma_compute_overlap_with_scalar"] + 1e-12 <= 1 + 1e-9, key
        assert (r.verdict, r.evidence) == t.bottleneck() and s["verdict"] == t.summary()["bottleneck"]
        assert s["cores"] == t.core_count() and s["cores_used"] + s["idle_cores"] == s["cores"]
        assert s["core_busy_min_us"] <= s["core_busy_mean_us"] <= s["core_busy_max_us"] <= span + 1e-9
        for stem in MSPROF_NAMES["vector"].values():
            assert 0 <= s[f"{stem}_ratio"] <= 1 + 1e-9
        assert math.isnan(s["ub_hit_rate"]) and "software-managed" in s["ub_hit_rate_note"]
        assert r.advice and str(r).startswith(f"{r.verdict}-bound")


def test_msprof_ratios_agree_with_op_summary():
    for v in ("v2", "v3", "v4"):
        t = simulate_moe_gating(2, 2048, 128, 4, version=v).timeline
        s, row = monitor(t).summary, op_summary(t).iloc[0]
        for label in ("scalar", "vec", "mte2", "mte3"):
            assert s[f"aiv_{label}_ratio"] == pytest.approx(row[f"aiv_{label}_ratio"], rel=1e-12)
            assert s[f"aiv_{label}_time(us)"] == pytest.approx(row[f"aiv_{label}_time(us)"], rel=1e-12)
        assert s["aiv_time(us)"] == pytest.approx(row["aiv_time(us)"], rel=1e-12)


# ------------------------------------------------------------------------------- built kernels
@npu_kernel
def _copy_only(ctx, x_gm, y_gm, tiles, tile):
    """Big copies in and out, no compute: GM -> UB -> GM, tile after tile, double-buffered by hand."""
    bufs = [TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)]
    for i, b in enumerate(bufs):
        ctx.pipe.init_buffer(b, tile * 4, name=f"b{i}")
    views = [b.get(np.float32) for b in bufs]
    base = ctx.get_block_idx() * tiles * tile
    for i in range(tiles):
        u = views[i % 2]
        if i >= 2:
            ctx.wait_flag("MTE3_MTE2", i % 2)
        ctx.data_copy(u, x_gm[base + i * tile], tile)
        ctx.set_flag("MTE2_MTE3", i % 2)
        ctx.wait_flag("MTE2_MTE3", i % 2)
        ctx.data_copy(y_gm[base + i * tile], u, tile)
        if i + 2 < tiles:
            ctx.set_flag("MTE3_MTE2", i % 2)


@npu_kernel
def _compute_heavy(ctx, x_gm, y_gm, rounds):
    """One small copy in, many vector instructions, one copy out."""
    xb, yb = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(xb, 4096 * 4, name="x")
    ctx.pipe.init_buffer(yb, 4096 * 4, name="y")
    x, y = xb.get(np.float32), yb.get(np.float32)
    off = ctx.get_block_idx() * 4096
    ctx.data_copy(x, x_gm[off], 4096)
    ctx.set_flag("MTE2_V", 0); ctx.wait_flag("MTE2_V", 0)
    for _ in range(rounds):
        ctx.exp(y, x, 4096)
        ctx.muls(x, y, 0.5, 4096)
    ctx.set_flag("V_MTE3", 0); ctx.wait_flag("V_MTE3", 0)
    ctx.data_copy(y_gm[off], y, 4096)


def _run(kernel, blocks, n, *args, chip="ascend-910b2"):
    x = GlobalTensor.from_array(np.zeros(n, np.float32), "x")
    y = GlobalTensor.empty(n, np.float32, "y")
    return launch(kernel, blocks, x, y, *args, hw=chip, timing_only=True)


@pytest.mark.parametrize("chip", CHIPS)
def test_a_copy_only_kernel_is_memory_bound_with_no_overlap(chip):
    cores = get_preset(chip).vector_cores
    tiles, tile = 64, 16384
    t = _run(_copy_only, cores, cores * tiles * tile, tiles, tile, chip=chip)
    r = monitor(t, chip)
    assert r.verdict == "memory" == t.bottleneck()[0]
    assert r.summary["dma_compute_overlap"] == 0.0                   # no V/M work at all
    assert r.summary["aiv_vec_ratio"] == 0.0 and r.summary["aiv_mte2_ratio"] > 0.4


@pytest.mark.parametrize("chip", CHIPS)
def test_a_vector_heavy_kernel_is_compute_bound(chip):
    cores = get_preset(chip).vector_cores
    t = _run(_compute_heavy, cores, cores * 4096, 200, chip=chip)
    r = monitor(t, chip)
    assert r.verdict == "compute" == t.bottleneck()[0]
    assert r.summary["aiv_vec_ratio"] > 0.6 and "vector unit" in r.advice[0]
    v = r.table[(r.table["pipe"] == "V")]
    assert (v["wait_data_us"] > 0).all()        # V waited for the first copy in, on every core
    assert (v["wait_sync_us"] > 0).all()        # ... and for its own results (each instruction reads the last)


def test_fewer_blocks_than_cores_shows_idle_cores():
    t = _run(_compute_heavy, 3, 3 * 4096, 20)
    r = monitor(t)
    cores = t.core_count()
    assert r.summary["idle_cores"] == cores - 3 and r.summary["cores_used"] == 3
    assert r.summary["core_busy_min_us"] == 0.0
    assert r.summary["balance_max_over_mean"] == pytest.approx(1.0)   # over the cores that ran
    idle_rows = r.table[r.table["core"] >= 3]
    assert (idle_rows["idle_us"] == idle_rows["span_us"]).all() and (idle_rows["busy_us"] == 0).all()
    assert any("cores ran no block" in a for a in r.advice)


def test_uneven_blocks_flag_imbalance():
    """v1 at one tile per block on more tiles than cores: some cores run two blocks."""
    hw = get_preset("ascend-910b2")
    t = simulate_moe_gating(1, 8 * (hw.vector_cores + 4), 64, 2, version="v1", tile_s=8).timeline
    r = monitor(t)
    assert r.summary["balance_max_over_mean"] >= IMBALANCE
    assert any("load imbalance" in a for a in r.advice)


def test_waits_are_split_by_what_they_waited_for():
    """The synced scale loop: V waits on the copies (MTE2_V, MTE3_V flags): data; MTE2 waits on V
    (V_MTE2): sync; MTE3 waits on V (V_MTE3): sync."""
    from tests.test_debugging import _scale_tiles_synced

    _, _, t = ex08.run_scale_tiles(_scale_tiles_synced, 4)
    tab = monitor(t).table.set_index(["core", "pipe"])
    assert tab.loc[(0, "V"), "wait_data_us"] > 0 and tab.loc[(0, "V"), "wait_sync_us"] == 0
    assert tab.loc[(0, "MTE2"), "wait_sync_us"] > 0
    assert tab.loc[(0, "MTE3"), "wait_sync_us"] > 0
    assert category_of("MTE2+V", "waits for MTE2+V (flag)") == "wait_data"
    assert category_of("S", "issued after S") == "wait_sync"
    assert category_of("", "next block") == "idle" and category_of(None, None) == "idle"


def test_bad_sync_waits_for_data_more_than_v2():
    """v2_bad_sync's next copy-in waits for this copy-out: the monitor moves that time to wait_data."""
    bad = monitor(simulate_moe_gating(1, 1024, 64, 2, version="v2_bad_sync", tile_s=8).timeline).summary
    good = monitor(simulate_moe_gating(1, 1024, 64, 2, version="v2", tile_s=8).timeline).summary
    assert bad["wait_data_share"] > 3 * good["wait_data_share"]


def test_l2_hits_and_rereads_are_reported():
    t = simulate_moe_gating(2, 2048, 128, 4, version="discrete").timeline
    s = monitor(t, input_bytes=2 * 2048 * 128 * 4).summary
    assert s["l2_hit_bytes"] == t.l2_hit_bytes and 0 <= s["l2_hit_fraction"] <= 1
    assert 0 < s["gm_reread_fraction"] < 1                  # the chain re-reads its intermediates
    fused = monitor(simulate_moe_gating(2, 2048, 128, 4, version="v3").timeline, input_bytes=2 * 2048 * 128 * 4)
    assert fused.summary["gm_reread_fraction"] == 0.0
    assert math.isnan(monitor(t).summary["gm_reread_fraction"])


# ------------------------------------------------------------------------------- bad input
def test_bad_input_is_rejected():
    t = simulate_moe_gating(1, 256, 64, 2, version="v3").timeline
    with pytest.raises(TypeError, match="monitor takes a Timeline"):
        monitor("trace.json")
    with pytest.raises(ValueError, match="empty Timeline"):
        monitor(Timeline())
    with pytest.raises(ValueError, match="ran on ascend-910b2, not on ascend-310p3"):
        monitor(t, "ascend-310p3")
    with pytest.raises(TypeError, match="HardwareSpec"):
        monitor(t, 3)
    with pytest.raises(ValueError, match="input_bytes"):
        monitor(t, input_bytes=0)
    assert monitor(t, get_preset("ascend-910b2")).verdict == t.bottleneck()[0]
    with pytest.raises(TypeError, match="Timeline or the MonitorReport"):
        monitor_bars_figure([1, 2])
    with pytest.raises(ValueError, match="max_cores"):
        utilisation_heatmap(t, max_cores=0)
    with pytest.raises(ValueError, match="unknown version"):
        monitor_ladder(1, 256, 64, 2, versions=["v9"])


# ------------------------------------------------------------------------------- plots, ladder
def test_figures_show_the_table():
    t = simulate_moe_gating(1, 1024, 64, 2, version="v3").timeline
    r = monitor(t)
    bars = monitor_bars_figure(r, max_cores=4)
    assert [b.name for b in bars.data] == ["busy", "waiting on data", "waiting on sync", "idle"]
    heights = np.sum([np.asarray(b.y) for b in bars.data], axis=0)
    np.testing.assert_allclose(heights, r.table["span_us"].iloc[0])
    heat = utilisation_heatmap(t)
    assert list(heat.data[0].x) == list(MSPROF_NAMES["vector"].values())
    assert heat.data[0].z.shape == (t.core_count(), 4) and np.nanmax(heat.data[0].z) <= 100


@pytest.mark.parametrize("chip", CHIPS)
def test_monitor_ladder_has_one_row_per_version(chip):
    df = monitor_ladder(1, 512, 64, 2, chip)
    assert list(df.index) == list(VERSIONS) and list(df.columns) == LADDER_COLUMNS
    ran = df[df["error"] == ""]
    assert len(ran) >= 2
    for v, row in ran.iterrows():
        t = simulate_moe_gating(1, 512, 64, 2, version=v, hw=chip).timeline
        assert row["verdict"] == t.bottleneck()[0] and row["latency_us"] == pytest.approx(t.total_us)
    assert (df.loc[df["error"] != "", "error"].str.contains("cannot run")).all()


def _cube_timeline(blocks: int, tiles: int = 4):
    """A cube-core launch built on the simulator core directly (the lang layer has no cube
    instructions yet): per tile MTE2 (GM -> L1), MTE1 (L1 -> L0A/B), M (Mmad), FIX (L0C -> GM),
    each stage handed on by a flag."""
    from npu_lab.sim import CUBE_PIPES, CoreState, LaunchRecord, schedule_blocks

    hw = get_preset("ascend-910b2")
    core = CoreState(CUBE_PIPES, hw.scalar_issue_cycles, dma_latency_cycles=hw.dma_latency_cycles,
                     sync_flag_cycles=hw.sync_flag_cycles, pipe_barrier_cycles=hw.pipe_barrier_cycles)
    for i in range(tiles):
        core.issue("MTE2", "DataCopy GM->L1", 400.0, nbytes=32768)
        core.set_flag("MTE2", "MTE1", 0); core.wait_flag("MTE2", "MTE1", 0)
        core.issue("MTE1", "LoadData", 128.0)
        core.set_flag("MTE1", "M", 0); core.wait_flag("MTE1", "M", 0)
        core.issue("M", "Mmad", 512.0)
        core.set_flag("M", "FIX", 0); core.wait_flag("M", "FIX", 0)
        core.issue("FIX", "Fixpipe L0C->GM", 256.0, nbytes=16384)
    trace = core.finish()
    start, where = schedule_blocks(np.full(blocks, trace.duration_cycles), hw.cores("cube"), 0.0)
    record = LaunchRecord("cube_stand_in", hw, "cube", blocks, [trace], np.zeros(blocks, np.int64), start,
                          where, overhead_cycles=hw.us_to_cycles(5.0), kernel_type="cube")
    return Timeline([record])


def test_cube_cores_are_monitored_with_msprof_aic_names():
    t = _cube_timeline(blocks=10)
    r = monitor(t, "ascend-910b2")
    tab = r.table
    assert set(tab["core_type"]) == {"cube"} and set(tab["pipe"]) == {"S", "MTE2", "MTE1", "M", "FIX"}
    assert len(tab) == 5 * t.core_count() == 5 * get_preset("ascend-910b2").cube_cores
    np.testing.assert_allclose(tab[PARTS].sum(axis=1), t.hw.cycles_to_us(t.launches[0].body_cycles))
    s = r.summary
    assert {"aic_cube_ratio", "aic_mte1_ratio", "aic_fixpipe_ratio", "aic_time(us)"} <= set(s.index)
    assert 0 < s["aic_cube_ratio"] < 1 and s["idle_cores"] == t.core_count() - 10
    m = tab[(tab["pipe"] == "M") & (tab["core"] < 10)]
    assert (m["wait_data_us"] > 0).all()              # the cube waits for MTE1's loads
    assert r.verdict == t.bottleneck()[0]
    assert list(utilisation_heatmap(r).data[0].x) == list(MSPROF_NAMES["cube"].values())


def test_classify_gaps_rejects_bad_input():
    from npu_lab.sim.monitor import classify_gaps

    with pytest.raises(ValueError, match="one entry per gap"):
        classify_gaps([0.0], [1.0, 2.0], "V", [], [], [20.0], 1e-3)
    with pytest.raises(ValueError, match="one entry per instruction"):
        classify_gaps([0.0], [1.0], "V", ["MTE2"], [], [20.0], 1e-3)
    with pytest.raises(ValueError, match="pipe must be"):
        classify_gaps([0.0], [1.0], "VEC", [], [], [20.0], 1e-3)
    with pytest.raises(ValueError, match="tol"):
        classify_gaps([0.0], [1.0], "V", [], [], [20.0], 0)
    w, c = classify_gaps([0.0, 0.0], [120.0, 50.0], "V", ["MTE2", "V"], [100.0, 50.0], [20.0], 1e-3)
    assert list(c) == ["waits for MTE2 (flag)", "waits for V (latency)"]


# ------------------------------------------------------------------ every kernel of the course
@pytest.mark.parametrize("chip", CHIPS)
def test_monitor_on_every_course_timeline(chip):
    """GEMM (cube), decode (one and two launches), the scheduled decode kernel, the MoE ladder:
    the parts add up to the span on every core type, busy is the Timeline's, the verdict is its."""
    from npu_lab.course.monitor_view import COURSE_COLUMNS, _course_runs, monitor_course
    from npu_lab.sim.monitor import MSPROF_ALIASES

    spec = get_preset(chip)
    ran = 0
    for family, version, run in _course_runs(spec):
        try:
            t = run()
        except (CapabilityError, ValueError):
            continue
        ran += 1
        r = monitor(t, chip)
        tab, s = r.table, r.summary
        span = sum(l.hw.cycles_to_us(l.body_cycles) for l in t.launches)
        np.testing.assert_allclose(tab[PARTS].sum(axis=1), span, rtol=1e-12, atol=1e-9, err_msg=f"{family} {version}")
        assert (r.verdict, r.evidence) == t.bottleneck()
        kinds = {l.core_type for l in t.launches}
        assert set(tab.core_type) == kinds
        for kind in kinds:
            for stem in MSPROF_NAMES[kind].values():
                assert 0 <= s[f"{stem}_ratio"] <= 1 + 1e-9, (family, version, stem)
        if "cube" in kinds:
            for alias, name in MSPROF_ALIASES.items():
                assert s[alias] == s[name]
            m = tab[tab["pipe"] == "M"]
            assert m.busy_us.sum() > 0
    assert ran >= (20 if chip == "ascend-910b2" else 8)
    df = monitor_course(chip)
    assert list(df.columns) == COURSE_COLUMNS
    ok = df[df.error == ""]
    assert ok.verdict.isin(["launch", "memory", "compute", "sync"]).all()
    assert ((df.error != "") == df.latency_us.isna()).all()
    if chip == "ascend-910b2":
        assert ok.loc["GEMM"].aic_mac_ratio.gt(0).all() and ok.loc["GEMM"].aiv_vec_ratio.isna().all()
        sched = ok.loc["decode, scheduled"]
        # the contiguous split of a long-tailed batch is the unbalanced one, and the monitor says so
        assert sched.balance_max_over_mean.idxmax() == "contiguous"
        assert "load imbalance" in sched.loc["contiguous", "advice"]
        assert sched.loc["split-long", "launches"] == 2


def test_a_timeline_joining_two_chips_is_refused():
    a = scaled_add(1 << 12, None, hw="ascend-910b2", timing_only=True)[1]
    b = scaled_add(1 << 12, None, hw="ascend-310p3", timing_only=True)[1]
    with pytest.raises(ValueError, match="different chips"):
        monitor(Timeline.concat([a, b]))
