"""The coordinator runtime (actors/coordinator/) with a tiny fake shard, without Ray: it loads a partition
through the replica's state and fetch, replays what arrived while loading, routes, keeps answers in handler
order, fires the shard's deadline, and unloads on resignation; the writer goes on the internal channel."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging

from actors.channels.client_channel import ClientListener
from actors.coordinator.context import (
    ACTIVE,
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    FAILED,
    NOT_COORDINATOR,
    CoordinatorContext,
)
from actors.coordinator.runtime import CoordinatorRuntime
from actors.coordinator.shard import CoordinatorKind
from actors.coordinator.writer import TxnWrite, append, records_batch
from protocol import errors as E
from storage.records import decode_records

log = logging.getLogger("test.coordinator")


class _Rec:
    def __init__(self, k, v):
        self.k, self.v = k, v

    def key_bytes(self):
        return self.k

    def value_bytes(self):
        return self.v


class FakeShard:
    """The smallest CoordinatorShard: replay records the records, load replays them all."""

    def __init__(self):
        self.seen: list = []
        self.deadline: int | None = None

    def replay(self, record):
        if record == (b"bad", b"bad"):
            raise E.CorruptMessageError("bad record")
        self.seen.append(record)

    def load(self, records, now_ms):
        n = 0
        for r in records:
            self.replay(r)
            n += 1
        return n

    def next_deadline(self):
        return self.deadline


KIND = CoordinatorKind(
    topic="__fake",
    new_shard=lambda epoch: FakeShard(),
    decode=lambda k, v, pid: (k, v),
    end_txn=lambda pid, committed: ("marker", pid, committed),
    append_error=lambda code: code,
    summary=lambda shard: f"{len(shard.seen)} records",
)


class _Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        return self.fn(*args)  # a coroutine: awaitable as a Ray ObjectRef is


class FakeReplica:
    """The replica actor handle's surface the runtime uses: state, fetch and the internal endpoint."""

    def __init__(self, log_records, epoch, listener=None):
        self.log_records, self.epoch, self.listener = log_records, epoch, listener
        self.state = _Method(self._state)
        self.fetch = _Method(self._fetch)
        self.internal_endpoint = self  # handle.internal_endpoint.remote().future()

    async def _state(self):
        n = len(self.log_records)
        return {
            "role": "leader",
            "leader_epoch": self.epoch,
            "log_start_offset": 0,
            "log_end_offset": n,
            "high_watermark": n,
        }

    async def _fetch(self, req):
        assert req.current_leader_epoch == self.epoch
        recs = [_Rec(k, v) for k, v in self.log_records]
        return {"error_code": 0, "records": records_batch(recs, 1), "next_offset": len(recs)}

    def remote(self):
        return self

    def future(self):
        f: concurrent.futures.Future = concurrent.futures.Future()
        f.set_result({"error_code": 0, "error_message": None, **self.listener.endpoint(internal=True)})
        return f


async def _until(cond, timeout=5.0):
    for _ in range(int(timeout / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met")


def test_runtime_loads_replays_orders_answers_fires_and_unloads():
    async def run():
        answers = {b"1": 0.03, b"2": 0.0, b"3": 0.0}
        seen = []

        async def produce(req):
            value = decode_records(req.records)[0][3]
            seen.append(value)
            await asyncio.sleep(answers.get(value, 0))  # the first answer comes back last
            return {"error_code": 7 if value == b"2" else 0, "error_message": None}

        async def fetch(req):
            return {"error_code": 0, "error_message": None}

        listener = ClientListener(produce, fetch, "__fake-0 b1")
        await listener.start("127.0.0.1")
        loaded, unloaded, fired = [], [], []

        async def on_deadline(part):
            fired.append(part.partition)
            part.shard.deadline = None  # what was due is handled, as a shard's expiry does: nothing left to fire

        rt = CoordinatorRuntime(
            KIND,
            1,
            5000,
            log,
            on_loaded=lambda part, gen: loaded.append((part.partition, gen)),
            on_unloaded=lambda part, gen: unloaded.append(part.partition),
            on_deadline=on_deadline,
        )
        replica = FakeReplica([(b"a", b"1"), (b"b", b"2")], 3, listener)
        assert rt.on_elected(0, 3, replica) == {"error_code": 0}
        part = rt.parts[0]
        assert rt.route(0) == (None, COORDINATOR_LOAD_IN_PROGRESS) and rt.route(1) == (None, NOT_COORDINATOR)
        part.deferred.append((b"late", b"x"))  # e.g. a transaction marker arriving while loading
        await _until(lambda: part.state == ACTIVE)
        assert part.shard.seen == [(b"a", b"1"), (b"b", b"2"), (b"late", b"x")] and part.loaded_records == 2
        assert loaded == [(0, part.gen)] and rt.route(0) == (part, 0)
        assert rt.on_elected(0, 2, replica)["ignored"] and rt.on_elected(0, 3, replica)["ignored"]

        # answers keep handler order: each waits for every earlier append, and a failure spreads forward
        done: list[int] = []
        tasks = [rt.append(part, [_Rec(b"k", v)]) for v in (b"1", b"2", b"3")]
        for i, t in enumerate(tasks):
            t.add_done_callback(lambda _t, i=i: done.append(i))
        assert await asyncio.gather(*tasks) == [0, 7, 7]
        assert done == [0, 1, 2] and seen == [b"1", b"2", b"3"] and part.appends == 3
        assert await rt.append_alone(part, [_Rec(b"k", b"3")]) == 0  # not chained: its own answer

        # the deadline timer fires once the shard's next deadline passes
        part.shard.deadline = rt.now_ms() + 20
        rt.rearm(part)
        assert part.describe()["next_deadline"] == part.shard.deadline
        await _until(lambda: fired == [0])

        # resignation at a newer epoch unloads: parked answers fail, tasks stop, requests are routed away
        waiter = part.park(("join", "g"))
        assert rt.on_resigned(0, 2)["ignored"]  # stale news
        assert rt.on_resigned(0, 4) == {"error_code": 0}
        assert waiter.result() == NOT_COORDINATOR and part.state == FAILED and unloaded == [0]
        assert rt.parts == {} and rt.route(0) == (None, NOT_COORDINATOR) and part.tasks == []
        listener.close()

    asyncio.run(run())


def test_a_corrupt_partition_is_not_served_and_a_failed_append_reloads():
    async def run():
        rt = CoordinatorRuntime(KIND, 1, 5000, log)
        rt.on_elected(0, 1, FakeReplica([(b"bad", b"bad")], 1))
        part = rt.parts[0]
        await _until(lambda: part.state == FAILED)
        assert rt.route(0) == (None, COORDINATOR_NOT_AVAILABLE)
        assert rt.on_elected(0, 1, FakeReplica([], 1)) == {"error_code": 0}  # a failed partition loads again
        again = rt.parts[0]
        await _until(lambda: again.state == ACTIVE)
        waiter = again.park("k")
        gen = again.gen
        rt.reload(again, gen, 15)
        assert waiter.result() == 15 and again.state == "loading" and again.gen == gen + 1
        await _until(lambda: again.state == ACTIVE)
        rt.reload(again, gen, 15)  # a stale failure: nothing happens
        assert again.state == ACTIVE

    asyncio.run(run())


def test_coordinator_appends_go_on_the_internal_channel_in_submission_order():
    """The writer submits a context's appends (plain and transactional) synchronously on the replica's internal
    channel (a real client listener on loopback here), so the replica receives them in handler order and
    numbers them on one connection (actors/replication/call_order.py); the transactional one appends as the coordinator.
    A broken connection answers NOT_COORDINATOR."""

    async def run():
        seen = []

        async def produce(req):
            seen.append(req)
            await asyncio.sleep(0.01 * (3 - len(seen)) if len(seen) < 3 else 0)  # answers come back out of order
            return {"error_code": 0, "error_message": None}

        async def fetch(req):
            return {"error_code": 0, "error_message": None}

        listener = ClientListener(produce, fetch, "__consumer_offsets-0 b1")
        await listener.start("127.0.0.1")

        class Handle:  # the replica actor handle's surface: handle.internal_endpoint.remote().future()
            internal_endpoint = property(lambda self: self)

            def remote(self):
                return self

            def future(self):
                f = concurrent.futures.Future()
                f.set_result({"error_code": 0, "error_message": None, **listener.endpoint(internal=True)})
                return f

        ctx = CoordinatorContext(0, 3, Handle(), FakeShard())
        tasks = [append(ctx, [_Rec(b"k", b"%d" % i)], 5000, 1234) for i in range(3)]
        tasks.append(append(ctx, [_Rec(b"k", b"t")], 5000, 1234, TxnWrite(7, 0, "tx")))
        assert await asyncio.gather(*tasks) == [0, 0, 0, 0]
        assert [decode_records(r.records)[0][3] for r in seen] == [b"0", b"1", b"2", b"t"]
        assert [r.origin for r in seen] == ["client"] * 3 + ["coordinator"]
        assert seen[-1].transactional_id == "tx" and {r.current_leader_epoch for r in seen} == {3}
        assert len({r.order[0] for r in seen}) == 1 and [r.order[1] for r in seen] == [0, 1, 2, 3]
        assert listener.stats["internal"] == 1
        listener.close()
        await asyncio.sleep(0.05)
        assert await append(ctx, [_Rec(b"k", b"x")], 5000, 1234) == NOT_COORDINATOR

    asyncio.run(run())
