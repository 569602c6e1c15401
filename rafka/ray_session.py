"""How rafka's drivers reach Ray: :func:`attach_ray` to a running instance (``rafka.connect``, the CLI), and
:func:`start_local_ray`, the instance an embedded :class:`rafka.LocalCluster` starts in its own process
(``ray.init("local")``).

That local instance is the single-node Ray ``ray.init()`` starts, less three head processes nobody in an embedded
cluster uses (``lean=True``, the default):

- the dashboard's **API server** (``dashboard.py``; with ``include_dashboard=False`` it serves only the
  usage-stats module, yet ``ray.init`` waits for it to publish its URL: 0.8-1.4 s of every start);
- the autoscaler's **monitor** (``monitor.py``: one fixed node, nothing to scale);
- the **log monitor** (``log_monitor.py``: it tails every worker's log files to push their lines to the
  drivers, and this driver asks for none, ``log_to_driver=False``; the files are still written under the
  session directory). It polls the log directory whether or not anyone listens: ~0.008 cores at rest.

Measured here (benchmarks/client_bench.py ``cluster_start_s``, ``idle_cores``; docs/internals.md): ``ray.init``
2.6 -> 1.75 s, and 0.008-0.010 cores less at rest. What needs those processes does not work on such an
instance: the dashboard and Ray's state/job REST APIs (``ray list ...``, ``ray job submit``), and a second
driver that attaches to it with ``log_to_driver=True`` gets no worker output. ``rafka cluster start``
(``ray start --head``: a cluster other processes attach to) keeps all of them, as does ``lean=False``.

How: Ray starts these from ``ray._private.node.Node`` (``start_api_server``, ``start_monitor``,
``start_log_monitor``) with no public switch for the first two from ``ray.init``, so the start runs with those
three methods replaced by no-ops, under a lock, and restored at once; Ray's version is pinned
(pyproject.toml). If the methods are not there (another Ray), the start is Ray's own.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from protocol.errors import ClusterNotFoundError
from protocol.names import RAY_NAMESPACE
from rafka.output import quiet_worker_pool_warnings

SKIPPED = ("start_api_server", "start_monitor", "start_log_monitor")
_lock = threading.Lock()


def _skip(*_args: Any, **_kw: Any) -> None:
    return None


@contextlib.contextmanager
def _without_head_extras() -> Iterator[bool]:
    """While it is open, a head node ``Node`` starts none of ``SKIPPED``; yields whether that took."""
    from ray._private import node

    cls = node.Node
    with _lock:
        saved = {name: cls.__dict__.get(name) for name in SKIPPED}
        if any(fn is None for fn in saved.values()):
            yield False
            return
        for name in SKIPPED:
            setattr(cls, name, _skip)
        try:
            yield True
        finally:
            for name, fn in saved.items():
                setattr(cls, name, fn)


def start_local_ray(num_cpus: int, namespace: str, system_config: dict, lean: bool = True) -> None:
    """``ray.init`` of a new single-node instance for an embedded cluster (lean: without ``SKIPPED``)."""
    import ray

    with _without_head_extras() if lean else contextlib.nullcontext(False):
        ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            namespace=namespace,
            log_to_driver=False,
            logging_level="WARNING",
            _system_config=system_config,
        )


def use_token_auth_if_available() -> bool:
    """Ray 2.60 turns token authentication on for clusters started where a token exists
    (``~/.ray/auth_token``, ``RAY_AUTH_TOKEN``/``RAY_AUTH_TOKEN_PATH``), but a process *attaching* only
    sends it in token mode: enter token mode when a token is there and the user did not choose a mode
    (``RAY_AUTH_MODE``). Sending a token to a cluster without authentication is harmless."""
    try:
        from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
    except ImportError:  # a Ray without token authentication
        return False
    import logging

    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    return maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _reachable(address: str, timeout_s: float = 2.0) -> bool:
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _resolve_address(address: str) -> str:
    """``auto`` -> the address of the latest local Ray instance, checked to be reachable; an explicit
    ``host:port`` is checked too, so a dead address fails in seconds (Ray itself retries for minutes).
    ``ray://`` addresses pass through."""
    if address.startswith("ray://"):
        return address
    resolved = address
    if address == "auto":
        from ray._private.services import get_ray_address_from_environment

        try:
            resolved = get_ray_address_from_environment("auto", None)
        except Exception:  # noqa: BLE001 - Ray's own lookup failing means there is nothing to find
            resolved = None
        if not resolved:
            raise ClusterNotFoundError(
                "no running Ray cluster found on this machine. Start one with "
                "`rafka cluster start` or use rafka.LocalCluster()"
            )
    if not _reachable(resolved):
        raise ClusterNotFoundError(
            f"no Ray cluster answers at {resolved}"
            + (" (the latest one recorded on this machine)" if address == "auto" else "")
            + ". Start one with `rafka cluster start` or use rafka.LocalCluster()"
        )
    return resolved


def attach_ray(address: str | None) -> str | None:
    """``ray.init`` attaching this process to a running Ray (``address``, else ``auto``); the address used."""
    import ray

    if ray.is_initialized():
        return address
    use_token_auth_if_available()
    address = _resolve_address(address or "auto")
    quiet_worker_pool_warnings()
    try:
        ray.init(
            address=address,
            namespace=RAY_NAMESPACE,
            log_to_driver=False,
            logging_level="WARNING",
            configure_logging=True,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or "auto"
        raise ClusterNotFoundError(
            f"no Ray cluster at {where}: {str(exc).splitlines()[0] if str(exc) else exc}. "
            "Start one with `rafka cluster start` or use rafka.LocalCluster()"
        ) from None
    return address
