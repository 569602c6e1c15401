"""The OS process behind an actor on this node: ``kill_worker`` SIGKILLs a frozen one (only a ``ray::<Class>``
worker), ``actor_pid`` reads its pid from GCS, ``process_state`` / ``stopped`` tell a frozen process from a
slow one (/proc). Used by controller_link and replica_supervisor. docs/internals.md ("Liveness") has why.
"""

from __future__ import annotations

import os
import signal


def actor_pid(handle) -> int | None:
    """The OS pid of ``handle``'s worker process as GCS records it, or None (unknown, or GCS unreachable).
    Blocking: call it off the event loop."""
    try:
        import ray

        info = ray._private.state.state.actor_table(handle._actor_id.hex())
    except Exception:  # noqa: BLE001 - no answer means unknown, never a crash of the caller
        return None
    pid = (info or {}).get("Pid")
    return int(pid) if pid else None


def worker_title(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def kill_worker(pid: int | None, actor_class: str) -> bool:
    if not pid or pid == os.getpid():
        return False
    title = worker_title(pid)
    if title is None or f"ray::{actor_class}" not in title:
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def process_state(pid: int | None) -> str | None:
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][:1] or None
    except (OSError, IndexError):
        return None


def stopped(pid: int | None) -> bool:
    """The process exists and is stopped (SIGSTOP, a tracer): it cannot answer until someone resumes it."""
    return process_state(pid) in ("T", "t")
