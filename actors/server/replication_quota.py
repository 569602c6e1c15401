"""Kafka's ReplicationQuotaManager (kafka.server): the byte rate of throttled replication over a sampled window,
and which replicas are throttled (a topic's ``leader.replication.throttled.replicas`` /
``follower.replication.throttled.replicas``). Pure: time is passed in. The leader side is held by a process's
ReplicationServer (actors/channels/replication_channel.py), the follower side by its fetch sessions
(actors/replication/fetch_session.py); how they use it: docs/internals.md, "Replication throttles".
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

UNLIMITED = 2**63 - 1  # Kafka's default rate (Long.MAX_VALUE): nothing is throttled
LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"
WINDOW_NUM, WINDOW_SIZE_S = "replication.quota.window.num", "replication.quota.window.size.seconds"
# the broker configs, with Kafka's defaults (QuotaConfig), a replica takes (actors/replication/replica_config.py)
QUOTA_DEFAULTS = {LEADER_RATE: UNLIMITED, FOLLOWER_RATE: UNLIMITED, WINDOW_NUM: 11, WINDOW_SIZE_S: 1}
THROTTLED_REPLICAS_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)


@dataclass(frozen=True)
class ThrottledReplicas:
    """One topic's throttled-replicas config: every replica (``*``) or ``partition:broker`` pairs."""

    every: bool
    pairs: frozenset[tuple[int, int]]

    def includes(self, partition: int, broker_id: int) -> bool:
        """Kafka's ConfigHandler.parseThrottledPartitions: a broker throttles the partitions listed with its id."""
        return self.every or (partition, broker_id) in self.pairs


NONE = ThrottledReplicas(False, frozenset())


@lru_cache(maxsize=1024)
def throttled_replicas(value: str | None) -> ThrottledReplicas:
    """The parsed config value ("" or None: nothing). Values are validated where topic configs are set
    (actors/metadata/topic_configs.py, ThrottledReplicaListValidator); an entry that does not parse here is
    left out."""
    items = [i.strip() for i in (value or "").split(",") if i.strip()]
    if items == ["*"]:
        return ThrottledReplicas(True, frozenset())
    pairs = set()
    for item in items:
        p, _, b = item.partition(":")
        if p.strip().isdigit() and b.strip().isdigit():
            pairs.add((int(p), int(b)))
    return ThrottledReplicas(False, frozenset(pairs)) if pairs else NONE


class _Sample:
    __slots__ = ("start", "value")

    def __init__(self, start: float):
        self.start, self.value = start, 0.0


class ReplicationQuotaManager:
    """A byte-rate quota over ``window_num`` samples of ``window_size_s`` each (Kafka's Rate over a SampledStat:
    a sample ends ``window_size_s`` after its first record, samples older than the whole window are reset, and the
    rate divides their sum by the time since the oldest one started, counted as at least ``window_num - 1``
    windows). ``is_quota_exceeded`` says whether throttled replicas sit out now; ``record`` counts the bytes a
    throttled replica's fetch moved. One per side per process; called from one event loop."""

    def __init__(self, rate: int = UNLIMITED, window_num: int = 11, window_size_s: float = 1.0):
        self.rate, self.window_num, self.window_size_s = rate, max(1, int(window_num)), float(window_size_s)
        self.samples: list[_Sample] = []
        self.current = 0
        self.recorded = 0  # bytes recorded in all (for state() and tests)
        self.exceeded_checks = 0  # checks that found the quota exceeded

    @classmethod
    def from_config(cls, conf: dict, rate_key: str) -> ReplicationQuotaManager:
        q = cls()
        q.configure(conf, rate_key)
        return q

    def configure(self, conf: dict, rate_key: str) -> None:
        """The rate and window of a replica's config (broker configs; no change leaves the samples as they are)."""
        rate = int(conf.get(rate_key, UNLIMITED))
        num, size = int(conf.get(WINDOW_NUM, 11)), float(conf.get(WINDOW_SIZE_S, 1))
        if (num, size) != (self.window_num, self.window_size_s):
            self.window_num, self.window_size_s = max(1, num), size
            self.samples, self.current = [], 0
        self.rate = rate

    @property
    def limited(self) -> bool:
        return self.rate < UNLIMITED

    def is_throttled(self, throttled: ThrottledReplicas, partition: int, broker_id: int) -> bool:
        """Whether ``broker_id``'s replica of ``partition`` is throttled on this side (a rate is set and the
        topic's list names it)."""
        return self.limited and throttled.includes(partition, broker_id)

    def _purge(self, now: float) -> None:
        expire = self.window_num * self.window_size_s
        for s in self.samples:
            if now - s.start >= expire:
                s.start, s.value = now, 0.0

    def record(self, nbytes: int, now: float) -> None:
        if nbytes <= 0:
            return
        self.recorded += nbytes
        if not self.samples:
            self.samples.append(_Sample(now))
            self.current = 0
        cur = self.samples[self.current]
        if now - cur.start >= self.window_size_s:  # complete: the next sample (the oldest one, reused)
            if len(self.samples) < self.window_num:
                self.samples.append(_Sample(now))
                self.current = len(self.samples) - 1
            else:
                self.current = (self.current + 1) % len(self.samples)
                self.samples[self.current].start, self.samples[self.current].value = now, 0.0
            cur = self.samples[self.current]
        cur.value += nbytes

    def measured_rate(self, now: float) -> float:
        """Bytes/s over the window now (Kafka's Rate.measure)."""
        if not self.samples:
            return 0.0
        self._purge(now)
        total = sum(s.value for s in self.samples)
        elapsed = now - min(s.start for s in self.samples)
        full = int(elapsed // self.window_size_s)
        if full < self.window_num - 1:
            elapsed += (self.window_num - 1 - full) * self.window_size_s
        return total / max(elapsed, 1e-3)

    def is_quota_exceeded(self, now: float) -> bool:
        if not self.limited:
            return False
        exceeded = self.measured_rate(now) > self.rate
        self.exceeded_checks += exceeded
        return exceeded

    def describe(self, now: float) -> dict:
        return {
            "rate": self.rate,
            "measured": round(self.measured_rate(now)),
            "recorded": self.recorded,
            "exceeded_checks": self.exceeded_checks,
        }


def max_bytes_within(seconds: float, rate: float, window_num: int, window_size_s: float, max_fetch: int) -> float:
    """An upper bound on the throttled bytes one side lets through in ``seconds`` when fetches go one at a time
    and each moves at most ``max_fetch`` bytes: the rate, plus the window's initial allowance of
    ``window_num - 1`` windows, plus one fetch per ``window_num - 1`` windows checked before its bytes came (and
    two more at the ends). What a throttled move of N bytes cannot beat (``min_seconds_for``)."""
    span = max(1, window_num - 1) * window_size_s
    return rate * (seconds + span) + max_fetch * (seconds / span + 2)


def min_seconds_for(nbytes: float, rate: float, window_num: int, window_size_s: float, max_fetch: int) -> float:
    """The least time ``max_bytes_within`` allows for ``nbytes`` (0 when the allowance alone covers them)."""
    span = max(1, window_num - 1) * window_size_s
    return max(0.0, (nbytes - rate * span - 2 * max_fetch) / (rate + max_fetch / span))
