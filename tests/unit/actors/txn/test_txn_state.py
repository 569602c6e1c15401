"""The transaction coordinator's pure state machine (actors/txn/shard.py) and its records (actors/txn/records.py)."""

from __future__ import annotations

import itertools

import pytest

from actors.txn import records as R
from actors.txn.shard import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    MAX_EPOCH,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    VALID_PREVIOUS,
    IllegalTransitionError,
    TxnConfig,
    TxnCoordinatorShard,
)
from protocol import errors as E

T0 = 1_000_000
CONCURRENT = E.ConcurrentTransactionsError.code
FENCED = E.ProducerFencedError.code


class Coordinator:
    """The shard plus what its actor does: append (here: always acked), replay, collect marker jobs."""

    def __init__(self, config: TxnConfig | None = None, epoch: int = 3):
        self.shard = TxnCoordinatorShard(epoch, config)
        self.log: list[R.TxnRecord] = []
        self.jobs = []
        self.pids = itertools.count(1000)

    def new_pid(self) -> int:
        return next(self.pids)

    def apply(self, res):
        for rec in res.records:
            # through the bytes, as the log holds them
            rec = R.TxnRecord(R.decode_key(rec.key_bytes()), R.decode_value(rec.value_bytes()))
            self.log.append(rec)
            job = self.shard.replay(rec)
            if job is not None:
                self.jobs.append(job)
        return res.response

    def init(self, tid="t1", timeout=60000, now=T0, **kw):
        return self.apply(self.shard.init_producer_id(tid, timeout, now, self.new_pid, **kw))

    def add(self, tid, pid, epoch, parts, now=T0):
        return self.apply(self.shard.add_partitions(tid, pid, epoch, parts, now))

    def end(self, tid, pid, epoch, commit, now=T0):
        return self.apply(self.shard.end_txn(tid, pid, epoch, commit, now))

    def finish_markers(self, now=T0):
        jobs, self.jobs = self.jobs, []
        for j in jobs:
            self.apply(self.shard.markers_written(j, now))
        return jobs

    def state(self, tid="t1"):
        return self.shard.txns[tid].state


def test_records_round_trip_kafka_layout():
    v = R.TxnLogValue(7, 2, 60000, ONGOING, (("a", 1), ("a", 0), ("b", 3)), 55, 44)
    raw = R.encode_value(v)
    # version, pid, epoch, timeout, status, 2 topics ... as Kafka's TransactionLogValue v0
    assert raw[:2] == b"\x00\x00" and int.from_bytes(raw[2:10], "big") == 7 and raw[16] == ONGOING
    back = R.decode_value(raw)
    assert back == R.TxnLogValue(7, 2, 60000, ONGOING, (("a", 0), ("a", 1), ("b", 3)), 55, 44)
    assert R.decode_key(R.encode_key("tx-é")) == "tx-é"
    assert R.decode_value(None) is None
    for bad in (raw[:-1], raw + b"\x00", b"\x00\x05" + raw[2:]):
        with pytest.raises(E.CorruptMessageError):
            R.decode_value(bad)
    with pytest.raises(E.CorruptMessageError):
        R.decode_key(b"\x00\x00\x00\x09ab")


def test_init_commit_cycle_moves_through_kafka_states():
    c = Coordinator()
    r = c.init()
    assert r["error_code"] == 0 and (r["producer_id"], r["producer_epoch"]) == (1000, 0) and c.state() == EMPTY
    assert c.add("t1", 1000, 0, [("a", 0), ("b", 1)])["error_code"] == 0
    md = c.shard.txns["t1"]
    assert md.state == ONGOING and md.partitions == {("a", 0), ("b", 1)} and md.start_ms == T0
    assert c.add("t1", 1000, 0, [("a", 0)], now=T0 + 5)["error_code"] == 0  # already in: no record
    assert len(c.log) == 2
    assert c.end("t1", 1000, 0, commit=True)["error_code"] == 0
    assert c.state() == PREPARE_COMMIT
    (job,) = c.jobs
    assert job.commit and job.partitions == (("a", 0), ("b", 1)) and job.coordinator_epoch == 3
    c.finish_markers()
    assert c.state() == COMPLETE_COMMIT and c.shard.txns["t1"].partitions == set()
    assert c.end("t1", 1000, 0, commit=True)["error_code"] == 0  # a retried EndTxn answers its outcome
    assert c.end("t1", 1000, 0, commit=False)["error_code"] == E.InvalidTxnStateError.code
    assert c.add("t1", 1000, 0, [("c", 0)], now=T0 + 9)["error_code"] == 0  # next transaction
    assert c.state() == ONGOING and c.shard.txns["t1"].start_ms == T0 + 9


def test_every_written_move_is_valid_and_bad_moves_are_refused():
    c = Coordinator()
    c.init()
    shard = c.shard
    for target in (PREPARE_COMMIT, COMPLETE_COMMIT, COMPLETE_ABORT):  # not reachable from Empty
        assert EMPTY not in VALID_PREVIOUS[target]
        bad = R.TxnRecord("t1", R.TxnLogValue(1000, 0, 60000, target, (), T0, -1))
        with pytest.raises(IllegalTransitionError):
            shard.replay(bad)
    assert shard.txns["t1"].state == EMPTY
    shard.replay(R.TxnRecord("t1", R.TxnLogValue(1000, 0, 60000, COMPLETE_COMMIT, (), T0, -1)), loading=True)
    assert shard.txns["t1"].state == COMPLETE_COMMIT  # loading takes the latest value
    with pytest.raises(IllegalTransitionError):
        shard.replay(R.TxnRecord("new", R.TxnLogValue(1, 0, 1, ONGOING, (("a", 0),), T0, T0)))


def test_end_txn_errors_follow_kafka():
    c = Coordinator()
    assert c.end("nope", 1, 0, True)["error_code"] == E.InvalidProducerIdMappingError.code
    c.init()
    assert c.end("t1", 1000, 0, True)["error_code"] == E.InvalidTxnStateError.code  # Empty
    assert c.end("t1", 999, 0, True)["error_code"] == E.InvalidProducerIdMappingError.code
    c.add("t1", 1000, 0, [("a", 0)])
    assert c.end("t1", 1000, 1, True)["error_code"] == FENCED
    assert c.end("t1", 1000, 0, False)["error_code"] == 0 and c.state() == PREPARE_ABORT
    assert c.end("t1", 1000, 0, False)["error_code"] == CONCURRENT  # markers in flight
    assert c.end("t1", 1000, 0, True)["error_code"] == E.InvalidTxnStateError.code
    assert c.add("t1", 1000, 0, [("a", 1)])["error_code"] == CONCURRENT
    c.finish_markers()
    assert c.state() == COMPLETE_ABORT and c.end("t1", 1000, 0, False)["error_code"] == 0


def test_pending_state_serializes_transitions_and_failed_append_releases():
    c = Coordinator()
    c.init()
    first = c.shard.add_partitions("t1", 1000, 0, [("a", 0)], T0)  # record in flight, not replayed
    assert first.records and c.shard.end_txn("t1", 1000, 0, True, T0).response["error_code"] == CONCURRENT
    assert c.shard.init_producer_id("t1", 1000, T0, c.new_pid).response["error_code"] == CONCURRENT
    c.shard.append_failed("t1")
    assert c.state() == EMPTY  # nothing changed
    assert c.add("t1", 1000, 0, [("a", 0)])["error_code"] == 0
    # a brand-new id: a second InitProducerId while the first is in flight waits too
    res = c.shard.init_producer_id("t2", 1000, T0, c.new_pid)
    assert c.shard.init_producer_id("t2", 1000, T0, c.new_pid).response["error_code"] == CONCURRENT
    c.apply(res)
    assert c.state("t2") == EMPTY


def test_init_producer_id_fences_previous_instance_and_aborts_its_transaction():
    c = Coordinator()
    c.init()
    c.add("t1", 1000, 0, [("a", 0), ("b", 0)])
    r = c.init(now=T0 + 10)  # a second instance starts
    assert r["error_code"] == CONCURRENT and c.state() == PREPARE_ABORT
    md = c.shard.txns["t1"]
    assert (md.producer_id, md.producer_epoch) == (1000, 1)
    (job,) = c.jobs
    assert not job.commit and job.producer_epoch == 1 and job.partitions == (("a", 0), ("b", 0))
    assert c.add("t1", 1000, 0, [("c", 0)])["error_code"] == FENCED  # the zombie
    assert c.init()["error_code"] == CONCURRENT  # markers still going out
    c.finish_markers()
    r = c.init(now=T0 + 20)
    assert r["error_code"] == 0 and (r["producer_id"], r["producer_epoch"]) == (1000, 2) and c.state() == EMPTY
    assert c.end("t1", 1000, 1, True)["error_code"] == FENCED


def test_init_producer_id_validation_and_epoch_exhaustion():
    c = Coordinator(TxnConfig(max_timeout_ms=1000))
    assert c.init(timeout=1001)["error_code"] == E.InvalidTransactionTimeoutError.code
    assert c.init(timeout=0)["error_code"] == E.InvalidTransactionTimeoutError.code
    assert c.init(tid="")["error_code"] == E.InvalidRequestError.code
    assert c.init(timeout=1000)["error_code"] == 0
    assert c.init(timeout=1000, expected_producer_id=1000, expected_epoch=5)["error_code"] == FENCED
    assert c.init(timeout=1000, expected_producer_id=1000, expected_epoch=0)["producer_epoch"] == 1
    c.shard.txns["t1"].producer_epoch = MAX_EPOCH - 2
    r = c.init(timeout=1000)
    assert (r["producer_id"], r["producer_epoch"]) == (1000, MAX_EPOCH - 1)  # the last usable epoch
    c.add("t1", 1000, MAX_EPOCH - 1, [("a", 0)])
    assert c.init(timeout=1000)["error_code"] == CONCURRENT  # fenced at Short.MaxValue, same id
    (job,) = c.jobs
    assert (job.producer_id, job.producer_epoch) == (1000, MAX_EPOCH)
    c.finish_markers()
    r = c.init(timeout=1000)
    assert r["error_code"] == 0 and r["producer_id"] != 1000 and r["producer_epoch"] == 0  # exhausted: new id


def test_timeout_aborts_at_a_bumped_epoch_and_ids_expire():
    c = Coordinator(TxnConfig(id_expiration_ms=5000))
    c.init(timeout=100)
    c.add("t1", 1000, 0, [("a", 0)], now=T0)
    assert c.shard.next_deadline() == T0 + 100
    assert c.shard.abort_expired(T0 + 100) == []
    for res in c.shard.abort_expired(T0 + 101):
        c.apply(res)
    assert c.state() == PREPARE_ABORT and c.shard.txns["t1"].producer_epoch == 1
    assert c.end("t1", 1000, 0, True)["error_code"] == FENCED  # the timed-out producer is fenced
    c.finish_markers(now=T0 + 200)
    assert c.state() == COMPLETE_ABORT and c.shard.next_deadline() is None
    assert c.shard.expire_ids(T0 + 5199) == []
    (res,) = c.shard.expire_ids(T0 + 5200)
    assert c.shard.init_producer_id("t1", 100, T0, c.new_pid).response["error_code"] == CONCURRENT  # dying
    c.apply(res)
    assert "t1" not in c.shard.txns and c.log[-1].value is None
    assert c.init()["error_code"] == 0 and c.shard.txns["t1"].producer_epoch == 0  # a fresh id


def test_load_resumes_prepared_transactions():
    c = Coordinator()
    c.init("t1")
    c.init("t2")
    c.add("t1", 1000, 0, [("a", 0)])
    c.add("t2", 1001, 0, [("a", 1)])
    c.end("t1", 1000, 0, True)
    c.end("t2", 1001, 0, False)
    c.finish_markers()  # t2's markers were written... then t1 commits again and stops mid-way
    c.add("t1", 1000, 0, [("b", 0)])
    c.end("t1", 1000, 0, True)
    fresh = TxnCoordinatorShard(4)
    for rec in c.log:
        fresh.replay(rec, loading=True)
    (job,) = fresh.pending_jobs()
    assert job.transactional_id == "t1" and job.commit and job.partitions == (("b", 0),)
    assert job.coordinator_epoch == 4
    assert fresh.txns["t2"].state == COMPLETE_ABORT
    assert {d["transactional_id"] for d in fresh.list(["PrepareCommit"])} == {"t1"}
    assert fresh.describe("t1")["state"] == "PrepareCommit" and fresh.describe("zz")["error_code"] == (
        E.TransactionalIdNotFoundError.code
    )


def test_verify_only_accepts_partitions_of_the_ongoing_transaction():
    c = Coordinator()
    c.init()
    assert c.shard.verify("t1", 1000, 0, [("a", 0)]) == {("a", 0): E.InvalidTxnStateError.code}
    c.add("t1", 1000, 0, [("a", 0)])
    assert c.shard.verify("t1", 1000, 0, [("a", 0), ("a", 1)]) == {("a", 0): 0, ("a", 1): E.InvalidTxnStateError.code}
    assert c.shard.verify("t1", 1000, 1, [("a", 0)])[("a", 0)] != 0  # wrong epoch
    c.end("t1", 1000, 0, True)
    assert c.shard.verify("t1", 1000, 0, [("a", 0)])[("a", 0)] != 0  # no longer ongoing


def test_bad_add_partitions_input_gets_invalid_request():
    c = Coordinator()
    c.init()
    for bad in ([], [("a",)], [("", 0)], [("a", -1)], "ab", [(None, 0)]):
        assert c.add("t1", 1000, 0, bad)["error_code"] == E.InvalidRequestError.code, bad
    assert c.state() == EMPTY


def test_markers_written_then_add_starts_the_next_transaction_in_the_same_append():
    c = Coordinator()
    r = c.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    c.add("t1", pid, epoch, [("a", 0), ("a", 1)])
    c.end("t1", pid, epoch, True)
    (job,) = c.jobs
    # an AddPartitionsToTxn arriving now answers CONCURRENT_TRANSACTIONS (the actor parks it instead)
    assert c.add("t1", pid, epoch, [("b", 0)])["error_code"] == CONCURRENT
    res = c.shard.markers_written(job, T0 + 5, then_add=(pid, epoch, [("b", 0), ("a", 1)]))
    assert [rec.value.status for rec in res.records] == [COMPLETE_COMMIT, ONGOING]
    assert res.response == {"error_code": 0, "error_message": None, "then_added": True}
    # while the two records are in flight the id takes no other request
    assert c.shard.end_txn("t1", pid, epoch, True, T0 + 6).response["error_code"] == CONCURRENT
    c.apply(res)
    md = c.shard.txns["t1"]
    assert (md.state, md.partitions, md.start_ms, md.pending) == (ONGOING, {("a", 1), ("b", 0)}, T0 + 5, None)
    # the log replays to the same state from scratch (a new coordinator after failover)
    fresh = TxnCoordinatorShard(4)
    for rec in c.log:
        fresh.replay(rec, loading=True)
    assert (fresh.txns["t1"].state, fresh.txns["t1"].partitions) == (ONGOING, {("a", 1), ("b", 0)})


@pytest.mark.parametrize(
    "then_add",
    [
        ("other-pid", 0, [("b", 0)]),  # not the producer of the transaction
        ("same", 1, [("b", 0)]),  # another epoch (fenced or fencing)
        ("same", 0, []),  # no partitions
        ("same", 0, [("b", -1)]),  # malformed
    ],
)
def test_markers_written_then_add_only_for_the_same_producer_and_good_partitions(then_add):
    c = Coordinator()
    r = c.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    c.add("t1", pid, epoch, [("a", 0)])
    c.end("t1", pid, epoch, False)
    (job,) = c.jobs
    who, ep, parts = then_add
    res = c.shard.markers_written(job, T0, then_add=(pid if who == "same" else pid + 99, epoch + ep, parts))
    assert [rec.value.status for rec in res.records] == [COMPLETE_ABORT]
    assert "then_added" not in res.response
    c.apply(res)
    assert c.state() == COMPLETE_ABORT


def test_each_transaction_of_an_id_starts_after_the_previous_one_and_its_markers_carry_that_start():
    """Partition leaders tell a late verification push from the current transaction's by the start
    (actors/replication/txn_verification.py): it must grow even when transactions begin within one millisecond."""
    c = Coordinator()
    r = c.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    starts = []
    for _ in range(3):
        c.add("t1", pid, epoch, [("a", 0)], now=T0)  # the clock does not move
        c.add("t1", pid, epoch, [("a", 1)], now=T0 + 50)  # a later add keeps the transaction's start
        starts.append(c.shard.txns["t1"].start_ms)
        c.end("t1", pid, epoch, True, now=T0)
        job = c.jobs[-1]
        assert job.start_ms == starts[-1]
        c.apply(c.shard.markers_written(job, T0))
    assert starts == [T0, T0 + 1, T0 + 2]
    # the next transaction started in the CompleteCommit's append (a parked add) also starts later
    c.add("t1", pid, epoch, [("a", 0)], now=T0)
    c.end("t1", pid, epoch, True, now=T0)
    res = c.shard.markers_written(c.jobs[-1], T0, then_add=(pid, epoch, [("b", 0)]))
    c.apply(res)
    assert c.shard.txns["t1"].start_ms == T0 + 4


def test_verify_checks_the_producer_before_the_partitions_as_kafka():
    """Kafka's handleVerifyPartitionsInTransaction: a fenced epoch is PRODUCER_FENCED for every partition
    (not INVALID_TXN_STATE), another or unknown producer id INVALID_PRODUCER_ID_MAPPING, markers being written
    CONCURRENT_TRANSACTIONS; only the current producer's partitions outside its transaction are
    INVALID_TXN_STATE."""
    c = Coordinator()
    c.init()
    c.add("t1", 1000, 0, [("a", 0)])
    parts = [("a", 0), ("a", 1)]
    assert c.shard.verify("t1", 1000, 0, parts) == {("a", 0): 0, ("a", 1): E.InvalidTxnStateError.code}
    assert c.shard.verify("t1", 1000, 1, parts) == dict.fromkeys(parts, E.ProducerFencedError.code)
    assert "fenced" in c.shard.verify_error("t1", 1000, 1).message
    assert c.shard.verify("t1", 999, 0, parts) == dict.fromkeys(parts, E.InvalidProducerIdMappingError.code)
    assert c.shard.verify("nobody", 1000, 0, parts) == dict.fromkeys(parts, E.InvalidProducerIdMappingError.code)
    assert c.shard.verify_error("t1", 1000, 0) is None
    c.init()  # a second instance: the epoch is bumped and the open transaction aborted
    assert c.shard.verify("t1", 1000, 0, [("a", 0)]) == {("a", 0): E.ProducerFencedError.code}
