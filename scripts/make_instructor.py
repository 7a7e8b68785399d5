#!/usr/bin/env python3
"""One-shot conversion: the course notebooks become the instructor notebooks.

    python scripts/make_instructor.py            # notebooks/NN_*.ipynb -> instructor/NN_*.ipynb
    make release                                 # then regenerate notebooks/ without solutions

Copies every ``notebooks/NN_*.ipynb`` (which, before the conversion, hold the solutions and hidden
tests written with the course's markers) to ``instructor/``, adds the nbgrader metadata from the
markers and clears outputs (instructor notebooks are sources; the student notebooks carry the
outputs). Refuses to overwrite an existing instructor notebook unless ``--force``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from npu_lab.course.markers import MarkerError, apply_metadata, notebook_paths, strip_outputs  # noqa: E402
from run_notebooks import clean_notebook, write_atomically  # noqa: E402


def convert(source_dir: Path, target_dir: Path, force: bool = False) -> list[tuple[Path, int]]:
    """Copy ``source_dir/NN_*.ipynb`` into ``target_dir`` as instructor notebooks; returns
    ``[(written path, exercises)]``. Raises FileExistsError / MarkerError before writing anything."""
    sources = notebook_paths(source_dir)
    if not sources:
        raise FileNotFoundError(f"no NN_*.ipynb notebooks in {source_dir}")
    existing = [target_dir / p.name for p in sources if (target_dir / p.name).exists()]
    if existing and not force:
        raise FileExistsError(f"{', '.join(map(str, existing))} already exist: the conversion is done "
                              "once (edit instructor/ now); --force overwrites")
    converted = []
    for path in sources:                       # check every notebook before writing any
        nb = nbformat.read(path, as_version=4)
        count = len(apply_metadata(nb, path.name))
        strip_outputs(nb)
        clean_notebook(nb)
        converted.append((nb, target_dir / path.name, count))
    target_dir.mkdir(parents=True, exist_ok=True)
    for nb, target, _ in converted:
        write_atomically(nb, target)
    return [(target, count) for _, target, count in converted]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Create instructor/ from notebooks/ (once).")
    parser.add_argument("--source", type=Path, default=REPO / "notebooks", help="default: notebooks/")
    parser.add_argument("--target", type=Path, default=REPO / "instructor", help="default: instructor/")
    parser.add_argument("--force", action="store_true", help="overwrite existing instructor notebooks")
    args = parser.parse_args(argv)
    try:
        written = convert(args.source, args.target, args.force)
    except (FileExistsError, FileNotFoundError, MarkerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path, count in written:
        print(f"wrote {path}  ({count} exercise{'s' * (count != 1)})")
    total = sum(count for _, count in written)
    print(f"{len(written)} instructor notebook(s), {total} exercises; next: `make release` writes the "
          "student notebooks/ from them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
