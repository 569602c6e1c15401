"""Listener configuration, with Kafka's names (pure, no I/O).

    listeners               "PLAINTEXT://127.0.0.1:9092" or "127.0.0.1:0" (port 0: ephemeral), "PLAINTEXT://:9092"
                            or "0.0.0.0:9092" (every interface); default 127.0.0.1, port 9092 + broker id (an
                            ephemeral port when that one is taken; a port set here is never swapped). A port
                            set here is shared by every broker: the brokers on one node take it, it + 1, ...
                            (their index on the node), so they never collide
    advertised.listeners    what Metadata tells clients; default: the bound host and port, and for an
                            every-interface bind the node's own address (Ray's node IP), never loopback
    broker.<id>.<name>      any of these for broker <id> alone (Kafka's per-broker configs): e.g.
                            broker.1.advertised.listeners=PLAINTEXT://kafka-1.example.com:9092
    socket.request.max.bytes  the largest request frame accepted (Kafka's default 100 MiB)
    connections.max.idle.ms   a connection with no bytes in or out for this long is closed by its
                            Processor (Kafka's default 600000 = 10 min; negative: never, as Kafka's
                            Selector treats a negative value)

A list value ("PLAINTEXT://a:1,PLAINTEXT://b:2") takes its first entry: one listener per broker for now.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.server.broker_config import broker_overrides, broker_prefix

DEFAULT_HOST = "127.0.0.1"
DEFAULT_BASE_PORT = 9092
DEFAULT_MAX_REQUEST_BYTES = 104857600
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600000


@dataclass(frozen=True)
class ListenerConfig:
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    enabled: bool = True
    connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS
    configured: bool = True  # False: the default 9092 + id, which may fall back to an ephemeral port when taken


def parse_endpoint(value: str) -> tuple[str, int]:
    """``"PLAINTEXT://host:port"`` / ``"host:port"`` / ``"[::1]:9092"`` -> (host, port); an empty host
    means all interfaces (Kafka's ``PLAINTEXT://:9092``)."""
    first = str(value).split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listener {value!r}: expected [PLAINTEXT://]host:port")
    host = host.strip("[]") or "0.0.0.0"
    p = int(port)
    if not 0 <= p <= 65535:
        raise ValueError(f"listener {value!r}: port out of range")
    return host, p


WILDCARD_HOSTS = ("0.0.0.0", "::")


def listener_config(config: dict, broker_id: int, node_index: int = 0) -> ListenerConfig:
    """The listener of broker ``broker_id``, the ``node_index``-th broker of its node, from its Kafka-style
    config dict (``broker.<id>.`` entries win). ``listeners`` set to "" or "none" disables the listener."""
    own_listener = broker_prefix(broker_id) + "listeners" in config
    own_advertised = broker_prefix(broker_id) + "advertised.listeners" in config
    config = broker_overrides(config, broker_id)
    raw = config.get("listeners")
    max_bytes = int(config.get("socket.request.max.bytes", DEFAULT_MAX_REQUEST_BYTES))
    if max_bytes <= 0:
        raise ValueError("socket.request.max.bytes must be positive")
    idle_ms = int(config.get("connections.max.idle.ms", DEFAULT_CONNECTIONS_MAX_IDLE_MS))
    if idle_ms == 0:
        raise ValueError("connections.max.idle.ms must be positive (or negative: connections never expire)")
    if raw is not None and str(raw).strip().lower() in ("", "none"):
        return ListenerConfig(DEFAULT_HOST, 0, max_request_bytes=max_bytes, enabled=False)
    if raw is not None:
        host, port = parse_endpoint(raw)
        if port and not own_listener:  # a shared port: brokers sharing a node take it, then the next ones
            port += node_index
    else:
        host, port = DEFAULT_HOST, DEFAULT_BASE_PORT + broker_id
    adv = config.get("advertised.listeners")
    ahost, aport = parse_endpoint(adv) if adv else (None, None)
    if ahost in WILDCARD_HOSTS:  # "PLAINTEXT://:9092": the node's own address
        ahost = None
    if aport and not own_advertised:
        aport += node_index
    return ListenerConfig(
        host, port, ahost, aport, max_bytes, connections_max_idle_ms=idle_ms, configured=raw is not None
    )


def advertised(cfg: ListenerConfig, bound_port: int, node_address: str | None) -> tuple[str, int]:
    """The host:port clients are told: advertised.listeners, else the bound address; an every-interface bind
    advertises ``node_address`` (the node's IP as Ray knows it: what the other machines reach), as Kafka
    advertises the host's canonical name, and 127.0.0.1 only when the node's address is unknown."""
    if cfg.advertised_host:
        host = cfg.advertised_host
    else:
        host = (node_address or DEFAULT_HOST) if cfg.host in WILDCARD_HOSTS else cfg.host
    port = cfg.advertised_port if cfg.advertised_port else bound_port
    return host, port
