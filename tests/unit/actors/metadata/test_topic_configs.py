"""Topic config validation (actors/metadata/topic_configs.py): every Kafka 4 topic config name is accepted, each
value is checked with Kafka's type, range or valid list (INVALID_CONFIG with Kafka's ConfigException message), the
stored-only names never reach the replicas' LogConfig, and the controller stores and describes them."""

from __future__ import annotations

import random

import pytest

from actors.metadata import controller_requests as cr
from actors.metadata import topic_configs as tc
from actors.metadata.config_sources import LIST_CONFIGS, config_type, topic_entries
from actors.metadata.controller_config import ControllerConfig
from actors.metadata.controller_logic import ControllerLogic
from actors.metadata.image import MetadataImage
from protocol.errors import InvalidConfigError

# Kafka 4's TopicConfig names (org.apache.kafka.common.config.TopicConfig) with a valid non-default value each
KAFKA4_VALID = {
    "segment.bytes": "1048576",
    "segment.ms": "3600000",
    "segment.jitter.ms": "10",
    "segment.index.bytes": "4096",
    "flush.messages": "100",
    "flush.ms": "1000",
    "retention.bytes": "-1",
    "retention.ms": "-1",
    "max.message.bytes": "65536",
    "index.interval.bytes": "1024",
    "delete.retention.ms": "1000",
    "min.compaction.lag.ms": "5",
    "max.compaction.lag.ms": "600000",
    "file.delete.delay.ms": "1000",
    "min.cleanable.dirty.ratio": "0.25",
    "cleanup.policy": "compact,delete",
    "unclean.leader.election.enable": "true",
    "min.insync.replicas": "2",
    "compression.type": "zstd",
    "compression.gzip.level": "9",
    "compression.lz4.level": "17",
    "compression.zstd.level": "-131072",
    "preallocate": "TRUE",
    "message.timestamp.type": "LogAppendTime",
    "message.timestamp.before.max.ms": "1000",
    "message.timestamp.after.max.ms": "0",
    "leader.replication.throttled.replicas": "0:1,1:2",
    "follower.replication.throttled.replicas": "*",
    "message.downconversion.enable": "false",
    "remote.storage.enable": "false",
    "local.retention.ms": "-2",
    "local.retention.bytes": "1000",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
}


def logic() -> ControllerLogic:
    lg = ControllerLogic(MetadataImage(), ControllerConfig(), random.Random(1))
    for b in range(3):
        for r in lg.register_broker(b, {"log_dir": f"/d/{b}"})[0]:
            lg.image.replay(r)
    return lg


def apply(lg: ControllerLogic, out):
    records, res = out
    for r in records:
        lg.image.replay(r)
    return res


def test_every_kafka4_topic_config_name_is_accepted_in_one_topic():
    assert set(KAFKA4_VALID) == set(tc.KAFKA_TOPIC_CONFIGS) <= tc.topic_config_keys()
    assert tc.validate_topic_configs(KAFKA4_VALID) == KAFKA4_VALID
    lg = logic()
    (res,) = apply(
        lg, lg.create_topics([{"name": "all", "num_partitions": 1, "replication_factor": 1, "configs": KAFKA4_VALID}])
    )
    assert res["error_code"] == 0, res
    assert lg.image.topics["all"].configs == KAFKA4_VALID


@pytest.mark.parametrize(
    "name,value,message",
    [
        (
            "compression.type",
            "brotli",
            "Invalid value brotli for configuration compression.type: String must be one of: "
            "uncompressed, zstd, lz4, snappy, gzip, producer",
        ),
        (
            "file.delete.delay.ms",
            "-1",
            "Invalid value -1 for configuration file.delete.delay.ms: Value must be at least 0",
        ),
        (
            "file.delete.delay.ms",
            "1.5",
            "Invalid value 1.5 for configuration file.delete.delay.ms: Not a number of type LONG",
        ),
        ("retention.ms", "soon", "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
        (
            "segment.bytes",
            "3000000000",
            "Invalid value 3000000000 for configuration segment.bytes: Not a number of type INT",
        ),
        (  # KIP-1030: Kafka 4.1's LogConfig defines segment.bytes with atLeast(1024 * 1024)
            "segment.bytes",
            "1048575",
            "Invalid value 1048575 for configuration segment.bytes: Value must be at least 1048576",
        ),
        ("segment.bytes", "200", "Invalid value 200 for configuration segment.bytes: Value must be at least 1048576"),
        (
            "internal.segment.bytes",
            "13",
            "Invalid value 13 for configuration internal.segment.bytes: Value must be at least 14",
        ),
        (
            "preallocate",
            "yes",
            "Invalid value yes for configuration preallocate: Expected value to be either true or false",
        ),
        (
            "compression.gzip.level",
            "0",
            "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1",
        ),
        (
            "compression.lz4.level",
            "18",
            "Invalid value 18 for configuration compression.lz4.level: Value must be no more than 17",
        ),
        (
            "compression.zstd.level",
            "23",
            "Invalid value 23 for configuration compression.zstd.level: Value must be no more than 22",
        ),
        (
            "local.retention.ms",
            "-3",
            "Invalid value -3 for configuration local.retention.ms: Value must be at least -2",
        ),
        (
            "min.cleanable.dirty.ratio",
            "1.5",
            "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1",
        ),
        (
            "cleanup.policy",
            "delete,compacted",
            "Invalid value compacted for configuration cleanup.policy: String must be one of: compact, delete",
        ),
        ("message.timestamp.type", "NoTime", "String must be one of: CreateTime, LogAppendTime"),
        ("leader.replication.throttled.replicas", "0:1,x", "must be the literal '*' or a list of replicas"),
        ("remote.storage.enable", "true", "Tiered Storage functionality is disabled in the broker."),
        ("message.format.version", "3.0", "Unknown topic config name: message.format.version"),  # gone in Kafka 4
        ("no.such.config", "1", "Unknown topic config name: no.such.config"),
    ],
)
def test_bad_values_get_invalid_config_with_kafkas_message(name, value, message):
    with pytest.raises(InvalidConfigError) as ei:
        tc.validate_topic_configs({name: value})
    assert ei.value.code == 40 and message in str(ei.value)
    lg = logic()
    (res,) = lg.create_topics([{"name": "t", "num_partitions": 1, "replication_factor": 1, "configs": {name: value}}])[
        1
    ]
    assert res["error_code"] == 40 and message in res["error_message"]


def test_cross_config_rules_and_nulls():
    with pytest.raises(InvalidConfigError, match=r"conflict topic config setting min.compaction.lag.ms \(10\) > max"):
        tc.validate_topic_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    with pytest.raises(InvalidConfigError, match="Null value not supported for topic configs: preallocate"):
        tc.validate_topic_configs({"preallocate": None})


def test_stored_only_configs_are_described_and_never_sent_to_replicas():
    lg = logic()
    spec = {"name": "s", "num_partitions": 1, "replication_factor": 1}
    records, _ = lg.create_topics([{**spec, "configs": {"file.delete.delay.ms": "1000", "retention.ms": "5000"}}])
    prior = cr.prior_state(lg.image, records)
    for r in records:
        lg.image.replay(r)
    batch = cr.derive_requests(lg.image, records, prior, 1)
    sent = [ps.configs for req in batch.leader_and_isr.values() for ps in req.partition_states]
    assert sent and all(c == {"retention.ms": "5000"} for c in sent)  # the acted-on ones only
    records, _ = lg.alter_configs("s", {"preallocate": "true"}, [])
    prior = cr.prior_state(lg.image, records)
    for r in records:
        lg.image.replay(r)
    pushed = [c for per in cr.derive_requests(lg.image, records, prior, 1).topic_configs.values() for _, c in per]
    assert pushed and all(c == {"retention.ms": "5000"} for c in pushed)
    assert lg.image.topics["s"].configs["preallocate"] == "true"
    d = lg.describe_configs("s")
    assert d["overrides"] == {"file.delete.delay.ms": "1000", "retention.ms": "5000", "preallocate": "true"}
    assert d["configs"]["file.delete.delay.ms"] == "1000" and d["configs"]["segment.bytes"] == "1073741824"
    assert d["configs"]["compression.type"] == "producer" and d["configs"]["local.retention.ms"] == "-2"
    entries = {e["name"]: e for e in topic_entries(d["configs"], d["overrides"], {})}
    assert set(tc.KAFKA_TOPIC_CONFIGS) <= set(entries)
    assert (entries["file.delete.delay.ms"]["value"], entries["file.delete.delay.ms"]["source"]) == ("1000", 1)
    assert (entries["preallocate"]["value"], entries["preallocate"]["source"]) == ("true", 1)
    assert (entries["remote.storage.enable"]["value"], entries["remote.storage.enable"]["source"]) == ("false", 5)
    assert (config_type("preallocate"), config_type("compression.type"), config_type("file.delete.delay.ms")) == (
        1,
        2,
        5,
    )
    assert "follower.replication.throttled.replicas" in LIST_CONFIGS


def test_alter_configs_accepts_and_validates_the_same_names():
    lg = logic()
    apply(lg, lg.create_topics([{"name": "a", "num_partitions": 1, "replication_factor": 1}]))
    assert apply(lg, lg.alter_configs("a", {"compression.type": "lz4", "preallocate": "true"}, []))["error_code"] == 0
    assert lg.image.topics["a"].configs == {"compression.type": "lz4", "preallocate": "true"}
    res = apply(lg, lg.alter_configs("a", {"compression.type": "lzma"}, []))
    assert res["error_code"] == 40 and "String must be one of" in res["error_message"]
    assert apply(lg, lg.alter_configs("a", {}, ["preallocate"]))["error_code"] == 0
    assert lg.image.topics["a"].configs == {"compression.type": "lz4"}


def test_internal_segment_bytes_reaches_the_replicas_and_is_described_only_when_set():
    # Kafka's LogConfig.INTERNAL_SEGMENT_BYTES_CONFIG: accepted by name, wins over segment.bytes in the log
    # (segmentSize()), listed by DescribeConfigs only from the topic's own overrides (ConfigHelperUtils)
    lg = logic()
    spec = {"name": "tiny", "num_partitions": 1, "replication_factor": 1}
    records, (res,) = lg.create_topics([{**spec, "configs": {"internal.segment.bytes": "300"}}])
    assert res["error_code"] == 0, res
    prior = cr.prior_state(lg.image, records)
    for r in records:
        lg.image.replay(r)
    sent = [
        ps.configs
        for req in cr.derive_requests(lg.image, records, prior, 1).leader_and_isr.values()
        for ps in req.partition_states
    ]
    assert sent and all(c == {"internal.segment.bytes": "300"} for c in sent)
    d = lg.describe_configs("tiny")
    assert d["configs"]["internal.segment.bytes"] == "300" and d["configs"]["segment.bytes"] == "1073741824"
    assert (config_type("internal.segment.bytes"), config_type("segment.bytes")) == (3, 3)  # INT
    apply(lg, lg.create_topics([{"name": "plain", "num_partitions": 1, "replication_factor": 1}]))
    assert "internal.segment.bytes" not in lg.describe_configs("plain")["configs"]
    res = apply(lg, lg.alter_configs("plain", {"segment.bytes": "4096"}, []))
    assert res["error_code"] == 40 and "Value must be at least 1048576" in res["error_message"]
