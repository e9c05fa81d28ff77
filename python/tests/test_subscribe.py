"""snapbus.subscribe: a Rust `snapbus demo` read by a Python subscription, every value checked
against `demo --help`'s formulas; exact loss under a stopped consumer; Ctrl-C during a blocked
get(); the GIL released while waiting; bad input."""

from __future__ import annotations

import queue
import signal
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    LAP_EPISODES,
    LAP_STEPS,
    Bus,
    demo_emitted,
    demo_episode_end_expected,
    demo_step_expected,
    demo_while_stopped,
    wait_until,
)

import snapbus


def check_step(payload: object, e: int, s: int) -> None:
    want = demo_step_expected(e, s)
    assert payload.episode == want["episode"]  # type: ignore[attr-defined]
    assert payload.step == want["step"]  # type: ignore[attr-defined]
    assert payload.mode == want["mode"]  # type: ignore[attr-defined]
    assert payload.reward == pytest.approx(want["reward"], abs=1e-12)  # type: ignore[attr-defined]
    assert payload.position == want["position"]  # type: ignore[attr-defined]
    obs = payload.observation  # type: ignore[attr-defined]
    assert obs.dtype == np.uint8 and obs.shape == (6, 8)
    assert obs.tolist() == want["observation"]


def check_end(payload: object, e: int, steps: int) -> None:
    want = demo_episode_end_expected(e, steps)
    for k in ("episode", "steps", "mode"):
        assert getattr(payload, k) == want[k]
    assert payload.total_reward == pytest.approx(want["total_reward"], abs=1e-12)  # type: ignore[attr-defined]
    assert payload.mean_reward == pytest.approx(want["mean_reward"], abs=1e-12)  # type: ignore[attr-defined]


def test_a_rust_demo_read_by_python_matches_the_documented_formulas(bus: Bus) -> None:
    episodes, steps = 5, 4
    with snapbus.subscribe("demo.*", bus=bus.name) as sub:
        demo = bus.spawn_cli(
            "demo", "--no-echo", "--rate", "0", "--episodes", str(episodes), "--steps", str(steps)
        )
        got = [sub.get(timeout=30) for _ in range(episodes * (steps + 1))]
        out = demo.wait()
        assert out.returncode == 0, out.stderr
        assert demo_emitted(out.stdout + out.stderr) == len(got)
        with pytest.raises(queue.Empty):
            sub.get_nowait()
        assert sub.delivered == len(got) and sub.lost == 0
    i = 0
    for e in range(episodes):
        for s in range(steps):
            ev = got[i]
            assert (ev.schema.id, ev.schema.version) == ("demo.step", 1)
            check_step(ev.payload, e, s)
            i += 1
        assert got[i].schema.id == "demo.episode_end"
        check_end(got[i].payload, e, steps)
        i += 1
    for k, ev in enumerate(got):
        assert ev.seq == got[0].seq + k
        assert ev.level == 20  # INFO as a logging level
        assert ev.emitter == "demo"
        assert ev.producer.name == "demo" and ev.producer.pid == demo.pid
        assert not ev.producer.relayed  # emitted here, not re-emitted by a bridge
    assert [ev.t_nanos for ev in got] == sorted(ev.t_nanos for ev in got)
    assert got[0].t_nanos > 1_600_000_000 * 10**9


def test_iteration_get_batch_and_start_oldest_read_the_history(bus: Bus) -> None:
    out = bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "2", "--steps", "3")
    emitted = demo_emitted(out.stdout + out.stderr)
    with snapbus.subscribe("demo.step", start="oldest", bus=bus.name) as sub:
        batch = sub.get_batch(max=4, timeout=10)
        assert len(batch) == 4
        rest = []
        for ev in sub:
            rest.append(ev)
            if len(rest) == 2:
                break
        assert [(ev.payload.episode, ev.payload.step) for ev in batch + rest] == [
            (0, 0),
            (0, 1),
            (0, 2),
            (1, 0),
            (1, 1),
            (1, 2),
        ]
        assert sub.get_batch(max=10, timeout=0.05) == []
        assert sub.delivered == 6 and emitted == 8
    assert sub.closed
    assert list(sub) == []
    with pytest.raises(queue.Empty):
        sub.get(timeout=0)


def test_cut_until_end_reads_what_the_rings_hold_then_stops(bus: Bus) -> None:
    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "3", "--steps", "2")
    with snapbus.subscribe(
        "demo.episode_end", start="oldest", cut=True, until_end=True, bus=bus.name
    ) as sub:
        assert [ev.payload.episode for ev in sub] == [0, 1, 2]


def test_loss_is_counted_exactly_under_a_stopped_consumer(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = bus.spawn_py(
        textwrap.dedent(f"""
        import snapbus, sys
        sub = snapbus.subscribe("demo.*")
        print("ready", flush=True)
        steps = 0
        for ev in sub:
            if ev.schema.id == "demo.step":
                steps += 1
            if ev.schema.id == "demo.episode_end" and ev.payload.episode == {LAP_EPISODES - 1}:
                break
        print(sub.delivered, sub.lost, steps, flush=True)
    """)
    )
    assert child.popen.stdout is not None
    assert child.popen.stdout.readline().strip() == "ready"
    emitted = demo_while_stopped(bus, child, monkeypatch)
    assert emitted == LAP_EPISODES * (LAP_STEPS + 1)
    res = child.wait()
    assert res.returncode == 0, res.stderr
    delivered, lost, _ = map(int, res.stdout.split())
    assert lost > 0, f"the ring was not lapped while the consumer was stopped: {res.stdout}"
    assert delivered + lost == emitted


def _blocked_in_futex(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/task/{pid}/wchan").read_text().startswith("futex")
    except OSError:
        return False


def test_ctrl_c_interrupts_a_blocked_get_promptly(bus: Bus) -> None:
    child = bus.spawn_py(
        textwrap.dedent("""
        import snapbus
        sub = snapbus.subscribe("nothing.*")
        print("ready", flush=True)
        try:
            sub.get()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    )
    assert child.popen.stdout is not None
    assert child.popen.stdout.readline().strip() == "ready"
    wait_until("the child to block in get()", lambda: _blocked_in_futex(child.pid))
    t0 = time.monotonic()
    child.signal(signal.SIGINT)
    res = child.wait(timeout_s=10)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    assert "interrupted" in res.stdout
    assert took < 2.0, f"Ctrl-C took {took:.2f} s"


def test_waiting_releases_the_gil(bus: Bus) -> None:
    sub = snapbus.subscribe("nothing.*", bus=bus.name)
    ticks = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            ticks[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        with pytest.raises(queue.Empty):
            sub.get(timeout=0.3)
        before = ticks[0]
        with pytest.raises(queue.Empty):
            sub.get(timeout=0.3)
        assert ticks[0] - before > 10_000
    finally:
        stop.set()
        t.join()
        sub.close()


def test_bad_input_raises_clear_exceptions(bus: Bus) -> None:
    with pytest.raises(ValueError, match="unknown start 'newest'"):
        snapbus.subscribe("demo.*", start="newest", bus=bus.name)
    with pytest.raises(ValueError, match="bad glob"):
        snapbus.subscribe("demo step", bus=bus.name)
    with pytest.raises(TypeError):
        snapbus.subscribe(3, bus=bus.name)  # type: ignore[arg-type]
    with pytest.raises(ConnectionError, match=r"no bus 'not-running' is running.*snapbus up"):
        snapbus.subscribe("demo.*", bus="not-running")
    with snapbus.subscribe(bus=bus.name) as sub:
        with pytest.raises(ValueError, match="timeout"):
            sub.get(timeout=float("nan"))
        with pytest.raises(ValueError, match="timeout"):
            sub.get(timeout=-1)


def test_the_subscription_shows_in_snapbus_ls(bus: Bus) -> None:
    with snapbus.subscribe("demo.*", bus=bus.name, kind="notebook"):
        ls = bus.ls()
        assert "notebook" in str(ls["consumers"])  # type: ignore[index]


def test_close_from_another_thread_ends_a_blocked_iteration(bus: Bus) -> None:
    sub = snapbus.subscribe("nothing.*", bus=bus.name)
    done = threading.Event()
    got: list[snapbus.Event] = []

    def reader() -> None:
        got.extend(sub)
        done.set()

    t = threading.Thread(target=reader)
    t.start()
    try:
        with pytest.raises(RuntimeError, match="another thread"):
            _read_while_busy(sub)
        assert sub.delivered == 0 and not sub.closed
        sub.close()
        assert done.wait(5), "the blocked iteration did not end after close()"
        assert got == [] and sub.closed and sub.ended
    finally:
        sub.close()
        t.join(5)


def _read_while_busy(sub: snapbus.Subscription) -> None:
    """get_nowait() from a second thread while the first waits: a clear error, not a hang."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            sub.get_nowait()
        except queue.Empty:
            time.sleep(0.01)
    raise AssertionError("the reader thread never held the subscription")


def test_start_at_a_datetime_reads_from_the_first_record_at_or_after_it(bus: Bus) -> None:
    import datetime

    bus.cli("demo", "--no-echo", "--rate", "0", "--episodes", "3", "--steps", "3")
    with snapbus.subscribe(
        "demo.step", start="oldest", cut=True, until_end=True, bus=bus.name
    ) as sub:
        evs = list(sub)
    t = evs[4].t_nanos
    # A datetime holds microseconds: start just after the microsecond before record 4.
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    when = epoch + datetime.timedelta(microseconds=t // 1000)
    with snapbus.subscribe("demo.step", start=when, cut=True, until_end=True, bus=bus.name) as sub:
        got = [ev.seq for ev in sub]
    floor = (t // 1000) * 1000
    assert got == [ev.seq for ev in evs if ev.t_nanos >= floor]
    assert evs[4].seq in got and evs[0].seq not in got


def test_a_datetime_start_is_converted_to_nanoseconds_exactly() -> None:
    import datetime

    from snapbus.subscription import _unix_nanos

    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    for us in (1_795_488_423_862_169, 1_795_488_423_000_001, 1):
        when = epoch + datetime.timedelta(microseconds=us)
        assert _unix_nanos(when) == us * 1000
        # A naive datetime is local time.
        assert _unix_nanos(when.astimezone().replace(tzinfo=None)) == us * 1000
