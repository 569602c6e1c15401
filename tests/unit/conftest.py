"""Unit tests (no Ray), in folders that mirror the packages. This folder's shared harnesses
(fake_transport, group_harness, crash_harness, crash_scenarios) are imported by module name: pytest puts
this conftest's folder on sys.path."""
