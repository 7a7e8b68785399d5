"""The tiling struct the host copies to the device: a frozen dataclass of int fields that packs
to little-endian int32, one per field in declaration order (what ``memcpy`` of a C struct of
``int32_t`` gives), and unpacks back; a field annotated ``float`` packs as a float32 (a C
``float`` member, e.g. a scalar operand an operator project puts in its tiling rather than in
the entry's arguments). Kernels read their tiling from those bytes."""

from __future__ import annotations

import numbers
import struct
from dataclasses import astuple, fields


INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
FLOAT32_MAX = 3.4028234663852886e38


class Int32Struct:
    """Mixin for ``@dataclass(frozen=True)`` classes whose fields are ints (int32) or, annotated
    ``float``, float32."""

    @classmethod
    def struct_format(cls) -> str:
        return "<" + "".join("f" if f.type in (float, "float") else "i" for f in fields(cls))

    @classmethod
    def struct_bytes(cls) -> int:
        return struct.calcsize(cls.struct_format())

    def pack(self) -> bytes:
        """The bytes the host copies to the device: little-endian int32 (float32 for a ``float``
        field), field order. A value outside its field's type is refused by name (the host's
        ``int32_t`` field would wrap; a float32 one would overflow to inf)."""
        values = astuple(self)
        for f, v in zip(fields(self), values):
            if f.type in (float, "float"):
                # a float32 member: any finite real that float32 holds (the struct module refuses the rest)
                if isinstance(v, bool) or not isinstance(v, numbers.Real) or not abs(float(v)) <= FLOAT32_MAX:
                    raise ValueError(f"{type(self).__name__}.{f.name} = {v!r} does not fit the float32 field of "
                                     f"the device struct (a finite number of magnitude <= {FLOAT32_MAX:.4g})")
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not INT32_MIN <= v <= INT32_MAX:
                raise ValueError(f"{type(self).__name__}.{f.name} = {v!r} does not fit the int32 field of the "
                                 f"device struct ({INT32_MIN:,} .. {INT32_MAX:,}); use a smaller shape "
                                 "(fewer elements or rows per launch)")
        return struct.pack(self.struct_format(), *values)

    @classmethod
    def unpack(cls, data):
        """Inverse of :meth:`pack`; the constructor validates the values."""
        try:
            raw = memoryview(data).tobytes()  # bytes(12) would silently mean 12 zeros
        except TypeError:
            raise TypeError(f"{cls.__name__}.unpack needs a bytes-like object; "
                            f"got {type(data).__name__}") from None
        size = cls.struct_bytes()
        if len(raw) != size:
            names = ", ".join(f.name for f in fields(cls))
            kind = "int32" if set(cls.struct_format()[1:]) == {"i"} else "4-byte (int32 / float32)"
            raise ValueError(f"{cls.__name__}.unpack expects exactly {size} bytes ({size // 4} "
                             f"little-endian {kind} fields: {names}); got {len(raw)} bytes")
        return cls(*struct.unpack(cls.struct_format(), raw))
