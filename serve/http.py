"""rafka's HTTP gateway: a Ray Serve application shaped like Confluent's REST Proxy (v2 and v3).

    import rafka, requests
    from serve.gateway import start_gateway, stop_gateway   # deploying it: serve/gateway.py
    url = start_gateway(cluster, port=8082)                  # http://127.0.0.1:8082, docs at /docs
    requests.post(f"{url}/topics/clicks", json={"records": [{"value": "aGk="}]},
                  headers={"Content-Type": "application/vnd.kafka.binary.v2+json"})
    stop_gateway()

Two deployments: ``Gateway`` (the FastAPI ingress, ``num_replicas`` of them, each with one long-lived
idempotent ``rafka.Producer``) and ``ConsumerInstances`` (one replica holding the stateful REST consumer
instances, see serve/consumers.py). Serve's HTTP proxy carries only ~100 requests/s on a small machine,
so throughput comes from many records per request: a request becomes one ``Producer.send_batch`` and
one wait, run on a worker thread so the event loop keeps many requests in flight.

Errors are JSON ``{"error_code", "kafka_error_code", "message"}`` with the HTTP status of their class
(serve/errors.py); no route answers with a traceback.
"""

# no `from __future__ import annotations`: FastAPI must see real types (Request, int) on the ingress
# methods after Serve pickles the class by value into its replicas
import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from protocol.errors import KafkaError
from serve import gateway_metrics
from serve.body import DEFAULT_BODY_TIMEOUT_S, read_body, read_json_or_none
from serve.console_routes import console_mixin
from serve.errors import (
    BAD_PARAMETER,
    MALFORMED,
    METHOD_NOT_ALLOWED,
    NOT_ACCEPTABLE,
    NOT_FOUND,
    UNSUPPORTED_MEDIA,
    GatewayError,
    from_exception,
)
from serve.http_admin import admin_mixin
from serve.http_shapes import (  # content negotiation and the v2/v3 response shapes
    _base,
    _describe_topic,
    _group,
    _group_exists,
    _health,
    _json,
    _media,
    _offset_entry,
    _partition_of,
    _produce_format,
    _reply,
    _v2_partition,
    _v3_group,
    _v3_partition,
    _v3_topic,
)
from serve.produce import BINARY_V2, JSON_V2, MSGPACK, V2_JSON, JsonValueStream, ProduceService, parse_v2, parse_v3
from serve.v3_stream import RequestStreamingResponse, v3_report, v3_stream

__all__ = ["APP_NAME", "DEFAULT_MAX_REQUEST_BYTES", "build_app"]

APP_NAME = "rafka-gateway"
log = logging.getLogger("ray.serve.rafka_gateway")  # a child of Serve's logger: lines land in the replica's Serve log
DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024


def _fastapi() -> FastAPI:
    """A fresh FastAPI app with the gateway's exception handlers: every failure is a JSON error body."""
    from fastapi_offline import FastAPIOffline

    # /docs and /redoc from the package's own Swagger UI / ReDoc files, not a CDN: they work offline
    api = FastAPIOffline(
        title="rafka HTTP gateway",
        version="1.0",
        description="Confluent REST Proxy-shaped HTTP API (v2 + v3) over a rafka cluster. Errors: "
        '{"error_code": <HTTP status + sequence>, "kafka_error_code": <Kafka code|null>, '
        '"message": ...}.',
    )

    api.middleware("http")(gateway_metrics.middleware)  # request counts for the exporter (docs/metrics.md)

    @api.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        return error_response(exc, request)

    @api.exception_handler(KafkaError)
    async def _kafka_error(request: Request, exc: KafkaError) -> JSONResponse:
        return error_response(from_exception(exc), request)

    @api.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        in_path = any(e.get("loc", ("",))[0] == "path" for e in exc.errors())
        where = "; ".join(f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors())
        return error_response(
            GatewayError(
                404 if in_path else 422,
                NOT_FOUND if in_path else BAD_PARAMETER,
                f"invalid request parameter(s): {where}",
            ),
            request,
        )

    @api.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: NOT_FOUND, 405: METHOD_NOT_ALLOWED}.get(exc.status_code, exc.status_code * 100 + 1)
        return error_response(
            GatewayError(exc.status_code, code, f"{exc.detail} ({request.method} {request.url.path})"), request
        )

    @api.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return error_response(from_exception(exc), request, exc)

    return api


def error_response(err: GatewayError, request: Request | None = None, exc: BaseException | None = None) -> JSONResponse:
    """The JSON error answer, logged as one line: INFO for a client error (4xx: the client's request was
    wrong, the gateway is fine), WARNING for 5xx the cluster explained (unavailable, timed out); only an
    unexpected exception (a 500 from ``_unexpected``) is logged at ERROR with its traceback."""
    if request is not None:
        level = logging.INFO if err.status < 500 else logging.WARNING if exc is None else logging.ERROR
        log.log(
            level,
            "%d %s %s: %s",
            err.status,
            request.method,
            request.url.path,
            err.message,
            exc_info=exc if level == logging.ERROR else None,
        )
    return JSONResponse(err.body(), status_code=err.status)


class Gateway:
    """The ingress: stateless apart from its producer, so it can run as several replicas."""

    def __init__(
        self,
        cluster: str,
        acks: str | int,
        instances: Any,
        producer_config: dict | None = None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    ):
        from rafka.admin.admin import Admin

        self.cluster = cluster
        gateway_metrics.attach(cluster)
        self.producer = ProduceService(cluster, acks, producer_config)
        self.admin = Admin(cluster, default_api_timeout_ms=15000, request_timeout_ms=10000)
        self.instances = instances
        self.max_request_bytes = max_request_bytes
        self.body_timeout_s = body_timeout_s
        self._pool = ThreadPoolExecutor(64, thread_name_prefix="gateway")

    async def run(self, fn: Callable, *args) -> Any:
        """Blocking client work (Ray calls, waits on produce futures) on a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _cluster_id(self, cluster_id: str) -> None:
        if cluster_id != self.cluster:
            raise GatewayError(
                404, NOT_FOUND, f"cluster {cluster_id!r} not found (this gateway serves {self.cluster!r})"
            )

    async def _body(self, request: Request) -> bytes:
        """The whole request body within the size limit and the body timeout (serve/body.py)."""
        return await read_body(request, self.max_request_bytes, self.body_timeout_s)

    async def _json_body(self, request: Request) -> Any:
        return await read_json_or_none(request, self.max_request_bytes, self.body_timeout_s)

    async def _consumer(self, group: str, name: str, op: str, *args) -> Any:
        return await self.instances.op.remote(group, name, op, *args)

    def __del__(self) -> None:
        """Serve calls this when the replica shuts down: deliver what is queued, then stop the sender."""
        producer = getattr(self, "producer", None)
        if producer is not None:
            producer.close()


def build_app():
    """The Serve ingress class over a fresh FastAPI app (built per deployment, so deploying twice in one
    process never registers a route twice)."""
    from ray import serve as ray_serve

    app = _fastapi()

    @ray_serve.ingress(app)
    class GatewayIngress(Gateway, admin_mixin(app), console_mixin(app)):  # type: ignore[misc]  # admin routes; /console
        # -- health and clusters ------------------------------------------------------------------------
        @app.get("/health", summary="Cluster reachable, controller epoch, brokers alive")
        async def health(self) -> Response:
            status, body = await self.run(_health, self.admin, self.cluster)
            return _json(body, status, "application/json")

        @app.get("/v3/clusters", summary="The cluster this gateway serves (v3)")
        async def clusters(self, request: Request) -> Response:
            return _json(
                {
                    "kind": "KafkaClusterList",
                    "metadata": {"self": f"{_base(request)}/v3/clusters"},
                    "data": [await self.run(self._v3_cluster, _base(request))],
                },
                media="application/json",
            )

        @app.get("/v3/clusters/{cluster_id}", summary="One cluster (v3)")
        async def cluster(self, cluster_id: str, request: Request) -> Response:
            self._cluster_id(cluster_id)
            return _json(await self.run(self._v3_cluster, _base(request)), media="application/json")

        def _v3_cluster(self, base: str) -> dict:
            desc = self.admin.describe_cluster()
            url = f"{base}/v3/clusters/{self.cluster}"
            return {
                "kind": "KafkaCluster",
                "metadata": {"self": url},
                "cluster_id": self.cluster,
                "controller": {"related": f"{url}/brokers/{desc['controller_id']}"},
                "controller_id": desc["controller_id"],
                "controller_epoch": desc["controller_epoch"],
                "brokers": {"related": f"{url}/brokers"},
                "topics": {"related": f"{url}/topics"},
                "consumer_groups": {"related": f"{url}/consumer-groups"},
            }

        # -- v2 topics ----------------------------------------------------------------------------------
        @app.get("/topics", summary="Topic names (v2)")
        async def topics(self) -> Response:
            return _json(sorted(await self.run(self.admin.list_topics)))

        @app.get("/topics/{topic}", summary="A topic's configs and partitions (v2)")
        async def topic(self, topic: str) -> Response:
            return _json(await self.run(_describe_topic, self.admin, topic))

        @app.get("/topics/{topic}/partitions", summary="A topic's partitions: leader, replicas, in-sync (v2)")
        async def partitions(self, topic: str) -> Response:
            return _json((await self.run(_describe_topic, self.admin, topic))["partitions"])

        @app.get("/topics/{topic}/partitions/{partition}", summary="One partition (v2)")
        async def partition(self, topic: str, partition: int) -> Response:
            return _json(_v2_partition(await self.run(_partition_of, self.admin, topic, partition)))

        # -- v2 produce ---------------------------------------------------------------------------------
        @app.post("/topics/{topic}", summary="Produce records (v2: binary/json embedded format, or msgpack)")
        async def produce(self, topic: str, request: Request) -> Response:
            return await self._produce_v2(topic, None, request)

        @app.post("/topics/{topic}/partitions/{partition}", summary="Produce records to one partition (v2)")
        async def produce_partition(self, topic: str, partition: int, request: Request) -> Response:
            if partition < 0:
                raise GatewayError(404, 40402, f"partition {partition} does not exist in topic {topic!r}", 3)
            return await self._produce_v2(topic, partition, request)

        async def _produce_v2(self, topic: str, partition: int | None, request: Request) -> Response:
            fmt = _produce_format(request)
            records = parse_v2(await self._body(request), fmt)
            results = await self.run(self.producer.produce, topic, records, partition, True)
            body = {
                "key_schema_id": None,
                "value_schema_id": None,
                "offsets": [
                    {"partition": r[0], "offset": r[1], "error_code": None, "error": None}
                    if type(r) is tuple
                    else _offset_entry(r)
                    for r in results
                ],
            }
            return _reply(request, body, msgpack_ok=True)

        # -- v3 topics and produce ----------------------------------------------------------------------
        @app.get("/v3/clusters/{cluster_id}/topics", summary="Topics (v3)")
        async def v3_topics(self, cluster_id: str, request: Request) -> Response:
            self._cluster_id(cluster_id)

            def run():
                names = self.admin.list_topics()
                return [
                    _v3_topic(_base(request), self.cluster, d)
                    for d in (self.admin.describe_topics(names) if names else [])
                ]

            data = sorted(await self.run(run), key=lambda t: t["topic_name"])
            return _json(
                {
                    "kind": "KafkaTopicList",
                    "metadata": {"self": f"{_base(request)}/v3/clusters/{self.cluster}/topics"},
                    "data": data,
                },
                media="application/json",
            )

        @app.get("/v3/clusters/{cluster_id}/topics/{topic}", summary="One topic (v3)")
        async def v3_topic(self, cluster_id: str, topic: str, request: Request) -> Response:
            self._cluster_id(cluster_id)
            (d,) = await self.run(self.admin.describe_topics, [topic])
            return _json(_v3_topic(_base(request), self.cluster, d), media="application/json")

        @app.get("/v3/clusters/{cluster_id}/topics/{topic}/partitions", summary="A topic's partitions (v3)")
        async def v3_partitions(self, cluster_id: str, topic: str, request: Request) -> Response:
            self._cluster_id(cluster_id)
            (d,) = await self.run(self.admin.describe_topics, [topic])
            data = [
                _v3_partition(_base(request), self.cluster, topic, p)
                for p in sorted(d["partitions"], key=lambda p: p["partition"])
            ]
            return _json(
                {
                    "kind": "KafkaPartitionList",
                    "metadata": {"self": f"{_base(request)}/v3/clusters/{self.cluster}/topics/{topic}/partitions"},
                    "data": data,
                },
                media="application/json",
            )

        @app.get("/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}", summary="One partition (v3)")
        async def v3_partition(self, cluster_id: str, topic: str, partition: int, request: Request) -> Response:
            self._cluster_id(cluster_id)
            p = await self.run(_partition_of, self.admin, topic, partition)
            return _json(_v3_partition(_base(request), self.cluster, topic, p), media="application/json")

        @app.post(
            "/v3/clusters/{cluster_id}/topics/{topic}/records",
            summary="Produce one record, or a stream of concatenated records with one report each (v3)",
        )
        async def v3_produce(self, cluster_id: str, topic: str, request: Request) -> Response:
            self._cluster_id(cluster_id)
            media = _media(request.headers.get("content-type"))
            if media not in ("application/json", ""):
                raise GatewayError(
                    415, UNSUPPORTED_MEDIA, f"unsupported Content-Type {media!r} for v3 produce; use application/json"
                )
            stream = JsonValueStream(self.max_request_bytes)
            if "content-length" not in request.headers:  # a chunked body: streaming mode from the first record
                self.producer.require_topic(topic)
                return RequestStreamingResponse(
                    v3_stream(self, topic, [], stream, request.stream().__aiter__(), self.body_timeout_s),
                    media_type="application/json",
                )
            values = stream.feed(await self._body(request)) + stream.finish()
            if stream.failed is not None:  # a whole body that cannot be parsed: nothing of it is produced
                raise stream.failed
            if not values:
                raise GatewayError(400, MALFORMED, "the body holds no record")
            if len(values) > 1:  # several records in a whole body: one report line each
                self.producer.require_topic(topic)
                return RequestStreamingResponse(
                    v3_stream(self, topic, values, stream, None, self.body_timeout_s), media_type="application/json"
                )
            parsed = parse_v3(values)
            (res,) = await self.run(self.producer.produce, topic, [parsed[0][0]], None)
            if isinstance(res, BaseException):
                raise from_exception(res)
            return _json(
                v3_report(self.cluster, topic, res, parsed[0][1], parsed[0][2], parsed[0][0]), media="application/json"
            )

        # -- v3 consumer groups -------------------------------------------------------------------------
        @app.get("/v3/clusters/{cluster_id}/consumer-groups", summary="Consumer groups (v3)")
        async def v3_groups(self, cluster_id: str, request: Request) -> Response:
            self._cluster_id(cluster_id)

            def run():
                ids = [g["group_id"] for g in self.admin.list_groups()]
                return [
                    _v3_group(_base(request), self.cluster, d)
                    for d in (self.admin.describe_groups(ids) if ids else [])
                    if _group_exists(d)  # the groups whose own URL answers (serve/http_shapes.py _group)
                ]

            return _json(
                {
                    "kind": "KafkaConsumerGroupList",
                    "metadata": {"self": f"{_base(request)}/v3/clusters/{self.cluster}/consumer-groups"},
                    "data": await self.run(run),
                },
                media="application/json",
            )

        @app.get("/v3/clusters/{cluster_id}/consumer-groups/{group}", summary="One consumer group and its members (v3)")
        async def v3_group(self, cluster_id: str, group: str, request: Request) -> Response:
            self._cluster_id(cluster_id)
            d = await self.run(_group, self.admin, group)
            return _json(_v3_group(_base(request), self.cluster, d), media="application/json")

        @app.get("/v3/clusters/{cluster_id}/consumer-groups/{group}/lags", summary="Lag per partition (v3)")
        async def v3_lags(self, cluster_id: str, group: str) -> Response:
            self._cluster_id(cluster_id)
            d = await self.run(_group, self.admin, group)
            clients = {m["member_id"]: m for m in d["members"]}
            data = [
                {
                    "kind": "KafkaConsumerLag",
                    "cluster_id": self.cluster,
                    "consumer_group_id": group,
                    "topic_name": o["topic"],
                    "partition_id": o["partition"],
                    "current_offset": o["committed"],
                    "log_end_offset": o["log_end"],
                    "lag": o["lag"],
                    "consumer_id": o["member_id"],
                    "instance_id": (clients.get(o["member_id"]) or {}).get("group_instance_id"),
                    "client_id": (clients.get(o["member_id"]) or {}).get("client_id"),
                }
                for o in d["offsets"]
            ]
            return _json({"kind": "KafkaConsumerLagList", "metadata": {}, "data": data}, media="application/json")

        # -- v2 consumer instances ----------------------------------------------------------------------
        @app.post("/consumers/{group}", summary="Create a consumer instance in a group")
        async def create_consumer(self, group: str, request: Request) -> Response:
            body = await self._json_body(request)
            return _json(await self.instances.create.remote(group, body if body is not None else {}, _base(request)))

        @app.delete("/consumers/{group}/instances/{name}", summary="Close a consumer instance (leaves the group)")
        async def delete_consumer(self, group: str, name: str) -> Response:
            await self.instances.delete.remote(group, name)
            return Response(status_code=204)

        @app.post("/consumers/{group}/instances/{name}/subscription", summary="Subscribe to topics or a pattern")
        async def subscribe(self, group: str, name: str, request: Request) -> Response:
            await self._consumer(group, name, "subscribe", await self._json_body(request))
            return Response(status_code=204)

        @app.get("/consumers/{group}/instances/{name}/subscription", summary="The subscribed topics")
        async def subscription(self, group: str, name: str) -> Response:
            return _json(await self._consumer(group, name, "subscription"))

        @app.delete("/consumers/{group}/instances/{name}/subscription", summary="Unsubscribe")
        async def unsubscribe(self, group: str, name: str) -> Response:
            await self._consumer(group, name, "unsubscribe")
            return Response(status_code=204)

        @app.post("/consumers/{group}/instances/{name}/assignments", summary="Assign partitions manually")
        async def assign(self, group: str, name: str, request: Request) -> Response:
            await self._consumer(group, name, "assign", await self._json_body(request))
            return Response(status_code=204)

        @app.get("/consumers/{group}/instances/{name}/assignments", summary="The assigned partitions")
        async def assignments(self, group: str, name: str) -> Response:
            return _json(await self._consumer(group, name, "assignments"))

        @app.get(
            "/consumers/{group}/instances/{name}/records",
            summary="Fetch records (Accept: binary/json v2 embedded format, or msgpack)",
        )
        async def records(
            self, group: str, name: str, request: Request, timeout: int | None = None, max_bytes: int | None = None
        ) -> Response:
            if (timeout is not None and timeout < 0) or (max_bytes is not None and max_bytes <= 0):
                raise GatewayError(422, BAD_PARAMETER, "timeout must be >= 0 and max_bytes > 0")
            fmt = await self._records_format(group, name, request.headers.get("accept"))
            recs = await self._consumer(group, name, "records", timeout, max_bytes, fmt)
            if fmt == "msgpack":
                import msgpack

                return Response(msgpack.packb(recs, use_bin_type=True), media_type=MSGPACK)
            return _json(recs, media=BINARY_V2 if fmt == "binary" else JSON_V2)

        async def _records_format(self, group: str, name: str, accept: str | None) -> str:
            accept = (accept or "").lower()
            if MSGPACK in accept:
                return "msgpack"
            if BINARY_V2 in accept:
                return "binary"
            if JSON_V2 in accept:
                return "json"
            if not accept or "*/*" in accept or V2_JSON in accept or "application/json" in accept:
                return await self.instances.instance_format.remote(group, name)
            raise GatewayError(
                406, NOT_ACCEPTABLE, f"cannot answer in {accept!r}: accept {BINARY_V2}, {JSON_V2} or {MSGPACK}"
            )

        @app.post(
            "/consumers/{group}/instances/{name}/offsets",
            summary="Commit the given offsets (last processed record), or everything consumed (no body)",
        )
        async def commit(self, group: str, name: str, request: Request) -> Response:
            await self._consumer(group, name, "commit", await self._json_body(request))
            return Response(status_code=204)

        @app.get("/consumers/{group}/instances/{name}/offsets", summary="Committed offsets")
        async def committed(self, group: str, name: str, request: Request) -> Response:
            return _json(await self._consumer(group, name, "committed", await self._json_body(request)))

        @app.post("/consumers/{group}/instances/{name}/positions", summary="Seek to offsets")
        async def seek(self, group: str, name: str, request: Request) -> Response:
            await self._consumer(group, name, "seek", await self._json_body(request))
            return Response(status_code=204)

        @app.post("/consumers/{group}/instances/{name}/positions/beginning", summary="Seek to the beginning")
        async def seek_beginning(self, group: str, name: str, request: Request) -> Response:
            await self._consumer(group, name, "seek_edge", await self._json_body(request), False)
            return Response(status_code=204)

        @app.post("/consumers/{group}/instances/{name}/positions/end", summary="Seek to the end")
        async def seek_end(self, group: str, name: str, request: Request) -> Response:
            await self._consumer(group, name, "seek_edge", await self._json_body(request), True)
            return Response(status_code=204)

    return GatewayIngress
