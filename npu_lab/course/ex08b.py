"""Stretch exercises (appendix 08b) for a learner who finished the course: parts of v3 written
by hand and a latency race, each checked by :func:`~npu_lab.course.kernel_check.check_kernel`
and ranked by :func:`~npu_lab.course.leaderboard.leaderboard` against the course's versions.

* ``08b.wide_argmax`` — v3's two-level argmax for 64 < E ≤ 2040, E a multiple of 64
  (:func:`npu_lab.kernels.moe_gating.vectorized.two_level_argmax`): the learner writes the
  function, the rest of v3 is the library's.
* ``08b.knock_out`` — chase v4 at E = 256, K = 8 on the 910B2: the learner writes the knock-out
  between rounds (:func:`~npu_lab.kernels.moe_gating.vectorized.knock_out_winner`). The target is
  honest: the course's own v3 knock-out lands about 6 % above v4 at this shape (v4 sorts a row
  once, Sort32 + MrgSort, instead of K rounds), so the target is v4 + 10 %; beating v4 is the open
  part, and the leaderboard shows it.
* ``08b.fused_310p`` — the fused softmax + top-k on the 310P3, where v1/v2/v4 (no DataCopyPad) and
  v3 (no level-0 ``Copy``, no int32 ``Compare``) are refused: v3 with its winner columns written by
  a bit-masked level-0 ``Muls``/``Adds`` (the learner's part,
  :func:`~npu_lab.kernels.moe_gating.vectorized.write_column_310p`) and a float knock-out
  (:func:`~npu_lab.kernels.moe_gating.vectorized.knock_out_winner_310p`, given). Target: under the
  fastest course version the 310P runs (the discrete chain; v2c is far slower). K = 8 and
  E ∈ {128, 256, 512}: a tile's results are whole 32-byte blocks (no DataCopyPad for a tail) and
  the float knock-out halves 8 copies a row down to m = E/64 chunks with GatherMask pattern 1.

Both run inside the library's v3 (``vectorized._v3(argmax=..., knock_out=...)``) with v3's host
tiling. After the learner's function returns, a full run compares what it wrote with numpy on
the same UB data, so an unfinished or wrong part is named at once (which row, what it holds),
before the whole kernel's outputs are compared with the reference.
"""

from __future__ import annotations

import numpy as np

from ..kernels.moe_gating.fused import looping_block_classes
from ..kernels.moe_gating.vectorized import (_v3, knock_out_winner, knock_out_winner_310p, two_level_argmax,
                                             write_column_310p)
from ..lang import npu_kernel
from .kernel_check import (KernelExercise, moe_locator, moe_logits, moe_target, register_exercise,
                           sentinel_array)

__all__ = ["UnfinishedPartError", "WIDE_TIMED", "RACE_TIMED", "FUSED_310P_TIMED", "stretch_logits"]


class UnfinishedPartError(RuntimeError):
    """The learner's part of v3 returned without writing what it must (or wrote a wrong value)."""

    part_check = True


#: 08b.wide_argmax is timed at a wide row (4 chunks) with a tail tile
WIDE_TIMED = {"B": 1, "S": 1000, "E": 256, "K": 4, "dtype": "float32", "label": "B=1, S=1000, E=256, K=4, float32"}
#: 08b.knock_out: the race shape (v4's home ground: E = 256, K = 8)
RACE_TIMED = {"B": 1, "S": 1024, "E": 256, "K": 8, "dtype": "float32", "label": "B=1, S=1024, E=256, K=8, float32"}
RACE_FACTOR = 1.10


def stretch_logits(case) -> np.ndarray:
    """The case's logits; ``ties=True`` rounds them to halves so rows hold equal maxima (the lowest
    index must win, within a chunk and across chunks)."""
    x = moe_logits(case)
    if case.get("ties"):
        x = (np.round(x.astype(np.float32) * 2) / 2).astype(case["dtype"])
    return x


def wide_cases(rng) -> list[dict]:
    """E > 64 in whole 64-lane chunks: 2 chunks, 3 (odd), 4 with K = 8, float16, 8 chunks, ties."""
    fixed = [(1, 37, 128, 2, "float32", False), (1, 20, 192, 1, "float32", False),
             (2, 11, 256, 8, "float32", False), (1, 50, 128, 4, "float16", False),
             (1, 9, 512, 3, "float32", False), (1, 40, 256, 4, "float32", True)]
    for _ in range(2):
        fixed.append((1, int(rng.integers(1, 60)), 64 * int(rng.integers(2, 9)), int(rng.integers(1, 9)),
                      "float32", False))
    return [{"B": B, "S": S, "E": E, "K": K, "dtype": dt, "ties": ties,
             "label": f"B={B}, S={S}, E={E}, K={K}, {dt}" + (", tied logits" if ties else "")}
            for B, S, E, K, dt, ties in fixed]


def stretch_reference(case) -> dict:
    from ..kernels.moe_gating import moe_gating_topk_reference

    idx, wgt = moe_gating_topk_reference(stretch_logits(case), case["K"])
    return {"indices": np.asarray(idx, np.int32).reshape(-1), "weights": np.asarray(wgt, np.float32).reshape(-1)}


# ---- plugging a learner's part into v3, with a check of what it wrote -------------------------
def _checked_argmax(fn):
    def argmax(ctx, row_values, row_argmax, bcast, src, rows, Ep, work, mask):
        before = None if row_argmax.data is None else src.data[:rows * Ep].reshape(rows, Ep).copy()
        if before is not None:
            row_argmax.data[:rows] = sentinel_array(rows, np.int32)
        fn(ctx, row_values, row_argmax, bcast, src, rows, Ep, work, mask)
        if before is None:                               # timing-only run: nothing to look at
            return
        got = row_argmax.data[:rows]
        if (got == sentinel_array(1, np.int32)[0]).all():
            raise UnfinishedPartError("your argmax returned without writing row_argmax (int32, one index a "
                                      "row): fill in the part marked YOUR CODE HERE")
        want = np.argmax(before, axis=1)                 # first argmax, as the reference
        bad = np.flatnonzero(got != want)
        if bad.size:
            r = int(bad[0])
            raise UnfinishedPartError(
                f"row {r} of the tile: row_argmax holds {int(got[r])}, its first maximum is at column "
                f"{int(want[r])} (value {before[r, want[r]]:.6g}; {bad.size} of {rows} rows wrong). A tie must "
                "give the lowest index: Compare LE keeps the earlier chunk, WholeReduceMin the lowest lane")
        vals = row_values.data[:rows]
        if not np.array_equal(vals, before[np.arange(rows), want]):
            r = int(np.flatnonzero(vals != before[np.arange(rows), want])[0])
            raise UnfinishedPartError(f"row {r}: row_values holds {vals[r]:.6g}, the row max is "
                                      f"{before[r, want[r]]:.6g} (GatherMask pattern 1 of the pairs)")
    return argmax


def _checked_knock_out(fn):
    def knock_out(ctx, work, src, row_argmax, argmax_bcast, iota, mask, neg_inf, rows, Ep):
        if row_argmax.data is None:
            return fn(ctx, work, src, row_argmax, argmax_bcast, iota, mask, neg_inf, rows, Ep)
        before = src.data[:rows * Ep].reshape(rows, Ep).copy()
        winners = row_argmax.data[:rows].copy()
        fn(ctx, work, src, row_argmax, argmax_bcast, iota, mask, neg_inf, rows, Ep)
        after = work.data[:rows * Ep].reshape(rows, Ep)
        want = before.copy()
        want[np.arange(rows), winners] = -np.inf
        bad = np.flatnonzero(~((after == want) | (np.isnan(after) & np.isnan(want))).all(axis=1))
        if bad.size:
            r = int(bad[0])
            cols = np.flatnonzero(~((after[r] == want[r]) | (np.isnan(after[r]) & np.isnan(want[r]))))
            raise UnfinishedPartError(
                f"after your knock-out, row {r} of `work` differs from the scores with column {int(winners[r])} "
                f"(this round's winner) set to -inf, at columns {cols[:6].tolist()} ({bad.size} of {rows} rows): "
                "set exactly the winner to -inf and copy the rest, so the next round finds the next best")
    return knock_out


def _checked_write_column(fn):
    def write(ctx, values_pad, indices_pad, bcast, row_argmax, argmax_bcast, k, rows, Kp, m):
        if values_pad.data is None:
            return fn(ctx, values_pad, indices_pad, bcast, row_argmax, argmax_bcast, k, rows, Kp, m)
        v_before = values_pad.data[:rows * Kp].reshape(rows, Kp).copy()
        i_before = indices_pad.data[:rows * Kp].reshape(rows, Kp).copy()
        want_v = bcast.data[:rows * 8:8].copy()            # Brcb: block i holds row i's max
        want_i = row_argmax.data[:rows].copy()
        fn(ctx, values_pad, indices_pad, bcast, row_argmax, argmax_bcast, k, rows, Kp, m)
        v = values_pad.data[:rows * Kp].reshape(rows, Kp)
        i = indices_pad.data[:rows * Kp].reshape(rows, Kp)
        for name, got, want, before in (("values", v, want_v, v_before), ("indices", i, want_i, i_before)):
            if np.array_equal(got, before) and not np.array_equal(got[:, k], want):
                raise UnfinishedPartError(f"round {k}: your function left {name}_pad unchanged; write column {k} "
                                          "of every row (fill in the part marked YOUR CODE HERE)")
            bad = np.flatnonzero(got[:, k] != want)
            if bad.size:
                r = int(bad[0])
                raise UnfinishedPartError(f"round {k}: row {r} of {name}_pad holds {got[r, k]} in column {k}, "
                                          f"expected {want[r]} ({bad.size} of {rows} rows wrong)")
            others = np.ones(Kp, bool)
            others[k] = False
            if not np.array_equal(got[:, others], before[:, others]):
                r, c = (int(x[0]) for x in np.nonzero(got[:, others] != before[:, others]))
                raise UnfinishedPartError(f"round {k}: your function also changed {name}_pad outside column {k} "
                                          f"(row {r}): the bit mask must select lane {k % 8} of each block only")
    return write


def _plan(case, hw, on_310p: bool):
    from ..kernels.moe_gating import plan_moe_gating
    from ..kernels.moe_gating.run import default_tile_s
    from ..kernels.moe_gating.tiling import calculate_moe_gating_tiling
    from ..presets import get_preset

    B, S, E, K = case["B"], case["S"], case["E"], case["K"]
    if not on_310p:
        return plan_moe_gating(B, S, E, K, version="v3", hw=hw, tile_s=case.get("tile_s"), dtype=case["dtype"])
    # the course's v3 is refused on the 310P (plan_moe_gating says why); this kernel is v3's layout
    # without the instructions the 310P lacks, so it takes v3's host tiling directly
    spec = get_preset(hw)
    tile_s = case.get("tile_s") or default_tile_s(B, S, E, K, "v3", hw)
    tiling = calculate_moe_gating_tiling(B, S, E, K, spec, version="v3", tile_s=tile_s)
    return tiling, min(spec.vector_cores, tiling.totalTiles)


def _v3_launcher(part: str):
    def run(fn, case, hw, timing_only):
        from ..lang import GlobalTensor, launch

        if part == "argmax":
            plug = {"argmax": _checked_argmax(fn)}
        elif part == "knock_out":
            plug = {"knock_out": _checked_knock_out(fn)}
        else:                                            # the 310P kernel: the learner's column write
            plug = {"write_column": _checked_write_column(fn), "knock_out": knock_out_winner_310p, "no_copy": True}

        @npu_kernel(block_classes=looping_block_classes)
        def kernel(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes):
            _v3(ctx, gate_gm, indices_gm, weights_gm, tiling_bytes, fast=False, **plug)

        B, S, E, K = case["B"], case["S"], case["E"], case["K"]
        tiling, block_dim = _plan(case, hw, part == "column_310p")
        if timing_only:
            gate = GlobalTensor.empty(B * S * E, case["dtype"], "gate_logits", timing_only=True)
            idx = GlobalTensor.empty(B * S * K, np.int32, "expert_indices", timing_only=True)
            wgt = GlobalTensor.empty(B * S * K, np.float32, "routing_weights", timing_only=True)
        else:
            gate = GlobalTensor.from_array(stretch_logits(case), "gate_logits")
            idx = GlobalTensor.from_array(sentinel_array(B * S * K, np.int32), "expert_indices")
            wgt = GlobalTensor.from_array(sentinel_array(B * S * K, np.float32), "routing_weights")
        timeline = launch(kernel, block_dim, gate, idx, wgt, tiling.pack(), hw=hw, timing_only=timing_only)
        return (None if timing_only else {"indices": idx.data, "weights": wgt.data}), timeline
    return run


def _race_target(hw):
    us, _ = moe_target("v4", RACE_TIMED)(hw)
    v3, _ = moe_target("v3", RACE_TIMED)(hw)
    return us * RACE_FACTOR, (f"the course's v4 ({us:.1f} µs) + {RACE_FACTOR - 1:.0%}; the course's v3 knock-out "
                              f"gives {v3:.1f} µs — under v4 is the open part")


_IMPORTS = ("import numpy as np\n"
            "from npu_lab.lang import SELMODE, BinaryRepeatParams, BrcbRepeatParams, GatherMaskParams\n"
            "from npu_lab.kernels.moe_gating.vectorized import TWO_POW_23, TWO_POW_23_BITS, ceil_div, repeat_chunks")

register_exercise(KernelExercise(
    id="08b.wide_argmax", notebook="ex08b", title="v3's wide-row argmax, two levels",
    teaches="an argmax over 64 < E ≤ 2040 for all rows of a tile in O(chunks) instructions: a per-lane Max over "
            "the 64-lane chunks with Compare/Select recording the chunk, WholeReduceMax of the lane maxima, "
            "GatherMask + Brcb, Compare EQ and WholeReduceMin for the lowest index (no float->int Cast)",
    solution=two_level_argmax, cell_name="my_two_level_argmax", imports=_IMPORTS,
    place_after="## 1 · The wide-row argmax",
    cases=wide_cases, launch=_v3_launcher("argmax"), reference=stretch_reference,
    locate=moe_locator("v2"), target=moe_target("v3", WIDE_TIMED, factor=1.02, label="the course's v3 + 2 %"),
    target_case=WIDE_TIMED, speed=True,
    slow_hint="count your instructions per round: a per-row ReduceMax (r a round) is what this replaces",
    leaderboard_versions=("v2c", "v3", "v4")))

register_exercise(KernelExercise(
    id="08b.knock_out", notebook="ex08b", title="Chase v4 at E = 256, K = 8: the knock-out",
    teaches="the knock-out between v3's top-K rounds as few vector instructions for all rows (Brcb the "
            "argmax per chunk, int32 Compare EQ against a lane iota, Select −inf), raced against v4's sort",
    solution=knock_out_winner, cell_name="my_knock_out", imports=_IMPORTS,
    place_after="## 2 · Chase v4",
    cases=wide_cases, launch=_v3_launcher("knock_out"), reference=stretch_reference,
    locate=moe_locator("v2"), target=_race_target, target_case=RACE_TIMED, speed=True,
    slow_hint="a per-row instruction (r a round, K rounds) is what loses the race: build one mask for all rows",
    leaderboard_versions=("discrete", "v2c", "v3", "v3_fast_exp", "v4")))


CHIP_310P = "ascend-310p3"
#: 08b.fused_310p is timed at the race shape, on the 310P3
FUSED_310P_TIMED = dict(RACE_TIMED)


def fused_310p_cases(rng) -> list[dict]:
    """K = 8 (whole 32-byte result rows), E = 128, 256, 512; a tail, float16, tied logits."""
    fixed = [(1, 37, 128, 8, "float32", False), (2, 11, 256, 8, "float32", False),
             (1, 50, 256, 8, "float16", False), (1, 9, 512, 8, "float32", False),
             (1, 40, 256, 8, "float32", True)]
    for _ in range(2):
        fixed.append((1, int(rng.integers(1, 60)), int(rng.choice([128, 256, 512])), 8, "float32", False))
    return [{"B": B, "S": S, "E": E, "K": K, "dtype": dt, "ties": ties,
             "label": f"B={B}, S={S}, E={E}, K={K}, {dt}" + (", tied logits" if ties else "")}
            for B, S, E, K, dt, ties in fixed]


def _fused_310p_target(hw):
    from ..kernels.moe_gating import simulate_moe_gating
    from ..kernels.moe_gating.run import unsupported_reason

    t = FUSED_310P_TIMED
    runs = {v: simulate_moe_gating(t["B"], t["S"], t["E"], t["K"], version=v, hw=hw).latency_us
            for v in ("discrete", "v2c") if unsupported_reason(v, hw) is None}
    best = min(runs, key=runs.get)
    return runs[best], ("the fastest course version this chip runs: " +
                        ", ".join(f"{v} {us:.1f} µs" for v, us in sorted(runs.items(), key=lambda kv: kv[1])))


register_exercise(KernelExercise(
    id="08b.fused_310p", notebook="ex08b", title="A fused softmax + top-k on the 310P3",
    teaches="porting a kernel to a chip without an instruction: v3's winner columns written by a bit-masked "
            "level-0 Muls / Adds (the 310P has no level-0 Copy), Brcb at block stride 1 (a strided Brcb is a scalar "
            "fallback there), beating the discrete chain and v2c on the 310P",
    solution=write_column_310p, cell_name="my_write_column_310p",
    imports=_IMPORTS.replace("BinaryRepeatParams, BrcbRepeatParams, GatherMaskParams",
                             "BinaryRepeatParams, BrcbRepeatParams, GatherMaskParams, UnaryRepeatParams")
            + "\nfrom npu_lab.kernels.moe_gating.vectorized import lane_bits",
    place_after="## 3 · On the 310P3",
    cases=fused_310p_cases, launch=_v3_launcher("column_310p"), reference=stretch_reference,
    locate=moe_locator("v2"), target=_fused_310p_target, target_case=FUSED_310P_TIMED, speed=True,
    hw=CHIP_310P,
    slow_hint="look at the timeline: which pipe bounds it? one masked instruction per column for all rows, "
              "not one per row",
    leaderboard_versions=("discrete", "v1", "v2", "v2c", "v3", "v4")))
