"""Building kio response entities: ``make`` (a response class at its version, given the union of fields),
``response_module``, ``error_code``, ``by_topic``, ``ZERO`` (no throttle) and ``CLIENT_ID`` (the request
header's client id while a request is handled). Every handler (handlers/) and KafkaApis (apis.py) import
it; it imports only kio.
"""

from __future__ import annotations

import contextvars
import datetime
import sys
from dataclasses import fields
from types import ModuleType

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from protocol import errors as E

ZERO = datetime.timedelta(0)
UNKNOWN_SERVER_ERROR = E.UnknownServerError.code

_FIELD_NAMES: dict[type, frozenset[str]] = {}

# the request header's client_id of the request being handled (group members report it in DescribeGroups)
CLIENT_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("kafka_client_id", default=None)


def error_code(code: int) -> ErrorCode:
    """The kio enum of a Kafka error code (UNKNOWN_SERVER_ERROR for a code kio does not list)."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode(UNKNOWN_SERVER_ERROR)


def response_module(api_key: int, version: int) -> ModuleType:
    """The kio module holding the response classes (top-level and nested) of one API version."""
    return sys.modules[load_response_schema(api_key, version).__module__]


def make(module: ModuleType, cls_name: str, /, **values):
    """``module.name(**values)`` keeping only the fields that class has at this version (field sets change
    across versions; the handlers pass the union and let each version take its own)."""
    cls = getattr(module, cls_name)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    return cls(**{k: v for k, v in values.items() if k in names})


def by_topic(pairs) -> dict:
    """``{topic key: (partition answer, ...)}`` from ``(topic key, partition answer)`` pairs, in first-seen
    order: every partitioned response nests its partitions under their topic this way."""
    out: dict = {}
    for key, part in pairs:
        out.setdefault(key, []).append(part)
    return {k: tuple(v) for k, v in out.items()}


def has_field(entity_cls: type, name: str) -> bool:
    return any(f.name == name for f in fields(entity_cls))
