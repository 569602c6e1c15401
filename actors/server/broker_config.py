"""One config dict serves every broker of a cluster (``LocalCluster(broker_config=...)``, ``rafka cluster start
--config``); its ``broker.<id>.<name>`` entries are broker ``<id>``'s own lines, as each Kafka broker has its
own server.properties (and per-broker dynamic configs). Pure; applied by the broker shell at start.
"""

from __future__ import annotations


def broker_prefix(broker_id: int) -> str:
    return f"broker.{broker_id}."


def broker_overrides(config: dict, broker_id: int) -> dict:
    """``config`` with broker ``broker_id``'s own ``broker.<id>.<name>`` entries applied as ``<name>`` (the
    entries themselves stay, so a reader can tell a broker's own value from the shared one)."""
    prefix = broker_prefix(broker_id)
    own = {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)}
    return {**config, **own} if own else dict(config)
