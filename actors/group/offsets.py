"""Committed offsets (Kafka's OffsetMetadataManager) as pure handlers: OffsetCommit, OffsetFetch, OffsetDelete,
transactional offsets and retention (KIP-211); only ``replay`` changes them. Called by the shard
(actors/group/shard.py); no Ray, no clock.
"""

from __future__ import annotations

from typing import Container, Iterable

from actors.group.classic_group import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicGroup,
    CoordinatorResult,
    GroupCoordinatorConfig,
    GroupState,
)
from actors.group.records import OffsetCommitKey, OffsetCommitValue, offset_commit_record
from protocol import errors as E

__all__ = ["OffsetManager"]

NONE = E.NoError.code
COORDINATOR_NOT_AVAILABLE = E.for_name("COORDINATOR_NOT_AVAILABLE").code
ILLEGAL_GENERATION = E.for_name("ILLEGAL_GENERATION").code
UNKNOWN_MEMBER_ID = E.for_name("UNKNOWN_MEMBER_ID").code
FENCED_INSTANCE_ID = E.for_name("FENCED_INSTANCE_ID").code
REBALANCE_IN_PROGRESS = E.for_name("REBALANCE_IN_PROGRESS").code
OFFSET_METADATA_TOO_LARGE = E.for_name("OFFSET_METADATA_TOO_LARGE").code
GROUP_ID_NOT_FOUND = E.for_name("GROUP_ID_NOT_FOUND").code
NON_EMPTY_GROUP = E.for_name("NON_EMPTY_GROUP").code
GROUP_SUBSCRIBED_TO_TOPIC = E.for_name("GROUP_SUBSCRIBED_TO_TOPIC").code
UNSTABLE_OFFSET_COMMIT = E.UnstableOffsetCommitError.code
UNKNOWN_TOPIC_OR_PARTITION = E.UnknownTopicOrPartitionError.code

TP = tuple[str, int]


def unknown_partitions(topics: Iterable[dict], existing: Container[TP] | None) -> set[TP]:
    """The partitions of a commit's ``topics`` (``[{"name", "partitions": [{"partition_index"}]}]``) not in
    ``existing`` (None: no check, none unknown)."""
    if existing is None:
        return set()
    asked = {(t["name"], int(p["partition_index"])) for t in topics for p in t.get("partitions", [])}
    return {tp for tp in asked if tp not in existing}


def has_known_partitions(topics: Iterable[dict], unknown: set[TP]) -> bool:
    """Whether a commit names a partition outside ``unknown`` (the coordinator has something to do)."""
    return any((t["name"], int(p["partition_index"])) not in unknown for t in topics for p in t.get("partitions", []))


def _answer_all(topics: Iterable[dict], code: int) -> list[dict]:
    return [
        {
            "name": t["name"],
            "partitions": [
                {"partition_index": int(p["partition_index"]), "error_code": code} for p in t.get("partitions", [])
            ],
        }
        for t in topics
    ]


class OffsetManager:
    """The shard's committed offsets. Not thread-safe: the coordinator actor is its only caller."""

    def __init__(self, config: GroupCoordinatorConfig):
        self.config = config
        self.offsets: dict[str, dict[TP, OffsetCommitValue]] = {}
        # TxnOffsetCommit: producer id -> the offsets its open transaction commits (Kafka's
        # pendingTransactionalOffsets), applied by a COMMIT marker, dropped by an ABORT
        self.pending: dict[int, dict[OffsetCommitKey, OffsetCommitValue | None]] = {}

    # ------------------------------------------------------------------ replay (the only mutator)
    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None, producer_id: int = -1) -> None:
        if producer_id >= 0:
            self.pending.setdefault(producer_id, {})[key] = value
            return
        if value is None:
            group = self.offsets.get(key.group)
            if group is not None:
                group.pop((key.topic, key.partition), None)
                if not group:
                    del self.offsets[key.group]
        else:
            self.offsets.setdefault(key.group, {})[(key.topic, key.partition)] = value

    def replay_end_txn(self, producer_id: int, committed: bool) -> list[OffsetCommitKey]:
        """A transaction marker: the producer's pending offsets are committed or dropped; the keys applied."""
        pending = self.pending.pop(producer_id, {})
        if not committed:
            return []
        for key, value in pending.items():
            self.replay(key, value)
        return list(pending)

    def clear(self) -> None:
        self.offsets.clear()
        self.pending.clear()

    # ------------------------------------------------------------------ reads
    def committed(self, group_id: str) -> dict[TP, OffsetCommitValue]:
        return dict(self.offsets.get(group_id, {}))

    def has_offsets(self, group_id: str) -> bool:
        return bool(self.offsets.get(group_id))

    # ------------------------------------------------------------------ OffsetCommit
    @staticmethod
    def validate_commit(
        group: ClassicGroup | None,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        *,
        transactional: bool = False,
        api_version: int = -1,
    ) -> int:
        """Kafka 4's OffsetMetadataManager.validateOffsetCommit / validateTransactionalOffsetCommit over
        ClassicGroup.validateOffsetCommit: 0 or the error every partition of the commit answers.

        A commit without member id, instance id and generation (-1) into a group with members is refused
        (UNKNOWN_MEMBER_ID) only when it is not ``transactional``: TxnOffsetCommit v0-2 carry no member fields.
        Transactional commits are not held back by CompletingRebalance either. ``api_version``: OffsetCommit's;
        v9+ answers GROUP_ID_NOT_FOUND for a generation into an unknown group (older versions, and
        TxnOffsetCommit, ILLEGAL_GENERATION)."""
        if group is None:
            # No group: a simple consumer or the admin client (generation -1) commits into a new simple group.
            if generation_id < 0:
                return NONE
            return GROUP_ID_NOT_FOUND if not transactional and api_version >= 9 else ILLEGAL_GENERATION
        if group.in_state(GroupState.DEAD):
            return COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.in_state(GroupState.EMPTY):
            return NONE  # admin client / manual assignment into an empty group
        if generation_id >= 0 or member_id or group_instance_id is not None:
            # ClassicGroup.validateMember, then the generation
            if group_instance_id is not None:
                existing = group.static_members.get(group_instance_id)
                if existing is None:
                    return UNKNOWN_MEMBER_ID
                if existing != member_id:
                    return FENCED_INSTANCE_ID
            if not group.has_member(member_id):
                return UNKNOWN_MEMBER_ID
            if generation_id != group.generation_id:
                return ILLEGAL_GENERATION
        elif not transactional and not group.in_state(GroupState.EMPTY):
            return UNKNOWN_MEMBER_ID  # only members commit into a non-empty group
        if not transactional and group.in_state(GroupState.COMPLETING_REBALANCE):
            # The member has its new generation but not its assignment yet.
            return REBALANCE_IN_PROGRESS
        return NONE

    def commit(
        self,
        group: ClassicGroup | None,
        group_id: str,
        topics: Iterable[dict],
        now_ms: int,
        *,
        member_id: str = "",
        generation_id: int = -1,
        group_instance_id: str | None = None,
        producer_id: int = -1,
        api_version: int = -1,
        existing: Container[TP] | None = None,
    ) -> CoordinatorResult:
        """OffsetCommit, or with ``producer_id`` TxnOffsetCommit (records pending until the marker).

        ``existing``: the partitions the cluster's metadata holds (None: not checked). A partition not in it
        answers UNKNOWN_TOPIC_OR_PARTITION and nothing is stored for it; the others are validated and stored
        as usual; when none is left the group is not looked at (Kafka's KafkaApis.handleOffsetCommitRequest
        and handleTxnOffsetCommitRequest: partitions missing from the metadataCache are answered there, the
        coordinator gets the rest, and is not called at all when nothing is left)."""
        topics = list(topics)
        unknown = unknown_partitions(topics, existing)
        if unknown and not has_known_partitions(topics, unknown):
            return CoordinatorResult([], {"topics": _answer_all(topics, UNKNOWN_TOPIC_OR_PARTITION)})
        error = self.validate_commit(
            group,
            member_id,
            generation_id,
            group_instance_id,
            transactional=producer_id >= 0,
            api_version=api_version,
        )
        records, out_topics = [], []
        max_meta = self.config.offset_metadata_max_bytes
        for topic in topics:
            parts = []
            for p in topic.get("partitions", []):
                if (topic["name"], int(p["partition_index"])) in unknown:
                    parts.append(
                        {"partition_index": int(p["partition_index"]), "error_code": UNKNOWN_TOPIC_OR_PARTITION}
                    )
                    continue
                code = error
                metadata = p.get("committed_metadata") or ""
                if not code and len(metadata.encode("utf-8")) > max_meta:
                    code = OFFSET_METADATA_TOO_LARGE
                if not code:
                    value = OffsetCommitValue(
                        int(p["committed_offset"]), int(p.get("committed_leader_epoch", -1)), metadata, now_ms
                    )
                    records.append(
                        offset_commit_record(group_id, topic["name"], int(p["partition_index"]), value, producer_id)
                    )
                parts.append({"partition_index": int(p["partition_index"]), "error_code": code})
            out_topics.append({"name": topic["name"], "partitions": parts})
        return CoordinatorResult(records, {"topics": out_topics})

    # ------------------------------------------------------------------ OffsetFetch
    def fetch(self, group_id: str, topics: Iterable[dict] | None = None, require_stable: bool = False) -> dict:
        """Committed offsets; ``topics=None`` means all. Unknown partitions answer offset -1, error 0. With
        ``require_stable`` (KIP-447, read_committed consumers) a partition an open transaction commits an
        offset for answers UNSTABLE_OFFSET_COMMIT (retriable) until that transaction's marker."""
        committed = self.offsets.get(group_id, {})
        unstable = (
            {(k.topic, k.partition) for pend in self.pending.values() for k in pend if k.group == group_id}
            if require_stable
            else set()
        )
        if topics is None:
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(committed):
                by_topic.setdefault(t, []).append(p)
            wanted = [(t, ps) for t, ps in by_topic.items()]
        else:
            wanted = [(t["name"], list(t.get("partition_indexes", t.get("partitions", [])))) for t in topics]
        out = []
        for name, partitions in wanted:
            parts: list[dict] = []
            for p in partitions:
                if (name, int(p)) in unstable:
                    parts.append(
                        {"partition_index": int(p), "committed_offset": -1, "error_code": UNSTABLE_OFFSET_COMMIT}
                    )
                    continue
                v = committed.get((name, int(p)))
                parts.append(
                    {
                        "partition_index": int(p),
                        "committed_offset": -1 if v is None else v.offset,
                        "committed_leader_epoch": -1 if v is None else v.leader_epoch,
                        "metadata": "" if v is None else v.metadata,
                        "error_code": NONE,
                    }
                )
            out.append({"name": name, "partitions": parts})
        return {"error_code": NONE, "topics": out}

    # ------------------------------------------------------------------ OffsetDelete (KIP-496)
    def delete(self, group: ClassicGroup | None, group_id: str, topics: Iterable[dict]) -> CoordinatorResult:
        if group is None or group.in_state(GroupState.DEAD):
            return CoordinatorResult([], {"error_code": GROUP_ID_NOT_FOUND, "topics": []})
        if not group.in_state(GroupState.EMPTY) and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return CoordinatorResult([], {"error_code": NON_EMPTY_GROUP, "topics": []})
        committed = self.offsets.get(group_id, {})
        records, out = [], []
        for t in topics:
            subscribed = group.is_subscribed_to_topic(t["name"])
            parts = []
            for p in t.get("partitions", []):
                index = int(p["partition_index"]) if isinstance(p, dict) else int(p)
                if subscribed:
                    parts.append({"partition_index": index, "error_code": GROUP_SUBSCRIBED_TO_TOPIC})
                    continue
                if (t["name"], index) in committed:
                    records.append(offset_commit_record(group_id, t["name"], index, None))
                parts.append({"partition_index": index, "error_code": NONE})
            out.append({"name": t["name"], "partitions": parts})
        return CoordinatorResult(records, {"error_code": NONE, "topics": out})

    def tombstones(self, group_id: str) -> list:
        return [offset_commit_record(group_id, t, p, None) for (t, p) in sorted(self.offsets.get(group_id, {}))]

    # ------------------------------------------------------------------ retention
    def expired(self, group: ClassicGroup | None, group_id: str, now_ms: int) -> tuple[list, int]:
        """(tombstones for the group's expired offsets, number of offsets that remain)."""
        committed = self.offsets.get(group_id, {})
        if not committed:
            return [], 0
        retention = self.config.offsets_retention_ms
        simple = group is None or group.protocol_type is None
        if group is not None and not simple and not group.in_state(GroupState.EMPTY):
            if not (
                group.in_state(GroupState.STABLE)
                and group.protocol_type == CONSUMER_PROTOCOL_TYPE
                and group.subscribed_topics is not None
            ):
                return [], len(committed)  # an active group keeps its offsets
        records = []
        for (topic, partition), v in sorted(committed.items()):
            if group is not None and not simple and group.is_subscribed_to_topic(topic):
                continue
            if v.expire_timestamp >= 0:
                expired = now_ms >= v.expire_timestamp
            else:
                if group is None or simple or not group.in_state(GroupState.EMPTY) or group.state_timestamp_ms is None:
                    base = v.commit_timestamp
                else:
                    base = group.state_timestamp_ms
                expired = now_ms - base >= retention
            if expired:
                records.append(offset_commit_record(group_id, topic, partition, None))
        return records, len(committed) - len(records)
