"""The controller's Ray shell (Kafka's QuorumController as an actor): the RPCs, the commit lock, the
election and fencing checks, and the sends, over the pure decisions of actors/metadata/controller_logic.py.
Created by a broker (actors/server/controller_link.py, the election); called by the brokers, the admin
client and the metrics exporter. Calls actors/metadata/ and the brokers. docs/internals.md ("Controller",
"Liveness") has how election, fencing and the commit path work.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time

import ray

from actors.metadata import controller_events
from actors.metadata import controller_requests as cr
from actors.metadata.broker_heartbeats import BrokerHeartbeats, BrokerSessions, probe_broker, session_checker
from actors.metadata.controller_channel_manager import ControllerChannelManager
from actors.metadata.controller_config import ControllerConfig
from actors.metadata.controller_logic import ELECT_PREFERRED, ControllerLogic
from actors.metadata.image import MetadataImage
from actors.metadata.log_recovery import adopt_newest_log, metadata_log_path
from actors.metadata.partition_balancer import BalancePlan, DowntimeClock, underloaded
from actors.metadata.partition_balancer import plan as balancer_plan
from actors.metadata.replica_state_machine import offline_replicas, online_replicas
from actors.metadata.store import ClusterKV, MetadataLog, load_image
from actors.server import server_log
from actors.server.log_dir_lock import LogDirLock
from actors.server.metrics import ControllerStats
from protocol.control_messages import AlterPartitionRequest, AlterPartitionResponse
from protocol.errors import KafkaError, NotControllerError, RequestTimedOutError, error_response
from protocol.kv import controller_epoch_key
from protocol.names import RAY_NAMESPACE, broker_name

log = logging.getLogger("rafka.controller")

SNAPSHOT_EVERY = 10_000  # records appended before the metadata log is rewritten as a snapshot


class ControllerActor:
    def __init__(self, cluster: str, data_dir: str, config: dict | None = None, host_broker_id: int = -1):
        self.cluster, self.data_dir, self.host_broker_id = cluster, data_dir, host_broker_id
        self.config = ControllerConfig.from_props(config)
        server_log.configure(server_log.controller_log(data_dir), f"Controller id={host_broker_id}")
        # locked before the epoch is claimed: a candidate that cannot own the metadata log must not depose
        # the controller that does; retried for a session timeout (the previous one may still be exiting)
        self.dir_lock = LogDirLock(os.path.join(data_dir, "controller"))
        self.dir_lock.acquire(self.config.session_timeout_ms / 1000)
        self.kv = ClusterKV(cluster)
        self.epoch = self.kv.claim_controller_epoch({"host_broker_id": host_broker_id, "ts": int(time.time() * 1000)})
        self.mlog = MetadataLog(metadata_log_path(data_dir))
        if not self.kv.has_image():  # a whole-cluster restart: the newest of the nodes' metadata logs wins
            adopt_newest_log(cluster, self.mlog, host_broker_id)
        image, unlogged_base, unlogged = load_image(self.kv, self.mlog)
        self.logic = ControllerLogic(image, self.config, random.Random())
        self.channels = ControllerChannelManager(self)
        self.heartbeats = BrokerHeartbeats(self.config.session_timeout_ms / 1000)
        self.leader_acks = cr.LeaderAcks()
        self.resigned: str | None = None
        self.stopping = False
        self.lock = asyncio.Lock()  # one commit at a time
        self.stats = ControllerStats()  # elections and ISR changes, for the exporter (actors/server/metrics.py)
        self._started: asyncio.Future | None = None
        self._ack_cond: asyncio.Condition | None = None
        self._tasks: list[asyncio.Task] = []
        self.sessions = BrokerSessions()
        self._handles: dict[int, object] = {}  # broker handles passed in by register_broker
        self.downtime = DowntimeClock()  # the partition balancer's clocks (since this controller started)
        self.balance_armed = False  # a broker joined below its share: balance until within the tolerance
        self.balancer: dict = {"moves_started": 0, "elections": 0, "unhealable": [], "last_plan": None}
        server_log.set_context(f"Controller id={host_broker_id} epoch={self.epoch}")
        log.info(
            "Becoming the active controller of cluster %s at epoch %d on broker %d (metadata version %d, pid %d)",
            cluster,
            self.epoch,
            host_broker_id,
            self.logic.image.version,
            os.getpid(),
        )
        if unlogged_base is not None and unlogged:
            # the previous controller's last commits reached the metadata log but not its KV write, so it died
            # before logging them (its own host broker's fencing, typically): log them now, marked as such
            log.info("Logging %d metadata records the previous controller committed but did not publish", len(unlogged))
            for level, line in controller_events.describe(unlogged, cr.prior_state(unlogged_base, unlogged)):
                log.log(level, "(committed by the previous controller) %s", line)

    @property
    def image(self) -> MetadataImage:
        return self.logic.image

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

    async def _startup(self) -> None:
        alive = {b.broker_id: b.broker_epoch for b in self.image.brokers.values() if b.alive}
        handles = await asyncio.gather(*(probe_broker(self.cluster, b, e) for b, e in alive.items()))
        async with self.lock:
            for (b, e), h in zip(alive.items(), handles):
                if h is None:  # one broker per commit: each fence sees the previous ones applied
                    await self.commit(self.logic.fence_broker(b, e))
                else:
                    self._open_channel(b, e, h)
            for b in self.channels.broker_ids():
                self.channels.send_full_state(b, cr.full_state(self.image, b, self.epoch))
            self.channels.publish_version(self.image.version)
        loop = asyncio.get_running_loop()
        checker = session_checker(self.heartbeats, self.config.heartbeat_interval_ms, lambda: self.image, self.fence)
        self._tasks += [
            loop.create_task(checker),
            loop.create_task(self._rebalancer()),
            loop.create_task(self._partition_balancer()),
        ]

    async def _rebalancer(self) -> None:
        """Auto leader rebalance: preferred leader election of the imbalanced partitions, periodically."""
        while self.config.auto_leader_rebalance:
            await asyncio.sleep(self.config.imbalance_check_interval_s)
            async with self.lock:
                tps = self.logic.imbalanced_partitions()
                if tps:
                    log.info("auto leader rebalance: %s", tps)
                    await self.commit(self.logic.elect_leaders(tps, ELECT_PREFERRED)[0])

    async def _partition_balancer(self) -> None:
        """The partition balancer (actors/metadata/partition_balancer.py): every replica.balance.check.interval.ms,
        under the commit lock, heal the brokers down past replica.auto.heal.delay.ms and, once a broker joined
        below its share, balance until the brokers are within the tolerance."""
        while True:
            await asyncio.sleep(self.config.balance_check_interval_ms / 1000)
            try:
                async with self.lock:
                    if self.stopping or self.resigned:
                        return
                    p = self._balancer_plan(balance=self.balance_armed)
                    await self._balancer_execute(p)
                    if self.balance_armed and not p.balance_skipped and not (p.moves or p.deferred or p.elections):
                        self.balance_armed = False
                        log.info(
                            "partition balancer: balanced (replicas per broker %s, band %s; preferred leaders %s)",
                            p.replicas_per_broker,
                            p.replica_band,
                            p.leaders_per_broker,
                        )
            except NotControllerError:
                return
            except Exception:  # noqa: BLE001 - a bad round is logged; the next one plans from the image again
                log.exception("partition balancer round failed")

    def _balancer_plan(self, balance: bool) -> BalancePlan:
        """The plan now (callers hold ``lock``); logs the partitions that cannot be healed when they change."""
        down = self.downtime.observe(self.image, int(time.monotonic() * 1000))
        p = balancer_plan(self.image, self.config, down, balance=balance)
        unhealable = [(u["topic"], u["partition"], u["reason"]) for u in p.unhealable]
        if unhealable != [(u["topic"], u["partition"], u["reason"]) for u in self.balancer["unhealable"]]:
            if unhealable:
                log.warning(
                    "partition balancer: %d partition(s) cannot be healed: %s",
                    len(unhealable),
                    "; ".join(f"{t}-{q} ({why})" for t, q, why in unhealable[:20]),
                )
            else:
                log.info("partition balancer: no partition is left that cannot be healed")
        self.balancer["unhealable"] = p.unhealable
        self.balancer["last_plan"] = p.to_dict()
        return p

    async def _balancer_execute(self, p: BalancePlan) -> None:
        """A plan's moves committed through the reassignment logic (KIP-455), then the preferred elections of
        its leader moves and elections (callers hold ``lock``)."""
        if p.moves:
            reqs = [{"topic": m.topic, "partition": m.partition, "replicas": list(m.target)} for m in p.moves]
            records, results = self.logic.alter_partition_reassignments(reqs)
            for m, r in zip(p.moves, results):
                if r["error_code"]:
                    log.warning("partition balancer: %s-%d not moved: %s", m.topic, m.partition, r["error_message"])
                else:
                    log.info(
                        "partition balancer: %s %s-%d %s -> %s", m.reason, m.topic, m.partition, m.replicas, m.target
                    )
            await self.commit(records)
            self.balancer["moves_started"] += sum(1 for r in results if not r["error_code"])
        elect = [(m.topic, m.partition) for m in p.moves if m.reason == "leaders"] + list(p.elections)
        if elect:
            records, _ = self.logic.elect_leaders(elect, ELECT_PREFERRED)
            await self.commit(records)
            self.balancer["elections"] += len(records)

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
            0.1, lambda: ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
        )

    def _stop_background(self):
        for t in self._tasks:
            t.cancel()
        self.channels.close_all()
        self.sessions.end_all("resigned" if self.resigned else "shutdown", self.epoch)

    # ---- commit and effects --------------------------------------------------------------------
    def _check_current(self) -> None:
        """Raise NOT_CONTROLLER (after resigning) when a newer controller claimed the next epoch."""
        if not self.resigned and self.kv.exists(controller_epoch_key(self.epoch + 1)):
            self.resign(f"controller epoch {self.epoch + 1} was claimed")
        if self.stopping and not self.resigned:
            raise NotControllerError(f"controller epoch {self.epoch} shut down")
        if self.resigned:
            raise NotControllerError(f"controller epoch {self.epoch} resigned: {self.resigned}")

    async def commit(self, records: list[dict]) -> list[asyncio.Future]:
        """Write-ahead to the metadata log, replay, publish to KV, then send the effects. Callers hold
        ``lock``; the fsync runs off the event loop so heartbeats keep being served meanwhile. Each
        write is preceded by the fencing check."""
        if not records:
            return []
        self._check_current()
        await asyncio.to_thread(self.mlog.append, records)
        img = self.image
        prior = cr.prior_state(img, records)
        for r in records:
            img.replay(r)
        self.stats.on_commit(prior, img.partition)
        for level, line in controller_events.describe(records, prior):
            log.log(level, line)
        self._check_current()
        self.kv.persist(img, *cr.dirty_keys(records))
        if self.mlog.records_since_snapshot > SNAPSHOT_EVERY:
            self.mlog.rewrite(img.snapshot_records())
        return self._send(cr.derive_requests(img, records, prior, self.epoch))

    def _send(self, batch: cr.BrokerRequestBatch) -> list[asyncio.Future]:
        """One commit's requests, through each broker's channel (a fenced broker's channel closes);
        returns the StopReplica futures."""
        for event, broker_id, broker_epoch in batch.channel_events:
            if event == cr.REGISTER:
                self._register_channel(broker_id, broker_epoch)
            else:
                self.channels.close(broker_id)
        return self.channels.send_batch(batch)

    def _open_channel(self, broker_id: int, epoch: int, handle) -> None:
        self.channels.open(broker_id, epoch, handle)
        self.heartbeats.seen(broker_id, time.monotonic())

    def _register_channel(self, broker_id: int, epoch: int) -> None:
        handle = self._handles.pop(broker_id, None)
        if handle is None:
            handle = ray.get_actor(broker_name(self.cluster, broker_id), namespace=RAY_NAMESPACE)
        self._open_channel(broker_id, epoch, handle)
        self.channels.send_full_state(broker_id, cr.full_state(self.image, broker_id, self.epoch))

    def on_broker_response(self, broker_id: int, method: str, args, res) -> None:
        if method == "leader_and_isr" and self.leader_acks.on_response(broker_id, res) and self._ack_cond:
            asyncio.get_running_loop().create_task(self._notify_acks())

    async def _notify_acks(self):
        cond = self._ack_cond
        assert cond is not None  # scheduled only once started
        async with cond:
            cond.notify_all()

    async def _wait_leaders(self, keys, timeout_ms: int) -> bool:
        """DelayedCreateTopics: every partition's leader replica runs as leader of its current epoch."""
        cond = self._ack_cond
        assert cond is not None  # called after _ensure_started
        try:
            async with cond:
                await asyncio.wait_for(
                    cond.wait_for(lambda: self.leader_acks.ready(self.image, keys)), max(0, timeout_ms) / 1000
                )
            return True
        except asyncio.TimeoutError:
            return False

    async def _write(self, decide, *args):
        """A write request: the handler's records committed under the lock -> (records, response)."""
        await self._ensure_started()
        async with self.lock:
            records, resp = decide(*args)
            await self.commit(records)
        return records, resp

    # ---- broker liveness -----------------------------------------------------------------------
    def schedule_fence(self, broker_id: int, broker_epoch: int) -> None:
        if not self.stopping and not self.resigned:
            asyncio.get_running_loop().create_task(self.fence(broker_id, broker_epoch))

    async def fence(self, broker_id: int, broker_epoch: int) -> None:
        async with self.lock:
            if self.stopping or self.resigned:
                return
            await self.commit(self.logic.fence_broker(broker_id, broker_epoch))

    # ---- broker-facing API -----------------------------------------------------------------------
    async def describe_controller(self) -> dict:
        await self._ensure_started()
        return {
            "cluster": self.cluster,
            "controller_epoch": self.epoch,
            "host_broker_id": self.host_broker_id,
            "metadata_version": self.image.version,
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
        }

    async def register_broker(self, broker_id: int, info: dict, handle=None) -> dict:
        await self._ensure_started()
        async with self.lock:
            try:
                records, resp = self.logic.register_broker(broker_id, dict(info or {}))
            except KafkaError as e:
                code, msg = error_response(e)
                return {"error_code": code, "error_message": msg, "controller_epoch": self.epoch}
            if handle is not None:
                self._handles[broker_id] = handle
            await self.commit(records)
            if self.config.auto_balance and underloaded(self.image, broker_id, self.config.balance_tolerance_pct):
                if not self.balance_armed:
                    log.info("partition balancer: broker %d joined below its share of replicas: balancing", broker_id)
                self.balance_armed = True
        return {"error_code": 0, "controller_epoch": self.epoch, "broker_epoch": resp["broker_epoch"]}

    async def heartbeat(self, broker_id: int, broker_epoch: int) -> dict:
        await self._ensure_started()
        err = self.logic.heartbeat_error(broker_id, broker_epoch)
        if err is None:
            self.heartbeats.seen(broker_id, time.monotonic())
        code, msg = error_response(err) if err is not None else (0, None)
        return {"error_code": code, "error_message": msg, "controller_epoch": self.epoch}

    async def broker_session(self, broker_id: int) -> dict:
        """The brokers' long-poll on the controller: pending while this controller serves."""
        await self._ensure_started()
        return await self.sessions.open(broker_id, self.epoch)

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        """AlterPartition from a leader replica (ISR shrink/expand)."""
        r = request
        args = (r.topic, r.partition, r.leader_id, r.leader_epoch, list(r.new_isr), r.partition_epoch)
        return AlterPartitionResponse.from_dict((await self._write(self.logic.alter_partition, *args))[1])

    async def replicas_offline(self, broker_id: int, broker_epoch: int, partitions: list) -> dict:
        """A live broker's replica actors died (OfflineReplica): move leadership and the ISR away now."""
        return await self._replica_change(offline_replicas, broker_id, broker_epoch, partitions)

    async def replicas_online(self, broker_id: int, broker_epoch: int, partitions: list) -> dict:
        """Those replicas run again (OnlineReplica): partitions they left leaderless elect a leader."""
        return await self._replica_change(online_replicas, broker_id, broker_epoch, partitions)

    async def _replica_change(self, decide, broker_id, broker_epoch, partitions) -> dict:
        """-> ``{error_code, partitions: [{topic, partition, error_code, error_message, state}]}``; ``state``
        is the partition's state after the change, in the shape LeaderAndIsr carries."""
        _, results = await self._write(decide, self.logic, broker_id, broker_epoch, list(partitions or []))
        for r in results:
            if r["error_code"] == 0 and self.image.partition(r["topic"], r["partition"]) is not None:
                r["state"] = cr.partition_state(self.image, r["topic"], r["partition"], self.epoch)
        return {"error_code": 0, "error_message": None, "controller_epoch": self.epoch, "partitions": results}

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int | None = None) -> tuple[int, int]:
        return (await self._write(self.logic.allocate_producer_ids, broker_id, broker_epoch))[1]

    # ---- admin API -------------------------------------------------------------------------------
    async def _validate(self, decide, *args):
        """A write request's answer without committing anything (Kafka's ``validate_only``): the handlers
        are pure, so their records are simply dropped."""
        await self._ensure_started()
        async with self.lock:
            return decide(*args)[1]

    async def create_topics(
        self, topics: list[dict], timeout_ms: int = 30000, validate_only: bool = False
    ) -> list[dict]:
        if validate_only:
            return await self._validate(self.logic.create_topics, list(topics or []))
        records, results = await self._write(self.logic.create_topics, list(topics or []))
        keys = [(r["topic"], r["partition"]) for r in records if r["type"] == "Partition"]
        if keys and not await self._wait_leaders(keys, timeout_ms):
            late = {t for t, p in keys if not self.leader_acks.ready(self.image, [(t, p)])}
            for res in results:
                if res["name"] in late and res["error_code"] == 0:
                    res["error_code"], res["error_message"] = error_response(
                        RequestTimedOutError(
                            "Topic created, but not every partition had a running leader within the timeout"
                        )
                    )
        return results

    async def delete_topics(self, names: list[str], timeout_ms: int = 30000) -> list[dict]:
        await self._ensure_started()
        async with self.lock:
            records, results = self.logic.delete_topics(list(names or []))
            stops = await self.commit(records)
        self.leader_acks.forget_removed(self.image)
        if stops:
            await asyncio.wait(stops, timeout=max(0, timeout_ms) / 1000)
        return results

    async def create_partitions(
        self, name: str, total_count: int, assignment=None, timeout_ms: int = 30000, validate_only: bool = False
    ) -> dict:
        if validate_only:
            return await self._validate(self.logic.create_partitions, name, total_count, assignment)
        records, res = await self._write(self.logic.create_partitions, name, total_count, assignment)
        keys = [(r["topic"], r["partition"]) for r in records]
        if keys and not await self._wait_leaders(keys, timeout_ms):
            res["error_code"], res["error_message"] = error_response(
                RequestTimedOutError("Partitions created, but not every one had a running leader within the timeout")
            )
        return res

    async def alter_configs(
        self,
        name: str,
        set: dict | None = None,
        delete: list | None = None,
        validate_only: bool = False,
        replace: bool = False,
    ) -> dict:
        """Topic config overrides set and deleted; ``replace`` (legacy AlterConfigs): the overrides become
        exactly ``set``, decided and committed under the lock (ControllerLogic.alter_configs)."""
        if validate_only:
            return await self._validate(self.logic.alter_configs, name, set, delete, replace)
        return (await self._write(self.logic.alter_configs, name, set, delete, replace))[1]

    async def describe_configs(self, name: str) -> dict:
        await self._ensure_started()
        return self.logic.describe_configs(name)

    async def describe_topics(self, names: list[str] | None = None) -> list[dict]:
        await self._ensure_started()
        return self.logic.describe_topics(names)

    async def metadata(self) -> dict:
        await self._ensure_started()
        return {
            "cluster": self.cluster,
            "controller_epoch": self.epoch,
            "controller_id": self.host_broker_id,
            **self.logic.cluster_metadata(),
        }

    async def elect_leaders(self, partitions=None, election_type: int = ELECT_PREFERRED) -> list[dict]:
        return (
            await self._write(
                self.logic.elect_leaders, None if partitions is None else [tuple(p) for p in partitions], election_type
            )
        )[1]

    async def alter_partition_reassignments(self, assignments: list[dict]) -> list[dict]:
        return (await self._write(self.logic.alter_partition_reassignments, list(assignments or [])))[1]

    async def list_partition_reassignments(self) -> list[dict]:
        await self._ensure_started()
        return self.logic.list_partition_reassignments()

    async def partition_balancer_plan(self, execute: bool = False) -> dict:
        """``rafka cluster balance``: the balancer's plan now, heal and balance (Cruise Control's proposals);
        ``execute`` commits it and keeps balancing on later rounds until the brokers are within the tolerance."""
        await self._ensure_started()
        async with self.lock:
            p = self._balancer_plan(balance=True)
            if execute:
                await self._balancer_execute(p)
                if p.moves or p.deferred or p.elections:
                    self.balance_armed = True
        return {**p.to_dict(), "executed": bool(execute), "error_code": 0, "error_message": None}

    async def partition_balancer_status(self) -> dict:
        """The balancer's state (Redpanda's balancer-status): its last plan, the partitions it cannot heal,
        the moves it started, whether a join's balancing is still going on, and the reassignments running."""
        await self._ensure_started()
        return {
            "heal_delay_ms": self.config.heal_delay_ms,
            "auto_balance": self.config.auto_balance,
            "balancing": self.balance_armed,
            "moves_started": self.balancer["moves_started"],
            "elections": self.balancer["elections"],
            "unhealable_partitions": list(self.balancer["unhealable"]),
            "last_plan": self.balancer["last_plan"],
            "reassignments": self.logic.list_partition_reassignments(),
        }

    async def shutdown(self) -> dict:
        """Cluster shutdown: stop reacting to broker loss, close the metadata log."""
        self.stopping = True
        async with self.lock:
            self._stop_background()
            self.mlog.close()
            self.dir_lock.release()  # no commit follows (stopping): the next cluster start may take it
        return {"error_code": 0, "controller_epoch": self.epoch}

    def ping(self) -> int:
        return self.epoch

    async def metrics(self) -> dict:
        """The exporter's scrape (actors/metrics_exporter.py): epoch, host broker, elections, ISR changes."""
        return {
            "controller_epoch": self.epoch,
            "host_broker_id": self.host_broker_id,
            "resigned": bool(self.resigned),
            # the partition balancer: partitions with a lost broker's replica it cannot heal, moves started
            "unhealable_partitions": len(self.balancer["unhealable"]),
            "balancer_moves_started": self.balancer["moves_started"],
            "reassigning_partitions": sum(
                1 for t in self.image.topics.values() for s in t.partitions.values() if s.reassigning
            ),
            **self.stats.snapshot(),
        }

    @ray.method(concurrency_group="liveness")
    async def probe(self) -> dict:
        """The brokers' liveness probe: answers at once (no startup wait), from its own thread, so a busy
        event loop is not taken for a frozen process (SIGSTOP stops every thread)."""
        return {
            "controller_epoch": self.epoch,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "resigned": self.resigned,
        }


RemoteController = ray.remote(concurrency_groups={"liveness": 1})(ControllerActor)
