"""Exercise checks for notebook 11 (the KV cache and decode attention).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult` (a ``str``;
print it) saying whether the answer is right, why, and — when it is not — which slip the number
matches (one layer instead of all, query heads instead of KV heads, K without V, ...), computed
from the answer. Every truth comes from the library (the model configurations, the decode tiling),
never typed in; :func:`expected_answers` gives each check's truth.

Kernel exercise (``check_kernel(fn, "11.online_softmax")``): the online-softmax update of v2's
chunked decode attention — the running max, the correction factor exp(m_old - m_new), the running
sum, the rescaled accumulator, the division at the end; everything else (copies, queues, flags,
the Q·K scores, P·V) is given. The check compares with ``decode_attention_reference`` on one-chunk
cases, cases whose largest score is in the first chunk and cases where it moves to a later chunk,
and names the slip the wrong outputs match (no correction factor, l or acc not rescaled, no
division). The other kernel exercises of the notebook: 11.append (npu_lab/course/ex11_append.py)
and 11.combine (npu_lab/course/ex11_combine.py).
"""

from __future__ import annotations

import math

import numpy as np

from ..kernels.decode import decode_attention, decode_attention_reference, decode_tiling, flash_decode_splits, largest_chunk
from ..kernels.decode.attention import NEG_BIG, ROWS, task_range
from ..kernels.decode.tiling import MAX_REPEAT, DecodeTiling, reduce_tmp_bytes
from ..lang import (BinaryRepeatParams, BrcbRepeatParams, DataCopyParams, GlobalTensor, TBuf, TPosition, TQue, launch,
                    npu_kernel)
from ..llm import get_model_config, kv_cache_bytes
from ..presets import get_preset
from .checks import BYTES, CheckResult, missing as _missing, parse_whole as _whole, right as _right, wrong as _wrong
from .kernel_check import KernelExercise, register_exercise, sentinel_array

__all__ = ["check_kv_bytes_per_token", "check_v1_limit", "check_flash_decode_splits", "expected_answers",
           "KV_TOKEN_CASE", "V1_CASE", "SPLIT_CASE", "online_softmax_exercise_solution", "v2_buffers", "p_times_v", "scalar_work",
           "online_softmax_slips"]

CHIP = "ascend-910b2"
#: 11.1: KV-cache bytes one token adds, every layer, fp16 K and V.
KV_TOKEN_CASE = dict(model="Llama-3-70B", dtype="fp16")
#: 11.2: the most cached positions v1 (whole S2 in the UB, one buffer) holds: head_dim 128, float16
#: K/V, G = 8 query heads per KV head.
V1_CASE = dict(head_dim=128, itemsize=2, group=8)
#: 11.3: S2 pieces per (sequence, KV head) CANN's tiling picks: batch 1, 8 KV heads, 4096 positions,
#: chunks of 512.
#: batch 1 with 4 KV heads (the ladder above the question prints 6 pieces for B = 1, N2 = 8, so the
#: case must differ from it; tests/test_decode_course.py checks)
SPLIT_CASE = dict(batch=1, kv_heads=4, context=8192, chunk=512)


def expected_answers() -> dict[str, object]:
    """The truth of every check of notebook 11, by check name."""
    return {"check_kv_bytes_per_token": kv_bytes_per_token_truth(), "check_v1_limit": v1_limit_truth(),
            "check_flash_decode_splits": flash_decode_splits_truth()}


def kv_bytes_per_token_truth() -> int:
    return kv_cache_bytes(KV_TOKEN_CASE["model"], 1, 1, KV_TOKEN_CASE["dtype"])


def v1_limit_truth(chip: str = CHIP) -> int:
    c = V1_CASE
    return largest_chunk(get_preset(chip), c["head_dim"], c["itemsize"], c["group"], 1)


def flash_decode_splits_truth(chip: str = CHIP) -> int:
    c = SPLIT_CASE
    return flash_decode_splits(c["batch"], c["kv_heads"], c["context"], get_preset(chip).vector_cores, c["chunk"])


def check_kv_bytes_per_token(answer) -> CheckResult:
    """How many bytes of KV cache does one more token of one Llama-3-70B sequence need (all
    layers, fp16 K and V)? Answer: bytes."""
    if answer is None:
        return _missing("a number of bytes")
    value = _whole(answer, BYTES)
    if value is None:
        return _wrong(f"{answer!r} is not a whole number of bytes.")
    cfg = get_model_config(KV_TOKEN_CASE["model"])
    L, nkv, nq, d = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.num_attention_heads, cfg.head_dim
    truth = kv_bytes_per_token_truth()
    why = (f"2 (K and V) x {L} layers x {nkv} KV heads x head_dim {d} x 2 B = {truth:,} B "
           f"({truth / 1024:.0f} KiB): at 8K tokens {truth * 8192 / 1e9:.2f} GB per sequence")
    if value == truth:
        return _right(why + ".")
    slips = {truth // L: "that is one layer: every layer keeps its own K and V",
             truth // 2: "that counts K or V, not both",
             truth * nq // nkv: f"that uses the {nq} query heads: with GQA only the {nkv} KV heads are cached",
             truth // 2 // L: "that is one layer's K (or V) only",
             truth * 2: "that is 4 bytes an element: fp16 is 2"}
    for v, hint in slips.items():
        if value == v:
            return _wrong(f"{value:,} B: {hint}. " + "Count: " + why.split(" = ")[0] + ".")
    return _wrong(f"{value:,} B is {value / truth:.3g}x the answer. Count K and V, each layer, each KV head, "
                  "head_dim elements of 2 bytes.")


def check_v1_limit(answer, chip: str = CHIP) -> CheckResult:
    """v1 keeps a sequence's whole S2 in the UB (one buffer). At head_dim 128, float16 K/V and
    G = 8, how many cached positions fit at most (the tiling rounds down to a multiple of 8)?"""
    if answer is None:
        return _missing("a number of positions")
    value = _whole(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a whole number of positions.")
    from ..kernels.decode.tiling import ub_bytes_per_position, ub_fixed_bytes
    hw = get_preset(chip)
    c = V1_CASE
    truth = v1_limit_truth(chip)
    per = ub_bytes_per_position(c["head_dim"], c["itemsize"], c["group"], 1)
    fixed = ub_fixed_bytes(c["head_dim"], c["group"])
    why = (f"({hw.ub_usable_bytes:,} B usable - {fixed:,} B fixed) / {per} B a position = "
           f"{(hw.ub_usable_bytes - fixed) / per:.1f}, down to a multiple of 8: {truth}")
    if value == truth:
        return _right(why + f". A 4K context needs {math.ceil(4096 / truth)} chunks: v2's online softmax.")
    raw = hw.ub_usable_bytes // (2 * c["head_dim"] * c["itemsize"])
    if value == raw or value == raw // 8 * 8:
        return _wrong(f"{value} counts only the K and V rows; each position also needs float32 copies of K and V, "
                      "a product row, its score and a Brcb block — and the UB has fixed buffers too.")
    return _wrong(f"{value} positions: off by {value - truth:+}. Divide the free UB by the bytes one position "
                  "costs (K and V rows, their float32 copies, the product row, score, Brcb block).")


def check_flash_decode_splits(answer, chip: str = CHIP) -> CheckResult:
    """Batch 1 with 4 KV heads on the 910B2: into how many pieces does CANN's tiling split each
    (sequence, KV head)'s S2 (8192 positions, chunks of 512)?"""
    if answer is None:
        return _missing("a number of pieces")
    value = _whole(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a whole number of pieces.")
    c = SPLIT_CASE
    cores = get_preset(chip).vector_cores
    bn = c["batch"] * c["kv_heads"]
    truth = flash_decode_splits_truth(chip)
    why = (f"B·N2 = {bn} < 0.4 x {cores} cores, so S2 is split; {cores} // {bn} = {cores // bn} pieces fill the "
           f"cores, and no piece is shorter than a chunk ({math.ceil(c['context'] / c['chunk'])} chunks): {truth}")
    if value == truth:
        return _right(why + ".")
    if value == 1:
        return _wrong(f"1 means no split; but B·N2 = {bn} is below 0.4 x {cores} = {0.4 * cores:.1f}: most cores "
                      "would idle.")
    if value == cores:
        return _wrong(f"{cores} pieces per (b, n2) would be {cores * bn} tasks on {cores} cores; the pieces fill "
                      "the cores once, not once per head.")
    return _wrong(f"{value} pieces: the tiling takes cores // (B·N2), capped by the number of chunks.")


# ---- kernel exercise ----------------------------------------------------------------------------
# The exercise kernel runs in full runs only (check_kernel times it with one): its scalar arithmetic is
# plain Python on the values GetValue read, which a timing-only run does not have.
def v2_buffers(pipe, t: DecodeTiling):
    """v2's UB for one block (npu_lab/kernels/decode/attention.py, float16 K/V): the q and out
    queues (one slot), the K and V queues (``t.num_buffers`` slots of ``t.chunk`` rows), and the
    float32 work buffers acc [G, D], prod [chunk, D], scores / part [chunk], pb [chunk, 8] (Brcb),
    red (the reductions' results), tmp (their shared scratch), kf / vf (K and V cast to float32).
    Returns (q_que, out_que, k_que, v_que, {name: float32 LocalTensor})."""
    G, D, c = t.group, t.head_dim, t.chunk
    q_que, out_que = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
    k_que, v_que = TQue(TPosition.VECIN, 1), TQue(TPosition.VECIN, 1)
    pipe.init_buffer(q_que, 1, G * D * 4, name="q")
    pipe.init_buffer(out_que, 1, G * D * 4, name="out")
    pipe.init_buffer(k_que, t.num_buffers, c * D * t.kv_itemsize, name="k")
    pipe.init_buffer(v_que, t.num_buffers, c * D * t.kv_itemsize, name="v")
    buf = {}
    for name, nbytes in (("acc", G * D * 4), ("prod", c * D * 4), ("scores", c * 4), ("part", c * 4),
                         ("pb", c * 32), ("red", 256), ("tmp", reduce_tmp_bytes(c)), ("kf", c * D * 4),
                         ("vf", c * D * 4)):
        tb = TBuf(TPosition.VECCALC)
        pipe.init_buffer(tb, nbytes, name=name)
        buf[name] = tb.get(np.float32)
    return q_que, out_que, k_que, v_que, buf


def scalar_work(ctx, name: str, *, ops: int = 0, exps: int = 0) -> None:
    """Charge the scalar unit for arithmetic a kernel does on plain numbers (C++ writes it as plain
    code, ``float corr = expf(mOld - mNew);``): ``ops`` register operations and ``exps`` software
    exponentials, as ``ctx.scalar`` prices them. The exercise cell's arithmetic runs as Python; this
    charges what the library's v2 does at that point (simplified: not what the cell actually wrote)."""
    ctx.scalar(name, ops=ops, exps=exps)


def p_times_v(ctx, buf: dict, vf, s: int, D: int) -> None:
    """prod[0:D] = sum over the chunk's s rows of p[r] * V[r] (p in ``buf["scores"]``, V float32
    in ``vf``): Brcb spreads each p over a 32-byte block, a level-0 Mul scales each V row by it
    (src1 block stride 0), a tree of Adds sums the rows. Pipe V; as v2 does it."""
    scores, pb, prod = buf["scores"], buf["pb"], buf["prod"]
    s8 = -(-s // 8) * 8
    for r0 in range(0, s8, 8 * MAX_REPEAT):
        ctx.brcb(pb[r0 * 8], scores[r0], min(MAX_REPEAT, (s8 - r0) // 8), BrcbRepeatParams(1, 8))
    for r0 in range(0, s, ROWS):
        n = min(ROWS, s - r0)
        for sl in range(D // 64):
            ctx.mul(prod[r0 * D + sl * 64], vf[r0 * D + sl * 64], pb[r0 * 8], 64, n,
                    BinaryRepeatParams(1, 1, 0, D // 8, D // 8, 1))
    rows = s
    while rows > 1:
        h = rows // 2
        ctx.add(prod, prod, prod[(rows - h) * D], h * D)
        rows -= h


@npu_kernel
def online_softmax_exercise_solution(ctx, q_gm, k_gm, v_gm, out_gm, tiling_bytes: bytes):
    """Decode attention v2, float16 K/V: a task is one (sequence b, KV head n2), its G query heads against S2
    in chunks of t.chunk positions (K/V double-buffered). MTE2 -> V (scores, exp, P·V) <-> S (max, sum) -> MTE3."""
    t, lens = DecodeTiling.unpack_with(tiling_bytes)
    G, D, c, N2, pipe = t.group, t.head_dim, t.chunk, t.kv_heads, ctx.pipe
    q_que, out_que, k_que, v_que, buf = v2_buffers(pipe, t)
    acc, prod, scores, part, red, tmp, kf, vf = (buf[x] for x in "acc prod scores part red tmp kf vf".split())
    first = ctx.get_block_idx() * t.tasks_per_block
    for task in range(first, min(t.tasks, first + t.tasks_per_block)):
        b, n2, lo, n_pos = task_range(t, lens, task)
        qt = q_que.alloc_tensor(np.float32)
        ctx.data_copy(qt, q_gm[task * G * D], G * D)
        q_que.enque(qt)
        qt = q_que.deque(np.float32)
        m, l = [NEG_BIG] * G, [0.0] * G           # each query head's running max and running sum
        starts = range(lo, lo + n_pos, c)
        for ci in ctx.tile_loop(len(starts), key=lambda i: (min(c, lo + n_pos - starts[i]), i == 0)):
            p0, s = starts[ci], min(c, lo + n_pos - starts[ci])
            row = ((b * t.max_len + p0) * N2 + n2) * D          # element offset of (b, p0, n2, 0)
            params = DataCopyParams(s, D * 2 // 32, (N2 - 1) * D * 2 // 32, 0)
            kt, vt = k_que.alloc_tensor(np.float16), v_que.alloc_tensor(np.float16)
            ctx.data_copy(kt, k_gm[row], params)
            ctx.data_copy(vt, v_gm[row], params)
            k_que.enque(kt)
            v_que.enque(vt)
            kt, vt = k_que.deque(np.float16), v_que.deque(np.float16)
            ctx.cast(kf, kt, "CAST_NONE", s * D)
            ctx.cast(vf, vt, "CAST_NONE", s * D)
            s8 = -(-s // 8) * 8
            for g in range(G):
                if s8 > s:      # Brcb reads whole groups of 8: the tail block's unused scores are 0
                    ctx.duplicate(scores[s8 - 8], 0.0, 8)
                for r0 in range(0, s, ROWS):          # scores[r] = K[r]·q_g, 64 columns a slab
                    n = min(ROWS, s - r0)
                    for sl in range(D // 64):
                        ctx.mul(prod[r0 * D + sl * 64], kf[r0 * D + sl * 64], qt[g * D + sl * 64], 64, n,
                                BinaryRepeatParams(1, 1, 1, D // 8, D // 8, 0))
                        ctx.whole_reduce_sum(scores[r0] if sl == 0 else part[r0], prod[r0 * D + sl * 64], 64,
                                             n, 1, 1, D // 8)
                        if sl:
                            ctx.add(scores[r0], scores[r0], part[r0], n)
                ctx.muls(scores, scores, 1.0 / math.sqrt(D), s)
                ctx.reduce_max(red, scores, tmp, s)
                ev = pipe.fetch_event_id("V_S")
                ctx.set_flag("V_S", ev)
                ctx.wait_flag("V_S", ev)
                m_chunk = red.get_value(0)              # this chunk's largest score
                scalar_work(ctx, "online softmax: m_new, corr = exp(m_old - m_new)", ops=2, exps=1)
                # YOUR CODE (11.online_softmax): the running max m_new = max(m[g], m_chunk), the correction
                # factor corr = exp(m_old - m_new) (plain Python: math.exp; the line above charges the scalar
                # unit for it); keep m_new in m[g]; then p = exp(scores - m_new) in place (ctx.adds, ctx.exp).
                ### BEGIN SOLUTION [11.online_softmax]
                m_new = max(m[g], m_chunk)
                corr = math.exp(m[g] - m_new)          # 0 on the first chunk (m[g] = NEG_BIG)
                m[g] = m_new
                ctx.adds(scores, scores, -m_new, s)
                ctx.exp(scores, scores, s)
                ### END SOLUTION [11.online_softmax]
                ctx.reduce_sum(red[8], scores, tmp, s)
                ev = pipe.fetch_event_id("V_S")
                ctx.set_flag("V_S", ev)
                ctx.wait_flag("V_S", ev)
                p_sum = red.get_value(8)                # this chunk's sum of p
                ev = pipe.fetch_event_id("S_V")         # V may overwrite red now
                ctx.set_flag("S_V", ev)
                ctx.wait_flag("S_V", ev)
                scalar_work(ctx, "online softmax: l = l * corr + sum", ops=2)
                # YOUR CODE (11.online_softmax): the running sum l[g] = l[g] * corr + p_sum.
                ### BEGIN SOLUTION [11.online_softmax]
                l[g] = l[g] * corr + p_sum
                ### END SOLUTION [11.online_softmax]
                p_times_v(ctx, buf, vf, s, D)           # prod[0:D] = sum of p[r] * V[r] over the chunk
                # YOUR CODE (11.online_softmax): fold prod[0:D] into acc row g (acc[g * D], D floats): on the
                # first chunk (ci == 0) acc = P·V (ctx.adds with 0.0), after it acc = acc * corr + P·V.
                ### BEGIN SOLUTION [11.online_softmax]
                if ci == 0:
                    ctx.adds(acc[g * D], prod, 0.0, D)
                else:
                    ctx.muls(acc[g * D], acc[g * D], corr, D)
                    ctx.add(acc[g * D], acc[g * D], prod, D)
                ### END SOLUTION [11.online_softmax]
            k_que.free_tensor(kt)
            v_que.free_tensor(vt)
        q_que.free_tensor(qt)
        ot = out_que.alloc_tensor(np.float32)
        for g in range(G):
            scalar_work(ctx, "1 / l", ops=1)
            # YOUR CODE (11.online_softmax): the division at the end: row g of ot = acc row g / l[g] (ctx.muls).
            ### BEGIN SOLUTION [11.online_softmax]
            ctx.muls(ot[g * D], acc[g * D], 1.0 / l[g], D)
            ### END SOLUTION [11.online_softmax]
        out_que.enque(ot)
        ot = out_que.deque(np.float32)
        ctx.data_copy(out_gm[task * G * D], ot, G * D)
        out_que.free_tensor(ot)


_IMPORTS = ("import math\nimport numpy as np\nfrom npu_lab import npu_kernel\n"
            "from npu_lab.lang import BinaryRepeatParams, DataCopyParams\n"
            "from npu_lab.kernels.decode.attention import NEG_BIG, ROWS, task_range\n"
            "from npu_lab.kernels.decode.tiling import DecodeTiling\n"
            "from npu_lab.course.ex11 import p_times_v, scalar_work, v2_buffers")


def _case(B, N2, G, D, lens, chunk, scores, label):
    return dict(B=B, N2=N2, G=G, D=D, lens=tuple(int(x) for x in lens), chunk=chunk, scores=scores,
                label=f"B={B}, kv_heads={N2}, G={G}, D={D}, lengths {list(lens)}, chunks of {chunk}: {label}")


def _cases(rng) -> list[dict]:
    """One chunk (no update yet), several chunks with the largest score in the first (corr = 1
    after it), several where the max moves to a later chunk (corr < 1), a tail chunk and GQA at
    D = 128, then two random shapes; float16 K/V."""
    out = [_case(2, 1, 2, 64, (20, 7), 32, "falling", "one chunk per sequence"),
           _case(1, 2, 2, 64, (96,), 32, "falling", "several chunks, the largest score in the first"),
           _case(1, 2, 2, 64, (96,), 32, "rising", "several chunks, the max moves to a later chunk"),
           _case(2, 2, 4, 128, (200, 33), 64, "random", "a tail chunk, GQA")]
    for _ in range(2):
        B = int(rng.integers(1, 3))
        out.append(_case(B, int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.choice([64, 128])),
                         rng.integers(1, 260, B), int(rng.integers(1, 9)) * 8, "random", "random"))
    return out


def _inputs(case):
    """q [B, N2·G, D] float32, K and V [B, max(lens), N2, D] float16. "rising" / "falling": every
    query head leans on one direction u and K[p] = noise + ramp(p)·u, so the scores climb (the max
    moves later at every chunk) or fall (the first chunk holds it) by about 6 over the sequence."""
    B, N2, G, D, lens = case["B"], case["N2"], case["G"], case["D"], case["lens"]
    L = max(lens)
    rng = np.random.default_rng([B, N2, G, D, L, case["chunk"], ("random", "rising", "falling").index(case["scores"])])
    if case["scores"] == "random":
        q = rng.standard_normal((B, N2 * G, D))
        k = rng.standard_normal((B, L, N2, D))
    else:
        u = rng.standard_normal(D)
        u /= np.linalg.norm(u)
        q = 4 * u + 0.1 * rng.standard_normal((B, N2 * G, D))
        ramp = np.linspace(0.0, 1.0, L) if case["scores"] == "rising" else np.linspace(1.0, 0.0, L)
        k = 0.2 * rng.standard_normal((B, L, N2, D)) + 1.5 * math.sqrt(D) * ramp[None, :, None, None] * u
    v = rng.standard_normal((B, L, N2, D))
    return q.astype(np.float32), k.astype(np.float16), v.astype(np.float16), np.array(lens)


def _tiling(case, hw):
    q, k, _, lens = _inputs(case)
    return decode_tiling(case["B"], case["N2"], case["G"], case["D"], k.shape[1], lens, 2, hw, version="v2",
                         chunk=case["chunk"])


def _launch(fn, case, hw, timing_only):
    """Host code: v2's tiling (the case's chunk), q / K / V in GM, the output NaN until written."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    q, k, v, lens = _inputs(case)
    t = _tiling(case, hw)
    gm = lambda a, name: GlobalTensor.from_array(np.ascontiguousarray(a).ravel(), name, timing_only=timing_only)  # noqa: E731
    out = GlobalTensor.from_array(sentinel_array(q.size, np.float32), "out", timing_only=timing_only)
    tl = launch(fn, t.block_dim, gm(q, "q"), gm(k, "k_cache"), gm(v, "v_cache"), out, t.pack_with(lens), hw=hw,
                timing_only=timing_only)
    return (None if timing_only else {"out": out.data.copy()}), tl


def _reference(case) -> dict:
    q, k, v, lens = _inputs(case)
    return {"out": decode_attention_reference(q, k, v, lens).astype(np.float32).reshape(-1)}


def _locate(case, name, i) -> str:
    t = _tiling(case, get_preset(CHIP))
    G, D = case["G"], case["D"]
    head, d = divmod(i, D)
    b, h = divmod(head, case["N2"] * G)
    task = b * case["N2"] + h // G
    chunks = math.ceil(case["lens"][b] / case["chunk"])
    return f"sequence {b}, query head {h} (KV head {h // G}), dim {d}: task {task}, block " \
           f"{task // t.tasks_per_block}, {chunks} chunk{'s' * (chunks > 1)}"


#: The slips :func:`_diagnose` recognises: name -> (factor acc is rescaled by, factor l is rescaled
#: by — "corr", "inverse" (exp(m_new - m_old)) or "none" —, p's shift — "running" max or the
#: "chunk"'s own —, divided at the end, what the learner is told).
_SLIPS = {
    "no correction": ("none", "none", "running", True,
                      "your numbers match the online softmax WITHOUT the correction factor: right while the first "
                      "chunk holds the largest score, wrong once a later chunk's max is larger (this case). When the "
                      "max grows, l and acc were summed against the old max: multiply both by corr = exp(m_old - m_new)."),
    "l not corrected": ("corr", "none", "running", True,
                        "acc is rescaled but the running sum is not: l[g] = l[g] * corr + p_sum (right only while "
                        "the max stays in the first chunk)."),
    "acc not corrected": ("none", "corr", "running", True,
                          "l is rescaled but acc is not: acc = acc * corr + P·V on every chunk after the first "
                          "(right only while the max stays in the first chunk)."),
    "inverted correction": ("inverse", "inverse", "running", True,
                            "the correction factor is upside down: corr = exp(m_old - m_new) is at most 1 (the old "
                            "sums shrink when a larger max arrives), not exp(m_new - m_old)."),
    "chunk max": ("corr", "corr", "chunk", True,
                  "p = exp(scores - m_chunk) puts each chunk on its own scale; subtract the running max m_new, the "
                  "one corr rescales the old sums to."),
    "no division": ("corr", "corr", "running", False,
                    "your numbers are acc before the division: divide each head's row by its running sum l at the "
                    "end (out = acc * (1 / l))."),
}


def online_softmax_slips(case) -> dict[str, np.ndarray]:
    """What the kernel would write for each slip of :data:`_SLIPS` on ``case`` (float64 numpy,
    chunk by chunk as the kernel goes): name -> flat output [B · q_heads · D]."""
    q, k, v, lens = _inputs(case)
    G, D, c = case["G"], case["D"], case["chunk"]
    out = {name: np.empty(q.shape) for name in _SLIPS}
    for b in range(case["B"]):
        for h in range(q.shape[1]):
            kk = k[b, :lens[b], h // G].astype(np.float64)
            vv = v[b, :lens[b], h // G].astype(np.float64)
            s_all = kk @ q[b, h].astype(np.float64) / math.sqrt(D)
            for name, (f_acc, f_l, shift, divide, _) in _SLIPS.items():
                m, l, acc = -np.inf, 0.0, np.zeros(D)
                for p0 in range(0, lens[b], c):
                    s = s_all[p0:p0 + c]
                    m_new = max(m, s.max())
                    factor = {"corr": math.exp(m - m_new), "inverse": math.exp(m_new - m) if p0 else 0.0,
                              "none": 1.0}
                    p = np.exp(s - (m_new if shift == "running" else s.max()))
                    l, acc, m = l * factor[f_l] + p.sum(), acc * factor[f_acc] + p @ vv[p0:p0 + c], m_new
                out[name][b, h] = acc / l if divide else acc
    return {name: a.reshape(-1) for name, a in out.items()}


def _diagnose(case, got, want) -> str:
    """Which slip the wrong output matches (computed from it), else what this case tests."""
    g = np.asarray(got["out"], np.float64)
    w = np.asarray(want["out"], np.float64)
    rtol, atol = _TOLERANCE
    for name, model in online_softmax_slips(case).items():
        if not np.allclose(model, w, rtol=rtol, atol=atol) and np.allclose(g, model, rtol=rtol, atol=atol):
            return f"Diagnosis ({name}): {_SLIPS[name][-1]}"
    if case["scores"] == "rising":
        return ("This case's largest score moves to a later chunk at every chunk: check the correction factor "
                "exp(m_old - m_new) and that it rescales both l and acc.")
    if case["scores"] == "falling" and max(case["lens"]) > case["chunk"]:
        return ("Several chunks, the max in the first (corr = 1 after it): check the running sum l = l * corr + "
                "sum(p) and acc = acc * corr + P·V across chunks.")
    return "Check p = exp(scores - m_new), the running sum, and the division by l at the end."


#: float16 K/V against the float64 reference (npu_lab.kernels.decode.TOLERANCE)
_TOLERANCE = (2e-3, 2e-3)
_TIMED = dict(B=2, N2=2, G=4, D=128, lens=(1024, 1024), chunk=64, scores="random",
              label="B=2, kv_heads=2, G=4, D=128, 1024 positions, chunks of 64, float16")


def _target(hw):
    q, k, v, lens = _inputs(_TIMED)
    run = decode_attention(q, k, v, lens, version="v2", hw=hw, chunk=_TIMED["chunk"], timing_only=True)
    return run.timeline.total_us, "the library's v2 at this shape"


register_exercise(KernelExercise(
    id="11.online_softmax", notebook="ex11", title="The online-softmax update of chunked decode attention",
    teaches="a chunk at a time, the running max m grows to max(m, the chunk's max); what was summed against the "
            "old max (the running sum l and the accumulator acc) is rescaled by corr = exp(m_old - m_new) before "
            "this chunk's exp(scores - m_new) and P·V are added; the division by l happens once, at the end. "
            "Without the correction the result is right only while the first chunk holds the largest score",
    solution=online_softmax_exercise_solution, cell_name="my_decode_v2", imports=_IMPORTS,
    place_after="## Decode attention against the reference (after v2's timeline)",
    cases=_cases, launch=_launch, reference=_reference, locate=_locate, target=_target, target_case=_TIMED,
    tolerance=_TOLERANCE, timed_full=True, diagnose=_diagnose,
    slow_hint="compare with the library's v2 timeline: is the scalar unit doing more than the max, corr, l and 1/l?"))
