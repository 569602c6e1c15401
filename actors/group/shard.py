"""The group coordinator of one ``__consumer_offsets`` partition as a pure state machine (Kafka's
GroupCoordinatorShard): handlers take ``now_ms`` and return ``CoordinatorResult(records, response,
completions)``; ``replay(record)`` is the only mutator and ``load`` rebuilds from the partition. A
CoordinatorShard of the runtime (actors/coordinator/), driven by actors/group_coordinator.py; it composes
actors/group/membership.py and actors/group/offsets.py.
"""

from __future__ import annotations

from typing import Callable, Container, Iterable

from actors.group.classic_group import (
    CONSUMER_PROTOCOL_TYPE,
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    ClassicGroupMember,
    CoordinatorResult,
    GroupCoordinatorConfig,
    GroupSnapshotRecord,
    GroupState,
    InvalidGroupTransition,
    Pending,
)
from actors.group.membership import GroupMetadataManager
from actors.group.offsets import OffsetManager, has_known_partitions, unknown_partitions
from actors.group.records import (
    CoordinatorRecord,
    EndTxnMarker,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_record,
    group_metadata_record,
    partition_for,
)
from protocol import errors as E

__all__ = [
    "GroupCoordinatorShard",
    "GroupState",
    "VALID_PREVIOUS_STATES",
    "InvalidGroupTransition",
    "ClassicGroup",
    "ClassicGroupMember",
    "CoordinatorResult",
    "GroupCoordinatorConfig",
    "GroupSnapshotRecord",
    "Pending",
    "CONSUMER_PROTOCOL_TYPE",
    "partition_for",
]

GROUP_ID_NOT_FOUND = E.for_name("GROUP_ID_NOT_FOUND").code
NON_EMPTY_GROUP = E.for_name("NON_EMPTY_GROUP").code


class GroupCoordinatorShard:
    """Consumer groups and committed offsets of one ``__consumer_offsets`` partition.

    Single-threaded: one owner (the coordinator actor) calls it, and must replay a handler's records
    before calling the next handler.
    """

    def __init__(self, config: GroupCoordinatorConfig | None = None, *, new_uuid: Callable[[], str] | None = None):
        self.config = config or GroupCoordinatorConfig()
        self._groups: dict[str, ClassicGroup] = {}
        self._offsets = OffsetManager(self.config)
        self._membership = GroupMetadataManager(self._groups, self.config, new_uuid)

    # ================================================================== membership (JoinGroup & co)
    def join_group(
        self,
        group_id: str,
        member_id: str,
        protocol_type: str,
        protocols: Iterable,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        now_ms: int,
        **kw,
    ) -> CoordinatorResult:
        """JoinGroup. Keywords: ``group_instance_id``, ``client_id``, ``client_host``,
        ``require_known_member_id`` (JoinGroup v4+, default True), ``supports_skip_assignment`` (v9+)."""
        return self._membership.join_group(
            group_id, member_id, protocol_type, protocols, session_timeout_ms, rebalance_timeout_ms, now_ms, **kw
        )

    def sync_group(
        self, group_id: str, member_id: str, generation_id: int, assignments, now_ms: int, **kw
    ) -> CoordinatorResult:
        return self._membership.sync_group(group_id, member_id, generation_id, assignments, now_ms, **kw)

    def heartbeat(self, group_id: str, member_id: str, generation_id: int, now_ms: int, **kw) -> CoordinatorResult:
        return self._membership.heartbeat(group_id, member_id, generation_id, now_ms, **kw)

    def leave_group(self, group_id: str, members, now_ms: int) -> CoordinatorResult:
        return self._membership.leave_group(group_id, members, now_ms)

    def poll_expirations(self, now_ms: int) -> CoordinatorResult:
        """Fire due heartbeat / pending-member / join / sync timers."""
        return self._membership.poll_expirations(now_ms)

    def next_deadline(self) -> int | None:
        """The earliest armed timer (absolute ms), or None."""
        return self._membership.next_deadline()

    # ================================================================== offsets
    def offset_commit(
        self,
        group_id: str,
        topics: Iterable[dict],
        now_ms: int,
        *,
        member_id: str = "",
        generation_id: int = -1,
        group_instance_id: str | None = None,
        producer_id: int = -1,
        api_version: int = -1,
        existing: Container[tuple[str, int]] | None = None,
    ) -> CoordinatorResult:
        """OffsetCommit: group members pass their member id and generation; simple consumers and admin
        resets pass generation -1 (accepted for an unknown or Empty group). With ``producer_id`` it is
        TxnOffsetCommit: the records stay pending (invisible to OffsetFetch) until the transaction's marker.
        ``api_version``: the OffsetCommit request's (-1: not a wire request), see ``OffsetManager.validate_commit``.
        ``existing``: the partitions the cluster has; the others answer UNKNOWN_TOPIC_OR_PARTITION, unstored
        (``OffsetManager.commit``).

        An accepted OffsetCommit from a member of a Stable or PreparingRebalance group counts as its heartbeat:
        its session deadline moves to now + session.timeout.ms (Kafka's OffsetMetadataManager.commitOffset ->
        GroupMetadataManager.rescheduleClassicGroupMemberHeartbeat: "the offset commits maintain the session");
        a TxnOffsetCommit does not (commitTransactionalOffset reschedules nothing)."""
        topics = list(topics)
        group = self._groups.get(group_id)
        result = self._offsets.commit(
            group,
            group_id,
            topics,
            now_ms,
            member_id=member_id,
            generation_id=generation_id,
            group_instance_id=group_instance_id,
            producer_id=producer_id,
            api_version=api_version,
            existing=existing,
        )
        # (nothing to commit, or only unknown partitions: Kafka's coordinator is not called, no heartbeat)
        asks = has_known_partitions(topics, unknown_partitions(topics, existing))
        if producer_id < 0 and group is not None and asks:
            accepted = not OffsetManager.validate_commit(
                group, member_id, generation_id, group_instance_id, api_version=api_version
            )
            if accepted:
                result.records.extend(self._membership.commit_heartbeat(group, member_id, now_ms))
        return result

    def txn_offset_commit(
        self, group_id: str, topics: Iterable[dict], producer_id: int, now_ms: int, **kw
    ) -> CoordinatorResult:
        """TxnOffsetCommit: ``offset_commit`` in the producer's transaction."""
        if not isinstance(producer_id, int) or producer_id < 0:
            raise E.InvalidRequestError("TxnOffsetCommit needs the transactional producer's id")
        return self.offset_commit(group_id, topics, now_ms, producer_id=producer_id, **kw)

    def complete_transaction(self, producer_id: int, committed: bool) -> CoordinatorResult:
        """The producer's transaction marker reached this partition (Kafka's replayEndTransactionMarker)."""
        return CoordinatorResult([EndTxnMarker(producer_id, committed)], None)

    def pending_transactions(self) -> dict[int, int]:
        """Producer id -> how many offsets its open transaction commits."""
        return {pid: len(p) for pid, p in self._offsets.pending.items()}

    def offset_fetch(self, group_id: str, topics: Iterable[dict] | None = None, require_stable: bool = False) -> dict:
        """OffsetFetch: ``topics=[{"name", "partition_indexes"}]`` or None for every committed offset."""
        return self._offsets.fetch(group_id, None if topics is None else list(topics), require_stable)

    def offset_delete(self, group_id: str, topics: Iterable[dict]) -> CoordinatorResult:
        return self._offsets.delete(self._groups.get(group_id), group_id, list(topics))

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], OffsetCommitValue]:
        return self._offsets.committed(group_id)

    def cleanup_expired_offsets(self, now_ms: int) -> CoordinatorResult:
        """Offsets retention: tombstones for expired offsets; Empty groups left without offsets are deleted."""
        records = []
        for group_id in sorted(set(self._groups) | set(self._offsets.offsets)):
            group = self._groups.get(group_id)
            tombstones, remaining = self._offsets.expired(group, group_id, now_ms)
            records += tombstones
            if (
                group is not None
                and group.in_state(GroupState.EMPTY)
                and remaining == 0
                and not group.pending_join_members
            ):
                dead = group.clone()
                dead.transition_to(GroupState.DEAD, now_ms)
                records.append(group_metadata_record(group_id, None))
        return CoordinatorResult(records, None)

    # ================================================================== admin
    def metrics_view(self) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int, int]]]:
        """For the metrics exporter (actors/server/metrics.py): ``[(group, state, members)]`` and
        ``[(group, topic, partition, committed offset)]``. Read-only."""
        groups = [(gid, str(g.state), len(g.members)) for gid, g in self._groups.items()]
        offsets = [(gid, t, p, v.offset) for gid, by_tp in self._offsets.offsets.items() for (t, p), v in by_tp.items()]
        return groups, offsets

    def list_groups(
        self, states_filter: Iterable[str] | None = None, types_filter: Iterable[str] | None = None
    ) -> dict:
        states = {s.lower() for s in states_filter} if states_filter else None
        types = {t.lower() for t in types_filter} if types_filter else None
        out = []
        for gid in sorted(self._groups):
            g = self._groups[gid]
            if states is not None and str(g.state).lower() not in states:
                continue
            if types is not None and "classic" not in types:
                continue
            out.append(
                {
                    "group_id": gid,
                    "protocol_type": g.protocol_type or "",
                    "group_state": str(g.state),
                    "group_type": "classic",
                }
            )
        return {"error_code": 0, "groups": out}

    def describe_groups(self, group_ids: Iterable[str]) -> dict:
        out = []
        for gid in group_ids:
            g = self._groups.get(gid)
            if g is None:
                out.append(
                    {
                        "error_code": 0,
                        "group_id": gid,
                        "group_state": str(GroupState.DEAD),
                        "protocol_type": "",
                        "protocol_data": "",
                        "members": [],
                    }
                )
            else:
                out.append(g.describe())
        return {"groups": out}

    def delete_groups(self, group_ids: Iterable[str], now_ms: int) -> CoordinatorResult:
        """DeleteGroups: only Empty groups (NON_EMPTY_GROUP otherwise); their offsets go too."""
        records, results, seen = [], [], set()
        for gid in group_ids:
            if gid in seen:
                continue
            seen.add(gid)
            g = self._groups.get(gid)
            if g is None or g.in_state(GroupState.DEAD):
                code = GROUP_ID_NOT_FOUND
            elif not g.in_state(GroupState.EMPTY):
                code = NON_EMPTY_GROUP
            else:
                dead = g.clone()
                dead.transition_to(GroupState.DEAD, now_ms)
                records += self._offsets.tombstones(gid)
                records.append(group_metadata_record(gid, None))
                code = 0
            results.append({"group_id": gid, "error_code": code})
        return CoordinatorResult(records, {"results": results})

    # ================================================================== reads
    def group(self, group_id: str) -> ClassicGroup | None:
        """The installed group (sealed: read it, never edit it)."""
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def state(self) -> tuple[dict[str, ClassicGroup], dict[str, dict]]:
        """Everything, for equality checks: (groups, committed offsets)."""
        return dict(self._groups), {g: dict(o) for g, o in self._offsets.offsets.items()}

    def durable_state(self) -> tuple[dict, dict]:
        """What the log alone determines: Stable/Empty groups' metadata values and all offsets."""
        groups = {
            gid: g.durable_view() for gid, g in self._groups.items() if g.in_state(GroupState.STABLE, GroupState.EMPTY)
        }
        return groups, {g: dict(o) for g, o in self._offsets.offsets.items()}

    # ================================================================== replay / load
    def replay(self, record) -> None:
        """Apply one record; the only mutator of the shard."""
        if isinstance(record, GroupSnapshotRecord):
            if record.group is None:
                self._groups.pop(record.group_id, None)
            else:
                if not record.group._sealed:
                    raise InvalidGroupTransition("snapshot records carry sealed groups")
                self._groups[record.group_id] = record.group
            return
        if isinstance(record, EndTxnMarker):
            for applied in self._offsets.replay_end_txn(record.producer_id, record.committed):
                if applied.group not in self._groups and self._offsets.has_offsets(applied.group):
                    self._groups[applied.group] = ClassicGroup(applied.group).seal()
            return
        if not isinstance(record, CoordinatorRecord):
            raise TypeError(f"not a coordinator record: {record!r}")
        key, value = record.key, record.value
        if isinstance(key, OffsetCommitKey):
            assert value is None or isinstance(value, OffsetCommitValue)
            self._offsets.replay(key, value, record.producer_id)
            if record.producer_id < 0 and value is not None and key.group not in self._groups:
                # Kafka: committing offsets creates the (Empty, simple) group if it is not there.
                self._groups[key.group] = ClassicGroup(key.group).seal()
        elif isinstance(key, GroupMetadataKey):
            if value is None:
                self._groups.pop(key.group, None)
            else:
                assert isinstance(value, GroupMetadataValue)
                self._groups[key.group] = ClassicGroup.from_metadata_value(key.group, value).seal()
        else:
            raise TypeError(f"unknown coordinator record key {key!r}")

    def replay_all(self, records: Iterable) -> None:
        for r in records:
            self.replay(r)

    def load(self, records: Iterable, now_ms: int) -> int:
        """Rebuild from a ``__consumer_offsets`` partition read from its start: ``records`` are
        ``CoordinatorRecord``\\ s or raw ``(key_bytes, value_bytes_or_None)`` pairs. Clears the shard first.
        Returns the number of records replayed."""
        self._groups.clear()
        self._offsets.clear()
        n = 0
        for r in records:
            if isinstance(r, (CoordinatorRecord, EndTxnMarker)):
                self.replay(r)
            else:  # (key, value) or (key, value, producer id of a transactional batch)
                rec = decode_record(r[0], r[1])
                if len(r) > 2 and r[2] >= 0:
                    rec = CoordinatorRecord(rec.key, rec.value, r[2])
                self.replay(rec)
            n += 1
        self.replay_all(self.on_loaded(now_ms).records)
        return n

    def on_loaded(self, now_ms: int) -> CoordinatorResult:
        """After a load: arm the session timer of every loaded member (Kafka's onLoaded)."""
        records = []
        for gid in sorted(self._groups):
            g = self._groups[gid]
            if not g.members:
                continue
            c = g.clone()
            for mid, m in list(c.members.items()):
                c.update_member(mid, heartbeat_deadline_ms=now_ms + m.session_timeout_ms)
            records.append(GroupSnapshotRecord(gid, c.seal()))
        return CoordinatorResult(records, None)
