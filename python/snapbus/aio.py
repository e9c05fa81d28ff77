"""asyncio: `async for ev in snapbus.aio.subscribe(...)`.

One helper thread runs the blocking `get_batch` (the GIL released while it waits) and hands
each batch to the event loop with `call_soon_threadsafe`; the loop never blocks. Closing the
iterator (`aclose()`, leaving `async with`, or the loop ending the generator) stops the thread
and the subscription.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ._snapbus import Event, Subscription
from .subscription import subscribe as _subscribe

__all__ = ["AsyncSubscription", "subscribe"]

_BATCH = 1024
_SLICE_S = 0.1
# Batches handed to the loop but not yet taken: the helper thread reads no further ahead (an
# iterator left without aclose() does not buffer the bus into memory).
_AHEAD = 4


class AsyncSubscription:
    """An async iterator of `Event`s (and an async context manager)."""

    def __init__(self, sub: Subscription) -> None:
        self._sub = sub
        self._queue: asyncio.Queue[list[Event] | BaseException | None] | None = None
        self._buffer: list[Event] = []
        self._pos = 0
        self._stop = threading.Event()
        self._credits = threading.Semaphore(_AHEAD)
        self._thread: threading.Thread | None = None

    @property
    def subscription(self) -> Subscription:
        """The underlying (blocking) subscription: its `lost` and `delivered` counters."""
        return self._sub

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[list[Event] | BaseException | None] = asyncio.Queue()
        self._queue = queue

        def pump() -> None:
            try:
                while not self._stop.is_set():
                    if not self._credits.acquire(timeout=_SLICE_S):
                        continue
                    batch = self._sub.get_batch(_BATCH, _SLICE_S)
                    if batch:
                        loop.call_soon_threadsafe(queue.put_nowait, batch)
                        continue
                    self._credits.release()
                    if self._sub.ended:
                        break
            except BaseException as e:  # handed to the loop, raised by __anext__
                if not self._stop.is_set():
                    try:
                        loop.call_soon_threadsafe(queue.put_nowait, e)
                    except RuntimeError:  # the loop is closed
                        pass
                return
            try:
                loop.call_soon_threadsafe(queue.put_nowait, None)
            except RuntimeError:
                pass

        self._thread = threading.Thread(target=pump, name="snapbus-aio", daemon=True)
        self._thread.start()

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> Event:
        if self._pos < len(self._buffer):
            ev = self._buffer[self._pos]
            self._pos += 1
            return ev
        if self._stop.is_set():
            raise StopAsyncIteration
        if self._queue is None:
            self._start()
        assert self._queue is not None
        got = await self._queue.get()
        self._credits.release()
        if got is None:
            raise StopAsyncIteration
        if isinstance(got, BaseException):
            raise got
        self._buffer, self._pos = got, 1
        return got[0]

    def __del__(self) -> None:
        self._stop.set()

    async def aclose(self) -> None:
        """Stops the helper thread and closes the subscription."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join)
        self._sub.close()

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def subscribe(*globs: str, **kwargs: Any) -> AsyncSubscription:
    """`snapbus.subscribe(*globs, **kwargs)` for asyncio: `async for ev in ...`."""
    return AsyncSubscription(_subscribe(*globs, **kwargs))
