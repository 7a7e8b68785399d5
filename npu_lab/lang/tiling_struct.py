"""The tiling struct the host copies to the device: a frozen dataclass of int fields that packs
to little-endian int32, one per field in declaration order (what ``memcpy`` of a C struct of
``int32_t`` gives), and unpacks back; a field annotated ``float`` packs as a float32 (a C
``float`` member, e.g. a scalar operand an operator project puts in its tiling rather than in
the entry's arguments). Kernels read their tiling from those bytes."""

from __future__ import annotations

import struct
from dataclasses import astuple, fields


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
        """The bytes the host copies to the device: little-endian int32, field order."""
        return struct.pack(self.struct_format(), *astuple(self))

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
