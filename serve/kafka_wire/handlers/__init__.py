"""One module per API family; each ``handle(backend, request, version)`` returns a kio response entity
(or None where Kafka answers nothing). Groups, transactions and admin APIs come in later milestones."""
