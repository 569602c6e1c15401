"""The cluster metadata in GCS KV: its namespace, key layout and value encoding, and the reader over any KV.

Layout (namespace ``rafka:{cluster}``, every value msgpack), written only by the controller::

    controller_epoch/<N>   {host_broker_id, ...}   claimed by put-if-absent, one per controller epoch
    brokers/<id>           a broker registration (BrokerRegistration.to_dict)
    topics/<name>          {name, topic_id, configs, partitions: {p: {replicas, leader, leader_epoch, isr, ...}}}
    metadata_version       int, bumped on every change (readers compare it before re-reading topics)
    producer_id_block      the next producer id block

Pure: the Ray client of this layout is ``GcsKV`` in actors/metadata/kv.py, which brokers, clients and the
controller's store use; ``read_cluster`` / ``read_topics`` take any ``KVReader``.
"""

from __future__ import annotations

from typing import Any, Protocol

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


class KVReader(Protocol):
    """What the readers below need of a KV namespace (``GcsKV`` in actors/metadata/kv.py)."""

    def get(self, key: str) -> Any: ...

    def keys(self, prefix: str) -> list[str]: ...


def read_topics(kv: KVReader, names) -> dict:
    """The metadata of the topics ``names`` alone (one KV read each), as in ``read_cluster``'s ``topics``; a topic
    that does not exist is left out."""
    return {t["name"]: t for t in (kv.get(topic_key(n)) for n in sorted(set(names))) if t}


def read_cluster(kv: KVReader) -> dict:
    """A reader's view of the metadata in KV: {version, brokers: [...], topics: {name: {...}}}."""
    version = kv.get(METADATA_VERSION) or 0
    brokers = sorted((b for b in (kv.get(k) for k in kv.keys(BROKERS)) if b), key=lambda b: b["id"])
    topics = {t["name"]: t for t in (kv.get(k) for k in kv.keys(TOPICS)) if t}
    return {"version": version, "brokers": brokers, "topics": topics}
