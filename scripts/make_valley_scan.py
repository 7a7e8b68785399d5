#!/usr/bin/env python3
"""Write data/article_valley_scan.csv: appendix 07b's valley scan, computed once (about a minute).

    python scripts/make_valley_scan.py

Run it after a change of the cost model moves the valley (tests/test_appendix_data.py says so).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npu_lab.course.appendix_data import VALLEY_PATH, write_valley_scan  # noqa: E402

if __name__ == "__main__":
    table = write_valley_scan()
    print(table.round(2).to_string(index=False))
    print(f"wrote {VALLEY_PATH}")
