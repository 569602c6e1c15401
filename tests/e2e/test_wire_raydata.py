"""Ray Data's own Kafka connectors against rafka's wire listeners (the shared e2e cluster): a Dataset written
with ``Dataset.write_kafka`` (librdkafka inside) lands keyed, one key -> one partition, readable by rafka's
Python consumer; ``ray.data.read_kafka`` reads a topic rafka's Python producer wrote, every record once with
its partition, offset and key, and a bounded offset range reads exactly that range."""

from __future__ import annotations

import json
from collections import defaultdict

import ray

import rafka
from rafka import TopicPartition

ROWS = 600


def _read_all(cluster, topic: str, partitions: int) -> dict[int, list]:
    c = rafka.Consumer(cluster, auto_offset_reset="earliest")
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    ends = c.end_offsets(tps)
    out: dict[int, list] = defaultdict(list)
    for _ in range(200):
        if all(c.position(tp) >= ends[tp] for tp in tps):
            break
        for tp, recs in c.poll(timeout_ms=500).items():
            out[tp.partition] += recs
    c.close()
    return out


def test_dataset_write_kafka_then_rafka_reads_it(e2e_cluster, e2e_topic, bootstrap):
    topic = e2e_topic(3, 3, min_insync_replicas="2")
    rows = [{"user": f"u{i % 23}", "n": i} for i in range(ROWS)]
    ds = ray.data.from_items(rows, override_num_blocks=2)
    ds.write_kafka(
        topic,
        bootstrap,
        key_field="user",
        producer_config={"acks": "all", "enable.idempotence": True, "broker.address.family": "v4"},
    )
    got = _read_all(e2e_cluster, topic, 3)
    values = [json.loads(r.value) for recs in got.values() for r in recs]
    assert sorted(v["n"] for v in values) == list(range(ROWS))
    where = defaultdict(set)
    for p, recs in got.items():
        assert [r.offset for r in recs] == list(range(len(recs)))
        for r in recs:
            assert json.loads(r.value)["user"] == r.key.decode()
            where[r.key].add(p)
    assert len(where) == 23 and all(len(ps) == 1 for ps in where.values())


def test_read_kafka_reads_what_rafka_wrote(e2e_cluster, e2e_topic, bootstrap):
    topic = e2e_topic(2, 1)  # a reader's test (the writer's above is acks=all on RF 3): 2 replica processes, not 6
    p = rafka.Producer(e2e_cluster)
    sent = {(i % 2, f"k{i}".encode(), f"v{i}".encode()) for i in range(ROWS)}
    for part, k, v in sorted(sent):
        p.send(topic, v, key=k, partition=part)
    p.flush()
    p.close()
    rows = ray.data.read_kafka(
        topic, bootstrap_servers=bootstrap, consumer_config={"broker.address.family": "v4"}
    ).take_all()
    assert len(rows) == ROWS
    assert {(r["partition"], r["key"], r["value"]) for r in rows} == sent
    for part in (0, 1):
        offs = sorted(r["offset"] for r in rows if r["partition"] == part)
        assert offs == list(range(ROWS // 2))
    # a bounded range: offsets [10, 50) of each partition, nothing else
    ranged = ray.data.read_kafka(
        topic,
        bootstrap_servers=bootstrap,
        start_offset=10,
        end_offset=50,
        consumer_config={"broker.address.family": "v4"},
    ).take_all()
    assert sorted((r["partition"], r["offset"]) for r in ranged) == [(q, o) for q in (0, 1) for o in range(10, 50)]
