"""The broker actor's hook: start its Kafka listener on the actor's event loop, stop it, and say where it
is. Imports nothing heavy until a listener is started (the broker module stays light to import)."""

from __future__ import annotations

import logging

log = logging.getLogger("rafka.kafka_wire")


class Listener:
    """A running listener: its Acceptor and the advertised (host, port)."""

    def __init__(self, acceptor, advertised: tuple[str, int]):
        self.acceptor, self.advertised = acceptor, advertised


class ListenerBindError(OSError):
    """A configured listener that cannot bind: the broker does not start (Kafka's broker exits on it too)."""


async def start(broker) -> Listener | None:
    """Bind broker ``broker``'s listener (config ``listeners``, default 127.0.0.1:9092+id, an ephemeral port when
    that one is taken; ``0`` for an ephemeral port; serve/kafka_wire/config.py). A configured listener that
    cannot bind raises ListenerBindError naming the broker and the address: a broker never goes missing from the
    bootstrap list in silence."""
    from serve.kafka_wire.apis import KafkaApis
    from serve.kafka_wire.backend import BrokerBackend
    from serve.kafka_wire.config import advertised, listener_config
    from serve.kafka_wire.network import Acceptor

    cfg = listener_config(broker.config, broker.broker_id, broker.node_index)
    if not cfg.enabled:
        return None
    backend = BrokerBackend(broker, (cfg.host, cfg.port))
    acceptor = Acceptor(KafkaApis(backend), cfg.host, cfg.port, cfg.max_request_bytes, cfg.connections_max_idle_ms)
    try:
        try:
            _, port = await acceptor.start()
        except OSError as e:
            if cfg.configured:
                raise
            log.warning(
                "broker %s: kafka listener %s:%s not free (%s): an ephemeral port instead",
                broker.broker_id,
                cfg.host,
                cfg.port,
                e,
            )
            acceptor = Acceptor(KafkaApis(backend), cfg.host, 0, cfg.max_request_bytes, cfg.connections_max_idle_ms)
            _, port = await acceptor.start()
    except OSError as e:
        raise ListenerBindError(
            e.errno, f"broker {broker.broker_id}: Kafka listener {cfg.host}:{cfg.port} cannot bind: {e.strerror or e}"
        ) from e
    backend.advertised = advertised(cfg, port, broker.node_address)
    log.info("broker %s: kafka listener on %s:%s (advertised %s)", broker.broker_id, cfg.host, port, backend.advertised)
    return Listener(acceptor, backend.advertised)


def stop(listener: Listener | None) -> None:
    if listener is not None:
        listener.acceptor.stop()


def endpoint(listener: Listener | None) -> tuple[str, int] | None:
    return None if listener is None else listener.advertised
