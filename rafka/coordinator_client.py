"""The client's calls on a group's coordinator (Kafka's ``AbstractCoordinator`` request side):
``GroupCoordinatorClient`` finds the group's coordinator actor through any broker (FindCoordinator) and
calls it, finding it again on COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, a
coordinator name not (yet) registered, or a dead coordinator actor; ``_Call`` is one request in flight,
advanced without blocking past the caller's timeout. Used by the ConsumerCoordinator (rafka/consumer/consumer_coordinator.py) and
the group admin calls (rafka/admin/group_admin.py)."""

from __future__ import annotations

import time
from typing import Any

from protocol.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    KafkaError,
    KafkaTimeoutError,
    NotCoordinatorError,
    for_code,
)
from protocol.group_messages import GroupRequest
from protocol.names import broker_name
from rafka.transport import RAY, Transport

RETRIABLE_COORDINATOR = (
    CoordinatorLoadInProgressError.code,
    CoordinatorNotAvailableError.code,
    NotCoordinatorError.code,
)


class GroupCoordinatorClient:
    """Calls on the coordinator of one group, re-finding it on retriable coordinator errors."""

    key_type = 0  # FindCoordinator key type: 0 group, 1 transaction

    def __init__(self, cluster: str, metadata, group_id: str, retry_backoff_ms: int = 100, transport: Transport = RAY):
        self.cluster = cluster
        self.metadata = metadata
        self.transport = transport
        self.group_id = group_id  # the coordinator key (a transactional id for TxnCoordinatorClient)
        self.backoff = max(0.01, retry_backoff_ms / 1000.0)
        self._handle = None

    def _find(self, timeout_s: float):
        from ray.exceptions import GetTimeoutError, RayActorError

        ids = sorted(self.metadata.brokers())
        for bid in ids:
            try:
                broker = self.transport.get_actor(broker_name(self.cluster, bid))
                ans = self.transport.get(
                    self.transport.call(broker, "find_coordinator", self.group_id, self.key_type), timeout=timeout_s
                )
            except (ValueError, RayActorError, GetTimeoutError):
                continue
            if ans["error_code"] in RETRIABLE_COORDINATOR:
                return None
            if ans["error_code"]:
                raise for_code(ans["error_code"])(ans.get("error_message"))
            try:
                return self.transport.get_actor(ans["coordinator"])
            except ValueError:  # not registered yet: NOT_COORDINATOR
                return None
        return None

    @property
    def found(self) -> bool:
        """The coordinator's handle is known: a call starts without a (blocking) FindCoordinator."""
        return self._handle is not None

    def forget(self) -> None:
        """Drop the cached coordinator: the next call finds it again (a per-key answer said it moved)."""
        self._handle = None

    def start(self, request: GroupRequest) -> "_Call":
        """Send ``request`` (a typed request of protocol/group_messages.py, for this client's group) to the
        coordinator's ``request.METHOD`` without blocking: ``_Call.poll(timeout_s)``."""
        return _Call(self, request)

    def call(self, request: GroupRequest, timeout_ms: float = 60000) -> dict:
        """Send ``request`` and wait for its answer; retriable coordinator errors find the coordinator again."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        c = self.start(request)
        while True:
            res = c.poll(max(0.0, deadline - time.monotonic()))
            if res is not None:
                return res
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"group {self.group_id!r}: {request.METHOD} did not complete: {c.last}")


class TxnCoordinatorClient(GroupCoordinatorClient):
    """Calls on the transaction coordinator of one transactional id (typed requests of
    protocol/txn_messages.py), with the same re-finding on retriable coordinator errors."""

    key_type = 1


class _Call:
    """One coordinator request in flight; resent (after finding the coordinator again) on COORDINATOR_
    LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR or a dead coordinator actor."""

    def __init__(self, client: GroupCoordinatorClient, request: GroupRequest):
        self.client, self.request = client, request
        self.ref = None
        self.next_try = 0.0
        self.last: Any = None

    def poll(self, timeout_s: float) -> dict | None:
        """The answer, or None if it did not arrive within ``timeout_s``."""
        from ray.exceptions import RayActorError

        cl = self.client
        deadline = time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            if self.ref is None:
                if now < self.next_try:
                    if self.next_try > deadline:
                        time.sleep(max(0.0, deadline - now))
                        return None
                    time.sleep(self.next_try - now)
                if cl._handle is None:
                    cl._handle = cl._find(10.0)
                if cl._handle is None:
                    self.last = "no coordinator"
                    self.next_try = time.monotonic() + cl.backoff
                    continue
                self.ref = cl.transport.call(cl._handle, self.request.METHOD, self.request)
            ready, _ = cl.transport.wait([self.ref], timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            try:
                res = cl.transport.get(self.ref)
            except (RayActorError, KafkaError) as e:  # a dead actor; over TCP, a lost connection or a timeout
                res, self.last = None, e
            self.ref = None
            if res is not None:
                code = _first_code(res)
                if code not in RETRIABLE_COORDINATOR:
                    return res
                self.last = f"error code {code}"
            cl._handle = None
            self.next_try = time.monotonic() + cl.backoff
            if time.monotonic() >= deadline:
                return None


def _first_code(res: dict) -> int:
    if res.get("error_code"):
        return res["error_code"]
    for g in (res.get("groups") or []) + (res.get("results") or []):
        if g.get("error_code"):
            return g["error_code"]
    for t in res.get("topics") or ():
        for p in t.get("partitions") or ():
            if p.get("error_code"):
                return p["error_code"]
    return 0
