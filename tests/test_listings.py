"""The Ascend C listing beside each course kernel says what its Python does (issue 8 §4).

For every kernel in ``npu_lab.kernels.listings.REGISTRY`` (listings not written yet are skipped
with the reason, and checked as soon as their file lands):

* every call in the listing is an ``ASCEND_C_API`` key (or one of the few allowed C++ words);
* the listing has the Ascend C kernel shape: TPipe, InitBuffer, GET_TILING_DATA, a ``__global__
  __aicore__`` entry, Init / Process / CopyIn / Compute / CopyOut;
* **order**: one block of a small timing-only run of the Python kernel is traced (instructions:
  DMA with its direction, vector, scalar; ``ctx.scalar("NAME")`` is one ``// scalar: NAME`` unit
  in the C++) and must follow the listing's program, entered at its ``__global__`` function with
  its methods and helpers inlined. A C++ loop matches any number of iterations (so the small
  case's loop counts do not matter — like comparing with consecutive repeats collapsed, but
  exact about what may repeat) and an ``if`` / ``else`` either branch. Every call must be there,
  none extra, in order;
* the sync / queue calls (SetFlag / WaitFlag per HardEvent, PipeBarrier per pipe, AllocTensor,
  EnQue, DeQue, FreeTensor, InitBuffer; recorded with ``npu_lab.lang.context.record_calls``) are
  the same kinds on both sides, and for the listings marked ``sync_order`` in the same order too;
* coverage: the cases together take every loop and every branch of the listing, so no call in
  the C++ goes unchecked;
* mutations (a dropped, added or swapped call, a moved barrier) make the comparison fail.
"""

from __future__ import annotations

import re

import pytest

from npu_lab.kernels import listings as L
from npu_lab.kernels.listings import (ALLOWED_CPP_NAMES, REGISTRY, Branch, Call, ListingError, ListingMissing,
                                      Loop, compare, cpp_call_names, cpp_calls, cpp_entries, cpp_program,
                                      instruction_name, listing, spec_entries, traced_calls)
from npu_lab.lang import ASCEND_C_API

SPECS = list(REGISTRY.values())
MINE = [s for s in SPECS if s.sync_order]       # the listings written with the full sync order


def _text(spec) -> str:
    try:
        return listing(spec.name)
    except ListingMissing as e:
        pytest.skip(str(e))


def _programs(spec, text=None) -> list[tuple]:
    text = _text(spec) if text is None else text
    try:
        entries = spec_entries(spec.name, text)
    except ListingMissing as e:
        pytest.skip(str(e))
    return [cpp_program(text, e) for e in entries]


def _traced(spec, case, sync) -> list[list[str]]:
    try:
        return traced_calls(spec.name, case, sync=sync)
    except ListingMissing as e:
        pytest.skip(str(e))


def _follow(spec, programs, sync, cases=None):
    """Compare every case; returns (failures, used tags, every tag)."""
    failures, used, names = [], set(), {}
    for case in cases or spec.cases:
        launches = _traced(spec, case, sync)
        if len(launches) != len(programs):
            failures.append(f"{case}: the Python runs {len(launches)} launch(es), the listing has "
                            f"{len(programs)} entr(y/ies)")
            continue
        for k, (prog, calls) in enumerate(zip(programs, launches)):
            m = compare(prog, calls, sync=sync)
            names.update(m.alternatives)
            used |= m.used
            if not m.ok:
                failures.append(f"{case} launch {k}: {m.message}")
    return failures, used, names


# ---- every listing ------------------------------------------------------------------------------
def test_every_cpp_file_is_registered():
    files = {p.relative_to(L.KERNELS_DIR).as_posix() for p in L.KERNELS_DIR.rglob("*.cpp")}
    registered = {s.path for s in SPECS}
    assert files <= registered, f"listings not in listings.REGISTRY (so never checked): {sorted(files - registered)}"


def test_python_kernels_name_their_listing():
    from npu_lab.kernels import scaled_add
    from npu_lab.kernels.moe_gating import fused

    for kernel, name in ((scaled_add.scaled_add_kernel, "scaled_add"), (fused.moe_gating_v1_kernel, "v1"),
                         (fused.moe_gating_v2_kernel, "v2"), (fused.moe_gating_v2_bad_sync_kernel, "v2_bad_sync"),
                         (fused.moe_gating_v2c_kernel, "v2c")):
        assert L.listing_path(kernel) == REGISTRY[name].file
        assert L.listing_path(kernel.__name__) == REGISTRY[name].file


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_calls_are_ascend_c_api(spec):
    text = _text(spec)
    foreign = sorted({(n, line) for n, line in cpp_call_names(text)
                      if n not in ASCEND_C_API and n not in ALLOWED_CPP_NAMES})
    assert not foreign, (f"{spec.path} calls what npu_lab.lang.ASCEND_C_API does not have (add it to the "
                         f"map, or to listings.ALLOWED_CPP_NAMES with a reason): {foreign}")
    assert cpp_calls(text), f"{spec.path}: no Ascend C call found from its entry"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_listing_has_the_kernel_shape(spec):
    text = _text(spec)
    unit = L._unit(text)
    methods = {name for owner, name in unit.funcs if owner is not None}
    # cube kernels (gemm/, and any KERNEL_TYPE_AIC_ONLY listing): GM -> L1 -> L0 -> GM, no CopyIn/Compute/CopyOut
    cube = spec.path.startswith("gemm/") or "KERNEL_TYPE_AIC_ONLY" in text
    for part in ("Init", "Process") if cube else ("Init", "Process", "CopyIn", "Compute", "CopyOut"):
        assert part in methods, f"{spec.path}: no kernel class method {part}()"
    # an operator project's shape (issue 15 §2): the TPipe is created in the entry and handed to the
    # kernel class by pointer (the guide's 避免TPipe在对象内创建和初始化.md), never a class member
    assert re.search(r"\bTPipe\s*\*\s*\w+\s*[;,)]", text), f"{spec.path}: no 'TPipe* pipe' member or Init argument"
    entry_spans = [m.span() for m in re.finditer(r'extern\s+"C"\s+__global__.*?\n\}', text, re.S)]
    for m in re.finditer(r"\bTPipe\s+\w+\s*;", text):
        assert any(a <= m.start() < b for a, b in entry_spans), \
            f"{spec.path} line {text[:m.start()].count(chr(10)) + 1}: a TPipe object outside the entry (a class member?)"
    assert "__CCE_AICORE__" not in text, f"{spec.path}: __CCE_AICORE__ is in no header or page; use __NPU_ARCH__"
    positions = r"(A1|B1|A2|B2|CO1)" if cube else r"VEC(IN|OUT|CALC)"
    assert re.search(r"\bT(Que|Buf)\s*<\s*TPosition::" + positions, text), f"{spec.path}: no TQue / TBuf"
    assert re.search(r'extern\s+"C"\s+__global__\s+__aicore__\s+void\s+\w+\s*\(', text), f"{spec.path}: no entry"
    for entry in spec_entries(spec.name, text):
        calls = cpp_calls(text, entry)
        if cube:      # a cube kernel declares its kernel type before the tiling is read
            calls = [c for c in calls if c != "KERNEL_TASK_TYPE_DEFAULT"]
        assert calls[0] == "REGISTER_TILING_DEFAULT" and calls[1] in ("GET_TILING_DATA", "GET_TILING_DATA_WITH_STRUCT"), \
            f"{spec.path} {entry}: REGISTER_TILING_DEFAULT(Struct); then GET_TILING_DATA(tilingData, tiling) first"
        body = re.search(r'void\s+' + entry + r'\s*\(([^)]*)\)\s*\{(.*?)\n\}', text, re.S)
        assert body, f"{spec.path}: entry {entry} not found"
        assert re.search(r"GM_ADDR\s+workspace\s*,\s*GM_ADDR\s+tiling\s*$", body.group(1).strip()), \
            f"{spec.path} {entry}: the entry's arguments end with GM_ADDR workspace, GM_ADDR tiling"
        assert set(re.findall(r"\b(\w+)\s+\w+\s*(?:,|$)", body.group(1))) == {"GM_ADDR"}, \
            f"{spec.path} {entry}: only GM_ADDR arguments (a scalar goes in the tiling struct)"
        assert re.search(r"\bTPipe\s+(\w+)\s*;", body.group(2)) and "&pipe" in body.group(2), \
            f"{spec.path} {entry}: 'TPipe pipe;' in the entry, passed as &pipe to Init"
        assert "TPipe::InitBuffer" in calls, f"{spec.path} {entry}: no pipe.InitBuffer(...)"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_instructions_in_the_same_order(spec):
    """The Python's instructions (DMA, vector, scalar) follow the listing's calls, in order."""
    failures, _, _ = _follow(spec, _programs(spec), sync=False)
    assert not failures, f"{spec.path} and the Python kernel {spec.name} differ:\n" + "\n".join(failures)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_same_sync_and_queue_calls(spec):
    """Every flag, barrier and queue call the Python makes is in the listing, and no other."""
    programs = _programs(spec)
    cpp = {c.token for prog in programs for c in L._flatten(prog) if L._kind(c.token) == "sync"}
    python = {c for case in spec.cases for calls in _traced(spec, case, True) for c in calls
              if L._kind(c) == "sync"}
    assert python == cpp, (f"{spec.path}: only in the Python: {sorted(python - cpp)}; "
                           f"only in the C++: {sorted(cpp - python)}")


@pytest.mark.parametrize("spec", MINE, ids=lambda s: s.name)
def test_sync_and_queue_calls_in_the_same_order(spec):
    failures, _, _ = _follow(spec, _programs(spec), sync=True)
    assert not failures, f"{spec.path} and the Python kernel {spec.name} differ:\n" + "\n".join(failures)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_cases_take_every_loop_and_branch(spec):
    """Otherwise a call inside an untaken branch would go unchecked: add a case to the registry."""
    programs = _programs(spec)
    for sync in (False, True) if spec.sync_order else (False,):
        failures, used, names = _follow(spec, programs, sync)
        assert not failures, "\n".join(failures)
        missed = sorted(names[k] for k in names if k not in used)
        assert not missed, (f"{spec.path}: no case of listings.REGISTRY[{spec.name!r}] takes {missed} "
                            f"({'with' if sync else 'without'} sync calls)")


# ---- mutations: a broken listing fails ------------------------------------------------------------
def _fails(spec_name, old, new, count=1):
    spec = REGISTRY[spec_name]
    text = listing(spec_name)
    assert text.count(old) == count, f"the mutation's anchor {old!r} is not in {spec.path} {count} time(s)"
    broken = text.replace(old, new)
    failed = False
    for sync in (False, True):
        failures, _, _ = _follow(spec, _programs(spec, broken), sync)
        failed |= bool(failures)
    return failed


MUTATIONS = [
    # (listing, old, new, why)
    ("scaled_add", "        Add(z, z, y, n);\n", "", "drop a vector call"),
    ("scaled_add", "        Muls(z, x, alpha, n);\n", "        Muls(z, x, alpha, n);\n        Muls(z, z, alpha, n);\n",
     "add a vector call"),
    ("scaled_add", "        Muls(z, x, alpha, n);\n        Add(z, z, y, n);\n",
     "        Add(z, z, y, n);\n        Muls(z, x, alpha, n);\n", "swap two calls"),
    ("scaled_add", "            CopyOut(start + offset, n);\n", "", "drop a stage"),
    ("scaled_add", "        zQueue.EnQue(z);\n", "", "drop a queue call"),
    ("scaled_add", "            DataCopy(y, yGm[lo], n);\n        } else {",
     "        } else {", "drop a copy in one branch"),
    ("v1", "            // scalar: heap top-k + softmax\n", "", "lose the scalar marker (GetValue/SetValue show)"),
    ("v1", "        SetFlag<HardEvent::S_MTE3>(eventSToMte3);  // results are in UB: the stores may start\n", "",
     "drop a flag"),
    ("v1", "DataCopyPad(indicesGm[row * K], topkIndices[p * Ks]", "DataCopyPad(topkIndices[p * Ks], indicesGm[row * K]",
     "a store turned into a load"),
    ("v2", "KernelMoeGatingV2<DTYPE_GATE, false> op;", "KernelMoeGatingV2<DTYPE_GATE, true> op;",
     "the barrier in the wrong place (v2 built as v2_bad_sync)"),
    ("v2_bad_sync", "KernelMoeGatingV2<DTYPE_GATE, true> op;", "KernelMoeGatingV2<DTYPE_GATE, false> op;",
     "the pitfall fixed in the C++ only"),
    ("v2", "            SetFlag<HardEvent::S_MTE2>(eventSToMte2[j % 2]);    // the slot may be refilled (tile j+2)\n", "",
     "drop the slot-refill flag"),
    ("v2c", "            DataCopy(weightsGm[firstRow * K], values, points * K);\n", "", "drop one coalesced store"),
]


@pytest.mark.parametrize("name, old, new, why", MUTATIONS, ids=[m[3] for m in MUTATIONS])
def test_a_broken_listing_fails(name, old, new, why):
    assert _fails(name, old, new), f"{name}: the comparison did not notice: {why}"


def test_siblings_are_told_apart():
    """v2, v2_bad_sync and v2c share most of their text; each listing rejects the others' traces."""
    for a, b in (("v2", "v2_bad_sync"), ("v2_bad_sync", "v2"), ("v2", "v2c"), ("v2c", "v2"), ("v1", "v2"),
                 ("v2", "v1")):
        failures, _, _ = _follow(REGISTRY[a], _programs(REGISTRY[b]), sync=True)
        assert failures, f"the {b} listing accepts the {a} kernel's calls"


# ---- the reader on small snippets -----------------------------------------------------------------
SNIPPET = """
#include "kernel_operator.h"
using namespace AscendC;
struct Tiling { int32_t n; };
__aicore__ inline float Twice(float x) { return 2 * x; }
template <typename T>
__aicore__ inline void Scalar(const LocalTensor<T>& t) { t.SetValue(0, t.GetValue(1)); }
template <typename T, bool FAST>
class K {
public:
    __aicore__ inline K() {}
    __aicore__ inline void Init(GM_ADDR x, const Tiling& tiling) {
        xGm.SetGlobalBuffer((__gm__ T*)x);
        pipe.InitBuffer(q, 2, 256);   /* a comment with DataCopy( inside */
    }
    __aicore__ inline void Process() { for (int i = 0; i < 4; ++i) { CopyIn(i); Compute(); CopyOut(); } }
private:
    __aicore__ inline void CopyIn(int i) {
        LocalTensor<T> a = q.AllocTensor<T>();
        if (i % 2 == 0) DataCopy(a, xGm[i * 64], 64);
        else DataCopyPad(a, xGm[i * 64], DataCopyExtParams{1, 60, 0, 0, 0}, DataCopyPadExtParams<T>{false, 0, 0, 0});
        q.EnQue(a);
    }
    __aicore__ inline void Compute() {
        LocalTensor<T> a = q.DeQue<T>();
        if constexpr (FAST) { Muls(a, a, Twice(1.5f), 64); } else { Exp(a, a, 64); }
        SetFlag<HardEvent::V_S>(0);
        WaitFlag<HardEvent::V_S>(0);
        // scalar: fix one value
        Scalar(a);
        Sort32(a, a, a.ReinterpretCast<uint32_t>(), 1);
        q.EnQue(a);
    }
    __aicore__ inline void CopyOut() {
        LocalTensor<T> a = q.DeQue<T>();
        DataCopy(xGm[0], a, 64);
        q.FreeTensor(a);
        PipeBarrier<PIPE_V>();
    }
    TPipe pipe;
    TQue<TPosition::VECIN, 2> q;
    GlobalTensor<T> xGm;
};
extern "C" __global__ __aicore__ void k_fast(GM_ADDR x, GM_ADDR tiling) {
    GET_TILING_DATA(tilingData, tiling);
    K<float, true> op;
    op.Init(x, tilingData);
    op.Process();
}
extern "C" __global__ __aicore__ void k_slow(GM_ADDR x, GM_ADDR tiling) {
    GET_TILING_DATA(tilingData, tiling);
    K<float, false> op;
    op.Init(x, tilingData);
    op.Process();
}
"""


def test_reader_program_order():
    assert cpp_entries(SNIPPET) == ["k_fast", "k_slow"]
    fast = cpp_calls(SNIPPET, "k_fast", detail=True)
    assert fast == ["GET_TILING_DATA", "TPipe::InitBuffer", "AllocTensor", "DataCopy GM->UB", "DataCopyPad GM->UB",
                    "EnQue", "DeQue", "Muls", "SetFlag<V_S>", "WaitFlag<V_S>", "scalar: fix one value",
                    "ReinterpretCast", "Sort32", "EnQue", "DeQue", "DataCopy UB->GM", "FreeTensor",
                    "PipeBarrier<PIPE_V>"]
    slow = cpp_calls(SNIPPET, "k_slow")
    assert "Exp" in slow and "Muls" not in slow and "SetFlag" in slow
    assert cpp_calls(SNIPPET) == cpp_calls(SNIPPET, "k_fast") + slow        # every entry, file order
    assert all(n in ASCEND_C_API or n in ALLOWED_CPP_NAMES for n, _ in cpp_call_names(SNIPPET))
    assert ("GetValue", 7) in cpp_call_names(SNIPPET)        # inside the scalar unit: still checked


def test_reader_tree():
    prog = cpp_program(SNIPPET, "k_fast")
    loop = next(n for n in prog if isinstance(n, Loop))
    branch = next(n for n in loop.body if isinstance(n, Branch))
    assert branch.has_else and [c.token for alt in branch.alternatives for c in alt] == \
        ["DataCopy GM->UB", "DataCopyPad GM->UB"]
    assert all(isinstance(c, Call) for c in prog if not isinstance(c, Loop))


def test_compare_semantics():
    prog = cpp_program(SNIPPET, "k_fast")
    body = ["DataCopy GM->UB", "Muls", "scalar: fix one value", "Sort32", "DataCopy UB->GM"]
    other = ["DataCopyPad GM->UB", "Muls", "scalar: fix one value", "Sort32", "DataCopy UB->GM"]
    assert compare(prog, body).ok and compare(prog, body + other + body).ok and compare(prog, []).ok
    m = compare(prog, body + other[:-1])
    assert not m.ok and "ends after" in m.message
    m = compare(prog, body[:1] + body[2:])
    assert not m.ok and m.matched == 1 and "'Muls'" in m.message
    assert not compare(prog, body + ["Muls"]).ok
    assert not compare(prog, [body[1], body[0]] + body[2:]).ok
    sync = ["GET_TILING_DATA", "TPipe::InitBuffer", "AllocTensor", "DataCopy GM->UB", "EnQue", "DeQue", "Muls",
            "SetFlag<V_S>", "WaitFlag<V_S>", "scalar: fix one value", "Sort32", "EnQue", "DeQue",
            "DataCopy UB->GM", "FreeTensor", "PipeBarrier<PIPE_V>"]
    assert compare(prog, sync, sync=True).ok
    assert not compare(prog, [c for c in sync if c != "FreeTensor"], sync=True).ok
    assert compare(prog, [c for c in sync if c != "FreeTensor"]).ok      # instructions only
    m = compare(prog, body)
    assert set(m.alternatives) - m.used == {("branch", 20, 1)}           # the else branch was not taken


def test_instruction_names():
    assert instruction_name("DataCopy GM->UB 256 B", "MTE2") == "DataCopy GM->UB"
    assert instruction_name("DataCopyPad UB->GM 1x8 B", "MTE3") == "DataCopyPad UB->GM"
    assert instruction_name("Add x4", "V") == "Add"
    assert instruction_name("Sort32 x2", "V") == "Sort32"
    assert instruction_name("GetValue", "S") == "GetValue"
    assert instruction_name("heap top-k + softmax", "S") == "scalar: heap top-k + softmax"
    with pytest.raises(ValueError, match="not an Ascend C instruction"):
        instruction_name("Frobnicate x1", "V")
    with pytest.raises(ValueError):
        instruction_name("")


def test_traced_calls_of_v1():
    calls = traced_calls("v1", dict(B=1, S=2, E=12, K=2, tile_s=2))
    assert calls == [["DataCopyPad GM->UB"] * 2 + ["scalar: heap top-k + softmax"] * 2 + ["DataCopyPad UB->GM"] * 4]
    sync = traced_calls("moe_gating_v1_kernel", dict(B=1, S=2, E=12, K=2, tile_s=2), sync=True)[0]
    assert sync[:3] == ["TPipe::InitBuffer"] * 3 and "SetFlag<MTE2_S>" in sync and "WaitFlag<S_MTE3>" in sync


def test_record_calls_is_off_by_default():
    from npu_lab.lang import KernelContext
    from npu_lab.lang.context import record_calls
    from npu_lab.presets import get_preset

    hw = get_preset("ascend-910b2")
    assert KernelContext(hw, 0, 1).core.call_log is None
    with record_calls() as logs:
        ctx = KernelContext(hw, 0, 1)
        ctx.set_flag("MTE2_V", 1)
        ctx.wait_flag("MTE2_V", 1)
        ctx.pipe_barrier("PIPE_V")
    assert logs == [[(None, "SetFlag<MTE2_V>"), (None, "WaitFlag<MTE2_V>"), (None, "PipeBarrier<PIPE_V>")]]
    assert KernelContext(hw, 0, 1).core.call_log is None


# ---- bad input ------------------------------------------------------------------------------------
def test_bad_input():
    with pytest.raises(ValueError, match="no listing registered for 'v9'"):
        listing("v9")
    with pytest.raises(TypeError):
        listing(3)
    with pytest.raises(TypeError, match="C\\+\\+ source text"):
        cpp_calls(b"DataCopy(a, b, 8);")
    with pytest.raises(ListingError, match="no extern"):
        cpp_calls("void f() { DataCopy(a, b, 8); }")
    with pytest.raises(ListingError, match="never closed"):
        cpp_calls('extern "C" __global__ __aicore__ void k() { Add(a, b, c, 8); ')
    with pytest.raises(ListingError, match="switch"):
        cpp_calls('extern "C" __global__ __aicore__ void k() { switch (x) { case 1: break; } }')
    with pytest.raises(ListingError, match="global memory"):
        cpp_calls('extern "C" __global__ __aicore__ void k() { DataCopy(a, b, 8); }', detail=True)
    with pytest.raises(ListingError, match="no __global__ entry 'nope'"):
        cpp_calls(SNIPPET, "nope")
    with pytest.raises(ListingError, match="marker"):
        cpp_calls('extern "C" __global__ __aicore__ void k() { Add(a, b, c, 8);\n// scalar: x\n}')
    with pytest.raises(TypeError, match="case is a dict"):
        traced_calls("v1", [1, 5, 12, 2])


def test_a_missing_listing_says_so(monkeypatch):
    monkeypatch.setitem(REGISTRY, "ghost", L.ListingSpec("ghost", "moe_gating/ghost.cpp", "ghost", ()))
    with pytest.raises(ListingMissing, match="ghost.cpp.*not been written yet"):
        listing("ghost")
