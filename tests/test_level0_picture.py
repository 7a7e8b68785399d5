"""npu_lab.course.level0_picture: the elements a level-0 instruction touches are the ones the
simulator really writes and reads, and the explorer redraws in place."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab.course.level0_picture import Level0Explorer, level0_figure, level0_footprint
from npu_lab.lang import (AscendCRuleError, BinaryRepeatParams, GlobalTensor, TBuf, TPosition,
                          UnaryRepeatParams, launch, npu_kernel)

CASES = [
    (32, 3, (1, 1, 1, 16, 8, 8)),                 # notebook 02's exercise
    (64, 2, (1, 1, 0, 8, 8, 1)),                  # the Softmax's broadcast
    ([0x5555555555555555, 0], 2, (2, 1, 1, 16, 8, 8)),
    (8, 4, (0, 1, 1, 1, 2, 3)),
]


def _run_add(mask, repeat, strides, n=1024):
    """Run a real level-0 Add on src0 = 1, src1 = index; return dst (NaN where not written)."""
    out = {}

    @npu_kernel
    def kernel(ctx, x_gm):
        bufs = [TBuf(TPosition.VECCALC) for _ in range(3)]
        for b, name in zip(bufs, ("dst", "src0", "src1")):
            ctx.pipe.init_buffer(b, n * 4, name=name)
        dst, a, b = (buf.get(np.float32) for buf in bufs)
        dst.data[:] = np.nan
        a.data[:] = 1.0
        b.data[:] = np.arange(n, dtype=np.float32)
        ctx.add(dst, a, b, mask, repeat, BinaryRepeatParams(*strides))
        out["dst"] = dst.data.copy()

    launch(kernel, 1, GlobalTensor.from_array(np.zeros(8, np.float32), "x"), hw="ascend-910b2")
    return out["dst"]


@pytest.mark.parametrize("mask, repeat, strides", CASES)
def test_footprint_is_what_the_simulator_writes_and_reads(mask, repeat, strides):
    fp = level0_footprint("Add", "float32", mask, repeat, BinaryRepeatParams(*strides))
    dst = _run_add(mask, repeat, strides)
    written = np.flatnonzero(~np.isnan(dst))
    assert np.array_equal(written, fp.touched("dst"))
    # each written element is 1 + the src1 element the same (repeat, lane) read
    for d, s1 in zip(fp.offsets["dst"].ravel(), fp.offsets["src1"].ravel()):
        assert dst[d] == 1.0 + s1


def test_the_exercise_answer_and_the_broadcast():
    fp = level0_footprint("Add", "float32", 32, 3, BinaryRepeatParams(1, 1, 1, 16, 8, 8))
    assert fp.last_element("dst") == 2 * 16 * 8 + 31
    bcast = level0_footprint("Sub", "float32", 64, 2, BinaryRepeatParams(1, 1, 0, 8, 8, 1))
    assert list(bcast.touched("src1")) == list(range(16))       # one block per row, read 8 times


def test_unary_and_float16():
    fp = level0_footprint("Exp", "float16", 128, 1, UnaryRepeatParams(1, 2, 8, 8))
    assert set(fp.offsets) == {"dst", "src0"} and fp.per_block == 16
    assert fp.last_element("src0") == 7 * 2 * 16 + 15


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(instruction="Add", mask=65), AscendCRuleError, "wider than one repeat"),
    (dict(instruction="Add", mask=[1, 1]), AscendCRuleError, "mask_hi must be 0"),
    (dict(instruction="Nope"), ValueError, "unknown level-0 instruction"),
    (dict(instruction="Add", repeat_time=256), ValueError, "0..255"),
    (dict(instruction="Add", params=UnaryRepeatParams()), TypeError, "BinaryRepeatParams"),
    (dict(instruction="Add", params=BinaryRepeatParams(1, 1, 1, 300, 8, 8)), ValueError, "repeat stride"),
    (dict(instruction="Add", dtype="int8"), ValueError, "dtype"),
])
def test_bad_arguments_say_what_is_wrong(kwargs, error, words):
    with pytest.raises(error, match=words):
        level0_footprint(**kwargs)


def test_figure_and_explorer_redraw_in_place():
    fig = level0_figure(level0_footprint("Add", "float32", 32, 3, BinaryRepeatParams(1, 1, 1, 16, 8, 8)))
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z.shape[0] == 3 and np.nanmax(z) == 2 and np.isnan(z[0, 32])     # the gap after 4 blocks
    e = Level0Explorer()
    layout = e.figure.layout.to_plotly_json()
    e.set(repeat_time=5, src1_blk=0)
    assert e.fp.repeat_time == 5 and "broadcast" in e.status.value
    assert e.figure.layout.to_plotly_json() == layout                       # no re-layout
    assert e.last_update_s < 0.1
    e.set(pattern="odd")
    assert e.mask.disabled and len(e.fp.lanes) == 32
