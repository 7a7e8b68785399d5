"""The command line: ``python -m npu_lab <command>`` (also installed as ``npu-lab``).

Commands (each has ``--help``):

* ``sweep``  — the article's tileS table for one shape and chip (timing-only), optionally saved
  as CSV and as a standalone plotly HTML page of latency vs tileS;
* ``trace``  — one timing-only run written as a Chrome trace (open it in Perfetto);
* ``run``    — a full run on seeded random logits, checked against the numpy reference;
* ``chips``  — the chip presets, or one preset's numbers with their provenance;
* ``claims`` — the first article's claims next to the model's figures;
* ``grade``  — autograde a folder of submitted notebooks with nbgrader (instructors; see
  docs/instructors.md): a per-student, per-exercise score table (CSV) and feedback pages.

Bad arguments end with one line on stderr (``npu_lab: error: ...``) and a non-zero exit code:
2 for a bad argument, 1 for a failed write or a failed check. This module only parses, calls the
library and prints; every number comes from :mod:`npu_lab`.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
from pathlib import Path

import numpy as np

from ._files import write_atomically
from .data import ARTICLE_SWEEP_SHAPE, load_article_tile_sweep
from .kernels.moe_gating import (ARTICLE_TILE_S, VERSIONS, moe_gating_topk, moe_gating_topk_reference,
                                 reproduce_article_claims, simulate_moe_gating,
                                 softmax_topk_renormalise_reference, sweep)
from .lang import UbOverflowError
from .presets import get_preset, list_presets
from .sim import SimulationError
from .sim.launch_cost import full_launch_overhead_us

PROG = "python -m npu_lab"
ERROR_PREFIX = "npu_lab: error:"
PERFETTO = "https://ui.perfetto.dev"
DTYPES = {"float32": np.float32, "float16": np.float16}


class CliError(Exception):
    """A bad argument or a failed step: printed as one line, exits with ``code``."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) raised to :func:`main`."""

    def error(self, message):  # noqa: D401 - argparse API
        raise CliError(f"{message} (see `{self.prog} --help`)", 2)


# ------------------------------------------------------------------------------- argument types
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:    # numpy's generator takes seeds >= 0; argparse names the flag in the message
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def _tile_list(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of whole numbers >= 1 such as 1,4,8,16,32; got {text!r}")
    return [int(p) for p in parts]


def _chip(name: str):
    """The HardwareSpec for a preset name (aliases accepted); a one-line error otherwise."""
    try:
        return get_preset(name)
    except KeyError as exc:
        raise CliError(f"unknown chip {name!r}; choose one of: {', '.join(list_presets())} "
                       "(aliases: 910b2, 310p3)") from exc


def _check_writable(path: str, what: str) -> None:
    """Fail before simulating when ``path`` obviously cannot be written."""
    if not path or "\x00" in path:
        raise CliError(f"cannot write the {what} to {path!r}: give a file name", 1)
    p = Path(path)
    if p.is_dir():
        raise CliError(f"cannot write the {what} to {path}: it is a directory", 1)
    parent = p.parent
    if not parent.is_dir():
        raise CliError(f"cannot write the {what} to {path}: directory {str(parent)!r} does not exist", 1)
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise CliError(f"cannot write the {what} to {path}: permission denied", 1)


def _write(path: str, what: str, writer) -> None:
    """``writer(tmp)`` into a temporary file beside ``path``, renamed to ``path`` once complete:
    a failed write leaves no truncated file (and an existing one as it was)."""
    try:
        write_atomically(path, writer, what)
    except OSError as exc:
        raise CliError(f"cannot write the {what} to {path}: {exc.strerror or exc}", 1) from exc


def _tile_text(tiling) -> str:
    """", tileS=N" for a fused tiling, v4's rows per core / per loop, nothing without one."""
    if tiling is None:
        return ""
    if hasattr(tiling, "tileS"):
        return f", tileS={tiling.tileS}"
    return f", rows per core {tiling.blockFormer}, per loop {tiling.ubFormer}"    # v4's struct


def _shape_text(args) -> str:
    return f"B={args.B} S={args.S} E={args.E} K={args.K}"


def _fmt(value, spec: str, missing: str = "-") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    return format(value, spec)


# ------------------------------------------------------------------------------- sweep
def _article_reference(args):
    """The article's measured table when the sweep is the article's own experiment, else None."""
    shape = {"B": args.B, "S": args.S, "E": args.E, "K": args.K}
    if args.version != "v1" or shape != ARTICLE_SWEEP_SHAPE:
        return None
    try:
        table = load_article_tile_sweep()
    except (OSError, ValueError):
        return None
    return table.rename(columns={"tile_s": "tileS"})


def _sweep_table(df, reference) -> str:
    measured = {} if reference is None else dict(zip(reference["tileS"], reference["latency_us"]))
    head = f"{'tileS':>6} {'blocks':>7} {'UB used KB':>11} {'latency µs':>11} {'core util':>10}  bottleneck"
    if measured:
        head += "   article µs"
    lines = [head]
    for row in df.itertuples(index=False):
        line = (f"{int(row.tileS):>6} {_fmt(row.blocks, '.0f'):>7} {_fmt(row.ub_used_kb, '.2f'):>11} "
                f"{_fmt(row.latency_us, '.1f'):>11} {_fmt(row.core_utilisation, '.0%'):>10}  "
                f"{row.bottleneck:<10}")
        if measured:
            line += f"   {_fmt(measured.get(int(row.tileS)), '.0f'):>10}"
        lines.append(line.rstrip())
    return "\n".join(lines)


def _sweep_figure(df, best: int, reference, title: str):
    from .course.viz import latency_sweep_figure

    fig = latency_sweep_figure(df, "tileS", "latency_us", highlight=best, reference=reference,
                               title=title, log_x=df["tileS"].nunique() > 1)
    fig.data[1].name = f"best: tileS={best}"
    fig.update_xaxes(tickvals=sorted(df["tileS"].unique().tolist()))
    return fig


def cmd_sweep(args) -> int:
    hw = _chip(args.chip)
    for path, what in ((args.csv, "CSV"), (args.html, "HTML page")):
        if path is not None:              # an empty name is refused, not skipped
            _check_writable(path, what)
    clamped = sorted({ts for ts in args.tile_s if ts > args.S})
    df = sweep(args.version, args.B, args.S, args.E, args.K, hw, args.tile_s)
    unfit = df[df["note"].fillna("").astype(str) != ""]
    if not unfit.empty:
        said = (f"--tile-s {', '.join(map(str, clamped))} > S={args.S} was clamped to S={args.S}; "
                if clamped and int(unfit["tileS"].iloc[0]) == args.S else "")
        raise CliError(said + str(unfit["note"].iloc[0]))
    best_row = df.loc[df["latency_us"].idxmin()]
    best = int(best_row.tileS)
    reference = _article_reference(args)
    title = f"MoeGatingTopK {args.version} on {hw.name}: {_shape_text(args)}"
    print(f"{title} (timing-only)")
    if clamped:
        print(f"note: tileS {', '.join(map(str, clamped))} > S={args.S} clamped to S={args.S} "
              "(a tile cannot be longer than the sequence)")
    print(_sweep_table(df, reference))
    if args.version == "discrete":
        print(f"note: the discrete chain does not tile by tileS; every row is the same run "
              f"({best_row.latency_us:.1f} µs, {best_row.bottleneck}-bound)")
    else:
        print(f"best: tileS={best} at {best_row.latency_us:.1f} µs ({best_row.bottleneck}-bound)")
    if args.csv is not None:
        _write(args.csv, "CSV", lambda p: df.to_csv(p, index=False))
        print(f"wrote {args.csv} ({len(df)} rows)")
    if args.html is not None:
        fig = _sweep_figure(df, best, reference, title)
        _write(args.html, "HTML page", lambda p: fig.write_html(p, include_plotlyjs=True, full_html=True))
        print(f"wrote {args.html} (standalone, plotly.js embedded)")
    return 0


# ------------------------------------------------------------------------------- trace
def cmd_trace(args) -> int:
    hw = _chip(args.chip)
    _check_writable(args.output, "trace")
    result = simulate_moe_gating(args.B, args.S, args.E, args.K, version=args.version, hw=hw,
                                 tile_s=args.tile_s, dtype=DTYPES[args.dtype])
    timeline = result.timeline
    max_blocks, capped = _trace_block_cap(timeline, args.max_blocks)
    holder = {}
    _write(args.output, "trace",
           lambda p: holder.setdefault("doc", timeline.to_chrome_trace(p, max_blocks=max_blocks)))
    events = sum(1 for e in holder["doc"]["traceEvents"] if e.get("ph") == "X")
    blocks = max(l.block_dim for l in timeline.launches)
    shown = f"first {max_blocks} of {blocks} blocks" if max_blocks < blocks else f"{blocks} blocks"
    if capped:
        shown += (f", the default cap of ~{TRACE_EVENT_BUDGET:,} events; --max-blocks {blocks} "
                  "writes every block")
    tile = _tile_text(result.tiling)
    verdict = timeline.bottleneck()[0]
    print(f"MoeGatingTopK {args.version} on {hw.name} ({_shape_text(args)}{tile}): "
          f"latency {timeline.total_us:.2f} µs, {verdict}-bound; wrote {events} events ({shown}) "
          f"to {args.output} — open in {PERFETTO} or chrome://tracing")
    return 0


#: Without --max-blocks, trace writes as many blocks (per launch) as keep it near this many
#: events: a million-point run has millions of events (minutes, gigabytes of JSON) otherwise.
TRACE_EVENT_BUDGET = 200_000


def _trace_block_cap(timeline, asked: int | None) -> tuple[int, bool]:
    """(blocks per launch to write, whether the default cap cut them)."""
    blocks = max(l.block_dim for l in timeline.launches)
    if asked is not None:
        return min(asked, blocks), False
    per_block = max(1, len(timeline.events(max_blocks=1)))   # the first block of every launch
    cap = max(1, min(blocks, TRACE_EVENT_BUDGET // per_block))
    return cap, cap < blocks


# ------------------------------------------------------------------------------- run
#: Bytes a full run holds per logit, measured (about 17 with numpy 2, on 20M logits): the
#: float64 draw and its scaled copy, the device copy, the reference's float32 rows and int64 argsort.
RUN_BYTES_PER_LOGIT = 24
RUN_BYTES_PER_OUTPUT = 48       # indices + weights, kernel and reference, plus their comparison


def run_memory_bytes(B: int, S: int, E: int, K: int) -> int:
    """What `run` will allocate, estimated before it starts."""
    return B * S * (E * RUN_BYTES_PER_LOGIT + K * RUN_BYTES_PER_OUTPUT)


def cmd_run(args) -> int:
    hw = _chip(args.chip)
    need = run_memory_bytes(args.B, args.S, args.E, args.K)
    limit = int(args.max_memory_gb * 2**30)
    if need > limit:
        raise CliError(f"a full run of {_shape_text(args)} needs about {need / 2**30:.1f} GiB of memory "
                       f"(B·S·E = {args.B * args.S * args.E:,} logits x ~{RUN_BYTES_PER_LOGIT} B), more than "
                       f"the {args.max_memory_gb:g} GiB limit; use a smaller shape, `trace` (timing-only, "
                       "no data) for the timeline, or raise --max-memory-gb", 2)
    largest = float(np.finfo(DTYPES[args.dtype]).max) / 8     # 8 standard deviations fit the dtype
    if args.scale > largest:
        raise CliError(f"argument --scale: {args.scale:g} overflows {args.dtype} logits; use at most "
                       f"{largest:.3g}", 2)
    rng = np.random.default_rng(args.seed)
    with np.errstate(over="ignore"):   # beyond 8 sigma: inf, which moe_gating_topk then names
        logits = (rng.standard_normal((args.B, args.S, args.E)) * args.scale).astype(DTYPES[args.dtype])
    result = moe_gating_topk(logits, args.K, version=args.version, hw=hw, tile_s=args.tile_s)
    # the discrete chain computes softmax -> top-K -> renormalise: compare it with that reference
    reference = softmax_topk_renormalise_reference if args.version == "discrete" else moe_gating_topk_reference
    ref_idx, ref_w = reference(logits, args.K)
    same = result.indices == ref_idx
    err = float(np.max(np.abs(result.weights.astype(np.float64) - ref_w.astype(np.float64))))
    timeline = result.timeline
    tile = _tile_text(result.tiling)
    print(f"MoeGatingTopK {args.version} on {hw.name}: {_shape_text(args)}, {args.dtype} logits "
          f"~ N(0, {args.scale:g}²), seed {args.seed}")
    match = "yes" if same.all() else f"NO ({int((~same).sum())} of {same.size} differ)"
    print(f"indices match: {match}, max weight error: {err:.2e}")
    print(f"latency {timeline.total_us:.2f} µs ({timeline.bottleneck()[0]}-bound, "
          f"{sum(l.block_dim for l in timeline.launches)} blocks{tile})")
    if not same.all():
        print(f"{ERROR_PREFIX} {args.version} disagrees with the reference on expert indices", file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------------- chips
def _value_text(value) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.6g}"
    return f"{int(value):,}" if isinstance(value, (int, float)) else str(value)


def cmd_chips(args) -> int:
    if args.show:
        hw = _chip(args.show)
        table = hw.table()
        print(f"{hw.name}: {hw.description}")
        width = max(len(f) for f in table.index)
        print(f"{'field':<{width}}  {'value':>14}  {'unit':<8} {'provenance':<13} note")
        for field, row in table.iterrows():
            print(f"{field:<{width}}  {_value_text(row.value):>14}  {row.unit:<8} {row.provenance:<13} "
                  f"{row.note}".rstrip())
        counts = table["provenance"].value_counts()
        print("provenance: " + ", ".join(f"{n} {kind}" for kind, n in counts.items()))
        return 0
    print(f"{'chip':<14} {'vector cores':>12} {'clock GHz':>9} {'UB KB':>6} {'usable KB':>9} {'HBM GB/s':>9} "
          f"{'launch µs':>9}  description")
    for name in list_presets():
        try:
            hw = get_preset(name)
        except (OSError, ValueError) as exc:   # e.g. the fitted preset's JSON is missing
            print(f"{name:<14} (unavailable: {exc})")
            continue
        # usable: minus the framework's 256 B and Ascend C's 8 KB reserve (HardwareSpec.ub_usable_bytes)
        print(f"{name:<14} {hw.vector_cores:>12} {hw.clock_ghz:>9.2f} {hw.ub_bytes / 1024:>6.0f} "
              f"{hw.ub_usable_bytes / 1024:>9.2f} {hw.hbm_bandwidth_gbps:>9.0f} {full_launch_overhead_us(hw):>9.1f}  {hw.description}")
    print(f"details and provenance: {PROG} chips --show NAME")
    return 0


# ------------------------------------------------------------------------------- claims
def cmd_claims(args) -> int:
    hw = _chip(args.chip)
    table = reproduce_article_claims(hw)
    print(f"The first article's claims vs the model on {hw.name}:")
    print(_text_table(table))
    return 0


# ------------------------------------------------------------------------------- grade
def cmd_grade(args) -> int:
    from .course.grading import DEFAULT_MEMORY_GB, DEFAULT_TIMEOUT_S, grade_submissions
    from .course.release import INSTRUCTOR_DIR, ReleaseError

    submissions = Path(args.submissions)
    out = Path(args.output) if args.output else submissions.resolve().parent / f"{submissions.resolve().name}_graded"
    instructor = Path(args.instructor) if args.instructor else INSTRUCTOR_DIR
    try:
        report = grade_submissions(submissions, out, instructor,
                                   timeout_s=DEFAULT_TIMEOUT_S if args.timeout_s is None else args.timeout_s,
                                   memory_gb=DEFAULT_MEMORY_GB if args.memory_gb is None else args.memory_gb,
                                   sandbox_user=args.sandbox_user, roster=args.roster)
    except ReleaseError as exc:
        raise CliError(str(exc), 1) from exc
    print(f"graded {len({r['student'] for r in report.rows})} student(s) in {submissions} against {instructor}:")
    print(report.summary())
    return 0


def _text_table(df) -> str:
    """Left-aligned plain-text table (pandas right-aligns text, which reads badly for prose)."""
    cells = [[str(c) for c in df.columns]] + [[str(v) for v in row] for row in df.itertuples(index=False)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(df.columns))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ------------------------------------------------------------------------------- parser
def _add_shape(p, version: str, tile_help: str, tile_type=_positive_int, tile_default=None) -> None:
    p.add_argument("--version", default=version, choices=list(VERSIONS), metavar="VERSION",
                   help=f"kernel version (default {version}): " + ", ".join(VERSIONS))
    p.add_argument("--B", type=_positive_int, default=1, metavar="N", help="batch size (default 1)")
    p.add_argument("--S", type=_positive_int, default=1024, metavar="N",
                   help="sequence length, tokens per batch (default 1024)")
    p.add_argument("--E", type=_positive_int, default=64, metavar="N", help="number of experts (default 64)")
    p.add_argument("--K", type=_positive_int, default=2, metavar="N",
                   help="experts chosen per token, 1 <= K <= E (default 2)")
    p.add_argument("--chip", default="ascend-910b2", metavar="NAME",
                   help="chip preset (default ascend-910b2): " + ", ".join(list_presets()))
    p.add_argument("--tile-s", dest="tile_s", type=tile_type, default=tile_default, metavar="TILE_S",
                   help=tile_help)


def _versions_epilog() -> str:
    return "versions:\n" + "\n".join(f"  {k:<12} {v}" for k, v in VERSIONS.items())


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=88)


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog=PROG, formatter_class=fmt,
                     description="npu_lab: simulate Ascend-style NPU kernels (MoeGatingTopK) from the shell.",
                     epilog="examples:\n"
                            f"  {PROG} sweep --version v1 --tile-s 1,4,8,16,32 --html sweep.html\n"
                            f"  {PROG} trace --version v3 --tile-s 8 -o trace.json\n"
                            f"  {PROG} run --version v3 --seed 0\n"
                            f"  {PROG} chips --show ascend-910b2\n"
                            f"  {PROG} claims --chip article\n"
                            f"  {PROG} grade submissions/ -o grades/\n"
                            f"run `{PROG} COMMAND --help` for a command's options")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("sweep", help="latency vs tileS table (timing-only), optional CSV / HTML",
                       description=_wrap("Sweep tileS for MoeGatingTopK on one shape and chip (timing-only "
                                         "simulation) and print the article's table: tileS, blocks, UB used, "
                                         "latency, core utilisation, bottleneck."),
                       epilog=_versions_epilog(), formatter_class=fmt)
    _add_shape(p, "v1", "comma-separated tile sizes to try (default 1,4,8,16,32)",
               tile_type=_tile_list, tile_default=list(ARTICLE_TILE_S))
    p.add_argument("--csv", metavar="PATH", help="also write the full sweep DataFrame as CSV")
    p.add_argument("--html", metavar="PATH",
                   help="also write a standalone plotly HTML page of latency vs tileS (works offline)")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("trace", help="write a Chrome / Perfetto trace of one timing-only run",
                       description=_wrap("Simulate one timing-only run and write its timeline in the Chrome "
                                         f"trace-event format (one process per core, one thread per pipe); "
                                         f"open it in {PERFETTO} or chrome://tracing."),
                       epilog=_versions_epilog(), formatter_class=fmt)
    _add_shape(p, "v3", "tile size (default: the host's tiling rule)")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32", help="logits dtype (default float32)")
    p.add_argument("--max-blocks", dest="max_blocks", type=_positive_int, metavar="N",
                   help="write only the first N blocks of each launch (default: as many as keep the "
                        f"trace near {TRACE_EVENT_BUDGET:,} events; the output says when it capped)")
    p.add_argument("-o", "--output", required=True, metavar="PATH", help="where to write the trace JSON")
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("run", help="full run on seeded random logits, checked against the reference",
                       description=_wrap("Run MoeGatingTopK with real numbers on random logits (fixed seed), "
                                         "compare with the numpy reference and print the latency."),
                       epilog=_versions_epilog(), formatter_class=fmt)
    _add_shape(p, "v3", "tile size (default: the host's tiling rule)")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32", help="logits dtype (default float32)")
    p.add_argument("--seed", type=_seed, default=0, help="random seed, a whole number >= 0 (default 0)")
    p.add_argument("--scale", type=_scale, default=1.0, help="standard deviation of the logits (default 1)")
    p.add_argument("--max-memory-gb", dest="max_memory_gb", type=_scale, default=4.0, metavar="GB",
                   help="refuse a run estimated to need more memory than this (default 4)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("chips", help="list chip presets, or show one with provenance",
                       description=_wrap("List the chip presets with their key numbers, or (--show) every "
                                         "number of one preset with where it came from."), formatter_class=fmt)
    p.add_argument("--show", metavar="NAME", help="print the full table of preset NAME with provenance")
    p.set_defaults(func=cmd_chips)

    p = sub.add_parser("claims", help="the first article's claims vs the model",
                       description=_wrap("Reproduce the first article's claims (tileS table, double buffering, "
                                         "fast exp, fused vs discrete) from the model and give a verdict each."),
                       formatter_class=fmt)
    p.add_argument("--chip", default="article", metavar="NAME",
                   help="chip preset (default article, the one fitted to the article's table): "
                        + ", ".join(list_presets()))
    p.set_defaults(func=cmd_claims)

    p = sub.add_parser("grade", help="autograde submitted notebooks with nbgrader (instructors)",
                       description=_wrap("Autograde a folder of submitted course notebooks with nbgrader, each "
                                         "in a sandboxed process of its own (time and memory limits), "
                                         "against the instructor notebooks (hidden tests restored from "
                                         "them) and write scores.csv (one row per student and exercise), "
                                         "scores_by_student.csv and feedback HTML pages."),
                       epilog="layout: SUBMISSIONS/<student>/<NN_name>.ipynb, the student notebooks as "
                              "handed out (notebooks/); see docs/instructors.md", formatter_class=fmt)
    p.add_argument("submissions", metavar="SUBMISSIONS", help="folder with one sub-folder per student")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="where to write scores and feedback (default: SUBMISSIONS_graded beside it)")
    p.add_argument("--instructor", metavar="DIR",
                   help="folder of the instructor notebooks (default: the repository's instructor/)")
    p.add_argument("--timeout-s", dest="timeout_s", type=float, default=None, metavar="SECONDS",
                   help="wall-clock limit per submitted notebook (default 120); past it the notebook's "
                        "remaining cells get no points")
    p.add_argument("--memory-gb", dest="memory_gb", type=float, default=None, metavar="GB",
                   help="address-space limit of the process that runs one submission (default 4)")
    p.add_argument("--sandbox-user", dest="sandbox_user", default="auto", metavar="USER",
                   help="user the submitted cells run as: auto (default: nobody when run as root, else "
                        "yourself), none (yourself), or a user name")
    p.add_argument("--roster", metavar="FILE",
                   help="file of student ids (one per line): a folder of a student not on it is reported, "
                        "not graded")
    p.set_defaults(func=cmd_grade)
    return parser


def _one_line(exc: BaseException) -> str:
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    return " ".join(str(text).split()) or type(exc).__name__


def main(argv=None) -> int:
    """Entry point of ``python -m npu_lab`` and ``npu-lab``; returns the exit code."""
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:          # --help
            return exc.code if isinstance(exc.code, int) else 0
        if args.command is None:
            raise CliError(f"choose a command: sweep, trace, run, chips, claims or grade (see `{PROG} --help`)")
        if args.command != "claims" and getattr(args, "K", 1) > getattr(args, "E", 1):
            raise CliError(f"--K must be at most --E (experts chosen per token <= experts); "
                           f"got K={args.K}, E={args.E}")
        return args.func(args)
    except CliError as exc:
        print(f"{ERROR_PREFIX} {_one_line(exc)}", file=sys.stderr)
        return exc.code
    except (ValueError, TypeError, KeyError, UbOverflowError) as exc:
        print(f"{ERROR_PREFIX} {_one_line(exc)}", file=sys.stderr)
        return 2
    except SimulationError as exc:
        print(f"{ERROR_PREFIX} simulation failed: {_one_line(exc)}", file=sys.stderr)
        return 1
    except MemoryError as exc:            # numpy's _ArrayMemoryError too: one line, not a traceback
        print(f"{ERROR_PREFIX} out of memory: {_one_line(exc)}; try a smaller shape", file=sys.stderr)
        return 1
    except BrokenPipeError:               # e.g. `... | head`: stop quietly (Python docs' recipe)
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 1
    except OSError as exc:
        print(f"{ERROR_PREFIX} {_one_line(exc)}", file=sys.stderr)
        return 1
