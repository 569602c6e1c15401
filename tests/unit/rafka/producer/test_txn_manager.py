"""The transactional producer's client-side state machine (rafka/producer/txn_manager.py)."""

from __future__ import annotations

import pytest

from protocol import errors as E
from protocol.errors import IllegalStateError
from rafka.producer.txn_manager import (
    ABORTABLE_ERROR,
    FATAL_ERROR,
    IN_TRANSACTION,
    READY,
    TransactionState,
)
from rafka.structs import TopicPartition

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)


def ready() -> TransactionState:
    t = TransactionState("tx")
    t.start_init()
    t.initialized(7, 0)
    return t


def test_happy_path_and_partition_bookkeeping():
    t = ready()
    with pytest.raises(IllegalStateError):
        t.check_can_send()  # not in a transaction
    t.begin()
    t.check_can_send()
    assert t.maybe_add(A0) is True  # newly queued: the Sender is woken
    assert t.maybe_add(A0) is False  # already queued
    assert t.needs_add(A0) and not t.has_partitions
    t.added([A0])
    assert not t.needs_add(A0) and t.has_partitions
    assert t.maybe_add(A0) is False
    assert not t.needs_add(A0)  # already in the transaction
    t.start_commit()
    t.completed()
    assert t.state == READY and not t.partitions and not t.pending


def test_invalid_moves_raise_illegal_state():
    t = TransactionState("tx")
    with pytest.raises(IllegalStateError):
        t.begin()  # before init_transactions
    t = ready()
    with pytest.raises(IllegalStateError):
        t.start_commit()
    t.begin()
    with pytest.raises(IllegalStateError):
        t.begin()
    with pytest.raises(ValueError):
        TransactionState("")


def test_abortable_error_blocks_commit_until_abort():
    t = ready()
    t.begin()
    err = E.NotEnoughReplicasError("boom")
    assert t.fail(err) is err and t.state == ABORTABLE_ERROR
    with pytest.raises(E.NotEnoughReplicasError):
        t.start_commit()
    with pytest.raises(E.NotEnoughReplicasError):
        t.check_can_send()
    t.start_abort()
    t.completed()
    assert t.state == READY and t.error is None
    t.begin()
    assert t.state == IN_TRANSACTION


def test_fencing_is_fatal_for_every_later_call():
    t = ready()
    t.begin()
    t.fail(E.ProducerFencedError("another instance"))
    assert t.state == FATAL_ERROR
    for call in (t.start_abort, t.start_commit, t.begin, t.check_can_send):
        with pytest.raises(E.ProducerFencedError):
            call()
    t2 = ready()
    t2.begin()
    t2.start_commit()
    t2.fail(E.InvalidTxnStateError("x"), from_end_txn=True)
    assert t2.state == FATAL_ERROR


def test_retriable_codes():
    assert TransactionState.is_retriable(E.ConcurrentTransactionsError.code)
    assert TransactionState.is_retriable(E.NotCoordinatorError.code)
    assert not TransactionState.is_retriable(E.ProducerFencedError.code)


def test_invalid_producer_epoch_is_told_as_fenced():
    """A leader's INVALID_PRODUCER_EPOCH (a verification the coordinator answered PRODUCER_FENCED, as Kafka
    maps it) is fatal and raised as ProducerFencedError, as Kafka's client and librdkafka (_FENCED) do."""
    t = ready()
    t.begin()
    err = t.fail(E.InvalidProducerEpochError("produce to a-0: epoch 0 is fenced"))
    assert isinstance(err, E.ProducerFencedError) and "epoch 0 is fenced" in err.message
    assert t.state == FATAL_ERROR and t.error is err
    with pytest.raises(E.ProducerFencedError):
        t.start_commit()
