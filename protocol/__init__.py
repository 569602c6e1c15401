"""The contract between the clients, the actors and the wire listeners: message types and their frames,
names (actors, internal topics, KV keys), Kafka's errors, the clock and the transaction tokens. It does no
I/O and imports only the stdlib, kio and msgpack (tests/unit/test_layers.py); every other package may import it.
"""
