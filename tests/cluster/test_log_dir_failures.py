"""A broker with two ``log.dirs`` whose first fails under load from a real Kafka client: a small tmpfs filled to the
brim (ENOSPC), and a loop-mounted ext4 shut down by EXT4_IOC_SHUTDOWN, after which the kernel answers every
operation on it with EIO (this kernel has no device-mapper, so dmsetup's ``error`` target is not available).

Each test starts 3 brokers; broker 0's first log dir is the small volume, its second a plain directory. Topic
``disk`` (RF 3, leader broker 0) lands in the small volume, topic ``steady`` (leader broker 0) in the other dir
(DescribeLogDirs through kafka-python shows where). A confluent-kafka idempotent producer (acks=all) sends to both.
When the volume fails: ``disk``'s replica on broker 0 goes offline (DescribeLogDirs: KAFKA_STORAGE_ERROR for the
dir), its leadership moves to another broker, librdkafka sees KAFKA_STORAGE_ERROR then NOT_LEADER_OR_FOLLOWER and
follows, every record is delivered; ``steady`` keeps its leader on broker 0 and takes writes. Then the volume is
made usable (the tmpfs's ballast file deleted; the ext4, on which broker 0 first starts again with that dir offline,
unmounted and mounted again) and broker 0 restarted: its
replica recovers, rejoins the ISR and, elected leader again, serves every acknowledged record, once, in order.
After the tmpfs one, AlterReplicaLogDirs (kafka-python) moves ``steady``'s replica on broker 0 into the tmpfs.
Every mount and loop device is removed in a finally, on failure too. Root is needed for mount and losetup."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import struct
import subprocess
import time
import uuid
from collections import defaultdict

import pytest
import ray
from support import SMALL_INTERNAL_TOPICS, wait_until

import rafka

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2  # as a disk that vanishes: nothing more reaches it, the journal is not flushed
VALUE = 20 * 1024
STORAGE_ERROR, NOT_LEADER = 56, 6


def run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def unmount(path: str, wait_s: float = 30.0) -> None:
    """Unmount ``path`` once no process holds a file in it (a killed broker's processes take a moment to go);
    after ``wait_s`` detach it lazily (the cleanup of a failed test must not leave it mounted)."""
    deadline = time.monotonic() + wait_s
    while subprocess.run(["mountpoint", "-q", path]).returncode == 0:
        if subprocess.run(["umount", path], capture_output=True).returncode == 0:
            return
        if time.monotonic() > deadline:
            subprocess.run(["umount", "-l", path], check=True)
            return
        time.sleep(0.5)


@contextlib.contextmanager
def tmpfs(path: str, size: str):
    os.makedirs(path, exist_ok=True)
    run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path)
    try:
        yield path
    finally:
        unmount(path)


class LoopExt4:
    """An ext4 file system in ``image`` on a loop device, mounted at ``path``. ``remount`` mounts it again through a
    new loop device: a fresh superblock (the journal replayed) even when another mount namespace on this machine
    (another test's ``ip netns exec``) copied the first mount and keeps the old, shut-down superblock alive, which a
    mount of the same device would only join again."""

    def __init__(self, path: str, image: str):
        self.path, self.image, self.devices = path, image, []

    def create(self, size_mb: int) -> None:
        os.makedirs(self.path, exist_ok=True)
        with open(self.image, "wb") as f:
            f.truncate(size_mb << 20)
        run("mkfs.ext4", "-q", "-F", self.image)
        self._attach()

    def _attach(self) -> None:
        dev = run("losetup", "-f", "--show", self.image)
        self.devices.append(dev)
        run("mount", dev, self.path)

    def remount(self) -> None:
        unmount(self.path)
        self._attach()

    def close(self) -> None:
        try:
            unmount(self.path)
        finally:
            for dev in self.devices:
                subprocess.run(["losetup", "-d", dev])
            # a device still in use (a lazy unmount, a copied mount) is detached when its last user goes
            deadline = time.monotonic() + 30
            while self.devices and run("losetup", "-j", self.image) and time.monotonic() < deadline:
                time.sleep(0.5)
            if os.path.exists(self.image):
                os.remove(self.image)


@contextlib.contextmanager
def loop_ext4(path: str, image: str, size_mb: int):
    vol = LoopExt4(path, image)
    try:
        vol.create(size_mb)
        yield vol
    finally:
        vol.close()


def shut_down_ext4(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def start_cluster(tmp_path, first_dir: str):
    other = str(tmp_path / "b0-second")
    return rafka.LocalCluster(
        brokers=3,
        name="ld" + uuid.uuid4().hex[:8],
        data_dir=tmp_path / "data",
        broker_config={
            **SMALL_INTERNAL_TOPICS,
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "replica.lag.time.max.ms": 2000,
            "broker.session.timeout.ms": 4000,
            "broker.heartbeat.interval.ms": 500,
            "broker.0.log.dirs": f"{first_dir},{other}",
            # leadership moves only when the test moves it (the controller's balancer would hand it back)
            "auto.leader.rebalance.enable": "false",
            "replica.auto.balance.enable": "false",
        },
    )


def log_dirs_of(bootstrap: str, broker: int) -> dict[str, dict]:
    """DescribeLogDirs of ``broker`` through kafka-python: ``{log_dir: {error_code, total, usable, parts}}``."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        (answer,) = admin.describe_log_dirs(brokers=[broker])
    finally:
        admin.close()
    out = {}
    for d in answer["log_dirs"]:
        parts = {(t["name"], p["partition_index"]): p["partition_size"] for t in d["topics"] for p in t["partitions"]}
        out[d["log_dir"]] = {
            "error_code": d["error_code"],
            "total": d.get("total_bytes"),
            "usable": d.get("usable_bytes"),
            "parts": parts,
        }
    return out


def leaders(admin, topic: str) -> tuple[int, tuple[int, ...]]:
    p = admin.describe_topics([topic])[0]["partitions"][0]
    return p["leader"], tuple(p["isr"])


def read_all(bootstrap: str, topic: str, expected: int) -> list[tuple[bytes, int]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[tuple[bytes, int]] = []
    deadline = time.monotonic() + 60
    while len(got) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.value()[:16].rstrip(b"."), m.offset()))
    c.close()
    return got


def check_acknowledged(got: list[tuple[bytes, int]], ok: dict[bytes, int]) -> None:
    ids = [v for v, _ in got]
    assert len(ids) == len(set(ids)), "a record is in the log twice"
    assert [o for _, o in got] == list(range(len(got))), "offsets are not dense"
    where = dict(got)
    lost = [v for v in ok if v not in where]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}"
    assert all(where[v] == o for v, o in ok.items()), "a record is not at the offset its delivery report gave"
    seq = [int(v.split(b"-")[1]) for v in ids]
    assert seq == sorted(seq), "the producer's order is broken"


def produce_through_failure(bootstrap, fail, fail_at: int, n: int):
    """Send ``n`` records of VALUE bytes to ``disk`` and one in ten to ``steady``; ``fail()`` when ``fail_at`` were
    acknowledged (None: the volume fills by itself). -> (ok per topic {id: offset}, failed, librdkafka's lines)."""
    from confluent_kafka import Producer

    lines = Lines()
    logger = logging.getLogger("ld-producer-" + uuid.uuid4().hex[:4])
    logger.addHandler(lines)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    ok: dict[str, dict[bytes, int]] = defaultdict(dict)
    failed: list = []
    acked_at: list[float] = []  # when each record of ``disk`` was acknowledged

    def report(err, msg):
        ident = msg.value()[:16].rstrip(b".")
        if err is None:
            ok[msg.topic()][ident] = msg.offset()
            if msg.topic() == "disk":
                acked_at.append(time.monotonic())
        else:
            failed.append((msg.topic(), ident, err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 200000,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            "debug": "msg,protocol",
        },
        logger=logger,
    )
    failed_at = None
    for i in range(n):
        value = (b"d-%d" % i).ljust(16, b".") + os.urandom(VALUE - 16)
        producer.produce("disk", value=value, on_delivery=report)
        if i % 10 == 0:
            producer.produce("steady", value=(b"s-%d" % i).ljust(16, b".") + b"x" * 100, on_delivery=report)
        if fail is not None and failed_at is None and i == fail_at:
            while len(ok["disk"]) < fail_at // 2:
                producer.poll(0.05)
            fail()
            failed_at = i
        producer.poll(0)
        time.sleep(0.01)
    assert producer.flush(90) == 0, "records still undelivered after 90 s"
    gaps = [b - a for a, b in zip(acked_at, acked_at[1:])]
    print(f"disk-0: {len(acked_at)} records acknowledged, the longest wait between two {max(gaps, default=0):.2f} s")
    return ok, failed, lines.lines


def check_failover(cluster, admin, bootstrap, first_dir, ok, failed, lines, errno_name: str) -> None:
    b0 = cluster.server.broker(0)
    seen = ray.get(b0.log_dir_failures_seen.remote(), timeout=30)
    print("broker 0's failed log dirs:", seen)
    print(
        f"the dir's replicas stopped {seen[0].get('stopped_ms')} ms and the controller answered replicas_offline "
        f"{seen[0].get('reported_ms')} ms after the failure was reported"
    )
    assert [(e["log_dir"], e["reported"]) for e in seen] == [(first_dir, True)]
    assert errno_name in seen[0]["why"] and ["disk", 0] in seen[0]["partitions"]
    assert ["steady", 0] not in seen[0]["partitions"]
    dirs = log_dirs_of(bootstrap, 0)
    print("DescribeLogDirs of broker 0 after the failure:", dirs)
    assert dirs[first_dir]["error_code"] == STORAGE_ERROR and dirs[first_dir]["parts"] == {}
    (second,) = [d for d in dirs if d != first_dir]
    assert dirs[second]["error_code"] == 0 and ("steady", 0) in dirs[second]["parts"]
    leader, isr = leaders(admin, "disk")
    assert leader not in (0, -1) and 0 not in isr, (leader, isr)  # moved away, broker 0 out of the ISR
    assert leaders(admin, "steady")[0] == 0  # the other dir keeps serving
    assert failed == [], f"{len(failed)} deliveries failed, e.g. {failed[:3]}"
    storage = [i for i, line in enumerate(lines) if "KAFKA_STORAGE_ERROR" in line or "Disk error" in line]
    not_leader = [i for i, line in enumerate(lines) if "NOT_LEADER" in line or "Not leader" in line]
    print("librdkafka:", *(lines[i] for i in storage[:2]), *(lines[i] for i in not_leader[:2]), sep="\n  ")
    assert storage, "librdkafka saw no KAFKA_STORAGE_ERROR"
    assert not_leader and max(not_leader) > min(storage), "no NOT_LEADER_OR_FOLLOWER after the storage error"


def check_restart(cluster, admin, bootstrap, first_dir, ok) -> None:
    t0 = time.monotonic()
    cluster.restart_broker(0)
    wait_until(lambda: 0 in leaders(admin, "disk")[1], 90, "broker 0 back in disk-0's ISR")
    print(f"broker 0 restarted and back in the ISR in {time.monotonic() - t0:.1f} s")
    dirs = log_dirs_of(bootstrap, 0)
    print("DescribeLogDirs of broker 0 after the restart:", dirs)
    assert dirs[first_dir]["error_code"] == 0 and dirs[first_dir]["parts"].get(("disk", 0), 0) > 0
    wait_until(lambda: 0 in leaders(admin, "steady")[1], 90, "broker 0 back in steady-0's ISR")
    # broker 0 (first in both assignments) leads again: its recovered log serves the reads below
    admin.elect_leaders([("disk", 0), ("steady", 0)], "preferred")
    wait_until(lambda: leaders(admin, "disk")[0] == leaders(admin, "steady")[0] == 0, 60, "broker 0 leading again")
    for topic in ("disk", "steady"):
        check_acknowledged(read_all(bootstrap, topic, len(ok[topic])), ok[topic])


def move_steady_into(bootstrap, admin, first_dir, ok) -> None:
    """AlterReplicaLogDirs through kafka-python: steady-0's leader replica on broker 0 moves to the first dir."""
    from kafka import KafkaAdminClient, TopicPartitionReplica
    from kafka.errors import NoError

    ka = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        t0 = time.monotonic()
        res = ka.alter_replica_log_dirs({TopicPartitionReplica("steady", 0, 0): first_dir})
    finally:
        ka.close()
    print(f"AlterReplicaLogDirs of steady-0 on broker 0: {res} in {time.monotonic() - t0:.2f} s")
    assert list(res.values()) == [NoError]
    dirs = log_dirs_of(bootstrap, 0)
    assert ("steady", 0) in dirs[first_dir]["parts"], dirs
    wait_until(lambda: leaders(admin, "steady")[0] == 0, 30, "broker 0 leading steady-0 from its new dir")
    check_acknowledged(read_all(bootstrap, "steady", len(ok["steady"])), ok["steady"])


def create_topics(admin, bootstrap, first_dir):
    admin.create_topic("disk", 1, 3, {"min.insync.replicas": "2"}, replica_assignment=[[0, 1, 2]])
    admin.create_topic("steady", 1, 3, {"min.insync.replicas": "2"}, replica_assignment=[[0, 2, 1]])
    wait_until(lambda: leaders(admin, "disk")[0] == 0 and leaders(admin, "steady")[0] == 0, 60, "leaders")
    dirs = log_dirs_of(bootstrap, 0)
    assert ("disk", 0) in dirs[first_dir]["parts"], dirs  # the first dir: fewest partitions, first on a tie
    assert all(("steady", 0) in d["parts"] for k, d in dirs.items() if k != first_dir), dirs
    assert dirs[first_dir]["total"] > 0


def test_a_full_tmpfs_log_dir_goes_offline_and_its_leaders_move_the_other_dir_serves(ray_cluster, tmp_path):
    mount = str(tmp_path / "small")
    with tmpfs(mount, "8m"):
        ballast = os.path.join(mount, "ballast")
        with open(ballast, "wb") as f:  # leaves ~2.5 MB for the log: the volume fills part-way through the load
            f.write(b"\0" * (5 << 20) + b"\0" * (512 << 10))
        cluster = start_cluster(tmp_path, mount)
        try:
            admin = rafka.Admin(cluster)
            bootstrap = cluster.bootstrap_servers
            create_topics(admin, bootstrap, mount)
            # 5 MB to ~2.5 MB free: the volume fills half-way, and holds the whole log once the ballast is gone
            ok, failed, lines = produce_through_failure(bootstrap, None, 0, 250)
            check_failover(cluster, admin, bootstrap, mount, ok, failed, lines, "ENOSPC")
            os.remove(ballast)  # space freed
            check_restart(cluster, admin, bootstrap, mount, ok)
            move_steady_into(bootstrap, admin, mount, ok)
        finally:
            cluster.stop()


def test_an_eio_log_dir_goes_offline_and_recovers_after_a_remount(ray_cluster, tmp_path):
    mount, image = str(tmp_path / "ext4"), str(tmp_path / "ext4.img")
    with loop_ext4(mount, image, 64) as vol:
        cluster = start_cluster(tmp_path, mount)
        try:
            admin = rafka.Admin(cluster)
            bootstrap = cluster.bootstrap_servers
            create_topics(admin, bootstrap, mount)
            ok, failed, lines = produce_through_failure(bootstrap, lambda: shut_down_ext4(mount), 100, 300)
            check_failover(cluster, admin, bootstrap, mount, ok, failed, lines, "EIO")
            # started again with the dir still failing: it runs on its other dir, that one offline from the start
            cluster.restart_broker(0)
            dirs = log_dirs_of(bootstrap, 0)
            print("DescribeLogDirs of broker 0 restarted on the dead volume:", dirs)
            assert dirs[mount]["error_code"] == STORAGE_ERROR and "Input/output error" in str(
                ray.get(cluster.server.broker(0).describe_log_dirs.remote(), timeout=30)
            )
            # its log may be on the dead dir: no empty one is made in the other (Kafka's getOrCreateLog rule)
            assert ("disk", 0) not in dirs[[d for d in dirs if d != mount][0]]["parts"]
            wait_until(lambda: 0 in leaders(admin, "steady")[1], 60, "broker 0 in steady-0's ISR")
            cluster.kill_broker(0)  # its processes let go of the dead file system
            vol.remount()  # the journal replays: the volume is usable again
            check_restart(cluster, admin, bootstrap, mount, ok)
        finally:
            cluster.stop()
