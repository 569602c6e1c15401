"""A real Kafka transactional client that dies, on its own 3-broker cluster (``failover_cluster``: listeners on
loopback, a dead broker fenced after 4 s, timed-out transactions checked every 500 ms): the client's own
process is SIGKILLed with its transaction open, and the coordinator aborts it at its timeout, until when
read_committed waits at its first offset.

Coordinator failures under a plain transactional producer are in test_wire_txn_failover.py. A
consume-transform-produce loop across the SIGKILL of the group coordinator's broker is on branch
``wip/wire-eos-hang``: in 1 of ~8 runs librdkafka's send_offsets_to_transaction never returned after the
failover, its TxnOffsetCommit never sent (nothing of it reached ``__consumer_offsets``), as in librdkafka's
open bugs #5511 (a group coordinator that left the metadata stays cached) and #5456 (the call's timeout is
not checked)."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

import rafka
from rafka import TopicPartition
from rafka.admin.txn_admin import describe_transaction

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

HANG_TOPIC = "wire-txn-hang"
CLIENT = """
import sys, time
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[2], "transaction.timeout.ms": 3000})
p.init_transactions(30)
p.begin_transaction()
for i in range(20):
    p.produce(sys.argv[3], value=b"hung-%d" % i, partition=0)
assert p.flush(30) == 0
print("open", flush=True)
time.sleep(600)
"""


def test_transactional_client_process_sigkilled_mid_transaction_is_aborted_by_its_timeout(failover_cluster):
    """A confluent-kafka transactional producer's own process is SIGKILLed with its transaction open and its
    records on the leader (a client crash). Until the coordinator aborts it at its transaction.timeout.ms
    (3 s), read_committed stops at its first offset (the LSO), even for the records other producers commit
    after it; then they show, and the dead client's records never do."""
    import subprocess
    import sys

    from confluent_kafka import Producer

    cluster = failover_cluster
    admin = rafka.Admin(cluster)
    admin.create_topic(HANG_TOPIC, 1, 3, {"min.insync.replicas": "2"})
    bootstrap = cluster.bootstrap_servers
    tid = "hang-" + uuid.uuid4().hex[:8]
    before = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(10):
        before.produce(HANG_TOPIC, value=b"before-%d" % i, partition=0)
    assert before.flush(30) == 0
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, bootstrap, tid, HANG_TOPIC], stdout=subprocess.PIPE, text=True
    )
    try:
        assert client.stdout.readline().strip() == "open", "the client did not open its transaction"
        client.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        client.wait(10)
    finally:
        client.kill()
    hung = describe_transaction(admin, tid)
    assert hung["state"] == "Ongoing", hung
    for i in range(10):
        before.produce(HANG_TOPIC, value=b"after-%d" % i, partition=0)
    assert before.flush(30) == 0

    # while the dead client's transaction is open: read_committed ends at its first offset
    c = rafka.Consumer(cluster, auto_offset_reset="earliest", isolation_level="read_committed")
    c.assign([TopicPartition(HANG_TOPIC, 0)])
    seen: list[bytes] = []
    first_after = shown_ms = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(seen) < 20:
        for recs in c.poll(timeout_ms=200).values():
            seen.extend(r.value for r in recs)
        if first_after is None and any(v.startswith(b"after-") for v in seen):
            first_after, shown_ms = time.monotonic() - killed_at, time.time() * 1000
    c.close()
    assert seen == [b"before-%d" % i for i in range(10)] + [b"after-%d" % i for i in range(10)], seen
    # not before the transaction's timeout, counted from its start at the coordinator
    assert first_after is not None and shown_ms >= hung["transaction_start_time_ms"] + 3000, (
        f"records behind an open transaction showed {shown_ms - hung['transaction_start_time_ms']:.0f} ms after it began"
    )
    state = describe_transaction(admin, tid)["state"]
    assert state in ("CompleteAbort", "Empty"), state
    print(f"wire txn hang: the killed client's transaction aborted, later records visible {first_after:.1f} s after")
