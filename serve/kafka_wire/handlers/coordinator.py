"""FindCoordinator (api key 10, v0-6): the broker whose coordinator serves a group (key type 0) or a
transactional id (key type 1), with that broker's advertised host:port. v0-3 ask for one key, v4+ for a
list (KIP-699), each answered on its own. The broker's ``find_coordinator`` starts the internal topic's
creation on first use and answers COORDINATOR_NOT_AVAILABLE (15) at once, and while the key's partition
has no leader, so the connection is never held by a creation; a leader
whose listener is not known yet answers 15 too (the client retries)."""

from __future__ import annotations

import asyncio

from protocol import errors as E
from serve.kafka_wire import responses

COORDINATOR_NOT_AVAILABLE = E.CoordinatorNotAvailableError.code


async def _one(backend, key: str, key_type: int, md: dict, endpoints: dict) -> dict:
    r = await backend.find_coordinator(key, key_type)
    code = r.get("error_code", 0)
    if code:
        return {"error_code": code, "error_message": r.get("error_message"), "node_id": -1, "host": "", "port": -1}
    ep = endpoints.get(r["broker_id"])
    if ep is None:
        msg = f"broker {r['broker_id']} coordinates {key!r} but its listener is not known yet"
        return {"error_code": COORDINATOR_NOT_AVAILABLE, "error_message": msg, "node_id": -1, "host": "", "port": -1}
    return {"error_code": 0, "error_message": None, "node_id": r["broker_id"], "host": ep[0], "port": ep[1]}


async def find_coordinator(backend, request, version: int):
    mod = responses.response_module(10, version)
    key_type = int(getattr(request, "key_type", 0))
    keys = list(request.coordinator_keys) if version >= 4 else [request.key]
    md = await backend.metadata()
    endpoints = await backend.endpoints(md["brokers"])
    answers = await asyncio.gather(*(_one(backend, k, key_type, md, endpoints) for k in keys))
    if version < 4:
        a = answers[0]
        return responses.make(
            mod,
            "FindCoordinatorResponse",
            throttle_time=responses.ZERO,
            error_code=responses.error_code(a["error_code"]),
            error_message=a["error_message"],
            node_id=a["node_id"],
            host=a["host"],
            port=a["port"],
        )
    coords = tuple(
        responses.make(mod, "Coordinator", key=k, **{**a, "error_code": responses.error_code(a["error_code"])})
        for k, a in zip(keys, answers)
    )
    return responses.make(mod, "FindCoordinatorResponse", throttle_time=responses.ZERO, coordinators=coords)
