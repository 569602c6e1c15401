"""A TCP proxy that delays every byte by a fixed time each way (asyncio, in a thread of its own): the slow link
where the kernel has no netem. Put it in front of a listener and point clients at it; ``NodeCluster.delay_proxy``
runs it inside a namespace (this file as a script). It delays what goes through it only, not Ray's own traffic."""

from __future__ import annotations

import argparse
import asyncio
import threading
import time


class DelayProxy:
    """Listens on ``listen`` (host, port; port 0 picks one, see ``port``) and forwards each connection to ``target``,
    every chunk held ``delay_s`` before it is written on (order kept; throughput is not limited). ``start`` /
    ``close``, or a context manager."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int], delay_s: float):
        self.listen = listen
        self.target = target
        self.delay_s = delay_s
        self.port = listen[1]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="delay-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    def __enter__(self) -> DelayProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> DelayProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self) -> asyncio.base_events.Server:
        return await asyncio.start_server(self._handle, self.listen[0], self.listen[1])

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            sreader, swriter = await asyncio.open_connection(*self.target)
        except OSError:
            cwriter.close()
            return
        try:
            await asyncio.gather(self._pipe(creader, swriter), self._pipe(sreader, cwriter))
        except (ConnectionError, OSError):
            pass
        finally:
            cwriter.close()
            swriter.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read as it comes, stamp each chunk, write it when its time is up (a queue keeps the order); the
        reader's end of stream is passed on, as late, as a half close."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(send())
        try:
            while True:
                data = await reader.read(65536)
                queue.put_nowait((time.monotonic() + self.delay_s, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()

    def close(self) -> None:
        if not self._thread.is_alive():
            return

        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--listen", required=True, help="host:port")
    ap.add_argument("--target", required=True, help="host:port")
    ap.add_argument("--delay-ms", type=float, required=True)
    a = ap.parse_args()
    lh, lp = a.listen.rsplit(":", 1)
    th, tp = a.target.rsplit(":", 1)
    with DelayProxy((lh, int(lp)), (th, int(tp)), a.delay_ms / 1000) as proxy:
        print(f"listening {lh}:{proxy.port}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
