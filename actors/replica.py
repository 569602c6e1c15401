"""One partition replica as a Ray async actor: the shell around a pure :class:`~actors.replication.partition.Partition`.

The replication logic (roles and epochs, the HW rule, ISR shrink/expand decisions, truncation) is the
Partition's (``actors/replication/partition.py``, Kafka's ``kafka.cluster.Partition``); the purgatories and the one
dispatch from a returned ``LeaderHwChange`` to them are the ReplicaManager's (``actors/replication/replica_manager.py``);
the follower loop is the ReplicaFetcher's (``actors/replication/replica_fetcher.py``, Kafka's ReplicaFetcherThread);
AlterPartition calls are the AlterPartitionManager's (``actors/replication/alter_partition.py``). This actor keeps
the RPCs, the timers and the Log's lifecycle, and wires the returned changes to the purgatories.

Created by the broker (a fate-sharing child, unnamed, pinned to its node) ahead of need as a warm pool
actor, ``ReplicaActor.options(num_cpus=0, max_concurrency=1000).remote()`` (actors/server/replica_pool.py), and
bound to a partition when a LeaderAndIsr makes the broker a replica of it: ``bind(cluster, topic,
partition, topic_id, broker_id, log_dir, config_props)`` (what ``__init__(*same arguments)`` does for a
cold one: lock the partition directory, open the log); then driven by ``become_leader(state)`` /
``become_follower(state)`` (LeaderAndIsr). Replicas have no Ray names: the broker that hosts one is the
authority for its handle (``BrokerActor.replica_handle``; ``actors/channels/replica_lookup.py``).

Leader: ``produce`` appends through the Log (validation, idempotent dedup, offsets), acks=all waits in a
DelayedProduce until the high watermark passes the batch; followers fetch with ``replica_id`` and their
LEO, which advances the HW (min LEO over the ISR); followers that lag more than
``replica.lag.time.max.ms`` leave the ISR and caught-up ones rejoin, through the controller's
``alter_partition``. Consumers read up to the HW, long-polled in a DelayedFetch.

Follower: a background loop truncates by leader epoch (OffsetForLeaderEpoch, KIP-279) after every
leader change, then long-polls the leader's ``fetch`` and appends as follower. The follower's fetches
travel on a TCP connection to the leader's replication listener (``replication_endpoint``,
actors/channels/replication_channel.py), not as Ray calls: a Ray call costs ~1.4 ms of CPU here.

The data calls (``produce``, ``fetch``, ``list_offsets``, ``offset_for_leader_epoch``) each take one typed
request of ``protocol.messages`` and answer its response's dict; anything else answers INVALID_REQUEST.
Errors never escape as exceptions: every method answers ``error_code`` / ``error_message``.

Concurrency: all calls run on the actor's one event loop; the Log has exactly one owner (this actor)
and every Log call is synchronous (one append or one read at a time). After each ``await`` the code
re-checks ``partition.generation`` (bumped on every role change) before touching the log.

``config_props`` are Kafka topic configs (``LogConfig.from_props``) plus these replica-level keys,
stripped before the Log sees them: ``replica.lag.time.max.ms`` (30000), ``replica.fetch.max.bytes``
(4194304), ``replica.fetch.wait.max.ms`` (500), ``replica.fetch.backoff.ms`` (50), ``replica.socket.timeout.ms``
(30000),
``log.retention.check.interval.ms`` (300000), ``log.flush.scheduler.interval.ms`` (1000).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

import ray

from actors.channels.client_channel import ClientListener
from actors.channels.replication_channel import replication_server
from actors.replication.alter_partition import AlterPartitionManager
from actors.replication.call_order import CallOrder
from actors.replication.housekeeping import ReplicaHousekeeping
from actors.replication.partition import Partition
from actors.replication.partition_state import STOPPED, LeaderHwChange
from actors.replication.replica_config import split_config
from actors.replication.replica_fetcher import ReplicaFetcher
from actors.replication.replica_manager import (
    DelayedFetch,
    ReplicaManager,
    _err,
    error_answer,
    fetch_answer,
    fetch_error,
)
from actors.replication.replica_status import ReplicaStatus
from actors.replication.replica_writes import ReplicaWrites, now_ms
from actors.replication.txn_verification import TxnVerifier
from actors.server import server_log
from actors.server.log_dir_lock import LogDirLock
from actors.server.metrics import ReplicaStats
from protocol import errors as E
from protocol.control_messages import LeaderAndIsrPartitionState
from protocol.messages import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FetchRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    check_request,
)
from storage.log import Log, LogConfig

log = logging.getLogger(__name__)


BIND_LOCK_TIMEOUT_S = 10.0  # a killed predecessor's process releases the partition directory's lock on exit


class Replica(ReplicaWrites, ReplicaStatus):
    """One partition replica, the object behind a ``ReplicaActor`` process, or one of several in a
    ``ReplicaHost`` process (actors/replica_host.py, ``hosted``)."""

    hosted = False  # True inside a ReplicaHost: the process's log context is the host's, not one partition's

    def __init__(self, *binding):
        """Unbound (a warm pool actor, actors/server/replica_pool.py) when called without arguments; else as
        ``bind(*binding)`` at once."""
        self.bound = False
        self.dir_lock: LogDirLock | None = None
        self._stopped: asyncio.Future | None = None  # answers the broker's supervise() long-poll
        if binding:
            self._bind(*binding)

    async def bind(
        self,
        cluster: str,
        topic: str,
        partition: int,
        topic_id,
        broker_id: int,
        log_dir: str,
        config_props: dict | None = None,
    ) -> dict:
        """Make this (warm, unbound) actor the replica of ``topic``-``partition`` on ``broker_id``: what the
        constructor does for a cold one. Locks ``log_dir/.lock`` first (actors/server/log_dir_lock.py): a second
        live replica of one partition on one broker fails here with KAFKA_STORAGE_ERROR (the guard the
        per-partition actor names gave). Binds once: a bound actor answers INVALID_REQUEST."""
        if self.bound:
            return {"error_code": E.InvalidRequestError.code, "error_message": f"already bound to {self.tp}"}
        lock = LogDirLock(log_dir)
        deadline = time.monotonic() + BIND_LOCK_TIMEOUT_S
        try:
            while not lock.try_acquire():  # a predecessor's process may still be exiting
                if time.monotonic() >= deadline:
                    lock.acquire(0)  # raises KafkaStorageError naming the holder's pid
                await asyncio.sleep(0.05)
            self._bind(cluster, topic, partition, topic_id, broker_id, log_dir, config_props, lock)
        except Exception as exc:  # noqa: BLE001 - answered, the broker kills this actor
            lock.release()
            return _err(exc)
        return {"error_code": 0, "error_message": None, "pid": os.getpid()}

    def _bind(
        self,
        cluster: str,
        topic: str,
        partition: int,
        topic_id,
        broker_id: int,
        log_dir: str,
        config_props: dict | None = None,
        lock: LogDirLock | None = None,
    ) -> None:
        if lock is None:
            lock = LogDirLock(log_dir)
            try:
                lock.acquire(BIND_LOCK_TIMEOUT_S)
            except BaseException:
                lock.release()
                raise
        self.dir_lock = lock
        self.cluster, self.topic, self.broker_id, self.log_dir = cluster, topic, int(broker_id), log_dir
        self.tp = f"{topic}-{int(partition)}"
        self.log_context = f"Partition {self.tp} broker={broker_id}"
        path = server_log.broker_log_of_partition_dir(log_dir, self.broker_id)
        if self.hosted:  # the process is several replicas': this call's task and what it starts carry this one's
            server_log.configure(path, f"ReplicaHost broker={broker_id}")
            server_log.set_task_context(self.log_context)
        else:
            server_log.configure(path, self.log_context)
        self.replica_conf, topic_props = split_config(config_props)
        self.config_props = dict(config_props or {})
        self.config = LogConfig.from_props(topic_props)
        self.log = Log(log_dir, self.config, now_ms=now_ms())
        self.partition = Partition(self.broker_id, self.log, topic, int(partition))
        self.partition.topic_id = topic_id
        self.replica_manager = ReplicaManager(self.partition)
        self.fetcher = ReplicaFetcher(cluster, self.partition)
        self._follower_task: asyncio.Task | None = None
        self._housekeeping_task: asyncio.Task | None = None
        self.alter_partition = AlterPartitionManager(cluster, self.partition, self._isr_applied)
        self.verifier = TxnVerifier(cluster, self.broker_id, topic, int(partition), lambda: self.partition.leader_epoch)
        self.replication = replication_server(f"b{broker_id}")
        self.replication.register(topic, int(partition), self)
        self.clients = ClientListener(
            self.produce, self.fetch, f"{self.tp} b{broker_id}", self.write_txn_markers, self.txn_verified
        )
        # per-connection produce order of the wire listener's and the client listener's connections
        self.call_order = CallOrder()
        self._group_coordinator = None  # this broker's, told of markers on __consumer_offsets partitions
        self._stats = {"acks_all_produces": 0, "acks_all_wait_ms": 0.0, "markers": 0, "markers_wait_ms": 0.0}
        self.metrics_stats = ReplicaStats()  # per request, never per record (actors/server/metrics.py)
        self.housekeeping = ReplicaHousekeeping(self.partition, self._stats, f"{self.tp} b{self.broker_id}", now_ms())
        self.bound = True

    # ---- LeaderAndIsr -----------------------------------------------------------------------------
    def _ignored(self, stale: str) -> dict:
        code = E.StaleControllerEpochError.code if self.partition.role != STOPPED else E.NotLeaderOrFollowerError.code
        return {"error_code": code, "error_message": f"ignored LeaderAndIsr: {stale}", "ignored": True}

    async def become_leader(self, state: LeaderAndIsrPartitionState) -> dict:
        p = self.partition
        stale = p.stale_reason(state)
        if stale:
            return self._ignored(stale)
        new_epoch, change = p.make_leader(state, now_ms())
        if not new_epoch:  # ISR/assignment update within the epoch: follower progress kept
            self.replica_manager.complete_delayed_requests(change)
            return {"error_code": 0, "error_message": None}
        self._cancel_follower()
        self.alter_partition.cancel()
        self.replica_manager.complete_delayed_requests(change)
        self.replica_manager.role_changed(produces=False)
        self._ensure_housekeeping()
        log.info(
            "Leader %s starts at leader epoch %d from offset %d with high watermark %d, ISR %s",
            self.tp,
            p.leader_epoch,
            self.log.log_end_offset,
            self.log.high_watermark,
            list(p.isr),
        )
        return {"error_code": 0, "error_message": None}

    async def become_follower(self, state: LeaderAndIsrPartitionState) -> dict:
        p = self.partition
        stale = p.stale_reason(state)
        if stale:
            return self._ignored(stale)
        if not p.make_follower(state):  # partition-epoch-only update: the fetch loop carries on
            return {"error_code": 0, "error_message": None}
        self.alter_partition.cancel()
        self._cancel_follower()
        # waiting produces/fetches on this former leader answer NOT_LEADER_OR_FOLLOWER now
        self.replica_manager.role_changed()
        if p.leader_id >= 0 and p.leader_id != self.broker_id:
            self._follower_task = asyncio.ensure_future(
                self.fetcher.run(p.generation, p.leader_id, p.leader_epoch, self.replica_conf)
            )
        self._ensure_housekeeping()
        log.info(
            "Follower %s starts at leader epoch %d from offset %d. Current leader is %d",
            self.tp,
            p.leader_epoch,
            self.log.log_end_offset,
            p.leader_id,
        )
        return {"error_code": 0, "error_message": None}

    async def stop(self, delete: bool = False) -> dict:
        """StopReplica: answer parked requests, stop the loops, close (and with ``delete`` remove) the log,
        release the partition directory's lock. An unbound (pool) actor has nothing to stop."""
        if not self.bound:
            return {"error_code": 0, "error_message": None}
        if not self.partition.stop():
            return {"error_code": 0, "error_message": None}
        self._cancel_follower()
        self.alter_partition.cancel()
        self.replication.unregister(self.topic, self.partition.partition, self)
        self.clients.close()
        if self._housekeeping_task is not None:
            self._housekeeping_task.cancel()
        self.housekeeping.cancel()
        self.replica_manager.shutdown()
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result({"reason": "stopped"})
        try:
            if delete:
                self.log.delete()
            else:
                self.log.close()
        except Exception as exc:
            return _err(exc)
        finally:
            if self.dir_lock is not None:
                self.dir_lock.release()
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
        self.replica_manager.produce_purgatory.check_all()  # min.insync.replicas may have changed
        return {"error_code": 0, "error_message": None}

    def _cancel_follower(self) -> None:
        if self._follower_task is not None:
            self._follower_task.cancel()
            self._follower_task = None

    # ---- fetch ------------------------------------------------------------------------------------
    async def fetch(self, req: FetchRequest) -> dict:
        t0 = time.perf_counter()
        answer = await self._fetch(req)
        self.metrics_stats.fetched(getattr(req, "is_follower", False), answer, (time.perf_counter() - t0) * 1000)
        return answer

    async def _fetch(self, req: FetchRequest) -> dict:
        try:
            req = check_request(req, FetchRequest, "fetch")
            resp = self._fetch_now(req)
            if resp["error_code"] or req.max_wait_ms <= 0 or len(resp["records"]) >= max(1, req.min_bytes):
                return resp
            return await self.replica_manager.wait_fetch(DelayedFetch(self.partition, req))
        except Exception as exc:
            return fetch_error(self.partition, exc)

    def _fetch_now(self, req: FetchRequest, track: bool = True) -> dict:
        """The fetch without its wait: the leader check, a follower's fetch state (unless ``track`` is False),
        the read."""
        p = self.partition
        err = p.check_leader(req.current_leader_epoch)
        if err is not None:
            raise err
        if track and req.is_follower:
            change, proposal = p.update_follower_fetch_state(req.replica_id, req.fetch_offset, now_ms())
            if proposal is not None:
                self.alter_partition.submit(proposal)
            self.replica_manager.complete_delayed_requests(change)
        return fetch_answer(p, req)

    def _isr_applied(self, change: LeaderHwChange) -> None:
        """An ISR was adopted from an AlterPartition answer: dispatch the HW change, re-check acks=all."""
        self.replica_manager.complete_delayed_requests(change)
        self.replica_manager.isr_changed()

    # ---- offsets ----------------------------------------------------------------------------------
    async def list_offsets(self, req: ListOffsetsRequest) -> dict:
        try:
            req = check_request(req, ListOffsetsRequest, "list_offsets")
            err = self.partition.check_leader(req.current_leader_epoch)
            if err is not None:
                raise err
            offset, ts, epoch = self.partition.list_offset(req.timestamp, req.isolation_level)
            return ListOffsetsResponse(offset=offset, timestamp=ts, leader_epoch=epoch).to_dict()
        except Exception as exc:
            return error_answer(ListOffsetsResponse, exc)

    async def offset_for_leader_epoch(self, req: OffsetForLeaderEpochRequest) -> dict:
        try:
            req = check_request(req, OffsetForLeaderEpochRequest, "offset_for_leader_epoch")
            err = self.partition.check_leader(req.current_leader_epoch)
            if err is not None:
                raise err
            e, end = self.log.end_offset_for_epoch(req.leader_epoch)
            return OffsetForLeaderEpochResponse(leader_epoch=e, end_offset=end).to_dict()
        except Exception as exc:
            return error_answer(OffsetForLeaderEpochResponse, exc)

    async def delete_records(self, req: DeleteRecordsRequest) -> dict:
        """DeleteRecords on the leader: the new log start offset (Kafka's low watermark) once persisted."""
        try:
            req = check_request(req, DeleteRecordsRequest, "delete_records")
            err = self.partition.check_leader(req.current_leader_epoch)
            if err is not None:
                raise err
            offset = self.log.high_watermark if req.offset == -1 else req.offset
            if offset < 0:
                raise E.OffsetOutOfRangeError(f"DeleteRecords offset {req.offset} of {self.tp} is below -1")
            return DeleteRecordsResponse(low_watermark=self.log.delete_records(offset)).to_dict()
        except Exception as exc:
            return error_answer(DeleteRecordsResponse, exc)

    # ---- housekeeping -----------------------------------------------------------------------------
    def _ensure_housekeeping(self) -> None:
        if self._housekeeping_task is None or self._housekeeping_task.done():
            self._housekeeping_task = asyncio.ensure_future(self._housekeeping())

    async def _housekeeping(self) -> None:
        await self.housekeeping.run(lambda: self.replica_conf, self.alter_partition.submit)

    @ray.method(concurrency_group="liveness")
    async def ping(self) -> int:
        """Liveness probe: this replica's process id. It runs on its own thread, so a long synchronous step
        on the main loop (a compaction pass) is not taken for a frozen process; SIGSTOP stops every thread."""
        return os.getpid()

    async def supervise(self) -> dict:
        """The broker's long-poll: pending while the replica runs (raises at the caller when the process
        dies), answered when it is stopped on purpose."""
        if self.bound and self.partition.role == STOPPED:
            return {"reason": "stopped"}
        if self._stopped is None:
            self._stopped = asyncio.get_running_loop().create_future()
        return await asyncio.shield(self._stopped)


@ray.remote(concurrency_groups={"liveness": 1})  # ping answers from its own thread and event loop
class ReplicaActor(Replica):
    """A replica in a process of its own (``replica.host.max.partitions`` 1; the default hosts them:
    actors/replica_host.py); its Ray worker's title is ``ray::ReplicaActor``, which the broker's supervisor
    checks before it signals a pid."""
