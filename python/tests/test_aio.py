"""snapbus.aio: `async for` over a subscription, one helper thread, closing stops it."""

from __future__ import annotations

import asyncio
import threading

from conftest import Bus, demo_emitted

import snapbus
import snapbus.aio


def _aio_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "snapbus-aio"]


def test_async_for_reads_events_and_closing_stops_the_thread(bus: Bus) -> None:
    out = bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "3", "--steps", "4")
    emitted = demo_emitted(out.stdout + out.stderr)

    async def main() -> list[int]:
        got: list[int] = []
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.ensure_future(ticker())
        async with snapbus.aio.subscribe("demo.*", start="oldest", bus=bus.name) as sub:
            async for ev in sub:
                got.append(ev.seq)
                if len(got) == emitted:
                    break
            assert sub.subscription.delivered == emitted
        t.cancel()
        assert ticks > 0  # the loop kept running
        return got

    got = asyncio.run(main())
    assert got == list(range(got[0], got[0] + emitted))
    for th in _aio_threads():
        th.join(timeout=5)
    assert _aio_threads() == []


def test_until_end_ends_the_async_iteration(bus: Bus) -> None:
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "2", "--steps", "2")

    async def main() -> int:
        n = 0
        sub = snapbus.aio.subscribe(
            "demo.step", start="oldest", cut=True, until_end=True, bus=bus.name
        )
        async for _ in sub:
            n += 1
        await sub.aclose()
        return n

    assert asyncio.run(main()) == 4
