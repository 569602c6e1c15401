"""KIP-392 on the wire without Ray: the Fetch handler in front of a backend whose replicas are real Partitions and
Logs answered as the replica actor answers (ReadReplicas' redirect, then the read): Fetch v11+ carries the
client's rack to the replica, a leader whose selector picks a follower answers preferred_read_replica with no
records at once (no long poll), a follower answers up to its HW, and below v11 only the leader serves."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest
from kio.schema.fetch.v10 import request as f10
from kio.schema.fetch.v11 import request as f11

from actors.replication.partition import Partition
from actors.replication.read_replica import BrokerRacks, ReadReplicas
from actors.replication.replica_manager import fetch_answer
from protocol import errors as E
from protocol.control_messages import LeaderAndIsrPartitionState
from serve.kafka_wire.handlers import fetch
from storage.log import Log, LogConfig
from storage.records import RecordBatchBuilder, decode_records

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
EPOCH = 2


class ReplicaBackend:
    """One partition ``t-0`` of which this broker hosts the replica ``part`` (leader or follower); ``fetch`` does
    what ``Replica._fetch`` does, without the wait (a consumer fetch to a caught-up partition then answers
    at once: the test measures that nothing waits)."""

    broker_id = 1
    cluster_id = "unit"

    def __init__(self, part: Partition, selector: str):
        self.part, self.selector = part, selector
        racks = BrokerRacks("unit", part.broker_id)
        racks.racks, racks.read_at = {1: "a", 2: "b", 3: "c"}, float("inf")
        self.reads = ReadReplicas(part, racks)
        self.seen: list = []

    async def metadata(self, fresh: bool = False) -> dict:
        return {"topics": {}, "brokers": []}

    async def fetch(self, topic, partition, req):
        self.seen.append(req)
        moved = await self.reads.redirect(req, self.selector)
        if moved is not None:
            return moved
        answer = fetch_answer(self.part, req)
        if req.max_wait_ms and not answer.get("records") and not answer.get("error_code"):
            await asyncio.sleep(req.max_wait_ms / 1000)  # the long poll's wait, nothing arriving
        return answer


def state(leader: int) -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState(
        topic="t",
        partition=0,
        controller_epoch=1,
        leader=leader,
        leader_epoch=EPOCH,
        isr=(1, 2),
        partition_epoch=EPOCH,
        replicas=(1, 2),
    )


@pytest.fixture
def pair(tmp_path):
    """Leader b1 (rack a) and follower b2 (rack b), both with offsets 0-2 and HW 3."""
    lead = Partition(1, Log(str(tmp_path / "b1"), LogConfig(), now_ms=0), "t", 0)
    follower = Partition(2, Log(str(tmp_path / "b2"), LogConfig(), now_ms=0), "t", 0)
    lead.make_leader(state(1), 0)
    follower.make_follower(state(1))
    b = RecordBatchBuilder()
    for v in (b"a", b"b", b"c"):
        b.append(1000, None, v)
    lead.append_records_to_leader(b.build(), 1, 1000)
    for _ in range(3):
        lead.update_follower_fetch_state(2, follower.log.log_end_offset, 1000)
        resp = lead.read(follower.log.log_end_offset, 1 << 20, 2, 0, EPOCH)
        follower.append_as_follower(resp.records, resp.high_watermark, resp.log_start_offset)
    assert lead.log.high_watermark == follower.log.high_watermark == 3
    yield lead, follower
    lead.log.close()
    follower.log.close()


def request(version: int, offset: int, rack: str = "b", wait_ms: int = 2000):
    mod = f11 if version >= 11 else f10
    part = mod.FetchPartition(
        partition=0, current_leader_epoch=EPOCH, fetch_offset=offset, log_start_offset=-1, partition_max_bytes=1 << 20
    )
    kw = {"rack_id": rack} if version >= 11 else {}
    return mod.FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=wait_ms),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(mod.FetchTopic(topic="t", partitions=(part,)),),
        forgotten_topics_data=(),
        **kw,
    )


def answer(backend, version: int, offset: int, **kw):
    t0 = time.monotonic()
    resp = asyncio.run(fetch.handle(backend, request(version, offset, **kw), version))
    return resp.responses[0].partitions[0], time.monotonic() - t0


def test_the_leader_names_the_follower_in_the_clients_rack_at_once(pair):
    lead, _ = pair
    backend = ReplicaBackend(lead, RACK_AWARE)
    p, took = answer(backend, 11, 3)  # caught up: without the redirect this would long-poll for 2 s
    assert p.preferred_read_replica == 2 and p.records == b"" and p.error_code == 0 and p.high_watermark == 3
    assert took < 1.5, "a preferred read replica is answered at once"
    assert backend.seen[0].client_rack == "b"
    p, _ = answer(backend, 11, 0, rack="a")  # the leader's own rack: records from the leader
    assert p.preferred_read_replica == -1 and [r[3] for r in decode_records(p.records)] == [b"a", b"b", b"c"]
    p, _ = answer(ReplicaBackend(lead, ""), 11, 0)  # no replica.selector.class: the leader serves
    assert p.preferred_read_replica == -1 and p.records


def test_a_follower_serves_fetch_v11_and_refuses_v10(pair):
    _, follower = pair
    backend = ReplicaBackend(follower, RACK_AWARE)
    p, _ = answer(backend, 11, 1)  # inside the one batch: the batch whole, as the leader answers
    assert p.error_code == 0 and [(r[0], r[3]) for r in decode_records(p.records)] == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert p.high_watermark == 3 and p.preferred_read_replica == -1
    p, _ = answer(backend, 11, 7)
    assert p.error_code == E.OffsetOutOfRangeError.code
    p, _ = answer(backend, 10, 0)  # no client metadata below v11: the leader only, as Kafka
    assert p.error_code == E.NotLeaderOrFollowerError.code
    assert backend.seen[-1].client_rack is None
