"""A leader process's produce listener (:class:`ProduceListener`, a TokenListener): the Python producer's one request
per leader process per Sender round; each part goes to the replica registered under its topic and partition in
the process's replication server and is answered as soon as it is done. Started by any replica's
``produce_endpoint()``; frames are protocol/produce_frames.py's; more: docs/internals.md."""

from __future__ import annotations

import asyncio
import hmac
import itertools
import logging
from typing import Any

from actors.channels.client_channel import MAX_IN_FLIGHT_PER_CONNECTION, read_request, read_token
from actors.channels.listener import TokenListener, serving
from protocol import errors as E
from protocol.channel_frames import API_PRODUCE_MULTI, BadFrame, encode_answer
from protocol.messages import ProduceRequest
from protocol.produce_frames import decode_multi

log = logging.getLogger("actors.replica")
_ids = itertools.count()


def _not_here(topic: str, partition: int) -> dict:
    code = E.NotLeaderOrFollowerError.code
    return {"error_code": code, "error_message": f"{topic}-{partition} is not served by this process"}


async def _answered(call) -> dict:
    try:
        return await call
    except Exception as exc:  # noqa: BLE001 - the replica answers errors itself; anything else is this part's
        log.exception("a produce part failed")
        return {"error_code": E.UnknownServerError.code, "error_message": f"{type(exc).__name__}: {exc}"}


class ProduceListener(TokenListener):
    """``partitions``: the process's replicas by (topic, partition) (its ReplicationServer's registry)."""

    def __init__(self, name: str, partitions: dict, max_in_flight: int = MAX_IN_FLIGHT_PER_CONNECTION):
        super().__init__(name, self._serve)
        self.partitions = partitions
        self.max_in_flight = max_in_flight
        self._tasks: set[asyncio.Task] = set()
        self.stats = {"connections": 0, "refused": 0, "bad_frames": 0, "requests": 0, "parts": 0, "not_here": 0}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        channel = f"multi{next(_ids)}"
        numbered: dict[tuple[str, int], tuple[Any, int]] = {}  # (topic, partition) -> (replica, next n)
        room = asyncio.Semaphore(self.max_in_flight)
        with serving(self._conns, writer, self.stats, self.name, "produce"):
            token = await asyncio.wait_for(read_token(reader), 10)
            if not hmac.compare_digest(token, self.token):
                raise BadFrame("wrong token")
            self.stats["connections"] += 1
            while True:
                corr, api, meta, payload = await read_request(reader)
                if api != API_PRODUCE_MULTI:
                    raise BadFrame(f"api {api} is not served here (multi-partition produce only)")
                head, parts = decode_multi(meta, payload)
                await room.acquire()
                calls = []
                for topic, partition, epoch, records, *verification in parts:
                    replica = self.partitions.get((topic, partition))
                    if replica is None:
                        self.stats["not_here"] += 1
                        calls.append(asyncio.sleep(0, _not_here(topic, partition)))
                        continue
                    was, n = numbered.get((topic, partition), (None, 0))
                    n = n if was is replica else 0  # a new replica of the partition: its own order from 0
                    numbered[(topic, partition)] = (replica, n + 1)
                    # verification: [start, the coordinator's token for this partition] (txn_tokens.py), or []
                    start, tok = verification or (-1, b"")
                    req = ProduceRequest(
                        records,
                        current_leader_epoch=epoch,
                        order=(channel, n),
                        txn_start_ms=start,
                        txn_token=tok,
                        **head,
                    )
                    calls.append(replica.produce(req))
                self.stats["requests"] += 1
                self.stats["parts"] += len(parts)
                task = asyncio.ensure_future(self._answer(writer, corr, calls, room))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _answer(self, writer: asyncio.StreamWriter, corr: int, calls: list, room) -> None:
        """Each part's answer as soon as it is done, under correlation id ``corr + i`` (the client numbered the
        request's parts so): a part waits for no other part of its request."""

        async def one(i: int, call) -> None:
            answer = await _answered(call)
            answer.pop("records", None)
            if not writer.is_closing():
                writer.writelines(encode_answer((corr + i) & 0xFFFFFFFF, answer))

        try:
            await asyncio.gather(*(one(i, c) for i, c in enumerate(calls)))
            if not writer.is_closing():
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            room.release()

    def close(self) -> None:
        super().close()
        for t in list(self._tasks):
            t.cancel()

    def describe(self) -> dict[str, Any]:
        return dict(self.stats, port=self.port)


_listeners: dict[str, ProduceListener] = {}


def produce_listener(server: Any) -> ProduceListener:
    """The process's produce listener over ``server``'s registry (its ReplicationServer: one per process)."""
    lst = _listeners.get(server.name)
    if lst is None:
        lst = _listeners[server.name] = ProduceListener(f"{server.name} produce", server.partitions)
    return lst
