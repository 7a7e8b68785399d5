"""The default tileS of each fused version: the autotuned shape-bucket tables in ``data/``.

The article's closing advice is "a few preset parameter sets for shape ranges" instead of one
constant. npu_lab keeps one table per (chip, version), ``data/moe_tile_buckets_<chip>_<version>.csv``:
for every bucket representative (S, E, K) (B = 1) the tileS :func:`~.sweep.autotune` found
fastest on the simulated chip, and its latency. :func:`~.sweep.write_bucket_tables` regenerates
them all; ``tests/test_moe_sweep.py`` fails when a committed table no longer matches the model.

**The default rule** (``tile_s`` not given to ``simulate_moe_gating``, ``moe_gating_topk``,
``plan_moe_gating``, ``sweep``-free callers and the explorers):

* ``v1`` keeps the article's host rule (``calculate_moe_gating_tiling``: tileS = 8, halved until
  the tile fits UB). v1 *is* the article's kernel, launched with the article's host code; its
  lesson (notebook 02) is that rule and the sweep around it;
* ``v2``, ``v2c``, ``v3`` use their own table, ``v2_bad_sync`` uses v2's and ``v3_fast_exp``
  v3's (same layout, same tiles): the row nearest in log scale to (B·S, E, K) — B·S because
  tileB = 1, so a batch of B sequences of S tokens is B·S rows to spread over the cores — then
  clamped to S and to the UB capacity;
* a chip or version without a table (the article's fitted chip; v1 and v2 on the 310P3, which
  cannot run them at all) falls back to the article's host rule.
"""

from __future__ import annotations

import math
import numbers
from functools import lru_cache
from pathlib import Path

import numpy as np

from ...presets import DATA_DIR

#: the table each version's default comes from (None: the article's host rule)
TABLE_OF_VERSION = {"v1": None, "v2": "v2", "v2_bad_sync": "v2", "v2c": "v2c", "v3": "v3", "v3_fast_exp": "v3"}
#: (chip, version) pairs with a committed table: the chips the course runs on, the versions that
#: can run there (v1 and v2 need DataCopyPad, v3 the vector Copy, which the 310P3 lacks)
TABLES = (("ascend-910b2", "v2"), ("ascend-910b2", "v2c"), ("ascend-910b2", "v3"),
          ("ascend-310p3", "v2c"))


def bucket_table_path(version: str = "v3", chip: str = "ascend-910b2") -> Path:
    """Where the table of ``version`` on ``chip`` (a preset's full name) lives."""
    return DATA_DIR / f"moe_tile_buckets_{chip}_{version}.csv"


@lru_cache(maxsize=None)
def _table(version: str, chip: str):
    """(log2 S, log2 E, log2 K, tileS) arrays of a committed table, or None when there is none."""
    path = bucket_table_path(version, chip)
    if not path.is_file():
        return None
    import pandas as pd

    t = pd.read_csv(path).dropna(subset=["tileS"])
    return (np.log2(t.S.to_numpy(float)), np.log2(t.E.to_numpy(float)), np.log2(t.K.to_numpy(float)),
            t.tileS.to_numpy(int))


def nearest_bucket_tile_s(rows: int, E: int, K: int, version: str, chip: str) -> int | None:
    """The tileS of the bucket nearest (in log2 of S, E and K) to ``rows`` rows of E experts,
    top-K, from the table of ``version`` on ``chip``; None when there is no table (or ``version``
    keeps the article's host rule). Not clamped: callers clamp to S and the UB."""
    for name, v in (("rows", rows), ("E", E), ("K", K)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"nearest_bucket_tile_s: {name} must be a whole number >= 1, got {v!r}")
    if not isinstance(version, str):
        raise TypeError(f"nearest_bucket_tile_s: version must be a version name, got {type(version).__name__}")
    table_version = TABLE_OF_VERSION.get(version)
    if table_version is None:
        return None
    table = _table(table_version, chip)
    if table is None:
        return None
    logS, logE, logK, tiles = table
    # math.log2 takes any int (np.log2 fails on Python ints past int64, e.g. rows = 10**30)
    dist = (logS - math.log2(rows)) ** 2 + (logE - math.log2(E)) ** 2 + (logK - math.log2(K)) ** 2
    return int(tiles[int(np.argmin(dist))])


def clear_cache() -> None:
    """Forget the tables read so far (after writing new ones)."""
    _table.cache_clear()
