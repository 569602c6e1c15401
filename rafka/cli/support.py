"""What every `rafka` CLI verb shares, as a public module: exit codes, usage errors, the output stream, JSON
or human printing, tables, ``key=value`` options and attaching to the started cluster.

The verbs of the gateway (serve/cli.py) and of the Spark jobs (jobs/cli.py) import this module; the CLI
(rafka/cli/main.py) finds their ``register`` functions through the ``rafka.commands`` entry points declared in
pyproject.toml, so the client package never imports the layers built on top of it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

from protocol.errors import ClusterNotFoundError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NO_CLUSTER = 0, 1, 2, 3


class UsageError(Exception):
    """A bad combination of options: the CLI prints it and exits with EXIT_USAGE."""


# A command's output goes to OUTPUT, the stdout it was started with; while it runs, sys.stdout is stderr
# (rafka.output: Ray's driver prints cluster-wide warnings on sys.stdout, and `--json` output or
# `topic consume ... | tool` must carry nothing but the command's own lines).
OUTPUT: TextIO | None = None


def output_stream() -> TextIO:
    """Where a command writes its output: the stdout the process started with (see OUTPUT). In the CLI agent
    (rafka/cli/agent.py) the stream of the connection whose verb runs in this thread."""
    return bound(OUTPUT if OUTPUT is not None else sys.stdout)


def bound(stream: Any) -> Any:
    """The concrete stream behind ``stream`` for this thread (the CLI agent routes sys.stdout/stderr per
    verb thread): what a callback running on another thread (a producer's acks) must write to."""
    current = getattr(stream, "current", None)
    return current() if callable(current) else stream


def echo(text: str) -> None:
    out = output_stream()
    out.write(text + "\n")
    out.flush()


def print_result(args, data: Any, human: str | None = None) -> None:
    """``data`` as one JSON line under ``--json``, else the ``human`` text (if any)."""
    if args.json:
        echo(json.dumps(data, default=str))
    elif human is not None:
        echo(human)


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def kv_pairs(items: list[str] | None, what: str) -> dict[str, str]:
    """``["a=1,b=2", "c=3"]`` -> ``{"a": "1", "b": "2", "c": "3"}``; anything else is a UsageError."""
    out = {}
    for item in items or ():
        for part in item.split(","):
            if "=" not in part:
                raise UsageError(f"{what} expects key=value, got {part!r}")
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def connect(args):
    """The cluster to talk to: --address, else RAY_ADDRESS, else the one `rafka cluster start` recorded.
    Unlike ``rafka.connect()``, the CLI does not guess with Ray's "auto" (it could pick up any Ray
    instance on the machine)."""
    from rafka.client_utils import read_state, state_file
    from rafka.cluster import connect as connect_cluster

    address = args.address or os.environ.get("RAY_ADDRESS") or (read_state() or {}).get("address")
    if address is None:
        raise ClusterNotFoundError(
            f"no cluster started here ({state_file()} is absent): run `rafka cluster "
            "start`, or pass --address / set RAY_ADDRESS"
        )
    return connect_cluster(address=address, cluster=args.cluster)
