"""Classic group membership (Kafka's GroupMetadataManager, classic half) as pure handlers: JoinGroup, SyncGroup,
Heartbeat, LeaveGroup and the group timers; each returns a CoordinatorResult ending with the edited group's
snapshot, parked requests as ``Pending``. Called by the shard (actors/group/shard.py); no Ray, no clock.
"""

from __future__ import annotations

import uuid
from typing import Callable, Iterable

from actors.group.classic_group import (
    ClassicGroup,
    ClassicGroupMember,
    CoordinatorResult,
    GroupCoordinatorConfig,
    GroupSnapshotRecord,
    GroupState,
    InvalidGroupTransition,
    Pending,
    join_response,
    sync_response,
)
from actors.group.records import group_metadata_record
from actors.group.requests import (
    JoinRequest,
    _Ctx,
    _normalize_assignments,
    _normalize_protocols,
    _protocol_inconsistent,
)
from protocol import errors as E

__all__ = ["GroupMetadataManager", "JoinRequest"]

NONE = E.NoError.code
COORDINATOR_NOT_AVAILABLE = E.for_name("COORDINATOR_NOT_AVAILABLE").code
ILLEGAL_GENERATION = E.for_name("ILLEGAL_GENERATION").code
INCONSISTENT_GROUP_PROTOCOL = E.for_name("INCONSISTENT_GROUP_PROTOCOL").code
INVALID_GROUP_ID = E.for_name("INVALID_GROUP_ID").code
UNKNOWN_MEMBER_ID = E.for_name("UNKNOWN_MEMBER_ID").code
INVALID_SESSION_TIMEOUT = E.for_name("INVALID_SESSION_TIMEOUT").code
REBALANCE_IN_PROGRESS = E.for_name("REBALANCE_IN_PROGRESS").code
MEMBER_ID_REQUIRED = E.for_name("MEMBER_ID_REQUIRED").code
GROUP_MAX_SIZE_REACHED = E.for_name("GROUP_MAX_SIZE_REACHED").code
FENCED_INSTANCE_ID = E.for_name("FENCED_INSTANCE_ID").code

GS = GroupState


class GroupMetadataManager:
    """The classic-group membership handlers (Kafka's GroupMetadataManager, its classic-group part) over the
    shard's installed ``groups`` (read only here)."""

    def __init__(
        self, groups: dict[str, ClassicGroup], config: GroupCoordinatorConfig, new_uuid: Callable[[], str] | None = None
    ):
        self.groups = groups
        self.config = config
        self.new_uuid = new_uuid or (lambda: str(uuid.uuid4()))

    # ============================================================================== JoinGroup
    def join_group(
        self,
        group_id: str,
        member_id: str,
        protocol_type: str,
        protocols: Iterable,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        now_ms: int,
        *,
        group_instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        require_known_member_id: bool = True,
        supports_skip_assignment: bool = True,
    ) -> CoordinatorResult:
        """JoinGroup. ``member_id=""`` for a new member; ``rebalance_timeout_ms`` is the client's
        ``max.poll.interval.ms`` (JoinGroup v0 clients pass the session timeout)."""
        req = JoinRequest(
            group_id,
            member_id or "",
            group_instance_id,
            client_id,
            client_host,
            protocol_type or "",
            _normalize_protocols(protocols),
            int(session_timeout_ms),
            int(rebalance_timeout_ms),
            require_known_member_id,
            supports_skip_assignment,
        )
        ctx = _Ctx(now_ms)
        if not group_id:
            return ctx.result(None, join_response(INVALID_GROUP_ID, req.member_id))
        cfg = self.config
        if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            return ctx.result(None, join_response(INVALID_SESSION_TIMEOUT, req.member_id))
        installed = self.groups.get(group_id)
        unknown = req.member_id == ""
        if installed is None:
            if not unknown:
                return ctx.result(None, join_response(UNKNOWN_MEMBER_ID, req.member_id))
            g = ClassicGroup(group_id, state_timestamp_ms=now_ms)
        else:
            g = installed.clone()
        if not self._accept_joining_member(g, req.member_id):
            if g.has_member(req.member_id):
                self._remove_member(g, req.member_id, ctx)
            return ctx.result(g, join_response(GROUP_MAX_SIZE_REACHED, ""), installed)
        response = self._join_new_member(g, req, ctx) if unknown else self._join_existing_member(g, req, ctx)
        if (
            installed is None
            and isinstance(response, dict)
            and response["error_code"] not in (NONE, MEMBER_ID_REQUIRED)
        ):
            return ctx.result(None, response)  # a rejected first join leaves no group behind
        return ctx.result(g, response, installed)

    def _accept_joining_member(self, g: ClassicGroup, member_id: str) -> bool:
        limit = self.config.group_max_size
        if g.in_state(GS.EMPTY, GS.DEAD):
            return True
        if g.in_state(GS.PREPARING_REBALANCE):
            return (g.has_member(member_id) and g.member(member_id).awaiting_join) or g.num_awaiting_join() < limit
        return g.has_member(member_id) or len(g.members) < limit

    def _join_new_member(self, g: ClassicGroup, req: JoinRequest, ctx: _Ctx):
        if g.in_state(GS.DEAD):
            return join_response(COORDINATOR_NOT_AVAILABLE, "")
        if not g.supports_protocols(req.protocol_type, [n for n, _ in req.protocols]):
            return join_response(INCONSISTENT_GROUP_PROTOCOL, "")
        if req.group_instance_id is not None:
            new_id = f"{req.group_instance_id}-{self.new_uuid()}"
            existing = g.static_members.get(req.group_instance_id)
            if existing is None:
                return self._add_member_then_rebalance_or_complete_join(g, req, new_id, ctx)
            return self._update_static_member_then_rebalance_or_complete_join(g, req, existing, new_id, ctx)
        new_id = f"{req.client_id}-{self.new_uuid()}"
        if req.require_known_member_id:
            # KIP-394: hand out the id and expect a second JoinGroup carrying it (within the session timeout).
            g.pending_join_members[new_id] = ctx.now + req.session_timeout_ms
            return join_response(MEMBER_ID_REQUIRED, new_id)
        return self._add_member_then_rebalance_or_complete_join(g, req, new_id, ctx)

    def _join_existing_member(self, g: ClassicGroup, req: JoinRequest, ctx: _Ctx):
        mid = req.member_id
        if g.in_state(GS.DEAD):
            return join_response(COORDINATOR_NOT_AVAILABLE, mid)
        if not g.supports_protocols(req.protocol_type, [n for n, _ in req.protocols]):
            return join_response(INCONSISTENT_GROUP_PROTOCOL, mid)
        if g.is_pending_member(mid):
            if req.group_instance_id is not None:  # static members never get MEMBER_ID_REQUIRED
                return join_response(UNKNOWN_MEMBER_ID, mid)
            return self._add_member_then_rebalance_or_complete_join(g, req, mid, ctx)
        error = self.validate_member(g, mid, req.group_instance_id)
        if error:
            return join_response(error, mid)
        member = g.member(mid)
        if g.in_state(GS.PREPARING_REBALANCE):
            return self._update_member_then_rebalance_or_complete_join(g, req, ctx)
        if g.in_state(GS.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # It probably missed the JoinGroup response: answer with the current generation.
                return self._current_join_response(g, mid, with_members=g.is_leader(mid))
            return self._update_member_then_rebalance_or_complete_join(g, req, ctx)
        if g.in_state(GS.STABLE):
            if g.is_leader(mid) or not member.matches(req.protocols):
                # A leader rejoining forces a rebalance (it saw a metadata change the coordinator cannot).
                return self._update_member_then_rebalance_or_complete_join(g, req, ctx)
            return self._current_join_response(g, mid, with_members=False)
        return join_response(UNKNOWN_MEMBER_ID, mid)  # Empty: reset the generation and rejoin

    def _current_join_response(self, g: ClassicGroup, member_id: str, with_members: bool) -> dict:
        return join_response(
            NONE,
            member_id,
            g.generation_id,
            g.protocol_type,
            g.protocol_name,
            g.leader_id or "",
            g.current_members_for_leader() if with_members else [],
        )

    def _add_member_then_rebalance_or_complete_join(
        self, g: ClassicGroup, req: JoinRequest, member_id: str, ctx: _Ctx
    ) -> Pending:
        member = ClassicGroupMember(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            req.protocol_type,
            req.protocols,
            awaiting_join=True,
            is_new=True,
            # New members cannot heartbeat while parked; time the JoinGroup out instead (KIP-394).
            heartbeat_deadline_ms=ctx.now + self.config.new_member_join_timeout_ms,
        )
        if g.in_state(GS.PREPARING_REBALANCE) and g.previous_state is GS.EMPTY:
            g.new_member_added = True  # lets InitialDelayedJoin extend the initial delay
        g.add(member)
        self._maybe_prepare_rebalance_or_complete_join(g, ctx)
        return Pending("join", g.group_id, member_id)

    def _update_member_then_rebalance_or_complete_join(self, g: ClassicGroup, req: JoinRequest, ctx: _Ctx) -> Pending:
        g.update_member(
            req.member_id,
            protocols=req.protocols,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            awaiting_join=True,
        )
        self._maybe_prepare_rebalance_or_complete_join(g, ctx)
        return Pending("join", g.group_id, req.member_id)

    def _update_static_member_then_rebalance_or_complete_join(
        self, g: ClassicGroup, req: JoinRequest, old_id: str, new_id: str, ctx: _Ctx
    ) -> Pending:
        """KIP-345: a known ``group.instance.id`` rejoined without its member id (a restart)."""
        current_leader = g.leader_id
        assert req.group_instance_id is not None  # only static members are replaced
        self._fence(g, old_id, ctx)
        g.replace_static_member(req.group_instance_id, old_id, new_id)
        g.update_member(
            new_id,
            protocols=req.protocols,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            awaiting_join=True,
            heartbeat_deadline_ms=ctx.now + req.session_timeout_ms,
        )
        pending = Pending("join", g.group_id, new_id)
        if g.in_state(GS.STABLE):
            if g.protocol_name == g.select_protocol():
                # Same selected protocol: no rebalance. Persist the new member id; the member keeps its
                # assignment (SyncGroup in Stable returns it).
                ctx.records.append(group_metadata_record(g.group_id, g.to_metadata_value()))
                if req.supports_skip_assignment:  # JoinGroup v9+ (KIP-814)
                    leader = g.is_leader(new_id)
                    resp = join_response(
                        NONE,
                        new_id,
                        g.generation_id,
                        g.protocol_type,
                        g.protocol_name,
                        g.leader_id or "",
                        g.current_members_for_leader() if leader else [],
                        skip_assignment=leader,
                    )
                else:  # older clients: the old leader id, so a restarted leader does not reassign
                    resp = join_response(
                        NONE, new_id, g.generation_id, g.protocol_type, g.protocol_name, current_leader or "", []
                    )
                ctx.complete_join(g, new_id, resp)
            else:
                self._maybe_prepare_rebalance_or_complete_join(g, ctx)
        elif g.in_state(GS.COMPLETING_REBALANCE):
            # The old id may already be in the leader's assignment: rebalance so the new id gets one.
            self._prepare_rebalance(g, ctx)
        elif g.in_state(GS.PREPARING_REBALANCE):
            self._maybe_complete_join_phase(g, ctx)
        else:
            raise InvalidGroupTransition(f"group {g.group_id} in {g.state} has static member {req.group_instance_id}")
        return pending

    def _fence(self, g: ClassicGroup, member_id: str, ctx: _Ctx) -> None:
        ctx.complete_join(g, member_id, join_response(FENCED_INSTANCE_ID, member_id))
        ctx.complete_sync(g, member_id, sync_response(FENCED_INSTANCE_ID))

    # ============================================================================== rebalance core
    def _maybe_prepare_rebalance_or_complete_join(self, g: ClassicGroup, ctx: _Ctx) -> None:
        if g.can_rebalance():
            self._prepare_rebalance(g, ctx)
        else:
            self._maybe_complete_join_phase(g, ctx)

    def _prepare_rebalance(self, g: ClassicGroup, ctx: _Ctx) -> None:
        if g.in_state(GS.COMPLETING_REBALANCE):
            # Members parked in SyncGroup must rejoin.
            for mid in list(g.members):
                g.update_member(mid, assignment=b"")
            self._propagate_assignment(g, REBALANCE_IN_PROGRESS, ctx)
        g.pending_sync_members.clear()
        g.sync_deadline_ms = None
        initial = g.in_state(GS.EMPTY)
        if initial:  # InitialDelayedJoin: give a new group's members time to arrive
            delay = self.config.group_initial_rebalance_delay_ms
            remaining = max(g.rebalance_timeout_ms() - delay, 0)
            g.join_timer = ("initial", delay, remaining)
            g.join_deadline_ms = ctx.now + delay
        g.transition_to(GS.PREPARING_REBALANCE, ctx.now)
        if not initial:
            self._maybe_complete_join_else_schedule(g, ctx)

    def _maybe_complete_join_else_schedule(self, g: ClassicGroup, ctx: _Ctx) -> None:
        if g.has_all_members_joined():
            self._complete_join(g, ctx)
        else:  # DelayedJoin: the rebalance timeout bounds the wait for known members
            g.join_timer = ("join",)
            g.join_deadline_ms = ctx.now + g.rebalance_timeout_ms()

    def _maybe_complete_join_phase(self, g: ClassicGroup, ctx: _Ctx) -> None:
        if g.in_state(GS.PREPARING_REBALANCE) and g.previous_state is not GS.EMPTY and g.has_all_members_joined():
            self._complete_join(g, ctx)

    def _complete_join(self, g: ClassicGroup, ctx: _Ctx) -> None:
        g.join_deadline_ms = None
        g.join_timer = None
        g.new_member_added = False
        for m in g.not_yet_rejoined():
            if not m.is_static:  # static members keep their seat until their session expires
                self._remove_member(g, m.member_id, ctx)
        if g.in_state(GS.DEAD):
            return
        if not g.maybe_elect_new_joined_leader() and g.members:
            # Nobody rejoined (only absent static members): wait another rebalance timeout.
            g.join_timer = ("join",)
            g.join_deadline_ms = ctx.now + g.rebalance_timeout_ms()
            return
        g.init_next_generation(ctx.now)
        if g.in_state(GS.EMPTY):
            ctx.records.append(group_metadata_record(g.group_id, g.to_metadata_value()))
            return
        leader_members = g.current_members_for_leader()
        for mid in list(g.members):
            m = g.members[mid]
            ctx.complete_join(
                g,
                mid,
                join_response(
                    NONE,
                    mid,
                    g.generation_id,
                    g.protocol_type,
                    g.protocol_name,
                    g.leader_id or "",
                    leader_members if g.is_leader(mid) else [],
                ),
            )
            g.update_member(mid, heartbeat_deadline_ms=ctx.now + m.session_timeout_ms, is_new=False)
            g.pending_sync_members[mid] = None
        g.sync_deadline_ms = ctx.now + g.rebalance_timeout_ms()  # DelayedSync
        g.sync_generation = g.generation_id

    def _propagate_assignment(self, g: ClassicGroup, error: int, ctx: _Ctx) -> None:
        ptype, pname = (g.protocol_type, g.protocol_name) if error == NONE else (None, None)
        for mid in list(g.members):
            m = g.members[mid]
            if ctx.complete_sync(g, mid, sync_response(error, ptype, pname, m.assignment)):
                g.update_member(mid, heartbeat_deadline_ms=ctx.now + m.session_timeout_ms)

    def _remove_member(self, g: ClassicGroup, member_id: str, ctx: _Ctx) -> None:
        """Drop a member, answering its parked requests so the client retries with a fresh join."""
        ctx.complete_join(g, member_id, join_response(UNKNOWN_MEMBER_ID, ""))
        ctx.complete_sync(g, member_id, sync_response(UNKNOWN_MEMBER_ID))
        g.remove(member_id)

    def _remove_member_and_update_group(self, g: ClassicGroup, member_id: str, ctx: _Ctx) -> None:
        self._remove_member(g, member_id, ctx)
        if g.in_state(GS.STABLE, GS.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(g, ctx)
        elif g.in_state(GS.PREPARING_REBALANCE) and g.has_all_members_joined():
            self._complete_join(g, ctx)

    def _remove_pending_sync_member(self, g: ClassicGroup, member_id: str) -> None:
        g.pending_sync_members.pop(member_id, None)
        if not g.in_state(GS.COMPLETING_REBALANCE, GS.STABLE) or not g.pending_sync_members:
            g.sync_deadline_ms = None

    @staticmethod
    def validate_member(g: ClassicGroup, member_id: str, group_instance_id: str | None) -> int:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID as Kafka's ClassicGroup.validateMember (0 when valid)."""
        if group_instance_id is not None:
            existing = g.static_members.get(group_instance_id)
            if existing is None:
                return UNKNOWN_MEMBER_ID
            return NONE if existing == member_id else FENCED_INSTANCE_ID
        return NONE if g.has_member(member_id) else UNKNOWN_MEMBER_ID

    # ============================================================================== SyncGroup
    def sync_group(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        assignments,
        now_ms: int,
        *,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> CoordinatorResult:
        """SyncGroup. ``assignments`` (only the leader's count): ``{member_id: bytes}`` or a list of
        ``{"member_id", "assignment"}``; members left out get an empty assignment."""
        ctx = _Ctx(now_ms)
        installed = self.groups.get(group_id)
        if installed is None:
            return ctx.result(None, sync_response(UNKNOWN_MEMBER_ID))
        if installed.in_state(GS.DEAD):
            return ctx.result(None, sync_response(COORDINATOR_NOT_AVAILABLE))
        error = self.validate_member(installed, member_id, group_instance_id)
        if not error and generation_id != installed.generation_id:
            error = ILLEGAL_GENERATION
        if not error and (
            _protocol_inconsistent(protocol_type, installed.protocol_type)
            or _protocol_inconsistent(protocol_name, installed.protocol_name)
        ):
            error = INCONSISTENT_GROUP_PROTOCOL
        if not error and installed.in_state(GS.EMPTY):
            error = UNKNOWN_MEMBER_ID
        if not error and installed.in_state(GS.PREPARING_REBALANCE):
            error = REBALANCE_IN_PROGRESS
        if error:
            return ctx.result(None, sync_response(error))
        g = installed.clone()
        if g.in_state(GS.STABLE):
            self._remove_pending_sync_member(g, member_id)
            return ctx.result(
                g, sync_response(NONE, g.protocol_type, g.protocol_name, g.member(member_id).assignment), installed
            )
        # CompletingRebalance: park until the leader's assignment arrives.
        g.update_member(member_id, awaiting_sync=True)
        self._remove_pending_sync_member(g, member_id)
        if g.is_leader(member_id):
            given = _normalize_assignments(assignments)
            for mid in list(g.members):
                g.update_member(mid, assignment=given.get(mid, b""))
            g.transition_to(GS.STABLE, now_ms)
            ctx.records.append(group_metadata_record(g.group_id, g.to_metadata_value()))
            self._propagate_assignment(g, NONE, ctx)
        return ctx.result(g, Pending("sync", group_id, member_id))

    # ============================================================================== Heartbeat
    def heartbeat(
        self, group_id: str, member_id: str, generation_id: int, now_ms: int, *, group_instance_id: str | None = None
    ) -> CoordinatorResult:
        ctx = _Ctx(now_ms)
        installed = self.groups.get(group_id)
        if installed is None:
            return ctx.result(None, {"error_code": UNKNOWN_MEMBER_ID})
        if installed.in_state(GS.DEAD):
            return ctx.result(None, {"error_code": COORDINATOR_NOT_AVAILABLE})
        error = self.validate_member(installed, member_id, group_instance_id)
        if not error and generation_id != installed.generation_id:
            error = ILLEGAL_GENERATION
        if not error and installed.in_state(GS.EMPTY):
            error = UNKNOWN_MEMBER_ID
        if error:
            return ctx.result(None, {"error_code": error})
        g = installed.clone()
        m = g.member(member_id)
        g.update_member(member_id, heartbeat_deadline_ms=now_ms + m.session_timeout_ms)
        code = REBALANCE_IN_PROGRESS if g.in_state(GS.PREPARING_REBALANCE) else NONE
        return ctx.result(g, {"error_code": code}, installed)

    def commit_heartbeat(self, installed: ClassicGroup, member_id: str, now_ms: int) -> list:
        """An accepted OffsetCommit's heartbeat: the member's session rescheduled to now + its session timeout
        when the group is Stable or PreparingRebalance (Kafka's OffsetMetadataManager.commitOffset ->
        rescheduleClassicGroupMemberHeartbeat), as the record installing the group so changed; [] otherwise."""
        if not installed.in_state(GS.STABLE, GS.PREPARING_REBALANCE) or not installed.has_member(member_id):
            return []
        g = installed.clone()
        g.update_member(member_id, heartbeat_deadline_ms=now_ms + g.member(member_id).session_timeout_ms)
        return [GroupSnapshotRecord(g.group_id, g.seal())]

    # ============================================================================== LeaveGroup
    def leave_group(self, group_id: str, members, now_ms: int) -> CoordinatorResult:
        """LeaveGroup v3+ (batch). ``members``: list of ``{"member_id", "group_instance_id"}`` or tuples;
        ``member_id=""`` with an instance id removes that static member (admin removal)."""
        ctx = _Ctx(now_ms)
        idents = [
            (m.get("member_id", ""), m.get("group_instance_id")) if isinstance(m, dict) else (m[0], m[1])
            for m in members
        ]
        installed = self.groups.get(group_id)
        if installed is None:
            return ctx.result(
                None,
                {
                    "error_code": NONE,
                    "members": [
                        {"member_id": mid, "group_instance_id": iid, "error_code": UNKNOWN_MEMBER_ID}
                        for mid, iid in idents
                    ],
                },
            )
        if installed.in_state(GS.DEAD):
            return ctx.result(None, {"error_code": COORDINATOR_NOT_AVAILABLE, "members": []})
        g = installed.clone()
        responses, removed = [], 0
        for mid, iid in idents:
            if mid == "":
                if iid is not None and iid in g.static_members:
                    self._remove_member(g, g.static_members[iid], ctx)
                    code = NONE
                else:
                    code = UNKNOWN_MEMBER_ID
            elif g.is_pending_member(mid):
                g.remove(mid)
                code = NONE
            else:
                code = self.validate_member(g, mid, iid)
                if not code:
                    self._remove_member(g, mid, ctx)
            removed += code == NONE
            responses.append({"member_id": mid, "group_instance_id": iid, "error_code": code})
        if removed:
            if g.in_state(GS.STABLE, GS.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(g, ctx)
            elif g.in_state(GS.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(g, ctx)
        return ctx.result(g if removed else None, {"error_code": NONE, "members": responses})

    # ============================================================================== timers
    def poll_expirations(self, now_ms: int) -> CoordinatorResult:
        """Fire every timer due at ``now_ms`` (each timer at most once per call; one rescheduled at or
        before ``now_ms`` fires on the next call, which ``next_deadline()`` announces)."""
        records, completions = [], []
        for group_id in sorted(self.groups):
            installed = self.groups[group_id]
            deadline = installed.next_deadline()
            if deadline is None or deadline > now_ms:
                continue
            g = installed.clone()
            ctx = _Ctx(now_ms)
            fired: set[tuple[str, str]] = set()
            while True:
                due = [t for t in g.timers() if t[0] <= now_ms and (t[2], t[3]) not in fired]
                if not due:
                    break
                _, _, kind, mid = due[0]
                fired.add((kind, mid))
                self._fire(g, kind, mid, ctx)
            result = ctx.result(g, None, installed)
            records += result.records
            completions += result.completions
        return CoordinatorResult(records, None, completions)

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (g.next_deadline() for g in self.groups.values()) if d is not None]
        return min(deadlines, default=None)

    def _fire(self, g: ClassicGroup, kind: str, member_id: str, ctx: _Ctx) -> None:
        now = ctx.now
        if kind == "heartbeat":  # DelayedHeartbeat: session.timeout.ms without a heartbeat
            m = g.members.get(member_id)
            if m is None or m.heartbeat_deadline_ms is None or m.heartbeat_deadline_ms > now:
                return
            if m.has_satisfied_heartbeat():
                g.update_member(member_id, heartbeat_deadline_ms=None)  # rescheduled when the join/sync completes
            else:
                self._remove_member_and_update_group(g, member_id, ctx)
        elif kind == "pending":  # a MEMBER_ID_REQUIRED id never came back
            deadline = g.pending_join_members.get(member_id)
            if deadline is None or deadline > now:
                return
            g.remove(member_id)
            if g.in_state(GS.PREPARING_REBALANCE) and g.has_all_members_joined():
                self._complete_join(g, ctx)
        elif kind == "join":
            if g.join_deadline_ms is None or g.join_deadline_ms > now:
                return
            timer = g.join_timer or ("join",)
            if timer[0] == "initial":
                _, delay, remaining = timer
                if g.new_member_added and remaining != 0:  # InitialDelayedJoin: extend while members arrive
                    g.new_member_added = False
                    new_delay = min(self.config.group_initial_rebalance_delay_ms, remaining)
                    g.join_timer = ("initial", new_delay, max(remaining - delay, 0))
                    g.join_deadline_ms = now + new_delay
                    return
            self._complete_join(g, ctx)
        elif kind == "sync":  # DelayedSync: members that never sent SyncGroup are removed
            if g.sync_deadline_ms is None or g.sync_deadline_ms > now:
                return
            g.sync_deadline_ms = None
            if (
                g.sync_generation == g.generation_id
                and g.in_state(GS.COMPLETING_REBALANCE, GS.STABLE)
                and g.pending_sync_members
            ):
                for mid in list(g.pending_sync_members):
                    self._remove_member(g, mid, ctx)
                self._prepare_rebalance(g, ctx)
