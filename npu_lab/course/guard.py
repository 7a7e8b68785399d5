"""File snapshots the grader takes around each submission (:mod:`.grading`): what must not change
while a student's code runs — the course folder (gradebook, source, other students' notebooks),
the submissions folder, the instructor notebooks, the npu_lab package — is hashed before, compared
after, and put back when it changed.

A snapshot holds each file's SHA-256 and bytes (the folders are small: notebooks without rich
outputs, one sqlite gradebook, the package's sources). ``__pycache__`` folders are skipped (Python
writes them by itself).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path


def _files(root: Path):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            yield Path(folder) / name


@dataclass
class Snapshot:
    """``files``: path -> (sha256 hex, bytes) under ``roots``, taken by :func:`take`."""

    roots: tuple[Path, ...]
    files: dict

    def changes(self) -> list[str]:
        """One line per file changed, removed or added since the snapshot (empty: untouched)."""
        now = take(self.roots)
        lines = []
        for path in sorted(set(self.files) | set(now.files)):
            if path not in now.files:
                lines.append(f"{path} removed")
            elif path not in self.files:
                lines.append(f"{path} added")
            elif now.files[path][0] != self.files[path][0]:
                lines.append(f"{path} changed")
        return lines

    def restore(self) -> None:
        """Put every file back as it was at the snapshot; delete files added since."""
        now = take(self.roots)
        for path in now.files:
            if path not in self.files:
                path.unlink()
        for path, (digest, data) in self.files.items():
            if now.files.get(path, (None,))[0] != digest:
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.exists():
                    path.chmod(0o644)
                path.write_bytes(data)


def take(roots) -> Snapshot:
    """Snapshot every file under each existing folder of ``roots``."""
    roots = tuple(Path(r) for r in roots)
    files = {}
    for root in roots:
        if root.is_file():
            paths = [root]
        elif root.is_dir():
            paths = list(_files(root))
        else:
            continue
        for path in paths:
            try:
                data = path.read_bytes()
            except OSError:           # a socket or an unreadable file: not the grader's business
                continue
            files[path] = (hashlib.sha256(data).hexdigest(), data)
    return Snapshot(roots, files)
