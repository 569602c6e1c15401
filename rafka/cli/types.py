"""Value types for the CLI's argparse options: a bad number is a usage error (exit 2) naming the rule, before
any cluster is contacted (``rafka perf produce --records -5``, ``rafka topic consume T -p -5``)."""

from __future__ import annotations

import argparse
from typing import Callable

__all__ = ["int_at_least", "count", "index"]


def int_at_least(low: int, what: str) -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``low``, else ``ArgumentTypeError`` saying it is not ``what``."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"{v} is not {what}")
        return v

    parse.__name__ = what  # argparse names the type in some messages
    return parse


count = int_at_least(1, "a positive number")
index = int_at_least(0, "a valid index (0 or more)")
