"""The course layer: what the notebooks show on top of the library (README.md).

* :mod:`.checks` — parsing answers and the :class:`~.checks.CheckResult` message type;
* ``ex01`` … ``ex07`` — one module of exercise checks per notebook;
* :mod:`.explorers` — the slider explorers (ipywidgets + plotly);
* :mod:`.viz`, :mod:`.pipeline_diagram` — figures; :mod:`.kernel_view` — ``show_kernel``;
* :mod:`.widgets` — the notebook 01 explorers;
* :mod:`.markers`, :mod:`.release`, :mod:`.grading` — the instructor workflow on nbgrader
  (docs/instructors.md); :func:`show_solution` (:mod:`.solutions`) — a solution, on purpose.

The library proper (``hardware``, ``sim``, ``lang``, ``kernels``) never imports this package, so a
new notebook adds a module here, not edits to the library.
"""

from .solutions import show_solution

__all__ = ["show_solution"]
