"""The client data channel's frames (actors/client_channel.py serves them, rafka/channel.py sends them).

Big-endian: a hello is ``u32 length`` + msgpack ``{"token": bytes}``; a request is ``u32 length, u32
correlation id, u8 api, u32 meta length`` + a msgpack map of the request's fields + (produce) the record
batches; an answer is ``u32 correlation id, u32 meta length, u32 records length`` + the msgpack map of the
answer but ``records`` + the records' bytes.
"""

from __future__ import annotations

import struct

import msgpack

from protocol.messages import FetchRequest, ProduceRequest

MAX_FRAME_BYTES = 104857600  # socket.request.max.bytes
MAX_HELLO_BYTES = 4096
API_PRODUCE, API_FETCH = 0, 1
U32 = struct.Struct(">I")
REQUEST_HEAD = struct.Struct(">IIBI")  # length, correlation id, api, meta length
ANSWER_HEAD = struct.Struct(">III")  # correlation id, meta length, records length

PRODUCE_FIELDS = {"acks": int, "timeout_ms": int, "current_leader_epoch": int, "transactional_id": (str, type(None))}
FETCH_FIELDS = {
    "fetch_offset": int,
    "max_bytes": int,
    "max_wait_ms": int,
    "min_bytes": int,
    "current_leader_epoch": int,
    "isolation_level": int,
}


class BadFrame(ValueError):
    """A frame that is not a valid hello or request."""


def _fields(meta: bytes, spec: dict, required: str | None) -> dict:
    try:
        d = msgpack.unpackb(meta, raw=False, strict_map_key=True)
    except Exception as exc:  # noqa: BLE001 - any msgpack failure is a bad frame
        raise BadFrame(f"request fields are not msgpack: {type(exc).__name__}") from None
    if not isinstance(d, dict) or set(d) - set(spec) or (required is not None and required not in d):
        raise BadFrame(f"request fields must be a map of {sorted(spec)}")
    for k, v in d.items():
        kind = spec[k]
        if kind is int:
            if type(v) is not int or not -(1 << 63) <= v < (1 << 63):
                raise BadFrame(f"{k} must be an int64")
        elif not isinstance(v, kind) or type(v) is bool:
            raise BadFrame(f"{k} has the wrong type")
    return d


def decode_produce(meta: bytes, records: bytes, order: tuple[str, int]) -> ProduceRequest:
    """A client's ProduceRequest (origin is always ``client``); BadFrame unless the fields are known and typed."""
    return ProduceRequest(records, **_fields(meta, PRODUCE_FIELDS, None), order=order)


def decode_fetch(meta: bytes) -> FetchRequest:
    """A consumer's FetchRequest (replica id is always -1: a client never fetches as a follower)."""
    return FetchRequest(**_fields(meta, FETCH_FIELDS, "fetch_offset"))


def encode_request(corr: int, api: int, fields: dict, payload: bytes = b"") -> list:
    """The frame parts of a request (the payload is written as it is, not copied)."""
    meta = msgpack.packb(fields)
    head = REQUEST_HEAD.pack(9 + len(meta) + len(payload), corr, api, len(meta))
    return [head, meta, payload] if payload else [head, meta]


def encode_answer(corr: int, answer: dict) -> list:
    records = answer.get("records") or b""
    meta = msgpack.packb({k: v for k, v in answer.items() if k != "records"})
    return [ANSWER_HEAD.pack(corr, len(meta), len(records)), meta, records]
