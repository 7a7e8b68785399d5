#!/usr/bin/env python3
"""Speed figures of the simulator and the explorer widgets, measured in ONE run (`make bench`).

Every figure is the median of several repeats timed with ``time.perf_counter``; ratios are
taken between medians measured in this same run, so they compare like with like on whatever
machine runs the script. Nothing here is a test: it prints, it does not assert.

    python scripts/bench.py              # every section
    python scripts/bench.py explorer     # only sections whose name contains "explorer"

Adding a section: write a function that calls ``section("name")`` and then ``row(...)`` for each
figure, and append it to ``SECTIONS`` at the bottom.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from npu_lab.kernels.scaled_add import scaled_add  # noqa: E402

N = 1 << 20                  # elements of the scaled-add benchmark
CHIP = "ascend-910b2"        # 48 vector cores
_WIDTH = 74


# ---------------------------------------------------------------------------- helpers
def section(name: str) -> None:
    """Start a section of the printed table."""
    print()
    print(f"== {name} " + "=" * max(0, _WIDTH - len(name) - 4))
    print(f"{'figure':<46} {'value':>14}  unit")
    print("-" * _WIDTH)


def row(label: str, value: float, unit: str = "", note: str = "") -> None:
    """One figure of the current section (value printed with 4 significant digits)."""
    text = f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    print(f"{label:<46} {text:>14}  {unit}" + (f"   ({note})" if note else ""))


def median_seconds(fn, repeats: int = 7, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _inputs(n: int):
    rng = np.random.default_rng(0)
    return rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)


# ---------------------------------------------------------------------------- sections
def bench_simulator() -> None:
    """(a) instructions simulated per second; (b) timing-only vs full; (c) vs plain numpy."""
    x, y = _inputs(N)
    results = {}
    section(f"simulator: scaled_add, {N:,} float32 on {CHIP} (48 cores)")
    for tile_len in (2048, 256):
        timing = lambda: scaled_add(N, None, timing_only=True, hw=CHIP, tile_len=tile_len)  # noqa: E731
        full = lambda: scaled_add(x, y, 2.0, hw=CHIP, tile_len=tile_len)  # noqa: E731
        _, t = timing()
        instructions = int((t.events()["core"] >= 0).sum())   # every instruction of every block
        t_timing = median_seconds(timing, repeats=9)
        t_full = median_seconds(full, repeats=5)
        results[tile_len] = (t_timing, t_full)
        tag = f"tile_len={tile_len}"
        row(f"{tag}: instructions in the timeline", instructions, "instr",
            f"{t.launches[0].block_dim} blocks, {len(t.launches[0].traces)} distinct")
        row(f"{tag}: timing-only run", t_timing * 1e3, "ms")
        row(f"{tag}: full run (numerics too)", t_full * 1e3, "ms")
        row(f"{tag}: timing-only instr / s of wall", instructions / t_timing, "instr/s",
            "distinct blocks simulated once, then replicated")
        row(f"{tag}: full-mode instr / s of wall", instructions / t_full, "instr/s",
            "every block simulated")
        row(f"{tag}: full / timing-only", t_full / t_timing, "x")
    z = np.empty_like(x)
    t_numpy = median_seconds(lambda: np.add(np.multiply(np.float32(2.0), x, out=z), y, out=z), repeats=21)
    t_timing = results[2048][0]
    row("plain numpy alpha*x+y (same 1M elements)", t_numpy * 1e3, "ms")
    row("timing-only (tile 2048) / numpy", t_timing / t_numpy, "x")
    row("full (tile 2048) / numpy", results[2048][1] / t_numpy, "x")


def bench_explorer() -> None:
    """(d) the explorer widget: setting a control's .value until the figure's data changed."""
    from npu_lab.course.widgets import buffers_explorer

    section("explorer widget: .value set -> figure data updated")
    build = median_seconds(lambda: buffers_explorer(), repeats=3)
    row("build buffers_explorer() (n = 2**20)", build * 1e3, "ms")
    e = buffers_explorer()
    mte2 = next(tr for tr in e.figure.data if tr.name == "MTE2")

    def measure(control, values, repeats=3):
        times = []
        for _ in range(repeats):
            for v in values:
                before = mte2.base
                start = time.perf_counter()
                control.value = v
                changed = mte2.base is not before and not np.array_equal(np.asarray(mte2.base), np.asarray(before))
                elapsed = time.perf_counter() - start
                if not changed and e.error is None:
                    raise RuntimeError(f"{control.description} = {v}: the figure did not change")
                times.append(elapsed)
        return statistics.median(times), len(times)

    tiles, k = measure(e.tiles, [4, 5, 6, 7, 8, 12, 16, 24, 32, 8])
    row("tiles/core slider (4..32)", tiles * 1e3, "ms", f"median of {k}")
    buffers, k = measure(e.buffers, [1, 2])
    row("buffers toggle (1 <-> 2)", buffers * 1e3, "ms", f"median of {k}")
    e.tiles.value = 16
    chip, k = measure(e.chip, ["ascend-310p3", "ascend-910b2"])
    row("chip dropdown (910B2 <-> 310P3)", chip * 1e3, "ms", f"median of {k}")
    bars = sum(len(tr.x) for tr in e.figure.data)
    row("bars in the figure (tiles=16, 4 cores)", bars, "bars")


def bench_moe_sweep() -> None:
    """Issue 3 §6: a timing-only sweep of the article's five tileS values (B=1,S=1024,E=64,K=2)."""
    from npu_lab.kernels.moe_gating import ARTICLE_TILE_S, sweep

    section("MoeGatingTopK: timing-only sweep of tileS 1,4,8,16,32 (target < 100 ms)")
    for version in ("v1", "v2", "v3", "discrete"):
        # 21 repeats: one sweep takes ~20 ms, and a shared VM jitters by more than that between runs
        t = median_seconds(lambda: sweep(version, 1, 1024, 64, 2, CHIP, ARTICLE_TILE_S), repeats=21)
        row(f"sweep {version}, 5 tileS values", t * 1e3, "ms")


def bench_moe_full() -> None:
    """Issue 3 §6: full run (numbers + timeline) of fused v3 at B=4,S=4096,E=256,K=8 vs numpy."""
    from npu_lab.kernels.moe_gating import moe_gating_topk, moe_gating_topk_reference, simulate_moe_gating

    section("MoeGatingTopK v3, B=4 S=4096 E=256 K=8: full run (target < 3 s)")
    x = np.random.default_rng(0).standard_normal((4, 4096, 256)).astype(np.float32)
    full = median_seconds(lambda: moe_gating_topk(x, 8, version="v3"), repeats=3)
    timing = median_seconds(lambda: simulate_moe_gating(4, 4096, 256, 8, version="v3"), repeats=3)
    ref = median_seconds(lambda: moe_gating_topk_reference(x, 8), repeats=3)
    row("full run (numerics + timeline)", full, "s")
    row("timing-only run", timing * 1e3, "ms")
    row("numpy reference", ref * 1e3, "ms")
    row("full run / numpy reference", full / ref, "x")
    row("timing-only / numpy reference", timing / ref, "x")


def bench_decode() -> None:
    """Issue 18: a timing-only decode step at B = 64, context 8K, Llama-3-70B heads (q 64, kv 8,
    D 128, float16 KV; target < 100 ms) and a full run at a small shape against numpy."""
    from npu_lab.kernels.decode import decode_attention, decode_attention_reference

    section("decode attention v2, B=64 ctx=8K Llama-3-70B heads (target < 100 ms)")
    lens = np.full(64, 8192)
    step = lambda: decode_attention((64, 64, 128), ((64, 8192, 8, 128), np.float16), None, lens,  # noqa: E731
                                    version="v2", timing_only=True)
    r = step()
    row("timing-only decode step", median_seconds(step, repeats=3) * 1e3, "ms")
    cpu = time.process_time()
    step()
    row("  the same, CPU time (what load does not inflate)", (time.process_time() - cpu) * 1e3, "ms")
    row("simulated step", r.timeline.total_us, "us", f"HBM roofline {r.roofline_us:.0f} us, {r.achieved:.1%}")
    table = np.arange(64 * 512).reshape(64, 512)          # pages of 16 positions, 8K per sequence
    paged = lambda: decode_attention((64, 64, 128), ((64 * 512, 16, 8, 128), np.uint16), None, lens,  # noqa: E731
                                     version="v2", block_table=table, timing_only=True)
    row("timing-only step, paged (16-position pages) bf16", median_seconds(paged, repeats=3) * 1e3, "ms")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4, 16, 128)).astype(np.float32)
    k, v = (rng.standard_normal((4, 256, 2, 128)).astype(np.float16) for _ in range(2))
    small = np.array([256, 200, 129, 17])
    full = median_seconds(lambda: decode_attention(q, k, v, small, version="v2"), repeats=3)
    ref = median_seconds(lambda: decode_attention_reference(q, k, v, small), repeats=3)
    row("full run B=4 q16 kv2 D128 ctx<=256", full * 1e3, "ms")
    row("full run / numpy reference", full / ref, "x")


def bench_moe_scaling() -> None:
    """Issue 3 §6: how timing-only cost grows from S = 1K to S = 1M tokens (target < 5x)."""
    from npu_lab.kernels.moe_gating import simulate_moe_gating
    from npu_lab.kernels.moe_gating.fused import tile_order, tile_points

    def cold(S, version):
        # per-tiling caches cleared: every run pays for its tile tables, as a new shape would
        tile_points.cache_clear()
        tile_order.cache_clear()
        return simulate_moe_gating(1, S, 64, 2, version=version, tile_s=8)

    section("MoeGatingTopK timing-only cost, S = 1K -> 1M tokens (E=64, K=2, tileS=8)")
    for version in ("v1", "v2", "v3", "discrete"):
        small = median_seconds(lambda: cold(1024, version))
        large = median_seconds(lambda: cold(1 << 20, version), repeats=3)
        row(f"{version}: S=1K / S=1M", small * 1e3, "ms", f"{large * 1e3:.1f} ms at 1M")
        row(f"{version}: growth for 1024x the work", large / small, "x")


def bench_tile_explorer() -> None:
    """Issue 4: the tileS explorer at the default (article) shape: slider value set -> the
    figure's data updated, median over many moves (target < 50 ms)."""
    from npu_lab.course.explorers import TileSweepExplorer, UbBudgetExplorer

    section("MoE explorers: .value set -> figure data updated (target < 50 ms)")
    build = median_seconds(lambda: TileSweepExplorer(), repeats=3)
    row("build TileSweepExplorer()", build * 1e3, "ms")

    def moves(explorer, control, values, trace_index):
        trace = explorer.figure.data[trace_index]
        times = []
        for v in values:
            def data():
                return tuple(np.asarray(trace.x if trace.x is not None else ()).tolist()), \
                    tuple(np.asarray(trace.y if trace.y is not None else ()).tolist())
            before = data()
            start = time.perf_counter()
            control.value = v
            elapsed = time.perf_counter() - start
            if data() == before:
                raise RuntimeError(f"{control.description} = {v}: the figure did not change")
            times.append(elapsed)
        return statistics.median(times), len(times)

    e = TileSweepExplorer()
    new_values = [v for v in range(1, 65) if v != e.tile_s.value]
    t, k = moves(e, e.tile_s, new_values, 1)
    row("tileS slider, first visit of each value", t * 1e3, "ms", f"median of {k}")
    t, k = moves(e, e.tile_s, [8, 16, 4, 32, 8, 2, 16, 4], 1)
    row("tileS slider, values seen before", t * 1e3, "ms", f"median of {k}")
    t, k = moves(e, e.E, [65, 96, 128, 64], 0)
    row("E slider (new sweep)", t * 1e3, "ms", f"median of {k}")
    u = UbBudgetExplorer()
    t, k = moves(u, u.E, [80, 96, 112, 128, 160, 192, 256, 64], 0)
    row("UB budget explorer, E slider", t * 1e3, "ms", f"median of {k}")


def bench_grading() -> None:
    """Grading seconds per submission (``make grade``): the fixture course of
    tests/data/nbgrader, a solved and an untouched submission per student, through the whole
    pipeline (sandboxed child per notebook, nbgrader autograde and feedback). One batch: the
    per-notebook figure is the median over its notebooks, plus the batch's fixed cost."""
    import copy
    import io
    import tempfile
    from contextlib import redirect_stdout

    import nbformat

    from npu_lab.course.grading import grade_submissions
    from npu_lab.course.markers import find_exercises
    from npu_lab.course.release import generate_student_notebooks
    from npu_lab.course.solutions import without_markers

    section("grading (make grade, fixture course)")
    fixture = Path(__file__).resolve().parents[1] / "tests" / "data" / "nbgrader" / "90_practice.ipynb"
    students = 6
    with tempfile.TemporaryDirectory(prefix="npu_lab_bench_grade_") as tmp:
        root = Path(tmp)
        [released] = generate_student_notebooks([fixture], root / "release")
        stub = nbformat.read(released, as_version=4)
        instructor = nbformat.read(fixture, as_version=4)
        solved = copy.deepcopy(stub)
        for ex in find_exercises(instructor):
            solved.cells[ex.solution_cell].source = without_markers(instructor.cells[ex.solution_cell].source)
        for i in range(students):
            (root / "subs" / f"s{i}").mkdir(parents=True)
            nbformat.write(solved if i % 2 == 0 else stub, root / "subs" / f"s{i}" / fixture.name)
        start = time.perf_counter()
        with redirect_stdout(io.StringIO()):
            report = grade_submissions(root / "subs", root / "out", fixture.parent)
        total = time.perf_counter() - start
    per = sorted(report.seconds.values())
    row("run one submission (sandbox), median", statistics.median(per), "s", f"{len(per)} notebooks")
    row("grade one submission, whole batch / count", total / len(per), "s", "incl. nbgrader, course build")
    row(f"batch of {students} submissions", total, "s")
    print(f"  ({report.isolation})")


def _explorer_moves(control, n: int = 6) -> list:
    """Up to ``n`` values of a control other than its current one, then back to it."""
    import ipywidgets as W

    if isinstance(control, W.IntSlider):
        values = sorted({int(v) for v in np.linspace(control.min, control.max, n)})
    elif isinstance(control, (W.SelectionSlider, W.Dropdown, W.ToggleButtons)):
        values = [o[1] if isinstance(o, tuple) else o for o in control.options][:n]
    elif isinstance(control, (W.Checkbox, W.ToggleButton)):
        values = [not control.value]
    else:
        return []
    return [v for v in values if v != control.value] + [control.value]


#: also time moves as a browser drives them, with idle time between (off: `NPU_LAB_BENCH_FAST=1`)
BROWSER_MOVES = not __import__("os").environ.get("NPU_LAB_BENCH_FAST")


def every_explorer():
    """(name, constructor) of every slider explorer the notebooks display."""
    from npu_lab.course import explorers as X
    from npu_lab.course.explorers.balance import BalanceExplorer
    from npu_lab.course.explorers.case_study import CaseStudyExplorer
    from npu_lab.course.level0_picture import Level0Explorer
    from npu_lab.course.widgets import buffers_explorer

    return [("CopyCostExplorer (01)", X.CopyCostExplorer), ("buffers_explorer (01)", buffers_explorer),
            ("Level0Explorer (02)", Level0Explorer), ("DiscreteChainExplorer (02)", X.DiscreteChainExplorer),
            ("UbBudgetExplorer (03)", X.UbBudgetExplorer), ("TileSweepExplorer (04)", X.TileSweepExplorer),
            ("DoubleBufferExplorer (05)", X.DoubleBufferExplorer), ("FastExpExplorer (06)", X.FastExpExplorer),
            ("TuningExplorer (07)", X.TuningExplorer), ("GemmExplorer (09)", X.GemmExplorer),
            ("DecodeExplorer (11)", X.DecodeExplorer), ("KvCalculatorExplorer (11)", X.KvCalculatorExplorer),
            ("SparseKvExplorer (12)", X.SparseKvExplorer),
            ("BalanceExplorer (13)", BalanceExplorer), ("CaseStudyExplorer (13)", CaseStudyExplorer),
            ("RoutingExplorer (14)", X.RoutingExplorer), ("MoeLayerExplorer (14)", X.MoeLayerExplorer)]


def explorer_move_times(make) -> tuple[float, list[float]]:
    """(build seconds, per-move seconds): every control of a fresh explorer stepped through a few
    values (``control.value = v`` until its update returned), first visits included."""
    start = time.perf_counter()
    e = make()
    build = time.perf_counter() - start
    times = []
    for control in getattr(e, "_controls", ()) or (getattr(e, c) for c in ("tiles", "buffers", "chip")):
        for v in _explorer_moves(control):
            start = time.perf_counter()
            control.value = v
            times.append(time.perf_counter() - start)
    return build, times


def explorer_browser_move_times(make, pause_s: float = 0.3) -> list[float]:
    """Per-move seconds as a browser drives it: each control stepped as its front end sends it
    (``set_state``) inside a running event loop, with ``pause_s`` of idle time between moves (a
    person pressing a key): what an explorer precomputes while idle is in place for the next move."""
    import asyncio

    import ipywidgets as W

    e = make()
    times = []

    async def drive():
        e._repr_mimebundle_()            # displayed: explorers start precomputing here
        await asyncio.sleep(pause_s)
        for control in getattr(e, "_controls", ()) or (getattr(e, c) for c in ("tiles", "buffers", "chip")):
            for v in _explorer_moves(control):
                if isinstance(control, (W.SelectionSlider, W.Dropdown, W.ToggleButtons)):
                    values = [o[1] if isinstance(o, tuple) else o for o in control.options]
                    state = {"index": values.index(v)}
                else:
                    state = {"value": v}
                start = time.perf_counter()
                control.set_state(state)
                times.append(time.perf_counter() - start)
                await asyncio.sleep(pause_s)
    asyncio.run(drive())
    return times


def bench_every_explorer() -> None:
    """Issue 16 §5: every explorer of every notebook: its build, and a move of each control
    (.value set -> the explorer's update done), median and worst over first visits and returns."""
    section("every explorer: build, and .value set -> update done")
    for name, make in every_explorer():
        build, times = explorer_move_times(make)
        row(f"{name}: build", build * 1e3, "ms")
        row(f"{name}: move, median", statistics.median(times) * 1e3, "ms", f"worst {max(times) * 1e3:.0f} ms, "
            f"{len(times)} moves")
        if BROWSER_MOVES:
            times = explorer_browser_move_times(make)
            row(f"{name}: browser-like move, median", statistics.median(times) * 1e3, "ms",
                f"worst {max(times) * 1e3:.0f} ms, 0.3 s idle between moves")


#: Sections in print order; append yours.
def bench_gemm() -> None:
    """Issue 17: a 4096^3 half GEMM timing-only (target < 100 ms, for a slider), and a full run at a
    notebook's shape against numpy's matmul on the same data."""
    from npu_lab.kernels.gemm import gemm, gemm_roofline

    def cpu_seconds(fn, repeats):        # CPU time: what a loaded machine's wall clock inflates
        times = []
        for _ in range(repeats):
            t0 = time.process_time()
            fn()
            times.append(time.process_time() - t0)
        return statistics.median(times)

    section("GEMM on the cube (910B2, half): 4096^3 timing-only (target < 100 ms)")
    for version in ("v1", "v2", "v3", "v4"):
        run = lambda: gemm((4096, 4096), (4096, 4096), version=version, timing_only=True)  # noqa: E731
        t = median_seconds(run, repeats=3)
        cpu = cpu_seconds(run, repeats=3)
        _, tl = gemm((4096, 4096), (4096, 4096), version=version, timing_only=True)
        row(f"4096^3 {version} timing-only wall time", t * 1e3, "ms",
            f"CPU {cpu * 1e3:.0f} ms; model {tl.total_us:.0f} us, "
            f"{gemm_roofline(4096, 4096, 4096)['cube_us'] / tl.total_us:.0%} of the cube roofline")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 512)).astype(np.float16)
    b = rng.standard_normal((512, 512)).astype(np.float16)
    full = median_seconds(lambda: gemm(a, b, version="v3"), repeats=3)
    ref = median_seconds(lambda: a.astype(np.float32) @ b.astype(np.float32), repeats=7)
    row("512^3 v3 full run (numerics + timeline)", full * 1e3, "ms")
    row("512^3 numpy matmul (float32)", ref * 1e3, "ms")
    row("full run / numpy matmul", full / ref, "x")
    # issue 17 §1 / §4 (cube17): bfloat16 (uint16 bits) and int8 dequantised per channel in Fixpipe (VDEQF16)
    deq = rng.uniform(1e-3, 1e-2, 4096)
    for label, kw in (("bf16", dict(dtype="bfloat16")), ("int8 VDEQF16", dict(dtype=np.int8, deq_scale=deq))):
        run = lambda: gemm((4096, 4096), (4096, 4096), version="v3", timing_only=True, **kw)  # noqa: E731
        _, tl = run()
        row(f"4096^3 v3 {label} timing-only wall time", median_seconds(run, repeats=3) * 1e3, "ms",
            f"model {tl.total_us:.0f} us")
    a8, b8 = (rng.integers(-127, 128, (512, 512)).astype(np.int8) for _ in range(2))
    row("512^3 v3 bf16 full run", median_seconds(lambda: gemm(a, b, version="v3", dtype="bfloat16"), repeats=3) * 1e3,
        "ms", "inputs rounded to bfloat16 on the host")
    row("512^3 v3 int8 VDEQF16 full run", median_seconds(lambda: gemm(a8, b8, version="v3", deq_scale=deq[:512]),
                                                         repeats=3) * 1e3, "ms")
    from npu_lab.course.explorers.gemm import GemmExplorer
    explorer = GemmExplorer()
    moves = [dict(M=2048), dict(N=2048), dict(K=4096), dict(version="v2"), dict(M=4096, N=4096), dict(base=(256, 128, 64)),
             dict(version="v4"), dict(M=16), dict(K=1000), dict(version="v1")]
    times = []
    for kw in moves:
        t0 = time.perf_counter()
        explorer.set(**kw)
        times.append(time.perf_counter() - t0)
    row("GemmExplorer move (first visit), median", statistics.median(times) * 1e3, "ms",
        f"worst {max(times) * 1e3:.0f} ms over {len(times)} moves up to 4096x4096x4096 (target <= 50 ms)")


SECTIONS = [bench_simulator, bench_explorer, bench_tile_explorer, bench_every_explorer, bench_moe_sweep,
            bench_moe_full, bench_moe_scaling, bench_gemm, bench_decode, bench_grading]


def bench_moe_layer() -> None:
    """Issue 20: the dispatch kernel (timing-only and full) and a whole MoE layer, timing-only."""
    from npu_lab.kernels.moe_gating.dispatch_kernel import moe_dispatch_kernel_run
    from npu_lab.kernels.moe_layer import ROUTER_PRESETS, moe_layer_timing

    section("MoE layer (issue 20): dispatch kernel, whole layer")
    idx = np.random.default_rng(0).integers(0, 64, size=(1000, 8)).astype(np.int32)
    for name, run in (("dispatch 1000x8, E=64, full run", lambda: moe_dispatch_kernel_run(idx, num_experts=64)),
                      ("dispatch 4096x8, E=64, timing-only",
                       lambda: moe_dispatch_kernel_run((4096, 8), num_experts=64, timing_only=True))):
        start = time.perf_counter()
        run()
        row(name, (time.perf_counter() - start) * 1e3, "ms")
    p = ROUTER_PRESETS["Qwen-MoE-like"]
    for n in (8, 2048):
        start = time.perf_counter()
        r = moe_layer_timing(n, p.hidden_dim, p.layer_config())
        row(f"Qwen-MoE-like layer, {n} tokens, timing-only", (time.perf_counter() - start) * 1e3, "ms",
            f"modelled {r.total_us:.0f} us, gating {r.gating_share:.2%}")


SECTIONS.append(bench_moe_layer)


def bench_mixed() -> None:
    """Mixed (cube + vector) launches: decode v3 at the decode step's shape (B = 64, 8K, Llama-3-70B
    heads; target < 100 ms timing-only) and matmul_leakyrelu, with and without the mixed fast path
    (block classes + tile_loop fast-forward) in one run, and full runs against numpy."""
    from npu_lab.kernels.decode import decode_attention, decode_attention_reference
    from npu_lab.kernels.gemm.epilogue import matmul_leakyrelu, matmul_leakyrelu_reference
    from npu_lab.lang.mixed_launch import mixed_fast_path

    section("mixed launches: decode v3 (cube + vector), B=64 ctx=8K Llama-3-70B heads (target < 100 ms)")
    lens = np.full(64, 8192)
    step = lambda: decode_attention((64, 64, 128), ((64, 8192, 8, 128), np.float16), None, lens,  # noqa: E731
                                    version="v3", timing_only=True)
    r = step()
    row("v3 timing-only decode step", median_seconds(step, repeats=3) * 1e3, "ms")
    cpu = time.process_time()
    step()
    row("  the same, CPU time (what load does not inflate)", (time.process_time() - cpu) * 1e3, "ms")
    row("v3 simulated step", r.timeline.total_us, "us", f"HBM roofline {r.roofline_us:.0f} us, {r.achieved:.1%}")
    small = np.full(8, 2048)        # where the slow path still finishes in seconds
    mid = lambda: decode_attention((8, 64, 128), ((8, 2048, 8, 128), np.float16), None, small,  # noqa: E731
                                   version="v3", timing_only=True)
    fast = median_seconds(mid, repeats=3)
    with mixed_fast_path(False):
        slow = median_seconds(mid, repeats=1, warmup=0)
    row("v3 timing-only B=8 ctx=2K, fast path", fast * 1e3, "ms")
    row("  without the fast path (every group, every iteration)", slow * 1e3, "ms", f"{slow / fast:.0f}x slower")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4, 16, 128)).astype(np.float16)
    k, v = (rng.standard_normal((4, 512, 2, 128)).astype(np.float16) for _ in range(2))
    sl = np.array([512, 400, 129, 17])
    full = median_seconds(lambda: decode_attention(q, k, v, sl, version="v3"), repeats=3)
    ref = median_seconds(lambda: decode_attention_reference(q, k, v, sl), repeats=3)
    row("v3 full run B=4 q16 kv2 D128 ctx<=512", full * 1e3, "ms")
    row("v3 full run / numpy reference", full / ref, "x")
    shape = (2048, 256), (256, 2048)
    mm = lambda: matmul_leakyrelu(*shape, 0.1, timing_only=True)  # noqa: E731
    fast = median_seconds(mm, repeats=3)
    with mixed_fast_path(False):
        slow = median_seconds(mm, repeats=1, warmup=0)
    row("matmul_leakyrelu mixed 2048x256x2048 timing-only", fast * 1e3, "ms",
        f"without the fast path {slow * 1e3:.0f} ms ({slow / fast:.1f}x)")
    a = rng.standard_normal((512, 128)).astype(np.float16)
    b = rng.standard_normal((128, 512)).astype(np.float16)
    full = median_seconds(lambda: matmul_leakyrelu(a, b, 0.1), repeats=3)
    ref = median_seconds(lambda: matmul_leakyrelu_reference(a, b, 0.1), repeats=5)
    row("matmul_leakyrelu mixed 512x128x512 full run / numpy", full / ref, "x", f"full run {full * 1e3:.0f} ms")


SECTIONS.append(bench_mixed)


def bench_explorer_payload() -> None:
    """Issue 16 §5 (p16b): what one slider move costs beyond the explorer's update — the bytes of
    the figure update it sends (the browser parses and redraws them) — and MoeLayerExplorer's
    preset change (read from the committed grid, first visits)."""
    import json

    from plotly.serializers import _py_to_js

    from npu_lab.course.explorers.double_buffer import DoubleBufferExplorer
    from npu_lab.course.explorers.moe_layer import MoeLayerExplorer
    from npu_lab.course.level0_picture import Level0Explorer

    section("explorer moves: figure-update bytes, MoeLayerExplorer preset change")

    def update_bytes(e, control, values) -> list[int]:
        sizes, cls = [], type(e.figure)
        orig = cls._send_update_msg

        def measure(self, restyle_data, relayout_data, trace_indexes=None, **kw):
            if self is e.figure:        # binary numpy buffers count as their bytes, the rest as JSON
                msg = _py_to_js(dict(style=restyle_data, layout=relayout_data), None)
                extra = []
                text = json.dumps(msg, default=lambda o: extra.append(o.nbytes) or None)
                sizes.append(len(text) + sum(extra))
        cls._send_update_msg = measure
        try:
            for v in values:
                control.value = v
        finally:
            cls._send_update_msg = orig
        return sizes

    e = DoubleBufferExplorer()
    sizes = update_bytes(e, e.tile_s, (16, 32, 16, 8, 4, 8))
    row("DoubleBufferExplorer (05) timeline update per tileS move, median", statistics.median(sizes) / 1024, "KB",
        f"worst {max(sizes) / 1024:.0f} KB, {e.max_cores} cores drawn")
    lv = Level0Explorer()
    sizes = update_bytes(lv, lv.repeat_time, (3, 4, 5, 4, 3, 2))
    row("Level0Explorer (02) update per repeatTime move, median", statistics.median(sizes) / 1024, "KB")
    m = MoeLayerExplorer()
    times = []
    for preset in ("Mixtral-like", "DeepSeek-V3-like", "Qwen-MoE-like"):
        for gating in ("discrete", "v4"):
            start = time.perf_counter()
            m.set(preset=preset, gating=gating)
            times.append(time.perf_counter() - start)
    row("MoeLayerExplorer (14) preset/gating change, median", statistics.median(times) * 1e3, "ms",
        f"worst {max(times) * 1e3:.0f} ms, first visits")


SECTIONS.append(bench_explorer_payload)


def bench_decode_explorer() -> None:
    """Issue 18 §5: DecodeExplorer over every position its sliders offer (each control stepped
    through all its values, nested): the committed grid makes each move a lookup (target < 50 ms)."""
    from npu_lab.course.explorers import DecodeExplorer
    from npu_lab.course.explorers.decode import BATCHES, CONTEXTS, GROUPS, SPLITS

    section("DecodeExplorer (11): every slider position")
    start = time.perf_counter()
    e = DecodeExplorer()
    row("build (grid checked against two live probe runs)", (time.perf_counter() - start) * 1e3, "ms",
        f"grid used: {e.grid_used}")
    times, cpu = [], []

    def move(control, value):
        t0, c0 = time.perf_counter(), time.process_time()
        control.value = value
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)

    for version in ("v2", "v4", "v5"):
        move(e.version, version)
        for b in BATCHES:
            move(e.batch, b)
            for c in CONTEXTS:
                move(e.context, c)
                for g in GROUPS:
                    move(e.group, g)
                    for sp in (SPLITS if version == "v4" else ()):
                        move(e.splits, sp)
    row("move, median", statistics.median(times) * 1e3, "ms", f"worst {max(times) * 1e3:.0f} ms, {len(times)} moves, "
        f"load average {os.getloadavg()[0]:.1f}")
    row("move, CPU time, median", statistics.median(cpu) * 1e3, "ms", f"worst {max(cpu) * 1e3:.0f} ms (what load does "
        "not inflate)")


SECTIONS.append(bench_decode_explorer)


def main(argv: list[str]) -> int:
    wanted = [a.lower() for a in argv]
    chosen = [s for s in SECTIONS if not wanted or any(w in s.__name__.lower() for w in wanted)]
    if not chosen:
        print(f"no section matches {argv}; sections: {[s.__name__ for s in SECTIONS]}")
        return 2
    start = time.perf_counter()
    print(f"npu_lab bench  (python {sys.version.split()[0]}, numpy {np.__version__}; "
          "medians of repeats, one run)")
    for fn in chosen:
        fn()
    print(f"\ntotal bench time {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
