"""The clients' data plane: produce and fetch over TCP to each leader replica's client listener.

A Ray actor call costs ~1.4 ms of CPU and several ms of delay on a busy 2-core machine; a request on an
open TCP connection costs tens of microseconds. So :class:`ChannelTransport` (the Producer's and Consumer's
default transport, rafka/transport.py's seam) sends the two hot calls, ``produce`` and ``fetch`` on a
replica actor, over a connection to that replica's listener (actors/channels/client_channel.py), and a transactional
producer's calls on its transaction coordinator (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn)
over a connection to the coordinator's listener (actors/channels/coordinator_channel.py); everything else (lookups,
list offsets, group coordinators, admin) as Ray calls, exactly as :class:`RayTransport` does.

One I/O thread per process runs an asyncio loop with one connection per replica actor, shared by every
client in the process (Kafka's NetworkClient keeps one connection per broker). The first request to a
replica asks it for its endpoint with a Ray call (host, port, token: only what can call the actor can
connect), opens the connection and says hello; requests are pipelined with correlation ids, and answers
resolve ``concurrent.futures.Future`` objects the Sender and Fetcher wait on like Ray's.

Failures are Kafka's: a refused endpoint query answers its error code; a connection that breaks (the
replica's process died, it was stopped, a reset) fails every request on it with NOT_LEADER_OR_FOLLOWER,
which is retriable and makes the clients look the leader up again, as a dead actor does over Ray; a request
with no answer within its timeout (``timeout_ms`` + slack for produce, ``max_wait_ms`` +
``request.timeout.ms`` for fetch) fails with REQUEST_TIMED_OUT and closes the connection (its state is
unknown, as Kafka's NetworkClient does). Connections idle for ``connections.max.idle.ms`` (9 minutes) close.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

from actors.channels.data_channel import channel_io, fetch_timeout_s, process_key, produce_timeout_s
from protocol.channel_frames import (
    API_COORDINATOR,
    API_FETCH,
    API_PRODUCE,
    API_PRODUCE_MULTI,
    fetch_fields,
    produce_fields,
)
from protocol.coordinator_frames import CHANNEL_METHODS, encode_coordinator_request
from protocol.errors import RequestTimedOutError
from protocol.produce_frames import encode_multi
from rafka.transport import RAY, RayTransport


class ChannelTransport(RayTransport):
    """:class:`RayTransport`, but ``produce``/``fetch`` on a replica actor travel on the client channel.
    Calls are then ``concurrent.futures.Future`` objects; ``wait``/``get`` accept both kinds."""

    __slots__ = ()
    inline_calls_only = False  # a produce of max.request.size is one frame on the connection

    def call(self, endpoint: Any, method: str, *args: Any, **kw: Any) -> Any:
        if not kw and len(args) == 1:
            req = args[0]
            if method == "produce":
                return channel_io().submit(
                    endpoint, API_PRODUCE, produce_fields(req), req.records, produce_timeout_s(req)
                )
            if method == "fetch" and getattr(req, "replica_id", 0) < 0:
                return channel_io().submit(endpoint, API_FETCH, fetch_fields(req), b"", fetch_timeout_s(req))
            if type(req) is CHANNEL_METHODS.get(method):  # a transaction coordinator request
                return _coordinator_answer(
                    channel_io().submit(
                        endpoint, API_COORDINATOR, encode_coordinator_request(req), b"", COORDINATOR_TIMEOUT_S
                    )
                )
        return super().call(endpoint, method, *args, **kw)

    def produce_many(self, items: list[tuple[Any, str, int, Any]]) -> list:
        """A Sender round's produce calls as one request per leader process (protocol/produce_frames.py, served
        by actors/channels/produce_channel.py), as Kafka's Sender sends one ProduceRequest per broker: a future per
        item, in order, each resolved with its partition's answer as soon as that part is done (or with the
        request's failure)."""
        groups: dict[Any, list[int]] = {}
        for i, (handle, _t, _p, _req) in enumerate(items):
            groups.setdefault(process_key(handle), []).append(i)
        out: list = [None] * len(items)
        io = channel_io()
        for key, idx in groups.items():
            part = [items[i] for i in idx]
            fields, payload = encode_multi([(t, p, req) for _h, t, p, req in part])
            route = _produce_route(key)
            timeout_s = produce_timeout_s(part[0][3])
            futs = io.submit(part[0][0], API_PRODUCE_MULTI, fields, payload, timeout_s, route, len(part))
            for i, f in zip(idx, futs):
                out[i] = f
        return out

    def warm(self, replica: Any) -> bool:
        """Open the connection to the replica's process's produce listener now, if it is not open (the
        producer's first batches there then wait for no connect)."""
        channel_io().open(replica, _produce_route(process_key(replica)))
        return True

    def future(self, call: Any) -> Any:
        return call if isinstance(call, concurrent.futures.Future) else call.future()

    def sync_io(self, timeout_s: float) -> bool:
        """Until the I/O thread has written the requests submitted so far (``ChannelIO.sync``)."""
        return channel_io().sync(timeout_s)

    def wait(self, calls: list, num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]:
        if not any(isinstance(c, concurrent.futures.Future) for c in calls):
            return super().wait(calls, num_returns, timeout)
        futs = {id(c): self.future(c) for c in calls}
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done = [c for c in calls if futs[id(c)].done()]
            if len(done) >= num_returns:
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            concurrent.futures.wait(
                [f for f in futs.values() if not f.done()], timeout=left, return_when=concurrent.futures.FIRST_COMPLETED
            )
        ready = done[:num_returns]
        taken = {id(c) for c in ready}
        return ready, [c for c in calls if id(c) not in taken]

    def get(self, call: Any, timeout: float | None = None) -> Any:
        if isinstance(call, concurrent.futures.Future):
            try:
                return call.result(timeout)
            except concurrent.futures.TimeoutError:
                raise RequestTimedOutError(f"no answer in {timeout} s") from None
        return super().get(call, timeout)


def _produce_route(process: Any) -> tuple:
    """The channel route of a leader process's produce listener (actors/channels/produce_channel.py)."""
    return (("produce", process), "produce_endpoint")


COORDINATOR_TIMEOUT_S = 60.0  # a coordinator answers within its own append timeout; beyond, the connection is lost


def _coordinator_answer(fut: concurrent.futures.Future) -> concurrent.futures.Future:
    """The answer dict as the coordinator's handler returned it (the channel adds an empty ``records``)."""
    out: concurrent.futures.Future = concurrent.futures.Future()

    def done(f: concurrent.futures.Future) -> None:
        exc = f.exception()
        if exc is not None:
            out.set_exception(exc)
        else:
            ans = f.result()
            ans.pop("records", None)
            out.set_result(ans)

    fut.add_done_callback(done)
    return out


CHANNEL = ChannelTransport()


def data_transport(config: Any) -> RayTransport:
    """The transport of a client's produce/fetch calls: its ``data_channel`` config (tcp or ray)."""
    return CHANNEL if getattr(config, "data_channel", "tcp") == "tcp" else RAY


__all__ = ["ChannelTransport", "CHANNEL", "RAY", "data_transport"]
