"""What every exercise check shares: the :class:`CheckResult` message and answer parsing.

A check returns a ``CheckResult``: a ``str`` (print it) with ``.correct`` — True, False, or None
when no answer was given yet. Answers may be numbers or strings with a unit ("5 us", "74%").
"""

from __future__ import annotations

import math
import numbers

import numpy as np

_UNITS = ("\u00b5s", "us", "%", "x", "cycles", "cycle", "bytes", "b")


class CheckResult(str):
    """A check's message; ``.correct`` is True, False, or None (no answer yet).
    Its repr is the message itself, so a notebook cell ending in a check shows plain text."""

    correct: bool | None

    def __new__(cls, text: str, correct: bool | None):
        obj = super().__new__(cls, text)
        obj.correct = correct
        return obj

    def __repr__(self) -> str:
        return str(self)


def right(text: str) -> CheckResult:
    return CheckResult("Right. " + text, True)


def wrong(text: str) -> CheckResult:
    return CheckResult("Not quite. " + text, False)


def missing(what: str) -> CheckResult:
    return CheckResult(f"No answer yet: replace None with {what}.", None)


def parse_number(answer):
    """A finite float from a number or a numeric string ('5', '5 us', '12%', '8,192'), else None."""
    if isinstance(answer, (bool, np.bool_)) or not isinstance(answer, (numbers.Real, str)):
        return None
    text = str(answer).strip().lower()
    for unit in _UNITS:
        text = text.removesuffix(unit).strip()
    try:
        value = float(text.replace(",", "").replace("_", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_whole(answer):
    """A whole number (int) from a number or numeric string ('8192', '8,192 bytes'), else None."""
    value = parse_number(answer)
    return int(value) if value is not None and value == int(value) else None
