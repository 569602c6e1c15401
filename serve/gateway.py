"""Deploying rafka's HTTP gateway (serve/http.py) on the Ray cluster's Serve, reading its status and
removing it: ``start_gateway`` / ``gateway_status`` / ``stop_gateway`` (the `rafka serve` verbs, the demo
and the benchmarks use these)."""

from __future__ import annotations

import socket
from typing import Any

from serve.body import DEFAULT_BODY_TIMEOUT_S
from serve.consumers import DEFAULT_INSTANCE_TIMEOUT_MS, ConsumerInstances
from serve.http import APP_NAME, DEFAULT_MAX_REQUEST_BYTES, build_app

__all__ = ["start_gateway", "stop_gateway", "gateway_status", "APP_NAME"]


def _cluster_name(cluster: Any) -> str:
    from rafka.client_utils import resolve_cluster

    if cluster is None:
        import rafka

        return rafka.connect().name
    return resolve_cluster(cluster)


def _serve_http_config():
    """(host, port) of the Serve instance already running on this Ray cluster, or None."""
    import ray
    from ray.serve.context import _get_global_client

    try:
        client = _get_global_client(raise_if_no_controller_running=False)
    except Exception:  # noqa: BLE001 - no Serve controller reachable means none is running
        return None
    if client is None:
        return None
    cfg = ray.get(client._controller.get_http_config.remote())
    return cfg.host, cfg.port


def _url(host: str, port: int) -> str:
    """The gateway's URL: an every-interface bind is shown at this node's address (what other machines reach;
    Serve runs a proxy on every node), never 0.0.0.0 or loopback."""
    if host in ("0.0.0.0", "::", ""):
        import ray.util

        host = ray.util.get_node_ip_address()
    return f"http://{host}:{port}"


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def start_gateway(
    cluster: Any = None,
    host: str = "127.0.0.1",
    port: int = 8082,
    acks: str | int = "all",
    num_replicas: int = 1,
    *,
    consumer_instance_timeout_ms: int = DEFAULT_INSTANCE_TIMEOUT_MS,
    producer_config: dict | None = None,
    max_ongoing_requests: int = 64,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    name: str = APP_NAME,
) -> str:
    """Deploy the gateway for ``cluster`` (a ``LocalCluster``, ``ClusterHandle``, name, or None for
    ``rafka.connect()``); returns its base URL. Starts Serve on ``host:port`` unless it already runs on this
    Ray cluster, in which case it must already listen there (Serve's HTTP options are fixed at its first
    start). The app outlives this process (Serve is detached) until ``stop_gateway``. A request body may be
    ``max_request_bytes`` long (413 past it, from Content-Length before reading) and must arrive within
    ``body_timeout_s`` seconds (a stream: no pause longer than that), else 408 (serve/body.py)."""
    from ray import serve as ray_serve

    from rafka.config import ProducerConfig

    ProducerConfig(**{"acks": acks, **(producer_config or {})})  # bad settings fail here, not in a replica
    name_ = _cluster_name(cluster)
    running = _serve_http_config()
    if running is not None and (running[1] != port or running[0] != host):
        raise RuntimeError(
            f"Ray Serve is already running on this Ray cluster at {running[0]}:{running[1]}; its "
            f"HTTP options are fixed at its first start, so the gateway cannot listen on "
            f"{host}:{port}. Use port={running[1]}, or stop that Serve instance first."
        )
    if running is None:
        if not _port_free(host, port):
            raise RuntimeError(f"{host}:{port} is already in use by another program: pick another port")
        ray_serve.start(http_options={"host": host, "port": port}, logging_config={"enable_access_log": False})
    opts = {"num_cpus": 0}
    instances = ray_serve.deployment(
        ConsumerInstances, name="ConsumerInstances", num_replicas=1, max_ongoing_requests=256, ray_actor_options=opts
    ).bind(name_, consumer_instance_timeout_ms)
    ingress = ray_serve.deployment(
        build_app(),
        name="Gateway",
        num_replicas=num_replicas,
        max_ongoing_requests=max_ongoing_requests,
        ray_actor_options=opts,
    ).bind(name_, acks, instances, producer_config, max_request_bytes, body_timeout_s)
    ray_serve.run(ingress, name=name, route_prefix="/", logging_config={"enable_access_log": False})
    return _url(host, port)


def gateway_status(name: str = APP_NAME) -> dict | None:
    """``{app, status, url, deployments: {name: status}}`` of the running gateway, or None."""
    from ray import serve as ray_serve

    running = _serve_http_config()
    if running is None:
        return None
    apps = ray_serve.status().applications
    if name not in apps:
        return None
    st = apps[name]
    return {
        "app": name,
        "status": str(st.status.value if hasattr(st.status, "value") else st.status),
        "url": _url(running[0], running[1]),
        "deployments": {
            d: str(s.status.value if hasattr(s.status, "value") else s.status) for d, s in st.deployments.items()
        },
    }


def stop_gateway(name: str = APP_NAME, shutdown_serve: bool | None = None) -> bool:
    """Delete the gateway app (its replicas close their producers and consumer instances). Serve itself
    is shut down when ``shutdown_serve`` says so; by default (None) when no other application remains on it. Returns whether an app was deleted."""
    from ray import serve as ray_serve

    if _serve_http_config() is None:
        return False
    apps = ray_serve.status().applications
    deleted = name in apps
    if deleted:
        ray_serve.delete(name)
    others = [a for a in apps if a != name]
    if shutdown_serve if shutdown_serve is not None else not others:
        ray_serve.shutdown()
    return deleted
