"""Wild servers, round seventeen: a stdio server written by hand (``wild17_server.py``), a
Streamable HTTP one (``wild17_web.py``) and a published MCP Apps server
(``@modelcontextprotocol/server-system-monitor``, launched as its README says), each next to a
well-behaved server that is checked to serve (the honest stdio server, ``wild4_server.py``).

Found:

* an event stream's ``retry`` of 400 digits (a number the event-stream format allows) made the
  SDK raise ``OverflowError`` (it divides the wait by ``1000.0``) outside its handlers: on the
  session's own stream the server never started ("could not be started: OverflowError"); on a
  call's stream the session was lost ("Connection closed") and the run stopped. Now each
  ``retry`` is held to ``0``..``MAX_RETRY_MS`` before the SDK reads it (``_deep``);
* a tool its server declares for its app only (MCP Apps, ``_meta.ui.visibility: ["app"]``: the
  published system-monitor server's ``poll-system-stats``, "App-only") was pinned and offered to
  the model, which the spec has the host prevent; now it is left out, named, and a pin approved
  before never offers it (``_listing.app_only``);
* a server refusing the offered protocol version as the spec's lifecycle shows (``-32602``,
  ``data.supported: ["2024-11-05"]``) never started, though the host speaks that version; now the
  host asks once more at the newest version both speak (``_handshake``), and a refusal naming no
  such version, or a second one, still fails that server only, named.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from published_installs import once
from tether.core.stop import StopReason
from tether.errors import DependencyUnavailable
from tether.mcp._deep import MAX_RETRY_MS, cut_events
from tether.mcp._tasks import MAX_POLL_S, MIN_POLL_S, poll_wait
from tether.mcphost._runner import run_question
from tether_testing.loopback import serving

from .conftest import approve, honest_server, script, write_config
from .wild17_web import app

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2", "X3")]

HERE = Path(__file__).parent
SERVER = HERE / "wild17_server.py"


def w17(name: str = "x", **env: str) -> dict[str, Any]:
    """``wild17_server.py``, unconfined (launched faster), every tool of it a read."""
    effects = {t: "read" for t in ("lookup", "poll", "both", "flat", "odd")}
    return {
        "name": name,
        "command": [sys.executable, str(SERVER)],
        "mode": "legacy",
        "effects": effects,
        "timeout_s": 60,
        "sandbox": "none",
        "env": env,
    }


def _served(run: Any) -> bool:
    seen = run.seen("ok__lookup")
    return bool(seen) and "value-of-c" in seen[-1] and run.result.stop_reason is StopReason.ACCEPTED


@contextmanager
def _web(mode: str) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """``wild17_web.py`` in ``mode`` on 127.0.0.1: its config entry, and the methods it was sent."""
    seen: list[str] = []
    stop = threading.Event()
    with serving(app(mode, seen, stop)) as base:
        entry = {"name": "web", "url": f"{base}/mcp", "mode": "legacy", "effects": {"lookup": "read"}}
        yield {**entry, "timeout_s": 3}, seen


async def _lookup_beside_honest(tmp_path: Path, mode: str) -> tuple[list[str], Any, list[str]]:
    """The web server in ``mode`` beside the honest one, both approved, then one lookup on each:
    what the web server's review pinned, the run, and what the web server was asked."""
    with _web(mode) as (entry, seen):
        config = write_config(tmp_path, [entry, honest_server()])
        pinned, _ = await approve(config, "web")
        await approve(config, "ok")
        steps = script(("web__lookup", {"key": "a"}), ("ok__lookup", {"key": "c"}), "done")
        return pinned, await run_question(config, "Q", steps), seen


async def test_a_retry_of_hundreds_of_digits_on_the_sessions_stream_never_stops_the_server(
    tmp_path: Path,
) -> None:
    """The session's own stream (``GET``) names a ``retry`` of 400 digits and ends: before, the
    SDK's ``OverflowError`` ended the session as it began ("could not be started:
    OverflowError: int too large to convert to float"); now the wait is held to
    ``MAX_RETRY_MS``, the server starts and serves, and so does the honest server."""
    pinned, run, seen = await _lookup_beside_honest(tmp_path, "get_retry")
    assert pinned == ["lookup"]
    assert "value-of-a" in run.seen("web__lookup")[0]
    assert "GET" in seen and _served(run)


async def test_a_retry_of_hundreds_of_digits_on_a_calls_stream_fails_that_call_alone(
    tmp_path: Path,
) -> None:
    """A call's stream sends a notification with an event id and a ``retry`` of 400 digits, then
    ends without the answer: before, the SDK's ``OverflowError`` on resuming lost the session
    ("went away ... Connection closed") and stopped the run; now the resumption waits the held
    ``retry``, the call ends at its own timeout, named, and the same session serves the next
    call, as does the honest server."""
    with _web("call_retry") as (entry, seen):
        config = write_config(tmp_path, [entry, honest_server()])
        await approve(config, "web")
        await approve(config, "ok")
        steps = script(
            ("web__lookup", {"key": "b"}),
            ("web__lookup", {"key": "a"}),
            ("ok__lookup", {"key": "c"}),
            "done",
        )
        run = await run_question(config, "Q", steps)
    calls = run.seen("web__lookup")
    assert "timed out" in calls[0] and "went away" not in calls[0] and "Connection closed" not in calls[0]
    assert len(calls) == 2 and "value-of-a" in calls[1]  # before: the run stopped at the first
    assert sum(m.startswith("initialize") for m in seen) == 2  # the review's and the run's: never renewed
    assert _served(run)


async def test_an_honest_retry_reaches_the_sdk_as_sent_and_only_waits_out_of_bounds_are_held() -> None:
    """Unit level (``cut_events``): an event with ``retry: 3000`` passes byte for byte; a wait of
    400 digits, past ``MAX_RETRY_MS`` or below zero (``int`` reads a sign) is given as the nearest
    bound; one that is no number (the SDK ignores it) passes as it is."""

    async def through(raw: bytes) -> bytes:
        async def chunks() -> Any:
            yield raw

        return b"".join([chunk async for chunk in cut_events(chunks(), 1 << 20)])

    honest = b"id: 1\nretry: 3000\ndata: {}\n\n"
    assert await through(honest) == honest
    assert await through(b"retry: " + b"9" * 400 + b"\r\n\r\n") == b"retry: %d\n\n" % MAX_RETRY_MS
    assert (
        await through(b"retry:%d\ndata: x\n\n" % (MAX_RETRY_MS + 1))
        == b"retry: %d\ndata: x\n\n" % MAX_RETRY_MS
    )
    assert await through(b"retry: -5\n\n") == b"retry: 0\n\n"
    assert await through(b"retry: soon\n\n") == b"retry: soon\n\n"
    assert await through(b"data: retry: 9" + b"9" * 400 + b"\n\n") == b"data: retry: 9" + b"9" * 400 + b"\n\n"


async def test_tools_for_the_servers_app_only_are_never_offered_and_the_others_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``poll`` (``_meta.ui.visibility: ["app"]``) and ``flat`` (the drafts' ``ui/visibility``):
    before, pinned and offered; now skipped at approval, named, and unknown to the model. ``both``
    (the model among its audiences), ``odd`` (a visibility that is no list: the spec's default)
    and ``lookup`` are offered and served. A pin of ``poll`` approved before this check (as a pin
    file kept from an older host holds it) is never offered either."""
    config = write_config(tmp_path, [w17(W17_APP="1"), honest_server()])
    pinned, skipped = await approve(config, "x")
    await approve(config, "ok")
    assert sorted(pinned) == ["both", "lookup", "odd"]
    assert set(skipped) == {"poll", "flat"}
    assert 'for its app only (_meta.ui.visibility ["app"])' in skipped["poll"]
    calls = [(f"x__{t}", {"key": "k"}) for t in ("poll", "flat", "both", "odd", "lookup")]
    run = await run_question(config, "Q", script(*calls, ("ok__lookup", {"key": "c"}), "done"))
    for tool in ("poll", "flat"):
        assert f"unknown tool 'x__{tool}'" in run.seen(f"x__{tool}")[0]
    for tool in ("both", "odd", "lookup"):
        assert f"{tool}-value-of-k" in run.seen(f"x__{tool}")[0]
    assert _served(run)

    import tether.mcp._listing as listing

    old = tmp_path / "old"
    old.mkdir()
    config = write_config(old, [w17(W17_APP="1")])
    with monkeypatch.context() as patch:
        patch.setattr(listing, "app_only", lambda definition: None)  # a host without the check
        pinned, _ = await approve(config, "x")
    assert "poll" in pinned
    run = await run_question(
        config, "Q", script(("x__poll", {"key": "k"}), ("x__both", {"key": "k"}), "done")
    )
    assert "poll-value-of-k" not in run.seen("x__poll")[0]
    assert "both-value-of-k" in run.seen("x__both")[0]
    assert any(b["tool"] == "x__poll" and "app only" in b["why"] for b in run.blocked)


async def test_a_server_refusing_the_offered_version_is_asked_again_at_one_it_names(
    tmp_path: Path,
) -> None:
    """The server speaks only ``2024-11-05`` and refuses the host's offer as the spec shows:
    before, "could not be started: MCPError: Unsupported protocol version"; now asked once more
    at that version, it starts, is reviewed, pinned and called (in both of the host's modes), as
    is the honest server."""
    for mode in ("legacy", "auto"):
        folder = tmp_path / mode
        folder.mkdir()
        log = folder / "asked.log"
        entry = {**w17(W17_SPEAKS="2024-11-05", W17_LOG=str(log)), "mode": mode}
        config = write_config(folder, [entry, honest_server()])
        pinned, _ = await approve(config, "x")
        await approve(config, "ok")
        run = await run_question(
            config, "Q", script(("x__lookup", {"key": "a"}), ("ok__lookup", {"key": "c"}), "done")
        )
        assert pinned == ["lookup"]
        assert "lookup-value-of-a" in run.seen("x__lookup")[0]
        asked = [line for line in log.read_text().splitlines() if line.startswith("initialize")]
        assert asked[:2] == ["initialize 2025-11-25", "initialize 2024-11-05"]
        assert _served(run)


async def test_an_http_server_refusing_the_offered_version_is_asked_again_at_one_it_names(
    tmp_path: Path,
) -> None:
    """The same refusal over Streamable HTTP (answered at 200, as a JSON-RPC error): before, the
    server never started; now its session begins at ``2024-11-05`` and serves."""
    pinned, run, seen = await _lookup_beside_honest(tmp_path, "v2024")
    assert pinned == ["lookup"]
    assert "value-of-a" in run.seen("web__lookup")[0]
    asked = [m for m in seen if m.startswith("initialize")]
    assert asked[:2] == ["initialize 2025-11-25", "initialize 2024-11-05"]
    assert _served(run)


async def test_a_refusal_naming_no_version_the_host_speaks_or_refusing_twice_fails_that_server_only(
    tmp_path: Path,
) -> None:
    """A refusal naming only versions the host does not speak is not asked again; a server naming
    ``2024-11-05`` but refusing it too is asked once more only: each fails to start, named with
    the server's words, and the honest server serves."""
    for speaks, names in (("1999-01-01", "1999-01-01"), ("1999-01-01", "2024-11-05")):
        folder = tmp_path / names
        folder.mkdir()
        log = folder / "asked.log"
        config = write_config(
            folder, [w17(W17_SPEAKS=speaks, W17_NAMES=names, W17_LOG=str(log)), honest_server()]
        )
        with pytest.raises(DependencyUnavailable, match="Unsupported protocol version"):
            await approve(config, "x")
        asked = [line for line in log.read_text().splitlines() if line.startswith("initialize")]
        assert len(asked) == (1 if names == speaks else 2)
        await approve(config, "ok")
        run = await run_question(config, "Q", script(("ok__lookup", {"key": "c"}), "done"))
        assert _served(run)


async def test_a_task_asking_a_poll_interval_of_hundreds_of_digits_is_polled_within_bounds(
    tmp_path: Path,
) -> None:
    """A task-only tool (``task_server.py``) whose task asks to be polled every ``10**400`` ms (an
    integer JSON holds): before, dividing it by 1000 raised ``OverflowError`` and the call failed
    ("server t failed: OverflowError") though the task completed; now the wait is held to
    ``MAX_POLL_S``, the task's own notice of its end is heard, and its result read. One asking
    ``-5`` ms is polled every ``MIN_POLL_S`` and completes, as does the honest server's call."""
    for mode, poll in (("notify", str(10**400)), ("honest", "-5")):
        folder = tmp_path / mode
        (folder / "out").mkdir(parents=True)
        env = {"TASK_MODE": mode, "TASK_POLL": poll, "TASK_LOG": str(folder / "out" / "task.log")}
        server = {
            "name": "t",
            "command": [sys.executable, str(HERE / "task_server.py")],
            "mode": "legacy",
            "effects": {"research": "read"},
            "env": env,
            "sandbox": "none",
            "timeout_s": 60,
        }
        config = write_config(folder, [server, honest_server()])
        await approve(config, "t")
        await approve(config, "ok")
        steps = script(("t__research", {"topic": "x"}), ("ok__lookup", {"key": "c"}), "done")
        run = await run_question(config, "Q", steps)
        (seen,) = run.seen("t__research")
        assert "FINDINGS: all quiet" in seen and "error=" not in seen and "OverflowError" not in seen
        assert _served(run)
    assert poll_wait(10**400) == MAX_POLL_S and poll_wait(-(10**400)) == MIN_POLL_S
    assert poll_wait(None) == 0.5 and poll_wait(1500) == 1.5 and poll_wait(float("nan")) == 0.5


@pytest.fixture(scope="module")
def monitor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The published system-monitor server (an MCP Apps server), installed once per session."""
    folder = once(tmp_path_factory, "npm-monitor") / "node_modules" / "@modelcontextprotocol"
    return folder / "server-system-monitor" / "dist" / "index.js"


async def test_the_published_system_monitor_serves_its_model_tool_and_keeps_its_app_tool(
    tmp_path: Path, monitor: Path
) -> None:
    """``node dist/index.js --stdio`` (its README's form), confined by default: ``get-system-info``
    is pinned, called and labelled untrusted; ``poll-system-stats`` ("App-only", visibility
    ``["app"]``) was offered to the model; now it is skipped at approval, named, and unknown to
    the model."""
    entry = {"name": "mon", "command": "node", "args": [str(monitor), "--stdio"], "timeout_s": 60}
    entry["effects"] = {"get-system-info": "read", "poll-system-stats": "read"}
    config = write_config(tmp_path, [entry])
    pinned, skipped = await approve(config, "mon")
    assert pinned == ["get-system-info"]
    assert "app only" in skipped["poll-system-stats"]
    steps = script(("mon__poll-system-stats", {}), ("mon__get-system-info", {}), "done")
    run = await run_question(config, "Q", steps)
    assert "unknown tool 'mon__poll-system-stats'" in run.seen("mon__poll-system-stats")[0]
    info = run.seen("mon__get-system-info")[0]
    assert 'trust="untrusted"' in info and '"platform"' in info and "error=" not in info
    assert run.result.stop_reason is StopReason.ACCEPTED
