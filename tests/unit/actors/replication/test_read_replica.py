"""KIP-392 without Ray: the leader's choice of a preferred read replica (findPreferredReadReplica) over real
Partitions and Logs, and a follower serving consumer fetches up to its own high watermark (and LSO), long polls
on a follower woken by its HW, fencing and out-of-range answers as Kafka's."""

from __future__ import annotations

import asyncio

import pytest

from actors.replication.partition import Partition
from actors.replication.read_replica import BrokerRacks, ReadReplicas, preferred_read_replica, racks_of
from actors.replication.replica_fetcher import ReplicaFetcher
from actors.replication.replica_manager import DelayedFetch, fetch_answer, replica_manager_of
from actors.server.replica_selector import ClientMetadata, LeaderSelector, RackAwareReplicaSelector
from protocol import errors as E
from protocol.channel_frames import decode_fetch, fetch_fields
from protocol.control_messages import LeaderAndIsrPartitionState
from protocol.messages import READ_COMMITTED, FetchRequest, FetchResponse
from storage.log import Log, LogConfig
from storage.records import RecordBatchBuilder, decode_records

RACK_AWARE = RackAwareReplicaSelector()
RACKS = {1: "a", 2: "b", 3: "c"}
EPOCH = 4


def state(leader: int, isr=(1, 2, 3), epoch: int = EPOCH) -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState(
        topic="t",
        partition=0,
        controller_epoch=1,
        leader=leader,
        leader_epoch=epoch,
        isr=isr,
        partition_epoch=epoch,
        replicas=(1, 2, 3),
    )


@pytest.fixture
def parts(tmp_path):
    """Broker 1 leads; 2 and 3 follow (their fetch loops are ``replicate``)."""
    ps = {b: Partition(b, Log(str(tmp_path / f"b{b}"), LogConfig(), now_ms=0), "t", 0) for b in (1, 2, 3)}
    ps[1].make_leader(state(1), 0)
    ps[2].make_follower(state(1))
    ps[3].make_follower(state(1))
    yield ps
    for p in ps.values():
        p.log.close()


def batch(*values: bytes, pid: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=txn)
    for v in values:
        b.append(1000, None, v)
    return b.build()


def replicate(parts, b: int, now: int = 1000) -> bool:
    """One fetch of follower ``b`` from the leader, as its ReplicaFetcher does; True when its HW rose."""
    lead, f = parts[1], parts[b]
    fetch_offset = f.log.log_end_offset
    lead.update_follower_fetch_state(b, fetch_offset, now)
    resp = lead.read(fetch_offset, 1 << 20, b, 0, lead.leader_epoch)
    return f.append_as_follower(resp.records, resp.high_watermark, resp.log_start_offset)


def settle(parts) -> None:
    """Fetch rounds until both followers have everything and know the leader's HW (the leader learns a LEO
    from a follower's next fetch offset, the follower the HW from the answer to its next fetch)."""
    for _ in range(3):
        replicate(parts, 2)
        replicate(parts, 3)


def values(resp: FetchResponse) -> list[bytes]:
    return [r[3] for r in decode_records(resp.records)] if resp.records else []


def consumer(offset: int, rack: str | None = "b", **kw) -> FetchRequest:
    return FetchRequest(offset, client_rack=rack, current_leader_epoch=kw.pop("epoch", EPOCH), **kw)


# ---- the leader's choice ---------------------------------------------------------------------------------


def test_the_follower_in_the_clients_rack_is_preferred_once_caught_up(parts):
    lead = parts[1]
    lead.append_records_to_leader(batch(b"x", b"y"), 1, 1000)
    # followers have not fetched yet: their LEOs are unknown (below any fetch offset) -> the leader
    assert preferred_read_replica(lead, RACK_AWARE, ClientMetadata("b"), 0, RACKS, 1000) is None
    replicate(parts, 2)  # the leader knows b2 is at 0 (its fetch offset)
    assert preferred_read_replica(lead, RACK_AWARE, ClientMetadata("b"), 0, RACKS, 1001) == 2
    assert preferred_read_replica(lead, RACK_AWARE, ClientMetadata("b"), 2, RACKS, 1001) is None
    replicate(parts, 2)  # ... now at 2
    assert preferred_read_replica(lead, RACK_AWARE, ClientMetadata("b"), 2, RACKS, 1001) == 2
    # a fetch offset past what b2 has: b2 is no candidate (it would keep the consumer behind)
    lead.append_records_to_leader(batch(b"z"), 1, 1002)
    assert preferred_read_replica(lead, RACK_AWARE, ClientMetadata("b"), 3, RACKS, 1003) is None
    assert preferred_read_replica(lead, RACK_AWARE, ClientMetadata("a"), 0, RACKS, 1003) is None  # the leader's rack
    assert preferred_read_replica(lead, RACK_AWARE, ClientMetadata(""), 0, RACKS, 1003) is None
    assert preferred_read_replica(lead, LeaderSelector(), ClientMetadata("b"), 0, RACKS, 1003) is None


def test_only_live_in_sync_followers_are_candidates(parts):
    lead = parts[1]
    lead.append_records_to_leader(batch(b"x"), 1, 1000)
    settle(parts)
    assert preferred_read_replica(lead, RACK_AWARE, ClientMetadata("c"), 0, RACKS, 1001) == 3
    dead = {1: "a", 2: "b"}  # broker 3 is not alive: not in the live brokers' racks
    assert preferred_read_replica(lead, RACK_AWARE, ClientMetadata("c"), 0, dead, 1001) is None
    lead.apply_isr((1, 2), EPOCH + 1, 1002)  # b3 left the ISR
    assert preferred_read_replica(lead, RACK_AWARE, ClientMetadata("c"), 0, RACKS, 1003) is None
    assert preferred_read_replica(parts[2], RACK_AWARE, ClientMetadata("b"), 0, RACKS, 1003) is None  # a follower


def test_two_followers_in_the_rack_the_most_caught_up_is_chosen(parts):
    lead = parts[1]
    racks = {1: "a", 2: "b", 3: "b"}
    lead.append_records_to_leader(batch(b"x"), 1, 1000)
    settle(parts)
    lead.append_records_to_leader(batch(b"y"), 1, 1001)
    replicate(parts, 3, now=1002)
    replicate(parts, 3, now=1002)  # the leader knows b3 has offset 1, b2 not
    assert preferred_read_replica(lead, RACK_AWARE, ClientMetadata("b"), 0, racks, 1003) == 3


def test_read_replicas_answers_the_preferred_replica_without_records(parts):
    lead = parts[1]
    lead.append_records_to_leader(batch(b"x", b"y"), 1, 1000)
    settle(parts)
    racks = BrokerRacks("c", 1)
    racks.racks, racks.read_at = dict(RACKS), float("inf")  # as read from the broker's metadata just now
    rr = ReadReplicas(lead, racks)
    selector = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    answer = asyncio.run(rr.redirect(consumer(0), selector))
    resp = FetchResponse.from_dict(answer)
    assert resp.preferred_read_replica == 2 and resp.records == b"" and resp.error_code == 0
    assert resp.high_watermark == 2 and resp.next_offset == 0
    assert rr.describe()["redirects"] == 1 and rr.describe()["last_redirect"] == 2
    # no redirect: no selector, the default selector, no client metadata, a follower's own fetch, a fenced epoch
    assert asyncio.run(rr.redirect(consumer(0), "")) is None
    assert asyncio.run(rr.redirect(consumer(0), "LeaderSelector")) is None
    assert asyncio.run(rr.redirect(consumer(0, rack=None), selector)) is None
    assert asyncio.run(rr.redirect(FetchRequest(0, replica_id=3, client_rack="b"), selector)) is None
    assert asyncio.run(rr.redirect(consumer(0, epoch=EPOCH - 1), selector)) is None
    assert asyncio.run(rr.redirect(consumer(9), selector)) is None  # out of range: the read answers it
    with pytest.raises(E.InvalidConfigError):
        asyncio.run(rr.redirect(consumer(0), "com.example.Nearest"))


def test_racks_of_a_brokers_metadata_leave_out_dead_brokers():
    md = {"brokers": [{"id": 1, "rack": "a", "alive": True}, {"id": 2, "rack": "b", "alive": False}, {"id": 3}]}
    assert racks_of(md) == {1: "a", 3: None}


# ---- the follower's read ---------------------------------------------------------------------------------


def test_a_follower_serves_consumers_up_to_its_high_watermark(parts):
    lead, f = parts[1], parts[2]
    lead.append_records_to_leader(batch(b"a", b"b", b"c"), 1, 1000)
    replicate(parts, 2)  # b2 has offsets 0-2; its HW is the leader's before this fetch counted: 0
    assert f.log.log_end_offset == 3 and f.log.high_watermark == 0
    resp = FetchResponse.from_dict(fetch_answer(f, consumer(0)))
    assert resp.error_code == 0 and resp.records == b"" and resp.high_watermark == 0
    settle(parts)  # the leader's HW reached 3 and b2 learnt it
    assert f.log.high_watermark == 3
    resp = FetchResponse.from_dict(fetch_answer(f, consumer(0)))
    assert values(resp) == [b"a", b"b", b"c"] and resp.next_offset == 3 and resp.high_watermark == 3
    lead.append_records_to_leader(batch(b"d"), 1, 1001)
    replicate(parts, 2)  # b2 has offset 3, its HW is still 3: a read there answers nothing yet
    replicate(parts, 2)
    assert f.log.log_end_offset == 4 and f.log.high_watermark == 3
    resp = FetchResponse.from_dict(fetch_answer(f, consumer(3)))
    assert resp.error_code == 0 and resp.records == b"" and resp.high_watermark == 3
    resp = FetchResponse.from_dict(fetch_answer(f, consumer(0)))
    assert values(resp) == [b"a", b"b", b"c"]  # never past the HW


def test_a_follower_answers_kafkas_errors(parts):
    lead, f = parts[1], parts[2]
    lead.append_records_to_leader(batch(b"a"), 1, 1000)
    replicate(parts, 2)
    code = lambda req: FetchResponse.from_dict(fetch_answer(f, req)).error_code  # noqa: E731
    assert code(consumer(5)) == E.OffsetOutOfRangeError.code  # past its LEO
    assert code(consumer(0, rack=None)) == E.NotLeaderOrFollowerError.code  # no client metadata: leader only
    assert code(consumer(0, epoch=EPOCH - 1)) == E.FencedLeaderEpochError.code
    assert code(consumer(0, epoch=EPOCH + 1)) == E.UnknownLeaderEpochError.code  # it has not heard of that epoch
    assert code(consumer(0, epoch=-1)) == 0
    f.stop()
    assert code(consumer(0)) == E.NotLeaderOrFollowerError.code


def test_read_committed_on_a_follower_stops_at_its_lso(parts):
    lead, f = parts[1], parts[2]
    lead.append_records_to_leader(batch(b"x", pid=7, seq=0, txn=True), -1, 1000)  # offset 0, aborted
    lead.append_txn_marker(7, 0, False, 0, 1001)  # offset 1
    lead.append_records_to_leader(batch(b"open", pid=8, seq=0, txn=True), -1, 1002)  # offset 2, open
    settle(parts)
    assert f.log.high_watermark == 3 and f.log.last_stable_offset == 2
    resp = FetchResponse.from_dict(fetch_answer(f, consumer(0, isolation_level=READ_COMMITTED)))
    assert resp.last_stable_offset == 2 and resp.next_offset == 2
    assert resp.aborted_transactions == ((7, 0),)
    uncommitted = FetchResponse.from_dict(fetch_answer(f, consumer(0)))
    assert uncommitted.next_offset == 3 and uncommitted.aborted_transactions is None


def test_a_long_poll_on_a_follower_is_woken_by_its_high_watermark(parts):
    lead, f = parts[1], parts[2]
    lead.append_records_to_leader(batch(b"a"), 1, 1000)
    settle(parts)
    assert f.log.high_watermark == 1

    async def main():
        rm = replica_manager_of(2)  # the process's, which the follower's fetch loop tells
        rm.add_partition(f)
        waiting = asyncio.ensure_future(rm.wait_fetch(DelayedFetch(f, consumer(1, max_wait_ms=5000))))
        leader_only = asyncio.ensure_future(rm.wait_fetch(DelayedFetch(f, consumer(1, rack=None, max_wait_ms=5000))))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        refused = await asyncio.wait_for(leader_only, 1)  # a leader-only fetch does not wait on a follower
        assert refused["error_code"] == E.NotLeaderOrFollowerError.code
        lead.append_records_to_leader(batch(b"b"), 1, 1001)
        for _ in range(2):
            replicate(parts, 2)
            replicate(parts, 3)
        assert not waiting.done()  # b2 has offset 1 but its HW is 1: nothing to answer yet
        # b2's fetch loop applies the leader's next answer, which raises its HW: that wakes the consumer
        lead.update_follower_fetch_state(2, f.log.log_end_offset, 1002)
        ReplicaFetcher("c", f).apply(fetch_answer(lead, FetchRequest(f.log.log_end_offset, replica_id=2)))
        assert f.log.high_watermark == 2
        resp = FetchResponse.from_dict(await asyncio.wait_for(waiting, 1))
        assert values(resp) == [b"b"] and resp.high_watermark == 2

    asyncio.run(main())


def test_client_metadata_travels_in_the_data_channels_frame():
    req = FetchRequest(5, client_rack="b")
    import msgpack

    back = decode_fetch(msgpack.packb(fetch_fields(req)))
    assert back.client_rack == "b" and not back.fetch_only_leader
    assert decode_fetch(msgpack.packb(fetch_fields(FetchRequest(5)))).fetch_only_leader
    assert FetchRequest(5, replica_id=2, client_rack="b").fetch_only_leader  # a follower's own fetch


# ---- the racks' cache ------------------------------------------------------------------------------------


class _Broker:
    """The broker actor's ``metadata`` as a replica process calls it (``.metadata.remote()``, awaited)."""

    def __init__(self):
        self.brokers = [{"id": 1, "rack": "a", "alive": True}, {"id": 2, "rack": "b", "alive": True}]
        self.calls, self.fail = 0, False

    @property
    def metadata(self):
        outer = self

        class _M:
            async def remote(self):
                outer.calls += 1
                await asyncio.sleep(0.01)
                if outer.fail:
                    raise asyncio.TimeoutError()
                return {"brokers": list(outer.brokers)}

        return _M()


def test_broker_racks_are_read_once_and_again_when_old_or_missing(monkeypatch):
    import actors.channels.replica_lookup as lookup

    broker = _Broker()

    async def handle(cluster, broker_id):
        return broker

    monkeypatch.setattr(lookup, "broker_handle_async", handle)

    async def main():
        racks = BrokerRacks("c", 1, max_age_s=0.5)
        got = await asyncio.gather(*(racks.get((1, 2)) for _ in range(5)))  # five fetches at once: one read
        assert got == [{1: "a", 2: "b"}] * 5 and broker.calls == 1 and racks.reads == 1
        assert await racks.get((1, 2)) == {1: "a", 2: "b"} and broker.calls == 1  # fresh: no read
        broker.brokers.append({"id": 3, "rack": "c", "alive": True})
        assert 3 not in await racks.get((1, 3))  # a broker missing: asked again, but not within a second
        assert broker.calls == 1
        await asyncio.sleep(0.6)  # old: read again
        assert (await racks.get((1, 3)))[3] == "c" and broker.calls == 2
        broker.fail = True
        await asyncio.sleep(0.6)
        assert await racks.get((1,)) == {1: "a", 2: "b", 3: "c"}  # the broker did not answer: the last racks kept
        assert broker.calls == 3 and racks.reads == 2

    asyncio.run(main())
