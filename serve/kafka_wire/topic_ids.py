"""rafka's topic ids (the controller writes 16 random bytes as unpadded urlsafe base64) as the UUIDs of
the wire protocol, and back (pure)."""

from __future__ import annotations

import base64
import functools
import uuid


@functools.lru_cache(maxsize=4096)
def topic_uuid(topic_id: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
    return uuid.UUID(bytes=raw[:16].rjust(16, b"\0"))


def topic_id_str(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()
