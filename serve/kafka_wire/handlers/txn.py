"""InitProducerId (api key 22, v0-4) for idempotent producers (a null transactional id): a fresh producer id
at epoch 0 from the broker's block (``BrokerActor.init_producer_id``). Transactional ids (the transaction
coordinator, FindCoordinator, AddPartitionsToTxn, EndTxn ...) are a later milestone of the listener and
answer INVALID_REQUEST (42) until then."""

from __future__ import annotations

INVALID_REQUEST = 42


async def init_producer_id(backend, request, version: int):
    from .. import apis

    mod = apis.response_module(22, version)
    if request.transactional_id:
        r = {"error_code": INVALID_REQUEST, "producer_id": -1, "producer_epoch": -1}
    else:
        r = await backend.init_producer_id()
    return apis.make(
        mod,
        "InitProducerIdResponse",
        throttle_time=apis.ZERO,
        error_code=apis.error_code(r.get("error_code", 0)),
        producer_id=r.get("producer_id", -1),
        producer_epoch=r.get("producer_epoch", -1),
    )
