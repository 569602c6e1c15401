"""Kafka-style server logs on disk (``<data_dir>/logs/broker-<id>.log``, ``controller.log``, ``ray.log``), in
log4j's line shape with the process's role as context. ``configure`` is called once by each actor's
constructor, only inside a Ray worker; ``rafka logs`` reads the files. docs/internals.md ("Server logs") has
the files, the line shape and the rotation.
"""

from __future__ import annotations

import contextvars
import logging
import os

LOGS_DIR = "logs"
CONTROLLER_LOG = "controller.log"
RAY_LOG = "ray.log"
RAY_START_LOG = "ray-start.log"
MAX_BYTES = 10 * 1024 * 1024
BACKUPS = 5
LOGGERS = ("rafka", "actors", "storage", "serve", "protocol", "jobs")
FORMAT = "[%(asctime)s] %(levelname)s [%(ctx)s] %(message)s (%(name)s)"

_handler: logging.Handler | None = None
_context = {"ctx": "-"}
# a context of the running asyncio task and the tasks it starts, over the process's: the replica of a call
# in a process hosting several (actors/replica_host.py)
_task_context: contextvars.ContextVar[str | None] = contextvars.ContextVar("rafka_log_context", default=None)


def logs_dir(data_dir: str) -> str:
    return os.path.join(data_dir, LOGS_DIR)


def broker_log(data_dir: str, broker_id: int) -> str:
    return os.path.join(logs_dir(data_dir), f"broker-{int(broker_id)}.log")


def controller_log(data_dir: str) -> str:
    return os.path.join(logs_dir(data_dir), CONTROLLER_LOG)


def broker_log_of_partition_dir(partition_dir: str, broker_id: int) -> str:
    """A replica's file, from its log directory ``<data_dir>/broker-<id>/<topic>-<p>``."""
    return broker_log(os.path.dirname(os.path.dirname(os.path.abspath(partition_dir))), broker_id)


class _Context(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "ctx"):
            record.ctx = _task_context.get() or _context["ctx"]
        return True


def _in_ray_worker() -> bool:
    try:
        import ray

        return ray.is_initialized() and ray._private.worker.global_worker.mode == ray.WORKER_MODE
    except Exception:  # noqa: BLE001 - no Ray, no worker
        return False


def set_context(context: str) -> None:
    """The bracketed context of this process's lines from now on (e.g. once the controller knows its epoch)."""
    _context["ctx"] = context


def set_task_context(context: str | None) -> None:
    """The context of this asyncio task's lines (and those of the tasks, callbacks and servers it starts from
    now on: they copy it), over the process's."""
    _task_context.set(context)


def configure(path: str, context: str, force: bool = False) -> bool:
    """Send this process's rafka loggers to ``path`` (once per process; only in a Ray worker unless
    ``force``). Returns whether the handler is installed."""
    global _handler
    set_context(context)
    if _handler is not None:
        return True
    if not force and not _in_ray_worker():
        return False
    from concurrent_log_handler import ConcurrentRotatingFileHandler

    os.makedirs(os.path.dirname(path), exist_ok=True)
    handler = ConcurrentRotatingFileHandler(path, "a", maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(_Context())
    for name in LOGGERS:
        lg = logging.getLogger(name)
        lg.setLevel(logging.INFO)
        lg.addHandler(handler)
        lg.propagate = False  # the file is the one place (not the worker's stderr in Ray's temp dir)
    _handler = handler
    return True


def ray_log(data_dir: str) -> str:
    return os.path.join(logs_dir(data_dir), RAY_LOG)


def route_ray_driver_logs(data_dir: str) -> str:
    """In a driver about to start or attach to Ray: Ray's own driver-side messages (the ``ray`` logger, e.g.
    ``ray.init``'s object store / ``/dev/shm`` warnings on small machines) go to ``<data_dir>/logs/ray.log``
    (in Ray's line format); only ERROR and above still reach the terminal. rafka's own errors are not
    touched. Idempotent; returns the file's path."""
    path = os.path.abspath(ray_log(data_dir))
    lg = logging.getLogger("ray")
    if any(getattr(h, "baseFilename", None) == path for h in lg.handlers):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for h in lg.handlers:
        if not isinstance(h, logging.FileHandler):
            h.setLevel(logging.ERROR)
    fh = logging.FileHandler(path, encoding="utf-8")
    fh.setFormatter(
        logging.Formatter("[%(asctime)s] %(levelname)s [Ray driver pid=%(process)d] %(message)s (%(name)s)")
    )
    lg.addHandler(fh)
    return path


def log_files(data_dir: str) -> list[str]:
    """The current (not rotated) log files under ``data_dir``: controller.log first, then brokers by id."""
    d = logs_dir(data_dir)
    try:
        names = os.listdir(d)
    except OSError:
        return []
    brokers = sorted(
        (n for n in names if n.startswith("broker-") and n.endswith(".log") and n[7:-4].isdigit()),
        key=lambda n: int(n[7:-4]),
    )
    out = [CONTROLLER_LOG] if CONTROLLER_LOG in names else []
    return [os.path.join(d, n) for n in out + brokers]
