"""Transactions under faults (real Ray, killed brokers) and bad input at the coordinator and the leader.

The fault suites' shared 3-broker cluster (``fault_cluster``, tests/client/faults/conftest.py): ``__transaction_state``
has one partition (so the coordinator of every id is one known broker) and timed-out transactions are checked
every 300 ms."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest
import ray
from support import coordinator_of, wait_until

import rafka
from actors.server.worker_process import actor_pid
from protocol import errors as E
from protocol.messages import ProduceRequest
from protocol.names import RAY_NAMESPACE, broker_name, txn_coordinator_name
from protocol.txn_messages import EndTxnRequest, InitProducerIdRequest, WriteTxnMarkersRequest
from rafka.structs import TopicPartition
from storage.control import CONTROL_COMMIT, build_control_batch
from storage.records import RecordBatchBuilder

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def txn_cluster(fault_cluster):
    return fault_cluster


def tid() -> str:
    return "tx-" + uuid.uuid4().hex[:8]


def read_committed(cluster, topic, partitions, expected: int, timeout_s=90, settle_s=1.0) -> list[bytes]:
    c = rafka.Consumer(cluster, auto_offset_reset="earliest", isolation_level="read_committed")
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            got.extend(r.value for r in recs)
    end = time.monotonic() + settle_s
    while time.monotonic() < end:  # anything extra (a duplicate, an aborted record) shows up here
        for recs in c.poll(timeout_ms=200).values():
            got.extend(r.value for r in recs)
    c.close()
    return got


def state_of(cluster, transactional_id: str) -> dict:
    return rafka.Admin(cluster).describe_transactions([transactional_id])[0]


def test_abandoned_transaction_is_aborted_by_its_timeout_and_never_read(txn_cluster):
    admin = rafka.Admin(txn_cluster)
    topic = "abandon-" + uuid.uuid4().hex[:6]
    admin.create_topic(topic, 1, 3)
    t = tid()
    # 5 s: the checks below run while it is still open (with 1.5 s a slow machine let the abort come first)
    p = rafka.Producer(txn_cluster, transactional_id=t, transaction_timeout_ms=5000, linger_ms=1)
    p.init_transactions(timeout=90)
    p.begin_transaction()
    for i in range(5):
        p.send(topic, value=b"lost%d" % i, partition=0)
    p.flush()
    p.close()  # the producer goes away without EndTxn: only the coordinator's timeout ends it
    plain = rafka.Producer(txn_cluster, linger_ms=1)
    plain.send(topic, value=b"after", partition=0).get(30)
    plain.close()
    assert state_of(txn_cluster, t)["state"] == "Ongoing"
    assert read_committed(txn_cluster, topic, 1, 1, timeout_s=0.8, settle_s=0) == []  # the LSO holds
    wait_until(lambda: state_of(txn_cluster, t)["state"] == "CompleteAbort", 30, "the timeout abort")
    d = state_of(txn_cluster, t)
    assert d["producer_epoch"] == 1  # aborted at a bumped epoch: the old producer is fenced
    assert read_committed(txn_cluster, topic, 1, 1) == [b"after"]


@pytest.mark.parametrize("victim", ["coordinator", "partition_leader"])
def test_broker_killed_right_after_commit_still_completes_the_transaction(txn_cluster, victim):
    admin = rafka.Admin(txn_cluster)
    topic = f"kill-{victim[:5]}-" + uuid.uuid4().hex[:6]
    # 3 partitions x RF 3: each broker leads one (placement spreads leaders), so the transaction's markers go to
    # every broker, the victim included, and a leader other than the coordinator always exists
    admin.create_topic(topic, 3, 3)
    t = tid()
    p = rafka.Producer(txn_cluster, transactional_id=t, linger_ms=1)
    p.init_transactions(timeout=90)
    coordinator = coordinator_of(txn_cluster, t)
    leaders = {d["partition"]: d["leader"] for d in admin.describe_topics([topic])[0]["partitions"]}
    if victim == "coordinator":
        target = coordinator
    else:  # a data partition's leader that is not the coordinator
        target = next(b for b in sorted(set(leaders.values())) if b != coordinator)
    p.begin_transaction()
    values = [b"v%d" % i for i in range(60)]
    for i, v in enumerate(values):
        p.send(topic, value=v, partition=i % 3)
    p.commit_transaction(timeout=60)  # PrepareCommit is durable; the markers are on their way
    pid = actor_pid(ray.get_actor(broker_name(txn_cluster.name, target), namespace=RAY_NAMESPACE))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the broker's OS process dies (its replicas and coordinators with it)
    try:
        got = read_committed(txn_cluster, topic, 3, len(values))
        assert sorted(got) == sorted(values)  # every record, once: no loss, no duplicate
        wait_until(lambda: state_of(txn_cluster, t)["state"] == "CompleteCommit", 60, "CompleteCommit")
    finally:
        txn_cluster.restart_broker(target)
        p.close(timeout=5)


def test_kip890_a_write_to_a_partition_outside_the_transaction_is_refused(txn_cluster):
    admin = rafka.Admin(txn_cluster)
    topic = "kip890-" + uuid.uuid4().hex[:6]
    admin.create_topic(topic, 2, 3)
    t = tid()
    p = rafka.Producer(txn_cluster, transactional_id=t, linger_ms=1)
    p.init_transactions(timeout=90)
    p.begin_transaction()
    p.send(topic, value=b"in", partition=0).get(30)  # partition 0 is in the transaction, partition 1 is not
    pid, epoch = p.sender.producer_id, p.sender.producer_epoch
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
    b.append(int(time.time() * 1000), None, b"hanging")
    leader = wait_until(lambda: p.metadata.leader(TopicPartition(topic, 1)), 30, "a leader")[0]
    ans = ray.get(leader.produce.remote(ProduceRequest(b.build(), -1, 10000, transactional_id=t)), timeout=30)
    assert ans["error_code"] == E.InvalidTxnStateError.code, ans
    ans = ray.get(leader.produce.remote(ProduceRequest(b.build(), -1, 10000)), timeout=30)  # no transactional id
    assert ans["error_code"] == E.InvalidTxnStateError.code, ans
    # the coordinator's verification token of partition 0 (protocol/txn_tokens.py), or a forged one, does not
    # let the write into partition 1: the leader asks the coordinator, which refuses
    st = p._txn.state
    own = st.tokens[TopicPartition(topic, 0)]
    for tok in (own, bytes(16)):
        req = ProduceRequest(b.build(), -1, 10000, transactional_id=t, txn_start_ms=st.start_ms, txn_token=tok)
        ans = ray.get(leader.produce.remote(req), timeout=30)
        assert ans["error_code"] == E.InvalidTxnStateError.code, ans
    assert ray.get(leader.state.remote(), timeout=30)["txn_verification"]["tokens_bad"] == 2
    # a client may not write a transaction marker itself
    marker = build_control_batch(CONTROL_COMMIT, pid, epoch, 0, int(time.time() * 1000))
    ans = ray.get(leader.produce.remote(ProduceRequest(marker, -1, 10000)), timeout=30)
    assert ans["error_code"] == E.InvalidRecordError.code, ans
    p.commit_transaction(timeout=60)
    assert read_committed(txn_cluster, topic, 2, 1) == [b"in"]
    p.close()


def test_bad_coordinator_requests_get_kafka_errors_and_nothing_crashes(txn_cluster):
    t = tid()
    p = rafka.Producer(txn_cluster, transactional_id=t, linger_ms=1)
    p.init_transactions(timeout=90)
    pid, epoch = p.sender.producer_id, p.sender.producer_epoch
    tc = ray.get_actor(txn_coordinator_name(txn_cluster.name, coordinator_of(txn_cluster, t)), namespace=RAY_NAMESPACE)

    def call(method, req):
        return ray.get(getattr(tc, method).remote(req), timeout=30)

    assert call("end_txn", EndTxnRequest(t, pid, epoch, True))["error_code"] == E.InvalidTxnStateError.code
    assert call("end_txn", EndTxnRequest(t, pid, epoch + 5, True))["error_code"] == E.ProducerFencedError.code
    assert call("end_txn", EndTxnRequest("nobody", 1, 0, True))["error_code"] == E.InvalidProducerIdMappingError.code
    assert call("end_txn", "junk")["error_code"] == E.InvalidRequestError.code
    too_long = InitProducerIdRequest(t, 10**9)
    assert call("init_producer_id", too_long)["error_code"] == E.InvalidTransactionTimeoutError.code
    assert call("init_producer_id", InitProducerIdRequest(None))["error_code"] == E.InvalidRequestError.code
    leader = rafka.Admin(txn_cluster)  # a replica refuses a wrongly typed marker request
    topic = "bad-" + uuid.uuid4().hex[:6]
    leader.create_topic(topic, 1, 3)
    h = wait_until(lambda: p.metadata.leader(TopicPartition(topic, 0)), 30, "a leader")[0]
    assert (
        ray.get(h.write_txn_markers.remote({"producer_id": 1}), timeout=30)["error_code"] == E.InvalidRequestError.code
    )
    stale = WriteTxnMarkersRequest(pid, epoch, True, -5)
    assert (
        ray.get(h.write_txn_markers.remote(stale), timeout=30)["error_code"] == 0
    )  # no open transaction: a no-op marker
    assert ray.get(tc.ping.remote(), timeout=30) >= 0  # still serving
    p.close()


def test_a_hanging_transaction_is_found_and_aborted(ray_cluster, tmp_path):
    """A transaction its coordinator no longer knows (the ``__transaction_state`` log was lost with a wiped
    disk while the cluster was down) holds the partition's LSO for ever: ``find-hanging`` lists it and
    ``abort-hanging`` writes its ABORT marker, after which read_committed moves on."""
    name = "hang" + uuid.uuid4().hex[:6]
    config = {"transaction.state.log.num.partitions": 1, "transaction.state.log.replication.factor": 1}
    topic, t = "hang-" + uuid.uuid4().hex[:6], tid()
    with rafka.LocalCluster(brokers=1, name=name, data_dir=tmp_path, broker_config=config) as c:
        rafka.Admin(c).create_topic(topic, 2, 1)
        p = rafka.Producer(c, transactional_id=t, linger_ms=1)
        p.init_transactions(timeout=90)
        p.begin_transaction()
        for i in range(3):
            p.send(topic, value=b"open%d" % i, partition=0)
        p.flush()
        pid = p.sender.producer_id
    p.close(timeout=0)
    state_dirs = [d for d in tmp_path.rglob("__transaction_state-0") if d.is_dir()]
    assert state_dirs, sorted(str(x) for x in tmp_path.rglob("*"))[:50]
    for d in state_dirs:
        for f in d.iterdir():
            f.unlink()  # the coordinator's log is gone: nothing will ever end this transaction
    with rafka.LocalCluster(brokers=1, name=name, data_dir=tmp_path, broker_config=config) as c:
        admin = rafka.Admin(c)
        tp0 = TopicPartition(topic, 0)
        with rafka.Producer(c, linger_ms=1) as plain:
            plain.send(topic, value=b"after", partition=0).get(30)
        assert read_committed(c, topic, 1, 1, timeout_s=1.0, settle_s=0) == []  # held at the open transaction
        assert [h["producer_id"] for h in admin.find_hanging_transactions(tp0, 0)] == [pid]
        assert admin.find_hanging_transactions(TopicPartition(topic, 1), 0) == []
        aborted = admin.abort_hanging_transactions(topic, max_age_ms=0)
        assert [(a["partition"], a["producer_id"], a["aborted_from"]) for a in aborted] == [(0, pid, 0)]
        assert read_committed(c, topic, 1, 1) == [b"after"]  # the aborted records stay hidden
        assert admin.abort_hanging_transactions(topic, max_age_ms=0) == []  # nothing left to abort


@pytest.mark.parametrize("fault", ["SIGSTOP", "SIGKILL"])
def test_end_txn_on_the_coordinators_tcp_connection_survives_a_paused_or_killed_coordinator(txn_cluster, fault):
    """EndTxn travels on the coordinator's TCP listener (actors/channels/coordinator_channel.py). SIGSTOP: the
    coordinator's process is paused while the EndTxn is on its connection, and the commit completes once it
    resumes. SIGKILL: the coordinator's broker process dies after the transaction's records were acknowledged
    and before the commit, so the EndTxn meets a dead connection; the producer finds the next coordinator
    (another broker leads ``__transaction_state``) on a fresh connection and the transaction commits. Either
    way read_committed sees every record once."""
    admin = rafka.Admin(txn_cluster)
    topic = f"tcp-{fault.lower()}-" + uuid.uuid4().hex[:6]
    admin.create_topic(topic, 3, 3)
    t = tid()
    p = rafka.Producer(txn_cluster, transactional_id=t, linger_ms=1)
    p.init_transactions(timeout=90)
    coordinator = coordinator_of(txn_cluster, t)
    p.begin_transaction()
    values = [b"%s-%d" % (fault.encode(), i) for i in range(60)]
    for i, v in enumerate(values):
        p.send(topic, value=v, partition=i % 3)
    p.flush(timeout=60)
    if fault == "SIGSTOP":
        tc = ray.get_actor(txn_coordinator_name(txn_cluster.name, coordinator), namespace=RAY_NAMESPACE)
        pid = actor_pid(tc)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        timer = threading.Timer(2.0, os.kill, (pid, signal.SIGCONT))
        timer.start()
        t0 = time.monotonic()
        try:
            p.commit_transaction(timeout=60)
        finally:
            timer.join()
            os.kill(pid, signal.SIGCONT)
        assert time.monotonic() - t0 >= 1.5  # it did wait for the paused coordinator
    else:
        pid = actor_pid(ray.get_actor(broker_name(txn_cluster.name, coordinator), namespace=RAY_NAMESPACE))
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the broker's process, its coordinators with it
    try:
        if fault == "SIGKILL":
            p.commit_transaction(timeout=90)  # through the next coordinator: the killed one's broker is down
        got = read_committed(txn_cluster, topic, 3, len(values))
        assert sorted(got) == sorted(values)
        wait_until(lambda: state_of(txn_cluster, t)["state"] == "CompleteCommit", 60, "CompleteCommit")
    finally:
        if fault == "SIGKILL":
            txn_cluster.restart_broker(coordinator)
        p.close(timeout=5)
