"""What the group membership handlers (actors/group/membership.py) work with, apart from the group itself:
the JoinGroup request as the coordinator sees it (``JoinRequest``), the scratch of one handler run
(``_Ctx``: clock, durable records, completions of parked JoinGroup/SyncGroup requests) and the
normalisation of protocols and assignments as clients send them. Pure: no Ray, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from actors.group.classic_group import ClassicGroup, CoordinatorResult, GroupSnapshotRecord, Pending


@dataclass(frozen=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    require_known_member_id: bool
    supports_skip_assignment: bool


class _Ctx:
    """Scratch for one handler run: the clock, durable records, and completions of parked requests."""

    def __init__(self, now_ms: int):
        self.now = now_ms
        self.records: list = []
        self.completions: list = []

    def complete_join(self, g: ClassicGroup, member_id: str, response: dict) -> bool:
        m = g.members.get(member_id)
        if m is None or not m.awaiting_join:
            return False
        g.update_member(member_id, awaiting_join=False)
        self.completions.append((("join", g.group_id, member_id), response))
        return True

    def complete_sync(self, g: ClassicGroup, member_id: str, response: dict) -> bool:
        m = g.members.get(member_id)
        if m is None or not m.awaiting_sync:
            return False
        g.update_member(member_id, awaiting_sync=False)
        self.completions.append((("sync", g.group_id, member_id), response))
        return True

    def result(self, g: ClassicGroup | None, response, installed: ClassicGroup | None = None) -> CoordinatorResult:
        """Seal ``g`` and append its snapshot (unless it equals the ``installed`` group it was cloned from),
        and answer a parked request of this very call directly."""
        records = list(self.records)
        if g is not None and (installed is None or g != installed):
            records.append(GroupSnapshotRecord(g.group_id, g.seal()))
        if isinstance(response, Pending):
            for i, (key, resp) in enumerate(self.completions):
                if key == response.key:
                    response = resp
                    del self.completions[i]
                    break
        return CoordinatorResult(records, response, self.completions)


def _normalize_protocols(protocols: Iterable) -> tuple[tuple[str, bytes], ...]:
    out = []
    for p in protocols:
        if isinstance(p, dict):
            out.append((str(p["name"]), bytes(p.get("metadata") or b"")))
        else:
            name, meta = p
            out.append((str(name), bytes(meta or b"")))
    return tuple(out)


def _protocol_inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


def _normalize_assignments(assignments) -> dict[str, bytes]:
    if not assignments:
        return {}
    if isinstance(assignments, dict):
        return {str(k): bytes(v or b"") for k, v in assignments.items()}
    out = {}
    for a in assignments:
        if isinstance(a, dict):
            out[a["member_id"]] = bytes(a.get("assignment") or b"")
        else:
            out[a[0]] = bytes(a[1] or b"")
    return out
