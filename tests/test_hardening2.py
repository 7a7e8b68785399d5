"""Issue 22 (hardening, round 2), items 3 to 8: one test (or a few) per case found by the
adversarial run, each failing on the code before its fix; and item 8, tests that kill mutants
which used to pass the whole unit suite. Heavy cases (memory, tile counts) run in a subprocess
under an address-space limit, so a regression fails the test instead of eating the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from npu_lab import HardwareSpecError, get_preset
from npu_lab.cli import main
from npu_lab.kernels.moe_gating import VERSIONS, plan_moe_gating, simulate_moe_gating, sweep
from npu_lab.lang import AscendCRuleError, GlobalTensor, TBuf, TPosition, launch, npu_kernel
from npu_lab.sim.timeline import Timeline

ROOT = Path(__file__).resolve().parents[1]
HW = get_preset("ascend-910b2")


def _one_line_error(err: str) -> str:
    lines = [l for l in err.strip().splitlines() if l]
    assert len(lines) == 1 and lines[0].startswith("npu_lab: error:"), err
    assert "Traceback" not in err
    return lines[0]


def _run_limited(code: str, limit_gb: float = 3.0, timeout_s: float = 120) -> str:
    """Run ``code`` in a fresh interpreter under an address-space limit (RLIMIT_AS); its stdout."""
    prelude = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({int(limit_gb * 2**30)}, {int(limit_gb * 2**30)}))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout_s, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


# ==== 3. trace / run --version v4 ===================================================================
def test_trace_v4_reports_rows_not_tile_s(tmp_path, capsys):
    out = tmp_path / "v4.json"
    assert main(["trace", "--version", "v4", "--S", "64", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "rows per core" in text and "per loop" in text and "tileS" not in text
    assert json.loads(out.read_text())["traceEvents"]


def test_run_v4_reports_rows_not_tile_s(capsys):
    assert main(["run", "--version", "v4", "--S", "64"]) == 0
    assert "rows per core" in capsys.readouterr().out


# ==== 4. timing-only cost bounded in the tile count ===============================================
def test_huge_tile_counts_are_refused_fast_and_small():
    """simulate_moe_gating(1, 2**31-1, 8, 2, v2, tileS=8) took 40 s and 8.5 GB; tileS=1 a raw numpy
    MemoryError; the discrete chain 88 s and 4 GB; ctx.tile_loop(10**12) a MemoryError or a hang;
    DoubleBufferExplorer(shape=(1, 2**26, 64, 2)) 188 s and 9.5 GB; launch(k, 10**6) without
    block_classes > 30 s. Each must now refuse at once, naming its limit, under 3 GB."""
    out = _run_limited("""
        import time, numpy as np
        from npu_lab.kernels.moe_gating import simulate_moe_gating
        from npu_lab.lang import launch, npu_kernel
        from npu_lab.course.explorers import DoubleBufferExplorer
        cases = [lambda: simulate_moe_gating(1, 2**31 - 1, 8, 2, version="v2", tile_s=8),
                 lambda: simulate_moe_gating(1, 2**31 - 1, 8, 2, version="v2", tile_s=1),
                 lambda: simulate_moe_gating(1, 2**31 - 1, 8, 2, version="v3"),
                 lambda: simulate_moe_gating(1, 2**31 - 1, 8, 2, version="v1", tile_s=8),
                 lambda: simulate_moe_gating(1, 2**31 - 1, 8, 2, version="discrete"),
                 lambda: simulate_moe_gating(1, 2**31, 8, 2, version="discrete"),
                 lambda: DoubleBufferExplorer(shape=(1, 2**26, 64, 2))]
        @npu_kernel
        def looping(ctx):
            for _ in ctx.tile_loop(10**12):
                ctx.scalar("x", ops=1)
        @npu_kernel
        def empty(ctx):
            pass
        cases += [lambda: launch(looping, 1, timing_only=True), lambda: launch(looping, 1),
                  lambda: launch(empty, 10**6, timing_only=True)]
        for case in cases:
            t = time.perf_counter()
            try:
                case()
                print("ran")
            except ValueError as exc:
                assert time.perf_counter() - t < 5, time.perf_counter() - t
                print("refused:", exc)
    """)
    lines = out.strip().splitlines()
    assert len(lines) == 10 and all(l.startswith("refused:") for l in lines), out
    for line in lines[:4]:
        assert "MAX_TILES" in line and "tileS >=" in line
    assert "MAX_TILES" in lines[4] and "int32" in lines[5]
    assert "S must be a whole number from 1 to" in lines[6]
    assert "MAX_TILE_LOOP" in lines[7] and "MAX_TILE_LOOP" in lines[8]
    assert "MAX_UNCLASSED_BLOCKS" in lines[9] and "block_classes" in lines[9]


def test_sweep_marks_a_row_with_too_many_tiles_and_goes_on():
    table = sweep("v2", 1, 2**23, 8, 2, HW, [1, 64])
    assert "MAX_TILES" in table["note"].iloc[0] and np.isnan(table["latency_us"].iloc[0])
    assert table["note"].iloc[1] == "" and table["latency_us"].iloc[1] > 0


def test_timing_only_loop_holds_no_per_iteration_keys():
    """A steady 4-million-iteration loop without key is one jump; with a key, keys are asked
    lazily (the timing-only result equals the full run's on a short loop, tests/test_moe_timing)."""
    asked = []

    @npu_kernel
    def steady(ctx, n, keyed):
        buf = TBuf(TPosition.VECCALC)
        ctx.pipe.init_buffer(buf, 1024, name="x")
        t = buf.get(np.float32)
        key = (lambda j: asked.append(j) or (j == n - 1)) if keyed else None
        for _ in ctx.tile_loop(n, key=key):
            ctx.duplicate(t, 1.0, 64)
    import time
    t0 = time.perf_counter()
    tl = launch(steady, 1, 1 << 22, False, timing_only=True)
    assert time.perf_counter() - t0 < 2
    assert tl.launches[0].traces[0].vector_repeats == 1 << 22
    short = launch(steady, 1, 40, True, timing_only=True)
    full = launch(steady, 1, 40, True)
    assert short.total_us == full.total_us and len(short.events()) == len(full.events())


def test_pipeline_latency_is_lean_and_bounded():
    from npu_lab.course.pipeline_diagram import MAX_PIPELINE_TILES, pipeline_latency, pipeline_schedule
    rng = np.random.default_rng(0)
    for _ in range(60):
        n, b = int(rng.integers(1, 12)), int(rng.integers(1, 4))
        args = [float(rng.choice([0.0, 0.5, 1.0, 2.75])) for _ in range(5)]
        kw = dict(buffers=b, barrier=bool(rng.random() < 0.3), latency_us=args[3], sync_us=args[4])
        assert pipeline_latency(n, *args[:3], **kw) == \
            float(pipeline_schedule(n, *args[:3], **kw)["ready_us"].max())
    with pytest.raises(ValueError, match="MAX_PIPELINE_TILES"):
        pipeline_latency(10**7, 1, 1, 1)
    assert pipeline_latency(MAX_PIPELINE_TILES // 10, 1, 1, 1) > 0


# ==== 5. writes are whole or absent =================================================================
def _failing_after_partial(real):
    def broken(*args, **kwargs):
        path = next((a for a in args if isinstance(a, (str, os.PathLike))), None)
        fh = next((a for a in args if hasattr(a, "write")), None)
        if fh is not None:
            fh.write('{"traceEvents": [')            # a partial document
        elif path is not None:
            Path(path).write_text("<html>partial")
        raise OSError(28, "No space left on device")
    return broken


def test_failed_trace_write_leaves_old_file(tmp_path, capsys, monkeypatch):
    import npu_lab.sim.timeline as timeline_module
    out = tmp_path / "trace.json"
    out.write_text("OLD")
    monkeypatch.setattr(timeline_module.json, "dump", _failing_after_partial(json.dump))
    assert main(["trace", "--S", "64", "-o", str(out)]) == 1
    assert "No space left" in _one_line_error(capsys.readouterr().err)
    assert out.read_text() == "OLD" and sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]


@pytest.mark.parametrize("option, method", [("--html", "write_html"), ("--csv", "to_csv")])
def test_failed_sweep_write_leaves_no_file(tmp_path, capsys, monkeypatch, option, method):
    import plotly.graph_objects as go
    owner = go.Figure if method == "write_html" else pd.DataFrame
    monkeypatch.setattr(owner, method, lambda self, path, *a, **k: _failing_after_partial(None)(path))
    out = tmp_path / "out.file"
    assert main(["sweep", "--S", "64", "--tile-s", "8", option, str(out)]) == 1
    _one_line_error(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


def test_to_chrome_trace_refuses_a_file_descriptor_and_keeps_mode(tmp_path):
    tl = simulate_moe_gating(1, 64, 64, 2).timeline
    for bad in (2, True, b"x", 1.5):
        with pytest.raises(TypeError, match="file name"):
            tl.to_chrome_trace(bad)
    out = tmp_path / "t.json"
    out.write_text("x")
    out.chmod(0o640)
    tl.to_chrome_trace(out)
    assert json.loads(out.read_text())["traceEvents"] and (out.stat().st_mode & 0o777) == 0o640


def test_write_atomically_removes_its_temporary_file(tmp_path):
    from npu_lab._files import write_atomically
    def boom(p):
        Path(p).write_text("half")
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError):
        write_atomically(tmp_path / "x.csv", boom)
    assert list(tmp_path.iterdir()) == []


# ==== 6. the harness validates its own arguments first; advice computed ==========================
def test_check_kernel_validates_hw_before_running_the_learner(monkeypatch):
    from npu_lab.course import kernel_check
    from npu_lab.course.ex05 import moe_v2_solution
    ran = []
    monkeypatch.setattr(kernel_check, "_check", lambda *a: ran.append(a))
    with pytest.raises(KeyError, match="unknown chip preset 'nope'"):
        kernel_check.check_kernel(moe_v2_solution, "05.prefetch", hw="nope")
    with pytest.raises(TypeError, match="show"):
        kernel_check.check_kernel(moe_v2_solution, "05.prefetch", show="yes")
    assert ran == []


def test_claims_on_a_chip_without_the_articles_kernels(capsys):
    assert main(["claims", "--chip", "ascend-310p3"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "v1 cannot run on ascend-310p3" in line and "NA" not in line


def test_article_factor_names_the_measured_tile_sizes():
    from npu_lab.course import ex07b
    with pytest.raises(ValueError, match=r"measured \(1, 4, 8, 16, 32\)"):
        ex07b.check_article_vs_datasheet(5, tile_s=2)


@pytest.mark.parametrize("K", [9, 57, 65])
def test_larger_k_advice_names_exactly_the_versions_that_run(K):
    from npu_lab.kernels.moe_gating.k_limits import versions_for_k
    runs = []
    for v in VERSIONS:
        try:
            simulate_moe_gating(1, 8, 128, K, version=v, tile_s=None if v in ("v4", "discrete") else 1)
            runs.append(v)
        except ValueError:
            pass
    assert versions_for_k(K) == runs
    if "v3" not in runs:
        with pytest.raises(ValueError) as info:
            simulate_moe_gating(1, 8, 128, K, version="v3")
        assert f"for K={K} use {', '.join(runs)}" in str(info.value) and "v4" not in str(info.value)


# ==== 7. raw internal errors become messages ========================================================
def test_int32_struct_fields_are_named():
    from npu_lab.course.ex02 import check_discrete_hbm_bytes
    from npu_lab.kernels.scaled_add import scaled_add
    with pytest.raises(ValueError, match="ScaledAddTiling.total .* does not fit the int32"):
        scaled_add(2**40, None, timing_only=True)
    with pytest.raises(ValueError, match="S must be a whole number"):
        check_discrete_hbm_bytes(5, S=2**31)
    with pytest.raises(ValueError, match="int32"):
        simulate_moe_gating(1, 10**30, 64, 2)          # was np.log2's TypeError in buckets.py


def test_bucket_lookup_takes_any_int():
    from npu_lab.kernels.moe_gating.buckets import nearest_bucket_tile_s
    assert nearest_bucket_tile_s(10**30, 64, 2, "v3", "ascend-910b2") >= 1
    with pytest.raises(ValueError, match="rows"):
        nearest_bucket_tile_s(0, 64, 2, "v3", "ascend-910b2")


def test_ub_used_bytes_pairs_each_struct_with_its_version():
    from npu_lab.kernels.moe_gating import ub_used_bytes
    from npu_lab.kernels.moe_gating.run import default_tile_s
    t1, _ = plan_moe_gating(1, 64, 64, 2, version="v1")
    t4, _ = plan_moe_gating(1, 64, 64, 2, version="v4")
    with pytest.raises(TypeError, match="MoeGatingV4Tiling"):
        ub_used_bytes(t1, "v4")                           # was a KeyError
    with pytest.raises(TypeError, match="MoeGatingTiling"):
        ub_used_bytes(t4, "v1")                           # was a silently wrong number
    assert ub_used_bytes(t4, "v4") > 0 and ub_used_bytes(t1, "v1") > 0
    with pytest.raises(ValueError, match="unknown version"):
        default_tile_s(1, 64, 64, 2, version="nope", hw=HW)
    with pytest.raises(ValueError, match="row tiling"):
        default_tile_s(1, 64, 64, 2, version="v4", hw=HW)


def test_empty_timeline_and_max_blocks():
    s = Timeline().summary()
    assert s["latency_us"] == 0 and s["launches"] == 0 and s["blocks"] == 0
    tl = simulate_moe_gating(1, 64, 64, 2, version="v1").timeline
    with pytest.raises(ValueError, match="max_blocks"):
        tl.events(max_blocks=-1)                          # used to drop the last block silently
    assert set(tl.events(max_blocks=2)["block"]) == {-1, 0, 1}


@pytest.mark.parametrize("change, words", [
    ({"vector_cores": 2**31}, ["vector_cores", "MAX_CORES"]),
    ({"block_bytes": 16}, ["block_bytes must be 32"]),
    ({"vector_repeat_bytes": 512}, ["vector_repeat_bytes must be 256"]),
    ({"max_repeat": 100}, ["max_repeat must be 255"]),
    ({"isa": [1]}, ["isa must name"]),
])
def test_hardware_replace_refuses_what_it_cannot_model(change, words):
    with pytest.raises(HardwareSpecError) as info:
        HW.replace(**change)
    for w in words:
        assert w in str(info.value)


def test_scalar_operands_are_checked():
    @npu_kernel
    def fill(ctx, dtype, scalar, how):
        buf = TBuf(TPosition.VECCALC)
        ctx.pipe.init_buffer(buf, 1024, name="t")
        t = buf.get(dtype)
        if how == "duplicate":
            ctx.duplicate(t, scalar, 64)
        elif how == "adds":
            ctx.adds(t, t, scalar, 64)
        elif how == "set_value":
            t.set_value(0, scalar)
        else:
            ctx.create_vec_index(t, scalar, 64)
    for how in ("duplicate", "adds", "set_value", "index"):
        for bad in (None, "1", 1j, True):
            with pytest.raises(TypeError, match="scalar number"):
                launch(fill, 1, np.float32, bad, how, timing_only=True)
    with pytest.raises(AscendCRuleError, match="integer scalar"):
        launch(fill, 1, np.int32, 1.5, "duplicate")
    with pytest.raises(AscendCRuleError, match="does not fit int16"):
        launch(fill, 1, np.int16, 40000, "duplicate")
    launch(fill, 1, np.float32, -np.inf, "duplicate")      # -inf is a float32 value: allowed


def test_explorers_refuse_bad_values_without_trait_errors():
    from npu_lab.course.explorers import DoubleBufferExplorer, FastExpExplorer, TuningExplorer
    fx = FastExpExplorer()
    for bad in (None, "x", 0.5, 1e9):
        with pytest.raises(ValueError, match="exp_cost"):
            fx.set(exp_cost=bad)
        with pytest.raises(ValueError, match="exp_cost"):
            fx.exp_cost.value = bad
        with pytest.raises(ValueError, match="n_floats"):
            fx.n_floats.value = 7
    fx.exp_cost.value = 20.0
    assert fx.exp_cost.value == 20.0
    for kwargs, word in ((dict(hw=None), "hw"), (dict(exp_cost=-1), "exp_cost")):
        with pytest.raises(ValueError, match=word):
            FastExpExplorer(**kwargs)
    for kwargs, word in ((dict(chip=None), "chip"), (dict(shape=None), "shape"), (dict(max_cores=10**9), "max_cores"),
                         (dict(shape=(1, 64, 8, 9)), "K")):
        with pytest.raises(ValueError, match=word):
            DoubleBufferExplorer(**kwargs)
    with pytest.raises(ValueError, match="S"):
        TuningExplorer(S=None)


@pytest.mark.parametrize("call, word", [
    (lambda: __import__("npu_lab.course.ex01", fromlist=["x"]).check_launch_overhead(5, launches=None), "launches"),
    (lambda: __import__("npu_lab.course.ex01", fromlist=["x"]).check_launch_overhead(5, chip="nope"), "nope"),
    (lambda: __import__("npu_lab.course.ex03", fromlist=["x"]).check_largest_tile_s(5, version="v9"), "version"),
    (lambda: __import__("npu_lab.course.ex05", fromlist=["x"]).check_db_gain_two_tiles_per_core(5, S=-1), "S"),
    (lambda: __import__("npu_lab.course.ex01", fromlist=["x"]).check_busiest_pipe("V", timeline=5), "timeline"),
])
def test_course_check_keywords_are_checked(call, word):
    with pytest.raises((ValueError, TypeError, KeyError)) as info:
        call()
    assert word in str(info.value)


def test_container_arguments_are_checked():
    from npu_lab.course.explorers import copy_cost_curve, sweet_spot_heat_map, tile_latency_grid
    from npu_lab.kernels.moe_gating.sweep import bucket_table
    for call in (lambda: bucket_table(S_values=5), lambda: bucket_table(E_values=[]),
                 lambda: bucket_table(K_values=["a"]), lambda: tile_latency_grid("v1", "S", 5),
                 lambda: sweet_spot_heat_map(5, "S"), lambda: copy_cost_curve(bursts=5),
                 lambda: sweep("v1", 1, 64, 64, 2, HW, list(range(1, 5000)))):
        with pytest.raises((TypeError, ValueError)) as info:
            call()
        assert "must" in str(info.value) or "at most" in str(info.value)


# ==== 8. tests that kill mutants which passed the whole unit suite ================================
@npu_kernel(block_classes=lambda block_dim, *a: np.zeros(block_dim, dtype=np.int64))
def _copy_in(ctx, x_gm, y_gm, out_too):
    a, b = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(a, 64 * 1024, name="a")
    ctx.pipe.init_buffer(b, 64 * 1024, name="b")
    ctx.data_copy(a.get(np.float32), x_gm[0], 16384)
    if out_too:
        ctx.data_copy(y_gm[0], b.get(np.float32), 16384)


@pytest.mark.parametrize("cores, hbm_gbps", [(15, 1000.0), (48, 1600.0)])   # 15: (1000/15)*15 > 1000 in floats
def test_hbm_exactly_full_is_not_oversubscribed(cores, hbm_gbps):
    from npu_lab.sim.hbm_share import hbm_share_report
    hw = HW.replace(vector_cores=cores, cube_cores=cores // 2, hbm_bandwidth_gbps=hbm_gbps, block_dispatch_us=0.0)
    x = GlobalTensor.empty(16384, np.float32, "x", timing_only=True)
    y = GlobalTensor.empty(16384, np.float32, "y", timing_only=True)
    (full,) = hbm_share_report(launch(_copy_in, cores, x, y, False, hw=hw, timing_only=True))
    assert full.max_streams == cores and full.static_gbps * cores == pytest.approx(hbm_gbps)
    assert full.oversubscribed_share == 0.0
    (over,) = hbm_share_report(launch(_copy_in, cores, x, y, True, hw=hw, timing_only=True))
    assert over.max_streams == 2 * cores and over.oversubscribed_share > 0.9


@pytest.mark.parametrize("cal_index", [True, False])
@pytest.mark.parametrize("n", [64, 6400, 64 * 255 * 2])
def test_reduce_max_passes_are_priced_over_pairs(n, cal_index):
    """ReduceMax.md: every pass returns (value, index) pairs, so pass k+1 reduces 2x the results
    of pass k: repeats = ceil(n/64) + ceil(2·r1/64) + ... until one repeat is left (float32)."""
    from npu_lab.lang.reduce import reduce_max_tmp_elements

    @npu_kernel
    def rmax(ctx):
        src, dst, tmp = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
        ctx.pipe.init_buffer(src, n * 4, name="src")
        ctx.pipe.init_buffer(dst, 32, name="dst")
        ctx.pipe.init_buffer(tmp, reduce_max_tmp_elements(n, 4, cal_index) * 4, name="tmp")
        ctx.reduce_max(dst.get(np.float32), src.get(np.float32), tmp.get(np.float32), n, cal_index)
    want, left = 0, n
    while True:
        r = -(-left // 64)
        want += r
        if r == 1:
            break
        left = 2 * r
    assert launch(rmax, 1, timing_only=True).launches[0].traces[0].vector_repeats == want


def test_nearest_bucket_uses_k():
    from npu_lab.kernels.moe_gating.buckets import TABLES, bucket_table_path, nearest_bucket_tile_s
    differ = 0
    for chip, version in TABLES:
        table = pd.read_csv(bucket_table_path(version, chip)).dropna(subset=["tileS"])
        for row in table.itertuples():
            assert nearest_bucket_tile_s(int(row.S), int(row.E), int(row.K), version, chip) == int(row.tileS)
        by_k = table.pivot_table(index=["S", "E"], columns="K", values="tileS")
        differ += int((by_k.nunique(axis=1) > 1).sum())
    assert differ > 0                       # K changes the answer somewhere, so ignoring it fails


def test_autotune_ties_go_to_the_smaller_tile(monkeypatch):
    sweep_module = sys.modules["npu_lab.kernels.moe_gating.sweep"]     # the package exports a function too
    table = pd.DataFrame({"tileS": [4, 32, 8, 16], "latency_us": [12.0, 10.0, 10.0, 11.0],
                          "bottleneck": ["memory"] * 4, "blocks": [1] * 4, "note": [""] * 4})
    monkeypatch.setattr(sweep_module, "sweep", lambda *a, **k: table)
    best = sweep_module.autotune(1, 64, 64, 2, version="v2", candidates=[4, 8, 16, 32])
    assert best.tile_s == 8 and "next best tileS=32" in best.reason


def test_check_kernel_rejects_a_three_per_mille_error():
    from npu_lab.course.kernel_check import _mismatch, kernel_exercises
    checked = 0
    for ex in kernel_exercises().values():
        if ex.kind != "kernel":
            continue
        case = ex.cases(np.random.default_rng(0))[0]
        want = ex.reference(case)
        if not any(np.asarray(w).dtype.kind == "f" for w in want.values()):
            continue
        got = {k: (np.asarray(w) * np.float32(1.003) + np.float32(1e-3) if np.asarray(w).dtype.kind == "f" else w)
               for k, w in want.items()}
        msg, _ = _mismatch(ex, case, got, want)
        assert msg, f"{ex.id} accepts a 0.3 % error (tolerance {ex.tolerance})"
        assert _mismatch(ex, case, want, want) == (None, None)
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_garbage_detection_tells_zeros_from_untouched(dtype):
    from npu_lab.course.kernel_check import _is_sentinel, sentinel_array
    assert _is_sentinel(sentinel_array(16, dtype))
    assert _is_sentinel(np.full(16, 0xFF, np.uint8).view(dtype))       # fresh UB copied out
    assert not _is_sentinel(np.zeros(16, dtype))                      # zeros are an answer (wrong)
    mixed = sentinel_array(16, dtype)
    mixed[3] = 0
    assert not _is_sentinel(mixed)
    one_ff_byte = np.ones((16, np.dtype(dtype).itemsize), np.uint8)
    one_ff_byte[:, 0] = 0xFF                                           # a real value, not all-0xFF
    assert not _is_sentinel(one_ff_byte.view(dtype).reshape(16))


def test_parse_percent_of_one_is_one_hundred():
    from npu_lab.course.checks import parse_percent
    assert parse_percent(1) == 100 and parse_percent(1.0) == 100 and parse_percent(0.74) == pytest.approx(74)
    assert parse_percent("1%") == 1 and parse_percent(74) == 74 and parse_percent(1.5) == 1.5


def test_grading_reads_the_score_with_manual_overrides(monkeypatch, tmp_path):
    """nbgrader's Grade.score is the manual score when an instructor set one, else the auto score;
    a grade read from .auto_score loses every override made in formgrader."""
    import nbgrader.api
    from npu_lab.course import grading
    from npu_lab.course.markers import find_exercises, notebook_paths
    import nbformat

    source, exercises = next((p, ex) for p in notebook_paths(ROOT / "instructor")
                             if (ex := find_exercises(nbformat.read(p, as_version=4), p.name)))

    class FakeGradebook:
        def __init__(self, url):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def find_grade(self, grade_id, notebook, assignment, student):
            return SimpleNamespace(auto_score=0.0, manual_score=0.5, score=0.5)

    monkeypatch.setattr(nbgrader.api, "Gradebook", FakeGradebook)
    rows = grading._score_rows(tmp_path, {source.stem: {"exercises": exercises}}, [source.stem], ["alice"],
                               {}, {("alice", source.stem)})
    assert len(rows) == len(exercises) and all(r["score"] == "0.5" for r in rows)


def test_hidden_folders_are_not_students(tmp_path):
    from npu_lab.course.grading import find_submissions
    for who in ("alice", ".ipynb_checkpoints", ".hidden"):
        (tmp_path / who).mkdir()
        (tmp_path / who / "01_x.ipynb").write_text("{}")
    found, _ = find_submissions(tmp_path, {"01_x"})
    assert list(found) == ["alice"]


def test_hardware_to_json_is_whole_or_absent(tmp_path, monkeypatch):
    import npu_lab._files as files
    out = tmp_path / "chip.json"
    HW.to_json(out)
    assert json.loads(out.read_text())["name"] == HW.name
    with pytest.raises(TypeError, match="file name"):
        HW.to_json(2)                                   # would have written into stderr's descriptor
    def half(self, text, encoding=None):
        Path.write_bytes(self, text[:10].encode())
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(files.Path, "write_text", half)
    with pytest.raises(OSError):
        HW.replace(name="other").to_json(out)
    assert json.loads(out.read_text())["name"] == HW.name and list(tmp_path.iterdir()) == [out]
