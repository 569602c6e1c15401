"""Exactly-once under faults (real Ray, SIGKILLed processes): a consume-transform-produce loop while a nemesis
kills random brokers, and a transactional producer killed with its transaction open.

The fault suites' shared 3-broker cluster (``fault_cluster``, tests/client/faults/conftest.py): ``__transaction_state``
and ``__consumer_offsets`` have one partition each (few actors), timed-out transactions are checked every
300 ms, dead followers leave the ISR after 3 s."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from support import wait_until

import rafka
from jobs.eos_copy import Copier, read_all
from rafka.tools.nemesis import Nemesis

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def eos_cluster(fault_cluster):
    return fault_cluster


def transform(value: bytes) -> bytes:
    return value.upper() + b"|%d" % len(value)


def test_consume_transform_produce_under_random_broker_kills_is_exactly_once(eos_cluster):
    admin = rafka.Admin(eos_cluster)
    suffix = uuid.uuid4().hex[:6]
    src, dst, parts, n = "eos-in-" + suffix, "eos-out-" + suffix, 4, 2000
    for t in (src, dst):
        admin.create_topic(t, parts, 3, {"min.insync.replicas": "2"})
    plain = rafka.Producer(eos_cluster, linger_ms=5)
    for i in range(n):
        plain.send(src, key=b"k%02d" % (i % 40), value=b"k%02d:%05d" % (i % 40, i))
    plain.flush()
    plain.close()
    source = read_all(eos_cluster, src, parts, "read_uncommitted", n)
    assert sum(map(len, source.values())) == n

    copier = Copier(eos_cluster, src, dst, "eos-g-" + suffix, "eos-tx-" + suffix, transform, batch=60, poison_every=7)
    rng = random.Random(int(suffix, 16))
    nemesis = Nemesis(eos_cluster.name, eos_cluster.server, admin, dst, rng, down_s=2.0)
    faults: list = []
    done = threading.Event()

    def strike() -> None:  # three broker kills at random points of the copy, each restarted after 2 s
        for k in range(3):
            at = rng.uniform(k, k + 0.8) * n / 4
            while copier.stats.copied < at and not done.is_set():
                time.sleep(0.05)
            if done.is_set():
                return
            f = nemesis.inject("broker-kill")
            faults.append(f)
            nemesis.heal(f)

    thread = threading.Thread(target=strike, name="nemesis", daemon=True)

    def hold_the_tail(s) -> None:
        # every kill point is below 0.7 n: on a slow machine a broker restart can outlast the rest of the copy,
        # so the copy's last tenth waits (between transactions) until all three kills are in and healed
        while s.copied >= 0.9 * n and thread.is_alive():
            time.sleep(0.05)

    thread.start()
    try:
        stats = copier.run(n, timeout_s=150, on_commit=hold_the_tail)
    finally:
        done.set()
        thread.join(120)
        copier.close()
    assert not thread.is_alive()
    assert len(faults) == 3 and all(f.pids and f.healed_at for f in faults), faults
    assert stats.copied == n, stats

    out = read_all(eos_cluster, dst, parts, "read_committed", n)
    for p in range(parts):  # each partition: the transform of its input, once each, in order
        assert [v for _, v in out[p]] == [transform(v) for _, v in source[p]], p
        assert [k for k, _ in out[p]] == [k for k, _ in source[p]]
    everything = read_all(eos_cluster, dst, parts, "read_uncommitted", n + stats.poisoned_records)
    physical = sum(map(len, everything.values()))
    assert stats.poisoned_txns > 0
    assert n + stats.poisoned_records <= physical <= n + stats.poisoned_records + stats.failed_records, stats
    c = rafka.Consumer(eos_cluster, group_id="eos-g-" + suffix, isolation_level="read_committed")
    ends = c.end_offsets([rafka.TopicPartition(src, p) for p in range(parts)])
    assert {tp: c.committed(tp).offset for tp in ends} == ends  # progress committed with the output
    c.close()


KILLED_PRODUCER = """
import sys, time
import ray._private.services as services
services.resolve_ip_for_localhost = lambda host: host  # the session's Ray listens on loopback only
import rafka
h = rafka.connect(sys.argv[1], cluster=sys.argv[2])
p = rafka.Producer(h, transactional_id=sys.argv[3], transaction_timeout_ms=2000, linger_ms=1)
p.init_transactions(timeout=90)
p.begin_transaction()
for i in range(20):
    p.send(sys.argv[4], value=b"doomed%d" % i, partition=i % 2)
p.flush()
print("open", p.producer_id, flush=True)
time.sleep(600)  # SIGKILLed here, its transaction open
"""


def test_a_producer_killed_mid_transaction_is_aborted_by_the_timeout_and_never_read(eos_cluster, ray_cluster):
    admin = rafka.Admin(eos_cluster)
    topic, t = "killed-" + uuid.uuid4().hex[:6], "kill-tx-" + uuid.uuid4().hex[:6]
    admin.create_topic(topic, 2, 3)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_PRODUCER, ray_cluster.address, eos_cluster.name, t, topic],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()  # blocks until the transaction is open and its records written
        assert line.startswith("open"), proc.stderr.read() if proc.poll() is not None else line
        producer_id = int(line.split()[1])
        d = rafka.Admin(eos_cluster).describe_transactions([t])[0]
        assert d["state"] == "Ongoing" and d["producer_id"] == producer_id
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # no EndTxn, no close: the process is gone
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    plain = rafka.Producer(eos_cluster, linger_ms=1)
    for p in range(2):
        plain.send(topic, value=b"after%d" % p, partition=p).get(30)
    plain.close()
    assert sum(map(len, read_all(eos_cluster, topic, 2, "read_committed", 0, timeout_s=1).values())) == 0
    wait_until(lambda: admin.describe_transactions([t])[0]["state"] == "CompleteAbort", 60, "the timeout abort")
    committed = read_all(eos_cluster, topic, 2, "read_committed", 2)
    assert [v for p in range(2) for _, v in committed[p]] == [b"after0", b"after1"]
    everything = read_all(eos_cluster, topic, 2, "read_uncommitted", 22)
    assert sum(map(len, everything.values())) == 22  # the doomed records are there, aborted
