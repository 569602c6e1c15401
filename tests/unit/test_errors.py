"""Kafka error codes: numbers, names, retriability, pickling (they cross Ray calls)."""
import pickle

import pytest

from storage import errors


@pytest.mark.parametrize("code,name,retriable", [
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
])
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
