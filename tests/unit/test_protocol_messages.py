"""protocol.messages: typed fetch messages, frozen and slotted, that travel as the dicts they replace."""

import dataclasses

import pytest

from protocol.messages import FetchRequest, FetchResponse


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
