"""The files a submission must not change, watched while each one runs (:mod:`.grading`): the
course folder (gradebook, source, release), the submissions folder, the instructor notebooks, the
npu_lab package and the child's copy of it.

:func:`take` records, once per batch, each file's bytes and its stat signature (size, inode,
modification and status-change times in ns). A write, a rename over the file, a ``chmod`` or an
``os.utime`` that puts the old modification time back all move the status-change time (``ctime``),
which only the kernel sets, so comparing signatures (:meth:`Snapshot.changes`, a ``stat`` per file)
finds every change without reading the files again; :meth:`Snapshot.restore` writes the recorded
bytes back and deletes added files. ``__pycache__`` folders are skipped (Python writes them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def _files(root: Path):
    if root.is_file():
        yield root
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            yield Path(folder) / name


def _signature(path: Path):
    st = path.lstat()
    return (st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


def _signatures(roots) -> dict:
    out = {}
    for root in roots:
        if not root.exists():
            continue
        for path in _files(root):
            try:
                out[path] = _signature(path)
            except OSError:
                continue
    return out


@dataclass
class Snapshot:
    """``files``: path -> bytes, ``signatures``: path -> stat signature, under ``roots``."""

    roots: tuple[Path, ...]
    files: dict
    signatures: dict

    def changes(self) -> list[str]:
        """One line per file changed, removed or added since the snapshot (empty: untouched)."""
        now = _signatures(self.roots)
        lines = []
        for path in sorted(set(self.signatures) | set(now)):
            if path not in now:
                lines.append(f"{path} removed")
            elif path not in self.signatures:
                lines.append(f"{path} added")
            elif now[path] != self.signatures[path]:
                lines.append(f"{path} changed")
        return lines

    def restore(self) -> None:
        """Put every file back as it was at the snapshot, delete files added since, and take the
        restored files' new signatures as the reference."""
        now = _signatures(self.roots)
        for path in now:
            if path not in self.signatures:
                path.unlink()
        for path, data in self.files.items():
            if now.get(path) != self.signatures[path]:
                mode = self.signatures[path][4] & 0o7777
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.is_symlink() or path.is_dir():
                    path.unlink() if path.is_symlink() else os.rmdir(path)
                if path.exists():
                    path.chmod(0o600)
                path.write_bytes(data)
                path.chmod(mode)
        self.signatures = _signatures(self.roots)


def take(roots) -> Snapshot:
    """Snapshot every file under each existing folder (or file) of ``roots``."""
    roots = tuple(Path(r) for r in roots)
    files, signatures = {}, {}
    for root in roots:
        if not root.exists():
            continue
        for path in _files(root):
            try:
                signatures[path] = _signature(path)
                files[path] = path.read_bytes()
            except OSError:           # a socket or an unreadable file: not the grader's business
                signatures.pop(path, None)
    return Snapshot(roots, files, signatures)
