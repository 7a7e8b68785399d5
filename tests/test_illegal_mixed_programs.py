"""The illegal-program catalogue of mixed (cube + vector) kernels, issue 17 §2: each program breaks one
rule of cross-core synchronisation or of which core runs what; the simulator stops it with the rule,
the page and the fix (npu_lab.lang.cross_core)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import pytest

from npu_lab.lang import GlobalTensor, MmadParams, TBuf, TPosition, launch, npu_kernel
from npu_lab.lang.errors import AscendCRuleError, CapabilityError, RaceError
from npu_lab.lang.dma import DataCopyExtParams, DataCopyPadExtParams
from npu_lab.sim.core import SimulationError

SYNC = "docs/zh/api/SIMD-API/基础API/同步控制/核间同步/"
MIRROR = Path("/work/.mirror/mirror-cann+asc-devkit/repo")
B910 = "ascend-910b2"


class Illegal(NamedTuple):
    id: str
    rule: str
    page: str
    kernel: Callable
    block_dim: int
    error: type
    match: str


def ws():
    return GlobalTensor.from_array(np.zeros(256, np.float16), "workspace")


WS = {}


def _ub(ctx, n=128):
    b = TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(b, n * 2)
    return b.get(np.float16)


def _aiv_read(ctx, gm):
    x = _ub(ctx)
    ctx.data_copy_pad(x, gm[ctx.get_sub_block_idx() * 128], DataCopyExtParams(1, 256, 0, 0, 0),
                      DataCopyPadExtParams(False, 0, 0, 0))


def _aic_write(ctx, gm):
    """The AIC writes the whole workspace (a Fixpipe from a zeroed L0C tile)."""
    from npu_lab.lang import FixpipeParamsV220, QuantMode_t
    c = TBuf(TPosition.CO1)
    ctx.pipe.init_buffer(c, 16 * 16 * 4)
    ctx.fixpipe(gm, c.get(np.float32), FixpipeParamsV220(16, 16, 16, 16, False, QuantMode_t.F322F16, 1.0, 1, 0, 0, 0))


@npu_kernel(mix=(1, 2))
def k_legal(ctx):
    gm = WS.setdefault("ws", ws())
    if ctx.is_aic():
        _aic_write(ctx, gm)
        ctx.cross_core_set_flag(2, "PIPE_FIX", 0)
    else:
        ctx.cross_core_wait_flag(0)
        _aiv_read(ctx, gm)


@npu_kernel(mix=(1, 2))
def k_wait_without_set(ctx):
    if ctx.is_aiv():
        ctx.cross_core_wait_flag(3)                  # nobody sets flag 3


@npu_kernel(mix=(1, 2))
def k_aic_waits_one_aiv(ctx):
    if ctx.is_aic():
        ctx.cross_core_wait_flag(1)                  # mode 2 from AIVs: released only when BOTH set
    elif ctx.get_sub_block_idx() == 0:
        ctx.cross_core_set_flag(2, "PIPE_MTE3", 1)


@npu_kernel(mix=(1, 2))
def k_flag_id_16(ctx):
    if ctx.is_aic():
        ctx.cross_core_set_flag(2, "PIPE_FIX", 16)


@npu_kernel(mix=(1, 2))
def k_set_on_pipe_s(ctx):
    if ctx.is_aic():
        ctx.cross_core_set_flag(2, "PIPE_S", 0)


@npu_kernel(mix=(1, 2))
def k_mode_4(ctx):
    if ctx.is_aic():
        ctx.cross_core_set_flag(4, "PIPE_FIX", 0)


@npu_kernel(mix=(1, 2))
def k_mmad_on_aiv(ctx):
    if ctx.is_aiv():
        a = _ub(ctx)
        ctx.mmad(a, a, a, MmadParams(16, 16, 16, 0, False, True))


@npu_kernel
def k_cross_core_in_vector_kernel(ctx):
    ctx.cross_core_set_flag(2, "PIPE_MTE3", 0)


@npu_kernel(mix=(1, 2))
def k_read_without_wait(ctx):
    gm = WS.setdefault("ws", ws())
    if ctx.is_aic():
        _aic_write(ctx, gm)
        ctx.cross_core_set_flag(2, "PIPE_FIX", 0)
    else:
        _aiv_read(ctx, gm)                           # reads before its wait: nothing orders it
        ctx.cross_core_wait_flag(0)


@npu_kernel(mix=(1, 2))
def k_flag_on_wrong_pipe(ctx):
    gm = WS.setdefault("ws", ws())
    if ctx.is_aic():
        _aic_write(ctx, gm)
        ctx.cross_core_set_flag(2, "PIPE_MTE2", 0)  # reports MTE2's work, not the Fixpipe's
    else:
        ctx.cross_core_wait_flag(0)
        _aiv_read(ctx, gm)


@npu_kernel(mix=(1, 2))
def k_counter_overflow(ctx):
    if ctx.is_aic():
        for _ in range(16):
            ctx.cross_core_set_flag(2, "PIPE_FIX", 0)
    else:
        for _ in range(16):
            ctx.cross_core_wait_flag(0)


@npu_kernel(mix=(1, 2))
def k_set_never_waited(ctx):
    if ctx.is_aic():
        ctx.cross_core_set_flag(2, "PIPE_FIX", 5)


@npu_kernel(mix=(1, 2))
def k_syncall_too_many_blocks(ctx):
    ctx.sync_all(False)


@npu_kernel(mix=(1, 2))
def k_syncall_aiv_only_on_aic(ctx):
    ctx.sync_all(True)


@npu_kernel(mix=(1, 2))
def k_syncall_and_flag_12(ctx):
    ctx.sync_all(False)
    if ctx.is_aic():
        ctx.cross_core_set_flag(2, "PIPE_FIX", 12)


@npu_kernel(mix=(1, 2))
def k_mode1_on_aic(ctx):
    if ctx.is_aic():
        ctx.cross_core_set_flag(1, "PIPE_FIX", 0)


MIX_CATALOGUE = [
    Illegal("wait-without-set", "CrossCoreWaitFlag必须与CrossCoreSetFlag接口配合使用", SYNC + "CrossCoreWaitFlag(ISASI).md",
            k_wait_without_set, 1, SimulationError, r"kernel hangs: the AIV0 of AI core group 0 waits on CrossCoreWaitFlag\(3\)"),
    Illegal("aic-waits-one-aiv", "mode 2 from the AIVs releases the AIC when both AIVs set",
            SYNC + "CrossCoreSetFlag(ISASI).md", k_aic_waits_one_aiv, 1, SimulationError,
            r"hangs: the AIC of AI core group 0 waits on CrossCoreWaitFlag\(1\).*only when both AIVs set"),
    Illegal("flag-id-16", "flagId 0..15 (the hardware keeps the low 4 bits)", SYNC + "CrossCoreSetFlag(ISASI).md",
            k_flag_id_16, 1, AscendCRuleError, r"flagId 16 is out of range.*low 4 bits \(flagId 0\)"),
    Illegal("set-on-pipe-s", "a set names PIPE_V/M/MTE1/MTE2/MTE3/FIX, not PIPE_S / PIPE_ALL",
            SYNC + "CrossCoreSetFlag(ISASI).md", k_set_on_pipe_s, 1, AscendCRuleError, r"PIPE_S and PIPE_ALL are not supported"),
    Illegal("mode-4-on-a2", "mode 4 exists on the 950PR/DT only", SYNC + "CrossCoreSetFlag(ISASI).md", k_mode_4, 1,
            CapabilityError, r"mode 4 .*950PR/950DT only"),
    Illegal("mmad-on-aiv", "the AIV of a mixed kernel has no cube",
            "docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md", k_mmad_on_aiv, 1, CapabilityError,
            r"Mmad runs on the cube core \(AIC\)"),
    Illegal("cross-core-in-aiv-only", "AIV_ONLY / AIC_ONLY kernels have no sync module", SYNC + "CrossCoreSetFlag(ISASI).md",
            k_cross_core_in_vector_kernel, 1, CapabilityError, r"needs a mixed kernel.*__mix__\(1, 2\)"),
    Illegal("read-without-wait", "the AIV reads the workspace only after the AIC's flag",
            SYNC + "CrossCoreSetFlag(ISASI).md", k_read_without_wait, 1, RaceError,
            r"cross-core race on GM buffer 'workspace'.*AIC of AI core group 0 writes them \(Fixpipe on FIX.*AIV0 .* reads"),
    Illegal("flag-on-wrong-pipe", "the set reports the named pipe's work: PIPE_FIX after a Fixpipe",
            SYNC + "CrossCoreSetFlag(ISASI).md", k_flag_on_wrong_pipe, 1, RaceError,
            r"cross-core race on GM buffer 'workspace'.*CrossCoreSetFlag<2, PIPE_FIX>"),
    Illegal("counter-overflow", "a flag's counter holds 0..15", SYNC + "CrossCoreSetFlag(ISASI).md", k_counter_overflow, 1,
            SimulationError, r"would count past 15"),
    Illegal("set-never-waited", "set and wait come in pairs", SYNC + "CrossCoreSetFlag(ISASI).md", k_set_never_waited, 1,
            SimulationError, r"cross-core flag 5 .* set 1 more time"),
    Illegal("syncall-block-dim", "SyncAll: numBlocks <= the cores", SYNC + "SyncAll.md", k_syncall_too_many_blocks, 25,
            SimulationError, r"SyncAll with block_dim 25 > 24 AI cores.*hangs"),
    Illegal("syncall-aiv-only-in-mix", "SyncAll<true> in a mix kernel syncs the AIVs only", SYNC + "SyncAll.md",
            k_syncall_aiv_only_on_aic, 1, AscendCRuleError, r"SyncAll<true>\(\) on the AIC"),
    Illegal("syncall-flag-clash", "SyncAll uses flag ids 11..14", SYNC + "CrossCoreSetFlag(ISASI).md", k_syncall_and_flag_12,
            1, AscendCRuleError, r"flag ids 11..14 internally.*\[12\]"),
    Illegal("mode-1-on-aic", "mode 1 is between the two AIVs", SYNC + "CrossCoreSetFlag(ISASI).md", k_mode1_on_aic, 1,
            AscendCRuleError, r"mode 1 synchronises the two AIVs"),
]


def test_the_legal_mixed_program_runs():
    WS.clear()
    tl = launch(k_legal, 1, hw=B910)
    assert tl.launches[0].kernel_type == "mix_aic_1_2"
    ev = tl.events()
    assert {"FIX", "MTE2"} <= set(ev["pipe"])
    # the AIVs' read starts after the AIC's Fixpipe completed plus the flag hop
    fix_end = ev[ev["pipe"] == "FIX"].ready_us.max()
    assert ev[(ev["pipe"] == "MTE2") & (ev.core >= 24)].start_us.min() > fix_end


def test_catalogue_is_big_and_ids_are_unique():
    assert len(MIX_CATALOGUE) >= 12
    assert len({c.id for c in MIX_CATALOGUE}) == len(MIX_CATALOGUE)


@pytest.mark.parametrize("case", MIX_CATALOGUE, ids=[c.id for c in MIX_CATALOGUE])
def test_illegal_mixed_program_is_caught_with_a_lesson(case: Illegal):
    WS.clear()
    with pytest.raises(case.error) as info:
        launch(case.kernel, case.block_dim, hw=B910)
    msg = str(info.value)
    assert re.search(case.match, msg, re.S), f"{case.id}: message does not match {case.match!r}:\n{msg}"
    assert ".md" in msg


@pytest.mark.parametrize("case", MIX_CATALOGUE[:4], ids=[c.id for c in MIX_CATALOGUE[:4]])
def test_timing_only_catches_them_too(case: Illegal):
    WS.clear()
    with pytest.raises(case.error):
        launch(case.kernel, case.block_dim, hw=B910, timing_only=True)


def test_mixed_kernel_refused_on_310p():
    with pytest.raises(CapabilityError, match="MIX_AIC_1_2"):
        launch(k_legal, 1, hw="ascend-310p3")


@pytest.mark.skipif(not MIRROR.exists(), reason="asc-devkit mirror not present (CI has none)")
def test_every_rule_cites_a_real_page():
    for case in MIX_CATALOGUE:
        done = subprocess.run(["git", "-C", str(MIRROR), "cat-file", "-e", f"HEAD:{case.page}"], capture_output=True)
        assert done.returncode == 0, f"{case.id}: {case.page}"
