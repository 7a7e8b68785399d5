"""Cross-core flags and SyncAll in mixed kernels (npu_lab.lang.cross_core): ordering, timing, the race detector."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab.lang import FixpipeParamsV220, GlobalTensor, QuantMode_t, TBuf, TPosition, launch, npu_kernel
from npu_lab.lang.cross_core import CROSS_CORE_FLAG_CYCLES, CROSS_CORE_PROVENANCE
from npu_lab.lang.dma import DataCopyExtParams, DataCopyPadExtParams
from npu_lab.lang.errors import RaceError

GM = {}


def _ub(ctx, n=128):
    b = TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(b, n * 2)
    return b.get(np.float16)


def _copy(ctx, gm, at, out=False):
    x = _ub(ctx)
    if out:
        ctx.data_copy_pad(gm[at], x, DataCopyExtParams(1, 256, 0, 0, 0))
    else:
        ctx.data_copy_pad(x, gm[at], DataCopyExtParams(1, 256, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))


def _fix(ctx, gm, at=0):
    c = TBuf(TPosition.CO1)
    ctx.pipe.init_buffer(c, 16 * 16 * 4)
    ctx.fixpipe(gm[at], c.get(np.float32), FixpipeParamsV220(16, 16, 16, 16, False, QuantMode_t.F322F16, 1.0, 1, 0, 0, 0))


def _ws():
    return GM.setdefault("ws", GlobalTensor.from_array(np.zeros(2048, np.float16), "ws"))


def _make(sync_between_aivs: bool):
    @npu_kernel(mix=(1, 2))
    def k(ctx):
        ws = _ws()
        if ctx.is_aiv():
            if ctx.get_sub_block_idx() == 0:
                _copy(ctx, ws, 0, out=True)                   # AIV0 writes
            if sync_between_aivs:
                ctx.cross_core_set_flag(1, "PIPE_MTE3", 2)    # mode 1: the two AIVs meet
                ctx.cross_core_wait_flag(2)
            if ctx.get_sub_block_idx() == 1:
                _copy(ctx, ws, 0)                             # AIV1 reads
    return k


def test_mode_1_orders_the_two_aivs():
    GM.clear()
    launch(_make(True), 1)
    GM.clear()
    with pytest.raises(RaceError, match="AIV0 of AI core group 0 writes them.*AIV1 of AI core group 0 reads"):
        launch(_make(False), 1)


def _syncall(with_sync: bool):
    @npu_kernel(mix=(1, 2))
    def k(ctx):
        ws = _ws()
        g = ctx.get_block_idx() if ctx.is_aic() else ctx.get_block_idx() // 2
        if ctx.is_aic() and g == 0:
            _fix(ctx, ws, 0)                                  # group 0's AIC writes 256 halves
        if with_sync:
            ctx.sync_all(False)
        if ctx.is_aiv() and g == 1:
            _copy(ctx, ws, 128 * ctx.get_sub_block_idx())     # group 1's AIVs read them
    return k


def test_sync_all_orders_every_core_of_the_launch():
    GM.clear()
    tl = launch(_syncall(True), 2)
    ev = tl.events()
    fix_ready = ev[ev["pipe"] == "FIX"].ready_us.max()
    reads = ev[(ev["pipe"] == "MTE2") & (ev.core >= 24)]
    hops = 3 * tl.hw.cycles_to_us(CROSS_CORE_FLAG_CYCLES)
    assert reads.start_us.min() >= fix_ready + hops - 1e-9
    GM.clear()
    with pytest.raises(RaceError, match="AIC of AI core group 0 writes them.*AI core group 1 reads"):
        launch(_syncall(False), 2)


@npu_kernel(mix=(1, 2))
def k_mode0_aivs(ctx):
    if ctx.is_aiv():
        ctx.cross_core_set_flag(0, "PIPE_MTE3", 0)
        ctx.cross_core_wait_flag(0)


def test_mode_0_waits_for_every_aiv_of_the_launch():
    launch(k_mode0_aivs, 3)          # 6 AIVs meet; a hang or an unconsumed flag would raise


@npu_kernel(mix=(1, 2))
def k_ping(ctx):
    ws = _ws()
    if ctx.is_aic():
        _fix(ctx, ws)
        ctx.cross_core_set_flag(2, "PIPE_FIX", 0)
    else:
        ctx.cross_core_wait_flag(0)
        _copy(ctx, ws, 128 * ctx.get_sub_block_idx())


def test_the_flag_hop_is_priced_and_labelled():
    GM.clear()
    tl = launch(k_ping, 1)
    ev = tl.events()
    gap = ev[(ev["pipe"] == "MTE2") & (ev.core >= 24)].start_us.min() - ev[ev["pipe"] == "FIX"].ready_us.max()
    assert gap >= tl.hw.cycles_to_us(CROSS_CORE_FLAG_CYCLES) - 1e-9
    assert CROSS_CORE_PROVENANCE["cross_core_flag_cycles"][0] == "assumed"
    # timing-only gives the same timeline
    GM.clear()
    fast = launch(k_ping, 1, timing_only=True)
    assert fast.total_cycles == tl.total_cycles


def test_who_am_i():
    seen = []

    @npu_kernel(mix=(1, 2))
    def k(ctx):
        seen.append((ctx.is_aic(), ctx.is_aiv(), ctx.get_block_idx(), ctx.get_sub_block_idx(), ctx.get_task_ratio(),
                     ctx.get_block_num()))

    launch(k, 2)
    assert seen == [(True, False, 0, 0, 1, 2), (False, True, 0, 0, 2, 2), (False, True, 1, 1, 2, 2),
                    (True, False, 1, 0, 1, 2), (False, True, 2, 0, 2, 2), (False, True, 3, 1, 2, 2)]


def test_npu_kernel_mix_arguments():
    with pytest.raises(ValueError, match=r"mix must be \(1, 2\)"):
        npu_kernel(lambda ctx: None, mix=(1, 1))
    k = npu_kernel(lambda ctx: None, mix=(1, 2), block_classes=lambda n: np.zeros(n))   # groups may be classed
    assert k.block_classes is not None and k.mix == (1, 2)
