"""The listener's port to the broker's actors (Ray calls live here, nothing else in the package makes one).

``Backend`` is the narrow async interface KafkaApis' handlers use; ``BrokerBackend`` serves it from inside
the broker actor's process: metadata from the broker's cached view (GCS KV), partition requests to the
replica actors the broker hosts (produce and consumer fetch over each one's client listener,
actors/channels/data_channel.py; a follower answers NOT_LEADER_OR_FOLLOWER itself, but for a KIP-392 consumer
fetch (Fetch v11+), which it serves up to its HW; a partition this broker
does not host gets NOT_LEADER_OR_FOLLOWER, or UNKNOWN_TOPIC_OR_PARTITION when no such partition exists),
and the other brokers' advertised endpoints from their ``incarnation()`` (cached per broker epoch).
Transactional calls go to this broker's transaction / group coordinator actor (the same ones rafka's Python
producer calls) when FindCoordinator names this broker for the key, else they answer NOT_COORDINATOR.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Protocol

from actors.channels.data_channel import fetch_timeout_s, loop_channel, produce_timeout_s
from protocol.channel_frames import API_FETCH, API_PRODUCE, fetch_fields, produce_fields
from protocol.errors import KafkaError, NotCoordinatorError

log = logging.getLogger("rafka.kafka_wire")

UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_CONTROLLER = 3, 6, 7, 41
NOT_COORDINATOR = NotCoordinatorError.code
GROUP_KEY, TXN_KEY = 0, 1  # FindCoordinator key types


async def _answer_or_error(fut: asyncio.Future) -> dict:
    try:
        return await fut
    except KafkaError as e:  # the replica's connection broke (NOT_LEADER_OR_FOLLOWER) or timed out: the client retries
        return {"error_code": e.code, "error_message": str(e)[:200]}


class Backend(Protocol):
    broker_id: int
    cluster_id: str

    async def metadata(self, fresh: bool = False) -> dict: ...

    async def endpoints(self, brokers: list[dict]) -> dict[int, tuple[str, int, str | None]]: ...

    async def produce(self, topic: str, partition: int, req) -> dict: ...

    async def fetch(self, topic: str, partition: int, req) -> dict: ...

    async def list_offsets(self, topic: str, partition: int, req) -> dict: ...

    async def offset_for_leader_epoch(self, topic: str, partition: int, req) -> dict: ...

    async def init_producer_id(self) -> dict: ...

    async def find_coordinator(self, key: str, key_type: int) -> dict: ...

    async def txn_call(self, transactional_id: str, req) -> dict: ...

    async def txn_offset_commit(self, group_id: str, req) -> dict: ...

    async def list_transactions(self, req) -> dict: ...

    # ---- admin (handlers/admin.py): the controller's answers, errors as Kafka codes, never raised ----
    @property
    def auto_create_topics_enable(self) -> bool: ...

    def broker_config(self) -> dict: ...

    async def auto_create_topic(self, name: str) -> dict: ...

    async def create_topics(self, topics: list[dict], timeout_ms: int, validate_only: bool) -> list[dict]: ...

    async def delete_topics(self, names: list[str], timeout_ms: int) -> list[dict]: ...

    async def create_partitions(
        self, name: str, count: int, assignment, timeout_ms: int, validate_only: bool
    ) -> dict: ...

    async def delete_records(self, topic: str, partition: int, req) -> dict: ...

    async def describe_configs(self, topic: str) -> dict: ...

    async def alter_configs(
        self, topic: str, set_: dict, delete: list[str], validate_only: bool, replace: bool = False
    ) -> dict: ...

    async def elect_leaders(self, partitions: list | None, election_type: int) -> list[dict]: ...

    async def alter_partition_reassignments(self, assignments: list[dict], timeout_ms: int) -> list[dict] | dict: ...

    async def list_partition_reassignments(self, timeout_ms: int) -> list[dict] | dict: ...

    async def controller_id(self) -> int: ...

    async def describe_log_dirs(self, partitions: list[tuple[str, int]] | None) -> list[dict]: ...

    async def alter_replica_log_dirs(self, moves: list[list]) -> list[dict]: ...

    async def group_call(self, request) -> dict: ...


class BrokerBackend:
    """``Backend`` over a running ``actors.broker.BrokerActor`` (same process, same event loop)."""

    def __init__(self, broker, advertised: tuple[str, int]):
        self.broker = broker
        self.broker_id = broker.broker_id
        self.cluster_id = broker.cluster
        self.advertised = advertised
        self._endpoints: dict[tuple[int, int], tuple[str, int] | None] = {}

    async def metadata(self, fresh: bool = False) -> dict:
        return await self.broker.metadata(fresh)

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
        """``req`` to the partition's replica actor here: produce and consumer fetch on the replica's client
        listener, the rest as Ray calls."""
        import ray

        h = self.broker.replicas.get((topic, partition))
        if h is None:
            md = await self.broker.metadata()
            exists = partition in md["topics"].get(topic, {}).get("partitions", {})
            code = NOT_LEADER_OR_FOLLOWER if exists else UNKNOWN_TOPIC_OR_PARTITION
            return {"error_code": code, "error_message": f"{topic}-{partition} is not led by broker {self.broker_id}"}
        if method == "produce" or (method == "fetch" and req.replica_id < 0):
            # the replica's client listener (actors/channels/data_channel.py): one TCP connection per replica from
            # this broker, submitted now (before this task's first suspension), so a Kafka connection's
            # produce requests reach the replica in the order they came and append in that order
            return await self._on_channel(method, req, h)
        try:
            return await getattr(h, method).remote(req)
        except ray.exceptions.RayError as e:  # the replica died or is being recreated: the client retries
            return {"error_code": NOT_LEADER_OR_FOLLOWER, "error_message": f"replica unavailable: {e}"[:200]}

    def _on_channel(self, method: str, req, h) -> Awaitable[dict]:
        io = loop_channel()
        if method == "produce":
            fut = io.submit_here(h, API_PRODUCE, produce_fields(req), req.records, produce_timeout_s(req))
        else:
            fut = io.submit_here(h, API_FETCH, fetch_fields(req), b"", fetch_timeout_s(req))
        return _answer_or_error(fut)

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

    # ---- coordinators: groups (handlers/groups.py) and transactions (handlers/txn.py) -------------------
    async def _on_coordinator(self, key_type: int, request, idle_answer: dict | None = None) -> dict:
        """A typed request (protocol/group_messages.py, protocol/txn_messages.py) to this broker's coordinator
        actor of ``key_type``, the one rafka's Python clients reach through FindCoordinator; the actor routes
        the key itself (NOT_COORDINATOR for keys of partitions it does not lead, COORDINATOR_LOAD_IN_PROGRESS
        while loading). A broker that leads no partition of the internal topic has no coordinator:
        ``idle_answer`` (ListGroups / ListTransactions: nothing) or NOT_COORDINATOR, as is a coordinator actor
        that died under the call (the broker recreates it; the client finds the coordinator again)."""
        import ray

        host = self.broker.coordinators[key_type]
        if host.gc is None and not any(lead for lead, _, _ in host.roles.values()):
            if idle_answer is not None:
                return idle_answer
            return {
                "error_code": NOT_COORDINATOR,
                "error_message": f"broker {self.broker_id} coordinates no {host.kind.what}",
            }
        try:
            actor = await host.coordinator()
            return await getattr(actor, request.METHOD).remote(request)
        except (ray.exceptions.RayError, RuntimeError) as e:
            return {"error_code": NOT_COORDINATOR, "error_message": f"coordinator unavailable: {e}"[:200]}

    async def txn_call(self, transactional_id: str, req) -> dict:
        """``req`` (a protocol.txn_messages request) on the transaction coordinator of ``transactional_id``."""
        return await self._on_coordinator(TXN_KEY, req)

    async def txn_offset_commit(self, group_id: str, req) -> dict:
        """TxnOffsetCommit on the coordinator of ``group_id`` (the group coordinator actor)."""
        return await self._on_coordinator(GROUP_KEY, req)

    async def list_transactions(self, req) -> dict:
        """ListTransactions of this broker's transaction coordinator (none when it leads no partition)."""
        return await self._on_coordinator(
            TXN_KEY, req, {"error_code": 0, "error_message": None, "transaction_states": []}
        )

    # ---- admin: the controller through the broker's link (actors/server/controller_link.py) ----------------------
    @property
    def auto_create_topics_enable(self) -> bool:
        from actors.server.auto_topic_creation import enabled

        return enabled(self.broker.config)

    def broker_config(self) -> dict:
        return dict(self.broker.config)

    async def auto_create_topic(self, name: str) -> dict:
        return await self.broker.auto_create_topic(name)

    async def _controller(self, method: str, *args, timeout_s: float = 60.0):
        """The controller's answer, or ``{error_code, error_message}``: NOT_CONTROLLER (41, the client
        retries) while no controller answers, REQUEST_TIMED_OUT (7), or the error it raised."""
        import ray

        from actors.server.controller_link import ControllerUnavailable
        from protocol.errors import KafkaError, error_response

        try:
            return await self.broker.link.call(method, *args, timeout_s=timeout_s)
        except ControllerUnavailable as e:
            return {"error_code": NOT_CONTROLLER, "error_message": f"no controller: {e}"}
        except asyncio.TimeoutError:
            return {"error_code": REQUEST_TIMED_OUT, "error_message": f"the controller's {method} timed out"}
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            code, msg = error_response(cause if isinstance(cause, KafkaError) else e)
            return {"error_code": code, "error_message": msg}

    @staticmethod
    def _each(res, items: list, key: str) -> list[dict]:
        return [{key: i, **res} for i in items] if isinstance(res, dict) else res

    async def create_topics(self, topics: list[dict], timeout_ms: int, validate_only: bool) -> list[dict]:
        res = await self._controller(
            "create_topics", topics, timeout_ms, validate_only, timeout_s=timeout_ms / 1000 + 10
        )
        return self._each(res, [t["name"] for t in topics], "name")

    async def delete_topics(self, names: list[str], timeout_ms: int) -> list[dict]:
        res = await self._controller("delete_topics", names, timeout_ms, timeout_s=timeout_ms / 1000 + 10)
        return self._each(res, names, "name")

    async def create_partitions(self, name: str, count: int, assignment, timeout_ms: int, validate_only: bool) -> dict:
        return await self._controller(
            "create_partitions", name, count, assignment, timeout_ms, validate_only, timeout_s=timeout_ms / 1000 + 10
        )

    async def delete_records(self, topic: str, partition: int, req) -> dict:
        return await self._call("delete_records", topic, partition, req)

    async def describe_configs(self, topic: str) -> dict:
        return await self._controller("describe_configs", topic)

    async def alter_configs(
        self, topic: str, set_: dict, delete: list[str], validate_only: bool, replace: bool = False
    ) -> dict:
        """``replace``: legacy AlterConfigs' replace-all, done by the controller in one write."""
        return await self._controller("alter_configs", topic, set_, delete, validate_only, replace)

    async def elect_leaders(self, partitions: list | None, election_type: int) -> list[dict]:
        res = await self._controller("elect_leaders", partitions, election_type)
        if isinstance(res, dict):  # the controller did not answer: every partition asked gets its error
            return [{"topic": t, "partition": p, **res} for t, p in (partitions or [])]
        return res

    async def alter_partition_reassignments(self, assignments: list[dict], timeout_ms: int) -> list[dict] | dict:
        """KIP-455 on the controller: one result per entry, or ``{error_code, error_message}`` when the controller
        did not answer within ``timeout_ms`` (REQUEST_TIMED_OUT) or at all (NOT_CONTROLLER)."""
        return await self._controller("alter_partition_reassignments", assignments, timeout_s=timeout_ms / 1000)

    async def list_partition_reassignments(self, timeout_ms: int) -> list[dict] | dict:
        return await self._controller("list_partition_reassignments", timeout_s=timeout_ms / 1000)

    async def describe_log_dirs(self, partitions: list[tuple[str, int]] | None) -> list[dict]:
        """This broker's log dirs (actors/broker.py ``describe_log_dirs``)."""
        return await self.broker.describe_log_dirs(None if partitions is None else [list(k) for k in partitions])

    async def alter_replica_log_dirs(self, moves: list[list]) -> list[dict]:
        """``[[log dir, topic, partition], ...]`` moved on this broker (actors/broker.py ``alter_replica_log_dirs``)."""
        return await self.broker.alter_replica_log_dirs(moves)

    async def controller_id(self) -> int:
        res = await self._controller("describe_controller", timeout_s=5)
        return int(res.get("host_broker_id", -1)) if not res.get("error_code") else -1

    async def group_call(self, request) -> dict:
        """A typed group request (protocol/group_messages.py) to this broker's group coordinator actor."""
        from protocol.group_messages import ListGroupsRequest

        idle = {"error_code": 0, "groups": []} if isinstance(request, ListGroupsRequest) else None
        return await self._on_coordinator(GROUP_KEY, request, idle)
