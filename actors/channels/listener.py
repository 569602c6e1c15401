"""The token-gated listener the channels share: an asyncio server on an ephemeral port whose connections
first present a token handed out through Ray (``TokenListener``), and one accepted connection's life
(``serving``). The client, produce, replication and coordinator channels derive from it; it imports only
asyncio and protocol/streams.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterator

from protocol.channel_frames import BadFrame
from protocol.streams import STREAM_LIMIT

log = logging.getLogger("actors.replica")


@contextlib.contextmanager
def serving(conns: set, writer: asyncio.StreamWriter, stats: dict, name: str, what: str) -> Iterator[None]:
    """One accepted connection's life: a peer that goes away ends it quietly, a bad frame or a missing hello
    closes it with a log line and a count in ``stats``, anything else is logged; the listener and its other
    connections go on."""
    peer = writer.get_extra_info("peername")
    conns.add(writer)
    try:
        yield
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass  # the peer went away (or we are closing)
    except (BadFrame, asyncio.TimeoutError) as exc:
        stats["bad_frames" if isinstance(exc, BadFrame) else "refused"] += 1
        log.warning("%s: %s connection from %s closed: %s", name, what, peer, exc or "no hello in 10 s")
    except Exception:  # noqa: BLE001 - never let one connection take the replica down
        log.exception("%s: %s connection from %s failed", name, what, peer)
    finally:
        conns.discard(writer)
        writer.close()


class TokenListener:
    """An asyncio server on an ephemeral port whose connections present a token (handed out through Ray);
    ``serve`` handles one accepted connection."""

    def __init__(self, name: str, serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]):
        self.name, self._handle_connection = name, serve
        self.token = secrets.token_bytes(16)
        self.server: asyncio.AbstractServer | None = None
        self.host, self.port = "", 0
        self._conns: set[asyncio.StreamWriter] = set()

    async def start(self, host: str) -> dict:
        if self.server is None:
            self.server = await asyncio.start_server(self._handle_connection, host, 0, limit=STREAM_LIMIT)
            self.host, self.port = host, self.server.sockets[0].getsockname()[1]
        return self.endpoint()

    def endpoint(self) -> dict:
        return {"host": self.host, "port": self.port, "token": self.token}

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        for w in list(self._conns):
            w.close()
        self._conns.clear()
