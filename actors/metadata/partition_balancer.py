"""The partition balancer (Redpanda's name; Cruise Control's proposals): from the metadata image and how long each
broker has been down, a plan of KIP-455 reassignments that heals lost brokers' replicas onto live ones and
spreads replicas, then preferred leaders, over the live brokers. Pure, time passed in; called by the controller's
balancer loop and its ``partition_balancer_plan`` RPC. docs/internals.md ("Partition balancer") has the rules.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from actors.metadata.controller_config import ControllerConfig
from actors.metadata.image import MetadataImage
from actors.metadata.partition_change import NO_LEADER, PartitionRegistration

__all__ = ["BalancePlan", "DowntimeClock", "Move", "plan", "tolerance_band", "underloaded"]

HEAL, REPLICAS, LEADERS = "heal", "replicas", "leaders"  # a move's reason


@dataclass(frozen=True)
class Move:
    """One reassignment: ``target`` replaces the partition's ``replicas`` (a leader move only reorders them)."""

    topic: str
    partition: int
    replicas: list[int]
    target: list[int]
    reason: str

    def to_dict(self) -> dict:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "replicas": list(self.replicas),
            "target": list(self.target),
            "reason": self.reason,
        }


@dataclass
class BalancePlan:
    """What the balancer would do now. ``unhealable``: ``{topic, partition, replicas, lost, reason}`` of the
    partitions with a lost broker's replica that no move can restore; ``deferred``: moves held back by
    num.concurrent.partition.movements.per.broker (planned again on a later round)."""

    moves: list[Move] = field(default_factory=list)
    elections: list[tuple[str, int]] = field(default_factory=list)  # preferred leader elections to run
    unhealable: list[dict] = field(default_factory=list)
    deferred: int = 0
    in_progress: int = 0  # reassignments already running
    lost_brokers: list[int] = field(default_factory=list)  # down past replica.auto.heal.delay.ms
    down_brokers: list[int] = field(default_factory=list)  # down, not yet past the delay
    replicas_per_broker: dict[int, int] = field(default_factory=dict)  # live brokers, once the moves are done
    leaders_per_broker: dict[int, int] = field(default_factory=dict)  # preferred leaders, likewise
    replicas_before: dict[int, int] = field(default_factory=dict)  # the same two before the moves
    leaders_before: dict[int, int] = field(default_factory=dict)
    replica_band: tuple[int, int] = (0, 0)
    leader_band: tuple[int, int] = (0, 0)
    balance_skipped: str = ""  # why balancing was not planned ("" when it was)

    @property
    def balanced(self) -> bool:
        """Every live broker's replica and preferred-leader counts inside their tolerance bands."""
        return _within(self.replicas_per_broker, self.replica_band) and _within(
            self.leaders_per_broker, self.leader_band
        )

    def to_dict(self) -> dict:
        return {
            "moves": [m.to_dict() for m in self.moves],
            "elections": [{"topic": t, "partition": p} for t, p in self.elections],
            "unhealable": [dict(u) for u in self.unhealable],
            "deferred": self.deferred,
            "in_progress": self.in_progress,
            "lost_brokers": list(self.lost_brokers),
            "down_brokers": list(self.down_brokers),
            "replicas_per_broker": {str(b): n for b, n in sorted(self.replicas_per_broker.items())},
            "leaders_per_broker": {str(b): n for b, n in sorted(self.leaders_per_broker.items())},
            "replicas_before": {str(b): n for b, n in sorted(self.replicas_before.items())},
            "leaders_before": {str(b): n for b, n in sorted(self.leaders_before.items())},
            "replica_band": list(self.replica_band),
            "leader_band": list(self.leader_band),
            "balanced": self.balanced,
            "balance_skipped": self.balance_skipped,
        }


def _within(counts: dict[int, int], band: tuple[int, int]) -> bool:
    return all(band[0] <= n <= band[1] for n in counts.values())


def tolerance_band(total: int, brokers: int, pct: int) -> tuple[int, int]:
    """The counts a broker may hold: [floor(mean) - slack, ceil(mean) + slack], slack = floor(mean * pct / 100)
    (0 below a mean of 10 at 10%: then every broker is within one of the others)."""
    if brokers <= 0:
        return (0, 0)
    mean = total / brokers
    slack = math.floor(mean * pct / 100)
    return (max(0, math.floor(mean) - slack), math.ceil(mean) + slack)


class DowntimeClock:
    """Since when (``now_ms`` of the first observation) each broker has been fenced or unregistered (named by a
    replica set but never registered). In the controller's memory only: a new controller starts the clocks
    again, so a controller failover delays a heal by up to one more replica.auto.heal.delay.ms."""

    def __init__(self) -> None:
        self.since: dict[int, int] = {}

    def observe(self, image: MetadataImage, now_ms: int) -> dict[int, int]:
        """-> broker id -> milliseconds it has been down (alive brokers are absent)."""
        down = {b for b, info in image.brokers.items() if not info.alive}
        for t in image.topics.values():
            for s in t.partitions.values():
                down.update(r for r in s.replicas if r not in image.brokers)
        for b in list(self.since):
            if b not in down:
                del self.since[b]
        for b in down:
            self.since.setdefault(b, now_ms)
        return {b: now_ms - t0 for b, t0 in self.since.items()}


def _min_isr(image: MetadataImage, topic: str, config: ControllerConfig) -> int:
    raw = image.topics[topic].configs.get("min.insync.replicas")
    try:
        return int(raw) if raw is not None else config.min_insync_replicas
    except (TypeError, ValueError):
        return config.min_insync_replicas


class _Planner:
    """One planning round's working state: loads and per-broker movement counts as the moves are chosen."""

    def __init__(self, image: MetadataImage, config: ControllerConfig, down_ms: dict[int, int]):
        self.image, self.config = image, config
        self.alive = image.alive_brokers()
        delay = config.heal_delay_ms
        self.lost = {b for b, ms in down_ms.items() if b not in self.alive and delay >= 0 and ms >= delay}
        self.down = {b for b in down_ms if b not in self.alive} - self.lost
        self.rack = {b: image.brokers[b].rack_key or f"broker-{b}" for b in self.alive}
        self.parts: list[tuple[str, int, PartitionRegistration]] = sorted(
            ((t.name, p, s) for t in image.topics.values() for p, s in t.partitions.items()),
            key=lambda x: (x[0], x[1]),
        )
        self.load: Counter[int] = Counter({b: 0 for b in self.alive})
        self.lead: Counter[int] = Counter({b: 0 for b in self.alive})
        self.busy: Counter[int] = Counter()  # movements each live broker takes part in (adding, or leading)
        for _, _, s in self.parts:
            target = s.target_replicas
            self.load.update(r for r in target if r in self.alive)
            if target and target[0] in self.alive:
                self.lead[target[0]] += 1
            if s.reassigning:
                self.busy.update(self._involved(s, s.adding))
        self.moved: dict[tuple[str, int], list[int]] = {}
        self.out = BalancePlan(
            in_progress=sum(1 for _, _, s in self.parts if s.reassigning),
            lost_brokers=sorted(self.lost),
            down_brokers=sorted(self.down),
            replicas_before={b: self.load[b] for b in sorted(self.alive)},
            leaders_before={b: self.lead[b] for b in sorted(self.alive)},
        )

    def _involved(self, s: PartitionRegistration, adding) -> list[int]:
        """The live brokers a movement loads: the replicas it adds and the leader they copy from."""
        return [r for r in {*adding, s.leader} if r in self.alive]

    def _can_start(self, s: PartitionRegistration, adding) -> bool:
        return all(self.busy[b] < self.config.movements_per_broker for b in self._involved(s, adding))

    def _add(self, topic: str, p: int, s: PartitionRegistration, target: list[int], reason: str) -> None:
        current = s.target_replicas
        adding = [r for r in target if r not in current]
        if reason != LEADERS:  # a reorder copies nothing
            self.busy.update(self._involved(s, adding))
        for r in current:
            if r in self.alive:
                self.load[r] -= 1
        for r in target:
            self.load[r] += 1
        if current and current[0] in self.alive:
            self.lead[current[0]] -= 1
        self.lead[target[0]] += 1
        self.moved[(topic, p)] = target
        self.out.moves.append(Move(topic, p, list(s.replicas), list(target), reason))

    def _racks(self, replicas) -> Counter[str]:
        return Counter(self.rack[r] for r in replicas if r in self.rack)

    # ---- heal ------------------------------------------------------------------------------------
    def heal(self) -> None:
        for topic, p, s in self.parts:
            target = s.target_replicas
            lost = [r for r in target if r in self.lost]
            if not lost:
                continue
            u = {"topic": topic, "partition": p, "replicas": list(s.replicas), "lost": lost}
            if not [r for r in s.isr if r in self.alive]:
                # the last in-sync replica is on a lost broker: removing it would lose the partition's data,
                # and a new replica has no leader to copy from
                self.out.unhealable.append(
                    {**u, "reason": "no live in-sync replica (the last one is on a lost broker)"}
                )
                continue
            if s.leader == NO_LEADER:
                self.out.unhealable.append({**u, "reason": "no leader to copy from"})
                continue
            if len(target) < _min_isr(self.image, topic, self.config):
                self.out.unhealable.append(
                    {**u, "reason": f"replication factor {len(target)} is below min.insync.replicas"}
                )
                continue
            new = list(target)
            keep = [r for r in target if r not in self.lost]
            free = [b for b in self.alive if b not in s.replicas]
            for r in lost:
                if not free:
                    break
                racks = self._racks(keep)
                # a rack the partition is not in yet, then the least-loaded broker, then the least busy one
                pick = min(free, key=lambda b: (racks[self.rack[b]], self.load[b], self.busy[b], b))
                free.remove(pick)
                keep.append(pick)
                new[new.index(r)] = pick
            if any(r in self.lost for r in new):
                self.out.unhealable.append(
                    {
                        **u,
                        "reason": f"too few live brokers ({len(self.alive)}) for replication factor {len(target)}",
                    }
                )
                continue
            adding = [r for r in new if r not in target]
            if not self._can_start(s, adding):
                self.out.deferred += 1
                continue
            self._add(topic, p, s, new, HEAL)

    # ---- balance ---------------------------------------------------------------------------------
    def _movable(self, topic: str, s: PartitionRegistration) -> bool:
        """A partition balance may move: fully in sync on live brokers, not moving, with a leader, and its
        replication factor at least min.insync.replicas (so the target alone satisfies it)."""
        return (
            not s.reassigning
            and s.leader != NO_LEADER
            and set(s.isr) == set(s.replicas)
            and all(r in self.alive for r in s.replicas)
            and len(s.replicas) >= _min_isr(self.image, topic, self.config)
        )

    def _healthy(self) -> str:
        """Why the cluster is not in a state to balance ("" when it is)."""
        if self.down:
            return f"brokers {sorted(self.down)} are down (within replica.auto.heal.delay.ms)"
        if self.out.moves or self.out.deferred:
            return "healing first"
        if self.out.unhealable:
            return "partitions cannot be healed"
        if self.out.in_progress:
            return "reassignments in progress"
        for topic, p, s in self.parts:
            if set(s.isr) != set(s.replicas) or any(r not in self.alive for r in s.replicas):
                return f"{topic}-{p} is under-replicated"
        return ""

    def balance_replicas(self) -> None:
        n = len(self.alive)
        total = sum(self.load.values())
        band = tolerance_band(total, n, self.config.balance_tolerance_pct)
        for _ in range(total + 1):
            over = sorted((b for b in self.alive if self.load[b] > band[1]), key=lambda b: (-self.load[b], b))
            under = sorted((b for b in self.alive if self.load[b] < band[0]), key=lambda b: (self.load[b], b))
            if not over and not under:
                return
            srcs = over or sorted(self.alive, key=lambda b: (-self.load[b], b))
            dsts = under or sorted(self.alive, key=lambda b: (self.load[b], b))
            if not self._one_replica_move(srcs, dsts):
                return

    def _one_replica_move(self, srcs: list[int], dsts: list[int]) -> bool:
        for src in srcs:
            for dst in dsts:
                if self.load[src] - self.load[dst] < 2:
                    continue
                best = None
                for topic, p, s in self.parts:
                    if (topic, p) in self.moved or src not in s.replicas or dst in s.replicas:
                        continue
                    if not self._movable(topic, s):
                        continue
                    target = [dst if r == src else r for r in s.replicas]
                    if len(self._racks(target)) < len(self._racks(s.replicas)):
                        continue  # never fewer racks than the partition spans now
                    # a follower before a leader (no leadership moves), then the least busy leader
                    key = (s.leader == src, self.busy[s.leader], topic, p)
                    if best is None or key < best[0]:
                        best = (key, topic, p, s, target)
                if best is None:
                    continue
                _, topic, p, s, target = best
                if not self._can_start(s, [dst]):
                    self.out.deferred += 1
                    return False
                self._add(topic, p, s, target, REPLICAS)
                return True
        return False

    def balance_leaders(self) -> None:
        """Preferred leaders spread by reordering fully in-sync partitions' replicas (no data moves)."""
        n = len(self.alive)
        total = sum(self.lead.values())
        band = tolerance_band(total, n, self.config.balance_tolerance_pct)
        for _ in range(total + 1):
            over = sorted((b for b in self.alive if self.lead[b] > band[1]), key=lambda b: (-self.lead[b], b))
            under = sorted((b for b in self.alive if self.lead[b] < band[0]), key=lambda b: (self.lead[b], b))
            if not over and not under:
                return
            srcs = over or sorted(self.alive, key=lambda b: (-self.lead[b], b))
            dsts = under or sorted(self.alive, key=lambda b: (self.lead[b], b))
            if not self._one_leader_move(srcs, dsts):
                return

    def _one_leader_move(self, srcs: list[int], dsts: list[int]) -> bool:
        """One preferred leadership from a ``srcs`` broker to a ``dsts`` broker holding at least two fewer: a reorder
        of a partition they share, else a chain of reorders through brokers in between (each passes one on, so
        their own counts stay), the shortest found breadth-first."""
        edges: dict[int, list[tuple[int, str, int, PartitionRegistration]]] = {}
        for topic, p, s in self.parts:
            if (topic, p) in self.moved or not s.replicas or not self._movable(topic, s):
                continue
            for r in s.replicas[1:]:
                edges.setdefault(s.replicas[0], []).append((r, topic, p, s))
        for src in srcs:
            want = {d for d in dsts if self.lead[src] - self.lead[d] >= 2}
            if not want:
                continue
            back: dict[int, tuple[int, str, int, PartitionRegistration] | None] = {src: None}
            queue, found = [src], None
            while queue and found is None:
                nxt = []
                for a in queue:
                    for b, topic, p, s in edges.get(a, ()):
                        if b in back:
                            continue
                        back[b] = (a, topic, p, s)
                        if b in want:
                            found = b
                            break
                        nxt.append(b)
                    if found is not None:
                        break
                queue = nxt
            if found is None:
                continue
            path = []
            b = found
            while (step := back[b]) is not None:
                path.append((b, step))
                b = step[0]
            for b, (_a, topic, p, s) in reversed(path):
                self._add(topic, p, s, [b] + [r for r in s.replicas if r != b], LEADERS)
            return True
        return False

    def elect_preferred(self) -> None:
        """With the preferred leaders in their band but the actual leaders out of it (a finished move keeps its
        leader), the partitions led by another broker than their preferred, eligible one."""
        actual = Counter({b: 0 for b in self.alive})
        actual.update(s.leader for _, _, s in self.parts if s.leader in self.alive)
        band = tolerance_band(sum(actual.values()), len(self.alive), self.config.balance_tolerance_pct)
        if _within(actual, band):
            return
        for topic, p, s in self.parts:
            pref = s.replicas[0] if s.replicas else NO_LEADER
            if s.leader != pref and pref in self.alive and pref in s.isr and not s.reassigning:
                self.out.elections.append((topic, p))

    def finish(self) -> BalancePlan:
        n = len(self.alive)
        self.out.replicas_per_broker = {b: self.load[b] for b in sorted(self.alive)}
        self.out.leaders_per_broker = {b: self.lead[b] for b in sorted(self.alive)}
        pct = self.config.balance_tolerance_pct
        self.out.replica_band = tolerance_band(sum(self.load[b] for b in self.alive), n, pct)
        self.out.leader_band = tolerance_band(sum(self.lead[b] for b in self.alive), n, pct)
        return self.out


def plan(image: MetadataImage, config: ControllerConfig, down_ms: dict[int, int], balance: bool = True) -> BalancePlan:
    """The balancer's plan: heal moves for the brokers down past replica.auto.heal.delay.ms (``down_ms``, from a
    ``DowntimeClock``); then, with ``balance`` and a healthy cluster (no broker down, every partition fully in
    sync, nothing moving), replica moves to bring every live broker's replica count into the tolerance band;
    once that holds, leader moves (replica reorders) for the preferred-leader counts, and once those hold,
    preferred elections where the actual leaders are out of the band. Every move is a target
    replica list for alter_partition_reassignments, at most num.concurrent.partition.movements.per.broker per
    live broker with the ones running."""
    pl = _Planner(image, config, down_ms)
    pl.heal()
    if balance:
        why = pl._healthy()
        if why:
            pl.out.balance_skipped = why
        else:
            pl.balance_replicas()
            if not pl.out.moves and not pl.out.deferred:
                pl.balance_leaders()
            if not pl.out.moves and not pl.out.deferred:
                pl.elect_preferred()
    else:
        pl.out.balance_skipped = "balancing not requested"
    return pl.finish()


def underloaded(image: MetadataImage, broker_id: int, pct: int) -> bool:
    """Whether a live broker holds fewer replicas than its tolerance band's floor: a joining (new, or returned
    after its replicas were healed away) broker that the balancer should give replicas to."""
    alive = image.alive_brokers()
    if broker_id not in alive:
        return False
    load = Counter({b: 0 for b in alive})
    for t in image.topics.values():
        for s in t.partitions.values():
            load.update(r for r in s.target_replicas if r in alive)
    return load[broker_id] < tolerance_band(sum(load.values()), len(alive), pct)[0]
