"""Transactions over the wire without Ray (serve/kafka_wire/handlers/txn.py): each API's kio request, at a low
and a high version, becomes the typed message of protocol/txn_messages.py the Python producer sends; the
answers (per partition where the API has them) and Kafka's version-dependent error mapping
(PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH before KIP-588) go back over a real localhost socket."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.add_offsets_to_txn.v0 import request as ao0
from kio.schema.add_offsets_to_txn.v0 import response as ao0r
from kio.schema.add_offsets_to_txn.v4 import request as ao4
from kio.schema.add_offsets_to_txn.v4 import response as ao4r
from kio.schema.add_partitions_to_txn.v0 import request as ap0
from kio.schema.add_partitions_to_txn.v0 import response as ap0r
from kio.schema.add_partitions_to_txn.v3 import request as ap3
from kio.schema.add_partitions_to_txn.v3 import response as ap3r
from kio.schema.api_versions.v3 import ApiVersionsRequest, ApiVersionsResponse
from kio.schema.describe_transactions.v0 import request as dt0
from kio.schema.describe_transactions.v0 import response as dt0r
from kio.schema.end_txn.v1 import request as et1
from kio.schema.end_txn.v1 import response as et1r
from kio.schema.end_txn.v4 import request as et4
from kio.schema.end_txn.v4 import response as et4r
from kio.schema.init_producer_id.v0 import request as ip0
from kio.schema.init_producer_id.v0 import response as ip0r
from kio.schema.init_producer_id.v3 import request as ip3
from kio.schema.init_producer_id.v3 import response as ip3r
from kio.schema.init_producer_id.v5 import request as ip5
from kio.schema.init_producer_id.v5 import response as ip5r
from kio.schema.list_transactions.v0 import request as lt0
from kio.schema.list_transactions.v0 import response as lt0r
from kio.schema.produce.v9 import request as pr9
from kio.schema.produce.v9 import response as pr9r
from kio.schema.txn_offset_commit.v0 import request as tc0
from kio.schema.txn_offset_commit.v0 import response as tc0r
from kio.schema.txn_offset_commit.v3 import request as tc3
from kio.schema.txn_offset_commit.v3 import response as tc3r
from test_wire_listener import Client, FakeBackend, listening

from protocol import txn_messages as T
from serve.kafka_wire import codec, versions

NOT_COORDINATOR, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, PRODUCER_FENCED = 16, 47, 48, 90
UNKNOWN_TOPIC_OR_PARTITION, OPERATION_NOT_ATTEMPTED, COORDINATOR_LOAD_IN_PROGRESS = 3, 55, 14
SIXTY_S = datetime.timedelta(seconds=60)


class TxnBackend(FakeBackend):
    """FakeBackend plus the transactional calls: every typed request is recorded; ``answers`` holds the
    next answer per request class (else success)."""

    def __init__(self):
        super().__init__()
        self.calls: list = []
        self.answers: dict[type, dict] = {}

    async def produce(self, topic, partition, req):
        self.calls.append(req)
        if req.transactional_id == "not-added":
            return {"error_code": INVALID_TXN_STATE, "error_message": "partition not in the ongoing transaction"}
        return await super().produce(topic, partition, req)

    async def txn_call(self, transactional_id, req):
        self.calls.append((transactional_id, req))
        if type(req) in self.answers:
            return self.answers.pop(type(req))
        if isinstance(req, T.InitProducerIdRequest):
            return {"error_code": 0, "producer_id": 7000, "producer_epoch": 3}
        if isinstance(req, T.AddPartitionsToTxnRequest):
            return {
                "error_code": 0,
                "results": [{"topic": t, "partition": p, "error_code": 0} for t, p in req.partitions],
            }
        if isinstance(req, T.DescribeTransactionsRequest):
            state = {
                "error_code": 0,
                "transactional_id": transactional_id,
                "state": "Ongoing",
                "producer_id": 7000,
                "producer_epoch": 3,
                "transaction_timeout_ms": 60000,
                "transaction_start_time_ms": 1_700_000_000_123,
                "topics": [("t", 0), ("t", 1)],
            }
            return {"error_code": 0, "transaction_states": [state]}
        return {"error_code": 0, "error_message": None}

    async def txn_offset_commit(self, group_id, req):
        self.calls.append((group_id, req))
        if T.TxnOffsetCommitRequest in self.answers:
            return self.answers.pop(T.TxnOffsetCommitRequest)
        topics: dict = {}
        for t, p, _o, _m, _e in req.offsets:
            topics.setdefault(t, []).append({"partition_index": p, "error_code": 0})
        return {"error_code": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

    async def list_transactions(self, req):
        self.calls.append(req)
        rows = [
            {"transactional_id": "a", "producer_id": 1, "state": "Ongoing"},
            {"transactional_id": "b", "producer_id": 2, "state": "CompleteCommit"},
        ]
        want = set(req.state_filters)
        return {"error_code": 0, "transaction_states": [r for r in rows if not want or r["state"] in want]}


@pytest.fixture
def wire():
    """(client, backend): a listener over TxnBackend on its own event loop thread, and a connected client."""
    backend = TxnBackend()
    with listening(backend) as (port, _acc, _run, _loop):
        yield Client(port), backend


def ask(client, request, response_cls, cid=[0]):  # noqa: B006 - a running correlation id
    cid[0] += 1
    client.send(codec.encode_request(cid[0], request))
    got_cid, resp = client.recv(response_cls)
    assert got_cid == cid[0]
    return resp


def test_api_versions_advertises_the_transaction_apis():
    assert versions.SUPPORTED[22] == (0, 5)
    assert versions.SUPPORTED[24] == (0, 3)  # 4+ is broker-to-broker (KIP-890)
    assert versions.SUPPORTED[25] == (0, 4)
    assert versions.SUPPORTED[26] == (0, 4)  # 5 is transaction version 2
    assert versions.SUPPORTED[28] == (0, 4)  # 5 is transaction version 2
    assert versions.SUPPORTED[0][1] <= 11  # Produce 12 would signal transaction version 2
    assert versions.SUPPORTED[65] == (0, 0) and versions.SUPPORTED[66] == (0, 0)


def test_api_versions_response_lists_them(wire):
    c, _ = wire
    r = ask(c, ApiVersionsRequest(client_software_name="unit", client_software_version="1"), ApiVersionsResponse)
    got = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    for key in (22, 24, 25, 26, 28, 65, 66):
        assert got[key] == versions.SUPPORTED[key]


def test_init_producer_id_transactional_goes_to_the_coordinator(wire):
    c, b = wire
    r = ask(
        c, ip0.InitProducerIdRequest(transactional_id="tx-1", transaction_timeout=SIXTY_S), ip0r.InitProducerIdResponse
    )
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, 7000, 3)
    assert b.calls[-1] == ("tx-1", T.InitProducerIdRequest("tx-1", 60000, -1, -1))
    # KIP-360 (v3+): the producer's current id/epoch travel to the coordinator
    req = ip3.InitProducerIdRequest(
        transactional_id="tx-1", transaction_timeout=datetime.timedelta(seconds=5), producer_id=7000, producer_epoch=3
    )
    r = ask(c, req, ip3r.InitProducerIdResponse)
    assert r.error_code == 0
    assert b.calls[-1] == ("tx-1", T.InitProducerIdRequest("tx-1", 5000, 7000, 3))
    # idempotent producers (null id) still get an id from the broker's block, not the coordinator
    n = len(b.calls)
    r = ask(
        c, ip5.InitProducerIdRequest(transactional_id=None, transaction_timeout=SIXTY_S), ip5r.InitProducerIdResponse
    )
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, 42, 0)
    assert len(b.calls) == n


@pytest.mark.parametrize(
    ("version", "expected"),
    [(0, INVALID_PRODUCER_EPOCH), (3, INVALID_PRODUCER_EPOCH), (5, PRODUCER_FENCED)],
)
def test_init_producer_id_fenced_mapped_by_version(wire, version, expected):
    c, b = wire
    mods = {0: (ip0, ip0r), 3: (ip3, ip3r), 5: (ip5, ip5r)}[version]
    b.answers[T.InitProducerIdRequest] = {"error_code": PRODUCER_FENCED, "producer_id": -1, "producer_epoch": -1}
    r = ask(
        c,
        mods[0].InitProducerIdRequest(transactional_id="z", transaction_timeout=SIXTY_S),
        mods[1].InitProducerIdResponse,
    )
    assert (r.error_code, r.producer_id, r.producer_epoch) == (expected, -1, -1)


def test_init_producer_id_coordinator_errors_pass_through(wire):
    c, b = wire
    for code in (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS):
        b.answers[T.InitProducerIdRequest] = {"error_code": code}
        r = ask(
            c, ip5.InitProducerIdRequest(transactional_id="z", transaction_timeout=SIXTY_S), ip5r.InitProducerIdResponse
        )
        assert (r.error_code, r.producer_id) == (code, -1)


@pytest.mark.parametrize("version", [0, 3])
def test_add_partitions_to_txn(wire, version):
    c, b = wire
    req_mod, resp_mod = (ap0, ap0r) if version == 0 else (ap3, ap3r)
    req = req_mod.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="tx-1",
        v3_and_below_producer_id=7000,
        v3_and_below_producer_epoch=3,
        v3_and_below_topics=(req_mod.AddPartitionsToTxnTopic(name="t", partitions=(0, 1)),),
    )
    r = ask(c, req, resp_mod.AddPartitionsToTxnResponse)
    got = [
        (t.name, p.partition_index, p.partition_error_code)
        for t in r.results_by_topic_v3_and_below
        for p in t.results_by_partition
    ]
    assert got == [("t", 0, 0), ("t", 1, 0)]
    assert b.calls[-1] == ("tx-1", T.AddPartitionsToTxnRequest("tx-1", 7000, 3, (("t", 0), ("t", 1))))
    # a coordinator error without per-partition results reaches every partition; fenced is mapped below v2
    b.answers[T.AddPartitionsToTxnRequest] = {"error_code": PRODUCER_FENCED, "results": []}
    r = ask(c, req, resp_mod.AddPartitionsToTxnResponse)
    codes = {p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}
    assert codes == {INVALID_PRODUCER_EPOCH if version < 2 else PRODUCER_FENCED}


def test_add_partitions_to_txn_unknown_partition_adds_nothing(wire):
    c, b = wire
    req = ap3.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="tx-1",
        v3_and_below_producer_id=7000,
        v3_and_below_producer_epoch=3,
        v3_and_below_topics=(
            ap3.AddPartitionsToTxnTopic(name="t", partitions=(0, 9)),
            ap3.AddPartitionsToTxnTopic(name="nope", partitions=(0,)),
        ),
    )
    n = len(b.calls)
    r = ask(c, req, ap3r.AddPartitionsToTxnResponse)
    got = {
        (t.name, p.partition_index): p.partition_error_code
        for t in r.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }
    assert got == {
        ("t", 0): OPERATION_NOT_ATTEMPTED,
        ("t", 9): UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert len(b.calls) == n  # the coordinator was not asked


def test_add_offsets_to_txn_low_and_high_version(wire):
    c, b = wire
    r = ask(
        c,
        ao0.AddOffsetsToTxnRequest(transactional_id="tx-1", producer_id=7000, producer_epoch=3, group_id="g"),
        ao0r.AddOffsetsToTxnResponse,
    )
    assert r.error_code == 0
    assert b.calls[-1] == ("tx-1", T.AddOffsetsToTxnRequest("tx-1", 7000, 3, "g"))
    b.answers[T.AddOffsetsToTxnRequest] = {"error_code": PRODUCER_FENCED}
    r = ask(
        c,
        ao4.AddOffsetsToTxnRequest(transactional_id="tx-1", producer_id=7000, producer_epoch=2, group_id="g"),
        ao4r.AddOffsetsToTxnResponse,
    )
    assert r.error_code == PRODUCER_FENCED


def test_end_txn_commit_abort_and_fenced_mapping(wire):
    c, b = wire
    for committed in (True, False):
        r = ask(
            c,
            et4.EndTxnRequest(transactional_id="tx-1", producer_id=7000, producer_epoch=3, committed=committed),
            et4r.EndTxnResponse,
        )
        assert r.error_code == 0
        assert b.calls[-1] == ("tx-1", T.EndTxnRequest("tx-1", 7000, 3, committed))
    b.answers[T.EndTxnRequest] = {"error_code": PRODUCER_FENCED}
    r = ask(
        c,
        et1.EndTxnRequest(transactional_id="tx-1", producer_id=7000, producer_epoch=2, committed=True),
        et1r.EndTxnResponse,
    )
    assert r.error_code == INVALID_PRODUCER_EPOCH  # librdkafka sends EndTxn v1: no PRODUCER_FENCED there
    b.answers[T.EndTxnRequest] = {"error_code": INVALID_TXN_STATE}
    r = ask(
        c,
        et4.EndTxnRequest(transactional_id="tx-1", producer_id=7000, producer_epoch=3, committed=True),
        et4r.EndTxnResponse,
    )
    assert r.error_code == INVALID_TXN_STATE


def test_txn_offset_commit_v0_goes_to_the_group_coordinator(wire):
    c, b = wire
    req = tc0.TxnOffsetCommitRequest(
        transactional_id="tx-1",
        group_id="g",
        producer_id=7000,
        producer_epoch=3,
        topics=(
            tc0.TxnOffsetCommitRequestTopic(
                name="t",
                partitions=(
                    tc0.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5, committed_metadata="m"),
                    tc0.TxnOffsetCommitRequestPartition(partition_index=1, committed_offset=6, committed_metadata=None),
                ),
            ),
        ),
    )
    r = ask(c, req, tc0r.TxnOffsetCommitResponse)
    assert [(t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions] == [
        ("t", 0, 0),
        ("t", 1, 0),
    ]
    # v0 has no leader epoch: -1
    offsets = (("t", 0, 5, "m", -1), ("t", 1, 6, "", -1))
    assert b.calls[-1] == ("g", T.TxnOffsetCommitRequest("tx-1", "g", 7000, 3, offsets))
    # a top-level error (e.g. NOT_COORDINATOR) reaches every partition
    b.answers[T.TxnOffsetCommitRequest] = {"error_code": NOT_COORDINATOR, "error_message": "moved"}
    r = ask(c, req, tc0r.TxnOffsetCommitResponse)
    assert {p.error_code for t in r.topics for p in t.partitions} == {NOT_COORDINATOR}
    b.answers[T.TxnOffsetCommitRequest] = {"error_code": PRODUCER_FENCED}
    r = ask(c, req, tc0r.TxnOffsetCommitResponse)
    assert {p.error_code for t in r.topics for p in t.partitions} == {INVALID_PRODUCER_EPOCH}
    # KafkaApis answers v0-1 COORDINATOR_NOT_AVAILABLE for a loading coordinator (KAFKA-7296)
    b.answers[T.TxnOffsetCommitRequest] = {"error_code": COORDINATOR_LOAD_IN_PROGRESS}
    r = ask(c, req, tc0r.TxnOffsetCommitResponse)
    assert {p.error_code for t in r.topics for p in t.partitions} == {15}


def test_txn_offset_commit_v3_carries_the_member(wire):
    c, b = wire
    req = tc3.TxnOffsetCommitRequest(
        transactional_id="tx-1",
        group_id="g",
        producer_id=7000,
        producer_epoch=3,
        generation_id=4,
        member_id="m-1",
        group_instance_id="inst",
        topics=(
            tc3.TxnOffsetCommitRequestTopic(
                name="t",
                partitions=(
                    tc3.TxnOffsetCommitRequestPartition(
                        partition_index=1, committed_offset=9, committed_leader_epoch=2, committed_metadata=""
                    ),
                ),
            ),
        ),
    )
    b.answers[T.TxnOffsetCommitRequest] = {
        "error_code": 0,
        "topics": [{"name": "t", "partitions": [{"partition_index": 1, "error_code": 22}]}],  # ILLEGAL_GENERATION
    }
    r = ask(c, req, tc3r.TxnOffsetCommitResponse)
    assert [(t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions] == [("t", 1, 22)]
    # the committed leader epoch (v2+) goes with the offset
    assert b.calls[-1] == ("g", T.TxnOffsetCommitRequest("tx-1", "g", 7000, 3, (("t", 1, 9, "", 2),), 4, "m-1", "inst"))
    b.answers[T.TxnOffsetCommitRequest] = {"error_code": PRODUCER_FENCED}
    r = ask(c, req, tc3r.TxnOffsetCommitResponse)
    assert {p.error_code for t in r.topics for p in t.partitions} == {PRODUCER_FENCED}


def test_txn_offset_commit_to_an_unknown_topic_or_partition(wire):
    """KafkaApis.handleTxnOffsetCommitRequest: partitions not in the metadata answer UNKNOWN_TOPIC_OR_PARTITION
    and are not sent to the group coordinator; none left, no call at all."""
    c, b = wire

    def req(*parts):
        topics = {}
        for name, i in parts:
            topics.setdefault(name, []).append(
                tc3.TxnOffsetCommitRequestPartition(
                    partition_index=i, committed_offset=3, committed_leader_epoch=0, committed_metadata=""
                )
            )
        return tc3.TxnOffsetCommitRequest(
            transactional_id="tx-1",
            group_id="g",
            producer_id=7000,
            producer_epoch=3,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=tuple(tc3.TxnOffsetCommitRequestTopic(name=n, partitions=tuple(ps)) for n, ps in topics.items()),
        )

    r = ask(c, req(("t", 1), ("t", 2), ("gone", 0)), tc3r.TxnOffsetCommitResponse)
    assert [(t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions] == [
        ("t", 1, 0),
        ("t", 2, UNKNOWN_TOPIC_OR_PARTITION),
        ("gone", 0, UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert b.calls[-1] == ("g", T.TxnOffsetCommitRequest("tx-1", "g", 7000, 3, (("t", 1, 3, "", 0),)))
    calls = len(b.calls)
    r = ask(c, req(("gone", 0)), tc3r.TxnOffsetCommitResponse)
    assert [(t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions] == [
        ("gone", 0, UNKNOWN_TOPIC_OR_PARTITION)
    ]
    assert len(b.calls) == calls


def test_describe_transactions(wire):
    c, b = wire
    r = ask(c, dt0.DescribeTransactionsRequest(transactional_ids=("tx-1",)), dt0r.DescribeTransactionsResponse)
    (s,) = r.transaction_states
    assert (s.error_code, s.transactional_id, s.transaction_state, s.producer_id, s.producer_epoch) == (
        0,
        "tx-1",
        "Ongoing",
        7000,
        3,
    )
    assert s.transaction_timeout == SIXTY_S
    assert int(s.transaction_start_time.timestamp() * 1000) == 1_700_000_000_123
    assert [(t.topic, t.partitions) for t in s.topics] == [("t", (0, 1))]
    b.answers[T.DescribeTransactionsRequest] = {"error_code": NOT_COORDINATOR, "error_message": "elsewhere"}
    r = ask(c, dt0.DescribeTransactionsRequest(transactional_ids=("tx-2",)), dt0r.DescribeTransactionsResponse)
    (s,) = r.transaction_states
    assert (s.error_code, s.transactional_id, s.producer_id, s.topics) == (NOT_COORDINATOR, "tx-2", -1, ())


def test_list_transactions_filters_and_unknown_states(wire):
    c, b = wire
    r = ask(c, lt0.ListTransactionsRequest(state_filters=(), producer_id_filters=()), lt0r.ListTransactionsResponse)
    assert [(x.transactional_id, x.producer_id, x.transaction_state) for x in r.transaction_states] == [
        ("a", 1, "Ongoing"),
        ("b", 2, "CompleteCommit"),
    ]
    r = ask(
        c,
        lt0.ListTransactionsRequest(state_filters=("Ongoing", "Bogus"), producer_id_filters=()),
        lt0r.ListTransactionsResponse,
    )
    assert r.unknown_state_filters == ("Bogus",)
    assert [x.transactional_id for x in r.transaction_states] == ["a"]
    assert b.calls[-1] == T.ListTransactionsRequest(("Ongoing",), ())
    r = ask(
        c, lt0.ListTransactionsRequest(state_filters=("Bogus",), producer_id_filters=()), lt0r.ListTransactionsResponse
    )
    # only unknown states: no state filter applies (Kafka's TransactionStateManager.listTransactionStates)
    assert r.unknown_state_filters == ("Bogus",)
    assert [x.transactional_id for x in r.transaction_states] == ["a", "b"]


def test_transactional_produce_carries_the_transactional_id(wire):
    c, b = wire
    for tid, code in (("tx-1", 0), ("not-added", INVALID_TXN_STATE)):
        req = pr9.ProduceRequest(
            transactional_id=tid,
            acks=-1,
            timeout=datetime.timedelta(seconds=5),
            topic_data=(
                pr9.TopicProduceData(name="t", partition_data=(pr9.PartitionProduceData(index=0, records=b"x"),)),
            ),
        )
        r = ask(c, req, pr9r.ProduceResponse)
        (p,) = r.responses[0].partition_responses
        assert p.error_code == code
        assert b.calls[-1].transactional_id == tid
