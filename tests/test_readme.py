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
