"""``storage/_crecords.pyi`` types every function of the C extension as built (mypy's stubtest against the module)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_stub_matches_the_built_extension():
    out = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "storage._crecords"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
