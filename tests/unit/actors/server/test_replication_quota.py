"""The replication quota without Ray: Kafka's windowed rate (samples, expiry, the minimum window), the
throttled-replicas lists, and the bound a throttled move cannot beat, checked against simulated fetch loops."""

from __future__ import annotations

import random

import pytest

from actors.server.replication_quota import (
    FOLLOWER_RATE,
    LEADER_RATE,
    UNLIMITED,
    WINDOW_NUM,
    WINDOW_SIZE_S,
    ReplicationQuotaManager,
    max_bytes_within,
    min_seconds_for,
    throttled_replicas,
)


def test_throttled_replica_lists_name_partition_broker_pairs_or_every_replica():
    t = throttled_replicas("0:1, 1:2,3:1")
    assert t.includes(0, 1) and t.includes(3, 1) and t.includes(1, 2)
    assert not t.includes(0, 2) and not t.includes(1, 1)
    assert all(throttled_replicas("*").includes(p, b) for p in range(3) for b in range(3))
    for nothing in ("", None, " , "):
        assert not throttled_replicas(nothing).includes(0, 0)


def test_an_unlimited_rate_throttles_nothing():
    q = ReplicationQuotaManager()
    q.record(10**12, 0.0)
    assert not q.is_quota_exceeded(0.1)
    assert not q.is_throttled(throttled_replicas("*"), 0, 0)
    q.configure({LEADER_RATE: 100}, LEADER_RATE)
    assert q.is_throttled(throttled_replicas("*"), 0, 0) and not q.is_throttled(throttled_replicas("1:1"), 0, 1)


def test_the_rate_is_counted_over_at_least_window_num_minus_one_windows():
    # Kafka's Rate: 11 samples of 1 s; a first burst is divided by 10 s more than the 0.5 s it took
    q = ReplicationQuotaManager(rate=1000, window_num=11, window_size_s=1.0)
    q.record(9000, 0.0)
    assert q.measured_rate(0.5) == pytest.approx(9000 / 10.5)
    assert not q.is_quota_exceeded(0.5)
    q.record(2000, 0.6)
    assert q.measured_rate(0.6) == pytest.approx(11000 / 10.6) and q.is_quota_exceeded(0.6)
    # at 20 s both are older than the whole window (11 s): reset, nothing counts
    assert q.measured_rate(20.0) == 0 and not q.is_quota_exceeded(20.0)


def test_samples_roll_and_the_elapsed_time_is_the_oldest_samples_age():
    q = ReplicationQuotaManager(rate=10**9, window_num=3, window_size_s=1.0)
    for t in range(6):  # one record per second: samples start at 3, 4, 5 after rolling
        q.record(100, float(t))
    assert sorted(s.start for s in q.samples) == [3.0, 4.0, 5.0]
    assert q.measured_rate(5.5) == pytest.approx(300 / 2.5)


def test_configure_keeps_samples_for_a_new_rate_and_resets_them_for_a_new_window():
    q = ReplicationQuotaManager.from_config({FOLLOWER_RATE: 500, WINDOW_NUM: 2, WINDOW_SIZE_S: 1}, FOLLOWER_RATE)
    assert (q.rate, q.window_num, q.window_size_s) == (500, 2, 1.0)
    q.record(1000, 0.0)
    q.configure({FOLLOWER_RATE: 400, WINDOW_NUM: 2, WINDOW_SIZE_S: 1}, FOLLOWER_RATE)
    assert q.rate == 400 and q.recorded == 1000 and q.samples
    q.configure({FOLLOWER_RATE: 400, WINDOW_NUM: 5, WINDOW_SIZE_S: 1}, FOLLOWER_RATE)
    assert q.samples == [] and q.measured_rate(1.0) == 0
    q.configure({}, FOLLOWER_RATE)
    assert q.rate == UNLIMITED and not q.limited


def simulate(rng: random.Random, rate: int, num: int, size: float, max_fetch: int, total: int, idle: bool = True):
    """A throttled follower's loop as the leader and the fetch session run it: a fetch goes out when the quota
    is not exceeded (else the fetch waits, 0-0.5 s as replica.fetch.wait.max.ms would), takes 1-50 ms, moves up to
    ``max_fetch`` bytes (sometimes none: the leader had nothing new, sometimes a pause). Returns
    [(time, bytes so far)] after each fetch."""
    q = ReplicationQuotaManager(rate=rate, window_num=num, window_size_s=size)
    now, moved, trace = 0.0, 0, []
    while moved < total:
        if q.is_quota_exceeded(now):
            now += rng.choice([0.0, 0.05, 0.5, rng.random() * 0.5])
            continue
        now += rng.uniform(0.001, 0.05)
        n = min(total - moved, rng.choice([max_fetch, max_fetch, rng.randrange(max_fetch + 1), 0]))
        if idle and rng.random() < 0.02:
            now += rng.uniform(0, 3 * num * size)  # an idle spell (no data, a broken connection)
        q.record(n, now)
        moved += n
        trace.append((now, moved))
    return trace


@pytest.mark.parametrize("seed", range(40))
def test_no_simulated_fetch_loop_beats_the_bound(seed):
    rng = random.Random(seed)
    rate = rng.choice([100_000, 1 << 20, 5 << 20])
    num, size = rng.choice([(2, 1.0), (11, 1.0), (3, 2.0), (1, 1.0)])
    max_fetch = rng.choice([rate // 10, rate // 2, rate * 2])
    trace = simulate(rng, rate, num, size, max_fetch, total=rate * rng.choice([5, 20, 60]))
    for i, (t0, b0) in enumerate(trace):  # every span between two fetches, not only from the start
        for t1, b1 in trace[i + 1 : i + 40]:
            assert b1 - b0 <= max_bytes_within(t1 - t0, rate, num, size, max_fetch) + max_fetch
    end, moved = trace[-1]
    assert end >= min_seconds_for(moved, rate, num, size, max_fetch)


def test_a_steady_throttled_loop_runs_at_about_the_rate():
    rng = random.Random(1)
    trace = simulate(rng, 1 << 20, 2, 1.0, 128 << 10, total=20 << 20, idle=False)
    end, moved = trace[-1]
    assert 0.8 * (1 << 20) <= moved / end <= 1.6 * (1 << 20)
    assert min_seconds_for(8 << 20, 1 << 20, 2, 1.0, 320 << 10) == pytest.approx((8 - 1 - 0.625) / 1.3125)


def test_the_configs_reach_a_replica_as_replica_settings_not_as_log_configs():
    """The controller passes a topic's throttled-replica lists to its replicas with LogConfig's overrides; the
    broker's rates and window come with the replica settings; the replica's LogConfig never sees the lists."""
    from actors.metadata.topic_configs import replica_configs
    from actors.replication.leader_and_isr import replica_props
    from actors.replication.replica_config import split_config
    from storage.log import LogConfig

    overrides = {"retention.ms": "5000", "preallocate": "true", "leader.replication.throttled.replicas": "0:1"}
    sent = replica_configs(overrides)
    assert sent == {"retention.ms": "5000", "leader.replication.throttled.replicas": "0:1"}  # stored-only dropped
    broker = {LEADER_RATE: "1048576", WINDOW_NUM: 2, "log.retention.ms": 1}
    replica, topic = split_config(replica_props(broker, sent))
    assert (replica[LEADER_RATE], replica[WINDOW_NUM], replica[FOLLOWER_RATE]) == (1 << 20, 2, UNLIMITED)
    assert replica["leader.replication.throttled.replicas"] == "0:1"
    assert replica["follower.replication.throttled.replicas"] == ""
    assert "leader.replication.throttled.replicas" not in topic
    LogConfig.from_props(topic)  # takes what is left
    q = ReplicationQuotaManager.from_config(replica, LEADER_RATE)
    assert q.is_throttled(throttled_replicas(replica["leader.replication.throttled.replicas"]), 0, 1)
