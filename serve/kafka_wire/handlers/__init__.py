"""One module per API family; each ``handle(backend, request, version)`` returns a kio response entity
(or None where Kafka answers nothing): produce, fetch, offsets, metadata, coordinator (FindCoordinator),
groups, txn, admin and configs."""
