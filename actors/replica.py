"""One partition replica as a Ray async actor: Kafka's Partition + ReplicaFetcherThread for one partition.

Created by the broker (a fate-sharing child) as
``ReplicaActor.options(name=replica_name(cluster, topic, partition, broker_id), namespace=RAY_NAMESPACE,
num_cpus=0, max_concurrency=1000).remote(cluster, topic, partition, topic_id, broker_id, log_dir,
config_props)``, then driven by ``become_leader(state)`` / ``become_follower(state)`` (LeaderAndIsr).

Leader: ``produce`` appends through the Log (validation, idempotent dedup, offsets), acks=all waits in a
DelayedProduce until the high watermark passes the batch; followers fetch with ``replica_id`` and their
LEO, which advances the HW (min LEO over the ISR); followers that lag more than
``replica.lag.time.max.ms`` leave the ISR and caught-up ones rejoin, through the controller's
``alter_partition``. Consumers read up to the HW, long-polled in a DelayedFetch.

Follower: a background loop truncates by leader epoch (OffsetForLeaderEpoch, KIP-279) after every
leader change, then long-polls the leader's ``fetch`` and appends as follower.

Errors never escape as exceptions: every method answers ``error_code`` / ``error_message``.

Concurrency: all calls run on the actor's one event loop; the Log has exactly one owner (this actor)
and every Log call is synchronous (one append or one read at a time). After each ``await`` the code
re-checks ``self._gen`` (bumped on every role change) before touching the log.

``config_props`` are Kafka topic configs (``LogConfig.from_props``) plus these replica-level keys,
stripped before the Log sees them: ``replica.lag.time.max.ms`` (30000), ``replica.fetch.max.bytes``
(4194304), ``replica.fetch.wait.max.ms`` (500), ``replica.fetch.backoff.ms`` (50),
``log.retention.check.interval.ms`` (300000), ``log.flush.scheduler.interval.ms`` (1000).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time

import ray
from ray.exceptions import RayActorError

from actors.partition import (FOLLOWER, LEADER, NEW, STOPPED, ByteMarks, LeaderState,
                              check_transition, truncation_offset)
from actors.purgatory import DelayedOperationPurgatory
from actors.replica_delayed import (_EPOCH_ERR, _FETCH_ERR, _LIST_ERR, _PRODUCE_ERR, DelayedFetch,
                                    DelayedProduce, _err)
from protocol import errors as E
from protocol.messages import FetchResponse
from protocol.names import RAY_NAMESPACE, controller_name, replica_name
from storage.log import Log, LogConfig

log = logging.getLogger(__name__)

REPLICA_DEFAULTS = {
    "replica.lag.time.max.ms": 30000,
    "replica.fetch.max.bytes": 4 * 1024 * 1024,
    "replica.fetch.wait.max.ms": 500,
    "replica.fetch.backoff.ms": 50,
    "log.retention.check.interval.ms": 300000,
    "log.flush.scheduler.interval.ms": 1000,
    "log.cleaner.backoff.ms": 15000,
}
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3


def split_config(config_props: dict | None) -> tuple[dict, dict]:
    """(replica-level settings with defaults, topic configs for LogConfig)."""
    replica, topic = dict(REPLICA_DEFAULTS), {}
    for k, v in (config_props or {}).items():
        if k in REPLICA_DEFAULTS:
            try:
                replica[k] = int(v)
            except (TypeError, ValueError):
                raise E.InvalidConfigError(f"{k}={v!r} is not an integer") from None
        else:
            topic[k] = v
    return replica, topic


def now_ms() -> int:
    return int(time.time() * 1000)


class _Retry(Exception):
    """A retriable condition inside the follower loop: back off and go around again."""


@ray.remote(concurrency_groups={"liveness": 1})  # ping answers from its own thread and event loop
class ReplicaActor:
    def __init__(self, cluster: str, topic: str, partition: int, topic_id, broker_id: int,
                 log_dir: str, config_props: dict | None = None):
        self.cluster, self.topic, self.partition = cluster, topic, int(partition)
        self.topic_id, self.broker_id, self.log_dir = topic_id, int(broker_id), log_dir
        self.replica_conf, topic_props = split_config(config_props)
        self.config_props = dict(config_props or {})
        self.config = LogConfig.from_props(topic_props)
        self.log = Log(log_dir, self.config, now_ms=now_ms())
        self.role = NEW
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.controller_epoch = -1
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self._gen = 0
        self._leader: LeaderState | None = None
        self._produce_purgatory = DelayedOperationPurgatory("produce")
        self._fetch_purgatory = DelayedOperationPurgatory("fetch")
        self._marks = ByteMarks()
        self._marks.reset(self.log.log_end_offset)
        self._follower_task: asyncio.Task | None = None
        self._alter_task: asyncio.Task | None = None
        self._housekeeping_task: asyncio.Task | None = None
        self._controller = None
        self._last_flush_ms = now_ms()
        self._last_retention_ms = now_ms()
        self._last_clean_ms = now_ms()
        self._cleaned_up_to = -1  # active segment's base offset at the last compaction pass
        self._follower_fetches = 0
        self._stats = {"acks_all_produces": 0, "acks_all_wait_ms": 0.0}
        self._follower_error: str | None = None
        self._stopped: asyncio.Future | None = None  # answers the broker's supervise() long-poll

    # ---- LeaderAndIsr -----------------------------------------------------------------------------
    def _stale(self, state: dict) -> str | None:
        """Why a LeaderAndIsr is stale (None when it must be applied)."""
        epoch = int(state["leader_epoch"])
        if self.role == STOPPED:
            return "replica is stopped"
        if epoch < self.leader_epoch:
            return f"leader epoch {epoch} < current {self.leader_epoch}"
        if epoch == self.leader_epoch and int(state.get("partition_epoch", -1)) <= self.partition_epoch:
            return f"leader epoch {epoch} is not newer than the current one"
        return None

    def _adopt(self, state: dict) -> None:
        self.leader_id = int(state["leader"])
        self.leader_epoch = int(state["leader_epoch"])
        self.partition_epoch = int(state.get("partition_epoch", self.partition_epoch))
        self.controller_epoch = int(state.get("controller_epoch", self.controller_epoch))
        self.isr = tuple(sorted(int(b) for b in state.get("isr", ())))
        self.replicas = tuple(int(b) for b in state.get("replicas", ()))
        if state.get("topic_id") is not None:
            self.topic_id = state["topic_id"]

    async def become_leader(self, state: dict) -> dict:
        stale = self._stale(state)
        if stale:
            return {"error_code": E.StaleControllerEpochError.code if self.role != STOPPED else
                    E.NotLeaderOrFollowerError.code, "error_message": f"ignored LeaderAndIsr: {stale}",
                    "ignored": True}
        check_transition(self.role, LEADER)
        same_epoch = self.role == LEADER and int(state["leader_epoch"]) == self.leader_epoch
        self._adopt(state)
        if same_epoch:  # ISR/assignment update within the epoch: keep follower progress
            self._leader.commit(self.isr, self.partition_epoch, now_ms())
            self._leader.replicas = self.replicas
            self._maybe_increment_hw()
            return {"error_code": 0, "error_message": None}
        self._gen += 1
        self._cancel_follower()
        self._cancel_alter()
        previous = self._leader if self.role == LEADER else None
        self.role = LEADER
        if self.leader_epoch > self.log.latest_epoch:
            # Kafka's maybeAssignEpochStartOffset: followers asking about older epochs learn where
            # they ended even before this leader's first append
            self.log.epoch_cache.assign(self.leader_epoch, self.log.log_end_offset)
        self._leader = LeaderState.start(self.broker_id, self.leader_epoch, self.partition_epoch,
                                         self.isr, self.replicas, self.log.log_end_offset, now_ms(),
                                         previous)
        self._maybe_increment_hw()
        self._fetch_purgatory.check_all()
        self._ensure_housekeeping()
        log.info("%s-%d b%d: leader at epoch %d, isr %s, LEO %d, HW %d", self.topic, self.partition,
                 self.broker_id, self.leader_epoch, self.isr, self.log.log_end_offset,
                 self.log.high_watermark)
        return {"error_code": 0, "error_message": None}

    async def become_follower(self, state: dict) -> dict:
        stale = self._stale(state)
        if stale:
            return {"error_code": E.StaleControllerEpochError.code if self.role != STOPPED else
                    E.NotLeaderOrFollowerError.code, "error_message": f"ignored LeaderAndIsr: {stale}",
                    "ignored": True}
        check_transition(self.role, FOLLOWER)
        new_leader = int(state["leader"])
        same = (self.role == FOLLOWER and int(state["leader_epoch"]) == self.leader_epoch
                and new_leader == self.leader_id)
        self._adopt(state)
        if same:  # partition-epoch-only update: the fetch loop carries on
            return {"error_code": 0, "error_message": None}
        self._gen += 1
        self.role = FOLLOWER
        self._leader = None
        self._cancel_alter()
        self._cancel_follower()
        # waiting produces/fetches on this former leader answer NOT_LEADER_OR_FOLLOWER now
        self._produce_purgatory.check_all()
        self._fetch_purgatory.check_all()
        if new_leader >= 0 and new_leader != self.broker_id:
            self._follower_task = asyncio.ensure_future(
                self._follower_loop(self._gen, new_leader, self.leader_epoch))
        self._ensure_housekeeping()
        log.info("%s-%d b%d: follower of b%d at epoch %d", self.topic, self.partition, self.broker_id,
                 new_leader, self.leader_epoch)
        return {"error_code": 0, "error_message": None}

    async def stop(self, delete: bool = False) -> dict:
        """StopReplica: answer parked requests, stop the loops, close (and with ``delete`` remove) the log."""
        if self.role == STOPPED:
            return {"error_code": 0, "error_message": None}
        check_transition(self.role, STOPPED)
        self.role = STOPPED
        self._gen += 1
        self._cancel_follower()
        self._cancel_alter()
        if self._housekeeping_task is not None:
            self._housekeeping_task.cancel()
        self._produce_purgatory.shutdown()
        self._fetch_purgatory.shutdown()
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result({"reason": "stopped"})
        try:
            if delete:
                self.log.delete()
            else:
                self.log.close()
        except Exception as exc:
            return _err(exc)
        return {"error_code": 0, "error_message": None}

    async def update_config(self, config_props: dict) -> dict:
        try:
            replica_conf, topic_props = split_config(config_props)
            config = LogConfig.from_props(topic_props)
        except Exception as exc:
            return _err(exc)
        self.replica_conf, self.config, self.config_props = replica_conf, config, dict(config_props)
        if hasattr(self.log, "update_config"):
            self.log.update_config(config)
        else:
            self.log.config = config
        self._produce_purgatory.check_all()  # min.insync.replicas may have changed
        return {"error_code": 0, "error_message": None}

    def _cancel_follower(self) -> None:
        if self._follower_task is not None:
            self._follower_task.cancel()
            self._follower_task = None

    def _cancel_alter(self) -> None:
        if self._alter_task is not None:
            self._alter_task.cancel()
            self._alter_task = None

    def _check_leader(self, current_leader_epoch: int) -> E.KafkaError | None:
        if current_leader_epoch is not None and current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                return E.FencedLeaderEpochError(
                    f"request epoch {current_leader_epoch} < leader epoch {self.leader_epoch}")
            if current_leader_epoch > self.leader_epoch:
                return E.UnknownLeaderEpochError(
                    f"request epoch {current_leader_epoch} > leader epoch {self.leader_epoch}")
        if self.role != LEADER:
            return E.NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition} "
                f"(role {self.role}, leader {self.leader_id}, epoch {self.leader_epoch})")
        return None

    # ---- produce ----------------------------------------------------------------------------------
    async def produce(self, batches: bytes, acks: int = -1, timeout_ms: int = 30000,
                      current_leader_epoch: int = -1) -> dict:
        try:
            if acks not in (0, 1, -1):
                raise E.InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), got {acks!r}")
            err = self._check_leader(current_leader_epoch)
            if err is not None:
                raise err
            if not isinstance(batches, (bytes, bytearray, memoryview)) or len(batches) == 0:
                raise E.CorruptMessageError("produce needs one or more record batches as bytes")
            min_isr = self.config.min_insync_replicas
            if acks == -1 and len(self.isr) < min_isr:
                raise E.NotEnoughReplicasError(
                    f"ISR {list(self.isr)} is below min.insync.replicas={min_isr}")
            info = self.log.append_as_leader(batches, self.leader_epoch, now_ms())
            if not info.duplicate:
                self._marks.record(self.log.log_end_offset, info.valid_bytes)
                self._fetch_purgatory.check_and_complete("follower")
                self._maybe_increment_hw()
            response = {"error_code": 0, "error_message": None, "base_offset": info.first_offset,
                        "log_append_time": info.log_append_time,
                        "log_start_offset": self.log.log_start_offset}
            if info.duplicate:
                response["duplicate"] = True
            if acks != -1:
                return response
            op = DelayedProduce(self, timeout_ms, info.last_offset + 1, response)
            t0 = time.perf_counter()
            self._produce_purgatory.try_complete_else_watch(op, ["hw"])
            result = await op.wait()
            self._stats["acks_all_produces"] += 1
            self._stats["acks_all_wait_ms"] += (time.perf_counter() - t0) * 1000
            return result
        except Exception as exc:
            return _err(exc, **_PRODUCE_ERR)

    # ---- fetch ------------------------------------------------------------------------------------
    def _fetchable_end(self, isolation_level: int) -> int:
        return self.log.last_stable_offset if isolation_level == 1 else self.log.high_watermark

    def _read(self, fetch_offset: int, max_bytes: int, replica_id: int, isolation_level: int,
              epoch: int) -> dict:
        """One synchronous read answering a fetch (leader only)."""
        try:
            err = self._check_leader(epoch)
            if err is not None:
                raise err
            lg = self.log
            snap = lg.fetch_offset_snapshot()
            if replica_id >= 0:
                end = None  # followers read up to the LEO
            else:
                end = snap.last_stable_offset if isolation_level == 1 else snap.high_watermark
            if fetch_offset > snap.log_end_offset or fetch_offset < snap.log_start_offset:
                raise E.OffsetOutOfRangeError(
                    f"fetch offset {fetch_offset} outside [{snap.log_start_offset}, {snap.log_end_offset}]")
            if end is not None and fetch_offset >= end:
                records, next_offset = b"", fetch_offset
            else:
                info = lg.read(fetch_offset, max_bytes, max_offset=end, min_one_message=True)
                records, next_offset = info.records, info.next_offset
            follower = replica_id >= 0
            return FetchResponse(
                high_watermark=snap.high_watermark, log_start_offset=snap.log_start_offset,
                last_stable_offset=snap.last_stable_offset,
                records=bytes(records) if not isinstance(records, bytes) else records, next_offset=next_offset,
                log_end_offset=snap.log_end_offset if follower else None,
                leader_epoch=self.leader_epoch if follower else None).to_dict()
        except Exception as exc:
            return _err(exc, **self._fetch_error_extra(exc))

    def _fetch_error_extra(self, exc: Exception) -> dict:
        """The extra fields of a fetch error answer: an OFFSET_OUT_OF_RANGE one carries the log's offsets."""
        extra = dict(_FETCH_ERR)
        if isinstance(exc, E.OffsetOutOfRangeError):
            snap = self.log.fetch_offset_snapshot()
            extra.update(log_start_offset=snap.log_start_offset, high_watermark=snap.high_watermark,
                         log_end_offset=snap.log_end_offset)
        return extra

    async def fetch(self, fetch_offset: int, max_bytes: int = 1048576, max_wait_ms: int = 0,
                    min_bytes: int = 1, replica_id: int = -1, current_leader_epoch: int = -1,
                    isolation_level: int = 0) -> dict:
        try:
            err = self._check_leader(current_leader_epoch)
            if err is not None:
                raise err
            if replica_id >= 0:
                if fetch_offset > self.log.log_end_offset:
                    raise E.OffsetOutOfRangeError(
                        f"follower b{replica_id} fetch offset {fetch_offset} is past the leader's LEO "
                        f"{self.log.log_end_offset}")
                self._on_follower_fetch(replica_id, fetch_offset)
            resp = self._read(fetch_offset, max_bytes, replica_id, isolation_level, current_leader_epoch)
            if resp["error_code"] or max_wait_ms <= 0 or len(resp["records"]) >= max(1, min_bytes):
                return resp
            op = DelayedFetch(self, max_wait_ms, (fetch_offset, max_bytes, replica_id, isolation_level),
                              max(1, min_bytes), current_leader_epoch)
            key = "follower" if replica_id >= 0 else "consumer"
            self._fetch_purgatory.try_complete_else_watch(op, [key])
            return await op.wait()
        except Exception as exc:
            return _err(exc, **self._fetch_error_extra(exc))

    # ---- leader: ISR and HW -----------------------------------------------------------------------
    def _on_follower_fetch(self, replica_id: int, fetch_offset: int) -> None:
        ls = self._leader
        ls.on_follower_fetch(replica_id, fetch_offset, self.log.log_end_offset, now_ms())
        if ls.pending_isr is None and ls.can_join_isr(replica_id, self.log.high_watermark):
            self._submit_isr(tuple(self.isr) + (replica_id,), f"b{replica_id} caught up")
        self._maybe_increment_hw()

    def _maybe_increment_hw(self) -> None:
        if self.role != LEADER:
            return
        old = self.log.high_watermark
        new = self._leader.high_watermark(self.log.log_end_offset, old)
        if new > old:
            self.log.update_high_watermark(new)
            self._produce_purgatory.check_and_complete("hw")
            self._fetch_purgatory.check_and_complete("consumer")

    def _maybe_shrink_isr(self) -> None:
        ls = self._leader
        if self.role != LEADER or ls is None or ls.pending_isr is not None:
            return
        out = ls.out_of_sync_replicas(self.log.log_end_offset, now_ms(),
                                      self.replica_conf["replica.lag.time.max.ms"])
        if out:
            new_isr = tuple(b for b in self.isr if b not in out)
            self._submit_isr(new_isr, f"{out} lagged more than "
                                      f"{self.replica_conf['replica.lag.time.max.ms']} ms")

    def _submit_isr(self, new_isr: tuple, why: str) -> None:
        new_isr = self._leader.propose(new_isr)
        log.info("%s-%d b%d: ISR %s -> %s (%s)", self.topic, self.partition, self.broker_id,
                 list(self.isr), list(new_isr), why)
        self._alter_task = asyncio.ensure_future(self._alter_partition(self._gen, new_isr))

    async def _controller_handle(self):
        if self._controller is None:
            loop = asyncio.get_running_loop()
            self._controller = await loop.run_in_executor(
                None, lambda: ray.get_actor(controller_name(self.cluster), namespace=RAY_NAMESPACE))
        return self._controller

    async def _alter_partition(self, gen: int, new_isr: tuple) -> None:
        """AlterPartition with retries while the controller is being re-elected."""
        backoff = 0.05
        while self._gen == gen and self.role == LEADER:
            try:
                ctrl = await self._controller_handle()
                resp = await ctrl.alter_partition.remote(self.topic, self.partition, self.broker_id,
                                                         self.leader_epoch, list(new_isr),
                                                         self.partition_epoch)
            except (RayActorError, ValueError) as exc:  # dead, restarting or not yet named
                self._controller = None
                log.info("alter_partition: controller unavailable (%s), retrying", type(exc).__name__)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            if self._gen != gen:
                return
            code = resp.get("error_code", 0)
            if code == 0:
                self._apply_isr(resp)
                return
            if E.for_code(code).retriable:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            log.info("%s-%d b%d: alter_partition to %s refused: %s", self.topic, self.partition,
                     self.broker_id, list(new_isr), E.for_code(code).name)
            self._leader.abort()
            if (resp.get("isr") is not None and resp.get("leader_epoch") == self.leader_epoch
                    and resp.get("partition_epoch", -1) > self.partition_epoch):
                self._apply_isr(resp)
            return

    def _apply_isr(self, resp: dict) -> None:
        if int(resp["partition_epoch"]) < self.partition_epoch:
            self._leader.abort()  # a newer LeaderAndIsr already told us more
            return
        self.isr = tuple(sorted(resp["isr"]))
        self.partition_epoch = int(resp["partition_epoch"])
        self._leader.commit(self.isr, self.partition_epoch, now_ms())
        self._alter_task = None
        self._maybe_increment_hw()
        self._produce_purgatory.check_and_complete("hw")

    # ---- follower ---------------------------------------------------------------------------------
    async def _lookup(self, name: str):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: ray.get_actor(name, namespace=RAY_NAMESPACE))

    def _truncate(self, offset: int, why: str) -> None:
        if offset >= self.log.log_end_offset:
            return
        log.info("%s-%d b%d: truncating %d -> %d (%s)", self.topic, self.partition, self.broker_id,
                 self.log.log_end_offset, offset, why)
        self.log.truncate_to(offset)
        self._marks.reset(self.log.log_end_offset)

    async def _truncate_by_epoch(self, leader, gen: int, leader_epoch: int) -> None:
        """OffsetForLeaderEpoch until the log is a prefix of the leader's (KIP-101/279)."""
        for _ in range(1000):
            requested = self.log.latest_epoch
            if requested < 0:
                # no epoch information: everything above our HW is suspect
                self._truncate(self.log.high_watermark, "no leader epochs, truncate to HW")
                return
            resp = await leader.offset_for_leader_epoch.remote(requested, leader_epoch)
            if self._gen != gen:
                raise asyncio.CancelledError()
            if resp["error_code"]:
                raise _Retry(f"offset_for_leader_epoch: {E.for_code(resp['error_code']).name}")
            offset, done = truncation_offset(requested, resp["leader_epoch"], resp["end_offset"],
                                             self.log.end_offset_for_epoch, self.log.log_end_offset,
                                             self.log.high_watermark)
            self._truncate(offset, f"leader epoch {resp['leader_epoch']} ends at {resp['end_offset']}, "
                                   f"our latest epoch {requested}")
            if done:
                return
        raise _Retry("epoch truncation did not converge")

    async def _follower_loop(self, gen: int, leader_id: int, leader_epoch: int) -> None:
        name = replica_name(self.cluster, self.topic, self.partition, leader_id)
        conf = self.replica_conf
        leader = None
        truncated = False
        backoff = conf["replica.fetch.backoff.ms"] / 1000.0
        delay = backoff
        while self._gen == gen:
            try:
                if leader is None:
                    leader = await self._lookup(name)
                if not truncated:
                    await self._truncate_by_epoch(leader, gen, leader_epoch)
                    truncated = True
                resp = await leader.fetch.remote(
                    self.log.log_end_offset, conf["replica.fetch.max.bytes"],
                    conf["replica.fetch.wait.max.ms"], 1, self.broker_id, leader_epoch, 0)
                if self._gen != gen:
                    return
                self._follower_fetches += 1
                code = resp["error_code"]
                if code == 0:
                    self._apply_fetched(resp)
                    delay = backoff
                    continue
                if code == E.OffsetOutOfRangeError.code:
                    self._out_of_range(resp)
                    continue
                raise _Retry(E.for_code(code).name + ": " + str(resp.get("error_message")))
            except asyncio.CancelledError:
                return
            except RayActorError as exc:  # leader died: wait for the next LeaderAndIsr, probing slowly
                leader = None
                self._follower_error = f"leader b{leader_id} unavailable: {type(exc).__name__}"
            except ValueError as exc:  # the leader's replica actor is not created (yet)
                leader = None
                self._follower_error = f"leader b{leader_id} not found: {exc}"
            except E.UnexpectedAppendOffsetError as exc:
                truncated = False
                self._follower_error = str(exc)
            except _Retry as exc:
                self._follower_error = str(exc)
            except Exception as exc:
                log.exception("follower loop of %s-%d b%d", self.topic, self.partition, self.broker_id)
                self._follower_error = f"{type(exc).__name__}: {exc}"
            if self._gen != gen:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _apply_fetched(self, resp: dict) -> None:
        records = resp["records"]
        lg = self.log
        if records:
            info = lg.append_as_follower(records)
            self._marks.record(lg.log_end_offset, info.valid_bytes)
        hw = min(resp["high_watermark"], lg.log_end_offset)
        if hw > lg.high_watermark:
            lg.update_high_watermark(hw)
        leader_start = min(resp.get("log_start_offset", -1), lg.high_watermark)
        if leader_start > lg.log_start_offset:  # retention / DeleteRecords on the leader
            lg.delete_records(leader_start)
        self._follower_error = None

    def _out_of_range(self, resp: dict) -> None:
        lg = self.log
        leader_leo = resp.get("log_end_offset", -1)
        leader_start = resp.get("log_start_offset", -1)
        if 0 <= leader_leo < lg.log_end_offset:
            self._truncate(leader_leo, "fetch offset past the leader's LEO")
        elif leader_start > lg.log_end_offset:
            log.info("%s-%d b%d: leader log starts at %d past our LEO %d: restarting the log there",
                     self.topic, self.partition, self.broker_id, leader_start, lg.log_end_offset)
            lg.truncate_fully_and_start_at(leader_start)
            self._marks.reset(lg.log_end_offset)

    # ---- offsets ----------------------------------------------------------------------------------
    async def list_offsets(self, timestamp: int, current_leader_epoch: int = -1,
                           isolation_level: int = 0) -> dict:
        try:
            err = self._check_leader(current_leader_epoch)
            if err is not None:
                raise err
            lg = self.log
            if timestamp == EARLIEST:
                return {"error_code": 0, "error_message": None, "offset": lg.log_start_offset,
                        "timestamp": -1, "leader_epoch": self._epoch_at_start()}
            if timestamp == LATEST:
                if lg.high_watermark < self._leader.leader_epoch_start_offset:
                    raise E.OffsetNotAvailableError(
                        f"high watermark {lg.high_watermark} has not reached this leader epoch's start "
                        f"offset {self._leader.leader_epoch_start_offset}")
                end = self._fetchable_end(isolation_level)
                return {"error_code": 0, "error_message": None, "offset": end, "timestamp": -1,
                        "leader_epoch": lg.latest_epoch}
            found = lg.fetch_offset_by_timestamp(timestamp)
            if found is None or found[0] >= self._fetchable_end(isolation_level):
                return {"error_code": 0, "error_message": None, "offset": -1, "timestamp": -1,
                        "leader_epoch": -1}
            offset, ts, epoch = found
            return {"error_code": 0, "error_message": None, "offset": offset, "timestamp": ts,
                    "leader_epoch": epoch}
        except Exception as exc:
            return _err(exc, **_LIST_ERR)

    def _epoch_at_start(self) -> int:
        found = self.log.fetch_offset_by_timestamp(EARLIEST)
        return found[2] if found else -1

    async def offset_for_leader_epoch(self, epoch: int, current_leader_epoch: int = -1) -> dict:
        try:
            err = self._check_leader(current_leader_epoch)
            if err is not None:
                raise err
            e, end = self.log.end_offset_for_epoch(epoch)
            return {"error_code": 0, "error_message": None, "leader_epoch": e, "end_offset": end}
        except Exception as exc:
            return _err(exc, **_EPOCH_ERR)

    # ---- housekeeping -----------------------------------------------------------------------------
    def _ensure_housekeeping(self) -> None:
        if self._housekeeping_task is None or self._housekeeping_task.done():
            self._housekeeping_task = asyncio.ensure_future(self._housekeeping())

    async def _housekeeping(self) -> None:
        """ISR expiration (every lag/2, like Kafka's isr-expiration task), flush.ms and retention."""
        while self.role in (LEADER, FOLLOWER):
            conf = self.replica_conf
            interval = max(0.01, min(conf["replica.lag.time.max.ms"] / 2000.0,
                                     conf["log.flush.scheduler.interval.ms"] / 1000.0,
                                     conf["log.retention.check.interval.ms"] / 1000.0,
                                     conf["log.cleaner.backoff.ms"] / 1000.0))
            await asyncio.sleep(interval)
            try:
                if self.role == LEADER:
                    self._maybe_shrink_isr()
                t = now_ms()
                if t - self._last_flush_ms >= conf["log.flush.scheduler.interval.ms"]:
                    self._last_flush_ms = t
                    self.log.maybe_flush(t)  # flush.ms / flush.messages policy of the Log
                if t - self._last_retention_ms >= conf["log.retention.check.interval.ms"]:
                    self._last_retention_ms = t
                    self.log.delete_old_segments(t)
                    self.log.producer_state.remove_expired_producers(t)
                if t - self._last_clean_ms >= conf["log.cleaner.backoff.ms"]:
                    self._last_clean_ms = t
                    self._maybe_compact(t)
            except Exception:
                log.exception("housekeeping of %s-%d b%d", self.topic, self.partition, self.broker_id)

    def _maybe_compact(self, t: int) -> None:
        """The log cleaner for ``cleanup.policy=compact``: a pass whenever a segment rolled since the last
        one (only closed segments are cleaned). A corrupt batch marks nothing: it is logged and retried
        at the next backoff, like Kafka's uncleanable partitions."""
        lg = self.log
        if not lg.config.compact or lg.active_segment.base_offset <= self._cleaned_up_to:
            return
        try:
            stats = lg.compact(t)
        except E.CorruptMessageError:
            log.exception("compaction of %s-%d b%d hit a corrupt batch", self.topic, self.partition,
                          self.broker_id)
            return
        self._cleaned_up_to = lg.active_segment.base_offset
        self._stats["compaction_passes"] = self._stats.get("compaction_passes", 0) + 1
        self._stats["compaction_records_removed"] = (self._stats.get("compaction_records_removed", 0)
                                                     + stats.records_read - stats.records_kept)

    # ---- introspection ----------------------------------------------------------------------------
    async def state(self) -> dict:
        lg = self.log
        st = {"cluster": self.cluster, "topic": self.topic, "partition": self.partition,
              "topic_id": self.topic_id, "broker_id": self.broker_id, "role": self.role,
              "leader": self.leader_id, "leader_epoch": self.leader_epoch,
              "partition_epoch": self.partition_epoch, "controller_epoch": self.controller_epoch,
              "isr": list(self.isr), "replicas": list(self.replicas), "pid": os.getpid()}
        if self.role != STOPPED:
            snap = lg.fetch_offset_snapshot()
            st.update(log_start_offset=snap.log_start_offset, log_end_offset=snap.log_end_offset,
                      high_watermark=snap.high_watermark, latest_epoch=lg.latest_epoch)
        st["stats"] = dict(self._stats)
        st["delayed_produces"] = self._produce_purgatory.delayed()
        st["delayed_fetches"] = self._fetch_purgatory.delayed()
        if self._leader is not None:
            st["pending_isr"] = list(self._leader.pending_isr) if self._leader.pending_isr else None
            st["followers"] = {b: {"log_end_offset": f.log_end_offset,
                                   "last_caught_up_time_ms": f.last_caught_up_time_ms}
                               for b, f in self._leader.followers.items()}
        if self.role == FOLLOWER:
            st["follower_fetches"] = self._follower_fetches
            st["follower_error"] = self._follower_error
        return st

    @ray.method(concurrency_group="liveness")
    async def ping(self) -> int:
        """Liveness probe: this replica's process id. It runs on its own thread, so a long synchronous step
        on the main loop (a compaction pass) is not taken for a frozen process; SIGSTOP stops every thread."""
        return os.getpid()

    async def supervise(self) -> dict:
        """The broker's long-poll: pending while the replica runs (raises at the caller when the process
        dies), answered when it is stopped on purpose."""
        if self.role == STOPPED:
            return {"reason": "stopped"}
        if self._stopped is None:
            self._stopped = asyncio.get_running_loop().create_future()
        return await asyncio.shield(self._stopped)
