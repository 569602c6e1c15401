"""Kafka's PartitionMetadataFile: the topic id a partition directory belongs to.

    partition.metadata := "version: 0" NL "topic_id: " topic_id NL

Written once, atomically (storage/checkpoint.py), when a directory is first used for a partition; read
when it is reused. A directory naming another topic id (or none) holds the log of a topic that was
deleted and re-created under the same name while this broker was away: it is wiped before use.

Concurrency: plain functions; the owning broker prepares each directory before its replica opens it.
"""

from __future__ import annotations

import logging
import os
import shutil

from storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

__all__ = ["PARTITION_METADATA_FILE", "read_topic_id", "write_topic_id", "prepare_partition_dir"]

PARTITION_METADATA_FILE = "partition.metadata"
VERSION = 0


def read_topic_id(d: str) -> str | None:
    """The topic id in ``d``'s partition.metadata; None when the file is missing, unreadable or has none."""
    try:
        with open(os.path.join(d, PARTITION_METADATA_FILE), encoding="utf-8") as f:
            fields = dict(line.strip().split(": ", 1) for line in f if ": " in line)
    except (OSError, UnicodeDecodeError):
        return None
    return fields.get("topic_id")


def write_topic_id(d: str, topic_id: str) -> None:
    write_atomically(
        os.path.join(d, PARTITION_METADATA_FILE), f"version: {VERSION}\ntopic_id: {topic_id}\n".encode("utf-8")
    )


def prepare_partition_dir(d: str, topic_id: str) -> bool:
    """Make ``d`` a directory of the partition of topic ``topic_id``: a directory of another topic id is
    deleted first (returns True then), a missing one created, a missing partition.metadata written."""
    path = os.path.join(d, PARTITION_METADATA_FILE)
    wiped = False
    if os.path.exists(path):
        found = read_topic_id(d)
        if found != topic_id:
            log.warning("%s holds topic id %s, not %s: deleting the stale log", d, found, topic_id)
            shutil.rmtree(d, ignore_errors=True)
            wiped = True
    os.makedirs(d, exist_ok=True)
    if not os.path.exists(path):
        write_topic_id(d, topic_id)
    return wiped
