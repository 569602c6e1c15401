"""The broker actor's hook: start its Kafka listener on the actor's event loop, stop it, and say where it
is. Imports nothing heavy until a listener is started (the broker module stays light to import)."""

from __future__ import annotations

import logging

log = logging.getLogger("rafka.kafka_wire")


class Listener:
    """A running listener: its Acceptor and the advertised (host, port)."""

    def __init__(self, acceptor, advertised: tuple[str, int]):
        self.acceptor, self.advertised = acceptor, advertised


async def start(broker) -> Listener | None:
    """Bind broker ``broker``'s listener (config ``listeners``, default 127.0.0.1:9092+id; ``0`` for an
    ephemeral port). A listener that cannot bind is logged and skipped: the broker still serves rafka's
    own clients over Ray."""
    from serve.kafka_wire.apis import KafkaApis
    from serve.kafka_wire.backend import BrokerBackend
    from serve.kafka_wire.config import advertised, listener_config
    from serve.kafka_wire.network import Acceptor

    cfg = listener_config(broker.config, broker.broker_id)
    if not cfg.enabled:
        return None
    backend = BrokerBackend(broker, (cfg.host, cfg.port))
    acceptor = Acceptor(KafkaApis(backend), cfg.host, cfg.port, cfg.max_request_bytes, cfg.connections_max_idle_ms)
    try:
        _, port = await acceptor.start()
    except OSError as e:
        log.error("broker %s: kafka listener %s:%s not started: %s", broker.broker_id, cfg.host, cfg.port, e)
        return None
    backend.advertised = advertised(cfg, port)
    log.info("broker %s: kafka listener on %s:%s (advertised %s)", broker.broker_id, cfg.host, port, backend.advertised)
    return Listener(acceptor, backend.advertised)


def stop(listener: Listener | None) -> None:
    if listener is not None:
        listener.acceptor.stop()


def endpoint(listener: Listener | None) -> tuple[str, int] | None:
    return None if listener is None else listener.advertised
