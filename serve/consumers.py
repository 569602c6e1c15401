"""Consumer instances of the v2 REST API: state the gateway holds between requests.

A REST consumer instance is a long-lived ``rafka.Consumer`` (a group member with heartbeats, positions,
buffered fetches), so every request for it must reach the same process. The instances live in one Serve
deployment with a single replica (``ConsumerInstances``) that every gateway replica calls through its
handle; gateway replicas themselves stay stateless and can scale. Instances idle for longer than
``consumer.instance.timeout.ms`` (default 300000, as in Confluent's REST Proxy) are closed by a reaper
(closing leaves the group, so its partitions move to the remaining members).

``rafka.Consumer`` is not thread-safe: each instance has a lock, and its blocking calls run on a worker
thread so one instance's long poll never stalls another's request.

First assignment: a subscribed instance joins its group at once, on a worker thread, without waiting for
the client's first GET of records (a JoinGroup into a new group sits through the coordinator's
``group.initial.rebalance.delay.ms``, Kafka's default 3 s). A records GET made while the instance's
membership is still forming (after subscribe, or in a rebalance) waits for the assignment, up to
``REBALANCE_WAIT_MS``, before its own fetch wait (``timeout`` / ``consumer.request.timeout.ms``) starts:
the first GET after subscribe returns records instead of answering empty until the group has formed
(measured on one broker with Kafka's defaults: 3 empty GETs and 3.1-4.7 s before, the first GET after).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from rafka.consumer.consumer import Consumer
from rafka.structs import ConsumerRecord, TopicPartition
from serve.errors import (
    BAD_CONSUMER_CONFIG,
    BAD_RECORD,
    INSTANCE_EXISTS,
    INSTANCE_NOT_FOUND,
    MALFORMED,
    PARTITION_NOT_FOUND,
    TOPIC_NOT_FOUND,
    GatewayError,
    from_exception,
)

DEFAULT_INSTANCE_TIMEOUT_MS = 300000
DEFAULT_REQUEST_TIMEOUT_MS = 1000  # consumer.request.timeout.ms: how long GET records waits
# how long a records GET waits for a forming membership's assignment: Kafka's default initial rebalance
# delay (3 s) extended by members arriving meanwhile, and the rejoin of the group's other members
REBALANCE_WAIT_MS = 15000
JOIN_SLICE_MS = 200  # the background join holds the instance's lock this long at a time
FORMATS = ("binary", "json")
_CONFIG_KEYS = {
    "name",
    "format",
    "auto.offset.reset",
    "auto.commit.enable",
    "fetch.min.bytes",
    "consumer.request.timeout.ms",
    "consumer.instance.timeout.ms",
}


def _bool(v: Any, key: str) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise GatewayError(422, BAD_CONSUMER_CONFIG, f"{key} must be true or false, not {v!r}")


def _int(v: Any, key: str, low: int = 0) -> int:
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise GatewayError(422, BAD_CONSUMER_CONFIG, f"{key} must be an integer, not {v!r}") from None
    if isinstance(v, bool) or n < low:
        raise GatewayError(422, BAD_CONSUMER_CONFIG, f"{key} must be an integer >= {low}, not {v!r}")
    return n


def parse_instance_config(body: dict) -> dict:
    """A create-instance body (Confluent's keys) checked and normalized; unknown keys are an error."""
    if not isinstance(body, dict):
        raise GatewayError(400, MALFORMED, "the body must be a JSON object")
    unknown = sorted(set(body) - _CONFIG_KEYS)
    if unknown:
        raise GatewayError(
            422, BAD_CONSUMER_CONFIG, f"unknown consumer config(s) {unknown}; accepted: {sorted(_CONFIG_KEYS)}"
        )
    name = body.get("name") or f"rest-consumer-{uuid.uuid4().hex[:12]}"
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", name):
        raise GatewayError(422, BAD_CONSUMER_CONFIG, f"name must match [A-Za-z0-9._-]{{1,200}}, not {name!r}")
    fmt = str(body.get("format", "binary")).lower()
    if fmt not in FORMATS:
        raise GatewayError(422, BAD_CONSUMER_CONFIG, f"format must be binary or json, not {body.get('format')!r}")
    reset = str(body.get("auto.offset.reset", "latest")).lower()
    reset = {"smallest": "earliest", "largest": "latest"}.get(reset, reset)
    if reset not in ("earliest", "latest", "none"):
        raise GatewayError(
            422,
            BAD_CONSUMER_CONFIG,
            f"auto.offset.reset must be earliest, latest or none, not {body.get('auto.offset.reset')!r}",
        )
    return {
        "name": name,
        "format": fmt,
        "auto_offset_reset": reset,
        "enable_auto_commit": _bool(body.get("auto.commit.enable", True), "auto.commit.enable"),
        "fetch_min_bytes": _int(body.get("fetch.min.bytes", 1), "fetch.min.bytes"),
        "request_timeout_ms": _int(
            body.get("consumer.request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS), "consumer.request.timeout.ms"
        ),
        "instance_timeout_ms": body.get("consumer.instance.timeout.ms"),
    }


def _tp(d: Any, what: str) -> TopicPartition:
    if not isinstance(d, dict) or not isinstance(d.get("topic"), str) or type(d.get("partition")) is not int:
        raise GatewayError(422, BAD_RECORD, f'each {what} needs "topic" (string) and "partition" (integer)')
    return TopicPartition(d["topic"], d["partition"])


def _offset(d: dict) -> int:
    off = d.get("offset")
    if type(off) is not int or off < 0:
        raise GatewayError(422, BAD_RECORD, f"offset must be a non-negative integer, not {off!r}")
    return off


def _list(body: Any, key: str) -> list:
    if not isinstance(body, dict) or not isinstance(body.get(key), list):
        raise GatewayError(400, MALFORMED, f'the body must be an object with a "{key}" array')
    return body[key]


def encode_record(r: ConsumerRecord, fmt: str) -> dict:
    """One record in the requested embedded format (msgpack keeps raw bytes)."""
    if fmt == "msgpack":
        key, value = r.key, r.value
    elif fmt == "binary":
        key = None if r.key is None else base64.b64encode(r.key).decode()
        value = None if r.value is None else base64.b64encode(r.value).decode()
    else:
        key = None if r.key is None else json.loads(r.key)
        value = None if r.value is None else json.loads(r.value)
    return {"topic": r.topic, "key": key, "value": value, "partition": r.partition, "offset": r.offset}


class Instance:
    """One REST consumer instance: its consumer, settings, lock and last-use time."""

    def __init__(self, group: str, cfg: dict, consumer: Consumer, timeout_ms: int):
        self.group, self.name, self.format = group, cfg["name"], cfg["format"]
        self.request_timeout_ms = cfg["request_timeout_ms"]
        self.consumer = consumer
        self.timeout_ms = timeout_ms
        self.lock = threading.Lock()
        self.last_used = time.monotonic()
        self.closed = False

    def _join_step(self) -> bool:
        """Advance the join for a short slice; True when there is nothing more to do (call with the lock)."""
        return self.closed or self.consumer.ensure_assignment(JOIN_SLICE_MS)

    def idle_for_ms(self) -> float:
        return (time.monotonic() - self.last_used) * 1000

    # -- operations (called with the lock held, on a worker thread) -----------------------------------
    def subscribe(self, body: Any) -> None:
        if not isinstance(body, dict) or not (body.get("topics") or body.get("topic_pattern")):
            raise GatewayError(400, MALFORMED, 'subscribe needs "topics" (a non-empty array) or "topic_pattern"')
        if body.get("topic_pattern"):
            try:
                pattern = re.compile(str(body["topic_pattern"]))
            except re.error as exc:
                raise GatewayError(422, BAD_RECORD, f"topic_pattern is not a valid regex: {exc}") from None
            self.consumer.subscribe(pattern=pattern)
            return
        topics = body["topics"]
        if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
            raise GatewayError(422, BAD_RECORD, '"topics" must be an array of strings')
        self.consumer.subscribe(topics)

    def subscription(self) -> dict:
        return {"topics": sorted(self.consumer.subscription())}

    def unsubscribe(self) -> None:
        self.consumer.unsubscribe()

    def assign(self, body: Any) -> None:
        tps = [_tp(d, "partition") for d in _list(body, "partitions")]
        self._check_exist(tps)
        self.consumer.assign(tps)

    def assignments(self) -> dict:
        return {
            "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(self.consumer.assignment())]
        }

    def records(self, timeout_ms: int | None, max_bytes: int | None, fmt: str) -> list[dict]:
        """Poll once (waiting up to ``timeout``, capped by consumer.request.timeout.ms) and return at most
        ``max_bytes`` of keys+values; records left over (cut by max_bytes, or not convertible to JSON) are
        given back by seeking their partitions, so the next request returns them."""
        wait = self.request_timeout_ms if timeout_ms is None else min(timeout_ms, self.request_timeout_ms)
        # a forming membership: wait for the assignment first (returns at once when there is one)
        self.consumer.ensure_assignment(REBALANCE_WAIT_MS)
        polled = self.consumer.poll(timeout_ms=wait)
        out: list[dict] = []
        size, rewind, error = 0, {}, None
        for tp, recs in polled.items():
            for r in recs:
                if tp in rewind:
                    break
                n = len(r.key or b"") + len(r.value or b"")
                if max_bytes is not None and out and size + n > max_bytes:
                    rewind[tp] = r.offset
                    break
                try:
                    out.append(encode_record(r, fmt))
                except ValueError:
                    rewind[tp] = r.offset
                    error = error or GatewayError(
                        422,
                        BAD_RECORD,
                        f"the record at {tp.topic}-{tp.partition} offset "
                        f"{r.offset} is not JSON: read it in the binary format",
                        87,
                    )
                    break
                size += n
        for tp, off in rewind.items():
            self.consumer.seek(tp, off)
        if error is not None:
            for tp, recs in polled.items():
                if tp not in rewind and recs:
                    self.consumer.seek(tp, recs[0].offset)
            raise error
        return out

    def commit(self, body: Any) -> None:
        """No body: commit every consumed position. With ``{"offsets": [{topic, partition, offset}]}``: the
        offsets name the last records processed (Confluent's convention), so offset + 1 is committed."""
        if body is None:
            self.consumer.commit()
            return
        offsets = {_tp(d, "offset"): _offset(d) + 1 for d in _list(body, "offsets")}
        self.consumer.commit(offsets)

    def committed(self, body: Any) -> dict:
        tps = (
            sorted(self.consumer.assignment())
            if body is None
            else [_tp(d, "partition") for d in _list(body, "partitions")]
        )
        out = []
        for tp in tps:
            c = self.consumer.committed(tp)
            out.append(
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "offset": -1 if c is None else c.offset,
                    "metadata": "" if c is None else c.metadata,
                }
            )
        return {"offsets": out}

    def seek(self, body: Any) -> None:
        pairs = [(_tp(d, "offset"), _offset(d)) for d in _list(body, "offsets")]
        self._check_assigned([tp for tp, _ in pairs])
        for tp, off in pairs:
            self.consumer.seek(tp, off)

    def seek_edge(self, body: Any, end: bool) -> None:
        tps = [_tp(d, "partition") for d in _list(body, "partitions")]
        self._check_assigned(tps)
        (self.consumer.seek_to_end if end else self.consumer.seek_to_beginning)(*tps)

    def _check_exist(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            parts = self.consumer.partitions_for_topic(tp.topic)
            if parts is None:
                raise GatewayError(404, TOPIC_NOT_FOUND, f"topic {tp.topic!r} does not exist", 3)
            if tp.partition not in parts:
                raise GatewayError(
                    404, PARTITION_NOT_FOUND, f"partition {tp.partition} does not exist in topic {tp.topic!r}", 3
                )

    def _check_assigned(self, tps: list[TopicPartition]) -> None:
        self._check_exist(tps)
        missing = [f"{tp.topic}-{tp.partition}" for tp in tps if tp not in self.consumer.assignment()]
        if missing:
            raise GatewayError(409, 40903, f"partition(s) {missing} are not assigned to this consumer instance", -1)


class ConsumerInstances:
    """Every consumer instance of the gateway (one replica). Methods take the group and instance name and
    return plain JSON-able data; failures raise ``GatewayError``."""

    def __init__(self, cluster: str, instance_timeout_ms: int = DEFAULT_INSTANCE_TIMEOUT_MS):
        self.cluster = cluster
        self.instance_timeout_ms = instance_timeout_ms
        self.instances: dict[tuple[str, str], Instance] = {}
        self._pool = ThreadPoolExecutor(64, thread_name_prefix="rest-consumer")
        self._reaper: asyncio.Task | None = None
        self._joins: set[asyncio.Task] = set()

    async def _run(self, fn: Callable, *args) -> Any:
        self._start_reaper()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        except GatewayError:
            raise
        except Exception as exc:  # noqa: BLE001 - Kafka errors and the like become their HTTP status
            raise from_exception(exc) from None

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            expired = [k for k, inst in list(self.instances.items()) if inst.idle_for_ms() > inst.timeout_ms]
            for key in expired:
                inst = self.instances.pop(key, None)
                if inst is not None:
                    await asyncio.get_running_loop().run_in_executor(self._pool, self._close, inst)

    def _join_in_background(self, inst: Instance) -> None:
        """Drive a just-subscribed instance's join on a worker thread until it holds its assignment (or
        ``REBALANCE_WAIT_MS`` passed), in slices, so the client's requests for it interleave."""

        def drive() -> None:
            end = time.monotonic() + REBALANCE_WAIT_MS / 1000.0
            while time.monotonic() < end:
                with inst.lock:
                    try:
                        if inst._join_step():
                            return
                    except Exception:  # noqa: BLE001 - the client's next request meets the error itself
                        return
                time.sleep(0.005)  # let a waiting request take the lock

        task = asyncio.get_running_loop().create_task(self._run(drive))
        self._joins.add(task)
        task.add_done_callback(self._joins.discard)

    @staticmethod
    def _close(inst: Instance) -> None:
        inst.closed = True
        with inst.lock:
            try:
                inst.consumer.close()
            except Exception:  # noqa: BLE001 - an instance that fails to leave cleanly is dropped anyway
                pass

    def _get(self, group: str, name: str) -> Instance:
        inst = self.instances.get((group, name))
        if inst is None:
            raise GatewayError(
                404,
                INSTANCE_NOT_FOUND,
                f"consumer instance {name!r} of group {group!r} not found "
                "(it never existed, was deleted, or expired after consumer.instance.timeout.ms)",
            )
        inst.last_used = time.monotonic()
        return inst

    async def _call(self, group: str, name: str, op: str, *args) -> Any:
        inst = self._get(group, name)

        def run():
            with inst.lock:
                try:
                    return getattr(inst, op)(*args)
                finally:
                    inst.last_used = time.monotonic()

        return await self._run(run)

    # -- the API --------------------------------------------------------------------------------------
    async def create(self, group: str, body: Any, base_url: str) -> dict:
        cfg = parse_instance_config(body)
        key = (group, cfg["name"])
        if key in self.instances:
            raise GatewayError(
                409, INSTANCE_EXISTS, f"consumer instance {cfg['name']!r} already exists in group {group!r}"
            )
        timeout = (
            self.instance_timeout_ms
            if cfg["instance_timeout_ms"] is None
            else _int(cfg["instance_timeout_ms"], "consumer.instance.timeout.ms", 1)
        )

        def make() -> Consumer:
            return Consumer(
                self.cluster,
                group_id=group,
                client_id=cfg["name"],
                auto_offset_reset=cfg["auto_offset_reset"],
                enable_auto_commit=cfg["enable_auto_commit"],
                fetch_min_bytes=cfg["fetch_min_bytes"],
            )

        consumer = await self._run(make)
        if key in self.instances:  # created concurrently while this one was being built
            await self._run(consumer.close)
            raise GatewayError(409, INSTANCE_EXISTS, f"consumer instance {cfg['name']!r} already exists")
        self.instances[key] = Instance(group, cfg, consumer, timeout)
        return {
            "instance_id": cfg["name"],
            "base_uri": f"{base_url.rstrip('/')}/consumers/{group}/instances/{cfg['name']}",
        }

    async def delete(self, group: str, name: str) -> None:
        inst = self._get(group, name)
        self.instances.pop((group, name), None)
        await self._run(self._close, inst)

    async def op(self, group: str, name: str, op: str, *args) -> Any:
        """``op`` is one of ``Instance``'s operations (subscribe, records, commit, seek, ...)."""
        if op.startswith("_") or not callable(getattr(Instance, op, None)) or op == "idle_for_ms":
            raise GatewayError(400, MALFORMED, f"no consumer operation {op!r}")
        result = await self._call(group, name, op, *args)
        if op == "subscribe":
            self._join_in_background(self._get(group, name))
        return result

    async def instance_format(self, group: str, name: str) -> str:
        return self._get(group, name).format

    async def count(self) -> int:
        return len(self.instances)

    def __del__(self) -> None:
        """Serve calls this when the replica shuts down: every instance leaves its group cleanly."""
        for inst in list(self.instances.values()):
            self._close(inst)
        self.instances.clear()
