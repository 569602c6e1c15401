"""The cluster metadata in GCS KV: its namespace, its key layout, its value encoding, and the one reader.

Layout (namespace ``rafka:{cluster}``, every value msgpack), written only by the controller::

    controller_epoch/<N>   {host_broker_id, ...}   claimed by put-if-absent, one per controller epoch
    brokers/<id>           a broker registration (BrokerRegistration.to_dict)
    topics/<name>          {name, topic_id, configs, partitions: {p: {replicas, leader, leader_epoch, isr, ...}}}
    metadata_version       int, bumped on every change (readers compare it before re-reading topics)
    producer_id_block      the next producer id block

Readers (brokers, clients) and the controller's own store all go through ``GcsKV``; the pure functions
above it (keys, ``pack``/``unpack``, ``strip_listed_key``) need no Ray, and ``GcsKV`` imports Ray's
internal KV only when built. GCS calls are synchronous (get ~0.4 ms, put ~0.5 ms): call sparingly.
"""

from __future__ import annotations

from typing import Any

import msgpack

METADATA_VERSION = "metadata_version"
PRODUCER_ID_BLOCK = "producer_id_block"
TOPICS = "topics/"
BROKERS = "brokers/"
CONTROLLER_EPOCHS = "controller_epoch/"
METRICS_URL = "metrics_url"  # the Prometheus scrape URL the exporter bound (actors/metrics_exporter.py)
GATEWAY_METRICS = "gateway_metrics/"  # each REST gateway replica's request counts (serve/gateway_metrics.py)


def kv_namespace(cluster: str) -> str:
    return f"rafka:{cluster}"


def topic_key(name: str) -> str:
    return f"{TOPICS}{name}"


def broker_key(broker_id: int) -> str:
    return f"{BROKERS}{broker_id}"


def controller_epoch_key(epoch: int) -> str:
    return f"{CONTROLLER_EPOCHS}{epoch}"


def key_suffix(key: str) -> str:
    """What follows the key's prefix: the topic name of ``topics/<name>``, the id of ``brokers/<id>``..."""
    return key.split("/", 1)[1]


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


def strip_listed_key(cluster: str, prefix: str, key: bytes | str) -> str:
    """A key as listed under ``prefix``, fit for ``get``. Ray 2.60 lists the keys of a namespace holding
    ':' (ours, ``rafka:{cluster}``) with the namespace's part after its first ':' still in front
    (``"{cluster}:brokers/0"``): strip it."""
    k = key.decode() if isinstance(key, bytes) else key
    junk = f"{cluster}:"
    if not k.startswith(prefix) and k.startswith(junk):
        k = k[len(junk) :]
    return k


class GcsKV:
    """One cluster's namespace of GCS KV (Ray's internal KV, imported here, lazily)."""

    def __init__(self, cluster: str):
        from ray.experimental import internal_kv

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


def read_topics(kv: GcsKV, names) -> dict:
    """The metadata of the topics ``names`` alone (one KV read each), as in ``read_cluster``'s ``topics``; a topic
    that does not exist is left out."""
    return {t["name"]: t for t in (kv.get(topic_key(n)) for n in sorted(set(names))) if t}


def read_cluster(kv: GcsKV) -> dict:
    """A reader's view of the metadata in KV: {version, brokers: [...], topics: {name: {...}}}."""
    version = kv.get(METADATA_VERSION) or 0
    brokers = sorted((b for b in (kv.get(k) for k in kv.keys(BROKERS)) if b), key=lambda b: b["id"])
    topics = {t["name"]: t for t in (kv.get(k) for k in kv.keys(TOPICS)) if t}
    return {"version": version, "brokers": brokers, "topics": topics}
