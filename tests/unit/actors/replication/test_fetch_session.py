"""Follower fetch sessions (actors/replication/fetch_session.py) against a real ReplicationServer on loopback, without Ray:
a follower process's partitions led in one process share one connection and one long-poll; data on any of
them answers the held fetch; a partition that joins while a fetch is held is served at once (the poke);
one partition's trouble fails only its membership; a broken connection fails every member; the last member
to leave ends the session."""

from __future__ import annotations

import asyncio

import pytest
from test_replication_channel import FakePartition, start

from actors.channels.replication_channel import ConnectionLost, ReplicationServer
from actors.replication.fetch_session import SessionMember, session_for, sessions

CONF = {"replica.fetch.max.bytes": 1 << 20, "replica.fetch.wait.max.ms": 10_000, "replica.socket.timeout.ms": 5000}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


class FakeLog:
    def __init__(self):
        self.log_end_offset = 0


class FakeFollowerPartition:
    def __init__(self, topic: str):
        self.topic, self.partition, self.generation, self.broker_id = topic, 0, 1, 2
        self.log = FakeLog()


class FakeFetcher:
    """A ReplicaFetcher as the session sees it: ``apply`` appends the answer's records (one offset a byte)."""

    def __init__(self, topic: str):
        self.partition = FakeFollowerPartition(topic)
        self.got = b""
        self.fail_with: Exception | None = None

    def apply(self, answer: dict) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        if answer["error_code"]:
            raise RuntimeError(answer["error_message"])
        self.got += answer["records"]
        self.partition.log.log_end_offset += len(answer["records"])


async def until(cond, timeout_s: float = 5.0) -> float:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    while not cond():
        if loop.time() - t0 > timeout_s:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)
    return loop.time() - t0


def join(server: ReplicationServer, fetcher: FakeFetcher) -> tuple:
    m = SessionMember(fetcher, fetcher.partition.generation, 4, CONF)
    s = session_for(server.endpoint(), fetcher.partition.broker_id)
    s.join(m)
    return s, m


async def two(data_a: bytes, data_b: bytes) -> tuple:
    """A leader process leading partitions "a" and "b" and a follower of each."""
    a, b = FakePartition(data=data_a), FakePartition(data=data_b)
    server = await start(a=a, b=b)
    fa, fb = FakeFetcher("a"), FakeFetcher("b")
    return server, a, b, fa, fb


def test_partitions_led_in_one_process_share_one_connection_and_one_long_poll():
    async def go():
        server, a, b, fa, fb = await two(b"a1", b"b1")
        sa, _ = join(server, fa)
        sb, _ = join(server, fb)
        await until(lambda: fa.got == b"a1" and fb.got == b"b1")
        await asyncio.sleep(0.2)  # both caught up: the session's fetch is held at the leader
        held = server.stats["fetches"]
        b.append(b"b2")
        woke = await until(lambda: fb.got == b"b1b2")
        a.append(b"a2")
        await until(lambda: fa.got == b"a1a2")
        out = (sa is sb, server.stats["connections"], held, woke, len(sessions()))
        sa.leave(next(iter(sa.members.values())))
        sa.leave(next(iter(sa.members.values())))
        server.close()
        return out

    same, connections, held, woke, n_sessions = run(go())
    assert same and connections == 1 and n_sessions == 1
    assert held <= 3  # caught up: one fetch held, not a poll loop (10 s wait)
    assert woke < 2  # the append answered the held fetch, well before its 10 s wait


def test_a_partition_that_joins_while_a_fetch_is_held_is_served_at_once():
    async def go():
        server, a, b, fa, fb = await two(b"", b"late")
        s, ma = join(server, fa)
        await until(lambda: s.in_flight)
        await asyncio.sleep(0.2)  # a has nothing: the fetch is held at the leader
        _, mb = join(server, fb)
        took = await until(lambda: fb.got == b"late")
        pokes = server.stats["pokes"]
        s.leave(ma)
        s.leave(mb)
        server.close()
        return took, pokes

    took, pokes = run(go())
    assert took < 2 and pokes == 1


def test_one_partitions_trouble_fails_only_its_membership():
    async def go():
        server, a, b, fa, fb = await two(b"x", b"y")
        fa.fail_with = ValueError("unexpected offset")
        s, ma = join(server, fa)
        _, mb = join(server, fb)
        with pytest.raises(ValueError, match="unexpected offset"):
            await asyncio.wait_for(asyncio.shield(ma.done), 5)
        b.append(b"z")
        await until(lambda: fb.got == b"yz")
        out = (set(s.members), mb.done.done())
        s.leave(mb)
        server.close()
        return out

    members, b_done = run(go())
    assert members == {("b", 0)} and not b_done


def test_a_broken_connection_fails_every_member_and_the_session_ends():
    async def go():
        server, a, b, fa, fb = await two(b"x", b"y")
        s, ma = join(server, fa)
        _, mb = join(server, fb)
        await until(lambda: fa.got and fb.got)
        server.close()  # the leader's process died
        errors = []
        for m in (ma, mb):
            with pytest.raises(ConnectionLost) as info:
                await asyncio.wait_for(asyncio.shield(m.done), 20)
            errors.append(str(info.value))
        return errors, sessions(), s.members

    errors, left, members = run(go())
    assert len(errors) == 2 and left == [] and members == {}


def test_the_last_member_to_leave_ends_the_session_and_a_new_join_starts_another():
    async def go():
        a = FakePartition(data=b"x")
        server = await start(a=a)
        fa = FakeFetcher("a")
        s1, m1 = join(server, fa)
        await until(lambda: fa.got == b"x")
        s1.leave(m1)
        await until(lambda: s1.task.done())
        ended = (sessions(), s1.conn.writer.is_closing())
        a.append(b"y")
        fa.partition.generation = 2
        s2, m2 = join(server, fa)
        await until(lambda: fa.got == b"xy")
        out = ended, s2 is not s1, server.stats["connections"]
        s2.leave(m2)
        server.close()
        return out

    (left, closed), new, connections = run(go())
    assert left == [] and closed and new and connections == 2
