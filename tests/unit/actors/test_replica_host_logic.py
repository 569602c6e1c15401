"""A replica host's logic without a Ray cluster (actors/replica_host.py): the HostedReplica handle routes each
call to its host's ``call(slot, ...)`` (``ping`` to the host's own probe) and travels by pickle; the host keeps
real Replica objects on real disk, one Log per slot, each slot's directory lock its own; a refused bind or a
dropped slot is never a replica again, and a call to it answers NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

import asyncio
import os
import pickle

import pytest
from support import batch

import actors.replica as replica_mod
from actors.replica_host import REPLICA_METHODS, HostedReplica, _Host, process_class, process_handle
from protocol import errors as E
from protocol.control_messages import LeaderAndIsrPartitionState
from protocol.messages import FetchRequest, ProduceRequest
from storage.records import decode_records


class _Id:
    def __init__(self, b: bytes):
        self.b = b

    def binary(self) -> bytes:
        return self.b

    def hex(self) -> str:
        return self.b.hex()


class _Recorder:
    def __init__(self, log: list, name: str, opts: dict | None = None):
        self.log, self.name, self.opts = log, name, opts

    def options(self, **opts):
        return _Recorder(self.log, self.name, opts)

    def remote(self, *args, **kwargs):
        self.log.append((self.name, self.opts, args, kwargs))
        return len(self.log)


class FakeHost:
    """Records the calls a HostedReplica makes of its host actor."""

    def __init__(self, aid: bytes = b"host-1"):
        self._actor_id = _Id(aid)
        self.calls: list = []

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return _Recorder(self.calls, name)

    def __reduce__(self):
        return (FakeHost, (self._actor_id.b,))


def test_a_hosted_replica_routes_each_method_to_its_slot_and_ping_to_the_host():
    host = FakeHost()
    h = HostedReplica(host, 7)
    h.fetch.remote("req")
    h.become_leader.options(name="x").remote("state", k=1)
    h.ping.remote()
    assert host.calls == [
        ("call", None, (7, "fetch", "req"), {}),
        ("call", {"name": "x"}, (7, "become_leader", "state"), {"k": 1}),
        ("ping", None, (), {}),  # the host's liveness probe, not a slot's
    ]
    for bad in ("_log", "no_such_method", "__deepcopy__"):
        with pytest.raises(AttributeError):
            getattr(h, bad)
    assert {"produce", "fetch", "bind", "stop", "supervise", "client_endpoint"} <= REPLICA_METHODS
    assert process_handle(h) is host and process_class(h) == "ReplicaHost"
    other = object()
    assert process_handle(other) is other and process_class(other) == "ReplicaActor"


def test_a_hosted_replica_pickles_and_compares_by_host_and_slot():
    h = HostedReplica(FakeHost(b"A"), 3)
    back = pickle.loads(pickle.dumps(h))
    assert back == h and hash(back) == hash(h) and back.slot == 3
    assert back.channel_key == (b"A", 3)
    assert HostedReplica(FakeHost(b"A"), 4) != h and HostedReplica(FakeHost(b"B"), 3) != h
    assert len({h, back, HostedReplica(FakeHost(b"A"), 4)}) == 2  # one client connection per replica


def _state(topic: str, p: int) -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState(topic, p, 1, 0, 0, (0,), 0, (0,), topic_id="tid-" + topic)


def test_a_host_keeps_a_log_per_slot_and_drops_what_it_is_told(tmp_path, monkeypatch):
    monkeypatch.setattr(replica_mod, "BIND_LOCK_TIMEOUT_S", 0.2)

    async def run() -> None:
        host = _Host()
        d0, d1 = str(tmp_path / "t-0"), str(tmp_path / "t-1")
        for d in (d0, d1):
            os.makedirs(d)
        a = await host.call(1, "bind", "cl", "t", 0, "tid-t", 0, d0, {})
        b = await host.call(2, "bind", "cl", "t", 1, "tid-t", 0, d1, {})
        assert a["error_code"] == 0 and b["error_code"] == 0 and a["pid"] == b["pid"] == os.getpid()
        for slot, p in ((1, 0), (2, 1)):
            assert (await host.call(slot, "become_leader", _state("t", p)))["error_code"] == 0
        for slot, vals in ((1, [b"a0", b"a1"]), (2, [b"b0"])):
            res = await host.call(slot, "produce", ProduceRequest(batch(vals), acks=1))
            assert res["error_code"] == 0, res
        got = await host.call(2, "fetch", FetchRequest(0, 1 << 20))
        assert [r.value for r in decode_records(got["records"])] == [b"b0"]  # its own log, not slot 1's
        assert host.describe()["partitions"] == ["t-0", "t-1"]

        # a second replica of t-0 in this process: refused by the directory's lock, and never a replica
        dup = await host.call(3, "bind", "cl", "t", 0, "tid-t", 0, d0, {})
        assert dup["error_code"] == E.KafkaStorageError.code, dup
        again = await host.call(3, "bind", "cl", "t", 0, "tid-t", 0, d0, {})
        assert again["error_code"] == E.NotLeaderOrFollowerError.code
        assert (await host.call(3, "fetch", FetchRequest(0, 100)))["error_code"] == E.NotLeaderOrFollowerError.code

        # dropping slot 1 stops its replica (its parked supervise answers) and frees the lock
        watch = asyncio.ensure_future(host.call(1, "supervise"))
        await asyncio.sleep(0.01)
        assert not watch.done()
        assert (await host.drop(1))["partitions"] == 1
        assert (await asyncio.wait_for(watch, 5)) == {"reason": "stopped"}
        assert await host.call(1, "supervise") == {"reason": "stopped"}
        assert (await host.call(1, "stop"))["error_code"] == 0
        c = await host.call(4, "bind", "cl", "t", 0, "tid-t", 0, d0, {})
        assert c["error_code"] == 0  # the log reopens in a new slot: the records are still there
        assert (await host.call(4, "become_leader", _state("t", 0)))["error_code"] == 0
        got = await host.call(4, "fetch", FetchRequest(0, 1 << 20))
        assert [r.value for r in decode_records(got["records"])] == [b"a0", b"a1"]

        bad = await host.call(2, "_bind", "x")
        assert bad["error_code"] == E.InvalidRequestError.code
        assert (await host.shutdown())["stopped"] == 2
        assert host.describe()["partitions"] == []

    asyncio.run(run())


def test_each_hosted_replicas_tasks_log_with_its_own_context():
    import logging

    from actors.server import server_log

    seen: dict[str, list[str]] = {}

    def line(who: str) -> None:
        rec = logging.LogRecord("actors.replica", logging.INFO, __file__, 1, "x", None, None)
        server_log._Context().filter(rec)
        seen.setdefault(who, []).append(rec.ctx)

    async def replica(ctx: str) -> None:
        server_log.set_task_context(ctx)  # what ReplicaHost.call does for the call's replica
        line(ctx)
        await asyncio.sleep(0)
        child = asyncio.ensure_future(asyncio.sleep(0))  # a task it starts copies the context
        await child
        await asyncio.get_running_loop().run_in_executor(None, lambda: None)
        line(ctx)
        await asyncio.ensure_future(_in_child(ctx))

    async def _in_child(ctx: str) -> None:
        line(ctx)

    async def run() -> None:
        await asyncio.gather(replica("Partition a-0 broker=1"), replica("Partition b-3 broker=1"))
        line("outside")  # the process's context where no task set one

    before = server_log._context["ctx"]
    asyncio.run(run())
    assert seen["Partition a-0 broker=1"] == ["Partition a-0 broker=1"] * 3
    assert seen["Partition b-3 broker=1"] == ["Partition b-3 broker=1"] * 3
    assert seen["outside"] == [before]
