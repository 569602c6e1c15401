"""The transaction coordinator's client listener (a TokenListener, actors/channels/listener.py): rafka
producers' InitProducerId / AddPartitionsToTxn / AddOffsetsToTxn / EndTxn as ``API_COORDINATOR`` frames on
TCP, decoded into the typed requests of ``CHANNEL_METHODS`` and answered by the actor's own handlers.
Started by actors/txn_coordinator.py; why and the frame rules: docs/internals.md ("Transactions").
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from actors.channels.client_channel import read_token
from actors.channels.listener import TokenListener, serving
from protocol import errors as E
from protocol.channel_frames import API_COORDINATOR, MAX_FRAME_BYTES, REQUEST_HEAD, BadFrame, encode_answer
from protocol.coordinator_frames import CHANNEL_METHODS, decode_coordinator_request

log = logging.getLogger("rafka.txn_coordinator")

MAX_IN_FLIGHT_PER_CONNECTION = 64


class CoordinatorListener(TokenListener):
    """The coordinator's client server: ``handler(method)`` is the actor's coroutine for ``method``."""

    def __init__(self, handler: Callable[[str], Callable[[Any], Awaitable[dict]]], name: str):
        super().__init__(name, self._serve)
        self.handler = handler
        self._tasks: set[asyncio.Task] = set()
        self.stats = {"connections": 0, "open": 0, "refused": 0, "bad_frames": 0, "requests": 0, "failed": 0}

    def close(self) -> None:
        super().close()
        for t in list(self._tasks):
            t.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        room = asyncio.Semaphore(MAX_IN_FLIGHT_PER_CONNECTION)
        with serving(self._conns, writer, self.stats, self.name, "coordinator client"):
            token = await asyncio.wait_for(read_token(reader), 10)
            if not hmac.compare_digest(token, self.token):
                raise BadFrame("wrong token")
            self.stats["connections"] += 1
            self.stats["open"] += 1
            try:
                while True:
                    length, corr, api, meta_len = REQUEST_HEAD.unpack(await reader.readexactly(REQUEST_HEAD.size))
                    if api != API_COORDINATOR or length > MAX_FRAME_BYTES or meta_len != length - 9:
                        raise BadFrame(
                            f"api {api} / frame of {length} bytes (meta {meta_len}) is not a coordinator request"
                        )
                    method, req = decode_coordinator_request(await reader.readexactly(meta_len), CHANNEL_METHODS)
                    await room.acquire()
                    self.stats["requests"] += 1
                    task = asyncio.ensure_future(self._answer(writer, corr, method, req, room))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            finally:
                self.stats["open"] -= 1

    async def _answer(self, writer: asyncio.StreamWriter, corr: int, method: str, req: Any, room) -> None:
        try:
            try:
                answer = await self.handler(method)(req)
            except Exception as exc:  # noqa: BLE001 - a handler's failure is this request's error, not the connection's
                self.stats["failed"] += 1
                log.warning("%s: %s failed: %r", self.name, method, exc)
                code, msg = E.error_response(exc)
                answer = {"error_code": code, "error_message": msg}
            if not writer.is_closing():
                writer.writelines(encode_answer(corr, answer))
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            room.release()

    def describe(self) -> dict[str, Any]:
        return dict(self.stats, port=self.port)
