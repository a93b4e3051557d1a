"""The record fingerprint Ferry matches on: SHA-256 over an unambiguous encoding.

Encoding, version 1 (kept stable: ledgers store these hashes):

    b"ferry.sha256.v1" 0x00 <fields joined by ","> 0x00
    then for each chosen field, in the fixed order key, value, headers:
      key / value:  0x00 if null, else 0x01 + 8-byte big-endian length + bytes
      headers:      4-byte big-endian count of kept headers, then for each header in record
                    order: 4-byte name length + UTF-8 name + (0x00 | 0x01 + 8-byte length +
                    bytes) for its value

Length prefixes make every (key, value, headers) split distinct, so a null key, an empty key
and a key that swallowed part of the value never hash alike. Headers named in
`ignore_headers` (a replicator's own, e.g. MirrorMaker's or Replicator's provenance headers)
are dropped before hashing.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence

HASH_FIELDS = ("key", "value", "headers")

_NULL = b"\x00"
_PRESENT = b"\x01"


def validate_fields(fields: Sequence[str]) -> tuple[str, ...]:
    """Return the fields in canonical order; reject unknown or empty choices."""
    unknown = [f for f in fields if f not in HASH_FIELDS]
    if unknown or not fields:
        raise ValueError(f"hash fields must be a non-empty subset of {HASH_FIELDS}, got {fields}")
    return tuple(f for f in HASH_FIELDS if f in fields)


def _blob(data: bytes | None) -> bytes:
    if data is None:
        return _NULL
    return _PRESENT + struct.pack(">Q", len(data)) + data


def record_hasher(fields: Sequence[str], ignore_headers: Iterable[str] = ()):
    """Return `h(key, value, headers) -> bytes` computing the documented SHA-256."""
    chosen = validate_fields(fields)
    ignored = frozenset(ignore_headers)
    prefix = b"ferry.sha256.v1\x00" + ",".join(chosen).encode() + b"\x00"
    want_key, want_value, want_headers = (f in chosen for f in HASH_FIELDS)

    def digest(key: bytes | None, value: bytes | None, headers) -> bytes:  # noqa: ANN001
        h = hashlib.sha256(prefix)
        if want_key:
            h.update(_blob(key))
        if want_value:
            h.update(_blob(value))
        if want_headers:
            kept = [(n, v) for n, v in (headers or ()) if n not in ignored]
            h.update(struct.pack(">I", len(kept)))
            for name, val in kept:
                raw = name.encode() if isinstance(name, str) else bytes(name)
                h.update(struct.pack(">I", len(raw)) + raw + _blob(val))
        return h.digest()

    return digest
