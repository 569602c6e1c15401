"""The gateway's admin routes, Confluent REST Proxy's shapes (serve/http.py mixes them into its ingress):

    v2  GET    /brokers                                              {"brokers": [ids]}
        GET    /topics/{t}/partitions/{p}/offsets                    {"beginning_offset", "end_offset"}
    v3  GET    /v3/clusters/{c}/brokers[/{id}]                       KafkaBrokerList / KafkaBroker
        GET    /v3/clusters/{c}/brokers/{id}/configs[/{name}]        broker configs with their source
        POST   /v3/clusters/{c}/topics                               create (topic_name, partitions_count,
                                                                     replication_factor, configs) -> 201
        DELETE /v3/clusters/{c}/topics/{t}                           204
        GET    /v3/clusters/{c}/topics/{t}/configs[/{name}]          topic configs with their source
        GET    /v3/clusters/{c}/consumer-groups/{g}/lag-summary      max and total lag
        GET    /v3/clusters/{c}/topics/-/partitions/-/reassignment   reassignments in progress (also per
               /v3/clusters/{c}/topics/{t}/partitions/-/reassignment topic, and per partition: 404 when none)
               /v3/clusters/{c}/topics/{t}/partitions/{p}/reassignment

Every link a v3 body carries (``metadata.self``, ``*.related``) names one of these routes or another v3 route
of serve/http.py. No ``from __future__ import annotations``: FastAPI must see each route's real types.
"""

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from serve.body import read_json_or_none
from serve.errors import MALFORMED, NOT_FOUND, GatewayError
from serve.http_shapes import _base, _group, _json, _v3_topic

JSON = "application/json"


def _broker(base: str, cluster: str, b: dict) -> dict:
    url = f"{base}/v3/clusters/{cluster}/brokers/{b['id']}"
    return {
        "kind": "KafkaBroker",
        "metadata": {"self": url},
        "cluster_id": cluster,
        "broker_id": b["id"],
        "host": b.get("host"),
        "port": b.get("port"),
        "rack": b.get("rack"),
        "is_alive": b.get("alive", True),
        "configs": {"related": f"{url}/configs"},
    }


def _configs(url: str, kind: str, ids: dict, entries: list[dict], name: str | None, owner: str) -> Response:
    """A v3 config list (``name`` None: ``<kind>List``) or the one named config of ``owner`` (404 when absent)."""
    if name is None:
        data = [_config(url, kind, ids, e) for e in entries]
        return _json({"kind": f"{kind}List", "metadata": {"self": url}, "data": data}, media=JSON)
    for e in entries:
        if e["name"] == name:
            return _json(_config(url, kind, ids, e), media=JSON)
    raise GatewayError(404, NOT_FOUND, f"{owner} has no config {name!r}")


def _config(base_url: str, kind: str, ids: dict, e: dict) -> dict:
    return {
        "kind": kind,
        "metadata": {"self": f"{base_url}/{e['name']}"},
        **ids,
        "name": e["name"],
        "value": e["value"],
        "is_default": e["source"] == "DEFAULT_CONFIG",
        "is_read_only": bool(e.get("read_only", False)),
        "is_sensitive": False,
        "source": e["source"],
        "synonyms": [{"name": s["name"], "value": s["value"], "source": s["source"]} for s in e.get("synonyms") or []],
    }


def _reassignment(base: str, cluster: str, r: dict) -> dict:
    url = f"{base}/v3/clusters/{cluster}/topics/{r['topic']}/partitions/{r['partition']}"
    return {
        "kind": "KafkaReassignment",
        "metadata": {"self": f"{url}/reassignment"},
        "cluster_id": cluster,
        "topic_name": r["topic"],
        "partition_id": r["partition"],
        "adding_replicas": list(r.get("adding") or []),
        "removing_replicas": list(r.get("removing") or []),
        "replicas": {"related": url},
    }


def admin_mixin(app) -> type:
    """The routes above on ``app``, as methods of a mixin for the ingress class (which provides ``run``,
    ``cluster``, ``admin``, ``_cluster_id``, ``max_request_bytes`` and ``body_timeout_s``)."""

    class AdminRoutes:
        def _brokers(self) -> list[dict]:
            """The cluster's brokers, each with the host and port of its Kafka listener (None without one)."""
            import ray

            from protocol.names import RAY_NAMESPACE, broker_name

            out = []
            for b in sorted(self.admin.describe_cluster()["brokers"], key=lambda b: b["id"]):
                b = dict(b)
                if b.get("alive", True):
                    try:
                        h = ray.get_actor(broker_name(self.cluster, b["id"]), namespace=RAY_NAMESPACE)
                        listener = ray.get(h.incarnation.remote(), timeout=5).get("listener")
                    except (ValueError, ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                        listener = None
                    if listener:
                        b["host"], b["port"] = listener[0], int(listener[1])
                out.append(b)
            return out

        def _one_broker(self, broker_id: int) -> dict:
            for b in self._brokers():
                if b["id"] == broker_id:
                    return b
            raise GatewayError(404, NOT_FOUND, f"broker {broker_id} not found", 8)

        # -- v2 -----------------------------------------------------------------------------------------
        @app.get("/brokers", summary="Broker ids (v2)")
        async def v2_brokers(self) -> Response:
            brokers = await self.run(self._brokers)
            return _json({"brokers": [b["id"] for b in brokers if b.get("alive", True)]})

        @app.get("/topics/{topic}/partitions/{partition}/offsets", summary="A partition's first and end offset (v2)")
        async def v2_partition_offsets(self, topic: str, partition: int) -> Response:
            from rafka.structs import TopicPartition

            def run():
                (d,) = self.admin.describe_topics([topic])
                if partition not in {p["partition"] for p in d["partitions"]}:
                    raise GatewayError(404, 40402, f"partition {partition} does not exist in topic {topic!r}", 3)
                tp = TopicPartition(topic, partition)
                start = self.admin.list_offsets({tp: "earliest"})[tp].offset
                end = self.admin.list_offsets({tp: "latest"})[tp].offset
                return {"beginning_offset": start, "end_offset": end}

            return _json(await self.run(run))

        # -- v3 brokers ---------------------------------------------------------------------------------
        @app.get("/v3/clusters/{cluster_id}/brokers", summary="Brokers (v3)")
        async def v3_brokers(self, cluster_id: str, request: Request) -> Response:
            self._cluster_id(cluster_id)
            base = _base(request)
            data = [_broker(base, self.cluster, b) for b in await self.run(self._brokers)]
            return _json(
                {
                    "kind": "KafkaBrokerList",
                    "metadata": {"self": f"{base}/v3/clusters/{self.cluster}/brokers"},
                    "data": data,
                },
                media=JSON,
            )

        @app.get("/v3/clusters/{cluster_id}/brokers/{broker_id}", summary="One broker (v3)")
        async def v3_broker(self, cluster_id: str, broker_id: int, request: Request) -> Response:
            self._cluster_id(cluster_id)
            return _json(_broker(_base(request), self.cluster, await self.run(self._one_broker, broker_id)), media=JSON)

        def _broker_configs(self, broker_id: int) -> list[dict]:
            self._one_broker(broker_id)
            return self.admin.describe_broker_configs(broker_id)[broker_id]

        @app.get("/v3/clusters/{cluster_id}/brokers/{broker_id}/configs", summary="A broker's configs (v3)")
        async def v3_broker_configs(self, cluster_id: str, broker_id: int, request: Request) -> Response:
            return await self._v3_broker_configs(cluster_id, broker_id, None, request)

        @app.get("/v3/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}", summary="One broker config (v3)")
        async def v3_broker_config(self, cluster_id: str, broker_id: int, name: str, request: Request) -> Response:
            return await self._v3_broker_configs(cluster_id, broker_id, name, request)

        async def _v3_broker_configs(self, cluster_id: str, broker_id: int, name: str | None, request) -> Response:
            self._cluster_id(cluster_id)
            url = f"{_base(request)}/v3/clusters/{self.cluster}/brokers/{broker_id}/configs"
            ids = {"cluster_id": self.cluster, "broker_id": broker_id}
            entries = await self.run(self._broker_configs, broker_id)
            return _configs(url, "KafkaBrokerConfig", ids, entries, name, f"broker {broker_id}")

        # -- v3 topics: create, delete, configs ---------------------------------------------------------
        @app.post("/v3/clusters/{cluster_id}/topics", summary="Create a topic (v3)", status_code=201)
        async def v3_create_topic(self, cluster_id: str, request: Request) -> Response:
            from rafka.admin.admin import NewTopic

            self._cluster_id(cluster_id)
            body = await read_json_or_none(request, self.max_request_bytes, self.body_timeout_s)
            if not isinstance(body, dict) or not isinstance(body.get("topic_name"), str):
                raise GatewayError(
                    422,
                    MALFORMED,
                    'a JSON object with "topic_name" (and optionally partitions_count, replication_factor, configs)',
                )
            configs = body.get("configs") or []
            if not isinstance(configs, list) or not all(isinstance(c, dict) and "name" in c for c in configs):
                raise GatewayError(422, MALFORMED, '"configs" is a list of {"name": ..., "value": ...}')
            name = body["topic_name"]

            def run() -> dict:
                self.admin.create_topics(
                    [
                        NewTopic(
                            name,
                            int(body.get("partitions_count", -1)),
                            int(body.get("replication_factor", -1)),
                            {c["name"]: c.get("value") for c in configs},
                        )
                    ]
                )
                (d,) = self.admin.describe_topics([name])
                return d

            d = await self.run(run)
            return _json(_v3_topic(_base(request), self.cluster, d), status=201, media=JSON)

        @app.delete("/v3/clusters/{cluster_id}/topics/{topic}", summary="Delete a topic (v3)", status_code=204)
        async def v3_delete_topic(self, cluster_id: str, topic: str) -> Response:
            self._cluster_id(cluster_id)

            def run() -> None:
                self.admin.describe_topics([topic])  # an unknown topic: 404
                self.admin.delete_topics([topic])

            await self.run(run)
            return Response(status_code=204)

        @app.get("/v3/clusters/{cluster_id}/topics/{topic}/configs", summary="A topic's configs (v3)")
        async def v3_topic_configs(self, cluster_id: str, topic: str, request: Request) -> Response:
            return await self._v3_topic_configs(cluster_id, topic, None, request)

        @app.get("/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}", summary="One topic config (v3)")
        async def v3_topic_config(self, cluster_id: str, topic: str, name: str, request: Request) -> Response:
            return await self._v3_topic_configs(cluster_id, topic, name, request)

        async def _v3_topic_configs(self, cluster_id: str, topic: str, name: str | None, request) -> Response:
            self._cluster_id(cluster_id)
            url = f"{_base(request)}/v3/clusters/{self.cluster}/topics/{topic}/configs"
            ids = {"cluster_id": self.cluster, "topic_name": topic}
            entries = await self.run(self.admin.describe_config_entries, topic)
            return _configs(url, "KafkaTopicConfig", ids, entries, name, f"topic {topic!r}")

        # -- v3 consumer-group lag summary ----------------------------------------------------------------
        @app.get("/v3/clusters/{cluster_id}/consumer-groups/{group}/lag-summary", summary="Max and total lag (v3)")
        async def v3_lag_summary(self, cluster_id: str, group: str, request: Request) -> Response:
            self._cluster_id(cluster_id)
            d = await self.run(_group, self.admin, group)
            url = f"{_base(request)}/v3/clusters/{self.cluster}/consumer-groups/{group}"
            lags = [o for o in d["offsets"] if o["lag"] is not None]
            top: dict[str, Any] = max(lags, key=lambda o: o["lag"]) if lags else {}
            member = {m["member_id"]: m for m in d["members"]}.get(top.get("member_id")) or {}
            return _json(
                {
                    "kind": "KafkaConsumerGroupLagSummary",
                    "metadata": {"self": f"{url}/lag-summary"},
                    "cluster_id": self.cluster,
                    "consumer_group_id": group,
                    "max_lag_consumer_id": top.get("member_id"),
                    "max_lag_instance_id": member.get("group_instance_id"),
                    "max_lag_client_id": member.get("client_id"),
                    "max_lag_topic_name": top.get("topic"),
                    "max_lag_partition_id": top.get("partition"),
                    "max_lag": top.get("lag", 0),
                    "total_lag": sum(o["lag"] for o in lags),
                    "max_lag_consumer": {"related": f"{url}/lags"},
                    "max_lag_partition": {
                        "related": f"{_base(request)}/v3/clusters/{self.cluster}/topics/{top['topic']}/partitions/{top['partition']}"
                    }
                    if top
                    else None,
                },
                media=JSON,
            )

        # -- v3 reassignments ------------------------------------------------------------------------------
        def _reassignments(self, topic: str | None = None, partition: int | None = None) -> list[dict]:
            if topic is not None:
                self.admin.describe_topics([topic])  # an unknown topic: 404
            return [
                r
                for r in self.admin.list_partition_reassignments()
                if (topic is None or r["topic"] == topic) and (partition is None or r["partition"] == partition)
            ]

        def _reassignment_list(self, request: Request, items: list[dict], path: str) -> Response:
            base = _base(request)
            return _json(
                {
                    "kind": "KafkaReassignmentList",
                    "metadata": {"self": f"{base}/v3/clusters/{self.cluster}/{path}"},
                    "data": [_reassignment(base, self.cluster, r) for r in items],
                },
                media=JSON,
            )

        @app.get("/v3/clusters/{cluster_id}/topics/-/partitions/-/reassignment", summary="All reassignments (v3)")
        async def v3_reassignments(self, cluster_id: str, request: Request) -> Response:
            self._cluster_id(cluster_id)
            items = await self.run(self._reassignments)
            return self._reassignment_list(request, items, "topics/-/partitions/-/reassignment")

        @app.get(
            "/v3/clusters/{cluster_id}/topics/{topic}/partitions/-/reassignment", summary="A topic's reassignments (v3)"
        )
        async def v3_topic_reassignments(self, cluster_id: str, topic: str, request: Request) -> Response:
            self._cluster_id(cluster_id)
            items = await self.run(self._reassignments, topic)
            return self._reassignment_list(request, items, f"topics/{topic}/partitions/-/reassignment")

        @app.get(
            "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/reassignment",
            summary="One partition's reassignment (v3)",
        )
        async def v3_partition_reassignment(
            self, cluster_id: str, topic: str, partition: int, request: Request
        ) -> Response:
            self._cluster_id(cluster_id)
            items = await self.run(self._reassignments, topic, partition)
            if not items:
                raise GatewayError(404, NOT_FOUND, f"no reassignment of {topic}-{partition} is in progress")
            return _json(_reassignment(_base(request), self.cluster, items[0]), media=JSON)

    return AdminRoutes
