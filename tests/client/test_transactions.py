"""Transactions end to end on a real cluster: the transactional producer, the transaction coordinator, the
markers, read_committed consumers (KIP-98), KIP-890 verification and fencing."""

from __future__ import annotations

import time
import uuid

import pytest

import rafka
from protocol import errors as E
from rafka.structs import TopicPartition


def read(cluster, topic, partitions, isolation, until=None, settle_s=1.0, timeout_s=60):
    """Every value a consumer with ``isolation`` reads from the start: until ``until`` is among them, then
    ``settle_s`` more (whatever a broken filter would leak shows up in that time)."""
    c = rafka.Consumer(cluster, auto_offset_reset="earliest", isolation_level=isolation)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    settle_at = None
    while time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            got.extend(r.value for r in recs)
        if settle_at is None and (until is None or until in got):
            settle_at = time.monotonic() + settle_s
        if settle_at is not None and time.monotonic() >= settle_at:
            break
    c.close()
    return got


def tid() -> str:
    return "tx-" + uuid.uuid4().hex[:8]


def test_committed_records_are_read_and_aborted_ones_are_not(rafka_cluster, new_topic):
    topic = new_topic(2, 3)
    p = rafka.Producer(rafka_cluster, transactional_id=tid(), linger_ms=1)
    p.init_transactions(timeout=90)
    p.begin_transaction()
    for i in range(20):
        p.send(topic, value=b"c%d" % i, partition=i % 2)
    p.commit_transaction(timeout=60)
    p.begin_transaction()
    futs = [p.send(topic, value=b"a%d" % i, partition=i % 2) for i in range(20)]
    p.flush()
    assert all(f.get(10).offset >= 0 for f in futs)  # written and acknowledged, then aborted
    p.abort_transaction(timeout=60)
    p.begin_transaction()
    p.send(topic, value=b"last", partition=0)
    p.send(topic, value=b"last1", partition=1)
    p.commit_transaction(timeout=60)
    p.close()
    committed = read(rafka_cluster, topic, 2, "read_committed", until=b"last")
    assert sorted(committed) == sorted([b"c%d" % i for i in range(20)] + [b"last", b"last1"])
    everything = read(rafka_cluster, topic, 2, "read_uncommitted", until=b"last")
    assert sorted(everything) == sorted(
        [b"c%d" % i for i in range(20)] + [b"a%d" % i for i in range(20)] + [b"last", b"last1"]
    )


def test_open_transaction_holds_read_committed_at_the_lso(rafka_cluster, new_topic):
    topic = new_topic(1, 3)
    plain = rafka.Producer(rafka_cluster, linger_ms=1)
    plain.send(topic, value=b"before", partition=0).get(30)
    p = rafka.Producer(rafka_cluster, transactional_id=tid(), linger_ms=1)
    p.init_transactions(timeout=90)
    p.begin_transaction()
    p.send(topic, value=b"open", partition=0).get(30)
    plain.send(topic, value=b"after", partition=0).get(30)  # above the open transaction's first offset
    assert read(rafka_cluster, topic, 1, "read_committed", until=b"before", settle_s=1.5) == [b"before"]
    assert read(rafka_cluster, topic, 1, "read_uncommitted", until=b"after") == [b"before", b"open", b"after"]
    p.commit_transaction(timeout=60)
    assert read(rafka_cluster, topic, 1, "read_committed", until=b"after") == [b"before", b"open", b"after"]
    p.close()
    plain.close()


def test_a_second_instance_fences_the_first_and_aborts_its_transaction(rafka_cluster, new_topic):
    topic = new_topic(1, 3)
    t = tid()
    old = rafka.Producer(rafka_cluster, transactional_id=t, linger_ms=1, retries=3, delivery_timeout_ms=40000)
    old.init_transactions(timeout=90)
    old.begin_transaction()
    old.send(topic, value=b"zombie", partition=0).get(30)
    new = rafka.Producer(rafka_cluster, transactional_id=t, linger_ms=1)
    new.init_transactions(timeout=90)  # aborts the zombie's open transaction, bumps the epoch
    with pytest.raises((E.ProducerFencedError, E.InvalidProducerEpochError)):
        old.commit_transaction(timeout=30)
    new.begin_transaction()
    new.send(topic, value=b"fresh", partition=0)
    new.commit_transaction(timeout=60)
    assert read(rafka_cluster, topic, 1, "read_committed", until=b"fresh") == [b"fresh"]
    new.close()
    old.close(timeout=5)


def test_a_fenced_producer_that_sends_again_raises_producer_fenced(rafka_cluster, new_topic):
    """The zombie writes again to its partition after a second instance initialised the id: the leader's
    verification hears PRODUCER_FENCED from the coordinator (INVALID_PRODUCER_EPOCH on the produce, as Kafka),
    and rafka's producer raises ProducerFencedError, for the record and every later call."""
    topic = new_topic(1, 3)
    t = tid()
    old = rafka.Producer(rafka_cluster, transactional_id=t, linger_ms=1, retries=3, delivery_timeout_ms=40000)
    old.init_transactions(timeout=90)
    old.begin_transaction()
    old.send(topic, value=b"zombie", partition=0).get(30)
    new = rafka.Producer(rafka_cluster, transactional_id=t, linger_ms=1)
    new.init_transactions(timeout=90)
    with pytest.raises(E.ProducerFencedError, match="fenced"):
        old.send(topic, value=b"again", partition=0).get(30)
    with pytest.raises(E.ProducerFencedError):
        old.commit_transaction(timeout=30)
    with pytest.raises(E.ProducerFencedError):
        old.send(topic, value=b"more", partition=0)
    new.begin_transaction()
    new.send(topic, value=b"fresh", partition=0)
    new.commit_transaction(timeout=60)
    assert read(rafka_cluster, topic, 1, "read_committed", until=b"fresh") == [b"fresh"]
    new.close()
    old.close(timeout=5)


def test_bad_transaction_calls_get_kafka_errors(rafka_cluster, new_topic):
    topic = new_topic(1, 3)
    p = rafka.Producer(rafka_cluster, transactional_id=tid(), linger_ms=1)
    with pytest.raises(rafka.errors.IllegalStateError):
        p.begin_transaction()  # before init_transactions
    p.init_transactions(timeout=90)
    with pytest.raises(rafka.errors.IllegalStateError):
        p.send(topic, value=b"x")  # outside a transaction
    with pytest.raises(rafka.errors.IllegalStateError):
        p.commit_transaction()  # no transaction begun
    p.begin_transaction()
    p.commit_transaction(timeout=30)  # an empty transaction commits without a coordinator call
    p.close()
    with pytest.raises(rafka.errors.IllegalStateError):
        rafka.Producer(rafka_cluster).init_transactions()  # not transactional
    with pytest.raises(ValueError):
        rafka.Producer(rafka_cluster, transactional_id="x", acks=1)


def test_send_batch_adds_each_partition_while_the_call_goes_through_its_records(rafka_cluster, new_topic):
    """Kafka's producer adds a partition to the transaction at the first send to it. A large ``send_batch``
    does the same: its AddPartitionsToTxn is at the coordinator while the call is still going through its
    records (before, it went out only after the last record was checked, tens of ms for 10,000 records).
    A record that then fails the call leaves nothing of the call queued; its partition is in the transaction
    with nothing written, and the commit ends it like any other."""
    topic = new_topic(3, 3)
    t = tid()
    admin = rafka.Admin(rafka_cluster)
    p = rafka.Producer(rafka_cluster, transactional_id=t, linger_ms=1)
    p.init_transactions(timeout=90)
    p.begin_transaction()

    def in_txn() -> set:
        return {tuple(tp) for tp in admin.describe_transactions([t])[0].get("topics", [])}

    seen: list[set] = []

    def records():
        yield (None, b"first", 0)
        deadline = time.monotonic() + 30
        while (topic, 0) not in in_txn() and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append(in_txn())  # the coordinator's view while the call is still in its loop
        yield (None, b"second", 1)

    futs = p.send_batch(topic, records())
    assert seen and (topic, 0) in seen[0], f"partition 0 not added while send_batch ran: {seen}"
    assert (topic, 1) not in seen[0]  # not yet sent to: Kafka adds partitions as they are written
    with pytest.raises(rafka.errors.RecordTooLargeError):
        p.send_batch(topic, [(None, b"third", 2), (None, b"x" * (2 << 20), 2)])
    p.flush()
    assert [f.get(30).partition for f in futs] == [0, 1]
    deadline = time.monotonic() + 30
    while (topic, 2) not in in_txn() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert {(topic, 0), (topic, 1), (topic, 2)} <= in_txn()
    p.commit_transaction(timeout=60)
    p.close()
    assert sorted(read(rafka_cluster, topic, 3, "read_committed", until=b"second")) == [b"first", b"second"]
    assert sorted(read(rafka_cluster, topic, 3, "read_uncommitted", until=b"second")) == [b"first", b"second"]


def test_consume_transform_produce_commits_offsets_with_the_output(rafka_cluster, new_topic):
    src, dst = new_topic(1, 3), new_topic(1, 3)
    plain = rafka.Producer(rafka_cluster, linger_ms=1)
    for i in range(10):
        plain.send(src, value=b"%d" % i, partition=0)
    plain.flush()
    plain.close()
    group = "g-" + uuid.uuid4().hex[:6]
    c = rafka.Consumer(
        rafka_cluster,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    c.subscribe([src])
    p = rafka.Producer(rafka_cluster, transactional_id=tid(), linger_ms=1)
    p.init_transactions(timeout=90)
    tp = TopicPartition(src, 0)
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < 10 and time.monotonic() < deadline:
        recs = c.poll(timeout_ms=500).get(tp, [])
        if not recs:
            continue
        p.begin_transaction()
        for r in recs:
            p.send(dst, value=b"x" + r.value, partition=0)
        p.send_offsets_to_transaction({tp: rafka.OffsetAndMetadata(recs[-1].offset + 1)}, c.group_metadata())
        p.commit_transaction(timeout=60)
        seen.extend(r.value for r in recs)
    assert seen == [b"%d" % i for i in range(10)]
    assert c.committed(tp).offset == 10  # the offsets came with the transaction's commit
    # an aborted transaction's offsets never become visible
    p.begin_transaction()
    p.send(dst, value=b"never", partition=0)
    p.send_offsets_to_transaction({tp: rafka.OffsetAndMetadata(3)}, c.group_metadata())
    p.abort_transaction(timeout=60)
    assert c.committed(tp).offset == 10
    c.close()
    p.close()
    out = read(rafka_cluster, dst, 1, "read_committed", until=b"x9")
    assert out == [b"x%d" % i for i in range(10)]


def test_send_batch_sends_its_add_partitions_before_it_returns(rafka_cluster, new_topic):
    """The AddPartitionsToTxn of every partition a ``send_batch`` call writes to is in flight (or answered)
    when the call returns: sent from the caller's thread once the records are placed, not whenever the
    Sender's loop gets the GIL after the call. Once every partition of the topic has a record, it goes out
    at once, while the call is still going through its records."""
    topic = new_topic(3, 3)
    p = rafka.Producer(rafka_cluster, transactional_id=tid(), linger_ms=1)
    p.init_transactions(timeout=90)
    every = {TopicPartition(topic, q) for q in range(3)}

    def sent_or_added() -> set:
        adding = p.sender.transaction_manager._adding  # (read first: the answer marks them added before _adding clears)
        return (set(adding[1]) if adding is not None else set()) | p._txn.state.partitions

    for round_ in range(3):
        p.begin_transaction()
        if round_ == 0:  # one record per partition: the call's end sends it
            p.send_batch(topic, [(None, b"r%d-%d" % (round_, i), i % 3) for i in range(3)])
        else:
            mid: list[set] = []

            def records():
                for i in range(3):
                    yield (None, b"r%d-%d" % (round_, i), i)
                mid.append(sent_or_added())  # the loop placed all three; more records follow
                for i in range(3, 300):
                    yield (None, b"r%d-%d" % (round_, i), i % 3)

            p.send_batch(topic, records())
            assert mid == [every], (round_, mid)
        assert sent_or_added() == every, (round_, p.sender.transaction_manager._adding, p._txn.state.partitions)
        p.commit_transaction(timeout=60)
    p.close()
    got = read(rafka_cluster, topic, 3, "read_committed", until=b"r2-299")
    assert len(got) == 3 + 2 * 300 and len(set(got)) == len(got)


def test_coordinator_calls_go_over_tcp_and_the_leaders_take_the_coordinators_verification_tokens(
    rafka_cluster, new_topic
):
    """The producer's InitProducerId, AddPartitionsToTxn and EndTxn travel on the coordinator's TCP listener
    (actors/channels/coordinator_channel.py), not Ray calls; and once a transaction's partitions are added, the
    coordinator answers a verification token per partition (protocol/txn_tokens.py) that the producer's
    produces carry, so no leader asks the coordinator when the transaction's first records arrive (a leader
    that asked would count a verification call) and the coordinator pushes nothing."""
    import ray

    from actors.channels.replica_lookup import replica_handle
    from protocol.names import RAY_NAMESPACE, txn_coordinator_name

    def counters() -> dict:  # per coordinator: requests on its listener, tokens it answered, pushes taken
        out = {}
        for b in rafka_cluster.broker_ids():
            try:  # a broker's transaction coordinator starts with its first __transaction_state partition
                h = ray.get_actor(txn_coordinator_name(rafka_cluster.name, b), namespace=RAY_NAMESPACE)
            except ValueError:
                continue
            d = ray.get(h.describe.remote(), timeout=30)
            st = d["stats"]
            out[b] = (d["client_listener"]["requests"], st["verification_tokens"], st["verified_pushes"])
        return out

    topic = new_topic(3, 3)
    before = counters()  # the module's cluster is shared: other tests' transactions count too
    p = rafka.Producer(rafka_cluster, transactional_id=tid(), linger_ms=1)
    p.init_transactions(timeout=90)
    for round_ in range(4):
        p.begin_transaction()
        p.send_batch(topic, [(None, b"r%d-%d" % (round_, i), i % 3) for i in range(30)])
        p.commit_transaction(timeout=60)
    p.close()
    delta = [tuple(x - y for x, y in zip(now, before.get(b, (0, 0, 0)))) for b, now in counters().items()]
    assert max(delta)[0] >= 1 + 4 * 2  # InitProducerId, then an add and an EndTxn per transaction
    assert sum(d[1] for d in delta) == 4 * 3 and sum(d[2] for d in delta) == 0
    meta = rafka.Admin(rafka_cluster).describe_topics([topic])[0]
    for part in meta["partitions"]:
        h = replica_handle(rafka_cluster.name, topic, part["partition"], part["leader"])
        v = ray.get(h.state.remote(), timeout=30)["txn_verification"]
        want = {"calls": 0, "taken": 0, "stale": 0, "tokens_taken": 4, "tokens_stale": 0, "tokens_bad": 0}
        assert v == want, (part["partition"], v)
    got = read(rafka_cluster, topic, 3, "read_committed", until=b"r3-29")
    assert len(got) == 4 * 30 and len(set(got)) == len(got)
