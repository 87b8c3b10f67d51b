"""Protocol features under the host's control: capabilities advertised only when enabled,
multi-select questions and honest declines, progress, separate connect and call timeouts,
server stderr attributed and escaped, and a 2026-07-28 rug pull seen on the listen stream."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.cli import main
from tether.core.stop import StopReason
from tether.mcp._elicitation import Answer, ScriptedResponder
from tether.mcphost._runner import run_question

from .conftest import approve_all, bare_tcp_server, script, stdio_server, web_server, write_config

pytestmark = pytest.mark.anyio


def events(run: Any, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in run.result.events if str(e.kind) == kind]


def observation(run: Any, tool: str) -> Any:
    return next(o for o in run.result.observations if o.tool == tool)


@pytest.mark.spec("X3", "X4", "X5")
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_capabilities_are_advertised_only_when_the_config_enables_them(
    tmp_path: Path, http_url: str, mode: str
) -> None:
    plain = web_server("a", http_url, mode=mode, tools=["caps"], effects={"caps": "read"})
    opted = web_server(
        "b",
        http_url,
        mode=mode,
        tools=["caps"],
        effects={"caps": "read"},
        elicitation={"enabled": True},
        sampling={"enabled": True},
        roots=[tmp_path.as_uri()],
    )
    config = write_config(tmp_path, [plain, opted])
    await approve_all(config)
    run = await run_question(config, "Q", script(("a__caps", {}), ("b__caps", {})))
    assert "capabilities: none" in run.seen("a__caps")[0]
    advertised = run.seen("b__caps")[0]
    assert "elicitation" in advertised and "sampling" in advertised and "roots" in advertised


@pytest.mark.spec("X5")
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_multi_select_question_is_asked_checked_and_answered(
    tmp_path: Path, http_url: str, mode: str
) -> None:
    effects = {"ask_toppings": "read", "lookup": "read"}
    server = web_server("h", http_url, mode=mode, effects=effects, elicitation={"enabled": True})
    config = write_config(tmp_path, [server])
    await approve_all(config)
    person = ScriptedResponder(
        [
            Answer("accept", {"toppings": ["cheese", "olives", "basil"]}),  # more than maxItems 2
            Answer("accept", {"toppings": ["cheese", "ham"]}),  # not a choice
            Answer("accept", {"toppings": ["cheese", "basil"], "size": "l"}),
        ]
    )
    run = await run_question(
        config, "Q", script(("h__ask_toppings", {}), ("h__lookup", {"key": "a"})), responder=person
    )
    answer = run.seen("h__ask_toppings")[0]
    assert "action=accept" in answer and "'toppings': ['cheese', 'basil']" in answer
    assert "'size': 'l'" in answer
    assert len(person.shown) == 3  # two invalid answers asked again, never passed on
    shown = person.shown[0].render()
    assert "toppings: any of ['cheese', 'olives', 'basil'] (minItems 1, maxItems 2)" in shown
    assert "size: string one of ['s', 'l']" in shown
    assert observation(run, "h__ask_toppings").meta["elicitation"] == [{"outcome": "accept", "by": "person"}]
    assert "value-of-a" in run.seen("h__lookup")[0]


@pytest.mark.spec("X5")
def test_a_declined_question_shows_in_the_calls_outcome_on_the_command_line(
    tmp_path: Path, http_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    effects = {"ask_password": "read", "ask_colour": "read"}
    server = web_server("h", http_url, effects=effects, elicitation={"enabled": True})
    config = write_config(tmp_path, [server])
    import anyio

    anyio.run(approve_all, config)
    capsys.readouterr()
    args = ["mcp", "run", "Q", "--config", str(config.base_dir / "mcp.yaml"), "--ask", "never"]
    code = main([*args, "--call", "h__ask_password", "{}", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and out["calls"][0]["status"] == "ok"  # the server answered …
    notes = out["mcp_notes"]  # … but the question it asked was refused by the host, and it says so
    refused = "elicitation in h__ask_password: refused by the host: credential_shaped"
    assert any(n.startswith(refused) for n in notes)
    main([*args, "--call", "h__ask_password", "{}"])
    assert "elicitation in h__ask_password: refused by the host" in capsys.readouterr().out


@pytest.mark.spec("X1")
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_progress_is_traced_shown_and_can_keep_a_long_call_alive(
    tmp_path: Path, http_url: str, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    effects = {"progress": "read"}
    strict = web_server("s", http_url, mode=mode, effects=effects, timeout_s=1.5)
    patient = web_server(
        "p", http_url, mode=mode, effects=effects, timeout_s=1.5, progress_resets_timeout=True, max_call_s=30
    )
    config = write_config(tmp_path, [strict, patient])
    await approve_all(config)
    slow = {"steps": 4, "pause_s": 0.9}  # 3.6 s in all, a progress report every 0.9 s
    run = await run_question(config, "Q", script(("s__progress", slow), ("p__progress", slow), "end"))
    assert "timed out after 1.5s" in run.seen("s__progress")[0]
    assert "done after 4 steps" in run.seen("p__progress")[0]
    reports = [e for e in events(run, "mcp_progress") if e["server"] == "p"]
    assert [(e["progress"], e["total"], e["message"]) for e in reports] == [
        (1, 4, "step 1"), (2, 4, "step 2"), (3, 4, "step 3"), (4, 4, "step 4")
    ]  # fmt: skip
    assert run.result.stop_reason is StopReason.ACCEPTED
    assert "[p] p__progress: progress 2/4 step 2" in capsys.readouterr().err.splitlines()


@pytest.mark.spec("X1")
async def test_a_call_kept_alive_by_progress_that_reaches_its_ceiling_names_the_ceiling(
    tmp_path: Path, http_url: str
) -> None:
    effects = {"progress": "read"}
    capped = web_server(
        "c",
        http_url,
        mode="legacy",
        effects=effects,
        timeout_s=1.0,
        progress_resets_timeout=True,
        max_call_s=2.0,
    )
    config = write_config(tmp_path, [capped])
    await approve_all(config)
    slow = {"steps": 6, "pause_s": 0.6}  # a report every 0.6 s, 3.6 s in all: past the 2 s ceiling
    run = await run_question(config, "Q", script(("c__progress", slow), "end"))
    (seen,) = run.seen("c__progress")
    assert "reached its ceiling of 2s (max_call_s)" in seen and "timed out after 1s" not in seen


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A TCP server that accepts connections and never says anything."""
    with bare_tcp_server(lambda conn: None) as port:
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.mark.spec("X1")
async def test_a_server_that_never_answers_fails_at_the_connect_timeout_not_the_call_timeout(
    tmp_path: Path, silent_url: str, approved_pins: Path
) -> None:
    sleeper = {
        "name": "mute",
        "transport": "stdio",
        "command": [sys.executable, "-c", "import time; time.sleep(60)"],
        "connect_timeout_s": 1,
        "timeout_s": 600,
        "sandbox": "none",
    }
    config = write_config(
        tmp_path,
        [
            sleeper,
            web_server("silent", silent_url, connect_timeout_s=1, timeout_s=600),
            stdio_server("b", tools=["lookup"], effects={"lookup": "read"}),
        ],
        pins_from=approved_pins,
    )
    run = await run_question(config, "Q", script(("b__lookup", {"key": "k"}), "ok"))
    down = run.summary()["unavailable_servers"]
    for name in ("mute", "silent"):
        why = f"MCP server {name} could not be started: no answer within the connect timeout (1s)"
        assert down[name].startswith(why)  # and, for the person, the setting that gives it longer
        assert f"raise connect_timeout_s for server {name} if it is slow to start" in down[name]
    assert "a first `npx -y` or `uvx` run downloads" in down["mute"]  # (a launch command's)
    assert "value-of-k" in run.seen("b__lookup")[0] and run.result.stop_reason is StopReason.ACCEPTED


@pytest.mark.spec("X1")
async def test_server_stderr_is_prefixed_escaped_rate_limited_and_logged(
    tmp_path: Path, approved_pins: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path, [stdio_server("h", tools=["chatty"], effects={"chatty": "read"})], pins_from=approved_pins
    )
    capsys.readouterr()
    run = await run_question(config, "Q", script(("h__chatty", {}), "ok"))
    assert "said a lot" in run.seen("h__chatty")[0]
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line]
    assert "\x1b" not in err and "\r" not in err  # no escape sequence reached the terminal
    assert all(line.startswith("[h] ") for line in lines)
    assert "[h] <U+001B>[2J<U+001B>[31mFAKE PROMPT: approved<U+001B>[0m<U+000D>hidden" in lines
    shown = [line for line in lines if "noise" in line]
    assert 0 < len(shown) < 200 and any("held back" in line for line in lines)
    log = (tmp_path / "tether-output" / "mcp-logs" / "h.stderr.log").read_text(encoding="utf-8")
    assert all(f"noise {i}\n" in log for i in range(200)) and "\x1b" not in log


@pytest.mark.spec("X2")
async def test_a_2026_rug_pull_over_stdio_is_heard_on_the_listen_stream(
    tmp_path: Path, approved_pins: Path
) -> None:
    effects = {"lookup": "read", "fetch_note": "read"}
    server = stdio_server("h", effects=effects, recheck="on_change", env={"HOSTILE_RUGPULL": "1"})
    config = write_config(tmp_path, [server], pins_from=approved_pins)  # h approved (saves a launch)
    run = await run_question(
        config, "Q", script(("h__fetch_note", {}), ("h__lookup", {"key": "a"}), ("h__fetch_note", {}))
    )
    first, second = run.seen("h__fetch_note")
    assert "all good" in first and "capability_blocked" in second
    triggers = [e["trigger"] for e in events(run, "mcp_capability_check")]
    assert triggers == ["listen_opened", "list_changed"]
    assert "value-of-a" in run.seen("h__lookup")[0]
