"""A replica whose disk fills up, without a Ray cluster: real Replica objects in a replica host (actors/replica_host.py
``_Host``) on real disk, one of them on a log whose active segment is /dev/full (real ENOSPC). Its produce answers
KAFKA_STORAGE_ERROR (never UNKNOWN_SERVER_ERROR), the broker's parked supervise() is answered with the failure, the
replica stops without writing; the other replica keeps serving. Then the broker's supervisor routes that answer to
its log-dir failure handling (actors/server/replica_supervisor.py)."""

from __future__ import annotations

import asyncio
import os

from support import batch

import actors.replica as replica_mod
from actors.replica_host import _Host
from actors.server.replica_supervisor import ReplicaSupervisor
from protocol import errors as E
from protocol.control_messages import LeaderAndIsrPartitionState
from protocol.messages import FetchRequest, ProduceRequest
from storage.log import CLEAN_SHUTDOWN_FILE, Log, LogConfig
from storage.records import decode_records
from storage.segment import log_file_name


def _state(topic: str, p: int) -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState(topic, p, 1, 0, 0, (0,), 0, (0,), topic_id="tid-" + topic)


def test_a_full_disk_answers_storage_errors_and_the_supervise_poll_then_the_replica_stops(tmp_path, monkeypatch):
    monkeypatch.setattr(replica_mod, "BIND_LOCK_TIMEOUT_S", 0.2)
    full, ok = str(tmp_path / "full" / "t-0"), str(tmp_path / "ok" / "t-1")
    Log(full, LogConfig()).close()  # cleanly closed: its reopen does no recovery (and no fsync of /dev/full)
    os.remove(os.path.join(full, log_file_name(0)))
    os.symlink("/dev/full", os.path.join(full, log_file_name(0)))
    os.makedirs(ok)

    async def run() -> None:
        host = _Host()
        assert (await host.call(1, "bind", "cl", "t", 0, "tid-t", 0, full, {}))["error_code"] == 0
        assert (await host.call(2, "bind", "cl", "t", 1, "tid-t", 0, ok, {}))["error_code"] == 0
        for slot, p in ((1, 0), (2, 1)):
            assert (await host.call(slot, "become_leader", _state("t", p)))["error_code"] == 0
        watch = asyncio.ensure_future(host.call(1, "supervise"))
        await asyncio.sleep(0.01)
        res = await host.call(1, "produce", ProduceRequest(batch([b"x" * 100]), acks=1))
        assert res["error_code"] == E.KafkaStorageError.code and "ENOSPC" in res["error_message"], res
        failure = await asyncio.wait_for(watch, 5)
        assert failure["reason"] == "log_dir_failure" and failure["log_dir"] == str(tmp_path / "full")
        assert "No space left on device" in failure["error_message"]
        assert await host.call(1, "supervise") == failure  # a later poll gets it too
        again = await host.call(1, "produce", ProduceRequest(batch([b"y"]), acks=1))
        assert again["error_code"] == E.KafkaStorageError.code  # offline: nothing is written again
        # the other replica serves
        assert (await host.call(2, "produce", ProduceRequest(batch([b"b0"]), acks=1)))["error_code"] == 0
        got = await host.call(2, "fetch", FetchRequest(0, 1 << 20))
        assert [r.value for r in decode_records(got["records"])] == [b"b0"]
        # the broker stops it without writing: no clean-shutdown marker on the failed disk
        assert (await host.call(1, "stop", False, True))["error_code"] == 0
        assert not os.path.exists(os.path.join(full, CLEAN_SHUTDOWN_FILE))
        await host.shutdown()
        assert os.path.exists(os.path.join(ok, CLEAN_SHUTDOWN_FILE))

    asyncio.run(run())


class _Remote:
    def __init__(self, answer):
        self.answer = answer

    async def _call(self):
        return self.answer

    def remote(self):
        return self._call()


class _Handle:
    def __init__(self, answer):
        self.supervise = _Remote(answer)


class _Failures:
    def __init__(self):
        self.reports: list = []

    def report(self, d, why):
        self.reports.append((d, why))


class _Broker:
    broker_id, stopping = 0, False
    config: dict = {}

    def __init__(self):
        self.log_dir_failures = _Failures()


def test_the_supervisor_routes_a_log_dir_failure_answer_and_ignores_a_stop():
    b = _Broker()
    sup = ReplicaSupervisor(b)
    failure = {"reason": "log_dir_failure", "log_dir": "/d1", "error_message": "ENOSPC: No space left on device"}
    asyncio.run(sup._long_poll(("t", 0), 1, _Handle(failure)))
    asyncio.run(sup._long_poll(("t", 1), 1, _Handle({"reason": "stopped"})))
    assert b.log_dir_failures.reports == [("/d1", "ENOSPC: No space left on device")]
