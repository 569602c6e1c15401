"""The broker's side of coordination: one coordinator actor per kind hosted by the broker, the group
coordinator (actors/group_coordinator.py over ``__consumer_offsets``, FindCoordinator key type 0) and the
transaction coordinator (actors/txn_coordinator.py over ``__transaction_state``, key type 1), told in
LeaderAndIsr order which partitions this broker leads (``notify``); FindCoordinator (``coordinator_answer``,
pure) and the internal topics' creation on first use. Called by actors/broker.py through
:class:`CoordinatorBroker`, the little of the broker it needs. docs/internals.md ("Broker") has the rules.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from ray.exceptions import RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.group.records import partition_for
from actors.group.service import offsets_partitions, offsets_topic_spec
from actors.group_coordinator import RemoteGroupCoordinator
from actors.server import server_log
from actors.server.controller_link import ControllerUnavailable
from actors.txn import service as txn_service
from actors.txn_coordinator import RemoteTxnCoordinator
from protocol.errors import CoordinatorNotAvailableError, InvalidRequestError, TopicAlreadyExistsError
from protocol.names import OFFSETS_TOPIC, RAY_NAMESPACE, TXN_TOPIC, group_coordinator_name, txn_coordinator_name

log = logging.getLogger("rafka.broker")

NOT_AVAILABLE = CoordinatorNotAvailableError.code
GROUP_KEY, TXN_KEY = 0, 1  # FindCoordinator key types


class ControllerCalls(Protocol):
    async def call(self, method: str, *args: Any, timeout_s: float = 60.0) -> Any: ...


class CoordinatorBroker(Protocol):
    """What a coordinator host uses of its broker (actors/broker.py's BrokerActor), so neither imports the other."""

    cluster: str
    broker_id: int
    node_id: Any
    config: dict
    data_dir: str
    link: ControllerCalls

    async def metadata(self) -> dict: ...

    async def _fresh_metadata(self) -> dict: ...


@dataclass(frozen=True)
class CoordinatorKind:
    key_type: int
    topic: str
    actor: Any  # the ray.remote class
    name: Callable[[str, int], str]
    partitions: Callable[[dict | None], int]
    topic_spec: Callable[[dict | None, int], dict]
    what: str  # "group" / "transactional id", for messages


GROUPS = CoordinatorKind(
    GROUP_KEY,
    OFFSETS_TOPIC,
    RemoteGroupCoordinator,
    group_coordinator_name,
    offsets_partitions,
    offsets_topic_spec,
    "group",
)
TXNS = CoordinatorKind(
    TXN_KEY,
    TXN_TOPIC,
    RemoteTxnCoordinator,
    txn_coordinator_name,
    txn_service.txn_partitions,
    txn_service.txn_topic_spec,
    "transactional id",
)
KINDS = {GROUP_KEY: GROUPS, TXN_KEY: TXNS}
KIND_BY_TOPIC = {k.topic: k for k in KINDS.values()}  # internal topic -> its coordinator kind


def coordinator_answer(
    cluster: str, code: int, msg: str | None = None, broker_id: int = -1, partition: int = -1, kind=None
) -> dict:
    """A FindCoordinator answer: ``{error_code, error_message, broker_id, partition, coordinator}``."""
    name = (kind or GROUPS).name
    return {
        "error_code": code,
        "error_message": msg,
        "broker_id": broker_id,
        "partition": partition,
        "coordinator": name(cluster, broker_id) if broker_id >= 0 else None,
    }


def offsets_partition_state(topic: dict | None, p: int) -> dict | None:
    """Partition ``p`` of an internal topic's metadata (keys may be ints or strings)."""
    parts = (topic or {}).get("partitions", {})
    return parts.get(p, parts.get(str(p)))


class CoordinatorHost:
    def __init__(self, broker: CoordinatorBroker, kind: CoordinatorKind = GROUPS):
        self.b, self.kind = broker, kind
        self.gc = None  # the group coordinator actor (created on first need)
        self._gc_lock: asyncio.Lock | None = None
        self.roles: dict[int, tuple[bool, int | None, object]] = {}  # p -> (leader?, epoch, replica)
        self._create_lock: asyncio.Lock | None = None
        self._creating: asyncio.Task | None = None  # the internal topic's creation under way

    async def coordinator(self):
        """This broker's coordinator of the kind; (re)created on demand, then told every partition it leads."""
        if self._gc_lock is None:
            self._gc_lock = asyncio.Lock()
        async with self._gc_lock:
            if self.gc is not None:
                return self.gc
            b = self.b
            name = self.kind.name(b.cluster, b.broker_id)
            for _ in range(200):
                try:
                    gc = self.kind.actor.options(
                        name=name,
                        namespace=RAY_NAMESPACE,
                        num_cpus=0,
                        max_concurrency=1000,
                        scheduling_strategy=NodeAffinitySchedulingStrategy(b.node_id, soft=False),
                    ).remote(b.cluster, b.broker_id, b.config, server_log.broker_log(b.data_dir, b.broker_id))
                    break
                except ValueError:  # a previous incarnation still holds the name for a moment
                    await asyncio.sleep(0.05)
            else:
                raise RuntimeError(f"coordinator name {name} stayed taken")
            leads = [(p, e, h) for p, (lead, e, h) in self.roles.items() if lead]
            await asyncio.gather(*(gc.on_elected.remote(p, e, h) for p, e, h in leads))
            self.gc = gc
            return gc

    async def notify(self, p: int, leader: bool, epoch: int | None, replica) -> None:
        """Tell the coordinator that this broker leads / no longer leads partition ``p`` of its topic."""
        if leader:
            self.roles[p] = (True, epoch, replica)
        else:
            self.roles.pop(p, None)
            if self.gc is None:
                return  # no coordinator yet: it has nothing to unload (a new one learns only our leads)
        for _ in range(3):
            try:
                gc = await self.coordinator()
                if leader:
                    await gc.on_elected.remote(p, epoch, replica)
                else:
                    await gc.on_resigned.remote(p, epoch)
                return
            except RayActorError as e:  # it died alone: a new one is told every partition we lead
                log.warning(
                    "broker %s: %s coordinator gone (%s), recreating",
                    self.b.broker_id,
                    self.kind.what,
                    type(e).__name__,
                )
                self.gc = None
            except (RuntimeError, RayTaskError) as e:
                log.warning("broker %s: coordinator not told about %s-%s: %s", self.b.broker_id, self.kind.topic, p, e)
                return

    async def ensure_topic(self) -> dict:
        """Create the kind's internal topic (once; concurrent finders wait for the same creation)."""
        if self._create_lock is None:
            self._create_lock = asyncio.Lock()
        b, topic = self.b, self.kind.topic
        async with self._create_lock:
            md = await b._fresh_metadata()
            if topic in md["topics"]:
                return {"error_code": 0, "error_message": None}
            alive = sum(1 for x in md["brokers"] if x.get("alive"))
            spec = self.kind.topic_spec(b.config, alive)
            try:
                res = (await b.link.call("create_topics", [spec], 30000, timeout_s=40))[0]
            except (ControllerUnavailable, asyncio.TimeoutError):
                return {"error_code": NOT_AVAILABLE, "error_message": "controller unavailable"}
            log.info(
                "broker %s: created %s (%s partitions, rf %s): %s",
                b.broker_id,
                topic,
                spec["num_partitions"],
                spec["replication_factor"],
                res.get("error_message"),
            )
            await b._fresh_metadata()
            if res["error_code"] in (0, TopicAlreadyExistsError.code):  # another broker was first
                return {"error_code": 0, "error_message": None}
            return {"error_code": res["error_code"], "error_message": res.get("error_message")}

    def _create_in_background(self) -> str:
        """Start the internal topic's creation unless it is under way (``ensure_topic`` checks fresh metadata
        first, so a later call after a finished one costs one metadata read); what the answer says meanwhile."""
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self.ensure_topic())
            self._creating.add_done_callback(_log_failure)
        return f"{self.kind.topic} is being created"

    async def find_coordinator(self, key: str) -> dict:
        """FindCoordinator of ``key`` (a group id or a transactional id): the leader of its partition."""
        b, kind, name = self.b, self.kind, self.kind.topic

        def answer(code, msg=None, broker_id=-1, partition=-1):
            return coordinator_answer(b.cluster, code, msg, broker_id, partition, kind)

        if not isinstance(key, str) or not key:
            return answer(InvalidRequestError.code, f"the {kind.what} must be a non-empty string")
        md = await b.metadata()
        topic = md["topics"].get(name)
        if topic is None:
            return answer(NOT_AVAILABLE, self._create_in_background())
        n = kind.partitions(b.config)
        p = partition_for(key, n)
        state = offsets_partition_state(topic, p)
        if state is None or state.get("leader", -1) < 0:
            state = offsets_partition_state((await b._fresh_metadata())["topics"].get(name), p)
        if state is None:
            return answer(NOT_AVAILABLE, f"{name} has no partition {p} ({n} partitions configured)")
        if state.get("leader", -1) < 0:
            return answer(NOT_AVAILABLE, f"{name}-{p} has no leader", partition=p)
        return answer(0, None, state["leader"], p)


def _log_failure(task: asyncio.Task) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    res = task.result() if exc is None else {"error_code": -1, "error_message": repr(exc)}
    if res["error_code"]:
        log.warning("internal topic creation failed: %s", res["error_message"])


async def find_coordinator(hosts: dict[int, CoordinatorHost], key: str, key_type: int = GROUP_KEY) -> dict:
    """The broker's FindCoordinator: key type 0 (group) or 1 (transaction)."""
    host = hosts.get(key_type) if isinstance(key_type, int) else None
    if host is None:
        return {
            **coordinator_answer(host_cluster(hosts), InvalidRequestError.code),
            "error_message": f"key_type {key_type!r}: 0 (group) or 1 (transaction)",
        }
    return await host.find_coordinator(key)


def host_cluster(hosts: dict[int, CoordinatorHost]) -> str:
    return next(iter(hosts.values())).b.cluster
