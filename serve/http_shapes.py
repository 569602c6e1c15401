"""The HTTP gateway's content negotiation (Content-Type of a produce, JSON or msgpack answers) and the
shapes of its v2/v3 answers (topics, partitions, groups, health, offsets), apart from the routes
(serve/http.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from fastapi import Request
from fastapi.responses import Response

from serve.errors import (
    NOT_FOUND,
    UNSUPPORTED_MEDIA,
    GatewayError,
    from_exception,
)
from serve.produce import BINARY_V2, JSON_V2, MSGPACK, V2_JSON

if TYPE_CHECKING:
    from rafka.admin.admin import Admin


# -- content negotiation ----------------------------------------------------------------------------------
def _media(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


def _produce_format(request: Request) -> str:
    media = _media(request.headers.get("content-type"))
    fmt = {BINARY_V2: "binary", JSON_V2: "json", MSGPACK: "msgpack"}.get(media)
    if fmt is None:
        raise GatewayError(
            415,
            UNSUPPORTED_MEDIA,
            f"unsupported Content-Type {media or '(none)'!r} for produce; use {BINARY_V2}, {JSON_V2} or {MSGPACK}",
        )
    return fmt


def _accepts_msgpack(request: Request) -> bool:
    return MSGPACK in (request.headers.get("accept") or "")


def _json(data: Any, status: int = 200, media: str = V2_JSON) -> Response:
    return Response(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS), status_code=status, media_type=media)


def _reply(request: Request, data: Any, msgpack_ok: bool) -> Response:
    if msgpack_ok and (_accepts_msgpack(request) or _media(request.headers.get("content-type")) == MSGPACK):
        import msgpack

        return Response(msgpack.packb(data, use_bin_type=True), media_type=MSGPACK)
    return _json(data)


# -- shapes -----------------------------------------------------------------------------------------------
def _v2_partition(p: dict) -> dict:
    isr = set(p.get("isr") or ())
    return {
        "partition": p["partition"],
        "leader": p["leader"],
        "replicas": [{"broker": b, "leader": b == p["leader"], "in_sync": b in isr} for b in p["replicas"]],
    }


def _offset_entry(res: BaseException) -> dict:
    err = from_exception(res)
    return {"partition": None, "offset": None, "error_code": err.kafka_error_code, "error": err.message}


def _describe_topic(admin: Admin, topic: str) -> dict:
    (d,) = admin.describe_topics([topic])
    return {
        "name": d["name"],
        "configs": admin.describe_configs(topic),
        "partitions": [_v2_partition(p) for p in sorted(d["partitions"], key=lambda p: p["partition"])],
    }


def _partition_of(admin: Admin, topic: str, partition: int) -> dict:
    (d,) = admin.describe_topics([topic])
    for p in d["partitions"]:
        if p["partition"] == partition:
            return p
    raise GatewayError(404, 40402, f"partition {partition} does not exist in topic {topic!r}", 3)


def _health(admin: Admin, cluster: str) -> tuple[int, dict]:
    try:
        desc = admin.describe_cluster()
    except Exception as exc:  # noqa: BLE001 - unreachable cluster: the health answer, not an error page
        err = from_exception(exc)
        return 503, {"status": "unavailable", "cluster": cluster, "message": err.message}
    alive = [b["id"] for b in desc["brokers"] if b.get("alive")]
    ok = bool(alive) and desc["controller_id"] is not None and desc["controller_id"] >= 0
    return (200 if ok else 503), {
        "status": "ok" if ok else "degraded",
        "cluster": cluster,
        "controller_id": desc["controller_id"],
        "controller_epoch": desc["controller_epoch"],
        "brokers": len(desc["brokers"]),
        "brokers_alive": alive,
        "topics": desc["topics"],
    }


def _v3_topic(base: str, cluster: str, d: dict) -> dict:
    url = f"{base}/v3/clusters/{cluster}/topics/{d['name']}"
    parts = d["partitions"]
    return {
        "kind": "KafkaTopic",
        "metadata": {"self": url},
        "cluster_id": cluster,
        "topic_name": d["name"],
        "is_internal": d["name"].startswith("__"),
        "replication_factor": len(parts[0]["replicas"]) if parts else 0,
        "partitions_count": len(parts),
        "partitions": {"related": f"{url}/partitions"},
        "configs": {"related": f"{url}/configs"},
    }


def _v3_partition(base: str, cluster: str, topic: str, p: dict) -> dict:
    url = f"{base}/v3/clusters/{cluster}/topics/{topic}/partitions/{p['partition']}"
    isr = set(p.get("isr") or ())
    return {
        "kind": "KafkaPartition",
        "metadata": {"self": url},
        "cluster_id": cluster,
        "topic_name": topic,
        "partition_id": p["partition"],
        "leader": {"related": f"{base}/v3/clusters/{cluster}/brokers/{p['leader']}"},
        "leader_id": p["leader"],
        "replicas": [{"broker_id": b, "is_leader": b == p["leader"], "is_in_sync": b in isr} for b in p["replicas"]],
    }


def _group_exists(d: dict) -> bool:
    """A described group the gateway shows: not Dead, and not an Empty group without members or offsets."""
    return not (d["state"] == "Dead" or (d["state"] == "Empty" and not d["offsets"] and not d["members"]))


def _group(admin: Admin, group: str) -> dict:
    (d,) = admin.describe_groups([group])
    if not _group_exists(d):
        raise GatewayError(404, NOT_FOUND, f"consumer group {group!r} not found", 69)
    return d


def _v3_group(base: str, cluster: str, d: dict) -> dict:
    url = f"{base}/v3/clusters/{cluster}/consumer-groups/{d['group_id']}"
    return {
        "kind": "KafkaConsumerGroup",
        "metadata": {"self": url},
        "cluster_id": cluster,
        "consumer_group_id": d["group_id"],
        "is_simple": d.get("protocol_type") != "consumer",
        "partition_assignor": d.get("protocol"),
        "state": str(d["state"]).upper(),
        "consumers": [
            {
                "consumer_id": m["member_id"],
                "instance_id": m.get("group_instance_id"),
                "client_id": m.get("client_id"),
                "assignments": [{"topic_name": tp[0], "partition_id": tp[1]} for tp in m["assignment"]],
            }
            for m in d.get("members", [])
        ],
        "lag_summary": {"related": f"{url}/lag-summary"},
        "lags": {"related": f"{url}/lags"},
    }


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/")
