"""A bounds check of a request's bytes against its schema, before kio parses them (pure, no I/O).

Why: kio's native (Rust) reader sizes each array from the count on the wire before reading it; a frame
claiming ~4 billion entries made it ask for 157 GB and abort the whole process (found by
tests/unit/test_wire_fuzz.py). Kafka's own parser checks every length against the bytes left; this walk
does the same with kio's schema classes (field order, ``kafka_type`` metadata, flexible or not, tagged
fields), without building values: every array count, string, bytes and records length, and tagged-field
size must fit in what is left of the frame, or the request is malformed. Cost: a few microseconds per
small request; a Produce's records are skipped by their length, not read.

Grammar (Kafka's): non-flexible: string = int16 len (-1 null), bytes/records = int32 len, array = int32
count (-1 null); flexible: compact forms, uvarint (len + 1, 0 = null), each struct ends with tagged fields
(uvarint count, then per field uvarint tag, uvarint size, size bytes). The request header's client_id is
an int16 string even in header v2.
"""

from __future__ import annotations

import dataclasses
import typing

from kio.static.constants import EntityType


class Malformed(ValueError):
    pass


FIXED = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "timedelta_i32": 4, "float64": 8}
FIXED.update({"int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16})
LENGTHED = {"string", "bytes", "records"}

# class -> (flexible, header, untagged fields, {tag: field}); a field = (kafka_type | None, is_array, entity | None)
_PLANS: dict[type, tuple] = {}


def field_plan(f: dataclasses.Field, hint) -> tuple:
    args = typing.get_args(hint)
    if type(None) in args:  # X | None
        hint = next(a for a in args if a is not type(None))
    is_array = typing.get_origin(hint) is tuple
    elem = typing.get_args(hint)[0] if is_array else hint
    entity = elem if dataclasses.is_dataclass(elem) else None
    return f.metadata.get("kafka_type"), is_array, entity


def _plan(cls: type) -> tuple:
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        untagged, tagged = [], {}
        for f in dataclasses.fields(cls):
            fp = field_plan(f, hints[f.name])
            if "tag" in f.metadata:
                tagged[f.metadata["tag"]] = fp
            else:
                untagged.append(fp)
        header = getattr(cls, "__type__", None) == EntityType.header
        plan = _PLANS[cls] = (bool(getattr(cls, "__flexible__", False)), header, tuple(untagged), tagged)
    return plan


def _uvarint(buf, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise Malformed("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise Malformed("varint longer than 5 bytes")


def _int(buf, pos: int, end: int, size: int) -> tuple[int, int]:
    if pos + size > end:
        raise Malformed("truncated integer")
    return int.from_bytes(buf[pos : pos + size], "big", signed=True), pos + size


def _length(buf, pos: int, end: int, compact: bool, legacy_size: int) -> tuple[int, int]:
    """(length or -1 for null, new pos) of a string/bytes/array prefix."""
    if compact:
        n, pos = _uvarint(buf, pos, end)
        return n - 1, pos
    n, pos = _int(buf, pos, end, legacy_size)
    if n < -1:
        raise Malformed(f"negative length {n}")
    return n, pos


def _one(buf, pos: int, end: int, kafka_type, entity, flexible: bool, header: bool) -> int:
    if entity is not None:
        return _entity(entity, buf, pos, end)
    size = FIXED.get(kafka_type)
    if size is not None:
        if pos + size > end:
            raise Malformed(f"truncated {kafka_type}")
        return pos + size
    if kafka_type in LENGTHED:
        compact = flexible and not header
        n, pos = _length(buf, pos, end, compact, 2 if kafka_type == "string" else 4)
        if n > end - pos:
            raise Malformed(f"{kafka_type} of {n} bytes with {end - pos} left")
        return pos + max(n, 0)
    raise Malformed(f"unknown field type {kafka_type!r}")


def _field(buf, pos: int, end: int, fp: tuple, flexible: bool, header: bool) -> int:
    kafka_type, is_array, entity = fp
    if not is_array:
        return _one(buf, pos, end, kafka_type, entity, flexible, header)
    n, pos = _length(buf, pos, end, flexible, 4)
    if n > end - pos:  # every element takes at least one byte
        raise Malformed(f"array of {n} entries with {end - pos} bytes left")
    for _ in range(max(n, 0)):
        pos = _one(buf, pos, end, kafka_type, entity, flexible, header)
    return pos


def _entity(cls: type, buf, pos: int, end: int) -> int:
    flexible, header, untagged, tagged = _plan(cls)
    for fp in untagged:
        pos = _field(buf, pos, end, fp, flexible, header)
    if flexible:
        count, pos = _uvarint(buf, pos, end)
        if count > end - pos:
            raise Malformed(f"{count} tagged fields with {end - pos} bytes left")
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            if size > end - pos:
                raise Malformed(f"tagged field {tag} of {size} bytes with {end - pos} left")
            fp = tagged.get(tag)
            if fp is not None and _field(buf, pos, pos + size, fp, flexible, header) > pos + size:
                raise Malformed(f"tagged field {tag} overruns its size")
            pos += size
    return pos


def check(buf, request_cls: type) -> None:
    """Raise :class:`Malformed` unless ``buf`` (a request payload: header then body) fits its schema's
    lengths; bytes after the body are allowed (Kafka ignores them)."""
    end = len(buf)
    pos = _entity(request_cls.__header_schema__, buf, 0, end)
    _entity(request_cls, buf, pos, end)
