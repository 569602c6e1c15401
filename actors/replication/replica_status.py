"""The replica actor's endpoints and introspection (a mixin of ``ReplicaActor``, actors/replica.py): where
followers and clients connect (the replication and client listeners' endpoints), what the process's replication
server asks of a leader (``fetch_now``, ``park``), ``state()``, ``metrics()`` and ``preload()``."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import ray

from actors.channels.produce_channel import produce_listener
from actors.channels.replica_lookup import broker_handle_async
from actors.replication.partition_state import FOLLOWER, STOPPED
from actors.replication.replica_manager import SessionWatch, _err, fetch_error
from protocol import errors as E
from protocol.messages import FetchRequest
from protocol.names import broker_name

# the modules a broker handle makes Ray import (actors.broker imports the coordinators' actor modules)
PRELOADED_MODULES = ("actors.broker", "actors.group_coordinator", "actors.txn_coordinator")


class ReplicaStatus:
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
        st["replication_listener"] = dict(self.replication.stats, port=self.replication.port)
        st["client_listener"] = self.clients.describe()
        st["produce_listener"] = produce_listener(self.replication).describe()  # the process's, shared
        st["call_order"] = self.call_order.describe()  # ordered produce channels: waits, gaps skipped, late
        st["delayed_produces"], st["delayed_fetches"] = self.replica_manager.delayed()
        # KIP-890 verification: calls to the coordinator, and the coordinator's pushes taken / refused as stale
        st["txn_verification"] = {
            "calls": self.verifier.calls,
            **self.verifier.state.pushes,
            **{f"tokens_{k}": v for k, v in self.verifier.tokens.items()},
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
        """Load the actor classes a bound replica calls while it waits in the warm pool: Ray turns every
        actor handle this process takes (``ray.get_actor`` or an argument) into a class by importing the
        class's module the first time, and a handle to a broker imports ``actors.broker`` with everything it
        needs (~100 ms of CPU on an idle node, 200-360 ms measured under load). A follower takes one at its
        first leader lookup, and a leader at its first transactional produce (KIP-890 verification through
        the broker, then the transaction coordinator): that import made every fresh partition's first
        transaction 300-500 ms slower. Done here, off the event loop (it keeps answering), it costs the
        pool's spare CPU instead. One handle of this broker is enough: ``actors.broker`` imports the group and
        transaction coordinators' modules. ``{"loaded": [the broker's name], "modules": [those modules now
        imported here]}``; a missing broker loads nothing (the first call that needs the class pays)."""
        try:
            await broker_handle_async(cluster, int(broker_id))  # dropped: the class Ray loaded for it stays
            loaded = [broker_name(cluster, int(broker_id))]
        except ValueError:  # no such broker
            loaded = []
        return {"loaded": loaded, "modules": sorted(m for m in PRELOADED_MODULES if m in sys.modules)}
