"""The follower fetch path on a real cluster: followers fetch in sessions over TCP to the leader process's
replication server (actors/replication/fetch_session.py, actors/channels/replication_channel.py), strangers and garbage are refused
without disturbing them, and a follower process's partitions led in one process share one session."""

from __future__ import annotations

import uuid

import pytest
import ray
from support import batch, clusters, full_isr, part, rstate

from protocol import errors as E
from protocol.messages import ProduceRequest

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def steady_cluster(ray_cluster, tmp_path_factory):
    """One cluster for the module (no fault injected, each test its own topic), with a long
    replica.lag.time.max.ms so a loaded machine does not shrink an ISR under min.insync.replicas 3."""
    name = "fs" + uuid.uuid4().hex[:10]
    with clusters(name, str(tmp_path_factory.mktemp("sessions"))) as start:
        yield start(config={"replica.lag.time.max.ms": 30000})


def _raw_peer(ep: dict, payload: bytes) -> bytes:
    """A TCP peer of a leader's replication listener: sends ``payload``, returns what came back before close."""
    import socket

    with socket.create_connection((ep["host"], ep["port"]), timeout=20) as s:
        s.sendall(payload)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        return got


def test_followers_fetch_over_the_leaders_replication_listener(steady_cluster):
    """The followers' fetches travel in fetch sessions over TCP to the leader process's replication server (not
    Ray calls); a stranger with a wrong token and garbage are closed without an answer, a broker that is not a
    replica (right token) gets NOT_LEADER_OR_FOLLOWER and moves nothing, and replication goes on through the
    same followers' sessions."""
    import asyncio

    import msgpack

    from actors.channels.replication_channel import ReplicationConnection
    from protocol.replication_frames import encode_session_fetch

    ch = steady_cluster
    ch.create_topic("rl", 1, 3, {"min.insync.replicas": "3"})
    b, h = full_isr(ch, "rl")
    for i in range(5):
        r = ray.get(h.produce.remote(ProduceRequest(batch([b"v%d" % i]), -1, 10000)))
        assert r["error_code"] == 0, r
    followers = [ch.replica("rl", 0, x) for x in part(ch, "rl")["replicas"] if x != b]
    before = rstate(h)["replication_listener"]
    assert before["connections"] >= 2 and before["fetches"] >= 5 and before["bad_frames"] == 0, before
    for fh in followers:
        st = rstate(fh)
        assert st["follower_connections"] == 1 and st["log_end_offset"] == 5 and st["follower_error"] is None, st

    ep = ray.get(h.replication_endpoint.remote())
    assert ep["error_code"] == 0 and ep["port"] == before["port"] and len(ep["token"]) == 16

    def frame(obj) -> bytes:
        body = msgpack.packb(obj)
        return len(body).to_bytes(4, "big") + body

    epoch = rstate(h)["leader_epoch"]

    def fetch(replica_id: int) -> bytes:
        return encode_session_fetch(replica_id, 0, 1, 1 << 20, [["rl", 0, 0, epoch, 1 << 20]])

    assert _raw_peer(ep, frame({"token": b"\0" * 16, "replica_id": b}) + fetch(b)) == b""
    assert _raw_peer(ep, b"\xff" * 64) == b""

    async def not_a_replica() -> list:
        conn = await ReplicationConnection.open(ep, 99, 10)
        try:
            return await conn.fetch(fetch(99), 0)
        finally:
            conn.close()

    got = asyncio.run(not_a_replica())
    assert got[0]["error_code"] == E.NotLeaderOrFollowerError.code and got[0]["records"] == b"", got
    st = rstate(h)
    assert 99 not in st["followers"], st["followers"]
    after = st["replication_listener"]
    assert after["bad_frames"] == 2 and after["connections"] == before["connections"] + 1, after

    r = ray.get(h.produce.remote(ProduceRequest(batch([b"after"]), -1, 10000)))  # min ISR 3: both followers
    assert r["error_code"] == 0 and r["base_offset"] == 5, r
    for fh in followers:
        assert rstate(fh)["follower_connections"] == 1  # the strangers did not break the followers' sessions


def test_a_follower_process_fetches_all_it_follows_in_one_leader_process_in_one_session(steady_cluster):
    """Kafka's fetch sessions between brokers: the follower replicas that share a process and whose leaders
    share a process are members of one session (one connection, one long-poll), not one connection each;
    every partition still replicates through it."""
    from collections import defaultdict

    ch = steady_cluster
    ch.create_topic("sess", 6, 3, {"min.insync.replicas": "3"})
    leaders = {p: full_isr(ch, "sess", p=p) for p in range(6)}
    for p, (_b, h) in leaders.items():
        r = ray.get(h.produce.remote(ProduceRequest(batch([b"p%d" % p] * 3), -1, 10000)))
        assert r["error_code"] == 0, r  # min ISR 3: both followers fetched it
    groups: dict = defaultdict(list)
    for p, (b, _h) in leaders.items():
        for f in part(ch, "sess", p)["replicas"]:
            if f == b:
                continue
            st = rstate(ch.replica("sess", p, f))
            assert st["log_end_offset"] == 3 and st["follower_error"] is None, st
            s = st["follower_session"]
            assert s is not None and s["local_port"], st
            groups[(st["pid"], s["leader"])].append((p, s))
    for key, members in groups.items():
        assert len({s["local_port"] for _p, s in members}) == 1, (key, members)  # one connection
        assert all(s["partitions"] >= len(members) for _p, s in members), (key, members)
    # 6 partitions on 3 brokers: a follower process follows 2 partitions led in each other broker's process
    assert max(len(m) for m in groups.values()) >= 2, dict(groups)
