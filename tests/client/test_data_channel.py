"""The clients' data channel on a real cluster (rafka/channel.py, actors/channels/client_channel.py): the Producer and
Consumer reach the leader replica's client listener over TCP by default and send it their produce and fetch
requests (``data_channel="ray"`` keeps one Ray call each; both give the same log); a stranger's connection is
closed without reaching the log. The process faults (SIGSTOP/SIGKILL of the leader replica's worker under a
running producer and consumer) are in tests/client/faults/test_data_channel_faults.py."""

from __future__ import annotations

import asyncio
import struct
import uuid

import msgpack
import ray
from support import read_until_closed

import rafka
from actors.channels.replica_lookup import replica_handle
from protocol.channel_frames import ANSWER_HEAD, REQUEST_HEAD
from protocol.errors import CorruptMessageError
from rafka import TopicPartition


def leader_state(cluster, topic: str, p: int = 0) -> dict:
    leader = cluster.server.describe(topic)["partitions"][p]["leader"]
    h = replica_handle(cluster.name, topic, p, leader)
    return ray.get(h.state.remote(), timeout=30)


def consume_all(cluster, topic: str, partitions: int, n: int, **conf) -> list:
    c = rafka.Consumer(cluster, auto_offset_reset="earliest", **conf)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    got: list = []
    for _ in range(200):
        for recs in c.poll(200).values():
            got += recs
        if len(got) >= n:
            break
    c.close()
    return got


def test_producer_and_consumer_use_the_leaders_client_listener_and_ray_calls_give_the_same_log(
    rafka_cluster, new_topic
):
    topic = new_topic(2, 3)
    with rafka.Producer(rafka_cluster, linger_ms=2) as p:
        futs = [p.send(topic, b"tcp-%d" % i, key=b"k%d" % (i % 7)) for i in range(3000)]
        p.flush()
    with rafka.Producer(rafka_cluster, linger_ms=2, data_channel="ray") as p:
        before = [leader_state(rafka_cluster, topic, q)["produce_listener"]["parts"] for q in range(2)]
        futs += [p.send(topic, b"ray-%d" % i, key=b"k%d" % (i % 7)) for i in range(3000)]
        p.flush()
        after = [leader_state(rafka_cluster, topic, q)["produce_listener"]["parts"] for q in range(2)]
    assert before == after  # the ray-channel producer made no request on the listeners
    acked = sorted((md.partition, md.offset) for md in (f.get() for f in futs))
    assert len(set(acked)) == 6000
    # the producer's requests go to each leader process's produce listener (one per Sender round and process)
    states = [leader_state(rafka_cluster, topic, q)["produce_listener"] for q in range(2)]
    assert all(s["connections"] >= 1 and s["parts"] >= 1 for s in states), states
    assert sum(s["requests"] for s in {s["port"]: s for s in states}.values()) < 3000  # far fewer than records
    assert all(leader_state(rafka_cluster, topic, q)["client_listener"]["produces"] == 0 for q in range(2))

    got_tcp = consume_all(rafka_cluster, topic, 2, 6000)
    fetches = sum(leader_state(rafka_cluster, topic, q)["client_listener"]["fetches"] for q in range(2))
    got_ray = consume_all(rafka_cluster, topic, 2, 6000, data_channel="ray")
    assert fetches >= 2
    assert fetches == sum(leader_state(rafka_cluster, topic, q)["client_listener"]["fetches"] for q in range(2))
    as_tuples = [sorted((r.partition, r.offset, r.key, r.value) for r in g) for g in (got_tcp, got_ray)]
    assert as_tuples[0] == as_tuples[1] and len(as_tuples[0]) == 6000
    assert sorted((r.partition, r.offset) for r in got_tcp) == acked
    for q in range(2):  # per-key order within each producer's records
        for prefix in (b"tcp-", b"ray-"):
            by_key: dict = {}
            for r in sorted(got_tcp, key=lambda r: r.offset):
                if r.partition == q and r.value.startswith(prefix):
                    by_key.setdefault(r.key, []).append(int(r.value[len(prefix) :]))
            assert all(v == sorted(v) for v in by_key.values())


def test_a_stranger_on_the_client_listener_is_closed_and_the_log_is_untouched(rafka_cluster, new_topic):
    topic = new_topic(1, 1)
    with rafka.Producer(rafka_cluster) as p:
        p.send(topic, b"first").get(timeout=30)
    leader = rafka_cluster.server.describe(topic)["partitions"][0]["leader"]
    ep = ray.get(replica_handle(rafka_cluster.name, topic, 0, leader).client_endpoint.remote(), timeout=30)
    st = leader_state(rafka_cluster, topic)  # (the producer used the produce listener: this started the client's)
    assert ep["error_code"] == 0 and ep["port"] == st["client_listener"]["port"]

    async def stranger(hello: dict, close_after_answer: bool = False) -> bytes:
        reader, writer = await asyncio.open_connection(ep["host"], ep["port"])
        body = msgpack.packb(hello)
        meta = msgpack.packb({"acks": 1})
        recs = b"\x00" * 80
        writer.write(struct.pack(">I", len(body)) + body + REQUEST_HEAD.pack(9 + len(meta) + 80, 1, 0, len(meta)))
        writer.write(meta + recs)
        await writer.drain()
        if close_after_answer:
            data = await asyncio.wait_for(reader.readexactly(ANSWER_HEAD.size), 15)
            data += await asyncio.wait_for(reader.readexactly(sum(ANSWER_HEAD.unpack(data)[1:])), 15)
        else:
            data = await read_until_closed(reader)
        writer.close()
        return data

    assert asyncio.run(stranger({"token": b"\x00" * 16})) == b""  # wrong token: closed, unanswered
    assert asyncio.run(stranger({"token": ep["token"], "replica_id": 1})) == b""  # posing as a follower
    # the right token and 80 zero bytes for records: answered CORRUPT_MESSAGE, the connection and log go on
    answer = asyncio.run(stranger({"token": ep["token"]}, close_after_answer=True))
    corr, meta_len, rec_len = ANSWER_HEAD.unpack(answer[: ANSWER_HEAD.size])
    meta = msgpack.unpackb(answer[ANSWER_HEAD.size : ANSWER_HEAD.size + meta_len])
    assert corr == 1 and rec_len == 0 and meta["error_code"] == CorruptMessageError.code, meta
    # the process's produce listener (the producer's path): a wrong token, or a single-partition produce on it
    pep = ray.get(replica_handle(rafka_cluster.name, topic, 0, leader).produce_endpoint.remote(), timeout=30)
    assert pep["error_code"] == 0 and pep["port"] == st["produce_listener"]["port"] != ep["port"]
    ep = pep
    assert asyncio.run(stranger({"token": b"\x00" * 16})) == b""
    assert asyncio.run(stranger({"token": pep["token"]})) == b""  # api 0 is not served there: closed, unanswered
    after = leader_state(rafka_cluster, topic)
    assert after["produce_listener"]["bad_frames"] == st["produce_listener"]["bad_frames"] + 2
    assert after["client_listener"]["bad_frames"] == st["client_listener"]["bad_frames"] + 2
    assert after["log_end_offset"] == st["log_end_offset"] == 1
    got = consume_all(rafka_cluster, topic, 1, 1)
    assert [r.value for r in got] == [b"first"]


def test_coordinators_append_and_write_markers_on_the_replicas_internal_channel(rafka_cluster, new_topic):
    """A committed transaction with consumer offsets: the transaction coordinator's __transaction_state appends,
    its markers on the data partition and the group coordinator's __consumer_offsets appends all travel on
    the replicas' internal channel (internal connections, markers counted by the data leader's listener)."""
    topic = new_topic(1, 3)
    group = "chan-g-" + uuid.uuid4().hex[:6]
    before = leader_state(rafka_cluster, topic)["client_listener"]
    p = rafka.Producer(rafka_cluster, transactional_id="chan-" + uuid.uuid4().hex[:6])
    p.init_transactions()
    for committed in (True, False, True):
        p.begin_transaction()
        p.send(topic, b"committed" if committed else b"aborted")
        p.send_offsets_to_transaction({TopicPartition(topic, 0): 5}, group)
        p.commit_transaction() if committed else p.abort_transaction()
    p.close()
    after = leader_state(rafka_cluster, topic)["client_listener"]
    assert after["markers"] - before["markers"] == 3 and after["internal"] >= 1  # COMMIT, ABORT, COMMIT
    internal = {}
    for name in ("__transaction_state", "__consumer_offsets"):
        parts = rafka_cluster.server.describe(name)["partitions"]
        internal[name] = sum(
            leader_state(rafka_cluster, name, q["partition"])["client_listener"]["internal"] for q in parts
        )
    assert internal["__transaction_state"] >= 1 and internal["__consumer_offsets"] >= 1, internal
    got = consume_all(rafka_cluster, topic, 1, 2, isolation_level="read_committed")
    assert [r.value for r in got] == [b"committed", b"committed"]
    c = rafka.Consumer(rafka_cluster, group_id=group)
    assert c.committed(TopicPartition(topic, 0)).offset == 5  # the committed transactions' offsets
    c.close()


def test_bulk_batches_sealed_in_place_reach_the_log_over_both_channels(rafka_cluster, new_topic):
    """``send_batch``'s bulk batches are bytearrays sealed in place (storage/records.py ``build``): over TCP a
    frame, over Ray a pickled ProduceRequest. Both land whole, in order, with the sequences they were sealed
    with (the idempotent producer's duplicate check would refuse a mangled header)."""
    topic = new_topic(2, 3)
    for chan in ("tcp", "ray"):
        with rafka.Producer(rafka_cluster, data_channel=chan) as p:
            futs = p.send_batch(topic, [(None, b"%s-%d" % (chan.encode(), i), i % 2) for i in range(4000)])
            p.flush()
            assert all(f.get(30).offset >= 0 for f in futs)
    got = consume_all(rafka_cluster, topic, 2, 8000)
    for q in range(2):
        values = [r.value for r in sorted(got, key=lambda r: r.offset) if r.partition == q]
        want = [b"%s-%d" % (c, i) for c in (b"tcp", b"ray") for i in range(q, 4000, 2)]
        assert values == want
