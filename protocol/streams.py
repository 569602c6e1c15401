"""The read buffer of rafka's asyncio stream connections (``asyncio.StreamReader``'s ``limit``), for every
listener and connection in actors/channels and serve/kafka_wire. Why 8 MiB, measured: docs/internals.md (protocol/).
"""

from __future__ import annotations

STREAM_LIMIT = 8 * 1024 * 1024
