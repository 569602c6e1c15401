"""The read buffer of rafka's asyncio stream connections (``asyncio.StreamReader``'s ``limit``).

asyncio's default, 64 KiB, pauses the transport once more than twice that is buffered and resumes it when the
reader waits again: a frame larger than 128 KiB (a producer's bulk batch, a follower's fetch answer, a Kafka
client's ProduceRequest) is read through a pause/resume cycle per arriving chunk, each a wake-up of the reader
and two epoll changes. Measured here under uvloop (the event loop of Ray's async actors; benchmark in
docs/internals.md): a 340 KB frame cost 0.67 ms of CPU to move through one connection with the default limit and
0.18 ms with this one. A frame is read whole before it is handled anyway (``readexactly``), and every listener
bounds its frames (``socket.request.max.bytes``) before reading them, so the larger buffer only lets a frame in
flight arrive without stalls; reading still pauses past twice this limit.
"""

from __future__ import annotations

STREAM_LIMIT = 8 * 1024 * 1024
