"""One partition replica as a Ray async actor (``ReplicaActor``), or one of a ReplicaHost's (actors/replica_host.py):
the shell around a :class:`~actors.replication.partition.Partition` and the collaborators it holds (the broker's
ReplicaManager, the LeaderWrites write path, the ReplicaFetcher, AlterPartitionManager, housekeeping, listeners).
Called by the broker (bind, LeaderAndIsr, StopReplica), clients, coordinators and followers; it calls
actors/replication/ and actors/channels/. How it works: docs/internals.md, "Partition replica"."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time

import ray

from actors.channels.client_channel import ClientListener
from actors.channels.produce_channel import produce_listener
from actors.channels.replica_lookup import broker_handle_async
from actors.channels.replication_channel import replication_server
from actors.replication.alter_partition import AlterPartitionManager
from actors.replication.housekeeping import ReplicaHousekeeping
from actors.replication.leader_writes import LeaderWrites
from actors.replication.partition import Partition
from actors.replication.partition_state import FOLLOWER, STOPPED, LeaderHwChange
from actors.replication.read_replica import ReadReplicas, broker_racks
from actors.replication.replica_config import split_config
from actors.replication.replica_fetcher import ReplicaFetcher
from actors.replication.replica_manager import (
    DelayedFetch,
    SessionWatch,
    _err,
    error_answer,
    fetch_answer,
    fetch_error,
    replica_manager_of,
)
from actors.server import server_log
from actors.server.log_dir_lock import LogDirLock
from actors.server.metrics import ReplicaStats
from actors.server.replica_selector import REPLICA_SELECTOR_CLASS
from protocol import errors as E
from protocol.clock import now_ms
from protocol.control_messages import LeaderAndIsrPartitionState
from protocol.messages import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FetchRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    ProduceRequest,
    check_request,
)
from protocol.names import broker_name
from protocol.txn_messages import TxnResponse, TxnVerifiedRequest, WriteTxnMarkersRequest
from storage.log import Log, LogConfig
from storage.log_dirs import is_storage_failure

log = logging.getLogger(__name__)


BIND_LOCK_TIMEOUT_S = 10.0  # a killed predecessor's process releases the partition directory's lock on exit
# the modules a broker handle makes Ray import (actors.broker imports the coordinators' actor modules)
PRELOADED_MODULES = ("actors.broker", "actors.group_coordinator", "actors.txn_coordinator")


class Replica:
    """One partition replica, the object behind a ``ReplicaActor`` process, or one of several in a
    ``ReplicaHost`` process (actors/replica_host.py, ``hosted``)."""

    hosted = False  # True inside a ReplicaHost: the process's log context is the host's, not one partition's

    def __init__(self, *binding):
        """Unbound (a warm pool actor, actors/server/replica_pool.py) when called without arguments; else as
        ``bind(*binding)`` at once."""
        self.bound = False
        self.dir_lock: LogDirLock | None = None
        self._stopped: asyncio.Future | None = None  # answers the broker's supervise() long-poll
        self.dir_failure: dict | None = None  # set when the log's directory failed (``_log_dir_failed``)
        self._loop: asyncio.AbstractEventLoop | None = None
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
            self._loop = asyncio.get_running_loop()
            self._bind(cluster, topic, partition, topic_id, broker_id, log_dir, config_props, lock)
        except Exception as exc:  # noqa: BLE001 - answered, the broker kills this actor
            lock.release()
            # the log could not be opened for the disk's sake: the broker takes its log dir offline
            return {**_err(exc), "log_dir_failure": is_storage_failure(exc)}
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
        self.log.on_dir_failure = self._log_dir_failed  # an I/O error: the broker takes the whole log dir offline
        self.partition = Partition(self.broker_id, self.log, topic, int(partition))
        self.partition.topic_id = topic_id
        self.replica_manager = replica_manager_of(self.broker_id)  # the broker's, shared by this process's replicas
        self.replica_manager.add_partition(self.partition)
        self.fetcher = ReplicaFetcher(cluster, self.partition)
        self.read_replicas = ReadReplicas(self.partition, broker_racks(cluster, self.broker_id))  # KIP-392
        self._follower_task: asyncio.Task | None = None
        self._housekeeping_task: asyncio.Task | None = None
        self.alter_partition = AlterPartitionManager(cluster, self.partition, self._isr_applied)
        self._stats = {"acks_all_produces": 0, "acks_all_wait_ms": 0.0, "markers": 0, "markers_wait_ms": 0.0}
        self.metrics_stats = ReplicaStats()  # per request, never per record (actors/server/metrics.py)
        self.writes = LeaderWrites(cluster, self.partition, self.replica_manager, self.metrics_stats, self._stats)
        self.replication = replication_server(f"b{broker_id}")
        self.replication.register(topic, int(partition), self)
        w = self.writes
        self.clients = ClientListener(
            w.produce, self.fetch, f"{self.tp} b{broker_id}", w.write_txn_markers, w.txn_verified
        )
        self.housekeeping = ReplicaHousekeeping(self.partition, self._stats, f"{self.tp} b{self.broker_id}", now_ms())
        self.bound = True

    def _log_dir_failed(self, log_dir: str, err: E.KafkaStorageError) -> None:
        """The log went offline on an I/O error (storage/log.py ``Log.fail``): the broker's supervise() long-poll
        is answered with it, and the broker stops every replica of that log dir and tells the controller
        (actors/server/log_dirs.py). Until then this replica answers KAFKA_STORAGE_ERROR."""
        if self.dir_failure is not None:
            return
        self.dir_failure = {"reason": "log_dir_failure", "log_dir": log_dir, "error_message": err.message}

        def answer() -> None:
            if self._stopped is not None and not self._stopped.done():
                self._stopped.set_result(self.dir_failure)

        try:
            asyncio.get_running_loop()
            answer()
        except RuntimeError:  # a compaction thread: the answer is the event loop's to give
            if self._loop is not None:
                self._loop.call_soon_threadsafe(answer)

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
            self.replica_manager.complete_delayed_requests(p, change)
            return {"error_code": 0, "error_message": None}
        self._cancel_follower()
        self.alter_partition.cancel()
        self.replica_manager.complete_delayed_requests(p, change)
        self.replica_manager.role_changed(p, produces=False)
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
        self.replica_manager.role_changed(p)
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

    async def stop(self, delete: bool = False, abandon: bool = False) -> dict:
        """StopReplica: answer parked requests, stop the loops, close (and with ``delete`` remove) the log,
        release the partition directory's lock. ``abandon``: the log dir failed, its files are closed without
        writing anything (no flush, no clean-shutdown marker). An unbound (pool) actor has nothing to stop."""
        if not self.bound:
            return {"error_code": 0, "error_message": None}
        if abandon:
            self.log.abandon()
        if not self.partition.stop():
            return {"error_code": 0, "error_message": None}
        self._cancel_follower()
        self.alter_partition.cancel()
        self.replication.unregister(self.topic, self.partition.partition, self)
        self.clients.close()
        if self._housekeeping_task is not None:
            self._housekeeping_task.cancel()
        self.housekeeping.cancel()
        self.replica_manager.stop_partition(self.partition)
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
        self.replica_manager.recheck_produces(self.partition)  # min.insync.replicas may have changed
        return {"error_code": 0, "error_message": None}

    def _cancel_follower(self) -> None:
        if self._follower_task is not None:
            self._follower_task.cancel()
            self._follower_task = None

    # ---- fetch ------------------------------------------------------------------------------------
    async def fetch(self, req: FetchRequest) -> dict:
        t0 = time.perf_counter()
        answer = await self._fetch(req)
        self.read_replicas.served(req, answer)
        self.metrics_stats.fetched(getattr(req, "is_follower", False), answer, (time.perf_counter() - t0) * 1000)
        return answer

    async def _fetch(self, req: FetchRequest) -> dict:
        try:
            req = check_request(req, FetchRequest, "fetch")
            moved = await self.read_replicas.redirect(req, self.replica_conf.get(REPLICA_SELECTOR_CLASS))
            if moved is not None:  # KIP-392: the broker's replica selector names another replica
                return moved
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
        err = p.check_leader(req.current_leader_epoch, req.fetch_only_leader)
        if err is not None:
            raise err
        if track and req.is_follower:
            change, proposal = p.update_follower_fetch_state(req.replica_id, req.fetch_offset, now_ms())
            if proposal is not None:
                self.alter_partition.submit(proposal)
            self.replica_manager.complete_delayed_requests(p, change)
        return fetch_answer(p, req)

    def _isr_applied(self, change: LeaderHwChange) -> None:
        """An ISR was adopted from an AlterPartition answer: dispatch the HW change, re-check acks=all."""
        self.replica_manager.complete_delayed_requests(self.partition, change)
        self.replica_manager.recheck_produces(self.partition)

    # ---- the write path (LeaderWrites) --------------------------------------------------------------
    async def produce(self, req: ProduceRequest) -> dict:
        return await self.writes.produce(req)

    async def write_txn_markers(self, req: WriteTxnMarkersRequest) -> dict:
        """WriteTxnMarkers from the transaction coordinator: the COMMIT/ABORT marker, acks=all."""
        return await self.writes.write_txn_markers(req)

    async def txn_verified(self, req: TxnVerifiedRequest) -> dict:
        """The transaction coordinator's KIP-890 push (actors/replication/txn_verification.py)."""
        return await self.writes.txn_verified(req)

    async def describe_producers(self) -> dict:
        """DescribeProducers: the producers of this partition (leader only)."""
        err = self.partition.check_leader(-1)
        if err is not None:
            return {**TxnResponse(*E.error_response(err)).to_dict(), "producers": []}
        return {"error_code": 0, "error_message": None, "producers": self.partition.describe_producers()}

    # ---- endpoints: where followers and clients connect ---------------------------------------------
    async def replication_endpoint(self) -> dict:
        """Where this replica's followers fetch (actors/channels/replication_channel.py): host, port and the token a
        connection presents, those of this process's replication server (every replica of a ReplicaHost gives
        the same); the server starts on the first call, on this Ray node's IP."""
        try:
            if not self.bound or self.partition.role == STOPPED:
                raise E.NotLeaderOrFollowerError(f"replica {getattr(self, 'tp', '?')} is not serving")
            ep = await self.replication.start(ray.util.get_node_ip_address())
        except Exception as exc:  # noqa: BLE001 - answered, the follower backs off and asks again
            return _err(exc)
        return {"error_code": 0, "error_message": None, **ep}

    # ---- the replication server's side (actors/channels/replication_channel.py ServedPartition) ----
    def replica_ids(self):
        return self.partition.replicas

    def fetch_now(self, req: FetchRequest, track: bool = True) -> dict:
        """A follower session's fetch of this partition, without the wait (the server waits for the session).
        ``track=False``: the read again after the session's wait, which moves no follower state (the request's
        fetch offset was taken when it arrived, as Kafka records a follower's fetch at the request's time)."""
        t0 = time.perf_counter()
        try:
            answer = self._fetch_now(req, track)
        except Exception as exc:  # noqa: BLE001 - answered as the fetch's error
            answer = fetch_error(self.partition, exc)
        self.metrics_stats.fetched(True, answer, (time.perf_counter() - t0) * 1000)
        return answer

    def park(self, req: FetchRequest, wake: asyncio.Future | None = None) -> SessionWatch:
        """The follower session's wait on this partition: done, and ``wake`` resolved, when data comes past
        ``req``'s offset."""
        return self.replica_manager.watch_fetch(SessionWatch(self.partition, req, wake))

    async def client_endpoint(self) -> dict:
        return await self._endpoint(False)

    async def internal_endpoint(self) -> dict:
        """``client_endpoint`` with the internal token, for the brokers' coordinators: their connections may
        also append as a coordinator and write transaction markers (actors/txn/markers.py)."""
        return await self._endpoint(True)

    async def produce_endpoint(self) -> dict:
        """This process's produce listener (actors/channels/produce_channel.py: the producer's one request per leader
        process per round), asked of any replica in it."""
        return await self._endpoint(False, produce_listener(self.replication))

    async def _endpoint(self, internal: bool, listener=None) -> dict:
        """Where clients produce and fetch over TCP (actors/channels/client_channel.py): host, port and the token a
        connection presents; the listener starts on the first call, on this Ray node's IP. Any replica
        answers (a follower refuses produce and leader-only fetches there as it does over Ray)."""
        listener = listener or self.clients
        try:
            if not self.bound or self.partition.role == STOPPED:
                raise E.NotLeaderOrFollowerError(f"replica {getattr(self, 'tp', '?')} is not serving")
            await listener.start(ray.util.get_node_ip_address())
        except Exception as exc:  # noqa: BLE001 - answered, the client looks the leader up again
            return _err(exc)
        return {"error_code": 0, "error_message": None, **listener.endpoint(*((internal,) if internal else ()))}

    # ---- introspection ----------------------------------------------------------------------------
    async def state(self) -> dict:
        lg, p = self.log, self.partition
        st = {
            "cluster": self.cluster,
            "topic": self.topic,
            "partition": p.partition,
            "topic_id": p.topic_id,
            "broker_id": self.broker_id,
            "role": p.role,
            "leader": p.leader_id,
            "leader_epoch": p.leader_epoch,
            "partition_epoch": p.partition_epoch,
            "controller_epoch": p.controller_epoch,
            "isr": list(p.isr),
            "replicas": list(p.replicas),
            "pid": os.getpid(),
        }
        if p.role != STOPPED:
            snap = lg.fetch_offset_snapshot()
            st.update(
                log_start_offset=snap.log_start_offset,
                log_end_offset=snap.log_end_offset,
                high_watermark=snap.high_watermark,
                latest_epoch=lg.latest_epoch,
                size_bytes=lg.size_in_bytes,
                segments=len(lg.segments),
            )
        st["stats"] = dict(self._stats)
        st["read_replica"] = self.read_replicas.describe()  # KIP-392: redirects as leader, reads served as follower
        st["replication_listener"] = dict(self.replication.stats, port=self.replication.port)
        st["client_listener"] = self.clients.describe()
        st["produce_listener"] = produce_listener(self.replication).describe()  # the process's, shared
        st["call_order"] = self.writes.call_order.describe()  # ordered produce channels: waits, gaps skipped, late
        st["delayed_produces"], st["delayed_fetches"] = self.replica_manager.delayed(p)
        # KIP-890 verification: calls to the coordinator, and the coordinator's pushes taken / refused as stale
        verifier = self.writes.verifier
        st["txn_verification"] = {
            "calls": verifier.calls,
            **verifier.state.pushes,
            **{f"tokens_{k}": v for k, v in verifier.tokens.items()},
        }
        ls = p.leader_state
        if ls is not None:
            st["pending_isr"] = list(ls.pending_isr) if ls.pending_isr else None
            st["followers"] = {
                b: {"log_end_offset": f.log_end_offset, "last_caught_up_time_ms": f.last_caught_up_time_ms}
                for b, f in ls.followers.items()
            }
        if p.role == FOLLOWER:
            st["follower_fetches"] = self.fetcher.fetches
            st["follower_connections"] = self.fetcher.connections
            st["follower_error"] = self.fetcher.error
            session = self.fetcher.session
            st["follower_session"] = None if session is None else session.describe()
        return st

    async def metrics(self) -> dict:
        """The exporter's scrape (actors/metrics_exporter.py): this replica's counters and log figures."""
        lg, p = self.log, self.partition
        out = {
            "topic": self.topic,
            "partition": p.partition,
            "broker": self.broker_id,
            "role": p.role,
            "leader": p.leader_id,
            "isr": list(p.isr),
            "replicas": list(p.replicas),
            "min_isr": self.config.min_insync_replicas,
            **self.metrics_stats.snapshot(),
        }
        if p.role != STOPPED:
            out.update(
                log_start_offset=lg.log_start_offset,
                log_end_offset=lg.log_end_offset,
                high_watermark=lg.high_watermark,
                size=lg.size_in_bytes,
                segments=len(lg.segments),
            )
        return out

    async def preload(self, cluster: str, broker_id: int) -> dict:
        """Load the actor classes a bound replica calls (a broker handle imports ``actors.broker`` and the
        coordinators' modules) while it waits in the warm pool, off the event loop; why: docs/internals.md.
        ``{"loaded": [the broker's name], "modules": [those modules now imported here]}``; a missing broker
        loads nothing (the first call that needs the class pays)."""
        try:
            await broker_handle_async(cluster, int(broker_id))  # dropped: the class Ray loaded for it stays
            loaded = [broker_name(cluster, int(broker_id))]
        except ValueError:  # no such broker
            loaded = []
        return {"loaded": loaded, "modules": sorted(m for m in PRELOADED_MODULES if m in sys.modules)}

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
        if self.dir_failure is not None:
            return self.dir_failure
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
