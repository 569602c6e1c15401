"""Replication through real brokers, controller and replica actors on Ray; faults are real (ray.kill,
StopReplica, broker kills and restarts)."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest
import ray
from ray.exceptions import GetTimeoutError, RayActorError
from support import batch, clusters, full_isr, leader_of, part, read_values, rstate, wait_until

from protocol import errors as E
from protocol.control_messages import LeaderAndIsrPartitionState, StopReplicaRequest
from protocol.messages import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest, ProduceRequest
from storage.records import decode_records

pytestmark = pytest.mark.cluster

LAG_MS = 1500


@pytest.fixture
def make_cluster(ray_cluster, cluster_name, tmp_path):
    with clusters(cluster_name, str(tmp_path)) as start:
        yield lambda lag_ms=LAG_MS: start(config={"replica.lag.time.max.ms": lag_ms})


@pytest.fixture
def cluster(make_cluster):
    return make_cluster()


@pytest.fixture(scope="module")
def steady_cluster(ray_cluster, tmp_path_factory):
    """For tests that must not see an ISR shrink: on a loaded 2-core machine a follower can miss a short
    replica.lag.time.max.ms, and acks=all then answers NOT_ENOUGH_REPLICAS_AFTER_APPEND. These tests inject
    no fault and each writes only its own topic, so they share one cluster (one start instead of three)."""
    name = "st" + uuid.uuid4().hex[:10]
    with clusters(name, str(tmp_path_factory.mktemp("steady"))) as start:
        yield start(config={"replica.lag.time.max.ms": 30000})


def test_min_insync_replicas(cluster):
    """ISR below min.insync.replicas: acks=all is refused before the append (NOT_ENOUGH_REPLICAS); a
    produce already waiting when the ISR shrinks gets NOT_ENOUGH_REPLICAS_AFTER_APPEND."""
    ch = cluster
    ch.create_topic("mir", 1, 3, {"min.insync.replicas": "3"})
    b, h = full_isr(ch, "mir")
    assert ray.get(h.produce.remote(ProduceRequest(batch([b"ok"]), -1, 5000)))["error_code"] == 0
    victim = next(x for x in part(ch, "mir")["replicas"] if x != b)
    # the follower's process freezes; its broker lives on (and would replace it only after
    # broker.session.timeout.ms, 9 s: the leader's lag check, 1.5 s, drops it from the ISR first)
    pid = rstate(ch.replica("mir", 0, victim))["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        _min_isr_with_a_frozen_follower(ch, h)
    finally:
        os.kill(pid, signal.SIGCONT)


def _min_isr_with_a_frozen_follower(ch, h):
    waiting = h.produce.remote(ProduceRequest(batch([b"in flight"]), -1, 20000))
    r = ray.get(waiting, timeout=30)
    assert r["error_code"] == E.NotEnoughReplicasAfterAppendError.code, r
    assert len(rstate(h)["isr"]) == 2
    r = ray.get(h.produce.remote(ProduceRequest(batch([b"refused"]), -1, 5000)))
    assert r["error_code"] == E.NotEnoughReplicasError.code, r
    assert ray.get(h.produce.remote(ProduceRequest(batch([b"acks=1 is fine"]), 1, 5000)))["error_code"] == 0
    # acks=1 answers after the leader's append; the HW covers the record once the one remaining ISR follower
    # has fetched it, and reads stop at the HW. The refused record must never appear.
    wait_until(
        lambda: read_values(h) == [b"ok", b"in flight", b"acks=1 is fine"],
        10,
        "the acks=1 record under the HW, the refused one never written",
    )
    assert read_values(h) == [b"ok", b"in flight", b"acks=1 is fine"]
    wait_until(
        lambda: sorted(part(ch, "mir")["isr"]) == sorted(rstate(h)["isr"]), 10, "controller metadata has the shrunk ISR"
    )


def test_isr_shrink_and_expand(cluster):
    """A follower that stops fetching leaves the ISR after replica.lag.time.max.ms (the leader asks the
    controller); acks=all waits for that, then succeeds with ISR 2 >= min 2; the follower's broker
    restarts, its replica catches up from disk and rejoins the ISR."""
    ch = cluster
    ch.create_topic("isr", 1, 3, {"min.insync.replicas": "2"})
    b, h = full_isr(ch, "isr")
    assert ray.get(h.produce.remote(ProduceRequest(batch([b"v0"]), -1, 5000)))["error_code"] == 0
    victim = next(x for x in part(ch, "isr")["replicas"] if x != b)
    # the follower's process freezes (SIGSTOP): it stops fetching without dying (a dead replica is reported
    # by its broker at once; a frozen one only after broker.session.timeout.ms, 9 s here, longer than the lag)
    pid = rstate(ch.replica("isr", 0, victim))["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        r = ray.get(h.produce.remote(ProduceRequest(batch([b"v1"]), -1, 20000)), timeout=30)
        waited = time.monotonic() - t0
        # checked while the follower is still frozen: once it runs again it catches up and may rejoin at once
        st = rstate(h)
        controller_isr = part(ch, "isr")["isr"]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert r["error_code"] == 0, r
    assert waited >= LAG_MS / 1000 * 0.5, waited  # answered only once the lagging follower was dropped
    assert victim not in st["isr"] and len(st["isr"]) == 2
    assert victim not in controller_isr  # the leader applies a shrink only after the controller committed it
    for i in range(2, 6):
        assert ray.get(h.produce.remote(ProduceRequest(batch([b"v%d" % i]), -1, 5000)))["error_code"] == 0
    ch.kill_broker(victim)
    ch.restart_broker(victim)
    wait_until(lambda: victim in rstate(h)["isr"], 30, "restarted follower back in the ISR")
    wait_until(lambda: victim in part(ch, "isr")["isr"], 10, "controller metadata has it")
    fst = wait_until(
        lambda: (lambda s: s if s["log_end_offset"] == 6 else None)(rstate(ch.replica("isr", 0, victim))),
        10,
        "follower LEO",
    )
    assert fst["role"] == "follower" and fst["leader"] == b


def test_high_watermark_hides_unreplicated_and_follower_truncates(make_cluster):
    """Followers cut off (StopReplica without delete: their brokers and ISR membership stay); the
    leader takes acks=1 writes consumers must not see; it dies, an ISR follower is elected; when the
    old leader returns as follower, its unreplicated tail is truncated by leader epoch. The lag limit
    is long here so the cut-off followers stay in the ISR, as in a short network partition."""
    ch = make_cluster(lag_ms=60000)
    ch.create_topic("trunc", 1, 3, {"min.insync.replicas": "1"})
    a, ha = full_isr(ch, "trunc")
    assert ray.get(ha.produce.remote(ProduceRequest(batch([b"r0", b"r1"]), -1, 5000)))["error_code"] == 0
    others = [x for x in part(ch, "trunc")["replicas"] if x != a]
    cepoch = ch.metadata()["controller_epoch"]
    for x in others:
        res = ray.get(ch.broker(x).stop_replica.remote(StopReplicaRequest(cepoch, [("trunc", 0)], False)))
        assert res["error_code"] == 0, res
    for v in (b"u0", b"u1", b"u2"):
        assert ray.get(ha.produce.remote(ProduceRequest(batch([v]), 1, 5000)))["error_code"] == 0
    st = rstate(ha)
    assert (st["log_end_offset"], st["high_watermark"]) == (5, 2)
    assert read_values(ha) == [b"r0", b"r1"]  # nothing above the HW
    assert ray.get(ha.list_offsets.remote(ListOffsetsRequest(-1)))["offset"] == 2
    waiting = ha.fetch.remote(FetchRequest(2, 1 << 20, 300, 1))  # a consumer at the HW gets nothing
    assert ray.get(waiting)["records"] == b""
    old_epoch = st["leader_epoch"]
    ch.kill_broker(a)
    new = wait_until(
        lambda: (lambda p: p["leader"] if p["leader"] in others else None)(part(ch, "trunc")),
        30,
        "a new leader from the ISR",
    )
    hn = wait_until(lambda: ch.replica("trunc", 0, new), 30, "new leader replica created")
    wait_until(lambda: rstate(hn)["role"] == "leader", 30, "new leader running")
    assert rstate(hn)["leader_epoch"] > old_epoch
    fenced = ray.get(hn.fetch.remote(FetchRequest(0, 1000, 0, 1, -1, old_epoch)))  # a client with the old epoch
    assert fenced["error_code"] == E.FencedLeaderEpochError.code
    r = wait_until(
        lambda: (lambda r: r if r["error_code"] == 0 else None)(
            ray.get(hn.produce.remote(ProduceRequest(batch([b"n0"]), 1, 5000)))
        ),
        30,
        "produce to the new leader",
    )
    assert r["base_offset"] == 2  # offsets 2.. are reused: u* never committed
    ch.restart_broker(a)
    ha2 = wait_until(lambda: ch.replica("trunc", 0, a), 30, "old leader's replica back")
    wait_until(
        lambda: rstate(ha2)["role"] == "follower" and rstate(ha2)["log_end_offset"] == 3,
        30,
        "old leader truncated and caught up",
    )
    assert rstate(ha2)["leader"] == new
    wait_until(lambda: a in rstate(hn)["isr"], 30, "old leader rejoins the ISR")
    assert read_values(hn) == [b"r0", b"r1", b"n0"]
    # preferred leader election gives the partition back to the old leader (replicas[0]); reading its
    # own log shows the divergent tail is gone
    assert part(ch, "trunc")["replicas"][0] == a
    res = ray.get(ch.controller().elect_leaders.remote([("trunc", 0)], 0))
    wait_until(lambda: part(ch, "trunc")["leader"] == a, 30, f"preferred election {res}")
    wait_until(
        lambda: rstate(ha2)["role"] == "leader" and rstate(ha2)["high_watermark"] == 3, 30, "old leader leads again"
    )
    assert read_values(ha2) == [b"r0", b"r1", b"n0"]


class IdempotentDriver(threading.Thread):
    """acks=all stream of 5-record batches with one producer id and consecutive sequences; every
    retriable failure (errors, a dead leader, metadata in flux) retries the same batch against the
    current leader, so retries never duplicate."""

    def __init__(self, ch, topic, pid):
        super().__init__(daemon=True)
        self.ch, self.topic, self.pid = ch, topic, pid
        self.acked: list[bytes] = []
        self.failures: list = []
        self.retries = 0
        self.stop_flag = threading.Event()
        self.handle = None

    def _leader(self):
        p = part(self.ch, self.topic)
        if p["leader"] < 0:
            raise ValueError("no leader")
        return self.ch.replica(self.topic, 0, p["leader"])

    def run(self):
        seq = 0
        while not self.stop_flag.is_set():
            values = [b"m%06d" % (seq + k) for k in range(5)]
            payload = batch(values, self.pid, 0, seq)
            deadline = time.monotonic() + 90
            while True:
                if time.monotonic() > deadline:
                    self.failures.append(("gave up", seq))
                    return
                try:
                    if self.handle is None:
                        self.handle = self._leader()
                    r = ray.get(self.handle.produce.remote(ProduceRequest(payload, -1, 5000)), timeout=15)
                except (RayActorError, GetTimeoutError, ValueError):
                    self.handle = None
                    self.retries += 1
                    time.sleep(0.05)
                    continue
                if r["error_code"] == 0:
                    self.acked += values
                    break
                if not E.for_code(r["error_code"]).retriable:
                    self.failures.append(r)
                    return
                self.handle = None
                self.retries += 1
                time.sleep(0.05)
            seq += 5


@pytest.mark.slow
def test_leader_failover_keeps_every_acknowledged_record(cluster):
    ch = cluster
    ch.create_topic("fo", 1, 3, {"min.insync.replicas": "2"})
    leader, _ = full_isr(ch, "fo")
    pid = ray.get(ch.broker(0).init_producer_id.remote())["producer_id"]
    d = IdempotentDriver(ch, "fo", pid)
    d.start()
    wait_until(lambda: len(d.acked) >= 200 or bool(d.failures), 60, "first acks")
    assert not d.failures, d.failures
    acked_before = len(d.acked)
    ch.kill_broker(leader)  # mid-stream: the driver has a produce in flight most of the time
    t0 = time.monotonic()
    wait_until(lambda: len(d.acked) >= acked_before + 200 or bool(d.failures), 90, "acks after failover")
    recovered = time.monotonic() - t0
    d.stop_flag.set()
    d.join(60)
    assert not d.failures, d.failures
    new_leader, h = leader_of(ch, "fo")
    assert new_leader != leader
    st = wait_until(
        lambda: (lambda s: s if s["high_watermark"] == s["log_end_offset"] else None)(rstate(h)), 30, "HW at LEO"
    )
    values = read_values(h)
    assert values == d.acked, (len(values), len(d.acked), d.retries)  # all, once, in order
    assert len(set(values)) == len(values)
    assert st["leader_epoch"] > 0
    # the old leader's broker comes back: its replica rejoins as a follower with the same log
    ch.restart_broker(leader)
    wait_until(lambda: leader in rstate(h)["isr"], 60, "old leader back in the ISR")
    old = rstate(ch.replica("fo", 0, leader))
    assert old["role"] == "follower" and old["log_end_offset"] == st["log_end_offset"]
    print(f"failover: {len(d.acked)} records acked, {d.retries} retries, recovered in {recovered:.2f}s")


# -- no faults: one shared cluster (last in the module, so it runs beside no other cluster) ----------------
def test_produce_acks_and_fetch_round_trip(steady_cluster):
    ch = steady_cluster
    ch.create_topic("rt", 1, 3, {"min.insync.replicas": "2", "max.message.bytes": "2000"})
    b, h = full_isr(ch, "rt")
    t0 = int(time.time() * 1000)
    r1 = ray.get(h.produce.remote(ProduceRequest(batch([b"a", b"b"], ts=t0), 1, 5000)))
    assert (r1["error_code"], r1["base_offset"]) == (0, 0)
    r2 = ray.get(h.produce.remote(ProduceRequest(batch([b"c"], ts=t0 + 10), -1, 5000)))
    assert (r2["error_code"], r2["base_offset"]) == (0, 2)
    st = rstate(h)
    assert st["high_watermark"] == st["log_end_offset"] == 3  # acks=all answered after the HW passed
    r0 = ray.get(h.produce.remote(ProduceRequest(batch([b"d"], ts=t0 + 20), 0, 5000)))
    assert r0["error_code"] == 0
    # acks=0 is answered before followers have it: the consumer sees it once the HW passes it
    assert wait_until(
        lambda: (lambda v: v if len(v) == 4 else None)(read_values(h)), 10, "acks=0 record replicated"
    ) == [b"a", b"b", b"c", b"d"]
    # list offsets: earliest, latest (= HW), by timestamp; offsets for leader epoch
    lo = lambda ts: ray.get(h.list_offsets.remote(ListOffsetsRequest(ts)))  # noqa: E731
    assert lo(-2)["offset"] == 0 and lo(-1)["offset"] == 4
    assert lo(t0 + 5)["offset"] == 2 and lo(t0 + 1000)["offset"] == -1
    e = ray.get(h.offset_for_leader_epoch.remote(OffsetForLeaderEpochRequest(st["leader_epoch"])))
    assert (e["error_code"], e["leader_epoch"], e["end_offset"]) == (0, st["leader_epoch"], 4)
    # errors come back as codes, the actor survives them
    code = lambda r: r["error_code"]  # noqa: E731
    assert code(ray.get(h.produce.remote(ProduceRequest(batch([b"x"]), 2, 5000)))) == E.InvalidRequiredAcksError.code
    assert code(ray.get(h.produce.remote(ProduceRequest(batch([b"x" * 3000]), 1, 5000)))) == E.MessageTooLargeError.code
    bad = bytearray(batch([b"corrupt me"]))
    bad[-3] ^= 0xFF
    assert code(ray.get(h.produce.remote(ProduceRequest(bytes(bad), 1, 5000)))) == E.CorruptMessageError.code
    assert code(ray.get(h.produce.remote(ProduceRequest(b"\x00" * 10, 1, 5000)))) == E.CorruptMessageError.code
    # anything but the method's typed request is INVALID_REQUEST with a clear message, never a crash
    wrong = [
        ("produce", 5, "produce takes one ProduceRequest (protocol.messages), got int 5"),
        ("fetch", 0, "fetch takes one FetchRequest (protocol.messages), got int 0"),
        ("list_offsets", {"timestamp": -1}, "list_offsets takes one ListOffsetsRequest"),
        ("offset_for_leader_epoch", ListOffsetsRequest(-1), "got ListOffsetsRequest"),
        ("fetch", FetchRequest("0"), "FetchRequest.fetch_offset must be an int, got str '0'"),
    ]
    for method, arg, says in wrong:
        r = ray.get(getattr(h, method).remote(arg))
        assert r["error_code"] == E.InvalidRequestError.code == 42 and says in r["error_message"], r
    assert ray.get(h.produce.remote(5))["base_offset"] == -1  # the answer keeps the response's shape
    assert ray.get(h.fetch.remote(0))["records"] == b""
    epoch = st["leader_epoch"]
    assert code(ray.get(h.fetch.remote(FetchRequest(0, 1000, 0, 1, -1, epoch + 1)))) == E.UnknownLeaderEpochError.code
    assert code(ray.get(h.list_offsets.remote(ListOffsetsRequest(-1, epoch + 1)))) == E.UnknownLeaderEpochError.code
    assert code(ray.get(h.fetch.remote(FetchRequest(99, 1000)))) == E.OffsetOutOfRangeError.code
    follower = next(x for x in part(ch, "rt")["replicas"] if x != b)
    fh = ch.replica("rt", 0, follower)
    assert code(ray.get(fh.produce.remote(ProduceRequest(batch([b"x"]), 1, 5000)))) == E.NotLeaderOrFollowerError.code
    assert code(ray.get(fh.fetch.remote(FetchRequest(0, 1000)))) == E.NotLeaderOrFollowerError.code
    # a stale LeaderAndIsr (older leader epoch) is ignored
    stale = LeaderAndIsrPartitionState(
        **{k: st[k] for k in ("topic", "partition", "topic_id", "isr", "replicas")},
        leader=follower,
        leader_epoch=epoch - 1,
        partition_epoch=0,
        controller_epoch=1,
    )
    assert ray.get(h.become_follower.remote(stale))["ignored"] is True
    assert rstate(h)["role"] == "leader"
    # followers hold the same log
    wait_until(
        lambda: rstate(fh)["log_end_offset"] == 4 and rstate(fh)["high_watermark"] == 4, 10, "follower caught up"
    )


def test_idempotent_retry_is_written_once(steady_cluster):
    ch = steady_cluster
    ch.create_topic("idem", 1, 3, {"min.insync.replicas": "2"})
    _, h = full_isr(ch, "idem")
    pid = ray.get(ch.broker(0).init_producer_id.remote())["producer_id"]
    assert pid >= 0
    first = batch([b"one", b"two"], pid, 0, 0)
    r1 = ray.get(h.produce.remote(ProduceRequest(first, -1, 5000)))
    r2 = ray.get(h.produce.remote(ProduceRequest(first, -1, 5000)))  # the retry of a batch whose answer was lost
    assert r1["error_code"] == r2["error_code"] == 0
    assert r2["base_offset"] == r1["base_offset"] == 0 and r2.get("duplicate") is True
    r3 = ray.get(h.produce.remote(ProduceRequest(batch([b"three"], pid, 0, 2), -1, 5000)))
    assert (r3["error_code"], r3["base_offset"]) == (0, 2)
    gap = ray.get(h.produce.remote(ProduceRequest(batch([b"gap"], pid, 0, 7), -1, 5000)))
    assert gap["error_code"] == E.OutOfOrderSequenceNumberError.code
    assert read_values(h) == [b"one", b"two", b"three"]
    assert rstate(h)["log_end_offset"] == 3


def test_delayed_fetch(steady_cluster):
    ch = steady_cluster
    ch.create_topic("df", 1, 3, {"min.insync.replicas": "2"})
    _, h = full_isr(ch, "df")
    assert ray.get(h.produce.remote(ProduceRequest(batch([b"first"]), -1, 5000)))["error_code"] == 0
    # nothing new: waits max_wait, returns empty
    t0 = time.monotonic()
    r = ray.get(h.fetch.remote(FetchRequest(1, 1 << 20, 400, 1)))
    assert r["records"] == b"" and r["error_code"] == 0
    assert 0.35 <= time.monotonic() - t0 < 10
    # new data wakes a parked fetch long before max_wait
    t0 = time.monotonic()
    parked = h.fetch.remote(FetchRequest(1, 1 << 20, 30000, 1))
    time.sleep(0.3)
    assert ray.get(h.produce.remote(ProduceRequest(batch([b"second"]), -1, 5000)))["error_code"] == 0
    r = ray.get(parked, timeout=40)
    took = time.monotonic() - t0
    assert [x.value for x in decode_records(r["records"])] == [b"second"]
    assert 0.25 <= took < 15, took  # woken by the append, far from the 30 s max_wait
    # min_bytes not reached: waits the whole max_wait, then answers with what there is
    t0 = time.monotonic()
    parked = h.fetch.remote(FetchRequest(2, 1 << 20, 1000, 1 << 20))
    time.sleep(0.1)
    assert ray.get(h.produce.remote(ProduceRequest(batch([b"small"]), -1, 5000)))["error_code"] == 0
    r = ray.get(parked, timeout=15)
    assert [x.value for x in decode_records(r["records"])] == [b"small"]
    assert time.monotonic() - t0 >= 0.9
    # a consumer never sees data above the HW even from a parked fetch: acks=1 writes get replicated
    # first (HW), then returned
    parked = h.fetch.remote(FetchRequest(3, 1 << 20, 5000, 1))
    ray.get(h.produce.remote(ProduceRequest(batch([b"later"]), 1, 5000)))
    r = ray.get(parked, timeout=15)
    assert [x.value for x in decode_records(r["records"])] == [b"later"]
    assert r["high_watermark"] == 4
