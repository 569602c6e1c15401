"""The fetch session tests (test_fetch_session.py) run against the replication server's fakes, which live beside
the server's own tests (tests/unit/actors/channels/test_replication_channel.py): that directory on the path."""

from __future__ import annotations

import os
import sys

_CHANNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "channels")
if _CHANNELS not in sys.path:
    sys.path.insert(0, _CHANNELS)
