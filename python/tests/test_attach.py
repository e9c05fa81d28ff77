"""`snapbus attach python -- module:Class`: a Python consumer class run by the broker like the
built-in consumers (issue 17, item 7): it receives a demo's records, `snapbus ls` shows it as a
supervised consumer, and `snapbus detach` stops it. (The CLI's side, with a stand-in
interpreter, is tested in cli/tests/python.rs.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import WATCHDOG_S, Bus, snapbus_bin, wait_until

# A consumer class in a module of the test's own directory: the broker starts it there (the
# consumer runs in the caller's working directory), and it writes what it receives into it.
CONSUMER = textwrap.dedent(
    """
    from __future__ import annotations

    import os
    import snapbus


    class Tally(snapbus.Consumer):
        kind = "python-tally"

        def __init__(self) -> None:
            super().__init__()
            self.out = open("received.txt", "a")
            self.out.write("started %d restart %s\\n" % (os.getpid(),
                                                          os.environ.get("SNAPBUS_RESTART")))
            self.out.flush()

        def on_event(self, ev):
            p = ev.payload
            get = p.get if isinstance(p, dict) else (lambda k: getattr(p, k))
            self.out.write("%s %s %s\\n" % (ev.schema.id, get("episode"), ev.producer.name))

        def flush(self) -> None:
            self.out.flush()
    """
)


def attach(
    bus: Bus,
    cwd: Path,
    *args: str,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    full = bus.env
    full.update(env or {})
    return subprocess.run(
        [str(snapbus_bin()), "attach", "python", *args],
        env=full,
        cwd=str(cwd),
        capture_output=True,
        text=True,
        timeout=WATCHDOG_S,
    )


def consumer(bus: Bus, cid: int) -> dict[str, object] | None:
    for c in bus.ls()["consumers"]:  # type: ignore[union-attr]
        if c["id"] == cid:
            return c  # type: ignore[no-any-return]
    return None


def received(cwd: Path) -> list[str]:
    path = cwd / "received.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_a_python_consumer_class_runs_under_the_broker(bus: Bus, tmp_path: Path) -> None:
    (tmp_path / "tally_consumer.py").write_text(CONSUMER)
    # The package as this interpreter imports it (the test venv's, or PYTHONPATH's).
    out = attach(
        bus,
        tmp_path,
        "--python",
        sys.executable,
        "--",
        "tally_consumer:Tally",
        "--glob",
        "demo.*",
        "--start",
        "oldest",
    )
    assert out.returncode == 0, out.stderr
    cid = int(out.stdout.strip())
    assert "python" in out.stderr and f"snapbus detach {cid}" in out.stderr, out.stderr

    c = consumer(bus, cid)
    assert c is not None and c["supervised"] is True, c
    assert str(c["status"]).startswith("running"), c
    pid = int(c["info"]["pid"])  # type: ignore[index]
    # The process the broker started is the Python consumer itself.
    assert any(line.startswith(f"started {pid} restart 0") for line in received(tmp_path))

    demo = bus.spawn_cli("demo", "--no-echo", "--episodes", "2", "--steps", "3", "--rate", "0")
    assert demo.wait().returncode == 0
    # Every record of the demo: 2 x 3 steps, 2 episode ends.
    want = [
        "demo.step 0",
        "demo.step 0",
        "demo.step 0",
        "demo.episode_end 0",
        "demo.step 1",
        "demo.step 1",
        "demo.step 1",
        "demo.episode_end 1",
    ]
    wait_until(
        "the consumer received the demo",
        lambda: len([x for x in received(tmp_path) if x.startswith("demo.")]) >= len(want),
    )
    got = [" ".join(x.split()[:2]) for x in received(tmp_path) if x.startswith("demo.")]
    assert got == want, received(tmp_path)

    # detach stops it (it flushes first), and it stays in ls as ended.
    out = subprocess.run(
        [str(snapbus_bin()), "detach", str(cid)],
        env=bus.env,
        capture_output=True,
        text=True,
        timeout=WATCHDOG_S,
    )
    assert out.returncode == 0, out.stderr
    wait_until(
        "the consumer exited",
        lambda: (
            not os.path.exists(f"/proc/{pid}")
            or Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
        ),
    )
    c = consumer(bus, cid)
    assert c is not None and not str(c["status"]).startswith("running"), c


def test_a_missing_consumer_module_fails_the_attach_with_nothing_started(
    bus: Bus, tmp_path: Path
) -> None:
    out = attach(bus, tmp_path, "--python", sys.executable, "--", "no_such_module:Cls")
    assert out.returncode == 1, out.stderr
    assert "no module named 'no_such_module'" in out.stderr, out.stderr
    out = attach(bus, tmp_path, "--python", str(tmp_path / "python9"), "--", "m:C")
    assert out.returncode == 1, out.stderr
    assert "no Python interpreter" in out.stderr, out.stderr
    assert bus.ls()["consumers"] == []
