"""DescribeConfigs (api key 32, v1-4), IncrementalAlterConfigs (api key 44, v0-1) and the legacy
AlterConfigs (api key 33, v0-2), for topic (2) and broker (4) resources.

Topic configs: every config storage knows (``storage.log.LogConfig``) with its effective value and
Kafka's source: DYNAMIC_TOPIC_CONFIG (1) for a topic override, STATIC_BROKER_CONFIG (4) when the broker's
properties set its broker-level synonym (``log.retention.ms`` for ``retention.ms``: the replicas apply
it, actors/replication/leader_and_isr.py), else DEFAULT_CONFIG (5). ``include_synonyms`` lists that chain, most
specific first, as Kafka does; v3+ carries each config's type and, when asked, its documentation.

Broker configs: the configs rafka's broker acts on, with Kafka's defaults (DEFAULT_CONFIG) or the value in
the broker's properties (STATIC_BROKER_CONFIG); all read-only (rafka has no dynamic broker configs, so
IncrementalAlterConfigs on a broker answers INVALID_CONFIG). A broker resource names this broker's id, or
"" (the cluster-wide defaults); another id answers INVALID_REQUEST, as Kafka does (clients send a broker's
resource to that broker).

IncrementalAlterConfigs on topics: SET (0), DELETE (1), and APPEND (2) / SUBTRACT (3) on the list config
``cleanup.policy``, applied by the controller (``alter_configs``, validate_only honoured); an unknown
config name or a bad value answers INVALID_CONFIG (40) with the controller's message.

Legacy AlterConfigs replaces all: a topic's dynamic configs become exactly the ones given (the others are
deleted, decided by the controller in the same write: atomic against a concurrent alter), validated as a
whole, validate_only honoured; duplicate keys or a null value answer INVALID_REQUEST
(Kafka's ConfigAdminManager.preprocess). A broker resource (this broker's id or "") takes only an empty set,
which is already its state: rafka has no dynamic broker configs.
"""

from __future__ import annotations

from actors.metadata.config_sources import (
    DOCS,
    LIST_CONFIGS,
    broker_entries,
    config_type,
    topic_entries,
)
from serve.kafka_wire import responses

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG, INVALID_REQUEST = 3, 40, 42


def _error(code: int, msg: str | None) -> dict:
    return {"error_code": code, "error_message": msg, "entries": []}


async def _resource(backend, rtype: int, rname: str) -> dict:
    if rtype == TOPIC:
        res = await backend.describe_configs(rname)
        if res.get("error_code"):
            return _error(res["error_code"], res.get("error_message"))
        entries = topic_entries(res.get("configs") or {}, res.get("overrides") or {}, backend.broker_config())
        return {"error_code": 0, "error_message": None, "entries": entries}
    if rtype == BROKER:
        if rname == "":
            return {"error_code": 0, "error_message": None, "entries": broker_entries(None)}
        if rname != str(backend.broker_id):
            return _error(INVALID_REQUEST, f"Unexpected broker id, expected {backend.broker_id} but received {rname}")
        return {"error_code": 0, "error_message": None, "entries": broker_entries(backend.broker_config())}
    return _error(INVALID_REQUEST, f"Unsupported resource type {rtype} (rafka serves topic (2) and broker (4))")


async def describe_configs(backend, request, version: int):
    mod = responses.response_module(32, version)
    synonyms = bool(getattr(request, "include_synonyms", False))
    docs = bool(getattr(request, "include_documentation", False))
    results = []
    for r in request.resources:
        res = await _resource(backend, int(r.resource_type), r.resource_name)
        keys = None if r.configuration_keys is None else set(r.configuration_keys)
        configs = tuple(
            responses.make(
                mod,
                "DescribeConfigsResourceResult",
                name=e["name"],
                value=e["value"],
                read_only=e["read_only"],
                config_source=e["source"],
                is_sensitive=False,
                synonyms=tuple(
                    responses.make(mod, "DescribeConfigsSynonym", name=n, value=v, source=s)
                    for n, v, s in e["synonyms"]
                )
                if synonyms
                else (),
                config_type=config_type(e["name"]),
                documentation=DOCS.get(e["name"]) if docs else None,
            )
            for e in res["entries"]
            if keys is None or e["name"] in keys
        )
        results.append(
            responses.make(
                mod,
                "DescribeConfigsResult",
                error_code=responses.error_code(res["error_code"]),
                error_message=res["error_message"],
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=configs,
            )
        )
    return responses.make(mod, "DescribeConfigsResponse", throttle_time=responses.ZERO, results=tuple(results))


def _list_op(op: int, current: str, value: str | None) -> str:
    items = [i.strip() for i in (current or "").split(",") if i.strip()]
    given = [i.strip() for i in (value or "").split(",") if i.strip()]
    if op == APPEND:
        return ",".join(dict.fromkeys(items + given))
    return ",".join(i for i in items if i not in given)


async def _alter_topic(backend, name: str, configs, validate_only: bool) -> tuple[int, str | None]:
    seen = [c.name for c in configs]
    dup = sorted({n for n in seen if seen.count(n) > 1})
    if dup:
        return INVALID_REQUEST, f"Error due to duplicate config keys: {dup}"
    set_: dict[str, str] = {}
    delete: list[str] = []
    current: dict | None = None
    for c in configs:
        op = int(c.config_operation)
        if op == SET:
            if c.value is None:
                return INVALID_REQUEST, f"Null value not supported for SET of {c.name}"
            set_[c.name] = c.value
        elif op == DELETE:
            delete.append(c.name)
        elif op in (APPEND, SUBTRACT):
            if c.name not in LIST_CONFIGS:
                what = "append" if op == APPEND else "subtract"
                return INVALID_CONFIG, f"Config value {what} is not allowed for config key: {c.name}"
            if current is None:
                res = await backend.describe_configs(name)
                if res.get("error_code"):
                    return res["error_code"], res.get("error_message")
                current = res.get("configs") or {}
            set_[c.name] = _list_op(op, current.get(c.name, ""), c.value)
        else:
            return INVALID_REQUEST, f"Unknown config operation {op} for {c.name}"
    res = await backend.alter_configs(name, set_, delete, validate_only)
    return res.get("error_code", 0), res.get("error_message")


async def incremental_alter_configs(backend, request, version: int):
    mod = responses.response_module(44, version)
    names = [(int(r.resource_type), r.resource_name) for r in request.resources]
    out = []
    for r in request.resources:
        rtype = int(r.resource_type)
        if names.count((rtype, r.resource_name)) > 1:
            code, msg = INVALID_REQUEST, f"Duplicate resource {r.resource_name!r} in the request"
        elif rtype == TOPIC:
            code, msg = await _alter_topic(backend, r.resource_name, r.configs, bool(request.validate_only))
        elif rtype == BROKER:
            code, msg = (
                INVALID_CONFIG,
                ("rafka has no dynamic broker configs: set them in the broker's properties and restart it"),
            )
        else:
            code, msg = INVALID_REQUEST, f"Unsupported resource type {rtype} (rafka serves topic (2) and broker (4))"
        out.append(
            responses.make(
                mod,
                "AlterConfigsResourceResponse",
                error_code=responses.error_code(code),
                error_message=msg,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
        )
    return responses.make(mod, "IncrementalAlterConfigsResponse", throttle_time=responses.ZERO, responses=tuple(out))


async def _replace_topic(backend, name: str, configs, validate_only: bool) -> tuple[int, str | None]:
    """Legacy AlterConfigs of a topic: the given configs set, every other override deleted, in one controller
    write (``replace``: the controller reads the overrides to delete under its lock, as Kafka's
    ConfigurationControlManager.legacyAlterConfigs does in one write event), so concurrent alters never mix."""
    if name == "":
        return INVALID_REQUEST, "Default topic resources are not allowed."
    given = {c.name: c.value for c in configs}
    res = await backend.alter_configs(name, given, [], validate_only, True)
    return res.get("error_code", 0), res.get("error_message")


async def _legacy_resource(backend, rtype: int, rname: str, configs, validate_only: bool) -> tuple[int, str | None]:
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        return INVALID_REQUEST, "Error due to duplicate config keys"
    nulls = [c.name for c in configs if c.value is None]
    if nulls:
        return INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls)
    if rtype == TOPIC:
        return await _replace_topic(backend, rname, configs, validate_only)
    if rtype == BROKER:
        if rname != "":
            if not rname.lstrip("-").isdigit():
                return INVALID_REQUEST, f"Node id must be an integer, but it is: {rname}"
            if int(rname) != backend.broker_id:
                return INVALID_REQUEST, f"Unexpected broker id, expected {backend.broker_id}, but received {rname}"
        if configs:
            return (
                INVALID_CONFIG,
                "rafka has no dynamic broker configs: set them in the broker's properties and restart it",
            )
        return 0, None
    return INVALID_REQUEST, f"Unknown resource type {rtype}"


async def alter_configs(backend, request, version: int):
    """Legacy AlterConfigs (api key 33): each resource's dynamic configs replaced by the ones given."""
    mod = responses.response_module(33, version)
    names = [(int(r.resource_type), r.resource_name) for r in request.resources]
    out = []
    for r in request.resources:
        rtype = int(r.resource_type)
        if names.count((rtype, r.resource_name)) > 1:
            code, msg = INVALID_REQUEST, "Each resource must appear at most once."
        else:
            code, msg = await _legacy_resource(backend, rtype, r.resource_name, r.configs, bool(request.validate_only))
        out.append(
            responses.make(
                mod,
                "AlterConfigsResourceResponse",
                error_code=responses.error_code(code),
                error_message=msg,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
        )
    return responses.make(mod, "AlterConfigsResponse", throttle_time=responses.ZERO, responses=tuple(out))
