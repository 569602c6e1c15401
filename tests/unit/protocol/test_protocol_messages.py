"""protocol.messages: typed data-path messages, frozen and slotted; requests travel as themselves,
responses as the dicts they replace; anything but the request asked for is INVALID_REQUEST."""

import dataclasses
import pickle

import pytest

from protocol.errors import InvalidRequestError, NotLeaderOrFollowerError, OffsetOutOfRangeError
from protocol.messages import (
    LATEST_TIMESTAMP,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
    check_request,
)


def test_fetch_request_defaults_and_frozen():
    r = FetchRequest(5)
    assert (r.max_bytes, r.max_wait_ms, r.min_bytes, r.replica_id, r.isolation_level) == (1048576, 0, 1, -1, 0)
    assert not r.is_follower and FetchRequest(5, replica_id=2).is_follower
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.fetch_offset = 6
    assert not hasattr(r, "__dict__")  # slotted


def test_fetch_response_dict_round_trip():
    consumer = FetchResponse(high_watermark=10, log_start_offset=0, last_stable_offset=10, records=b"x", next_offset=7)
    d = consumer.to_dict()
    assert "log_end_offset" not in d and "leader_epoch" not in d  # follower-only fields
    assert d["next_offset"] == 7 and d["error_code"] == 0 and d["records"] == b"x"
    assert FetchResponse.from_dict(d) == consumer
    follower = dataclasses.replace(consumer, log_end_offset=12, leader_epoch=3)
    assert FetchResponse.from_dict(follower.to_dict()) == follower


def test_requests_defaults_frozen_slotted():
    p = ProduceRequest(b"batches")
    assert (p.records, p.acks, p.timeout_ms, p.current_leader_epoch) == (b"batches", -1, 30000, -1)
    lo = ListOffsetsRequest(LATEST_TIMESTAMP)
    assert (lo.timestamp, lo.current_leader_epoch, lo.isolation_level) == (-1, -1, 0)
    e = OffsetForLeaderEpochRequest(3)
    assert (e.leader_epoch, e.current_leader_epoch) == (3, -1)
    for r in (p, lo, e):
        assert not hasattr(r, "__dict__")
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.current_leader_epoch = 9
        assert pickle.loads(pickle.dumps(r)) == r  # how Ray carries it


@pytest.mark.parametrize(
    "response, fields",
    [
        (ProduceResponse(base_offset=5, log_append_time=-1, log_start_offset=0), ("base_offset", "log_start_offset")),
        (ListOffsetsResponse(offset=7, timestamp=123, leader_epoch=2), ("offset", "timestamp", "leader_epoch")),
        (OffsetForLeaderEpochResponse(leader_epoch=2, end_offset=40), ("leader_epoch", "end_offset")),
    ],
)
def test_responses_dict_round_trip(response, fields):
    d = response.to_dict()
    assert d["error_code"] == 0 and d["error_message"] is None
    assert all(d[f] == getattr(response, f) for f in fields)
    assert type(response).from_dict(d) == response
    assert not hasattr(response, "__dict__")


def test_response_defaults_are_kafkas_unknowns():
    assert ProduceResponse().to_dict() == {
        "error_code": 0,
        "error_message": None,
        "base_offset": -1,
        "log_append_time": -1,
        "log_start_offset": -1,
    }
    assert ListOffsetsResponse().to_dict() == {
        "error_code": 0,
        "error_message": None,
        "offset": -1,
        "timestamp": -1,
        "leader_epoch": -1,
    }
    assert OffsetForLeaderEpochResponse().to_dict() == {
        "error_code": 0,
        "error_message": None,
        "leader_epoch": -1,
        "end_offset": -1,
    }


def test_produce_response_duplicate_only_when_true():
    assert "duplicate" not in ProduceResponse(base_offset=1).to_dict()
    d = ProduceResponse(base_offset=1, duplicate=True).to_dict()
    assert d["duplicate"] is True and ProduceResponse.from_dict(d).duplicate


def test_error_answers_carry_the_kafka_code_and_defaults():
    d = ProduceResponse.error(NotLeaderOrFollowerError("moved"))
    assert d == {**ProduceResponse().to_dict(), "error_code": 6, "error_message": "moved"}
    d = FetchResponse.error(OffsetOutOfRangeError("past the end"), log_start_offset=3, log_end_offset=9)
    assert (d["error_code"], d["records"], d["next_offset"]) == (1, b"", -1)
    assert (d["log_start_offset"], d["log_end_offset"]) == (3, 9) and "leader_epoch" not in d
    assert ListOffsetsResponse.error(ValueError("x"))["error_code"] == -1  # UNKNOWN_SERVER_ERROR


@pytest.mark.parametrize(
    "req, cls, says",
    [
        (5, FetchRequest, "fetch takes one FetchRequest (protocol.messages), got int 5"),
        ({"fetch_offset": 0}, FetchRequest, "got dict"),
        (FetchRequest(0), ProduceRequest, "got FetchRequest"),
        (b"raw batches", ProduceRequest, "got bytes"),
        (FetchRequest("0"), FetchRequest, "FetchRequest.fetch_offset must be an int, got str '0'"),
        (ProduceRequest(b"x", acks=1.0), ProduceRequest, "ProduceRequest.acks must be an int, got float"),
        (ListOffsetsRequest(-1, current_leader_epoch=None), ListOffsetsRequest, "current_leader_epoch"),
    ],
)
def test_check_request_refuses_anything_else_as_invalid_request(req, cls, says):
    with pytest.raises(InvalidRequestError) as info:
        check_request(req, cls, "fetch")
    assert info.value.code == 42 and says in str(info.value)


def test_check_request_passes_the_request_through():
    req = ProduceRequest(b"x", acks=1, timeout_ms=100, current_leader_epoch=4)
    assert check_request(req, ProduceRequest, "produce") is req
    long_payload = ProduceRequest(b"x" * 10_000)
    with pytest.raises(InvalidRequestError) as info:
        check_request(long_payload, FetchRequest, "fetch")
    assert len(str(info.value)) < 200  # the payload is not echoed back whole
