"""protocol.names: the one place actor names are built (and it imports no Ray)."""

import subprocess
import sys

from protocol import names


def test_names():
    assert names.RAY_NAMESPACE == "rafka"
    assert names.controller_name("c") == "c:controller"
    assert names.broker_name("c", 2) == "c:broker-2"
    assert names.replica_name("c", "t-1", 3, 0) == "c:replica-t-1-3-b0"
    assert names.group_coordinator_name("c", 1) == "c:group-coordinator-1"
    assert names.txn_coordinator_name("c", 1) == "c:txn-coordinator-1"
    for n in (names.controller_name("c"), names.broker_name("c", 1), names.replica_name("c", "t", 0, 1)):
        assert n.startswith(names.cluster_prefix("c"))


def test_broker_id_of():
    assert names.broker_id_of("c", names.broker_name("c", 12)) == 12
    assert names.broker_id_of("c", names.broker_name("d", 12)) is None
    assert names.broker_id_of("c", names.controller_name("c")) is None
    assert names.broker_id_of("c", names.group_coordinator_name("c", 1)) is None
    assert names.broker_id_of("c", "c:broker-") is None


def test_protocol_is_a_leaf():
    """Importing every protocol module loads neither Ray nor an upper package."""
    code = (
        "import sys, pkgutil, importlib, protocol\n"
        "for m in pkgutil.iter_modules(protocol.__path__): importlib.import_module('protocol.' + m.name)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('ray', 'actors', 'rafka', 'serve', 'jobs')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
