"""Exercise checks for notebook 12 (sparse KV compression).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult` (a ``str``;
print it) saying whether the answer is right, why, and a hint when it is not. Every expected
answer is computed from the library (:mod:`npu_lab.kernels.sparse_kv`), never typed in;
:func:`expected_answers` gives each check's truth.

Kernel exercise (``check_kernel(fn, "12.topk")``): the token top-k and the gather of the sparse-KV
kernel — the sinks marked +inf, the Sort32 call, and the whole-row DataCopy of every kept row.
"""

from __future__ import annotations

import math

import numpy as np

from ..kernels.sparse_kv import (SparseKvTiling, compress_kv_npu, error_vs_memory, importance, kv_bytes,
                                 merge_sorted_lists, n_keep_of, select_tokens, sparse_kv_tiling, sparse_kv_ub_layout,
                                 synthetic_kv)
from ..lang import (DataCopyExtParams, DataCopyPadExtParams, GatherMaskParams, GlobalTensor, TBuf, TPosition, launch,
                    npu_kernel)
from ..presets import get_preset
from .checks import (CheckResult, missing as _missing, parse_number as _number, parse_percent as _percent,
                     parse_word as _word, right as _right, wrong as _wrong)
from .kernel_check import KernelExercise, register_exercise, sentinel_array

__all__ = ["check_n_keep", "check_memory_kept", "check_better_score", "expected_answers", "n_keep_truth",
           "memory_kept_truth", "better_score_truth", "N_KEEP_CASE", "MEMORY_CASE", "SCORE_CASE",
           "sparse_kv_exercise_solution"]

CHIP = "ascend-910b2"
#: Exercise 12.1: tokens kept per head.
N_KEEP_CASE = dict(tokens=8192, keep_ratio=0.3, sinks=4)
#: Exercise 12.2: share of the memory kept (Llama-3-70B-like head: D = 128, fp16, int32 positions).
MEMORY_CASE = dict(heads=8, tokens=8192, head_dim=128, itemsize=2, keep_ratio=0.3, sinks=4)
#: Exercise 12.3: which score errs less on the seed-0 synthetic cache at this keep ratio.
SCORE_CASE = dict(keep_ratio=0.3, sinks=4)


def expected_answers() -> dict[str, object]:
    """The truth of every check of notebook 12, by check name."""
    return {"check_n_keep": n_keep_truth(), "check_memory_kept": memory_kept_truth(),
            "check_better_score": better_score_truth()}


def n_keep_truth() -> int:
    c = N_KEEP_CASE
    return n_keep_of(c["tokens"], c["keep_ratio"], c["sinks"])


def check_n_keep(answer) -> CheckResult:
    """8192 tokens, keep_ratio 0.3, 4 sinks: how many tokens per head does compress_kv keep?"""
    if answer is None:
        return _missing("a whole number of tokens")
    value = _number(answer, ("tokens", "token"))
    if value is None:
        return _wrong(f"{answer!r} is not a number of tokens.")
    c = N_KEEP_CASE
    truth = n_keep_truth()
    if value == truth:
        return _right(f"{truth} = floor({c['keep_ratio']} x {c['tokens']}): the sinks count among the kept tokens "
                      f"(they are the first {c['sinks']} of the {truth}), as in the article's kernel.")
    if value == truth + c["sinks"]:
        return _wrong(f"{value:g} adds the sinks on top. Hint: the sinks are part of the keep_ratio budget.")
    if value == math.ceil(c["keep_ratio"] * c["tokens"]):
        return _wrong(f"{value:g} rounds up. Hint: static_cast<uint32_t>(seq_len * keep_ratio) truncates.")
    return _wrong(f"{value:g} is not it. Hint: n_keep_of(tokens, keep_ratio, sinks).")


def memory_kept_truth() -> float:
    """Percent of the K/V bytes kept (K, V and an int32 position per kept token and head)."""
    c = MEMORY_CASE
    n = n_keep_of(c["tokens"], c["keep_ratio"], c["sinks"])
    return 100 * kv_bytes(c["heads"], n, c["head_dim"], c["itemsize"], positions=True) / \
        kv_bytes(c["heads"], c["tokens"], c["head_dim"], c["itemsize"])


def check_memory_kept(answer) -> CheckResult:
    """What share of one layer's K/V bytes does the compressed cache take (positions included)? A percentage."""
    if answer is None:
        return _missing("a percentage")
    value = _percent(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a percentage.")
    c = MEMORY_CASE
    truth = memory_kept_truth()
    n = n_keep_of(c["tokens"], c["keep_ratio"], c["sinks"])
    no_pos = 100 * n / c["tokens"]
    if math.isclose(value, truth, abs_tol=0.01):
        return _right(f"{truth:.2f} %: {n} of {c['tokens']} tokens, each {2 * c['head_dim'] * c['itemsize']} B of K and "
                      f"V plus a 4-B position per head. So 30 % kept saves about 70 % — not the article's 31.8 %.")
    if math.isclose(value, no_pos, abs_tol=0.01):
        return _wrong(f"{value:.2f} % forgets the positions. Hint: the compressed cache must remember where each kept "
                      "token was (4 B per token and head).")
    return _wrong(f"{value:g} % is not it. Hint: kv_bytes(heads, n_keep, D, 2, positions=True) / kv_bytes(heads, S, D, 2).")


_SCORE_WORDS = {"key_norm": "key_norm", "key norm": "key_norm", "norm": "key_norm", "window": "window",
                "attention": "window", "snapkv": "window", "recent": "recent"}


def better_score_truth() -> str:
    df = error_vs_memory(synthetic_kv(), (SCORE_CASE["keep_ratio"],), sinks=SCORE_CASE["sinks"])
    return str(df.set_index("score").error.idxmin())


def check_better_score(answer) -> CheckResult:
    """Which score gives the smaller attention-output error at keep_ratio 0.3 on the seed-0 synthetic
    cache: "key_norm", "window" or "recent"?"""
    if answer is None:
        return _missing('"key_norm", "window" or "recent"')
    word = _word(answer, _SCORE_WORDS)
    if word is None:
        return _wrong(f'{answer!r} is not one of "key_norm", "window", "recent".')
    df = error_vs_memory(synthetic_kv(), (SCORE_CASE["keep_ratio"],), sinks=SCORE_CASE["sinks"]).set_index("score")
    truth = better_score_truth()
    errs = ", ".join(f"{s} {100 * e:.1f} %" for s, e in df.error.items())
    if word == truth:
        return _right(f"{truth} ({errs}). The window score asks the queries which tokens they attend to; the key norm "
                      "keeps long keys, and the synthetic cache has long keys no query attends to.")
    return _wrong(f"not {word} ({errs}). Hint: a token matters when queries attend to it — which score measures that?")


# ---- kernel exercise ----------------------------------------------------------------------------
@npu_kernel(block_classes=lambda block_dim, *a, **k: np.zeros(block_dim, dtype=np.int64))
def sparse_kv_exercise_solution(ctx, scores_gm: GlobalTensor, k_gm: GlobalTensor, v_gm: GlobalTensor,
                                k_out: GlobalTensor, v_out: GlobalTensor, idx_out: GlobalTensor, tiling_bytes: bytes):
    """The sparse-KV kernel (npu_lab.kernels.sparse_kv.sparse_kv_kernel), one block per head: the
    scores in, -inf padding, the sinks, Sort32, the merge, the indices out, then the gather of the
    kept K and V rows through two ping-pong slots. Pipes MTE2 -> V -> S / MTE3, then MTE2 -> MTE3."""
    t = SparseKvTiling.unpack(tiling_bytes)
    h = ctx.get_block_idx()
    S, D, n, C = t.tokens, t.headDim, t.nKeep, t.colAlign
    dt = k_gm.dtype
    bufs = {}
    for name, nbytes in sparse_kv_ub_layout(S, n, D, dt.itemsize, t.rowsPerTile):
        bufs[name] = TBuf(TPosition.VECCALC)
        ctx.pipe.init_buffer(bufs[name], nbytes, name=name)
    pairs_a, pairs_b = bufs["pairs_a"].get(np.float32), bufs["pairs_b"].get(np.float32)
    scores, index = bufs["scores"].get(np.float32), bufs["index"].get(np.int32)
    kept = bufs["kept"].get(np.int32)
    slots = [bufs["rows"].get(dt)[i * t.rowsPerTile * D] for i in range(2)]
    ctx.data_copy_pad(scores, scores_gm[h * S], DataCopyExtParams(1, S * 4, 0, 0, 0),
                      DataCopyPadExtParams(False, 0, 0, 0))
    ctx.create_vec_index(index, 0, C)
    ev = ctx.pipe.fetch_event_id("MTE2_V")
    ctx.set_flag("MTE2_V", ev)
    ctx.wait_flag("MTE2_V", ev)
    if C != S:                                             # -inf into columns S..C-1 of the last chunk
        pad = C - S
        ctx.duplicate(scores[C - 32], float("-inf"), [((1 << pad) - 1) << (32 - pad), 0], 1, 1, 8)
    # YOUR CODE (12.topk): make the first t.sinks scores sort first (ctx.duplicate with +inf, count
    # form), then a PIPE_V barrier, then Sort32 all C scores into pairs_a with their indices
    # (ctx.sort32(dst, scores, index.reinterpret_cast(np.uint32), repeats): 32 scores a repeat),
    # and a PIPE_V barrier.
    ### BEGIN SOLUTION [12.topk]
    if t.sinks:
        ctx.duplicate(scores, float("inf"), t.sinks)
    ctx.pipe_barrier("PIPE_V")
    ctx.sort32(pairs_a, scores, index.reinterpret_cast(np.uint32), C // 32)
    ctx.pipe_barrier("PIPE_V")
    ### END SOLUTION [12.topk]
    sorted_pairs = merge_sorted_lists(ctx, pairs_a, pairs_b, C)     # MrgSort rounds (given)
    ctx.gather_mask(kept, sorted_pairs.reinterpret_cast(np.int32), 2, False, 0,
                    GatherMaskParams(1, t.keptLen // 32, 8, 0))      # the index words of the first pairs
    ev = ctx.pipe.fetch_event_id("V_MTE3")
    ctx.set_flag("V_MTE3", ev)
    ctx.wait_flag("V_MTE3", ev)
    ctx.data_copy_pad(idx_out[h * n], kept, DataCopyExtParams(1, n * 4, 0, 0, 0))
    ev = ctx.pipe.fetch_event_id("V_S")
    ctx.set_flag("V_S", ev)
    ctx.wait_flag("V_S", ev)
    ev_loaded = [ctx.pipe.alloc_event_id("MTE2_MTE3") for _ in range(2)]
    ev_stored = [ctx.pipe.alloc_event_id("MTE3_MTE2") for _ in range(2)]
    j = 0
    for src, dst in ((k_gm, k_out), (v_gm, v_out)):
        for r0 in range(0, n, t.rowsPerTile):
            rows = min(t.rowsPerTile, n - r0)
            slot = slots[j % 2]
            if j >= 2:
                ctx.wait_flag("MTE3_MTE2", ev_stored[j % 2])
            # YOUR CODE (12.topk): gather this tile's rows r0 .. r0 + rows - 1: read each kept position
            # with kept.get_value(i) (the scalar unit), then ONE ctx.data_copy of the whole D-element row
            # src[(h * S + pos) * D] into slot[r * D]. No element-by-element copies.
            ### BEGIN SOLUTION [12.topk]
            for r in range(rows):
                pos = kept.get_value(r0 + r)
                ctx.data_copy(slot[r * D], src[(h * S + pos) * D], D)
            ### END SOLUTION [12.topk]
            ctx.set_flag("MTE2_MTE3", ev_loaded[j % 2])
            ctx.wait_flag("MTE2_MTE3", ev_loaded[j % 2])
            ctx.data_copy(dst[(h * n + r0) * D], slot, rows * D)
            ctx.set_flag("MTE3_MTE2", ev_stored[j % 2])
            j += 1
    for i in range(max(0, j - 2), j):
        ctx.wait_flag("MTE3_MTE2", ev_stored[i % 2])
    for e in ev_loaded:
        ctx.pipe.release_event_id("MTE2_MTE3", e)
    for e in ev_stored:
        ctx.pipe.release_event_id("MTE3_MTE2", e)


_IMPORTS = ("import numpy as np\nfrom npu_lab import npu_kernel\n"
            "from npu_lab.lang import (DataCopyExtParams, DataCopyPadExtParams, GatherMaskParams, GlobalTensor, TBuf,\n"
            "                          TPosition)\n"
            "from npu_lab.kernels.sparse_kv import SparseKvTiling, merge_sorted_lists, sparse_kv_ub_layout")


def _cases(rng) -> list[dict]:
    """Keep all, only the sinks, no sinks with a lone-list merge, ties (integer keys), several tiles,
    float16 and float32, then two random shapes."""
    fixed = [(1, 32, 16, "float16", 1.0, 2, False, None), (2, 200, 32, "float32", 0.3, 4, False, 16),
             (1, 160, 64, "float32", 0.1, 0, False, None), (3, 90, 16, "float16", 0.01, 6, False, None),
             (2, 64, 16, "float32", 0.5, 1, True, 8)]
    for _ in range(2):
        fixed.append((int(rng.integers(1, 4)), int(rng.integers(1, 600)), 32, "float16",
                      float(rng.uniform(0.05, 1.0)), int(rng.integers(0, 5)), False, None))
    out = []
    for H, S, D, dt, r, s, ties, rpt in fixed:
        s = min(s, S)
        out.append(dict(H=H, S=S, D=D, dtype=dt, keep_ratio=r, sinks=s, ties=ties, rows_per_tile=rpt,
                        label=f"H={H}, S={S}, D={D}, {dt}, keep_ratio={r:.2f}, sinks={s}" + (", ties" if ties else "")))
    return out


def _inputs(case):
    rng = np.random.default_rng([case["H"], case["S"], case["D"], case["sinks"]])
    shape = (case["H"], case["S"], case["D"])
    k = rng.integers(-1, 2, shape) if case["ties"] else rng.standard_normal(shape)
    return k.astype(case["dtype"]), rng.standard_normal(shape).astype(case["dtype"])


def _tiling(case, hw):
    n = n_keep_of(case["S"], case["keep_ratio"], case["sinks"])
    return sparse_kv_tiling(case["H"], case["S"], case["D"], n, case["sinks"], np.dtype(case["dtype"]).itemsize, hw,
                            None if case["rows_per_tile"] is None else min(case["rows_per_tile"], n))


def _launch(fn, case, hw, timing_only):
    """Host code: key-norm scores, the library's tiling, outputs NaN / sentinel until written."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    t = _tiling(case, hw)
    k, v = _inputs(case)
    H, n, D = case["H"], t.nKeep, case["D"]
    gm = lambda a, name: GlobalTensor.from_array(np.ascontiguousarray(a).ravel(), name, timing_only=timing_only)
    if timing_only:
        outs = [GlobalTensor.empty(H * n * D, k.dtype, nm, timing_only=True) for nm in ("k_out", "v_out")]
        idx = GlobalTensor.empty(H * n, np.int32, "indices", timing_only=True)
    else:
        outs = [GlobalTensor.from_array(sentinel_array(H * n * D, k.dtype), nm) for nm in ("k_out", "v_out")]
        idx = GlobalTensor.from_array(sentinel_array(H * n, np.int32), "indices")
    tl = launch(fn, H, gm(importance(k), "scores"), gm(k, "k"), gm(v, "v"), outs[0], outs[1], idx, t.pack(), hw=hw,
                timing_only=timing_only)
    if timing_only:
        return None, tl
    return {"indices": idx.data.copy(), "k_out": outs[0].data.copy(), "v_out": outs[1].data.copy()}, tl


def _reference(case) -> dict:
    k, v = _inputs(case)
    n = n_keep_of(case["S"], case["keep_ratio"], case["sinks"])
    order = select_tokens(importance(k), n, case["sinks"])
    g = order[:, :, None].astype(np.int64)
    return {"indices": order.reshape(-1), "k_out": np.take_along_axis(k, g, axis=1).reshape(-1),
            "v_out": np.take_along_axis(v, g, axis=1).reshape(-1)}


def _locate(case, name, i) -> str:
    n = n_keep_of(case["S"], case["keep_ratio"], case["sinks"])
    per = n if name == "indices" else n * case["D"]
    h, r = divmod(i, per)
    row = r if name == "indices" else r // case["D"]
    kind = "the sort (its index)" if name == "indices" else "the gather"
    return f"{name}: head {h} (block {h}), kept row {row} — {kind}"


_TIMED = dict(H=8, S=2048, D=128, dtype="float16", keep_ratio=0.3, sinks=4, ties=False, rows_per_tile=None,
              label="H=8, S=2048, D=128, fp16, keep_ratio 0.3")


def _target(hw):
    k = np.zeros((_TIMED["H"], _TIMED["S"], _TIMED["D"]), np.float16)
    run = compress_kv_npu(k, k, _TIMED["keep_ratio"], _TIMED["sinks"], hw=hw, timing_only=True)
    return run.timeline.total_us, "the library's sparse-KV kernel at this shape"


register_exercise(KernelExercise(
    id="12.topk", notebook="ex12", title="The token top-k and the whole-row gather",
    teaches="the sinks are forced first by +inf scores (ties keep the lower position, so they stay in order); "
            "Sort32 sorts 32 (score, index) pairs a repeat and MrgSort merges the lists; the gather is one "
            "whole-row DataCopy per kept token (the scalar unit only reads the position), never an element copy",
    solution=sparse_kv_exercise_solution, cell_name="my_sparse_kv", imports=_IMPORTS,
    place_after="## The kernel (after its listing)",
    cases=_cases, launch=_launch, reference=_reference, locate=_locate, target=_target, target_case=_TIMED,
    tolerance=(0.0, 0.0), slow_hint="compare with the library's timeline: is MTE2 copying more than one row per token?"))
