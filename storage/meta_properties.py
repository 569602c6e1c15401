"""A log directory's identity, Kafka's ``meta.properties`` (KIP-858): ``version``, ``node.id`` and ``directory.id``,
written once when the directory is first used. A directory whose ``meta.properties`` is gone (a replaced disk, an
emptied volume) gets a new ``directory.id``, which tells the controller that the replicas this broker held are
gone with it. Pure file I/O; read and written by the broker shell at start, before it registers.

    version=1
    node.id=<broker id>
    directory.id=<22-character url-safe base64 uuid>
"""

from __future__ import annotations

import base64
import os
import uuid

from storage.checkpoint import write_atomically

META_PROPERTIES = "meta.properties"


def new_directory_id() -> str:
    """A Kafka ``Uuid`` string: 16 random bytes, url-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def parse(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def load_or_create(log_dir: str, node_id: int) -> dict[str, str]:
    """The directory's properties, created with a new ``directory.id`` when there are none. A ``node.id`` that is
    not this broker's is refused (ValueError): the directory belongs to another broker."""
    path = os.path.join(log_dir, META_PROPERTIES)
    try:
        with open(path, encoding="utf-8") as f:
            props = parse(f.read())
    except FileNotFoundError:
        props = {}
    if props.get("directory.id") and props.get("node.id") not in (None, str(node_id)):
        raise ValueError(f"{path} belongs to node {props.get('node.id')}, not {node_id}")
    if not props.get("directory.id"):
        props = {"version": "1", "node.id": str(node_id), "directory.id": new_directory_id()}
        text = "".join(f"{k}={v}\n" for k, v in props.items())
        write_atomically(path, text.encode())
    return props
