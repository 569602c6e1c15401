"""Consumer-group membership for ``Consumer(group_id=...)``: Kafka's ConsumerCoordinator on the client side.

Calls go through ``GroupCoordinatorClient`` (rafka/coordinator_client.py), which finds the group's
coordinator and finds it again when it moves.

``ConsumerCoordinator`` is the member's state machine, driven from the consumer's ``poll`` thread
(``ensure_active_group``, Kafka's ``poll -> ensureActiveGroup``): JoinGroup (MEMBER_ID_REQUIRED (79) ->
join again with the id given; UNKNOWN_MEMBER_ID (25) -> forget the id; ILLEGAL_GENERATION (22) /
REBALANCE_IN_PROGRESS (27) -> join again), the leader runs the assignor the coordinator chose
(``perform_assignment``), SyncGroup, then the new assignment is applied with the rebalance listener:

- eager protocol (range, roundrobin, sticky): every owned partition is revoked before joining;
- cooperative protocol (all configured assignors support it, e.g. ``cooperative-sticky``): only
  partitions the new assignment takes away are revoked, then the member joins again so they can be
  handed over (KIP-429); the other partitions keep being fetched throughout.

A heartbeat thread sends Heartbeat every ``heartbeat_interval_ms`` while the member is stable; 27 asks
for a rejoin, 25/22 mean the member lost its partitions (``on_partitions_lost`` at the next poll). The
same thread enforces ``max_poll_interval_ms``: a member whose application stops polling leaves the group
(Kafka's "poll timeout expired" LeaveGroup), so its partitions go to the others.

Offsets: newly assigned partitions start from the group's committed offset (OffsetFetch), else
``auto_offset_reset``; ``commit`` sends OffsetCommit with the member id and generation.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, Callable, Iterable

from protocol.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    KafkaError,
    MemberIdRequiredError,
    NoError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
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
from protocol.names import OFFSETS_TOPIC
from rafka.consumer.assignors import (
    COOPERATIVE,
    Subscription,
    decode_assignment,
    encode_subscription,
    get_assignor,
    perform_assignment,
)
from rafka.consumer.subscription import SubscriptionState
from rafka.coordinator_client import GroupCoordinatorClient, _Call, _first_code
from rafka.structs import OffsetAndMetadata, TopicPartition
from rafka.transport import RAY, Transport

log = logging.getLogger("rafka.group")

PROTOCOL_TYPE = "consumer"
NONE = NoError.code
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID = IllegalGenerationError.code, UnknownMemberIdError.code
REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID = RebalanceInProgressError.code, FencedInstanceIdError.code
MEMBER_ID_REQUIRED = MemberIdRequiredError.code


class ConsumerRebalanceListener:
    """Kafka's ConsumerRebalanceListener; subclass it, or pass any object with these methods."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Called before partitions are taken away (commit their progress here)."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Called once newly assigned partitions have their starting positions."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """Called when the member was removed from the group: the partitions may already be owned by others."""
        self.on_partitions_revoked(lost)


class ConsumerCoordinator:
    """One consumer's membership in its group (Kafka's ConsumerCoordinator; see the module docstring). It
    works on the consumer's ``SubscriptionState``: sets the assignment the group gives, seeks new partitions
    to their committed offsets, commits ``all_consumed()``."""

    def __init__(
        self,
        subscriptions: SubscriptionState,
        metadata,
        config,
        cluster_name: str,
        client_id: str,
        group_id: str,
        transport: Transport = RAY,
    ):
        self.subscriptions = subscriptions
        self.metadata = metadata
        self.client_id = client_id
        cfg = config
        self.cfg = cfg
        self.group_id = group_id
        self.coordinator = GroupCoordinatorClient(cluster_name, metadata, group_id, cfg.retry_backoff_ms, transport)
        self.assignors = [get_assignor(n) for n in cfg.partition_assignment_strategy]
        self.protocol = COOPERATIVE if all(COOPERATIVE in a.supported_protocols for a in self.assignors) else "EAGER"
        self.member_id = ""
        self.generation = -1
        self.protocol_name: str | None = None
        self.leader = ""
        self.instance_id = cfg.group_instance_id
        self.owned: set[TopicPartition] = set()
        self._subscribed_snapshot: dict[str, int] = {}
        self._metadata_checked = 0.0
        self._lock = threading.RLock()
        self._rejoin = False
        self._lost = False
        self._stable = False
        self._last_poll = time.monotonic()
        self._stop = threading.Event()
        self._hb_thread: threading.Thread | None = None
        self._phase: str | None = None  # None, "join" or "sync" (a request in flight: self._call)
        self._call: _Call | None = None
        self._next_auto_commit = time.monotonic() + cfg.auto_commit_interval_ms / 1000.0

    # -- subscription ------------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str] | None, pattern: str | re.Pattern | None, listener) -> None:
        self.subscriptions.subscribe(topics, pattern, listener)
        self._resolve_topics(force=True)
        with self._lock:
            self._rejoin = True

    def subscription(self) -> set[str]:
        return set(self._subscribed_snapshot)

    def _resolve_topics(self, force: bool = False) -> bool:
        """Recompute the subscribed topics and their partition counts; True when they changed."""
        now = time.monotonic()
        if not force and (now - self._metadata_checked) * 1000 < self.cfg.metadata_max_age_ms:
            return False
        self._metadata_checked = now
        md = self.metadata
        pattern = self.subscriptions.pattern
        if pattern is not None:
            names = [t for t in md.list_topics() if t != OFFSETS_TOPIC and pattern.fullmatch(t)]
            md.refresh(names, force=True)
        else:
            names = self.subscriptions.topics
            md.refresh(list(names), force=True)
        snap = {}
        for t in names:
            tm = md.topic(t)
            if tm is not None and tm.partitions:
                snap[t] = len(tm.partitions)
        changed = snap != self._subscribed_snapshot
        self._subscribed_snapshot = snap
        return changed

    # -- the poll-thread side ----------------------------------------------------------------------
    def on_poll(self, deadline: float) -> None:
        """Called by ``poll``: note the poll, advance the join (waiting at most until ``deadline``), and
        auto commit."""
        self._last_poll = time.monotonic()
        if self._resolve_topics():
            with self._lock:
                self._rejoin = True
        self.ensure_active_group(deadline)
        if self.cfg.enable_auto_commit and self._stable and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self.cfg.auto_commit_interval_ms / 1000.0
            self.commit_quietly()

    def rebalancing(self) -> bool:
        """True while this member has no settled assignment: never joined, a rejoin is due (a subscription
        change, or the coordinator answered REBALANCE_IN_PROGRESS), or a JoinGroup/SyncGroup is in flight."""
        with self._lock:
            return self.generation < 0 or self._rejoin or self._phase is not None

    def ensure_active_group(self, deadline: float) -> None:
        """Advance JoinGroup -> SyncGroup -> apply, never blocking past ``deadline`` (like Kafka's poll
        timer): a rebalance waits for every member, and they may all be polled from one thread."""
        with self._lock:
            lost, self._lost = self._lost, False
        if lost and self.owned:
            gone, self.owned = set(self.owned), set()
            self.subscriptions.assign([])
            self._listen("on_partitions_lost", gone)
        if self._hb_thread is None:
            self._hb_thread = threading.Thread(
                target=self._heartbeat_loop, daemon=True, name=f"rafka-heartbeat-{self.group_id}"
            )
            self._hb_thread.start()
        while True:
            if self._phase is None:
                with self._lock:
                    if not (self._rejoin or self.generation < 0):
                        return
                    self._rejoin = False
                    self._stable = False
                self._start_join()
            res = self._call.poll(max(0.0, deadline - time.monotonic()))
            if res is None:
                return  # still in progress: the next poll goes on
            if self._phase == "join":
                self._phase = None
                if self._joined(res):
                    self._phase = "sync"
            else:
                self._phase = None
                self._synced(res)
            if time.monotonic() >= deadline and self._phase is None:
                return

    def _start_join(self) -> None:
        if self.protocol != COOPERATIVE and self.owned:
            if self.cfg.enable_auto_commit:
                self.commit_quietly()
            revoked, self.owned = set(self.owned), set()
            self.subscriptions.assign([])
            self._listen("on_partitions_revoked", revoked)
        protocols = []
        for a in self.assignors:
            sub = Subscription(
                sorted(self._subscribed_snapshot),
                a.subscription_user_data(self._subscribed_snapshot),
                sorted(self.owned),
                self.generation,
            )
            protocols.append((a.name, encode_subscription(sub, 1)))
        self._call = self.coordinator.start(
            JoinGroupRequest(
                self.group_id,
                self.member_id,
                PROTOCOL_TYPE,
                protocols,
                self.cfg.session_timeout_ms,
                rebalance_timeout_ms=self.cfg.max_poll_interval_ms,
                group_instance_id=self.instance_id,
                client_id=self.client_id,
            )
        )
        self._phase = "join"

    def _joined(self, res: dict) -> bool:
        """Handle a JoinGroup answer; True when SyncGroup was sent."""
        code = res["error_code"]
        if code == MEMBER_ID_REQUIRED:
            self.member_id = res["member_id"]
            self._rejoin = True
            return False
        if code in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS):
            self._reset_generation(lost=code == UNKNOWN_MEMBER_ID)
            return False
        if code:
            raise for_code(code)(res.get("error_message") or f"JoinGroup for {self.group_id!r} failed")
        with self._lock:
            self.member_id, self.generation = res["member_id"], res["generation_id"]
        self.protocol_name, self.leader = res["protocol_name"], res["leader"]
        assignments = {}
        if self.leader == self.member_id and not res.get("skip_assignment"):
            assignments = self._lead(res["members"])
        self._call = self.coordinator.start(
            SyncGroupRequest(
                self.group_id,
                self.member_id,
                self.generation,
                assignments,
                group_instance_id=self.instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=self.protocol_name,
            )
        )
        return True

    def _synced(self, res: dict) -> None:
        code = res["error_code"]
        if code in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
            self._reset_generation(lost=True)
            return
        if code == REBALANCE_IN_PROGRESS:
            self._rejoin = True
            return
        if code:
            raise for_code(code)(res.get("error_message") or f"SyncGroup for {self.group_id!r} failed")
        assignment = decode_assignment(res["assignment"]) if res["assignment"] else _empty_assignment()
        self._assignor().on_assignment(assignment, self.generation)
        self._apply({TopicPartition(*tp) for tp in assignment.partitions})
        with self._lock:
            if not self._rejoin:
                self._stable = True
                self._last_poll = time.monotonic()

    def _assignor(self):
        for a in self.assignors:
            if a.name == self.protocol_name:
                return a
        raise KafkaError(f"the coordinator chose protocol {self.protocol_name!r}, not one of ours")

    def _lead(self, members: list[dict]) -> dict[str, bytes]:
        """The leader's step: the assignment of every member's subscribed topics, from fresh metadata."""
        from rafka.consumer.assignors import decode_subscription

        topics = set()
        for m in members:
            topics.update(decode_subscription(m["metadata"]).topics)
        md = self.metadata
        md.refresh(sorted(topics), force=True)
        per_topic = {}
        for t in topics:
            tm = md.topic(t)
            if tm is not None and tm.partitions:
                per_topic[t] = len(tm.partitions)
        return perform_assignment(self._assignor(), members, per_topic)

    def _apply(self, new: set[TopicPartition]) -> None:
        revoked = self.owned - new
        added = new - self.owned
        if revoked:  # cooperative: give up only what moved, then rejoin so it can be handed over
            if self.cfg.enable_auto_commit:
                self.commit_quietly(partitions=revoked)
            self.owned -= revoked
            self.subscriptions.assign(sorted(self.owned))
            self._listen("on_partitions_revoked", revoked)
            with self._lock:
                self._rejoin = True
        self.owned = set(new)
        self.subscriptions.assign(sorted(self.owned))
        if added:
            self._seek_committed(added)
            self._listen("on_partitions_assigned", added)

    def _seek_committed(self, tps: set[TopicPartition]) -> None:
        for tp, om in self.committed(tps).items():
            if om is not None:
                self.subscriptions.seek(tp, om.offset)

    def _reset_generation(self, lost: bool) -> None:
        with self._lock:
            self.generation = -1
            if lost:
                self.member_id = ""
            self._rejoin = True
            self._stable = False
            self._lost = self._lost or bool(self.owned)

    def _listen(self, name: str, tps: set[TopicPartition]) -> None:
        if self.subscriptions.listener is None:
            return
        cb: Callable | None = getattr(self.subscriptions.listener, name, None)
        if cb is None and name == "on_partitions_lost":
            cb = getattr(self.subscriptions.listener, "on_partitions_revoked", None)
        if cb is None:
            return
        try:
            cb(set(tps))
        except Exception:  # noqa: BLE001 - Kafka logs listener errors and carries on with the rebalance
            log.exception("group %s: %s listener failed", self.group_id, name)

    # -- heartbeats --------------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        interval = self.cfg.heartbeat_interval_ms / 1000.0
        while not self._stop.wait(interval):
            with self._lock:
                stable, gen, mid = self._stable, self.generation, self.member_id
            if (time.monotonic() - self._last_poll) * 1000 > self.cfg.max_poll_interval_ms and gen >= 0:
                log.warning(
                    "group %s: member %s did not poll within max_poll_interval_ms (%d); leaving",
                    self.group_id,
                    mid,
                    self.cfg.max_poll_interval_ms,
                )
                self.leave(reason="poll timeout")
                self._reset_generation(lost=True)
                continue
            if not stable or gen < 0:
                continue
            try:
                res = self.coordinator.call(
                    HeartbeatRequest(self.group_id, mid, gen, group_instance_id=self.instance_id),
                    timeout_ms=self.cfg.session_timeout_ms,
                )
            except KafkaError as e:
                log.warning("group %s: heartbeat failed: %s", self.group_id, e)
                continue
            code = res["error_code"]
            if code == REBALANCE_IN_PROGRESS:
                with self._lock:
                    self._rejoin = True
            elif code in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID):
                with self._lock:
                    if gen == self.generation:
                        self._reset_generation(lost=code != ILLEGAL_GENERATION)

    # -- offsets -----------------------------------------------------------------------------------
    def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets. A read_committed consumer asks for stable offsets only (KIP-447):
        while a transaction commits an offset for a partition it waits for the transaction's marker."""
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        stable = self.cfg.isolation_level == "read_committed"
        req = OffsetFetchRequest(
            self.group_id, [{"name": t, "partition_indexes": sorted(ps)} for t, ps in by_topic.items()], stable
        )
        deadline = time.monotonic() + self.cfg.default_api_timeout_ms / 1000
        while True:
            res = self.coordinator.call(req, timeout_ms=max(1.0, (deadline - time.monotonic()) * 1000))
            codes = [p.get("error_code") for t in res.get("topics") or () for p in t["partitions"]]
            if UnstableOffsetCommitError.code not in codes or time.monotonic() >= deadline:
                break
            time.sleep(self.cfg.retry_backoff_ms / 1000)
        if res.get("error_code"):
            raise for_code(res["error_code"])(f"OffsetFetch for {self.group_id!r} failed")
        out: dict[TopicPartition, OffsetAndMetadata | None] = {}
        for t in res["topics"]:
            for p in t["partitions"]:
                if p.get("error_code"):
                    raise for_code(p["error_code"])(f"OffsetFetch {t['name']}-{p['partition_index']} failed")
                off = p["committed_offset"]
                out[TopicPartition(t["name"], p["partition_index"])] = (
                    None
                    if off < 0
                    else OffsetAndMetadata(off, p.get("metadata") or "", p.get("committed_leader_epoch", -1))
                )
        return out

    def commit(self, offsets: dict[TopicPartition, Any]) -> None:
        """OffsetCommit of ``{tp: offset | OffsetAndMetadata}`` with this member's id and generation."""
        if not offsets:
            return
        by_topic: dict[str, list[dict]] = {}
        for tp, o in offsets.items():
            off, meta = (o.offset, o.metadata) if isinstance(o, OffsetAndMetadata) else (int(o), "")
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "committed_offset": off, "committed_metadata": meta}
            )
        with self._lock:
            mid, gen = self.member_id, self.generation
        res = self.coordinator.call(
            OffsetCommitRequest(
                self.group_id,
                [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                member_id=mid,
                generation_id=gen,
                group_instance_id=self.instance_id,
            ),
            timeout_ms=self.cfg.default_api_timeout_ms,
        )
        code = _first_code(res)
        if code in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
            self._reset_generation(lost=code == UNKNOWN_MEMBER_ID)
            from protocol.errors import CommitFailedError

            raise CommitFailedError(
                "the group rebalanced and assigned the partitions to another member; the commit cannot be completed"
            )
        if code == REBALANCE_IN_PROGRESS:
            with self._lock:
                self._rejoin = True
            from protocol.errors import RebalanceInProgressError

            raise RebalanceInProgressError("commit refused during a rebalance: poll, then commit again")
        if code:
            # e.g. UNKNOWN_TOPIC_OR_PARTITION: the coordinator stores nothing for a partition the cluster does not
            # have (Kafka's KafkaApis check), and says which ones
            failed = sorted(
                f"{t['name']}-{p['partition_index']}"
                for t in res.get("topics") or ()
                for p in t.get("partitions") or ()
                if p.get("error_code") == code
            )
            where = f" for {', '.join(failed)}" if failed else ""
            raise for_code(code)(f"OffsetCommit for {self.group_id!r} failed{where}")

    def commit_quietly(self, partitions: set[TopicPartition] | None = None) -> None:
        offsets = self.subscriptions.all_consumed()
        if partitions is not None:
            offsets = {tp: o for tp, o in offsets.items() if tp in partitions}
        try:
            self.commit(offsets)
        except KafkaError as e:
            log.warning("group %s: auto commit of %s failed: %s", self.group_id, offsets, e)

    # -- leaving -----------------------------------------------------------------------------------
    def leave(self, reason: str = "close") -> None:
        """LeaveGroup (dynamic members only: a static member keeps its place until its session expires)."""
        with self._lock:
            mid = self.member_id
        if not mid or self.instance_id is not None:
            return
        try:
            self.coordinator.call(
                LeaveGroupRequest(self.group_id, [{"member_id": mid, "group_instance_id": None}]),
                timeout_ms=self.cfg.request_timeout_ms,
            )
        except KafkaError as e:
            log.warning("group %s: LeaveGroup (%s) failed: %s", self.group_id, reason, e)

    def close(self) -> None:
        if self.cfg.enable_auto_commit and self.generation >= 0:
            self.commit_quietly()
        if self.owned:
            self._listen("on_partitions_revoked", set(self.owned))
        self._stop.set()
        if self._hb_thread is not None:
            self._hb_thread.join(timeout=self.cfg.heartbeat_interval_ms / 1000.0 + 5)
        self.leave()
        self.owned = set()

    def group_metadata(self) -> dict:
        with self._lock:
            return {
                "group_id": self.group_id,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": self.instance_id,
            }


def _empty_assignment():
    from rafka.consumer.assignors import Assignment

    return Assignment([])
