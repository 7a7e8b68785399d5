"""The C++ listings compile against asc-devkit's real headers (issue 15 §1; npu_lab.cpp.compile_check).

* every listing (``npu_lab/kernels/**/*.cpp``), for every chip its ``// chips:`` line claims,
  compiles in device mode with 0 errors (for a float and a half input when its dtype is a
  ``DTYPE_<INPUT>`` macro);
* negative controls: a wrong argument count, a misspelt enum, a wrong type each fail with a
  diagnostic on the line that has the mistake; the masked ``Copy`` fails on the 310P3 (dav_m200
  has no such overload) and compiles on the 910B2;
* the diagnostics are short lines (file, line, message), never the compiler's dump.

Skipped, with the reason, when the headers are not there (``ASC_DEVKIT_DIR`` or
``../shared/asc-devkit``) or neither libclang nor g++ is installed. ``make check-cpp`` runs this file.
The compiles run in 2 processes (the machine has 2 cores): about 1-2 s a file with libclang.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from npu_lab.cpp import compile_check as cc

KERNELS = Path(__file__).resolve().parents[1] / "npu_lab" / "kernels"
LISTINGS = sorted(KERNELS.rglob("*.cpp"))


def _devkit_or_skip() -> Path:
    try:
        kit = cc.find_devkit()
    except cc.HeadersMissing as e:
        pytest.skip(str(e))
    if kit is None:
        pytest.skip(cc.NO_HEADERS_MESSAGE)
    if not cc.backend():
        pytest.skip("neither libclang (pip install libclang; `make check-cpp` does it) nor g++ is installed")
    return kit


def _compile(job):
    path, chip, dtype = job
    return str(path), chip, dtype, cc.compile_listing(path, chip, dtype=dtype)


def _dtypes(text: str) -> tuple[str, ...]:
    """float, and half too for a listing whose input dtype is a DTYPE_<INPUT> macro: a discarded
    `if constexpr` branch of a template is not instantiated, so each build checks its own branch."""
    return cc.DTYPES if cc.uses_dtype(text) else ("float",)


@pytest.fixture(scope="module")
def compiled():
    _devkit_or_skip()
    jobs = [(p, chip, dt) for p in LISTINGS for t in [p.read_text(encoding="utf-8")]
            for chip in cc.claimed_chips(t) for dt in _dtypes(t)]
    workers = min(2, os.cpu_count() or 1)
    with ProcessPoolExecutor(workers) as pool:
        return {(path, chip, dt): diags for path, chip, dt, diags in pool.map(_compile, jobs)}


def test_every_listing_claims_its_chips():
    for p in LISTINGS:
        chips = cc.claimed_chips(p.read_text(encoding="utf-8"))
        assert chips, f"{p.relative_to(KERNELS)}: no '// chips: ...' line naming the chips it is written for"
        assert "ascend-910b2" in chips, f"{p.relative_to(KERNELS)}: every course kernel runs on the 910B2"


@pytest.mark.parametrize("path", LISTINGS, ids=lambda p: p.relative_to(KERNELS).as_posix())
def test_listing_compiles_for_every_chip_it_claims(compiled, path):
    text = path.read_text(encoding="utf-8")
    for chip in cc.claimed_chips(text):
        for dt in _dtypes(text):
            diags = compiled[(str(path), chip, dt)]
            assert diags == [], f"{path.name} on {chip} ({dt} input):\n" + "\n".join(map(str, diags))


# ---- negative controls --------------------------------------------------------------------------
_SCALED_ADD = (KERNELS / "scaled_add.cpp").read_text(encoding="utf-8")
MISTAKES = [
    ("argument count", "Add(z, z, y, n);", "Add(z, z, y);", "no matching function for call to 'Add'"),
    ("argument count", "Muls(z, x, alpha, n);", "Muls(z, x, n);", "Muls"),
    ("misspelt enum", "TQue<TPosition::VECOUT, 1> zQueue;", "TQue<TPosition::VECOUTT, 1> zQueue;", "VECOUTT"),
    ("wrong type", "LocalTensor<float> z = zQueue.AllocTensor<float>();",
     "LocalTensor<float> z = zQueue.AllocTensor<int32_t>();", "LocalTensor"),
    ("wrong type", "xQueue.EnQue(x);", "xQueue.EnQue(xGm);", "EnQue"),
    ("no REGISTER_TILING_DEFAULT", "    REGISTER_TILING_DEFAULT(ScaledAddTiling);\n", "", "REGISTER_TILING_DEFAULT"),
]


@pytest.mark.parametrize("kind, old, new, words", MISTAKES, ids=[f"{m[0]}:{m[2][:24]}" for m in MISTAKES])
def test_a_mistake_fails_on_its_line(kind, old, new, words):
    _devkit_or_skip()
    assert old in _SCALED_ADD, f"the control's line {old!r} is no longer in scaled_add.cpp"
    line = _SCALED_ADD[:_SCALED_ADD.index(old)].count("\n") + 1
    wrong = _SCALED_ADD.replace(old, new, 1)
    if not new:      # the line is gone: the error is on what follows it (GET_TILING_DATA)
        line_text = _SCALED_ADD.splitlines()[line]
        assert "GET_TILING_DATA" in line_text
    diags = cc.compile_listing(wrong, "ascend-910b2", name="scaled_add.cpp")
    assert diags, f"{kind}: {new!r} compiled without an error"
    assert [d.line for d in diags] == [line], f"{kind}: expected one error on line {line}: {diags}"
    assert words in diags[0].message, diags[0].message
    assert "\n" not in diags[0].message and len(diags[0].message) < 300
    assert diags[0].file == "scaled_add.cpp"


def test_masked_copy_does_not_exist_on_the_310p():
    """vectorized.cpp's lane-masked Copy: fine on dav_c220, no overload on dav_m200
    (impl/basic_api/dav_m200/kernel_operator_data_copy_impl.h) -- why v3 claims the 910B2 only."""
    _devkit_or_skip()
    path = KERNELS / "moe_gating" / "vectorized.cpp"
    text = path.read_text(encoding="utf-8")
    copies = [i + 1 for i, ln in enumerate(text.splitlines()) if ln.strip().startswith("Copy(") and ", lane, " in ln]
    assert copies, "vectorized.cpp no longer has the masked Copy: update this control"
    diags = cc.compile_listing(path, "ascend-310p3")
    # clang reports an error inside a template once per instantiation, at the first line that asks
    # for it: the float Copy and the first int32 Copy; the E > 1984 per-8-rows int32 Copy reuses the
    # second's instantiation (same types), so it has no diagnostic of its own
    assert [d.line for d in diags] == copies[:2], (copies, diags)
    assert len(copies) == 3, "vectorized.cpp's masked Copies changed: update this control"
    assert all(d.message.startswith("Copy(...) has no implementation") for d in diags)
    assert cc.compile_listing(path, "ascend-910b2") == []


def test_bad_input(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="chip must be one of"):
        cc.compile_listing("int main() {}\n", "ascend-999")
    with pytest.raises(ValueError, match="dtype must be one of"):
        cc.compile_listing("int main() {}\n", "ascend-910b2", dtype="int8")
    with pytest.raises(TypeError, match="path or the C\\+\\+ text"):
        cc.compile_listing(42, "ascend-910b2")
    with pytest.raises(FileNotFoundError):
        cc.compile_listing(tmp_path / "nothing.cpp", "ascend-910b2")
    with pytest.raises(ValueError, match="known"):
        cc.claimed_chips("// chips: ascend-910b2 ascend-9000\n")
    monkeypatch.setenv("ASC_DEVKIT_DIR", str(tmp_path))
    with pytest.raises(cc.HeadersMissing, match="ASC_DEVKIT_DIR"):
        cc.compile_listing(_SCALED_ADD, "ascend-910b2")


def test_no_headers_says_how_to_get_them(monkeypatch):
    monkeypatch.delenv("ASC_DEVKIT_DIR", raising=False)
    monkeypatch.setattr(cc, "find_devkit", lambda: None)
    with pytest.raises(cc.HeadersMissing, match="ASC_DEVKIT_DIR"):
        cc.compile_listing(_SCALED_ADD, "ascend-910b2")


# ---- the listing reader against clang's AST ----------------------------------------------------
COURSE_CPP = sorted((KERNELS.parent / "course" / "cpp").glob("*.cpp"))


def _api_calls(path):
    return str(path), cc.api_calls(path)


@pytest.fixture(scope="module")
def clang_calls():
    _devkit_or_skip()
    if cc.backend() != "libclang":
        pytest.skip("the AST comparison needs libclang (pip install libclang)")
    with ProcessPoolExecutor(min(2, os.cpu_count() or 1)) as pool:
        return dict(pool.map(_api_calls, LISTINGS + COURSE_CPP))


@pytest.mark.parametrize("path", LISTINGS + COURSE_CPP, ids=lambda p: p.name)
def test_the_listing_reader_finds_the_calls_clang_resolves(clang_calls, path):
    """npu_lab.kernels.listings reads the call order with its own small C++ reader (it must work
    without clang and without the headers). Where clang resolves the calls -- functions that are
    not templates -- both must find the same Ascend C calls on the same lines."""
    from collections import Counter

    from npu_lab.kernels.listings import cpp_call_names

    text = path.read_text(encoding="utf-8")
    lines = cc.non_template_lines(text)
    back = {"TPipe::InitBuffer": "InitBuffer", "TBuf::Get": "Get"}
    macros = {"GET_TILING_DATA", "GET_TILING_DATA_WITH_STRUCT", "REGISTER_TILING_DEFAULT", "KERNEL_TASK_TYPE_DEFAULT"}   # macros, not calls
    reader = Counter((back.get(n, n), line) for n, line in cpp_call_names(text) if line in lines and n not in macros)
    resolved = Counter(c for c in clang_calls[str(path)] if c[1] in lines)
    assert reader == resolved, (f"{path.name}: only the reader: {sorted((reader - resolved).elements())}; "
                                f"only clang: {sorted((resolved - reader).elements())}")
    if path.name in ("scaled_add.cpp", "discrete.cpp", "01_scaled_add.cpp", "06_split_pairs.cpp"):
        assert sum(resolved.values()) > 20, f"{path.name}: clang resolved almost no call: is the comparison empty?"


def test_a_cube_listing_gets_the_aic_build(tmp_path):
    """KERNEL_TYPE_AIC_ONLY listings (the GEMMs) compile with the AIC macros (asc-devkit's
    ascend910B1_AIC build), never the vector core's; the 310P3 has no such build."""
    gemm = KERNELS / "gemm" / "gemm_tiled.cpp"
    text = gemm.read_text(encoding="utf-8")
    assert cc.is_cube_listing(text) and not cc.is_cube_listing(_SCALED_ADD)
    args = cc.compiler_args("ascend-910b2", tmp_path, gemm)
    assert "-D__DAV_CUBE__" in args and "-D__DAV_C220_CUBE__" in args and "-D__DAV_C220_VEC__" not in args
    assert "-D__DAV_C220_VEC__" in cc.compiler_args("ascend-910b2", tmp_path, _SCALED_ADD)
    with pytest.raises(ValueError, match="cube listing"):
        cc.compiler_args("ascend-310p3", tmp_path, gemm)
    with pytest.raises(ValueError, match="cube listing"):
        cc.claimed_chips(text.replace("// chips: ascend-910b2", "// chips: ascend-910b2 ascend-310p3", 1))
