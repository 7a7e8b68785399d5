"""Loaders for the files in ``data/`` (measurements the course reproduces, golden outputs).

``data/`` sits beside the package at the repository root; see ``data/README.md`` for what each
file is and where its numbers come from.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["ARTICLE_SWEEP_SHAPE", "DATA_DIR", "load_article_tile_sweep"]

#: The repository's ``data/`` directory.
DATA_DIR = Path(__file__).resolve().parent.parent / "data"

#: The shape of the article's internal tileS test: gate logits [B, S, E], top-K.
ARTICLE_SWEEP_SHAPE = {"B": 1, "S": 1024, "E": 64, "K": 2}

_SWEEP_COLUMNS = ("tile_s", "blocks", "ub_kb_est", "latency_us", "core_utilisation_est")
_WHOLE_COLUMNS = ("tile_s", "blocks", "latency_us")


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
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or a path, got {type(path).__name__} {path!r}")
    path = Path(path) if path is not None else DATA_DIR / "article_tile_sweep.csv"
    if not path.is_file():
        raise FileNotFoundError(f"article tile sweep not found at {path}; it ships in data/")
    try:
        df = pd.read_csv(path, comment="#")
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path}: the file is empty; expected columns {list(_SWEEP_COLUMNS)}") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        reason = " ".join(str(err).split()) if isinstance(err, pd.errors.ParserError) else "not UTF-8 text"
        raise ValueError(f"{path}: not a well-formed CSV table ({reason})") from None
    if tuple(df.columns) != _SWEEP_COLUMNS:
        raise ValueError(
            f"{path}: expected columns {list(_SWEEP_COLUMNS)}; got {list(df.columns)}"
        )
    if df.empty or df.isna().any().any():
        raise ValueError(f"{path}: the table is empty or has missing values")
    for col in _SWEEP_COLUMNS:
        values = pd.to_numeric(df[col], errors="coerce")
        if values.isna().any() or not np.isfinite(values.to_numpy(dtype=float)).all():
            bad = df[col][values.isna() | ~np.isfinite(values.to_numpy(dtype=float))].iloc[0]
            raise ValueError(f"{path}: column {col} must hold finite numbers; got {bad!r}")
        if col in _WHOLE_COLUMNS and (values != values.round()).any():
            bad = values[values != values.round()].iloc[0]
            raise ValueError(f"{path}: column {col} must hold whole numbers; got {bad} (not truncated)")
        if (values < 0).any() or (col in _WHOLE_COLUMNS and (values < 1).any()):
            bound = ">= 1" if col in _WHOLE_COLUMNS else ">= 0"
            raise ValueError(f"{path}: column {col} must be {bound}; got {values.min()}")
        df[col] = values
    if df["tile_s"].duplicated().any():
        dup = int(df.loc[df["tile_s"].duplicated(), "tile_s"].iloc[0])
        raise ValueError(f"{path}: tile_s={dup} appears more than once; one row per tileS")
    df = df.astype({"tile_s": "int64", "blocks": "int64", "ub_kb_est": "float64",
                    "latency_us": "int64", "core_utilisation_est": "float64"})
    if not df["core_utilisation_est"].between(0, 1).all():
        raise ValueError(f"{path}: core_utilisation_est must be fractions in [0, 1]")
    df.attrs["shape"] = dict(ARTICLE_SWEEP_SHAPE)
    df.attrs["source"] = ("MoeGatingTopK on Ascend: tiling design and performance optimisation "
                          "of a fused MoE gating operator, section 4 'Optimisation 1'")
    return df


def load_previous_model_claims() -> pd.DataFrame:
    """The article's claims as the PREVIOUS cost model judged them (serial DMA and vector pipes,
    free syncs, no L2, constant launch; npu_lab commit c771f2d): columns claim, article, model,
    verdict. Recorded once (``data/article_claims_previous_model.csv``): the current model cannot
    recompute it, which is why it is kept — the appendix notebook puts each verdict beside the
    current model's."""
    return pd.read_csv(DATA_DIR / "article_claims_previous_model.csv", comment="#")


def load_previous_model_fit() -> dict:
    """The previous cost model's fit of the ``article`` preset (``data/article_fit_previous_model.json``):
    ``fitted`` {field: {base, fitted}}, ``mape_pct``, per-tileS ``residuals`` and ``valley`` (its identifiability
    valley as notebook 07b printed it then: ``rows`` of mape_pct, the fields and v2_gain_pct)."""
    import json

    return json.loads((DATA_DIR / "article_fit_previous_model.json").read_text(encoding="utf-8"))
