"""kafkajs 2.2.4 (npm, pure JavaScript; tests/e2e/kafkajs/package.json and its package-lock.json) against the
shared 3-broker cluster's Kafka listeners (tests/e2e/conftest.py). The test installs it itself with
``npm ci`` into tests/e2e/kafkajs/node_modules (gitignored; the ``kafkajs`` fixture of tests/e2e/conftest.py, which
runs the scripts): no npm or no registry fails the test.

tests/e2e/kafkajs/roundtrip.js creates a topic through the kafkajs admin (3 partitions, RF 3,
min.insync.replicas 2), produces keyed records with an idempotent producer and acks -1, consumes them in a
group with a commit per record, reads the committed offsets and the group back through the admin, and
prints a JSON summary; a second run deletes the topic. The records are checked exactly (every record
once, dense offsets per partition, one key -> one partition, per-key order), and against rafka's own
clients: the Python consumer reads the same records at the same offsets, and rafka's Admin sees the
offsets the kafkajs member committed (one group coordinator for both). Its ``txn`` run does kafkajs's
transactions (commit, abort, offsets in a transaction, fencing by a second instance) at kafkajs's own API
versions, which no other client here uses (v1 of InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit and EndTxn). tests/e2e/kafkajs/configs.js creates a topic with Kafka topic configs, describes them
and alters them with the legacy AlterConfigs (replace-all)."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import rafka
from rafka import TopicPartition

N = 200
PARTITIONS = 3


def test_kafkajs_admin_idempotent_produce_group_consume_commit_and_delete(kafkajs, bootstrap, e2e_cluster, e2e_admin):
    topic = "kjs-" + uuid.uuid4().hex[:6]
    group = "kjs-g-" + uuid.uuid4().hex[:6]
    t0 = time.monotonic()
    try:
        s = kafkajs("roundtrip.js", "roundtrip", bootstrap, topic, group, str(N))
        took = time.monotonic() - t0

        assert s["created"] is True and s["listed"] is True
        assert sorted(p["partition"] for p in s["partitions"]) == list(range(PARTITIONS))
        assert all(len(p["replicas"]) == 3 and p["leader"] in p["replicas"] for p in s["partitions"])
        assert e2e_admin.describe_configs(topic)["min.insync.replicas"] == "2"
        assert s["acks"] and all(a["errorCode"] == 0 for a in s["acks"])

        sent = [(m["key"], m["value"]) for m in s["sent"]]
        got: dict[int, list[tuple[str, str, int]]] = defaultdict(list)
        for m in s["consumed"]:
            got[m["partition"]].append((m["key"], m["value"], m["offset"]))
        # exactly what was sent, once each, dense offsets, one key -> one partition, per-key order
        assert sorted((k, v) for recs in got.values() for k, v, _ in recs) == sorted(sent)
        for recs in got.values():
            assert [o for _, _, o in recs] == list(range(len(recs)))
        where = defaultdict(set)
        for p, recs in got.items():
            for k, _, _ in recs:
                where[k].add(p)
        assert all(len(ps) == 1 for ps in where.values())
        for k, (p,) in where.items():
            assert [v for kk, v, _ in got[p] if kk == k] == [v for kk, v in sent if kk == k]

        # the group: one kafkajs member, its commits (offset + 1 of each record) as the coordinator holds them
        assert s["group"] == [{"groupId": group, "state": "Stable", "protocol": "RoundRobinAssigner", "members": 1}]
        counts = {p: len(got.get(p, [])) for p in range(PARTITIONS)}
        assert {c["partition"]: c["offset"] for c in s["committed"]} == counts
        offsets = e2e_admin.list_consumer_group_offsets(group)
        assert {tp.partition: off for tp, off in offsets.items() if tp.topic == topic} == {
            p: n for p, n in counts.items() if n
        }

        # rafka's Python consumer reads the same records at the same offsets
        c = rafka.Consumer(e2e_cluster, auto_offset_reset="earliest")
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        mine = []
        deadline = time.monotonic() + 30
        while len(mine) < N and time.monotonic() < deadline:
            for recs in c.poll(500).values():
                mine += [(r.partition, r.key.decode(), r.value.decode(), r.offset) for r in recs]
        c.close()
        assert sorted(mine) == sorted((p, k, v, o) for p, recs in got.items() for k, v, o in recs)

        deleted = kafkajs("roundtrip.js", "delete", bootstrap, topic, timeout=90)
        assert deleted == {"deleted": True}
        deadline = time.monotonic() + 20
        while topic in e2e_admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert topic not in e2e_admin.list_topics()
        print(f"kafkajs round trip: {took:.1f} s")
    finally:
        if topic in e2e_admin.list_topics():
            e2e_admin.delete_topics([topic])


def test_kafkajs_transactions_commit_abort_offsets_and_fencing(kafkajs, bootstrap, e2e_cluster, e2e_topic):
    """kafkajs's transactions (its own versions: InitProducerId 1, AddPartitionsToTxn 1, AddOffsetsToTxn 1,
    TxnOffsetCommit 1, EndTxn 1): a committed transaction with the group's offsets, an aborted one with other
    offsets, a second committed one, then a producer of the same transactional id fences the first, whose
    next transaction fails. kafkajs's read_committed consumer and rafka's read exactly the two committed
    transactions; read_uncommitted also shows the aborted one; the group holds the committed offset only."""
    topic = e2e_topic(PARTITIONS, 3)
    group = "kjs-tx-" + uuid.uuid4().hex[:6]
    n = 60
    s = kafkajs("roundtrip.js", "txn", bootstrap, topic, group, str(n))
    committed = {f"kjs-c{k}-{i}" for k in (1, 2) for i in range(n)}
    aborted = {f"kjs-ab-{i}" for i in range(n)}
    values = [m["value"] for m in s["consumed"]]
    assert sorted(values) == sorted(committed), "kafkajs's read_committed consumer saw other than the commits"
    assert all(m["partition"] == int(m["value"].rsplit("-", 1)[1]) % 3 for m in s["consumed"])
    # fenced: PRODUCER_FENCED, answered as INVALID_PRODUCER_EPOCH to AddPartitionsToTxn v1 (before KIP-588), as Kafka does
    assert s["fenced"] == "INVALID_PRODUCER_EPOCH", s["fenced"]
    assert s["committed"] == [{"partition": p, "offset": 5 if p == 0 else -1} for p in range(PARTITIONS)]

    def read(isolation: str, want: int) -> list[str]:
        c = rafka.Consumer(e2e_cluster, auto_offset_reset="earliest", isolation_level=isolation)
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        got: list[str] = []
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            for recs in c.poll(300).values():
                got += [r.value.decode() for r in recs]
        c.close()
        return got

    assert sorted(read("read_committed", 2 * n)) == sorted(committed)
    uncommitted = read("read_uncommitted", 3 * n)
    assert set(uncommitted) >= committed | aborted
    assert not [v for v in uncommitted if v.startswith("kjs-zombie")], "the fenced producer's records were written"


DEFAULT, TOPIC_CONFIG = 5, 1  # DescribeConfigs config sources (kafkajs's ConfigSource)


def test_kafkajs_topic_configs_create_describe_and_legacy_alter(kafkajs, bootstrap, e2e_admin):
    """Issue 45 items 4 and 5 with kafkajs (tests/e2e/kafkajs/configs.js). CreateTopics with Kafka topic
    configs rafka acts on (compression.type, retention.ms) or only stores (file.delete.delay.ms, preallocate):
    DescribeConfigs shows each with its value as a topic config; a value Kafka's validator refuses
    (compression.type=brotli) answers INVALID_CONFIG and no topic is made. kafkajs's alterConfigs is the legacy
    AlterConfigs (api key 33): each request replaces the topic's overrides as a whole, so what the second one
    leaves out goes back to its default; a refused value (min.insync.replicas=0) changes nothing."""
    topic, bad = "kjs-cfg-" + uuid.uuid4().hex[:6], "kjs-cfg-bad-" + uuid.uuid4().hex[:6]
    try:
        s = kafkajs("configs.js", bootstrap, topic, bad)
    finally:
        if topic in e2e_admin.list_topics():
            e2e_admin.delete_topics([topic])
    steps = s["steps"]
    versions = {k: sorted({v for kk, v in s["sent"] if kk == k}) for k, _ in s["sent"]}
    assert versions.get(33) == [1] and 44 not in versions, versions  # AlterConfigs v1, never IncrementalAlterConfigs
    assert versions.get(19) == [3] and versions.get(32) == [2], versions  # CreateTopics v3, DescribeConfigs v2

    assert steps["create"]["error"] is None, steps["create"]
    created = steps["create"]["configs"]
    for name, value in {
        "compression.type": "zstd",
        "file.delete.delay.ms": "30000",
        "retention.ms": "3600000",
        "preallocate": "true",
    }.items():
        assert created[name] == [value, TOPIC_CONFIG, False], (name, created[name])
    assert created["cleanup.policy"] == ["delete", DEFAULT, True], created["cleanup.policy"]
    assert steps["createBad"]["error"] == [
        {"name": "KafkaJSCreateTopicError", "type": "INVALID_CONFIG", "topic": bad}
    ], steps["createBad"]
    assert s["listed"] == [topic], s["listed"]  # the refused topic was not made

    assert steps["alter1"]["error"] is None, steps["alter1"]
    first = steps["alter1"]["configs"]
    assert first["retention.ms"] == ["7200000", TOPIC_CONFIG, False]
    assert first["cleanup.policy"] == ["compact", TOPIC_CONFIG, False]
    # replace-all: the overrides of CreateTopics the request did not name are gone
    assert first["compression.type"] == ["producer", DEFAULT, True], first["compression.type"]
    assert first["file.delete.delay.ms"] == ["60000", DEFAULT, True], first["file.delete.delay.ms"]
    assert first["preallocate"] == ["false", DEFAULT, True], first["preallocate"]

    assert steps["alter2"]["error"] is None, steps["alter2"]
    second = steps["alter2"]["configs"]
    assert second["retention.ms"] == ["1800000", TOPIC_CONFIG, False]
    assert second["cleanup.policy"] == ["delete", DEFAULT, True], second["cleanup.policy"]
    overrides = {k: v[0] for k, v in second.items() if v[1] == TOPIC_CONFIG}
    assert overrides == {"retention.ms": "1800000"}, overrides

    assert steps["alterBad"]["error"] == [{"name": "KafkaJSProtocolError", "type": "INVALID_CONFIG", "topic": None}], (
        steps["alterBad"]
    )
    assert steps["alterBad"]["configs"] == second  # refused as a whole
