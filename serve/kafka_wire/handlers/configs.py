"""DescribeConfigs (api key 32, v1-4) and IncrementalAlterConfigs (api key 44, v0-1), for topic (2) and
broker (4) resources.

Topic configs: every config storage knows (``storage.log.LogConfig``) with its effective value and
Kafka's source: DYNAMIC_TOPIC_CONFIG (1) for a topic override, STATIC_BROKER_CONFIG (4) when the broker's
properties set its broker-level synonym (``log.retention.ms`` for ``retention.ms``: the replicas apply
it, actors/leader_and_isr.py), else DEFAULT_CONFIG (5). ``include_synonyms`` lists that chain, most
specific first, as Kafka does; v3+ carries each config's type and, when asked, its documentation.

Broker configs: the configs rafka's broker acts on, with Kafka's defaults (DEFAULT_CONFIG) or the value in
the broker's properties (STATIC_BROKER_CONFIG); all read-only (rafka has no dynamic broker configs, so
IncrementalAlterConfigs on a broker answers INVALID_CONFIG). A broker resource names this broker's id, or
"" (the cluster-wide defaults); another id answers INVALID_REQUEST, as Kafka does (clients send a broker's
resource to that broker).

IncrementalAlterConfigs on topics: SET (0), DELETE (1), and APPEND (2) / SUBTRACT (3) on the list config
``cleanup.policy``, applied by the controller (``alter_configs``, validate_only honoured); an unknown
config name or a bad value answers INVALID_CONFIG (40) with the controller's message.
"""

from __future__ import annotations

from actors.controller_config import ControllerConfig
from actors.leader_and_isr import BROKER_TOPIC_DEFAULTS
from actors.replica_config import REPLICA_DEFAULTS
from storage.log import LogConfig
from storage.log_config import config_kinds

TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG, INVALID_REQUEST = 3, 40, 42
# Kafka's ConfigType (DescribeConfigs v3+)
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
_TYPE_OF_KIND = {"int32": INT, "int64": LONG, "bool": BOOLEAN, "ratio": DOUBLE, "policy": LIST, "tstype": STRING}
LIST_CONFIGS = frozenset(k for k, kind in config_kinds().items() if kind == "policy")

# a topic config -> its broker-level synonym (the broker default the replicas apply)
TOPIC_SYNONYM = {t: b for b, t in BROKER_TOPIC_DEFAULTS.items()} | {
    "unclean.leader.election.enable": "unclean.leader.election.enable"
}

_DOCS = {
    "cleanup.policy": "A list of delete and/or compact: how old log segments are discarded.",
    "retention.ms": "How long a log keeps a segment before discarding it (delete policy); -1: no time limit.",
    "retention.bytes": "The largest size a partition's log grows to before old segments go; -1: no limit.",
    "segment.bytes": "The size of a log segment file.",
    "segment.ms": "The time after which the active segment is rolled even if not full.",
    "max.message.bytes": "The largest record batch size allowed in this topic.",
    "min.insync.replicas": "The fewest in-sync replicas for an acks=all write to succeed.",
    "message.timestamp.type": "CreateTime (the producer's) or LogAppendTime (the broker's).",
    "unclean.leader.election.enable": "Whether a replica outside the ISR may become leader (data loss).",
    "auto.create.topics.enable": "Create an unknown topic when a client asks for it in a Metadata request.",
    "num.partitions": "The partition count of auto-created topics.",
    "default.replication.factor": "The replication factor of auto-created topics.",
}


def broker_defaults() -> dict[str, str]:
    """The broker configs rafka acts on, with Kafka's defaults, as strings."""
    cc = ControllerConfig()
    out = {
        "auto.create.topics.enable": "true",
        "num.partitions": str(cc.num_partitions),
        "default.replication.factor": str(cc.default_replication_factor),
        "unclean.leader.election.enable": "false",
        "auto.leader.rebalance.enable": "true",
        "leader.imbalance.per.broker.percentage": str(cc.imbalance_percentage),
        "leader.imbalance.check.interval.seconds": str(int(cc.imbalance_check_interval_s)),
        "broker.session.timeout.ms": str(cc.session_timeout_ms),
        "broker.heartbeat.interval.ms": str(cc.heartbeat_interval_ms),
        "socket.request.max.bytes": "104857600",
        "connections.max.idle.ms": "600000",
    }
    out |= {k: str(v) for k, v in REPLICA_DEFAULTS.items()}
    topic_defaults = LogConfig().to_props()
    out |= {b: topic_defaults[t] for b, t in BROKER_TOPIC_DEFAULTS.items()}
    return out


def _str(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _config_type(name: str) -> int:
    kind = config_kinds().get(name)
    if kind is not None:
        return _TYPE_OF_KIND[kind]
    default = broker_defaults().get(TOPIC_SYNONYM.get(name, name), "")
    return BOOLEAN if default in ("true", "false") else LONG if default.lstrip("-").isdigit() else STRING


def topic_entries(effective: dict, overrides: dict, broker_config: dict) -> list[dict]:
    """``[{name, value, source, read_only, synonyms: [(name, value, source)]}]`` of a topic: ``effective``
    is the controller's view (overrides over storage defaults)."""
    defaults = broker_defaults()
    out = []
    for name, value in sorted(effective.items()):
        syn = []
        if name in overrides:
            syn.append((name, _str(overrides[name]), DYNAMIC_TOPIC_CONFIG))
        broker_key = TOPIC_SYNONYM.get(name)
        if broker_key is not None and broker_key in broker_config:
            syn.append((broker_key, _str(broker_config[broker_key]), STATIC_BROKER_CONFIG))
        syn.append((broker_key or name, defaults.get(broker_key, value) if broker_key else value, DEFAULT_CONFIG))
        source = syn[0][2]
        shown = value if source != STATIC_BROKER_CONFIG else syn[0][1]
        out.append({"name": name, "value": shown, "source": source, "read_only": False, "synonyms": syn})
    return out


def broker_entries(broker_config: dict | None) -> list[dict]:
    """This broker's configs (``None``: the cluster-wide defaults only)."""
    defaults = broker_defaults()
    static = {k: _str(v) for k, v in (broker_config or {}).items() if v is not None}
    out = []
    for name in sorted(set(defaults) | set(static)):
        syn = []
        if name in static:
            syn.append((name, static[name], STATIC_BROKER_CONFIG))
        if name in defaults:
            syn.append((name, defaults[name], DEFAULT_CONFIG))
        out.append({"name": name, "value": syn[0][1], "source": syn[0][2], "read_only": True, "synonyms": syn})
    return out


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
    from .. import apis

    mod = apis.response_module(32, version)
    synonyms = bool(getattr(request, "include_synonyms", False))
    docs = bool(getattr(request, "include_documentation", False))
    results = []
    for r in request.resources:
        res = await _resource(backend, int(r.resource_type), r.resource_name)
        keys = None if r.configuration_keys is None else set(r.configuration_keys)
        configs = tuple(
            apis.make(
                mod,
                "DescribeConfigsResourceResult",
                name=e["name"],
                value=e["value"],
                read_only=e["read_only"],
                config_source=e["source"],
                is_sensitive=False,
                synonyms=tuple(
                    apis.make(mod, "DescribeConfigsSynonym", name=n, value=v, source=s) for n, v, s in e["synonyms"]
                )
                if synonyms
                else (),
                config_type=_config_type(e["name"]),
                documentation=_DOCS.get(e["name"]) if docs else None,
            )
            for e in res["entries"]
            if keys is None or e["name"] in keys
        )
        results.append(
            apis.make(
                mod,
                "DescribeConfigsResult",
                error_code=apis.error_code(res["error_code"]),
                error_message=res["error_message"],
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=configs,
            )
        )
    return apis.make(mod, "DescribeConfigsResponse", throttle_time=apis.ZERO, results=tuple(results))


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
    from .. import apis

    mod = apis.response_module(44, version)
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
            apis.make(
                mod,
                "AlterConfigsResourceResponse",
                error_code=apis.error_code(code),
                error_message=msg,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
        )
    return apis.make(mod, "IncrementalAlterConfigsResponse", throttle_time=apis.ZERO, responses=tuple(out))
