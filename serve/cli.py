"""`rafka serve ...` verbs (registered by rafka/cli.py)."""
from __future__ import annotations


def register(groups, common) -> None:
    raise NotImplementedError("being written")
