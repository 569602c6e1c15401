"""Verification tokens (KIP-890 part 1, carried by the producer): sign and check the transaction
coordinator's word that a partition is durably in a producer's ongoing transaction.

The transaction coordinator signs (``sign``) and the partition leaders check (``check``, from
actors/replication/txn_verification.py); ``load_key`` reads or creates the cluster's key through any KV
(actors/metadata/kv.py ``cluster_key`` calls it once per process). Pure: hashlib and hmac only.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from typing import Any

TOKEN_KEY = "txn_token_key"
TOKEN_BYTES = 16
_FIXED = struct.Struct(">qhqi")  # producer id, producer epoch, transaction start ms, partition


def load_key(kv: Any) -> bytes:
    """The cluster's signing key, 32 random bytes under ``TOKEN_KEY`` in ``kv`` (created on first use by
    put-if-absent, so every process reads the same one). Blocking when ``kv`` is GCS."""
    key = kv.get(TOKEN_KEY)
    if key is None:
        kv.put_if_absent(TOKEN_KEY, os.urandom(32))
        key = kv.get(TOKEN_KEY)
    if not isinstance(key, bytes) or len(key) < 16:
        raise ValueError(f"the cluster's {TOKEN_KEY} in KV is not a key")
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
