"""KafkaApis: one request payload in, one response frame (or nothing) out, dispatched by API key.

``KafkaApis.handle(payload)`` reads the header prefix, answers ApiVersions itself (an unknown ApiVersions
version gets a v0-format body with UNSUPPORTED_VERSION (35) and the supported range, as KIP-511 asks;
the connection stays open), decodes every other served (key, version) with kio and awaits the API
family's handler (handlers/: metadata, produce, fetch, offsets, coordinator, txn). A handler returns a kio response entity,
or None where Kafka sends nothing (Produce with acks=0). An unknown API key, an unserved version or a
body that does not parse raises :class:`~serve.kafka_wire.codec.RequestError`: the Processor logs it and
closes that connection; nothing else is affected. This is Kafka's behaviour: its SocketServer refuses a
request whose key/version is not enabled (``ApiKeys.isVersionEnabled`` lets any version through only for
ApiVersions) with an InvalidRequestException and closes the channel, since no response of a version it
does not know can be built. The log line names the key, the version, the served range and the client (id
and address: ``unserved``). ApiVersions v3+ whose client software name/version break KIP-511's pattern gets
INVALID_REQUEST (Kafka's ApiVersionsRequest.isValid); ApiVersions lists versions.advertised().

Handlers only talk to a :class:`~serve.kafka_wire.backend.Backend` (the broker's actors behind a narrow
async interface), so the unit tests drive them with an in-memory one.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable

from kio.index import api_key_map

from protocol import errors as E
from serve.kafka_wire import codec, versions
from serve.kafka_wire.handlers import (
    admin,
    configs,
    coordinator,
    fetch,
    groups,
    log_dirs,
    metadata,
    offsets,
    produce,
    txn,
)
from serve.kafka_wire.network import CLIENT_HOST
from serve.kafka_wire.responses import CLIENT_ID, ZERO, error_code, make, response_module

log = logging.getLogger("rafka.kafka_wire")


# KIP-511's rule for client_software_name and client_software_version (Kafka's ApiVersionsRequest.isValid)
SOFTWARE_NAME = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def api_versions_response(version: int, code: int = 0):
    """The ApiVersions answer at ``version``: the advertised ranges (versions.advertised), also with
    UNSUPPORTED_VERSION (35) so that the client can pick a version it shares; none with INVALID_REQUEST."""
    mod = response_module(versions.API_VERSIONS, version)
    keys = tuple(
        make(mod, "ApiVersion", api_key=k, min_version=lo, max_version=hi)
        for k, (lo, hi) in sorted(versions.advertised().items())
        if code != E.InvalidRequestError.code
    )
    return make(mod, "ApiVersionsResponse", error_code=error_code(code), api_keys=keys, throttle_time=ZERO)


def valid_software(request) -> bool:
    """Kafka's ApiVersionsRequest.isValid: from v3 the client software name and version must match KIP-511's
    pattern (letters, digits, '-' and '.', starting and ending with a letter or digit)."""
    if request.__version__ < 3:
        return True
    return all(
        SOFTWARE_NAME.fullmatch(s or "") for s in (request.client_software_name, request.client_software_version)
    )


def api_name(api_key: int) -> str:
    """Kafka's name of an API key (``ListOffsets``), or ``unknown`` for a key no Kafka version defines."""
    snake = api_key_map.get(api_key)
    return "".join(w.capitalize() for w in snake.split("_")) if snake else "unknown"


def unserved(api_key: int, version: int, client_id: str | None = None, host: str = "") -> str:
    """Why a request is refused before parsing: the key, its version, what is served of that key and who
    asked (the Processor logs it and closes the connection, as Kafka's SocketServer does for a version it
    does not enable: no response of an unknown version can be built)."""
    rng = versions.SUPPORTED.get(api_key)
    served = f"served versions {rng[0]}..{rng[1]}" if rng else "this api key is not served"
    if rng and version < rng[0]:
        served += " (older versions were removed in Kafka 4.0, KIP-896)"
    who = f"client id {client_id!r}" + (f" at {host}" if host else "")
    return (
        f"api key {api_key} ({api_name(api_key)}) version {version} is not served: {served} (see ApiVersions);"
        f" refused {who}"
    )


class KafkaApis:
    """The request handler of one broker's listener (shared by all its connections)."""

    HANDLERS = {
        versions.METADATA: metadata.handle,
        versions.PRODUCE: produce.handle,
        versions.FETCH: fetch.handle,
        versions.LIST_OFFSETS: offsets.list_offsets,
        versions.OFFSET_FOR_LEADER_EPOCH: offsets.offset_for_leader_epoch,
        versions.INIT_PRODUCER_ID: txn.init_producer_id,
        versions.FIND_COORDINATOR: coordinator.find_coordinator,
        versions.ADD_PARTITIONS_TO_TXN: txn.add_partitions_to_txn,
        versions.ADD_OFFSETS_TO_TXN: txn.add_offsets_to_txn,
        versions.END_TXN: txn.end_txn,
        versions.TXN_OFFSET_COMMIT: txn.txn_offset_commit,
        versions.DESCRIBE_TRANSACTIONS: txn.describe_transactions,
        versions.LIST_TRANSACTIONS: txn.list_transactions,
        versions.CREATE_TOPICS: admin.create_topics,
        versions.DELETE_TOPICS: admin.delete_topics,
        versions.CREATE_PARTITIONS: admin.create_partitions,
        versions.DELETE_RECORDS: admin.delete_records,
        versions.DESCRIBE_CONFIGS: configs.describe_configs,
        versions.INCREMENTAL_ALTER_CONFIGS: configs.incremental_alter_configs,
        versions.ALTER_CONFIGS: configs.alter_configs,
        versions.DESCRIBE_LOG_DIRS: log_dirs.describe_log_dirs,
        versions.ALTER_REPLICA_LOG_DIRS: log_dirs.alter_replica_log_dirs,
        versions.DESCRIBE_CLUSTER: admin.describe_cluster,
        versions.ELECT_LEADERS: admin.elect_leaders,
        versions.ALTER_PARTITION_REASSIGNMENTS: admin.alter_partition_reassignments,
        versions.LIST_PARTITION_REASSIGNMENTS: admin.list_partition_reassignments,
        versions.JOIN_GROUP: groups.join_group,
        versions.SYNC_GROUP: groups.sync_group,
        versions.HEARTBEAT: groups.heartbeat,
        versions.LEAVE_GROUP: groups.leave_group,
        versions.OFFSET_COMMIT: groups.offset_commit,
        versions.OFFSET_FETCH: groups.offset_fetch,
        versions.LIST_GROUPS: groups.list_groups,
        versions.DESCRIBE_GROUPS: groups.describe_groups,
        versions.DELETE_GROUPS: groups.delete_groups,
        versions.OFFSET_DELETE: groups.offset_delete,
    }

    def __init__(self, backend):
        self.backend = backend

    def prepare(self, payload: bytes | memoryview) -> tuple[Awaitable[bytes | None], bool]:
        """``(answer, concurrent)``: with ``concurrent`` the request is already submitted (a Produce that
        handlers/produce.py may pipeline: its writes are on their way, in request order) and ``answer``
        only collects the response; otherwise ``answer`` is the not yet started handling of the request,
        to be awaited once every earlier request of the connection is answered. RequestError when a
        Produce does not parse (other requests raise it from ``answer``)."""
        api_key, version, correlation_id = codec.header_prefix(payload)
        if api_key != versions.PRODUCE or not versions.supports(api_key, version):
            return self.handle(payload), False
        header, request = codec.decode_request(payload, api_key, version)
        CLIENT_ID.set(header.client_id)
        if not produce.pipelinable(request):
            return self._encoded(correlation_id, produce.handle(self.backend, request, version)), False
        return self._encoded(correlation_id, produce.submit(self.backend, request, version)), True

    @staticmethod
    async def _encoded(correlation_id: int, response: Awaitable) -> bytes | None:
        answer = await response
        return None if answer is None else codec.encode_response(correlation_id, answer)

    async def handle(self, payload: bytes | memoryview) -> bytes | None:
        api_key, version, correlation_id = codec.header_prefix(payload)
        if api_key == versions.API_VERSIONS:
            if not versions.supports(api_key, version):
                # KIP-511: a v0-format body with UNSUPPORTED_VERSION and our ranges; the client retries
                log.debug(
                    "ApiVersions v%d from client id %r at %s: answered in v0 with UNSUPPORTED_VERSION",
                    version,
                    codec.header_client_id(payload),
                    CLIENT_HOST.get(),
                )
                return codec.encode_response(correlation_id, api_versions_response(0, E.UnsupportedVersionError.code))
            header, request = codec.decode_request(payload, api_key, version)  # a malformed one still closes
            if not valid_software(request):
                log.info(
                    "ApiVersions v%d from client id %r at %s: invalid client software name %r / version %r",
                    version,
                    header.client_id,
                    CLIENT_HOST.get(),
                    request.client_software_name,
                    request.client_software_version,
                )
                return codec.encode_response(correlation_id, api_versions_response(version, E.InvalidRequestError.code))
            return codec.encode_response(correlation_id, api_versions_response(version))
        if not versions.supports(api_key, version):
            raise codec.RequestError(unserved(api_key, version, codec.header_client_id(payload), CLIENT_HOST.get()))
        header, request = codec.decode_request(payload, api_key, version)
        CLIENT_ID.set(header.client_id)
        response = await self.HANDLERS[api_key](self.backend, request, version)
        if response is None:
            return None
        return codec.encode_response(correlation_id, response)
