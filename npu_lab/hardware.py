"""The hardware model: every number the simulator uses, with its unit and its provenance.

A :class:`HardwareSpec` is a frozen dataclass. Field names carry their unit (``_bytes``, ``_gbps``
= GB/s, ``_cycles``, ``_us``, ``_ghz``). Each preset records, per field, where the number came from:

* ``datasheet``  — published by the vendor (product pages, white papers) and named in the note;
* ``vendor-doc`` — stated in the vendor's Ascend C documentation (asc-devkit ``docs/zh/api/...``,
  e.g. the per-instruction rates of ``附录/Vector指令理论性能汇总.md``, or the architecture pages
  ``docs/zh/guide/.../架构规格/NPU架构版本2201.md``), the page named in the note;
* ``vendor-guide`` — a number or shape from the vendor's performance guide (asc-devkit
  ``docs/zh/guide/算子实践参考/SIMD算子性能优化/``), the page named in the note;
* ``vendor-config`` — the SoC configuration files that ship with CANN;
* ``measured``   — a measurement someone reported (the note says who and where) that the sources
  in reach cannot confirm;
* ``assumed``    — nobody publishes it: a plausible guess, labelled so the learner knows (a figure
  the vendor uses only as a hypothetical illustration, or publishes for another chip, is assumed
  here; the note says so);
* ``fitted``     — least-squares fitted to published measurements (see :mod:`npu_lab.fit`);
* ``convention`` — a modelling choice rather than a measurement.

The presets: ``ascend-910b2`` and ``ascend-310p3`` (docs/cost_model.md, docs/cost_model_system.md). A custom chip comes from JSON
(:meth:`HardwareSpec.from_json`) or from a what-if change of a preset (:meth:`HardwareSpec.replace`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

PROVENANCE_KINDS = ("datasheet", "vendor-doc", "vendor-guide", "vendor-config", "measured", "assumed", "fitted",
                    "convention")
#: What each kind means, in one line (the welcome notebook prints the ones the presets use).
PROVENANCE_MEANINGS = {
    "datasheet": "published by the vendor (product pages, white papers)",
    "vendor-doc": "stated in the vendor's Ascend C documentation (API pages, architecture pages, instruction-rate tables)",
    "vendor-guide": "stated (as a figure or a shape) in the vendor's Ascend C performance guide",
    "vendor-config": "from the SoC configuration files that ship with the vendor's toolkit (CANN)",
    "measured": "a measurement someone reported that the sources in reach cannot confirm",
    "assumed": "nobody publishes it: a plausible guess, labelled so you know",
    "fitted": "least-squares fitted to published measurements",
    "convention": "a modelling choice rather than a measurement",
}

# Per-field unit and one-line meaning: the table view and the docs read this.
FIELD_DOCS: dict[str, tuple[str, str]] = {
    "vector_cores": ("cores", "cores that run a vector (AIV) kernel"),
    "cube_cores": ("cores", "cores that run a cube (AIC) kernel"),
    "clock_ghz": ("GHz", "AI core clock"),
    "ub_bytes": ("bytes", "Unified Buffer per vector core"),
    "l1_bytes": ("bytes", "L1 buffer per cube core"),
    "l0a_bytes": ("bytes", "L0A (left matrix) per cube core"),
    "l0b_bytes": ("bytes", "L0B (right matrix) per cube core"),
    "l0c_bytes": ("bytes", "L0C (accumulator) per cube core"),
    "l2_bytes": ("bytes", "on-chip L2 cache, shared"),
    "hbm_bandwidth_gbps": ("GB/s", "HBM bandwidth of the whole chip"),
    "core_dma_bandwidth_gbps": ("GB/s", "peak DMA (MTE2/MTE3) bandwidth one core can draw"),
    "dma_latency_cycles": ("cycles", "fixed cost of one DMA transfer before data flows"),
    "block_bytes": ("bytes", "DMA granule: UB transfers move whole 32-byte blocks"),
    "vector_repeat_bytes": ("bytes", "bytes one vector repeat processes (8 blocks x 32 B)"),
    "max_repeat": ("repeats", "largest repeat count one vector instruction takes"),
    "vector_issue_cycles": ("cycles", "start-up cost of every vector instruction"),
    "vector_cycles_per_repeat": ("cycles", "per 256-B repeat: add, mul, max, compare, select, cast, brcb, copy"),
    "vector_div_cycles_per_repeat": ("cycles", "per repeat of 64 float32: divide (a half repeat costs twice)"),
    "vector_exp_cycles_per_repeat": ("cycles", "per repeat of 64 float32: exact exp (a half repeat costs twice)"),
    "vector_reduce_cycles_per_repeat": ("cycles", "per repeat: WholeReduceMax/Min/Sum (ReduceRepeat), each pass "
                                        "of ReduceMax / ReduceSum"),
    "vector_sort_cycles_per_repeat": ("cycles", "per 32 elements: one Sort32 repeat; MrgSort per 32 pairs merged"),
    "vector_gather_mask_cycles_per_repeat": ("cycles", "per 256-B repeat of the source: GatherMask"),
    "scalar_op_cycles": ("cycles", "one scalar register operation (add, compare, branch)"),
    "scalar_ub_access_cycles": ("cycles", "one scalar read or write of a UB value"),
    "scalar_exp_cycles": ("cycles", "one scalar exp (software routine on the scalar unit)"),
    "scalar_issue_cycles": ("cycles", "scalar-unit cost to issue one instruction to another pipe"),
    "cube_fractal_cycles": ("cycles", "one 16x16x16 fp16 fractal MMAD on a cube core"),
    "launch_overhead_us": ("us", "fixed part of one kernel launch (host + task scheduler); "
                           "launch_per_core_us is added per core started"),
    "block_dispatch_us": ("us", "time the task scheduler needs to hand one block to a core"),
    # ---- memory hierarchy and launch (docs/cost_model_system.md) ----
    "l2_bandwidth_gbps": ("GB/s", "L2 cache bandwidth of the whole chip (reads that hit L2)"),
    "launch_per_core_us": ("us", "launch (head) overhead added per core a launch starts"),
    # ---- per-core cost model (issue 9 §1-2: docs/cost_model.md) --------------------------
    "dma_issue_cycles": ("cycles", "MTE pipe time to issue one copy request (before its bytes flow)"),
    "dma_outstanding_requests": ("requests", "copies one MTE engine keeps in flight at once"),
    "dma_burst_full_bytes": ("bytes", "burst (bytes per block of a copy) from which a copy gets full bandwidth"),
    "dma_burst_efficiency_32b": ("fraction", "bandwidth efficiency of a copy with 32-byte bursts"),
    "dma_burst_efficiency_512b": ("fraction", "bandwidth efficiency of a copy with 512-byte bursts"),
    "dma_burst_efficiency_4kb": ("fraction", "bandwidth efficiency of a copy with 4 KB bursts"),
    "dma_gm_align_bytes": ("bytes", "GM address alignment a copy needs for full bandwidth"),
    "dma_gm_misaligned_efficiency": ("fraction", "bandwidth factor of a copy whose GM address is not aligned"),
    "vector_latency_cycles": ("cycles", "after a vector instruction's last repeat, until its result is in UB"),
    "sync_flag_cycles": ("cycles", "a flag (SetFlag/WaitFlag, EnQue/DeQue) from source completion to the waiter"),
    "pipe_barrier_cycles": ("cycles", "a PipeBarrier after the pipe drained, before the next instruction"),
    # ---- the UB a kernel cannot allocate (issue 15 §4; see HardwareSpec.ub_usable_bytes) ----
    "ub_reserved_bytes": ("bytes", "UB the framework and compiler always keep (256 B on the 910B)"),
    "asc_reserved_ubuf_bytes": ("bytes", "UB Ascend C keeps as scratch for Select / Brcb / ... unless "
                                "compiled with --cce-disable-asc-reserved-ubuf"),
    # ---- the cube core (issue 17 §1; docs/cost_model.md, "The cube core") ------------------
    "cube_mmad_head_cycles": ("cycles", "start-up of one Mmad before its fractals flow (the Δt of the cube formula)"),
    "mte1_l0a_bytes_per_cycle": ("B/cycle", "LoadData L1 -> L0A bandwidth (MTE1)"),
    "mte1_l0b_bytes_per_cycle": ("B/cycle", "LoadData L1 -> L0B bandwidth (MTE1)"),
    "mte1_head_cycles": ("cycles", "start-up of one LoadData on MTE1"),
    "fixpipe_elements_per_cycle": ("elements/cycle", "Fixpipe L0C -> GM conversion rate (FIX)"),
    "fixpipe_head_cycles": ("cycles", "start-up of one Fixpipe on FIX"),
}

_INT_FIELDS = {
    "vector_cores", "cube_cores", "ub_bytes", "l1_bytes", "l0a_bytes", "l0b_bytes", "l0c_bytes",
    "l2_bytes", "block_bytes", "vector_repeat_bytes", "max_repeat",
    "dma_outstanding_requests", "dma_burst_full_bytes", "dma_gm_align_bytes",
    "ub_reserved_bytes", "asc_reserved_ubuf_bytes",
}

#: fractions in (0, 1]
_FRACTION_FIELDS = ("dma_burst_efficiency_32b", "dma_burst_efficiency_512b", "dma_burst_efficiency_4kb",
                    "dma_gm_misaligned_efficiency")


class HardwareSpecError(ValueError):
    """An invalid hardware description (the message says which field and what would be valid)."""


@dataclass(frozen=True)
class HardwareSpec:
    """Every number the simulator uses for one chip. Units are in the field names.

    ``isa`` names the vector core's instruction set (:mod:`npu_lab.capabilities`): which Ascend C
    instructions exist on it. ``provenance`` maps a field name to ``(kind, note)`` where kind is one of
    :data:`PROVENANCE_KINDS`. Costs derived from the spec (cycles per DMA, per vector repeat) are
    computed by the simulator, never typed into kernels.
    """

    name: str
    vector_cores: int
    cube_cores: int
    clock_ghz: float
    ub_bytes: int
    l1_bytes: int
    l0a_bytes: int
    l0b_bytes: int
    l0c_bytes: int
    l2_bytes: int
    hbm_bandwidth_gbps: float
    core_dma_bandwidth_gbps: float
    dma_latency_cycles: float
    block_bytes: int
    vector_repeat_bytes: int
    max_repeat: int
    vector_issue_cycles: float
    vector_cycles_per_repeat: float
    vector_div_cycles_per_repeat: float
    vector_exp_cycles_per_repeat: float
    vector_reduce_cycles_per_repeat: float
    vector_sort_cycles_per_repeat: float
    vector_gather_mask_cycles_per_repeat: float
    scalar_op_cycles: float
    scalar_ub_access_cycles: float
    scalar_exp_cycles: float
    scalar_issue_cycles: float
    cube_fractal_cycles: float
    launch_overhead_us: float
    block_dispatch_us: float
    # ---- memory hierarchy and launch (docs/cost_model_system.md) ----
    l2_bandwidth_gbps: float
    launch_per_core_us: float
    # ---- per-core cost model (issue 9 §1-2; docs/cost_model.md) ------------------------
    dma_issue_cycles: float
    dma_outstanding_requests: int
    dma_burst_full_bytes: int
    dma_burst_efficiency_32b: float
    dma_burst_efficiency_512b: float
    dma_burst_efficiency_4kb: float
    dma_gm_align_bytes: int
    dma_gm_misaligned_efficiency: float
    vector_latency_cycles: float
    sync_flag_cycles: float
    pipe_barrier_cycles: float
    # ---- reserved UB (defaults: the 910B's, docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/
    # NPU架构版本2201.md; older JSON descriptions without them load as a 910B) ----
    ub_reserved_bytes: int = 256
    asc_reserved_ubuf_bytes: int = 8 * 1024
    #: the kernel is compiled with ``--cce-disable-asc-reserved-ubuf``: the 8 KB reserve becomes
    #: ordinary UB, and the APIs that use it (Select modes 1/2 on the 910B, Brcb on the 310P) are
    #: compile errors
    disable_asc_reserved_ubuf: bool = False
    # ---- the cube core (issue 17 §1): defaults so older JSON chips still load --------------
    cube_mmad_head_cycles: float = 16.0
    mte1_l0a_bytes_per_cycle: float = 256.0
    mte1_l0b_bytes_per_cycle: float = 128.0
    mte1_head_cycles: float = 16.0
    fixpipe_elements_per_cycle: float = 64.0
    fixpipe_head_cycles: float = 32.0
    description: str = ""
    isa: str = "ascend910b"
    provenance: Mapping[str, tuple[str, str]] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        _validate(self)

    # ---- derived quantities -------------------------------------------------------------
    @property
    def cycles_per_us(self) -> float:
        return self.clock_ghz * 1e3

    def us_to_cycles(self, us: float) -> float:
        return us * self.cycles_per_us

    def cycles_to_us(self, cycles: float) -> float:
        return cycles / self.cycles_per_us

    def bytes_per_cycle(self, bandwidth_gbps: float) -> float:
        """GB/s divided by G cycles/s gives bytes per cycle."""
        return bandwidth_gbps / self.clock_ghz

    def cores(self, core_type: str = "vector") -> int:
        """Cores of one kind: ``"vector"`` (AIV) or ``"cube"`` (AIC). A kernel *type* such as
        ``"mix"`` is priced by :mod:`npu_lab.sim.launch_cost`."""
        if core_type == "vector":
            return self.vector_cores
        if core_type == "cube":
            return self.cube_cores
        raise ValueError(f"core_type must be 'vector' or 'cube', got {core_type!r}")

    @property
    def ub_usable_bytes(self) -> int:
        """UB a kernel can allocate: ``ub_bytes − ub_reserved_bytes − asc_reserved_ubuf_bytes``
        (the last only when ``disable_asc_reserved_ubuf`` is False). On the 910B that is
        192 KB − 256 B − 8 KB = 188 160 B (NPU架构版本2201.md: "用户实际可使用的空间大小为
        192KB - 256B - 8KB"); on the 310P 256 KB − 8 KB = 248 KB (asc-devkit
        impl/basic_api/utils/kernel_utils_constants.h, __NPU_ARCH__ 2002: TMP_UB_OFFSET = 248 KB).
        Every UB budget and the simulator's allocator use this, never ``ub_bytes``."""
        asc = 0 if self.disable_asc_reserved_ubuf else self.asc_reserved_ubuf_bytes
        return self.ub_bytes - self.ub_reserved_bytes - asc

    @property
    def vector_elements_per_repeat_fp32(self) -> int:
        return self.vector_repeat_bytes // 4

    # ---- what-if, JSON, table -----------------------------------------------------------
    def replace(self, *, provenance_note: str = "what-if change", **changes: Any) -> "HardwareSpec":
        """A copy with some fields changed; changed fields are labelled ``assumed`` (or keep a
        provenance given explicitly via ``provenance=``). Unknown field names raise."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise HardwareSpecError(
                f"unknown HardwareSpec field(s) {unknown}; valid fields: {sorted(FIELD_DOCS)}")
        prov = dict(self.provenance)
        if "provenance" not in changes:
            for key in changes:
                if key in FIELD_DOCS:
                    prov[key] = ("assumed", provenance_note)
            changes["provenance"] = prov
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "provenance"}
        out["provenance"] = {k: list(v) for k, v in self.provenance.items()}
        return out

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2, sort_keys=False)
        if path is not None:                  # whole or not at all (a temporary file, renamed)
            from ._files import write_text_atomically
            write_text_atomically(path, text + "\n", "to_json's path")
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "HardwareSpec":
        if not isinstance(data, Mapping):
            raise HardwareSpecError(f"a hardware description must be a JSON object (a dict of fields); "
                                    f"got {type(data).__name__} {_short(data)}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(map(str, data)) - names)
        if unknown:
            raise HardwareSpecError(f"unknown field(s) {unknown} in hardware description; "
                                    f"valid fields: {sorted(names)}")
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in data]
        if missing:
            raise HardwareSpecError(f"hardware description is missing field(s) {missing}; "
                                    "start from a preset's to_json() and edit it")
        kwargs = dict(data)
        kwargs["provenance"] = _provenance_from_json(kwargs.pop("provenance", None))
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> "HardwareSpec":
        """Build a spec from a JSON string or a path to a JSON file (the format of to_json).
        A ``str`` is read as JSON when it parses, else as a file name; a ``Path`` is a file."""
        if isinstance(text_or_path, (bytes, bytearray)):
            text_or_path = bytes(text_or_path).decode("utf-8", errors="replace")
        if not isinstance(text_or_path, (str, Path)):
            raise HardwareSpecError(f"from_json takes a JSON string or a path; got "
                                    f"{type(text_or_path).__name__} {_short(text_or_path)}")
        if isinstance(text_or_path, str):
            if not text_or_path.strip():
                raise HardwareSpecError("from_json got an empty string; pass a JSON object such as "
                                        "get_preset('ascend-910b2').to_json(), or a path to a JSON file")
            try:
                return cls.from_dict(json.loads(text_or_path))
            except json.JSONDecodeError as exc:
                if text_or_path.lstrip()[:1] in "{[\"" or "\n" in text_or_path:
                    raise HardwareSpecError(f"hardware JSON does not parse: {exc}") from None
        path = Path(text_or_path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise HardwareSpecError(f"{str(path)!r} is neither valid JSON nor an existing file") from None
        except UnicodeDecodeError:
            raise HardwareSpecError(f"{path}: not a text (UTF-8 JSON) file") from None
        except (OSError, ValueError) as exc:     # ValueError: e.g. a NUL byte in the name
            raise HardwareSpecError(f"cannot read hardware JSON from {str(path)!r}: "
                                    f"{getattr(exc, 'strerror', None) or exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise HardwareSpecError(f"{path}: hardware JSON does not parse: {exc}") from None
        try:
            return cls.from_dict(data)
        except HardwareSpecError as exc:
            raise HardwareSpecError(f"{path}: {exc}") from None

    def table(self):
        """A pandas DataFrame: one row per field with value, unit, meaning, provenance and note."""
        import pandas as pd

        rows = []
        for name, (unit, meaning) in FIELD_DOCS.items():
            kind, note = self.provenance.get(name, ("unspecified", ""))
            rows.append({"field": name, "value": getattr(self, name), "unit": unit,
                         "meaning": meaning, "provenance": kind, "note": note})
        return pd.DataFrame(rows).set_index("field")


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _provenance_from_json(prov) -> dict[str, tuple[str, str]]:
    """JSON provenance {field: [kind, note]} -> {field: (kind, note)}, or a clear error."""
    if prov is None:
        return {}
    if not isinstance(prov, Mapping):
        raise HardwareSpecError(f"provenance must be an object {{field: [kind, note]}}; got "
                                f"{type(prov).__name__} {_short(prov)}")
    out = {}
    for key, value in prov.items():
        if isinstance(value, str) or not isinstance(value, (list, tuple)) or not 1 <= len(value) <= 2 \
                or not all(isinstance(v, str) for v in value):
            raise HardwareSpecError(f"provenance[{key!r}] must be [kind, note] (two strings, kind one of "
                                    f"{PROVENANCE_KINDS}); got {_short(value)}")
        out[key] = (value[0], value[1] if len(value) > 1 else "")
    return out


#: Fields fixed by the Ascend C rules npu_lab.lang enforces (its BLOCK_BYTES, repeat size, MAX_REPEAT).
_ASCEND_C_FIXED = {"block_bytes": 32, "vector_repeat_bytes": 256, "max_repeat": 255}
#: Most cores of one kind a spec may have (per-core arrays in the scheduler and timeline).
MAX_CORES = 4096


def _validate(spec: HardwareSpec) -> None:
    from .capabilities import ISAS

    if not isinstance(spec.name, str) or not spec.name:
        raise HardwareSpecError("name must be a non-empty string")
    if not isinstance(spec.isa, str) or spec.isa not in ISAS:     # a list is unhashable: test the type first
        raise HardwareSpecError(f"isa must name the chip's instruction set, one of {sorted(ISAS)}; "
                                f"got {spec.isa!r}")
    for name in FIELD_DOCS:
        value = getattr(spec, name)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise HardwareSpecError(f"{name} must be a number ({FIELD_DOCS[name][0]}), got {value!r}")
        try:
            finite = math.isfinite(value)
        except OverflowError:       # an int too large for a float
            finite = False
        if not finite:
            raise HardwareSpecError(f"{name} must be finite (and fit a float), got {_short(value)}")
        if name in _INT_FIELDS:
            if int(value) != value:
                raise HardwareSpecError(f"{name} must be a whole number, got {value!r}")
            # 48.0 (JSON, a what-if) is the int 48: later code relies on int fields being ints
            object.__setattr__(spec, name, int(value))
        elif not isinstance(value, (int, float)):
            object.__setattr__(spec, name, float(value))     # numpy scalars -> Python floats
    positive = ["vector_cores", "clock_ghz", "hbm_bandwidth_gbps", "core_dma_bandwidth_gbps", "l2_bandwidth_gbps",
                "block_bytes", "vector_repeat_bytes", "max_repeat", "ub_bytes",
                "dma_outstanding_requests", "dma_gm_align_bytes", *_FRACTION_FIELDS,
                "mte1_l0a_bytes_per_cycle", "mte1_l0b_bytes_per_cycle", "fixpipe_elements_per_cycle"]
    for name in positive:
        if getattr(spec, name) <= 0:
            raise HardwareSpecError(
                f"{name} must be > 0 ({FIELD_DOCS[name][1]}), got {getattr(spec, name)!r}")
    for name in FIELD_DOCS:
        if getattr(spec, name) < 0:
            raise HardwareSpecError(f"{name} must be >= 0, got {getattr(spec, name)!r}")
    for name in _FRACTION_FIELDS:
        if getattr(spec, name) > 1:
            raise HardwareSpecError(f"{name} is a fraction of the full bandwidth, in (0, 1]; "
                                    f"got {getattr(spec, name)!r}")
    points = [spec.dma_burst_efficiency_32b, spec.dma_burst_efficiency_512b, spec.dma_burst_efficiency_4kb]
    if points != sorted(points):
        raise HardwareSpecError(
            f"the burst efficiencies must not fall as bursts grow (32 B <= 512 B <= 4 KB); got {points}")
    if spec.dma_burst_full_bytes <= 4096:
        raise HardwareSpecError(f"dma_burst_full_bytes must be above the 4 KB table point (the guide: "
                                f"about 16 KB), got {spec.dma_burst_full_bytes!r}")
    if spec.ub_bytes < spec.block_bytes:
        raise HardwareSpecError(
            f"ub_bytes={spec.ub_bytes} is smaller than one {spec.block_bytes}-byte block (block_bytes); "
            "a Unified Buffer must hold at least one DMA block (real chips have 192-256 KB)")
    if not isinstance(spec.disable_asc_reserved_ubuf, bool):
        raise HardwareSpecError(f"disable_asc_reserved_ubuf must be True or False (the compile option "
                                f"--cce-disable-asc-reserved-ubuf), got {_short(spec.disable_asc_reserved_ubuf)}")
    if spec.ub_usable_bytes < spec.block_bytes:
        raise HardwareSpecError(
            f"ub_reserved_bytes={spec.ub_reserved_bytes} + asc_reserved_ubuf_bytes={spec.asc_reserved_ubuf_bytes} "
            f"leave {spec.ub_usable_bytes} B of ub_bytes={spec.ub_bytes}: less than one {spec.block_bytes}-byte "
            "block. Raise ub_bytes or lower the reserves (the 910B keeps 256 B + 8 KB)")
    if spec.vector_repeat_bytes % spec.block_bytes:
        raise HardwareSpecError(
            f"vector_repeat_bytes={spec.vector_repeat_bytes} must be a multiple of "
            f"block_bytes={spec.block_bytes} (a repeat is 8 blocks of 32 B on Ascend)")
    for name, fixed in _ASCEND_C_FIXED.items():
        if getattr(spec, name) != fixed:
            raise HardwareSpecError(
                f"{name} must be {fixed}, got {getattr(spec, name)!r}: npu_lab's instruction rules are Ascend C's "
                "(DataCopy in 32-byte blocks, a vector repeat of 8 blocks = 256 bytes, at most 255 repeats), "
                "so another value would be accepted and ignored; change the rates and sizes instead")
    for name in ("vector_cores", "cube_cores"):
        if getattr(spec, name) > MAX_CORES:
            raise HardwareSpecError(f"{name} must be at most {MAX_CORES:,} (npu_lab.hardware.MAX_CORES: the simulator "
                                    f"keeps per-core arrays; real chips have tens), got {getattr(spec, name)!r}")
    if not isinstance(spec.provenance, Mapping):
        raise HardwareSpecError(f"provenance must be a dict {{field: (kind, note)}}; got "
                                f"{type(spec.provenance).__name__} {_short(spec.provenance)}")
    if not isinstance(spec.description, str):
        raise HardwareSpecError(f"description must be a string, got {_short(spec.description)}")
    for key, value in spec.provenance.items():
        if key not in FIELD_DOCS:
            raise HardwareSpecError(f"provenance names unknown field {key!r}")
        if not (isinstance(value, tuple) and len(value) == 2 and value[0] in PROVENANCE_KINDS):
            raise HardwareSpecError(
                f"provenance[{key!r}] must be (kind, note) with kind in {PROVENANCE_KINDS}, got {value!r}")


def get_preset(name: str) -> HardwareSpec:
    """Shortcut for :func:`npu_lab.presets.get_preset`."""
    from .presets import get_preset as _get

    return _get(name)
