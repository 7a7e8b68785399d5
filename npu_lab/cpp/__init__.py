"""Tools around the C++ listings: compiling them against asc-devkit's real headers
(:mod:`.compile_check`). Depends on nothing else in npu_lab."""

from .compile_check import CHIPS, Diagnostic, HeadersMissing, compile_listing, find_devkit

__all__ = ["CHIPS", "Diagnostic", "HeadersMissing", "compile_listing", "find_devkit"]
