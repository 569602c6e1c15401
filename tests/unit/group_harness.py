"""Test driver for the group coordinator shard: applies results like the actor shell will, keeps the
record log, collects completions, and checks invariants plus replay/load equivalence."""

from __future__ import annotations

import itertools

from actors.group.records import decode_record
from actors.group.shard import GroupCoordinatorConfig, GroupCoordinatorShard, GroupState

G = "g"
SESSION = 10_000
REBALANCE = 30_000


def config(**kw) -> GroupCoordinatorConfig:
    base = dict(group_min_session_timeout_ms=1000, group_initial_rebalance_delay_ms=0)
    base.update(kw)
    return GroupCoordinatorConfig(**base)


class Harness:
    def __init__(self, **cfg):
        counter = itertools.count()
        self.shard = GroupCoordinatorShard(config(**cfg), new_uuid=lambda: f"u{next(counter)}")
        self.log: list = []
        self.completions: dict = {}
        self.now = 0

    # ------------------------------------------------------------------ driving
    def apply(self, result):
        self.shard.replay_all(result.records)
        self.log += result.records
        for key, resp in result.completions:
            assert key not in self.completions, f"{key} completed twice"
            self.completions[key] = resp
        check_invariants(self.shard)
        return result.response

    def take(self, kind: str, member_id: str, group: str = G) -> dict:
        return self.completions.pop((kind, group, member_id))

    def join(
        self,
        member_id="",
        protocols=(("range", b"sub"),),
        instance=None,
        client="c",
        group=G,
        session=SESSION,
        rebalance=REBALANCE,
        ptype="consumer",
        **kw,
    ):
        return self.apply(
            self.shard.join_group(
                group,
                member_id,
                ptype,
                protocols,
                session,
                rebalance,
                self.now,
                group_instance_id=instance,
                client_id=client,
                client_host="/10.0.0.1",
                **kw,
            )
        )

    def new_member(self, client="c", **kw) -> str:
        """A dynamic member's two-step join (MEMBER_ID_REQUIRED, then the real join); returns its id."""
        resp = self.join("", client=client, **kw)
        assert resp["error_code"] == 79, resp
        mid = resp["member_id"]
        assert mid.startswith(f"{client}-u")
        self.last_response = self.join(mid, client=client, **kw)
        return mid

    def sync(self, member_id, generation, assignments=None, group=G, **kw):
        return self.apply(self.shard.sync_group(group, member_id, generation, assignments or {}, self.now, **kw))

    def heartbeat(self, member_id, generation, group=G, **kw):
        return self.apply(self.shard.heartbeat(group, member_id, generation, self.now, **kw))["error_code"]

    def leave(self, *members, group=G):
        return self.apply(self.shard.leave_group(group, list(members), self.now))

    def poll(self, now=None):
        """Fire due timers until none is due at ``now`` (what the actor's timer loop does)."""
        if now is not None:
            self.now = now
        for _ in range(100):
            self.apply(self.shard.poll_expirations(self.now))
            d = self.shard.next_deadline()
            if d is None or d > self.now:
                return
        raise AssertionError("timers keep firing at the same instant")

    def advance(self, ms: int):
        """Move the clock, firing every timer due on the way (as the actor's timer would)."""
        target = self.now + ms
        while True:
            d = self.shard.next_deadline()
            if d is None or d > target:
                break
            self.poll(max(d, self.now))
        self.now = target

    def advance_beating(self, ms: int, *members, step: int = 3000) -> list[int]:
        """Advance ``ms`` in steps, each ``(member_id, generation[, instance])`` heartbeating every step."""
        codes = []
        for _ in range(ms // step):
            self.advance(step)
            codes += [self.heartbeat(m[0], m[1], group_instance_id=m[2] if len(m) > 2 else None) for m in members]
        self.advance(ms % step)
        return codes

    def commit(self, offsets: dict, member_id="", generation=-1, group=G, **kw) -> dict:
        topics: dict[str, list] = {}
        for (t, p), o in offsets.items():
            topics.setdefault(t, []).append(
                {
                    "partition_index": p,
                    "committed_offset": o,
                    "committed_leader_epoch": 3,
                    "committed_metadata": f"m{o}",
                }
            )
        resp = self.apply(
            self.shard.offset_commit(
                group,
                [{"name": t, "partitions": ps} for t, ps in topics.items()],
                self.now,
                member_id=member_id,
                generation_id=generation,
                **kw,
            )
        )
        return {(t["name"], p["partition_index"]): p["error_code"] for t in resp["topics"] for p in t["partitions"]}

    def group(self, group=G):
        return self.shard.group(group)

    # ------------------------------------------------------------------ equivalence
    def check_replay_equivalence(self):
        """Replaying every emitted record rebuilds the exact state; loading only the durable records'
        bytes rebuilds every Stable/Empty group and all offsets."""
        fresh = GroupCoordinatorShard(self.shard.config)
        fresh.replay_all(self.log)
        assert fresh.state() == self.shard.state()
        loaded = GroupCoordinatorShard(self.shard.config)
        raw = [(r.key_bytes(), r.value_bytes()) for r in self.log if r.durable]
        assert [decode_record(k, v) for k, v in raw] == [r for r in self.log if r.durable]
        loaded.load(raw, self.now)
        want_groups, want_offsets = self.shard.durable_state()
        got_groups, got_offsets = loaded.durable_state()
        assert got_offsets == want_offsets
        for gid, view in want_groups.items():
            assert got_groups.get(gid) == view, gid
        return loaded


def check_invariants(shard: GroupCoordinatorShard) -> None:
    for gid in shard.group_ids():
        g = shard.group(gid)
        assert g._sealed
        assert (g.leader_id is None) == (not g.members)
        assert g.leader_id is None or g.leader_id in g.members
        assert g.static_members == {m.group_instance_id: mid for mid, m in g.members.items() if m.is_static}
        assert set(g.pending_sync_members) <= set(g.members)
        assert not set(g.pending_join_members) & set(g.members)
        if g.state is GroupState.EMPTY:
            assert not g.members and g.protocol_name is None
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            assert not any(m.awaiting_join for m in g.members.values())
            assert g.protocol_name is not None and g.join_deadline_ms is None
            assert all(m.heartbeat_deadline_ms is not None or m.awaiting_sync for m in g.members.values())
        if g.state is not GroupState.COMPLETING_REBALANCE:
            assert not any(m.awaiting_sync for m in g.members.values())
        if g.state is GroupState.PREPARING_REBALANCE:
            assert g.join_deadline_ms is not None
