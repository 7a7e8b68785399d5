"""Write docs/api_cheatsheet.md: the API cheat sheet, each Python call next to its Ascend C call,
grouped by topic, generated from ``npu_lab.lang.ASCEND_C_API`` (via ``api_table()``).

    python scripts/gen_api_doc.py           # rewrite docs/api_cheatsheet.md
    python scripts/gen_api_doc.py --check   # exit 1 when the file is stale

tests/test_ascend_c_api.py runs :func:`render` and compares, so the sheet never drifts from the map.
Every ``ASCEND_C_API`` entry must belong to exactly one group of :data:`GROUPS`: a new entry
without a group makes :func:`render` (and so that test) fail, naming it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "api_cheatsheet.md"

#: (anchor, title, when to use it, Ascend C names in the order shown)
GROUPS = [
    ("where-am-i", "Where am I: block and tiling",
     "once, at the top of every kernel: which block this is, how many there are, and the host's tiling struct.",
     ["GetBlockIdx", "GetBlockNum", "REGISTER_TILING_DEFAULT", "GET_TILING_DATA", "GET_TILING_DATA_WITH_STRUCT"]),
    ("memory-and-queues", "Memory and queues",
     "carve the Unified Buffer: a `TQue` for data handed between two pipes (it syncs them), a `TBuf` for scratch "
     "(you sync it); `GetValue`/`SetValue` for scalar access (pipe S, slow).",
     ["TPipe::InitBuffer", "TQue", "AllocTensor", "EnQue", "DeQue", "FreeTensor", "TBuf", "TBuf::Get",
      "ReinterpretCast", "GetValue", "SetValue", "GlobalTensor::SetGlobalBuffer", "TPipe::Init", "TPipe::Destroy",
      "TPipe::Reset", "GetUserWorkspace", "bfloat16_t"]),
    ("sync", "Sync",
     "whenever two pipes share a buffer that no queue orders: set a flag after the producer, wait for it before the "
     "consumer (`HardEvent` SRC_DST; in a TPipe kernel the id comes from `AllocEventID` (held) or `FetchEventID` (at once)); a barrier only when everything must drain.",
     ["SetFlag", "WaitFlag", "PipeBarrier", "GetTPipePtr", "AllocEventID", "ReleaseEventID", "FetchEventID"]),
    ("data-movement", "Data movement",
     "GM <-> UB by DMA (MTE2 in, MTE3 out): `DataCopy` for whole 32-byte blocks, `DataCopyPad` for anything else "
     "(byte lengths, padding); `Copy` moves data inside the UB on the vector pipe.",
     ["DataCopy", "DataCopyParams", "DataCopyPad", "DataCopyExtParams", "DataCopyPadExtParams", "Copy",
      "CopyRepeatParams", "SetAtomicAdd", "SetAtomicNone", "DisableDmaAtomic"]),
    ("vector", "Vector arithmetic",
     "elementwise work on the vector unit, 256 bytes per repeat: the tensor form with a count, or the level-0 form "
     "with mask, repeat time and strides.",
     ["Add", "Sub", "Mul", "Div", "Max", "Min", "Adds", "Muls", "Maxs", "Mins", "Exp", "Relu", "Abs", "Sqrt",
      "Ln", "Reciprocal", "ShiftLeft", "Cast", "SetDeqScale", "Transpose", "BinaryRepeatParams", "UnaryRepeatParams",
      "SetMaskCount", "SetMaskNorm", "SetVectorMask"]),
    ("fill-and-broadcast", "Fill and broadcast",
     "constants, index ramps, and one value per row broadcast over a block (`Brcb`).",
     ["Duplicate", "CreateVecIndex", "ArithProgression", "Brcb", "BrcbRepeatParams"]),
    ("compare-select", "Compare, select, gather",
     "branch-free decisions: `Compare` writes a bit mask, `Select` picks by it, `GatherMask` keeps the selected "
     "elements (e.g. splits Sort32's (score, index) pairs).",
     ["Compare", "Compares", "Select", "GatherMask", "GatherMaskParams", "Gather"]),
    ("reductions", "Reductions",
     "a max, min or sum per repeat (`WholeReduce*`, with the index for max/min) or over a whole tensor (`Reduce*`).",
     ["WholeReduceMax", "WholeReduceMin", "WholeReduceSum", "ReduceMax", "ReduceSum"]),
    ("sort", "Sort",
     "top-K the way CANN's operators do it: `Sort32` sorts 32 (score, index) pairs per repeat, `MrgSort` merges "
     "up to four sorted lists.",
     ["Sort32", "MrgSort", "MrgSortSrcList", "MrgSort4Info"]),
    ("debugging", "Debugging on the device",
     "print from the kernel (`printf`, with the block index), stop it on a broken invariant (`ascendc_assert`), "
     "or dump a tensor (`DumpTensor`); they print in full runs only and cost time in both.",
     ["printf", "ascendc_assert", "DumpTensor"]),
    ("cube", "The cube core: matmul",
     "on a cube core (AIC): GM -> L1 with `DataCopy` + `Nd2NzParams` (ND -> NZ, MTE2), L1 -> L0A/L0B with `LoadData` "
     "(MTE1; `ifTranspose` for a half B), `Mmad` into L0C (M; fp32 accumulation), L0C -> GM with `Fixpipe` (FIX; "
     "NZ -> ND, fp32 -> fp16 by `quantPre`); `SetAtomicAdd` (under data movement) makes Fixpipe add into GM too (K-split).",
     ["Nd2NzParams", "LoadData", "LoadData2DParams", "Mmad", "MmadWithSparse", "MmadParams", "Fixpipe", "FixpipeParamsV220",
      "QuantMode_t"]),
    ("cross-core", "Cube + vector in one kernel",
     "a `__mix__(1, 2)` kernel (`@npu_kernel(mix=(1, 2))`, KERNEL_TYPE_MIX_AIC_1_2) runs on one AIC and its two AIVs per "
     "block; `if ASCEND_IS_AIC` / `ASCEND_IS_AIV` pick the side, data goes through a GM workspace, "
     "`CrossCoreSetFlag<mode, pipe>(id)` / `CrossCoreWaitFlag(id)` order it (mode 2: AIC <-> both AIVs; ids 0..15), "
     "`SyncAll<false>()` synchronises every core of the launch.",
     ["ASCEND_IS_AIC", "ASCEND_IS_AIV", "GetSubBlockIdx", "GetTaskRatio", "CrossCoreSetFlag", "CrossCoreWaitFlag",
      "SyncAll"]),
]

HEADER = """\
# API cheat sheet: Python beside Ascend C

<!-- generated by scripts/gen_api_doc.py from npu_lab.lang.ASCEND_C_API; do not edit by hand -->

Every call a course kernel can make, grouped by what it is for, with its Python spelling (kernel methods
live on `ctx`, queue methods on a `TQue`, ...), the Ascend C call and C++ signature it stands for, and its
reference page in CANN's `asc-devkit` repository. Pages under `docs/zh/api/` are the CANN 9.1 documentation;
pages under `docs/api/` are the CANN 8.x / 9.0 ones (before the 9.1 renames, e.g. `WholeReduceMax` became
`ReduceRepeat`). The same arguments go in the same order in both languages; units (elements, bytes, 32-byte
blocks) are the C++ ones. Words are explained in the [glossary](glossary.md).

Two `ctx` methods are simulator annotations with no C++ call behind them: `ctx.scalar(...)` charges scalar
arithmetic that C++ writes as plain code, and `ctx.tile_loop(n)` is a `for` loop the timing-only mode may
fast-forward.

"""


def _cell(text: str) -> str:
    """One markdown table cell: pipes escaped, no line breaks."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def check_groups(names) -> None:
    """Raise ValueError unless every name of ``names`` is in exactly one group and every grouped
    name is in ``names``."""
    grouped = [n for *_, members in GROUPS for n in members]
    twice = sorted({n for n in grouped if grouped.count(n) > 1})
    missing = sorted(set(names) - set(grouped))
    unknown = sorted(set(grouped) - set(names))
    problems = []
    if missing:
        problems.append(f"ASCEND_C_API entries in no group of scripts/gen_api_doc.py GROUPS: {missing}")
    if unknown:
        problems.append(f"GROUPS names calls ASCEND_C_API does not have: {unknown}")
    if twice:
        problems.append(f"calls in more than one group: {twice}")
    if problems:
        raise ValueError("; ".join(problems))


def render() -> str:
    """The whole markdown file, from the current ``ASCEND_C_API``."""
    sys.path.insert(0, str(ROOT))
    from npu_lab.lang import api_table

    table = api_table().set_index("Ascend C")
    check_groups(table.index)
    parts = [HEADER, "Topics: " + " · ".join(f"[{title}](#{anchor})" for anchor, title, *_ in GROUPS) + "\n"]
    for anchor, title, when, members in GROUPS:
        parts.append(f'\n<a id="{anchor}"></a>\n\n## {title}\n\n**When to use:** {when}\n\n'
                     "| Python | Ascend C | C++ signature | reference page |\n|---|---|---|---|\n")
        for name in members:
            row = table.loc[name]
            parts.append(f"| `{_cell(row['Python'])}` | `{_cell(name)}` | `{_cell(row['C++ signature'])}` | "
                         f"`{_cell(row['reference page'])}` |\n")
    parts.append(f"\n{len(table)} calls in {len(GROUPS)} groups.\n")
    return "".join(parts)


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{_shown(OUT)} is stale; run python scripts/gen_api_doc.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {_shown(OUT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
