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


# ---- the checks' own keyword arguments ------------------------------------------------------------
#: Largest whole number a check's shape / count keyword takes (the checks run timing-only
#: simulations; a bigger value is a typo, and the simulator's own limits would refuse it later).
MAX_KEYWORD_INT = 1 << 24


def _check_keyword(owner: str, name: str, value, default) -> None:
    """Raise when ``value`` is not the kind of value ``default`` is (the harness's arguments are
    checked before any simulation, so a bad keyword is never reported as a wrong answer)."""
    what = f"{owner}'s {name}"
    if name in ("chip", "hw"):
        from ..presets import get_preset

        get_preset(value)                 # names the presets (TypeError for a non-string)
        return
    if name == "version":
        from ..kernels.moe_gating import VERSIONS

        if not isinstance(value, str) or value not in VERSIONS:
            raise ValueError(f"{what} must be one of {', '.join(VERSIONS)}; got {value!r}")
        return
    if name == "timeline":
        from ..sim.timeline import Timeline

        if value is not None and not isinstance(value, Timeline):
            raise TypeError(f"{what} must be None (the notebook's run) or a Timeline, got {type(value).__name__}")
        return
    if isinstance(default, bool):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{what} must be True or False, got {value!r}")
    elif isinstance(default, int):
        low = 0 if default == 0 else 1
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
                or not low <= value <= MAX_KEYWORD_INT:
            raise ValueError(f"{what} must be a whole number from {low} to {MAX_KEYWORD_INT:,}, got {value!r}")
    elif isinstance(default, float):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f"{what} must be a finite number, got {value!r}")
    elif isinstance(default, str) and not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {type(value).__name__}")


def checked_keywords(fn):
    """Decorate a public check (or its truth function) so every argument that has a default is
    validated against the kind of its default before the body runs: whole numbers >= 1 (>= 0
    when the default is 0), chips a preset, versions a MoeGatingTopK version, a timeline a
    Timeline. Unknown keywords raise Python's own TypeError."""
    import functools
    import inspect

    sig = inspect.signature(fn)
    defaults = {n: p.default for n, p in sig.parameters.items() if p.default is not inspect.Parameter.empty}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{fn.__name__}{sig}: {exc}") from None
        for name, value in bound.arguments.items():
            if name in defaults:
                _check_keyword(fn.__name__, name, value, defaults[name])
        return fn(*args, **kwargs)

    return wrapper
