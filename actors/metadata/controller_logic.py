"""The controller's pure decisions (Kafka's QuorumController / ReplicationControlManager): ``ControllerLogic``
holds the image and the config, and each handler reads the image and returns ``(records, response)``
without mutating anything. Called by the controller shell, which commits and replays the records; imports
the image, partition changes, placement and topic configs. No Ray, no I/O, time passed in.
"""

from __future__ import annotations

import base64
import random

from actors.metadata.controller_config import ControllerConfig
from actors.metadata.image import MetadataImage
from actors.metadata.partition_change import (
    ELECT_PREFERRED,
    ELECT_UNCLEAN,
    NO_LEADER,
    PartitionChangeBuilder,
    PartitionRegistration,
    reassignment_plan,
)
from actors.metadata.placement import assign_replicas, unify_collision_chars, validate_topic_name
from actors.metadata.topic_configs import (
    effective_topic_configs,
    topic_config_keys,
    truthy,
    validate_topic_configs,
)
from protocol.errors import (
    BrokerIdNotRegisteredError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidUpdateVersionError,
    KafkaError,
    NewLeaderElectedError,
    NoReassignmentInProgressError,
    PreferredLeaderNotAvailableError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    error_response,
)

__all__ = [
    "ControllerLogic",
    "ControllerConfig",
    "PRODUCER_ID_BLOCK_SIZE",
    "ELECT_PREFERRED",
    "ELECT_UNCLEAN",
    "NO_LEADER",
]

PRODUCER_ID_BLOCK_SIZE = 1000


def _err(exc: KafkaError) -> dict:
    code, msg = error_response(exc)
    return {"error_code": code, "error_message": msg}


def _unknown_topic(name) -> KafkaError:
    return UnknownTopicOrPartitionError(f"Topic {name!r} does not exist.")


class ControllerLogic:
    """The controller's decisions over an image. Handlers return (records, response) and never mutate."""

    def __init__(self, image: MetadataImage, config: ControllerConfig, rng: random.Random | None = None):
        self.image, self.config = image, config
        self.rng = rng or random.Random()

    # ---- helpers -------------------------------------------------------------------------------
    def unclean_enabled(self, topic: str) -> bool:
        t = self.image.topics.get(topic)
        if t is not None and "unclean.leader.election.enable" in t.configs:
            return truthy(t.configs["unclean.leader.election.enable"])
        return self.config.unclean_leader_election

    def _builder(self, topic: str, p: int, alive: set[int] | None = None) -> PartitionChangeBuilder:
        return PartitionChangeBuilder(
            topic,
            p,
            self.image.topics[topic].partitions[p],
            self.image.alive_brokers() if alive is None else alive,
            self.unclean_enabled(topic),
        )

    def _new_topic_id(self) -> str:
        return base64.urlsafe_b64encode(self.rng.getrandbits(128).to_bytes(16, "big")).rstrip(b"=").decode()

    def _placement(
        self, num_partitions: int, rf: int, start_partition: int = 0, first_broker: int | None = None
    ) -> list[list[int]]:
        alive = sorted(self.image.alive_brokers())
        if rf < 1:
            raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
        if rf > len(alive):
            raise InvalidReplicationFactorError(
                f"Replication factor: {rf} larger than available brokers: {len(alive)}."
            )
        racks = {b: self.image.brokers[b].rack_key for b in alive}
        return assign_replicas(racks, num_partitions, rf, self.rng, start_partition, first_broker)

    def _new_partition_record(self, topic: str, topic_id: str, p: int, replicas: list[int]) -> dict:
        alive = self.image.alive_brokers()
        isr = [r for r in replicas if r in alive]
        if not isr:
            raise InvalidReplicaAssignmentError(
                f"All brokers specified in the partition assignment for partition {p} are fenced."
            )
        s = PartitionRegistration(list(replicas), isr, isr[0], 0, 0)
        return {"type": "Partition", "topic": topic, "topic_id": topic_id, "partition": p, **s.to_dict()}

    def _check_assignment(self, assignment, rf_expected: int | None = None) -> list[list[int]]:
        if not isinstance(assignment, (list, tuple)) or not assignment:
            raise InvalidReplicaAssignmentError("Replica assignment must be a non-empty list")
        out = []
        for replicas in assignment:
            if not isinstance(replicas, (list, tuple)) or not replicas:
                raise InvalidReplicaAssignmentError("A partition's replica list must be non-empty")
            replicas = list(replicas)
            if not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas):
                raise InvalidReplicaAssignmentError(f"Replica ids must be integers: {replicas}")
            if len(set(replicas)) != len(replicas):
                raise InvalidReplicaAssignmentError(f"Duplicate brokers in replica assignment {replicas}")
            unknown = [r for r in replicas if r not in self.image.brokers]
            if unknown:
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes brokers {unknown}, which are not registered."
                )
            if rf_expected is not None and len(replicas) != rf_expected:
                raise InvalidReplicaAssignmentError(
                    f"Inconsistent replication factor between partitions: {len(replicas)} vs {rf_expected}"
                )
            rf_expected = len(replicas)
            out.append(replicas)
        return out

    # ---- brokers -------------------------------------------------------------------------------
    def register_broker(self, broker_id: int, info: dict) -> tuple[list[dict], dict]:
        """A (re)starting broker: fence its previous incarnation if still alive, register it, and elect
        it leader of partitions left without one (it is in their ISR, or unclean election is on)."""
        if not isinstance(broker_id, int) or isinstance(broker_id, bool) or broker_id < 0:
            raise InvalidReplicaAssignmentError(f"Invalid broker id {broker_id!r}")
        records: list[dict] = []
        old = self.image.brokers.get(broker_id)
        alive = self.image.alive_brokers()
        if old is not None and old.alive:
            records += self.fence_broker(broker_id)
            alive.discard(broker_id)
        new_dir = info.get("directory_id") or ""
        if old is not None and old.directory_id and new_dir and new_dir != old.directory_id:
            records += self._replaced_disk(broker_id, alive, records)
        epoch = self.image.version + len(records)
        records.append(
            {
                "type": "RegisterBroker",
                "broker_id": broker_id,
                "broker_epoch": epoch,
                "node_id": info.get("node_id"),
                "rack": info.get("rack"),
                "log_dir": info.get("log_dir", ""),
                "directory_id": new_dir,
            }
        )
        alive.add(broker_id)
        changed = {(r["topic"], r["partition"]): r for r in records if r["type"] == "PartitionChange"}
        for t, p, s in list(self.image.partitions_of_broker(broker_id)):
            cur = PartitionRegistration.from_dict(changed[(t.name, p)]) if (t.name, p) in changed else s
            if cur.leader != NO_LEADER:
                continue
            b = PartitionChangeBuilder(t.name, p, cur, alive, self.unclean_enabled(t.name))
            rec = b.build()
            if rec is not None:
                changed[(t.name, p)] = rec
                records.append(rec)
        return records, {"broker_epoch": epoch}

    def _replaced_disk(self, broker_id: int, alive: set[int], earlier: list[dict]) -> list[dict]:
        """A broker back with another log directory (a new meta.properties directory.id: the disk was replaced or
        emptied) holds none of its replicas' data: it leaves every ISR it is still in, even the last place of one
        (the partition then has no leader until a replica with the data is back, or an unclean election), so it is
        never elected while it is behind (the idea of Kafka's KIP-966 and KIP-858). It rejoins each ISR by catching
        up, as any follower does."""
        changed = {(r["topic"], r["partition"]): r for r in earlier if r["type"] == "PartitionChange"}
        states = [
            (t, p, PartitionRegistration.from_dict(changed[(t.name, p)]) if (t.name, p) in changed else s)
            for t, p, s in self.image.partitions_of_broker(broker_id)
        ]
        return self._out_of_isrs(broker_id, states, alive - {broker_id}, to_empty=True)

    def fence_broker(self, broker_id: int, broker_epoch: int | None = None) -> list[dict]:
        """Broker loss: FenceBroker, then for each of its partitions shrink the ISR (never to empty),
        elect a new leader if it led, bump the leader epoch (the controller changed the ISR)."""
        b = self.image.brokers.get(broker_id)
        if b is None or not b.alive or (broker_epoch is not None and broker_epoch != b.broker_epoch):
            return []
        records = [{"type": "FenceBroker", "broker_id": broker_id, "broker_epoch": b.broker_epoch}]
        alive = self.image.alive_brokers() - {broker_id}
        return records + self._out_of_isrs(broker_id, self.image.partitions_of_broker(broker_id), alive, False)

    def _out_of_isrs(self, broker_id: int, states, alive: set[int], to_empty: bool) -> list[dict]:
        """``broker_id`` out of the ISR of each of ``states`` (``(topic, partition, registration)``): never to an
        empty ISR unless ``to_empty``; a new leader where it led, the leader epoch bumped."""
        records = []
        for t, p, s in states:
            builder = PartitionChangeBuilder(t.name, p, s, alive, self.unclean_enabled(t.name))
            if broker_id in s.isr and (to_empty or len(s.isr) > 1):
                builder.set_isr([r for r in s.isr if r != broker_id])
                builder.bump_leader_epoch = True
            rec = builder.build()
            if rec is not None:
                records.append(rec)
        return records

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int | None = None):
        b = self.image.brokers.get(broker_id)
        if b is None:
            raise BrokerIdNotRegisteredError(f"Broker {broker_id} is not registered")
        if broker_epoch is not None and broker_epoch != b.broker_epoch:
            raise StaleBrokerEpochError(f"Broker {broker_id} epoch {broker_epoch} != {b.broker_epoch}")
        first = self.image.next_producer_id
        rec = {
            "type": "ProducerIds",
            "broker_id": broker_id,
            "broker_epoch": b.broker_epoch,
            "next_producer_id": first + PRODUCER_ID_BLOCK_SIZE,
        }
        return [rec], (first, PRODUCER_ID_BLOCK_SIZE)

    def heartbeat_error(self, broker_id: int, broker_epoch: int) -> KafkaError | None:
        """Why a broker heartbeat is refused (it must register again), or None when it is current."""
        b = self.image.brokers.get(broker_id)
        if b is None:
            return BrokerIdNotRegisteredError(f"Broker {broker_id} is not registered")
        if b.broker_epoch != broker_epoch or not b.alive:
            return StaleBrokerEpochError(
                f"Broker {broker_id} epoch {broker_epoch} is not the registered {b.broker_epoch} (alive={b.alive})"
            )
        return None

    # ---- topics (reads) ------------------------------------------------------------------------
    def describe_topics(self, names: list[str] | None = None) -> list[dict]:
        out = []
        for n in sorted(self.image.topics) if names is None else list(names):
            if n in self.image.topics:
                out.append(self.image.describe_topic(n))
            else:
                out.append({"name": n, "topic_id": None, **_err(_unknown_topic(n)), "configs": {}, "partitions": []})
        return out

    def describe_configs(self, name: str) -> dict:
        """The effective configs (topic_configs.effective_topic_configs of the overrides) and the overrides."""
        t = self.image.topics.get(name)
        if t is None:
            return {"name": name, **_err(_unknown_topic(name)), "configs": {}, "overrides": {}}
        effective = effective_topic_configs(t.configs)
        return {
            "name": name,
            "error_code": 0,
            "error_message": None,
            "configs": effective,
            "overrides": dict(t.configs),
        }

    def cluster_metadata(self) -> dict:
        """``{version, brokers, topics}``: the whole image as the admin client's metadata call shows it."""
        img = self.image
        return {
            "version": img.version,
            "brokers": [b.to_dict() for b in sorted(img.brokers.values(), key=lambda b: b.broker_id)],
            "topics": [img.describe_topic(n) for n in sorted(img.topics)],
        }

    # ---- topics --------------------------------------------------------------------------------
    def create_topics(self, topics: list[dict]) -> tuple[list[dict], list[dict]]:
        records: list[dict] = []
        results: list[dict] = []
        pending: set[str] = set()
        unified = {unify_collision_chars(n) for n in self.image.topics}
        for req in topics:
            name = req.get("name") if isinstance(req, dict) else None
            res = {
                "name": name,
                "topic_id": None,
                "num_partitions": 0,
                "replication_factor": 0,
                "error_code": 0,
                "error_message": None,
            }
            try:
                if not isinstance(req, dict):
                    raise InvalidTopicError("Each topic must be a mapping")
                validate_topic_name(name)
                assert isinstance(name, str)  # validate_topic_name raised otherwise
                if name in self.image.topics or name in pending:
                    raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
                if unify_collision_chars(name) in unified:
                    raise InvalidTopicError(
                        f"Topic '{name}' collides with existing topics (names differing only in '.' and '_')."
                    )
                configs = validate_topic_configs(req.get("configs"))
                assignment = req.get("replica_assignment")
                if assignment:
                    if isinstance(assignment, dict):
                        keys = sorted(assignment)
                        if keys != list(range(len(keys))):
                            raise InvalidReplicaAssignmentError("Partitions must be numbered 0..n-1")
                        assignment = [assignment[k] for k in keys]
                    placement = self._check_assignment(assignment)
                else:
                    n = req.get("num_partitions", -1)
                    rf = req.get("replication_factor", -1)
                    n = self.config.num_partitions if n in (-1, None) else n
                    rf = self.config.default_replication_factor if rf in (-1, None) else rf
                    if not isinstance(n, int) or n < 1:
                        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
                    if not isinstance(rf, int) or rf < 1:
                        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
                    placement = self._placement(n, rf)
                topic_id = self._new_topic_id()
                recs = [{"type": "Topic", "name": name, "topic_id": topic_id}]
                for k, v in sorted(configs.items()):
                    recs.append(
                        {"type": "ConfigRecord", "resource_type": "topic", "resource": name, "name": k, "value": v}
                    )
                for p, replicas in enumerate(placement):
                    recs.append(self._new_partition_record(name, topic_id, p, replicas))
                records += recs
                pending.add(name)
                unified.add(unify_collision_chars(name))
                res.update(topic_id=topic_id, num_partitions=len(placement), replication_factor=len(placement[0]))
            except KafkaError as e:
                res.update(_err(e))
            results.append(res)
        return records, results

    def delete_topics(self, names: list[str]) -> tuple[list[dict], list[dict]]:
        records, results, seen = [], [], set()
        for name in names:
            t = self.image.topics.get(name) if isinstance(name, str) else None
            if t is None or name in seen:
                results.append(
                    {
                        "name": name,
                        "topic_id": None,
                        **_err(UnknownTopicOrPartitionError(f"Topic {name!r} does not exist.")),
                    }
                )
                continue
            seen.add(name)
            records.append({"type": "RemoveTopic", "name": name, "topic_id": t.topic_id})
            results.append({"name": name, "topic_id": t.topic_id, "error_code": 0, "error_message": None})
        return records, results

    def create_partitions(self, name: str, total_count: int, assignment=None) -> tuple[list[dict], dict]:
        res = {"name": name, "error_code": 0, "error_message": None}
        try:
            t = self.image.topics.get(name) if isinstance(name, str) else None
            if t is None:
                raise UnknownTopicOrPartitionError(f"Topic {name!r} does not exist.")
            cur = len(t.partitions)
            if not isinstance(total_count, int) or total_count <= cur:
                raise InvalidPartitionsError(
                    f"Topic currently has {cur} partitions, which is higher than or equal to the requested "
                    f"{total_count}."
                )
            rf = len(t.partitions[0].replicas)
            if assignment:
                placement = self._check_assignment(assignment, rf)
                if len(placement) != total_count - cur:
                    raise InvalidReplicaAssignmentError(
                        f"Increasing the number of partitions by {total_count - cur} but {len(placement)} "
                        f"assignments provided."
                    )
            else:
                placement = self._placement(total_count - cur, rf, cur, t.partitions[0].replicas[0])
            records = [self._new_partition_record(name, t.topic_id, cur + i, r) for i, r in enumerate(placement)]
            return records, res
        except KafkaError as e:
            res.update(_err(e))
            return [], res

    def alter_configs(
        self, name: str, set_configs: dict | None, delete: list | None, replace: bool = False
    ) -> tuple[list[dict], dict]:
        """Topic config overrides; turning unclean election on elects leaders of offline partitions.

        ``replace`` (legacy AlterConfigs, api key 33): the overrides become exactly ``set_configs``, every other
        one deleted (``delete`` is ignored). The deletions are read from the image this very write commits
        against, so the replace is one controller operation (the actor's lock): two concurrent replaces apply
        one after the other and never mix (Kafka's ConfigurationControlManager.legacyAlterConfigResource: the
        explicitly altered and the implicitly deleted ConfigRecords of one resource, validated together and
        committed in one atomic batch by QuorumController.legacyAlterConfigs' write event)."""
        res = {"name": name, "error_code": 0, "error_message": None}
        try:
            t = self.image.topics.get(name) if isinstance(name, str) else None
            if t is None:
                raise UnknownTopicOrPartitionError(f"Topic {name!r} does not exist.")
            new = validate_topic_configs(set_configs or {})
            delete = [k for k in t.configs if k not in new] if replace else list(delete or [])
            for k in delete:
                if k not in topic_config_keys():
                    raise InvalidConfigError(f"Unknown topic config name: {k}")
            merged = {k: v for k, v in t.configs.items() if k not in delete}
            merged.update(new)
            validate_topic_configs(merged)
        except KafkaError as e:
            res.update(_err(e))
            return [], res
        records: list[dict] = [
            {"type": "ConfigRecord", "resource_type": "topic", "resource": name, "name": k, "value": v}
            for k, v in sorted(new.items())
            if t.configs.get(k) != v
        ]
        records += [
            {"type": "ConfigRecord", "resource_type": "topic", "resource": name, "name": k, "value": None}
            for k in delete
            if k in t.configs and k not in new
        ]
        unclean = truthy(merged.get("unclean.leader.election.enable", self.config.unclean_leader_election))
        if unclean and not self.unclean_enabled(name):
            alive = self.image.alive_brokers()
            for p, s in sorted(t.partitions.items()):
                if s.leader == NO_LEADER:
                    rec = PartitionChangeBuilder(name, p, s, alive, True).build()
                    if rec is not None:
                        records.append(rec)
        return records, res

    # ---- partitions ----------------------------------------------------------------------------
    def alter_partition(self, topic, partition, leader_id, leader_epoch, new_isr, partition_epoch):
        """AlterPartition from the leader replica (ISR shrink/expand). Returns (records, response)."""
        s = self.image.partition(topic, partition) if isinstance(topic, str) else None
        try:
            if s is None:
                raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
            if leader_epoch != s.leader_epoch:
                raise FencedLeaderEpochError(
                    f"Leader epoch {leader_epoch} of {topic}-{partition} is not the current {s.leader_epoch}"
                )
            if leader_id != s.leader:
                raise InvalidRequestError(f"Broker {leader_id} is not the leader of {topic}-{partition}")
            if partition_epoch != s.partition_epoch:
                raise InvalidUpdateVersionError(
                    f"Partition epoch {partition_epoch} of {topic}-{partition} is not the current {s.partition_epoch}"
                )
            new_isr = list(new_isr or [])
            if len(set(new_isr)) != len(new_isr) or leader_id not in new_isr:
                raise InvalidRequestError(f"Invalid ISR {new_isr}: it must hold the leader, without duplicates")
            alive = self.image.alive_brokers()
            bad = [r for r in new_isr if r not in s.replicas or r not in alive]
            if bad:
                raise IneligibleReplicaError(f"Replicas {bad} are not alive members of {s.replicas}")
        except KafkaError as e:
            cur = s.to_dict() if s is not None else {}
            return [], {
                **_err(e),
                "leader": cur.get("leader", -1),
                "leader_epoch": cur.get("leader_epoch", -1),
                "isr": cur.get("isr", []),
                "partition_epoch": cur.get("partition_epoch", -1),
            }
        rec = self._builder(topic, partition, alive).set_isr(new_isr).build()
        new = PartitionRegistration.from_dict(rec) if rec else s
        resp = {
            "error_code": 0,
            "error_message": None,
            "leader": new.leader,
            "leader_epoch": new.leader_epoch,
            "isr": list(new.isr),
            "partition_epoch": new.partition_epoch,
        }
        if new.leader != s.leader:
            resp.update(_err(NewLeaderElectedError(f"Reassignment of {topic}-{partition} moved the leader")))
        return ([rec] if rec else []), resp

    def elect_leaders(self, partitions, election_type: int = ELECT_PREFERRED) -> tuple[list[dict], list[dict]]:
        if partitions is None:
            partitions = [(t.name, p) for t in self.image.topics.values() for p in sorted(t.partitions)]
        records, results = [], []
        alive = self.image.alive_brokers()
        for item in partitions:
            topic, p = (item[0], item[1]) if isinstance(item, (list, tuple)) and len(item) == 2 else (None, None)
            res = {"topic": topic, "partition": p, "error_code": 0, "error_message": None}
            try:
                if election_type not in (ELECT_PREFERRED, ELECT_UNCLEAN):
                    raise InvalidRequestError(f"Unknown election type {election_type}")
                s = self.image.partition(topic, p) if isinstance(topic, str) and isinstance(p, int) else None
                if s is None or topic is None or p is None:
                    raise UnknownTopicOrPartitionError(f"{topic}-{p} does not exist")
                if election_type == ELECT_PREFERRED:
                    pref = s.replicas[0]
                    if s.leader == pref:
                        raise ElectionNotNeededError(f"{pref} is already the leader of {topic}-{p}")
                    if pref not in alive or pref not in s.isr:
                        raise PreferredLeaderNotAvailableError(
                            f"Preferred replica {pref} of {topic}-{p} is not alive or not in the ISR"
                        )
                else:
                    if s.leader != NO_LEADER:
                        raise ElectionNotNeededError(f"{topic}-{p} has leader {s.leader}")
                    if not any(r in alive for r in s.replicas):
                        raise EligibleLeadersNotAvailableError(f"No replica of {topic}-{p} is alive")
                rec = self._builder(topic, p, alive).set_election(election_type).build()
                if rec is None:
                    raise EligibleLeadersNotAvailableError(f"No eligible leader for {topic}-{p}")
                records.append(rec)
            except KafkaError as e:
                res.update(_err(e))
            results.append(res)
        return records, results

    def imbalanced_partitions(self) -> list[tuple[str, int]]:
        """Kafka's checkAndTriggerAutoLeaderRebalance: for each preferred broker whose share of
        partitions led by someone else exceeds leader.imbalance.per.broker.percentage, the partitions
        where moving the leadership back is possible (preferred alive and in ISR, no reassignment)."""
        alive = self.image.alive_brokers()
        by_pref: dict[int, list[tuple[str, int, PartitionRegistration]]] = {}
        for t in self.image.topics.values():
            for p, s in t.partitions.items():
                if not s.reassigning:
                    by_pref.setdefault(s.replicas[0], []).append((t.name, p, s))
        out = []
        for b, parts in sorted(by_pref.items()):
            not_led = [(t, p, s) for t, p, s in parts if s.leader != b]
            if not parts or len(not_led) * 100 <= self.config.imbalance_percentage * len(parts):
                continue
            if b not in alive:
                continue
            out += [(t, p) for t, p, s in not_led if b in s.isr]
        return out

    # ---- reassignment --------------------------------------------------------------------------
    def alter_partition_reassignments(self, assignments: list[dict]) -> tuple[list[dict], list[dict]]:
        """Start (replicas = target list) or cancel (replicas = None) reassignments (KIP-455)."""
        records, results = [], []
        alive = self.image.alive_brokers()
        for a in assignments:
            topic = a.get("topic") if isinstance(a, dict) else None
            p = a.get("partition") if isinstance(a, dict) else None
            res = {"topic": topic, "partition": p, "error_code": 0, "error_message": None}
            try:
                if not isinstance(a, dict):
                    raise InvalidRequestError("Each reassignment must be a mapping")
                s = self.image.partition(topic, p) if isinstance(topic, str) and isinstance(p, int) else None
                if s is None or not isinstance(topic, str) or not isinstance(p, int):
                    raise UnknownTopicOrPartitionError(f"{topic}-{p} does not exist")
                target = a.get("replicas")
                original = s.original_replicas
                if target is None:
                    if not s.reassigning:
                        raise NoReassignmentInProgressError(f"No reassignment of {topic}-{p} in progress")
                    # Kafka's PartitionReassignmentRevert: back to the original replicas; if none of
                    # them is in the ISR, the ISR becomes the original replicas.
                    b = (
                        self._builder(topic, p, alive)
                        .set_replicas(original, [], [])
                        .set_isr([r for r in s.isr if r in original] or original)
                    )
                else:
                    target = self._check_assignment([target])[0]
                    heading = len([r for r in s.replicas if r not in s.removing])  # the RF it is headed for
                    if not a.get("allow_replication_factor_change", True) and heading != len(target):
                        # KIP-860 (AlterPartitionReassignments v1's allow_replication_factor_change false)
                        raise InvalidReplicationFactorError(
                            f"The replication factor is changed from {heading} to {len(target)}"
                        )
                    merged, adding, removing = reassignment_plan(original, target)
                    b = self._builder(topic, p, alive).set_replicas(merged, adding, removing)
                rec = b.build()
                if rec is not None:
                    records.append(rec)
            except KafkaError as e:
                res.update(_err(e))
            results.append(res)
        return records, results

    def list_partition_reassignments(self) -> list[dict]:
        out = []
        for t in self.image.topics.values():
            for p, s in sorted(t.partitions.items()):
                if s.reassigning:
                    out.append(
                        {
                            "topic": t.name,
                            "partition": p,
                            "replicas": list(s.replicas),
                            "adding": list(s.adding),
                            "removing": list(s.removing),
                        }
                    )
        return out
