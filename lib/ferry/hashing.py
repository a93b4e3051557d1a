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


# Length prefixes of the lengths most values have, made once: a hasher runs once a record read,
# and building the prefix per record cost as much as the SHA-256 itself.
_SHORT = 4096
_PRESENT_LENGTHS = tuple(_PRESENT + struct.pack(">Q", n) for n in range(_SHORT))
_NO_HEADERS = struct.pack(">I", 0)


def _blob(data: bytes | None) -> bytes:
    if data is None:
        return _NULL
    n = len(data)
    return (_PRESENT_LENGTHS[n] if n < _SHORT else _PRESENT + struct.pack(">Q", n)) + data


def _headers_blob(headers, ignored: frozenset[str]) -> bytes:  # noqa: ANN001
    kept = [(n, v) for n, v in headers if n not in ignored]
    out = struct.pack(">I", len(kept))
    for name, val in kept:
        raw = name.encode() if isinstance(name, str) else bytes(name)
        out += struct.pack(">I", len(raw)) + raw + _blob(val)
    return out


def record_hasher(fields: Sequence[str], ignore_headers: Iterable[str] = ()):
    """Return `h(key, value, headers) -> bytes` computing the documented SHA-256."""
    chosen = validate_fields(fields)
    ignored = frozenset(ignore_headers)
    prefix = b"ferry.sha256.v1\x00" + ",".join(chosen).encode() + b"\x00"
    want_key, want_value, want_headers = (f in chosen for f in HASH_FIELDS)
    sha256 = hashlib.sha256

    def digest(key: bytes | None, value: bytes | None, headers) -> bytes:  # noqa: ANN001
        # One buffer, one hash call: most records are small and have no headers.
        data = prefix
        if want_key:
            data += _blob(key)
        if want_value:
            data += _blob(value)
        if want_headers:
            data += _headers_blob(headers, ignored) if headers else _NO_HEADERS
        return sha256(data).digest()

    return digest


FINGERPRINT_BYTES = 8


def fingerprints(hashes):  # noqa: ANN001, ANN201 - pyarrow/numpy imported lazily
    """Each record's 64-bit fingerprint, what matching's context holds: the first 8 bytes of
    its SHA-256 as a big-endian signed integer (the hash is uniform already: its prefix is as
    good a 64-bit hash as any). `hashes`: an Arrow binary array (or chunked array) of the
    SHA-256s or of their first 8 bytes; a numpy int64 array back."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(hashes, pa.ChunkedArray):
        hashes = hashes.combine_chunks() if hashes.num_chunks else pa.array([], pa.binary())
    if hashes.null_count:
        raise ValueError("a record without a SHA-256 has no fingerprint")
    prefixes = pc.binary_slice(hashes, 0, FINGERPRINT_BYTES)
    # a fresh array: its values are contiguous, FINGERPRINT_BYTES each, from its first byte
    data = prefixes.buffers()[2]
    if data is None or prefixes.offset or data.size < len(prefixes) * FINGERPRINT_BYTES:
        if len(prefixes) == 0:
            return np.empty(0, np.int64)
        raise ValueError(f"a SHA-256 shorter than {FINGERPRINT_BYTES} bytes")
    return np.frombuffer(data, dtype=">i8", count=len(prefixes)).astype(np.int64)
