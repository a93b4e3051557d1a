"""Kafka's wire encoding, read: big-endian integers, unsigned varints, classic and compact
(flexible) strings, bytes and arrays, and tagged fields — what `ferry.offsets_topic.decode`
reads each record with. Every shortfall is an `OffsetsDecodeError` naming where it happened.
"""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class OffsetsDecodeError(ValueError):
    """A record that does not follow its schema; the message is the reason, in one line.
    `key_version` is the record's key version when the key got that far, else None."""

    key_version: int | None = None


class WireReader:
    """Big-endian reads over one byte string; every shortfall is an OffsetsDecodeError
    naming the struct, the field and the byte position."""

    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def fail(self, message: str) -> OffsetsDecodeError:
        return OffsetsDecodeError(f"{self.what}: {message}")

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, field: str) -> bytes:
        if n > self.remaining():
            raise self.fail(
                f"truncated at byte {self.pos}: {field} needs {n} bytes, {self.remaining()} left"
            )
        start = self.pos
        self.pos += n
        return self.data[start : self.pos]

    def int16(self, field: str) -> int:
        return _I16.unpack(self.take(2, field))[0]

    def int32(self, field: str) -> int:
        return _I32.unpack(self.take(4, field))[0]

    def int64(self, field: str) -> int:
        return _I64.unpack(self.take(8, field))[0]

    def uvarint(self, field: str) -> int:
        """Unsigned varint of at most 5 bytes (an unsigned 32-bit value), as Kafka writes."""
        value = 0
        for i in range(5):
            if self.pos >= len(self.data):
                raise self.fail(f"truncated at byte {self.pos}: {field} varint is cut off")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                if value > 0xFFFFFFFF:
                    break
                return value
        raise self.fail(f"{field} varint at byte {self.pos} is longer than 5 bytes")

    def _length(self, field: str, flexible: bool, wide: bool) -> int:
        """-1 for null. Classic strings have an int16 length, classic bytes and arrays int32;
        compact ones an unsigned varint holding length + 1."""
        if flexible:
            return self.uvarint(field) - 1
        n = self.int32(field) if wide else self.int16(field)
        if n < -1:
            raise self.fail(f"{field} has negative length {n} at byte {self.pos}")
        return n

    def string(self, field: str, flexible: bool, nullable: bool = False) -> str | None:
        n = self._length(field, flexible, wide=False)
        if n < 0:
            if nullable:
                return None
            raise self.fail(f"{field} is null but the schema does not allow it")
        raw = self.take(n, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{field} is not valid UTF-8") from None

    def bytes_(self, field: str, flexible: bool, nullable: bool = False) -> bytes | None:
        n = self._length(field, flexible, wide=True)
        if n < 0:
            if nullable:
                return None
            raise self.fail(f"{field} is null but the schema does not allow it")
        return self.take(n, field)

    def array_length(self, field: str, flexible: bool, min_item_bytes: int) -> int:
        n = self._length(field, flexible, wide=True)
        if n < 0:
            raise self.fail(f"{field} is null but the schema does not allow it")
        # Refuse counts the bytes left cannot hold before looping over them.
        if n * min_item_bytes > self.remaining():
            raise self.fail(
                f"truncated at byte {self.pos}: {field} claims {n} items, "
                f"{self.remaining()} bytes left"
            )
        return n

    def skip_tagged_fields(self, field: str) -> None:
        """A flexible struct's tagged fields: count, then (tag, size, bytes) each; every tag
        is one this decoder does not know, so each is skipped by its size."""
        count = self.uvarint(f"{field} tagged field count")
        if count > self.remaining():
            raise self.fail(
                f"truncated at byte {self.pos}: {field} claims {count} tagged fields, "
                f"{self.remaining()} bytes left"
            )
        for _ in range(count):
            tag = self.uvarint(f"{field} tag")
            size = self.uvarint(f"{field} tag {tag} size")
            self.take(size, f"{field} tag {tag}")

    def end(self) -> None:
        if self.remaining():
            raise self.fail(f"{self.remaining()} unexpected bytes after the last field")
