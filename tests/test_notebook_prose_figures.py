"""Figures typed into the notebooks' prose, checked against the library (issue 11).

nbval compares code outputs only, and `make notebooks` re-blesses those, so a number written in
a markdown cell goes stale silently when the model changes. Each entry below finds one figure in
one notebook's markdown (a regex capturing the number, matched on whitespace-normalised text),
recomputes it from the library and compares within a tolerance. When the model changes on
purpose, the failing entry says which sentence to rewrite.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from npu_lab import get_preset

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
SHAPE = (1, 1024, 64, 2)


@functools.lru_cache(maxsize=None)
def _markdown(notebook: str) -> str:
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]
    return "\n\n".join(" ".join("".join(c["source"]).split()) for c in cells if c["cell_type"] == "markdown")


ARTICLE = functools.partial(get_preset, "article")


def _v1_blocks_vs_cores(tile_s: int) -> tuple[int, int]:
    """(blocks, vector cores) of v1 at the article's shape on the 'article' preset."""
    from npu_lab.kernels.moe_gating import simulate_moe_gating

    run = simulate_moe_gating(*SHAPE, version="v1", hw="article", tile_s=tile_s)
    return run.block_dim, ARTICLE().vector_cores


def _v1_points_per_block(tile_s: int) -> int:
    """Points in one block of v1 at the article's shape (tileS x tileB)."""
    from npu_lab.kernels.moe_gating import simulate_moe_gating

    t = simulate_moe_gating(*SHAPE, version="v1", hw="article", tile_s=tile_s).tiling
    return t.tileS * t.tileB


def test_the_07b_rows_are_read_as_the_prose_says():
    """tileS = 1: more blocks than cores (they queue); tileS = 32: at most one block per core."""
    blocks, cores = _v1_blocks_vs_cores(1)
    assert blocks > cores
    blocks, cores = _v1_blocks_vs_cores(32)
    assert blocks <= cores


# (id, notebook, regex with one group = the number, the library's figure, relative tolerance).
# Model figures that used to be typed into notebooks 02, 03, 05 and 06 (the chain's extra bytes,
# the double-buffering gain, the scalar and vector busy times, the fused-vs-discrete ratios, and
# since the 07/07b split where the ratio passes 10x) are
# now printed by code cells, which nbval and `make notebooks` keep current; these are the ones
# still written in prose.
FIGURES = [
    # notebook 01's copy-cost section: the guide's two rules as the presets hold them
    pytest.param("01", r"full bandwidth from about (\d+) KB per copy",
                 lambda: get_preset("ascend-910b2").dma_burst_full_bytes / 1024, 0, id="01-burst-full-kb"),
    pytest.param("01", r"not 512-B aligned costs a further (\d+) %",
                 lambda: 100 * (1 - get_preset("ascend-910b2").dma_gm_misaligned_efficiency), 0,
                 id="01-misaligned-penalty"),
    pytest.param("03", r"= (\d+) B per point for E = 64, K = 2", lambda: 64 * 4 + 2 * 8, 0, id="03-bytes-per-point"),
    pytest.param("03", r"about (\d+) % more in every row", lambda: 100 * (0.3 * 1024 / (64 * 4 + 2 * 8) - 1), 0.08,
                 id="03-ub-column-13pct"),
    # 07b reads the fit's residuals off two rows: tileS = 1 queues its blocks at the scheduler (more
    # blocks than cores), tileS = 32 runs one block per core (no more blocks than cores)
    pytest.param("07b", r"At tileS = 1 the (\d+) blocks queue", lambda: _v1_blocks_vs_cores(1)[0], 0,
                 id="07b-blocks-queue-at-tileS-1"),
    pytest.param("07b", r"At tileS = 32 each of (\d+) cores runs one block", lambda: _v1_blocks_vs_cores(32)[0], 0,
                 id="07b-one-block-per-core-at-tileS-32"),
    pytest.param("07b", r"runs one block of (\d+) points", lambda: _v1_points_per_block(32), 0,
                 id="07b-points-per-block-at-tileS-32"),
]

_NAMES = {p.name.split("_")[0]: p.stem for p in NOTEBOOKS.glob("*.ipynb")}


@pytest.mark.parametrize("notebook, pattern, compute, rel_tol", FIGURES)
def test_prose_figure_matches_the_library(notebook, pattern, compute, rel_tol):
    text = _markdown(_NAMES[notebook])
    found = re.findall(pattern, text)
    assert len(found) == 1, (f"notebook {notebook}: expected the sentence matching {pattern!r} once, found "
                             f"{len(found)}; if the prose changed, update this entry")
    written = float(found[0])
    truth = float(compute())
    # the prose rounds: allow the rounding of the written figure plus the stated tolerance
    decimals = len(found[0].split(".")[1]) if "." in found[0] else 0
    slack = 0.5 * 10 ** -decimals + rel_tol * abs(truth)
    assert abs(written - truth) <= slack, (
        f"notebook {notebook} says {found[0]} where the library gives {truth:.4g} "
        f"({pattern!r}): rewrite the sentence or explain the change")
