#!/usr/bin/env python3
"""Re-execute the course notebooks in place and clean them for committing.

What `make notebooks` runs::

    python scripts/run_notebooks.py notebooks/*.ipynb

For every notebook given (globs are expanded here too, so a quoted pattern works):

1. execute it top to bottom in a fresh ``python3`` kernel with nbclient, with the
   notebook's own folder as the working directory and a per-cell timeout
   (``--timeout``, default 300 s);
2. clean it with nbstripout's Python API, ``--keep-output`` semantics: outputs and
   execution counts stay (the course reads well before it runs, and nbval needs them),
   but saved widget state (``metadata.widgets``, megabytes of stale JavaScript state),
   per-cell noise (``collapsed``, ``scrolled``, ``ExecuteTime``, ``execution`` timing,
   ``jupyter.outputs_hidden``, ...) and machine-specific metadata
   (``language_info.version``, the kernelspec's display name) are removed or normalised,
   so re-running on another machine gives no metadata diff;
3. write it back atomically (temp file + rename, same JSON layout as Jupyter:
   indent=1, sorted keys), and print its wall time and size.

Widget *view* outputs (``application/vnd.jupyter.widget-view+json``) are kept: they
carry the text/plain fallback (shown by viewers without a live kernel), and nbval
ignores them. Their model ids point to state that is not saved, so they are renumbered
in order of appearance: re-running a notebook does not rewrite every widget output.

Cells that demonstrate an error carry ``# NBVAL_RAISES_EXCEPTION`` (or the
``raises-exception`` tag): their error is expected, and it is a failure if they do
*not* raise. Any other error stops that notebook; it is left untouched on disk, the
notebook and cell are named, and the script exits non-zero after trying the others.

Plotly's renderer is pinned to ``plotly_mimetype`` in the kernel (``PLOTLY_RENDERER``),
so the saved outputs do not depend on the terminal the script runs from (VS Code,
Colab, ... would pick other renderers).

Options::

    --check        execute into memory only; report cells whose committed outputs
                   (cells not marked NBVAL_IGNORE_OUTPUT / NBVAL_SKIP, compared the way
                   nbval does, with tests/nbval_sanitize.cfg applied) would change, and
                   notebooks that are not clean. Exit 1 if anything would change.
    --clean-only   do not execute; only clean (after saving from JupyterLab, say).
    --timeout S    per-cell timeout in seconds (default 300).
    --kernel NAME  kernel to run (default python3).
"""

from __future__ import annotations

import argparse
import copy
import glob
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from nbstripout import strip_output

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SANITIZE = REPO / "tests" / "nbval_sanitize.cfg"
DEFAULT_TIMEOUT_S = 300
KERNEL_NAME = "python3"

#: Same kernelspec on every machine (the display name differs between installs).
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}

#: Metadata removed by cleaning. The first block is nbstripout's own default list
#: (its CLI builds it inside main(), the API does not export it); the rest is
#: machine- or editor-specific noise.
STRIP_KEYS = [
    "metadata.signature",
    "metadata.widgets",
    "cell.metadata.collapsed",
    "cell.metadata.ExecuteTime",
    "cell.metadata.execution",
    "cell.metadata.heading_collapsed",
    "cell.metadata.hidden",
    "cell.metadata.scrolled",
    # beyond nbstripout's defaults
    "metadata.language_info.version",
    "metadata.vscode",
    "metadata.toc",
    "metadata.varInspector",
    "metadata.colab",
    "metadata.celltoolbar",
    "cell.metadata.trusted",
    "cell.metadata.jupyter.outputs_hidden",
    "cell.metadata.pycharm",
]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

#: nbval's cell markers (comment on a line by itself, or the equivalent tag).
MARKERS = ("NBVAL_IGNORE_OUTPUT", "NBVAL_CHECK_OUTPUT", "NBVAL_RAISES_EXCEPTION", "NBVAL_SKIP")
_TAGS = {m.lower().replace("_", "-"): m for m in MARKERS}
_TAGS["raises-exception"] = "NBVAL_RAISES_EXCEPTION"

#: Output keys nbval does not compare (mirrors nbval.plugin.IPyNbFile.skip_compare
#: without --nbdime).
_SKIP_COMPARE = {
    "metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
    WIDGET_VIEW, "image/png", "image/jpeg",
}


# --------------------------------------------------------------------------- markers
def cell_markers(cell) -> set[str]:
    """The nbval markers of a cell: ``# NBVAL_...`` comment lines and cell tags."""
    found = set()
    if cell.get("cell_type") != "code":
        return found
    for line in cell.get("source", "").splitlines():
        line = line.strip()
        if line.startswith("#") and line.lstrip("#").strip() in MARKERS:
            found.add(line.lstrip("#").strip())
    for tag in cell.get("metadata", {}).get("tags", []) or []:
        if tag in _TAGS:
            found.add(_TAGS[tag])
    return found


# --------------------------------------------------------------------------- cleaning
def clean_notebook(nb):
    """Strip widget state and metadata noise from ``nb`` in place and return it.

    Outputs, execution counts and cell ids are kept (``nbstripout --keep-output
    --keep-count --keep-id``). Idempotent: cleaning a clean notebook changes nothing.
    """
    strip_output(nb, keep_output=True, keep_count=True, keep_id=True, extra_keys=STRIP_KEYS)
    nb.metadata["kernelspec"] = nbformat.from_dict(dict(KERNELSPEC))
    widget_ids: dict[str, str] = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {})
        if "jupyter" in meta and not meta["jupyter"]:
            del meta["jupyter"]
        if "tags" in meta and not meta["tags"]:
            del meta["tags"]
        if cell.get("outputs"):
            # one stream output per run of prints: how the kernel chunks stdout depends on timing,
            # so unmerged chunks would rewrite the notebook on every run (nbval merges them too)
            merged = []
            for out in cell["outputs"]:
                if (out.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                        and merged[-1]["name"] == out["name"]):
                    merged[-1]["text"] = "".join(merged[-1]["text"]) + "".join(out["text"])
                else:
                    merged.append(out)
            cell["outputs"] = merged
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if isinstance(view, dict) and "model_id" in view:
                # The model's state is not saved, so its random id points nowhere:
                # number the ids in order of appearance (same widget, same number)
                # so that re-running a notebook does not rewrite every widget output.
                view["model_id"] = widget_ids.setdefault(view["model_id"], f"{len(widget_ids) + 1:032x}")
    return nb


def is_clean(nb) -> bool:
    """True if :func:`clean_notebook` would not change ``nb``."""
    return clean_notebook(copy.deepcopy(nb)) == nb


def write_atomically(nb, path: Path) -> None:
    """Validate ``nb`` and write it to ``path`` via a temp file in the same folder.

    A crash or Ctrl-C leaves either the old file or the new one, never half of one.
    """
    nbformat.validate(nb)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            nbformat.write(nb, f)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- execution
class NotebookFailed(Exception):
    """A notebook could not be executed; the message names the notebook and the cell."""


class _Client(NotebookClient):
    """nbclient's NotebookClient that understands ``# NBVAL_RAISES_EXCEPTION`` comments
    and remembers which cell it is running and how long each took."""

    current_index: int = -1
    cell_times: dict

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        self.current_index = cell_index
        if not hasattr(self, "cell_times"):
            self.cell_times = {}
        meta = cell.setdefault("metadata", {})
        tags = meta.get("tags")
        if "NBVAL_RAISES_EXCEPTION" in cell_markers(cell) and "raises-exception" not in (tags or []):
            # nbclient's opt-in, and kept: JupyterLab's "run all" and Voila stop at the first
            # error of a cell without this tag, so the cells after a demonstrated error would
            # never run for a learner
            meta["tags"] = list(tags or []) + ["raises-exception"]
        start = time.perf_counter()
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        finally:
            self.cell_times[cell_index] = time.perf_counter() - start


def _describe_cell(nb, index: int) -> str:
    cell = nb.cells[index]
    code_no = sum(1 for c in nb.cells[: index + 1] if c.cell_type == "code")
    first = next(
        (ln for ln in cell.source.splitlines() if ln.strip() and ln.lstrip("# ").strip() not in MARKERS),
        "",
    )
    return f"cell {index} (code cell #{code_no}: {first[:70]!r})"


def execute_notebook(path: Path, timeout: int, kernel: str):
    """Execute a copy of the notebook at ``path``; return ``(nb, seconds, slowest)``.

    ``slowest`` is ``(cell_index, seconds)``. Raises :class:`NotebookFailed`.
    """
    nb = nbformat.read(path, as_version=4)
    client = _Client(
        nb,
        timeout=timeout,
        kernel_name=kernel,
        resources={"metadata": {"path": str(path.parent.resolve())}},
        store_widget_state=False,  # never embed widget state (it is stripped anyway)
        record_timing=False,       # no per-cell timestamps in the metadata
    )
    start = time.perf_counter()
    try:
        client.execute()
    except CellTimeoutError:
        raise NotebookFailed(
            f"{path}: {_describe_cell(nb, client.current_index)} did not finish within "
            f"{timeout} s (raise --timeout, or make the cell cheaper)"
        ) from None
    except DeadKernelError as e:
        raise NotebookFailed(
            f"{path}: the kernel died while running {_describe_cell(nb, client.current_index)}: {e}"
        ) from None
    except CellExecutionError as e:
        raise NotebookFailed(
            f"{path}: {_describe_cell(nb, client.current_index)} raised {e.ename}: {e.evalue}\n"
            f"(mark the cell `# NBVAL_RAISES_EXCEPTION` if the error is the lesson)\n{_plain(str(e))}"
        ) from None
    seconds = time.perf_counter() - start

    for i, cell in enumerate(nb.cells):
        if "NBVAL_RAISES_EXCEPTION" in cell_markers(cell) and not any(
            o.get("output_type") == "error" for o in cell.get("outputs", [])
        ):
            raise NotebookFailed(
                f"{path}: {_describe_cell(nb, i)} is marked NBVAL_RAISES_EXCEPTION but raised "
                "nothing (nbval would fail on it)"
            )
    times = getattr(client, "cell_times", {}) or {-1: 0.0}
    slowest = max(times.items(), key=lambda kv: kv[1])
    return nb, seconds, slowest


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _plain(text: str) -> str:
    return _ANSI.sub("", text)


# --------------------------------------------------------------------------- --check
def load_sanitize_patterns(path: Path) -> list[tuple[str, str]]:
    """(regex, replace) pairs from an nbval sanitize file, parsed the way nbval does."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return re.findall(r"^regex: (.*)$\n^replace: (.*)$", text, flags=re.MULTILINE)


def _comparable(outputs, patterns) -> dict:
    """Outputs reduced to what nbval compares: streams merged per name, the keys nbval
    skips dropped, MIME bundles flattened, strings sanitized."""

    def sanitize(value):
        if not isinstance(value, str):
            return value
        for regex, replace in patterns:
            value = re.sub(regex, replace, value)
        return value

    merged, streams = [], {}
    for out in outputs:
        if out.get("output_type") == "stream":
            if out["name"] in streams:
                streams[out["name"]]["text"] += out["text"]
                continue
            out = {"output_type": "stream", "name": out["name"], "text": out["text"]}
            streams[out["name"]] = out
            merged.append(out)
        else:
            merged.append(out)
    flat: dict[str, list] = {}
    for out in merged:
        if out.get("output_type") == "stream":
            flat.setdefault(out["name"], []).append(sanitize(out["text"]))
            continue
        for key, value in out.items():
            if key in _SKIP_COMPARE:
                continue
            if key == "data":
                for mime, payload in value.items():
                    if mime not in _SKIP_COMPARE:
                        flat.setdefault(mime, []).append(sanitize(payload))
            else:
                flat.setdefault(key, []).append(sanitize(value))
    return flat


def changed_cells(old_nb, new_nb, patterns) -> list[str]:
    """Descriptions of the compared cells whose outputs differ between two runs."""
    if len(old_nb.cells) != len(new_nb.cells):
        return ["the number of cells differs"]
    changes = []
    for i, (old, new) in enumerate(zip(old_nb.cells, new_nb.cells)):
        if old.cell_type != "code":
            continue
        markers = cell_markers(old)
        if markers & {"NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP"}:
            continue
        a = _comparable(old.get("outputs", []), patterns)
        b = _comparable(new.get("outputs", []), patterns)
        if a != b:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            changes.append(f"{_describe_cell(old_nb, i)}: {', '.join(keys)} would change")
    return changes


# --------------------------------------------------------------------------- main
def expand(args: list[str]) -> list[Path]:
    """Paths from the command line; unexpanded globs are expanded (none is fine)."""
    paths: list[Path] = []
    for arg in args:
        if any(ch in arg for ch in "*?[") and not Path(arg).exists():
            matches = sorted(glob.glob(arg))
            if not matches:
                print(f"note: no notebook matches {arg}", file=sys.stderr)
            paths.extend(Path(m) for m in matches)
        else:
            paths.append(Path(arg))
    return [p for p in paths if ".ipynb_checkpoints" not in p.parts]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Re-execute notebooks in place and strip widget state / metadata noise.",
        epilog="Example: python scripts/run_notebooks.py notebooks/*.ipynb",
    )
    parser.add_argument("notebooks", nargs="*", default=[str(REPO / "notebooks" / "*.ipynb")],
                        help="notebook files or glob patterns (default: notebooks/*.ipynb)")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S,
                        help=f"per-cell timeout in seconds (default {DEFAULT_TIMEOUT_S})")
    parser.add_argument("--kernel", default=KERNEL_NAME, help=f"kernel name (default {KERNEL_NAME})")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="do not write; exit 1 if compared outputs or metadata would change")
    mode.add_argument("--clean-only", action="store_true", help="clean without executing")
    parser.add_argument("--sanitize-with", type=Path, default=DEFAULT_SANITIZE,
                        help="nbval sanitize file used by --check (default tests/nbval_sanitize.cfg)")
    args = parser.parse_args(argv)

    paths = expand(args.notebooks)
    if not paths:
        print("No notebooks to run.")
        return 0
    missing = [p for p in paths if not p.is_file()]
    if missing:
        print("error: not a file: " + ", ".join(map(str, missing)), file=sys.stderr)
        return 2

    # Inherited by the kernels: deterministic plotly output, no debugger chatter.
    os.environ["PLOTLY_RENDERER"] = "plotly_mimetype"
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")

    patterns = load_sanitize_patterns(args.sanitize_with) if args.check else []
    failures: list[str] = []
    total_start = time.perf_counter()
    for path in paths:
        try:
            if args.clean_only:
                nb = nbformat.read(path, as_version=4)
                clean_notebook(nb)
                write_atomically(nb, path)
                print(f"cleaned {path}  ({path.stat().st_size / 1024:.0f} KB)")
                continue

            nb, seconds, (slow_i, slow_s) = execute_notebook(path, args.timeout, args.kernel)
            clean_notebook(nb)
            timing = f"{seconds:6.1f} s  (slowest: cell {slow_i}, {slow_s:.1f} s)"
            if args.check:
                committed = nbformat.read(path, as_version=4)
                problems = changed_cells(committed, nb, patterns)
                if not is_clean(committed):
                    problems.append("metadata is not clean (run `make notebooks`)")
                if problems:
                    failures.append(f"{path}:\n    " + "\n    ".join(problems))
                    print(f"CHANGED {path}  {timing}")
                else:
                    print(f"same    {path}  {timing}")
                continue

            write_atomically(nb, path)
            size_kb = path.stat().st_size / 1024
            warn = "  WARNING: over 500 KB" if size_kb > 500 else ""
            print(f"ok      {path}  {timing}  {size_kb:.0f} KB{warn}")
        except NotebookFailed as e:
            failures.append(str(e))
            print(f"FAILED  {path}", file=sys.stderr)
        except (nbformat.ValidationError, ValueError, OSError) as e:
            failures.append(f"{path}: {type(e).__name__}: {e}")
            print(f"FAILED  {path}", file=sys.stderr)

    print(f"{len(paths)} notebook(s) in {time.perf_counter() - total_start:.1f} s")
    if failures:
        what = "would change" if args.check else "failed"
        print(f"\n{len(failures)} notebook(s) {what}:", file=sys.stderr)
        for f in failures:
            print(f"\n{f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
