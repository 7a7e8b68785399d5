"""The standing fuzz suite (issue 11): every public function, each exercise check and each CLI
subcommand, fed malformed values one argument at a time (wrong types, whole-number floats,
zero / negative / huge sizes, NaN / inf, empty and ragged files, non-object JSON).

Each call must either work or raise the library's own error — an exception raised by npu_lab
code (not numpy / pandas / ipywidgets internals) whose message names the argument. Warnings
are errors, each call has a time bound, and the process's address space is capped during the
call, so a huge allocation fails the test instead of the machine.

Default profile: the whole file in well under a minute. ``--hypothesis-profile=long`` for a
thorough run (conftest.py registers it)."""

from __future__ import annotations

import contextlib
import json
import resource
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import npu_lab
from npu_lab import HardwareSpec, get_preset
from npu_lab.course import ex01, ex02, ex03, ex04, ex05, ex06, ex07, ex07b
from npu_lab.course.checks import CheckResult
from npu_lab.cli import main
from npu_lab.data import load_article_tile_sweep
from npu_lab.kernels import moe_gating as mg

LIBRARY = str(Path(npu_lab.__file__).resolve().parent)
CALL_SECONDS = 20.0               # a single call may take at most this long
ADDRESS_SPACE_EXTRA = 3 * 2**30   # and allocate at most this much beyond what the process has

# ---------------------------------------------------------------------------------- malformed values
WHOLE_FLOATS = st.sampled_from([1.0, 2.0, 8.0, 48.0, 64.0, 1024.0])
SIZES_BAD = st.one_of(st.sampled_from([0, -1, -5, 2**31, 2**40, 10**30]), st.integers(-10**6, 0))
NUMBERS_BAD = st.sampled_from([float("nan"), float("inf"), float("-inf"), 1.5, -0.5, 1e300, -1e300])
TYPES_BAD = st.one_of(st.none(), st.booleans(), st.text(max_size=8), st.binary(max_size=8),
                      st.lists(st.integers(0, 9), max_size=3), st.dictionaries(st.text(max_size=3),
                                                                               st.integers(), max_size=2),
                      st.just(np.float64(8.0)), st.just(np.int64(8)), st.just(np.array([1, 2])),
                      st.just(object()), st.just(complex(1, 1)))
MALFORMED = st.one_of(WHOLE_FLOATS, SIZES_BAD, NUMBERS_BAD, TYPES_BAD, st.integers(1, 40))


# ---------------------------------------------------------------------------------- the contract
@contextlib.contextmanager
def _bounded():
    """Warnings are errors; the address space is capped for the call; the call is timed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as fh:
        current = int(fh.read().split()[0]) * resource.getpagesize()
    cap = current + ADDRESS_SPACE_EXTRA
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        elapsed = time.perf_counter() - start
        assert elapsed < CALL_SECONDS, f"one call took {elapsed:.1f} s"


def _raised_by_library(exc: BaseException) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and frames[-1].filename.startswith(LIBRARY)


def _check_outcome(call, names, what):
    """``call()`` works, or raises from npu_lab code a message naming one of ``names``."""
    try:
        with _bounded():
            return call()
    except (ValueError, TypeError, KeyError, LookupError, npu_lab.UbOverflowError,
            npu_lab.SimulationError) as exc:
        msg = str(exc)
        assert _raised_by_library(exc), (
            f"{what}: {type(exc).__name__} from outside npu_lab: {msg}\n"
            + "".join(traceback.format_tb(exc.__traceback__)[-3:]))
        assert any(n.lower() in msg.lower() for n in names), f"{what}: message does not name {names}: {msg}"
        return None
    except MemoryError as exc:
        pytest.fail(f"{what}: MemoryError (an allocation over the bound): {exc}")
    except Warning as w:
        pytest.fail(f"{what}: leaked warning {type(w).__name__}: {w}")


# ---------------------------------------------------------------------------------- library functions
SHAPE = dict(B=1, S=64, E=16, K=2)


def _shape_call(fn, extra=None):
    """fn(B, S, E, K, **extra) with one shape argument replaced."""
    def call(slot, value):
        args = dict(SHAPE)
        kw = dict(extra or {})
        if slot in args:
            args[slot] = value
        else:
            kw[slot] = value
        return lambda: fn(args["B"], args["S"], args["E"], args["K"], **kw)
    return call


def _sweep(B, S, E, K, **kw):
    return mg.sweep(kw.pop("version", "v1"), B, S, E, K, kw.pop("hw", "ascend-910b2"),
                    kw.pop("tile_s", (1, 8)))


TARGETS = {
    "simulate_moe_gating": (_shape_call(mg.simulate_moe_gating, {"version": "v3"}),
                            ["B", "S", "E", "K", "version", "hw", "tile_s", "dtype"]),
    "plan_moe_gating": (_shape_call(mg.plan_moe_gating, {"version": "v2"}), ["B", "S", "E", "K", "version",
                                                                             "hw", "tile_s"]),
    "plan_moe_gating_discrete": (_shape_call(mg.plan_moe_gating, {"version": "discrete"}),
                                 ["B", "S", "E", "K", "hw", "tile_s"]),
    "calculate_moe_gating_tiling": (
        lambda slot, v: (lambda: mg.calculate_moe_gating_tiling(
            *[v if slot == n else SHAPE[n] for n in "BSEK"],
            v if slot == "hw" else get_preset("ascend-910b2"),
            **({slot: v} if slot in ("version", "tile_s", "tile_s_start") else {}))),
        ["B", "S", "E", "K", "hw", "version", "tile_s", "tile_s_start"]),
    "article_calculate_tiling": (_shape_call(mg.article_calculate_tiling), ["B", "S", "E", "K"]),
    "sweep": (_shape_call(_sweep), ["B", "S", "E", "K", "version", "hw", "tile_s"]),
    "autotune": (_shape_call(mg.autotune, {"candidates": [1, 8]}), ["B", "S", "E", "K", "version", "hw",
                                                                     "candidates"]),
    "lookup_tile_s": (lambda slot, v: (lambda: mg.lookup_tile_s(
        *[v if slot == n else {"S": 64, "E": 16, "K": 2}[n] for n in "SEK"],
        **({slot: v} if slot in ("version", "chip") else {}))), ["S", "E", "K", "version", "chip"]),
    "moe_ub_budget": (lambda slot, v: (lambda: mg.moe_ub_budget(
        **{"version": "v3", "tile_points": 8, "E": 16, "K": 2, slot: v})),
        ["version", "tile_points", "E", "K", "block_bytes"]),
    "moe_ub_capacity": (lambda slot, v: (lambda: mg.moe_ub_capacity(
        **{"version": "v2", "E": 16, "K": 2, "ub_bytes": 196608, slot: v})),
        ["version", "E", "K", "ub_bytes", "block_bytes"]),
    "article_ub_estimate_bytes": (lambda slot, v: (lambda: mg.article_ub_estimate_bytes(
        **{"tile_points": 8, "E": 16, "K": 2, slot: v})), ["tile_points", "E", "K", "ub_assumed_bytes"]),
    "fast_exp_max_rel_error": (lambda slot, v: (lambda: mg.fast_exp_max_rel_error(
        **{"lo": -10.0, "hi": 0.0, "samples": 101, slot: v})), ["lo", "hi", "samples"]),
    "exp_speedup": (lambda slot, v: (lambda: mg.exp_speedup(**{"hw": "ascend-910b2", "count": 256, slot: v})),
                    ["hw", "count"]),
    "ub_used_bytes": (lambda slot, v: (lambda: mg.ub_used_bytes(
        **{"tiling": mg.plan_moe_gating(1, 64, 16, 2)[0], "version": "v2", slot: v})), ["tiling", "version"]),
    "get_preset": (lambda slot, v: (lambda: get_preset(v)), ["name"]),
    "replace": (lambda slot, v: (lambda: get_preset("ascend-910b2").replace(**{slot: v})),
                ["vector_cores", "cube_cores", "ub_bytes", "clock_ghz", "hbm_bandwidth_gbps", "block_bytes",
                 "vector_repeat_bytes", "max_repeat", "isa", "block_dispatch_us", "launch_overhead_us", "name",
                 "description", "provenance"]),
    "fast_exp_numpy": (lambda slot, v: (lambda: mg.fast_exp_numpy(v)), ["x"]),
    "launch": (lambda slot, v: (lambda: npu_lab.launch(
        **{"kernel": _empty_kernel, "block_dim": 4, "hw": "ascend-910b2", slot: v})),
        ["kernel", "block_dim", "hw"]),
    "compare_presets": (lambda slot, v: (lambda: npu_lab.compare_presets(v)), ["names"]),
    "GlobalTensor.empty": (lambda slot, v: (lambda: npu_lab.GlobalTensor.empty(
        **{"shape": 16, "dtype": np.float32, slot: v})), ["shape", "dtype"]),
    "GlobalTensor.from_array": (lambda slot, v: (lambda: npu_lab.GlobalTensor.from_array(v)), ["array"]),
}

# host-side LLM and scheduling tools (issues 18 §3-4, 19 §2 and §4)
from npu_lab import llm, sched  # noqa: E402

TARGETS.update({
    "kv_cache_bytes": (lambda slot, v: (lambda: llm.kv_cache_bytes(
        **{"model": "Llama-3-8B", "context_len": 64, "batch": 2, "dtype": "fp16", slot: v})),
        ["model", "context_len", "batch", "dtype"]),
    "kv_memory_table": (lambda slot, v: (lambda: llm.kv_memory_table(
        **{"model": "Llama-3-8B", "context_len": 64, "batch": 2, slot: v})),
        ["model", "context_len", "batch", "dtypes", "weights_dtype"]),
    "weights_bytes": (lambda slot, v: (lambda: llm.weights_bytes(**{"model": "Qwen2-72B", "dtype": "int8", slot: v})),
                      ["model", "dtype"]),
    "decode_step_roofline": (lambda slot, v: (lambda: llm.decode_step_roofline(
        **{"batches": [1, 8], "context_len": 1024, slot: v})),
        ["batches", "context_len", "model", "tp", "kv_dtype", "weights_dtype", "hw", "interconnect_gbps",
         "allreduce_latency_us", "hbm_capacity_gb"]),
    "lpt_schedule": (lambda slot, v: (lambda: sched.lpt_schedule(**{"work": [5, 3, 9, 1], "cores": 2, slot: v})),
                     ["work", "cores"]),
    "split_long_schedule": (lambda slot, v: (lambda: sched.split_long_schedule(
        **{"work": [50, 3, 9], "cores": 2, "threshold": 10, "combine_cost": 1, slot: v})),
        ["work", "cores", "threshold", "combine_cost"]),
    "optimal_makespan": (lambda slot, v: (lambda: sched.optimal_makespan(**{"work": [5, 3, 9], "cores": 2, slot: v})),
                         ["work", "cores"]),
    "compare_schedules": (lambda slot, v: (lambda: sched.compare_schedules(
        **{"work": [50, 3, 9, 7], "cores": 3, "threshold": 10, "combine_cost": 0, slot: v})),
        ["work", "cores", "threshold", "combine_cost"]),
    "article_kv_check": (lambda slot, v: (lambda: llm.article_kv_check(**{"model": "Llama-3-8B", "context_len": 512,
                                                                          slot: v})), ["model", "context_len"]),
    "section3_claims": (lambda slot, v: (lambda: llm.section3_claims(v)), ["hw"]),
    "sample_lengths": (lambda slot, v: (lambda: sched.sample_lengths(**{"n": 16, "distribution": "zipf", slot: v})),
                       ["n", "distribution", "seed", "low", "high", "sigma", "median", "zipf_a"]),
})
ALIASES_LLM = {"batches": ["batch"], "dtypes": ["dtype"], "kv_dtype": ["dtype"], "weights_dtype": ["dtype"],
               "model": ["model"], "work": ["work"], "distribution": ["distribution"]}


@npu_lab.npu_kernel
def _empty_kernel(ctx):
    """A kernel that does nothing: launch's own argument checks are what is fuzzed."""
# only these argument names are checked against the message; others must at least be named
ALIASES = {"hw": ["hw", "preset", "chip", "HardwareSpec"], "dtype": ["dtype"], "tile_s": ["tile_s", "tileS"],
           "candidates": ["tile_s", "tileS", "candidates"], "tiling": ["tiling", "MoeGatingTiling"],
           "chip": ["chip", "preset"], "name": ["name", "preset"], "names": ["name", "preset"],
           "array": ["array", "dtype"], "shape": ["shape", "size"], "tile_points": ["tile_points", "points"], "provenance": ["provenance"]}
ALIASES.update(ALIASES_LLM)


@pytest.mark.parametrize("target", sorted(TARGETS))
@given(data=st.data())
def test_public_function_works_or_names_the_bad_argument(target, data):
    make, slots = TARGETS[target]
    slot = data.draw(st.sampled_from(slots), label="argument")
    value = data.draw(MALFORMED, label="value")
    _check_outcome(make(slot, value), ALIASES.get(slot, [slot]), f"{target}({slot}={value!r})")


# ---------------------------------------------------------------------------------- kernels with data
LOGITS_BAD = st.one_of(
    st.just(np.zeros((0, 4), np.float32)), st.just(np.zeros((2, 0), np.float32)),
    st.just(np.ones((4,), np.float32)), st.just(np.ones((1, 2, 3, 4), np.float32)),
    st.just(np.ones((2, 4), np.int32)), st.just(np.ones((2, 4), np.float64)),
    st.just(np.array([[1.0, np.nan, 0.0]], np.float32)), st.just(np.array([[np.inf, 0.0]], np.float32)),
    st.just(np.array([[3e38, -3e38, 0.0]], np.float32)), st.just([[1.0, 2.0], [3.0]]),
    st.just("logits"), st.none(), st.just(np.ones((2, 4), np.complex64)),
    st.builds(lambda n, e, s: np.random.default_rng(s).standard_normal((n, e)).astype(np.float32),
              st.integers(1, 8), st.integers(1, 16), st.integers(0, 9)))


@pytest.mark.parametrize("fn", ["moe_gating_topk", "moe_gating_topk_reference",
                                "softmax_topk_renormalise_reference"])
@given(logits=LOGITS_BAD, k=st.one_of(st.integers(-2, 20), MALFORMED), version=st.sampled_from(list(mg.VERSIONS)))
def test_kernels_and_references_take_any_logits(fn, logits, k, version):
    kw = {"version": version} if fn == "moe_gating_topk" else {}
    _check_outcome(lambda: getattr(mg, fn)(logits, k, **kw), ["gate_logits", "logits", "k", "K"],
                   f"{fn}(shape {getattr(logits, 'shape', '?')}, k={k!r})")


# ---------------------------------------------------------------------------------- JSON and files
JSON_BAD = st.one_of(st.sampled_from(["[]", "null", "42", '"x"', "", " ", "{", "true", "{}", "[1, 2]",
                                      '{"name": "x"}', "\u00ff", "nonexistent.json"]),
                     st.text(max_size=20))


@given(text=JSON_BAD)
def test_hardware_from_json_text(text):
    _check_outcome(lambda: HardwareSpec.from_json(text), ["json", "hardware", "field", "file", "string"],
                   f"from_json({text!r})")


@given(field=st.sampled_from(["vector_cores", "ub_bytes", "clock_ghz", "provenance", "name", "block_bytes",
                              "max_repeat", "description"]), value=MALFORMED)
def test_hardware_from_json_field(field, value):
    data = json.loads(get_preset("ascend-910b2").to_json())
    data[field] = value if not isinstance(value, (bytes, object.__class__)) else str(value)
    try:
        text = json.dumps(data)
    except (TypeError, ValueError):
        return                                      # not representable in JSON
    _check_outcome(lambda: HardwareSpec.from_json(text), [field], f"from_json({field}={value!r})")


CSV_HEAD = "tile_s,blocks,ub_kb_est,latency_us,core_utilisation_est\n"
CSV_BAD = st.one_of(st.sampled_from(["", "\n", CSV_HEAD, CSV_HEAD + "1,2,3\n", CSV_HEAD + "1,2,3,4,5,6\n",
                                     CSV_HEAD + "1.5,2,3,4,0.5\n", CSV_HEAD + "-1,2,3,4,0.5\n",
                                     CSV_HEAD + "1,2,3,4,0.5\n1,2,3,4,0.5\n", CSV_HEAD + "a,b,c,d,e\n",
                                     CSV_HEAD + "1,2,inf,4,0.5\n", "x,y\n1,2\n", '"unterminated\n']),
                    st.text(max_size=60).map(lambda s: CSV_HEAD + s))


@given(body=CSV_BAD)
def test_article_sweep_loader_any_file(tmp_path_factory, body):
    path = tmp_path_factory.mktemp("csv") / "sweep.csv"
    path.write_text(body, encoding="utf-8")
    _check_outcome(lambda: load_article_tile_sweep(path), [str(path)], f"load_article_tile_sweep({body!r})")


@given(body=st.binary(max_size=40))
def test_article_sweep_loader_binary_file(tmp_path_factory, body):
    path = tmp_path_factory.mktemp("bin") / "sweep.csv"
    path.write_bytes(body)
    _check_outcome(lambda: load_article_tile_sweep(path), [str(path)], "load_article_tile_sweep(binary)")


@given(tile_s=st.one_of(MALFORMED, st.lists(MALFORMED, max_size=3)),
       latency=st.one_of(MALFORMED, st.lists(MALFORMED, max_size=3)),
       free=st.one_of(st.sampled_from(["clock_ghz", "ub_bytes", "nope", "", ("launch_overhead_us",) * 5]),
                      MALFORMED),
       starts=st.one_of(st.just(1), MALFORMED))
def test_fit_hardware_any_input(tile_s, latency, free, starts):
    try:
        measurements = pd.DataFrame({"tile_s": tile_s, "latency_us": latency})
    except (ValueError, TypeError):
        try:
            measurements = pd.DataFrame({"tile_s": [tile_s], "latency_us": [latency]})
        except (ValueError, TypeError):
            return                                  # pandas refuses: not the library's input yet
    if len(measurements) > 2:
        return
    _check_outcome(lambda: mg.fit_hardware(measurements, free=free, starts=min(starts, 1)
                                           if isinstance(starts, int) and not isinstance(starts, bool)
                                           and starts > 0 else starts),
                   ["measurements", "tile_s", "latency_us", "fields", "field", "starts", "tileS", "free"],
                   f"fit_hardware({tile_s!r}, {latency!r}, free={free!r}, starts={starts!r})")


# ---------------------------------------------------------------------------------- exercise checks
CHECKS = sorted((mod.__name__, name) for mod in (ex01, ex02, ex03, ex04, ex05, ex06, ex07, ex07b)
                for name in mod.__all__ if name.startswith("check_"))
ANSWERS = st.one_of(MALFORMED, st.text(max_size=12), st.sampled_from(
    ["5 us", "20 \u03bcs", "74%", "1e400", "-0", "8,192 bytes", "\u00b5s", "x", "yes", "up", "V", " "]),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**40, 10**40))


@pytest.mark.parametrize("module, name", CHECKS)
@given(answer=ANSWERS)
def test_every_check_answers_every_input(module, name, answer):
    import importlib

    check = getattr(importlib.import_module(module), name)
    with _bounded():
        result = check(answer)
    assert isinstance(result, CheckResult) and result.correct in (True, False, None)
    assert str(result).strip()


# ---------------------------------------------------------------------------------- the CLI
ARG_BAD = st.one_of(st.sampled_from(["0", "-1", "1.5", "nan", "inf", "1e39", "", "abc", "99999999999999999999",
                                     "48.0", "-0"]), st.integers(-5, 5).map(str))
CLI_OPTIONS = {
    "sweep": ["--B", "--S", "--E", "--K", "--chip", "--version", "--tile-s"],
    "trace": ["--B", "--S", "--E", "--K", "--chip", "--version", "--tile-s", "--dtype", "--max-blocks"],
    "run": ["--B", "--S", "--E", "--K", "--chip", "--version", "--tile-s", "--dtype", "--seed", "--scale",
            "--max-memory-gb"],
    "chips": ["--show"],
    "claims": ["--chip"],
}


@pytest.mark.parametrize("command", sorted(CLI_OPTIONS))
@given(data=st.data())
def test_cli_bad_option_is_one_line_or_works(command, data, tmp_path_factory):
    import io
    option = data.draw(st.sampled_from(CLI_OPTIONS[command]), label="option")
    value = data.draw(ARG_BAD, label="value")
    argv = [command, option, value]
    if command in ("sweep", "run", "trace"):
        argv += ["--S", "64"] if option != "--S" else []
    if command == "trace":
        argv += ["-o", str(tmp_path_factory.mktemp("trace") / "t.json")]
    if command == "claims" and value in ("article",):
        return
    out, err = io.StringIO(), io.StringIO()
    with _bounded(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    err = err.getvalue()
    assert code in (0, 1, 2), argv
    if code:
        assert err.startswith("npu_lab: error:") and err.count("\n") == 1, (argv, err)


# ---------------------------------------------------------------------------------- issue 22 families
CHIPS_AND_VERSIONS = st.tuples(st.sampled_from(["ascend-910b2", "ascend-310p3", "article"]),
                               st.sampled_from(list(mg.VERSIONS)))


@pytest.mark.parametrize("command", ["trace", "run", "sweep"])
@settings(max_examples=12)
@given(chip_version=CHIPS_AND_VERSIONS, E=st.sampled_from(["8", "64", "65"]), K=st.sampled_from(["1", "9", "57"]))
def test_cli_every_chip_and_version_is_one_line_or_works(command, chip_version, E, K, tmp_path_factory):
    """trace/run --version v4 used to crash after the work (a missing tileS)."""
    import io
    chip, version = chip_version
    argv = [command, "--chip", chip, "--version", version, "--S", "16", "--E", E, "--K", K]
    if command == "trace":
        argv += ["-o", str(tmp_path_factory.mktemp("trace") / "t.json")]
    if command == "sweep":
        argv += ["--tile-s", "4,8"]
    out, err = io.StringIO(), io.StringIO()
    with _bounded(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    err = err.getvalue()
    assert code in (0, 1, 2), argv
    assert code == 0 or (err.startswith("npu_lab: error:") and err.count("\n") == 1), (argv, err)


PATHS_BAD = st.sampled_from(["", "/", "/nonexistent-dir/x.json", ".", "a\x00b"])


@pytest.mark.parametrize("command, option", [("trace", "-o"), ("sweep", "--csv"), ("sweep", "--html")])
@settings(max_examples=8)
@given(path=PATHS_BAD)
def test_cli_bad_output_path_is_one_line(command, option, path):
    import io
    argv = [command, "--S", "16", option, path] + (["--tile-s", "8"] if command == "sweep" else [])
    out, err = io.StringIO(), io.StringIO()
    with _bounded(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    err = err.getvalue()
    assert code in (1, 2) and err.startswith("npu_lab: error:") and err.count("\n") == 1, (argv, err)


_EXPLORERS: dict = {}


def _explorer(name):
    from npu_lab.course import explorers
    if name not in _EXPLORERS:
        _EXPLORERS[name] = getattr(explorers, name)()
    return _EXPLORERS[name]


EXPLORERS = ["CopyCostExplorer", "DiscreteChainExplorer", "DoubleBufferExplorer", "FastExpExplorer",
             "TileSweepExplorer", "TuningExplorer", "UbBudgetExplorer"]


@pytest.mark.parametrize("name", EXPLORERS)
@settings(max_examples=15)
@given(data=st.data())
def test_explorer_set_and_value_name_the_control(name, data):
    """set() and .value = ... either work or raise the library's error naming the control (they
    leaked ipywidgets' TraitError, or clamped silently)."""
    ex = _explorer(name)
    controls = sorted(k for k, v in vars(ex).items() if any(v is c for c in ex._controls))
    control = data.draw(st.sampled_from(controls), label="control")
    value = data.draw(MALFORMED, label="value")
    how = data.draw(st.sampled_from(["set", "value"]), label="how")
    call = (lambda: ex.set(**{control: value})) if how == "set" else \
        (lambda: setattr(getattr(ex, control), "value", value))
    _check_outcome(call, [control], f"{name}.{how}({control}={value!r})")


@pytest.mark.parametrize("name", EXPLORERS)
@settings(max_examples=10)
@given(data=st.data())
def test_explorer_constructor_names_the_argument(name, data):
    import inspect
    from npu_lab.course import explorers
    cls = getattr(explorers, name)
    params = [p for p in inspect.signature(cls).parameters]
    param = data.draw(st.sampled_from(params), label="argument")
    value = data.draw(st.one_of(st.none(), SIZES_BAD, TYPES_BAD), label="value")
    if param == "exp_cost" and value is None:
        return                                       # None: the chip's own Exp cost, by design
    _check_outcome(lambda: cls(**{param: value}), [param, "preset"], f"{name}({param}={value!r})")


def _keyword_checks():
    import importlib
    import inspect
    out = []
    for module in ("ex01", "ex02", "ex03", "ex04", "ex05", "ex06", "ex07", "ex07b"):
        mod = importlib.import_module(f"npu_lab.course.{module}")
        for name in mod.__all__:
            fn = getattr(mod, name)
            if name.startswith("check_") and callable(fn):
                kws = [p for p, d in inspect.signature(fn).parameters.items() if d.default is not d.empty]
                out += [(module, name, kw) for kw in kws]
    return out


KEYWORD_CHECKS = _keyword_checks()


@settings(max_examples=60)
@given(target=st.sampled_from(KEYWORD_CHECKS), value=st.one_of(st.none(), SIZES_BAD, TYPES_BAD, NUMBERS_BAD))
def test_course_check_keywords_name_the_argument(target, value):
    """A course check's own keyword arguments are checked before any simulation
    (check_launch_overhead(5, launches=None) ran with None)."""
    import importlib
    module, name, kw = target
    check = getattr(importlib.import_module(f"npu_lab.course.{module}"), name)
    result = _check_outcome(lambda: check(5, **{kw: value}), [kw, "preset"], f"{name}(5, {kw}={value!r})")
    assert result is None or isinstance(result, CheckResult)


_TIMELINE = []


def _timeline():
    if not _TIMELINE:
        _TIMELINE.append(mg.simulate_moe_gating(1, 64, 16, 2, version="v2", tile_s=8).timeline)
    return _TIMELINE[0]


TIMELINE_CALLS = {
    "events": (lambda tl, v: tl.events(max_blocks=v), ["max_blocks"]),
    "to_chrome_trace_path": (lambda tl, v: tl.to_chrome_trace(v), ["path", "file name", "directory",
                                                                  "no such file", "exists", "not empty"]),
    "to_chrome_trace_blocks": (lambda tl, v: tl.to_chrome_trace(None, max_blocks=v), ["max_blocks"]),
    "concat": (lambda tl, v: npu_lab.Timeline.concat(v), ["timeline", "launches", "iterable", "concat"]),
}


@pytest.mark.parametrize("method", sorted(TIMELINE_CALLS))
@settings(max_examples=20)
@given(value=st.one_of(MALFORMED, st.sampled_from(["", "/", "/nonexistent-dir/t.json", 2, 1])))
def test_timeline_methods_name_the_bad_argument(method, value, tmp_path_factory):
    call, names = TIMELINE_CALLS[method]
    tl = _timeline()
    if method == "to_chrome_trace_path" and isinstance(value, str) and value not in ("", "/") \
            and not value.startswith("/nonexistent"):
        value = str(tmp_path_factory.mktemp("trace") / value.replace("/", "_"))   # never write into the repo
    try:
        _check_outcome(lambda: call(tl, value), names, f"Timeline.{method}({value!r})")
    except OSError as exc:                             # the OS's own word for a bad path
        assert method == "to_chrome_trace_path", exc


def test_empty_timeline_methods():
    tl = npu_lab.Timeline()
    assert tl.summary()["launches"] == 0 and tl.bottleneck()[0] == "launch"
    assert len(tl.events()) == 0 and tl.pipe_table().empty and tl.total_us == 0
