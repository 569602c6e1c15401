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
