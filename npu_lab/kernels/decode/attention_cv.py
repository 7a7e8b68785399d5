"""Decode attention v3 on cube + vector (issue 17 §2, item 5): Q·Kᵀ and P·V on the cube, softmax on
the vector cores, in one ``__mix__(1, 2)`` kernel.

Shapes (as :func:`~npu_lab.kernels.decode.reference.decode_attention_reference`): q [B, Hq, D] fp16, the
caches [B, Lmax, Hkv, D] fp16 (BSND), ``seq_lens[b]`` valid positions of sequence b, G = Hq / Hkv query
heads per KV head (1 <= G <= 16: one 16-row fractal of A). Output float32 [B, Hq, D].

A task is (sequence b, KV head n); block (AI core group) i runs tasks i, i + blockDim, ... Per task, S2
in chunks of ``CHUNK`` positions with the online-softmax update, as IncreFlashAttention's C+V template
does (ops-transformer attention/incre_flash_attention/docs/IFA算子设计介绍.md: per S2 chunk the cube
computes Q·Kᵀ, the vector updates the running max, correction and sum, the cube P·V, the vector rescales
the accumulator; the division at the end). Chunk c uses workspace slot c % 2 of its group:

* AIC, chunk c: the G query rows (Nd2Nz into L1, LoadData into L0A once per task) times K's rows of the
  chunk (stride Hkv·D in GM; Nd2Nz as Bᵀ — their NZ fractals are L0B's ZN without a transpose): Mmad,
  Fixpipe (NoQuant, fp32) into the S slot; ``CrossCoreSetFlag<2, PIPE_FIX>(0)``. Then P·V of chunk
  c - 1: ``CrossCoreWaitFlag(1)``, P (fp16) and V's rows into L1, Mmad, Fixpipe into the O slot,
  ``CrossCoreSetFlag<2, PIPE_FIX>(2)``. So the AIC's S of chunk c + 1 overlaps the AIVs' softmax of c.
* AIVs (each half of the G rows), chunk c: ``CrossCoreWaitFlag(0)``; per row: Muls by 1/sqrt(D),
  ReduceMax, m_new = max(m, max_c), corr = exp(m - m_new) (scalar), Adds -m_new, Exp, ReduceSum,
  l = l·corr + sum, Cast to fp16; DataCopyPad P into the P slot; ``CrossCoreSetFlag<2, PIPE_MTE3>(1)``
  (an AIV with no rows sets it too: mode 2 from the AIVs releases the AIC only when both set). Then
  ``CrossCoreWaitFlag(2)`` and acc = acc·corr(c - 1) + O(c - 1) (acc = O for the first chunk). After
  the last chunk: acc / l, DataCopy out.

Slot reuse is ordered by the flags: S slot c % 2 is rewritten (chunk c + 2) after the AIC took P of
chunk c (the AIVs read S before they write P); P's slot after the AIVs took S of c + 2; O's after the
AIC took P of c + 2 (the AIVs read O of c before they write P of c + 2). The race detector checks it
(tests drop each flag pair). The workspace is two slots per group whatever the context length.

Simplifications: P is rounded to fp16 for the cube (the sum l is taken over the fp32 P); the sequence
lengths are a kernel argument (a real kernel reads them from GM); the AIVs' copy of a chunk's S rows
is one contiguous DataCopyPad from the first row to the last valid score (the rows' unused tails ride
along); one task at a time per group (a task's first chunk waits for nothing of the previous task
but its flags). Run it as ``decode_attention(..., version="v3")`` (:mod:`npu_lab.kernels.decode.run`);
its C++ listing is ``attention_cv.cpp``.
"""

from __future__ import annotations

import math

import numpy as np

from ...hardware import HardwareSpec
from ...lang import (DataCopyExtParams, DataCopyPadExtParams, FixpipeParamsV220, GlobalTensor, MmadParams,
                     Nd2NzParams, QuantMode_t, TBuf, TPosition, TQue, launch, npu_kernel)
from ...lang.reduce import reduce_max_tmp_elements
from ...presets import get_preset
from ..gemm.kernels import ceil_div, load_a_l0a, load_b_l0b, round16

__all__ = ["decode_attention_cv", "decode_attention_cv_kernel", "CHUNK"]

#: cache positions per cube step (L0B holds CHUNK x D halves: 128 x 256 x 2 B = 64 KB at most)
CHUNK = 128
#: the running maximum before the first chunk: finite, so exp(NEG_BIG - m) = 0 without inf - inf = NaN
NEG_BIG = -3.0e38


def decode_cv_block_classes(block_dim, q_gm, k_gm, v_gm, s_ws, p_ws, o_ws, out_gm, lens, dims):
    """AI core groups whose tasks have the same lengths, in order, do identical work (costs depend on
    the lengths and the fixed dims only; the addresses differ)."""
    B, Hkv = dims[0], dims[1]
    seen: dict = {}
    return np.array([seen.setdefault(tuple(lens[t // Hkv] for t in range(g, B * Hkv, block_dim)), len(seen))
                     for g in range(block_dim)])


@npu_kernel(mix=(1, 2), block_classes=decode_cv_block_classes)
def decode_attention_cv_kernel(ctx, q_gm: GlobalTensor, k_gm: GlobalTensor, v_gm: GlobalTensor, s_ws: GlobalTensor,
                               p_ws: GlobalTensor, o_ws: GlobalTensor, out_gm: GlobalTensor, lens: tuple, dims: tuple):
    """See the module docstring. ``dims`` = (B, Hkv, G, D, Lmax). Workspaces, per group and slot
    (2 slots, chunk ``c`` in slot ``c % 2``): ``s_ws`` fp32 [G, CHUNK], ``p_ws`` fp16 [G, CHUNK],
    ``o_ws`` fp32 [G, D]."""
    B, Hkv, G, D, Lmax = dims
    Hq = Hkv * G
    tasks = B * Hkv
    groups = ctx.get_block_num()
    me = ctx.get_block_idx() if ctx.is_aic() else ctx.get_block_idx() // 2
    n_tasks = len(range(me, tasks, groups))

    def task_key(i):
        return lens[(me + i * groups) // Hkv]

    def slot(c: int) -> int:                   # first row of chunk c's slot in this group's workspaces
        return (2 * me + c % 2) * G

    if ctx.is_aic():
        dt = np.dtype(np.float16)
        qq1, qk1, qp1 = TQue(TPosition.A1, 1), TQue(TPosition.B1, 1), TQue(TPosition.A1, 1)
        qq2, qp2, qb2 = TQue(TPosition.A2, 1), TQue(TPosition.A2, 1), TQue(TPosition.B2, 1)
        qcs, qco = TQue(TPosition.CO1, 1), TQue(TPosition.CO1, 1)
        for q, nbytes, name in ((qq1, 16 * D * 2, "q1"), (qk1, round16(CHUNK) * D * 2, "kv1"),
                                (qp1, 16 * CHUNK * 2, "p1"), (qq2, 16 * D * 2, "q2"), (qp2, 16 * CHUNK * 2, "p2"),
                                (qb2, CHUNK * D * 2, "kv2"), (qcs, 16 * CHUNK * 4, "s_c"), (qco, 16 * D * 4, "o_c")):
            ctx.pipe.init_buffer(q, 1, nbytes, name=name)

        def p_times_v(b, n, L, c):
            """O_c = P_c · V_c (G x D, fp32) into the O slot, once the AIVs wrote P_c."""
            c0 = c * CHUNK
            vl = min(CHUNK, L - c0)
            ctx.cross_core_wait_flag(1)                      # both AIVs wrote P_c
            a1 = qp1.alloc_tensor(dt)
            ctx.data_copy(a1, p_ws[slot(c) * CHUNK], Nd2NzParams(1, G, vl, 0, CHUNK, 16, 1, 0))
            b1 = qk1.alloc_tensor(dt)
            ctx.data_copy(b1, v_gm[((b * Lmax + c0) * Hkv + n) * D], Nd2NzParams(1, vl, D, 0, Hkv * D, round16(vl), 1, 0))
            qp1.enque(a1)
            qk1.enque(b1)
            a1, b1 = qp1.deque(dt), qk1.deque(dt)
            a2, b2 = qp2.alloc_tensor(dt), qb2.alloc_tensor(dt)
            load_a_l0a(ctx, a2, a1, 1, 0, vl, 16, 256)
            load_b_l0b(ctx, b2, b1, True, 0, vl, vl, D // 16, 16, 256)
            qp1.free_tensor(a1)
            qk1.free_tensor(b1)
            qp2.enque(a2)
            qb2.enque(b2)
            a2, b2 = qp2.deque(dt), qb2.deque(dt)
            co = qco.alloc_tensor(np.float32)
            ctx.mmad(co, a2, b2, MmadParams(16, D, vl, 0, False, True))
            qp2.free_tensor(a2)
            qb2.free_tensor(b2)
            qco.enque(co)
            co = qco.deque(np.float32)
            ctx.fixpipe(o_ws[slot(c) * D], co, FixpipeParamsV220(D, G, 16, D, False, QuantMode_t.NoQuant, 1.0, 1, 0, 0, 0))
            qco.free_tensor(co)
            ctx.cross_core_set_flag(2, "PIPE_FIX", 2)        # O_c is in GM

        for i in ctx.tile_loop(n_tasks, key=task_key):
            task = me + i * groups
            b, n = divmod(task, Hkv)
            L = int(lens[b])
            nc = ceil_div(L, CHUNK)
            a1 = qq1.alloc_tensor(dt)
            ctx.data_copy(a1, q_gm[(b * Hq + n * G) * D], Nd2NzParams(1, G, D, 0, D, 16, 1, 0))
            qq1.enque(a1)
            a1 = qq1.deque(dt)
            qa = qq2.alloc_tensor(dt)                        # q_g stays in L0A for the whole task
            load_a_l0a(ctx, qa, a1, 1, 0, D, 16, 256)
            qq1.free_tensor(a1)
            qq2.enque(qa)
            qa = qq2.deque(dt)
            for c in ctx.tile_loop(nc, key=lambda c: (min(CHUNK, L - c * CHUNK), c > 0)):
                # S_c = q_g · K_cᵀ into the S slot; then P·V of the previous chunk (its P is ready by now)
                c0 = c * CHUNK
                vl = min(CHUNK, L - c0)
                b1 = qk1.alloc_tensor(dt)
                ctx.data_copy(b1, k_gm[((b * Lmax + c0) * Hkv + n) * D],
                              Nd2NzParams(1, vl, D, 0, Hkv * D, round16(vl), 1, 0))
                qk1.enque(b1)
                b1 = qk1.deque(dt)
                b2 = qb2.alloc_tensor(dt)
                load_b_l0b(ctx, b2, b1, False, 0, D, D, ceil_div(vl, 16), 16, 256)
                qk1.free_tensor(b1)
                qb2.enque(b2)
                b2 = qb2.deque(dt)
                cs = qcs.alloc_tensor(np.float32)
                ctx.mmad(cs, qa, b2, MmadParams(16, vl, D, 0, False, True))
                qb2.free_tensor(b2)
                qcs.enque(cs)
                cs = qcs.deque(np.float32)
                ctx.fixpipe(s_ws[slot(c) * CHUNK], cs,
                            FixpipeParamsV220(vl, G, 16, CHUNK, False, QuantMode_t.NoQuant, 1.0, 1, 0, 0, 0))
                qcs.free_tensor(cs)
                ctx.cross_core_set_flag(2, "PIPE_FIX", 0)    # S_c is in GM: both AIVs may start
                if c:
                    p_times_v(b, n, L, c - 1)
            p_times_v(b, n, L, nc - 1)
            qq2.free_tensor(qa)
    else:
        sub = ctx.get_sub_block_idx()
        half = -(-G // 2)
        r0 = sub * half
        R = max(0, min(G, r0 + half) - r0)              # this AIV's query rows (0 for the second AIV when G = 1)
        if R:
            s_in, p_out = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
            o_in, o_out = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
            ctx.pipe.init_buffer(s_in, 1, R * CHUNK * 4, name="s_rows")
            ctx.pipe.init_buffer(p_out, 1, R * CHUNK * 2, name="p_rows")
            ctx.pipe.init_buffer(o_in, 1, R * D * 4, name="o_rows")
            ctx.pipe.init_buffer(o_out, 1, R * D * 4, name="out_rows")
            acc_buf, red_buf, tmp_buf = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
            ctx.pipe.init_buffer(acc_buf, R * D * 4, name="acc")
            ctx.pipe.init_buffer(red_buf, 64, name="red")
            ctx.pipe.init_buffer(tmp_buf, max(32, reduce_max_tmp_elements(CHUNK, 4, False) * 4), name="tmp")
            acc, red, tmp = acc_buf.get(np.float32), red_buf.get(np.float32), tmp_buf.get(np.float32)
        scale = 1.0 / math.sqrt(D)

        def softmax_chunk(c, L, m, l):
            """P_c = exp(S_c / sqrt(D) - m_new) per row into the P slot; m, l updated in place;
            returns each row's correction exp(m_old - m_new) (0 for the first chunk)."""
            vl = min(CHUNK, L - c * CHUNK)
            span = (R - 1) * CHUNK + vl                  # first row's start to the last row's last score
            x = s_in.alloc_tensor(np.float32)
            ctx.data_copy_pad(x, s_ws[(slot(c) + r0) * CHUNK], DataCopyExtParams(1, span * 4, 0, 0, 0),
                              DataCopyPadExtParams(False, 0, 0, 0))
            s_in.enque(x)
            x = s_in.deque(np.float32)
            y = p_out.alloc_tensor(np.float16)
            corr = []
            for r in range(R):
                xr = x[r * CHUNK]
                ctx.muls(xr, xr, scale, vl)
                ctx.reduce_max(red, xr, tmp, vl)
                ctx.set_flag("V_S", 0)
                ctx.wait_flag("V_S", 0)
                m_chunk = red.get_value(0)
                m_old = m[r]
                m_new = max(m_old, m_chunk)
                corr.append(ctx.scalar("online softmax: m_new, corr = exp(m_old - m_new)", ops=2, exps=1,
                                       compute=lambda: math.exp(m_old - m_new) if c else 0.0) or 0.0)
                m[r] = m_new
                ctx.adds(xr, xr, -float(m_new), vl)
                ctx.exp(xr, xr, vl)
                ctx.reduce_sum(red[8], xr, tmp, vl)
                ctx.set_flag("V_S", 0)
                ctx.wait_flag("V_S", 0)
                p_sum = red.get_value(8)
                ctx.set_flag("S_V", 0)                   # V may overwrite red (the next row's ReduceMax)
                ctx.wait_flag("S_V", 0)
                l_old, k = l[r], corr[-1]
                l[r] = ctx.scalar("online softmax: l = l * corr + sum", ops=2,
                                  compute=lambda: l_old * k + p_sum) or 0.0
                ctx.cast(y[r * CHUNK], xr, "CAST_NONE", vl)
            s_in.free_tensor(x)
            p_out.enque(y)
            y = p_out.deque(np.float16)
            ctx.data_copy_pad(p_ws[(slot(c) + r0) * CHUNK], y, DataCopyExtParams(1, span * 2, 0, 0, 0))
            p_out.free_tensor(y)
            return corr

        def fold(c, corr):
            """acc = O_c for the first chunk, else acc · corr + O_c, row by row."""
            ctx.cross_core_wait_flag(2)                  # the AIC wrote O_c
            if not R:
                return
            o = o_in.alloc_tensor(np.float32)
            ctx.data_copy(o, o_ws[(slot(c) + r0) * D], R * D)
            o_in.enque(o)
            o = o_in.deque(np.float32)
            for r in range(R):
                if c == 0:
                    ctx.adds(acc[r * D], o[r * D], 0.0, D)
                else:
                    ctx.muls(acc[r * D], acc[r * D], float(corr[r]), D)
                    ctx.add(acc[r * D], acc[r * D], o[r * D], D)
            o_in.free_tensor(o)

        for i in ctx.tile_loop(n_tasks, key=task_key):
            task = me + i * groups
            b, n = divmod(task, Hkv)
            L = int(lens[b])
            nc = ceil_div(L, CHUNK)
            m, l = [NEG_BIG] * R, [0.0] * R
            corr_prev = []
            for c in ctx.tile_loop(nc, key=lambda c: (min(CHUNK, L - c * CHUNK), c == 0, c == 1)):
                ctx.cross_core_wait_flag(0)              # S_c is in GM
                corr = softmax_chunk(c, L, m, l) if R else []
                ctx.cross_core_set_flag(2, "PIPE_MTE3", 1)   # this AIV's rows of P_c are in GM
                if c:
                    fold(c - 1, corr_prev)
                corr_prev = corr
            fold(nc - 1, corr_prev)
            if R:                                        # the division at the end
                ot = o_out.alloc_tensor(np.float32)
                for r in range(R):
                    inv = ctx.scalar("1 / l", ops=1, compute=lambda r=r: 1.0 / l[r] if l[r] > 0 else 0.0)
                    ctx.muls(ot[r * D], acc[r * D], float(inv or 0.0), D)
                o_out.enque(ot)
                ot = o_out.deque(np.float32)
                ctx.data_copy(out_gm[(b * Hq + n * G + r0) * D], ot, R * D)
                o_out.free_tensor(ot)


def decode_attention_cv(q, k_cache, v_cache, seq_lens, *, hw: HardwareSpec | str = "ascend-910b2",
                        timing_only: bool = False):
    """softmax(q·Kᵀ / sqrt(D)) · V per sequence and query head, on the cube and vector cores of one
    mixed launch; returns ``(out float32 [B, Hq, D] or None, timeline)``. fp16 ``q`` [B, Hq, D] and
    caches [B, Lmax, Hkv, D]; ``seq_lens`` [B] in 1..Lmax. In a timing-only run the arrays may be
    given as shapes (tuples)."""
    hw = get_preset(hw) if isinstance(hw, str) else hw
    shapes = [x if isinstance(x, tuple) else np.shape(x) for x in (q, k_cache, v_cache)]
    if any(len(s) != r for s, r in zip(shapes, (3, 4, 4))):
        raise ValueError(f"q is [B, Hq, D] and the caches [B, Lmax, Hkv, D]; got shapes {shapes}")
    (B, Hq, D), (B2, Lmax, Hkv, D2) = shapes[0], shapes[1]
    if shapes[2] != shapes[1] or B2 != B or D2 != D:
        raise ValueError(f"q {shapes[0]}, k_cache {shapes[1]} and v_cache {shapes[2]} do not agree on B, D or the cache shape")
    if Hkv < 1 or Hq % Hkv or not 1 <= Hq // Hkv <= 16:
        raise ValueError(f"Hq = {Hq} must be 1..16 times Hkv = {Hkv} (G query heads per KV head fill one 16-row fractal)")
    if D % 16 or not 16 <= D <= 256:
        raise ValueError(f"head_dim D = {D} must be a multiple of 16 in 16..256 (L0B holds {CHUNK} x D halves)")
    lens = tuple(int(x) for x in np.asarray(seq_lens).reshape(-1))
    if len(lens) != B or any(not 1 <= x <= Lmax for x in lens):
        raise ValueError(f"seq_lens must be {B} lengths in 1..{Lmax}, got {lens}")
    G = Hq // Hkv
    if not timing_only:
        for name, x in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
            if isinstance(x, tuple) or np.asarray(x).dtype != np.float16:
                raise TypeError(f"{name} must be a float16 array (the cube's half inputs)")
        qg = GlobalTensor.from_array(np.ascontiguousarray(q), "q")
        kg = GlobalTensor.from_array(np.ascontiguousarray(k_cache), "k_cache")
        vg = GlobalTensor.from_array(np.ascontiguousarray(v_cache), "v_cache")
    else:
        qg = GlobalTensor.empty(B * Hq * D, np.float16, "q", timing_only=True)
        kg = GlobalTensor.empty(B * Lmax * Hkv * D, np.float16, "k_cache", timing_only=True)
        vg = GlobalTensor.empty(B * Lmax * Hkv * D, np.float16, "v_cache", timing_only=True)
    groups = min(B * Hkv, hw.cube_cores)
    # two slots per AI core group, whatever the context length: long contexts fit
    s_ws = GlobalTensor.empty(groups * 2 * G * CHUNK, np.float32, "s_workspace", timing_only=timing_only)
    p_ws = GlobalTensor.empty(groups * 2 * G * CHUNK, np.float16, "p_workspace", timing_only=timing_only)
    o_ws = GlobalTensor.empty(groups * 2 * G * D, np.float32, "o_workspace", timing_only=timing_only)
    out = GlobalTensor.empty(B * Hq * D, np.float32, "out", timing_only=timing_only)
    tl = launch(decode_attention_cv_kernel, groups, qg, kg, vg, s_ws, p_ws, o_ws, out, lens,
                (B, Hkv, G, D, Lmax), hw=hw, timing_only=timing_only, name="decode_attention_cv")
    return (None if timing_only else out.data.reshape(B, Hq, D).copy()), tl
