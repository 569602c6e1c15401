"""The CLI's agent path must not import Ray (rafka/cli/remote.py): importing the CLI, the public client names
and what they import leaves ``ray`` out of ``sys.modules`` in a fresh interpreter."""

import subprocess
import sys


def test_importing_the_cli_and_the_client_api_does_not_import_ray():
    code = (
        "import sys, rafka, rafka.cli.main; print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
