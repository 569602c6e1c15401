"""Pure liveness logic: session timers, replica supervision states and restart backoff, and the
controller's OfflineReplica / OnlineReplica decisions."""

from __future__ import annotations

import random

import msgpack
import pytest

from actors.metadata.controller_config import ControllerConfig
from actors.metadata.controller_logic import ControllerLogic
from actors.metadata.image import MetadataImage
from actors.metadata.replica_state_machine import offline_replicas, online_replicas
from actors.server.supervision import (
    DEAD,
    RESTART_BACKOFF_MAX_MS,
    RESTART_BACKOFF_MS,
    RESTART_STABLE_MS,
    RUNNING,
    STARTING,
    InvalidTransition,
    ReplicaSupervision,
    SessionTimer,
)
from protocol.errors import BrokerIdNotRegisteredError, StaleBrokerEpochError, UnknownTopicOrPartitionError

# ---- SessionTimer ---------------------------------------------------------------------------------


def test_session_expires_only_after_the_timeout_of_silence():
    t = SessionTimer(1000, now_ms=0, stall_ms=300)
    for now in range(0, 1001, 100):
        t.tick(now)
    assert not t.expired(1000)
    t.tick(1100)
    assert t.expired(1100) and t.silent_ms(1100) == 1100
    t.answered(1050)
    assert not t.expired(1100) and t.silent_ms(1100) == 50


def test_answers_count_from_when_they_were_sent():
    t = SessionTimer(1000, now_ms=0, stall_ms=300)
    t.answered(200)  # sent at 200, arrived much later
    for now in range(0, 1300, 100):
        t.tick(now)
    assert t.expired(1250)
    t.answered(100)  # an older answer never moves the clock back
    assert t.last_answer_ms == 200


def test_the_watchers_own_stall_is_not_the_peers_silence():
    t = SessionTimer(1000, now_ms=0, stall_ms=300)
    t.tick(100)
    t.tick(5000)  # our loop was blocked for ~5 s: the peer gets a fresh session
    assert not t.expired(5000)
    for now in range(5100, 6001, 100):
        t.tick(now)
    assert not t.expired(6000)
    t.tick(6100)
    assert t.expired(6100)


def test_session_timeout_must_be_positive():
    with pytest.raises(ValueError):
        SessionTimer(0, 0)


# ---- ReplicaSupervision ---------------------------------------------------------------------------

K = ("t", 0)


def test_death_is_reported_once_per_incarnation():
    s = ReplicaSupervision(3000)
    inc = s.started(K, 0)
    assert inc.state == STARTING
    assert s.died(K, inc.seq, 10) is True
    assert inc.state == DEAD
    assert s.died(K, inc.seq, 20) is False  # the long-poll and the prober both saw it
    inc2 = s.started(K, 30)
    assert s.died(K, inc.seq, 40) is False  # an old incarnation's death is old news
    assert s.died(K, inc2.seq, 50) is True


def test_only_running_replicas_are_judged_frozen():
    s = ReplicaSupervision(1000)
    inc = s.started(K, 0)
    for now in range(0, 5001, 100):
        s.tick(now)
    assert s.frozen(5000) == []  # still opening its log: judged by its death only
    s.answered(K, inc.seq, sent_ms=5000, pid=42)
    assert inc.state == RUNNING and inc.pid == 42
    for now in range(5100, 6001, 100):
        s.tick(now)
    assert s.frozen(6000) == []
    s.tick(6100)
    assert s.frozen(6100) == [inc]
    assert s.died(K, inc.seq, 6100) and s.frozen(6200) == []


def test_a_bound_replica_is_judged_from_its_start():
    """A replica whose bind answered (its log open, its pid known) is RUNNING at once: one frozen before
    its first probe answered is still found (CI: a leader SIGSTOPped ~0.1 s after its bind stayed
    STARTING, judged by its death only, and its partition was never writable again)."""
    s = ReplicaSupervision(1000)
    inc = s.started(K, 0, pid=42)
    assert inc.state == RUNNING and inc.pid == 42
    for now in range(0, 1001, 100):
        s.tick(now)
    assert s.frozen(1000) == []
    s.tick(1100)
    assert s.frozen(1100) == [inc]


def test_stopped_incarnations_are_forgotten_and_ignore_late_news():
    s = ReplicaSupervision(1000)
    inc = s.started(K, 0)
    s.stopped(K, inc.seq)
    assert K not in s.current
    assert s.died(K, inc.seq, 10) is False
    s.answered(K, inc.seq, 10)
    assert K not in s.current
    older = s.started(K, 20)
    newer = s.started(K, 30)  # a new actor replaces a live one: the old incarnation is stopped
    assert older.state == "stopped" and s.current[K] is newer
    s.stopped(K, older.seq)  # a late stop of the older one leaves the newer tracked
    assert s.current[K] is newer


def test_transitions_are_asserted():
    s = ReplicaSupervision(1000)
    inc = s.started(K, 0)
    s.died(K, inc.seq, 1)
    with pytest.raises(InvalidTransition):
        inc.move(RUNNING)


def test_restart_backoff_grows_and_resets_after_a_stable_run():
    s = ReplicaSupervision(1000)
    now, delays = 0, []
    for _ in range(10):
        inc = s.started(K, now)
        now += 100
        s.died(K, inc.seq, now)
        delays.append(s.restart_delay_ms(K))
    assert delays[0] == 0 and delays[1] == RESTART_BACKOFF_MS and delays[2] == 2 * RESTART_BACKOFF_MS
    assert delays == sorted(delays) and delays[-1] == RESTART_BACKOFF_MAX_MS
    inc = s.started(K, now)
    now += RESTART_STABLE_MS
    s.died(K, inc.seq, now)
    assert s.restart_delay_ms(K) == 0  # it ran long enough: a fresh death, no crash loop
    s.forget(K)
    assert s.restart_delay_ms(K) == 0 and K not in s.current


# ---- OfflineReplica / OnlineReplica ---------------------------------------------------------------


def make(n=3, **cfg) -> ControllerLogic:
    logic = ControllerLogic(MetadataImage(), ControllerConfig(**cfg), random.Random(7))
    for b in range(n):
        apply(logic, logic.register_broker(b, {"log_dir": f"/d/{b}"})[0])
    return logic


def apply(logic, records):
    for r in records:
        logic.image.replay(msgpack.unpackb(msgpack.packb(r), strict_map_key=False))


def topic(logic, name, replicas_list, configs=None):
    recs, res = logic.create_topics(
        [
            {
                "name": name,
                "num_partitions": len(replicas_list),
                "replication_factor": len(replicas_list[0]),
                "replica_assignment": replicas_list,
                "configs": configs or {},
            }
        ]
    )
    assert res[0]["error_code"] == 0, res
    apply(logic, recs)


def epoch(logic, b):
    return logic.image.brokers[b].broker_epoch


def test_offline_leader_moves_leadership_and_leaves_the_isr():
    logic = make()
    topic(logic, "t", [[0, 1, 2]])
    before = logic.image.partition("t", 0)
    recs, res = offline_replicas(logic, 0, epoch(logic, 0), [["t", 0]])
    assert res == [{"topic": "t", "partition": 0, "error_code": 0, "error_message": None}]
    apply(logic, recs)
    s = logic.image.partition("t", 0)
    assert (s.leader, s.isr, s.leader_epoch) == (1, [1, 2], before.leader_epoch + 1)
    assert logic.image.brokers[0].alive  # the broker itself stays registered
    # the recreated replica is a follower: nothing to elect; it rejoins through ISR expansion
    recs, res = online_replicas(logic, 0, epoch(logic, 0), [["t", 0]])
    assert recs == [] and res[0]["error_code"] == 0


def test_offline_follower_leaves_the_isr_with_an_epoch_bump():
    logic = make()
    topic(logic, "t", [[0, 1, 2]])
    recs, _ = offline_replicas(logic, 2, epoch(logic, 2), [("t", 0)])
    apply(logic, recs)
    s = logic.image.partition("t", 0)
    assert (s.leader, s.isr, s.leader_epoch) == (0, [0, 1], 1)
    # already out of the ISR: nothing changes
    assert offline_replicas(logic, 2, epoch(logic, 2), [("t", 0)])[0] == []


def test_sole_isr_leader_goes_leaderless_then_is_elected_again_when_back():
    logic = make()
    topic(logic, "t", [[0, 1, 2]])
    apply(logic, logic.alter_partition("t", 0, 0, 0, [0], 0)[0])  # followers fell out of the ISR
    recs, _ = offline_replicas(logic, 0, epoch(logic, 0), [("t", 0)])
    apply(logic, recs)
    s = logic.image.partition("t", 0)
    assert (s.leader, s.isr) == (-1, [0])  # the ISR still names the replica holding every acked record
    recs, res = online_replicas(logic, 0, epoch(logic, 0), [("t", 0)])
    apply(logic, recs)
    s2 = logic.image.partition("t", 0)
    assert (s2.leader, s2.isr, s2.leader_epoch) == (0, [0], s.leader_epoch + 1)


def test_sole_isr_leader_with_unclean_election_moves_to_another_replica():
    logic = make()
    topic(logic, "t", [[0, 1, 2]], {"unclean.leader.election.enable": "true"})
    apply(logic, logic.alter_partition("t", 0, 0, 0, [0], 0)[0])
    apply(logic, offline_replicas(logic, 0, epoch(logic, 0), [("t", 0)])[0])
    s = logic.image.partition("t", 0)
    assert (s.leader, s.isr) == (1, [1])


def test_offline_and_online_refuse_stale_brokers_and_unknown_partitions():
    logic = make()
    topic(logic, "t", [[0, 1]])
    e0 = epoch(logic, 0)
    recs, res = offline_replicas(logic, 0, e0 - 1, [("t", 0)])
    assert recs == [] and res[0]["error_code"] == StaleBrokerEpochError.code
    recs, res = online_replicas(logic, 9, 0, [("t", 0)])
    assert recs == [] and res[0]["error_code"] == BrokerIdNotRegisteredError.code
    recs, res = offline_replicas(logic, 2, epoch(logic, 2), [("t", 0), ("nope", 0), ("t", 5), "bad"])
    assert recs == [] and {r["error_code"] for r in res} == {UnknownTopicOrPartitionError.code}
    apply(logic, logic.fence_broker(0))
    recs, res = offline_replicas(logic, 0, e0, [("t", 0)])
    assert recs == [] and res[0]["error_code"] == StaleBrokerEpochError.code
