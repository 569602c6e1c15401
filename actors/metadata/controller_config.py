"""The broker configs the controller acts on (Kafka's names and defaults), parsed once from the cluster's
broker properties. Pure; built by the controller shell, read by ``ControllerLogic`` and the session checker.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.metadata.topic_configs import truthy
from protocol.errors import InvalidConfigError


@dataclass
class ControllerConfig:
    """The broker configs the controller acts on (Kafka's names and defaults)."""

    unclean_leader_election: bool = False  # unclean.leader.election.enable
    auto_leader_rebalance: bool = True  # auto.leader.rebalance.enable
    imbalance_percentage: int = 10  # leader.imbalance.per.broker.percentage
    imbalance_check_interval_s: float = 300.0  # leader.imbalance.check.interval.seconds
    num_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    session_timeout_ms: int = 9000  # broker.session.timeout.ms
    heartbeat_interval_ms: int = 2000  # broker.heartbeat.interval.ms
    min_insync_replicas: int = 1  # min.insync.replicas (the broker default of the topic config)
    # the partition balancer (actors/metadata/partition_balancer.py; docs/deploying.md "Self-healing")
    heal_delay_ms: int = 600_000  # replica.auto.heal.delay.ms: a broker down this long is healed away; < 0: never
    auto_balance: bool = True  # replica.auto.balance.enable: a broker that registers receives replicas, leaders
    balance_tolerance_pct: int = 10  # replica.balance.tolerance.percentage: of the mean, per broker
    movements_per_broker: int = 5  # num.concurrent.partition.movements.per.broker (Cruise Control's)
    balance_check_interval_ms: int = 10_000  # replica.balance.check.interval.ms: how often the balancer plans

    @classmethod
    def from_props(cls, props: dict | None) -> "ControllerConfig":
        props = props or {}
        c = cls()
        try:
            c.unclean_leader_election = truthy(props.get("unclean.leader.election.enable", False))
            c.auto_leader_rebalance = truthy(props.get("auto.leader.rebalance.enable", True))
            c.imbalance_percentage = int(props.get("leader.imbalance.per.broker.percentage", 10))
            c.imbalance_check_interval_s = float(props.get("leader.imbalance.check.interval.seconds", 300))
            c.num_partitions = int(props.get("num.partitions", 1))
            c.default_replication_factor = int(props.get("default.replication.factor", 1))
            c.session_timeout_ms = int(props.get("broker.session.timeout.ms", 9000))
            c.heartbeat_interval_ms = int(props.get("broker.heartbeat.interval.ms", 2000))
            c.min_insync_replicas = int(props.get("min.insync.replicas", 1))
            c.heal_delay_ms = int(props.get("replica.auto.heal.delay.ms", c.heal_delay_ms))
            c.auto_balance = truthy(props.get("replica.auto.balance.enable", True))
            c.balance_tolerance_pct = int(props.get("replica.balance.tolerance.percentage", 10))
            c.movements_per_broker = int(props.get("num.concurrent.partition.movements.per.broker", 5))
            c.balance_check_interval_ms = int(props.get("replica.balance.check.interval.ms", 10_000))
        except (TypeError, ValueError) as e:
            raise InvalidConfigError(f"Invalid broker config: {e}") from None
        for key, value, floor in (
            ("min.insync.replicas", c.min_insync_replicas, 1),
            ("replica.balance.tolerance.percentage", c.balance_tolerance_pct, 0),
            ("num.concurrent.partition.movements.per.broker", c.movements_per_broker, 1),
            ("replica.balance.check.interval.ms", c.balance_check_interval_ms, 1),
        ):
            if value < floor:
                raise InvalidConfigError(f"Invalid value {value} for configuration {key}: must be at least {floor}")
        return c
