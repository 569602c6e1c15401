"""The leader replica's client listener (:class:`ClientListener`, a TokenListener): clients' produce and fetch over
a plain TCP connection instead of Ray calls, and, with the internal token, the coordinators' appends, markers and
verification pushes. Frames are protocol/channel_frames.py's; each request is answered by the replica's own
handler. Held by the replica shell (actors/replica.py); why and the frames: docs/internals.md, "Replication:
module notes"."""

from __future__ import annotations

import asyncio
import hmac
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack

from actors.channels.listener import TokenListener, serving
from protocol.channel_frames import (
    API_FETCH,
    API_PRODUCE,
    API_TXN_MARKERS,
    API_TXN_VERIFIED,
    MAX_FRAME_BYTES,
    MAX_HELLO_BYTES,
    REQUEST_HEAD,
    U32,
    BadFrame,
    decode_fetch,
    decode_markers,
    decode_produce,
    decode_verified,
    encode_answer,
)
from protocol.messages import FetchRequest, ProduceRequest
from protocol.txn_messages import TxnVerifiedRequest, WriteTxnMarkersRequest

log = logging.getLogger("actors.replica")

MAX_IN_FLIGHT_PER_CONNECTION = 256  # beyond it the listener stops reading that connection until answers go out
_ids = itertools.count()


async def read_token(reader: asyncio.StreamReader) -> bytes:
    """A connection's hello: the token it presents (BadFrame unless the frame is that alone)."""
    (n,) = U32.unpack(await reader.readexactly(4))
    if n > MAX_HELLO_BYTES:
        raise BadFrame(f"hello of {n} bytes")
    body = await reader.readexactly(n)
    try:
        d = msgpack.unpackb(body, raw=False)
    except Exception:  # noqa: BLE001 - any msgpack failure is a bad frame
        raise BadFrame("hello is not msgpack") from None
    if not isinstance(d, dict) or set(d) != {"token"} or not isinstance(d["token"], bytes):
        raise BadFrame("hello must be the endpoint's token alone")
    return d["token"]


async def read_request(reader: asyncio.StreamReader) -> tuple[int, int, bytes, bytes]:
    """One request frame: ``(correlation id, api, meta, payload)``; BadFrame if over the limit or inconsistent."""
    length, corr, api, meta_len = REQUEST_HEAD.unpack(await reader.readexactly(REQUEST_HEAD.size))
    if length > MAX_FRAME_BYTES or meta_len > length - 9:
        raise BadFrame(f"frame of {length} bytes (meta {meta_len}) is over the limit or inconsistent")
    meta = await reader.readexactly(meta_len)
    payload = await reader.readexactly(length - 9 - meta_len) if length - 9 > meta_len else b""
    return corr, api, meta, payload


class ClientListener(TokenListener):
    """The leader replica's client server. ``produce`` and ``fetch`` are the replica's own handlers (a
    request -> its answer dict)."""

    def __init__(
        self,
        produce: Callable[[ProduceRequest], Awaitable[dict]],
        fetch: Callable[[FetchRequest], Awaitable[dict]],
        name: str,
        write_txn_markers: Callable[[WriteTxnMarkersRequest], Awaitable[dict]] | None = None,
        txn_verified: Callable[[TxnVerifiedRequest], Awaitable[dict]] | None = None,
        max_in_flight: int = MAX_IN_FLIGHT_PER_CONNECTION,
    ):
        super().__init__(name, self._serve)
        self.produce, self.fetch = produce, fetch
        self.write_txn_markers, self.txn_verified = write_txn_markers, txn_verified
        self.max_in_flight = max_in_flight
        # a second token for the brokers' coordinators (``internal_endpoint``): their connections may also
        # append as a coordinator, write transaction markers and push verification state, which a client
        # connection never may
        self.internal_token = secrets.token_bytes(16)
        self._tasks: set[asyncio.Task] = set()
        self.stats = {
            "connections": 0,
            "open": 0,
            "refused": 0,
            "bad_frames": 0,
            "produces": 0,
            "fetches": 0,
            "markers": 0,
            "verified_pushes": 0,
            "internal": 0,
        }

    def endpoint(self, internal: bool = False) -> dict:
        return {**super().endpoint(), **({"token": self.internal_token} if internal else {})}

    def close(self) -> None:
        super().close()
        for t in list(self._tasks):
            t.cancel()

    async def _hello(self, reader: asyncio.StreamReader) -> bool:
        """The connection's privilege: True for the internal token, False for the client token."""
        token = await read_token(reader)
        if hmac.compare_digest(token, self.internal_token):
            return True
        if not hmac.compare_digest(token, self.token):
            raise BadFrame("wrong token")
        return False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        channel = f"tcp{next(_ids)}"  # the connection's produce order at the replica (CallOrder)
        sent = 0
        room = asyncio.Semaphore(self.max_in_flight)
        with serving(self._conns, writer, self.stats, self.name, "client"):
            internal = await asyncio.wait_for(self._hello(reader), 10)
            self.stats["connections"] += 1
            self.stats["internal"] += internal
            self.stats["open"] += 1
            try:
                while True:
                    corr, api, meta, payload = await read_request(reader)
                    await room.acquire()
                    if api == API_PRODUCE:
                        call = self.produce(decode_produce(meta, payload, (channel, sent), internal))
                        sent += 1
                        self.stats["produces"] += 1
                    elif api == API_FETCH and not payload:
                        call = self.fetch(decode_fetch(meta))
                        self.stats["fetches"] += 1
                    elif api == API_TXN_MARKERS and internal and not payload and self.write_txn_markers is not None:
                        call = self.write_txn_markers(decode_markers(meta))
                        self.stats["markers"] += 1
                    elif api == API_TXN_VERIFIED and internal and not payload and self.txn_verified is not None:
                        call = self.txn_verified(decode_verified(meta))
                        self.stats["verified_pushes"] += 1
                    else:
                        raise BadFrame(f"api {api} is not served on this connection (or carries a payload)")
                    task = asyncio.ensure_future(self._answer(writer, corr, call, room))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            finally:
                self.stats["open"] -= 1

    async def _answer(self, writer: asyncio.StreamWriter, corr: int, call: Awaitable[dict], room) -> None:
        try:
            answer = await call
            if not writer.is_closing():
                writer.writelines(encode_answer(corr, answer))
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # noqa: BLE001 - the replica's handlers answer errors; anything else ends the connection
            log.exception("%s: answering a client request failed", self.name)
            writer.close()
        finally:
            room.release()

    def describe(self) -> dict[str, Any]:
        return dict(self.stats, port=self.port)
