"""Client-side cluster metadata: topics, partition leaders, and the replica actors to talk to.

The controller writes the cluster's metadata to GCS KV (layout and reader: ``protocol/kv.py``):
``topics/<name>``, ``brokers/<id>``, and ``metadata_version`` (bumped on every change). Clients read those keys
directly (~0.4 ms a read) and cache them; a refresh first compares ``metadata_version`` and re-reads the
topics only when it moved. Produce and fetch go straight to the leader's replica actor,
looked up through the leader's broker (``actors/channels/replica_lookup.py``: replica actors are unnamed) and
cached until a call fails.

Thread safety: shared by a client's user thread and its background thread; one lock guards the caches.
Ray calls (KV reads, ``get_actor``) happen outside the lock.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from actors.channels.replica_lookup import replica_handle, replica_handles
from actors.metadata.kv import GcsKV
from protocol import kv as K
from protocol.errors import KafkaTimeoutError, UnknownTopicOrPartitionError, for_code
from protocol.names import broker_name
from rafka.structs import PartitionInfo, TopicPartition
from rafka.transport import RAY, Transport


class TopicMetadata:
    """One topic's metadata; immutable once built (a refresh builds a new one)."""

    __slots__ = ("name", "topic_id", "configs", "partitions", "partition_ids", "available", "tps")

    def __init__(self, raw: dict):
        self.name = raw["name"]
        self.topic_id = raw.get("topic_id")
        self.configs = dict(raw.get("configs") or {})
        parts: dict[int, PartitionInfo] = {}
        for p, st in (raw.get("partitions") or {}).items():
            p = int(p)
            leader = st.get("leader")
            parts[p] = PartitionInfo(
                self.name,
                p,
                -1 if leader is None else int(leader),
                tuple(st.get("replicas") or ()),
                tuple(st.get("isr") or ()),
                int(st.get("leader_epoch", -1)),
            )
        self.partitions = parts
        self.partition_ids = sorted(parts)
        self.available = [p for p in self.partition_ids if parts[p].leader >= 0]
        self.tps = {p: TopicPartition(self.name, p) for p in self.partition_ids}


class ClusterMetadata:
    def __init__(
        self, cluster: str, max_age_ms: int = 300000, refresh_backoff_ms: int = 50, transport: Transport = RAY
    ):
        self.cluster = cluster
        self.transport = transport  # replica actors are looked up through it
        self.max_age_ms = max_age_ms
        self.refresh_backoff_ms = refresh_backoff_ms
        self._lock = threading.Lock()
        self._topics: dict[str, TopicMetadata] = {}
        self._version: Any = None
        self._last_refresh = 0.0
        self._stale = False
        self._handles: dict[tuple[str, int, int], Any] = {}
        self._gcs: GcsKV | None = None
        # Kafka's producers send Metadata with allow_auto_topic_creation: a topic missing from metadata is
        # asked of a broker, which creates it when its auto.create.topics.enable is true (Producer sets it)
        self.auto_create_topics = False

    @property
    def _kv(self) -> GcsKV:
        if self._gcs is None:
            self._gcs = GcsKV(self.cluster)
        return self._gcs

    # -- reads -------------------------------------------------------------------------------------
    def topic(self, name: str) -> TopicMetadata | None:
        tm = self._topics.get(name)  # a dict read is atomic: no lock on the hot path
        if tm is not None and not self._stale and (time.monotonic() - self._last_refresh) * 1000 < self.max_age_ms:
            return tm
        self.refresh([name], force=tm is None)
        with self._lock:
            return self._topics.get(name)

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        tm = self.topic(tp.topic)
        return None if tm is None else tm.partitions.get(tp.partition)

    def request_update(self) -> None:
        """Mark the cache stale (NOT_LEADER_OR_FOLLOWER, dead actor): the next read refreshes."""
        with self._lock:
            self._stale = True

    def refresh(self, extra_topics: list[str] | None = None, force: bool = False) -> None:
        with self._lock:
            since = (time.monotonic() - self._last_refresh) * 1000
            names = set(self._topics) | set(extra_topics or ())
        if not force and since < self.refresh_backoff_ms and not extra_topics:
            return
        version = self._kv.get(K.METADATA_VERSION)
        with self._lock:
            unchanged = (
                version is not None and version == self._version and not force and all(n in self._topics for n in names)
            )
        if unchanged:
            with self._lock:
                self._last_refresh = time.monotonic()
                self._stale = False
            return
        fresh: dict[str, TopicMetadata | None] = {}
        for name in names:
            raw = self._kv.get(K.topic_key(name))
            fresh[name] = TopicMetadata(raw) if raw else None
        with self._lock:
            for name, tm in fresh.items():
                if tm is None:
                    self._topics.pop(name, None)
                else:
                    self._topics[name] = tm
            self._version = version
            self._last_refresh = time.monotonic()
            self._stale = False

    def wait_for_topic(self, name: str, timeout_ms: float) -> TopicMetadata:
        """The topic's metadata, waiting up to ``timeout_ms`` for it to appear (Kafka's waitOnMetadata)."""
        tm = self.topic(name)
        if tm is not None and tm.partitions:
            return tm
        deadline = time.monotonic() + timeout_ms / 1000.0
        asked_at = None
        while tm is None or not tm.partitions:
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"topic {name!r} not present in metadata after {timeout_ms:.0f} ms")
            if tm is None and self.auto_create_topics and (asked_at is None or time.monotonic() - asked_at > 1.0):
                asked_at = time.monotonic()
                self._auto_create(name, max(0.1, deadline - asked_at))
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            self.refresh([name], force=True)
            with self._lock:
                tm = self._topics.get(name)
        return tm

    def _auto_create(self, name: str, timeout_s: float) -> int | None:
        """Ask a live broker to auto-create ``name`` (``BrokerActor.auto_create_topic``). Creation follows
        the broker's ``auto.create.topics.enable`` / ``num.partitions`` / ``default.replication.factor``;
        an invalid name or replication factor raises its Kafka error. Returns 0 (created or already there),
        UNKNOWN_TOPIC_OR_PARTITION's code (the broker does not auto-create), another retriable code, or None
        when no broker answered; the caller keeps waiting for the topic as before."""
        from ray.exceptions import RayError

        for b in sorted(self.brokers().values(), key=lambda b: b.get("id", 0)):
            if not b.get("alive", True):
                continue
            try:
                h = self.transport.get_actor(broker_name(self.cluster, int(b["id"])))
                res = self.transport.get(self.transport.call(h, "auto_create_topic", name), timeout=min(timeout_s, 15))
            except (ValueError, TimeoutError, RayError):  # unreachable (dead, restarting, slow): the next one
                continue
            code = res.get("error_code", 0)
            if code and code != UnknownTopicOrPartitionError.code and not for_code(code).retriable:
                raise for_code(code)(res.get("error_message") or f"auto-creating topic {name!r} failed")
            return code
        return None

    def require_topic(self, name: str, timeout_ms: float) -> TopicMetadata:
        """The topic's metadata; an absent topic is auto-created when this client and the brokers allow it
        (``auto.create.topics.enable``), else UnknownTopicOrPartitionError at once rather than a wait of
        ``max.block.ms`` (a CLI user typing a wrong name learns it before typing records)."""
        tm = self.topic(name)
        if tm is None:
            code = self._auto_create(name, timeout_ms / 1000.0) if self.auto_create_topics else None
            if code == UnknownTopicOrPartitionError.code or not self.auto_create_topics:
                self.refresh([name], force=True)
                if self.topic(name) is None:
                    raise UnknownTopicOrPartitionError(
                        f"topic {name!r} does not exist and auto.create.topics.enable is false"
                        + ("" if self.auto_create_topics else " (this client)")
                    )
        return self.wait_for_topic(name, timeout_ms)

    def list_topics(self) -> list[str]:
        return [K.key_suffix(k) for k in self._kv.keys(K.TOPICS)]

    def brokers(self) -> dict[int, dict]:
        out = {}
        for key in self._kv.keys(K.BROKERS):
            raw = self._kv.get(key)
            if raw is not None:
                out[int(K.key_suffix(key))] = raw
        return out

    # -- replica actors ----------------------------------------------------------------------------
    def leader(self, tp: TopicPartition) -> tuple[Any, int, int] | None:
        """``(actor handle, leader broker id, leader epoch)`` for the partition's leader, or None."""
        info = self.partition(tp)
        if info is None:
            raise UnknownTopicOrPartitionError(f"{tp} does not exist")
        if info.leader < 0:
            return None
        handle = self.replica_handle(tp, info.leader)
        if handle is None:
            return None
        return handle, info.leader, info.leader_epoch

    def lookup_leaders(self, tps) -> None:
        """Look up the uncached leader replica handles of ``tps`` all at once (a broker call each, all in flight
        together, where ``leader`` makes them one after another): a transactional producer's new partitions,
        while their AddPartitionsToTxn is in flight. What fails is left for ``leader`` to look up again."""
        keys = []
        for tp in tps:
            info = self.partition(tp)
            if info is not None and info.leader >= 0:
                keys.append((tp.topic, tp.partition, info.leader))
        with self._lock:
            keys = [k for k in keys if k not in self._handles]
        found = replica_handles(self.cluster, keys, self.transport, timeout_s=5.0) if keys else {}
        with self._lock:
            self._handles.update(found)

    def replica_handle(self, tp: TopicPartition, broker_id: int):
        key = (tp.topic, tp.partition, broker_id)
        with self._lock:
            h = self._handles.get(key)
        if h is not None:
            return h
        try:
            h = replica_handle(self.cluster, tp.topic, tp.partition, broker_id, self.transport, timeout_s=5.0)
        except ValueError:
            return None
        with self._lock:
            self._handles[key] = h
        return h

    def forget_handle(self, tp: TopicPartition, broker_id: int | None = None) -> None:
        with self._lock:
            for key in [
                k
                for k in self._handles
                if k[0] == tp.topic and k[1] == tp.partition and (broker_id is None or k[2] == broker_id)
            ]:
                del self._handles[key]
            self._stale = True
