"""Debugging a kernel the way one does on a device (notebook 08), as three small tools.

* :func:`explain_error` — a simulator error (``RaceError``, ``AscendCRuleError``, ``QueueError``,
  ``UbOverflowError``, ...) as a short report: the kernel line that issued the faulty call and, for
  a race, the two pipes and the ``HardEvent`` whose ``SetFlag``/``WaitFlag`` pair is missing.
* :func:`compare_by_tile` — a wrong result compared with the reference tile by tile, the way the
  kernel cut the work: which tiles (and blocks) mismatch, and where inside a tile the bad points
  sit. An address bug leaves a pattern there (for example: only the second batch row of every
  tile), which a single "max error" hides.
* :func:`pipe_bubbles` and :func:`op_summary` — a slow kernel read from its timeline: the gaps in
  each pipe of one core (the bubbles a Perfetto trace shows) with what each one waited for, and a
  per-launch table with the fields of msprof's ``op_summary`` (``Task Duration``, ``Block Dim``,
  ``aiv_mte2_ratio``, ...).

Where the msprof names come from (asc-devkit): ``docs/zh/guide/算子实践参考/性能分析/分析性能数据.md``
(``op_summary_*.csv``: ``aiv_mte2_time``, ``aic_mte2_ratio``, ``Block Dim``, head overhead from an
empty kernel's ``TaskDuration``; pipes that "break flow", 断流, in the simulated pipeline view),
``docs/zh/guide/算子实践参考/典型算子实践案例/SIMD算子实现/Add矢量算子实践/中级性能优化.md``
(``Task Duration(μs)``, ``aiv_vec_ratio``, ``aiv_scalar_ratio``, ``aiv_mte2_ratio``,
``aiv_mte3_ratio``) and ``docs/zh/guide/编程指南/调试调优/性能调优.md`` (``msopprof`` on the
board, ``msopprof simulator`` for the instruction pipeline view, ``PipeUtilization.csv``).

Presentation only: the library proper never imports this module.
"""

from __future__ import annotations

import linecache
import numbers
import os
import re
import traceback
from dataclasses import dataclass

import numpy as np

from ..lang.errors import RaceError

__all__ = ["TileComparison", "compare_by_tile", "explain_error", "kernel_line", "pipe_bubbles",
           "bubble_summary", "op_summary"]

_LIBRARY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # .../npu_lab
_PYTHON_LIB_DIR = os.path.dirname(os.__file__)


# --------------------------------------------------------------------------- errors
def kernel_line(exc: BaseException) -> str | None:
    """``"file line N: code"`` (``"cell line N: code"`` for a notebook cell) of the innermost frame of ``exc``'s traceback outside npu_lab and the
    standard library — the line of the learner's kernel that made the failing call — or None."""
    if not isinstance(exc, BaseException):
        raise TypeError(f"kernel_line takes an exception, got {type(exc).__name__}")
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        name = os.path.abspath(frame.filename) if not frame.filename.startswith("<") else frame.filename
        if name.startswith((_LIBRARY_DIR, _PYTHON_LIB_DIR)) or "site-packages" in name:
            continue
        found = frame
    if found is None:
        return None
    code = (found.line or linecache.getline(found.filename, found.lineno)).strip()
    # a notebook cell runs from a temporary file named after a hash of its source (ipykernel)
    where = "cell" if "ipykernel_" in found.filename else os.path.basename(found.filename)
    return f"{where} line {found.lineno}: {code}"


def explain_error(exc: BaseException) -> str:
    """A simulator error as a few lines a learner can act on.

    Always: the error's type and message, and the kernel line that issued the failing call (from
    the traceback). For a ``RaceError`` also: which pipe came too early (the consumer), which pipe
    was still using the buffer (the producer), whether it is read-after-write or write-after-read,
    and the ``HardEvent`` to set after the producer and wait for before the consumer."""
    if not isinstance(exc, BaseException):
        raise TypeError(f"explain_error takes an exception (catch it with `except Exception as e`), "
                        f"got {type(exc).__name__}")
    lines = [f"{type(exc).__name__}: {exc}"]
    where = kernel_line(exc)
    if where:
        lines.append(f"  the kernel line: {where}")
    if isinstance(exc, RaceError) and exc.event:
        (e_name, src, e_source), (name, dst, source) = exc.earlier, exc.later
        kind = {"read after write": "read-after-write: it reads data the other pipe writes",
                "write after read": "write-after-read: it overwrites data the other pipe reads",
                "write after write": "write-after-write: both pipes write it"}[exc.kind]
        lines += [f"  pipes: {dst} ({name}, line {source[1]}) and {src} ({e_name}, line {e_source[1]}) "
                  f"both use '{exc.buffer}' with nothing ordering them: {kind}",
                  f"  fix: ctx.set_flag(\"{exc.event}\", id) after the {src} instruction and "
                  f"ctx.wait_flag(\"{exc.event}\", id) before this line "
                  f"(SetFlag/WaitFlag<HardEvent::{exc.event}>), or a TQue if the pair is one "
                  "its position syncs (VECIN: MTE2->V, VECOUT: V->MTE3)"]
    return "\n".join(lines)


# --------------------------------------------------------------------------- results
def _positive_int(name: str, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class TileComparison:
    """What :func:`compare_by_tile` found. ``table``: one row per tile (tile, block, the b and s
    ranges it covers, points, bad points, largest error, first bad point). ``bad``: one row per
    mismatching point (b, s, its tile and block, its place in the tile, expected and got)."""

    table: "object"          # pandas DataFrame
    bad: "object"            # pandas DataFrame
    tile_b: int
    tile_s: int

    @property
    def ok(self) -> bool:
        return len(self.bad) == 0

    @property
    def mismatched(self):
        """The rows of :attr:`table` whose tile has at least one bad point."""
        return self.table[self.table["bad_points"] > 0]

    def by_position(self):
        """Bad points counted by their place in the tile: rows ``b_in_tile``, columns
        ``s_in_tile``. An address bug shows up as a pattern here."""
        import pandas as pd

        index = pd.Index(range(self.tile_b), name="b_in_tile")
        columns = pd.Index(range(self.tile_s), name="s_in_tile")
        counts = pd.crosstab(self.bad["b_in_tile"], self.bad["s_in_tile"]) if len(self.bad) else None
        out = pd.DataFrame(0, index=index, columns=columns)
        if counts is not None:
            out.loc[counts.index, counts.columns] = counts.to_numpy()
        return out

    def __str__(self) -> str:
        tiles = len(self.table)
        if self.ok:
            return f"all {tiles} tiles match ({int(self.table['points'].sum())} points)"
        bad_tiles = self.mismatched
        first = self.bad.iloc[0]
        rows = sorted(set(int(b) for b in self.bad["b_in_tile"]))
        cols = sorted(set(int(s) for s in self.bad["s_in_tile"]))
        place = []
        if len(rows) < self.tile_b:
            place.append(f"b_in_tile in {rows}")
        if len(cols) < self.tile_s:
            place.append(f"s_in_tile in {cols}")
        where = (" only at " + " and ".join(place)) if place else " at every place in the tile"
        return (f"{len(bad_tiles)} of {tiles} tiles mismatch ({len(self.bad)} of "
                f"{int(self.table['points'].sum())} points), blocks {_short(bad_tiles['block'].tolist())}; "
                f"bad points sit{where}.\nfirst: tile {int(first['tile'])} (block {int(first['block'])}), "
                f"point b={int(first['b'])}, s={int(first['s'])}: expected {first['expected']}, got {first['got']}")

    def __repr__(self) -> str:
        return str(self)


def _short(values: list, limit: int = 8) -> str:
    text = ", ".join(str(v) for v in values[:limit])
    return text + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def _as_points(a: np.ndarray, tiled_2d: bool) -> np.ndarray:
    """[B, S, rest] view: 1-D -> [1, N, 1]; 2-D -> [1, N, E] (rows are points) unless tiled_2d;
    k-D -> [B, S, prod(rest)]."""
    if a.ndim == 1:
        return a.reshape(1, -1, 1)
    if a.ndim == 2:
        return a.reshape(a.shape[0], a.shape[1], 1) if tiled_2d else a.reshape(1, *a.shape)
    return a.reshape(a.shape[0], a.shape[1], -1)


def _fmt(row: np.ndarray) -> str:
    shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row[:4].tolist())
    return f"[{shown}{', ...' if len(row) > 4 else ''}]"


def compare_by_tile(got, expected, tile_rows, *, blocks=None, atol: float = 0.0,
                    rtol: float = 0.0) -> TileComparison:
    """Compare a kernel's output with the reference tile by tile.

    ``got``, ``expected``: arrays of one shape. Their leading axes are the points a kernel tiles
    over: ``[B, S, ...]`` (e.g. MoE gating outputs ``[B, S, K]``), or ``[N, ...]`` rows, or a flat
    ``[N]``. ``tile_rows``: the tile — an int ``tileS`` (points along S per tile, tileB = 1; for a
    2-D or 1-D array, rows per tile), or a pair ``(tileB, tileS)`` for ``[B, S, ...]`` arrays.
    Tiles are numbered as the article's kernel numbers them: ``tile = (b // tileB) *
    tilesPerBatch + s // tileS`` with ``tilesPerBatch = ceil(S / tileS)`` (a tile never crosses a
    batch; the last one along S may be short). ``blocks``: which block ran each tile — None for one
    block per tile (v1), an int ``block_dim`` for blocks that take every ``block_dim``-th tile, or
    an array ``blocks[tile]``. A point matches when all its values are within ``atol + rtol *
    |expected|`` (NaN matches NaN); integers must be equal.

    Returns a :class:`TileComparison`: ``str()`` it for the summary, ``.table`` for every tile,
    ``.bad`` for the bad points, ``.by_position()`` for where in a tile they sit."""
    import pandas as pd

    got_a, exp_a = np.asarray(got), np.asarray(expected)
    if got_a.shape != exp_a.shape:
        raise ValueError(f"got has shape {got_a.shape} but expected has {exp_a.shape}: compare outputs "
                         "of the same shape (reshape the kernel's flat GM output first)")
    if got_a.size == 0:
        raise ValueError("nothing to compare: the arrays are empty")
    for name, a in (("got", got_a), ("expected", exp_a)):
        if a.dtype.kind not in "biuf":
            raise TypeError(f"{name} must be numeric, got dtype {a.dtype}")
    if not (atol >= 0 and rtol >= 0):
        raise ValueError(f"atol and rtol must be >= 0, got atol={atol!r}, rtol={rtol!r}")
    if isinstance(tile_rows, tuple):
        if len(tile_rows) != 2:
            raise ValueError(f"tile_rows must be tileS or (tileB, tileS), got {tile_rows!r}")
        if got_a.ndim < 2:
            raise ValueError(f"(tileB, tileS) tiles need [B, S, ...] arrays; got shape {got_a.shape}")
        tile_b, tile_s = (_positive_int(n, v) for n, v in zip(("tileB", "tileS"), tile_rows))
    else:
        tile_b, tile_s = 1, _positive_int("tile_rows", tile_rows)
    pts_got = _as_points(got_a, isinstance(tile_rows, tuple))
    pts_exp = _as_points(exp_a, isinstance(tile_rows, tuple))
    B, S = pts_exp.shape[:2]

    if exp_a.dtype.kind == "f" or got_a.dtype.kind == "f":
        close = np.isclose(pts_got.astype(np.float64), pts_exp.astype(np.float64), atol=atol, rtol=rtol,
                           equal_nan=True)
    else:
        close = pts_got == pts_exp
    point_ok = close.all(axis=2)                                           # [B, S]
    err = np.abs(pts_got.astype(np.float64) - pts_exp.astype(np.float64))
    err = np.where(np.isnan(err), np.where(close, 0.0, np.inf), err).max(axis=2)

    per_batch = -(-S // tile_s)
    b_idx, s_idx = np.meshgrid(np.arange(B), np.arange(S), indexing="ij")
    tile = (b_idx // tile_b) * per_batch + s_idx // tile_s
    n_tiles = -(-B // tile_b) * per_batch
    if blocks is None:
        block_of = np.arange(n_tiles)
    elif isinstance(blocks, numbers.Integral) and not isinstance(blocks, (bool, np.bool_)):
        block_of = np.arange(n_tiles) % _positive_int("blocks", blocks)
    else:
        block_of = np.asarray(blocks)
        if block_of.shape != (n_tiles,) or block_of.dtype.kind not in "iu":
            raise ValueError(f"blocks must be None, a block_dim, or {n_tiles} block indices (one per "
                             f"tile); got {blocks!r}")

    rows = []
    for t in range(n_tiles):
        tb, ts = divmod(t, per_batch)
        b0, b1 = tb * tile_b, min(tb * tile_b + tile_b, B)
        s0, s1 = ts * tile_s, min(ts * tile_s + tile_s, S)
        ok = point_ok[b0:b1, s0:s1]
        bad = np.argwhere(~ok)
        rows.append({"tile": t, "block": int(block_of[t]), "b": f"{b0}-{b1 - 1}", "s": f"{s0}-{s1 - 1}",
                     "points": ok.size, "bad_points": int(bad.shape[0]),
                     "max_abs_err": float(err[b0:b1, s0:s1].max()),
                     "first_bad": f"(b={b0 + bad[0][0]}, s={s0 + bad[0][1]})" if len(bad) else ""})
    table = pd.DataFrame(rows).set_index("tile")

    bb, ss = np.nonzero(~point_ok)
    bad = pd.DataFrame({"b": bb, "s": ss, "tile": tile[bb, ss], "block": block_of[tile[bb, ss]],
                        "b_in_tile": bb % tile_b, "s_in_tile": ss % tile_s,
                        "expected": [_fmt(pts_exp[b, s]) for b, s in zip(bb, ss)],
                        "got": [_fmt(pts_got[b, s]) for b, s in zip(bb, ss)]})
    return TileComparison(table.reset_index(), bad, tile_b, tile_s)


# --------------------------------------------------------------------------- timelines
_TOL_US = 1e-6        # far below one cycle (0.56 ns at 1.8 GHz): times this close are the same time


def pipe_bubbles(timeline, core: int = 0, min_us: float = 0.0):
    """The idle gaps (bubbles) of each pipe of one core, and what each one waited for.

    A gap runs from the end of a pipe's instruction (its occupancy) to the start of its next one
    on ``core`` (all launches of ``timeline``). The simulator starts an instruction at the latest
    of: its pipe is free, the scalar unit issued it, the flags it waits on passed, its inputs are
    complete (docs/cost_model.md §0–§4). An instruction's result is complete at its *ready* time
    (``Timeline.events()``' ``ready_us``: end + the DMA latency for a copy, + the pipeline depth
    for a vector instruction), and a flag, queue or barrier passes ``sync_flag_cycles`` (a barrier:
    ``pipe_barrier_cycles``) after the result it waits for is complete. So the time a gap *ends*
    tells what it waited for:

    * it ends exactly one flag (or one barrier) after an instruction of another pipe X became
      ready: a flag, queue or barrier wait on X — ``cause`` "waits for X (flag)" (``X+Y`` when
      two pipes' results are complete then);
    * it ends exactly when an earlier instruction of its own pipe became ready: the vector pipe's
      automatic read-after-write wait for a result still in its pipeline, or a DMA engine whose
      requests in flight are all taken — ``cause`` "waits for X (latency)", X the pipe itself;
    * it ends later than that after the last result of another pipe X became ready: the scalar
      unit got to issue it only then — it had waited for X itself (a ``WaitFlag`` on S, a
      ``PipeBarrier``) or, X = S, it was busy with its own scalar work — ``cause`` "issued after X";
    * no result became ready during the gap and the next instruction belongs to another block: the
      core moved on to its next block ("next block"); on S, "issuing to other pipes" (each
      instruction handed to another pipe costs the scalar unit an issue slot); anything else is
      "other".

    Returns a DataFrame: pipe, start_us, end_us, idle_us, waits_on (X or ""), cause, next (the
    instruction after the gap), source and code (its kernel line). Gaps shorter than ``min_us``
    are left out. Idle time before a pipe's first instruction and after its last is not a gap.

    The attribution is :func:`npu_lab.sim.monitor.classify_gaps`, which the performance monitor
    (:func:`npu_lab.sim.monitor.monitor`, docs/monitor.md) uses too: one rule for both."""
    import pandas as pd

    from ..sim import Timeline
    from ..sim.monitor import classify_gaps

    if not isinstance(timeline, Timeline):
        raise TypeError(f"pipe_bubbles takes a Timeline (from npu_lab.launch or a .timeline), got "
                        f"{type(timeline).__name__}")
    if not timeline.launches:
        raise ValueError("empty timeline: launch a kernel first")
    cores = timeline.core_count()
    if isinstance(core, (bool, np.bool_)) or not isinstance(core, numbers.Integral) or not 0 <= core < cores:
        raise ValueError(f"core must be a whole number 0..{cores - 1}, got {core!r}")
    if not min_us >= 0:
        raise ValueError(f"min_us must be >= 0, got {min_us!r}")
    ev = timeline.events()
    ev = ev[(ev["core"] == core) & (ev["pipe"] != "launch")]
    columns = ["pipe", "start_us", "end_us", "idle_us", "waits_on", "cause", "next", "source", "code"]
    if ev.empty:
        return pd.DataFrame(columns=columns)
    ev_pipe = ev["pipe"].to_numpy()
    ready_us = ev["ready_us"].to_numpy()
    hw = timeline.launches[0].hw
    sync_lags = sorted({hw.cycles_to_us(hw.sync_flag_cycles), hw.cycles_to_us(hw.pipe_barrier_cycles)})

    rows = []
    for pipe, group in ev.groupby("pipe", sort=False):
        g = group.sort_values("start_us", kind="stable")
        prev_end, prev_block, gaps = None, None, []
        for r in g.itertuples(index=False):
            if prev_end is not None and r.start_us - prev_end > max(min_us, _TOL_US):
                gaps.append((prev_end, r, r.block != prev_block))
            prev_end = r.end_us if prev_end is None else max(prev_end, r.end_us)
            prev_block = r.block
        # the attribution is the monitor's (one rule for both: npu_lab.sim.monitor.classify_gaps)
        waits, causes = classify_gaps([a for a, _, _ in gaps], [r.start_us for _, r, _ in gaps], pipe,
                                      ev_pipe, ready_us, sync_lags, _TOL_US)
        for (after, r, new_block), w, cause in zip(gaps, waits, causes):
            if cause is None and new_block:
                w, cause = "", "next block"
            elif cause is None:   # S spends issue slots on the instructions it hands to other pipes
                w, cause = "", "issuing to other pipes" if pipe == "S" else "other"
            rows.append({"pipe": pipe, "start_us": after, "end_us": r.start_us,
                         "idle_us": r.start_us - after, "waits_on": w, "cause": cause,
                         "next": r.name, "source": r.source, "code": r.code})
    out = pd.DataFrame(rows, columns=columns)
    return out.sort_values(["start_us", "pipe"], kind="stable").reset_index(drop=True)


def bubble_summary(bubbles):
    """Idle µs of :func:`pipe_bubbles` added up: rows pipe, columns what the gaps waited on."""
    import pandas as pd

    if not isinstance(bubbles, pd.DataFrame) or not {"pipe", "cause", "idle_us"} <= set(bubbles):
        raise TypeError("bubble_summary takes the DataFrame pipe_bubbles returns")
    if bubbles.empty:
        return pd.DataFrame(columns=["total idle (us)"])
    table = bubbles.pivot_table(index="pipe", columns="cause", values="idle_us", aggfunc="sum", fill_value=0.0)
    table["total idle (us)"] = table.sum(axis=1)
    return table.sort_values("total idle (us)", ascending=False)


def op_summary(timeline):
    """One row per launch with the fields of msprof's ``op_summary_*.csv`` for a vector kernel.

    ``Task Duration(us)``: the launch, head overhead included (an empty kernel's Task Duration is
    the head overhead); ``Block Dim``; ``aiv_time(us)``: the mean time a core that ran blocks was
    busy with them; ``aiv_<pipe>_time(us)``: the mean busy time of that pipe per such core;
    ``aiv_<pipe>_ratio``: the mean over those cores of pipe busy / core time (msprof divides the
    pipe's cycles by the core's total cycles). Pipes: scalar (S), vec (V), mte2, mte3.
    Approximations: msprof counts hardware cycles per core; here a pipe's busy time is the sum of
    its instructions in the model."""
    import pandas as pd

    from ..sim import Timeline
    from ..sim.core import PIPE_CODE

    if not isinstance(timeline, Timeline):
        raise TypeError(f"op_summary takes a Timeline, got {type(timeline).__name__}")
    rows = []
    for launch in timeline.launches:
        us = launch.hw.cycles_to_us
        occupied = np.zeros(launch.hw.cores(launch.core_type))
        if launch.block_dim:
            np.add.at(occupied, launch.block_core, launch.block_end - launch.block_start)
        used = occupied > 0
        busy = launch.busy_cycles_by_core()
        row = {"Op Name": launch.name, "Task Duration(us)": us(launch.total_cycles),
               "Block Dim": launch.block_dim, "aiv_time(us)": us(float(occupied[used].mean())) if used.any() else 0.0}
        for label, pipe in (("scalar", "S"), ("vec", "V"), ("mte2", "MTE2"), ("mte3", "MTE3")):
            per_core = busy[used, PIPE_CODE[pipe]]
            row[f"aiv_{label}_time(us)"] = us(float(per_core.mean())) if used.any() else 0.0
            row[f"aiv_{label}_ratio"] = float((per_core / occupied[used]).mean()) if used.any() else 0.0
        rows.append(row)
    return pd.DataFrame(rows).set_index("Op Name")
