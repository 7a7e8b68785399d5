"""What every exercise check shares: the :class:`CheckResult` message and answer parsing.

A check returns a ``CheckResult``: a ``str`` (print it) with ``.correct`` — True, False, or None
when no answer was given yet. Answers may be numbers or strings with a unit ("5 us", "74%").
"""

from __future__ import annotations

import math
import numbers

import numpy as np

# The units an answer may carry, by quantity; a check accepts only its own ('5 us' is not bytes).
#: microseconds: micro sign U+00B5, Greek mu U+03BC, or 'us'
US = ("\u00b5s", "\u03bcs", "us")
PERCENT = ("%",)
FACTOR = ("x", "\u00d7")
CYCLES = ("cycles", "cycle")
BYTES = ("bytes", "byte", "b")


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


def parse_number(answer, units: tuple[str, ...] = ()):
    """A finite float from a number or a numeric string ('5', '12%', '8,192'), else None. A
    string may end in one of ``units`` (e.g. :data:`US` for '5 us'); any other unit gives None."""
    if isinstance(answer, (bool, np.bool_)) or not isinstance(answer, (numbers.Real, str)):
        return None
    text = str(answer).strip().lower()
    for unit in sorted(units, key=len, reverse=True):     # 'cycles' before 'cycle'
        if text.endswith(unit):
            text = text[:-len(unit)].strip()
            break
    try:
        value = float(text.replace(",", "").replace("_", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_whole(answer, units: tuple[str, ...] = ()):
    """A whole number (int) from a number or numeric string ('8192', '8,192' or, with
    ``units=BYTES``, '8,192 bytes'), else None."""
    value = parse_number(answer, units)
    return int(value) if value is not None and value == int(value) else None


def parse_percent(answer):
    """A share as a percentage: 0.74, '74%' and 74 all mean 74 %."""
    value = parse_number(answer, PERCENT)
    if value is None:
        return None
    if isinstance(answer, str) and answer.strip().endswith("%"):
        return value
    return value * 100 if abs(value) <= 1 else value


def parse_word(answer, allowed: dict[str, str]):
    """Normalise a word answer through ``allowed`` (alias -> canonical), else None."""
    if not isinstance(answer, str):
        return None
    return allowed.get(answer.strip().lower().rstrip(".!"))


_YES_NO = {"yes": "yes", "y": "yes", "true": "yes", "no": "no", "n": "no", "false": "no"}


def parse_yes_no(answer):
    if isinstance(answer, bool):
        return "yes" if answer else "no"
    return parse_word(answer, _YES_NO)
