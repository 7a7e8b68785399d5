#!/usr/bin/env python3
"""Write nbgrader cell metadata into instructor notebooks from their in-cell markers.

What `make release` runs first::

    python scripts/nbgrader_metadata.py instructor/*.ipynb

Authors write only markers (docs/instructors.md): a solution cell with a ``### BEGIN SOLUTION`` …
``### END SOLUTION`` region (a prediction starts with ``# Exercise NN.M: ...``), followed by its
check cell with ``### BEGIN HIDDEN TESTS`` … ``### END HIDDEN TESTS``. This script marks the first
as an nbgrader solution cell (``exNN_M_solution``) and the second as a graded, locked test cell
(``exNN_M``, 1 point per prediction, 3 per ``check_kernel`` exercise), see npu_lab.course.markers.

Idempotent: a second run changes nothing. Outputs are kept unless ``--strip-outputs`` (instructor
notebooks are committed without them). A notebook whose markers break the convention is named with
the cell and left untouched; the script then exits 1.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from npu_lab.course.markers import MarkerError, apply_metadata, strip_outputs  # noqa: E402
from run_notebooks import expand, write_atomically  # noqa: E402


def process(path: Path, strip: bool) -> tuple[bool, int]:
    """Apply metadata (and optionally strip outputs) to one notebook; (changed, exercises)."""
    nb = nbformat.read(path, as_version=4)
    before = copy.deepcopy(nb)
    exercises = apply_metadata(nb, path.name)
    if strip:
        strip_outputs(nb)
    changed = nb != before
    if changed:
        write_atomically(nb, path)
    return changed, len(exercises)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Add nbgrader metadata to instructor notebooks from "
                                     "their solution / hidden-test markers (idempotent).")
    parser.add_argument("notebooks", nargs="*", default=[str(REPO / "instructor" / "*.ipynb")],
                        help="notebooks or glob patterns (default: instructor/*.ipynb)")
    parser.add_argument("--strip-outputs", action="store_true",
                        help="also clear outputs and execution counts")
    args = parser.parse_args(argv)
    paths = expand(args.notebooks)
    if not paths:
        print("error: no notebooks given (instructor/ has none yet? run scripts/make_instructor.py)",
              file=sys.stderr)
        return 2
    failed = 0
    for path in paths:
        try:
            changed, count = process(path, args.strip_outputs)
        except (MarkerError, OSError, ValueError) as exc:
            print(f"FAILED  {path}: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"{'updated' if changed else 'same   '} {path}  ({count} exercise{'s' * (count != 1)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
