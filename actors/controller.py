"""The controller: a thin async actor over ``ControllerLogic`` (actors/metadata.py).

Election. The controller is the named actor ``controller_name(cluster)`` (protocol/names.py); GCS lets
one actor hold a name, so creating it (brokers do, with ``get_if_exists=True``) is the election. Its
constructor claims the next controller epoch by put-if-absent of ``controller_epoch/<N>`` in GCS KV and
loads the image: from KV when KV is at least as new as its local metadata log, else from the log (a
whole-cluster restart: GCS is in memory, the log on disk is the durable copy); either way it starts a
fresh log file (a snapshot), so a replaced controller's open descriptor can only write to the old file.
Before claiming its epoch it locks ``data_dir/controller/.lock`` like a broker's log directory (a
controller of another cluster on the same data directory fails its creation with KAFKA_STORAGE_ERROR).
Brokers judge its liveness (actors/controller_link.py): a dead one (its process SIGKILLed) or one silent
past ``controller.quorum.fetch.timeout.ms`` (frozen) is ``ray.kill``ed by handle, which frees the name at
once, and the brokers elect the next one.

Fencing. Every request it sends to a broker carries the epoch; a broker answering STALE_CONTROLLER_EPOCH
makes it resign (NOT_CONTROLLER). Before each write of its own (the metadata log append, the GCS KV
publish) it checks that ``controller_epoch/<N+1>`` does not exist: a controller that was replaced while
frozen and wakes up resigns instead of writing (one KV existence check, ~0.4 ms, per commit; the
residual window is the time between that check and the write, while the replacement was elected a
session timeout earlier).

Commit path (one at a time, under ``_lock``): handler -> records -> metadata log append + fsync ->
replay -> KV -> effects. Effects are derived from the records, as a KRaft broker derives its work from
a metadata delta: LeaderAndIsr to the replicas of new/changed partitions, StopReplica(delete) to the
replicas of removed topics and to replicas a reassignment dropped, topic configs to the hosting brokers,
the full partition set to a (re)registered broker, UpdateMetadata(version) to every live broker.
Requests to one broker go through its ``BrokerChannel`` (actors/broker_channel.py), never under the lock.

Broker liveness. For every registered broker the controller keeps one pending long-poll call
(``broker.controller_session``): it raises ActorDiedError within ~20 ms of the broker's death (process
or node). Brokers also heartbeat every ``broker.heartbeat.interval.ms``; a broker silent for
``broker.session.timeout.ms`` (hung, not dead) is fenced too. Fencing = FenceBroker + new leaders from
the ISR (unclean election only where enabled) with leader epochs bumped. A broker whose *replica* died
reports it (``replicas_offline``: Kafka's OfflineReplica, actors/replica_state_machine.py) and, once the
replica is recreated, ``replicas_online``.

After a failover the new controller probes the brokers the image says are alive (a broker whose
running incarnation has another broker epoch, or none, is fenced), then sends every live broker its full
partition set and UpdateMetadata with the new epoch, so the brokers fence the old controller.
"""
from __future__ import annotations

import asyncio
import logging
import os
import random
import time

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from protocol.errors import (
    BrokerIdNotRegisteredError,
    KafkaError,
    NotControllerError,
    RequestTimedOutError,
    StaleBrokerEpochError,
    error_response,
)
from protocol.kv import controller_epoch_key
from protocol.names import RAY_NAMESPACE, broker_name

from .broker_channel import BrokerChannel
from .controller_logic import ELECT_PREFERRED, ControllerConfig, ControllerLogic
from .log_dir_lock import LogDirLock
from .metadata_image import MetadataImage
from .metadata_store import ClusterKV, MetadataLog
from .replica_state_machine import offline_replicas, online_replicas

log = logging.getLogger("rafka.controller")

SNAPSHOT_EVERY = 10_000  # records appended before the metadata log is rewritten as a snapshot
DIR_LOCK_TIMEOUT_S = 10.0  # the previous controller's process may still be exiting


def now_ms() -> int:
    return int(time.time() * 1000)


class ControllerActor:
    def __init__(self, cluster: str, data_dir: str, config: dict | None = None, host_broker_id: int = -1):
        self.cluster, self.data_dir, self.host_broker_id = cluster, data_dir, host_broker_id
        self.config = ControllerConfig.from_props(config)
        # the metadata log's directory is locked like a broker's log directory, before the epoch is
        # claimed: a candidate that cannot own it must not depose the controller that does
        self.dir_lock = LogDirLock(os.path.join(data_dir, "controller"))
        self.dir_lock.acquire(DIR_LOCK_TIMEOUT_S)
        self.kv = ClusterKV(cluster)
        self.epoch = self.kv.claim_controller_epoch({"host_broker_id": host_broker_id, "ts": now_ms()})
        self.mlog = MetadataLog(os.path.join(data_dir, "controller", "metadata.log"))
        self.logic = ControllerLogic(self._load(), self.config, random.Random())
        self.channels: dict[int, BrokerChannel] = {}
        self.last_seen: dict[int, float] = {}
        self.leader_acked: dict[tuple[str, int], int] = {}
        self.resigned: str | None = None
        self.stopping = False
        self._lock = asyncio.Lock()
        self._started: asyncio.Future | None = None
        self._ack_cond: asyncio.Condition | None = None
        self._tasks: list[asyncio.Task] = []
        self._sessions: dict[int, asyncio.Future] = {}  # broker id -> its pending broker_session call
        self._handles: dict[int, object] = {}  # broker handles passed in by register_broker
        self._pending_stops: list[asyncio.Future] = []  # StopReplica futures of the last commit
        log.info("controller %s epoch %d (image version %d)", cluster, self.epoch, self.logic.image.version)

    @property
    def image(self) -> MetadataImage:
        return self.logic.image

    def _load(self) -> MetadataImage:
        local = None
        try:
            records = self.mlog.read_all()
            local = MetadataImage.from_records(records) if records else None
        except Exception as e:  # noqa: BLE001 - an unreadable local log loses to KV
            log.error("metadata log unusable (%s); relying on GCS KV", e)
        kv_img = self.kv.load_image()
        if kv_img is not None and (local is None or kv_img.version >= local.version):
            image = kv_img
        else:
            image = local or MetadataImage()
            self.kv.write_all(image)
        self.mlog.rewrite(image.snapshot_records())  # a new file: a replaced controller cannot append to it
        return image

    # ---- startup, resignation ------------------------------------------------------------------
    async def _ensure_started(self) -> None:
        if self.resigned:
            raise NotControllerError(f"controller epoch {self.epoch} resigned: {self.resigned}")
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            self._ack_cond = asyncio.Condition()
            try:
                await self._startup()
                self._started.set_result(True)
            except BaseException as e:
                self._started.set_exception(e)
                raise
        await asyncio.shield(self._started)

    async def _probe(self, broker_id: int, epoch: int):
        try:
            handle = ray.get_actor(broker_name(self.cluster, broker_id), namespace=RAY_NAMESPACE)
            inc = await asyncio.wait_for(handle.incarnation.remote(), 5.0)
            return handle if inc.get("broker_epoch") == epoch else None
        except (ValueError, RayActorError, RayTaskError, asyncio.TimeoutError, GetTimeoutError):
            return None

    async def _startup(self) -> None:
        alive = {b.broker_id: b.broker_epoch for b in self.image.brokers.values() if b.alive}
        handles = await asyncio.gather(*(self._probe(b, e) for b, e in alive.items()))
        async with self._lock:
            for (b, e), h in zip(alive.items(), handles):
                if h is None:  # one broker per commit: each fence sees the previous ones applied
                    await self._commit(self.logic.fence_broker(b, e))
                else:
                    self._open_channel(b, e, h)
            for b, _ch in self.channels.items():
                self._send_full_state(b)
            self._publish_version()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._session_checker()))
        self._tasks.append(loop.create_task(self._rebalancer()))

    def resign(self, why: str) -> None:
        if self.resigned:
            return
        log.warning("controller epoch %d resigns: %s", self.epoch, why)
        self.resigned = why
        self._stop_background()
        self.mlog.close()
        # a resigned controller still holds the name, which would make every broker's election find it
        # again: it leaves, so that the next election creates a controller with a fresh epoch
        asyncio.get_running_loop().call_later(
            0.1, lambda: ray.kill(ray.get_runtime_context().current_actor, no_restart=True))

    def _stop_background(self):
        for t in self._tasks:
            t.cancel()
        for ch in list(self.channels.values()):
            ch.close()
        self.channels.clear()
        for f in self._sessions.values():
            if not f.done():
                f.set_result({"reason": "resigned" if self.resigned else "shutdown", "controller_epoch": self.epoch})

    # ---- commit and effects --------------------------------------------------------------------
    def _check_current(self) -> None:
        """Raise NOT_CONTROLLER (after resigning) when a newer controller claimed the next epoch."""
        if not self.resigned and self.kv.exists(controller_epoch_key(self.epoch + 1)):
            self.resign(f"controller epoch {self.epoch + 1} was claimed")
        if self.stopping and not self.resigned:
            raise NotControllerError(f"controller epoch {self.epoch} shut down")
        if self.resigned:
            raise NotControllerError(f"controller epoch {self.epoch} resigned: {self.resigned}")

    async def _commit(self, records: list[dict]) -> None:
        """Write-ahead to the metadata log, replay, publish to KV, then send the effects. Callers hold
        ``_lock``; the fsync runs off the event loop so heartbeats keep being served meanwhile. Each
        write is preceded by the fencing check."""
        if not records:
            return
        self._check_current()
        await asyncio.to_thread(self.mlog.append, records)
        img = self.image
        before = {}
        for r in records:
            if r["type"] == "PartitionChange":
                key = (r["topic"], r["partition"])
                before.setdefault(key, img.partition(*key).to_dict())
            elif r["type"] == "RemoveTopic":
                before[r["name"]] = img.topics[r["name"]].to_dict()
        for r in records:
            img.replay(r)
        topics = {r.get("topic") or r.get("name") or r.get("resource") for r in records
                  if r["type"] in ("Topic", "Partition", "PartitionChange", "ConfigRecord", "RemoveTopic")}
        brokers = {r["broker_id"] for r in records if r["type"] in ("RegisterBroker", "FenceBroker")}
        self._check_current()
        self.kv.persist(img, topics, brokers, any(r["type"] == "ProducerIds" for r in records))
        if self.mlog.records_since_snapshot > SNAPSHOT_EVERY:
            self.mlog.rewrite(img.snapshot_records())
        self._effects(records, before)

    def _state(self, topic: str, p: int) -> dict:
        t = self.image.topics[topic]
        s = t.partitions[p]
        return {"topic": topic, "partition": p, "topic_id": t.topic_id, "leader": s.leader,
                "leader_epoch": s.leader_epoch, "isr": list(s.isr), "replicas": list(s.replicas),
                "partition_epoch": s.partition_epoch, "controller_epoch": self.epoch,
                "adding": list(s.adding), "removing": list(s.removing), "configs": dict(t.configs)}

    def _effects(self, records: list[dict], before: dict) -> None:
        lai: dict[int, dict[tuple, dict]] = {}
        stop: dict[int, list] = {}
        configs: dict[int, set[str]] = {}
        img = self.image
        for r in records:
            t = r["type"]
            if t == "Partition" and r["topic"] in img.topics:
                for b in r["replicas"]:
                    lai.setdefault(b, {})[(r["topic"], r["partition"])] = None
            elif t == "PartitionChange" and r["topic"] in img.topics:
                old = before[(r["topic"], r["partition"])]
                if (old["leader_epoch"], old["replicas"]) != (r["leader_epoch"], r["replicas"]):
                    for b in r["replicas"]:
                        lai.setdefault(b, {})[(r["topic"], r["partition"])] = None
                for b in old["replicas"]:
                    if b not in r["replicas"]:
                        stop.setdefault(b, []).append([r["topic"], r["partition"]])
            elif t == "RemoveTopic":
                for p, s in before[r["name"]]["partitions"].items():
                    for b in s["replicas"]:
                        stop.setdefault(b, []).append([r["name"], p])
            elif t == "ConfigRecord" and r["resource"] in img.topics:
                for s in img.topics[r["resource"]].partitions.values():
                    for b in s.replicas:
                        configs.setdefault(b, set()).add(r["resource"])
            elif t == "RegisterBroker":
                self._register_channel(r["broker_id"], r["broker_epoch"])
            elif t == "FenceBroker":
                ch = self.channels.pop(r["broker_id"], None)
                if ch is not None:
                    ch.close()
        self._pending_stops = []
        for b, parts in stop.items():
            if b in self.channels:
                self._pending_stops.append(self.channels[b].send("stop_replica", parts, True))
        for b, names in configs.items():
            ch = self.channels.get(b)
            for name in sorted(names):
                if ch is not None and name in img.topics:
                    ch.send("update_topic_config", name, dict(img.topics[name].configs))
        for b, keys in lai.items():
            ch = self.channels.get(b)
            states = [self._state(*k) for k in keys if k[0] in img.topics]
            if ch is not None and states:
                ch.send("leader_and_isr", states)
        self._publish_version()

    def _publish_version(self) -> None:
        for ch in self.channels.values():
            ch.send_version(self.image.version)

    def _send_full_state(self, broker_id: int) -> None:
        states = [self._state(t.name, p) for t, p, _ in self.image.partitions_of_broker(broker_id)]
        self.channels[broker_id].send("leader_and_isr", states, full=True)

    def _open_channel(self, broker_id: int, epoch: int, handle) -> None:
        old = self.channels.pop(broker_id, None)
        if old is not None:
            old.close()
        self.channels[broker_id] = BrokerChannel(self, broker_id, epoch, handle)
        self.last_seen[broker_id] = time.monotonic()

    def _register_channel(self, broker_id: int, epoch: int) -> None:
        handle = self._handles.pop(broker_id, None)
        if handle is None:
            handle = ray.get_actor(broker_name(self.cluster, broker_id), namespace=RAY_NAMESPACE)
        self._open_channel(broker_id, epoch, handle)
        self._send_full_state(broker_id)

    def on_broker_response(self, broker_id: int, method: str, args, res) -> None:
        if method != "leader_and_isr" or not isinstance(res, dict):
            return
        changed = False
        for pr in res.get("partitions") or ():
            if pr.get("error_code") == 0 and pr.get("leader") == broker_id:
                key = (pr["topic"], pr["partition"])
                if pr["leader_epoch"] > self.leader_acked.get(key, -1):
                    self.leader_acked[key] = pr["leader_epoch"]
                    changed = True
        if changed and self._ack_cond is not None:
            asyncio.get_running_loop().create_task(self._notify_acks())

    async def _notify_acks(self):
        async with self._ack_cond:
            self._ack_cond.notify_all()

    def _leaders_ready(self, keys) -> bool:
        for topic, p in keys:
            s = self.image.partition(topic, p)
            if s is None:
                continue
            if s.leader == -1 or self.leader_acked.get((topic, p), -1) < s.leader_epoch:
                return False
        return True

    async def _wait_leaders(self, keys, timeout_ms: int) -> bool:
        """DelayedCreateTopics: every partition's leader replica runs as leader of its current epoch."""
        try:
            async with self._ack_cond:
                await asyncio.wait_for(self._ack_cond.wait_for(lambda: self._leaders_ready(keys)),
                                       max(0, timeout_ms) / 1000)
            return True
        except asyncio.TimeoutError:
            return False

    # ---- broker liveness -----------------------------------------------------------------------
    def schedule_fence(self, broker_id: int, broker_epoch: int) -> None:
        if not self.stopping and not self.resigned:
            asyncio.get_running_loop().create_task(self._fence(broker_id, broker_epoch))

    async def _fence(self, broker_id: int, broker_epoch: int) -> None:
        async with self._lock:
            if self.stopping or self.resigned:
                return
            await self._commit(self.logic.fence_broker(broker_id, broker_epoch))

    async def _session_checker(self):
        period = max(0.05, self.config.heartbeat_interval_ms / 2000)
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(period)
            stalled = time.monotonic() - t0 - period
            if stalled > self.config.heartbeat_interval_ms / 1000:
                # this controller's own loop stalled (a loaded machine): heartbeats may be queued
                # unread, so the silence is ours, not the brokers'; give every session a fresh start
                log.warning("controller loop stalled %.2fs: extending broker sessions", stalled)
                now = time.monotonic()
                for b in self.last_seen:
                    self.last_seen[b] = now
                continue
            deadline = time.monotonic() - self.config.session_timeout_ms / 1000
            for b in sorted(self.image.alive_brokers()):
                if self.last_seen.get(b, time.monotonic()) < deadline:
                    log.warning("broker %s session timed out", b)
                    await self._fence(b, self.image.brokers[b].broker_epoch)

    async def _rebalancer(self):
        while self.config.auto_leader_rebalance:
            await asyncio.sleep(self.config.imbalance_check_interval_s)
            async with self._lock:
                tps = self.logic.imbalanced_partitions()
                if tps:
                    log.info("auto leader rebalance: %s", tps)
                    await self._commit(self.logic.elect_leaders(tps, ELECT_PREFERRED)[0])

    # ---- broker-facing API -----------------------------------------------------------------------
    async def describe_controller(self) -> dict:
        await self._ensure_started()
        return {"cluster": self.cluster, "controller_epoch": self.epoch, "host_broker_id": self.host_broker_id,
                "metadata_version": self.image.version, "node_id": ray.get_runtime_context().get_node_id(),
                "pid": os.getpid()}

    async def register_broker(self, broker_id: int, info: dict, handle=None) -> dict:
        await self._ensure_started()
        async with self._lock:
            try:
                records, resp = self.logic.register_broker(broker_id, dict(info or {}))
            except KafkaError as e:
                code, msg = error_response(e)
                return {"error_code": code, "error_message": msg, "controller_epoch": self.epoch}
            if handle is not None:
                self._handles[broker_id] = handle
            await self._commit(records)
        return {"error_code": 0, "controller_epoch": self.epoch, "broker_epoch": resp["broker_epoch"]}

    async def heartbeat(self, broker_id: int, broker_epoch: int) -> dict:
        await self._ensure_started()
        b = self.image.brokers.get(broker_id)
        if b is None:
            code, msg = error_response(BrokerIdNotRegisteredError(f"Broker {broker_id} is not registered"))
        elif b.broker_epoch != broker_epoch or not b.alive:
            code, msg = error_response(StaleBrokerEpochError(
                f"Broker {broker_id} epoch {broker_epoch} is not the registered {b.broker_epoch} (alive={b.alive})"))
        else:
            self.last_seen[broker_id] = time.monotonic()
            code, msg = 0, None
        return {"error_code": code, "error_message": msg, "controller_epoch": self.epoch}

    async def broker_session(self, broker_id: int) -> dict:
        """The brokers' long-poll on the controller: pending while this controller serves."""
        await self._ensure_started()
        fut = asyncio.get_running_loop().create_future()
        old = self._sessions.get(broker_id)
        if old is not None and not old.done():  # that broker's previous watch (its caller is gone)
            old.set_result({"reason": "replaced", "controller_epoch": self.epoch})
        self._sessions[broker_id] = fut
        return await fut

    async def alter_partition(self, topic, partition, leader_id, leader_epoch, new_isr, partition_epoch) -> dict:
        await self._ensure_started()
        async with self._lock:
            records, resp = self.logic.alter_partition(topic, partition, leader_id, leader_epoch, new_isr,
                                                       partition_epoch)
            await self._commit(records)
        return resp

    async def replicas_offline(self, broker_id: int, broker_epoch: int, partitions: list) -> dict:
        """A live broker's replica actors died (OfflineReplica): move leadership and the ISR away now."""
        return await self._replica_change(offline_replicas, broker_id, broker_epoch, partitions)

    async def replicas_online(self, broker_id: int, broker_epoch: int, partitions: list) -> dict:
        """Those replicas run again (OnlineReplica): partitions they left leaderless elect a leader."""
        return await self._replica_change(online_replicas, broker_id, broker_epoch, partitions)

    async def _replica_change(self, decide, broker_id, broker_epoch, partitions) -> dict:
        """-> ``{error_code, partitions: [{topic, partition, error_code, error_message, state}]}``; ``state``
        is the partition's state after the change, in the shape LeaderAndIsr carries."""
        await self._ensure_started()
        async with self._lock:
            records, results = decide(self.logic, broker_id, broker_epoch, list(partitions or []))
            await self._commit(records)
        for r in results:
            if r["error_code"] == 0 and self.image.partition(r["topic"], r["partition"]) is not None:
                r["state"] = self._state(r["topic"], r["partition"])
        return {"error_code": 0, "error_message": None, "controller_epoch": self.epoch, "partitions": results}

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int | None = None) -> tuple[int, int]:
        await self._ensure_started()
        async with self._lock:
            records, resp = self.logic.allocate_producer_ids(broker_id, broker_epoch)
            await self._commit(records)
        return resp

    # ---- admin API -------------------------------------------------------------------------------
    async def create_topics(self, topics: list[dict], timeout_ms: int = 30000) -> list[dict]:
        await self._ensure_started()
        async with self._lock:
            records, results = self.logic.create_topics(list(topics or []))
            await self._commit(records)
        keys = [(r["topic"], r["partition"]) for r in records if r["type"] == "Partition"]
        if keys and not await self._wait_leaders(keys, timeout_ms):
            late = {t for t, p in keys if not self._leaders_ready([(t, p)])}
            for res in results:
                if res["name"] in late and res["error_code"] == 0:
                    res["error_code"], res["error_message"] = error_response(RequestTimedOutError(
                        "Topic created, but not every partition had a running leader within the timeout"))
        return results

    async def delete_topics(self, names: list[str], timeout_ms: int = 30000) -> list[dict]:
        await self._ensure_started()
        async with self._lock:
            records, results = self.logic.delete_topics(list(names or []))
            await self._commit(records)
            stops = list(self._pending_stops) if records else []
        for name in list(self.leader_acked):
            if name[0] not in self.image.topics:
                self.leader_acked.pop(name, None)
        if stops:
            await asyncio.wait(stops, timeout=max(0, timeout_ms) / 1000)
        return results

    async def create_partitions(self, name: str, total_count: int, assignment=None,
                                timeout_ms: int = 30000) -> dict:
        await self._ensure_started()
        async with self._lock:
            records, res = self.logic.create_partitions(name, total_count, assignment)
            await self._commit(records)
        keys = [(r["topic"], r["partition"]) for r in records]
        if keys and not await self._wait_leaders(keys, timeout_ms):
            res["error_code"], res["error_message"] = error_response(RequestTimedOutError(
                "Partitions created, but not every one had a running leader within the timeout"))
        return res

    async def alter_configs(self, name: str, set: dict | None = None, delete: list | None = None) -> dict:
        await self._ensure_started()
        async with self._lock:
            records, res = self.logic.alter_configs(name, set, delete)
            await self._commit(records)
        return res

    async def describe_configs(self, name: str) -> dict:
        await self._ensure_started()
        t = self.image.topics.get(name)
        if t is None:
            code, msg = error_response(_unknown(name))
            return {"name": name, "error_code": code, "error_message": msg, "configs": {}, "overrides": {}}
        effective = {}
        try:
            from storage.log import LogConfig
            effective = {k: str(v) for k, v in LogConfig.from_props(dict(t.configs)).to_props().items()}
        except ImportError:
            effective = dict(t.configs)
        return {"name": name, "error_code": 0, "error_message": None, "configs": effective,
                "overrides": dict(t.configs)}

    async def describe_topics(self, names: list[str] | None = None) -> list[dict]:
        await self._ensure_started()
        names = sorted(self.image.topics) if names is None else list(names)
        out = []
        for n in names:
            if n in self.image.topics:
                out.append(self.image.describe_topic(n))
            else:
                code, msg = error_response(_unknown(n))
                out.append({"name": n, "topic_id": None, "error_code": code, "error_message": msg,
                            "configs": {}, "partitions": []})
        return out

    async def metadata(self) -> dict:
        await self._ensure_started()
        img = self.image
        return {"cluster": self.cluster, "controller_epoch": self.epoch, "controller_id": self.host_broker_id,
                "version": img.version, "brokers": [b.to_dict() for b in sorted(img.brokers.values(),
                                                                                 key=lambda b: b.broker_id)],
                "topics": [img.describe_topic(n) for n in sorted(img.topics)]}

    async def elect_leaders(self, partitions=None, election_type: int = ELECT_PREFERRED) -> list[dict]:
        await self._ensure_started()
        async with self._lock:
            records, results = self.logic.elect_leaders(
                None if partitions is None else [tuple(p) for p in partitions], election_type)
            await self._commit(records)
        return results

    async def alter_partition_reassignments(self, assignments: list[dict]) -> list[dict]:
        await self._ensure_started()
        async with self._lock:
            records, results = self.logic.alter_partition_reassignments(list(assignments or []))
            await self._commit(records)
        return results

    async def list_partition_reassignments(self) -> list[dict]:
        await self._ensure_started()
        return self.logic.list_partition_reassignments()

    async def shutdown(self) -> dict:
        """Cluster shutdown: stop reacting to broker loss, close the metadata log."""
        self.stopping = True
        async with self._lock:
            self._stop_background()
            self.mlog.close()
            self.dir_lock.release()  # no commit follows (stopping): the next cluster start may take it
        return {"error_code": 0, "controller_epoch": self.epoch}

    def ping(self) -> int:
        return self.epoch

    @ray.method(concurrency_group="liveness")
    async def probe(self) -> dict:
        """The brokers' liveness probe: answers at once (no startup wait), from its own thread, so a busy
        event loop is not taken for a frozen process (SIGSTOP stops every thread)."""
        return {"controller_epoch": self.epoch, "pid": os.getpid(),
                "node_id": ray.get_runtime_context().get_node_id(), "resigned": self.resigned}


def _unknown(name) -> KafkaError:
    from protocol.errors import UnknownTopicOrPartitionError
    return UnknownTopicOrPartitionError(f"Topic {name!r} does not exist.")


RemoteController = ray.remote(concurrency_groups={"liveness": 1})(ControllerActor)
