"""Replication throttles on the real fetch path without Ray: a follower's FetchSession fetching from a real
ReplicationServer over loopback. A throttled replica (the leader's or the follower's list, with a rate) moves its
bytes no faster than the quota's bound allows (asserted), while an unthrottled partition of the same session, or a
listed one whose follower is in the ISR, is not held (only the throttled bytes are counted; their times printed)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from test_fetch_session import CONF, FakeFetcher, until
from test_replication_channel import FakePartition, start

from actors.replication.fetch_session import SessionMember, follower_quota, session_for
from actors.server.replication_quota import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    WINDOW_NUM,
    WINDOW_SIZE_S,
    min_seconds_for,
)

RATE, FETCH = 100_000, 10_000  # bytes/s; replica.fetch.max.bytes (the leader answers at most this per partition)
TOTAL = 250_000
WINDOW = {WINDOW_NUM: 2, WINDOW_SIZE_S: 1}
FOLLOWER_ID = 2  # FakeFetcher's broker; the leader is broker 1


class LedPartition(FakePartition):
    """A leader replica with what the server's throttle reads: its replica settings and its ISR."""

    def __init__(self, data: bytes, conf: dict, isr=(1,)):
        super().__init__(replicas=(1, FOLLOWER_ID), data=data)
        self.replica_conf = conf
        self.partition = SimpleNamespace(isr=isr, broker_id=1, partition=0)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def follow(server, fetchers, confs) -> list[float]:
    """Every fetcher (its member's conf from ``confs``, one per fetcher) in one session until each has TOTAL
    bytes; the seconds each took."""
    t0 = time.monotonic()
    done: dict[int, float] = {}
    members = []
    for f, conf in zip(fetchers, confs):
        conf = {**CONF, "replica.fetch.max.bytes": FETCH, "replica.fetch.wait.max.ms": 200, **conf}
        m = SessionMember(f, f.partition.generation, 4, conf)
        session_for(server.endpoint(), FOLLOWER_ID).join(m)
        members.append(m)

    def check():
        for i, f in enumerate(fetchers):
            if len(f.got) >= TOTAL and i not in done:
                done[i] = time.monotonic() - t0
        return len(done) == len(fetchers)

    await until(check, 30)
    for m in members:
        m.done.cancel()
    return [done[i] for i in range(len(fetchers))]


def test_the_leader_holds_a_throttled_replica_to_its_rate_and_serves_the_others_at_once():
    async def go():
        conf = {LEADER_RATE: RATE, **WINDOW, LEADER_REPLICAS: "0:1"}
        slow = LedPartition(bytes(TOTAL), conf)  # throttled, the follower out of the ISR
        fast = LedPartition(bytes(TOTAL), {**conf, LEADER_REPLICAS: ""})  # not listed
        in_isr = LedPartition(bytes(TOTAL), conf, isr=(1, FOLLOWER_ID))  # listed, but the follower is in sync
        server = await start(slow=slow, fast=fast, in_isr=in_isr)
        took = await follow(server, [FakeFetcher("slow"), FakeFetcher("fast"), FakeFetcher("in_isr")], [{}] * 3)
        server.close()
        return took, server

    (slow_s, fast_s, in_isr_s), server = run(go())
    bound = min_seconds_for(TOTAL, RATE, 2, 1.0, FETCH)
    print(
        f"\nleader throttle: {TOTAL} B at {RATE} B/s: {slow_s:.2f} s (bound {bound:.2f} s); unthrottled {fast_s:.2f} s"
    )
    assert slow_s >= bound > 1.0
    assert server.stats["throttled_bytes"] == TOTAL and server.stats["throttled_holds"] > 0
    assert server.leader_quota.recorded == TOTAL  # only the throttled partition's bytes count
    print(f"listed but in the ISR {in_isr_s:.2f} s")  # printed, not asserted: their speed is the machine's


def test_the_follower_leaves_its_throttled_replicas_out_of_its_fetches_over_its_rate():
    async def go():
        server = await start(slow=LedPartition(bytes(TOTAL), {}), fast=LedPartition(bytes(TOTAL), {}))
        slow, fast = FakeFetcher("slow"), FakeFetcher("fast")
        conf = {FOLLOWER_RATE: RATE, **WINDOW, FOLLOWER_REPLICAS: "0:2"}
        took = await follow(server, [slow, fast], [conf, {**conf, FOLLOWER_REPLICAS: "0:3"}])  # fast: not this broker
        quota = follower_quota()
        server.close()
        return took, quota, server

    (slow_s, fast_s), quota, server = run(go())
    bound = min_seconds_for(TOTAL, RATE, 2, 1.0, FETCH)
    print(
        f"\nfollower throttle: {TOTAL} B at {RATE} B/s: {slow_s:.2f} s (bound {bound:.2f} s); unthrottled {fast_s:.2f} s"
    )
    assert slow_s >= bound
    assert quota.recorded == TOTAL and quota.rate == RATE
    assert server.stats["throttled_bytes"] == 0  # the leader throttles nothing here


def test_a_caught_up_follower_is_in_sync_and_not_throttled():
    async def go():
        server = await start(p=LedPartition(b"x" * 100, {}))
        f = FakeFetcher("p")
        conf = {**CONF, FOLLOWER_RATE: 1, **WINDOW, FOLLOWER_REPLICAS: "*"}
        m = SessionMember(f, 1, 4, conf)
        quota = follower_quota()
        before = m.throttled(quota)
        session_for(server.endpoint(), FOLLOWER_ID).join(m)
        await until(lambda: len(f.got) == 100 and m.in_sync)
        after = m.throttled(quota)
        m.done.cancel()
        server.close()
        return before, after

    assert run(go()) == (True, False)
