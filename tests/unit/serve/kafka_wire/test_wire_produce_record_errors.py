"""Produce's per-record errors (KIP-467, serve/kafka_wire/handlers/produce.py) without Ray: a leader's answer
naming the bad records of its batch reaches the wire as record_errors (batch_index, message) and
error_message in v8+, encoded and decoded again with kio; v7 has neither and still carries the error code."""

from __future__ import annotations

import asyncio
import datetime
import importlib

import pytest

from protocol import errors as E
from serve.kafka_wire import codec
from serve.kafka_wire.handlers import produce


class OneAnswer:
    def __init__(self, answer: dict):
        self.answer, self.seen = answer, []

    async def produce(self, topic, partition, req):
        self.seen.append((topic, partition, bytes(req.records)))
        return self.answer


def request(version: int):
    m = importlib.import_module(f"kio.schema.produce.v{version}.request")
    pdata = (m.PartitionProduceData(index=0, records=b"batch"),)
    return m.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(m.TopicProduceData(name="t", partition_data=pdata),),
    )


def leader_answer() -> dict:
    exc = E.InvalidRecordsError("batch 0 (at byte 0): 2 record errors", ((3, "no key"), (7, "no key either")))
    return {"error_code": exc.code, "error_message": exc.message, "record_errors": list(map(list, exc.record_errors))}


@pytest.mark.parametrize("version", [8, 9, 11])
def test_record_errors_reach_the_wire_from_v8(version):
    backend = OneAnswer(leader_answer())
    resp = asyncio.run(produce.handle(backend, request(version), version))
    rmod = importlib.import_module(f"kio.schema.produce.v{version}.response")
    _, back = codec.decode_response(codec.encode_response(9, resp)[4:], rmod.ProduceResponse)
    part = back.responses[0].partition_responses[0]
    assert int(part.error_code) == 87 and part.base_offset == -1
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
        (3, "no key"),
        (7, "no key either"),
    ]
    assert part.error_message == "batch 0 (at byte 0): 2 record errors"
    assert backend.seen == [("t", 0, b"batch")]


def test_v7_carries_the_error_code_alone():
    resp = asyncio.run(produce.handle(OneAnswer(leader_answer()), request(7), 7))
    rmod = importlib.import_module("kio.schema.produce.v7.response")
    _, back = codec.decode_response(codec.encode_response(9, resp)[4:], rmod.ProduceResponse)
    part = back.responses[0].partition_responses[0]
    assert int(part.error_code) == 87 and not hasattr(part, "record_errors")


def test_a_good_answer_has_no_record_errors():
    resp = asyncio.run(produce.handle(OneAnswer({"error_code": 0, "base_offset": 5}), request(9), 9))
    part = resp.responses[0].partition_responses[0]
    assert part.record_errors == () and part.error_message is None and part.base_offset == 5
