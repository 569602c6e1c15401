"""The client's seam to the server actors: the few operations the Sender, Fetcher and group client use.

A client talks to an *endpoint* (a replica, broker or group-coordinator actor) by name, starts calls on
it that return at once with a *call* handle, and later waits for calls or takes their results:

- ``get_actor(name)``: the endpoint registered under ``name``; ``ValueError`` when none is (as
  ``ray.get_actor``);
- ``call(endpoint, method, *args, **kw)``: start ``endpoint.method(*args, **kw)``; never blocks;
- ``future(call)``: a ``concurrent.futures.Future`` of the call (``add_done_callback``, ``result``);
- ``wait(calls, num_returns, timeout)``: ``(ready, not_ready)`` as ``ray.wait``;
- ``get(call, timeout)``: the call's result, or the error it failed with (a dead endpoint raises Ray's
  ``RayActorError`` family, a timeout ``GetTimeoutError``, an error raised by the endpoint itself
  arrives as Ray surfaces it); callers classify these exactly as before;
- ``available()``: False once the transport is shut down (Ray: ``ray.is_initialized()``);
- ``sync_io(timeout_s)``: until the calls started so far are on their way (the TCP channel's I/O
  thread has written them; Ray's calls are at once);
- ``warm(replica)``: open now what a produce to the replica will go on (the TCP channel's connection to its
  process's produce listener); Ray's calls need nothing.

:class:`RayTransport` is the default and does exactly what the clients did inline before (same calls,
same namespace, same timeouts). Unit tests pass an in-process fake (``tests/unit/fake_transport.py``).
Ray is imported inside the methods: this module imports without it.
"""

from __future__ import annotations

from typing import Any, Protocol


class Transport(Protocol):
    def get_actor(self, name: str) -> Any: ...

    def call(self, endpoint: Any, method: str, *args: Any, **kw: Any) -> Any: ...

    def future(self, call: Any) -> Any: ...

    def wait(self, calls: list, num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]: ...

    def get(self, call: Any, timeout: float | None = None) -> Any: ...

    def available(self) -> bool: ...

    def sync_io(self, timeout_s: float) -> bool: ...

    def produce_many(self, items: list[tuple[Any, str, int, Any]]) -> list: ...

    def warm(self, replica: Any) -> bool: ...


class RayTransport:
    """Endpoints are Ray actors in the ``rafka`` namespace; calls are ObjectRefs."""

    __slots__ = ()
    # arguments over Ray's inline limit (100 KB) go through the object store: callers keep calls under it
    inline_calls_only = True

    def get_actor(self, name: str) -> Any:
        import ray

        from protocol.names import RAY_NAMESPACE

        return ray.get_actor(name, namespace=RAY_NAMESPACE)

    def call(self, endpoint: Any, method: str, *args: Any, **kw: Any) -> Any:
        return getattr(endpoint, method).remote(*args, **kw)

    def future(self, call: Any) -> Any:
        return call.future()

    def wait(self, calls: list, num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]:
        import ray

        return ray.wait(calls, num_returns=num_returns, timeout=timeout)

    def get(self, call: Any, timeout: float | None = None) -> Any:
        import ray

        return ray.get(call, timeout=timeout)

    def available(self) -> bool:
        import ray

        return ray.is_initialized()

    def sync_io(self, timeout_s: float) -> bool:
        """Until the calls started so far are on their way: Ray's core worker sends them on its own threads."""
        return True

    def produce_many(self, items: list[tuple[Any, str, int, Any]]) -> list:
        """One Sender round's produce calls, ``(leader replica, topic, partition, ProduceRequest)`` each: one
        call per partition here; ChannelTransport sends one request per leader process (rafka/channel.py)."""
        return [self.call(handle, "produce", req) for handle, _topic, _partition, req in items]

    def warm(self, replica: Any) -> bool:
        """False: a Ray call needs no connection opened ahead (ChannelTransport opens one)."""
        return False


RAY = RayTransport()
