"""A replica's broker-level settings (``replica.*``, ``log.*`` intervals, with Kafka's defaults) split from
the topic configs its Log takes. Pure: no Ray."""

from __future__ import annotations

from actors.server.replication_quota import QUOTA_DEFAULTS, THROTTLED_REPLICAS_KEYS
from protocol import errors as E

REPLICA_DEFAULTS = {
    "replica.lag.time.max.ms": 30000,
    "replica.fetch.max.bytes": 4 * 1024 * 1024,
    "replica.fetch.wait.max.ms": 500,
    "replica.fetch.backoff.ms": 50,
    "replica.socket.timeout.ms": 30000,
    "log.retention.check.interval.ms": 300000,
    "log.flush.scheduler.interval.ms": 1000,
    "log.cleaner.backoff.ms": 15000,
    **QUOTA_DEFAULTS,  # the replication throttle's rates and window (actors/server/replication_quota.py)
}
# the broker's string settings its replicas take: KIP-392's selector (actors/server/replica_selector.py; "": none)
REPLICA_STRING_DEFAULTS = {"replica.selector.class": ""}


def split_config(config_props: dict | None) -> tuple[dict, dict]:
    """(replica-level settings with defaults, topic configs for LogConfig)."""
    replica, topic = {**REPLICA_DEFAULTS, **REPLICA_STRING_DEFAULTS}, {}
    for k, v in (config_props or {}).items():
        if k in REPLICA_STRING_DEFAULTS:
            replica[k] = "" if v is None else str(v)
        elif k in REPLICA_DEFAULTS:
            try:
                replica[k] = int(v)
            except (TypeError, ValueError):
                raise E.InvalidConfigError(f"{k}={v!r} is not an integer") from None
        else:
            topic[k] = v
    for k in THROTTLED_REPLICAS_KEYS:  # topic configs the replication throttle reads (not LogConfig's)
        replica[k] = str(topic.pop(k, None) or "")
    return replica, topic


# The broker's warm pool of unbound replica actors (actors/server/replica_pool.py): how many it keeps started.
WARM_POOL_SIZE = "replica.warm.pool.size"
WARM_POOL_MIN_IDLE_CPUS = "replica.warm.pool.min.idle.cpus"  # a pool actor starts only with this much idle CPU
WARM_POOL_DEFAULTS: dict[str, float] = {WARM_POOL_SIZE: 6, WARM_POOL_MIN_IDLE_CPUS: 1.0}
# Replicas per process (actors/replica_host.py): 1, a ReplicaActor process per replica (the pool above);
# more, a broker's replicas share ReplicaHost processes of up to this many each (no warm pool then).
HOST_MAX_PARTITIONS = "replica.host.max.partitions"
HOST_MAX_PARTITIONS_DEFAULT = 64


def host_max_partitions(config: dict) -> int:
    """The broker's ``replica.host.max.partitions`` (at least 1)."""
    try:
        return max(1, int(config.get(HOST_MAX_PARTITIONS, HOST_MAX_PARTITIONS_DEFAULT)))
    except (TypeError, ValueError):
        raise E.InvalidConfigError(
            f"{HOST_MAX_PARTITIONS}={config.get(HOST_MAX_PARTITIONS)!r} is not an integer"
        ) from None
