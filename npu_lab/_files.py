"""Writing files whole or not at all.

A writer that fails half-way (disk full, a killed process, an exception while serialising) must
not leave a truncated file where a good one was, or where a reader would take the half for the
whole. :func:`write_atomically` lets the writer fill a temporary file in the same folder and
renames it over the target only once the writer returned (``os.replace`` is atomic on POSIX and
Windows when both names are on one file system, which the same folder guarantees).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def check_path(path, what: str = "path") -> str:
    """``path`` as a string when it is a file name (str or os.PathLike), else a TypeError.

    Integers are refused on purpose: ``open(2, "w")`` writes into file descriptor 2 (stderr)."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what} must be a file name (a str or pathlib.Path), got {type(path).__name__} "
                        f"{path!r}; an integer would be taken as an open file descriptor")
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not text or "\x00" in text:
        raise ValueError(f"{what} must be a non-empty file name without NUL characters, got {text!r}")
    return text


def _mode_for(target: str) -> int:
    """The permission bits the target keeps (or a new file gets under the umask)."""
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_atomically(path, writer, what: str = "path") -> None:
    """Call ``writer(tmp)`` with a temporary file name beside ``path``, then rename it to ``path``.

    On any error the temporary file is removed and ``path`` is left as it was (absent, or its old
    content). ``writer`` gets a str and must write the whole file to it."""
    target = check_path(path, what)
    folder = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=f".{Path(target).name}.", suffix=".part", dir=folder)
    os.close(fd)
    try:
        os.chmod(tmp, _mode_for(target))
        writer(tmp)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_text_atomically(path, text: str, what: str = "path", encoding: str = "utf-8") -> None:
    """:func:`write_atomically` for a string."""
    write_atomically(path, lambda p: Path(p).write_text(text, encoding=encoding), what)
