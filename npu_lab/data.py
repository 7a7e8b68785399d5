"""Loaders for the files in ``data/`` (measurements the course reproduces, golden outputs).

``data/`` sits beside the package at the repository root; see ``data/README.md`` for what each
file is and where its numbers come from.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

__all__ = ["ARTICLE_SWEEP_SHAPE", "DATA_DIR", "load_article_tile_sweep"]

#: The repository's ``data/`` directory.
DATA_DIR = Path(__file__).resolve().parent.parent / "data"

#: The shape of the article's internal tileS test: gate logits [B, S, E], top-K.
ARTICLE_SWEEP_SHAPE = {"B": 1, "S": 1024, "E": 64, "K": 2}

_SWEEP_COLUMNS = ("tile_s", "blocks", "ub_kb_est", "latency_us", "core_utilisation_est")


def load_article_tile_sweep(path: str | Path | None = None) -> pd.DataFrame:
    """The first article's tileS table (section 4, "Optimisation 1"), one row per tileS.

    Columns: ``tile_s`` (int, points per block along S), ``blocks`` (int, number of blocks
    launched), ``ub_kb_est`` (float, the article's UB estimate in KB), ``latency_us`` (int,
    measured operator latency in microseconds), ``core_utilisation_est`` (float in [0, 1], the
    authors' estimate; the first row's 0.20 is an upper bound, the article says "<20%").
    The shape it was measured on is in ``df.attrs["shape"]`` (= :data:`ARTICLE_SWEEP_SHAPE`).

    ``path`` defaults to ``data/article_tile_sweep.csv``; raises ``FileNotFoundError`` or
    ``ValueError`` (naming the file and what is wrong) if it is missing or malformed.
    """
    path = Path(path) if path is not None else DATA_DIR / "article_tile_sweep.csv"
    if not path.is_file():
        raise FileNotFoundError(f"article tile sweep not found at {path}; it ships in data/")
    df = pd.read_csv(path, comment="#")
    if tuple(df.columns) != _SWEEP_COLUMNS:
        raise ValueError(
            f"{path}: expected columns {list(_SWEEP_COLUMNS)}; got {list(df.columns)}"
        )
    if df.empty or df.isna().any().any():
        raise ValueError(f"{path}: the table is empty or has missing values")
    try:
        df = df.astype({"tile_s": "int64", "blocks": "int64", "ub_kb_est": "float64",
                        "latency_us": "int64", "core_utilisation_est": "float64"})
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: a column is not numeric as expected ({err})") from None
    if not df["core_utilisation_est"].between(0, 1).all():
        raise ValueError(f"{path}: core_utilisation_est must be fractions in [0, 1]")
    df.attrs["shape"] = dict(ARTICLE_SWEEP_SHAPE)
    df.attrs["source"] = ("MoeGatingTopK on Ascend: tiling design and performance optimisation "
                          "of a fused MoE gating operator, section 4 'Optimisation 1'")
    return df
