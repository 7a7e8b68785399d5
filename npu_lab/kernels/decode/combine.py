"""FlashDecode step 2: combine the S2 pieces of each (sequence, KV head) with their log-sum-exp.

Inputs (GM workspace written by step 1): o [B·N2·splits, G, D] float32 — each piece's softmax-
normalised output — and lse [B·N2·splits, G] float32 (m + ln l, −3e38 for an empty piece).
Output [B, q_heads, D] float32:  out = Σ_i w_i o_i / Σ_i w_i,  w_i = exp(lse_i − max_j lse_j)
(IFA算子设计介绍.md's FlashDecode combine). A separate launch: its cost is its own launch overhead
plus reading splits·G·D floats per (b, n2) — priced on the same timeline.

Pipes: MTE2 (lse → UB, the pieces of one head g strided out of o) → S (GetValue the lse after a
MTE2_S flag; the weights on the scalar unit) → V (Muls, Add) → MTE3 (out through a VECOUT queue).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...lang import DataCopyExtParams, DataCopyPadExtParams, DataCopyParams, GlobalTensor, TBuf, TPosition, TQue, npu_kernel
from ...lang.tiling_struct import Int32Struct


@dataclass(frozen=True)
class CombineTiling(Int32Struct):
    """groups (B·N2), splits, G, D, groups per block."""

    groups: int
    splits: int
    group: int
    head_dim: int
    groups_per_block: int

    @property
    def block_dim(self) -> int:
        return -(-self.groups // self.groups_per_block)


def combine_block_classes(block_dim, o_gm, lse_gm, out_gm, tiling_bytes, sync=None):
    t = CombineTiling.unpack(tiling_bytes)
    n = np.full(block_dim, t.groups_per_block)
    n[-1] = t.groups - (block_dim - 1) * t.groups_per_block
    return n


@npu_kernel(block_classes=combine_block_classes)
def flash_decode_combine_kernel(ctx, o_gm: GlobalTensor, lse_gm: GlobalTensor, out_gm: GlobalTensor,
                                tiling_bytes: bytes, sync=None):
    """Per (b, n2) of this block: weights from the pieces' lse, weighted sum of their outputs.
    Listing: ``attention.cpp`` (entry ``flash_decode_combine``)."""
    sync = {"MTE2_S", "S_MTE2"} if sync is None else sync
    t = CombineTiling.unpack(tiling_bytes)
    sp, G, D = t.splits, t.group, t.head_dim
    lse_buf, acc_buf = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(lse_buf, -(-sp * G // 8) * 32, name="lse")
    ctx.pipe.init_buffer(acc_buf, D * 4, name="scaled")
    o_que, out_que = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
    ctx.pipe.init_buffer(o_que, 2, sp * D * 4, name="pieces")
    ctx.pipe.init_buffer(out_que, 1, G * D * 4, name="out")
    lse, scaled = lse_buf.get(np.float32), acc_buf.get(np.float32)
    first = ctx.get_block_idx() * t.groups_per_block
    for grp in range(first, min(t.groups, first + t.groups_per_block)):
        if grp > first and "S_MTE2" in sync:
            ev = ctx.pipe.fetch_event_id("S_MTE2")            # S is done reading the last lse
            ctx.set_flag("S_MTE2", ev)
            ctx.wait_flag("S_MTE2", ev)
        ctx.data_copy_pad(lse, lse_gm[grp * sp * G], DataCopyExtParams(1, sp * G * 4, 0, 0, 0),
                          DataCopyPadExtParams(False, 0, 0, 0))
        if "MTE2_S" in sync:
            ev = ctx.pipe.fetch_event_id("MTE2_S")
            ctx.set_flag("MTE2_S", ev)
            ctx.wait_flag("MTE2_S", ev)
        vals = [[lse.get_value(i * G + g) for i in range(sp)] for g in range(G)]
        ot = out_que.alloc_tensor(np.float32)
        for g in range(G):
            w = ctx.scalar("FlashDecode weights: exp(lse_i - max) / sum", ops=3 * sp, exps=sp,
                           compute=lambda g=g: _weights(vals[g])) or [0.0] * sp
            pieces = o_que.alloc_tensor(np.float32)
            # piece i's head g: rows G·D apart in the workspace
            ctx.data_copy(pieces, o_gm[(grp * sp * G + g) * D], DataCopyParams(sp, D * 4 // 32, (G - 1) * D * 4 // 32, 0))
            o_que.enque(pieces)
            pieces = o_que.deque(np.float32)
            ctx.muls(ot[g * D], pieces, float(w[0]), D)
            for i in range(1, sp):
                ctx.muls(scaled, pieces[i * D], float(w[i]), D)
                ctx.add(ot[g * D], ot[g * D], scaled, D)
            o_que.free_tensor(pieces)
        out_que.enque(ot)
        ot = out_que.deque(np.float32)
        ctx.data_copy(out_gm[grp * G * D], ot, G * D)
        out_que.free_tensor(ot)


def _weights(lse):
    m = max(lse)
    w = [math.exp(x - m) for x in lse]
    total = sum(w)
    return [x / total for x in w]
