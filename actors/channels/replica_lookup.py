"""Ray calls that find actors: ``replica_handle`` (blocking) and ``replica_handle_async`` ask the broker that hosts
a replica for its handle (replicas have no Ray names) and raise ``ValueError`` when there is none; also brokers'
and named actors' handles. Used by the clients, the replicas' fetchers and write path, and the coordinators;
``transport`` is the clients' seam (rafka/transport.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from protocol.names import RAY_NAMESPACE, broker_name


def _missing(cluster: str, topic: str, partition: int, broker_id: int, why: str) -> ValueError:
    return ValueError(f"no replica of {topic}-{partition} on broker {broker_id} of cluster {cluster}: {why}")


def _ops(transport: Any) -> tuple:
    """``(get_actor, call, get)`` of ``transport``, or Ray's own."""
    if transport is not None:
        return transport.get_actor, transport.call, transport.get
    import ray

    def get_actor(name):
        return ray.get_actor(name, namespace=RAY_NAMESPACE)

    def call(actor, method, *args):
        return getattr(actor, method).remote(*args)

    return get_actor, call, ray.get


def replica_handles(cluster: str, keys, transport: Any = None, timeout_s: float = 10.0) -> dict:
    """The replica actors of ``keys`` ``(topic, partition, broker id)`` (blocking): every broker call is in
    flight at once, then each is waited for. A key whose broker is unknown, does not answer or hosts no such
    replica is left out: :func:`replica_handle` says why for one."""
    from ray.exceptions import RayError

    get_actor, call, get = _ops(transport)
    calls = []
    for key in keys:
        topic, partition, broker_id = key
        try:
            calls.append(
                (key, call(get_actor(broker_name(cluster, broker_id)), "replica_handle", topic, int(partition)))
            )
        except (ValueError, RayError):
            continue
    out = {}
    for key, ref in calls:
        try:
            h = get(ref, timeout=timeout_s)
        except (TimeoutError, RayError):
            continue
        if h is not None:
            out[key] = h
    return out


def replica_handle(
    cluster: str, topic: str, partition: int, broker_id: int, transport: Any = None, timeout_s: float = 10.0
) -> Any:
    """The actor of broker ``broker_id``'s replica of ``topic``-``partition`` (blocking); ValueError if none."""
    from ray.exceptions import RayError

    get_actor, call, get = _ops(transport)
    try:
        h = get(
            call(get_actor(broker_name(cluster, broker_id)), "replica_handle", topic, int(partition)), timeout=timeout_s
        )
    except RayError as e:
        raise _missing(cluster, topic, partition, broker_id, f"broker unavailable ({type(e).__name__})") from None
    if h is None:
        raise _missing(cluster, topic, partition, broker_id, "not hosted")
    return h


async def named_actor_async(name: str) -> Any:
    """The named actor ``name`` (rafka's namespace), looked up off the event loop: the name lookup is a blocking
    GCS call, and a process's first handle of a class imports the class's module (Ray loads an actor's class per
    process). ValueError if there is none."""
    import ray

    return await asyncio.to_thread(ray.get_actor, name, namespace=RAY_NAMESPACE)


async def broker_handle_async(cluster: str, broker_id: int) -> Any:
    """Broker ``broker_id``'s actor (``named_actor_async``; the first one imports ``actors.broker``)."""
    return await named_actor_async(broker_name(cluster, broker_id))


async def replica_handle_async(
    cluster: str, topic: str, partition: int, broker_id: int, timeout_s: float = 10.0, broker: Any = None
) -> Any:
    """``replica_handle`` for an actor's event loop (the name lookup runs off the loop; ``broker``: the broker's
    handle when the caller has it, which spares the lookup)."""
    from ray.exceptions import RayError

    try:
        if broker is None:
            broker = await broker_handle_async(cluster, broker_id)
        h: Any = await asyncio.wait_for(broker.replica_handle.remote(topic, int(partition)), timeout_s)
    except (RayError, asyncio.TimeoutError) as e:
        raise _missing(cluster, topic, partition, broker_id, f"broker unavailable ({type(e).__name__})") from None
    if h is None:
        raise _missing(cluster, topic, partition, broker_id, "not hosted")
    return h
