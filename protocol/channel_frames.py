"""The data channel's frames (served by actors/channels/client_channel.py and produce_channel.py, encoded by
actors/channels/data_channel.py). Each API's fields are its request dataclass's (``wire_fields``). Big-endian::

    hello   := u32 length, msgpack {"token": bytes}
    request := u32 length, u32 correlation id, u8 api, u32 meta length, msgpack {field: value}, (produce) batches
    answer  := u32 correlation id, u32 meta length, u32 records length, msgpack answer but records, records
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
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


_WIRE_TYPES = (int, bool, str, bytes, type(None))  # what a frame's msgpack map holds


def wire_fields(cls: type, *, leave_out: tuple[str, ...] = ()) -> dict[str, type | tuple[type, ...]]:
    """A request dataclass's fields as a frame carries them, in the dataclass's order (the order they are
    encoded in): name -> the type, or the types of a union, its value must have; but ``leave_out`` (what the
    frame itself carries, or what the channel sets)."""
    hints = typing.get_type_hints(cls)
    spec: dict[str, type | tuple[type, ...]] = {}
    for f in dataclasses.fields(cls):
        if f.name in leave_out:
            continue
        hint = hints[f.name]
        kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        if not all(k in _WIRE_TYPES for k in kinds):
            raise TypeError(f"{cls.__name__}.{f.name}: {hint} does not travel in a frame")
        spec[f.name] = kinds if len(kinds) > 1 else kinds[0]
    return spec


# the records are the frame's payload; origin only on an internal connection; the order is the channel's
PRODUCE_FIELDS = wire_fields(ProduceRequest, leave_out=("records", "origin", "order"))
# an internal connection (a broker's coordinators, with the listener's internal token) may also append as a
# coordinator and write transaction markers; a client connection never can
INTERNAL_PRODUCE_FIELDS = wire_fields(ProduceRequest, leave_out=("records", "order"))
ORIGINS = ("client", "coordinator")
MARKER_FIELDS = wire_fields(WriteTxnMarkersRequest)
VERIFIED_FIELDS = wire_fields(TxnVerifiedRequest)
FETCH_FIELDS = wire_fields(FetchRequest, leave_out=("replica_id",))  # a client never fetches as a follower


def _required(cls: type) -> frozenset[str]:
    """The fields a request cannot do without: those with no default."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING)


_REQUIRED_MARKER = _required(WriteTxnMarkersRequest)
_REQUIRED_VERIFIED = _required(TxnVerifiedRequest)


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
    if set(d) < _REQUIRED_MARKER:
        raise BadFrame("WriteTxnMarkers needs producer_id, producer_epoch, committed and coordinator_epoch")
    return WriteTxnMarkersRequest(**d)


def decode_verified(meta: bytes) -> TxnVerifiedRequest:
    d = _fields(meta, VERIFIED_FIELDS, None)
    if set(d) < _REQUIRED_VERIFIED:
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


_TOKEN_KEYS = ("txn_start_ms", "txn_token")  # sent only with a verification token (protocol/txn_tokens.py)
_PRODUCE_KEYS = tuple(k for k in PRODUCE_FIELDS if k not in _TOKEN_KEYS)
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
