"""snapbus.aio: `async for` over a subscription, one helper thread, closing stops it."""

from __future__ import annotations

import asyncio
import threading

from conftest import Bus, demo_emitted, wait_until

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


def test_the_helper_thread_reads_only_a_few_batches_ahead(bus: Bus) -> None:
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "200", "--steps", "100")

    async def main() -> int:
        sub = snapbus.aio.subscribe("demo.*", start="oldest", bus=bus.name)
        it = sub.__aiter__()
        await it.__anext__()
        # Not taking more: the helper stops after a few batches (it does not drain the ring).
        wait_until("the helper to stop reading ahead", lambda: _quiet(sub), 30)
        held = sub.subscription.delivered
        assert held <= (snapbus.aio._AHEAD + 1) * snapbus.aio._BATCH, held
        await sub.aclose()
        return held

    assert asyncio.run(main()) < 200 * 101


def _quiet(sub: snapbus.aio.AsyncSubscription) -> bool:
    before = sub.subscription.delivered
    threading.Event().wait(0.3)
    return sub.subscription.delivered == before
