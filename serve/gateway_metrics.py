"""The REST gateway's request counts for the cluster's Prometheus exporter (actors/metrics_exporter.py).

Each gateway replica (a Serve replica process) counts its requests by method, route template (FastAPI's
``/topics/{topic}``, not the concrete path, so the label set stays small) and HTTP status, in an HTTP
middleware: one dict increment per request. Serve replicas are not addressable one by one, so instead of
being called on scrape each replica publishes its counts to the cluster's GCS KV (``gateway_metrics/<replica
pid>``) at most once a second, and only when they changed; the exporter sums the keys on scrape into
``kafka_rest_gateway_requests_total{method, route, status}`` (docs/metrics.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from protocol.kv import GATEWAY_METRICS as KV_PREFIX

log = logging.getLogger("rafka.gateway")

FLUSH_INTERVAL_S = 1.0


class GatewayMetrics:
    """One replica's counts ``(method, route, status) -> n``, flushed to GCS KV by a background task."""

    def __init__(self, cluster: str):
        self.cluster = cluster
        self.counts: dict[tuple[str, str, str], int] = {}
        self._flushed = 0  # total count at the last flush
        self._total = 0
        self._task: asyncio.Task | None = None
        self.key = f"{KV_PREFIX}{os.uname().nodename}-{os.getpid()}"

    def count(self, method: str, route: str, status: int) -> None:
        k = (method, route, str(status))
        self.counts[k] = self.counts.get(k, 0) + 1
        self._total += 1
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._flush_loop())

    def snapshot(self) -> list[list]:
        return [[m, r, s, n] for (m, r, s), n in sorted(self.counts.items())]

    def flush(self) -> None:
        from actors.metadata.kv import GcsKV

        total = self._total
        GcsKV(self.cluster).put(self.key, {"ts": time.time(), "counts": self.snapshot()})
        self._flushed = total

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            if self._total != self._flushed:
                try:
                    await asyncio.to_thread(self.flush)
                except Exception as e:  # noqa: BLE001 - counting must never break the gateway
                    log.warning("gateway metrics not published: %s", e)


_current: GatewayMetrics | None = None


def attach(cluster: str) -> GatewayMetrics:
    """The replica's counter (one Gateway per replica process), created by the Gateway's constructor."""
    global _current
    _current = GatewayMetrics(cluster)
    return _current


async def middleware(request, call_next):
    """FastAPI ``http`` middleware: count the request under its route template and answer status."""
    status = 500
    try:
        response = await call_next(request)
        status = response.status_code
        return response
    finally:
        if _current is not None:
            route = request.scope.get("route")
            _current.count(request.method, getattr(route, "path", "unmatched"), status)
