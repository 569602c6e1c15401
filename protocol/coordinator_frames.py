"""The frames of a coordinator request on the client channel (api ``API_COORDINATOR``,
actors/channels/data_channel.py): the fields are ``{"method": name, "request": {field: value}}`` of a typed request of
protocol/txn_messages.py. The client encodes (rafka/channel.py), the coordinator's listener decodes
(actors/channels/coordinator_channel.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack

from protocol.channel_frames import BadFrame
from protocol.txn_messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)

CHANNEL_METHODS: dict[str, type] = {
    cls.METHOD: cls for cls in (InitProducerIdRequest, AddPartitionsToTxnRequest, AddOffsetsToTxnRequest, EndTxnRequest)
}


def _tuples(v: Any) -> Any:
    """msgpack's lists back into the tuples the typed requests hold (hashable, as over Ray)."""
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def decode_coordinator_request(meta: bytes, methods: dict[str, type]) -> tuple[str, Any]:
    """``(method, typed request)`` of a coordinator frame; BadFrame unless the method is allowed and the
    fields are the request's own."""
    try:
        d = msgpack.unpackb(meta, raw=False, strict_map_key=True)
    except Exception as exc:  # noqa: BLE001 - any msgpack failure is a bad frame
        raise BadFrame(f"request fields are not msgpack: {type(exc).__name__}") from None
    if not isinstance(d, dict) or set(d) != {"method", "request"} or not isinstance(d["request"], dict):
        raise BadFrame("a coordinator request is {method, request}")
    cls = methods.get(d["method"]) if isinstance(d["method"], str) else None
    if cls is None:
        raise BadFrame(f"method {d['method']!r} is not served on this connection")
    try:
        return d["method"], cls(**{k: _tuples(v) for k, v in d["request"].items()})
    except TypeError as exc:
        raise BadFrame(f"{d['method']}: {exc}") from None


def encode_coordinator_request(req: Any) -> dict:
    """The frame fields of a typed request (the client side of :func:`decode_coordinator_request`)."""
    return {"method": req.METHOD, "request": {f.name: getattr(req, f.name) for f in dataclasses.fields(req)}}
