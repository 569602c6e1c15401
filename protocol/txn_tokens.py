"""Verification tokens (KIP-890 part 1, carried by the producer): the transaction coordinator's word that a
partition is durably in a producer's ongoing transaction, signed so a partition leader can check it without
asking the coordinator.

When an AddPartitionsToTxn is durable, the coordinator answers rafka's producer one token per partition:
``HMAC-SHA256(cluster key, transactional id, producer id, epoch, transaction start, topic, partition)``, cut to
16 bytes. The producer sends the partition's token and the transaction's start with its produces there; the
leader that has no transaction of that producer open checks it (:func:`check`) and then treats it as the
coordinator's push (actors/replication/txn_verification.py ``VerificationState.pushed``): taken unless a marker of that
transaction or a later one was already written there, so a token outlives neither its transaction nor its
producer epoch. A produce without a token, or with one that does not check, asks the coordinator as before.

It is the push's state carried on the produce instead of a call to each leader: the coordinator needs no
handle of or connection to the leaders before it answers (a transaction's first partitions of a new topic
took 24-36 ms of lookups and connects there), and the leaders take no call per transaction. Kafka's clients
(the wire listener) get the push, as before.

The key is 32 random bytes in the cluster's GCS KV (``TOKEN_KEY``), written once by whoever needs it first
(put-if-absent) and read once per process (:func:`cluster_key`). Anyone who can read the cluster's KV can sign; they can also call
the actors directly, so this guards against a buggy or stale producer, not against an operator.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import struct
from typing import Any

_KEYS: dict[str, bytes] = {}  # cluster -> its key, read once per process
TOKEN_KEY = "txn_token_key"
TOKEN_BYTES = 16
_FIXED = struct.Struct(">qhqi")  # producer id, producer epoch, transaction start ms, partition


def load_key(kv: Any) -> bytes:
    """The cluster's signing key (created on first use; every process reads the same one). Blocking: GCS."""
    key = kv.get(TOKEN_KEY)
    if key is None:
        kv.put_if_absent(TOKEN_KEY, os.urandom(32))
        key = kv.get(TOKEN_KEY)
    if not isinstance(key, bytes) or len(key) < 16:
        raise ValueError(f"the cluster's {TOKEN_KEY} in KV is not a key")
    return key


async def cluster_key(cluster: str) -> bytes:
    """``load_key`` of ``cluster``'s KV off the event loop, once per process (then cached). Raises ValueError or
    Ray's error when it cannot be read; the caller falls back to the coordinator calls."""
    key = _KEYS.get(cluster)
    if key is None:
        from protocol.kv import GcsKV

        key = _KEYS[cluster] = await asyncio.to_thread(load_key, GcsKV(cluster))
    return key


def _message(transactional_id: str, producer_id: int, producer_epoch: int, start_ms: int, topic: str, p: int) -> bytes:
    tid, name = transactional_id.encode(), topic.encode()
    return (
        struct.pack(">I", len(tid))
        + tid
        + struct.pack(">I", len(name))
        + name
        + _FIXED.pack(producer_id, producer_epoch, start_ms, p)
    )


def sign(
    key: bytes, transactional_id: str, producer_id: int, producer_epoch: int, start_ms: int, topic: str, p: int
) -> bytes:
    msg = _message(transactional_id, producer_id, producer_epoch, start_ms, topic, p)
    return hmac.new(key, msg, hashlib.sha256).digest()[:TOKEN_BYTES]


def check(
    key: bytes,
    token: Any,
    transactional_id: Any,
    producer_id: int,
    producer_epoch: int,
    start_ms: Any,
    topic: str,
    p: int,
) -> bool:
    """Whether ``token`` is the coordinator's for exactly these values (False for anything malformed)."""
    if not isinstance(token, bytes) or len(token) != TOKEN_BYTES or not isinstance(transactional_id, str):
        return False
    if type(start_ms) is not int or not 0 <= start_ms < (1 << 63):
        return False
    try:
        want = sign(key, transactional_id, producer_id, producer_epoch, start_ms, topic, p)
    except (struct.error, UnicodeEncodeError):
        return False
    return hmac.compare_digest(want, token)
