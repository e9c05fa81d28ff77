"""`snapbus mcp` driven by the official MCP Python client (the `mcp` package) over stdio, against
the demo: the tools listed with output schemas, `ls`, a live `tail` whose values are the demo's
formula, a `summarize` equal to the aggregator's summaries, recording queries, resources and
prompts; and the limits: a result cut at the byte budget continues with its cursor, a write tool
is refused without --allow-write and works with it.

The `mcp` package needs Python >= 3.10: under an older interpreter this module is skipped (the
peer cannot be installed there); from 3.10 on, a missing `mcp` fails the run (`.ci/test`
installs it).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List

import pytest
from conftest import Bus, demo_episode_end_expected, demo_step_expected, echo_oldest, snapbus_bin

if sys.version_info < (3, 10):
    pytest.skip("the mcp package needs Python >= 3.10", allow_module_level=True)

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

Session = Callable[[ClientSession], Awaitable[None]]


def with_server(bus: Bus, args: List[str], body: Session) -> None:
    """Starts `snapbus mcp ARGS` on `bus` as the client's stdio server and runs `body` with an
    initialized session (under the watchdog); the server exits when the client closes."""
    params = StdioServerParameters(command=str(snapbus_bin()), args=["mcp", *args], env=bus.env)

    async def main() -> None:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await body(session)

    asyncio.run(asyncio.wait_for(main(), timeout=120))


async def call(session: ClientSession, tool: str, **args: Any) -> Dict[str, Any]:
    """A tool's structured result; fails the test on a tool error."""
    res = await session.call_tool(tool, args)
    text = " ".join(getattr(c, "text", "") for c in res.content)
    assert not res.is_error, f"{tool}: {text}"
    assert res.structured_content is not None, f"{tool}: no structured content"
    return res.structured_content


def flat(rows: List[List[int]]) -> List[int]:
    return [v for row in rows for v in row]


def test_tools_answer_about_the_demo_live_and_recorded(bus: Bus, tmp_path: Path) -> None:
    bus.cli("demo", "--no-echo", "--episodes", "4", "--steps", "5", "--rate", "0")
    bus.cli("snapshot", "-o", str(tmp_path / "run.mcap"))
    # The aggregator's own summaries of the same records, for `summarize` to equal.
    bus.cli("aggregate", "--schema", "demo.step", "--from", "oldest", "--until-end")
    aggregated = [e["payload"] for e in echo_oldest(bus, 5, "demo.step.summary")]
    # A second demo runs while `tail` waits for what it emits (from latest: live).
    live = bus.spawn_cli("demo", "--no-echo", "--episodes", "400", "--steps", "5", "--rate", "200")

    async def body(s: ClientSession) -> None:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        read_only = {
            "ls", "describe_schema", "tail", "summarize", "list_recordings",
            "query_recording", "episode_reports",
        }  # fmt: skip
        assert read_only | {"snapshot", "attach"} == set(tools)
        for name in read_only:
            assert tools[name].output_schema is not None, name
            assert tools[name].annotations and tools[name].annotations.read_only_hint, name
        ann = tools["snapshot"].annotations
        assert ann is not None and ann.read_only_hint is False

        ls = await call(s, "ls")
        assert any(p["info"]["name"] == "demo" for p in ls["producers"]), ls
        assert {x["id"] for x in ls["schemas"]} >= {"demo.step", "demo.episode_end"}

        described = await call(s, "describe_schema", schema="demo.step")
        assert described["versions"][0]["version"] == 1
        assert set(described["json_schema"]["properties"]) >= {"episode", "reward", "observation"}
        leaves = {f["field"] for f in described["numeric_fields"]}
        assert {"reward", "position.0", "observation.mean"} <= leaves, leaves

        tail = await call(
            s, "tail", schema="demo.step", count=5, timeout_ms=30000, full_arrays=True
        )
        assert len(tail["records"]) == 5, tail
        for r in tail["records"]:
            p = r["payload"]
            want = demo_step_expected(p["episode"], p["step"])
            assert p["reward"] == want["reward"] and p["position"] == want["position"]
            assert p["observation"]["data"] == flat(want["observation"])  # type: ignore[arg-type]
            assert r["producer"]["pid"] == live.pid

        summary = await call(s, "summarize", schema="demo.step")
        first_run = [
            x for x in summary["summaries"] if x["producer_pid"] == aggregated[0]["producer_pid"]
        ]
        assert first_run == aggregated

        path = str(tmp_path / "run.mcap")
        good = await call(
            s, "query_recording", path=path, schema="demo.episode_end",
            where=[{"field": "mean_reward", "op": ">", "value": 0}],
        )  # fmt: skip
        want_good = [
            e
            for e in range(4)
            if demo_episode_end_expected(e, 5)["mean_reward"] > 0  # type: ignore[operator]
        ]
        assert [r["payload"]["episode"] for r in good["records"]] == want_good
        last = await call(
            s, "query_recording", path=path, schema="demo.step", episodes=[1, 2],
            per_episode="last", fields=["reward", "step"], stats=["reward"],
        )  # fmt: skip
        assert [(r["step"], r["reward"]) for r in last["records"]] == [
            (4, demo_step_expected(e, 4)["reward"]) for e in (1, 2)
        ]
        rewards = [demo_step_expected(e, st)["reward"] for e in (1, 2) for st in range(5)]
        assert last["matched"] == 10 and last["stats"]["reward"]["count"] == 10
        assert last["stats"]["reward"]["max"] == max(rewards)  # type: ignore[type-var]

        recordings = await call(s, "list_recordings")
        assert [Path(r["path"]).name for r in recordings["recordings"]] == ["run.mcap"]
        resources = [str(r.uri) for r in (await s.list_resources()).resources]
        assert f"file://{path}" in resources and "snapbus://schema/demo.step" in resources
        read = await s.read_resource(f"file://{path}")  # type: ignore[arg-type]
        inspected = json.loads(read.contents[0].text)
        assert {x["id"] for x in inspected["schemas"]} >= {"demo.step", "demo.episode_end"}
        prompts = {p.name for p in (await s.list_prompts()).prompts}
        assert prompts == {"summarise_last_run", "compare_runs"}

    with_server(bus, ["--recordings", str(tmp_path)], body)


def test_a_cut_result_continues_and_write_tools_need_allow_write(bus: Bus, tmp_path: Path) -> None:
    bus.cli("demo", "--no-echo", "--episodes", "4", "--steps", "5", "--rate", "0")
    bus.cli("snapshot", "-o", str(tmp_path / "run.mcap"))
    path = str(tmp_path / "run.mcap")

    async def read_only(s: ClientSession) -> None:
        rows: List[Dict[str, Any]] = []
        cursor = None
        pages = 0
        while True:
            args: Dict[str, Any] = {"path": path, "schema": "demo.step", "full_arrays": True}
            if cursor:
                args["cursor"] = cursor
            page = await call(s, "query_recording", **args)
            size = len(json.dumps(page["records"], separators=(",", ":")))
            assert size <= 2048 or len(page["records"]) == 1
            rows += page["records"]
            pages += 1
            cursor = page.get("next_cursor")
            if not cursor:
                break
        assert pages > 1, "the budget cut the result"
        assert [(r["payload"]["episode"], r["payload"]["step"]) for r in rows] == [
            (e, st) for e in range(4) for st in range(5)
        ]
        refused = await s.call_tool("snapshot", {"path": "x.mcap"})
        assert refused.is_error
        assert "--allow-write" in getattr(refused.content[0], "text", "")
        assert not (tmp_path / "x.mcap").exists()
        missing = await s.call_tool(
            "query_recording", {"path": str(tmp_path / "none.mcap"), "schema": "*"}
        )
        assert missing.is_error and "no such recording" in getattr(missing.content[0], "text", "")

    with_server(bus, ["--recordings", str(tmp_path), "--max-result-bytes", "2048"], read_only)

    async def writer(s: ClientSession) -> None:
        out = await call(s, "snapshot", path="x.mcap")
        assert out["command"][:2] == ["snapbus", "snapshot"]
        assert (tmp_path / "x.mcap").stat().st_size > 0

    with_server(bus, ["--recordings", str(tmp_path), "--allow-write"], writer)


def test_over_http_every_request_needs_the_token(bus: Bus) -> None:
    from mcp.client.streamable_http import streamable_http_client

    server = bus.spawn_cli("mcp", "--http", "127.0.0.1:0")
    assert server.popen.stdout is not None
    url = server.popen.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:") and "/mcp?token=" in url, url
    base = url.split("?")[0]
    # Without the token: 401, before any MCP handling.
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        base, data=b"{}", method="POST", headers={"content-type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=30)
    assert refused.value.code == 401

    async def main() -> None:
        async with streamable_http_client(url) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                ls = await call(session, "ls")
                assert ls["bus"] == bus.name

    asyncio.run(asyncio.wait_for(main(), timeout=60))
