"""The Kafka wire-protocol listener of a broker (Kafka's SocketServer + KafkaApis, on asyncio).

Roles, by Kafka's names::

    Acceptor        network.py   the asyncio server on the broker's listener; one Processor per connection
    Processor       network.py   reads size-prefixed frames, one request in flight, answers in order;
                                 closes its connection after connections.max.idle.ms without traffic
    RequestChannel  network.py   the queue between a Processor and KafkaApis (a request and its answer)
    KafkaApis       apis.py      decodes the request (kio), dispatches by API key, encodes the answer
    handlers        handlers/    one module per API family: metadata, produce, fetch, offsets
    Backend         backend.py   the narrow port to the broker's actors (a fake one in the unit tests)

Codec: ``kio`` (Kafka's JSON message specs as frozen dataclasses, a Rust parser); framing, headers and
the advertised versions are codec.py and versions.py. Config (listeners, advertised.listeners,
socket.request.max.bytes, connections.max.idle.ms) is config.py. The broker actor starts it through broker_hook.py.

Nothing here is imported by the replica actors; the broker imports broker_hook, which imports the rest
only when a listener is started.
"""
