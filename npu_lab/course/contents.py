"""The course's table of contents, read from the notebooks present (the welcome notebook prints it,
so a notebook added later appears without editing the welcome page).

Each notebook ``NN_name.ipynb`` (``NN`` two digits, an optional letter: ``07b``) starts with a
markdown cell whose first line is ``# NN · Title`` and which states ``**Estimated time:** ...``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

__all__ = ["course_contents"]

_NAME = re.compile(r"^(\d\d[a-z]?)_\w+\.ipynb$")
_TITLE = re.compile(r"^#\s+(?:\d\d[a-z]?\s*·\s*)?(.+?)\s*$")
_TIME = re.compile(r"\*\*Estimated time:\*\*\s*([^.*]+)")


def course_contents(directory: str | Path = ".") -> pd.DataFrame:
    """One row per notebook of ``directory`` (its number, title and estimated time), in order.

    Raises ``ValueError`` when the directory holds no course notebook, or a notebook does not
    start with a ``# NN · Title`` markdown cell (say which, and what the first cell holds)."""
    folder = Path(directory)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a directory: pass the folder that holds the notebooks")
    rows = []
    for path in sorted(folder.glob("*.ipynb")):
        m = _NAME.match(path.name)
        if not m:
            continue
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
        first = "".join(cells[0]["source"]) if cells and cells[0].get("cell_type") == "markdown" else ""
        title = _TITLE.match(first.split("\n", 1)[0]) if first else None
        if title is None:
            raise ValueError(f"{path.name} does not start with a markdown cell '# {m.group(1)} · Title' "
                             f"(its first cell starts {first[:60]!r})")
        time = _TIME.search(first)
        rows.append({"#": m.group(1), "notebook": path.name, "title": title.group(1),
                     "time": time.group(1).split(" (")[0].strip() if time else ""})
    if not rows:
        raise ValueError(f"{folder} holds no notebook named NN_name.ipynb")
    return pd.DataFrame(rows).set_index("#")
