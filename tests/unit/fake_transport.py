"""An in-process stand-in for the Ray transport (``rafka/transport.py``): the client's Sender, Fetcher and
group client run against it with no Ray cluster.

- :class:`FakeCluster` holds brokers and partitions. Each partition replica is a :class:`FakeReplica`
  endpoint over a real ``storage.log.Log`` on a temp dir: a leader append goes through
  ``Log.append_as_leader`` (the LogValidator and producer-state checks), a fetch reads whole batches up to
  the high watermark (the HW follows the log end unless ``hw_held``), ListOffsets answers the log start /
  HW. Requests and answers are the replica actor's (one ``protocol.messages`` request in, the response's
  dict out; anything else answers INVALID_REQUEST).
- :class:`FakeTransport` implements the Transport protocol: calls run in-process; a
  ``concurrent.futures.Future`` stands for the ObjectRef.
- :class:`FakeMetadata` is the real ``ClusterMetadata`` with its GCS-KV reads answered
  by the fake cluster (counted in ``refreshes``); its replica lookups go through the fake transport, so
  leader lookup, handle caching and staleness are the real code.

Faults are injected per endpoint and method (``FakeReplica.inject(method, *faults)``, FIFO):

- ``("error", code)``: the endpoint answers that Kafka error without doing anything;
- ``("dead",)``: the call fails as a dead actor does under Ray (``ActorDiedError``, a ``RayActorError``:
  the exception type RayTransport surfaces), without running;
- ``("lost",)``: the call runs (e.g. the records are appended), then the answer is lost the same way;
- ``("hang",)``: the call never completes (``get`` with a timeout raises Ray's ``GetTimeoutError``);
- ``("slow", seconds)``: the call runs after ``seconds`` on a timer thread.

:class:`FakeGroupCoordinator` is the group coordinator actor's shell in miniature over the real pure
``GroupCoordinatorShard`` (actors/group/shard.py): each request runs the shard handler with ``now_ms`` and
replays its records; a parked JoinGroup/SyncGroup keeps its call pending until a completion answers it;
the shard's timers fire whenever a client waits (``FakeTransport.wait``). Durable records are kept in
``records`` instead of being appended to ``__consumer_offsets``.

:class:`FakeTxnCoordinator` (``FakeCluster.add_txn_coordinator``) is the transaction coordinator in miniature
over the real ``TxnCoordinatorShard`` (actors/txn/shard.py): InitProducerId, AddOffsetsToTxn (the group's
``__consumer_offsets`` partition, partition 0 here, joins the transaction) and EndTxn (the markers are taken as
written at once). With one, the group coordinator's TxnOffsetCommit first checks the producer and the offsets
partition as the ``__consumer_offsets`` leader's KIP-890 verification does (``TxnCoordinatorShard.verify``).
Every request each coordinator took is kept in its ``requests``.

Ray's exception classes are imported from ``ray.exceptions`` only; nothing here starts or talks to Ray.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
import time
from typing import Any

from ray.exceptions import ActorDiedError, GetTimeoutError

from actors.group.classic_group import GroupCoordinatorConfig, Pending
from actors.group.shard import GroupCoordinatorShard
from actors.txn.shard import TxnCoordinatorShard
from protocol.clock import now_ms
from protocol.errors import (
    FencedLeaderEpochError,
    KafkaError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    for_code,
)
from protocol.group_messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from protocol.messages import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
    check_request,
)
from protocol.names import OFFSETS_TOPIC, replica_name
from protocol.names import broker_name as _broker_name
from protocol.txn_messages import AddOffsetsToTxnRequest, EndTxnRequest, InitProducerIdRequest, TxnOffsetCommitRequest
from rafka.metadata import ClusterMetadata, TopicMetadata
from rafka.structs import TopicPartition
from storage.log import Log
from storage.records import RecordBatchBuilder, decode_records

EARLIEST, LATEST = -2, -1


def batch(values, keys=None, ts: int | None = None) -> bytes:
    """A RecordBatch v2 (no producer id) holding ``values``."""
    b = RecordBatchBuilder()
    t = now_ms() if ts is None else ts
    for i, v in enumerate(values):
        assert b.append(t + i, None if keys is None else keys[i], v)
    return b.build()


class FakeCall:
    """One call in flight: the stand-in for an ObjectRef."""

    __slots__ = ("endpoint", "method", "args", "kw", "fut", "sent")

    def __init__(self, endpoint, method: str, args, kw):
        self.endpoint, self.method, self.args, self.kw = endpoint, method, args, kw
        self.fut: cf.Future = cf.Future()
        self.sent = time.monotonic()


class Endpoint:
    """Something a client calls (replica, broker, coordinator): fault queue, liveness, call log."""

    def __init__(self, cluster: "FakeCluster", label: str):
        self.cluster = cluster
        self.label = label
        self.dead = False
        self.faults: list[tuple[str, tuple]] = []

    def inject(self, method: str, *faults: tuple) -> None:
        with self.cluster.lock:
            self.faults.extend((method, f) for f in faults)

    def take_fault(self, method: str) -> tuple | None:
        for i, (m, f) in enumerate(self.faults):
            if m == method:
                del self.faults[i]
                return f
        return None


class FakeReplica(Endpoint):
    """One partition replica over a real Log (see the module docstring)."""

    def __init__(self, cluster: "FakeCluster", tp: TopicPartition, broker_id: int, directory: str):
        super().__init__(cluster, f"{tp.topic}-{tp.partition}-b{broker_id}")
        self.tp, self.broker_id = tp, broker_id
        self.log = Log(directory)
        self.role = "follower"
        self.leader_epoch = 0
        self.hw_held = False

    def _check_leader(self, epoch: int) -> KafkaError | None:
        if epoch is not None and epoch >= 0:
            if epoch < self.leader_epoch:
                return FencedLeaderEpochError(f"request epoch {epoch} < leader epoch {self.leader_epoch}")
            if epoch > self.leader_epoch:
                return UnknownLeaderEpochError(f"request epoch {epoch} > leader epoch {self.leader_epoch}")
        if self.role != "leader":
            return NotLeaderOrFollowerError(f"{self.label} is not the leader")
        return None

    def produce(self, req: ProduceRequest) -> dict:
        try:
            req = check_request(req, ProduceRequest, "produce")
            err = self._check_leader(req.current_leader_epoch)
            if err is not None:
                raise err
            info = self.log.append_as_leader(bytes(req.records), self.leader_epoch, now_ms())
            if not self.hw_held:
                self.log.update_high_watermark(self.log.log_end_offset)
            return ProduceResponse(
                base_offset=info.first_offset,
                log_append_time=info.log_append_time,
                log_start_offset=self.log.log_start_offset,
                duplicate=bool(info.duplicate),
            ).to_dict()
        except Exception as exc:  # noqa: BLE001 - answered as the actor does
            return ProduceResponse.error(exc)

    def fetch(self, req: FetchRequest) -> dict:
        lg = self.log
        try:
            req = check_request(req, FetchRequest, "fetch")
            err = self._check_leader(req.current_leader_epoch)
            if err is not None:
                raise err
            snap = lg.fetch_offset_snapshot()
            fetch_offset = req.fetch_offset
            if fetch_offset > snap.log_end_offset or fetch_offset < snap.log_start_offset:
                raise OffsetOutOfRangeError(
                    f"fetch offset {fetch_offset} outside [{snap.log_start_offset}, {snap.log_end_offset}]"
                )
            end = snap.high_watermark
            if fetch_offset >= end:
                records, next_offset = b"", fetch_offset
            else:
                info = lg.read(fetch_offset, req.max_bytes, max_offset=end, min_one_message=True)
                records, next_offset = info.records, info.next_offset
            return FetchResponse(
                high_watermark=snap.high_watermark,
                log_start_offset=snap.log_start_offset,
                last_stable_offset=snap.last_stable_offset,
                records=bytes(records),
                next_offset=next_offset,
            ).to_dict()
        except Exception as exc:  # noqa: BLE001
            return FetchResponse.error(exc, log_start_offset=lg.log_start_offset)

    def list_offsets(self, req: ListOffsetsRequest) -> dict:
        try:
            req = check_request(req, ListOffsetsRequest, "list_offsets")
            err = self._check_leader(req.current_leader_epoch)
            if err is not None:
                raise err
            if req.timestamp == EARLIEST:
                offset = self.log.log_start_offset
            elif req.timestamp == LATEST:
                offset = self.log.high_watermark
            else:
                found = self.log.fetch_offset_by_timestamp(req.timestamp)
                offset = -1 if found is None else found[0]
            return ListOffsetsResponse(offset=offset, timestamp=-1, leader_epoch=self.leader_epoch).to_dict()
        except Exception as exc:  # noqa: BLE001
            return ListOffsetsResponse.error(exc)

    def records(self) -> list:
        """Every record in the log, decoded: ``(offset, timestamp, key, value, headers)`` tuples."""
        raw = self.log.read(self.log.log_start_offset, 1 << 30, min_one_message=True).records
        return list(decode_records(bytes(raw))) if raw else []


class FakeBroker(Endpoint):
    """A broker: producer ids (InitProducerId) and FindCoordinator."""

    def __init__(self, cluster: "FakeCluster", broker_id: int):
        super().__init__(cluster, f"broker-{broker_id}")
        self.broker_id = broker_id

    def init_producer_id(self) -> dict:
        pid = self.cluster.next_producer_id
        self.cluster.next_producer_id += 1
        return {"error_code": 0, "error_message": None, "producer_id": pid, "producer_epoch": 0}

    def replica_handle(self, topic: str, partition: int):
        """``BrokerActor.replica_handle``: this broker's live replica of the partition, or None."""
        r = self.cluster.replicas.get((topic, partition, self.broker_id))
        return None if r is None or r.dead else r

    def find_coordinator(self, group_id: str, key_type: int = 0) -> dict:
        name = self.cluster.txn_coordinator_name if key_type == 1 else self.cluster.coordinator_name
        if name is None:
            return {"error_code": 15, "error_message": "no coordinator", "coordinator": None}
        return {"error_code": 0, "error_message": None, "coordinator": name}


class Parked:
    """An endpoint's answer that comes later (a parked JoinGroup/SyncGroup), keyed by ``Pending.key``."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key


class FakeGroupCoordinator(Endpoint):
    """The group coordinator over the real shard (see the module docstring)."""

    def __init__(self, cluster: "FakeCluster", label: str, config: GroupCoordinatorConfig):
        super().__init__(cluster, label)
        self.shard = GroupCoordinatorShard(config)
        self.records: list = []
        self.requests: list = []  # the TxnOffsetCommit requests taken

    def _apply(self, result):
        self.shard.replay_all(result.records)
        self.records += [r for r in result.records if r.durable]
        self.cluster.completions.extend(result.completions)
        resp = result.response
        return Parked(resp.key) if isinstance(resp, Pending) else resp

    def tick(self) -> None:
        d = self.shard.next_deadline()
        if d is not None and d <= now_ms():
            self._apply(self.shard.poll_expirations(now_ms()))

    def join_group(self, r: JoinGroupRequest):
        rebalance = r.effective_rebalance_timeout_ms()
        return self._apply(
            self.shard.join_group(
                r.group_id,
                r.member_id,
                r.protocol_type,
                r.protocols,
                r.session_timeout_ms,
                rebalance,
                now_ms(),
                **r.member_options(),
            )
        )

    def sync_group(self, r: SyncGroupRequest):
        kw = {"group_instance_id": r.group_instance_id, "protocol_type": r.protocol_type}
        return self._apply(
            self.shard.sync_group(
                r.group_id, r.member_id, r.generation_id, r.assignments, now_ms(), protocol_name=r.protocol_name, **kw
            )
        )

    def heartbeat(self, r: HeartbeatRequest):
        return self._apply(
            self.shard.heartbeat(
                r.group_id, r.member_id, r.generation_id, now_ms(), group_instance_id=r.group_instance_id
            )
        )

    def leave_group(self, r: LeaveGroupRequest):
        return self._apply(self.shard.leave_group(r.group_id, list(r.members), now_ms()))

    def offset_commit(self, r: OffsetCommitRequest):
        return self._apply(
            self.shard.offset_commit(
                r.group_id,
                r.topics,
                now_ms(),
                member_id=r.member_id,
                generation_id=r.generation_id,
                group_instance_id=r.group_instance_id,
            )
        )

    def offset_fetch(self, r: OffsetFetchRequest):
        return self.shard.offset_fetch(r.group_id, r.topics)

    def txn_offset_commit(self, r: TxnOffsetCommitRequest):
        self.requests.append(r)
        topics: dict[str, list[dict]] = {}
        for topic, p, offset, metadata, epoch in r.offsets:
            topics.setdefault(topic, []).append(
                {
                    "partition_index": p,
                    "committed_offset": offset,
                    "committed_leader_epoch": epoch,
                    "committed_metadata": metadata,
                }
            )
        txn = self.cluster.txn_coordinator
        if txn is not None:  # the __consumer_offsets leader verifies the producer's transaction (KIP-890)
            (code,) = txn.shard.verify(
                r.transactional_id, r.producer_id, r.producer_epoch, [OFFSETS_PARTITION]
            ).values()
            if code:
                return {
                    "error_code": 0,
                    "topics": [
                        {"name": t, "partitions": [{"partition_index": p["partition_index"], "error_code": code}]}
                        for t, ps in topics.items()
                        for p in ps
                    ],
                }
        return self._apply(
            self.shard.txn_offset_commit(
                r.group_id,
                [{"name": t, "partitions": ps} for t, ps in topics.items()],
                r.producer_id,
                now_ms(),
                member_id=r.member_id,
                generation_id=r.generation_id,
                group_instance_id=r.group_instance_id,
            )
        )


OFFSETS_PARTITION = (OFFSETS_TOPIC, 0)  # every group's offsets partition in the fake cluster


class FakeTxnCoordinator(Endpoint):
    """The transaction coordinator over the real shard (see the module docstring)."""

    def __init__(self, cluster: "FakeCluster", label: str):
        super().__init__(cluster, label)
        self.shard = TxnCoordinatorShard(0)
        self.requests: list = []

    def _apply(self, result) -> dict:
        for rec in result.records:
            job = self.shard.replay(rec)
            if job is not None:  # every partition leader takes the markers at once
                for done in self.shard.markers_written(job, now_ms()).records:
                    self.shard.replay(done)
                group = self.cluster.coordinator
                if OFFSETS_PARTITION in job.partitions and group is not None:  # the group's pending offsets
                    group._apply(group.shard.complete_transaction(job.producer_id, job.commit))
        return result.response

    def _new_producer_id(self) -> int:
        pid = self.cluster.next_producer_id
        self.cluster.next_producer_id += 1
        return pid

    def init_producer_id(self, r: InitProducerIdRequest) -> dict:
        self.requests.append(r)
        return self._apply(
            self.shard.init_producer_id(
                r.transactional_id,
                r.transaction_timeout_ms,
                now_ms(),
                self._new_producer_id,
                r.producer_id,
                r.producer_epoch,
            )
        )

    def add_offsets_to_txn(self, r: AddOffsetsToTxnRequest) -> dict:
        self.requests.append(r)
        return self._apply(
            self.shard.add_partitions(
                r.transactional_id, r.producer_id, r.producer_epoch, [OFFSETS_PARTITION], now_ms()
            )
        )

    def end_txn(self, r: EndTxnRequest) -> dict:
        self.requests.append(r)
        return self._apply(
            self.shard.end_txn(r.transactional_id, r.producer_id, r.producer_epoch, r.committed, now_ms())
        )


class FakeCluster:
    """Brokers, partitions and named endpoints of one fake cluster."""

    def __init__(self, root, name: str = "fake", brokers: int = 1, broker_name=None):
        self.root = str(root)
        self.name = name
        self.lock = threading.RLock()
        self.brokers: dict[int, FakeBroker] = {}
        self.topics: dict[str, dict[int, dict]] = {}  # topic -> partition -> {"replicas", "leader", "epoch"}
        self.replicas: dict[tuple[str, int, int], FakeReplica] = {}
        self.named: dict[str, Endpoint] = {}
        self.calls: list[tuple[float, str, str]] = []  # (monotonic time, endpoint label, method)
        self.next_producer_id = 1000
        self.coordinator_name: str | None = None
        self.coordinator: FakeGroupCoordinator | None = None
        self.txn_coordinator_name: str | None = None
        self.txn_coordinator: FakeTxnCoordinator | None = None
        self.parked: dict[tuple, FakeCall] = {}
        self.completions: list[tuple[tuple, dict]] = []
        self._broker_name = broker_name or _broker_name
        for b in range(brokers):
            self.add_broker(b)

    def add_broker(self, broker_id: int) -> FakeBroker:
        b = self.brokers[broker_id] = FakeBroker(self, broker_id)
        self.named[self._broker_name(self.name, broker_id)] = b
        return b

    def add_coordinator(self, name: str = "group-coordinator-0", **config) -> FakeGroupCoordinator:
        """A group coordinator that every broker's FindCoordinator names."""
        config.setdefault("group_initial_rebalance_delay_ms", 0)
        config.setdefault("group_min_session_timeout_ms", 1000)
        c = self.coordinator = FakeGroupCoordinator(self, name, GroupCoordinatorConfig(**config))
        self.named[name] = c
        self.coordinator_name = name
        return c

    def add_txn_coordinator(self, name: str = "txn-coordinator-0") -> FakeTxnCoordinator:
        """A transaction coordinator that every broker's FindCoordinator (key type 1) names."""
        c = self.txn_coordinator = FakeTxnCoordinator(self, name)
        self.named[name] = c
        self.txn_coordinator_name = name
        return c

    def tick(self) -> None:
        """Fire due coordinator timers and answer the parked calls they complete."""
        with self.lock:
            if self.coordinator is not None:
                self.coordinator.tick()
            self.flush_completions()

    def flush_completions(self) -> None:
        with self.lock:
            done, self.completions = self.completions, []
            for key, resp in done:
                c = self.parked.pop(key, None)
                if c is not None:
                    c.fut.set_result(resp)

    def create_topic(self, topic: str, partitions: int = 1, replicas: tuple = (0,)) -> None:
        with self.lock:
            parts = self.topics[topic] = {}
            for p in range(partitions):
                tp = TopicPartition(topic, p)
                for b in replicas:
                    r = FakeReplica(self, tp, b, os.path.join(self.root, f"{topic}-{p}-b{b}"))
                    self.replicas[(topic, p, b)] = r
                    self.named[replica_name(self.name, topic, p, b)] = r
                leader = replicas[0]
                self.replicas[(topic, p, leader)].role = "leader"
                parts[p] = {"replicas": tuple(replicas), "leader": leader, "epoch": 0}

    def replica(self, tp: TopicPartition, broker_id: int | None = None) -> FakeReplica:
        """The replica on ``broker_id`` (the current leader by default)."""
        if broker_id is None:
            broker_id = self.topics[tp.topic][tp.partition]["leader"]
        return self.replicas[(tp.topic, tp.partition, broker_id)]

    def topic_raw(self, topic: str) -> dict | None:
        """The topic as the controller writes it to GCS KV."""
        with self.lock:
            parts = self.topics.get(topic)
            if parts is None:
                return None
            return {
                "name": topic,
                "topic_id": f"id-{topic}",
                "configs": {},
                "partitions": {
                    p: {
                        "replicas": list(st["replicas"]),
                        "leader": st["leader"],
                        "leader_epoch": st["epoch"],
                        "isr": list(st["replicas"]),
                    }
                    for p, st in parts.items()
                },
            }

    def append(self, tp: TopicPartition, values, keys=None) -> int:
        """Records written to the leader directly (a producer elsewhere); returns the first offset."""
        r = self.replica(tp)
        with self.lock:
            info = r.log.append_as_leader(batch(values, keys), r.leader_epoch, now_ms())
            if not r.hw_held:
                r.log.update_high_watermark(r.log.log_end_offset)
        return info.first_offset

    def move_leader(self, tp: TopicPartition, new_leader: int) -> None:
        """An election: the new leader first copies what it misses of the old leader's log (as a caught-up
        ISR follower would have), the epoch goes up, and the old leader becomes a follower."""
        with self.lock:
            st = self.topics[tp.topic][tp.partition]
            old, new = self.replica(tp), self.replica(tp, new_leader)
            leo = new.log.log_end_offset
            if old.log.log_end_offset > leo:
                raw = old.log.read(leo, 1 << 30, min_one_message=True).records
                new.log.append_as_follower(bytes(raw))
            new.log.update_high_watermark(old.log.high_watermark)
            st["epoch"] += 1
            st["leader"] = new_leader
            old.role, new.role = "follower", "leader"
            old.leader_epoch = new.leader_epoch = st["epoch"]

    def close(self) -> None:
        for r in self.replicas.values():
            r.log.close()

    def methods_called(self, label: str | None = None, method: str | None = None) -> list[tuple[float, str, str]]:
        with self.lock:
            return [c for c in self.calls if (label is None or c[1] == label) and (method is None or c[2] == method)]


class FakeTransport:
    """The Transport protocol in-process (see the module docstring)."""

    def __init__(self, cluster: FakeCluster):
        self.cluster = cluster
        self._timers: list[threading.Timer] = []
        self.warmed: list = []

    def get_actor(self, name: str) -> Any:
        ep = self.cluster.named.get(name)
        if ep is None or ep.dead:
            raise ValueError(f"Failed to look up actor with name '{name}'")
        return ep

    def call(self, endpoint: Endpoint, method: str, *args: Any, **kw: Any) -> FakeCall:
        c = FakeCall(endpoint, method, args, kw)
        with self.cluster.lock:
            self.cluster.calls.append((c.sent, endpoint.label, method))
            fault = ("dead",) if endpoint.dead else endpoint.take_fault(method)
        kind = fault[0] if fault else None
        if kind == "hang":
            return c
        if kind == "slow":
            t = threading.Timer(fault[1], self._run, (c, None))
            t.daemon = True
            self._timers.append(t)
            t.start()
            return c
        self._run(c, fault)
        return c

    def _run(self, c: FakeCall, fault: tuple | None) -> None:
        kind = fault[0] if fault else None
        if kind == "dead":
            c.fut.set_exception(ActorDiedError())
            return
        if kind == "error":
            code = fault[1]
            c.fut.set_result({"error_code": code, "error_message": f"injected {for_code(code).__name__}"})
            return
        with self.cluster.lock:
            try:
                res = getattr(c.endpoint, c.method)(*c.args, **c.kw)
            except BaseException as exc:  # noqa: BLE001 - the endpoint raised: the caller sees it
                c.fut.set_exception(exc)
                return
            if isinstance(res, Parked):
                self.cluster.parked[res.key] = c
            self.cluster.flush_completions()
        if isinstance(res, Parked):
            return
        if kind == "lost":
            c.fut.set_exception(ActorDiedError())
        else:
            c.fut.set_result(res)

    def future(self, call: FakeCall) -> cf.Future:
        return call.fut

    def wait(self, calls: list, num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.cluster.tick()
            done = [c for c in calls if c.fut.done()]
            left = None if deadline is None else deadline - time.monotonic()
            if len(done) >= num_returns or (left is not None and left <= 0):
                ready = done[:num_returns]
                return ready, [c for c in calls if c not in ready]
            step = 0.01 if left is None else min(left, 0.01)  # coordinator timers fire between waits
            cf.wait([c.fut for c in calls if not c.fut.done()], timeout=step, return_when=cf.FIRST_COMPLETED)

    def get(self, call: FakeCall, timeout: float | None = None) -> Any:
        try:
            return call.fut.result(timeout)
        except cf.TimeoutError:
            raise GetTimeoutError(f"Get timed out: some object(s) not ready after {timeout} s") from None

    def available(self) -> bool:
        return True

    def sync_io(self, timeout_s: float) -> bool:
        return True  # in-process: a call is delivered when it is made

    def produce_many(self, items: list) -> list:
        return [self.call(handle, "produce", req) for handle, _topic, _partition, req in items]

    def warm(self, replica) -> bool:
        self.warmed.append(replica)  # what the producer asked to open ahead (ChannelTransport opens a connection)
        return False

    def close(self) -> None:
        for t in self._timers:
            t.cancel()


class FakeMetadata(ClusterMetadata):
    """``ClusterMetadata`` reading the fake cluster's topics and brokers instead of GCS KV; replica actors
    are looked up (and their handles cached and forgotten) by the real code, through the fake transport."""

    def __init__(self, cluster: FakeCluster, max_age_ms: int = 300000, transport: FakeTransport | None = None):
        super().__init__(cluster.name, max_age_ms, transport=transport or FakeTransport(cluster))
        self.fake = cluster
        self.refreshes = 0

    def refresh(self, extra_topics: list[str] | None = None, force: bool = False) -> None:
        with self._lock:
            names = set(self._topics) | set(extra_topics or ())
        fresh = {n: self.fake.topic_raw(n) for n in names}
        with self._lock:
            self.refreshes += 1
            for n, raw in fresh.items():
                if raw is None:
                    self._topics.pop(n, None)
                else:
                    self._topics[n] = TopicMetadata(raw)
            self._last_refresh = time.monotonic()
            self._stale = False

    def list_topics(self) -> list[str]:
        return sorted(self.fake.topics)

    def brokers(self) -> dict[int, dict]:
        return {b: {"broker_id": b, "alive": not ep.dead} for b, ep in self.fake.brokers.items()}
