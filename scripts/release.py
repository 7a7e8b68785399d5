#!/usr/bin/env python3
"""Write the student notebooks from the instructor notebooks (what `make release` runs).

    python scripts/release.py                      # instructor/*.ipynb -> notebooks/
    python scripts/release.py instructor/05_double_buffering.ipynb

1. nbgrader's generate_assignment, in a temporary course folder (npu_lab.course.release):
   solution regions become ``pass  # YOUR CODE HERE``, hidden tests are removed;
2. the result is written to ``notebooks/`` (same file names) and executed there by
   scripts/run_notebooks.py (outputs kept, no widget state), so `make lab` opens run notebooks.

Run ``scripts/nbgrader_metadata.py`` first (make release does) so the instructor files carry the
same metadata as the student ones; the generation applies it in memory anyway.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import run_notebooks  # noqa: E402
from npu_lab.course.markers import MarkerError  # noqa: E402
from npu_lab.course.release import ReleaseError, generate_student_notebooks  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate and execute the student notebooks with nbgrader.")
    parser.add_argument("notebooks", nargs="*", default=[str(REPO / "instructor" / "[0-9][0-9]*_*.ipynb")],
                        help="instructor notebooks or globs (default: instructor/NN_*.ipynb)")
    parser.add_argument("--out", type=Path, default=REPO / "notebooks", help="default: notebooks/")
    parser.add_argument("--no-execute", action="store_true", help="write the notebooks without running them")
    parser.add_argument("--timeout", type=int, default=run_notebooks.DEFAULT_TIMEOUT_S,
                        help="per-cell timeout in seconds when executing")
    args = parser.parse_args(argv)
    paths = run_notebooks.expand(args.notebooks)
    if not paths:
        print("error: no instructor notebooks: run `python scripts/make_instructor.py` once to create "
              "instructor/ from notebooks/", file=sys.stderr)
        return 2
    try:
        written = generate_student_notebooks(paths, args.out)
    except (ReleaseError, MarkerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"generated {path}")
    if args.no_execute:
        return 0
    return run_notebooks.main([str(p) for p in written] + ["--timeout", str(args.timeout)])


if __name__ == "__main__":
    sys.exit(main())
