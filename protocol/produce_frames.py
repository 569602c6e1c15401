"""The multi-partition produce frame: one request per leader process per Sender round (Kafka's Sender sends
one ProduceRequest per broker). Encoded by rafka/channel.py, decoded by actors/channels/produce_channel.py.
The client channel's request head (protocol/channel_frames.py), then the msgpack map ``{acks, timeout_ms,
transactional_id, parts: [[topic, partition, current_leader_epoch, records length, (txn_start_ms,
txn_token)?], ...]}``, then the parts' batches in order; part ``i`` is answered under correlation id
``request's + i``. Pure: ``BadFrame`` for anything a well-behaved producer does not send.
"""

from __future__ import annotations

from typing import Any

import msgpack

from protocol.channel_frames import BadFrame
from protocol.messages import ProduceRequest

MAX_PARTS = 100_000  # partitions in one request (a frame is bounded by socket.request.max.bytes anyway)
_HEAD: dict[str, type | tuple[type, ...]] = {
    "acks": int,
    "timeout_ms": int,
    "transactional_id": (str, type(None)),
    "parts": list,
}


def encode_multi(items: list[tuple[str, int, ProduceRequest]]) -> tuple[dict, list]:
    """The request's fields and its payload buffers for ``items`` (topic, partition, request) of one producer:
    the requests share acks, timeout and transactional id (a producer's)."""
    first = items[0][2]
    parts = [
        [topic, partition, req.current_leader_epoch, len(req.records)]
        + ([req.txn_start_ms, req.txn_token] if req.txn_token else [])  # a verification token (txn_tokens.py)
        for topic, partition, req in items
    ]
    fields = {
        "acks": first.acks,
        "timeout_ms": first.timeout_ms,
        "transactional_id": first.transactional_id,
        "parts": parts,
    }
    return fields, [req.records for _t, _p, req in items]


def _int(v: Any, what: str, low: int = -(1 << 63)) -> int:
    if type(v) is not int or not low <= v < (1 << 63):
        raise BadFrame(f"{what} must be an int64 >= {low}")
    return v


def decode_multi(meta: bytes, payload: bytes) -> tuple[dict, list[tuple]]:
    """The head (acks, timeout_ms, transactional_id) and every part's ``(topic, partition, leader epoch,
    records)``, with ``txn_start_ms, txn_token`` after them when the part has a verification token; BadFrame unless the map is exactly that, the parts are distinct and their lengths add up to
    the payload."""
    try:
        d = msgpack.unpackb(meta, raw=False, strict_map_key=True)
    except Exception as exc:  # noqa: BLE001 - any msgpack failure is a bad frame
        raise BadFrame(f"produce fields are not msgpack: {type(exc).__name__}") from None
    if not isinstance(d, dict) or set(d) != set(_HEAD):
        raise BadFrame(f"a multi-partition produce is a map of exactly {sorted(_HEAD)}")
    for k, kind in _HEAD.items():
        if not isinstance(d[k], kind) or type(d[k]) is bool:
            raise BadFrame(f"{k} has the wrong type")
    _int(d["acks"], "acks")
    _int(d["timeout_ms"], "timeout_ms")
    raw = d.pop("parts")
    if not 0 < len(raw) <= MAX_PARTS:
        raise BadFrame(f"a multi-partition produce carries 1 to {MAX_PARTS} parts, not {len(raw)}")
    parts, seen, pos = [], set(), 0
    view = memoryview(payload)
    for p in raw:
        if not isinstance(p, list) or len(p) not in (4, 6) or type(p[0]) is not str:
            raise BadFrame(
                "a part is [topic, partition, current_leader_epoch, records length(, txn_start_ms, txn_token)]"
            )
        topic, partition = p[0], _int(p[1], "partition", 0)
        epoch, n = _int(p[2], "current_leader_epoch"), _int(p[3], "records length", 0)
        token: tuple = ()
        if len(p) == 6:
            if not isinstance(p[5], bytes) or not p[5]:
                raise BadFrame("a part's txn_token is non-empty bytes")
            token = (_int(p[4], "txn_start_ms"), p[5])
        if (topic, partition) in seen:
            raise BadFrame(f"{topic}-{partition} twice in one request")
        seen.add((topic, partition))
        if pos + n > len(payload):
            raise BadFrame("the parts' records lengths run past the payload")
        parts.append((topic, partition, epoch, payload if n == len(payload) else bytes(view[pos : pos + n]), *token))
        pos += n
    if pos != len(payload):
        raise BadFrame(f"{len(payload) - pos} bytes of payload after the parts")
    return d, parts
