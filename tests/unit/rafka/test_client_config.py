"""Client configs: Kafka's names and defaults, clear errors for unknown keys and bad values."""

import pytest

from rafka.config import AdminConfig, ConsumerConfig, ProducerConfig


def test_producer_defaults_are_kafkas():
    c = ProducerConfig()
    assert c.acks == -1 and c.enable_idempotence is True
    assert (c.batch_size, c.linger_ms, c.buffer_memory, c.max_block_ms) == (16384, 5, 33554432, 60000)
    assert (c.retries, c.retry_backoff_ms, c.delivery_timeout_ms, c.request_timeout_ms) == (
        2147483647,
        100,
        120000,
        30000,
    )
    assert c.max_in_flight_requests_per_connection == 5
    assert c.max_request_size == 1048576 and c.compression_type == "none" and c.compression_id == 0


def test_consumer_defaults_are_kafkas():
    c = ConsumerConfig()
    assert (c.fetch_min_bytes, c.fetch_max_wait_ms, c.max_partition_fetch_bytes) == (1, 500, 1048576)
    assert (c.auto_offset_reset, c.max_poll_records, c.isolation_level) == ("latest", 500, "read_uncommitted")
    assert c.group_id is None and c.enable_auto_commit is True


def test_unknown_key_names_the_key_and_suggests():
    with pytest.raises(ValueError, match="unknown producer config 'lingr_ms'.*linger_ms"):
        ProducerConfig(lingr_ms=5)
    with pytest.raises(ValueError, match="unknown consumer config 'acks'"):
        ConsumerConfig(acks=1)
    with pytest.raises(ValueError, match="unknown admin config 'zzz'"):
        AdminConfig(zzz=1)


def test_bad_values_name_the_key():
    with pytest.raises(ValueError, match="'batch_size'"):
        ProducerConfig(batch_size=-1)
    with pytest.raises(ValueError, match="'linger_ms'.*integer"):
        ProducerConfig(linger_ms="soon")
    with pytest.raises(ValueError, match="'acks'"):
        ProducerConfig(acks=2)
    with pytest.raises(ValueError, match="'compression_type'.*zstd"):
        ProducerConfig(compression_type="brotli")
    with pytest.raises(ValueError, match="'auto_offset_reset'"):
        ConsumerConfig(auto_offset_reset="smallest")
    with pytest.raises(ValueError, match="'value_serializer'"):
        ProducerConfig(value_serializer="json")
    with pytest.raises(ValueError, match="'enable_idempotence'"):
        ProducerConfig(enable_idempotence="yes")


def test_dotted_kafka_names_and_string_values_are_accepted():
    c = ProducerConfig(**{"linger.ms": "20", "acks": "1", "compression.type": "LZ4", "enable.idempotence": "false"})
    assert c.linger_ms == 20 and c.acks == 1 and c.compression_type == "lz4" and not c.enable_idempotence
    assert ProducerConfig(acks="all").acks == -1 and ProducerConfig(acks=0).acks == 0


def test_explicit_idempotence_requires_acks_all_and_at_most_5_in_flight():
    with pytest.raises(ValueError, match="enable_idempotence.*acks"):
        ProducerConfig(enable_idempotence=True, acks=1)
    with pytest.raises(ValueError, match="enable_idempotence.*max_in_flight"):
        ProducerConfig(enable_idempotence=True, max_in_flight_requests_per_connection=6)
    with pytest.raises(ValueError, match="enable_idempotence.*retries"):
        ProducerConfig(enable_idempotence=True, retries=0)


def test_default_idempotence_yields_to_conflicting_settings():
    assert ProducerConfig(acks=1).enable_idempotence is False
    assert ProducerConfig(max_in_flight_requests_per_connection=10).enable_idempotence is False
    assert ProducerConfig(acks="all").enable_idempotence is True


def test_delivery_timeout_floor():
    c = ProducerConfig(linger_ms=100, request_timeout_ms=200000)
    assert c.delivery_timeout_ms == 200100
    with pytest.raises(ValueError, match="'delivery_timeout_ms'.*>= linger_ms \\+ request_timeout_ms"):
        ProducerConfig(delivery_timeout_ms=1000, request_timeout_ms=30000)


def test_consumer_cross_checks():
    with pytest.raises(ValueError, match="heartbeat_interval_ms"):
        ConsumerConfig(heartbeat_interval_ms=50000)
    with pytest.raises(ValueError, match="group_id"):
        ConsumerConfig(group_id="")
    assert ConsumerConfig(isolation_level="read_committed").isolation_id == 1
