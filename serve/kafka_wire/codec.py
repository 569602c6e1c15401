"""Frames, headers and bodies of the Kafka protocol, through kio (pure, no I/O).

Grammar (big-endian)::

    frame           = size:int32 payload[size]
    request         = request_header body                (header v1, or v2 for flexible versions)
    request_header  = api_key:int16 api_version:int16 correlation_id:int32 client_id:nullable_string16
                      [tagged_fields]                    (v2 only; client_id stays an int16 string)
    response        = response_header body
    response_header = correlation_id:int32 [tagged_fields]   (v1 for flexible versions, but ApiVersions
                                                              answers with header v0 at every version)

kio picks the header version per message class (``__header_schema__``); this module only frames,
ignores bytes after a parsed request (as Kafka does), and turns decode failures into :class:`RequestError`.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import struct
import typing

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from serve.kafka_wire import prescan

SIZE = struct.Struct(">i")
HEADER_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
CLIENT_ID_SIZE = struct.Struct(">h")  # the client_id's length, -1 for null

log = logging.getLogger("rafka.kafka_wire")


class RequestError(Exception):
    """A request that cannot be decoded (truncated, garbage after it, bad strings): the connection is
    closed, as Kafka's SocketServer does with an InvalidRequestException."""


def header_prefix(payload: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the part of every request header readable before the
    version is known to be served."""
    if len(payload) < HEADER_PREFIX.size:
        raise RequestError(f"request of {len(payload)} bytes is shorter than a request header")
    return HEADER_PREFIX.unpack_from(payload, 0)


def header_client_id(payload: bytes | memoryview) -> str | None:
    """The request header's client_id (an int16-length string after the prefix, in every header version),
    read without knowing whether the version is served; None if absent, null or cut short."""
    end = HEADER_PREFIX.size + CLIENT_ID_SIZE.size
    if len(payload) < end:
        return None
    (n,) = CLIENT_ID_SIZE.unpack_from(payload, HEADER_PREFIX.size)
    if n < 0 or len(payload) < end + n:
        return None
    return bytes(payload[end : end + n]).decode("utf-8", "replace")


def decode_request(payload: bytes | memoryview, api_key: int, api_version: int):
    """(header, request) of a served (api_key, api_version); RequestError if the bytes do not parse.
    Bytes left after the request are ignored, as Kafka's RequestContext.parseRequest does: librdkafka 2.16
    sends an all-topics Metadata v12 with 3 zero bytes after it (measured), and Kafka brokers answer it."""
    try:
        cls = load_request_schema(api_key, api_version)
        prescan.check(payload, cls)  # every length fits the frame before kio's reader allocates for it
        header, n = entity_reader(cls.__header_schema__)(payload, 0)
        request, m = entity_reader(cls)(payload, n)
    except (UnknownAPIKey, UnknownEntity) as e:
        raise RequestError(f"api key {api_key} version {api_version}: {e}") from None
    except (SerialError, ValueError, UnicodeDecodeError, IndexError, OverflowError) as e:  # incl. prescan.Malformed
        raise RequestError(f"api key {api_key} v{api_version}: malformed request: {type(e).__name__}: {e}") from None
    except KeyError as e:  # kio's reader on a tagged field it has no schema for (Kafka would skip it)
        raise RequestError(
            f"api key {api_key} v{api_version}: malformed request: {e.args[0] if e.args else e}"
        ) from None
    bad = _null_field(request)
    if bad is not None:  # Kafka's parser: "non-nullable field ... was serialized as null"
        raise RequestError(f"api key {api_key} v{api_version}: malformed request: non-nullable field {bad} is null")
    if n + m != len(payload):
        log.debug("api key %d v%d: %d bytes after the request ignored", api_key, api_version, len(payload) - n - m)
    return header, request


def encode_response(correlation_id: int, response) -> bytes:
    """The size-prefixed frame of ``response`` (a kio response entity) answering ``correlation_id``."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    header_cls = type(response).__header_schema__
    entity_writer(header_cls)(buf, header_cls(correlation_id=correlation_id))
    entity_writer(type(response))(buf, response)
    out = buf.getbuffer()
    SIZE.pack_into(out, 0, len(out) - 4)
    del out
    return buf.getvalue()


def encode_request(correlation_id: int, request, client_id: str | None = "rafka") -> bytes:
    """A size-prefixed request frame (tests and tools: the listener itself only decodes requests)."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    header_cls = type(request).__header_schema__
    header = header_cls(
        request_api_key=request.__api_key__,
        request_api_version=request.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    entity_writer(header_cls)(buf, header)
    entity_writer(type(request))(buf, request)
    out = buf.getbuffer()
    SIZE.pack_into(out, 0, len(out) - 4)
    del out
    return buf.getvalue()


def decode_response(payload: bytes, response_cls):
    """(correlation_id, response) of a response payload (without its size prefix); tests use it."""
    header, n = entity_reader(response_cls.__header_schema__)(payload, 0)
    response, m = entity_reader(response_cls)(payload, n)
    if n + m != len(payload):
        raise RequestError(f"{len(payload) - n - m} bytes after the response")
    return header.correlation_id, response


# entity class -> its fields as (name, nullable, entity type of the value or of the tuple's items, or None)
_FIELD_PLAN: dict[type, tuple[tuple[str, bool, type | None], ...]] = {}


def _plan(cls: type) -> tuple[tuple[str, bool, type | None], ...]:
    plan = _FIELD_PLAN.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            hint = hints.get(f.name)
            nullable = type(None) in typing.get_args(hint)
            _kafka_type, _is_array, entity = prescan.field_plan(f, hint)  # X | None and tuple[X, ...] unwrapped
            out.append((f.name, nullable, entity))
        plan = _FIELD_PLAN[cls] = tuple(out)
    return plan


def _null_field(entity, path: str = "") -> str | None:
    """The dotted name of the first field that kio decoded as null although its schema does not allow null
    (kio reads a null array into any array field), or None."""
    for name, nullable, sub in _plan(type(entity)):
        value = getattr(entity, name)
        if value is None:
            if not nullable:
                return path + name
            continue
        if sub is not None:
            for item in value if isinstance(value, tuple) else (value,):
                bad = _null_field(item, f"{path}{name}.")
                if bad is not None:
                    return bad
    return None
