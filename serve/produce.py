"""Produce bodies in, delivery reports out: Confluent REST Proxy v2/v3 record shapes and rafka's msgpack.

    v2  {"records": [{"key": ..., "value": ..., "partition": 0}]}     binary (base64) or json embedded format
    v3  {"partition_id": 0, "key": {"type": "BINARY", "data": "..."}, "value": {...}, "headers": [...],
         "timestamp": "2026-01-01T00:00:00Z"}                          one record, or several concatenated
    msgpack  {"records": [{"key": b"..", "value": b"..", "partition": 0, "headers": [[name, b".."]]}]}

Parsing never raises anything but ``GatewayError`` (400 malformed body, 422 bad record). ``ProduceService``
owns the replica's long-lived ``rafka.Producer`` and turns one request into one ``send_batch`` (one append per
partition) plus one wait; it runs on a worker thread so the event loop keeps serving other requests.
"""

from __future__ import annotations

import binascii
import codecs
import datetime as dt
import json
from typing import Any, NamedTuple

import orjson

from protocol.errors import KafkaError
from rafka.producer.accumulator import FutureRecordMetadata, wait_all
from rafka.producer.producer import Producer
from rafka.structs import RecordMetadata
from serve.errors import BAD_RECORD, MALFORMED, PARTITION_NOT_FOUND, TOO_LARGE, TOPIC_NOT_FOUND, GatewayError

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
V2_JSON = "application/vnd.kafka.v2+json"
MSGPACK = "application/vnd.rafka.msgpack"

# Gateway producer defaults: one request carries many records, so bigger batches than a client's 16 KB
# (a Ray call costs ~1 ms whatever its size). Any of Kafka's producer configs can override them.
PRODUCER_DEFAULTS = {"linger_ms": 5, "batch_size": 262144, "buffer_memory": 134217728, "max_block_ms": 30000}


class Record(NamedTuple):
    key: bytes | None
    value: bytes | None
    partition: int | None = None
    headers: tuple = ()
    timestamp_ms: int | None = None


def _bad(i: int, what: str) -> GatewayError:
    return GatewayError(422, BAD_RECORD, f"record {i}: {what}", 87)


def _b64(data: Any, i: int, field: str) -> bytes | None:
    if data is None:
        return None
    if not isinstance(data, str):
        raise _bad(i, f"{field} must be a base64 string or null, not {type(data).__name__}")
    try:
        return binascii.a2b_base64(data, strict_mode=True)
    except (binascii.Error, ValueError):
        raise _bad(i, f"{field} is not valid base64") from None


def _too_deep(what: str) -> GatewayError:
    return GatewayError(
        400, MALFORMED, f"{what} is nested too deeply (JSON arrays/objects nest at most a few hundred levels here)"
    )


def _json_bytes(data: Any) -> bytes | None:
    if data is None:
        return None
    try:
        return orjson.dumps(data)
    except TypeError:  # an integer past 64 bits or nesting past orjson's 255 levels: the standard library
        try:
            return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
        except RecursionError:
            raise _too_deep("a JSON key or value") from None


def _raw(data: Any, i: int, field: str) -> bytes | None:
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, str):
        return data.encode()
    raise _bad(i, f"{field} must be bytes, str or nil, not {type(data).__name__}")


def _partition(p: Any, i: int) -> int | None:
    if p is None:
        return None
    if type(p) is not int or p < 0:
        raise _bad(i, f"partition must be a non-negative integer, not {p!r}")
    return p


def _records_list(body: Any) -> list:
    if not isinstance(body, dict) or not isinstance(body.get("records"), list):
        raise GatewayError(400, MALFORMED, 'the body must be an object with a "records" array')
    if not body["records"]:
        raise GatewayError(400, MALFORMED, '"records" is empty')
    return body["records"]


def load_json(raw: bytes, exact: bool = True) -> Any:
    """A JSON body. ``exact=False`` parses with orjson (several times faster), which reads integers past 64
    bits as floats: only for bodies whose numbers are partitions and offsets (the binary embedded format);
    user JSON (the json embedded format, v3 records) keeps the standard library's exact integers."""
    try:
        return json.loads(raw) if exact else orjson.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        if "depth limit" in str(exc):  # orjson's own limit (1024 levels)
            raise _too_deep("the body") from None
        raise GatewayError(400, MALFORMED, f"the body is not valid JSON: {exc}") from None
    except RecursionError:  # the standard library's parser recurses per level: thousands deep end here
        raise _too_deep("the body") from None


def load_msgpack(raw: bytes) -> Any:
    import msgpack

    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (ValueError, msgpack.exceptions.ExtraData, msgpack.exceptions.UnpackException) as exc:
        raise GatewayError(400, MALFORMED, f"the body is not valid msgpack: {exc}") from None


_record = tuple.__new__  # Record(...) without NamedTuple's Python-level __new__ (a hot loop)


def parse_v2(raw: bytes, fmt: str) -> list[Record]:
    """A v2 produce body (``fmt``: binary, json or msgpack) as records."""
    body = load_msgpack(raw) if fmt == "msgpack" else load_json(raw, exact=fmt == "json")
    out: list[Record] = []
    append = out.append
    for i, r in enumerate(_records_list(body)):
        if type(r) is not dict:
            raise _bad(i, "each record must be an object")
        k, v, p = r.get("key"), r.get("value"), r.get("partition")
        if k is None and v is None and "value" not in r and "key" not in r:
            raise _bad(i, 'a record needs a "value" (or a "key")')
        if p is not None and (type(p) is not int or p < 0):
            raise _bad(i, f"partition must be a non-negative integer, not {p!r}")
        if fmt == "msgpack":
            if type(k) is not bytes and k is not None:
                k = _raw(k, i, "key")
            if type(v) is not bytes and v is not None:
                v = _raw(v, i, "value")
            hdrs = r.get("headers")
            if hdrs:
                if not isinstance(hdrs, (list, tuple)) or not all(
                    isinstance(h, (list, tuple)) and len(h) == 2 and isinstance(h[0], str) for h in hdrs
                ):
                    raise _bad(i, "headers must be a list of [name, value] pairs")
                hdrs = tuple((h[0], _raw(h[1], i, "header value")) for h in hdrs)
            else:
                hdrs = ()
            append(_record(Record, (k, v, p, hdrs, None)))
        elif fmt == "binary":
            append(_record(Record, (_b64(k, i, "key"), _b64(v, i, "value"), p, (), None)))
        else:
            append(_record(Record, (_json_bytes(k), _json_bytes(v), p, (), None)))
    return out


# -- v3 -------------------------------------------------------------------------------------------------
class JsonValueStream:
    """Concatenated JSON values (Confluent's v3 streaming body) parsed as the body arrives.

    ``feed(chunk)`` returns the values completed so far (a UTF-8 sequence split across chunks is fine);
    ``finish()`` returns the last ones once the body has ended and raises 400 for a trailing partial or
    malformed value. Whitespace between values is allowed. What waits unparsed is bounded by ``limit``
    bytes (413 past it), not the whole stream, so a long-lived stream can carry any number of records.
    A malformed value mid-stream cannot be skipped (JSON has no resync point): parsing stops there and
    ``finish`` reports it. A value nested too deeply for the parser (thousands of levels) stops it too:
    ``failed`` holds that 400, raised by ``feed``/``finish`` once they have no earlier values to return.
    """

    _WS = " \t\r\n"

    def __init__(self, limit: int):
        self._dec = codecs.getincrementaldecoder("utf-8")()
        self._json = json.JSONDecoder()
        self._buf = ""
        self._limit = limit
        self.failed: GatewayError | None = None  # a value nested too deeply (see the class docstring)
        self.count = 0  # values returned so far

    def feed(self, chunk: bytes) -> list:
        if self.failed is not None:
            raise self.failed
        try:
            self._buf += self._dec.decode(chunk)
        except UnicodeDecodeError:
            raise GatewayError(400, MALFORMED, f"the body is not UTF-8 (after record {self.count - 1})") from None
        out = self._take(final=False)
        if self.failed is not None and not out:
            raise self.failed
        if len(self._buf) > self._limit:
            raise GatewayError(
                413,
                TOO_LARGE,
                f"record {self.count} is still incomplete after {len(self._buf)} "
                f"bytes, more than the gateway's limit ({self._limit})",
                10,
            )
        return out

    def finish(self) -> list:
        if self.failed is not None:
            raise self.failed
        try:
            self._buf += self._dec.decode(b"", final=True)
        except UnicodeDecodeError:
            raise GatewayError(400, MALFORMED, "the body ends inside a UTF-8 sequence") from None
        out = self._take(final=True)
        if self.failed is not None:
            if out:
                return out
            raise self.failed
        if self._buf.strip(self._WS):
            try:
                self._json.raw_decode(self._buf.lstrip(self._WS))
            except ValueError as exc:
                raise GatewayError(400, MALFORMED, f"record {self.count} is not valid JSON: {exc}") from None
        return out

    def _take(self, final: bool) -> list:
        buf, pos, n, out = self._buf, 0, len(self._buf), []
        while True:
            while pos < n and buf[pos] in self._WS:
                pos += 1
            if pos >= n:
                break
            try:
                value, end = self._json.raw_decode(buf, pos)
            except ValueError:
                break  # incomplete (more may come) or malformed (finish() says which)
            except RecursionError:  # cannot be parsed whatever follows: fail at the next feed/finish
                self.failed = _too_deep(f"record {self.count + len(out)}")
                break
            if end == n and not final and not isinstance(value, (dict, list, str)):
                break  # a number or literal at the end of what arrived may continue in the next chunk
            out.append(value)
            pos = end
        self._buf = buf[pos:]
        self.count += len(out)
        return out


def _v3_data(d: Any, i: int, field: str) -> tuple[bytes | None, str | None]:
    if d is None:
        return None, None
    if not isinstance(d, dict) or "data" not in d:
        raise _bad(i, f'{field} must be {{"type": "BINARY"|"JSON"|"STRING", "data": ...}} or null')
    typ = str(d.get("type", "JSON")).upper()
    data = d["data"]
    if typ == "BINARY":
        return _b64(data, i, field), typ
    if typ == "JSON":
        return _json_bytes(data), typ
    if typ == "STRING":
        if not isinstance(data, str) and data is not None:
            raise _bad(i, f"{field} of type STRING needs a string, not {type(data).__name__}")
        return None if data is None else data.encode(), typ
    raise _bad(i, f"{field} type must be BINARY, JSON or STRING, not {d.get('type')!r}")


def _v3_timestamp(ts: Any, i: int) -> int | None:
    if ts is None:
        return None
    if type(ts) is int and ts >= 0:
        return ts
    if isinstance(ts, str):
        try:
            parsed = dt.datetime.fromisoformat(ts)
        except ValueError:
            raise _bad(i, f"timestamp {ts!r} is not an ISO-8601 date-time") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.timezone.utc)
        return int(parsed.timestamp() * 1000)
    raise _bad(i, "timestamp must be an ISO-8601 string or epoch milliseconds")


def parse_v3(values: list, first: int = 0) -> list[tuple[Record, str | None, str | None]]:
    """v3 records with the key and value types (for the reports); ``first``: the index of ``values[0]`` in
    the request, for the error messages."""
    out = []
    for i, r in enumerate(values, first):
        if not isinstance(r, dict):
            raise _bad(i, "each record must be an object")
        key, ktype = _v3_data(r.get("key"), i, "key")
        value, vtype = _v3_data(r.get("value"), i, "value")
        hdrs = r.get("headers") or []
        if not isinstance(hdrs, list) or not all(isinstance(h, dict) and isinstance(h.get("name"), str) for h in hdrs):
            raise _bad(i, 'headers must be a list of {"name": str, "value": base64}')
        headers = tuple((h["name"], _b64(h.get("value"), i, "header value")) for h in hdrs)
        out.append(
            (
                Record(key, value, _partition(r.get("partition_id"), i), headers, _v3_timestamp(r.get("timestamp"), i)),
                ktype,
                vtype,
            )
        )
    return out


def iso_ms(ms: int) -> str:
    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


# -- producing ------------------------------------------------------------------------------------------
class ProduceService:
    """The replica's one long-lived idempotent producer, and the request -> records -> reports path."""

    def __init__(self, cluster: str, acks: str | int, config: dict | None = None):
        self.producer = Producer(cluster, **{**PRODUCER_DEFAULTS, "acks": acks, **(config or {})})
        cfg = self.producer.config
        self._wait_s = (cfg.delivery_timeout_ms + cfg.request_timeout_ms) / 1000.0
        self._max_record = cfg.max_request_size

    def require_topic(self, topic: str):
        """The topic's metadata, or 404 UNKNOWN_TOPIC_OR_PARTITION."""
        tm = self.producer.metadata.topic(topic)
        if tm is None:
            raise GatewayError(404, TOPIC_NOT_FOUND, f"topic {topic!r} does not exist", 3)
        return tm

    def check(self, topic: str, records: list[Record], partition: int | None = None) -> None:
        """Raise the ``GatewayError`` a request deserves before anything is sent: unknown topic (404), a
        partition the topic lacks (404), a record larger than max.request.size (413)."""
        parts = self.require_topic(topic).partitions
        if partition is not None and partition not in parts:
            raise GatewayError(
                404,
                PARTITION_NOT_FOUND,
                f"partition {partition} does not exist in topic {topic!r} (it has {len(parts)})",
                3,
            )
        limit = self._max_record - 85
        for i, (key, value, p, headers, _) in enumerate(records):
            if p is not None and partition is None and p not in parts:
                raise GatewayError(
                    404,
                    PARTITION_NOT_FOUND,
                    f"record {i}: partition {p} does not exist in topic {topic!r} (it has {len(parts)})",
                    3,
                )
            size = (len(key) if key else 0) + (len(value) if value else 0)
            if headers:
                size += sum(len(k) + len(v or b"") for k, v in headers)
            if size > limit:
                raise GatewayError(
                    413,
                    TOO_LARGE,
                    f"record {i} is {size} bytes, larger than the gateway's max.request.size ({self._max_record})",
                    10,
                )

    def produce(
        self, topic: str, records: list[Record], partition: int | None = None, offsets_only: bool = False
    ) -> list[RecordMetadata | tuple[int, int] | KafkaError]:
        """Send every record (to ``partition`` when the path names one) and wait for all of them; returns
        each record's metadata (``(partition, offset)`` with ``offsets_only``) or its error in order. Checks
        everything first, so a request that cannot succeed writes nothing."""
        self.check(topic, records, partition)
        return wait_all(self.producer.send_batch(topic, records, partition), self._wait_s, offsets_only)

    def send_each(self, topic: str, records: list[Record]) -> list[FutureRecordMetadata | Exception]:
        """For streams, where records already answered cannot be taken back: each record is checked on its
        own, a bad one gets its error in its place and the others are sent. Returns futures and errors."""
        try:
            self.check(topic, records)
            return list(self.producer.send_batch(topic, records))
        except (GatewayError, KafkaError, ValueError, TypeError):
            out: list[FutureRecordMetadata | Exception] = []
            for r in records:
                try:
                    self.check(topic, [r])
                    out += self.producer.send_batch(topic, [r])
                except (GatewayError, KafkaError, ValueError, TypeError) as exc:
                    out.append(exc)
            return out

    def wait(self, sent: list[FutureRecordMetadata | Exception]) -> list[RecordMetadata | Exception]:
        """``send_each``'s results once every record is acknowledged or failed (errors stay in place)."""
        futures = [x for x in sent if not isinstance(x, Exception)]
        done = iter(wait_all(futures, self._wait_s))
        return [x if isinstance(x, Exception) else next(done) for x in sent]

    def close(self) -> None:
        self.producer.close(timeout=10)
