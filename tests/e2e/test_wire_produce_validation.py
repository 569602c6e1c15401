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
from storage.batch_header import RECORDS_POS
from storage.codecs import gzip_compress, gzip_decompress
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
    """``(header, compressed records block)`` of each stored batch of partition 0 (read from its leader's log)."""
    _, h = leader_of(cluster.server, topic)
    r = ray.get(h.fetch.remote(FetchRequest(0, 1 << 22)), timeout=30)
    assert r["error_code"] == 0, r
    buf = bytes(r["records"])
    return [(hdr, buf[pos + RECORDS_POS : pos + hdr.size_in_bytes]) for pos, hdr in iter_batch_headers(buf)]


def test_the_topics_gzip_level_is_the_one_the_leader_recompresses_at(bootstrap, e2e_cluster, e2e_topic):
    """KIP-390: confluent-kafka sends uncompressed batches to two gzip topics, compression.gzip.level 1 and 9;
    the leader rebuilds them at the topic's level (Kafka's LogConfig.getCompression): each stored batch's records
    block is exactly deflate's output at its topic's level (and differs from the other level's), whatever batches
    librdkafka made; every record reads back the same from both."""
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
    assert {h.attributes & COMPRESSION_MASK for h, _ in fb + bb} == {GZIP}
    assert sum(h.records_count for h, _ in fb) == sum(h.records_count for h, _ in bb) == 300
    # compared batch by batch: how many batches librdkafka sends depends on its timing (once 1 and 4 for the
    # same 300 records), so the topics' totals are not comparable
    differs = 0
    for level, batches in ((1, fb), (9, bb)):
        for h, block in batches:
            raw = gzip_decompress(block)
            at = {lv: len(gzip_compress(raw, lv)) for lv in (1, 9)}
            assert len(block) == at[level], (level, h.base_offset, len(block), at)
            differs += at[1] != at[9]
    assert differs, "the records compress to the same size at levels 1 and 9: the test proves nothing"
    print(
        f"gzip level 1: {len(fb)} batch(es), {sum(len(b) for _, b in fb)} bytes of records; "
        f"level 9: {len(bb)} batch(es), {sum(len(b) for _, b in bb)} bytes"
    )
    for t in (fast, best):
        assert confluent_read(bootstrap, [(t, 0)], "read_uncommitted", 300) == values
