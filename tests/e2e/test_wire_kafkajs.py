"""kafkajs 2.2.4 (npm, pure JavaScript; tests/e2e/kafkajs/package.json and its package-lock.json) against the
shared 3-broker cluster's Kafka listeners (tests/e2e/conftest.py). The test installs it itself with
``npm ci`` into tests/e2e/kafkajs/node_modules (gitignored): no npm or no registry fails the test.

tests/e2e/kafkajs/roundtrip.js creates a topic through the kafkajs admin (3 partitions, RF 3,
min.insync.replicas 2), produces keyed records with an idempotent producer and acks -1, consumes them in a
group with a commit per record, reads the committed offsets and the group back through the admin, and
prints a JSON summary; a second run deletes the topic. The records are checked exactly (every record
once, dense offsets per partition, one key -> one partition, per-key order), and against rafka's own
clients: the Python consumer reads the same records at the same offsets, and rafka's Admin sees the
offsets the kafkajs member committed (one group coordinator for both). Its ``txn`` run does kafkajs's
transactions (commit, abort, offsets in a transaction, fencing by a second instance) at kafkajs's own API
versions, which no other client here uses (v1 of InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit and EndTxn)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

import rafka
from rafka import TopicPartition

KAFKAJS = Path(__file__).parent / "kafkajs"
N = 200
PARTITIONS = 3


@pytest.fixture(scope="module")
def node() -> str:
    """node, with kafkajs installed from the lock file (``npm ci``); fails when npm cannot install it."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "the kafkajs tests need Node.js and npm (Node 20)"
    r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=KAFKAJS, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"npm ci failed (registry unreachable?):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    assert (KAFKAJS / "node_modules" / "kafkajs" / "package.json").exists()
    return node


def run_script(node: str, *args: str, timeout: float = 150) -> dict:
    r = subprocess.run(
        [node, str(KAFKAJS / "roundtrip.js"), *args], cwd=KAFKAJS, capture_output=True, text=True, timeout=timeout
    )
    assert r.returncode == 0, f"roundtrip.js {args[0]} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_kafkajs_admin_idempotent_produce_group_consume_commit_and_delete(node, bootstrap, e2e_cluster, e2e_admin):
    topic = "kjs-" + uuid.uuid4().hex[:6]
    group = "kjs-g-" + uuid.uuid4().hex[:6]
    t0 = time.monotonic()
    try:
        s = run_script(node, "roundtrip", bootstrap, topic, group, str(N))
        took = time.monotonic() - t0

        assert s["created"] is True and s["listed"] is True
        assert sorted(p["partition"] for p in s["partitions"]) == list(range(PARTITIONS))
        assert all(len(p["replicas"]) == 3 and p["leader"] in p["replicas"] for p in s["partitions"])
        assert e2e_admin.describe_configs(topic)["min.insync.replicas"] == "2"
        assert s["acks"] and all(a["errorCode"] == 0 for a in s["acks"])

        sent = [(m["key"], m["value"]) for m in s["sent"]]
        got: dict[int, list[tuple[str, str, int]]] = defaultdict(list)
        for m in s["consumed"]:
            got[m["partition"]].append((m["key"], m["value"], m["offset"]))
        # exactly what was sent, once each, dense offsets, one key -> one partition, per-key order
        assert sorted((k, v) for recs in got.values() for k, v, _ in recs) == sorted(sent)
        for recs in got.values():
            assert [o for _, _, o in recs] == list(range(len(recs)))
        where = defaultdict(set)
        for p, recs in got.items():
            for k, _, _ in recs:
                where[k].add(p)
        assert all(len(ps) == 1 for ps in where.values())
        for k, (p,) in where.items():
            assert [v for kk, v, _ in got[p] if kk == k] == [v for kk, v in sent if kk == k]

        # the group: one kafkajs member, its commits (offset + 1 of each record) as the coordinator holds them
        assert s["group"] == [{"groupId": group, "state": "Stable", "protocol": "RoundRobinAssigner", "members": 1}]
        counts = {p: len(got.get(p, [])) for p in range(PARTITIONS)}
        assert {c["partition"]: c["offset"] for c in s["committed"]} == counts
        offsets = e2e_admin.list_consumer_group_offsets(group)
        assert {tp.partition: off for tp, off in offsets.items() if tp.topic == topic} == {
            p: n for p, n in counts.items() if n
        }

        # rafka's Python consumer reads the same records at the same offsets
        c = rafka.Consumer(e2e_cluster, auto_offset_reset="earliest")
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        mine = []
        deadline = time.monotonic() + 30
        while len(mine) < N and time.monotonic() < deadline:
            for recs in c.poll(500).values():
                mine += [(r.partition, r.key.decode(), r.value.decode(), r.offset) for r in recs]
        c.close()
        assert sorted(mine) == sorted((p, k, v, o) for p, recs in got.items() for k, v, o in recs)

        deleted = run_script(node, "delete", bootstrap, topic, timeout=90)
        assert deleted == {"deleted": True}
        deadline = time.monotonic() + 20
        while topic in e2e_admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert topic not in e2e_admin.list_topics()
        print(f"kafkajs round trip: {took:.1f} s")
    finally:
        if topic in e2e_admin.list_topics():
            e2e_admin.delete_topics([topic])


def test_kafkajs_transactions_commit_abort_offsets_and_fencing(node, bootstrap, e2e_cluster, e2e_topic):
    """kafkajs's transactions (its own versions: InitProducerId 1, AddPartitionsToTxn 1, AddOffsetsToTxn 1,
    TxnOffsetCommit 1, EndTxn 1): a committed transaction with the group's offsets, an aborted one with other
    offsets, a second committed one, then a producer of the same transactional id fences the first, whose
    next transaction fails. kafkajs's read_committed consumer and rafka's read exactly the two committed
    transactions; read_uncommitted also shows the aborted one; the group holds the committed offset only."""
    topic = e2e_topic(PARTITIONS, 3)
    group = "kjs-tx-" + uuid.uuid4().hex[:6]
    n = 60
    s = run_script(node, "txn", bootstrap, topic, group, str(n))
    committed = {f"kjs-c{k}-{i}" for k in (1, 2) for i in range(n)}
    aborted = {f"kjs-ab-{i}" for i in range(n)}
    values = [m["value"] for m in s["consumed"]]
    assert sorted(values) == sorted(committed), "kafkajs's read_committed consumer saw other than the commits"
    assert all(m["partition"] == int(m["value"].rsplit("-", 1)[1]) % 3 for m in s["consumed"])
    # fenced: PRODUCER_FENCED, answered as INVALID_PRODUCER_EPOCH to AddPartitionsToTxn v1 (before KIP-588), as Kafka does
    assert s["fenced"] == "INVALID_PRODUCER_EPOCH", s["fenced"]
    assert s["committed"] == [{"partition": p, "offset": 5 if p == 0 else -1} for p in range(PARTITIONS)]

    def read(isolation: str, want: int) -> list[str]:
        c = rafka.Consumer(e2e_cluster, auto_offset_reset="earliest", isolation_level=isolation)
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        got: list[str] = []
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            for recs in c.poll(300).values():
                got += [r.value.decode() for r in recs]
        c.close()
        return got

    assert sorted(read("read_committed", 2 * n)) == sorted(committed)
    uncommitted = read("read_uncommitted", 3 * n)
    assert set(uncommitted) >= committed | aborted
    assert not [v for v in uncommitted if v.startswith("kjs-zombie")], "the fenced producer's records were written"
