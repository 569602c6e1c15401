"""A program's stdout is for its own output (JSON figures, records, tables).

Ray's driver prints cluster-wide warnings it is sent, such as the raylet's "(raylet) WARNING: 4 PYTHON worker
processes have been started ...", on ``sys.stdout``, even with ``log_to_driver=False``. A program whose stdout
is parsed (``--json``, ``rafka topic consume ... | tool``, the benchmarks) calls :func:`claim_stdout` first and
writes its output to the stream it returns; everything else that prints to ``sys.stdout`` goes to stderr.
"""

from __future__ import annotations

import sys
from typing import TextIO


def claim_stdout() -> TextIO:
    """Point ``sys.stdout`` at stderr and return the stream that was ``sys.stdout``, for the program's output.
    The caller puts ``sys.stdout`` back if it needs to (in-process use)."""
    out = sys.stdout
    out.flush()
    sys.stdout = sys.stderr
    return out


# The raylet's "WARNING: N PYTHON worker processes have been started on node: ... which is Nx the maximum expected
# startup concurrency ... allowing high concurrency. See https://github.com/ray-project/ray/issues/3644 ...".
WORKER_POOL_WARNING = "worker processes have been started on node"


def quiet_worker_pool_warnings() -> None:
    """In a Ray driver: drop the raylet's worker-count warning, keep every other cluster-wide message.

    The raylet sends it to every driver each time the node's worker count reaches a new multiple of its
    startup concurrency (2 on a 2-core machine). A rafka cluster is many ``num_cpus=0`` actors on purpose
    (brokers, replica hosts, coordinators; a process per replica with ``replica.host.max.partitions=1``), so
    on a small machine it fires again and again, on the terminal of whoever is attached (a CLI verb, a
    notebook), where it means nothing to act on.
    Ray's driver prints these messages through ``ray._private.worker.print_to_stdstream`` (looked up per
    message), which this wraps once. Idempotent; imports Ray (call it where Ray is being attached)."""
    import ray._private.worker as ray_worker

    original = ray_worker.print_to_stdstream
    if getattr(original, "rafka_quiet", False):
        return

    def print_to_stdstream(data, ignore_prefix):
        lines = [x for x in data.get("lines", ()) if WORKER_POOL_WARNING not in x]
        if not lines:
            return None
        return original({**data, "lines": lines}, ignore_prefix)

    print_to_stdstream.rafka_quiet = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = print_to_stdstream
