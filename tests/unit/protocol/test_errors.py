"""Kafka error codes: numbers, names, retriability, pickling (they cross Ray calls)."""

import pickle

import pytest

from protocol import errors


@pytest.mark.parametrize(
    "code,name,retriable",
    [
        (1, "OFFSET_OUT_OF_RANGE", False),
        (2, "CORRUPT_MESSAGE", True),
        (3, "UNKNOWN_TOPIC_OR_PARTITION", True),
        (6, "NOT_LEADER_OR_FOLLOWER", True),
        (10, "MESSAGE_TOO_LARGE", False),
        (19, "NOT_ENOUGH_REPLICAS", True),
        (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True),
        (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False),
        (47, "INVALID_PRODUCER_EPOCH", False),
        (74, "FENCED_LEADER_EPOCH", True),
        (87, "INVALID_RECORD", False),
    ],
)
def test_codes_match_kafka(code, name, retriable):
    cls = errors.for_code(code)
    assert cls.code == code and cls.name == name and cls.retriable is retriable
    assert errors.for_name(name) is cls


def test_class_names_follow_kafka_names():
    assert errors.NotLeaderOrFollowerError.code == 6
    assert errors.CorruptMessageError.code == 2
    assert errors.InvalidTopicError.code == 17
    assert errors.UnknownServerError.code == -1


def test_unknown_code_maps_to_unknown_server_error():
    assert errors.for_code(12345) is errors.UnknownServerError


def test_pickle_round_trip_keeps_class_and_message():
    e = errors.FencedLeaderEpochError("epoch 3 < 5")
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is errors.FencedLeaderEpochError and e2.message == "epoch 3 < 5"
    assert "FENCED_LEADER_EPOCH" in str(e2)


def test_error_response_and_raise_for_code():
    assert errors.error_response(errors.MessageTooLargeError("big")) == (10, "big")
    code, msg = errors.error_response(ValueError("x"))
    assert code == -1 and "ValueError" in msg
    errors.raise_for_code(0)
    with pytest.raises(errors.NotEnoughReplicasError, match="isr"):
        errors.raise_for_code(19, "isr too small")


def test_default_message_is_kafkas():
    assert "CRC" in errors.CorruptMessageError().message


# Kafka's org.apache.kafka.common.protocol.Errors: (code, NAME, retriable) of every error rafka declares.
KAFKA_ERRORS = [
    (-1, "UNKNOWN_SERVER_ERROR", False),
    (0, "NONE", False),
    (1, "OFFSET_OUT_OF_RANGE", False),
    (2, "CORRUPT_MESSAGE", True),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True),
    (4, "INVALID_FETCH_SIZE", False),
    (5, "LEADER_NOT_AVAILABLE", True),
    (6, "NOT_LEADER_OR_FOLLOWER", True),
    (7, "REQUEST_TIMED_OUT", True),
    (8, "BROKER_NOT_AVAILABLE", False),
    (9, "REPLICA_NOT_AVAILABLE", True),
    (10, "MESSAGE_TOO_LARGE", False),
    (11, "STALE_CONTROLLER_EPOCH", False),
    (12, "OFFSET_METADATA_TOO_LARGE", False),
    (13, "NETWORK_EXCEPTION", True),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", True),
    (15, "COORDINATOR_NOT_AVAILABLE", True),
    (16, "NOT_COORDINATOR", True),
    (17, "INVALID_TOPIC_EXCEPTION", False),
    (18, "RECORD_LIST_TOO_LARGE", False),
    (19, "NOT_ENOUGH_REPLICAS", True),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True),
    (21, "INVALID_REQUIRED_ACKS", False),
    (22, "ILLEGAL_GENERATION", False),
    (23, "INCONSISTENT_GROUP_PROTOCOL", False),
    (24, "INVALID_GROUP_ID", False),
    (25, "UNKNOWN_MEMBER_ID", False),
    (26, "INVALID_SESSION_TIMEOUT", False),
    (27, "REBALANCE_IN_PROGRESS", False),
    (28, "INVALID_COMMIT_OFFSET_SIZE", False),
    (29, "TOPIC_AUTHORIZATION_FAILED", False),
    (30, "GROUP_AUTHORIZATION_FAILED", False),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False),
    (32, "INVALID_TIMESTAMP", False),
    (33, "UNSUPPORTED_SASL_MECHANISM", False),
    (34, "ILLEGAL_SASL_STATE", False),
    (35, "UNSUPPORTED_VERSION", False),
    (36, "TOPIC_ALREADY_EXISTS", False),
    (37, "INVALID_PARTITIONS", False),
    (38, "INVALID_REPLICATION_FACTOR", False),
    (39, "INVALID_REPLICA_ASSIGNMENT", False),
    (40, "INVALID_CONFIG", False),
    (41, "NOT_CONTROLLER", True),
    (42, "INVALID_REQUEST", False),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False),
    (44, "POLICY_VIOLATION", False),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False),
    (47, "INVALID_PRODUCER_EPOCH", False),
    (48, "INVALID_TXN_STATE", False),
    (49, "INVALID_PRODUCER_ID_MAPPING", False),
    (50, "INVALID_TRANSACTION_TIMEOUT", False),
    (51, "CONCURRENT_TRANSACTIONS", True),
    (52, "TRANSACTION_COORDINATOR_FENCED", False),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False),
    (54, "SECURITY_DISABLED", False),
    (55, "OPERATION_NOT_ATTEMPTED", False),
    (56, "KAFKA_STORAGE_ERROR", True),
    (57, "LOG_DIR_NOT_FOUND", False),
    (58, "SASL_AUTHENTICATION_FAILED", False),
    (59, "UNKNOWN_PRODUCER_ID", False),
    (60, "REASSIGNMENT_IN_PROGRESS", False),
    (67, "INVALID_PRINCIPAL_TYPE", False),
    (68, "NON_EMPTY_GROUP", False),
    (69, "GROUP_ID_NOT_FOUND", False),
    (70, "FETCH_SESSION_ID_NOT_FOUND", True),
    (71, "INVALID_FETCH_SESSION_EPOCH", True),
    (72, "LISTENER_NOT_FOUND", True),
    (73, "TOPIC_DELETION_DISABLED", False),
    (74, "FENCED_LEADER_EPOCH", True),
    (75, "UNKNOWN_LEADER_EPOCH", True),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", False),
    (77, "STALE_BROKER_EPOCH", False),
    (78, "OFFSET_NOT_AVAILABLE", True),
    (79, "MEMBER_ID_REQUIRED", False),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", True),
    (81, "GROUP_MAX_SIZE_REACHED", False),
    (82, "FENCED_INSTANCE_ID", False),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True),
    (84, "ELECTION_NOT_NEEDED", True),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", False),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", False),
    (87, "INVALID_RECORD", False),
    (88, "UNSTABLE_OFFSET_COMMIT", True),
    (89, "THROTTLING_QUOTA_EXCEEDED", True),
    (90, "PRODUCER_FENCED", False),
    (91, "RESOURCE_NOT_FOUND", False),
    (92, "DUPLICATE_RESOURCE", False),
    (95, "INVALID_UPDATE_VERSION", False),
    (99, "POSITION_OUT_OF_RANGE", False),
    (100, "UNKNOWN_TOPIC_ID", True),
    (101, "DUPLICATE_BROKER_REGISTRATION", False),
    (102, "BROKER_ID_NOT_REGISTERED", False),
    (103, "INCONSISTENT_TOPIC_ID", True),
    (104, "INCONSISTENT_CLUSTER_ID", False),
    (105, "TRANSACTIONAL_ID_NOT_FOUND", False),
    (107, "INELIGIBLE_REPLICA", False),
    (108, "NEW_LEADER_ELECTED", False),
    (110, "FENCED_MEMBER_EPOCH", False),
    (111, "UNRELEASED_INSTANCE_ID", False),
    (112, "UNSUPPORTED_ASSIGNOR", False),
    (113, "STALE_MEMBER_EPOCH", False),
    (120, "TRANSACTION_ABORTABLE", False),
]
# Kafka's InvalidMetadataException subclasses (org.apache.kafka.common.errors): the client refreshes metadata.
INVALID_METADATA = {
    "UNKNOWN_TOPIC_OR_PARTITION",
    "LEADER_NOT_AVAILABLE",
    "NOT_LEADER_OR_FOLLOWER",
    "REPLICA_NOT_AVAILABLE",
    "NETWORK_EXCEPTION",
    "LISTENER_NOT_FOUND",
    "FENCED_LEADER_EPOCH",
    "UNKNOWN_TOPIC_ID",
    "INCONSISTENT_TOPIC_ID",
}


def test_static_table_matches_kafka():
    table = errors.all_errors()
    assert sorted(table) == [code for code, _, _ in KAFKA_ERRORS]
    for code, name, retriable in KAFKA_ERRORS:
        cls = table[code]
        assert (cls.code, cls.name, cls.retriable) == (code, name, retriable)
        assert cls.invalid_metadata is (name in INVALID_METADATA), name
        assert vars(errors)[cls.__name__] is cls  # declared as a module-level class
        assert "code" in vars(cls) or cls is errors.KafkaError  # written out on the class, not generated
    assert {c.name for c in errors.KAFKA_ERRORS if c.invalid_metadata} == INVALID_METADATA


def test_refresh_metadata_set():
    assert errors.REFRESH_METADATA_CODES == {3, 5, 6, 9, 13, 72, 74, 75, 100, 103}
    assert errors.refresh_metadata(errors.NotLeaderOrFollowerError.code)
    assert errors.refresh_metadata(errors.UnknownLeaderEpochError.code)  # rafka refreshes, Kafka only retries
    assert not errors.refresh_metadata(errors.RequestTimedOutError.code)
    assert not errors.refresh_metadata(0)
