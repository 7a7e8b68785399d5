"""The README's code example runs as written (so the first thing a learner copies works)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_kernel_example_runs(capsys):
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README.md should contain a python example"
    for code in blocks:
        exec(compile(code, str(README), "exec"), {})
    assert "Timeline(" in capsys.readouterr().out


def test_readme_names_the_two_commands_and_every_notebook():
    text = README.read_text()
    assert "make lab" in text and "make test" in text
    for nb in sorted((README.parent / "notebooks").glob("*.ipynb")):
        assert nb.stem in text, f"README.md does not list {nb.name}"


def test_readme_kernel_uses_only_ascend_c_calls():
    """Every ``ctx.<call>`` / queue call in the README's kernel maps to an Ascend C API entry, so
    the first kernel a learner copies is one they could write in C++."""
    from npu_lab.lang import ASCEND_C_API

    python_names = {v["python"].split(".")[-1] for v in ASCEND_C_API.values()}
    code = "\n".join(re.findall(r"```python\n(.*?)```", README.read_text(), re.S))
    calls = set(re.findall(r"\bctx\.(?:pipe\.)?(\w+)\(", code))
    calls |= set(re.findall(r"\bq_\w+\.(\w+)\(", code))
    assert calls, "no ctx.* calls found in the README kernel"
    unknown = sorted(calls - python_names)
    assert not unknown, f"README kernel calls {unknown}, which are not Ascend C calls (ASCEND_C_API)"
