"""The CLI's pure parts: kcat-style record templates, binary-safe encodings, the -o offset grammar and
timestamps (rafka/cli/data.py), -H headers."""

from __future__ import annotations

import base64
import json

import pytest

from rafka.cli.data import _headers, format_record, parse_offset_spec, parse_timestamp
from rafka.cli.support import UsageError
from rafka.structs import ConsumerRecord

BIN = bytes(range(256))


def rec(key=b"k", value=b"v", headers=()):
    return ConsumerRecord("t", 2, 41, 1_700_000_000_123, 0, key, value, tuple(headers))


def test_template_codes_headers_lengths_and_percent():
    r = rec(headers=[("trace", b"abc"), ("n", None), ("trace", b"d")])
    assert format_record("%t:%p@%o %T %d|%k|%v|%h|%K|%S|100%%\\n", r) == (
        "t:2@41 1700000000123 1700000000123|k|v|trace=abc,n=,trace=d|1|1|100%\n"
    )
    assert format_record("%k/%v %K %S", rec(key=None, value=None)) == "/ -1 -1"
    assert format_record("%x %q\\t", r) == "%x %q\t"  # unknown codes are printed as typed


@pytest.mark.parametrize("encoding", ["hex", "base64"])
def test_binary_keys_values_and_headers_round_trip(encoding):
    r = rec(key=BIN[:40], value=BIN, headers=[("bin", BIN[200:])])
    decode = bytes.fromhex if encoding == "hex" else base64.b64decode
    doc = json.loads(format_record("json", r, encoding))
    assert doc["encoding"] == encoding
    assert decode(doc["key"]) == BIN[:40] and decode(doc["value"]) == BIN
    assert doc["headers"] == [{"key": "bin", "value": format_record("%h", r, encoding).split("=", 1)[1]}]
    assert decode(doc["headers"][0]["value"]) == BIN[200:]
    k, v = format_record("%k %v", r, encoding).split(" ")
    assert decode(k) == BIN[:40] and decode(v) == BIN


def test_text_is_lossless_for_invalid_utf8():
    doc = json.loads(format_record("json", rec(value=b"caf\xc3\xa9 \xff\xfe")))
    assert doc["value"] == "café \\xff\\xfe" and "encoding" not in doc
    assert doc["value"].encode("utf-8").decode("unicode_escape").encode("latin-1")[-2:] == b"\xff\xfe"


@pytest.mark.parametrize(
    "spec,want",
    [
        ("start", ("earliest", None)),
        ("beginning", ("earliest", None)),
        ("end", ("latest", None)),
        ("17", ("absolute", 17)),
        ("-5", ("relative", -5)),
        ("s@1700000000000", ("timestamp", 1_700_000_000_000)),
        ("s@2023-11-14T22:13:20Z", ("timestamp", 1_700_000_000_000)),
        ("s@2023-11-14T22:13:20", ("timestamp", 1_700_000_000_000)),  # no zone: UTC
        ("s@2023-11-14T23:13:20+01:00", ("timestamp", 1_700_000_000_000)),
    ],
)
def test_offset_grammar(spec, want):
    assert parse_offset_spec(spec) == want


@pytest.mark.parametrize("bad", ["soon", "s@yesterday", "1.5", ""])
def test_bad_offsets_are_usage_errors(bad):
    with pytest.raises(UsageError):
        parse_offset_spec(bad)


def test_timestamps_and_headers():
    assert parse_timestamp("0") == 0
    with pytest.raises(UsageError, match="ISO"):
        parse_timestamp("26/11/2026")
    assert _headers(["a=1", "b=x=y", "a=2", "e="]) == [("a", b"1"), ("b", b"x=y"), ("a", b"2"), ("e", b"")]
    for bad in (["nokey"], ["=v"]):
        with pytest.raises(UsageError):
            _headers(bad)
