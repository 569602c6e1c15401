"""A replica host: up to ``replica.host.max.partitions`` replicas of one broker in one Ray actor process
(``ReplicaHost``), each a plain :class:`~actors.replica.Replica` in a slot on the host's one event loop, and
:class:`HostedReplica`, the ``(host, slot)`` handle that stands where a ``ReplicaActor`` handle stood. Created and
supervised by the broker (actors/server/replica_hosts.py); it calls actors/replica.py and the server log.
Why, the handle, faults and logs: docs/internals.md, "Replica hosts" and "Replication: module notes"."""

from __future__ import annotations

import asyncio
import inspect
import os
from typing import Any

import ray

from actors.replica import Replica
from actors.server import server_log
from protocol import errors as E

HOST_CLASS = "ReplicaHost"
REPLICA_CLASS = "ReplicaActor"
# the calls a HostedReplica may make: the replica's public methods
REPLICA_METHODS = frozenset(n for n in dir(Replica) if not n.startswith("_") and callable(getattr(Replica, n)))


class _HostedMethod:
    __slots__ = ("host", "slot", "name", "opts")

    def __init__(self, host: Any, slot: int, name: str, opts: dict | None = None):
        self.host, self.slot, self.name, self.opts = host, slot, name, opts

    def options(self, **opts: Any) -> _HostedMethod:
        return _HostedMethod(self.host, self.slot, self.name, {**(self.opts or {}), **opts})

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        if self.name == "ping":  # the process's liveness, answered from the host's own thread
            method, args = self.host.ping, ()
        else:
            method, args = self.host.call, (self.slot, self.name, *args)
        if self.opts:
            method = method.options(**self.opts)
        return method.remote(*args, **kwargs)


class HostedReplica:
    """The handle of one replica in a ReplicaHost: used as the ActorHandle of a ReplicaActor is."""

    __slots__ = ("host", "slot")

    def __init__(self, host: Any, slot: int):
        self.host, self.slot = host, int(slot)

    def __getattr__(self, name: str) -> _HostedMethod:
        if name.startswith("_") or name not in REPLICA_METHODS:
            raise AttributeError(f"a hosted replica has no method {name!r}")
        return _HostedMethod(self.host, self.slot, name)

    def __reduce__(self):
        return (HostedReplica, (self.host, self.slot))

    @property
    def channel_key(self) -> tuple[bytes, int]:
        """What tells one replica's client connection from another's (one host, many replicas)."""
        return (self.host._actor_id.binary(), self.slot)

    @property
    def process_key(self) -> bytes:
        """What tells one replica process from another: the host's (its replicas share it)."""
        return self.host._actor_id.binary()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostedReplica) and other.channel_key == self.channel_key

    def __hash__(self) -> int:
        return hash(self.channel_key)

    def __repr__(self) -> str:
        return f"HostedReplica({self.host._actor_id.hex()[:12]}, slot={self.slot})"


def process_handle(handle: Any) -> Any:
    """The actor whose process runs ``handle``'s replica (the host for a hosted one)."""
    return handle.host if isinstance(handle, HostedReplica) else handle


def process_class(handle: Any) -> str:
    """The actor class in that process's Ray worker title."""
    return HOST_CLASS if isinstance(handle, HostedReplica) else REPLICA_CLASS


class _Host:
    """The actor class behind ``ReplicaHost`` (plain, so its logic is testable without Ray)."""

    def __init__(self) -> None:
        self.slots: dict[int, Replica] = {}
        self.ended: set[int] = set()
        self._shutdown: asyncio.Future | None = None

    async def call(self, slot: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """``method`` of the replica in ``slot``; ``bind`` creates it (once per slot)."""
        if method not in REPLICA_METHODS:
            return {"error_code": E.InvalidRequestError.code, "error_message": f"no replica method {method!r}"}
        r = self.slots.get(slot)
        if r is None:
            if method != "bind" or slot in self.ended:
                return self._gone(slot, method)
            r = self.slots[slot] = Replica()
            r.hosted = True
        elif r.bound:  # this call's lines (and its tasks', servers') name its replica
            server_log.set_task_context(r.log_context)
        out = getattr(r, method)(*args, **kwargs)
        if inspect.isawaitable(out):
            out = await out
        if method == "bind" and isinstance(out, dict) and out.get("error_code") and self.slots.get(slot) is r:
            self._end(slot)  # a refused bind released what it took: the slot is no replica
        return out

    def _gone(self, slot: int, method: str) -> Any:
        if method == "supervise":
            return {"reason": "stopped"}
        if method == "stop":
            return {"error_code": 0, "error_message": None}
        return {
            "error_code": E.NotLeaderOrFollowerError.code,
            "error_message": f"replica slot {slot} is not in this host (pid {os.getpid()}): stopped or never bound",
        }

    def _end(self, slot: int) -> Replica | None:
        self.ended.add(slot)
        return self.slots.pop(slot, None)

    async def drop(self, slot: int) -> dict:
        """End one replica: stop it (answer its parked requests, close its log, release its directory's
        lock) if it still runs, and forget the slot for good."""
        r = self._end(slot)
        res: dict = {"error_code": 0, "error_message": None}
        if r is not None and r.bound:
            res = await r.stop()
        return {**res, "partitions": len(self.slots)}

    async def supervise(self) -> dict:
        """The broker's long-poll of the host process: pending while it runs (raises at the caller when the
        process dies), answered by ``shutdown``."""
        if self._shutdown is None:
            self._shutdown = asyncio.get_running_loop().create_future()
        return await asyncio.shield(self._shutdown)

    async def preload(self, cluster: str, broker_id: int) -> dict:
        """The classes a bound replica calls, loaded while the host waits for its first replica
        (``ReplicaStatus.preload``)."""
        return await Replica().preload(cluster, broker_id)

    def describe(self) -> dict:
        """``{pid, partitions: [topic-partition of each bound replica], slots}``."""
        bound = sorted(r.tp for r in self.slots.values() if r.bound)
        return {"pid": os.getpid(), "partitions": bound, "slots": sorted(self.slots)}

    async def shutdown(self) -> dict:
        """Stop every replica (closing its log, no delete); answers the broker's ``supervise``."""
        res = [await self.drop(slot) for slot in list(self.slots)]
        if self._shutdown is not None and not self._shutdown.done():
            self._shutdown.set_result({"reason": "shutdown"})
        return {"error_code": 0, "stopped": len(res)}

    @ray.method(concurrency_group="liveness")
    async def ping(self) -> int:
        """Liveness of the process (its pid), from its own thread: SIGSTOP stops every thread."""
        return os.getpid()


@ray.remote(concurrency_groups={"liveness": 1})
class ReplicaHost(_Host):
    """Up to ``replica.host.max.partitions`` replicas of one broker in one Ray worker (``ray::ReplicaHost``)."""
