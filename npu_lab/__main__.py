"""``python -m npu_lab`` (and the ``npu-lab`` console script): see :mod:`npu_lab.cli`."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
