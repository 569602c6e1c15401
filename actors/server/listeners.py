"""The network listeners a broker runs on its own event loop, found through the ``rafka.listeners`` entry
points (pyproject.toml; today ``kafka = "serve.kafka_wire.broker_hook"``, the Kafka wire protocol), so the
actors layer never imports the gateways above it. Each entry point is a module with ``async start(broker)``
(a handle, or None when it does not run), ``stop(handle)`` and ``endpoint(handle)`` (the advertised
(host, port)). A listener that fails to start (a port taken, an address not on this node) fails the broker's
start, naming the broker and the listener, as a Kafka broker exits: it never serves with a listener missing
from the bootstrap list."""

from __future__ import annotations

import logging
from importlib.metadata import entry_points

log = logging.getLogger("rafka.broker")

GROUP = "rafka.listeners"


class Listeners:
    def __init__(self, running: dict):
        self.running = running  # entry point name -> (hook module, its handle)


class ListenerStartError(RuntimeError):
    """A listener of this broker did not start; the message names the broker, the listener and the cause."""


async def start(broker) -> Listeners:
    running: dict = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            hook = ep.load()
            handle = await hook.start(broker)
        except Exception as e:
            stop(Listeners(running))
            log.error("broker %s: listener %s failed to start: %s", broker.broker_id, ep.name, e)
            raise ListenerStartError(f"broker {broker.broker_id}: {ep.name} listener failed to start: {e}") from e
        if handle is not None:
            running[ep.name] = (hook, handle)
    return Listeners(running)


def stop(listeners: Listeners | None) -> None:
    for name, (hook, handle) in listeners.running.items() if listeners else ():
        try:
            hook.stop(handle)
        except Exception:
            log.exception("listener %s failed to stop", name)


def endpoint(listeners: Listeners | None, name: str = "kafka") -> tuple[str, int] | None:
    """The advertised (host, port) of listener ``name``, None when it is not running."""
    got = listeners.running.get(name) if listeners else None
    return None if got is None else got[0].endpoint(got[1])
