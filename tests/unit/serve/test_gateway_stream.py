"""The v3 streaming body parser (``serve.produce.JsonValueStream``): concatenated JSON values parsed as the
body arrives, in whatever chunks the network cuts it into. Pure: no Ray, no Serve."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serve.errors import MALFORMED, TOO_LARGE, GatewayError
from serve.produce import JsonValueStream

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
SPACE = st.text(alphabet=" \t\r\n", max_size=3)


def feed_all(body: bytes, cuts: list[int], limit: int = 1 << 20) -> list:
    s, out, prev = JsonValueStream(limit), [], 0
    for c in sorted(set(cuts)) + [len(body)]:
        out += s.feed(body[prev:c])
        prev = c
    return out + s.finish()


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(JSON, min_size=1, max_size=8),
    seps=st.lists(SPACE, min_size=9, max_size=9),
    cuts=st.lists(st.integers(0, 400), max_size=8),
)
def test_any_chunking_gives_the_values_in_order(values, seps, cuts):
    # numbers and literals need a separator from what follows; objects, arrays and strings do not
    text = seps[0] + "".join(json.dumps(v, ensure_ascii=False) + (sep or " ") for v, sep in zip(values, seps[1:]))
    body = text.encode()
    assert feed_all(body, [c for c in cuts if c <= len(body)]) == values


def test_values_arrive_as_soon_as_they_are_complete():
    s = JsonValueStream(1000)
    assert s.feed(b'{"a": 1}{"b"') == [{"a": 1}]
    assert s.feed(b": 2}\n 12") == [{"b": 2}]  # 12 may go on in the next chunk: held back
    assert s.feed(b"3 ") == [123]
    assert s.feed('"caf'.encode() + "é".encode()[:1]) == []  # a UTF-8 sequence cut in two
    assert s.feed("é".encode()[1:] + b'"') == ["café"]
    assert s.finish() == [] and s.count == 4


def test_malformed_or_truncated_bodies_are_400():
    for body, where in [(b'{"a": 1} {"b"', 1), (b'{"a": 1} nope {"c": 3}', 1), (b'{"a": }', 0), (b"[1, 2", 0)]:
        s = JsonValueStream(1000)
        got = s.feed(body)
        with pytest.raises(GatewayError) as e:
            s.finish()
        assert (e.value.status, e.value.error_code) == (400, MALFORMED)
        assert f"record {where} is not valid JSON" in e.value.message and len(got) == where
    s = JsonValueStream(1000)
    with pytest.raises(GatewayError) as e:
        s.feed(b'{"a": "\xff"}')
    assert e.value.status == 400 and "UTF-8" in e.value.message
    s = JsonValueStream(1000)
    s.feed('{"a": "'.encode() + "é".encode()[:1])
    with pytest.raises(GatewayError) as e:
        s.finish()
    assert e.value.status == 400 and "UTF-8" in e.value.message


def test_only_the_unparsed_part_is_bounded():
    s = JsonValueStream(64)
    record = b'{"value": "' + b"x" * 40 + b'"}\n'
    for _ in range(100):  # 5 KB in all through a 64-byte limit: each record completes in time
        assert s.feed(record) == [{"value": "x" * 40}]
    with pytest.raises(GatewayError) as e:
        s.feed(b'{"value": "' + b"y" * 80)
    assert (e.value.status, e.value.error_code, e.value.kafka_error_code) == (413, TOO_LARGE, 10)
    assert "record 100 is still incomplete" in e.value.message


DEEP = b"[" * 5000 + b"]" * 5000


def test_json_nested_thousands_deep_is_400_not_a_recursion_error():
    """Python's JSON parser recurses per level: 5000 levels raised RecursionError (a 500, and a cut
    connection in the streaming form). Whole bodies, streams (values before the deep one still come out,
    the next call raises) and re-encoding a deep value all answer 400."""
    from serve.produce import load_json, parse_v2, parse_v3

    for exact in (True, False):
        with pytest.raises(GatewayError) as info:
            load_json(b'{"records": [{"value": ' + DEEP + b"}]}", exact=exact)
        assert info.value.status == 400 and info.value.error_code == MALFORMED
    with pytest.raises(GatewayError, match="nested too deeply"):
        parse_v2(b'{"records": [{"value": ' + DEEP + b"}]}", "json")
    s = JsonValueStream(1 << 20)
    assert s.feed(b'{"a": 1}\n' + DEEP[:3000]) == [{"a": 1}]  # the good value first, the error held
    assert s.failed is not None and s.failed.status == 400 and "record 1" in s.failed.message
    with pytest.raises(GatewayError, match="record 1 is nested too deeply"):
        s.feed(DEEP[3000:])
    s = JsonValueStream(1 << 20)
    with pytest.raises(GatewayError, match="record 0 is nested too deeply"):
        s.feed(DEEP)
    s = JsonValueStream(1 << 20)
    assert s.feed(b'{"a": 1} ') == [{"a": 1}]
    assert s.feed(DEEP[:100]) == []  # incomplete so far: nothing to say yet
    with pytest.raises(GatewayError, match="nested too deeply"):
        s.feed(DEEP[100:]) + s.finish()
    deep_value = {"type": "JSON", "data": None}
    for _ in range(600):  # parses (below the recursion limit), but orjson re-encodes only 255 levels
        deep_value["data"] = [deep_value["data"]]
    ((rec, _, _),) = parse_v3([{"value": deep_value}])
    assert rec.value.startswith(b"[[[")
