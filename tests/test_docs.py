"""The course documents: docs/glossary.md and docs/api_cheatsheet.md.

* every glossary entry (a ``### term`` heading) carries an explicit anchor (``<a id="wave"></a>``), is
  listed in the index, names its Ascend C counterpart and the notebook that introduces it;
* the terms the course relies on have the anchors notebooks link to (``#wave``, ``#sync-bound``, ...);
* every ``glossary.md#...`` / ``api_cheatsheet.md#...`` link in a notebook's markdown (and in the docs
  themselves) lands on an existing anchor;
* the glossary's figures agree with the presets and its verdict thresholds with ``Timeline.bottleneck``.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from npu_lab.sim.launch_cost import full_launch_overhead_us
from npu_lab import get_preset
from npu_lab.sim import Timeline

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GLOSSARY = DOCS / "glossary.md"
CHEATSHEET = DOCS / "api_cheatsheet.md"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

#: anchors the brief and the notebooks rely on
REQUIRED = ["block", "tile", "point", "wave", "repeat", "mte", "mte2", "mte3", "pipe", "flag", "hardevent",
            "queue", "tque", "depth", "tbuf", "ub", "gm", "hbm", "l2", "persistent-block", "block-dim",
            "tiles", "tileb", "double-buffering", "verdicts", "launch-bound", "memory-bound", "compute-bound",
            "sync-bound", "timing-only-run", "roofline", "preset", "provenance", "race", "bubble"]

_ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
_LINK = re.compile(r"\]\(([^)\s]*?(glossary|api_cheatsheet)\.md)(?:#([^)\s]*))?\)")


def anchors(text: str) -> set[str]:
    """Explicit ``<a id>`` anchors plus GitHub-style heading slugs."""
    found = set(_ANCHOR.findall(text))
    for line in text.splitlines():
        m = re.match(r"^#+\s+(.*)$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            found.add(slug)
    return found


def entries(text: str) -> list[tuple[list[str], str, str]]:
    """(anchors just above it, heading, body) of every ``### `` entry."""
    out = []
    blocks = re.split(r"(?m)^(?=### )", text)
    for before, block in zip(blocks, blocks[1:]):
        tail = [ln for ln in before.strip().splitlines() if ln.strip()]
        ids = _ANCHOR.findall(tail[-1]) if tail else []
        heading, _, body = block.partition("\n")
        body = re.split(r"(?m)^(?:## |<a id=)", body)[0]
        out.append((ids, heading[4:].strip(), body))
    return out


def bad_links(markdown: str, targets: dict[str, set[str]]) -> list[str]:
    """Links to glossary.md / api_cheatsheet.md whose fragment is not an anchor of that file."""
    return [f"{doc}.md#{frag}" for _, doc, frag in _LINK.findall(markdown)
            if frag and frag not in targets[doc]]


def _targets() -> dict[str, set[str]]:
    return {"glossary": anchors(GLOSSARY.read_text(encoding="utf-8")),
            "api_cheatsheet": anchors(CHEATSHEET.read_text(encoding="utf-8"))}


def test_every_entry_has_an_anchor_is_indexed_and_complete():
    text = GLOSSARY.read_text(encoding="utf-8")
    index = set(re.findall(r"\[`#([^`]+)`\]\(#\1\)", text))
    found = entries(text)
    assert len(found) >= 40
    for ids, heading, body in found:
        assert ids, f"entry {heading!r} has no <a id> anchor on the line above it"
        assert ids[0] in index, f"entry {heading!r} (#{ids[0]}) is missing from the index"
        assert "Ascend C" in body, f"entry {heading!r} does not name its Ascend C counterpart"
        notebooks = re.findall(r"\(\.\./notebooks/(\d\d_[a-z0-9_]+\.ipynb)\)", body)
        assert notebooks or "no notebook introduces it" in body, f"entry {heading!r} names no notebook"
        for nb in notebooks:   # notebooks/ is generated from instructor/ by `make release`
            assert (ROOT / "notebooks" / nb).exists() or (ROOT / "instructor" / nb).exists(), \
                f"entry {heading!r} links to a missing {nb}"
    assert index <= anchors(text), sorted(index - anchors(text))


@pytest.mark.parametrize("anchor", REQUIRED)
def test_required_terms_have_anchors(anchor):
    assert anchor in anchors(GLOSSARY.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_links_land_on_anchors(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    markdown = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert bad_links(markdown, _targets()) == []
    for rel, _, _ in _LINK.findall(markdown):
        assert (path.parent / rel).resolve().exists(), f"{path.name} links to {rel}, which does not exist"


def test_docs_link_to_their_own_anchors():
    targets = _targets()
    for doc in (GLOSSARY, CHEATSHEET):
        text = doc.read_text(encoding="utf-8")
        assert bad_links(text, targets) == []
        own = anchors(text)
        missing = [f for f in re.findall(r"\]\(#([^)]+)\)", text) if f not in own]
        assert missing == [], f"{doc.name}: links to missing anchors {missing}"


def test_the_link_check_can_fail():
    targets = {"glossary": {"wave"}, "api_cheatsheet": {"sync"}}
    md = "see [w](../docs/glossary.md#wave), [x](../docs/glossary.md#waves) and [s](../docs/api_cheatsheet.md#snyc)"
    assert bad_links(md, targets) == ["glossary.md#waves", "api_cheatsheet.md#snyc"]
    spoiled = GLOSSARY.read_text(encoding="utf-8").replace('<a id="tbuf"></a>\n', "")
    assert any(not ids for ids, heading, _ in entries(spoiled) if heading == "TBuf")


def test_glossary_figures_match_the_presets():
    text = GLOSSARY.read_text(encoding="utf-8")
    b2, p3 = get_preset("ascend-910b2"), get_preset("ascend-310p3")
    assert f"{b2.ub_bytes // 1024} KB on the 910B2, {p3.ub_bytes // 1024} KB on the 310P3" in text
    assert f"{b2.l2_bytes >> 20} MB on the 910B2, {p3.l2_bytes >> 20} MB on the 310P3" in text
    assert f"about {b2.hbm_bandwidth_gbps / 1000:g} TB/s on the 910B2 preset, {p3.hbm_bandwidth_gbps:g} GB/s" in text
    assert f"the {b2.vector_cores} AIVs" in text
    full = full_launch_overhead_us(b2)
    assert f"({full:g} µs for a launch on all cores of the 910B2 and 310P3 presets" in text
    assert full == pytest.approx(full_launch_overhead_us(p3))
    assert f"{b2.vector_repeat_bytes} bytes" in text and f"up to {b2.max_repeat} repeats" in text


def test_verdict_thresholds_match_the_simulator():
    """The glossary states the rule Timeline.bottleneck applies; both must change together."""
    text = GLOSSARY.read_text(encoding="utf-8")
    source = inspect.getsource(Timeline.bottleneck)
    from npu_lab.sim import thresholds
    for percent, code, name in [(50, "launch_share >= LAUNCH_SHARE", "LAUNCH_SHARE"),
                                (50, "dispatch_us >= DISPATCH_SHARE * body", "DISPATCH_SHARE"),
                                (40, "mem >= BUSY_PIPE", "BUSY_PIPE"), (60, "hbm_share >= HBM_SHARE", "HBM_SHARE"),
                                (40, "comp >= BUSY_PIPE", "BUSY_PIPE"), (80, "turns >= TURNS_TOGETHER", "TURNS_TOGETHER"),
                                (60, "max(mem, comp) < TURNS_EACH", "TURNS_EACH"),
                                (10, "hbm_share < SMALL_COPIES_HBM_SHARE", "SMALL_COPIES_HBM_SHARE")]:
        assert code in source, f"Timeline.bottleneck no longer tests {code!r}: update docs/glossary.md"
        assert getattr(thresholds, name) == pytest.approx(percent / 100), f"{name} moved: update docs/glossary.md"
        assert f"{percent}%" in text
