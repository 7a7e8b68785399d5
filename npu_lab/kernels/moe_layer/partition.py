"""Which dimension to parallelise, and the address arithmetic each split needs (issue 20 §4b).

Gate logits are [B, S, E] row-major: element (b, s, e) sits at ``(b·S + s)·E + e``. A block's tile is
``tileB × tileS`` points (and, split over E, a range of ``eChunk`` experts). What the copy-in must be:

* split over **S** (tileB = 1, the article's default): the tile is ``tileS`` consecutive rows of one
  batch b -- ONE contiguous run of ``s_this·E`` elements at ``(b·S + s_start)·E``.
* split over **B** (tileS = S): ``tileB`` whole batches -- one contiguous run of ``b_this·S·E``.
* **tileB > 1 and tileS < S**: ``b_this`` runs of ``s_this·E`` elements, ``S·E`` apart: one
  ``DataCopyPad`` with blockCount = b_this, blockLen = s_this·E·4 B and a GM stride of
  ``(S − s_this)·E·4`` B between blocks. Copying ``b_this·s_this·E`` contiguous elements from the tile's
  first address instead -- the obvious one-liner -- reads rows of the wrong batch: the first article's
  Q1 ("some (B, S) outputs are garbage: 99% an address error"). :func:`naive_segments` is that bug.
* split over **E** (``eChunk`` < E): every row's ``[e_start, e_start + eChunk)`` -- ``rows`` runs of
  eChunk elements, E apart (blockCount = rows, GM stride (E − eChunk)·4 B), and each block's top-K is
  only a candidate list: a second pass must merge the ``E / eChunk`` partial top-Ks of every row
  (K values per chunk), which the B and S splits never need.

:func:`block_segments` returns a block's (GM offset, length) runs (elements); :func:`coverage` checks
that a plan reads every element exactly once; :func:`split_table` compares the splits at one shape
(blocks, DMA requests, bytes per request, whether a merge pass is needed).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SPLITS", "block_segments", "copy_params", "coverage", "naive_segments", "num_blocks", "split_table"]

SPLITS = ("S", "B", "BS", "E")


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _check(B, S, E, tile_b, tile_s, e_chunk):
    for name, v in (("B", B), ("S", S), ("E", E), ("tile_b", tile_b), ("tile_s", tile_s), ("e_chunk", e_chunk)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    if tile_b > B or tile_s > S or e_chunk > E:
        raise ValueError(f"tiles must fit the shape: tile_b <= B, tile_s <= S, e_chunk <= E; got tile_b={tile_b}, "
                         f"tile_s={tile_s}, e_chunk={e_chunk} for B={B}, S={S}, E={E}")


def num_blocks(B: int, S: int, E: int, tile_b: int = 1, tile_s: int = 1, e_chunk: int | None = None) -> int:
    """Tiles of the plan: ceil(B / tileB) · ceil(S / tileS) · ceil(E / eChunk)."""
    e_chunk = E if e_chunk is None else e_chunk
    _check(B, S, E, tile_b, tile_s, e_chunk)
    return _ceil(B, tile_b) * _ceil(S, tile_s) * _ceil(E, e_chunk)


def _tile(block, B, S, E, tile_b, tile_s, e_chunk):
    tiles_s, tiles_e = _ceil(S, tile_s), _ceil(E, e_chunk)
    if not 0 <= block < _ceil(B, tile_b) * tiles_s * tiles_e:
        raise ValueError(f"block {block} is not one of the plan's {_ceil(B, tile_b) * tiles_s * tiles_e} tiles")
    bt, rest = divmod(block, tiles_s * tiles_e)         # the article's tile_in_batch / tile_in_seq
    st, et = divmod(rest, tiles_e)
    b0, s0, e0 = bt * tile_b, st * tile_s, et * e_chunk
    return b0, min(b0 + tile_b, B), s0, min(s0 + tile_s, S), e0, min(e0 + e_chunk, E)


def block_segments(block: int, B: int, S: int, E: int, tile_b: int = 1, tile_s: int = 1,
                   e_chunk: int | None = None) -> list[tuple[int, int]]:
    """The GM runs (offset, length) in elements that tile ``block`` must read, merged where adjacent."""
    e_chunk = E if e_chunk is None else e_chunk
    _check(B, S, E, tile_b, tile_s, e_chunk)
    b0, b1, s0, s1, e0, e1 = _tile(block, B, S, E, tile_b, tile_s, e_chunk)
    runs: list[tuple[int, int]] = []
    for b in range(b0, b1):
        rows = [((b * S + s) * E + e0, e1 - e0) for s in range(s0, s1)]
        for off, n in rows:
            if runs and runs[-1][0] + runs[-1][1] == off:
                runs[-1] = (runs[-1][0], runs[-1][1] + n)
            else:
                runs.append((off, n))
    return runs


def naive_segments(block: int, B: int, S: int, E: int, tile_b: int = 1, tile_s: int = 1) -> list[tuple[int, int]]:
    """The Q1 bug: one contiguous copy of b_this·s_this·E elements from the tile's first element."""
    _check(B, S, E, tile_b, tile_s, E)
    b0, b1, s0, s1, _, _ = _tile(block, B, S, E, tile_b, tile_s, E)
    return [((b0 * S + s0) * E, (b1 - b0) * (s1 - s0) * E)]


def copy_params(block: int, B: int, S: int, E: int, tile_b: int = 1, tile_s: int = 1, e_chunk: int | None = None,
                itemsize: int = 4) -> dict:
    """The one DataCopyPad (GM→UB) that reads the tile: gm offset (elements), blockCount, blockLen (B)
    and the GM stride between blocks (B) -- DataCopyExtParams{blockCount, blockLen, srcStride, ...}."""
    e_chunk = E if e_chunk is None else e_chunk
    _check(B, S, E, tile_b, tile_s, e_chunk)
    b0, b1, s0, s1, e0, e1 = _tile(block, B, S, E, tile_b, tile_s, e_chunk)
    if e1 - e0 < E:                                  # one block per row
        return {"gm_offset": (b0 * S + s0) * E + e0, "blockCount": (b1 - b0) * (s1 - s0),
                "blockLen": (e1 - e0) * itemsize, "srcStride": (E - (e1 - e0)) * itemsize,
                "caveat": "rows of two batches are S·E apart, not E: one copy per batch when tileB > 1 and tileS < S"
                if (b1 - b0) > 1 and (s1 - s0) < S else ""}
    return {"gm_offset": (b0 * S + s0) * E, "blockCount": b1 - b0, "blockLen": (s1 - s0) * E * itemsize,
            "srcStride": (S - (s1 - s0)) * E * itemsize, "caveat": ""}


def coverage(B: int, S: int, E: int, plan) -> np.ndarray:
    """How many times each element of [B, S, E] is read by ``plan`` (a list of runs per block)."""
    hits = np.zeros(B * S * E, dtype=np.int64)
    for runs in plan:
        for off, n in runs:
            hits[off:off + n] += 1
    return hits.reshape(B, S, E)


def split_table(B: int, S: int, E: int, K: int, cores: int = 48, *, tile_b: int = 2, tile_s: int = 8,
                e_chunk: int | None = None):
    """The four splits at one shape: blocks, waves over ``cores``, DMA runs per block (the worst),
    bytes per run, whether the naive one-liner is right, whether a merge pass is needed."""
    import pandas as pd

    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or not 1 <= K <= E:
        raise ValueError(f"K must be an int in 1..E = {E}, got {K!r}")
    e_chunk = e_chunk or max(1, E // 4)
    plans = {"S": (1, min(tile_s, S), E), "B": (min(tile_b, B), S, E), "BS": (min(tile_b, B), min(tile_s, S), E),
             "E": (1, min(tile_s, S), min(e_chunk, E))}
    rows = []
    for split, (tb, ts, ec) in plans.items():
        nb = num_blocks(B, S, E, tb, ts, ec)
        plan = [block_segments(i, B, S, E, tb, ts, ec) for i in range(nb)]
        ok = bool((coverage(B, S, E, plan) == 1).all())
        naive_ok = ec == E and bool((coverage(B, S, E, [naive_segments(i, B, S, E, tb, ts) for i in range(nb)]) == 1).all())
        runs = max(len(p) for p in plan)
        rows.append({"split": split, "tileB": tb, "tileS": ts, "eChunk": ec, "blocks": nb, "waves": _ceil(nb, cores),
                     "runs_per_block": runs, "bytes_per_run": max(n for p in plan for _, n in p) * 4,
                     "covers_once": ok, "naive_copy_correct": naive_ok, "merge_pass": ec < E,
                     "partial_topk_per_row": _ceil(E, ec) * K if ec < E else K})
    return pd.DataFrame(rows).set_index("split")
