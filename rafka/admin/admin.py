"""``Admin``: Kafka's admin operations, served by the controller actor (``protocol.names.controller_name``).

    admin = rafka.Admin(cluster)
    admin.create_topic("clicks", num_partitions=6, replication_factor=3, configs={"min.insync.replicas": "2"})
    admin.describe_topics(["clicks"])     # leader, replicas, ISR per partition
    admin.alter_configs("clicks", set={"retention.ms": "3600000"})

Every call returns plain dicts/lists (easy to print or dump as JSON) and raises the Kafka error class of
the first failure, with the controller's message, e.g. ``TopicAlreadyExistsError``. Calls retry
NOT_CONTROLLER / a controller being replaced for up to ``default_api_timeout_ms``.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from protocol.errors import BrokerNotAvailableError, ElectionNotNeededError, KafkaError, KafkaTimeoutError, for_code
from protocol.names import RAY_NAMESPACE, controller_name
from rafka.client_utils import resolve_cluster
from rafka.config import AdminConfig, ConsumerConfig
from rafka.consumer.fetcher import EARLIEST, LATEST, Fetcher
from rafka.metadata import ClusterMetadata
from rafka.structs import OffsetAndTimestamp, TopicPartition

__all__ = ["Admin", "NewTopic"]

ELECTION_TYPES = {"preferred": 0, "unclean": 1}


class NewTopic(dict):
    """A topic to create: ``NewTopic("t", 6, 3, {"min.insync.replicas": "2"})``."""

    def __init__(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: dict | None = None,
        replica_assignment: list | None = None,
    ):
        super().__init__(
            name=name,
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            configs={k: str(v) if not isinstance(v, bool) else str(v).lower() for k, v in (configs or {}).items()},
        )
        if replica_assignment is not None:
            self["replica_assignment"] = replica_assignment


def _raise_first(results: Iterable[dict], what: str) -> None:
    errs = [r for r in results if r.get("error_code")]
    if not errs:
        return
    first = errs[0]
    cls = for_code(first["error_code"])
    msgs = "; ".join(
        f"{r.get('name') or (str(r.get('topic')) + '-' + str(r.get('partition')))}: "
        f"{r.get('error_message') or for_code(r['error_code']).default_message}"
        for r in errs
    )
    raise cls(f"{what} failed: {msgs}")


class Admin:
    def __init__(self, cluster: Any = None, **config: Any):
        self.config = AdminConfig(**config)
        self.cluster_name = resolve_cluster(cluster)
        self.metadata = ClusterMetadata(self.cluster_name)
        self._controller = None

    # -- plumbing ----------------------------------------------------------------------------------
    def _call(
        self, method: str, *args, timeout_ms: float | None = None, attempt_timeout_ms: float | None = None
    ) -> Any:
        """One controller call, retried on retriable errors until ``timeout_ms``. Each attempt waits at
        most ``attempt_timeout_ms`` (default ``request_timeout_ms``): calls that wait server-side (create
        topics waits for leaders) pass their own, so they are not re-sent while the first still runs."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        timeout_ms = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000.0
        last: BaseException | None = None
        while True:
            try:
                if self._controller is None:
                    self._controller = ray.get_actor(controller_name(self.cluster_name), namespace=RAY_NAMESPACE)
                left = max(0.05, deadline - time.monotonic())
                return ray.get(
                    getattr(self._controller, method).remote(*args),
                    timeout=min(left, (attempt_timeout_ms or self.config.request_timeout_ms) / 1000.0),
                )
            except (RayActorError, ValueError) as exc:  # controller dying/replaced, or not (yet) named
                last = exc
                self._controller = None
            except GetTimeoutError as exc:
                last = exc
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                last = exc
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"admin call {method} did not complete in {timeout_ms:.0f} ms: {last}")
            time.sleep(self.config.retry_backoff_ms / 1000.0)

    # -- topics ------------------------------------------------------------------------------------
    def create_topics(self, topics: Iterable[dict], timeout_ms: int | None = None) -> dict[str, str]:
        """Create topics (``NewTopic`` or dicts of the same keys); returns ``{name: topic_id}`` once every
        partition has a leader. Raises the first error (e.g. ``TopicAlreadyExistsError``)."""
        reqs = [t if isinstance(t, dict) else NewTopic(*t) for t in topics]
        t = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        results = self._call("create_topics", reqs, t, timeout_ms=t + 5000, attempt_timeout_ms=t + 5000)
        _raise_first(results, "create topics")
        return {r["name"]: r.get("topic_id") for r in results}

    def create_topic(
        self,
        name: str,
        num_partitions: int = 1,
        replication_factor: int = 1,
        configs: dict | None = None,
        replica_assignment: list | None = None,
        timeout_ms: int | None = None,
    ) -> str:
        return self.create_topics(
            [NewTopic(name, num_partitions, replication_factor, configs, replica_assignment)], timeout_ms
        )[name]

    def delete_topics(self, names: Iterable[str], timeout_ms: int | None = None) -> None:
        results = self._call("delete_topics", list(names), timeout_ms=timeout_ms)
        _raise_first(results, "delete topics")

    def create_partitions(self, new_totals: dict[str, int]) -> None:
        """Grow topics to the given partition counts: ``{"clicks": 12}``."""
        for name, total in new_totals.items():
            res = self._call("create_partitions", name, int(total))
            _raise_first([res], "create partitions")

    def list_topics(self) -> list[str]:
        return self.metadata.list_topics()

    def describe_topics(self, names: Iterable[str] | None = None) -> list[dict]:
        """Per topic: ``{name, topic_id, configs, partitions: [{partition, leader, leader_epoch, replicas,
        isr, offline_replicas, ...}]}``."""
        results = self._call("describe_topics", None if names is None else list(names))
        if isinstance(results, dict):
            results = list(results.values())
        _raise_first(results, "describe topics")
        return results

    def describe_cluster(self) -> dict:
        """``{cluster, controller_id, controller_epoch, metadata_version, brokers: [{id, alive, rack, log_dir,
        node_id, epoch}], topics}`` (the broker hosting the controller is ``controller_id``)."""
        md = self._call("metadata")
        return {
            "cluster": self.cluster_name,
            "controller_id": md.get("controller_id", -1),
            "controller_epoch": md.get("controller_epoch", -1),
            "metadata_version": md.get("version"),
            "brokers": list(md.get("brokers") or []),
            "topics": len(md.get("topics") or []),
        }

    # -- configs -----------------------------------------------------------------------------------
    def describe_configs(self, topic: str, include_defaults: bool = True) -> dict[str, str]:
        """The topic's configs: effective values (overrides over the storage defaults), or only the
        overrides with ``include_defaults=False``."""
        res = self._call("describe_configs", topic)
        _raise_first([res], "describe configs")
        return dict(res.get("configs") if include_defaults else res.get("overrides") or {})

    def describe_config_entries(self, topic: str) -> list[dict]:
        """Every config of ``topic`` as Kafka's admin client shows it (ConfigEntry): ``[{name, value, source,
        synonyms: [{name, value, source}]}]``, source being Kafka's ConfigSource name: DYNAMIC_TOPIC_CONFIG
        (a topic override), STATIC_BROKER_CONFIG (the broker's properties set its ``log.*`` synonym) or
        DEFAULT_CONFIG."""
        from actors.metadata.config_sources import SOURCE_NAMES, topic_entries

        res = self._call("describe_configs", topic)
        _raise_first([res], "describe configs")
        return [
            {
                "name": e["name"],
                "value": e["value"],
                "source": SOURCE_NAMES[e["source"]],
                "synonyms": [{"name": n, "value": v, "source": SOURCE_NAMES[src]} for n, v, src in e["synonyms"]],
            }
            for e in topic_entries(res.get("configs") or {}, res.get("overrides") or {}, self._broker_config())
        ]

    def describe_broker_configs(self, broker_id: int | None = None) -> dict[int, list[dict]]:
        """``{broker id: [{name, value, source, read_only}]}`` of every live broker (or one): the configs the
        broker runs with, from its properties (STATIC_BROKER_CONFIG) or Kafka's defaults (DEFAULT_CONFIG)."""
        from actors.metadata.config_sources import SOURCE_NAMES

        out = {}
        for bid, h in self._broker_handles(broker_id).items():
            entries = self.metadata.transport.get(
                self.metadata.transport.call(h, "describe_configs"), timeout=self.config.request_timeout_ms / 1000
            )
            out[bid] = [
                {"name": e["name"], "value": e["value"], "source": SOURCE_NAMES[e["source"]], "read_only": True}
                for e in entries
            ]
        return out

    def _broker_handles(self, broker_id: int | None = None) -> dict[int, Any]:
        from protocol.names import broker_name

        live = sorted(b["id"] for b in self.metadata.brokers().values() if b.get("alive", True))
        if broker_id is not None:
            if broker_id not in live:
                raise BrokerNotAvailableError(f"broker {broker_id} is not alive (live brokers: {live})")
            live = [broker_id]
        return {bid: self.metadata.transport.get_actor(broker_name(self.cluster_name, bid)) for bid in live}

    def _broker_config(self) -> dict:
        """A live broker's properties (every broker of a rafka cluster gets the same ``broker_config``)."""
        from actors.metadata.config_sources import STATIC_BROKER_CONFIG

        for h in self._broker_handles().values():
            try:
                entries = self.metadata.transport.get(self.metadata.transport.call(h, "describe_configs"), timeout=5)
            except Exception:  # noqa: BLE001 - a dying broker: ask the next
                continue
            return {e["name"]: e["value"] for e in entries if e["source"] == STATIC_BROKER_CONFIG}
        return {}

    def alter_configs(self, topic: str, set: dict | None = None, delete: Iterable[str] | None = None) -> None:
        """Incrementally set and delete topic config overrides (Kafka's IncrementalAlterConfigs)."""
        values = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (set or {}).items()}
        res = self._call("alter_configs", topic, values, list(delete or []))
        _raise_first([res], "alter configs")

    # -- partitions --------------------------------------------------------------------------------
    def list_offsets(
        self, specs: dict, timeout_ms: int | None = None, isolation_level: str = "read_uncommitted"
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """``{tp: "earliest" | "latest" | timestamp_ms}`` -> ``{tp: OffsetAndTimestamp}`` (offset -1 when
        no record has a timestamp at or after the one asked). ``isolation_level="read_committed"``: "latest"
        is the last stable offset (Kafka's ``ListOffsetsOptions(IsolationLevel.READ_COMMITTED)``)."""
        cfg = ConsumerConfig(retry_backoff_ms=self.config.retry_backoff_ms, isolation_level=isolation_level)
        fetcher = Fetcher(self.metadata, cfg)
        t = float(self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms)
        out = {}
        for tp, spec in specs.items():
            ts = {"earliest": EARLIEST, "latest": LATEST}.get(spec, spec)
            if not isinstance(ts, int):
                raise ValueError(f"offset spec for {tp} must be 'earliest', 'latest' or a timestamp, not {spec!r}")
            off, found_ts, epoch = fetcher.list_offset(TopicPartition(*tp), ts, t)
            out[TopicPartition(*tp)] = OffsetAndTimestamp(off, found_ts, epoch)
        return out

    def delete_records(self, offsets: dict, timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """Kafka's DeleteRecords: ``{tp: offset}`` (-1: the high watermark) moves each partition's log start
        offset up to ``offset`` (records below it are gone for every reader); returns ``{tp: low
        watermark}``. An offset above the high watermark raises OffsetOutOfRangeError."""
        from protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse

        t = float(self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms)
        out = {}
        for tp, offset in offsets.items():
            tp = TopicPartition(*tp)
            resp = DeleteRecordsResponse.from_dict(
                self._on_leader(tp, "delete_records", lambda epoch, o=int(offset): DeleteRecordsRequest(o, epoch), t)
            )
            out[tp] = resp.low_watermark
        return out

    def _on_leader(self, tp: TopicPartition, method: str, make_request, timeout_ms: float) -> dict:
        """One call to ``tp``'s leader replica, retried on retriable errors (leadership moved, no leader yet)
        until ``timeout_ms``; a non-retriable error code raises its Kafka error."""
        from rafka.consumer.fetcher import classify

        md, deadline, last = self.metadata, time.monotonic() + timeout_ms / 1000.0, None
        while True:
            try:
                leader = md.leader(tp)
                if leader is None:
                    raise for_code(6)(f"{tp} has no leader")
                handle, _, epoch = leader
                left = max(0.01, deadline - time.monotonic())
                res = md.transport.get(md.transport.call(handle, method, make_request(epoch)), timeout=left)
                if res.get("error_code"):
                    raise for_code(res["error_code"])(res.get("error_message") or None)
                return res
            except Exception as exc:  # noqa: BLE001 - classified: retriable ones loop
                err = classify(exc)
                if not getattr(err, "retriable", False):
                    raise err from exc
                last = err
                md.forget_handle(tp)
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"{method} on {tp} did not finish in {timeout_ms:.0f} ms: {last}")
            time.sleep(self.config.retry_backoff_ms / 1000.0)
            md.refresh([tp.topic], force=True)

    def elect_leaders(self, partitions: Iterable | None = None, election_type: str = "preferred") -> list[dict]:
        """Preferred (or unclean) leader election; ``None`` means every partition. Returns per-partition
        results; ELECTION_NOT_NEEDED is not an error."""
        if election_type not in ELECTION_TYPES:
            raise ValueError(f"election_type must be 'preferred' or 'unclean', not {election_type!r}")
        parts = None if partitions is None else [list(tp) for tp in partitions]
        results = self._call("elect_leaders", parts, ELECTION_TYPES[election_type])
        _raise_first([r for r in results if r.get("error_code") != ElectionNotNeededError.code], "elect leaders")
        return results

    def alter_partition_reassignments(self, assignments: dict) -> None:
        """``{tp: [broker ids] | None}``: move replicas (None cancels a reassignment in progress)."""
        reqs = [
            {"topic": tp[0], "partition": tp[1], "replicas": None if r is None else list(r)}
            for tp, r in assignments.items()
        ]
        results = self._call("alter_partition_reassignments", reqs)
        _raise_first(results, "alter partition reassignments")

    def list_partition_reassignments(self) -> list[dict]:
        return self._call("list_partition_reassignments")

    def balance_plan(self, execute: bool = False) -> dict:
        """The controller's partition balancer plan now (``rafka cluster balance``, Cruise Control's proposals):
        ``{moves: [{topic, partition, replicas, target, reason}], elections, unhealable, deferred,
        replicas_per_broker, leaders_per_broker, replica_band, leader_band, balanced, ...}``; ``execute``
        starts its reassignments (KIP-455) and keeps the balancer going until the brokers are balanced."""
        return self._call("partition_balancer_plan", bool(execute))

    def partition_balancer_status(self) -> dict:
        """The balancer's state: its last plan, the partitions it cannot heal, the moves it started."""
        return self._call("partition_balancer_status")

    # -- transactions (rafka/admin/txn_admin.py) -----------------------------------------------------------
    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = ()) -> list[dict]:
        from rafka.admin import txn_admin

        return txn_admin.list_transactions(self, tuple(states), tuple(producer_ids))

    def describe_transactions(self, transactional_ids: Iterable[str]) -> list[dict]:
        from rafka.admin import txn_admin

        return [txn_admin.describe_transaction(self, t) for t in transactional_ids]

    def describe_producers(self, tp: TopicPartition) -> list[dict]:
        from rafka.admin import txn_admin

        return txn_admin.describe_producers(self, TopicPartition(*tp))

    def find_hanging_transactions(self, tp: TopicPartition, max_age_ms: int = 900000) -> list[dict]:
        from rafka.admin import txn_admin

        return txn_admin.find_hanging(self, TopicPartition(*tp), max_age_ms)

    def abort_transaction(self, tp: TopicPartition, producer_id: int) -> dict:
        from rafka.admin import txn_admin

        return txn_admin.abort_transaction(self, TopicPartition(*tp), producer_id)

    def abort_hanging_transactions(self, topic: str, partitions=None, max_age_ms: int = 900000) -> list[dict]:
        """Abort every hanging transaction of ``topic`` (``partitions``, or all): find-hanging + abort."""
        from rafka.admin import txn_admin

        return txn_admin.abort_hanging(self, topic, partitions, max_age_ms)

    # -- consumer groups (rafka/admin/group_admin.py) ---------------------------------------------------
    def list_groups(self) -> list[dict]:
        """``[{group_id, protocol_type, group_state}]`` of every group in the cluster."""
        from rafka.admin import group_admin

        return group_admin.list_groups(self)

    def describe_groups(self, group_ids: Iterable[str]) -> list[dict]:
        """Per group: state, members with their assignment, and per partition committed offset, log end
        and lag."""
        from rafka.admin import group_admin

        return [group_admin.describe_group(self, g) for g in group_ids]

    def delete_groups(self, group_ids: Iterable[str]) -> None:
        from rafka.admin import group_admin

        group_admin.delete_groups(self, group_ids)

    def list_consumer_group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        from rafka.admin import group_admin

        return group_admin.committed_offsets(self, group_id)

    def alter_consumer_group_offsets(self, group_id: str, offsets: dict) -> None:
        """Set committed offsets ``{tp: offset}`` of a group without active members."""
        from rafka.admin import group_admin

        group_admin.alter_offsets(self, group_id, offsets)

    def reset_consumer_group_offsets(
        self, group_id: str, to: Any, topics: Iterable[str] | None = None
    ) -> dict[TopicPartition, int]:
        """Reset to ``"earliest"``/``"latest"``/``{"timestamp": ms}``/an offset; returns the new offsets."""
        from rafka.admin import group_admin

        return group_admin.reset_offsets(self, group_id, to, topics)

    def plan_consumer_group_offsets_reset(
        self, group_id: str, to: Any, topics: Iterable[str] | None = None, partitions: dict | None = None
    ) -> list[dict]:
        """The rows ``{topic, partition, current, log_start, log_end, new}`` a reset would apply (nothing
        changes; ``to`` also takes ``{"shift_by": n}``; clamped to the log range): kafka-consumer-groups'
        ``--reset-offsets --dry-run``."""
        from rafka.admin import group_admin

        return group_admin.reset_plan(self, group_id, to, topics, partitions)

    def close(self) -> None:
        self._controller = None

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
