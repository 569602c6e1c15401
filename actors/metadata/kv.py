"""The Ray side of the cluster's GCS KV: ``GcsKV`` (one cluster's namespace of Ray's internal KV),
``BoundedKVReads`` (KV reads on a request path, given up when the GCS does not answer in time) and ``cluster_key``
(the transactions' verification-token key, read once per process).

The layout, encoding and readers are protocol/kv.py; the token signing is protocol/txn_tokens.py. Used by the
broker, the controller's store, the coordinators, the metrics exporter, the clients and the REST gateway.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from protocol.kv import kv_namespace, pack, strip_listed_key, unpack
from protocol.txn_tokens import load_key

_KEYS: dict[str, bytes] = {}  # cluster -> its verification-token key, read once per process


class GcsKV:
    """One cluster's namespace of GCS KV (Ray's internal KV). Every call is a synchronous GCS round trip."""

    def __init__(self, cluster: str):
        from ray.experimental import internal_kv  # here, not at the top: the CLI's agent path never imports Ray

        self._kv = internal_kv
        self.cluster = cluster
        self.ns = kv_namespace(cluster)

    def get(self, key: str) -> Any:
        raw = self._kv._internal_kv_get(key.encode(), namespace=self.ns)
        return None if raw is None else unpack(raw)

    def keys(self, prefix: str) -> list[str]:
        """The keys under ``prefix``, sorted."""
        return sorted(
            strip_listed_key(self.cluster, prefix, k)
            for k in self._kv._internal_kv_list(prefix.encode(), namespace=self.ns)
        )

    def exists(self, key: str) -> bool:
        return bool(self._kv._internal_kv_exists(key.encode(), namespace=self.ns))

    def put(self, key: str, value: Any) -> None:
        self._kv._internal_kv_put(key.encode(), pack(value), True, namespace=self.ns)

    def put_if_absent(self, key: str, value: Any) -> bool:
        """True if the key was ours to create (it did not exist)."""
        existed = self._kv._internal_kv_put(key.encode(), pack(value), False, namespace=self.ns)
        return not existed

    def delete(self, key: str) -> None:
        self._kv._internal_kv_del(key.encode(), namespace=self.ns)

    def clear(self) -> None:
        self._kv._internal_kv_del(b"", del_by_prefix=True, namespace=self.ns)


class KVUnavailableError(Exception):
    """GCS KV did not answer in time (the head node down: Ray's KV client waits for the GCS to come back)."""


class BoundedKVReads:
    """KV reads for a request path, off the event loop with a deadline. While the GCS is down, Ray's KV client
    waits for it to return (up to ``gcs_rpc_server_reconnect_timeout_s``), so a read not answered within
    ``timeout_s`` raises KVUnavailableError and the caller goes on with what it has (a broker's metadata cache); no
    other read starts while one still hangs, so a GCS outage ties up one thread, not the default pool."""

    def __init__(self, timeout_s: float = 2.0):
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="gcs-kv-read")
        self._hung: Future | None = None

    async def call(self, fn, *args) -> Any:
        if self._hung is not None and not self._hung.done():
            raise KVUnavailableError("GCS KV has not answered an earlier read yet")
        fut = self._pool.submit(fn, *args)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), self.timeout_s)
        except asyncio.TimeoutError:
            self._hung = fut
            raise KVUnavailableError(f"GCS KV did not answer within {self.timeout_s:.1f} s") from None


async def cluster_key(cluster: str) -> bytes:
    """``load_key`` of ``cluster``'s KV off the event loop, once per process (then cached). Raises ValueError or
    Ray's error when it cannot be read; the caller falls back to the coordinator calls."""
    key = _KEYS.get(cluster)
    if key is None:
        key = _KEYS[cluster] = await asyncio.to_thread(load_key, GcsKV(cluster))
    return key
