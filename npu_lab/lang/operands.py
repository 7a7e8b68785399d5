"""The scalar operand of a vector or scalar instruction (``Duplicate``, ``Adds``, ``Compares``,
``Select`` in VSEL_TENSOR_SCALAR_MODE, ``CreateVecIndex``, ``ArithProgression``, ``SetValue``).

In Ascend C the scalar is a C++ value of the tensor's element type ``T`` (the API pages declare
``const T& scalarValue``, e.g. docs/zh/api/SIMD-API/基础API/矢量计算/.../Duplicate.md): a number,
converted once to ``T``. Python would let ``None`` through as NaN (``np.asarray(None)`` is an
object array whose float cast is NaN), a string, a complex or a float for an int tensor; each is a
program the C++ compiler rejects, so this raises instead. Float NaN and ±inf are values of a float
``T`` and pass (``Duplicate(-inf)`` is how a kernel knocks out a score). An integer outside ``T``'s
range would be narrowed silently by the C++ conversion: refused, naming the range.
"""

from __future__ import annotations

import numbers

import numpy as np

from .errors import AscendCRuleError

_INT_RANGES: dict = {}


def scalar_operand(instruction: str, value, dtype):
    """``value`` unchanged when it is a valid scalar operand of ``instruction`` on elements of
    ``dtype``; else a TypeError (not a number) or AscendCRuleError (a float for an integer tensor,
    an integer outside the type's range)."""
    cls = value.__class__
    kind = np.dtype(dtype).kind
    if kind == "f" and (cls is float or cls is int):             # the common case, checked cheaply
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)) \
            or isinstance(value, (complex, np.complexfloating)):
        raise TypeError(f"{instruction} takes a scalar number of the tensor's type ({np.dtype(dtype).name}), "
                        f"got {cls.__name__} {value!r}")
    if kind in "iu":
        if not float(value).is_integer():
            raise AscendCRuleError(f"{instruction} on {np.dtype(dtype).name} takes an integer scalar, got {value!r}")
        lo, hi = _INT_RANGES.get(dtype) or _INT_RANGES.setdefault(
            dtype, (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)))
        if not lo <= int(value) <= hi:
            raise AscendCRuleError(f"{instruction}: scalar {value!r} does not fit {np.dtype(dtype).name} "
                                   f"({lo:,} .. {hi:,}); the C++ conversion would wrap it")
    return value
