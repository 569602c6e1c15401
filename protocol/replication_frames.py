"""The follower fetch session's frames (actors/channels/replication_channel.py is its server and connection): a u32 length
and a msgpack body for the hello, a session fetch and the poke; an answer's head (meta length, records length),
its msgpack meta and every partition's records as they are. Pure: no asyncio, no Ray."""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from protocol.channel_frames import U32, BadFrame

MAX_REQUEST_BYTES = 1 << 20  # a session fetch names each partition in ~40-300 bytes; the hello is < 200
SESSION_ANSWER_HEAD = struct.Struct(">II")  # an answer's meta length, records length


POKE = {"poke": True}  # the follower's "answer the fetch you hold now" frame (a partition joined)
_REQ_FIELDS = ("replica_id", "max_wait_ms", "min_bytes", "max_bytes")


def _int64(v: Any) -> bool:
    return type(v) is int and -(1 << 63) <= v < (1 << 63)


def frame(obj: Any) -> bytes:
    """A u32 length and the msgpack body (the hello, a session fetch, the poke)."""
    body = msgpack.packb(obj)
    return U32.pack(len(body)) + body


def encode_session_fetch(replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int, parts: list) -> bytes:
    """A session fetch frame: ``parts`` holds ``[topic, partition, fetch_offset, current_leader_epoch,
    partition_max_bytes]`` per partition, answered in this order."""
    return frame(
        {
            "replica_id": replica_id,
            "max_wait_ms": max_wait_ms,
            "min_bytes": min_bytes,
            "max_bytes": max_bytes,
            "partitions": parts,
        }
    )


def encode_poke() -> bytes:
    return frame(POKE)


def decode_frame(body: bytes) -> dict:
    """A session fetch (its map) or the poke (``POKE``) from a frame's body; BadFrame for anything else."""
    try:
        d = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:  # noqa: BLE001 - any msgpack failure is a bad frame
        raise BadFrame(f"not msgpack: {type(exc).__name__}") from None
    if d == POKE:
        return POKE
    if not isinstance(d, dict) or set(d) != {*_REQ_FIELDS, "partitions"}:
        raise BadFrame("not a session fetch map")
    for k in _REQ_FIELDS:
        if not _int64(d[k]):
            raise BadFrame(f"{k} must be an int64")
    parts = d["partitions"]
    if not isinstance(parts, list) or not parts:
        raise BadFrame("partitions must be a non-empty list")
    for e in parts:
        if not (isinstance(e, list) and len(e) == 5 and isinstance(e[0], str) and all(_int64(x) for x in e[1:])):
            raise BadFrame("a partition is [topic, partition, fetch_offset, current_leader_epoch, max_bytes]")
    return d


def encode_answers(answers: list[dict]) -> list:
    """The frame parts of a session answer: the answers' fields but records (with each one's records length
    ``n``), then every partition's records as they are, concatenated in order (never copied into msgpack)."""
    metas, recs = [], []
    for a in answers:
        r = a.get("records") or b""
        recs.append(r)
        metas.append({**{k: v for k, v in a.items() if k != "records"}, "n": len(r)})
    meta = msgpack.packb(metas)
    return [SESSION_ANSWER_HEAD.pack(len(meta), sum(len(r) for r in recs)), meta, *recs]


def decode_answers(meta: bytes, records: bytes) -> list[dict]:
    answers = msgpack.unpackb(meta, raw=False)
    if not isinstance(answers, list):
        raise ValueError("answers must be a list")
    pos = 0
    for a in answers:
        n = a.pop("n")
        if not isinstance(n, int) or n < 0 or pos + n > len(records):
            raise ValueError("records lengths do not add up")
        a["records"] = records[pos : pos + n]
        pos += n
    if pos != len(records):
        raise ValueError("records lengths do not add up")
    return answers
