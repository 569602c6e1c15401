"""One partition's state and the rules that change it (Kafka's PartitionRegistration + PartitionChangeBuilder):
the builder takes the wanted changes and the live brokers and builds at most one ``PartitionChange`` record;
``check_partition`` asserts the valid transitions on every replay. Pure; called by controller_logic,
replica_state_machine and the image. docs/internals.md ("Controller") has the election and ISR rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NO_LEADER = -1
ELECT_PREFERRED, ELECT_UNCLEAN = 0, 1  # Kafka's ElectionType
KEEP = -1  # "no election requested": keep the leader while it is eligible


class MetadataInvariantError(AssertionError):
    """A record would move the metadata image into an invalid state: a controller bug, never input."""


@dataclass
class PartitionRegistration:
    replicas: list[int]
    isr: list[int]
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "partition_epoch": self.partition_epoch,
            "adding": list(self.adding),
            "removing": list(self.removing),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "PartitionRegistration":
        return cls(
            list(d["replicas"]),
            list(d["isr"]),
            d["leader"],
            d["leader_epoch"],
            d["partition_epoch"],
            list(d.get("adding") or []),
            list(d.get("removing") or []),
        )

    @property
    def target_replicas(self) -> list[int]:
        return [r for r in self.replicas if r not in self.removing]

    @property
    def original_replicas(self) -> list[int]:
        return [r for r in self.replicas if r not in self.adding]

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)


def check_partition(p: PartitionRegistration, where: str) -> None:
    def bad(msg):
        raise MetadataInvariantError(f"{where}: {msg}: {p}")

    if not p.replicas:
        bad("empty replica set")
    if len(set(p.replicas)) != len(p.replicas) or len(set(p.isr)) != len(p.isr):
        bad("duplicate replica")
    if not set(p.isr) <= set(p.replicas):
        bad("ISR member outside the replica set")
    if p.leader != NO_LEADER and p.leader not in p.isr:
        bad("leader outside the ISR")
    if not set(p.adding) <= set(p.replicas) or not set(p.removing) <= set(p.replicas):
        bad("adding/removing outside the replica set")
    if set(p.adding) & set(p.removing):
        bad("a replica both adding and removing")
    if p.leader_epoch < 0 or p.partition_epoch < 0:
        bad("negative epoch")


def check_transition(old: PartitionRegistration, new: PartitionRegistration, where: str) -> None:
    check_partition(new, where)
    if new.leader_epoch < old.leader_epoch:
        raise MetadataInvariantError(f"{where}: leader epoch went down {old.leader_epoch} -> {new.leader_epoch}")
    if new.partition_epoch <= old.partition_epoch:
        raise MetadataInvariantError(
            f"{where}: partition epoch did not go up {old.partition_epoch} -> {new.partition_epoch}"
        )
    if new.leader != old.leader and new.leader_epoch == old.leader_epoch:
        raise MetadataInvariantError(f"{where}: leader changed without a leader epoch bump")


def reassignment_plan(original: list[int], target: list[int]) -> tuple[list[int], list[int], list[int]]:
    """Kafka's PartitionReassignmentReplicas: (merged replicas, adding, removing)."""
    adding = [r for r in target if r not in original]
    removing = [r for r in original if r not in target]
    return list(target) + removing, adding, removing


class PartitionChangeBuilder:
    def __init__(
        self, topic: str, partition: int, current: PartitionRegistration, alive: set[int], unclean: bool = False
    ):
        self.topic, self.partition, self.cur = topic, partition, current
        self.alive, self.unclean = alive, unclean
        self.target_isr: list[int] | None = None
        self.target_replicas: list[int] | None = None
        self.target_adding: list[int] | None = None
        self.target_removing: list[int] | None = None
        self.election = KEEP
        self.bump_leader_epoch = False

    def set_isr(self, isr: list[int]) -> "PartitionChangeBuilder":
        self.target_isr = list(isr)
        return self

    def set_replicas(self, replicas: list[int], adding: list[int], removing: list[int]) -> "PartitionChangeBuilder":
        self.target_replicas, self.target_adding, self.target_removing = list(replicas), list(adding), list(removing)
        return self

    def set_election(self, election: int) -> "PartitionChangeBuilder":
        self.election = election
        return self

    def new_state(self) -> PartitionRegistration:
        cur = self.cur
        replicas = self.target_replicas if self.target_replicas is not None else list(cur.replicas)
        adding = self.target_adding if self.target_adding is not None else list(cur.adding)
        removing = self.target_removing if self.target_removing is not None else list(cur.removing)
        isr = self.target_isr if self.target_isr is not None else list(cur.isr)
        isr = [r for r in isr if r in replicas]
        if adding or removing:
            target = [r for r in replicas if r not in removing]
            if all(r in isr for r in target):
                replicas, adding, removing = target, [], []
                isr = [r for r in isr if r in replicas]
        leader, isr = self._elect(replicas, isr)
        leader_epoch = cur.leader_epoch
        if leader != cur.leader or self.bump_leader_epoch:
            leader_epoch += 1
        return PartitionRegistration(replicas, isr, leader, leader_epoch, cur.partition_epoch, adding, removing)

    def _elect(self, replicas: list[int], isr: list[int]) -> tuple[int, list[int]]:
        def eligible(r):
            return r in self.alive and r in isr

        cur = self.cur.leader
        if self.election == ELECT_PREFERRED and replicas and eligible(replicas[0]):
            return replicas[0], isr
        if cur != NO_LEADER and cur in replicas and eligible(cur):
            return cur, isr
        for r in replicas:
            if eligible(r):
                return r, isr
        if self.unclean or self.election == ELECT_UNCLEAN:
            for r in replicas:
                if r in self.alive:
                    return r, [r]
        return NO_LEADER, isr

    def build(self) -> dict | None:
        """The PartitionChange record, or None when nothing changes."""
        new = self.new_state()
        cur = self.cur
        same = (
            new.replicas == cur.replicas
            and new.isr == cur.isr
            and new.leader == cur.leader
            and new.leader_epoch == cur.leader_epoch
            and new.adding == cur.adding
            and new.removing == cur.removing
        )
        if same:
            return None
        new.partition_epoch = cur.partition_epoch + 1
        rec = {"type": "PartitionChange", "topic": self.topic, "partition": self.partition}
        rec.update(new.to_dict())
        return rec
