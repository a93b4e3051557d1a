"""The record hash's encoding, version 1, is a contract: ledgers store these hashes, so a faster
hasher must give the very same bytes. Pinned digests, and a plain reference encoder written
from the docstring's spec."""

import hashlib
import struct

import pytest

from ferry.hashing import record_hasher

CASES = [
    # fields, ignored headers, key, value, headers, digest (hex) as version 1 defines it
    (
        ("key", "value", "headers"),
        (),
        b"k",
        b"v",
        None,
        "fbaf9fc823729b672dc64d94eaa7ef22aea244a440131938d9ca9df40363d9f6",
    ),
    (
        ("key", "value", "headers"),
        (),
        None,
        b"",
        [],
        "3d640fb5f452102dcdc2cd831ca67b4ad8cc3d7169035a25520a269921b1b85b",
    ),
    (
        ("key", "value", "headers"),
        (),
        b"",
        None,
        [("a", b"1"), ("b", None)],
        "990c6dbe78f0418af4db49451abff245e1e5a8a57be9e0f3a0a8aa7e8e0eb2d5",
    ),
    (
        ("key", "value", "headers"),
        ("mm2",),
        b"k",
        b"v",
        [("mm2", b"x"), ("a", b"1")],
        "30186ce841e9661b5b06b590949ff465388b802e8b8829b4b3e5663c4d3b603f",
    ),
    (
        ("key", "value"),
        (),
        b"k",
        b"v" * 5000,
        [("a", b"1")],
        "9d12809814f4a130bac3b3a16a5716b16ed38af1f004814823582dc5747c8ad9",
    ),
    (
        ("value",),
        (),
        b"k",
        b"v",
        None,
        "832f98b94c4fe58dc3832d3cf4c258dd582007633306380557f96046ffa45218",
    ),
]


def _reference(fields, ignored, key, value, headers) -> bytes:
    def blob(data):
        return b"\x00" if data is None else b"\x01" + struct.pack(">Q", len(data)) + data

    out = b"ferry.sha256.v1\x00" + ",".join(fields).encode() + b"\x00"
    if "key" in fields:
        out += blob(key)
    if "value" in fields:
        out += blob(value)
    if "headers" in fields:
        kept = [(n, v) for n, v in headers or [] if n not in ignored]
        out += struct.pack(">I", len(kept))
        for name, val in kept:
            out += struct.pack(">I", len(name.encode())) + name.encode() + blob(val)
    return hashlib.sha256(out).digest()


@pytest.mark.parametrize("fields, ignored, key, value, headers, expected", CASES)
def test_version_1_digests_stay_the_same(fields, ignored, key, value, headers, expected):
    assert record_hasher(fields, ignored)(key, value, headers).hex() == expected
    assert _reference(fields, ignored, key, value, headers).hex() == expected


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 70_000])
def test_every_length_is_encoded_as_the_spec_says(size):
    value = bytes(range(256)) * (size // 256) + bytes(size % 256)
    fields = ("key", "value", "headers")
    assert record_hasher(fields)(b"k", value, None) == _reference(fields, (), b"k", value, None)


def test_null_empty_and_split_fields_never_hash_alike():
    h = record_hasher(("key", "value", "headers"))
    digests = {
        h(None, b"ab", None),
        h(b"", b"ab", None),
        h(b"a", b"b", None),
        h(b"ab", b"", None),
        h(b"ab", None, None),
        h(b"ab", None, [("", None)]),
        h(b"ab", None, [("", b"")]),
    }
    assert len(digests) == 7
