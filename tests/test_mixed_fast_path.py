"""The fast path of mixed (cube + vector) launches (npu_lab.lang.mixed_launch, npu_lab.lang.cross_core):
block classes of AI core groups and tile_loop fast-forward on the AIC / AIVs, alone or for the whole
group. A timing-only run must give exactly the full run's timeline."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from npu_lab.kernels.decode.attention_cv import decode_attention_cv
from npu_lab.kernels.gemm.epilogue import matmul_leakyrelu
from npu_lab.lang import FixpipeParamsV220, GlobalTensor, QuantMode_t, TBuf, TPosition, launch, npu_kernel
from npu_lab.lang.dma import DataCopyExtParams, DataCopyPadExtParams
from npu_lab.lang.mixed_launch import mixed_fast_path
from npu_lab.sim.core import SimulationError

COLS = ["core", "pipe", "name", "start_us", "end_us", "bytes"]


def _same(full, fast):
    assert full.total_cycles == fast.total_cycles and full.hbm_bytes == fast.hbm_bytes
    pd.testing.assert_frame_equal(full.events()[COLS].reset_index(drop=True),
                                  fast.events()[COLS].reset_index(drop=True))


def _compressed(tl) -> int:
    """Events stored as fast-forwarded copies (segments with copies > 1) over the launch's traces."""
    return sum(len(cols[0]) * (c - 1) for t in tl.launches[0].traces for cols, c, _ in t.segments if c > 1)


def _qkv(B, Hq, Hkv, D, L, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((B, Hq, D)).astype(np.float16), rng.standard_normal((B, L, Hkv, D)).astype(np.float16),
            rng.standard_normal((B, L, Hkv, D)).astype(np.float16))


@pytest.mark.parametrize("B, Hq, Hkv, D, L, lens", [
    (2, 8, 2, 64, 1100, (1100, 1100)),          # long: chunk loops and the task loop fast-forward
    (3, 4, 1, 64, 700, (700, 1, 333)),          # ragged lengths, a one-position sequence, tail chunks
    (8, 16, 4, 128, 600, None),                 # 32 tasks on 24 groups: two block classes
    (16, 16, 2, 64, 640, None),                 # 32 tasks: the task loop runs twice per group
    (48, 8, 1, 16, 520, None),                  # 48 tasks, two per group, G = 8
])
def test_v3_timing_only_equals_full_run(B, Hq, Hkv, D, L, lens):
    lens = lens or (L,) * B
    q, k, v = _qkv(B, Hq, Hkv, D, L)
    _, full = decode_attention_cv(q, k, v, lens)
    _, fast = decode_attention_cv(q.shape, k.shape, v.shape, lens, timing_only=True)
    _same(full, fast)


def test_v3_timing_only_fast_forwards_and_simulates_one_group_per_class():
    B, L = 24 * 12, 512
    _, fast = decode_attention_cv((B, 8, 128), (B, L, 1, 128), (B, L, 1, 128), (L,) * B, timing_only=True)
    rec = fast.launches[0]
    assert len(rec.traces) == 3 and rec.block_dim == 3 * 24          # one class: its AIC and two AIVs
    assert len(set(rec.block_class.tolist())) == 3
    # the AIVs' only loop is the task loop, whose body waits and sets cross-core flags: it jumped with the
    # whole group (12 tasks: most of each AIV's events are replicated copies)
    for aiv in rec.traces[1:]:
        copies = sum(len(cols[0]) * (c - 1) for cols, c, _ in aiv.segments if c > 1)
        assert copies > 0.5 * len(aiv)


def test_v3_bench_shape_is_fast():
    import time
    t = time.perf_counter()
    B, L = 64, 8192
    _, tl = decode_attention_cv((B, 64, 128), (B, L, 8, 128), (B, L, 8, 128), (L,) * B, timing_only=True)
    assert time.perf_counter() - t < 5.0          # ~0.05 s here; minutes without the fast path
    assert tl.total_us > 0


@pytest.mark.parametrize("shape", [(1024, 64, 1024), (600, 96, 700), (2048, 128, 256)])
def test_matmul_leakyrelu_block_classes_timing_only_equals_full(shape):
    M, K, N = shape
    rng = np.random.default_rng(2)
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    _, full = matmul_leakyrelu(A, B, 0.1)
    _, fast = matmul_leakyrelu((M, K), (K, N), 0.1, timing_only=True)
    _same(full, fast)
    rec = fast.launches[0]
    assert len(rec.traces) < rec.block_dim            # fewer classes than groups: groups replicated


# ---- small kernels: the coordinated jump, its give-up paths and the class check ------------------------

def _ws(n=1 << 16):
    return GlobalTensor.from_array(np.zeros(n, np.float16), "ws")


def _pingpong(n_aic, n_aiv, classes=None, extra_wait=False):
    """AIC: per iteration a Fixpipe of a 16x16 tile into slot j % 2 of the workspace, flag 0; waits flag 1
    for the slot before reusing it. AIVs: wait 0, copy their half in, set 1."""
    @npu_kernel(mix=(1, 2), block_classes=classes)
    def k(ctx, ws):
        base = (ctx.get_block_idx() if ctx.is_aic() else ctx.get_block_idx() // 2) * 1024
        if ctx.is_aic():
            c = TBuf(TPosition.CO1)
            ctx.pipe.init_buffer(c, 16 * 16 * 4)
            for j in ctx.tile_loop(n_aic):
                if j >= 2:
                    ctx.cross_core_wait_flag(1)
                ctx.fixpipe(ws[base + 256 * (j % 2)], c.get(np.float32),
                            FixpipeParamsV220(16, 16, 16, 16, False, QuantMode_t.F322F16, 1.0, 1, 0, 0, 0))
                ctx.cross_core_set_flag(2, "PIPE_FIX", 0)
            for _ in range(min(2, n_aic)):
                ctx.cross_core_wait_flag(1)
        else:
            b = TBuf(TPosition.VECCALC)
            ctx.pipe.init_buffer(b, 256)
            x = b.get(np.float16)
            sub = ctx.get_sub_block_idx()
            for j in ctx.tile_loop(n_aiv):
                ctx.cross_core_wait_flag(0)
                ctx.data_copy_pad(x, ws[base + 256 * (j % 2) + 128 * sub], DataCopyExtParams(1, 256, 0, 0, 0),
                                  DataCopyPadExtParams(False, 0, 0, 0))
                ctx.set_flag("MTE2_V", 0)
                ctx.wait_flag("MTE2_V", 0)
                ctx.muls(x, x, 2.0, 128)
                ctx.set_flag("V_MTE2", 0)                 # the next copy overwrites x
                ctx.wait_flag("V_MTE2", 0)
                ctx.cross_core_set_flag(2, "PIPE_V", 1)
    return k


@pytest.mark.parametrize("n", [1, 4, 7, 200])
def test_coordinated_loop_jump_is_exact(n):
    k = _pingpong(n, n, classes=lambda bd, ws: np.zeros(bd, dtype=int))
    full = launch(k, 3, _ws())
    fast = launch(k, 3, _ws(), timing_only=True)
    _same(full, fast)
    if n == 200:
        assert _compressed(fast) > 0


def test_a_loop_the_group_cannot_cut_runs_plainly_and_stays_exact():
    # the AIVs loop 200 times over the tiles, the AIC runs the same work as a plain Python loop: no common
    # cut, so the AIVs give the loop up (no jump) and the result is still the full run's
    @npu_kernel(mix=(1, 2))
    def k(ctx, ws):
        if ctx.is_aic():
            c = TBuf(TPosition.CO1)
            ctx.pipe.init_buffer(c, 16 * 16 * 4)
            for j in range(200):
                if j >= 2:
                    ctx.cross_core_wait_flag(1)
                ctx.fixpipe(ws[256 * (j % 2)], c.get(np.float32),
                            FixpipeParamsV220(16, 16, 16, 16, False, QuantMode_t.F322F16, 1.0, 1, 0, 0, 0))
                ctx.cross_core_set_flag(2, "PIPE_FIX", 0)
            for _ in range(2):
                ctx.cross_core_wait_flag(1)
        else:
            b = TBuf(TPosition.VECCALC)
            ctx.pipe.init_buffer(b, 256)
            x = b.get(np.float16)
            for j in ctx.tile_loop(200):
                ctx.cross_core_wait_flag(0)
                ctx.data_copy_pad(x, ws[256 * (j % 2) + 128 * ctx.get_sub_block_idx()],
                                  DataCopyExtParams(1, 256, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))
                ctx.cross_core_set_flag(2, "PIPE_MTE2", 1)
    _same(launch(k, 1, _ws()), launch(k, 1, _ws(), timing_only=True))


def test_different_trip_counts_in_the_group_stay_exact():
    k = _pingpong(300, 300)
    _same(launch(k, 2, _ws()), launch(k, 2, _ws(), timing_only=True))


def test_wrong_block_classes_are_refused_in_a_full_run():
    @npu_kernel(mix=(1, 2), block_classes=lambda bd, ws: np.zeros(bd, dtype=int))
    def k(ctx, ws):
        g = ctx.get_block_idx() if ctx.is_aic() else ctx.get_block_idx() // 2
        if ctx.is_aiv():
            b = TBuf(TPosition.VECCALC)
            ctx.pipe.init_buffer(b, 256)
            for _ in range(1 + g):                  # group 1 does twice the work of group 0
                ctx.muls(b.get(np.float16), b.get(np.float16), 2.0, 128)
    with pytest.raises(SimulationError, match="block_classes says AI core groups 0 and 1"):
        launch(k, 2, _ws())


@pytest.mark.parametrize("mode0", [True, False])
def test_group_coupling_calls_are_refused_with_block_classes(mode0):
    @npu_kernel(mix=(1, 2), block_classes=lambda bd: np.zeros(bd, dtype=int))
    def k(ctx):
        if mode0:
            if ctx.is_aiv():
                ctx.cross_core_set_flag(0, "PIPE_MTE3", 0)
                ctx.cross_core_wait_flag(0)
        else:
            ctx.sync_all(is_aiv_only=False)
    with pytest.raises(SimulationError, match="synchronises every AI core group"):
        launch(k, 2)


def test_a_dropped_wait_in_a_fast_forwarded_loop_is_still_a_race():
    @npu_kernel(mix=(1, 2))
    def k(ctx, ws):
        if ctx.is_aic():
            c = TBuf(TPosition.CO1)
            ctx.pipe.init_buffer(c, 16 * 16 * 4)
            for j in ctx.tile_loop(50):
                ctx.fixpipe(ws[0], c.get(np.float32),
                            FixpipeParamsV220(16, 16, 16, 16, False, QuantMode_t.F322F16, 1.0, 1, 0, 0, 0))
        else:
            b = TBuf(TPosition.VECCALC)
            ctx.pipe.init_buffer(b, 256)
            for j in ctx.tile_loop(50):
                ctx.data_copy_pad(b.get(np.float16), ws[0], DataCopyExtParams(1, 256, 0, 0, 0),
                                  DataCopyPadExtParams(False, 0, 0, 0))
    from npu_lab.lang.errors import RaceError
    for timing_only in (False, True):
        with pytest.raises(RaceError, match="cross-core race"):
            launch(k, 1, _ws(), timing_only=timing_only)


# ---- v3's synchronisation: every flag is needed (the race detector refuses the run without it) ----------

def _v3_small(timing_only):
    B, Hq, Hkv, D, L = 1, 4, 1, 64, 600
    if timing_only:
        return decode_attention_cv((B, Hq, D), (B, L, Hkv, D), (B, L, Hkv, D), (L,), timing_only=True)
    q, k, v = _qkv(B, Hq, Hkv, D, L)
    return decode_attention_cv(q, k, v, (L,))


@pytest.mark.parametrize("timing_only", [False, True])
@pytest.mark.parametrize("flag_id", [0, 1, 2])
def test_v3_dropping_a_cross_core_flag_pair_is_a_race(flag_id, timing_only, monkeypatch):
    from npu_lab.lang.cross_core import CrossCoreOps
    from npu_lab.lang.errors import RaceError
    set_, wait = CrossCoreOps.cross_core_set_flag, CrossCoreOps.cross_core_wait_flag
    monkeypatch.setattr(CrossCoreOps, "cross_core_set_flag",
                        lambda self, mode, pipe, f: None if f == flag_id else set_(self, mode, pipe, f))
    monkeypatch.setattr(CrossCoreOps, "cross_core_wait_flag",
                        lambda self, f, *a: None if f == flag_id else wait(self, f, *a))
    with pytest.raises(RaceError, match="cross-core race on GM buffer '(s|p|o)_workspace'"):
        _v3_small(timing_only)


@pytest.mark.parametrize("event", ["V_S", "S_V"])
def test_v3_dropping_an_intra_core_flag_is_a_race(event, monkeypatch):
    from npu_lab.lang import RaceError, UnmatchedFlagError
    from npu_lab.lang.context import KernelContext
    original = KernelContext.wait_flag
    monkeypatch.setattr(KernelContext, "wait_flag", lambda self, e, i: None if e == event else original(self, e, i))
    with pytest.raises((RaceError, UnmatchedFlagError)):
        _v3_small(True)


@pytest.mark.parametrize("B, L", [(24, 1500), (30, 700)])
def test_v3_timing_only_with_and_without_the_fast_path_are_identical(B, L):
    shapes = (B, 8, 128), (B, L, 2, 128), (B, L, 2, 128)
    lens = tuple(L - 37 * (b % 3) for b in range(B))
    _, fast = decode_attention_cv(*shapes, lens, timing_only=True)
    with mixed_fast_path(False):
        _, slow = decode_attention_cv(*shapes, lens, timing_only=True)
    assert len(slow.launches[0].traces) == slow.launches[0].block_dim       # every group simulated
    assert len(fast.launches[0].traces) < fast.launches[0].block_dim
    _same(slow, fast)


def test_mixed_fast_path_takes_a_bool():
    with pytest.raises(TypeError, match="True or False"):
        with mixed_fast_path("no"):
            pass
