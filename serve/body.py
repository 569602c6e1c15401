"""Request bodies read with bounds: a size limit enforced before and while reading, and a time limit.

- ``Content-Length`` above the gateway's limit is answered 413 at once, before a byte of the body is read;
  a body without one (chunked) is read chunk by chunk and refused (413) as soon as it passes the limit, so
  the gateway never buffers more than ``limit`` bytes of one request.
- A whole body must arrive within ``timeout_s`` of the first read (408 REQUEST_TIMEOUT otherwise: a client
  that sends headers and part of a body, then stalls, no longer holds a request forever); a streamed body
  (v3 streaming produce) must not pause longer than ``timeout_s`` between chunks.

Every failure is a ``GatewayError`` (serve/errors.py). Called on the ingress replica's event loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from starlette.requests import ClientDisconnect, Request

from serve.errors import MALFORMED, REQUEST_TIMEOUT, TOO_LARGE, GatewayError
from serve.produce import load_json

__all__ = ["DEFAULT_BODY_TIMEOUT_S", "declared_length", "read_body", "read_json_or_none", "next_chunk"]

DEFAULT_BODY_TIMEOUT_S = 30.0


def _too_large(size: int, limit: int, how: str) -> GatewayError:
    return GatewayError(
        413, TOO_LARGE, f"the request body {how} {size} bytes, more than the gateway's limit ({limit})", 10
    )


def declared_length(request: Request) -> int | None:
    """The body's Content-Length, None without one (chunked); 400 when it is not a number."""
    raw = request.headers.get("content-length")
    if raw is None:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        raise GatewayError(400, MALFORMED, f"invalid Content-Length {raw!r}")
    return n


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole body, at most ``limit`` bytes (413), within ``timeout_s`` seconds (408)."""
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise _too_large(declared, limit, "declares")
    parts: list[bytes] = []
    size = 0
    chunks = request.stream().__aiter__()
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            chunk = await asyncio.wait_for(chunks.__anext__(), max(left, 0.0))
        except StopAsyncIteration:
            break
        except asyncio.TimeoutError:
            raise GatewayError(
                408,
                REQUEST_TIMEOUT,
                f"the request body did not arrive within {timeout_s:g} s "
                f"({size} bytes of {'?' if declared is None else declared} received)",
            ) from None
        except ClientDisconnect:
            raise GatewayError(400, MALFORMED, f"the client went away after {size} bytes of the body") from None
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit, "passed")
        if chunk:
            parts.append(chunk)
    return b"".join(parts)


async def read_json_or_none(request: Request, limit: int, timeout_s: float) -> Any:
    """An optional JSON body (consumer-instance routes): None when empty."""
    raw = await read_body(request, limit, timeout_s)
    return load_json(raw) if raw.strip() else None


async def next_chunk(chunks: AsyncIterator[bytes], timeout_s: float) -> bytes:
    """The next chunk of a streamed body; 408 when none comes within ``timeout_s`` (StopAsyncIteration at
    the end, ClientDisconnect as Starlette raises it)."""
    try:
        return await asyncio.wait_for(chunks.__anext__(), timeout_s)
    except asyncio.TimeoutError:
        raise GatewayError(
            408,
            REQUEST_TIMEOUT,
            f"the streamed request body paused for more than {timeout_s:g} s; the stream is closed",
        ) from None
