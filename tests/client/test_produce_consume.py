"""Producer and consumer against a real 3-broker cluster: placement, ordering, positions, offsets."""

from __future__ import annotations

import time

import pytest

import rafka
from protocol.errors import (
    InvalidTimestampError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from rafka import TopicPartition
from rafka.producer.partitioner import partition_for_key

pytestmark = pytest.mark.cluster


def consume_all(cluster, topic, partitions, expected, timeout_s=30, **config):
    c = rafka.Consumer(cluster, auto_offset_reset="earliest", **config)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    got = {}
    deadline = time.monotonic() + timeout_s
    n = 0
    while n < expected and time.monotonic() < deadline:
        for tp, recs in c.poll(timeout_ms=500).items():
            got.setdefault(tp.partition, []).extend(recs)
            n += len(recs)
    c.close()
    return got


def test_keyed_records_follow_murmur2_and_keep_per_key_order(rafka_cluster, new_topic):
    topic = new_topic(3, 3, min_insync_replicas="2")
    keys = [f"user-{i}".encode() for i in range(40)]
    with rafka.Producer(rafka_cluster, linger_ms=2, batch_size=4096) as p:
        futs = [(k, i, p.send(topic, value=b"%d" % i, key=k)) for i in range(2000) for k in [keys[i % 40]]]
        p.flush()
        mds = [(k, i, f.get(timeout=30)) for k, i, f in futs]
    for k, _, md in mds:
        assert md.partition == partition_for_key(k, 3)  # Kafka's Java client would pick the same
    per_part = {}
    for _, _, md in mds:
        per_part.setdefault(md.partition, []).append(md.offset)
    for offsets in per_part.values():  # dense, never reused
        assert sorted(offsets) == list(range(len(offsets)))
    got = consume_all(rafka_cluster, topic, 3, 2000)
    assert sum(len(v) for v in got.values()) == 2000
    for part, recs in got.items():
        assert [r.offset for r in recs] == list(range(len(recs)))
        by_key = {}
        for r in recs:
            assert partition_for_key(r.key, 3) == part
            by_key.setdefault(r.key, []).append(int(r.value))
        for seq in by_key.values():
            assert seq == sorted(seq)  # per-key order as sent


def test_values_headers_nulls_timestamps_and_callbacks(rafka_cluster, new_topic):
    topic = new_topic(1, 1)
    seen = []
    with rafka.Producer(rafka_cluster, value_serializer=lambda v: v.encode(), key_serializer=str.encode) as p:
        f1 = p.send(
            topic,
            "hello",
            key="k",
            headers=[("h", b"1"), ("n", None)],
            timestamp_ms=1234,
            callback=lambda md, exc: seen.append((md, exc)),
        )
        f2 = p.send(topic, None, key=None, headers={"only": b"x"})
        md1, md2 = f1.get(10), f2.get(10)
    assert (md1.offset, md1.timestamp, md1.serialized_key_size, md1.serialized_value_size) == (0, 1234, 1, 5)
    assert md2.offset == 1 and md2.serialized_value_size == -1
    assert seen and seen[0][0] == md1 and seen[0][1] is None
    c = rafka.Consumer(rafka_cluster, auto_offset_reset="earliest", value_deserializer=bytes.decode)
    c.assign([TopicPartition(topic, 0)])
    recs = []
    while len(recs) < 2:
        recs += c.poll(2000).get(TopicPartition(topic, 0), [])
    assert (recs[0].key, recs[0].value, recs[0].timestamp, recs[0].headers) == (
        b"k",
        "hello",
        1234,
        (("h", b"1"), ("n", None)),
    )
    assert (recs[1].key, recs[1].value, recs[1].headers) == (None, None, (("only", b"x"),))


def test_null_keys_stick_to_a_partition_per_batch(rafka_cluster, new_topic):
    topic = new_topic(3, 1)
    with rafka.Producer(rafka_cluster, batch_size=1024, linger_ms=50) as p:
        futs = [p.send(topic, b"x" * 100) for _ in range(300)]
        p.flush()
        parts = [f.get().partition for f in futs]
    runs = 1 + sum(1 for a, b in zip(parts, parts[1:]) if a != b)
    assert len(set(parts)) >= 2  # moved on after batches filled
    assert runs <= len(parts) // 5  # ...but in runs of whole batches, not record by record


def test_explicit_and_custom_partitioners(rafka_cluster, new_topic):
    topic = new_topic(3, 1)
    calls = []

    def last_partition(topic_, key, all_parts, available):
        calls.append((topic_, key, list(all_parts)))
        return all_parts[-1]

    with rafka.Producer(rafka_cluster, partitioner=last_partition) as p:
        assert p.send(topic, b"a", key=b"k").get(10).partition == 2
        assert p.send(topic, b"b", partition=0).get(10).partition == 0  # explicit wins
        with pytest.raises(ValueError, match="invalid partition 7"):
            p.send(topic, b"c", partition=7)
    assert calls == [(topic, b"k", [0, 1, 2])]


def test_send_errors_raise_at_once(rafka_cluster, new_topic):
    topic = new_topic(1, 1)
    with rafka.Producer(rafka_cluster, max_request_size=1000, max_block_ms=300) as p:
        with pytest.raises(RecordTooLargeError, match="max_request_size"):
            p.send(topic, b"x" * 2000)
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="not present in metadata after 300 ms"):
            p.send("no-such-topic", b"x")
        assert 0.25 < time.monotonic() - t0 < 5
        with pytest.raises(TypeError, match="value_serializer"):
            p.send(topic, {"a": 1})
    with pytest.raises(rafka.errors.IllegalStateError):
        p.send(topic, b"after close")
    with pytest.raises(ValueError, match="unknown producer config 'lingerms'"):
        rafka.Producer(rafka_cluster, lingerms=1)


@pytest.mark.parametrize("name", ["", ".", "..", "bad name", "x/y", "ü", "a" * 250, "ok\n", None, 5])
def test_invalid_topic_names_raise_at_once(rafka_cluster, name):
    """Kafka's Topic.validate on the client: before, each waited max_block_ms (60 s by default) for
    metadata that could never come, then timed out."""
    with rafka.Producer(rafka_cluster) as p:
        for call in (
            lambda: p.send(name, b"x"),
            lambda: p.send_batch(name, [(None, b"x")]),
            lambda: p.partitions_for(name),
        ):
            t0 = time.monotonic()
            with pytest.raises(rafka.errors.InvalidTopicError) as info:
                call()
            assert time.monotonic() - t0 < 1.0 and info.value.code == 17 and info.value.message


def test_send_batch_places_orders_and_reports_like_send(rafka_cluster, new_topic):
    """``send_batch`` (the gateway's path: one C encode per partition run, one wait per batch): every record
    lands where ``send`` would put it, futures come back in input order, keyless records spread over the
    partitions in runs of ``batch_size`` (KIP-480), and ``wait_all`` reports the same offsets as ``get``."""
    from rafka.producer.accumulator import wait_all

    topic = new_topic(3, 1)
    records = []
    for i in range(900):
        if i % 3 == 0:
            records.append((b"user-%d" % (i % 17), b"keyed-%d" % i))  # murmur2 of the key
        elif i % 3 == 1:
            records.append((None, b"x" * 200 + b"%d" % i))  # sticky, keyless
        else:
            records.append((None, b"pinned-%d" % i, i % 3, [("i", b"%d" % i)], 5_000 + i))  # explicit
    with rafka.Producer(rafka_cluster, batch_size=4096, linger_ms=5) as p:
        futs = p.send_batch(topic, records)
        assert len(futs) == len(records)
        pairs = wait_all(futs, timeout=30, offsets_only=True)
        mds = wait_all(futs, timeout=30)
        single = p.send(topic, b"after", key=b"user-1").get(30)
    assert [(md.partition, md.offset) for md in mds] == pairs
    assert [(f.get(0).partition, f.get(0).offset) for f in futs] == pairs
    for (key, _value, *rest), (part, _) in zip(records, pairs):
        if key is not None:
            assert part == partition_for_key(key, 3)
        elif rest:
            assert part == rest[0]
    keyless = [part for (key, _, *rest), (part, _) in zip(records, pairs) if key is None and not rest]
    assert len(set(keyless)) >= 2  # 300 x ~210 B is ~15 batches of 4 KB: the sticky partition moved on
    assert 1 + sum(a != b for a, b in zip(keyless, keyless[1:])) <= len(keyless) // 5  # in runs, not per record
    got = consume_all(rafka_cluster, topic, 3, len(records) + 1)
    for part in range(3):  # dense offsets, and each partition holds its records in input order
        recs = got.get(part, [])
        assert [r.offset for r in recs] == list(range(len(recs)))
        want = [r[1] for r, (pp, _) in zip(records, pairs) if pp == part] + (
            [b"after"] if part == single.partition else []
        )
        assert [r.value for r in recs] == want
    by_value = {r.value: r for recs in got.values() for r in recs}
    pinned = by_value[b"pinned-2"]
    assert (pinned.timestamp, pinned.headers) == (5_002, (("i", b"2"),))


def test_send_batch_pauses_the_cyclic_collector_and_restores_it(rafka_cluster, new_topic):
    """``send_batch`` runs with Python's cyclic collector off (rafka.producer.producer.gc_paused): its ~2 tracked
    objects per record all stay alive, so the collector's passes free nothing, and the full passes a large call
    set off scanned every live object (a 200,000-record call: loop 500 ms with them, 190 ms without). The
    collector is on again after the call, and a caller that had it off finds it off."""
    import gc

    topic = new_topic(1, 1)
    passes: list[int] = []

    def seen(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    records = [(None, b"v%d" % i) for i in range(30_000)]
    with rafka.Producer(rafka_cluster, linger_ms=5) as p:
        p.send_batch(topic, records[:1])[0].get(30)  # metadata and producer id first
        gc.callbacks.append(seen)
        try:
            futs = p.send_batch(topic, records)
        finally:
            gc.callbacks.remove(seen)
        assert gc.isenabled()
        # at most the one pass that the allocations counted while it was off start as soon as it is on again
        # (with the collector running through the call: ~130 passes)
        assert len(passes) <= 1, f"{len(passes)} collector passes during send_batch: {passes[:10]}"
        gc.disable()
        try:
            p.send_batch(topic, records[:10])
            assert not gc.isenabled()  # left as the caller had it
        finally:
            gc.enable()
        p.flush()
        assert futs[-1].get(30).offset == 30_000
        assert [f.get(0).offset for f in futs[:3]] == [1, 2, 3]


def test_send_batch_checks_every_record_before_queueing_any(rafka_cluster, new_topic):
    topic = new_topic(2, 1)
    with rafka.Producer(rafka_cluster, max_request_size=1000, linger_ms=0) as p:
        with pytest.raises(RecordTooLargeError, match="max_request_size"):
            p.send_batch(topic, [(None, b"ok")] * 10 + [(None, b"x" * 2000)] + [(None, b"ok")] * 10)
        with pytest.raises(ValueError, match="invalid partition 5"):
            p.send_batch(topic, [(None, b"ok", 0), (None, b"bad", 5)])
        with pytest.raises(TypeError, match="value_serializer"):
            p.send_batch(topic, [(None, b"ok"), (None, {"not": "bytes"})])
        # calls long enough to be appended in chunks when every record is good (rafka/producer/send_batch.py): a bad
        # record far into the call still fails it with nothing queued
        many = [(None, b"ok", 0)] * 5000
        with pytest.raises(RecordTooLargeError, match="max_request_size"):
            p.send_batch(topic, many + [(None, b"x" * 2000, 0)])
        with pytest.raises(ValueError, match="invalid partition 5"):
            p.send_batch(topic, many + [(None, b"bad", 5)])
        with pytest.raises(TypeError, match="value_serializer"):
            p.send_batch(topic, many + [(None, {"not": "bytes"})])
        with pytest.raises(ValueError):
            p.send_batch(topic, many + [(None, b"ok", 0, None, "not a timestamp")])
        with pytest.raises(InvalidTimestampError, match="invalid record timestamp -5"):
            p.send_batch(topic, many + [(None, b"ok", 0, None, -5)])
        assert p.send_batch(topic, [], partition=0) == []
        marker = p.send_batch(topic, [(b"k", b"marker")], partition=1)[0].get(30)
        p.flush()
    assert marker.offset == 0  # nothing of the failed calls reached partition 1...
    c = rafka.Consumer(rafka_cluster)
    ends = c.end_offsets([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    c.close()
    assert ends == {TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 1}  # ...nor partition 0


def test_send_batch_packs_bulk_batches_within_the_topic_max_message_bytes(rafka_cluster, new_topic):
    """``send_batch``'s batches go past ``batch.size`` up to the topic's ``max.message.bytes`` (a topic's
    override included), so the leader takes every one of them; the records come back in order."""
    small = new_topic(2, 1, max_message_bytes="20000")
    plain = new_topic(2, 1)
    values = [b"%06d" % i + b"v" * 94 for i in range(4000)]
    with rafka.Producer(rafka_cluster, batch_size=4096) as p:
        futs_small = p.send_batch(small, [(None, v, i % 2) for i, v in enumerate(values)])
        futs_plain = p.send_batch(plain, [(None, v, i % 2) for i, v in enumerate(values)])
        p.flush()
        got_small = [f.get(30) for f in futs_small]
        got_plain = [f.get(30) for f in futs_plain]
    sizes_small = {id(f._batch): f._batch.builder.estimated_size for f in futs_small}
    sizes_plain = {id(f._batch): f._batch.builder.estimated_size for f in futs_plain}
    assert 4096 < max(sizes_small.values()) <= 20000 and len(sizes_small) >= 20
    assert max(sizes_plain.values()) > 100_000 and len(sizes_plain) == 2  # one batch per partition
    for got in (got_small, got_plain):
        assert [m.offset for m in got if m.partition == 0] == list(range(2000))
    assert read_values(rafka_cluster, TopicPartition(small, 0), 2000) == values[0::2]


@pytest.mark.parametrize("idempotent", [True, False])
def test_batches_refused_as_too_large_are_split_and_sent_again(rafka_cluster, new_topic, idempotent, monkeypatch):
    """KIP-126: the topic's max.message.bytes is lowered after the producer read its metadata, so send_batch
    builds bulk batches the leader refuses (MESSAGE_TOO_LARGE); the producer splits each and sends the parts
    (an idempotent one under the batch's own sequences, the batches after it in order): every record lands
    once, in order, and its future, callback and ``wait_all`` answer report where."""
    from rafka.producer import send_batch
    from rafka.producer.producer_batch import wait_all

    # the producer's view of the topic stays the one from before the change (a metadata refresh can come at
    # any time, and would let it size its batches right from the start)
    monkeypatch.setattr(send_batch, "bulk_bytes", lambda producer, tm: 1 << 20)

    topic = new_topic(1, 1)
    values = [b"%06d" % i + b"v" * 94 for i in range(20000)]
    seen: dict[int, int] = {}
    with rafka.Producer(rafka_cluster, enable_idempotence=idempotent, acks="all" if idempotent else 1) as p:
        p.send_batch(topic, [(None, b"first", 0)])[0].get(30)  # the metadata: max.message.bytes at its default
        rafka.Admin(rafka_cluster).alter_configs(topic, set={"max.message.bytes": "30000"})
        futs = p.send_batch(topic, [(None, v, 0) for v in values])  # ~2.2 MB: three bulk batches, refused
        futs[-1].add_callback(lambda md: seen.update(last=md.offset))
        p.flush()
        offsets = [f.get(30).offset for f in futs]
        assert wait_all(futs, 30, offsets_only=True) == [(0, o) for o in offsets]
    assert offsets == list(range(1, 20001)) and seen == {"last": 20000}
    assert futs[0]._batch.parts is not None and len(futs[0]._batch.parts) >= 2  # it was split
    assert read_values(rafka_cluster, TopicPartition(topic, 0), 20001) == [b"first"] + values


def read_values(cluster, tp: TopicPartition, n: int) -> list[bytes]:
    """The values of ``tp`` from its start, until ``n`` (or 30 s)."""
    c = rafka.Consumer(cluster, auto_offset_reset="earliest")
    c.assign([tp])
    read: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(read) < n and time.monotonic() < deadline:
        read += [r.value for recs in c.poll(timeout_ms=500).values() for r in recs]
    c.close()
    return read


def test_seek_positions_offsets_and_times(rafka_cluster, new_topic):
    topic = new_topic(1, 1)
    tp = TopicPartition(topic, 0)
    with rafka.Producer(rafka_cluster) as p:
        for i in range(100):
            p.send(topic, b"%d" % i, timestamp_ms=1_000_000 + i * 10)
    c = rafka.Consumer(rafka_cluster, auto_offset_reset="latest")
    c.assign([tp])
    assert c.beginning_offsets([tp]) == {tp: 0}
    assert c.end_offsets([tp]) == {tp: 100}
    assert c.position(tp) == 100  # latest
    assert c.poll(200) == {}
    c.seek(tp, 42)
    recs = c.poll(5000, max_records=5)[tp]
    assert [r.offset for r in recs] == [42, 43, 44, 45, 46] and c.position(tp) == 47
    c.seek_to_beginning(tp)
    assert c.position(tp) == 0
    assert c.poll(5000, max_records=1)[tp][0].value == b"0"
    c.seek_to_end(tp)
    assert c.position(tp) == 100
    found = c.offsets_for_times({tp: 1_000_000 + 555, TopicPartition(topic, 0): 1_000_000 + 555})
    assert found[tp].offset == 56 and found[tp].timestamp == 1_000_560
    assert c.offsets_for_times({tp: 9_000_000})[tp] is None
    c.seek(tp, c.offsets_for_times({tp: 1_000_000 + 990})[tp].offset)
    assert [r.value for r in c.poll(5000)[tp]] == [b"99"]
    c.close()


def test_iteration_pause_resume(rafka_cluster, new_topic):
    topic = new_topic(2, 1)
    with rafka.Producer(rafka_cluster) as p:
        for i in range(20):
            p.send(topic, b"%d" % i, partition=i % 2)
    c = rafka.Consumer(rafka_cluster, auto_offset_reset="earliest", consumer_timeout_ms=1500)
    t0, t1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    c.assign([t0, t1])
    c.pause(t1)
    assert c.paused() == {t1}
    first = list(c)  # stops after 1.5 s without records
    assert {(r.partition) for r in first} == {0} and len(first) == 10
    c.resume(t1)
    rest = list(c)
    assert {(r.partition) for r in rest} == {1} and len(rest) == 10
    assert c.position(t0) == 10 and c.position(t1) == 10


def test_offset_reset_policies(rafka_cluster, new_topic):
    topic = new_topic(1, 1)
    tp = TopicPartition(topic, 0)
    with rafka.Producer(rafka_cluster) as p:
        for i in range(10):
            p.send(topic, b"%d" % i)
    c = rafka.Consumer(rafka_cluster, auto_offset_reset="none")
    c.assign([tp])
    with pytest.raises(NoOffsetForPartitionError):
        c.poll(100)
    c.seek(tp, 500)  # beyond the log end
    with pytest.raises(OffsetOutOfRangeError):
        for _ in range(20):
            c.poll(500)
    e = rafka.Consumer(rafka_cluster, auto_offset_reset="earliest")
    e.assign([tp])
    e.seek(tp, 500)
    recs = []
    for _ in range(20):
        recs += e.poll(500).get(tp, [])
        if recs:
            break
    assert recs[0].offset == 0  # reset to the beginning


def test_poll_prefetches_while_the_app_works(rafka_cluster, new_topic):
    topic = new_topic(1, 1)
    tp = TopicPartition(topic, 0)
    with rafka.Producer(rafka_cluster, batch_size=65536) as p:
        for _i in range(30000):
            p.send(topic, b"v" * 50)
    c = rafka.Consumer(rafka_cluster, auto_offset_reset="earliest", max_partition_fetch_bytes=200_000)
    c.assign([tp])
    total = len(c.poll(5000)[tp])
    waits = []
    while total < 30000:
        if total < 29000:  # poll sent the next fetch before returning: it runs while the app works
            assert c._fetcher.states[tp].in_flight is not None or c._fetcher.states[tp].buffer
        time.sleep(0.1)  # the application's work: long enough for a fetch round trip on a busy machine
        t = time.monotonic()
        recs = c.poll(5000).get(tp, [])
        waits.append(time.monotonic() - t)
        total += len(recs)
    assert total == 30000
    waits.sort()
    assert waits[len(waits) // 2] < 0.05  # the median poll found its data already there (no round trip)


def test_plain_sends_take_the_lock_free_path_and_report_their_metadata(rafka_cluster, new_topic):
    """Plain records (bytes, no headers, callback or serializer) go through ``Producer.send``'s fast path: only the
    first record of each batch takes the locked ``RecordAccumulator.append``; the futures still report each
    record's own timestamp and sizes, read back from the batch bytes, and the sticky partitioner still moves
    on as batches fill (KIP-480)."""
    topic = new_topic(3, 1)
    with rafka.Producer(rafka_cluster, linger_ms=50, batch_size=2048) as p:
        p.send(topic, b"warm").get(30)  # metadata and producer id
        locked = []
        real = p.accumulator.append
        p.accumulator.append = lambda *a, **k: locked.append(a[0]) or real(*a, **k)
        t0 = int(time.time() * 1000)
        futs = [p.send(topic, b"v%04d" % i, key=None if i % 2 else b"k%d" % (i % 7)) for i in range(600)]
        t1 = int(time.time() * 1000)
        mds = [f.get(30) for f in futs]
    assert 0 < len(locked) < 60  # one per new batch, not one per record
    assert all(t0 <= md.timestamp <= t1 for md in mds)
    assert [md.serialized_value_size for md in mds] == [5] * 600
    assert [md.serialized_key_size for md in mds] == [-1 if i % 2 else 2 for i in range(600)]
    assert len({md.partition for i, md in enumerate(mds) if i % 2}) > 1  # keyless records moved on
    got = consume_all(rafka_cluster, topic, 3, 601)
    values = sorted(r.value for recs in got.values() for r in recs)
    assert values == sorted([b"warm"] + [b"v%04d" % i for i in range(600)])
