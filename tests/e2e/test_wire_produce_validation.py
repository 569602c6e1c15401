"""The leader's record validation and compression.type as real clients see them over the Kafka wire
(storage/log_validator.py, serve/kafka_wire/handlers/produce.py), on the shared e2e cluster:
- KIP-467: confluent-kafka sends 100 records in one batch to a compacted topic, 10 of them without a key.
  The Produce answer (v10 from librdkafka 2.16) names the 10 in record_errors. librdkafka fails exactly those
  with INVALID_RECORD (its delivery report carries the code; the per-record message is librdkafka's log's), and the 90 others with _INVALID_DIFFERENT_RECORD
  (rdkafka_request.c, rd_kafka_msgbatch_handle_Produce_result_record_errors). It does not retry them: the
  application sends them again and they are delivered.
- compression.type: a zstd topic stores uncompressed sends as zstd batches, and a 'producer' topic keeps
  gzip; consumers read every record back.
- compression.gzip.level (KIP-390): the same uncompressed sends stored in fewer bytes by a gzip topic at level 9
  than by one at level 1."""

from __future__ import annotations

import ray
from support import confluent_read, leader_of

from protocol.messages import FetchRequest
from storage.records import COMPRESSION_MASK, GZIP, ZSTD, decode_records, iter_batch_headers


def ck_producer(bootstrap: str, **conf):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 200, "acks": "all", **conf})


def test_only_the_invalid_records_of_a_batch_are_reported_invalid(bootstrap, e2e_topic):
    from confluent_kafka import KafkaError

    t = e2e_topic(1, 3, cleanup_policy="compact")
    bad = set(range(5, 100, 10))
    reports: dict[int, object] = {}
    p = ck_producer(bootstrap)

    def send(i):
        key = None if i in bad else b"k%d" % i
        p.produce(t, key=key, value=b"v%d" % i, partition=0, on_delivery=lambda e, m, i=i: reports.__setitem__(i, e))

    for i in range(100):
        send(i)
    assert p.flush(30) == 0 and len(reports) == 100
    for i in bad:
        err = reports[i]
        assert err is not None and err.code() == KafkaError.INVALID_RECORD, (i, err)
    others = {i: reports[i] for i in range(100) if i not in bad}
    refused = [i for i, e in others.items() if e is not None]
    assert all(others[i].code() == KafkaError._INVALID_DIFFERENT_RECORD for i in refused), others
    assert refused, "one batch of 100 with linger.ms=200: the good records share the bad ones' batch"
    reports.clear()
    for i in refused:  # librdkafka does not retry them: the application does
        send(i)
    assert p.flush(30) == 0 and all(e is None for e in reports.values()) and len(reports) == len(refused)
    got = confluent_read(bootstrap, [(t, 0)], "read_uncommitted", 90)
    assert sorted(got) == sorted(b"v%d" % i for i in range(100) if i not in bad)


def stored_codecs(cluster, topic: str) -> list[int]:
    _, h = leader_of(cluster.server, topic)
    r = ray.get(h.fetch.remote(FetchRequest(0, 1 << 22)), timeout=30)
    assert r["error_code"] == 0, r
    assert decode_records(r["records"])  # the stored bytes decode
    return [hdr.attributes & COMPRESSION_MASK for _, hdr in iter_batch_headers(r["records"])]


def test_the_topics_compression_type_is_what_the_log_stores(bootstrap, e2e_cluster, e2e_topic):
    zstd_topic = e2e_topic(1, 3, compression_type="zstd")
    kept_topic = e2e_topic(1, 3, compression_type="producer")
    plain = ck_producer(bootstrap, **{"compression.type": "none"})
    gzip = ck_producer(bootstrap, **{"compression.type": "gzip"})
    for i in range(60):
        plain.produce(zstd_topic, key=b"k%d" % i, value=b"plain-%d" % i * 5, partition=0)
        gzip.produce(kept_topic, key=b"k%d" % i, value=b"gzip-%d" % i * 5, partition=0)
        if i == 29:
            assert plain.flush(30) == 0 and gzip.flush(30) == 0  # two batches each
    assert plain.flush(30) == 0 and gzip.flush(30) == 0
    zc, kc = stored_codecs(e2e_cluster, zstd_topic), stored_codecs(e2e_cluster, kept_topic)
    assert len(zc) >= 2 and set(zc) == {ZSTD}, zc
    assert len(kc) >= 2 and set(kc) == {GZIP}, kc
    assert confluent_read(bootstrap, [(zstd_topic, 0)], "read_uncommitted", 60) == [
        b"plain-%d" % i * 5 for i in range(60)
    ]
    assert confluent_read(bootstrap, [(kept_topic, 0)], "read_uncommitted", 60) == [
        b"gzip-%d" % i * 5 for i in range(60)
    ]


def stored_batches(cluster, topic: str) -> list:
    """The stored batches' headers of partition 0 (read from its leader's log)."""
    _, h = leader_of(cluster.server, topic)
    r = ray.get(h.fetch.remote(FetchRequest(0, 1 << 22)), timeout=30)
    assert r["error_code"] == 0, r
    return [hdr for _, hdr in iter_batch_headers(r["records"])]


def test_the_topics_gzip_level_is_the_one_the_leader_recompresses_at(bootstrap, e2e_cluster, e2e_topic):
    """KIP-390: confluent-kafka sends uncompressed batches to two gzip topics, compression.gzip.level 1 and 9;
    the leader rebuilds them at the topic's level (Kafka's LogConfig.getCompression), so the same records are
    stored in fewer bytes at level 9, and read back the same from both."""
    fast = e2e_topic(1, 1, compression_type="gzip", compression_gzip_level="1")
    best = e2e_topic(1, 1, compression_type="gzip", compression_gzip_level="9")
    plain = ck_producer(bootstrap, **{"compression.type": "none", "linger.ms": 500})
    values = [
        b"order %06d of customer %04d: " % (i, i % 97) + b"widget gadget sprocket " * (1 + i % 5) for i in range(300)
    ]
    for t in (fast, best):
        for i, v in enumerate(values):
            plain.produce(t, key=b"k%d" % i, value=v, partition=0)
        assert plain.flush(30) == 0
    fb, bb = stored_batches(e2e_cluster, fast), stored_batches(e2e_cluster, best)
    assert {h.attributes & COMPRESSION_MASK for h in fb + bb} == {GZIP}
    assert sum(h.records_count for h in fb) == sum(h.records_count for h in bb) == 300
    fast_bytes, best_bytes = sum(h.size_in_bytes for h in fb), sum(h.size_in_bytes for h in bb)
    print(f"gzip level 1: {len(fb)} batch(es), {fast_bytes} bytes; level 9: {len(bb)} batch(es), {best_bytes} bytes")
    # at least 5% fewer (about 11% here; the same level on both differs by a few bytes: timestamps)
    assert best_bytes * 100 < fast_bytes * 95
    for t in (fast, best):
        assert confluent_read(bootstrap, [(t, 0)], "read_uncommitted", 300) == values
