"""DescribeLogDirs (api key 35, v1-4): this broker's log dirs (``log.dirs``), each with its error (KAFKA_STORAGE_ERROR
for an offline one, which lists no partitions), the bytes of each hosted partition's segments, the offset lag
(Kafka's: the high watermark minus the log end offset, at least 0, for a current log; rafka has no future logs)
and, from v4, the volume's total and usable bytes. ``topics`` null asks for every partition, an empty list for
none. AlterReplicaLogDirs (api key 34, v1-2): move this broker's replicas to other dirs of its ``log.dirs``
(LOG_DIR_NOT_FOUND for another path, KAFKA_STORAGE_ERROR for an offline dir); one answer per named partition.
The broker answers both (backend ``describe_log_dirs`` / ``alter_replica_log_dirs``); a client sends them to
each broker concerned.
"""

from __future__ import annotations

from protocol.errors import KafkaError, error_response
from serve.kafka_wire import responses

ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 34, 35


def wanted_partitions(request) -> list[tuple[str, int]] | None:
    """The ``(topic, partition)`` pairs a request names, or None for all."""
    topics = getattr(request, "topics", None)
    if topics is None:
        return None
    return [(str(t.topic), int(p)) for t in topics for p in t.partitions]


async def describe_log_dirs(backend, request, version: int):
    mod = responses.response_module(DESCRIBE_LOG_DIRS, version)
    try:
        dirs = await backend.describe_log_dirs(wanted_partitions(request))
        top = 0
    except KafkaError as e:  # the broker could not list its dirs: the top-level error (v3+), no results
        dirs, top = [], error_response(e)[0]
    results = []
    for d in dirs:
        by_topic = responses.by_topic(
            (
                p["topic"],
                responses.make(
                    mod,
                    "DescribeLogDirsPartition",
                    partition_index=p["partition"],
                    partition_size=max(int(p["size"]), 0),
                    offset_lag=max(int(p["offset_lag"]), 0),
                    is_future_key=bool(p.get("is_future", False)),
                ),
            )
            for p in d["partitions"]
        )
        topics = tuple(
            responses.make(mod, "DescribeLogDirsTopic", name=name, partitions=parts) for name, parts in by_topic.items()
        )
        results.append(
            responses.make(
                mod,
                "DescribeLogDirsResult",
                error_code=responses.error_code(d["error_code"]),
                log_dir=d["log_dir"],
                topics=topics,
                total_bytes=int(d.get("total_bytes", -1)),
                usable_bytes=int(d.get("usable_bytes", -1)),
            )
        )
    return responses.make(
        mod,
        "DescribeLogDirsResponse",
        throttle_time=responses.ZERO,
        error_code=responses.error_code(top),
        results=tuple(results),
    )


async def alter_replica_log_dirs(backend, request, version: int):
    mod = responses.response_module(ALTER_REPLICA_LOG_DIRS, version)
    moves = [[d.path, t.name, int(p)] for d in request.dirs for t in d.topics for p in t.partitions]
    try:
        answers = await backend.alter_replica_log_dirs(moves)
    except KafkaError as e:  # the broker could not take the request: every partition gets its error
        code = error_response(e)[0]
        answers = [{"topic": t, "partition": p, "error_code": code} for _, t, p in moves]
    by_topic = responses.by_topic(
        (
            a["topic"],
            responses.make(
                mod,
                "AlterReplicaLogDirPartitionResult",
                partition_index=a["partition"],
                error_code=responses.error_code(a["error_code"]),
            ),
        )
        for a in answers
    )
    return responses.make(
        mod,
        "AlterReplicaLogDirsResponse",
        throttle_time=responses.ZERO,
        results=tuple(
            responses.make(mod, "AlterReplicaLogDirTopicResult", topic_name=name, partitions=parts)
            for name, parts in by_topic.items()
        ),
    )
