"""The data channel's frames: what a request and an answer look like on the wire, each API's fields, their
decoding (actors/channels/client_channel.py and actors/channels/produce_channel.py serve them) and encoding (the client side's
connections, actors/channels/data_channel.py).

Big-endian: a hello is ``u32 length`` + msgpack ``{"token": bytes}``; a request is ``u32 length, u32
correlation id, u8 api, u32 meta length`` + a msgpack map of the request's fields + (produce) the record
batches; an answer is ``u32 correlation id, u32 meta length, u32 records length`` + the msgpack map of the
answer but ``records`` + the records' bytes.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from protocol.messages import FetchRequest, ProduceRequest
from protocol.txn_messages import TxnVerifiedRequest, WriteTxnMarkersRequest

MAX_FRAME_BYTES = 104857600  # socket.request.max.bytes
MAX_HELLO_BYTES = 4096
API_PRODUCE, API_FETCH, API_TXN_MARKERS, API_TXN_VERIFIED, API_COORDINATOR, API_PRODUCE_MULTI = 0, 1, 2, 3, 4, 5
U32 = struct.Struct(">I")
REQUEST_HEAD = struct.Struct(">IIBI")  # length, correlation id, api, meta length
ANSWER_HEAD = struct.Struct(">III")  # correlation id, meta length, records length

PRODUCE_FIELDS = {
    "acks": int,
    "timeout_ms": int,
    "current_leader_epoch": int,
    "transactional_id": (str, type(None)),
    "txn_start_ms": int,  # (these two only with a verification token: protocol/txn_tokens.py)
    "txn_token": bytes,
}
# an internal connection (a broker's coordinators, with the listener's internal token) may also append as a
# coordinator and write transaction markers; a client connection never can
INTERNAL_PRODUCE_FIELDS = {**PRODUCE_FIELDS, "origin": str}
ORIGINS = ("client", "coordinator")
MARKER_FIELDS = {
    "producer_id": int,
    "producer_epoch": int,
    "committed": bool,
    "coordinator_epoch": int,
    "transactional_id": str,
    "txn_start_ms": int,
}
VERIFIED_FIELDS = {
    "producer_id": int,
    "producer_epoch": int,
    "txn_start_ms": int,
    "leader_epoch": int,
    "transactional_id": str,
}
FETCH_FIELDS = {
    "fetch_offset": int,
    "max_bytes": int,
    "max_wait_ms": int,
    "min_bytes": int,
    "current_leader_epoch": int,
    "isolation_level": int,
    "min_one_message": bool,
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
        elif kind is bool:
            if type(v) is not bool:
                raise BadFrame(f"{k} must be a bool")
        elif not isinstance(v, kind) or type(v) is bool:
            raise BadFrame(f"{k} has the wrong type")
    return d


def decode_produce(meta: bytes, records: bytes, order: tuple[str, int], internal: bool = False) -> ProduceRequest:
    """A client's ProduceRequest (origin is always ``client``; an internal connection may say ``coordinator``);
    BadFrame unless the fields are known and typed."""
    d = _fields(meta, INTERNAL_PRODUCE_FIELDS if internal else PRODUCE_FIELDS, None)
    if d.get("origin", "client") not in ORIGINS:
        raise BadFrame(f"origin must be one of {ORIGINS}")
    return ProduceRequest(records, **d, order=order)


def decode_markers(meta: bytes) -> WriteTxnMarkersRequest:
    d = _fields(meta, MARKER_FIELDS, None)
    if set(d) < set(MARKER_FIELDS) - {"transactional_id", "txn_start_ms"}:
        raise BadFrame("WriteTxnMarkers needs producer_id, producer_epoch, committed and coordinator_epoch")
    return WriteTxnMarkersRequest(**d)


def decode_verified(meta: bytes) -> TxnVerifiedRequest:
    d = _fields(meta, VERIFIED_FIELDS, None)
    if set(d) < set(VERIFIED_FIELDS) - {"transactional_id"}:
        raise BadFrame("a verification push needs producer_id, producer_epoch, txn_start_ms and leader_epoch")
    return TxnVerifiedRequest(**d)


def decode_fetch(meta: bytes) -> FetchRequest:
    """A consumer's FetchRequest (replica id is always -1: a client never fetches as a follower)."""
    return FetchRequest(**_fields(meta, FETCH_FIELDS, "fetch_offset"))


def encode_request(corr: int, api: int, fields: dict, payload: bytes | list = b"") -> list:
    """The frame parts of a request (the payload, or a list of buffers, is written as it is, not copied)."""
    meta = msgpack.packb(fields)
    bufs = payload if isinstance(payload, list) else [payload] if payload else []
    head = REQUEST_HEAD.pack(9 + len(meta) + sum(map(len, bufs)), corr, api, len(meta))
    return [head, meta, *bufs]


def encode_answer(corr: int, answer: dict) -> list:
    records = answer.get("records") or b""
    meta = msgpack.packb({k: v for k, v in answer.items() if k != "records"})
    return [ANSWER_HEAD.pack(corr, len(meta), len(records)), meta, records]


_PRODUCE_KEYS = ("acks", "timeout_ms", "current_leader_epoch", "transactional_id")
_FETCH_KEYS = tuple(FETCH_FIELDS)


def produce_fields(req: Any) -> dict:
    d = {k: getattr(req, k) for k in _PRODUCE_KEYS}
    if getattr(req, "txn_token", b""):
        d["txn_start_ms"], d["txn_token"] = req.txn_start_ms, req.txn_token
    return d


def marker_fields(req: WriteTxnMarkersRequest) -> dict:
    return {k: getattr(req, k) for k in MARKER_FIELDS}


def verified_fields(req: TxnVerifiedRequest) -> dict:
    return {k: getattr(req, k) for k in VERIFIED_FIELDS}


def internal_produce_fields(req: ProduceRequest) -> dict:
    return {**produce_fields(req), "origin": req.origin}


def fetch_fields(req: Any) -> dict:
    return {k: getattr(req, k) for k in _FETCH_KEYS}
