"""The listener's port to the broker's actors (Ray calls live here, nothing else in the package makes one).

``Backend`` is the narrow async interface KafkaApis' handlers use; ``BrokerBackend`` serves it from inside
the broker actor's process: metadata from the broker's cached view (GCS KV), partition requests to the
replica actors the broker hosts (a follower answers NOT_LEADER_OR_FOLLOWER itself; a partition this broker
does not host gets NOT_LEADER_OR_FOLLOWER, or UNKNOWN_TOPIC_OR_PARTITION when no such partition exists),
and the other brokers' advertised endpoints from their ``incarnation()`` (cached per broker epoch).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

log = logging.getLogger("rafka.kafka_wire")

UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 3, 6
NOT_COORDINATOR = 16


class Backend(Protocol):
    broker_id: int
    cluster_id: str

    async def metadata(self) -> dict: ...

    async def endpoints(self, brokers: list[dict]) -> dict[int, tuple[str, int, str | None]]: ...

    async def produce(self, topic: str, partition: int, req) -> dict: ...

    async def fetch(self, topic: str, partition: int, req) -> dict: ...

    async def list_offsets(self, topic: str, partition: int, req) -> dict: ...

    async def offset_for_leader_epoch(self, topic: str, partition: int, req) -> dict: ...

    async def init_producer_id(self) -> dict: ...

    async def find_coordinator(self, key: str, key_type: int) -> dict: ...

    async def group_call(self, request) -> dict: ...


class BrokerBackend:
    """``Backend`` over a running ``actors.broker.BrokerActor`` (same process, same event loop)."""

    def __init__(self, broker, advertised: tuple[str, int]):
        self.broker = broker
        self.broker_id = broker.broker_id
        self.cluster_id = broker.cluster
        self.advertised = advertised
        self._endpoints: dict[tuple[int, int], tuple[str, int] | None] = {}

    async def metadata(self) -> dict:
        return await self.broker.metadata()

    async def _endpoint_of(self, b: dict) -> tuple[str, int] | None:
        import ray

        from protocol.names import RAY_NAMESPACE, broker_name

        key = (b["id"], b.get("epoch", -1))
        if key in self._endpoints:
            return self._endpoints[key]
        try:
            h = ray.get_actor(broker_name(self.cluster_id, b["id"]), namespace=RAY_NAMESPACE)
            inc: dict = await asyncio.wait_for(h.incarnation.remote(), 5)
        except (ValueError, asyncio.TimeoutError, ray.exceptions.RayError) as e:
            log.info("kafka listener: no endpoint of broker %s yet: %s", b["id"], e)
            return None
        ep = (str(inc["listener"][0]), int(inc["listener"][1])) if inc.get("listener") else None
        if inc.get("broker_epoch") == key[1]:
            self._endpoints[key] = ep
        return ep

    async def endpoints(self, brokers: list[dict]) -> dict[int, tuple[str, int, str | None]]:
        out: dict[int, tuple[str, int, str | None]] = {}
        others = [b for b in brokers if b["id"] != self.broker_id and b.get("alive", True)]
        eps = await asyncio.gather(*(self._endpoint_of(b) for b in others))
        for b, ep in zip(others, eps):
            if ep is not None:
                out[b["id"]] = (ep[0], ep[1], b.get("rack"))
        mine = next((b for b in brokers if b["id"] == self.broker_id), {})
        out[self.broker_id] = (self.advertised[0], self.advertised[1], mine.get("rack"))
        return out

    async def _call(self, method: str, topic: str, partition: int, req) -> dict:
        import ray

        h = self.broker.replicas.get((topic, partition))
        if h is None:
            md = await self.broker.metadata()
            exists = partition in md["topics"].get(topic, {}).get("partitions", {})
            code = NOT_LEADER_OR_FOLLOWER if exists else UNKNOWN_TOPIC_OR_PARTITION
            return {"error_code": code, "error_message": f"{topic}-{partition} is not led by broker {self.broker_id}"}
        try:
            return await getattr(h, method).remote(req)
        except ray.exceptions.RayError as e:  # the replica died or is being recreated: the client retries
            return {"error_code": NOT_LEADER_OR_FOLLOWER, "error_message": f"replica unavailable: {e}"[:200]}

    async def produce(self, topic, partition, req) -> dict:
        return await self._call("produce", topic, partition, req)

    async def fetch(self, topic, partition, req) -> dict:
        return await self._call("fetch", topic, partition, req)

    async def list_offsets(self, topic, partition, req) -> dict:
        return await self._call("list_offsets", topic, partition, req)

    async def offset_for_leader_epoch(self, topic, partition, req) -> dict:
        return await self._call("offset_for_leader_epoch", topic, partition, req)

    async def init_producer_id(self) -> dict:
        return await self.broker.init_producer_id()

    async def find_coordinator(self, key: str, key_type: int) -> dict:
        return await self.broker.find_coordinator(key, key_type)

    async def group_call(self, request) -> dict:
        """A typed group request (protocol/group_messages.py) to this broker's group coordinator actor, the
        one rafka's Python clients reach through FindCoordinator. A broker that leads no ``__consumer_offsets``
        partition has no coordinator: NOT_COORDINATOR (ListGroups: no groups), as does a coordinator actor
        that died under the call (the broker recreates it; the client finds the coordinator again)."""
        import ray

        from protocol.group_messages import ListGroupsRequest

        host = self.broker.coordinators[0]  # FindCoordinator key type 0: groups
        if host.gc is None and not any(lead for lead, _, _ in host.roles.values()):
            if isinstance(request, ListGroupsRequest):
                return {"error_code": 0, "groups": []}
            return {"error_code": NOT_COORDINATOR, "error_message": f"broker {self.broker_id} coordinates no group"}
        try:
            gc = await host.coordinator()
            return await getattr(gc, request.METHOD).remote(request)
        except (ray.exceptions.RayError, RuntimeError) as e:
            return {"error_code": NOT_COORDINATOR, "error_message": f"group coordinator unavailable: {e}"[:200]}
