"""Small durable files of a partition directory: atomic rewrites and Kafka's offset checkpoints.

An atomic rewrite writes ``<path>.tmp``, fsyncs it, renames it over ``<path>`` and fsyncs the directory:
a crash at any instant leaves the old file or the new one, never a torn or empty one (a leftover
``.tmp`` is ignored and removed by the next open). Callers build the whole content first and write it
once: a file rebuilt entry by entry would be valid, and wrong, between the writes.

    offset checkpoint file := "0" NL offset NL          (version 0; ASCII decimal)

Concurrency: plain functions; each file has one writer (the owning Log).
"""
from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

__all__ = ["fsync_dir", "write_atomically", "read_offset_checkpoint", "write_offset_checkpoint"]


def fsync_dir(path: str) -> None:
    """Make the directory's entries (creations, renames, removals so far) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str, data: bytes) -> None:
    """Replace ``path`` by ``data``: tmp file + fsync + rename + directory fsync."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def read_offset_checkpoint(path: str) -> int | None:
    """The offset in a checkpoint file; None when missing or unreadable (logged)."""
    try:
        with open(path, "r", encoding="ascii") as f:
            lines = f.read().split("\n")
        if len(lines) >= 2 and lines[0] == "0" and int(lines[1]) >= 0:
            return int(lines[1])
        raise ValueError(f"unexpected content {lines[:2]!r}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        log.warning("checkpoint %s is unreadable (%s); ignoring it", path, e)
        return None


def write_offset_checkpoint(path: str, value: int) -> None:
    write_atomically(path, f"0\n{value}\n".encode("ascii"))
