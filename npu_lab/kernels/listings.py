"""The Ascend C listing beside each course kernel, and the check that both say the same thing
(issue 8 §4).

Every course kernel has a C++ file next to its Python (``scaled_add.cpp``, ``moe_gating/fused_v1.cpp``,
...): the kernel class with ``Init`` / ``Process`` / ``CopyIn`` / ``Compute`` / ``CopyOut``, ``TPipe``,
``TQue`` / ``TBuf``, ``InitBuffer``, the tiling struct registered with ``REGISTER_TILING_DEFAULT``
and read with ``GET_TILING_DATA``, and the ``extern "C" __global__ __aicore__`` entry as an operator
project writes it (GM addresses only, ending ``GM_ADDR workspace, GM_ADDR tiling``; the ``TPipe``
created there and passed to ``Init`` by pointer). That they compile against asc-devkit's headers is
:mod:`npu_lab.cpp.compile_check`'s job; this module reads their call order, with a small C++
reader of its own, so it needs neither clang nor the headers (a learner installing from PyPI has
neither). This module reads them:

* :func:`listing` — the C++ text of a kernel (``listing("v2")``);
* :func:`cpp_calls` — the Ascend C calls of a listing in program order (methods and helpers
  inlined from the entry; each loop body and each branch once), names as in ``ASCEND_C_API``;
* :func:`cpp_program` — the same as a tree (loops, branches), what the comparison matches against;
* :func:`traced_calls` — what one block of a small traced Python run called, in order;
* :func:`compare` — does a traced run follow a listing? (loops: any number of iterations,
  ``if``/``else``: either branch; reports where they part and which loops / branches were used).

Conventions a listing follows (the parser is small, not a C++ compiler):

* The scalar work the Python charges with one ``ctx.scalar("NAME", ...)`` is marked in the C++ by a
  comment ``// scalar: NAME`` on the line before the statement that does it (a helper call, a
  block or a loop); that statement counts as the one unit ``"scalar: NAME"``.
* One ``extern "C" __global__`` entry per launch; a file with several entries names each
  ``<something>_<version>`` (``moe_gating_v2_bad_sync``) or lists them in launch order (the
  discrete chain's three kernels).
* ``if constexpr (FLAG)`` on a bool template parameter is resolved from the template arguments
  the entry instantiates (``KernelMoeGatingV2<DTYPE_GATE, true> op;``); any other ``if``
  (``if constexpr (sizeof(T) == 2)`` too) may take either branch, so the registry's cases must
  take each (a float16 case for that one). After ``if (...) return;`` the rest of the function
  runs only on the paths that did not return. Not supported: ``switch``, a ``return`` inside a
  loop that makes Ascend C calls; ``break`` / ``continue`` are ignored.
* Only calls are read: ``DataCopy(...)``, ``q.EnQue(x)``, ``SetFlag<HardEvent::MTE2_S>(0)``,
  ``PipeBarrier<PIPE_ALL>()``, ``pipe->InitBuffer(...)`` (``TPipe::InitBuffer``),
  ``buf.Get<float>()`` (``TBuf::Get``); parameter structs written with braces
  (``DataCopyExtParams{1, K * sizeof(float), 0, 0, 0}``) are arguments, not calls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..lang.api_map import ASCEND_C_API

__all__ = ["REGISTRY", "ListingSpec", "spec_entries", "ListingError", "ListingMissing", "ALLOWED_CPP_NAMES", "INSTRUCTIONS",
           "SYNC_CALLS", "listing", "listing_path", "cpp_calls", "cpp_program", "cpp_call_names",
           "cpp_entries", "traced_calls", "calls_of_run", "instruction_name", "compare", "Match", "Call", "Loop", "Branch"]

KERNELS_DIR = Path(__file__).resolve().parent

#: Ascend C calls that are instructions (an event in a BlockTrace: DMA, vector, scalar GetValue /
#: SetValue): the calls of ``ctx`` except where-am-I and sync, plus the LocalTensor scalar accessors.
INSTRUCTIONS = frozenset(
    {k for k, v in ASCEND_C_API.items() if v["python"].startswith("KernelContext.")}
    - {"GetBlockIdx", "GetBlockNum", "GetTPipePtr", "SetFlag", "WaitFlag", "PipeBarrier",
       "GetSubBlockIdx", "GetTaskRatio", "CrossCoreSetFlag", "CrossCoreWaitFlag", "SyncAll"} | {"GetValue", "SetValue"})
#: Sync and queue calls (recorded by ``npu_lab.lang.context.record_calls``, not in a BlockTrace).
SYNC_CALLS = frozenset({"SetFlag", "WaitFlag", "PipeBarrier", "AllocTensor", "EnQue", "DeQue", "FreeTensor",
                        "TPipe::InitBuffer", "AllocEventID", "ReleaseEventID", "FetchEventID",
                        "CrossCoreSetFlag", "CrossCoreWaitFlag", "SyncAll"})
#: C++ method names that are an ASCEND_C_API entry under a qualified key.
_ALIASES = {"InitBuffer": "TPipe::InitBuffer", "Get": "TBuf::Get"}
#: Calls a listing may make that are not in ASCEND_C_API, and why (keep this short).
ALLOWED_CPP_NAMES = {
    "SetGlobalBuffer": "GlobalTensor::SetGlobalBuffer binds a GM address; the Python is handed GlobalTensors",
    "KERNEL_TASK_TYPE_DEFAULT": "the kernel type (KERNEL_TYPE_AIC_ONLY for a cube kernel); the Python says "
                                "npu_kernel(core_type='cube')",
    "REGISTER_TILING_DEFAULT": "registers the tiling struct's type before GET_TILING_DATA; the Python unpacks it",
}
SCALAR_PREFIX = "scalar: "
#: `if ASCEND_IS_AIC {` / `if ASCEND_IS_AIV {`: which core of a mixed kernel runs the block
#: (impl/utils/sys_macros.h: each expands to `constexpr(g_coreType == AscendC::AIC)` and so on)
_CORE_MACROS = frozenset({"ASCEND_IS_AIC", "ASCEND_IS_AIV", "ASCEND_IS_NOT_AIC", "ASCEND_IS_NOT_AIV"})

_KEYWORDS = frozenset(
    "if else for while do switch case return break continue goto sizeof alignof decltype static_cast "
    "reinterpret_cast const_cast dynamic_cast new delete template typename constexpr operator "
    "static_assert throw catch try using namespace class struct union enum".split())
_CPP_TYPES = frozenset(
    "void bool char int short long float double unsigned signed auto size_t half bfloat16_t int8_t int16_t "
    "int32_t int64_t uint8_t uint16_t uint32_t uint64_t".split())


class ListingError(ValueError):
    """A listing the parser cannot read (unbalanced brackets, an unsupported construct, ...)."""


class ListingMissing(FileNotFoundError):
    """The listing of a registered kernel has not been written yet."""


# ================================================================================================
# The registry: which listing goes with which Python kernel, and the small runs that check it
# ================================================================================================
@dataclass(frozen=True)
class ListingSpec:
    """One course kernel's listing.

    ``path`` is relative to ``npu_lab/kernels``; ``version`` names the Python side (a
    ``moe_gating_topk`` version, or ``"scaled_add"``); ``cases`` are small shapes traced for the
    comparison (together they must take every branch and loop of the listing); ``entry`` picks
    the ``__global__`` function(s) (default: the one named ``*_<name>``, else all in file order,
    one per launch); ``sync_order`` also compares the sync / queue calls in order."""

    name: str
    path: str
    version: str
    cases: tuple[dict, ...]
    entry: tuple[str, ...] | None = None
    sync_order: bool = False
    kernels: tuple[str, ...] = ()    # Python kernel function names that map to this listing

    @property
    def file(self) -> Path:
        return KERNELS_DIR / self.path


def _moe_cases(*shapes, **extra) -> tuple[dict, ...]:
    """(B, S, E, K, tile_s) shapes on a one-core chip: one block loops over every tile."""
    return tuple(dict(B=b, S=s, E=e, K=k, tile_s=ts, cores=1, **extra) for b, s, e, k, ts in shapes)


# E = 12 fp32 rows are 48 B (DataCopyPad), E = 16 are 64 B (DataCopy); S = 5, tileS = 2 gives
# tiles of 2, 2, 1 points (a prefetch, a reused slot, a tail); K = 4 with 2 points is 32 B out.
_SCALAR_SHAPES = ((1, 5, 12, 2, 2), (1, 5, 16, 2, 2))
_VECTOR_SHAPES = ((1, 5, 12, 2, 2), (1, 5, 16, 4, 2), (2, 3, 64, 1, 2), (1, 9, 40, 8, 4))
# float16 logits take the Cast branches of the vector kernels
_VECTOR_CASES = _moe_cases(*_VECTOR_SHAPES) + (dict(B=1, S=5, E=16, K=2, tile_s=2, cores=1, dtype="float16"),)

REGISTRY: dict[str, ListingSpec] = {spec.name: spec for spec in (
    ListingSpec("scaled_add", "scaled_add.cpp", "scaled_add",
                (dict(n=40, tile_len=16, num_buffers=2), dict(n=37, tile_len=16, num_buffers=1)),
                entry=("scaled_add",), sync_order=True, kernels=("scaled_add_kernel",)),
    # discrete / v3 also: E > 64 (rows of several repeats; the TopK's leftover-list Copy), E = 2120
    # (rows over 255 blocks: Softmax's per-row broadcast) and the 310P (ReduceMax TopK in
    # discrete, float Compare in v3)
    ListingSpec("discrete", "moe_gating/discrete.cpp", "discrete",
                _VECTOR_CASES + _moe_cases((1, 5, 130, 3, 2), (1, 2, 2120, 2, None))
                + _moe_cases((1, 16, 64, 8, None), hw="ascend-310p3"),
                kernels=("softmax_kernel", "topk_sort_kernel", "renormalise_kernel")),
    ListingSpec("v1", "moe_gating/fused_v1.cpp", "v1", _moe_cases(*_SCALAR_SHAPES),
                entry=("moe_gating_v1",), sync_order=True, kernels=("moe_gating_v1_kernel",)),
    ListingSpec("v2", "moe_gating/fused_v2.cpp", "v2", _moe_cases(*_SCALAR_SHAPES),
                entry=("moe_gating_v2",), sync_order=True, kernels=("moe_gating_v2_kernel",)),
    ListingSpec("v2_bad_sync", "moe_gating/fused_v2.cpp", "v2_bad_sync", _moe_cases(*_SCALAR_SHAPES),
                entry=("moe_gating_v2_bad_sync",), sync_order=True, kernels=("moe_gating_v2_bad_sync_kernel",)),
    ListingSpec("v2c", "moe_gating/fused_v2c.cpp", "v2c", _moe_cases((1, 5, 12, 2, 2), (1, 5, 16, 4, 2)),
                entry=("moe_gating_v2c",), sync_order=True, kernels=("moe_gating_v2c_kernel",)),
    ListingSpec("v3", "moe_gating/vectorized.cpp", "v3",
                # E = 128 / 192: the two-level argmax of whole 64-lane chunks
                # (no 310P case: v3's bit-masked Copy does not exist there); E = 2048: the index
                # column copied per 8 rows (8·m > 255 blocks)
                _VECTOR_CASES + _moe_cases((1, 5, 130, 3, 2), (1, 5, 192, 3, 2), (1, 3, 2048, 2, 2)),
                kernels=("moe_gating_v3_kernel",)),
    ListingSpec("v3_fast_exp", "moe_gating/vectorized.cpp", "v3_fast_exp",
                _VECTOR_CASES + _moe_cases((1, 5, 130, 3, 2), (1, 5, 128, 3, 2)),
                kernels=("moe_gating_v3_fast_exp_kernel",)),
    ListingSpec("v4", "moe_gating/sorted_topk.cpp", "v4",
                tuple(dict(c, tile_s=None) for c in _VECTOR_CASES)
                # several UB loops per core (the prefetch); E = 128: four Sort32 lists, one MrgSort
                + _moe_cases((1, 300, 64, 2, None), (1, 3, 128, 8, None)),
                kernels=("moe_gating_v4_kernel",)),
    # the full routing semantics (moe_gating/grouped.py): DeepSeek-like (groups, top2_sum, bias, extras,
    # finished), > 4 kept groups (two merge rounds), padded groups with a softmax (the packed sum), a
    # plain softmax top-K without renorm, float16, several loops per core
    ListingSpec("grouped", "moe_gating/grouped.cpp", "grouped",
                (dict(B=1, S=20, E=256, K=8, cores=1, score="sigmoid", bias=True, num_groups=8, topk_groups=4,
                      group_select="top2_sum", routed_scaling_factor=2.5, finished=True, extras=True),
                 dict(B=1, S=6, E=96, K=20, cores=1, score="sigmoid", num_groups=12, topk_groups=6),
                 dict(B=1, S=5, E=100, K=3, cores=1, score="softmax", num_groups=4, topk_groups=2, renorm=True),
                 dict(B=1, S=5, E=40, K=3, cores=1, renorm=False, dtype="float16"),
                 dict(B=1, S=400, E=2048, K=70, cores=1, score="sigmoid"),
                 dict(B=1, S=7, E=64, K=2, cores=1),
                 dict(B=1, S=3, E=200, K=70, cores=1, score="softmax", bias=True),          # K > 64: per-row ReduceMax
                 dict(B=1, S=4, E=128, K=4, cores=1, score="sigmoid", num_groups=4, topk_groups=1)),  # one kept group: Copy
                kernels=("moe_gating_grouped_kernel",)),
    # the chunked-E kernel (moe_gating/large_e.py): masked and whole-block pads, two-run and five-run
    # chunks (a copied leftover run), K > 64 (per-row ReduceMax), float16, several loops of one chunk; renorm = 0
    ListingSpec("large_e", "moe_gating/large_e.cpp", "large_e",
                (dict(N=5, E=270, K=3, chunk=128, cores=1), dict(N=4, E=300, K=70, chunk=160, cores=1),
                 dict(N=3, E=100, K=2, chunk=64, cores=1, dtype="float16"), dict(N=300, E=64, K=8, cores=1),
                 dict(N=3, E=256, K=5, chunk=64, cores=1),
                 # renorm = 0 (KFullLoad: the online max / sum): per-row reductions and a 32-column
                 # Sub tail (chunk 160), whole-row WholeReduce (chunk 64, float16), one chunk
                 dict(N=4, E=300, K=70, chunk=160, cores=1, renorm=False),
                 dict(N=3, E=100, K=2, chunk=64, cores=1, dtype="float16", renorm=False),
                 dict(N=5, E=270, K=3, chunk=128, cores=1, renorm=False), dict(N=9, E=40, K=4, cores=1, renorm=False)),
                kernels=("moe_gating_large_e_kernel",)),
    # the cube's GEMM (gemm/): tails in M, N, K; two K panels; several N tiles (a loop of < 4, so
    # the timing-only trace has every iteration); v4 with a K-split (SetAtomicAdd)
    ListingSpec("gemm_v1", "gemm/gemm_naive.cpp", "gemm_v1",
                (dict(M=40, K=70, N=48, base=(32, 32, 32)), dict(M=16, K=16, N=16)),
                entry=("gemm_v1",), sync_order=True, kernels=("gemm_naive_kernel",)),
    ListingSpec("gemm_v3", "gemm/gemm_tiled.cpp", "gemm_v3",
                (dict(M=40, K=100, N=48, base=(32, 32, 32), step_k=2, version="v3"),
                 dict(M=40, K=60, N=70, base=(32, 32, 32), version="v2"),
                 dict(M=40, K=128, N=48, base=(32, 32, 32), k_split=2, version="v4")),
                entry=("gemm_v3",), sync_order=True, kernels=("gemm_tiled_kernel",)),
    # cube + vector in one kernel (issue 17 §2): the AIC's and an AIV's calls, one after the other,
    # follow the listing's `if ASCEND_IS_AIC` then `if ASCEND_IS_AIV` (traced_calls); a tail in M and
    # N, two tasks per block (the AHEAD wait), an odd tile height (AIV1 gets one row fewer)
    ListingSpec("epilogue_mix", "gemm/epilogue_mix.cpp", "epilogue_mix",
                (dict(M=40, K=70, N=48, base=(32, 32, 32), cores=1), dict(M=16, K=16, N=16, cores=1),
                 dict(M=100, K=32, N=40, base=(32, 32, 32), cores=1)),
                entry=("matmul_leakyrelu_mix",), sync_order=True, kernels=("matmul_leakyrelu_mix_kernel",)),
    # router MatMul + gating fused (issue 20 §4b), one AI core group: 4 tiles (the slot wait), E = 60 (the -inf
    # pad, a 2-list merge), E = 1024 (two UB loops with a prefetch, merges of 32 and 8 lists), K = 1 (WholeReduceMax),
    # H = 200 (two K panels: the PIPE_M barrier)
    ListingSpec("fused_router", "moe_layer/fused_router.cpp", "fused_router",
                (dict(N=49, H=40, E=60, K=4, rows=16, cores=1), dict(N=16, H=32, E=1024, K=8, rows=16, cores=1),
                 dict(N=40, H=200, E=64, K=1, rows=16, cores=1)),
                entry=("router_gating_fused",), sync_order=True, kernels=("fused_router_gating_kernel",)),
    # gather + expert up-GEMM fused (issue 20 §4b), one cube core: an empty expert, a tail M tile, three N tiles;
    # H = 300 with long A panels (a panel spanning two B panels: the ka != 0 and the keep-the-panel branches); the
    # L1-resident variant (every N tile from one copy of the gathered rows)
    ListingSpec("fused_gather", "moe_layer/fused_gather.cpp", "fused_gather",
                (dict(rows=(3, 0, 20), H=300, F=40, K=2, N=12, base=(16, 16), cores=1),
                 dict(rows=(5, 7), H=64, F=40, K=1, N=12, base=(16, 16), resident=True, cores=1)),
                entry=("gather_matmul",), sync_order=True, kernels=("gather_matmul_kernel",)),
    # decode attention v3, cube + vector (issue 17 item 5): two tasks on one AI core group; L > CHUNK takes the
    # online-softmax chunks (P·V of chunk c - 1 after S of c, the accumulator's rescale), G = 3 leaves AIV1 one
    # row, G = 1 none
    ListingSpec("attention_cv", "decode/attention_cv.cpp", "attention_cv",
                (dict(B=2, Hq=6, Hkv=2, D=64, Lmax=150, lens=(150, 20), cores=1),
                 dict(B=1, Hq=1, Hkv=1, D=32, Lmax=16, lens=(16,), cores=1)),
                entry=("decode_attention_cv",), sync_order=True, kernels=("decode_attention_cv_kernel",)),
    ListingSpec("gemm_v4", "gemm/gemm_tiled.cpp", "gemm_v4",
                (dict(M=40, K=300, N=48, base=(32, 32, 32), k_split=3, version="v4", out_dtype="float32"),
                 dict(M=40, K=300, N=48, base=(32, 32, 32), k_split=2, step_k=1, version="v4", out_dtype="float32")),
                entry=("gemm_v4",), sync_order=True),
    # bfloat16 (uint16 bits): tails, two K panels, v2; a K-split with float out; int8 dequantised per channel in
    # Fixpipe (VDEQF16): 30 tasks on 24 cores (block 0 runs two: the FIX_MTE2 wait), tails, a K-split
    ListingSpec("gemm_bf16", "gemm/gemm_tiled.cpp", "gemm_bf16",
                (dict(M=40, K=100, N=48, base=(32, 32, 32), step_k=2, version="v3", dtype="uint16"),
                 dict(M=40, K=60, N=70, base=(32, 32, 32), version="v2", dtype="uint16"),
                 dict(M=40, K=128, N=48, base=(32, 32, 32), k_split=2, version="v4", dtype="uint16",
                      out_dtype="float32")),
                entry=("gemm_bf16",), sync_order=True),
    ListingSpec("gemm_int8_deq", "gemm/gemm_tiled.cpp", "gemm_int8_deq",
                (dict(M=480, K=64, N=48, base=(16, 32, 64), version="v3", dtype="int8", deq_scale=(0.01,) * 48),
                 dict(M=40, K=300, N=70, base=(32, 32, 64), step_k=2, version="v3", dtype="int8",
                      deq_scale=(0.01,) * 70),
                 dict(M=40, K=60, N=70, base=(32, 32, 64), version="v2", dtype="int8", deq_scale=(0.01,) * 70),
                 dict(M=40, K=256, N=48, base=(32, 32, 64), k_split=2, version="v4", dtype="int8",
                      deq_scale=(0.02,) * 48)),
                entry=("gemm_int8_deq",), sync_order=True),
    # decode (issue 18): one core, so one block takes several rows / tasks; float16 takes the Cast
    ListingSpec("decode_append", "decode/append.cpp", "decode_append",
                (dict(rows=3, kv_heads=4, head_dim=64, heads_per_tile=3, dtype="float16"),
                 dict(rows=1, kv_heads=2, head_dim=128, heads_per_tile=2, dtype="float32")),
                entry=("kv_cache_append",), sync_order=True, kernels=("kv_append_kernel",)),
    ListingSpec("decode_attention", "decode/attention.cpp", "decode_attention",
                (dict(version="v2", lens=(40, 17), kv_heads=2, group=2, head_dim=128, chunk=16, dtype="float32"),
                 dict(version="v1", lens=(9, 16), kv_heads=1, group=2, head_dim=64, dtype="float16"),
                 dict(version="v5", lens=(20,), kv_heads=2, group=1, head_dim=128, chunk=8, dtype="int8"),
                 dict(version="v2", lens=(40, 17), kv_heads=2, group=2, head_dim=64, chunk=8, page_size=16,
                      dtype="float16")),
                entry=("decode_attention",), sync_order=True, kernels=("decode_attention_kernel",)),
    ListingSpec("flash_decode", "decode/attention.cpp", "flash_decode",
                (dict(version="v4", lens=(40, 5), kv_heads=1, group=2, head_dim=64, chunk=8, splits=3,
                      dtype="float16"),
                 dict(version="v4", lens=(16,), kv_heads=1, group=2, head_dim=128, chunk=8, splits=2,
                      dtype="float32"),
                 dict(version="v4", lens=(12,), kv_heads=1, group=1, head_dim=64, chunk=8, splits=2,
                      dtype="int8"),
                 dict(version="v4", lens=(40, 5), kv_heads=1, group=2, head_dim=64, chunk=8, splits=3, page_size=16,
                      dtype="float16")),
                entry=("decode_attention_split", "flash_decode_combine"), sync_order=True,
                kernels=("flash_decode_combine_kernel",)),
    # sparse KV (issue 19): S = 200 (7 Sort32 lists: a 4-group + a 3-way, then a 2-way; the -inf pad;
    # 4 tiles per K/V), S = 160 (a 4-group + a lone list's Copy; no sinks; one tile each),
    # S = 32 (one list, no merge; C == S)
    ListingSpec("sparse_kv", "sparse_kv/sparse_kv.cpp", "sparse_kv",
                (dict(heads=1, tokens=200, head_dim=32, ratio=0.3, sinks=4, rows_per_tile=16, dtype="float16"),
                 dict(heads=1, tokens=160, head_dim=64, ratio=0.1, sinks=0, dtype="float32"),
                 dict(heads=2, tokens=32, head_dim=16, ratio=1.0, sinks=2, rows_per_tile=32, dtype="float16")),
                entry=("sparse_kv_compress",), sync_order=True, kernels=("sparse_kv_kernel",)),
)}


def _spec(name) -> ListingSpec:
    if not isinstance(name, str):
        name = getattr(name, "__name__", name)       # a kernel function
    if not isinstance(name, str):
        raise TypeError(f"name a kernel by its version or function name (a str), got {type(name).__name__}")
    if name in REGISTRY:
        return REGISTRY[name]
    for spec in REGISTRY.values():
        if name in spec.kernels:
            return spec
    known = sorted(set(REGISTRY) | {k for s in REGISTRY.values() for k in s.kernels})
    raise ValueError(f"no listing registered for {name!r}; known: {', '.join(known)}")


def listing_path(version_or_kernel_name) -> Path:
    """Where the listing of ``version_or_kernel_name`` lives (it may not exist yet)."""
    return _spec(version_or_kernel_name).file


def listing(version_or_kernel_name) -> str:
    """The Ascend C text of a course kernel: a version (``"v1"``, ``"v2c"``, ``"scaled_add"``) or a
    Python kernel's name (``"moe_gating_v1_kernel"``). Raises :class:`ListingMissing` when the file
    has not been written yet."""
    spec = _spec(version_or_kernel_name)
    if not spec.file.exists():
        raise ListingMissing(f"the Ascend C listing of {spec.name!r} ({spec.file.relative_to(KERNELS_DIR.parent.parent)}) "
                             "has not been written yet")
    return spec.file.read_text(encoding="utf-8")


def spec_entries(version_or_kernel_name, text: str | None = None) -> list[str]:
    """The ``__global__`` entries compared with the launches of a kernel, in launch order: the
    registry's ``entry``, else the entry named ``<name>`` or ``*_<name>``, else (when no other
    registered kernel shares the file) every entry in file order. Raises :class:`ListingMissing`
    when the file or its entry is not written yet."""
    spec = _spec(version_or_kernel_name)
    text = listing(spec.name) if text is None else text
    names = cpp_entries(text)
    if spec.entry is not None:
        missing = [e for e in spec.entry if e not in names]
        if missing:
            raise ListingError(f"{spec.path} has no __global__ entry {', '.join(missing)}; entries: {', '.join(names)}")
        return list(spec.entry)
    mine = [n for n in names if n == spec.name or n.endswith("_" + spec.name)]
    if mine:
        return mine
    if any(other.path == spec.path for other in REGISTRY.values() if other.name != spec.name):
        raise ListingMissing(f"{spec.path} has no entry named *_{spec.name} yet (entries: {', '.join(names) or 'none'})")
    return names


# ================================================================================================
# Reading C++: tokens, definitions, a program tree
# ================================================================================================
@dataclass(frozen=True)
class Tok:
    text: str
    line: int


_LEXEMES = re.compile(r"""
    (?P<marker>@SCALAR\d+@)
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<number>0[xX][0-9a-fA-F]+[uUlL]*|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFuUlL]*)
  | (?P<op>::|->|<<|\+\+|--|&&|\|\||[<>=!+\-*/%&|^]=|[{}()\[\];,.<>?:~!+\-*/%&|^=])
  | (?P<space>\s+)
  | (?P<other>.)""", re.X)
_STRIP = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|/\*.*?\*/|//[^\n]*|^[ \t]*#[^\n]*', re.S | re.M)
_MARKER = re.compile(r"//\s*scalar:\s*(\S.*?)\s*$", re.M)


def _tokens(text: str) -> tuple[list[Tok], list[str]]:
    """Tokens (comments, strings and preprocessor lines dropped; line numbers kept) and the names
    of the ``// scalar: NAME`` markers (token ``@SCALARi@``)."""
    if not isinstance(text, str):
        raise TypeError(f"a listing is C++ source text (str), got {type(text).__name__}")
    markers: list[str] = []

    def mark(m):
        markers.append(m.group(1))
        return f"@SCALAR{len(markers) - 1}@"

    text = _MARKER.sub(mark, text)

    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))      # strings too: only calls matter

    text = _STRIP.sub(blank, text)
    out, line = [], 1
    for m in _LEXEMES.finditer(text):
        kind, s = m.lastgroup, m.group(0)
        if kind == "other":
            raise ListingError(f"line {line}: unexpected character {s!r}")
        if kind != "space":
            out.append(Tok(s, line))
        line += s.count("\n")
    return out, markers


_CLOSE = {"(": ")", "[": "]", "{": "}"}


def _match(toks: list[Tok], i: int) -> int:
    """Index of the bracket closing the one at ``i`` ((, [ or {)."""
    stack = []
    for j in range(i, len(toks)):
        s = toks[j].text
        if s in _CLOSE:
            stack.append(_CLOSE[s])
        elif s in (")", "]", "}"):
            if not stack or stack.pop() != s:
                raise ListingError(f"line {toks[j].line}: unbalanced {s!r}")
            if not stack:
                return j
    raise ListingError(f"line {toks[i].line}: {toks[i].text!r} is never closed")


_TEMPLATE_ARG_TOKENS = re.compile(r"^(?:[A-Za-z_]\w*|\d\w*|::|,|\*|&|<|>)$")


def _template_close(toks: list[Tok], i: int) -> int | None:
    """If ``toks[i]`` is ``<`` opening template arguments (only names, numbers, ``::``, commas,
    ``*`` / ``&`` and nested ``<>``), the index of its ``>``; else None (a comparison)."""
    depth = 0
    for j in range(i, min(len(toks), i + 64)):
        s = toks[j].text
        if not _TEMPLATE_ARG_TOKENS.match(s):
            return None
        if s == "<":
            depth += 1
        elif s == ">":
            depth -= 1
            if depth == 0:
                return j
    return None


def _split_commas(toks: list[Tok]) -> list[list[Tok]]:
    parts, cur, depth = [], [], 0
    for t in toks:
        if t.text in ("(", "[", "{", "<"):
            depth += 1
        elif t.text in (")", "]", "}", ">"):
            depth -= 1
        if t.text == "," and depth == 0:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    if cur:
        parts.append(cur)
    return parts


@dataclass
class _Func:
    name: str
    owner: str | None
    body: list[Tok]
    is_global: bool
    line: int


@dataclass
class _Class:
    name: str
    params: list[str]


@dataclass
class _Unit:
    """Definitions found in one listing."""

    funcs: dict[tuple[str | None, str], _Func] = field(default_factory=dict)
    classes: dict[str, _Class] = field(default_factory=dict)
    entries: list[_Func] = field(default_factory=list)
    markers: list[str] = field(default_factory=list)
    global_tensors: set[str] = field(default_factory=set)   # names declared GlobalTensor<...>


def _template_params(toks: list[Tok], lt: int, gt: int) -> list[str]:
    names = []
    for part in _split_commas(toks[lt + 1:gt]):
        words = [t.text for t in part]
        if "=" in words:
            words = words[:words.index("=")]
        idents = [w for w in words if re.match(r"^[A-Za-z_]\w*$", w)]
        if idents:
            names.append(idents[-1])
    return names


def _scan(toks: list[Tok], lo: int, hi: int, owner: str | None, unit: _Unit) -> None:
    """Find class and function definitions in ``toks[lo:hi]`` (namespace or class scope)."""
    i, params, decl_start = lo, [], lo
    while i < hi:
        s = toks[i].text
        if s == "template" and i + 1 < hi and toks[i + 1].text == "<":
            gt = _template_close(toks, i + 1)
            if gt is None:
                raise ListingError(f"line {toks[i].line}: cannot read this template parameter list")
            params = _template_params(toks, i + 1, gt)
            i = gt + 1
            continue
        if s in ("class", "struct", "union") and i + 1 < hi and re.match(r"^[A-Za-z_]\w*$", toks[i + 1].text):
            name = toks[i + 1].text
            j = i + 2
            while j < hi and toks[j].text not in ("{", ";"):
                j += 1
            if j < hi and toks[j].text == "{":
                end = _match(toks, j)
                unit.classes[name] = _Class(name, params)
                _scan(toks, j + 1, end, name, unit)
                i = end + 1
            else:
                i = j + 1
            params, decl_start = [], i
            continue
        if s == "namespace":
            j = i + 1
            while j < hi and toks[j].text not in ("{", ";"):
                j += 1
            if j < hi and toks[j].text == "{":
                end = _match(toks, j)
                _scan(toks, j + 1, end, owner, unit)
                i = end + 1
            else:
                i = j + 1
            decl_start = i
            continue
        if (re.match(r"^[A-Za-z_]\w*$", s) and s not in _KEYWORDS and i + 1 < hi and toks[i + 1].text == "("):
            close = _match(toks, i + 1)
            k = close + 1
            while k < hi and toks[k].text in ("const", "override", "noexcept", "final"):
                k += 1
            if k < hi and toks[k].text == ":" and owner == s:        # constructor initialiser list
                while k < hi and toks[k].text != "{":
                    k += 1
            if k < hi and toks[k].text == "{":
                end = _match(toks, k)
                fowner = owner
                if i >= 2 and toks[i - 1].text == "::":              # Class<T>::Method defined outside
                    j = i - 2
                    if toks[j].text == ">":
                        depth = 0
                        while j > 0:
                            depth += {">": 1, "<": -1}.get(toks[j].text, 0)
                            if depth == 0:
                                break
                            j -= 1
                        j -= 1
                    fowner = toks[j].text
                decl = [t.text for t in toks[decl_start:i]]
                func = _Func(s, fowner, toks[k + 1:end], "__global__" in decl, toks[i].line)
                unit.funcs[(fowner, s)] = func
                if func.is_global:
                    unit.entries.append(func)
                i = end + 1
                params, decl_start = [], i
                continue
        if s == "{":
            i = _match(toks, i) + 1
            continue
        if s in (";", "}"):
            decl_start = i + 1
            params = [] if s == ";" else params
        i += 1


def _global_tensors(toks: list[Tok]) -> set[str]:
    """Names declared ``GlobalTensor<T> a, b;`` or ``const GlobalTensor<T>& a`` (the GM operands)."""
    names = set()
    for i, t in enumerate(toks):
        if t.text != "GlobalTensor" or i + 1 >= len(toks) or toks[i + 1].text != "<":
            continue
        j = _template_close(toks, i + 1)
        if j is None:
            continue
        j += 1
        while j < len(toks) and toks[j].text in ("&", "*", "const"):
            j += 1
        while j < len(toks) and re.match(r"^[A-Za-z_]\w*$", toks[j].text) and toks[j].text not in _KEYWORDS:
            names.add(toks[j].text)
            if j + 2 < len(toks) and toks[j + 1].text == "," and toks[j + 2].text not in _KEYWORDS \
                    and toks[j + 2].text not in ("const", "GlobalTensor", "LocalTensor"):
                j += 2
            else:
                break
    return names


def _unit(text: str) -> _Unit:
    toks, markers = _tokens(text)
    unit = _Unit(markers=markers, global_tensors=_global_tensors(toks))
    _scan(toks, 0, len(toks), None, unit)
    return unit


# ---- the program tree ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One Ascend C call (``name`` an ASCEND_C_API key or ``"scalar: ..."``); ``token`` adds the
    HardEvent / pipe of SetFlag, WaitFlag and PipeBarrier (``"SetFlag<MTE2_S>"``)."""

    name: str
    token: str
    line: int


@dataclass(frozen=True)
class Loop:
    body: tuple
    line: int


@dataclass(frozen=True)
class Branch:
    """``if`` / ``else``: ``alternatives`` in source order; ``has_else`` False adds an empty one."""

    alternatives: tuple[tuple, ...]
    has_else: bool
    line: int


_DMA = ("DataCopy", "DataCopyPad")


def _api_name(name: str) -> str | None:
    name = _ALIASES.get(name, name)
    return name if name in ASCEND_C_API else None


def _call_token(name: str, targs: list[Tok]) -> str:
    if name in ("SetFlag", "WaitFlag", "PipeBarrier") and targs:
        return f"{name}<{targs[-1].text}>"           # HardEvent::MTE2_S -> MTE2_S
    return name


class _Reader:
    """Walks function bodies from an entry, inlining the listing's own functions and methods."""

    def __init__(self, unit: _Unit):
        self.unit = unit
        self.stack: list[tuple] = []
        self.skipping = 0

    # ---- statements ------------------------------------------------------------------------------
    def block(self, toks: list[Tok], owner, consts, local, start: int = 0) -> tuple:
        """Statements ``toks[start:]``. After ``if (...) return;`` the rest of the block belongs to
        the paths that did not return (spliced into the branch); after a plain ``return`` nothing."""
        nodes, i = [], start
        while i < len(toks):
            got, i = self.statement(toks, i, owner, consts, local)
            nodes.extend(got)
            if nodes and isinstance(nodes[-1], Return):
                break
            if nodes and isinstance(nodes[-1], Branch) and _may_return(nodes[-1]):
                rest = self.block(toks, owner, consts, local, i)
                nodes[-1] = _splice(nodes[-1], rest)
                break
        return tuple(nodes)

    def body(self, func: _Func, consts) -> tuple:
        """A function's program: its block, with the end-of-function markers dropped."""
        return _drop_returns(self.block(func.body, func.owner, consts, {}))

    def statement(self, toks, i, owner, consts, local):
        s = toks[i].text
        line = toks[i].line
        if s == "{":
            end = _match(toks, i)
            return self.block(toks[i + 1:end], owner, consts, dict(local)), end + 1
        if s == ";":
            return (), i + 1
        if s.startswith("@SCALAR"):
            if i + 1 >= len(toks):
                raise ListingError(f"line {line}: a '// scalar:' marker with no statement after it")
            self.skipping += 1            # the unit's own calls are not instructions of the trace
            try:
                _, nxt = self.statement(toks, i + 1, owner, consts, dict(local))
            finally:
                self.skipping -= 1
            name = SCALAR_PREFIX + self.unit.markers[int(s[7:-1])]
            return (Call(name, name, line),), nxt
        if s in ("for", "while"):
            close = _match(toks, i + 1)
            head = self.calls(toks[i + 2:close], owner, consts, local)
            body, nxt = self.statement(toks, close + 1, owner, consts, dict(local))
            return head + (_loop(body, line),), nxt
        if s == "do":
            body, nxt = self.statement(toks, i + 1, owner, consts, dict(local))
            if nxt >= len(toks) or toks[nxt].text != "while":
                raise ListingError(f"line {line}: do without while")
            close = _match(toks, nxt + 1)
            return (_loop(body, line),), close + 2
        if s == "if" and toks[i + 1].text in _CORE_MACROS:
            # `if ASCEND_IS_AIC { ... }` (the macro carries its own `constexpr(...)`): a branch the
            # traced path of a mixed kernel may take or not (traced_calls: AIC's calls, then AIV0's)
            then, nxt = self.statement(toks, i + 2, owner, consts, dict(local))
            return (Branch((tuple(then),), False, line),), nxt
        if s == "if":
            j = i + 1
            if toks[j].text == "constexpr":
                j += 1
            close = _match(toks, j)
            cond = [t.text for t in toks[j + 1:close]]
            head = self.calls(toks[j + 1:close], owner, consts, local)
            then, nxt = self.statement(toks, close + 1, owner, consts, dict(local))
            other, has_else = (), False
            if nxt < len(toks) and toks[nxt].text == "else":
                other, nxt = self.statement(toks, nxt + 1, owner, consts, dict(local))
                has_else = True
            known = _const_bool(cond, consts)
            if known is not None:
                return head + tuple(then if known else other), nxt
            return head + (Branch((tuple(then), tuple(other)) if has_else else (tuple(then),), has_else, line),), nxt
        if s == "return":
            j = i
            while j < len(toks) and toks[j].text != ";":
                j = _match(toks, j) + 1 if toks[j].text in _CLOSE else j + 1
            return self.calls(toks[i + 1:j], owner, consts, local) + (Return(line),), j + 1
        if s == "switch":
            raise ListingError(f"line {line}: switch is not supported by the listing reader; write if / else")
        # an expression or declaration statement, up to ';' outside brackets
        j = i
        while j < len(toks) and toks[j].text != ";":
            j = _match(toks, j) + 1 if toks[j].text in _CLOSE else j + 1
        stmt = toks[i:j]
        self.declare(stmt, local)
        return self.calls(stmt, owner, consts, local), j + 1

    def declare(self, stmt, local) -> None:
        """``Kernel<float, true> op;`` -> local['op'] = ('Kernel', {'T': 'float', 'FLAG': 'true'})."""
        if not stmt or stmt[0].text not in self.unit.classes:
            return
        cls = self.unit.classes[stmt[0].text]
        args, k = [], 1
        if len(stmt) > 1 and stmt[1].text == "<":
            gt = _template_close(stmt, 1)
            if gt is None:
                return
            args = [" ".join(t.text for t in part) for part in _split_commas(stmt[2:gt])]
            k = gt + 1
        if k < len(stmt) and re.match(r"^[A-Za-z_]\w*$", stmt[k].text):
            local[stmt[k].text] = (cls.name, dict(zip(cls.params, args)))

    # ---- calls inside an expression --------------------------------------------------------------
    def calls(self, toks, owner, consts, local) -> tuple:
        found = []          # (index of the closing paren, nodes): C++ evaluates arguments first
        for i, targs, j in _call_sites(toks):
            close = _match(toks, j)
            receiver = toks[i - 2].text if i >= 2 and toks[i - 1].text in (".", "->") else None
            qualifier = toks[i - 2].text if i >= 2 and toks[i - 1].text == "::" else None
            nodes = self.call(toks[i].text, targs, receiver, qualifier, owner, consts, local, toks[i].line)
            if nodes and isinstance(nodes[-1], Call) and nodes[-1].name in _DMA:
                nodes = nodes[:-1] + (self.direction(nodes[-1], toks[j + 1:close]),)
            found.append((close, nodes))
        found.sort(key=lambda x: x[0])
        return tuple(node for _, nodes in found for node in nodes)

    def direction(self, call: Call, args: list[Tok]) -> Call:
        """``DataCopy GM->UB`` when the source (2nd argument) is a GlobalTensor, ``UB->GM`` when
        the destination is: the trace names the direction, so the listing must too."""
        parts = _split_commas(args)
        bases = [next((t.text for t in p if re.match(r"^[A-Za-z_]\w*$", t.text) and t.text != "this"), None)
                 for p in parts[:2]]
        gm = self.unit.global_tensors
        if len(bases) == 2 and bases[0] in gm and bases[1] not in gm:
            way = "UB->GM"
        elif len(bases) == 2 and bases[1] in gm and bases[0] not in gm:
            way = "GM->UB"
        else:
            raise ListingError(f"line {call.line}: cannot tell which operand of {call.name} is in global memory; "
                               "declare it as a GlobalTensor<T> (a member, a local or a parameter)")
        return Call(call.name, f"{call.name} {way}", call.line)

    def call(self, name, targs, receiver, qualifier, owner, consts, local, line) -> tuple:
        if self.skipping:
            return ()
        funcs = self.unit.funcs
        target, bind = None, None
        if receiver is not None and receiver in local:
            cls, bind = local[receiver]
            target = funcs.get((cls, name))
        elif receiver == "this":
            target = funcs.get((owner, name))
        elif receiver is None and qualifier in (None, "AscendC"):
            target = funcs.get((owner, name)) or funcs.get((None, name))
        if target is None and receiver is not None and receiver not in local and _api_name(name) is None:
            matches = [f for (o, n), f in funcs.items() if n == name and o is not None]
            target = matches[0] if len(matches) == 1 else None
        if target is not None:
            key = (target.owner, target.name, tuple(sorted((bind or {}).items())))
            if key in self.stack:
                raise ListingError(f"line {line}: recursion through {name}() is not supported")
            self.stack.append(key)
            try:
                inner = dict(consts) if target.owner == owner and bind is None else {}
                inner.update(bind or {})
                return self.body(target, inner)
            finally:
                self.stack.pop()
        api = _api_name(name)
        if api is None:
            return ()
        return (Call(api, _call_token(api, targs), line),)


def _call_sites(toks: list[Tok]):
    """``(i, template args, index of "(")`` of every call in ``toks``: a name that is not a keyword
    or built-in type, optional template arguments, then ``(``. A name right after a type
    (``GatherMaskParams params(1, rows, 8, 0)``, ``void Init(...)``) is declared, not called."""
    for i, t in enumerate(toks[:-1]):
        s = t.text
        if not re.match(r"^[A-Za-z_]\w*$", s) or s in _KEYWORDS or s in _CPP_TYPES:
            continue
        targs, j = [], i + 1
        if toks[j].text == "<":
            gt = _template_close(toks, j)
            if gt is None or gt + 1 >= len(toks) or toks[gt + 1].text != "(":
                continue
            targs, j = toks[j + 1:gt], gt + 1
        if toks[j].text != "(":
            continue
        if i >= 1 and (re.match(r"^[A-Za-z_]\w*$", toks[i - 1].text) and toks[i - 1].text not in _KEYWORDS
                       or toks[i - 1].text == ">" and _declares(toks, i - 1)):
            continue
        yield i, targs, j


@dataclass(frozen=True)
class Return:
    """``return``: the end of this path through the function (dropped once the block is read)."""

    line: int


def _may_return(node) -> bool:
    if isinstance(node, Return):
        return True
    return isinstance(node, Branch) and any(alt and _may_return(alt[-1]) for alt in node.alternatives)


def _splice(branch: Branch, rest: tuple) -> Branch:
    """Append ``rest`` to every path through ``branch`` that does not return."""
    def go_on(alt):
        if alt and isinstance(alt[-1], Branch) and _may_return(alt[-1]):
            return alt[:-1] + (_splice(alt[-1], rest),)
        return alt if alt and isinstance(alt[-1], Return) else alt + rest
    alts = tuple(go_on(a) for a in branch.alternatives) + (() if branch.has_else else (rest,))
    return Branch(alts, True, branch.line)


def _drop_returns(nodes) -> tuple:
    out = []
    for n in nodes:
        if isinstance(n, Branch):
            out.append(Branch(tuple(_drop_returns(a) for a in n.alternatives), n.has_else, n.line))
        elif isinstance(n, Loop):
            out.append(Loop(_drop_returns(n.body), n.line))
        elif not isinstance(n, Return):
            out.append(n)
    return tuple(out)


def _loop(body, line) -> Loop:
    """A loop; a ``return`` inside one is only allowed where no Ascend C call is at stake."""
    def has(nodes, kind):
        return any(isinstance(n, kind) or isinstance(n, Loop) and has(n.body, kind)
                   or isinstance(n, Branch) and any(has(a, kind) for a in n.alternatives) for n in nodes)
    if has(body, Return) and has(body, Call):
        raise ListingError(f"line {line}: a return inside a loop that makes Ascend C calls is not supported; "
                           "end the loop first (or put the scalar code under a '// scalar:' marker)")
    return Loop(_drop_returns(tuple(body)), line)


def _declares(toks: list[Tok], gt: int) -> bool:
    """Does the ``>`` at ``gt`` close a type's template arguments (``LocalTensor<T> x(...)``)?"""
    depth = 0
    for j in range(gt, max(-1, gt - 64), -1):
        s = toks[j].text
        depth += {">": 1, "<": -1}.get(s, 0)
        if depth == 0:
            return j >= 1 and re.match(r"^[A-Za-z_]\w*$", toks[j - 1].text) is not None \
                and _template_close(toks, j) == gt
    return False


def _const_bool(cond: list[str], consts: dict) -> bool | None:
    """``FLAG`` / ``!FLAG`` with FLAG bound to true / false, or the literals; else None."""
    neg = False
    while cond and cond[0] == "!":
        neg, cond = not neg, cond[1:]
    if len(cond) == 1:
        value = consts.get(cond[0], cond[0])
        if value in ("true", "false"):
            return (value == "true") != neg
    return None


def cpp_entries(text: str) -> list[str]:
    """Names of the ``__global__`` entry functions of a listing, in file order."""
    return [f.name for f in _unit(text).entries]


def cpp_program(text: str, entry: str | None = None) -> tuple:
    """The program tree an entry runs: :class:`Call`, :class:`Loop` and :class:`Branch` nodes in
    order, the listing's own functions and methods inlined. ``entry=None``: the only entry (or
    every entry, in file order, one after the other)."""
    unit = _unit(text)
    if not unit.entries:
        raise ListingError('no extern "C" __global__ entry function in this listing')
    if entry is None:
        chosen = unit.entries
    else:
        chosen = [f for f in unit.entries if f.name == entry]
        if not chosen:
            raise ListingError(f"no __global__ entry {entry!r}; entries: {', '.join(f.name for f in unit.entries)}")
    reader = _Reader(unit)
    return tuple(node for f in chosen for node in reader.body(f, {}))


def _flatten(nodes) -> list[Call]:
    out = []
    for n in nodes:
        if isinstance(n, Call):
            out.append(n)
        elif isinstance(n, Loop):
            out.extend(_flatten(n.body))
        else:
            for alt in n.alternatives:
                out.extend(_flatten(alt))
    return out


def cpp_calls(text: str, entry: str | None = None, *, detail: bool = False) -> list[str]:
    """The Ascend C calls of a listing in program order, from its entry (``entry=None``: every
    entry in file order): the listing's own methods and helpers inlined where they are called,
    each loop body and each ``if`` / ``else`` branch once, in source order. Names are
    ``ASCEND_C_API`` keys (``"DataCopy"``, ``"TPipe::InitBuffer"``) plus ``"scalar: NAME"`` for a
    ``// scalar: NAME`` unit; ``detail=True`` gives ``"SetFlag<MTE2_S>"`` / ``"PipeBarrier<PIPE_ALL>"``."""
    return [c.token if detail else c.name for c in _flatten(cpp_program(text, entry))]


def cpp_call_names(text: str) -> list[tuple[str, int]]:
    """Every call in the whole listing, reachable or not, that is not one of its own functions,
    classes, a C++ keyword or a built-in type cast: ``(name, line)``, ``AscendC::`` dropped and
    ``InitBuffer`` / ``Get`` given their ``ASCEND_C_API`` keys. Each should be an ``ASCEND_C_API``
    key or in :data:`ALLOWED_CPP_NAMES`."""
    unit = _unit(text)
    own = {name for _, name in unit.funcs} | set(unit.classes)
    toks, _ = _tokens(text)
    return [(_ALIASES.get(toks[i].text, toks[i].text), toks[i].line) for i, _, _ in _call_sites(toks)
            if toks[i].text not in own]


# ================================================================================================
# The Python side: what one block called
# ================================================================================================
def instruction_name(event_name: str, pipe: str | None = None) -> str:
    """The Ascend C name of a BlockTrace event: its first word (``"DataCopy GM->UB 256 B"`` ->
    ``"DataCopy"``, ``"Add x4"`` -> ``"Add"``); a ``ctx.scalar("NAME")`` event (pipe S, not an API
    name) -> ``"scalar: NAME"``."""
    if not isinstance(event_name, str) or not event_name:
        raise ValueError(f"an event name is a non-empty str, got {event_name!r}")
    words = event_name.split()
    first = words[0]
    if first in _DMA and len(words) > 1 and words[1] in ("GM->UB", "UB->GM"):
        return f"{first} {words[1]}"
    if first in _DMA and len(words) > 1 and words[1] == "GM->L1":
        return f"{first} GM->UB"      # the listing side names every GM -> local-memory copy GM->UB
    if first in INSTRUCTIONS:
        return first
    if pipe in (None, "S"):
        return SCALAR_PREFIX + event_name
    raise ValueError(f"event {event_name!r} on pipe {pipe} is not an Ascend C instruction in ASCEND_C_API")


def _tokens_of_log(log) -> list[str]:
    out = []
    for pipe, name in log:
        if pipe is None:
            out.append(_ALIASES.get(name, name))
        else:
            out.append(instruction_name(name, pipe))
    return out


def _run(spec: ListingSpec, case: dict):
    """Run one case timing-only inside record_calls(); returns (timeline, logs)."""
    from ..lang.context import record_calls
    from ..presets import get_preset

    case = dict(case)
    hw = get_preset(case.pop("hw", "ascend-910b2"))
    cores = case.pop("cores", None)
    if cores is not None:
        hw = hw.replace(vector_cores=cores, provenance_note="one core: one block loops over every tile")
    with record_calls() as logs:
        if spec.version == "attention_cv":
            from .decode.attention_cv import decode_attention_cv
            hw = hw.replace(cube_cores=cores, vector_cores=2 * cores, provenance_note="one AI core group") if cores else hw
            b, hq, hkv, d, lmax = (case.pop(x) for x in ("B", "Hq", "Hkv", "D", "Lmax"))
            _, timeline = decode_attention_cv((b, hq, d), (b, lmax, hkv, d), (b, lmax, hkv, d), case.pop("lens"), hw=hw,
                                              timing_only=True)
        elif spec.version == "fused_gather":
            from .moe_layer.fused_gather import gather_matmul
            hw = hw.replace(cube_cores=cores, provenance_note="one cube core") if cores else hw
            rows = list(case.pop("rows"))
            h, f, n = case.pop("H"), case.pop("F"), case.pop("N")
            _, timeline = gather_matmul((n, h), None, np.array(rows), (len(rows), h, f), case.pop("K"), hw=hw,
                                        timing_only=True, **case)
        elif spec.version == "fused_router":
            from .moe_layer.fused_router import fused_router_gating
            hw = hw.replace(cube_cores=cores, vector_cores=2 * cores, provenance_note="one AI core group") if cores else hw
            n, h, e = case.pop("N"), case.pop("H"), case.pop("E")
            _, _, timeline = fused_router_gating((n, h), (h, e), case.pop("K"), hw=hw, timing_only=True, **case)
        elif spec.version == "epilogue_mix":
            from .gemm.epilogue import matmul_leakyrelu
            m, k, n = case.pop("M"), case.pop("K"), case.pop("N")
            hw = hw.replace(cube_cores=cores, vector_cores=2 * cores, provenance_note="one AI core group") if cores else hw
            _, timeline = matmul_leakyrelu((m, k), (k, n), 0.1, hw=hw, timing_only=True, **case)
        elif spec.version.startswith("gemm_"):
            from .gemm import gemm
            version = case.pop("version", spec.version[5:])
            m, k, n = case.pop("M"), case.pop("K"), case.pop("N")
            _, timeline = gemm((m, k), (k, n), version=version, hw=hw, timing_only=True,
                               dtype=np.dtype(case.pop("dtype", "float16")), **case)
        elif spec.version == "scaled_add":
            from .scaled_add import scaled_add
            _, timeline = scaled_add(case.pop("n"), None, hw=hw, timing_only=True, block_dim=case.pop("block_dim", 1),
                                     **case)
        elif spec.version == "moe_dispatch":
            from .moe_gating.dispatch_kernel import moe_dispatch_kernel_run
            timeline = moe_dispatch_kernel_run((case.pop("N"), case.pop("K")), num_experts=case.pop("E"), hw=hw,
                                               timing_only=True, **case).timeline
        elif spec.version.startswith("decode_") or spec.version == "flash_decode":
            from .decode.listing_cases import run_case
            timeline = run_case(spec.version, hw, **case)
        elif spec.version == "sparse_kv":
            from .sparse_kv.listing_cases import run_case
            timeline = run_case(hw, **case)
        elif spec.version == "large_e":
            from .moe_gating.large_e import simulate_large_e
            timeline, _ = simulate_large_e(case.pop("N"), case.pop("E"), case.pop("K"), hw=hw,
                                           dtype=np.dtype(case.pop("dtype", "float32")), **case)
        else:
            from .moe_gating.run import ROUTING_VERSION, VERSIONS, simulate_moe_gating
            if spec.version not in VERSIONS and spec.version != ROUTING_VERSION:
                raise ListingMissing(f"moe_gating_topk has no version {spec.version!r} yet")
            dtype = np.dtype(case.pop("dtype", "float32"))
            timeline = simulate_moe_gating(case.pop("B"), case.pop("S"), case.pop("E"), case.pop("K"),
                                           version=spec.version, hw=hw, dtype=dtype, **case).timeline
    return timeline, logs


def calls_of_run(run, *, sync: bool = False, every_block: bool = False) -> list[list[str]]:
    """Trace any run: ``run()`` launches kernels (timing-only is enough) and returns their
    Timeline; returns, per launch, the calls of its first simulated block (``every_block=True``:
    of every simulated block, one block class after another: a tail block takes other branches)
    in program order, as :func:`traced_calls` names them. What ``npu_lab.course.check_cpp`` runs
    on a learner's own Python kernel."""
    from ..lang.context import record_calls

    if not callable(run):
        raise TypeError(f"run is a function that launches the kernel and returns its Timeline, got {type(run).__name__}")
    with record_calls() as logs:
        timeline = run()
    launches = getattr(timeline, "launches", None)
    if launches is None:
        raise TypeError(f"run() must return the launch's Timeline, got {type(timeline).__name__}")
    out, k = [], 0
    for launch in launches:
        n = len(launch.traces)
        if k + n > len(logs):
            raise RuntimeError("fewer recorded blocks than the timeline's block classes")
        for b in range(k, k + n if every_block else k + 1):
            calls = _tokens_of_log(logs[b])
            out.append(calls if sync else [c for c in calls if _kind(c) == "instruction"])
        k += n
    return out


def traced_calls(version_or_kernel_name, case: dict | None = None, *, sync: bool = False) -> list[list[str]]:
    """What the Python kernel called, for one small timing-only run: per launch (one for a fused
    kernel, three for the discrete chain), the calls of its first simulated block in program
    order — instructions as Ascend C names (``"DataCopyPad"``, ``"Add"``, ``"scalar: heap top-k +
    softmax"``), and with ``sync=True`` also the sync / queue calls (``"SetFlag<MTE2_S>"``,
    ``"EnQue"``, ``"TPipe::InitBuffer"``). ``case``: the shape (default: the registry's first)."""
    spec = _spec(version_or_kernel_name)
    if case is None:
        case = spec.cases[0]
    if not isinstance(case, dict):
        raise TypeError(f"case is a dict of the run's shape (like {spec.cases[0]}), got {type(case).__name__}")
    timeline, logs = _run(spec, case)
    out, k = [], 0
    for launch in timeline.launches:          # a timing-only run simulates one block per class
        if k >= len(logs):
            raise RuntimeError("fewer recorded blocks than the timeline's block classes")
        calls = _tokens_of_log(logs[k])
        if getattr(launch, "groups", 0):          # a mixed launch: AIC, then AIV0 of group 0
            calls = calls + _tokens_of_log(logs[k + 1])
        out.append(calls if sync else [c for c in calls if _kind(c) == "instruction"])
        k += len(launch.traces)
    if k != len(logs):
        raise RuntimeError(f"recorded {len(logs)} blocks but the timeline has {k} block classes")
    return out


def _kind(token: str) -> str:
    base = token.split("<")[0].split(" ")[0]
    if base in INSTRUCTIONS or token.startswith(SCALAR_PREFIX):
        return "instruction"
    if base in SYNC_CALLS:
        return "sync"
    return "other"


# ================================================================================================
# The comparison: does a call sequence follow the listing's program?
# ================================================================================================
@dataclass
class Match:
    """The result of :func:`compare`: ``ok``; if not, ``matched`` calls were followed before the
    listing could not go on, and ``message`` says where; ``used`` holds the loops entered and
    the branch alternatives taken, by source line (for coverage across cases; a helper inlined at
    two call sites counts once)."""

    ok: bool
    matched: int
    message: str
    used: set
    alternatives: dict      # id -> "line N: loop body" / "line N: if-branch 1" (every one there is)


class _Nfa:
    """Thompson automaton of a program tree: token edges and (tagged) empty edges."""

    def __init__(self, nodes, keep):
        self.edges: list[list[tuple]] = []      # state -> [(token or None, next, tag)]
        self.names: dict = {}
        self.start = self.new()
        self.accept = self.build(nodes, self.start, keep)

    def new(self) -> int:
        self.edges.append([])
        return len(self.edges) - 1

    def build(self, nodes, s, keep) -> int:
        for n in nodes:
            if isinstance(n, Call):
                if keep(n.token):
                    t = self.new()
                    self.edges[s].append((n.token, t, None))
                    s = t
            elif isinstance(n, Loop):
                if not any(keep(c.token) for c in _flatten(n.body)):
                    continue
                tag = ("loop", n.line)   # per source line: a helper inlined twice is one loop
                self.names[tag] = f"line {n.line}: the loop's body"
                body = self.new()
                self.edges[s].append((None, body, tag))
                end = self.build(n.body, body, keep)
                self.edges[end].append((None, s, None))
                t = self.new()
                self.edges[s].append((None, t, None))
                s = t
            else:
                alts = [a for a in n.alternatives]
                if not any(keep(c.token) for a in alts for c in _flatten(a)):
                    continue
                t = self.new()
                for k, alt in enumerate(alts):
                    a0 = self.new()
                    tag = None
                    if any(keep(c.token) for c in _flatten(alt)):
                        tag = ("branch", n.line, k)
                        self.names[tag] = f"line {n.line}: the {'else' if k else 'if'} branch"
                    self.edges[s].append((None, a0, tag))
                    self.edges[self.build(alt, a0, keep)].append((None, t, None))
                if not n.has_else:
                    self.edges[s].append((None, t, None))
                s = t
        return s

    def closure(self, states: set) -> set:
        out, todo = set(states), list(states)
        while todo:
            for tok, t, _ in self.edges[todo.pop()]:
                if tok is None and t not in out:
                    out.add(t)
                    todo.append(t)
        return out


def compare(nodes, calls: list[str], *, sync: bool = False) -> Match:
    """Does the call sequence ``calls`` (from :func:`traced_calls`) follow the program ``nodes``
    (from :func:`cpp_program`)? Instructions only, or with ``sync=True`` also the sync / queue
    calls. A loop matches any number of iterations and an ``if`` either branch, so loop counts
    do not matter; every call must be there, none extra, in order."""
    keep = (lambda tok: _kind(tok) in ("instruction", "sync")) if sync else (lambda tok: _kind(tok) == "instruction")
    calls = [c for c in calls if keep(c)]
    nfa = _Nfa(nodes, keep)
    forward = [nfa.closure({nfa.start})]
    for i, tok in enumerate(calls):
        nxt = {t for s in forward[-1] for edge_tok, t, _ in nfa.edges[s] if edge_tok == tok}
        if not nxt:
            expected = sorted({e for s in forward[-1] for e, _, _ in nfa.edges[s] if e is not None})
            if nfa.accept in forward[-1]:
                expected.append("(the end)")
            context = " → ".join(calls[max(0, i - 4):i])
            return Match(False, i, f"call {i} of the trace is {tok!r} (after {context or 'the start'}), "
                         f"but the listing expects {' or '.join(map(repr, expected)) or 'nothing more'}",
                         set(), dict(nfa.names))
        forward.append(nfa.closure(nxt))
    if nfa.accept not in forward[-1]:
        expected = sorted({e for s in forward[-1] for e, _, _ in nfa.edges[s] if e is not None})
        return Match(False, len(calls), f"the trace ends after {len(calls)} calls but the listing goes on with "
                     f"{' or '.join(map(repr, expected))}", set(), dict(nfa.names))
    # backward: states from which the rest of the trace reaches the accept state
    reverse: list[list[tuple]] = [[] for _ in nfa.edges]
    for s, out in enumerate(nfa.edges):
        for tok, t, tag in out:
            reverse[t].append((tok, s, tag))

    def back_closure(states):
        out, todo = set(states), list(states)
        while todo:
            for tok, s, _ in reverse[todo.pop()]:
                if tok is None and s not in out:
                    out.add(s)
                    todo.append(s)
        return out

    backward = [set()] * (len(calls) + 1)
    backward[-1] = back_closure({nfa.accept})
    for i in range(len(calls) - 1, -1, -1):
        prev = {s for t in backward[i + 1] for tok, s, _ in reverse[t] if tok == calls[i]}
        backward[i] = back_closure(prev)
    used = set()
    for i in range(len(calls) + 1):
        live = forward[i] & backward[i]
        for s in live:
            for tok, t, tag in nfa.edges[s]:
                if tok is None and tag is not None and t in backward[i]:
                    used.add(tag)
    return Match(True, len(calls), "", used, dict(nfa.names))


# the dispatch kernel (issue 20 §3): one core, so one block sorts every slot (three MrgSort rounds,
# several staging rounds); drop/pad mode too
REGISTRY["moe_dispatch"] = ListingSpec(
    "moe_dispatch", "moe_gating/dispatch_kernel.cpp", "moe_dispatch",
    (dict(N=5, K=2, E=8, cores=1), dict(N=300, K=4, E=16, capacity=50, cores=1), dict(N=40, K=2, E=8, capacity=3)),
    entry=("moe_dispatch_sort", "moe_dispatch_place"), sync_order=True,
    kernels=("moe_dispatch_sort_kernel", "moe_dispatch_place_kernel"))
