"""The consumer's decoding of fetched bytes (no Ray): positions, control batches, LogAppendTime, metadata."""

import pytest

from rafka.cli.data import format_record
from rafka.cli.support import UsageError, kv_pairs
from rafka.consumer.fetcher import CompletedFetch
from rafka.consumer.subscription import TopicPartitionState
from rafka.metadata import TopicMetadata
from rafka.structs import ConsumerRecord, TopicPartition
from storage.control import build_control_batch
from storage.records import CONTROL_COMMIT, RecordBatchBuilder, set_log_append_time

TP = TopicPartition("t", 3)


def batch(base_offset, values, ts=1000, epoch=5):
    b = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
    for i, v in enumerate(values):
        b.append(ts + i, b"k", v, (("h", b"x"),) if i == 0 else ())
    return b.build()


def state(position):
    st = TopicPartitionState(TP)
    st.position = st.fetch_position = position
    return st


def test_records_below_the_position_are_dropped():
    raw = batch(10, [b"a", b"b", b"c"]) + batch(13, [b"d", b"e"])
    recs = CompletedFetch(raw, 15).decode(state(11), True)
    assert [(r.offset, r.value) for r in recs] == [(11, b"b"), (12, b"c"), (13, b"d"), (14, b"e")]
    r = recs[0]
    assert isinstance(r, ConsumerRecord) and (r.topic, r.partition, r.timestamp, r.timestamp_type) == ("t", 3, 1001, 0)
    assert r.leader_epoch == 5 and recs[2].headers == (("h", b"x"),)


def test_control_batches_are_skipped_and_log_append_time_reported():
    marker = build_control_batch(CONTROL_COMMIT, 7, 0, 1, 2000, base_offset=2)
    lat = bytearray(batch(3, [b"x", b"y"]))
    set_log_append_time(lat, 0, 99999)
    raw = batch(0, [b"p", b"q"]) + marker + bytes(lat)
    recs = CompletedFetch(raw, 5).decode(state(0), True)
    assert [r.offset for r in recs] == [0, 1, 3, 4]
    assert [(r.timestamp_type, r.timestamp) for r in recs[2:]] == [(1, 99999), (1, 99999)]
    assert [r.timestamp_type for r in recs[:2]] == [0, 0]


def test_corrupt_bytes_raise_a_kafka_error():
    raw = bytearray(batch(0, [b"a"]))
    raw[-1] ^= 0xFF
    from protocol.errors import CorruptMessageError

    with pytest.raises(CorruptMessageError):
        CompletedFetch(bytes(raw), 1).decode(state(0), True)


def test_topic_metadata_parses_the_kv_shape():
    tm = TopicMetadata(
        {
            "name": "t",
            "topic_id": "id",
            "configs": {"retention.ms": "1"},
            "partitions": {
                "1": {"leader": -1, "replicas": [1, 2], "isr": [], "leader_epoch": 3},
                0: {"leader": 2, "replicas": [2, 1], "isr": [2, 1], "leader_epoch": 0},
            },
        }
    )
    assert tm.partition_ids == [0, 1] and tm.available == [0]
    assert tm.partitions[1].leader == -1 and tm.partitions[0].isr == (2, 1)
    assert tm.tps[1] == TopicPartition("t", 1)


def test_cli_helpers():
    assert kv_pairs(["a=1,b=2", "c = 3"], "-c") == {"a": "1", "b": "2", "c": "3"}
    with pytest.raises(UsageError, match="key=value"):
        kv_pairs(["oops"], "-c")
    r = ConsumerRecord("t", 1, 5, 77, 0, b"k", b"v\xff", ())
    assert format_record("%t/%p/%o %k=%v\\n", r) == "t/1/5 k=v\\xff\n"  # undecodable bytes escaped, not replaced
    assert '"offset": 5' in format_record("json", r)


def test_decoding_a_fetch_pauses_the_cyclic_collector_and_restores_it():
    """A fetch's records are decoded with Python's cyclic collector paused (rafka.producer.gc_pause): one
    ConsumerRecord per record, all kept, so its passes would free nothing (852 passes for 300,000 records:
    354-432k records/s; 603k-989k with the pause). It is on again after, and off if the caller had it off."""
    import gc

    raw = b"".join(batch(base, [b"v%d" % i for i in range(1000)]) for base in range(0, 30_000, 1000))
    passes: list[int] = []

    def seen(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        recs = CompletedFetch(raw, 30_000).decode(state(0), True)
    finally:
        gc.callbacks.remove(seen)
    assert gc.isenabled()
    # at most the one pass the allocations counted while it was off start once it is on again (85 without)
    assert len(passes) <= 1, f"{len(passes)} collector passes while decoding: {passes[:10]}"
    assert len(recs) == 30_000 and recs[-1].offset == 29_999 and recs[-1].value == b"v999"
    gc.disable()
    try:
        CompletedFetch(batch(0, [b"x"]), 1).decode(state(0), True)
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()
