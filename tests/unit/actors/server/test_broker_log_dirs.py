"""A broker's log dirs without Ray (actors/server/log_dirs.py): each dir locked and identified, partitions found
on disk and placed in the dir with the fewest, an offline dir refused and described with KAFKA_STORAGE_ERROR; and
the failure routing (``LogDirFailures``) over a stand-in broker: the failed dir's replicas stopped without writing
and reported once in one ``replicas_offline``, the other dir's replicas untouched."""

from __future__ import annotations

import asyncio
import os

import pytest

from actors.server.log_dir_lock import LogDirLock
from actors.server.log_dirs import BrokerLogDirs, LogDirFailures
from protocol.errors import KafkaStorageError
from storage import meta_properties


def dirs_of(tmp_path, n=2):
    return [str(tmp_path / f"d{i}") for i in range(n)]


def test_each_dir_is_locked_and_identified_and_partitions_on_disk_are_found(tmp_path):
    a, b = dirs_of(tmp_path)
    os.makedirs(os.path.join(b, "orders-3"))
    os.makedirs(os.path.join(a, "not a partition"))
    ld = BrokerLogDirs({"log.dirs": f"{a},{b}"}, "/unused", 7)
    ld.acquire(1)
    try:
        assert ld.dirs == [a, b] and ld.first == a
        assert not LogDirLock(a).try_acquire() and not LogDirLock(b).try_acquire()  # both held
        ids = {d: meta_properties.load_or_create(d, 7)["directory.id"] for d in (a, b)}
        assert ld.directory_id == ",".join(sorted(ids.values()))  # another disk in either dir changes it
        assert ld.placement == {("orders", 3): b}
        assert ld.partition_path(("orders", 3)) == os.path.join(b, "orders-3")
        # new partitions: the dir with the fewest, the first on a tie
        assert ld.partition_path(("orders", 0)) == os.path.join(a, "orders-0")
        assert ld.partition_path(("orders", 1)) == os.path.join(a, "orders-1")  # a:1, b:1 -> a (first)
        assert ld.partition_path(("orders", 2)) == os.path.join(b, "orders-2")  # a:2, b:1 -> b
        assert ld.counts() == {a: 2, b: 2}
        ld.forget(("orders", 0))
        assert ld.counts() == {a: 1, b: 2}
    finally:
        ld.release()
    assert LogDirLock(a).try_acquire()


def test_one_dir_keeps_its_single_directory_id(tmp_path):
    ld = BrokerLogDirs({}, str(tmp_path / "broker-0"), 0)
    ld.acquire(1)
    assert ld.dirs == [str(tmp_path / "broker-0")]
    assert ld.directory_id == meta_properties.load_or_create(ld.first, 0)["directory.id"]
    ld.release()


def test_a_dir_held_by_another_broker_fails_the_start(tmp_path):
    a, b = dirs_of(tmp_path)
    other = LogDirLock(b)
    assert other.try_acquire()
    ld = BrokerLogDirs({"log.dirs": f"{a},{b}"}, "/unused", 0)
    with pytest.raises(KafkaStorageError, match="another broker process"):
        ld.acquire(0.1)
    assert LogDirLock(a).try_acquire()  # what it had taken is released
    other.release()


def test_an_unusable_dir_is_offline_from_the_start_and_the_broker_runs_on_the_other(tmp_path):
    a = str(tmp_path / "d0")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    bad = str(blocker / "d1")  # under a regular file: makedirs fails with ENOTDIR
    ld = BrokerLogDirs({"log.dirs": f"{a},{bad}"}, "/unused", 0)
    ld.acquire(1)
    assert ld.online() == [a] and "ENOTDIR" in ld.offline[bad]
    assert ld.partition_path(("t", 0)) == os.path.join(a, "t-0")
    desc = {d["log_dir"]: d for d in ld.describe()}
    assert desc[bad]["error_code"] == KafkaStorageError.code and desc[bad]["partitions"] == []
    assert desc[bad]["total_bytes"] == -1 and desc[a]["total_bytes"] > 0
    ld.release()
    only_bad = BrokerLogDirs({"log.dirs": bad}, "/unused", 0)
    with pytest.raises(KafkaStorageError, match="no log directory"):
        only_bad.acquire(1)


def test_describe_uses_the_replicas_figures_else_the_disk_and_filters(tmp_path):
    a, b = dirs_of(tmp_path)
    ld = BrokerLogDirs({"log.dirs": [a, b]}, "/unused", 0)
    ld.acquire(1)
    p0, p1 = ld.partition_path(("t", 0)), ld.partition_path(("t", 1))
    os.makedirs(p1)
    with open(os.path.join(p1, "00000000000000000000.log"), "wb") as f:
        f.write(b"x" * 123)
    with open(os.path.join(p1, "00000000000000000000.index"), "wb") as f:
        f.write(b"x" * 50)  # not counted: Kafka's size is the segments' .log bytes
    figures = {("t", 0): {"size": 999, "log_end_offset": 10, "high_watermark": 14}}
    desc = {d["log_dir"]: d for d in ld.describe(figures)}
    assert desc[a]["partitions"] == [{"topic": "t", "partition": 0, "size": 999, "offset_lag": 4, "is_future": False}]
    assert desc[b]["partitions"] == [{"topic": "t", "partition": 1, "size": 123, "offset_lag": 0, "is_future": False}]
    assert {d["log_dir"]: d["partitions"] for d in ld.describe(figures, wanted=[("t", 1)])}[a] == []
    assert p0 == os.path.join(a, "t-0")
    ld.release()


# ---- failure routing --------------------------------------------------------------------------------
class FakeSupervisor:
    def __init__(self):
        self.stopped: list[tuple] = []

    def unwatch(self, key, forget=False):
        return 100 + key[1]

    async def stop(self, key, handle, delete, pid, abandon=False):
        self.stopped.append((key, handle, delete, pid, abandon))
        return {"error_code": 0}


class FakeLink:
    def __init__(self, fail_first=0):
        self.calls: list[tuple] = []
        self.fail_first = fail_first

    async def call(self, method, *args, **kw):
        self.calls.append((method, *args))
        if self.fail_first:
            self.fail_first -= 1
            raise asyncio.TimeoutError("controller slow")
        return {"partitions": [{"topic": t, "partition": p, "error_code": 0} for t, p in args[2]]}


class FakeBroker:
    broker_id, broker_epoch, stopping = 3, 42, False

    def __init__(self, link):
        self.replicas: dict = {}
        self.topic_ids: dict = {}
        self.supervisor = FakeSupervisor()
        self.link = link
        self.gone: list = []
        self._locks: dict = {}

    def _lock(self, key):
        return self._locks.setdefault(key, asyncio.Lock())

    async def replica_gone(self, key):
        self.gone.append(key)


def test_a_failed_dir_stops_its_replicas_without_writing_and_reports_them_once(tmp_path):
    a, b = dirs_of(tmp_path)
    ld = BrokerLogDirs({"log.dirs": [a, b]}, "/unused", 3)
    ld.acquire(1)
    keys = [("t", i) for i in range(4)]
    paths = {k: ld.partition_path(k) for k in keys}  # t-0, t-2 in a; t-1, t-3 in b
    broker = FakeBroker(FakeLink(fail_first=1))
    broker.replicas = {k: f"handle-{k[1]}" for k in keys}
    broker.topic_ids = {k: "id" for k in keys}
    failures = LogDirFailures(broker, ld)

    async def run():
        task = failures.report(paths[("t", 1)], "ENOSPC: No space left on device")  # a partition dir's path
        again = failures.report(b, "EIO")  # the same dir again: nothing more
        assert again is None
        return await task

    entry = asyncio.run(run())
    assert entry.pop("stopped_ms") <= entry.pop("reported_ms") and entry.pop("at") > 0
    assert entry == {
        "log_dir": b,
        "why": "ENOSPC: No space left on device",
        "partitions": [["t", 1], ["t", 3]],
        "reported": True,
    }
    assert sorted(broker.replicas) == [("t", 0), ("t", 2)]  # the other dir keeps serving
    assert sorted(broker.gone) == [("t", 1), ("t", 3)]
    assert sorted(s[0] for s in broker.supervisor.stopped) == [("t", 1), ("t", 3)]
    assert all(s[2] is False and s[4] is True for s in broker.supervisor.stopped)  # kept on disk, abandoned
    # one call per attempt, every partition in it (the first timed out and was asked again)
    assert broker.link.calls == [("replicas_offline", 3, 42, [["t", 1], ["t", 3]])] * 2
    assert ld.offline == {b: "ENOSPC: No space left on device"}
    with pytest.raises(KafkaStorageError, match="offline log dir"):
        ld.partition_path(("t", 3))
    assert ld.partition_path(("t", 9)) == os.path.join(a, "t-9")  # new replicas go to the dir that works
    # a replica that is not new and whose log is not found may have it on the failed dir: not created elsewhere
    with pytest.raises(KafkaStorageError, match="Can not create log for t-8 because log directories"):
        ld.partition_path(("t", 8), is_new=False)
    assert ld.partition_path(("t", 0), is_new=False) == os.path.join(a, "t-0")  # found: used
    assert failures.report("/elsewhere", "EIO") is None  # not one of this broker's dirs
    ld.release()


# ---- AlterReplicaLogDirs ------------------------------------------------------------------------------
class FakeReplica:
    def __init__(self, st):
        self.st = st

    @property
    def state(self):
        replica = self

        class Call:
            @staticmethod
            async def remote():
                return dict(replica.st)

        return Call


class MovingBroker(FakeBroker):
    def __init__(self, dirs):
        super().__init__(FakeLink())
        self.dirs = dirs
        self.last_states: dict = {}
        self.stops: list = []
        self.applied: list = []

    async def _stop_one(self, key, delete):
        self.stops.append((key, delete))
        self.replicas.pop(key, None)

    async def _apply(self, s):
        # what the broker's LeaderAndIsr does: a replica bound to the partition's dir, which must hold its log
        path = self.dirs.partition_path(s.key)
        assert os.path.exists(os.path.join(path, "00000000000000000000.log"))
        self.applied.append((s, path))
        self.replicas[s.key] = "new-handle"

        class Res:
            error_code, error_message = 0, None

        return Res


def test_alter_replica_log_dirs_moves_a_running_replica_with_its_state_now(tmp_path):
    from actors.server.log_dirs import ReplicaLogDirMoves
    from protocol.control_messages import LeaderAndIsrPartitionState

    a, b = dirs_of(tmp_path)
    ld = BrokerLogDirs({"log.dirs": [a, b]}, "/unused", 0)
    ld.acquire(1)
    key = ("t", 0)
    src = ld.partition_path(key)  # in a
    os.makedirs(src)
    with open(os.path.join(src, "00000000000000000000.log"), "wb") as f:
        f.write(b"records" * 100)
    broker = MovingBroker(ld)
    broker.replicas[key] = FakeReplica(
        {
            "leader": 0,
            "leader_epoch": 4,
            "isr": [0, 1],
            "partition_epoch": 9,
            "replicas": [0, 1, 2],
            "controller_epoch": 2,
        }
    )
    broker.last_states[key] = LeaderAndIsrPartitionState(
        topic="t",
        partition=0,
        controller_epoch=1,
        leader=0,
        leader_epoch=3,
        isr=(0, 1, 2),
        partition_epoch=7,
        replicas=(0, 1, 2),
        topic_id="tid",
        configs={"retention.ms": "1000"},
    )
    moves = ReplicaLogDirMoves(broker, ld)
    out = asyncio.run(moves.alter([[b, "t", 0], [b, "t", 0], [str(tmp_path / "nope"), "t", 0], [a, "new", 5]]))
    assert [(o["topic"], o["partition"], o["error_code"]) for o in out] == [
        ("t", 0, 0),
        ("t", 0, 0),  # already there
        ("t", 0, 57),  # LOG_DIR_NOT_FOUND
        ("new", 5, 0),  # not hosted: its log will be created in a
    ]
    assert not os.path.exists(src) and ld.dir_of(key) == b
    with open(os.path.join(b, "t-0", "00000000000000000000.log"), "rb") as f:
        assert f.read() == b"records" * 100
    assert broker.stops == [(key, False)]
    ((state, path),) = broker.applied
    assert path == os.path.join(b, "t-0")
    # restarted at the replica's own view (ISR, epochs), the last LeaderAndIsr's topic id and configs
    assert (state.leader_epoch, state.isr, state.partition_epoch, state.controller_epoch) == (4, (0, 1), 9, 2)
    assert (state.topic_id, state.configs) == ("tid", {"retention.ms": "1000"})
    assert ld.partition_path(("new", 5)) == os.path.join(a, "new-5")
    ld.mark_offline(a, "EIO")
    (back,) = asyncio.run(moves.alter([[a, "t", 0]]))
    assert back["error_code"] == KafkaStorageError.code and "offline" in back["error_message"]
    ld.release()
