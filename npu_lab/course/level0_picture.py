"""Which elements a level-0 vector instruction touches, drawn (notebook 02's interlude; used again in 06).

A level-0 call — ``ctx.sub(dst, src0, src1, mask, repeat_time, BinaryRepeatParams(...))``, the
Ascend C ``Sub(dst, src0, src1, mask, repeatTime, repeatParams)`` — runs ``repeat_time`` repeats of
up to 256 bytes each. In repeat r, lane l of an operand with block stride ``blk`` and repeat stride
``rep`` (both in 32-byte blocks) is element ``r·rep·B + (l // B)·blk·B + l % B`` of the tensor, with
B = 32 / sizeof(T) elements per block; ``mask`` says which lanes are on (an int: the first ``mask``
lanes, normal mode; a pair ``[mask_lo, mask_hi]``: bit i switches lane i on, bit mode).

The offsets are **not** recomputed here: :func:`level0_footprint` asks the lang layer for them
(:func:`npu_lab.lang.vector.lanes_of` and the footprint the simulator indexes the operands with),
so the picture is what the simulator does with the same arguments. Counter mode
(``SetMaskCount``: the mask counts elements over all repeats) is modelled for ``GatherMask`` only
(:mod:`npu_lab.lang.select`), so it is not drawn here.

Sources: asc-devkit docs/zh/api/SIMD-API/基础API/矢量计算/通用说明/ (the repeat parameters, the mask
modes) and 双目指令/Sub.md.
"""

from __future__ import annotations

import html
import numbers
from dataclasses import dataclass

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from ..lang.vector import (BinaryRepeatParams, UnaryRepeatParams, _footprint as _lang_footprint,
                           lanes_of)
from .explorers._base import _Explorer
from .figure_widget import ExplorerFigureWidget

__all__ = ["Level0Footprint", "level0_footprint", "level0_figure", "Level0Explorer", "BINARY", "UNARY"]

BLOCK_BYTES = 32
REPEAT_BYTES = 256
MAX_REPEAT = 255
#: level-0 instructions with two sources (BinaryRepeatParams) and with one (UnaryRepeatParams)
BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")
UNARY = ("Exp", "Abs", "Relu", "Ln", "Sqrt", "Adds", "Muls")
_DTYPES = {"float32": np.float32, "float16": np.float16, "int32": np.int32}


@dataclass(frozen=True)
class Level0Footprint:
    """The elements one level-0 instruction touches. ``offsets[operand]``: int array [repeat_time,
    lanes on] of element offsets from the operand's address (operands ``dst``, ``src0`` and, for a
    binary instruction, ``src1``); ``lanes``: the lanes the mask switches on."""

    instruction: str
    dtype: np.dtype
    mask: object
    repeat_time: int
    strides: dict
    lanes: tuple
    offsets: dict

    @property
    def per_block(self) -> int:
        """Elements per 32-byte block."""
        return BLOCK_BYTES // self.dtype.itemsize

    def last_element(self, operand: str = "dst") -> int:
        """The largest element offset ``operand`` reaches (-1 when nothing is touched)."""
        off = self._operand(operand)
        return int(off.max()) if off.size else -1

    def touched(self, operand: str = "dst") -> np.ndarray:
        """The distinct element offsets of ``operand``, sorted."""
        return np.unique(self._operand(operand))

    def _operand(self, operand: str) -> np.ndarray:
        if operand not in self.offsets:
            raise ValueError(f"{self.instruction} has operands {list(self.offsets)}, not {operand!r}")
        return self.offsets[operand]


def _check_params(instruction, params):
    if instruction in BINARY:
        if not isinstance(params, BinaryRepeatParams):
            raise TypeError(f"{instruction} is a binary instruction: its level-0 form takes a BinaryRepeatParams"
                            f"(dstBlkStride, src0BlkStride, src1BlkStride, dstRepStride, src0RepStride, "
                            f"src1RepStride), got {type(params).__name__}")
        return {"dst": (params.dst_blk_stride, params.dst_rep_stride),
                "src0": (params.src0_blk_stride, params.src0_rep_stride),
                "src1": (params.src1_blk_stride, params.src1_rep_stride)}
    if instruction in UNARY:
        if not isinstance(params, UnaryRepeatParams):
            raise TypeError(f"{instruction} is a unary instruction: its level-0 form takes a UnaryRepeatParams"
                            f"(dstBlkStride, srcBlkStride, dstRepStride, srcRepStride), got {type(params).__name__}")
        return {"dst": (params.dst_blk_stride, params.dst_rep_stride),
                "src0": (params.src_blk_stride, params.src_rep_stride)}
    raise ValueError(f"unknown level-0 instruction {instruction!r}; drawn here: {', '.join(BINARY + UNARY)}")


def level0_footprint(instruction: str = "Add", dtype="float32", mask=64, repeat_time: int = 1,
                     params=None) -> Level0Footprint:
    """The elements ``instruction(dst, src0[, src1], mask, repeat_time, params)`` touches, per
    operand, for operands of ``dtype`` (``"float32"``, ``"float16"``, ``"int32"`` or a numpy dtype).
    ``params`` defaults to contiguous operands (block stride 1, repeat stride 8). A mask or stride
    the hardware refuses raises the lang layer's ``AscendCRuleError`` (the same message a kernel
    would get)."""
    if not isinstance(instruction, str):
        raise TypeError(f"instruction must be a name such as 'Sub', got {instruction!r}")
    if params is None:
        params = BinaryRepeatParams() if instruction in BINARY else UnaryRepeatParams()
    strides = _check_params(instruction, params)
    try:
        dt = np.dtype(_DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype)
    except TypeError:
        raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {dtype!r}") from None
    if dt not in [np.dtype(d) for d in _DTYPES.values()]:
        raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {dt}")
    if isinstance(repeat_time, bool) or not isinstance(repeat_time, numbers.Integral) \
            or not 0 <= repeat_time <= MAX_REPEAT:
        raise ValueError(f"repeat_time must be a whole number 0..{MAX_REPEAT} (uint8 in Ascend C), got {repeat_time!r}")
    lanes = lanes_of(mask, dt.itemsize)                       # the lang's mask rules (normal, bit)
    offsets = {}
    for operand, (blk, rep) in strides.items():
        for name, value, hi in (("block", blk, 255), ("repeat", rep, 255)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= hi:
                raise ValueError(f"{operand} {name} stride must be a whole number 0..{hi} (32-byte blocks), "
                                 f"got {value!r}")
        off, _last = _lang_footprint(tuple(lanes), dt.itemsize, int(repeat_time), int(blk), int(rep))
        offsets[operand] = np.asarray(off).reshape(int(repeat_time), len(lanes))
    return Level0Footprint(instruction, dt, mask, int(repeat_time), strides, tuple(lanes), offsets)


# ---------------------------------------------------------------------------- the picture
def _grid(fp: Level0Footprint, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(z, lane): per operand row and element column the repeat that touches it and the lane that
    does (NaN / -1: none). The hover text is built in the browser from these and the static block
    numbers (``customdata``), so a slider move sends two small integer grids, not 1 536 strings."""
    z = np.full((len(fp.offsets), width), np.nan)
    lane_of = np.full((len(fp.offsets), width), -1, dtype=np.int64)
    lanes = np.asarray(fp.lanes)
    for row, off in enumerate(fp.offsets.values()):
        for r in range(off.shape[0]):
            keep = off[r] < width
            z[row, off[r][keep]] = r
            lane_of[row, off[r][keep]] = lanes[keep]
    return z, lane_of


def _plotly_z(z: np.ndarray) -> list:
    """``z`` (whole repeat numbers) as ints with None for NaN: a heatmap gap. A NaN in a widget's
    message is not JSON (the front end logs 'Out of range float values are not JSON compliant')."""
    return [[None if v != v else int(v) for v in row] for row in z.tolist()]


def _plotly_lanes(lane_of: np.ndarray) -> list:
    return [[None if v < 0 else v for v in row] for row in lane_of.tolist()]


def _blocks(fp: Level0Footprint, width: int) -> list:
    return [[e // fp.per_block for e in range(width)] for _ in fp.offsets]


#: hover of one element: operand[element] · block · repeat, lane (from z, text = lane, customdata = block)
_HOVER = "%{y}[%{x}] \u00b7 block %{customdata} \u00b7 repeat %{z}, lane %{text}<extra></extra>"


def _title(fp: Level0Footprint) -> str:
    blk = ", ".join(f"{op} blk {b} rep {r}" for op, (b, r) in fp.strides.items())
    mask = (f"[{fp.mask[0]:#x}, {fp.mask[1]:#x}]" if isinstance(fp.mask, (list, tuple)) else f"{fp.mask}")
    return f"{fp.instruction}: mask {mask}, repeatTime {fp.repeat_time} ({blk})"


#: blocks between two labelled ticks of the x axis: a label on every block (64 of them across the
#: explorer's 512 elements) made each slider move's redraw 3x slower in the browser (plotly lays
#: every tick label out again on a data change); the block boundaries stay as minor grid lines
_BLOCKS_PER_LABEL = 8


def _x_axis(fp: Level0Footprint, width: int) -> dict:
    """Elements along x: a grey line at every 32-byte block boundary (minor grid), a number every
    :data:`_BLOCKS_PER_LABEL` blocks (every block in a picture of at most that many)."""
    blocks = -(-width // fp.per_block)
    label_every = fp.per_block * (1 if blocks <= _BLOCKS_PER_LABEL else _BLOCKS_PER_LABEL)
    return dict(title=f"element from the operand's address ({fp.dtype.name}; a block = {fp.per_block} elements; "
                      f"grey lines: block boundaries)",
                tick0=0, dtick=label_every, showgrid=False, zeroline=False,
                minor=dict(tick0=-0.5, dtick=fp.per_block, showgrid=True, gridcolor="#888", ticklen=0),
                range=[-0.5, width - 0.5])


def level0_figure(fp: Level0Footprint, width: int | None = None, *, widget: bool = False):
    """A picture of ``fp``: one row per operand, one cell per element (grey lines every 32-byte
    block), coloured by the repeat that touches it, blank where nothing does. ``width``: elements
    drawn (default: up to the last one touched, in whole blocks, at least one repeat's worth)."""
    if not isinstance(fp, Level0Footprint):
        raise TypeError(f"level0_figure draws a Level0Footprint (level0_footprint(...)), got {type(fp).__name__}")
    per_repeat = REPEAT_BYTES // fp.dtype.itemsize
    if width is None:
        last = max(fp.last_element(op) for op in fp.offsets)
        width = max(per_repeat, -(-(last + 1) // fp.per_block) * fp.per_block)
    z, lane_of = _grid(fp, int(width))
    cls = ExplorerFigureWidget if widget else go.Figure
    return cls(
        data=[go.Heatmap(z=_plotly_z(z), text=_plotly_lanes(lane_of), customdata=_blocks(fp, int(width)),
                         x=np.arange(width, dtype=np.int32), y=list(fp.offsets), colorscale="Viridis",
                         zmin=0, zmax=max(1, fp.repeat_time - 1), xgap=1, ygap=4, hoverongaps=False,
                         hovertemplate=_HOVER, colorbar=dict(title="repeat", dtick=1))],
        layout=dict(title=_title(fp), height=260, margin=dict(l=10, r=10, t=50, b=40),
                    xaxis=_x_axis(fp, int(width)),
                    yaxis=dict(autorange="reversed")))


class Level0Explorer(_Explorer):
    """Sliders for a level-0 ``Sub`` (or another binary instruction) on float32 operands:
    ``.repeat_time``, ``.mask`` (lanes on, normal mode) or ``.pattern`` (bit mode: even / odd
    lanes, the first lane of each block), and each operand's block and repeat stride. ``.figure``
    redraws in place (one ``batch_update``, fixed width); ``.status`` says how far each operand
    reaches and how many distinct elements it touches."""

    WIDTH = 512        # elements drawn (64 blocks of float32): the layout never changes
    PATTERNS = {"normal (first mask lanes)": None, "bit: even lanes": "even", "bit: odd lanes": "odd",
                "bit: lane 0 of each block": "block0"}

    def __init__(self, instruction: str = "Sub", mask: int = 64, repeat_time: int = 2,
                 params: BinaryRepeatParams | None = None):
        params = params or BinaryRepeatParams()
        self.instruction = instruction
        _check_params(instruction, params)
        if instruction not in BINARY:
            raise ValueError(f"the explorer draws a binary instruction ({', '.join(BINARY)}), got {instruction!r}")
        self.repeat_time = W.IntSlider(value=repeat_time, min=1, max=8, description="repeatTime")
        self.mask = W.IntSlider(value=mask, min=1, max=64, description="mask (lanes)")
        self.pattern = W.Dropdown(options=list(self.PATTERNS.items()), value=None, description="mask mode")
        sliders = {}
        for op, (blk, rep) in _check_params(instruction, params).items():
            sliders[f"{op}_blk"] = W.IntSlider(value=blk, min=0, max=4, description=f"{op} blk")
            sliders[f"{op}_rep"] = W.IntSlider(value=rep, min=0, max=16, description=f"{op} rep")
        for name, slider in sliders.items():
            setattr(self, name, slider)
        self.status = W.HTML()
        self.fp = level0_footprint(instruction, "float32", mask, repeat_time, params)
        self.figure = level0_figure(self.fp, self.WIDTH, widget=True)
        self.figure.layout.title = None
        self.figure.layout.margin.t = 10
        self.widget = W.VBox([W.HBox([self.repeat_time, self.mask, self.pattern]),
                              W.HBox([sliders["dst_blk"], sliders["src0_blk"], sliders["src1_blk"]]),
                              W.HBox([sliders["dst_rep"], sliders["src0_rep"], sliders["src1_rep"]]),
                              self.status, self.figure])
        self._watch(self.repeat_time, self.mask, self.pattern, *sliders.values())
        self.update()

    def _mask(self):
        kind = self.pattern.value
        if kind is None:
            return self.mask.value
        bits = {"even": range(0, 64, 2), "odd": range(1, 64, 2), "block0": range(0, 64, 8)}[kind]
        return [sum(1 << b for b in bits), 0]

    def update(self) -> None:
        params = BinaryRepeatParams(self.dst_blk.value, self.src0_blk.value, self.src1_blk.value,
                                    self.dst_rep.value, self.src0_rep.value, self.src1_rep.value)
        self.fp = level0_footprint(self.instruction, "float32", self._mask(), self.repeat_time.value, params)
        z, lane_of = _grid(self.fp, self.WIDTH)
        zmax = max(1, self.fp.repeat_time - 1)
        with self.figure.batch_update():     # only what changed is sent (plotly compares each value)
            trace = self.figure.data[0]
            trace.z, trace.text = _plotly_z(z), _plotly_lanes(lane_of)
            if trace.zmax != zmax:
                trace.zmax = zmax
        parts = []
        for op in self.fp.offsets:
            n, last = len(self.fp.touched(op)), self.fp.last_element(op)
            total = self.fp.offsets[op].size
            note = f" (each read {total // n}×: a broadcast)" if n < total else ""
            beyond = " — beyond the picture" if last >= self.WIDTH else ""
            parts.append(f"<b>{op}</b> up to element {last}{beyond}, {n} distinct{note}")
        self.mask.disabled = self.pattern.value is not None
        self.status.value = "; ".join(parts) + f" · {html.escape(_title(self.fp))}"
