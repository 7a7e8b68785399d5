"""Decode attention v3 on cube + vector (issue 17 §2, item 5): Q·Kᵀ and P·V on the cube, softmax on
the vector cores, in one ``__mix__(1, 2)`` kernel.

Shapes (as :func:`~npu_lab.kernels.decode.reference.decode_attention_reference`): q [B, Hq, D] fp16, the
caches [B, Lmax, Hkv, D] fp16 (BSND), ``seq_lens[b]`` valid positions of sequence b, G = Hq / Hkv query
heads per KV head (1 <= G <= 16: one 16-row fractal of A). Output float32 [B, Hq, D].

A task is (sequence b, KV head n); block (AI core group) i runs tasks i, i + blockDim, ... Per task:

* AIC: S = q_g · Kᵀ / 1 (G x L, fp32) in chunks of ``CHUNK`` positions: the G query rows Nd2Nz into L1, K's
  rows of the chunk (stride Hkv·D in GM) Nd2Nz as Bᵀ — their NZ fractals are L0B's ZN without a
  transpose — Mmad, Fixpipe (NoQuant, fp32) into the S workspace [tasks, G, Lmax];
  ``CrossCoreSetFlag<2, PIPE_FIX>(0)``.
* AIVs (each half of the G rows): ``CrossCoreWaitFlag(0)``; per row: DataCopyPad in, Muls by 1/sqrt(D),
  ReduceMax, Adds -max, Exp, ReduceSum, Muls by 1/sum, Cast to fp16, DataCopyPad into the P workspace;
  ``CrossCoreSetFlag<2, PIPE_MTE3>(1)`` (an AIV with no rows sets it too: mode 2 from the AIVs releases
  the AIC only when both set).
* AIC: ``CrossCoreWaitFlag(1)``; O = P · V, K = L in chunks accumulating in L0C, Fixpipe fp32 out.

Simplifications: one task at a time per group (the AIC waits for the softmax: no overlap between
tasks; a second workspace slot would give it), S is kept whole per task in GM (no online softmax:
the workspace holds G x Lmax floats per task), the sequence lengths are a kernel argument (a real
kernel reads them from GM). Run it as ``decode_attention(..., version="v3")``
(:mod:`npu_lab.kernels.decode.run`); its C++ listing is ``attention_cv.cpp``.
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


def decode_cv_block_classes(block_dim, q_gm, k_gm, v_gm, s_ws, p_ws, out_gm, lens, dims):
    """AI core groups whose tasks have the same lengths, in order, do identical work (costs depend on
    the lengths and the fixed dims only; the addresses differ)."""
    B, Hkv = dims[0], dims[1]
    seen: dict = {}
    return np.array([seen.setdefault(tuple(lens[t // Hkv] for t in range(g, B * Hkv, block_dim)), len(seen))
                     for g in range(block_dim)])


@npu_kernel(mix=(1, 2), block_classes=decode_cv_block_classes)
def decode_attention_cv_kernel(ctx, q_gm: GlobalTensor, k_gm: GlobalTensor, v_gm: GlobalTensor, s_ws: GlobalTensor,
                               p_ws: GlobalTensor, out_gm: GlobalTensor, lens: tuple, dims: tuple):
    """See the module docstring. ``dims`` = (B, Hkv, G, D, Lmax)."""
    B, Hkv, G, D, Lmax = dims
    Hq = Hkv * G
    tasks = B * Hkv
    groups = ctx.get_block_num()
    me = ctx.get_block_idx() if ctx.is_aic() else ctx.get_block_idx() // 2
    if ctx.is_aic():
        dt = np.dtype(np.float16)
        qa1, qb1, qa2, qb2, qc = (TQue(TPosition.A1, 1), TQue(TPosition.B1, 1), TQue(TPosition.A2, 1),
                                  TQue(TPosition.B2, 1), TQue(TPosition.CO1, 1))
        wide = max(D, CHUNK)
        ctx.pipe.init_buffer(qa1, 1, 16 * wide * 2, name="a1")
        ctx.pipe.init_buffer(qb1, 1, round16(CHUNK) * D * 2, name="b1")
        ctx.pipe.init_buffer(qa2, 1, 16 * wide * 2, name="a2")
        ctx.pipe.init_buffer(qb2, 1, CHUNK * D * 2, name="b2")
        ctx.pipe.init_buffer(qc, 1, 16 * wide * 4, name="c")
        for i in ctx.tile_loop(len(range(me, tasks, groups)), key=lambda i: lens[(me + i * groups) // Hkv]):
            task = me + i * groups
            b, n = divmod(task, Hkv)
            L = int(lens[b])
            row0 = (b * Hq + n * G) * D
            # ---- S = q_g · Kᵀ, chunk by chunk, into the S workspace
            a1 = qa1.alloc_tensor(dt)
            ctx.data_copy(a1, q_gm[row0], Nd2NzParams(1, G, D, 0, D, 16, 1, 0))
            qa1.enque(a1)
            a1 = qa1.deque(dt)
            a2 = qa2.alloc_tensor(dt)
            load_a_l0a(ctx, a2, a1, 1, 0, D, 16, 256)
            qa1.free_tensor(a1)
            qa2.enque(a2)
            a2 = qa2.deque(dt)
            for ci in ctx.tile_loop(ceil_div(L, CHUNK), key=lambda ci: min(CHUNK, L - ci * CHUNK)):
                c0 = ci * CHUNK
                vl = min(CHUNK, L - c0)
                b1 = qb1.alloc_tensor(dt)
                ctx.data_copy(b1, k_gm[((b * Lmax + c0) * Hkv + n) * D],
                              Nd2NzParams(1, vl, D, 0, Hkv * D, round16(vl), 1, 0))
                qb1.enque(b1)
                b1 = qb1.deque(dt)
                b2 = qb2.alloc_tensor(dt)
                load_b_l0b(ctx, b2, b1, False, 0, D, D, ceil_div(vl, 16), 16, 256)
                qb1.free_tensor(b1)
                qb2.enque(b2)
                b2 = qb2.deque(dt)
                c = qc.alloc_tensor(np.float32)
                ctx.mmad(c, a2, b2, MmadParams(16, vl, D, 0, False, True))
                qb2.free_tensor(b2)
                qc.enque(c)
                c = qc.deque(np.float32)
                ctx.fixpipe(s_ws[task * G * Lmax + c0], c,
                            FixpipeParamsV220(vl, G, 16, Lmax, False, QuantMode_t.NoQuant, 1.0, 1, 0, 0, 0))
                qc.free_tensor(c)
            qa2.free_tensor(a2)
            ctx.cross_core_set_flag(2, "PIPE_FIX", 0)        # S is in GM: both AIVs may start
            ctx.cross_core_wait_flag(1)                      # both AIVs wrote P
            # ---- O = P · V, K = L in chunks accumulating in L0C
            c = qc.alloc_tensor(np.float32)
            for ci in ctx.tile_loop(ceil_div(L, CHUNK), key=lambda ci: (min(CHUNK, L - ci * CHUNK), ci == 0)):
                c0 = ci * CHUNK
                vl = min(CHUNK, L - c0)
                a1 = qa1.alloc_tensor(dt)
                ctx.data_copy(a1, p_ws[task * G * Lmax + c0], Nd2NzParams(1, G, vl, 0, Lmax, 16, 1, 0))
                b1 = qb1.alloc_tensor(dt)
                ctx.data_copy(b1, v_gm[((b * Lmax + c0) * Hkv + n) * D],
                              Nd2NzParams(1, vl, D, 0, Hkv * D, round16(vl), 1, 0))
                qa1.enque(a1)
                qb1.enque(b1)
                a1, b1 = qa1.deque(dt), qb1.deque(dt)
                a2, b2 = qa2.alloc_tensor(dt), qb2.alloc_tensor(dt)
                load_a_l0a(ctx, a2, a1, 1, 0, vl, 16, 256)
                load_b_l0b(ctx, b2, b1, True, 0, vl, vl, D // 16, 16, 256)
                qa1.free_tensor(a1)
                qb1.free_tensor(b1)
                qa2.enque(a2)
                qb2.enque(b2)
                a2, b2 = qa2.deque(dt), qb2.deque(dt)
                if c0 and D // 16 < 10:
                    ctx.pipe_barrier("PIPE_M")                # Mmad.md: small accumulating Mmads need it
                ctx.mmad(c, a2, b2, MmadParams(16, D, vl, 0, False, c0 == 0))
                qa2.free_tensor(a2)
                qb2.free_tensor(b2)
            qc.enque(c)
            c = qc.deque(np.float32)
            ctx.fixpipe(out_gm[row0], c, FixpipeParamsV220(D, G, 16, D, False, QuantMode_t.NoQuant, 1.0, 1, 0, 0, 0))
            qc.free_tensor(c)
    else:
        sub = ctx.get_sub_block_idx()
        half = -(-G // 2)
        mine = range(sub * half, min(G, (sub + 1) * half))
        lpad = -(-Lmax // 8) * 8
        q_in, q_out = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
        ctx.pipe.init_buffer(q_in, 1, lpad * 4, name="s_row")
        ctx.pipe.init_buffer(q_out, 1, -(-Lmax // 16) * 32, name="p_row")
        red_buf, tmp_buf = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
        ctx.pipe.init_buffer(red_buf, 64, name="red")
        ctx.pipe.init_buffer(tmp_buf, max(32, reduce_max_tmp_elements(lpad, 4, False) * 4), name="tmp")
        red, tmp = red_buf.get(np.float32), tmp_buf.get(np.float32)
        scale = 1.0 / math.sqrt(D)
        for i in ctx.tile_loop(len(range(me, tasks, groups)), key=lambda i: lens[(me + i * groups) // Hkv]):
            task = me + i * groups
            b = task // Hkv
            L = int(lens[b])
            ctx.cross_core_wait_flag(0)
            for g in mine:
                at = task * G * Lmax + g * Lmax
                x = q_in.alloc_tensor(np.float32)
                ctx.data_copy_pad(x, s_ws[at], DataCopyExtParams(1, L * 4, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))
                q_in.enque(x)
                x = q_in.deque(np.float32)
                ctx.muls(x, x, scale, L)
                ctx.reduce_max(red, x, tmp, L)
                ctx.set_flag("V_S", 0)
                ctx.wait_flag("V_S", 0)
                m = red.get_value(0)
                ctx.adds(x, x, -float(m), L)
                ctx.exp(x, x, L)
                ctx.reduce_sum(red[8], x, tmp, L)
                ctx.set_flag("V_S", 0)
                ctx.wait_flag("V_S", 0)
                total = red.get_value(8)
                ctx.set_flag("S_V", 0)                       # V may overwrite red (next row's ReduceMax)
                ctx.wait_flag("S_V", 0)
                ctx.muls(x, x, 1.0 / float(total) if total else 0.0, L)
                y = q_out.alloc_tensor(np.float16)
                ctx.cast(y, x, "CAST_NONE", L)
                q_in.free_tensor(x)
                q_out.enque(y)
                y = q_out.deque(np.float16)
                ctx.data_copy_pad(p_ws[at], y, DataCopyExtParams(1, L * 2, 0, 0, 0))
                q_out.free_tensor(y)
            ctx.cross_core_set_flag(2, "PIPE_MTE3", 1)       # this AIV's rows of P are in GM


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
    tasks = B * Hkv
    s_ws = GlobalTensor.empty(tasks * G * Lmax, np.float32, "s_workspace", timing_only=timing_only)
    p_ws = GlobalTensor.empty(tasks * G * Lmax, np.float16, "p_workspace", timing_only=timing_only)
    out = GlobalTensor.empty(B * Hq * D, np.float32, "out", timing_only=timing_only)
    tl = launch(decode_attention_cv_kernel, min(tasks, hw.cube_cores), qg, kg, vg, s_ws, p_ws, out, lens,
                (B, Hkv, G, D, Lmax), hw=hw, timing_only=timing_only, name="decode_attention_cv")
    return (None if timing_only else out.data.reshape(B, Hq, D).copy()), tl
