"""The course layer: what the notebooks show on top of the library (DESIGN.md §2).

* :mod:`.checks` — parsing answers and the :class:`~.checks.CheckResult` message type;
* ``ex01`` … ``ex07`` — one module of exercise checks per notebook;
* :mod:`.explorers` — the slider explorers (ipywidgets + plotly);
* :mod:`.viz`, :mod:`.pipeline_diagram` — figures; :mod:`.kernel_view` — ``show_kernel``;
* :mod:`.widgets` — the notebook 01 explorers.

The library proper (``hardware``, ``sim``, ``lang``, ``kernels``) never imports this package, so a
new notebook adds a module here, not edits to the library.
"""
