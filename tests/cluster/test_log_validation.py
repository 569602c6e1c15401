"""The leader's LogValidator through real replica actors on Ray: each malformed batch of the issue (valid
CRC, see tests/batch_forge.py) sent to a partition leader's ``produce`` is answered with Kafka's error code
and a message naming the batch, the record and the problem; the replica actor stays up (same process),
what was written before is still readable and the partition still takes writes; a ``rafka.Consumer``
reads the partition to the end afterwards. Also through ``rafka.Producer``: a null key on a compacted topic
and a timestamp past ``message.timestamp.after.max.ms`` fail the send's future with Kafka's error."""

from __future__ import annotations

import time
import uuid

import pytest
import ray
from batch_forge import HOUR, MALFORMED, build

from actors.bootstrap import start_cluster
from protocol.messages import FetchRequest, ProduceRequest
from storage.records import decode_records

pytestmark = pytest.mark.cluster


def _topic_of(props: dict) -> str:
    return "v-" + ("-".join(f"{k}-{v}" for k, v in sorted(props.items())).replace(".", "-") or "plain")


@pytest.fixture(scope="module")
def vcluster(ray_cluster, tmp_path_factory):
    """One broker; a topic per config the cases need, each holding two records written before."""
    ch = start_cluster("v" + uuid.uuid4().hex[:8], 1, str(tmp_path_factory.mktemp("rafka-validate")))
    topics = {}
    for props in (
        {},
        {"cleanup.policy": "compact"},
        {"message.timestamp.before.max.ms": HOUR},
        {"message.timestamp.type": "LogAppendTime"},
    ):
        name = _topic_of(props)
        ch.create_topic(name, 1, 1, {k: str(v) for k, v in props.items()})
        h = ch.wait_for(lambda md, n=name: ch.leader_replica(n, 0), what=f"{name} leader")
        r = ray.get(h.produce.remote(ProduceRequest(build(2, value=b"before"), 1, 10000)), timeout=30)
        assert r["error_code"] == 0, r
        topics[name] = h
    yield ch, topics
    ch.shutdown()


def values(h) -> list[bytes]:
    out, offset = [], 0
    while True:
        r = ray.get(h.fetch.remote(FetchRequest(offset, 1 << 20, 0, 1, -1, -1, 0)), timeout=30)
        assert r["error_code"] == 0, r
        recs = decode_records(r["records"])
        if not recs:
            return out
        out += [x.value for x in recs]
        offset = recs[-1].offset + 1


@pytest.mark.parametrize("name,make,props,error,fragment", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_leader_refuses_with_kafka_code_and_survives(vcluster, name, make, props, error, fragment):
    _, topics = vcluster
    h = topics[_topic_of(props)]
    pid = ray.get(h.state.remote(), timeout=30)["pid"]
    kept = values(h)
    first = build(1, value=b"same request")
    r = ray.get(h.produce.remote(ProduceRequest(first + make(), 1, 10000)), timeout=30)
    assert r["error_code"] == error.code, r
    assert fragment in r["error_message"] and f"batch 1 (at byte {len(first)})" in r["error_message"], r
    assert r["base_offset"] == -1
    assert ray.get(h.ping.remote(), timeout=30) and ray.get(h.state.remote(), timeout=30)["pid"] == pid
    assert values(h) == kept  # nothing of the request was written, earlier records decode
    ok = ray.get(h.produce.remote(ProduceRequest(build(1, value=b"after " + name.encode()), 1, 10000)), timeout=30)
    assert ok["error_code"] == 0, ok
    assert values(h) == kept + [b"after " + name.encode()]


def test_consumers_read_every_partition_to_the_end(vcluster):
    """After every refused request, a Kafka-style consumer still reads each partition from 0 to its end
    (before the fix, the first accepted malformed batch stopped it for good)."""
    import rafka
    from rafka.structs import TopicPartition

    ch, topics = vcluster
    c = rafka.Consumer(ch.cluster, auto_offset_reset="earliest")
    tps = [TopicPartition(t, 0) for t in topics]
    c.assign(tps)
    ends = c.end_offsets(tps)
    got = {tp: [] for tp in tps}
    deadline = time.monotonic() + 60
    while any(len(got[tp]) < ends[tp] for tp in tps) and time.monotonic() < deadline:
        for tp, recs in c.poll(timeout_ms=500).items():
            got[tp] += recs
    c.close()
    for tp in tps:
        assert [r.offset for r in got[tp]] == list(range(ends[tp])), tp
        assert [r.value for r in got[tp]][:2] == [b"before", b"before"]


def test_producer_sees_kafka_errors(vcluster):
    import rafka

    ch, topics = vcluster
    with rafka.Producer(ch.cluster, acks=1, retries=0) as p:
        fut = p.send(_topic_of({"cleanup.policy": "compact"}), b"no key")
        with pytest.raises(rafka.errors.InvalidRecordError, match="without a key"):
            fut.get(timeout=30)
        fut = p.send(_topic_of({}), b"from the future", timestamp_ms=int(time.time() * 1000) + 2 * HOUR)
        with pytest.raises(rafka.errors.InvalidTimestampError, match="out of range"):
            fut.get(timeout=30)
        assert p.send(_topic_of({}), b"fine").get(timeout=30).offset >= 2


def test_leader_appends_one_channels_calls_in_their_order(vcluster):
    """Ray may run calls to an actor out of order (actors/replication/call_order.py), so the wire listener numbers a
    connection's produce calls. Call 1 of a channel sent first waits for call 0; a lost call 0 is skipped
    after the gap wait and arrives late afterwards; a malformed order is INVALID_REQUEST and the leader
    takes writes after it."""
    from actors.replication.call_order import GAP_WAIT_S

    ch, _ = vcluster
    name = "order-" + uuid.uuid4().hex[:6]
    ch.create_topic(name, 1, 1, {})
    h = ch.wait_for(lambda md: ch.leader_replica(name, 0), what=f"{name} leader")

    def produce(value: bytes, order):
        return h.produce.remote(ProduceRequest(build(1, value=value), 1, 10000, order=order))

    second = produce(b"second", ("conn-a", 1))
    ready, _ = ray.wait([second], timeout=0.5)
    assert not ready  # held until call 0 has appended
    first = produce(b"first", ("conn-a", 0))
    answers = ray.get([first, second], timeout=30)
    assert [a["error_code"] for a in answers] == [0, 0], answers
    assert [a["base_offset"] for a in answers] == [0, 1]
    assert values(h) == [b"first", b"second"]

    t0 = time.monotonic()
    r = ray.get(produce(b"after a gap", ("conn-b", 1)), timeout=30)  # call 0 of conn-b never comes in time
    assert r["error_code"] == 0 and time.monotonic() - t0 >= GAP_WAIT_S * 0.9, r
    assert ray.get(produce(b"late", ("conn-b", 0)), timeout=30)["error_code"] == 0
    assert ray.get(produce(b"next", ("conn-b", 2)), timeout=30)["error_code"] == 0
    assert values(h)[2:] == [b"after a gap", b"late", b"next"]
    seen = ray.get(h.state.remote(), timeout=30)["call_order"]
    assert seen["waited"] >= 2 and seen["gaps_skipped"] == 1 and seen["late"] == 1, seen

    bad = ray.get(produce(b"bad", ("conn-c", -1)), timeout=30)
    assert bad["error_code"] == 42 and "order must be" in bad["error_message"], bad  # INVALID_REQUEST
    assert ray.get(produce(b"fine", None), timeout=30)["error_code"] == 0
    assert values(h)[5:] == [b"fine"]
