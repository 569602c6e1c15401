"""Confluent's v3 produce reports and its streaming mode (one chunked request carrying concatenated records,
one report line per record), for the gateway's ``/v3/.../records`` route (serve/http.py).

``v3_stream`` runs on the ingress replica's event loop: records are produced as their JSON arrives and each
gets one delivery report line, in order, as soon as it and those before it are settled; the next body chunk
and the oldest unreported records are awaited together, so reports flow while the client is still sending.
A bad record gets an error line and the stream goes on; a malformed or too deeply nested body, or a body
that pauses longer than the gateway's body timeout, ends it with an error line (the response itself always
ends cleanly). A client that disconnects ends it silently: what it sent is produced, unreported.
"""

from __future__ import annotations

import asyncio
import collections
import json
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect

from protocol.errors import KafkaError
from serve.body import next_chunk as _next_chunk
from serve.errors import GatewayError, from_exception
from serve.produce import JsonValueStream, iso_ms, parse_v3

__all__ = ["v3_report", "v3_stream", "RequestStreamingResponse"]


def v3_report(cluster: str, topic: str, res: Any, ktype: str | None, vtype: str | None, rec) -> dict:
    """One record's v3 delivery report (or its error)."""
    if isinstance(res, BaseException):
        err = from_exception(res)
        return {"error_code": err.status, "kafka_error_code": err.kafka_error_code, "message": err.message}
    return {
        "error_code": 200,
        "cluster_id": cluster,
        "topic_name": topic,
        "partition_id": res.partition,
        "offset": res.offset,
        "timestamp": iso_ms(res.timestamp),
        "key": None if rec.key is None else {"type": ktype, "size": len(rec.key)},
        "value": None if rec.value is None else {"type": vtype, "size": len(rec.value)},
    }


class RequestStreamingResponse(StreamingResponse):
    """A streamed answer that leaves the request's ``receive`` channel to the endpoint. Starlette's
    StreamingResponse listens on it for the client's disconnect (ASGI spec < 2.4, as under Serve) and so
    swallows request-body chunks that the v3 streaming endpoint reads while it answers; the endpoint sees
    the disconnect itself (``ClientDisconnect`` from ``request.stream()``)."""

    async def __call__(self, scope, receive, send) -> None:
        await self.stream_response(send)


async def v3_stream(gw: Any, topic: str, values: list, stream: JsonValueStream, body: Any, idle_timeout_s: float):
    """The report lines of a v3 stream (see the module docstring). ``gw``: the ingress (``run``,
    ``producer``, ``cluster``); ``values``: records already parsed; ``body``: the rest of the request body
    (an async iterator of chunks) or None."""
    pending: collections.deque = collections.deque()  # (parsed entries, send_each results)
    first = 0
    failure: GatewayError | None = None
    next_chunk: asyncio.Future | None = None
    head: asyncio.Future | None = None

    def submit(vals: list, first: int) -> tuple[list, list]:
        entries: list = []
        for i, v in enumerate(vals, first):
            try:
                entries.append(parse_v3([v], i)[0])
            except GatewayError as exc:
                entries.append(exc)
        good = [e[0] for e in entries if not isinstance(e, GatewayError)]
        sent = iter(gw.producer.send_each(topic, good) if good else ())
        return entries, [e if isinstance(e, GatewayError) else next(sent) for e in entries]

    def lines(entries: list, results: list) -> str:
        return "".join(
            json.dumps(
                v3_report(
                    gw.cluster, topic, res, *((None, None, None) if isinstance(e, GatewayError) else (e[1], e[2], e[0]))
                ),
                separators=(",", ":"),
            )
            + "\n"
            for e, res in zip(entries, results)
        )

    try:
        while True:
            if values:
                pending.append(await gw.run(submit, values, first))
                first += len(values)
                values = []
            if body is not None and next_chunk is None:
                next_chunk = asyncio.ensure_future(_next_chunk(body, idle_timeout_s))
            if pending and head is None:
                head = asyncio.ensure_future(gw.run(gw.producer.wait, pending[0][1]))
            waiting = [f for f in (head, next_chunk) if f is not None]
            if not waiting:
                break
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if head in done:
                entries, sent = pending.popleft()
                try:
                    results = head.result()
                except KafkaError as exc:  # not acknowledged within the delivery timeout
                    results = [exc] * len(sent)
                head = None
                yield lines(entries, results)
            if next_chunk in done:
                try:
                    values = stream.feed(next_chunk.result())
                except StopAsyncIteration:
                    body = None
                    try:
                        values = stream.finish()
                    except GatewayError as exc:
                        failure = exc
                except GatewayError as exc:  # malformed, too deep, too large, or the body paused too long
                    failure, body = exc, None
                except ClientDisconnect:  # the client is gone: what it sent is produced, unreported
                    return
                next_chunk = None
                if stream.failed is not None and failure is None:  # the values before it go out first
                    failure, body = stream.failed, None
        if failure is not None:
            yield lines([failure], [failure])
    finally:
        if next_chunk is not None:
            next_chunk.cancel()
