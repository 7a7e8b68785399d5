"""A call the course suggests has the arguments the real call takes (issue 16 §4: the DataCopy error
message once suggested a 4-argument ``DataCopyExtParams``; the struct has five fields).

Every ``DataCopyExtParams(...)`` / ``DataCopyPadExtParams(...)`` written anywhere a learner reads it
(the library's messages and docstrings, the docs, the notebooks' prose and code) is parsed and its
top-level arguments counted against the struct's fields (datacopy pages of the Ascend C reference:
``DataCopyExtParams{blockCount, blockLen, srcStride, dstStride, rsv}``,
``DataCopyPadExtParams<T>{isPad, leftPadding, rightPadding, paddingValue}``)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _struct_fields(name: str) -> int:
    import npu_lab.lang as lang
    return len([f for f in dataclasses.fields(getattr(lang, name)) if f.init])


def _calls(text: str, name: str):
    """(argument count, the call's text) of every ``name(...)`` in ``text`` with balanced parentheses."""
    for m in re.finditer(rf"(?<![\w.]){name}\(", text):
        depth, i, args, start = 1, m.end(), [], m.end()
        while i < len(text) and depth:
            ch = text[i]
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif ch == "," and depth == 1:
                args.append(text[start:i])
                start = i + 1
            i += 1
        if depth:
            continue
        args.append(text[start:i - 1])
        args = [a for a in args if a.strip()]
        yield len(args), text[m.start():i]


def _sources():
    for path in sorted((REPO / "npu_lab").rglob("*.py")) + sorted((REPO / "docs").glob("*.md")):
        yield path.relative_to(REPO), path.read_text(encoding="utf-8")
    for path in sorted((REPO / "instructor").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        yield path.relative_to(REPO), "\n".join("".join(c["source"]) for c in cells)


@pytest.mark.parametrize("name", ["DataCopyExtParams", "DataCopyPadExtParams"])
def test_every_written_call_has_the_structs_arguments(name):
    want = _struct_fields(name)
    seen, wrong = 0, []
    for where, text in _sources():
        for count, call in _calls(text, name):
            if "..." in call or count == 0:           # an elided example, or the bare name in a signature
                continue
            seen += 1
            if count != want and "=" not in call:     # keyword calls may rely on defaults
                wrong.append(f"{where}: {call[:120]!r} has {count} arguments")
    assert seen > 20, f"only {seen} calls of {name} found: is the scan broken?"
    assert not wrong, f"{name} takes {want} arguments:\n  " + "\n  ".join(wrong)


def test_the_scan_counts_arguments():
    assert [c for c, _ in _calls('use DataCopyExtParams(1, n * size, 0, 0) here', "DataCopyExtParams")] == [4]
    assert [c for c, _ in _calls("DataCopyExtParams(f(a, b), 2, 0, 0, 0)", "DataCopyExtParams")] == [5]
