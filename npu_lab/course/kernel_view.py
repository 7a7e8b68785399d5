"""A course kernel's Python beside its Ascend C listing, for the notebooks (presentation only).

``show_kernel("v1")`` returns an object Jupyter renders as two columns — left the Python kernel
(the ``@npu_kernel`` function, plus the module-level helper it delegates to when the kernel is a
thin wrapper), right the C++ listing — and prints as a one-line summary elsewhere. The C++ comes
from :func:`npu_lab.kernels.listings.listing` when that module exists, else from the ``.cpp``
file the kernel's docstring names (``scaled_add.cpp`` beside ``scaled_add.py``).

Names: ``"scaled_add"`` and every MoeGatingTopK version (``"v1"``, ``"v2"``, ``"v2c"``, ``"v3"``,
``"v4"``, ...; ``"discrete"`` shows the chain's three kernels). A kernel function works too.
No library module imports this one.
"""

from __future__ import annotations

import html
import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

#: course kernel name -> "module:function" (or several, for the discrete chain)
KERNELS = {
    "scaled_add": ("npu_lab.kernels.scaled_add:scaled_add_kernel",),
    "discrete": ("npu_lab.kernels.moe_gating.discrete:softmax_kernel",
                 "npu_lab.kernels.moe_gating.discrete:topk_sort_kernel",
                 "npu_lab.kernels.moe_gating.discrete:renormalise_kernel"),
    "v1": ("npu_lab.kernels.moe_gating.fused:moe_gating_v1_kernel",),
    "v2": ("npu_lab.kernels.moe_gating.fused:moe_gating_v2_kernel",),
    "v2_bad_sync": ("npu_lab.kernels.moe_gating.fused:moe_gating_v2_bad_sync_kernel",),
    "v2c": ("npu_lab.kernels.moe_gating.fused:moe_gating_v2c_kernel",),
    "v3": ("npu_lab.kernels.moe_gating.vectorized:moe_gating_v3_kernel",),
    "v3_fast_exp": ("npu_lab.kernels.moe_gating.vectorized:moe_gating_v3_fast_exp_kernel",),
    "v4": ("npu_lab.kernels.moe_gating.sorted_topk:moe_gating_v4_kernel",),
}

_WRAPPER_BODY_LINES = 8      # a kernel this short delegates: show what it calls too
_CPP_NAME = re.compile(r"``([\w./-]+\.cpp)``")


@dataclass(frozen=True)
class KernelView:
    """What :func:`show_kernel` returns: the two texts and where they came from."""

    name: str
    python: str
    python_from: str
    cpp: str | None
    cpp_from: str

    def __repr__(self) -> str:
        py_lines = self.python.count("\n") + 1
        cpp = f"{self.cpp_from} ({self.cpp.count(chr(10)) + 1} lines)" if self.cpp else f"no C++ listing ({self.cpp_from})"
        return f"show_kernel({self.name!r}): Python {self.python_from} ({py_lines} lines) | C++ {cpp}"

    def _repr_html_(self) -> str:
        py = _highlight(self.python, "python")
        cpp = _highlight(self.cpp, "cpp") if self.cpp else f"<p><i>{html.escape(self.cpp_from)}</i></p>"
        col = ('<div style="flex:1 1 0;min-width:0">'
               '<div style="font-weight:bold;margin-bottom:4px">{title}</div>'
               '<div style="max-height:560px;overflow:auto;font-size:12px">{body}</div></div>')
        return ('<div style="display:flex;gap:12px;align-items:flex-start">'
                + col.format(title=f"Python · {html.escape(self.python_from)}", body=py)
                + col.format(title=f"Ascend C · {html.escape(self.cpp_from)}", body=cpp)
                + "</div>")


def _call_names() -> tuple[frozenset, frozenset]:
    """(Python names, C++ names) of the Ascend C calls, to mark them in both columns."""
    from ..lang.api_map import ASCEND_C_API

    py = frozenset(v["python"].rsplit(".", 1)[-1] for v in ASCEND_C_API.values())
    cpp = frozenset(k.rsplit("::", 1)[-1] for k in ASCEND_C_API)
    return py, cpp


_IDENT_CALL = re.compile(r"\b([A-Za-z_]\w*)(?=\s*[(<])")


def _highlight(code: str, language: str) -> str:
    """The source as HTML: comments dimmed, Ascend C calls in bold (the same calls, side by side).
    Light markup on purpose: a colourizer's per-token spans would make a 300-line listing
    several times larger than the text."""
    py_names, cpp_names = _call_names()
    names = py_names if language == "python" else cpp_names
    marker = "#" if language == "python" else "//"
    out = []
    for line in code.splitlines():
        cut = line.find(marker)
        body, comment = (line, "") if cut < 0 else (line[:cut], line[cut:])
        body = html.escape(body)
        body = _IDENT_CALL.sub(lambda m: f"<b>{m.group(1)}</b>" if m.group(1) in names else m.group(1), body)
        if comment:
            body += f'<span style="color:#3D7B7B">{html.escape(comment)}</span>'
        out.append(body)
    return '<pre style="margin:0;line-height:1.25">' + "\n".join(out) + "</pre>"


def _resolve(spec: str):
    module_name, _, attr = spec.partition(":")
    return importlib.import_module(module_name), attr


def _body_lines(fn) -> int:
    lines = inspect.getsource(fn).splitlines()
    doc = inspect.getdoc(fn) or ""
    return sum(1 for ln in lines if ln.strip() and not ln.lstrip().startswith(("@", "def ", "#"))) \
        - (doc.count("\n") + 1 if doc else 0)


def _python_text(fn) -> str:
    """The kernel's source; if it is a thin wrapper, also the private module-level helpers it
    names (v2 → the shared looping kernel, v4 → its kernel class)."""
    fn = inspect.unwrap(fn)
    text = inspect.getsource(fn)
    if _body_lines(fn) > _WRAPPER_BODY_LINES:
        return text
    module = inspect.getmodule(fn)
    helpers = []
    for name in dict.fromkeys(re.findall(r"\b(_\w+)\b", text)):
        obj = getattr(module, name, None)
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(obj, "__module__", None) == module.__name__:
            helpers.append(inspect.getsource(inspect.unwrap(obj)))
    return "\n\n".join(helpers + [text])


def _cpp_from_listings(name: str) -> tuple[str | None, str]:
    try:
        listings = importlib.import_module("npu_lab.kernels.listings")
    except ImportError:
        return None, ""
    get = getattr(listings, "listing", None)
    if get is None:
        return None, ""
    try:
        text = get(name)
    except (KeyError, ValueError, FileNotFoundError) as err:
        return None, f"npu_lab.kernels.listings has none: {err}"
    where = f"listing({name!r})"
    path_of = getattr(listings, "listing_path", None)
    if path_of is not None:
        path = Path(path_of(name))
        where = f"{path.parent.name}/{path.name}" if path.parent.name != "kernels" else path.name
    return (text, where) if text else (None, "")


def _cpp_from_docstring(fns) -> tuple[str | None, str]:
    """The .cpp file a kernel's docstring (or its module's) names, read from beside the module."""
    for fn in fns:
        fn = inspect.unwrap(fn)
        module = inspect.getmodule(fn)
        for doc in (fn.__doc__ or "", module.__doc__ or ""):
            for file_name in _CPP_NAME.findall(doc):
                path = Path(module.__file__).parent / file_name
                if path.is_file():
                    return path.read_text(encoding="utf-8"), path.name
    return None, ""


def kernel_names() -> list[str]:
    """The names :func:`show_kernel` knows."""
    return list(KERNELS)


def show_kernel(kernel) -> KernelView:
    """The Python kernel ``kernel`` (a name from :func:`kernel_names` or an ``@npu_kernel``
    function) beside its Ascend C listing; display it in a notebook cell."""
    if callable(kernel) and not isinstance(kernel, str):
        name = getattr(inspect.unwrap(kernel), "__name__", "kernel")
        fns = [kernel]
        from_ = f"{inspect.unwrap(kernel).__module__}.{name}"
    elif isinstance(kernel, str):
        if kernel not in KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; show_kernel knows: {', '.join(KERNELS)} "
                             "(or pass an @npu_kernel function)")
        name = kernel
        fns = [getattr(*_resolve(spec)) for spec in KERNELS[kernel]]
        from_ = ", ".join(f"{inspect.unwrap(f).__module__.rsplit('.', 1)[-1]}.{inspect.unwrap(f).__name__}"
                          for f in fns)
    else:
        raise TypeError(f"show_kernel takes a kernel name or an @npu_kernel function, got {type(kernel).__name__}")
    python = "\n\n".join(_python_text(f) for f in fns)
    cpp, cpp_from = _cpp_from_listings(name)
    if cpp is None:
        cpp, found = _cpp_from_docstring(fns)
        cpp_from = found or cpp_from or "not written yet"
    return KernelView(name, python, from_, cpp, cpp_from)
