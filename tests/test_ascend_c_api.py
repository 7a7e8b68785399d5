"""The map from Ascend C to the Python kernel API (``npu_lab.lang.ASCEND_C_API``, docs/api_cheatsheet.md).

* every entry resolves to a Python object, and the object's name is the snake_case spelling the
  entry promises;
* every entry's reference page exists in the asc-devkit mirror (skipped where the mirror is absent,
  e.g. in CI); ``docs/api/...`` pages are the CANN 8.x / 9.0 pages, removed at HEAD, so they are
  looked up at the commit before the 9.1 renames (``3825d1c98^``);
* every public ``KernelContext`` method that issues an instruction is in the map (the two
  simulator annotations are listed explicitly);
* docs/api_cheatsheet.md is what scripts/gen_api_doc.py generates from the map today, and every
  entry sits in exactly one topic group of the sheet.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import subprocess
from pathlib import Path

import pytest

from npu_lab.lang import ASCEND_C_API, KernelContext, api_table
from npu_lab.lang.api_map import python_call_name, resolve

ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path("/work/.mirror/mirror-cann+asc-devkit/repo")
OLD_DOCS_COMMIT = "3825d1c98^"      # parent of "【docs】更新归约计算api": the last tree with docs/api/...
#: KernelContext methods that are simulator annotations, not Ascend C calls (C++ writes plain code)
NOT_INSTRUCTIONS = {"scalar", "tile_loop"}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@pytest.mark.parametrize("name", sorted(ASCEND_C_API))
def test_every_entry_resolves(name):
    """The python path names a real object; its C++ signature and page are filled in."""
    entry = ASCEND_C_API[name]
    assert set(entry) == {"python", "cpp", "page"}
    obj = resolve(entry["python"])
    assert callable(obj), (name, entry["python"])
    assert entry["cpp"].strip() and entry["page"].endswith(".md")
    attr = entry["python"].rpartition(".")[2]
    if entry["python"].startswith(("KernelContext.", "TQue.", "LocalTensor.")) and not entry["cpp"].startswith("#define"):
        # methods (not the ASCEND_IS_AIC / ASCEND_IS_AIV macros: ctx.is_aic() / ctx.is_aiv()): the C++ name in snake_case (TPipe::InitBuffer -> init_buffer, EnQue -> enque)
        assert attr == _snake(name.rpartition("::")[2]).replace("en_que", "enque").replace("de_que", "deque").replace("t_pipe", "tpipe"), \
            (name, attr)


def test_resolve_rejects_unknown_names():
    """A typo in the map fails loudly instead of resolving to something else."""
    with pytest.raises(AttributeError):
        resolve("KernelContext.no_such_instruction")
    with pytest.raises(AttributeError):
        resolve("NoSuchClass")


def _page_exists(page: str) -> bool:
    commit = "HEAD" if page.startswith("docs/zh/") else OLD_DOCS_COMMIT
    done = subprocess.run(["git", "-C", str(MIRROR), "cat-file", "-e", f"{commit}:{page}"],
                          capture_output=True)
    return done.returncode == 0


@pytest.mark.skipif(not MIRROR.exists(), reason="asc-devkit mirror not present (CI has none)")
@pytest.mark.parametrize("name", sorted(ASCEND_C_API))
def test_reference_page_exists_in_asc_devkit(name):
    """Each cited page is a real file of the asc-devkit docs (at HEAD, or before the 9.1 renames)."""
    page = ASCEND_C_API[name]["page"]
    assert page.startswith(("docs/zh/api/", "docs/api/")), page
    assert _page_exists(page), f"{name}: {page} not found in {MIRROR}"


@pytest.mark.skipif(not MIRROR.exists(), reason="asc-devkit mirror not present (CI has none)")
def test_capability_pages_exist_in_asc_devkit():
    """The chip capability table cites real pages too (the part before ' (' is the path)."""
    from npu_lab.capabilities import MISSING, MODES

    pages = [p for p, _ in MISSING.values()] + [p for _, p in MODES.values()]
    for cited in pages:
        page = cited.split(" (")[0]
        assert _page_exists(page), cited


def test_mirror_check_can_fail():
    """The existence check is not vacuous: a made-up page is reported missing."""
    if not MIRROR.exists():
        pytest.skip("asc-devkit mirror not present")
    assert not _page_exists("docs/zh/api/SIMD-API/基础API/NoSuchPage.md")


def _instruction_methods():
    return sorted(n for n, v in inspect.getmembers(KernelContext, inspect.isfunction)
                  if not n.startswith("_"))


def test_every_instruction_method_is_in_the_map():
    """Each public method of ctx is an Ascend C call listed in the map, or one of the named
    simulator annotations."""
    mapped = {v["python"].split(".", 1)[1] for v in ASCEND_C_API.values()
              if v["python"].startswith("KernelContext.")}
    methods = set(_instruction_methods())
    missing = methods - mapped - NOT_INSTRUCTIONS
    assert not missing, f"KernelContext methods with no ASCEND_C_API entry: {sorted(missing)}"
    assert NOT_INSTRUCTIONS <= methods                      # the exceptions are still real methods
    assert not (NOT_INSTRUCTIONS & mapped)                  # ...and never claimed as C++ calls
    assert mapped <= methods, sorted(mapped - methods)


def test_queue_and_tensor_methods_are_in_the_map():
    """TQue / TBuf / TPipe / LocalTensor methods a kernel calls are mapped too."""
    from npu_lab.lang import LocalTensor, TBuf, TPipe, TQue

    mapped = {v["python"] for v in ASCEND_C_API.values()}
    for cls, names in ((TQue, ["alloc_tensor", "enque", "deque", "free_tensor"]), (TBuf, ["get"]),
                       (TPipe, ["init_buffer"]),
                       (LocalTensor, ["reinterpret_cast", "get_value", "set_value"])):
        for n in names:
            assert f"{cls.__name__}.{n}" in mapped


def test_python_call_names_are_how_a_kernel_writes_them():
    assert python_call_name("KernelContext.add") == "ctx.add"
    assert python_call_name("TPipe.init_buffer") == "ctx.pipe.init_buffer"
    assert python_call_name("DataCopyParams") == "DataCopyParams"


def test_api_table_has_one_row_per_entry():
    table = api_table()
    assert list(table.columns) == ["Ascend C", "Python", "C++ signature", "reference page"]
    assert len(table) == len(ASCEND_C_API) and table["Ascend C"].is_unique


def _gen_module():
    spec = importlib.util.spec_from_file_location("gen_api_doc", ROOT / "scripts" / "gen_api_doc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_doc_is_up_to_date():
    """docs/api_cheatsheet.md == scripts/gen_api_doc.py's output (regenerate it after editing the map)."""
    text = _gen_module().render()
    path = ROOT / "docs" / "api_cheatsheet.md"
    assert path.read_text(encoding="utf-8") == text, "stale: run python scripts/gen_api_doc.py"
    for name in ASCEND_C_API:
        assert f"| `{name}` |" in text
    assert not (ROOT / "docs" / "ascend_c_api.md").exists(), "one generated API document: api_cheatsheet.md"


def test_every_entry_is_in_exactly_one_cheat_sheet_group():
    """A new ASCEND_C_API entry without a topic group makes the generator fail, naming it."""
    gen = _gen_module()
    gen.check_groups(list(ASCEND_C_API))                      # today: complete
    with pytest.raises(ValueError, match="in no group.*NewCall"):
        gen.check_groups(list(ASCEND_C_API) + ["NewCall"])
    with pytest.raises(ValueError, match="does not have.*Add"):
        gen.check_groups([n for n in ASCEND_C_API if n != "Add"])


def test_check_mode_reports_a_stale_sheet(tmp_path, monkeypatch):
    """``gen_api_doc.py --check`` exits 1 when the file differs from the map, 0 when it matches."""
    gen = _gen_module()
    out = tmp_path / "api_cheatsheet.md"
    monkeypatch.setattr(gen, "OUT", out)
    monkeypatch.setattr(gen, "ROOT", ROOT)
    out.write_text("old\n", encoding="utf-8")
    assert gen.main(["--check"]) == 1
    out.write_text(gen.render(), encoding="utf-8")
    assert gen.main(["--check"]) == 0
