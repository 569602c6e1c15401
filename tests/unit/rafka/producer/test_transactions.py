"""The transactional producer's coordinator calls (rafka/producer/transactions.py) without Ray: the real
``Transactions`` and Sender over the fake transport, against the real transaction and group coordinator shards
(tests/unit/fake_transport.py's FakeTxnCoordinator and FakeGroupCoordinator)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fake_transport import FakeCluster, FakeMetadata, FakeTransport

from protocol.group_messages import OffsetFetchRequest
from protocol.txn_messages import AddOffsetsToTxnRequest, TxnOffsetCommitRequest
from rafka.config import ProducerConfig
from rafka.producer.accumulator import RecordAccumulator
from rafka.producer.sender import Sender
from rafka.producer.transactions import Transactions
from rafka.structs import OffsetAndMetadata, TopicPartition

S0, S1 = TopicPartition("src", 0), TopicPartition("src", 1)


@pytest.fixture
def cluster(tmp_path):
    c = FakeCluster(tmp_path)
    c.create_topic("src", partitions=2)
    c.add_coordinator()
    c.add_txn_coordinator()
    yield c
    c.close()


def transactional(cluster: FakeCluster, tid: str) -> Transactions:
    """``Transactions`` on what Producer wires it to (config, metadata, accumulator, Sender: the Sender thread is
    not started, no record is sent), over the fake transport."""
    cfg = ProducerConfig(transactional_id=tid, max_block_ms=5000)
    acc = RecordAccumulator(
        cfg.batch_size,
        cfg.buffer_memory,
        cfg.linger_ms,
        cfg.compression_id,
        cfg.retry_backoff_ms,
        cfg.retry_backoff_max_ms,
        cfg.delivery_timeout_ms,
    )
    transport = FakeTransport(cluster)
    metadata = FakeMetadata(cluster, transport=transport)
    sender = Sender(cluster.name, cfg, acc, metadata, "test", transport=transport)
    producer = SimpleNamespace(
        config=cfg, cluster_name=cluster.name, metadata=metadata, accumulator=acc, sender=sender, flush=lambda t: None
    )
    return Transactions(producer)


def test_send_offsets_to_transaction_sends_the_producer_id_and_epoch(cluster):
    """TxnOffsetCommit carries the producer id and epoch InitProducerId gave (epoch 2: the id was initialised
    twice before), and each offset's own leader epoch beside its offset (7, or -1 when none is given). A
    regression once sent the last offset's leader epoch (-1) as the producer epoch (a loop variable shadowed it):
    the verification of the group's offsets partition answered PRODUCER_FENCED. The offsets then commit with the
    transaction, leader epochs and metadata included."""
    for _ in range(2):  # two earlier instances of the id: the live one is at epoch 2
        transactional(cluster, "tx-offsets").init_transactions()
    txn = transactional(cluster, "tx-offsets")
    txn.init_transactions()
    pid, epoch = txn.producer.sender.producer_id, txn.producer.sender.producer_epoch
    assert pid >= 0 and epoch == 2

    txn.begin_transaction()
    txn.send_offsets_to_transaction({S1: 3, S0: OffsetAndMetadata(5, "m", 7)}, "g")

    (add,) = [r for r in cluster.txn_coordinator.requests if isinstance(r, AddOffsetsToTxnRequest)]
    assert (add.transactional_id, add.producer_id, add.producer_epoch, add.group_id) == ("tx-offsets", pid, epoch, "g")
    (req,) = cluster.coordinator.requests
    assert isinstance(req, TxnOffsetCommitRequest)
    assert (req.transactional_id, req.group_id, req.producer_id, req.producer_epoch) == ("tx-offsets", "g", pid, epoch)
    assert req.offsets == (("src", 0, 5, "m", 7), ("src", 1, 3, "", -1))
    assert (req.generation_id, req.member_id, req.group_instance_id) == (-1, "", None)

    fetch = OffsetFetchRequest("g", None)
    assert cluster.coordinator.offset_fetch(fetch)["topics"] == []  # pending until the transaction commits
    txn.commit_transaction()
    (topic,) = cluster.coordinator.offset_fetch(fetch)["topics"]
    got = {
        (p["partition_index"], p["committed_offset"], p["committed_leader_epoch"], p["metadata"])
        for p in topic["partitions"]
    }
    assert topic["name"] == "src" and got == {(0, 5, 7, "m"), (1, 3, -1, "")}, topic


def test_send_offsets_of_a_fenced_instance_is_refused(cluster):
    """The first instance, fenced by a second InitProducerId of its id, sends offsets: AddOffsetsToTxn answers
    PRODUCER_FENCED at the old epoch and nothing reaches the group coordinator."""
    from protocol.errors import ProducerFencedError

    first = transactional(cluster, "tx-fenced")
    first.init_transactions()
    first.begin_transaction()
    transactional(cluster, "tx-fenced").init_transactions()
    with pytest.raises(ProducerFencedError):
        first.send_offsets_to_transaction({S0: 1}, "g")
    assert cluster.coordinator.requests == []
