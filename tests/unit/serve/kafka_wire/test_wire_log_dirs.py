"""DescribeLogDirs (35) without Ray: KafkaApis in front of a backend whose ``describe_log_dirs`` is a real
BrokerLogDirs over two directories on disk (one failed), encoded as a client sends it and decoded from the bytes
the listener writes, at v1 (no volume bytes) and v4."""

from __future__ import annotations

import asyncio
import os

from kio.index import load_response_schema
from kio.schema.describe_log_dirs.v1 import request as dl1
from kio.schema.describe_log_dirs.v4 import request as dl4

from actors.server.log_dirs import BrokerLogDirs
from protocol.errors import KafkaStorageError
from serve.kafka_wire import codec, versions
from serve.kafka_wire.apis import KafkaApis


class LogDirsBackend:
    broker_id, cluster_id = 0, "unit"

    def __init__(self, dirs: BrokerLogDirs, figures: dict):
        self.dirs, self.figures = dirs, figures
        self.asked: list = []

    async def describe_log_dirs(self, partitions):
        self.asked.append(partitions)
        return self.dirs.describe(self.figures, partitions)


def call(backend, request):
    frame = codec.encode_request(5, request)
    out = asyncio.run(KafkaApis(backend).handle(frame[4:]))
    assert out is not None
    cid, resp = codec.decode_response(out[4:], load_response_schema(request.__api_key__, request.__version__))
    assert cid == 5
    return resp


def backend(tmp_path):
    a, b = str(tmp_path / "d0"), str(tmp_path / "d1")
    ld = BrokerLogDirs({"log.dirs": f"{a},{b}"}, "/unused", 0)
    ld.acquire(1)
    for key in (("orders", 0), ("orders", 1), ("audit", 0)):
        os.makedirs(ld.partition_path(key))  # orders-0 -> d0, orders-1 -> d1, audit-0 -> d0
    ld.mark_offline(b, "ENOSPC: No space left on device")
    figures = {("orders", 0): {"size": 4096, "log_end_offset": 50, "high_watermark": 50}}
    return ld, LogDirsBackend(ld, figures)


def test_describe_log_dirs_v4_all_partitions_with_a_failed_dir(tmp_path):
    ld, be = backend(tmp_path)
    assert versions.SUPPORTED[versions.DESCRIBE_LOG_DIRS] == (1, 4)
    resp = call(be, dl4.DescribeLogDirsRequest(topics=None))
    assert be.asked == [None] and resp.error_code == 0
    by_dir = {r.log_dir: r for r in resp.results}
    ok, failed = by_dir[ld.dirs[0]], by_dir[ld.dirs[1]]
    assert ok.error_code == 0 and ok.total_bytes > 0 and 0 <= ok.usable_bytes <= ok.total_bytes
    got = {
        (t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
        for t in ok.topics
        for p in t.partitions
    }
    assert got == {("orders", 0): (4096, 0, False), ("audit", 0): (0, 0, False)}
    assert failed.error_code == KafkaStorageError.code and failed.topics == ()
    assert (failed.total_bytes, failed.usable_bytes) == (-1, -1)
    ld.release()


def test_describe_log_dirs_v1_named_partitions_and_none(tmp_path):
    ld, be = backend(tmp_path)
    named = dl1.DescribeLogDirsRequest(topics=(dl1.DescribableLogDirTopic(topic="audit", partitions=(0, 7)),))
    resp = call(be, named)
    assert be.asked == [[("audit", 0), ("audit", 7)]]
    ok = {r.log_dir: r for r in resp.results}[ld.dirs[0]]
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in ok.topics] == [("audit", [0])]
    empty = call(be, dl1.DescribeLogDirsRequest(topics=()))  # an empty list: the dirs, no partition
    assert [r.topics for r in empty.results] == [(), ()]
    ld.release()


class MovesBackend(LogDirsBackend):
    async def alter_replica_log_dirs(self, moves):
        self.asked.append(moves)
        return [
            {"topic": t, "partition": p, "error_code": 57 if d == "/nope" else 0, "error_message": None}
            for d, t, p in moves
        ]


def test_alter_replica_log_dirs_v2_one_answer_per_partition(tmp_path):
    from kio.schema.alter_replica_log_dirs.v2 import request as ar2

    ld, be = backend(tmp_path)
    be = MovesBackend(ld, {})
    req = ar2.AlterReplicaLogDirsRequest(
        dirs=(
            ar2.AlterReplicaLogDir(
                path=ld.dirs[1], topics=(ar2.AlterReplicaLogDirTopic(name="orders", partitions=(0, 1)),)
            ),
            ar2.AlterReplicaLogDir(path="/nope", topics=(ar2.AlterReplicaLogDirTopic(name="audit", partitions=(0,)),)),
        )
    )
    resp = call(be, req)
    assert be.asked == [[[ld.dirs[1], "orders", 0], [ld.dirs[1], "orders", 1], ["/nope", "audit", 0]]]
    got = {(t.topic_name, p.partition_index): p.error_code for t in resp.results for p in t.partitions}
    assert got == {("orders", 0): 0, ("orders", 1): 0, ("audit", 0): 57}
    assert versions.SUPPORTED[versions.ALTER_REPLICA_LOG_DIRS] == (1, 2)
    ld.release()


def test_kafka_python_decodes_the_answer(tmp_path):
    """kafka-python's own DescribeLogDirsResponse v4 parses what the listener writes (what its
    ``KafkaAdminClient.describe_log_dirs`` returns)."""
    from kafka.protocol.admin.cluster import DescribeLogDirsResponse

    ld, be = backend(tmp_path)
    frame = codec.encode_request(5, dl4.DescribeLogDirsRequest(topics=None))
    out = bytes(asyncio.run(KafkaApis(be).handle(frame[4:])))
    got = DescribeLogDirsResponse.decode(out[4:], version=4, header=True).to_dict()
    by_dir = {r["log_dir"]: r for r in got["results"]}
    assert by_dir[ld.dirs[1]]["error_code"] == KafkaStorageError.code and by_dir[ld.dirs[1]]["topics"] == []
    parts = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in by_dir[ld.dirs[0]]["topics"]
        for p in t["partitions"]
    }
    assert parts == {("orders", 0): 4096, ("audit", 0): 0}
    assert by_dir[ld.dirs[0]]["total_bytes"] > 0
    ld.release()
